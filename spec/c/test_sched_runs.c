/* C test of the ready queue's runs (engine/sp_sched.c): an entry that the
 * running entry's group queues, while that group has nothing else queued,
 * runs next; a group's own entries keep their FIFO order whatever else
 * happens; a run ends after SP_RUN_MAX entries, so the other groups get
 * their turn; entries of no group, and entries queued from outside any
 * run, are plain FIFO; taking an entry off the queue (in a run or behind
 * it) leaves the counts right; with fewer than SP_RUN_WINDOWS windows live
 * the queue is plain FIFO. Entries here are C callbacks: each, when it
 * runs, notes its name and queues (or takes off the queue) what its script
 * line says. */
#include "check.h"
#include "sp_engine.h"
#include "sp_sched.h"
#include <stdlib.h>
#include <string.h>

#define MAXE 1200

typedef struct ent {
  sp_runnable r;          /* first: the callback gets it back as the entry */
  char name[12];          /* what the order shows */
  struct ent *then[3];    /* queued when it runs */
  struct ent *drop;       /* taken off the queue when it runs */
} ent;

static ent ents[MAXE];
static int nents;
static sp_ctx *CTX;
static char order[MAXE * 8];

static void on_run(sp_ctx *ctx, sp_runnable *r) {
  ent *e = (ent *)r;
  if (order[0]) strcat(order, " ");
  strcat(order, e->name);
  if (e->drop) sp_sched_unqueue(ctx, &e->drop->r);
  for (int i = 0; i < 3 && e->then[i]; i++) sp_sched_enqueue(ctx, &e->then[i]->r);
}

static ent *mk(const char *name, sp_rgroup *g) {
  ent *e = &ents[nents++];
  memset(e, 0, sizeof *e);
  snprintf(e->name, sizeof e->name, "%s", name);
  e->r.run = on_run;
  e->r.group = g;
  return e;
}

static void start(void) {
  nents = 0;
  order[0] = '\0';
}

static void drain(void) { sp_sched_drain(CTX); }

/* entries of no group: first in, first out, also when one queues another */
static void plain_fifo(void) {
  start();
  ent *a = mk("a", NULL), *b = mk("b", NULL), *c = mk("c", NULL), *d = mk("d", NULL);
  a->then[0] = d;
  sp_sched_enqueue(CTX, &a->r);
  sp_sched_enqueue(CTX, &b->r);
  sp_sched_enqueue(CTX, &c->r);
  drain();
  CHECK(strcmp(order, "a b c d") == 0, "no group: FIFO (%s)", order);
}

/* what a running group entry queues runs next, in the order queued */
static void runs_go_first(void) {
  start();
  sp_rgroup G = {0}, H = {0};
  ent *g1 = mk("g1", &G), *h1 = mk("h1", &H), *g2 = mk("g2", &G), *g3 = mk("g3", &G), *g4 = mk("g4", &G);
  g1->then[0] = g2;
  g2->then[0] = g3;
  g2->then[1] = g4;
  sp_sched_enqueue(CTX, &g1->r);
  sp_sched_enqueue(CTX, &h1->r);
  CHECK(G.queued == 1 && H.queued == 1, "queued from outside: counted (%d %d)", G.queued, H.queued);
  drain();
  CHECK(strcmp(order, "g1 g2 g3 g4 h1") == 0, "G's chain runs before h1 (%s)", order);
  CHECK(G.queued == 0 && H.queued == 0, "counts back to 0 (%d %d)", G.queued, H.queued);
}

/* a group with an entry further back: what it queues goes behind that
   entry, so its entries still run in the order they were queued */
static void group_fifo_kept(void) {
  start();
  sp_rgroup G = {0}, H = {0};
  ent *g1 = mk("g1", &G), *h1 = mk("h1", &H), *g2 = mk("g2", &G), *g3 = mk("g3", &G), *h2 = mk("h2", &H);
  g1->then[0] = g3;   /* g2 waits at the tail: g3 goes behind it */
  h1->then[0] = h2;   /* H has nothing else queued: h2 runs next */
  sp_sched_enqueue(CTX, &g1->r);
  sp_sched_enqueue(CTX, &h1->r);
  sp_sched_enqueue(CTX, &g2->r);
  drain();
  CHECK(strcmp(order, "g1 h1 h2 g2 g3") == 0, "G's FIFO order kept (%s)", order);
  CHECK(G.queued == 0 && H.queued == 0, "counts back to 0 (%d %d)", G.queued, H.queued);
}

