/* test_replay: the stage-record reader and the replay (the window run on
   recorded stage times), against hand-derived schedules, the independent
   event model (event_model.h) and the theory. Standalone; exits non-zero on
   any failure. */
#define _POSIX_C_SOURCE 200809L
#include "sp_replay.h"
#include "sp_synth.h"
#include "sp_theory.h"
#include "event_model.h"
#include "sp_api.h"
#include "sp_rand.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct tcount {
  int run;     /* checks made */
  int failed;  /* checks that failed */
} tcount;

static void check(tcount *t, int ok, const char *what) {
  t->run++;
  if (!ok) {
    t->failed++;
    fprintf(stderr, "FAIL %s\n", what);
  }
}

static void near(tcount *t, const char *what, double got, double want, double tol) {
  t->run++;
  if (!(fabs(got - want) <= tol)) {
    t->failed++;
    fprintf(stderr, "FAIL %s: got %.17g, want %.17g (tol %g)\n", what, got, want, tol);
  }
}

/* the engine's splitmix64 (sp_rand.h): a deterministic generator for the
   statistical checks */
#define rng_next sp_rand_next
static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

/* A query of n hops with fixed stage times, every hop accepted. */
static sp_replay_query make_query(size_t n, double seg, double spec, double target, double final_seg) {
  sp_replay_query q;
  memset(&q, 0, sizeof q);
  q.id = NULL;
  q.m = 1;
  q.n_hops = n;
  q.hops = calloc(n ? n : 1, sizeof *q.hops);
  for (size_t i = 0; i < n; i++) {
    q.hops[i].t_seg = seg;
    q.hops[i].t_spec = spec;
    q.hops[i].t_target = target;
    q.hops[i].spec = SP_SPEC_ACCEPTED;
  }
  q.final_seg = final_seg;
  return q;
}

static double wall_of(const sp_replay_query *q, const char *mode, int k) {
  double w = NAN;
  sp_replay_run(q, mode, k, SP_REPLAY_SLOT, &w, NULL);
  return w;
}

/* Hand-derived schedules with t_seg 0.15, t_spec 0.2, t_target 1, final 0.15
   (see the comments for the timelines). */
static void test_hand_cases(tcount *t) {
  /* wall[mode][k = 1, 2, 3, inf][N = 1, 2, 3] */
  static const double spechop[4][3] = {
      {1.30, 2.45, 3.60},  /* k=1: sequential, N * 1.15 + 0.15 */
      {1.15, 1.50, 2.50},  /* k=2: the child can only extend after its parent commits */
      {1.15, 1.50, 1.85},  /* k=3: node 2 extends when node 0 commits at 1.15 */
      {1.15, 1.50, 1.85}}; /* inf: (N-1)*0.35 + 1.15 */
  static const double window[4][3] = {
      {1.30, 2.45, 3.60},
      {1.15, 1.65, 2.65},  /* rounds of 2 hops: 2*0.15 + 0.2 + 1 = 1.5 each */
      {1.15, 1.50, 2.00},  /* one round of 3 hops, then the final step at 1.85 */
      {1.15, 1.50, 1.85}};
  static const int ks[4] = {1, 2, 3, -1};
  for (int ki = 0; ki < 4; ki++) {
    for (size_t n = 1; n <= 3; n++) {
      sp_replay_query q = make_query(n, 0.15, 0.2, 1.0, 0.15);
      char what[96];
      snprintf(what, sizeof what, "spechop k=%d N=%zu wall", ks[ki], n);
      near(t, what, wall_of(&q, "spechop", ks[ki]), spechop[ki][n - 1], 1e-9);
      snprintf(what, sizeof what, "window k=%d N=%zu wall", ks[ki], n);
      near(t, what, wall_of(&q, "window", ks[ki]), window[ki][n - 1], 1e-9);
      double w, st;
      double r = sp_replay_run(&q, "sequential", 7, SP_REPLAY_SLOT, &w, &st);
      snprintf(what, sizeof what, "sequential N=%zu is 1", n);
      check(t, r == 1.0 && w == st, what);
      free(q.hops);
    }
  }

  /* N = 30, all accepted, k = inf: node i is created at 0.35 i, node 29's
     target is back at 29 * 0.35 + 1.15 = 11.3, after the final step (10.65). */
  sp_replay_query q = make_query(30, 0.15, 0.2, 1.0, 0.15);
  double w, st;
  double r = sp_replay_run(&q, "spechop", -1, SP_REPLAY_SLOT, &w, &st);
  near(t, "N=30 inf wall", w, 30 * 0.35 + 0.8, 1e-9);
  near(t, "N=30 standard", st, 30 * 1.15 + 0.15, 1e-9);
  near(t, "N=30 inf RelLat", r, 11.3 / 34.65, 1e-12);
  free(q.hops);

  /* A rejected hop with verify time: N = 2, k = inf, t_verify 0.05.
     Node 0's guess is wrong: verified at 1.2, roll back, node 1 steps
     [1.2, 1.35], target back 2.35, verified 2.4; node 2 (final) is ready at 1.7. */
  q = make_query(2, 0.15, 0.2, 1.0, 0.15);
  q.hops[0].spec = SP_SPEC_REJECTED;
  q.hops[0].t_verify = q.hops[1].t_verify = 0.05;
  near(t, "rejected + verify wall", wall_of(&q, "spechop", -1), 2.4, 1e-9);
  /* k = 1 never verifies (nothing to compare), so it is exactly standard. */
  check(t, sp_replay_run(&q, "spechop", 1, SP_REPLAY_SLOT, NULL, NULL) == 1.0, "k=1 ignores t_verify");
  /* Late: the speculator takes 1.5 > t_target, so nothing is there to verify. */
  q.hops[0].spec = SP_SPEC_ACCEPTED;
  q.hops[0].t_spec = 1.5;
  near(t, "late speculator wall", wall_of(&q, "spechop", -1), 2.35, 1e-9);
  free(q.hops);

  /* t_update delays the child: N = 1, update 1.2 -> final ready at
     0.35 + 1.2 + 0.15 = 1.7; standard 0.15 + 1 + 1.2 + 0.15 = 2.5. */
  q = make_query(1, 0.15, 0.2, 1.0, 0.15);
  q.hops[0].t_update = 1.2;
  r = sp_replay_run(&q, "spechop", 2, SP_REPLAY_SLOT, &w, &st);
  near(t, "t_update wall", w, 1.7, 1e-9);
  near(t, "t_update standard", st, 2.5, 1e-12);
  check(t, sp_replay_run(&q, "spechop", 1, SP_REPLAY_SLOT, NULL, NULL) == 1.0, "t_update k=1");
  free(q.hops);

  /* m = 2, hop 0 accepted at rank 1. At k = 2 only one child fits, the
     wrong one: roll back at 1.15, node 1 steps [1.15, 1.3], its guess
     (rank 0) makes node 2 at 1.5, node 1's target is back at 2.3. At k = 3
     both fit: node 1 exists at 0.35, extends when node 0 commits (1.15),
     node 2 ready at 1.5, node 1's target back at 1.5. */
  q = make_query(2, 0.15, 0.2, 1.0, 0.15);
  q.m = 2;
  q.hops[0].rank = 1;
  near(t, "m=2 k=2 wall", wall_of(&q, "spechop", 2), 2.3, 1e-9);
  near(t, "m=2 k=3 wall", wall_of(&q, "spechop", 3), 1.5, 1e-9);
  /* A hop without a speculator call is never extended. */
  q.m = 1;
  q.hops[0].rank = 0;
  q.hops[0].spec = SP_SPEC_NONE;
  near(t, "spec none wall", wall_of(&q, "spechop", -1), 2.3, 1e-9);
  free(q.hops);

  /* No hops: the answer is the final step. */
  q = make_query(0, 0, 0, 0, 0.5);
  r = sp_replay_run(&q, "spechop", -1, SP_REPLAY_SLOT, &w, &st);
  check(t, r == 1.0 && w == 0.5 && st == 0.5, "zero hops");
  check(t, isnan(sp_replay_run(&q, "bogus", 2, SP_REPLAY_SLOT, NULL, NULL)), "unknown mode is NaN");
  check(t, isnan(sp_replay_run(&q, "spechop", SP_K_AUTO, SP_REPLAY_SLOT, NULL, NULL)), "k auto is NaN");
  check(t, isnan(sp_replay_run(NULL, "spechop", 2, SP_REPLAY_SLOT, NULL, NULL)), "NULL query is NaN");
  free(q.hops);
}

