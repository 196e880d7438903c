#include "sp_ctx.h"
#include "sp_http.h"
#include "sp_proc.h"
#include "sp_sched.h"
#include "sp_vals.h"
#include "sp_window.h"
#include <lauxlib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SPECULA_VERSION
#define SPECULA_VERSION "0.0.0"
#endif

const char *sp_version(void) { return SPECULA_VERSION; }

void sp_ctx_set_main(sp_ctx *ctx, sp_task *t) {
  if (!ctx || !t || ctx->main_task) return;
  t->refs++;
  ctx->main_task = t;
}

void sp_ctx_set_exit(sp_ctx *ctx, int code) {
  if (ctx) ctx->exit_code = code;
}

/* A deadline armed on the virtual clock: the scheduler advances virtual
   time, so it must keep the loop turning. */
static void wake_loop(void *ctx) { sp_sched_poke(ctx); }

int sp_ctx_init(sp_ctx *ctx) {
  memset(ctx, 0, sizeof *ctx);
  if (uv_loop_init(&ctx->loop) != 0) return -1;
  ctx->loop.data = ctx;
  sp_timers_init(&ctx->timers, &ctx->loop, wake_loop, ctx);
  ctx->co_table_ref = LUA_NOREF;
  ctx->worker_body_ref = LUA_NOREF;
  ctx->vals_ref = LUA_NOREF;
  ctx->disp_ref = LUA_NOREF;
  sp_sched_init(ctx);
  return 0;
}

typedef struct walk_arg { sp_ctx *ctx; int n; } walk_arg;

/* Active handles other than the scheduler's own idle and prepare. */
static void count_handle(uv_handle_t *h, void *arg) {
  walk_arg *w = arg;
  if (h == (uv_handle_t *)&w->ctx->ready_idle || h == (uv_handle_t *)&w->ctx->reap_prep) return;
  if (!uv_is_closing(h) && uv_is_active(h)) w->n++;
}

void sp_ctx_counts(sp_ctx *ctx, sp_counts *out) {
  *out = ctx->counts;
  out->values = ctx->vals.live;
  walk_arg w = { ctx, 0 };
  uv_walk(&ctx->loop, count_handle, &w);
  out->handles = w.n;
}

static void close_any(uv_handle_t *h, void *arg) {
  if (!uv_is_closing(h)) {
    (*(int *)arg)++;
    uv_close(h, NULL);
  }
}

/* A signal while a run is armed: remember it and cancel every window, so the
   run stops waiting and writes what finished. A second signal, or any
   signal outside a run (a plain program, or the shutdown waiting for a
   child's grace period), ends the process the ordinary way (the default
   action), once its children are killed and reaped: left alone they would
   outlive it, or stay as zombies where nothing reaps orphans. */
static void on_signal(uv_signal_t *h, int signum) {
  sp_ctx *ctx = h->data;
  if (ctx->sig_caught || !ctx->sig_run || ctx->stopping) {
    uv_signal_stop(&ctx->sig_int);
    uv_signal_stop(&ctx->sig_term);
    sp_proc_reap_now(ctx);
    signal(signum, SIG_DFL);
    raise(signum);
    return;
  }
  ctx->sig_caught = signum;
  fprintf(stderr, "\nspecula: %s: stopping and writing what finished (send it again to quit at once)\n",
          signum == SIGINT ? "interrupted" : "terminated");
  sp_window_cancel_all(ctx);
}

void sp_ctx_watch_signals(sp_ctx *ctx) {
  if (ctx->sig_armed) return;
  uv_signal_init(&ctx->loop, &ctx->sig_int);
  uv_signal_init(&ctx->loop, &ctx->sig_term);
  ctx->sig_int.data = ctx->sig_term.data = ctx;
  uv_signal_start(&ctx->sig_int, on_signal, SIGINT);
  uv_signal_start(&ctx->sig_term, on_signal, SIGTERM);
  /* watching for signals is no reason to keep the loop alive */
  uv_unref((uv_handle_t *)&ctx->sig_int);
  uv_unref((uv_handle_t *)&ctx->sig_term);
  ctx->sig_armed = 1;
}

void sp_ctx_close_signals(sp_ctx *ctx) {
  if (!ctx->sig_armed) return;
  uv_close((uv_handle_t *)&ctx->sig_int, NULL);
  uv_close((uv_handle_t *)&ctx->sig_term, NULL);
  ctx->sig_armed = 0;
  ctx->sig_run = 0;
}

int sp_ctx_shutdown(sp_ctx *ctx) {
  ctx->stopping = 1; /* queued resumes are dropped from here on */
  sp_window_cancel_all(ctx); /* before the tasks: windows point at their jobs */
  sp_sched_cancel_all(ctx);
  if (ctx->main_task) {
    sp_task_release(ctx->main_task);
    ctx->main_task = NULL;
  }
  if (ctx->L) {
    /* Finalizers free what Lua still owns (requests, parsers, tasks). */
    lua_close(ctx->L);
    ctx->L = NULL;
  }
  sp_sched_reap(ctx);
  sp_proc_shutdown(ctx);   /* children are killed and reaped by the uv_run below */
  if (ctx->http) {
    sp_http_free_all(ctx->http);
    ctx->http = NULL;
  }
  sp_timers_close(&ctx->timers);
  uv_idle_stop(&ctx->ready_idle);
  uv_close((uv_handle_t *)&ctx->ready_idle, NULL);
  uv_close((uv_handle_t *)&ctx->reap_prep, NULL);
  uv_run(&ctx->loop, UV_RUN_DEFAULT);
  /* the children are reaped: signals may take their default action again */
  sp_ctx_close_signals(ctx);
  uv_run(&ctx->loop, UV_RUN_DEFAULT);
  int stray = 0;
  uv_walk(&ctx->loop, close_any, &stray);
  if (stray) {
    fprintf(stderr, "specula: warning: %d handle(s) were still open at exit\n", stray);
    uv_run(&ctx->loop, UV_RUN_DEFAULT);
  }
  free(ctx->free_ids);
  ctx->free_ids = NULL;
  free(ctx->pool);
  free(ctx->pool_refs);
  sp_vals_free(ctx);
  sp_window_pool_free(ctx);
  while (ctx->task_pool) {
    sp_task *t = ctx->task_pool;
    ctx->task_pool = t->reap_next;
    free(t);
  }
  ctx->ntask_pool = 0;
  ctx->pool = NULL;
  ctx->pool_refs = NULL;
  ctx->npool = 0;
  int rc = uv_loop_close(&ctx->loop);
  if (rc != 0) fprintf(stderr, "specula: uv_loop_close: %s\n", uv_strerror(rc));
  return rc;
}