/* a group that keeps queueing gets SP_RUN_MAX entries in a row, then the
   others their turn */
static void runs_are_bounded(void) {
  start();
  sp_rgroup G = {0}, H = {0};
  enum { CHAIN = 600 };
  ent *chain[CHAIN];
  for (int i = 0; i < CHAIN; i++) {
    char nm[12];
    snprintf(nm, sizeof nm, "g%d", i);
    chain[i] = mk(nm, &G);
    if (i) chain[i - 1]->then[0] = chain[i];
  }
  ent *h1 = mk("h1", &H);
  sp_sched_enqueue(CTX, &chain[0]->r);
  sp_sched_enqueue(CTX, &h1->r);
  drain();
  /* h1's place: after the first SP_RUN_MAX entries of the chain */
  int pos = 0;
  const char *p = order, *hit = strstr(order, "h1");
  CHECK(hit != NULL, "h1 ran");
  while (hit && p < hit) if (*p++ == ' ') pos++;
  CHECK(pos == SP_RUN_MAX, "h1 ran after %d entries of G (SP_RUN_MAX %d)", pos, SP_RUN_MAX);
  CHECK(strstr(order, "g599") != NULL, "the whole chain ran");
  CHECK(G.queued == 0 && H.queued == 0, "counts back to 0 (%d %d)", G.queued, H.queued);
}

/* entries taken off the queue, in a run and behind it */
static void unqueue_keeps_counts(void) {
  start();
  sp_rgroup G = {0}, H = {0};
  ent *g1 = mk("g1", &G), *h1 = mk("h1", &H), *g2 = mk("g2", &G), *g3 = mk("g3", &G), *g4 = mk("g4", &G);
  ent *g5 = mk("g5", &G), *g6 = mk("g6", &G);
  g1->then[0] = g2;   /* the run: g2 g3 */
  g1->then[1] = g3;
  g2->drop = g3;      /* g3 leaves the run */
  sp_sched_enqueue(CTX, &g1->r);
  sp_sched_enqueue(CTX, &h1->r);
  sp_sched_enqueue(CTX, &g4->r);   /* behind h1 */
  sp_sched_unqueue(CTX, &g4->r);   /* and gone: G has nothing behind */
  CHECK(G.queued == 1, "g4 taken off: G counts g1 only (%d)", G.queued);
  g2->then[0] = g5;   /* joins the run (nothing of G behind) */
  g5->then[0] = g6;
  drain();
  CHECK(strcmp(order, "g1 g2 g5 g6 h1") == 0, "taken off where they were, the rest in order (%s)", order);
  CHECK(G.queued == 0 && H.queued == 0, "counts back to 0 (%d %d)", G.queued, H.queued);
  CHECK(!g3->r.queued && !g4->r.queued, "taken-off entries are not queued");
}

/* few windows live: every entry at the tail, groups or not */
static void few_windows_fifo(void) {
  start();
  sp_rgroup G = {0}, H = {0};
  ent *g1 = mk("g1", &G), *h1 = mk("h1", &H), *g2 = mk("g2", &G);
  g1->then[0] = g2;
  sp_sched_enqueue(CTX, &g1->r);
  sp_sched_enqueue(CTX, &h1->r);
  drain();
  CHECK(strcmp(order, "g1 h1 g2") == 0, "%d windows: FIFO (%s)", CTX->counts.windows, order);
  CHECK(G.queued == 0 && H.queued == 0, "counts back to 0 (%d %d)", G.queued, H.queued);
}

int main(void) {
  sp_ctx ctx;
  if (sp_engine_init(&ctx) != 0) abort();
  CTX = &ctx;
  ctx.counts.windows = SP_RUN_WINDOWS - 1;   /* (white box: as many live windows) */
  few_windows_fifo();
  ctx.counts.windows = SP_RUN_WINDOWS;
  plain_fifo();
  runs_go_first();
  group_fifo_kept();
  runs_are_bounded();
  unqueue_keeps_counts();
  ctx.counts.windows = 0;
  sp_ctx_shutdown(&ctx);
  printf("test_sched_runs: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
