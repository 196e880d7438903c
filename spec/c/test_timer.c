/* C test of the deadline heap (engine/sp_timer.c) on the virtual clock:
 * deadlines fire in (due, arming order) order whatever the order they were
 * armed and removed in, a removed deadline never fires, and a deadline
 * re-armed from its own callback waits for the next advance. */
#include "check.h"
#include "sp_engine.h"
#include "sp_timer.h"
#include <stdlib.h>
#include <string.h>

#define N 3000

typedef struct item {
  sp_deadline dl;   /* first: the callback gets it back as the item */
  int id;           /* arming order */
  uint64_t due;     /* as armed */
  int removed;      /* removed before it was due */
  int fired;        /* times fired */
} item;

static item items[N];
static int order[N], nfired;

static void on_fire(sp_deadline *d) {
  item *it = (item *)d;
  it->fired++;
  order[nfired++] = it->id;
}

static uint32_t rng = 12345;
static uint32_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 17;
  rng ^= rng << 5;
  return rng;
}

static void run_world(int ties) {
  sp_ctx ctx;
  char err[128];
  if (sp_engine_init(&ctx) != 0) abort();
  if (sp_clock_set_virtual(&ctx, 1, err, sizeof err) != 0) abort();
  memset(items, 0, sizeof items);
  nfired = 0;
  uint64_t base = sp_timers_now(&ctx.timers);
  for (int i = 0; i < N; i++) {
    items[i].id = i;
    items[i].dl.fire = on_fire;
    items[i].dl.idx = -1;
    items[i].due = base + 1 + next() % (uint64_t)ties;   /* few distinct dues: many ties */
    CHECK(sp_timers_add(&ctx.timers, &items[i].dl, items[i].due) == 0, "arm %d", i);
    /* remove an earlier one now and then, from anywhere in the heap */
    if (i % 3 == 2) {
      int j = (int)(next() % (uint32_t)(i + 1));
      if (!items[j].removed) {
        sp_timers_remove(&ctx.timers, &items[j].dl);
        items[j].removed = 1;
        CHECK(items[j].dl.idx == -1, "removed %d is unarmed", j);
      }
    }
  }
  sp_timers_remove(&ctx.timers, &items[0].dl);   /* twice is harmless */
  items[0].removed = 1;
  sp_timers_remove(&ctx.timers, &items[0].dl);
  int advances = 0;
  while (sp_timers_advance(&ctx.timers) > 0) advances++;
  int expected = 0;
  for (int i = 0; i < N; i++) {
    CHECK(items[i].fired == (items[i].removed ? 0 : 1), "item %d fired %d times (removed %d)", i, items[i].fired,
          items[i].removed);
    if (!items[i].removed) expected++;
  }
  CHECK(nfired == expected, "fired %d of %d", nfired, expected);
  for (int k = 1; k < nfired; k++) {
    item *a = &items[order[k - 1]], *b = &items[order[k]];
    CHECK(a->due < b->due || (a->due == b->due && a->id < b->id), "order at %d: (%llu, %d) before (%llu, %d)", k,
          (unsigned long long)a->due, a->id, (unsigned long long)b->due, b->id);
  }
  CHECK(advances <= ties, "one advance per distinct due (%d for %d)", advances, ties);
  sp_ctx_shutdown(&ctx);
}

/* On the real clock an armed deadline keeps the loop alive and nothing
   else does: once the last one has fired, uv_run has nothing left and
   returns (the timerfd's poll stayed active after the last deadline, so a
   run with nothing left to wake it waited for ever). */
static int real_fired;
static void on_real(sp_deadline *d) {
  (void)d;
  real_fired++;
}

static void real_clock_lets_the_loop_end(void) {
  sp_ctx ctx;
  if (sp_engine_init(&ctx) != 0) abort();
  sp_deadline a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  a.fire = b.fire = on_real;
  a.idx = b.idx = -1;
  uint64_t now = sp_timers_now(&ctx.timers);
  CHECK(sp_timers_add(&ctx.timers, &a, now + 1000000) == 0, "arm a (1 ms)");
  CHECK(sp_timers_add(&ctx.timers, &b, now + 2000000) == 0, "arm b (2 ms)");
  CHECK(uv_loop_alive(&ctx.loop), "armed deadlines keep the loop alive");
  int turns = 0;
  while (uv_run(&ctx.loop, UV_RUN_ONCE) != 0 && turns < 1000) turns++;
  CHECK(real_fired == 2, "both fired (%d)", real_fired);
  CHECK(!uv_loop_alive(&ctx.loop), "nothing armed: the loop is not kept alive");
  /* a deadline removed before it is due leaves nothing active either */
  CHECK(sp_timers_add(&ctx.timers, &a, sp_timers_now(&ctx.timers) + 1000000000ull) == 0, "arm a (1 s)");
  sp_timers_remove(&ctx.timers, &a);
  CHECK(!uv_loop_alive(&ctx.loop), "removed: the loop is not kept alive");
  sp_ctx_shutdown(&ctx);
}

int main(void) {
  real_clock_lets_the_loop_end();
  run_world(7);
  run_world(1000);
  run_world(1 << 30);
  printf("test_timer: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
