#include "sp_engine.h"
#include "sp_sched.h"
#include "sp_vals.h"
#include "sp_http.h"

int sp_engine_init(sp_ctx *ctx) {
  if (sp_ctx_init(ctx) != 0) return -1;
  if (sp_sched_init(ctx) != 0 || sp_vals_init(ctx) != 0) {
    sp_ctx_shutdown(ctx);   /* what was made is freed, the loop closed */
    return -1;
  }
  return 0;
}

typedef struct walk_arg { sp_ctx *ctx; int n; } walk_arg;

/* Active handles other than the scheduler's own idle and prepare. */
static void count_handle(uv_handle_t *h, void *arg) {
  walk_arg *w = arg;
  sp_sched *s = w->ctx->sched;
  if (s && (h == (uv_handle_t *)&s->ready_idle || h == (uv_handle_t *)&s->reap_prep)) return;
  if (!uv_is_closing(h) && uv_is_active(h)) w->n++;
}

void sp_ctx_counts(sp_ctx *ctx, sp_counts *out) {
  *out = ctx->counts;
  out->values = ctx->vals ? ctx->vals->live : 0;
  out->http_lanes = ctx->http ? ctx->http->nlanes : 0;
  walk_arg w = { ctx, 0 };
  uv_walk(&ctx->loop, count_handle, &w);
  out->handles = w.n;
}
