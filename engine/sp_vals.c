#include "sp_vals.h"
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

/* Grow an int array to hold at least `need` entries (doubling). */
static int grow(int **a, int *cap, int need, int zero) {
  if (need <= *cap) return 0;
  int n = *cap ? *cap : 1024;
  while (n < need) n *= 2;
  int *p = realloc(*a, (size_t)n * sizeof *p);
  if (!p) return -1;
  if (zero) memset(p + *cap, 0, (size_t)(n - *cap) * sizeof *p);
  *a = p;
  *cap = n;
  return 0;
}

int sp_vals_new(sp_ctx *ctx) {
  sp_vals *v = ctx->vals;
  int slot;
  if (v->nfree > 0) {
    slot = v->free[--v->nfree];
  } else {
    if (grow(&v->rc, &v->caprc, v->top + 2, 1) != 0) return SP_NOVAL;
    slot = ++v->top;
  }
  v->rc[slot] = 1;
  v->live++;
  return slot;
}

/* The release list is full: grow it (out of line; rare). */
void sp_vals_dead(sp_ctx *ctx, int slot) {
  sp_vals *v = ctx->vals;
  if (grow(&v->dead, &v->capdead, v->ndead + 1, 0) != 0) return; /* the slot is never reused */
  v->dead[v->ndead++] = slot;
}

void sp_vals_sweep(sp_ctx *ctx) {
  sp_vals *v = ctx->vals;
  lua_State *L = ctx->L;
  if (v->ndead == 0 || !L || v->ref == LUA_NOREF) return;
  if (grow(&v->free, &v->capfree, v->nfree + v->ndead, 0) != 0) return;
  lua_rawgeti(L, LUA_REGISTRYINDEX, v->ref);
  for (int i = 0; i < v->ndead; i++) {
    lua_pushnil(L);
    lua_rawseti(L, -2, v->dead[i]);
    v->free[v->nfree++] = v->dead[i];
  }
  lua_pop(L, 1);
  v->ndead = 0;
}

int sp_vals_take_dead(sp_ctx *ctx, int *out, int max) {
  sp_vals *v = ctx->vals;
  int n = v->ndead < max ? v->ndead : max;
  if (n <= 0 || !out || grow(&v->free, &v->capfree, v->nfree + n, 0) != 0) return 0;
  v->ndead -= n;
  for (int i = 0; i < n; i++) {
    int slot = v->dead[v->ndead + i];
    out[i] = slot;
    v->free[v->nfree++] = slot;
  }
  return n;
}

/* Shutdown, last step: drop the bookkeeping. */
static void vals_release(sp_ctx *ctx) {
  sp_vals *v = ctx->vals;
  free(v->rc);
  free(v->free);
  free(v->dead);
  free(v);
  ctx->vals = NULL;
}

static const sp_owner vals_owner = { NULL, NULL, NULL, vals_release };

int sp_vals_init(sp_ctx *ctx) {
  sp_vals *v = calloc(1, sizeof *v);
  if (!v) return -1;
  v->ref = LUA_NOREF;
  ctx->vals = v;
  sp_ctx_own(ctx, SP_OWN_VALS, &vals_owner);
  return 0;
}

void sp_vals_unref(sp_ctx *ctx, int slot) {
  if (ctx && ctx->vals) sp_vals_release(ctx, slot);
}