/* Random queries: outcomes accepted with probability p, latencies jittered
   by +-jitter around (beta, alpha, 1). */
static sp_replay_query random_query(uint64_t *rs, size_t n, double p, double alpha, double beta,
                                    double jitter) {
  sp_replay_query q = make_query(n, 0, 0, 0, 0);
  for (size_t i = 0; i < n; i++) {
    sp_replay_hop *h = &q.hops[i];
    h->t_seg = beta * (1 + jitter * (2 * rng_unit(rs) - 1));
    h->t_spec = alpha * (1 + jitter * (2 * rng_unit(rs) - 1));
    h->t_target = 1 + jitter * (2 * rng_unit(rs) - 1);
    h->spec = rng_unit(rs) < p ? SP_SPEC_ACCEPTED : SP_SPEC_REJECTED;
  }
  q.final_seg = beta;
  return q;
}

static double mean_rel_lat(uint64_t seed, const char *mode, int k, double p, double alpha, double beta,
                           double jitter) {
  uint64_t rs = seed;
  double sum = 0;
  const int nq = 100;
  for (int i = 0; i < nq; i++) {
    sp_replay_query q = random_query(&rs, 300, p, alpha, beta, jitter);
    sum += sp_replay_run(&q, mode, k, SP_REPLAY_SLOT, NULL, NULL);
    free(q.hops);
  }
  return sum / nq;
}

static void test_theory_agreement(tcount *t) {
  static const double cases[][3] = {{0.5, 0.2, 0.15}, {0.8, 0.2, 0.15}, {0.3, 0.3, 0.75},
                                    {0.68, 0.19, 0.10}, {0.95, 0.05, 0.1}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    double p = cases[c][0], a = cases[c][1], b = cases[c][2];
    char what[128];
    double star = sp_theory_rel_lat_star(p, a, b);
    snprintf(what, sizeof what, "spechop inf ~ Cor. 1 (p %g a %g b %g)", p, a, b);
    near(t, what, mean_rel_lat(42 + c, "spechop", -1, p, a, b, 0), star, 0.02);
    snprintf(what, sizeof what, "spechop inf jittered ~ Cor. 1 (p %g a %g b %g)", p, a, b);
    near(t, what, mean_rel_lat(77 + c, "spechop", -1, p, a, b, 0.1), star, 0.02);
    for (int k = 2; k <= 3; k++) {
      double cor3 = sp_theory_rel_lat_k(p, a, b, k);
      snprintf(what, sizeof what, "window k=%d ~ Cor. 3 (p %g a %g b %g)", k, p, a, b);
      near(t, what, mean_rel_lat(99 + c, "window", k, p, a, b, 0), cor3, 0.02);
      /* Continuous speculation is never worse than the bounded window. */
      double cont = mean_rel_lat(99 + c, "spechop", k, p, a, b, 0);
      snprintf(what, sizeof what, "spechop k=%d <= window k=%d", k, k);
      check(t, cont <= mean_rel_lat(99 + c, "window", k, p, a, b, 0) + 1e-12, what);
    }
  }
  /* k = 1 is exactly the sequential run, whatever the latencies. */
  uint64_t rs = 7;
  int exact = 1, monotone = 1;
  for (int i = 0; i < 200; i++) {
    sp_replay_query q = random_query(&rs, (size_t)(1 + i % 40), 0.6, 0.2, 0.3, 0.9);
    for (size_t j = 0; j < q.n_hops; j++) q.hops[j].t_update = rng_unit(&rs) * 0.01;
    /* More threads never hurt while verification is free. (With a verify
       cost they can: a guess that arrives in time and is rejected costs
       t_verify, a late one costs nothing.) */
    double prev = 1.0;
    for (int k = 2; k <= 6; k++) {
      double r = sp_replay_run(&q, "spechop", k, SP_REPLAY_SLOT, NULL, NULL);
      if (!(r <= prev + 1e-12)) monotone = 0;
      prev = r;
    }
    for (size_t j = 0; j < q.n_hops; j++) q.hops[j].t_verify = rng_unit(&rs) * 0.01;
    double w, st;
    if (sp_replay_run(&q, "spechop", 1, SP_REPLAY_SLOT, &w, &st) != 1.0 || w != st) exact = 0;
    if (sp_replay_run(&q, "window", 1, SP_REPLAY_SLOT, NULL, NULL) != 1.0) exact = 0;
    free(q.hops);
  }
  check(t, exact, "k=1 is exactly 1.0");
  check(t, monotone, "RelLat is non-increasing in k (t_verify = 0)");
}

