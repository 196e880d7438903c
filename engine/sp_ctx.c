#include "sp_ctx.h"
#include <stdio.h>
#include <string.h>

#ifndef SPECULA_VERSION
#define SPECULA_VERSION "0.0.0"
#endif

const char *sp_version(void) { return SPECULA_VERSION; }

void sp_ctx_set_exit(sp_ctx *ctx, int code) {
  if (ctx) ctx->exit_code = code;
}

int sp_ctx_init(sp_ctx *ctx) {
  memset(ctx, 0, sizeof *ctx);
  if (uv_loop_init(&ctx->loop) != 0) return -1;
  ctx->loop.data = ctx;
  sp_timers_init(&ctx->timers, &ctx->loop, NULL, NULL);
  return 0;
}

void sp_ctx_own(sp_ctx *ctx, int slot, const sp_owner *o) {
  if (slot >= 0 && slot < SP_OWNERS) ctx->owners[slot] = o;
}

/* Which step of the owners' shutdown: the offset of its function. */
typedef enum { STEP_CANCEL, STEP_CLOSE, STEP_REAPED, STEP_RELEASE } step;

static void run_step(sp_ctx *ctx, step s) {
  for (int i = 0; i < SP_OWNERS; i++) {
    const sp_owner *o = ctx->owners[i];
    if (!o) continue;
    void (*fn)(sp_ctx *) = s == STEP_CANCEL ? o->cancel : s == STEP_CLOSE ? o->close
                         : s == STEP_REAPED ? o->reaped : o->release;
    if (fn) fn(ctx);
  }
}

static void close_any(uv_handle_t *h, void *arg) {
  if (!uv_is_closing(h)) {
    (*(int *)arg)++;
    uv_close(h, NULL);
  }
}

int sp_ctx_shutdown(sp_ctx *ctx) {
  ctx->stopping = 1; /* queued resumes are dropped from here on */
  run_step(ctx, STEP_CANCEL);  /* windows, then the tasks their jobs run in */
  if (ctx->L) {
    /* Finalizers free what Lua still owns (requests, parsers, tasks). */
    lua_close(ctx->L);
    ctx->L = NULL;
  }
  run_step(ctx, STEP_CLOSE);   /* children are killed and reaped by the uv_run below */
  sp_timers_close(&ctx->timers);
  uv_run(&ctx->loop, UV_RUN_DEFAULT);
  /* the children are reaped: signals may take their default action again */
  run_step(ctx, STEP_REAPED);
  uv_run(&ctx->loop, UV_RUN_DEFAULT);
  int stray = 0;
  uv_walk(&ctx->loop, close_any, &stray);
  if (stray) {
    fprintf(stderr, "specula: warning: %d handle(s) were still open at exit\n", stray);
    uv_run(&ctx->loop, UV_RUN_DEFAULT);
  }
  run_step(ctx, STEP_RELEASE);
  int rc = uv_loop_close(&ctx->loop);
  if (rc != 0) fprintf(stderr, "specula: uv_loop_close: %s\n", uv_strerror(rc));
  return rc;
}
