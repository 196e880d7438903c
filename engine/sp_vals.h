/*
 * sp_vals: the value store. Lua values the engine holds (states, steps,
 * observations, the agent adapter's functions) live in one Lua table,
 * sched.vals, under an integer slot; C keeps a reference count per slot.
 * Taking, sharing and dropping a value is integer work in C, so the window
 * never needs the Lua state while it reacts to a job. A slot whose count
 * reaches zero is cleared from the loop (sp_vals_sweep) before reuse.
 */
#ifndef SP_VALS_H
#define SP_VALS_H
#include <lua.h>
#include "sp_ctx.h"

#define SP_NOVAL 0          /* "no value": slots start at 1 */

/* The value store's bookkeeping (ctx->vals), made by sp_vals_init. */
typedef struct sp_vals {
  int ref;                 /* registry ref of the value-store table (sched.vals), set by the host */
  int *rc;                 /* slot -> reference count */
  int caprc;               /* entries allocated in rc */
  int top;                 /* highest slot handed out */
  int *free;               /* cleared slots ready for reuse */
  int nfree, capfree;      /* used / allocated */
  int *dead;               /* released slots not yet cleared in Lua */
  int ndead, capdead;      /* used / allocated */
  int live;                /* slots with references */
} sp_vals;

/* Make ctx->vals and register its release (sp_engine_init). 0 ok, -1 out of memory. */
int sp_vals_init(sp_ctx *ctx);

void sp_vals_dead(sp_ctx *ctx, int slot);    /* a slot's count reached zero */

/* Inline: the window takes and drops several values per hop. */
static inline void sp_vals_retain(sp_ctx *ctx, int slot) {
  sp_vals *v = ctx->vals;
  if (slot > 0 && slot <= v->top) v->rc[slot]++;
}

static inline void sp_vals_release(sp_ctx *ctx, int slot) {
  sp_vals *v = ctx->vals;
  if (slot <= 0 || slot > v->top || v->rc[slot] <= 0) return;
  if (--v->rc[slot] > 0) return;
  v->live--;
  if (v->ndead < v->capdead) v->dead[v->ndead++] = slot;
  else sp_vals_dead(ctx, slot);
}
/* Another reference to slot, for a holder that keeps it: returns slot. */
static inline int sp_vals_ref(sp_ctx *ctx, int slot) {
  sp_vals_retain(ctx, slot);
  return slot;
}

/* Loop context only (they use the Lua state). */
void sp_vals_sweep(sp_ctx *ctx);                        /* clear released slots for reuse */
/* Hand up to max released slots to a caller that clears them in Lua right
   away (the Lua dispatcher); they are free for reuse from here on. */
int sp_vals_take_dead(sp_ctx *ctx, int *out, int max);

#endif