static const char *TRACE =
    "{\"traceEvents\": [{\"name\": \"model\", \"ph\": \"X\", \"ts\": 0, \"dur\": 12000, \"pid\": 1, \"tid\": 1}],\n"
    " \"specula\": {\"version\": 1, \"queries\": [\n"
    "  {\"id\": \"q1\", \"mode\": \"spechop\", \"k\": 3, \"m\": 1,\n"
    "   \"hops\": [{\"t_seg\": 0.15, \"t_spec\": 0.2, \"t_target\": 1, \"t_update\": 0, \"t_verify\": 0,\n"
    "              \"spec\": \"accepted\", \"rank\": 0},\n"
    "             {\"t_seg\": 0.15, \"t_spec\": 0.2, \"t_target\": 1, \"spec\": \"accepted\"},\n"
    "             {\"t_seg\": 0.15, \"t_spec\": null, \"t_target\": 1, \"spec\": \"none\"}],\n"
    "   \"final_seg\": 0.15},\n"
    "  {\"id\": \"q2\", \"mode\": \"spechop\", \"k\": 3,\n"
    "   \"hops\": [{\"t_seg\": 1, \"t_spec\": 2, \"t_target\": 3, \"spec\": \"late\"},\n"
    "             {\"t_seg\": 1, \"t_target\": 3, \"spec\": \"error\"},\n"
    "             {\"t_seg\": 1, \"t_spec\": 0.5, \"t_target\": 3, \"spec\": \"rejected\"}],\n"
    "   \"final_seg\": 2}\n"
    " ]}}\n";

static const char *JSONL =
    "{\"id\": \"a\", \"answer\": \"x\", \"stages\": {\"hops\": [{\"t_seg\": 0.15, \"t_spec\": 0.2, "
    "\"t_target\": 1, \"spec\": \"accepted\", \"rank\": 0}], \"final_seg\": 0.15}, \"k\": \"inf\", "
    "\"mode\": \"window\"}\r\n"
    "\n"
    "{\"id\": \"b\", \"answer\": \"y\"}\n"
    "{\"id\": \"c\", \"stages\": {\"hops\": [], \"final_seg\": 4}}\n"
    "{\"id\": \"d\", \"stages\": {\"hops\": [ }\n"
    "{\"id\": 17, \"stages\": {\"hops\": [{\"t_seg\": 1, \"t_target\": 2, \"spec\": \"none\"}], \"final_seg\": 1}}\n";

static void test_shapes(tcount *t) {
  char err[512];
  sp_replay_set *set = NULL;
  int rc = sp_replay_load_buffer(TRACE, strlen(TRACE), &set, err, sizeof err);
  check(t, rc == 0 && set, "trace shape loads");
  if (rc == 0) {
    check(t, set->n == 2, "trace: two queries");
    check(t, strcmp(set->queries[0].id, "q1") == 0 && set->queries[0].n_hops == 3, "trace: q1 hops");
    check(t, set->k == 3 && set->mode && strcmp(set->mode, "spechop") == 0, "trace: common k and mode");
    check(t, set->queries[0].hops[2].spec == SP_SPEC_NONE && set->queries[0].hops[2].t_spec < 0,
          "trace: spec none");
    check(t, set->queries[1].hops[1].spec == SP_SPEC_ERROR && set->queries[1].hops[1].t_spec < 0,
          "trace: error without t_spec");
    check(t, set->queries[1].m == 1 && set->n_warnings == 0, "trace: defaults, no warnings");
    /* q1 at k = inf: nodes 0, 1, 2 exist at 0, 0.35, 0.7; node 2 has no
       speculator, so node 3 comes from node 2's target (1.85). */
    near(t, "trace q1 k=inf", wall_of(&set->queries[0], "spechop", -1), 1.85 + 0.15, 1e-9);
    /* q2: nothing can be committed: it is the sequential run (+ nothing). */
    double w, st;
    sp_replay_run(&set->queries[1], "spechop", -1, SP_REPLAY_SLOT, &w, &st);
    near(t, "trace q2 wall == standard", w, st, 1e-12);
    sp_replay_set_free(set);
  } else {
    fprintf(stderr, "  %s\n", err);
  }

  set = NULL;
  rc = sp_replay_load_buffer(JSONL, strlen(JSONL), &set, err, sizeof err);
  check(t, rc == 0 && set, "JSONL shape loads");
  if (rc == 0) {
    check(t, set->n == 3, "JSONL: three usable lines");
    check(t, strcmp(set->queries[0].id, "a") == 0 && set->queries[0].k == SP_K_UNBOUNDED &&
                 strcmp(set->queries[0].mode, "window") == 0,
          "JSONL: line 1 with k inf and mode");
    check(t, strcmp(set->queries[1].id, "c") == 0 && set->queries[1].n_hops == 0, "JSONL: empty hops");
    check(t, strcmp(set->queries[2].id, "17") == 0, "JSONL: numeric id");
    check(t, set->n_warnings == 2, "JSONL: two warnings");
    check(t, set->warnings && strstr(set->warnings, "input:3:") && strstr(set->warnings, "\"stages\""),
          "JSONL: missing stages warned with line");
    check(t, set->warnings && strstr(set->warnings, "input:5:") && strstr(set->warnings, "JSON"),
          "JSONL: malformed line warned with line");
    check(t, set->k == SP_K_AUTO && set->mode == NULL, "JSONL: mixed k/mode is unknown");
    near(t, "JSONL a k=inf", wall_of(&set->queries[0], "spechop", -1), 1.15, 1e-9);
    sp_replay_set_free(set);
  } else {
    fprintf(stderr, "  %s\n", err);
  }

  /* A single results line without a trailing newline is one JSON object. */
  const char *one = "{\"id\":\"z\",\"stages\":{\"hops\":[],\"final_seg\":1}}";
  set = NULL;
  check(t, sp_replay_load_buffer(one, strlen(one), &set, err, sizeof err) == 0 && set && set->n == 1,
        "single-line JSONL");
  sp_replay_set_free(set);
}

