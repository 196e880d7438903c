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

void sp_vals_dead(sp_ctx *ctx, int slot);    /* a slot's count reached zero */

/* Inline: the window takes and drops several values per hop. */
static inline void sp_vals_retain(sp_ctx *ctx, int slot) {
  if (slot > 0 && slot <= ctx->vals.top) ctx->vals.rc[slot]++;
}

static inline void sp_vals_release(sp_ctx *ctx, int slot) {
  sp_vals *v = &ctx->vals;
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
void sp_vals_free(sp_ctx *ctx);                         /* shutdown: drop the bookkeeping */

#endif
