#include "sp_timer.h"
#include "sp_ctx.h"
#include "sp_sched.h"
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

/* Earlier due first; at equal due, the one armed first. */
static int before(const sp_deadline *a, const sp_deadline *b) {
  return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static void up(sp_timers *t, int i) {
  while (i > 0) {
    int p = (i - 1) / 2;
    if (!before(t->heap[i], t->heap[p])) break;
    swap(t, p, i);
    i = p;
  }
}

static void down(sp_timers *t, int i) {
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < t->n && before(t->heap[l], t->heap[m])) m = l;
    if (r < t->n && before(t->heap[r], t->heap[m])) m = r;
    if (m == i) break;
    swap(t, i, m);
    i = m;
  }
}

static void on_timerfd(uv_poll_t *h, int status, int events);

/* Point the timerfd at the earliest deadline (or disarm it). */
static void rearm(sp_ctx *ctx) {
  sp_timers *t = &ctx->timers;
  if (t->virt) return;   /* the scheduler advances virtual time itself */
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

uint64_t sp_timers_now(const sp_ctx *ctx) {
  return ctx->timers.virt ? ctx->timers.vnow : uv_hrtime();
}

int sp_timers_advance(sp_ctx *ctx) {
  sp_timers *t = &ctx->timers;
  if (!t->virt || t->n == 0) return 0;
  if (t->heap[0]->due > t->vnow) t->vnow = t->heap[0]->due;
  int fired = 0;
  while (t->n && t->heap[0]->due <= t->vnow) {
    sp_deadline *d = t->heap[0];
    sp_timers_remove(ctx, d);
    d->fire(d);
    fired++;
  }
  return fired;
}

int sp_timers_add(sp_ctx *ctx, sp_deadline *d, uint64_t due) {
  sp_timers *t = &ctx->timers;
  if (!t->virt && ensure(ctx) != 0) return -1;
  if (t->n == t->cap) {
    int cap = t->cap ? t->cap * 2 : 64;
    sp_deadline **p = realloc(t->heap, (size_t)cap * sizeof *p);
    if (!p) return -1;
    t->heap = p;
    t->cap = cap;
  }
  d->due = due ? due : 1;
  d->seq = t->seq++;
  d->idx = t->n;
  t->heap[t->n++] = d;
  up(t, d->idx);
  rearm(ctx);
  /* virtual: the ready-queue handle keeps the loop turning until the
     deadline is reached */
  if (t->virt) sp_sched_poke(ctx);
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