static void test_malformed(tcount *t) {
  static const char *bad[] = {
      "",
      "   \n\n",
      "[1, 2, 3]",
      "[{\"name\": \"x\", \"ph\": \"X\"}]",
      "42",
      "{\"traceEvents\": []}",
      "{\"traceEvents\": [], \"specula\": 3}",
      "{\"traceEvents\": [], \"specula\": {\"version\": 2, \"queries\": []}}",
      "{\"traceEvents\": [], \"specula\": {\"version\": 1}}",
      "{\"traceEvents\": [], \"specula\": {\"version\": 1, \"queries\": []}}",
      "{\"traceEvents\": [], \"specula\": {\"queries\": [{\"id\": \"q\", \"hops\": 3, \"final_seg\": 1}]}}",
      "{\"specula\": {\"queries\": [{\"id\": \"q\", \"hops\": [{\"t_seg\": -1, \"t_target\": 1}], \"final_seg\": 1}]}}",
      "{\"specula\": {\"queries\": [{\"id\": \"q\", \"hops\": [{\"t_seg\": 1, \"t_target\": \"1\"}], \"final_seg\": 1}]}}",
      "{\"specula\": {\"queries\": [{\"id\": \"q\", \"hops\": [{\"t_seg\": 1, \"t_target\": 1, \"spec\": \"maybe\"}], \"final_seg\": 1}]}}",
      "{\"specula\": {\"queries\": [{\"id\": \"q\", \"hops\": [{\"t_seg\": 1, \"t_target\": 1, \"spec\": \"accepted\"}], \"final_seg\": 1}]}}",
      "{\"specula\": {\"queries\": [{\"id\": \"q\", \"hops\": [{\"t_seg\": 1, \"t_target\": 1, \"rank\": 1.5}], \"final_seg\": 1}]}}",
      "{\"specula\": {\"queries\": [{\"id\": \"q\", \"hops\": [], \"final_seg\": 1, \"m\": 0}]}}",
      "{\"specula\": {\"queries\": [{\"id\": \"q\", \"hops\": [], \"final_seg\": 1, \"k\": 0}]}}",
      "{\"specula\": {\"queries\": [{\"id\": \"q\", \"hops\": []}]}}",
      "{\"specula\": {\"queries\": [{\"id\": \"q\", \"hops\": [], \"final_seg\": 1e300}]}}",
      "{\"id\": \"x\", \"answer\": 1}",
      "{\"id\": \"x\", \"stages\": [1]}\n{\"id\": \"y\"}\n",
      "{\"traceEvents\": [\n{\"name\": \"x\"},\n",
      "not json at all\nnor this\n",
      "\xEF\xBB\xBF",
      "{\"id\": \"x\", \"stages\": {\"hops\": [{\"t_seg\": 1, \"t_target\": 1, \"t_spec\": 1e13}], \"final_seg\": 1}}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char err[512] = "";
    sp_replay_set *set = (sp_replay_set *)1;  /* must be reset */
    int rc = sp_replay_load_buffer(bad[i], strlen(bad[i]), &set, err, sizeof err);
    char what[64];
    snprintf(what, sizeof what, "malformed input %zu is rejected", i);
    check(t, rc == -1 && set == NULL, what);
    snprintf(what, sizeof what, "malformed input %zu names the input", i);
    check(t, strncmp(err, "input", 5) == 0 && strlen(err) > 10, what);
    if (getenv("SP_TEST_VERBOSE")) fprintf(stderr, "  [%zu] %s\n", i, err);
    if (rc == 0) sp_replay_set_free(set);
  }
  /* A tiny err buffer truncates, a NULL one is allowed. */
  char tiny[8];
  sp_replay_set *set = NULL;
  check(t, sp_replay_load_buffer("x", 1, &set, tiny, sizeof tiny) == -1 && strlen(tiny) < 8, "tiny err");
  check(t, sp_replay_load_buffer("x", 1, &set, NULL, 0) == -1, "NULL err");
  check(t, sp_replay_load_buffer(NULL, 5, &set, NULL, 0) == -1, "NULL text");

  /* Every prefix of valid inputs either loads or fails cleanly. */
  const char *texts[] = {TRACE, JSONL};
  for (size_t j = 0; j < 2; j++) {
    size_t len = strlen(texts[j]);
    for (size_t cut = 0; cut <= len; cut++) {
      char *copy = malloc(cut ? cut : 1);  /* exact size: ASan sees any over-read */
      memcpy(copy, texts[j], cut);
      char err[256];
      sp_replay_set *s = NULL;
      if (sp_replay_load_buffer(copy, cut, &s, err, sizeof err) == 0) {
        for (size_t q = 0; q < s->n; q++) {
          sp_replay_run(&s->queries[q], "spechop", 3, SP_REPLAY_SLOT, NULL, NULL);
          sp_replay_run(&s->queries[q], "window", -1, SP_REPLAY_SLOT, NULL, NULL);
        }
        sp_replay_set_free(s);
      }
      free(copy);
    }
  }
  check(t, 1, "prefixes do not crash");
}

