#include "sp_signal.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

/* A signal while a run is armed: remember it and stop the run, so it stops
   waiting and writes what finished. A second signal, or any signal outside
   a run (a plain program, or the shutdown waiting for a child's grace
   period), ends the process the ordinary way (the default action), once
   its children are killed and reaped: left alone they would outlive it, or
   stay as zombies where nothing reaps orphans. */
static void on_signal(uv_signal_t *h, int signum) {
  sp_ctx *ctx = h->data;
  sp_signals *s = ctx->signals;
  if (s->caught || !s->run || ctx->stopping) {
    uv_signal_stop(&s->sig_int);
    uv_signal_stop(&s->sig_term);
    if (s->die) s->die(ctx);
    signal(signum, SIG_DFL);
    raise(signum);
    return;
  }
  s->caught = signum;
  fprintf(stderr, "\nspecula: %s: stopping and writing what finished (send it again to quit at once)\n",
          signum == SIGINT ? "interrupted" : "terminated");
  if (s->stop) s->stop(ctx);
}

/* Shutdown, once the children are reaped: stop watching. */
static void signals_reaped(sp_ctx *ctx) {
  sp_signals *s = ctx->signals;
  if (!s->armed) return;
  uv_close((uv_handle_t *)&s->sig_int, NULL);
  uv_close((uv_handle_t *)&s->sig_term, NULL);
  s->armed = 0;
  s->run = 0;
}

static void signals_release(sp_ctx *ctx) {
  free(ctx->signals);
  ctx->signals = NULL;
}

static const sp_owner signals_owner = { NULL, NULL, signals_reaped, signals_release };

static sp_signals *arm(sp_ctx *ctx) {
  sp_signals *s = ctx->signals;
  if (s) return s;
  if (!(s = calloc(1, sizeof *s))) return NULL;
  ctx->signals = s;
  sp_ctx_own(ctx, SP_OWN_SIGNALS, &signals_owner);
  uv_signal_init(&ctx->loop, &s->sig_int);
  uv_signal_init(&ctx->loop, &s->sig_term);
  s->sig_int.data = s->sig_term.data = ctx;
  uv_signal_start(&s->sig_int, on_signal, SIGINT);
  uv_signal_start(&s->sig_term, on_signal, SIGTERM);
  /* watching for signals is no reason to keep the loop alive */
  uv_unref((uv_handle_t *)&s->sig_int);
  uv_unref((uv_handle_t *)&s->sig_term);
  s->armed = 1;
  return s;
}

int sp_signals_watch(sp_ctx *ctx, sp_signal_fn die) {
  sp_signals *s = arm(ctx);
  if (!s) return -1;
  if (die) s->die = die;
  return 0;
}

int sp_signals_trap(sp_ctx *ctx, sp_signal_fn stop) {
  sp_signals *s = arm(ctx);
  if (!s) return -1;
  s->stop = stop;
  s->run = 1;
  return 0;
}

void sp_signals_untrap(sp_ctx *ctx) {
  if (ctx->signals) ctx->signals->run = 0;
}

int sp_signals_caught(const sp_ctx *ctx) { return ctx->signals ? ctx->signals->caught : 0; }
