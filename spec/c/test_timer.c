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

int main(void) {
  run_world(7);
  run_world(1000);
  run_world(1 << 30);
  printf("test_timer: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