static void test_files_and_cli(tcount *t) {
  char path[] = "/tmp/sp_test_replay_XXXXXX";
  int fd = mkstemp(path);
  check(t, fd >= 0, "mkstemp");
  if (fd < 0) return;
  size_t len = strlen(TRACE);
  check(t, write(fd, TRACE, len) == (ssize_t)len, "write temp trace");
  close(fd);

  char err[512];
  sp_replay_set *set = NULL;
  check(t, sp_replay_load_file(path, &set, err, sizeof err) == 0 && set && set->n == 2, "load_file");
  sp_replay_set_free(set);
  set = NULL;
  check(t, sp_replay_load_file("/nonexistent/trace.json", &set, err, sizeof err) == -1 &&
               strstr(err, "/nonexistent/trace.json") && set == NULL,
        "missing file names the path");
  check(t, sp_replay_load_file("/tmp", &set, err, sizeof err) == -1 && strstr(err, "/tmp"),
        "a directory is an error");

  /* The command's computation (its argv is read in Lua: cmd/replay.lua, and
     checked by spec/functional/commands_spec.lua): output goes to stdout,
     errors to stderr. */
  int ks[] = {1, 2, 3, SP_K_UNBOUNDED};
  sp_replay_args a1 = {path, NULL, NULL, ks, 4, SP_REPLAY_LAUNCH_RECORDED, 0};
  check(t, sp_replay_print(&a1) == 0, "replay table");
  sp_replay_args a2 = {path, "window", NULL, NULL, 0, SP_REPLAY_LAUNCH_RECORDED, 1};
  check(t, sp_replay_print(&a2) == 0, "replay --json");
  sp_replay_args a3 = {path, "sequential", NULL, NULL, 0, SP_REPLAY_SLOT, 0};
  check(t, sp_replay_print(&a3) == 0, "replay sequential");
  sp_replay_args b1 = {"/nonexistent/x.json", NULL, NULL, NULL, 0, SP_REPLAY_LAUNCH_RECORDED, 0};
  check(t, sp_replay_print(&b1) == 1, "replay missing file: a failure (1), not a usage error");
  sp_replay_args b2 = {path, NULL, "no-such-config", NULL, 0, SP_REPLAY_LAUNCH_RECORDED, 0};
  check(t, sp_replay_print(&b2) == 2, "replay --config absent");
  sp_replay_args b3 = {NULL, NULL, NULL, NULL, 0, SP_REPLAY_LAUNCH_RECORDED, 0};
  check(t, sp_replay_print(&b3) == 2, "replay without FILE");
  unlink(path);
}

/* The eager schedule and the event model at given (p, alpha, beta). */
static void test_eager_and_model(tcount *t) {
  /* two hops, both guesses right, k = 2 (hand-scheduled): hop 0's step ends
     at 1, its target runs 1-11, its guess is back at 3 and hop 1 starts;
     hop 1's step ends at 4, its target runs 4-14. Slot: hop 1's speculator
     waits for a slot until hop 0 commits at 11, its guess at 13, the final
     step 13-14. Eager: the guess is back at 6 and held until 11, the final
     step 11-12. Both release the answer when hop 1's target returns: 14. */
  sp_replay_hop h[2] = {
    {.t_seg = 1, .t_spec = 2, .t_target = 10, .spec = SP_SPEC_ACCEPTED, .rank = 0},
    {.t_seg = 1, .t_spec = 2, .t_target = 10, .spec = SP_SPEC_ACCEPTED, .rank = 0},
  };
  sp_replay_query q = {.id = "e", .k = 2, .m = 1, .hops = h, .n_hops = 2, .final_seg = 1, .has_spec = 1};
  double we, ws;
  sp_replay_run(&q, "spechop", 2, SP_REPLAY_EAGER, &we, NULL);
  sp_replay_run(&q, "spechop", 2, SP_REPLAY_SLOT, &ws, NULL);
  check(t, fabs(we - 14.0) < 1e-9, "eager k=2 wall");
  check(t, fabs(ws - 14.0) < 1e-9, "slot k=2 wall");
  /* a slow final step shows the difference: slot 13 + 5, eager 11 + 5 */
  q.final_seg = 5;
  sp_replay_run(&q, "spechop", 2, SP_REPLAY_EAGER, &we, NULL);
  sp_replay_run(&q, "spechop", 2, SP_REPLAY_SLOT, &ws, NULL);
  check(t, fabs(we - 16.0) < 1e-9, "eager k=2 wall, slow final step");
  check(t, fabs(ws - 18.0) < 1e-9, "slot k=2 wall, slow final step");
  check(t, isnan(sp_synth_model(1.5, 0.1, 0.1, 0, 2, "spechop", SP_REPLAY_EAGER, 10, 10, 1)), "model p > 1");
  double m1 = sp_synth_model(0.68, 0.19, 0.10, 0.3, 1, "spechop", SP_REPLAY_EAGER, 30, 100, 7);
  check(t, fabs(m1 - 1.0) < 1e-12, "model at k = 1 is sequential");
  double me = sp_synth_model(0.68, 0.19, 0.10, 0.3, 2, "spechop", SP_REPLAY_EAGER, 30, 200, 7);
  double ms = sp_synth_model(0.68, 0.19, 0.10, 0.3, 2, "spechop", SP_REPLAY_SLOT, 30, 200, 7);
  check(t, me < ms, "eager beats slot at k = 2");
  check(t, me == sp_synth_model(0.68, 0.19, 0.10, 0.3, 2, "spechop", SP_REPLAY_EAGER, 30, 200, 7),
        "model is deterministic in its seed");
  /* unbounded k with fixed stage times: close to the oracle bound (Cor. 1) */
  double mi = sp_synth_model(0.68, 0.19, 0.10, 0, -1, "spechop", SP_REPLAY_EAGER, 60, 300, 3);
  double star = sp_theory_rel_lat_star(0.68, 0.19, 0.10);
  check(t, fabs(mi - star) < 0.03, "model at k = inf near RelLat*");
}

