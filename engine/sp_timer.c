#include "sp_timer.h"
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

void sp_timers_init(sp_timers *t, uv_loop_t *loop, void (*wake)(void *ud), void *wake_ud) {
  memset(t, 0, sizeof *t);
  t->loop = loop;
  t->wake = wake;
  t->wake_ud = wake_ud;
  t->fd = -1;
}

/* Earlier due first; at equal due, the one armed first. */
static int before(const sp_heapent *a, const sp_heapent *b) {
  return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static void place(sp_timers *t, int i, sp_heapent e) {
  t->heap[i] = e;
  e.d->idx = i;
}

/* Sift the entry e, which belongs at hole i or above it, up (each entry
   passed over moves down into the hole, written once). */
static void up(sp_timers *t, int i, sp_heapent e) {
  while (i > 0) {
    int p = (i - 1) / 2;
    if (!before(&e, &t->heap[p])) break;
    place(t, i, t->heap[p]);
    i = p;
  }
  place(t, i, e);
}

/* The same, down: the smaller child moves up into the hole. */
static void down(sp_timers *t, int i, sp_heapent e) {
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = l;
    if (l >= t->n) break;
    if (r < t->n && before(&t->heap[r], &t->heap[l])) m = r;
    if (!before(&t->heap[m], &e)) break;
    place(t, i, t->heap[m]);
    i = m;
  }
  place(t, i, e);
}

static void on_timerfd(uv_poll_t *h, int status, int events);

/* Point the timerfd at the earliest deadline (or disarm it). */
static void rearm(sp_timers *t) {
  if (t->virt) return;   /* the scheduler advances virtual time itself */
  uint64_t due = t->n ? t->heap[0].due : 0;
  if (due != t->armed) {
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    if (due) {
      its.it_value.tv_sec = (time_t)(due / 1000000000ull);
      its.it_value.tv_nsec = (long)(due % 1000000000ull);
    }
    timerfd_settime(t->fd, TFD_TIMER_ABSTIME, &its, NULL);
    t->armed = due;
  }
  /* An armed timer keeps the loop alive; an idle one must not. Checked
     even when `armed` is unchanged: on_timerfd zeroes it before the last
     deadline fires, and returning early then left the poll active, so a
     loop with nothing left to do never ended (a stalled run waited for
     ever on the real clock). */
  if (due && !uv_is_active((uv_handle_t *)&t->poll)) uv_poll_start(&t->poll, UV_READABLE, on_timerfd);
  else if (!due && uv_is_active((uv_handle_t *)&t->poll)) uv_poll_stop(&t->poll);
}

static void on_timerfd(uv_poll_t *h, int status, int events) {
  (void)status;
  (void)events;
  sp_timers *t = (sp_timers *)((char *)h - offsetof(sp_timers, poll));
  uint64_t expirations;
  while (read(t->fd, &expirations, sizeof expirations) > 0) {
  }
  t->armed = 0;
  uint64_t now = uv_hrtime();
  while (t->n && t->heap[0].due <= now) {
    sp_deadline *d = t->heap[0].d;
    sp_timers_remove(t, d);
    d->fire(d);
  }
  rearm(t);
}

static int ensure(sp_timers *t) {
  if (t->fd >= 0) return 0;
  t->fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (t->fd < 0) return -1;
  if (uv_poll_init(t->loop, &t->poll, t->fd) != 0) {
    close(t->fd);
    t->fd = -1;
    return -1;
  }
  t->polling = 1;
  return 0;
}

uint64_t sp_timers_now(const sp_timers *t) { return t->virt ? t->vnow : uv_hrtime(); }

int sp_timers_advance(sp_timers *t) {
  if (!t->virt || t->n == 0) return 0;
  if (t->heap[0].due > t->vnow) t->vnow = t->heap[0].due;
  int fired = 0;
  while (t->n && t->heap[0].due <= t->vnow) {
    sp_deadline *d = t->heap[0].d;
    sp_timers_remove(t, d);
    d->fire(d);
    fired++;
  }
  return fired;
}

int sp_timers_add(sp_timers *t, sp_deadline *d, uint64_t due) {
  if (!t->virt && ensure(t) != 0) return -1;
  if (t->n == t->cap) {
    int cap = t->cap ? t->cap * 2 : 64;
    sp_heapent *p = realloc(t->heap, (size_t)cap * sizeof *p);
    if (!p) return -1;
    t->heap = p;
    t->cap = cap;
  }
  d->due = due ? due : 1;
  d->seq = t->seq++;
  sp_heapent e = { d->due, d->seq, d };
  up(t, t->n++, e);
  rearm(t);
  /* virtual: whoever advances the clock keeps the loop turning until the
     deadline is reached */
  if (t->virt && t->wake) t->wake(t->wake_ud);
  return 0;
}

void sp_timers_remove(sp_timers *t, sp_deadline *d) {
  int i = d->idx;
  if (i < 0 || i >= t->n || t->heap[i].d != d) return;
  d->idx = -1;
  t->n--;
  if (i != t->n) {
    /* the last entry fills the hole: it belongs above or below it */
    sp_heapent last = t->heap[t->n];
    if (i > 0 && before(&last, &t->heap[(i - 1) / 2])) up(t, i, last);
    else down(t, i, last);
  }
  rearm(t);
}

static void fd_closed(uv_handle_t *h) {
  sp_timers *t = (sp_timers *)((char *)h - offsetof(sp_timers, poll));
  if (t->fd >= 0) close(t->fd);
  t->fd = -1;
}

void sp_timers_close(sp_timers *t) {
  free(t->heap);
  t->heap = NULL;
  t->n = t->cap = 0;
  if (t->polling) {
    uv_poll_stop(&t->poll);
    uv_close((uv_handle_t *)&t->poll, fd_closed);
    t->polling = 0;
  }
}
