#include "sp_timer.h"
#include "sp_ctx.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

void sp_timers_init(sp_timers *t) {
  memset(t, 0, sizeof *t);
  t->fd = -1;
}

static void swap(sp_timers *t, int a, int b) {
  sp_deadline *x = t->heap[a];
  t->heap[a] = t->heap[b];
  t->heap[b] = x;
  t->heap[a]->idx = a;
  t->heap[b]->idx = b;
}

static void up(sp_timers *t, int i) {
  while (i > 0) {
    int p = (i - 1) / 2;
    if (t->heap[p]->due <= t->heap[i]->due) break;
    swap(t, p, i);
    i = p;
  }
}

static void down(sp_timers *t, int i) {
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < t->n && t->heap[l]->due < t->heap[m]->due) m = l;
    if (r < t->n && t->heap[r]->due < t->heap[m]->due) m = r;
    if (m == i) break;
    swap(t, i, m);
    i = m;
  }
}

static void on_timerfd(uv_poll_t *h, int status, int events);

/* Point the timerfd at the earliest deadline (or disarm it). */
static void rearm(sp_ctx *ctx) {
  sp_timers *t = &ctx->timers;
  uint64_t due = t->n ? t->heap[0]->due : 0;
  if (due == t->armed) return;
  struct itimerspec its;
  memset(&its, 0, sizeof its);
  if (due) {
    if (due == 0) due = 1;
    its.it_value.tv_sec = (time_t)(due / 1000000000ull);
    its.it_value.tv_nsec = (long)(due % 1000000000ull);
  }
  timerfd_settime(t->fd, TFD_TIMER_ABSTIME, &its, NULL);
  t->armed = due;
  /* An armed timer keeps the loop alive; an idle one must not. */
  if (due && !uv_is_active((uv_handle_t *)&t->poll)) uv_poll_start(&t->poll, UV_READABLE, on_timerfd);
  else if (!due && uv_is_active((uv_handle_t *)&t->poll)) uv_poll_stop(&t->poll);
}

static void on_timerfd(uv_poll_t *h, int status, int events) {
  sp_ctx *ctx = h->loop->data;
  sp_timers *t = &ctx->timers;
  uint64_t expirations;
  while (read(t->fd, &expirations, sizeof expirations) > 0) {
  }
  t->armed = 0;
  uint64_t now = uv_hrtime();
  while (t->n && t->heap[0]->due <= now) {
    sp_deadline *d = t->heap[0];
    sp_timers_remove(ctx, d);
    d->fire(d);
  }
  rearm(ctx);
}

static int ensure(sp_ctx *ctx) {
  sp_timers *t = &ctx->timers;
  if (t->fd >= 0) return 0;
  t->fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (t->fd < 0) return -1;
  if (uv_poll_init(&ctx->loop, &t->poll, t->fd) != 0) {
    close(t->fd);
    t->fd = -1;
    return -1;
  }
  t->polling = 1;
  return 0;
}

int sp_timers_add(sp_ctx *ctx, sp_deadline *d, uint64_t due) {
  sp_timers *t = &ctx->timers;
  if (ensure(ctx) != 0) return -1;
  if (t->n == t->cap) {
    int cap = t->cap ? t->cap * 2 : 64;
    sp_deadline **p = realloc(t->heap, (size_t)cap * sizeof *p);
    if (!p) return -1;
    t->heap = p;
    t->cap = cap;
  }
  d->due = due ? due : 1;
  d->idx = t->n;
  t->heap[t->n++] = d;
  up(t, d->idx);
  rearm(ctx);
  return 0;
}

void sp_timers_remove(sp_ctx *ctx, sp_deadline *d) {
  sp_timers *t = &ctx->timers;
  int i = d->idx;
  if (i < 0 || i >= t->n || t->heap[i] != d) return;
  d->idx = -1;
  t->n--;
  if (i != t->n) {
    t->heap[i] = t->heap[t->n];
    t->heap[i]->idx = i;
    up(t, i);
    down(t, t->heap[i]->idx);
  }
  rearm(ctx);
}

static void fd_closed(uv_handle_t *h) {
  sp_ctx *ctx = h->loop->data;
  if (ctx->timers.fd >= 0) close(ctx->timers.fd);
  ctx->timers.fd = -1;
}

void sp_timers_close(sp_ctx *ctx) {
  sp_timers *t = &ctx->timers;
  free(t->heap);
  t->heap = NULL;
  t->n = t->cap = 0;
  if (t->polling) {
    uv_poll_stop(&t->poll);
    uv_close((uv_handle_t *)&t->poll, fd_closed);
    t->polling = 0;
  }
}