/* ---- timelines (sp_replay_timeline) ---------------------------------- */

static int span_is(const sp_replay_span *s, int lane, int kind, int hop, int spec, double t0, double t1) {
  return s->lane == lane && s->kind == kind && s->hop == hop && s->speculative == spec &&
         fabs(s->t0 - t0) < 1e-9 && fabs(s->t1 - t1) < 1e-9;
}

static int has_span(const sp_replay_span *sp, size_t n, int lane, int kind, int hop, int spec, double t0,
                    double t1) {
  for (size_t i = 0; i < n; i++)
    if (span_is(&sp[i], lane, kind, hop, spec, t0, t1)) return 1;
  return 0;
}

static int has_mark(const sp_replay_mark *mk, size_t n, int lane, int kind, int hop, double t) {
  for (size_t i = 0; i < n; i++)
    if (mk[i].lane == lane && mk[i].kind == kind && mk[i].hop == hop && fabs(mk[i].t - t) < 1e-9) return 1;
  return 0;
}

/* The rejected-hop case of test_hand_cases, drawn: node 0 (lane 0) guesses
   wrong at 0.35, the wrong child (lane 1) steps until 0.5 and is rolled back
   at 1.2; node 1 goes on in lane 0 at 1.2, its right guess at 1.55 starts the
   final step in lane 2, committed at 2.4 with the answer (10 spans). */
static void test_timeline_hand(tcount *t) {
  sp_replay_query q = make_query(2, 0.15, 0.2, 1.0, 0.15);
  q.hops[0].spec = SP_SPEC_REJECTED;
  q.hops[0].t_verify = q.hops[1].t_verify = 0.05;
  sp_replay_span sp[16];
  sp_replay_mark mk[8];
  sp_replay_tl_info info;
  char err[160];
  int rc = sp_replay_timeline(&q, "spechop", -1, SP_REPLAY_SLOT, sp, 16, mk, 8, &info, err, sizeof err);
  check(t, rc == 0, "timeline: hand case succeeds");
  near(t, "timeline: wall", info.wall, 2.4, 1e-9);
  check(t, info.n_spans == 10 && info.n_marks == 3 && info.lanes == 3, "timeline: 10 spans, 3 marks, 3 lanes");
  size_t n = info.n_spans;
  check(t, has_span(sp, n, 0, SP_REPLAY_TL_MODEL, 0, 0, 0, 0.15), "timeline: node 0 step");
  check(t, has_span(sp, n, 0, SP_REPLAY_TL_TARGET, 0, 0, 0.15, 1.15), "timeline: node 0 target");
  check(t, has_span(sp, n, 0, SP_REPLAY_TL_SPEC, 0, 0, 0.15, 0.35), "timeline: node 0 speculator");
  check(t, has_span(sp, n, 0, SP_REPLAY_TL_VERIFY, 0, 0, 1.15, 1.2), "timeline: node 0 verify");
  check(t, has_span(sp, n, 1, SP_REPLAY_TL_MODEL, 1, 1, 0.35, 0.5), "timeline: wrong child's step");
  check(t, has_span(sp, n, 0, SP_REPLAY_TL_MODEL, 1, 0, 1.2, 1.35), "timeline: node 1 after the rollback");
  check(t, has_span(sp, n, 0, SP_REPLAY_TL_TARGET, 1, 0, 1.35, 2.35), "timeline: node 1 target");
  check(t, has_span(sp, n, 0, SP_REPLAY_TL_SPEC, 1, 0, 1.35, 1.55), "timeline: node 1 speculator");
  check(t, has_span(sp, n, 0, SP_REPLAY_TL_VERIFY, 1, 0, 2.35, 2.4), "timeline: node 1 verify");
  check(t, has_span(sp, n, 2, SP_REPLAY_TL_MODEL, 2, 1, 1.55, 1.7), "timeline: final step, speculative");
  check(t, has_mark(mk, info.n_marks, 1, SP_REPLAY_TL_ROLLBACK, 0, 1.2), "timeline: rollback of hop 0");
  check(t, has_mark(mk, info.n_marks, 2, SP_REPLAY_TL_COMMIT, 1, 2.4), "timeline: commit of hop 1");
  check(t, has_mark(mk, info.n_marks, 2, SP_REPLAY_TL_ANSWER, 2, 2.4), "timeline: answer");

  /* too small: -1 with the sizes needed, then the retry fits */
  rc = sp_replay_timeline(&q, "spechop", -1, SP_REPLAY_SLOT, sp, 2, mk, 1, &info, err, sizeof err);
  check(t, rc == -1 && info.n_spans == 10 && info.n_marks == 3 && strstr(err, "10 spans") != NULL,
        "timeline: too small arrays report the sizes needed");
  rc = sp_replay_timeline(&q, "spechop", -1, SP_REPLAY_SLOT, sp, info.n_spans, mk, info.n_marks, &info, err,
                          sizeof err);
  check(t, rc == 0, "timeline: the retry with those sizes succeeds");
  rc = sp_replay_timeline(&q, "spechop", -1, SP_REPLAY_SLOT, NULL, 0, NULL, 0, &info, err, sizeof err);
  check(t, rc == -1 && info.n_spans == 10, "timeline: a sizing call without arrays");

  /* bad arguments are errors, not crashes */
  check(t, sp_replay_timeline(NULL, NULL, 2, SP_REPLAY_SLOT, sp, 16, mk, 8, &info, err, sizeof err) == -1,
        "timeline: NULL query");
  check(t, sp_replay_timeline(&q, "bogus", 2, SP_REPLAY_SLOT, sp, 16, mk, 8, &info, err, sizeof err) == -1 &&
               strstr(err, "bogus") != NULL, "timeline: unknown mode");
  check(t, sp_replay_timeline(&q, NULL, SP_REPLAY_K_RECORDED, SP_REPLAY_SLOT, sp, 16, mk, 8, &info, err,
                              sizeof err) == -1 && strstr(err, "recorded k") != NULL,
        "timeline: the recorded k when none was recorded");
  check(t, sp_replay_timeline(&q, NULL, SP_K_AUTO, SP_REPLAY_SLOT, sp, 16, mk, 8, &info, err, sizeof err) == -1,
        "timeline: k auto cannot be replayed");
  q.k = 2;
  q.launch = SP_REPLAY_SLOT;
  check(t, sp_replay_timeline(&q, NULL, SP_REPLAY_K_RECORDED, SP_REPLAY_LAUNCH_RECORDED, sp, 16, mk, 8, &info, NULL,
                              0) == 0 && info.k == 2 && info.m == 1 && info.launch == SP_REPLAY_SLOT,
        "timeline: the recorded k; the schedule is reported");
  double rw = NAN, kw = NAN;
  sp_replay_run(&q, "spechop", SP_REPLAY_K_RECORDED, SP_REPLAY_SLOT, &rw, NULL);
  sp_replay_run(&q, "spechop", 2, SP_REPLAY_SLOT, &kw, NULL);
  check(t, rw == kw, "run: the recorded k is replayed as that k");
  q.launch = SP_REPLAY_EAGER;
  check(t, sp_replay_timeline(&q, "spechop", -1, SP_REPLAY_LAUNCH_RECORDED, sp, 16, mk, 8, &info, NULL, 0) == 0 &&
               info.k == SP_K_UNBOUNDED && info.launch == SP_REPLAY_EAGER, "timeline: the recorded launch");
  check(t, sp_replay_timeline(&q, "window", 3, SP_REPLAY_EAGER, sp, 16, mk, 8, &info, NULL, 0) == 0 &&
               info.k == 3 && info.launch == SP_REPLAY_SLOT, "timeline: the window launches in slot");
  free(q.hops);
}

/* Random queries under every schedule: the timeline ends exactly at the
   replayed latency, its verdict marks follow the recorded outcomes, and no
   lane runs two steps at once. */
static void test_timeline_random(tcount *t) {
  static const int ks[] = {1, 2, 3, -1};
  static const char *modes[] = {"spechop", "window"};
  uint64_t rs = 7;
  size_t cap_s = 4096, cap_m = 1024;
  sp_replay_span *sp = malloc(cap_s * sizeof *sp);
  sp_replay_mark *mk = malloc(cap_m * sizeof *mk);
  int bad_end = 0, bad_verdict = 0, bad_overlap = 0, bad_k1 = 0, bad_count = 0, runs = 0;
  for (int rep = 0; rep < 40; rep++) {
    sp_replay_query q = random_query(&rs, 1 + rep % 9, 0.6, 0.3, 0.2, 0.8);
    q.m = 1 + rep % 3;
    for (size_t i = 0; i < q.n_hops; i++) {
      if (rep % 5 == 1 && i % 3 == 2) q.hops[i].t_spec = 2.5;  /* late: back after the target */
      if (q.hops[i].spec == SP_SPEC_ACCEPTED) q.hops[i].rank = (int)(rng_next(&rs) % (uint64_t)q.m);
      q.hops[i].t_verify = rep % 2 ? 0.01 : 0;
      q.hops[i].t_update = rep % 4 == 3 ? 0.02 : 0;
    }
    for (size_t mi = 0; mi < 2; mi++) {
      for (int launch = 0; launch <= 1; launch++) {
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
          runs++;
          sp_replay_tl_info info;
          char err[160];
          double w = NAN;
          sp_replay_run(&q, modes[mi], ks[ki], launch, &w, NULL);
          if (sp_replay_timeline(&q, modes[mi], ks[ki], launch, sp, cap_s, mk, cap_m, &info, err,
                                 sizeof err) != 0) {
            bad_end++;
            continue;
          }
          double end = 0;
          for (size_t i = 0; i < info.n_spans; i++) end = fmax(end, sp[i].t1);
          int answers = 0, commits = 0, rollbacks = 0;
          int *seen = calloc(q.n_hops + 1, sizeof *seen);
          for (size_t i = 0; i < info.n_marks; i++) {
            const sp_replay_mark *m = &mk[i];
            end = fmax(end, m->t);
            if (m->kind == SP_REPLAY_TL_ANSWER) answers += m->t == w;
            if (m->kind != SP_REPLAY_TL_COMMIT && m->kind != SP_REPLAY_TL_ROLLBACK) continue;
            /* with m > 1 a right guess can miss its slot: then a wrong one is rolled back */
            const sp_replay_hop *h = &q.hops[m->hop];
            int accepted = h->spec == SP_SPEC_ACCEPTED;
            int ok = m->kind == SP_REPLAY_TL_COMMIT ? accepted : (!accepted || (q.m > 1 && h->rank > 0));
            if (!ok || seen[m->hop]++) bad_verdict++;
            commits += m->kind == SP_REPLAY_TL_COMMIT;
            rollbacks += m->kind == SP_REPLAY_TL_ROLLBACK;
          }
          free(seen);
          if (end != w || info.wall != w || answers != 1) bad_end++;
          if (ks[ki] == 1) {
            for (size_t i = 0; i < info.n_spans; i++) bad_k1 += sp[i].kind == SP_REPLAY_TL_SPEC;
            bad_k1 += commits + rollbacks + (info.lanes != 1);
          }
          /* eager, unbounded, m = 1: every guess back before its target is judged */
          if (ks[ki] < 0 && launch == SP_REPLAY_EAGER && mi == 0 && q.m == 1) {
            int acc = 0, rej = 0;
            for (size_t i = 0; i < q.n_hops; i++) {
              if (!(q.hops[i].t_spec <= q.hops[i].t_target)) continue;
              acc += q.hops[i].spec == SP_SPEC_ACCEPTED;
              rej += q.hops[i].spec != SP_SPEC_ACCEPTED;
            }
            if (commits != acc || rollbacks != rej) bad_count++;
          }
          for (size_t i = 0; i < info.n_spans; i++)
            for (size_t j = i + 1; j < info.n_spans; j++)
              if (sp[i].lane == sp[j].lane && sp[i].kind == SP_REPLAY_TL_MODEL &&
                  sp[j].kind == SP_REPLAY_TL_MODEL && sp[i].t0 < sp[j].t1 - 1e-12 && sp[j].t0 < sp[i].t1 - 1e-12)
                bad_overlap++;
        }
      }
    }
    free(q.hops);
  }
  free(sp);
  free(mk);
  check(t, runs == 640, "timeline: every combination ran");
  check(t, bad_end == 0, "timeline: ends at the replayed latency, one answer there");
  check(t, bad_verdict == 0, "timeline: commits on accepted hops, rollbacks on the others, one per hop");
  check(t, bad_k1 == 0, "timeline: k = 1 has one lane, no speculator and no verdict");
  check(t, bad_count == 0, "timeline: eager k = inf draws one verdict per hop");
  check(t, bad_overlap == 0, "timeline: no lane runs two steps at once");
}


/* The window (sp_replay_run drives it) against the independent event model
   (event_model.h) on random queries, exactly: every mode, k, launch and m,
   stage times on a coarse grid (so that events tie often: the order at one
   instant decides) or drawn freely, all outcomes, unknown speculator times,
   verify and update times. The wall must be the same double. */
static void test_window_equals_model(tcount *t) {
  static const int ks[] = {1, 2, 3, 4, -1};
  static const char *const modes[] = {"spechop", "window", "sequential"};
  uint64_t rs = 2024;
  int runs = 0, differ = 0;
  for (int rep = 0; rep < 600; rep++) {
    int grid = rep % 2 == 0;
    size_t n = (size_t)(rng_next(&rs) % 12);
    sp_replay_query q = make_query(n, 0, 0, 0, 0);
    q.m = 1 + (int)(rng_next(&rs) % 3);
#define T(scale) (grid ? (double)(rng_next(&rs) % 5) * (scale) : rng_unit(&rs) * 3 * (scale))
    for (size_t i = 0; i < n; i++) {
      sp_replay_hop *h = &q.hops[i];
      h->t_seg = T(0.5);
      h->t_target = T(1.0);
      h->t_spec = T(0.5);
      h->t_update = rep % 3 == 0 ? T(0.1) : 0;
      h->t_verify = rep % 4 == 0 ? T(0.1) : 0;
      int o = (int)(rng_next(&rs) % 10);
      h->spec = o < 5 ? SP_SPEC_ACCEPTED : o < 7 ? SP_SPEC_REJECTED : o < 8 ? SP_SPEC_LATE
              : o < 9 ? SP_SPEC_ERROR : SP_SPEC_NONE;
      h->rank = h->spec == SP_SPEC_ACCEPTED ? (int)(rng_next(&rs) % (uint64_t)q.m) : 0;
      h->ncands = (int)(rng_next(&rs) % (uint64_t)(q.m + 1));
      if (h->spec == SP_SPEC_NONE || (h->spec != SP_SPEC_ACCEPTED && rng_next(&rs) % 6 == 0)) h->t_spec = -1;
    }
    q.final_seg = T(0.5);
#undef T
    for (size_t mi = 0; mi < 3; mi++) {
      for (int launch = 0; launch <= 1; launch++) {
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
          double w = NAN;
          sp_replay_run(&q, modes[mi], ks[ki], launch, &w, NULL);
          double want = em_wall(&q, modes[mi], ks[ki], launch);
          runs++;
          if (!(w == want)) {
            if (differ++ < 5)
              fprintf(stderr, "  rep %d %s k=%d launch %d m %d: window %.17g, model %.17g\n", rep, modes[mi],
                      ks[ki], launch, q.m, w, want);
          }
        }
      }
    }
    free(q.hops);
  }
  check(t, runs == 600 * 30, "window vs model: every combination ran");
  check(t, differ == 0, "window vs model: the same release time in every run");
}

int main(void) {
  tcount t = {0, 0};
  test_window_equals_model(&t);
  test_eager_and_model(&t);
  test_hand_cases(&t);
  test_theory_agreement(&t);
  test_shapes(&t);
  test_malformed(&t);
  test_files_and_cli(&t);
  test_timeline_hand(&t);
  test_timeline_random(&t);
  printf("test_replay: %d checks, %d failed\n", t.run, t.failed);
  return t.failed ? 1 : 0;
}
