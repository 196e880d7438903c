/* C test of the speculation window (engine/sp_window.c) without Lua: the
 * test plays the Lua dispatcher (sp_window.h says how) and a small fake
 * agent. Values are value-store slots the test labels (which hop, on the
 * true path or not), so the committed trajectory, the tree, the outcomes and
 * the leaks can be checked after any order of job completions. */
#include "sp_window_int.h"   /* white box: the tree (head, kids, live) */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* ---- the fake agent's world ---------------------------------------------- */

#define MAXH 64

typedef struct world {
  int nhops;             /* the step at hop nhops is the final answer */
  int right[MAXH];       /* rank of the speculator's right candidate at hop h, -1 none */
  int ncands[MAXH];      /* candidates it returns at hop h (0: m; -1: one plain value) */
  int spec_fails[MAXH];  /* the speculator raises at hop h */
  int verify_fails[MAXH];/* the verifier raises at hop h */
  int no_spec;           /* steps say their tool has no speculator */
} world;

/* What a slot holds, as the fake agent sees it. */
enum { V_FN = 1, V_STATE, V_STEP, V_ACTX, V_OBS, V_CANDS };

typedef struct label {
  int kind;              /* V_* */
  int hop;               /* hop of the state it belongs to */
  int ok;                /* built only from real observations and right guesses */
} label;

/* Job kinds, told apart by the function slot in args[0]. */
enum { J_START, J_ADVANCE, J_CALL, J_WARMUP, J_VERIFY, J_SPEC, J_N };
static const char *const JOB_NAMES[J_N] = {"start", "advance", "call", "warmup", "verify", "speculate"};

typedef struct harness {
  sp_ctx ctx;            /* engine context, no Lua state */
  world wd;              /* what the fake agent answers */
  label *lab;            /* slot -> label */
  int caplab;            /* entries in lab */
  int fn[J_N];           /* function slots */
  int qctx;              /* the query ctx metatable slot */
  sp_task *pend[512];    /* jobs taken and not yet ended, oldest first */
  int npend;             /* entries in pend */
  int ran[J_N];          /* jobs ended normally, by kind */
  int cancelled_seen;    /* jobs the window cancelled while the test held them */
  int unmarked_wrong;    /* wrong-path jobs that ran without the speculative flag */
  int verify_wrong;      /* verifier calls that saw a wrong-path observation */
  int bad_args;          /* jobs whose arguments did not fit the node */
  sp_policy *policy;     /* eligibility: every tool speculates in full */
} harness;

static void set_label(harness *h, int slot, int kind, int hop, int ok) {
  if (slot >= h->caplab) {
    int cap = h->caplab ? h->caplab : 64;
    while (cap <= slot) cap *= 2;
    label *p = realloc(h->lab, (size_t)cap * sizeof *p);
    if (!p) abort();
    memset(p + h->caplab, 0, (size_t)(cap - h->caplab) * sizeof *p);
    h->lab = p;
    h->caplab = cap;
  }
  h->lab[slot] = (label){kind, hop, ok};
}

static label get_label(harness *h, const sp_val *v) {
  if (v->kind != SP_VAL_SLOT || v->slot <= 0 || v->slot >= h->caplab) return (label){0, -1, 0};
  return h->lab[v->slot];
}

static int new_val(harness *h, int kind, int hop, int ok) {
  int slot = sp_vals_new(&h->ctx);
  if (slot == SP_NOVAL) abort();
  set_label(h, slot, kind, hop, ok);
  return slot;
}

static void res_slot(sp_jobres *r, int i, int slot) { r->v[i].kind = SP_VAL_SLOT; r->v[i].slot = slot; }
static void res_num(sp_jobres *r, int i, double x) { r->v[i].kind = SP_VAL_NUM; r->v[i].num = x; }
static void res_bool(sp_jobres *r, int i, int b) { r->v[i].kind = SP_VAL_BOOL; r->v[i].num = b != 0; }
static void res_str(sp_jobres *r, int i, const char *s) {
  r->v[i].kind = SP_VAL_STR;
  r->v[i].str = s;
  r->v[i].len = (int)strlen(s);
}

static void harness_init(harness *h, const world *wd) {
  memset(h, 0, sizeof *h);
  if (sp_ctx_init(&h->ctx) != 0) abort();
  char err[128];
  /* virtual clock: the test moves time, so stage times are exact */
  if (sp_clock_set_virtual(&h->ctx, 1, err, sizeof err) != 0) abort();
  h->wd = *wd;
  for (int i = 0; i < J_N; i++) h->fn[i] = new_val(h, V_FN, -1, 1);
  h->qctx = new_val(h, V_FN, -1, 1);
  h->policy = sp_policy_new();
  sp_policy_class(h->policy, "io", SP_FULL, 0, 0);
  sp_policy_tool(h->policy, "search", "io", 1.0);
}

static void harness_free(harness *h) {
  for (int i = 0; i < J_N; i++) sp_vals_unref(&h->ctx, h->fn[i]);
  sp_vals_unref(&h->ctx, h->qctx);
  sp_counts c;
  sp_ctx_counts(&h->ctx, &c);
  CHECK(c.values == 0, "every value released at the end (%d left)", c.values);
  CHECK(c.tasks == 0, "every job reaped at the end (%d left)", c.tasks);
  CHECK(c.windows == 0, "no window left (%d)", c.windows);
  sp_ctx_shutdown(&h->ctx);
  sp_policy_free(h->policy);
  free(h->lab);
}

static void advance_clock(harness *h, double ms) { h->ctx.timers.vnow += (uint64_t)(ms * 1e6); }

static sp_window *window_new(harness *h, int mode, int k, int m, int launch) {
  sp_window_cfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.mode = mode;
  cfg.k = k;
  cfg.m = m;
  cfg.max_hops = 64;
  cfg.spec_launch = launch;
  cfg.policy = h->policy;
  char err[256];
  sp_window *w = sp_window_new(&h->ctx, &cfg, err, sizeof err);
  CHECK(w != NULL, "window: %s", err);
  if (!w) abort();
  sp_window_fns f = {h->fn[J_START], h->fn[J_ADVANCE], h->fn[J_CALL], h->fn[J_WARMUP],
                     h->fn[J_VERIFY], h->fn[J_SPEC], 0, h->qctx};
  CHECK(sp_window_set_fns(w, &f, err, sizeof err) == 0, "set_fns: %s", err);
  return w;
}


static sp_window_stats stats_of(const sp_window *w) {
  sp_window_stats st;
  sp_window_stats_get(w, &st);
  return st;
}

static int job_kind(harness *h, sp_task *t) {
  const sp_jobcall *c = sp_job_call(t);
  for (int i = 0; i < J_N; i++)
    if (c->args[0].kind == SP_VAL_SLOT && c->args[0].slot == h->fn[i]) return i;
  return -1;
}

/* The state a job acts for: its node's (advance: the parent's, plus one). */
static label job_label(harness *h, sp_task *t) {
  const sp_jobcall *c = sp_job_call(t);
  int k = job_kind(h, t);
  if (k == J_START) return (label){V_STATE, 0, 1};
  if (k == J_ADVANCE) {
    label l = get_label(h, &c->args[2]);
    return (label){V_STATE, l.hop + 1, l.ok};
  }
  return get_label(h, &c->args[2]);
}

/* Play the dispatcher: run the C callbacks, take every queued job. */
static void pump(harness *h) {
  for (;;) {
    if (sp_sched_run_c(&h->ctx)) continue;
    h->ctx.budget = INT_MAX;
    sp_task *t = sp_job_next(&h->ctx);
    if (!t) break;
    if (h->npend == (int)(sizeof h->pend / sizeof h->pend[0])) abort();
    /* a call made for a state off the true path must run as speculative */
    label l = job_label(h, t);
    if (!l.ok && !sp_task_speculative(t)) h->unmarked_wrong++;
    h->pend[h->npend++] = t;
  }
}

/* The step of the state at `hop`: an action (search) or the final answer. */
static void fill_step(harness *h, sp_jobres *r, int state, int hop, int ok) {
  int final = hop >= h->wd.nhops;
  res_slot(r, 0, state);
  res_num(r, 1, final ? KIND_FINAL : KIND_ACTION);
  res_slot(r, 2, new_val(h, V_STEP, hop, ok));
  if (!final) res_str(r, 3, "search");
  res_num(r, 5, 1.0);                                 /* t_update, ms */
  res_num(r, 6, 0.0);
  res_bool(r, 7, !h->wd.no_spec);
  res_num(r, 9, 0);
  res_slot(r, 10, new_val(h, V_ACTX, hop, ok));
}

/* End pending job i with what the fake agent returns for it. */
static void complete(harness *h, int i) {
  sp_task *t = h->pend[i];
  memmove(&h->pend[i], &h->pend[i + 1], (size_t)(h->npend - i - 1) * sizeof h->pend[0]);
  h->npend--;
  sp_jobres r;
  memset(&r, 0, sizeof r);
  int dead[64];
  if (sp_task_state(t) == SP_TASK_CANCELLED) {
    /* the window gave it up while it ran: it still returns, unheard */
    h->cancelled_seen++;
    sp_job_done(&h->ctx, t, 1, &r, dead, 64);
    return;
  }
  const sp_jobcall *c = sp_job_call(t);
  int kind = job_kind(h, t);
  int ok = 1;
  char msg[64];
  switch (kind) {
  case J_START:
    fill_step(h, &r, new_val(h, V_STATE, 0, 1), 0, 1);
    break;
  case J_ADVANCE: {
    label st = get_label(h, &c->args[2]);
    label obs = get_label(h, &c->args[4]);
    label cands = get_label(h, &c->args[5]);
    int hop = (int)c->args[7].num;
    if (st.kind != V_STATE || hop != st.hop + 1) h->bad_args++;
    int good;
    if (obs.kind == V_OBS) {
      good = st.ok && obs.ok && obs.hop == st.hop;
    } else {
      /* rank argument: 1-based, 0 for a plain single value */
      int rank = c->args[6].num > 0 ? (int)c->args[6].num - 1 : 0;
      if (cands.kind != V_CANDS || cands.hop != st.hop) h->bad_args++;
      good = st.ok && cands.ok && rank == h->wd.right[st.hop];
    }
    fill_step(h, &r, new_val(h, V_STATE, hop, good), hop, good);
    break;
  }
  case J_CALL: {
    label a = get_label(h, &c->args[2]);
    if (a.kind != V_ACTX) h->bad_args++;
    res_slot(&r, 0, new_val(h, V_OBS, a.hop, a.ok));
    break;
  }
  case J_WARMUP:
    break;
  case J_SPEC: {
    label a = get_label(h, &c->args[2]);
    if (a.kind != V_ACTX) h->bad_args++;
    int m = (int)c->args[4].num;
    if (a.hop >= 0 && a.hop < MAXH && h->wd.spec_fails[a.hop]) {
      ok = 0;
      snprintf(msg, sizeof msg, "speculator down at hop %d", a.hop);
      res_str(&r, 0, msg);
      break;
    }
    int n = a.hop >= 0 && a.hop < MAXH && h->wd.ncands[a.hop] ? h->wd.ncands[a.hop] : m;
    res_slot(&r, 0, new_val(h, V_CANDS, a.hop, a.ok));
    res_num(&r, 1, n);
    for (int j = 0; j < n && 2 + j < SP_JOB_MAXRES; j++) res_num(&r, 2 + j, 0.9 - 0.1 * j);
    break;
  }
  case J_VERIFY: {
    label a = get_label(h, &c->args[2]);
    label obs = get_label(h, &c->args[5]);
    /* only the head is verified, against its real observation */
    if (!a.ok || !obs.ok || obs.hop != a.hop) h->verify_wrong++;
    if (a.hop >= 0 && a.hop < MAXH && h->wd.verify_fails[a.hop]) {
      ok = 0;
      res_str(&r, 0, "verifier crashed");
      break;
    }
    int nkids = (int)c->args[6].num;
    int raw = c->args[7].kind == SP_VAL_BOOL && c->args[7].num != 0;
    int right = a.hop >= 0 && a.hop < MAXH ? h->wd.right[a.hop] : -1;
    int idx = right >= 0 && right < nkids ? right + 1 : 0;
    if (raw) idx = right == 0 ? -1 : 0;
    res_num(&r, 0, idx);
    res_str(&r, 1, idx ? "same observation" : "different observation");
    break;
  }
  default:
    h->bad_args++;
    break;
  }
  if (kind >= 0) h->ran[kind]++;
  sp_job_done(&h->ctx, t, ok, &r, dead, 64);
  /* results the window did not keep were released inside sp_job_done; a
     failed job's string needs no release */
}

/* The oldest pending job of a kind (for a node at hop, -1 any), or -1. */
static int find(harness *h, int kind, int hop) {
  for (int i = 0; i < h->npend; i++) {
    sp_task *t = h->pend[i];
    if (sp_task_state(t) == SP_TASK_CANCELLED || job_kind(h, t) != kind) continue;
    if (hop < 0 || job_label(h, t).hop == hop) return i;
  }
  return -1;
}

/* Pump, then end the oldest job of that kind at that hop; 0 if none. */
static int run_one(harness *h, int kind, int hop, double ms) {
  pump(h);
  int i = find(h, kind, hop);
  if (i < 0) return 0;
  advance_clock(h, ms);
  complete(h, i);
  pump(h);
  return 1;
}

/* A fresh harness on world wd and a window in it, its start job ended after
   2 ms (init + the first step, at hop 0). */
static sp_window *begin(harness *h, const world *wd, int mode, int k, int m, int launch) {
  harness_init(h, wd);
  sp_window *w = window_new(h, mode, k, m, launch);
  sp_window_start(w, NULL);
  CHECK(run_one(h, J_START, 0, 2), "the window starts with one start job");
  return w;
}

/* Nodes in the tree under n (n included). */
static int tree_size(const sp_node *n) {
  if (!n) return 0;
  int s = 1;
  for (int i = 0; i < n->nkids; i++) s += tree_size(n->kids[i]);
  return s;
}

static void check_bound(harness *h, sp_window *w, int k) {
  if (w->status != SP_WIN_RUNNING) return;
  if (k > 0) CHECK(w->live <= k, "live threads %d <= k %d", w->live, k);
  CHECK(tree_size(w->head) <= w->live, "the tree (%d nodes) is counted in live (%d)", tree_size(w->head),
        w->live);
}

/* Run to the end in FIFO order (or random with a seed), checking k. */
static void run_all(harness *h, sp_window *w, int k, uint64_t seed) {
  uint64_t s = seed;
  for (int guard = 0; guard < 100000; guard++) {
    pump(h);
    check_bound(h, w, k);
    int live = 0;
    for (int i = 0; i < h->npend; i++) live += sp_task_state(h->pend[i]) != SP_TASK_CANCELLED;
    if (!live && !h->npend) return;
    int i = 0;
    if (seed) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      i = (int)((s >> 33) % (uint64_t)h->npend);
    }
    int kind = sp_task_state(h->pend[i]) == SP_TASK_CANCELLED ? -1 : job_kind(h, h->pend[i]);
    advance_clock(h, kind == J_CALL ? 10 : kind == J_SPEC ? 3 : kind == J_VERIFY ? 0.5 : 2);
    complete(h, i);
  }
  CHECK(0, "the window did not finish");
}

/* The committed trajectory is the sequential one: hop i's step and real
   observation, both on the true path, then the final answer. */
static void check_trajectory(harness *h, sp_window *w, int nhops) {
  CHECK(sp_window_status(w) == SP_WIN_DONE, "window done (status %d: %s)", sp_window_status(w),
        sp_window_error(w));
  CHECK(sp_window_nhops(w) == nhops, "%d committed hops, want %d", sp_window_nhops(w), nhops);
  for (int i = 0; i < sp_window_nhops(w); i++) {
    sp_hop_info hi;
    sp_window_hop(w, i, &hi);
    sp_val sv = {.kind = SP_VAL_SLOT, .slot = hi.step_ref}, ov = {.kind = SP_VAL_SLOT, .slot = hi.obs_ref};
    label sl = get_label(h, &sv), ol = get_label(h, &ov);
    CHECK(sl.kind == V_STEP && sl.hop == i && sl.ok, "hop %d: its step is the true one", i);
    CHECK(ol.kind == V_OBS && ol.hop == i && ol.ok, "hop %d: its observation is the real one", i);
    if (hi.spec == SP_SPEC_ACCEPTED) CHECK(hi.rank == h->wd.right[i], "hop %d accepted rank %d", i, hi.rank);
  }
  sp_val av = {.kind = SP_VAL_SLOT, .slot = sp_window_answer_ref(w)};
  label al = get_label(h, &av);
  CHECK(al.kind == V_STEP && al.hop == nhops && al.ok, "the answer is the true final step");
  CHECK(h->unmarked_wrong == 0, "%d wrong-path jobs ran unmarked", h->unmarked_wrong);
  CHECK(h->verify_wrong == 0, "%d verifications off the true path", h->verify_wrong);
  CHECK(h->bad_args == 0, "%d jobs with arguments that do not fit", h->bad_args);
}

/* Free the window, end the jobs it cancelled, check nothing is left. */
static void finish_and_free(harness *h, sp_window *w) {
  sp_window_free(w);
  pump(h);
  while (h->npend) {
    CHECK(sp_task_state(h->pend[0]) == SP_TASK_CANCELLED, "a %s job outlived its window",
          JOB_NAMES[job_kind(h, h->pend[0]) < 0 ? 0 : job_kind(h, h->pend[0])]);
    complete(h, 0);
  }
  harness_free(h);
}

static world world_all(int nhops, int right) {
  world wd;
  memset(&wd, 0, sizeof wd);
  wd.nhops = nhops;
  for (int i = 0; i < MAXH; i++) wd.right[i] = right;
  return wd;
}

/* ---- cases ------------------------------------------------------------------ */

/* Sequential: one thread, no speculator, exact stage times. */
static void test_sequential(void) {
  harness h;
  world wd = world_all(3, 0);
  sp_window *w = begin(&h, &wd, SP_MODE_SEQUENTIAL, 1, 1, SP_LAUNCH_EAGER);
  for (int hop = 0; hop < 3; hop++) {
    CHECK(find(&h, J_SPEC, -1) < 0, "no speculator in sequential mode");
    CHECK(run_one(&h, J_CALL, hop, 10), "hop %d: target", hop);
    CHECK(run_one(&h, J_ADVANCE, hop + 1, 4), "hop %d: update + step", hop);
  }
  check_trajectory(&h, w, 3);
  sp_window_stats st = stats_of(w);
  CHECK(st.hops == 3 && st.model_calls == 4 && st.target_calls == 3 && st.spec_calls == 0,
        "counts: hops %d model %d target %d spec %d", st.hops, st.model_calls, st.target_calls, st.spec_calls);
  CHECK(st.max_threads == 1, "sequential peaks at one live thread (%d)", st.max_threads);
  sp_hop_info hi;
  sp_window_hop(w, 1, &hi);
  CHECK(hi.spec == SP_SPEC_NONE && hi.rank == -1, "no speculation recorded");
  CHECK(hi.t_target == 10 && hi.t_seg == 3 && hi.t_update == 1, "stage times %g/%g/%g", hi.t_seg, hi.t_target,
        hi.t_update);
  CHECK(st.wall_ms == 2 + 3 * 14, "wall %g ms", st.wall_ms);
  CHECK(st.standard_ms == st.wall_ms, "sequential standard == wall (%g vs %g)", st.standard_ms, st.wall_ms);
  finish_and_free(&h, w);
}

/* Right guesses, speculator first: every hop commits its speculative thread. */
static void test_accept_chain(void) {
  harness h;
  world wd = world_all(4, 0);
  sp_window *w = begin(&h, &wd, SP_MODE_SPECHOP, 3, 1, SP_LAUNCH_EAGER);
  CHECK(find(&h, J_SPEC, 0) >= 0 && find(&h, J_CALL, 0) >= 0, "speculator and target start together (eager)");
  run_one(&h, J_SPEC, 0, 1);
  /* the guessed observation opened a thread at hop 1 under the head */
  CHECK(w->head->hop == 0 && w->head->nkids == 1 && w->head->kids[0]->hop == 1 &&
        w->head->kids[0]->parent == w->head, "tree: head(0) -> T(1)");
  sp_node *t1 = w->head->kids[0];
  run_one(&h, J_ADVANCE, 1, 2);
  CHECK(find(&h, J_CALL, 1) >= 0, "the speculative thread launched its own target call (policy: full)");
  run_one(&h, J_CALL, 0, 10);      /* head's result -> verify */
  run_one(&h, J_VERIFY, 0, 0.5);
  CHECK(w->head == t1 && t1->parent == NULL, "commit: the thread became the head");
  run_all(&h, w, 3, 0);
  check_trajectory(&h, w, 4);
  sp_window_stats st = stats_of(w);
  CHECK(st.commits == 4 && st.accepted == 4 && st.rollbacks == 0, "commits %d accepted %d rollbacks %d",
        st.commits, st.accepted, st.rollbacks);
  CHECK(st.model_calls == 5, "one step per hop plus the final one (%d)", st.model_calls);
  for (int i = 0; i < 4; i++) {
    sp_hop_info hi;
    sp_window_hop(w, i, &hi);
    CHECK(hi.spec == SP_SPEC_ACCEPTED && hi.rank == 0 && hi.ncands == 1, "hop %d accepted", i);
    CHECK(strcmp(hi.reason, "same observation") == 0, "hop %d keeps the verifier's reason", i);
  }
  CHECK(st.wall_ms < st.standard_ms, "speculation hid latency (wall %g < standard %g)", st.wall_ms,
        st.standard_ms);
  finish_and_free(&h, w);
}

/* A wrong guess: the thread it opened, and everything forked from it, goes;
   in-flight calls of the subtree are cancelled; the head resumes from the
   real observation. */
static void test_reject_rollback(void) {
  harness h;
  world wd = world_all(3, 0);
  wd.right[0] = -1;                 /* hop 0's guess is wrong */
  sp_window *w = begin(&h, &wd, SP_MODE_SPECHOP, -1, 1, SP_LAUNCH_EAGER);
  run_one(&h, J_SPEC, 0, 1);        /* T(1) on a wrong guess */
  run_one(&h, J_ADVANCE, 1, 2);     /* it acts: target + speculator */
  run_one(&h, J_SPEC, 1, 1);        /* T(2) under it */
  run_one(&h, J_ADVANCE, 2, 2);     /* T(2) acts too */
  CHECK(tree_size(w->head) == 3, "tree: head -> T(1) -> T(2) (%d nodes)", tree_size(w->head));
  sp_node *old_head = w->head;
  int wrong_calls = 0;
  for (int i = 0; i < h.npend; i++) wrong_calls += !job_label(&h, h.pend[i]).ok;
  CHECK(wrong_calls >= 3, "the wrong subtree has calls in flight (%d)", wrong_calls);
  run_one(&h, J_CALL, 0, 10);
  run_one(&h, J_VERIFY, 0, 0.5);    /* rejected */
  CHECK(w->head != old_head && w->head->hop == 1 && w->head->nkids == 0, "rollback: a new head at hop 1");
  int cancelled = 0, live_wrong = 0;
  for (int i = 0; i < h.npend; i++) {
    if (sp_task_state(h.pend[i]) == SP_TASK_CANCELLED) cancelled++;
    else live_wrong += !job_label(&h, h.pend[i]).ok;
  }
  CHECK(cancelled == wrong_calls, "every call of the subtree was cancelled (%d of %d)", cancelled, wrong_calls);
  CHECK(live_wrong == 0, "nothing of the wrong path still runs (%d)", live_wrong);
  sp_window_stats st = stats_of(w);
  CHECK(st.rollbacks == 1 && st.rejected == 1 && st.discarded_threads == 2, "rollbacks %d rejected %d discarded %d",
        st.rollbacks, st.rejected, st.discarded_threads);
  CHECK(st.cancelled_target == 2 && st.cancelled_spec == 1, "cancelled targets %d, speculators %d",
        st.cancelled_target, st.cancelled_spec);
  CHECK(st.wasted_calls == 2, "two speculative target calls wasted (%g)", st.wasted_calls);
  run_all(&h, w, -1, 0);
  check_trajectory(&h, w, 3);
  sp_hop_info hi;
  sp_window_hop(w, 0, &hi);
  CHECK(hi.spec == SP_SPEC_REJECTED && hi.rank == -1, "hop 0 rejected");
  finish_and_free(&h, w);
}

/* The target returns before the speculator: late; the speculator is
   cancelled; then a speculator that fails: error. */
static void test_late_and_error(void) {
  harness h;
  world wd = world_all(2, 0);
  wd.spec_fails[1] = 1;
  sp_window *w = begin(&h, &wd, SP_MODE_SPECHOP, 3, 1, SP_LAUNCH_EAGER);
  int spec0 = find(&h, J_SPEC, 0);
  sp_task *spec_job = h.pend[spec0];
  run_one(&h, J_CALL, 0, 10);       /* before the speculator */
  CHECK(sp_task_state(spec_job) == SP_TASK_CANCELLED, "the late speculator is cancelled");
  CHECK(find(&h, J_VERIFY, -1) < 0, "nothing to verify");
  run_one(&h, J_ADVANCE, 1, 2);
  run_one(&h, J_SPEC, 1, 1);        /* hop 1's speculator fails */
  run_one(&h, J_CALL, 1, 10);
  run_all(&h, w, 3, 0);
  check_trajectory(&h, w, 2);
  sp_hop_info h0, h1;
  sp_window_hop(w, 0, &h0);
  sp_window_hop(w, 1, &h1);
  CHECK(h0.spec == SP_SPEC_LATE && strcmp(h0.reason, "speculator slower than the target") == 0,
        "hop 0 late (%d, %s)", h0.spec, h0.reason);
  CHECK(h1.spec == SP_SPEC_ERROR && strstr(h1.reason, "speculator down at hop 1") != NULL, "hop 1 error (%d, %s)",
        h1.spec, h1.reason);
  sp_window_stats st = stats_of(w);
  CHECK(st.late == 1 && st.spec_errors == 1 && st.cancelled_spec == 1, "late %d errors %d cancelled spec %d",
        st.late, st.spec_errors, st.cancelled_spec);
  /* the estimator: late hops carry no evidence, errors count as judged */
  CHECK(st.est.hops == 2 && st.est.judged == 1 && st.est.accepted == 0, "estimator %g/%g/%g", st.est.hops,
        st.est.judged, st.est.accepted);
  CHECK(strcmp(sp_spec_name(h0.spec), "late") == 0 && strcmp(sp_spec_name(h1.spec), "error") == 0,
        "outcome names");
  finish_and_free(&h, w);
}

/* A verifier that raises counts as a rejection and rolls back. */
static void test_verifier_error(void) {
  harness h;
  world wd = world_all(2, 0);
  wd.verify_fails[0] = 1;
  sp_window *w = begin(&h, &wd, SP_MODE_SPECHOP, 2, 1, SP_LAUNCH_EAGER);
  run_one(&h, J_SPEC, 0, 1);
  run_one(&h, J_CALL, 0, 10);
  run_one(&h, J_VERIFY, 0, 0.5);
  run_all(&h, w, 2, 0);
  check_trajectory(&h, w, 2);
  sp_hop_info hi;
  sp_window_hop(w, 0, &hi);
  CHECK(hi.spec == SP_SPEC_REJECTED && strstr(hi.reason, "verifier error: verifier crashed") != NULL,
        "hop 0: %s", hi.reason);
  sp_window_stats st = stats_of(w);
  CHECK(st.rollbacks == 1 && st.discarded_threads == 1, "rolled back (%d, %d)", st.rollbacks, st.discarded_threads);
  finish_and_free(&h, w);
}

/* m > 1: every candidate opens a thread; the verifier picks rank 2; its
   siblings go. More candidates than m are cut to m. */
static void test_candidates(void) {
  harness h;
  world wd = world_all(2, 2);
  wd.ncands[0] = 5;                 /* more than m: cut to 3 */
  sp_window *w = begin(&h, &wd, SP_MODE_SPECHOP, -1, 3, SP_LAUNCH_EAGER);
  run_one(&h, J_SPEC, 0, 1);
  CHECK(w->head->nkids == 3, "three candidates, three threads (%d)", w->head->nkids);
  for (int r = 0; r < w->head->nkids; r++) {
    sp_node *c = w->head->kids[r];
    CHECK(c->rank == r && c->hop == 1, "child %d: rank %d hop %d", r, c->rank, c->hop);
    if (r > 0) CHECK(c->conf < w->head->kids[r - 1]->conf, "children in confidence order");
  }
  sp_node *keep = w->head->kids[2];
  run_one(&h, J_CALL, 0, 10);
  run_one(&h, J_VERIFY, 0, 0.5);
  CHECK(w->head == keep, "rank 2 committed");
  sp_window_stats st = stats_of(w);
  CHECK(st.discarded_threads == 2, "its two siblings discarded (%d)", st.discarded_threads);
  run_all(&h, w, -1, 0);
  check_trajectory(&h, w, 2);
  sp_hop_info hi;
  sp_window_hop(w, 0, &hi);
  CHECK(hi.spec == SP_SPEC_ACCEPTED && hi.rank == 2 && hi.ncands == 3, "rank %d of %d", hi.rank, hi.ncands);
  finish_and_free(&h, w);
}

/* A speculator returning one plain value (not a list): the raw protocol. */
static void test_raw_candidate(void) {
  harness h;
  world wd = world_all(2, 0);
  wd.ncands[0] = wd.ncands[1] = -1;
  sp_window *w = begin(&h, &wd, SP_MODE_SPECHOP, 2, 1, SP_LAUNCH_EAGER);
  run_all(&h, w, 2, 0);
  check_trajectory(&h, w, 2);
  sp_window_stats st = stats_of(w);
  CHECK(st.accepted == 2, "plain candidates accepted (%d)", st.accepted);
  finish_and_free(&h, w);
}

/* k bounds the live threads at every instant, whatever the completion
   order; the window mode bounds each round; slot launch reserves a slot. */
static void test_k_bound(void) {
  static const struct { int mode, k, m, launch; } cfgs[] = {
      {SP_MODE_SPECHOP, 1, 1, SP_LAUNCH_EAGER}, {SP_MODE_SPECHOP, 2, 1, SP_LAUNCH_EAGER},
      {SP_MODE_SPECHOP, 2, 3, SP_LAUNCH_EAGER}, {SP_MODE_SPECHOP, 3, 2, SP_LAUNCH_SLOT},
      {SP_MODE_WINDOW, 2, 2, SP_LAUNCH_SLOT},   {SP_MODE_SPECHOP, 4, 1, SP_LAUNCH_EAGER}};
  for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
    for (uint64_t seed = 1; seed <= 8; seed++) {
      harness h;
      world wd = world_all(6, 0);
      for (int i = 0; i < 6; i++) wd.right[i] = (int)((seed + (uint64_t)i * 3) % 4) - 1;   /* -1 .. 2 */
      sp_window *w = begin(&h, &wd, cfgs[c].mode, cfgs[c].k, cfgs[c].m, cfgs[c].launch);
      run_all(&h, w, cfgs[c].k, seed);
      check_trajectory(&h, w, 6);
      sp_window_stats st = stats_of(w);
      CHECK(st.max_threads <= cfgs[c].k, "cfg %zu seed %llu: peak %d > k %d", c, (unsigned long long)seed,
            st.max_threads, cfgs[c].k);
      if (cfgs[c].k == 1) CHECK(st.spec_calls == 0, "k = 1 never speculates (%d)", st.spec_calls);
      finish_and_free(&h, w);
    }
  }
}

/* Random worlds and completion orders: the committed trajectory is always
   the sequential one, outcomes add up, nothing leaks. */
static void test_random_orders(void) {
  static const int ks[] = {1, 2, 3, -1};
  for (uint64_t seed = 1; seed <= 120; seed++) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL;
#define NEXT() (s = s * 6364136223846793005ULL + 1442695040888963407ULL, (int)(s >> 33))
    int k = ks[NEXT() % 4], m = 1 + NEXT() % 3, n = 1 + NEXT() % 7;
    int mode = NEXT() % 4 == 0 ? SP_MODE_WINDOW : SP_MODE_SPECHOP;
    int launch = NEXT() % 3 == 0 ? SP_LAUNCH_SLOT : SP_LAUNCH_EAGER;
    if (mode == SP_MODE_WINDOW && k < 0) k = 2;
    world wd = world_all(n, 0);
    for (int i = 0; i < n; i++) {
      wd.right[i] = NEXT() % (m + 1) - 1;
      wd.spec_fails[i] = NEXT() % 8 == 0;
      wd.verify_fails[i] = NEXT() % 10 == 0;
    }
#undef NEXT
    harness h;
    sp_window *w = begin(&h, &wd, mode, k, m, launch);
    run_all(&h, w, k, seed);
    check_trajectory(&h, w, n);
    sp_window_stats st = stats_of(w);
    int none = 0;
    for (int i = 0; i < sp_window_nhops(w); i++) {
      sp_hop_info hi;
      sp_window_hop(w, i, &hi);
      none += hi.spec == SP_SPEC_NONE;
      if (hi.spec == SP_SPEC_ACCEPTED) CHECK(wd.right[i] >= 0 && !wd.verify_fails[i], "seed %llu hop %d: a wrong guess accepted",
                                             (unsigned long long)seed, i);
    }
    CHECK(st.accepted + st.rejected + st.late + st.spec_errors + none == st.hops,
          "seed %llu: outcomes add up (%d+%d+%d+%d+%d != %d)", (unsigned long long)seed, st.accepted, st.rejected,
          st.late, st.spec_errors, none, st.hops);
    CHECK(st.commits == st.accepted, "commits == accepted");
    if (k > 0) CHECK(st.max_threads <= k, "seed %llu: peak %d > k %d", (unsigned long long)seed, st.max_threads, k);
    finish_and_free(&h, w);
  }
}

/* The gate defers a speculative target call until its thread is verified. */
static void test_deferred_gate(void) {
  harness h;
  world wd = world_all(2, 0);
  harness_init(&h, &wd);
  sp_policy_class(h.policy, "io", SP_FORBID, 0, 0);
  sp_window *w = window_new(&h, SP_MODE_SPECHOP, 3, 1, SP_LAUNCH_EAGER);
  sp_window_start(w, NULL);
  run_one(&h, J_START, 0, 2);
  run_one(&h, J_SPEC, 0, 1);
  run_one(&h, J_ADVANCE, 1, 2);
  CHECK(find(&h, J_CALL, 1) < 0, "forbid: no target call from the unverified thread");
  CHECK(w->head->kids[0]->tg == TG_DEFERRED, "the call is deferred");
  run_one(&h, J_CALL, 0, 10);
  run_one(&h, J_VERIFY, 0, 0.5);
  CHECK(find(&h, J_CALL, 1) >= 0, "promoted: the deferred call starts as a normal call");
  CHECK(!sp_task_speculative(h.pend[find(&h, J_CALL, 1)]), "... not speculative");
  run_all(&h, w, 3, 0);
  check_trajectory(&h, w, 2);
  sp_window_stats st = stats_of(w);
  CHECK(st.speculative_launches == 0 && st.deferred >= 1, "launches %d deferred %d", st.speculative_launches,
        st.deferred);
  CHECK(st.gate[SP_TRIG_TARGET][SP_FORBID] >= 1, "the gate counted the refusal");
  finish_and_free(&h, w);

  /* warm-up class: the deferred call runs its warm-up hook instead */
  harness_init(&h, &wd);
  sp_policy_class(h.policy, "io", SP_WARMUP, 0, 0);
  w = window_new(&h, SP_MODE_SPECHOP, 3, 1, SP_LAUNCH_EAGER);
  sp_window_start(w, NULL);
  run_one(&h, J_START, 0, 2);
  run_one(&h, J_SPEC, 0, 1);
  run_one(&h, J_ADVANCE, 1, 2);
  CHECK(find(&h, J_WARMUP, 1) >= 0, "warm-up hook launched for the deferred call");
  run_all(&h, w, 3, 0);
  check_trajectory(&h, w, 2);
  st = stats_of(w);
  CHECK(st.warmup_calls >= 1, "warm-ups counted (%d)", st.warmup_calls);
  finish_and_free(&h, w);
}

/* Freeing a window mid-flight cancels every job of every thread; the jobs
   still end (unheard) and nothing is left: values, tasks, nodes. */
static void test_cancel_on_free(void) {
  harness h;
  world wd = world_all(5, 1);
  sp_window *w = begin(&h, &wd, SP_MODE_SPECHOP, -1, 2, SP_LAUNCH_EAGER);
  run_one(&h, J_SPEC, 0, 1);
  run_one(&h, J_ADVANCE, 1, 2);
  run_one(&h, J_ADVANCE, 1, 2);
  run_one(&h, J_SPEC, 1, 1);
  pump(&h);
  CHECK(tree_size(w->head) >= 4 && h.npend >= 5, "a tree in flight (%d nodes, %d jobs)", tree_size(w->head),
        h.npend);
  sp_counts c;
  sp_ctx_counts(&h.ctx, &c);
  CHECK(c.windows == 1 && c.values > J_N + 1, "before: one window, values held (%d)", c.values);
  int pending = h.npend;
  sp_window_free(w);
  int cancelled = 0;
  for (int i = 0; i < h.npend; i++) cancelled += sp_task_state(h.pend[i]) == SP_TASK_CANCELLED;
  CHECK(cancelled == pending, "all %d jobs cancelled (%d)", pending, cancelled);
  while (h.npend) complete(&h, 0);
  CHECK(h.cancelled_seen == pending, "each ended unheard");
  sp_ctx_counts(&h.ctx, &c);
  CHECK(c.windows == 0 && c.tasks == 0, "after: windows %d tasks %d", c.windows, c.tasks);
  CHECK(c.values == J_N + 1, "only the adapter's slots remain (%d)", c.values);
  harness_free(&h);
}

/* Cancelling a running window (a signal): it ends as cancelled, its jobs go. */
static void test_cancel_running(void) {
  harness h;
  world wd = world_all(3, 0);
  sp_window *w = begin(&h, &wd, SP_MODE_SPECHOP, 2, 1, SP_LAUNCH_EAGER);
  run_one(&h, J_SPEC, 0, 1);
  sp_window_cancel(w);
  CHECK(sp_window_status(w) == SP_WIN_CANCELLED && strcmp(sp_window_error(w), "cancelled") == 0, "cancelled");
  for (int i = 0; i < h.npend; i++)
    CHECK(sp_task_state(h.pend[i]) == SP_TASK_CANCELLED, "job %d cancelled", i);
  finish_and_free(&h, w);
}

/* A group collects its windows in the order they finish. */
static void test_group(void) {
  harness h;
  world wd = world_all(1, 0);
  harness_init(&h, &wd);
  sp_wgroup *g = sp_wgroup_new(&h.ctx);
  sp_window *a = window_new(&h, SP_MODE_SEQUENTIAL, 1, 1, SP_LAUNCH_EAGER);
  sp_window *b = window_new(&h, SP_MODE_SEQUENTIAL, 1, 1, SP_LAUNCH_EAGER);
  sp_window_start_in(a, g);
  sp_window_start_in(b, g);
  pump(&h);
  CHECK(h.npend == 2, "two starts (%d)", h.npend);
  /* b's jobs first: it finishes first */
  for (int guard = 0; guard < 20 && sp_window_status(b) == SP_WIN_RUNNING; guard++) {
    pump(&h);
    for (int i = 0; i < h.npend; i++)
      if (((sp_node *)h.pend[i]->window_node)->w == b) {
        complete(&h, i);
        break;
      }
  }
  CHECK(sp_wgroup_pop(g) == b && sp_wgroup_pop(g) == NULL, "b pops first, alone");
  run_all(&h, a, 1, 0);
  CHECK(sp_wgroup_pop(g) == a, "then a");
  check_trajectory(&h, a, 1);
  sp_window_free(b);
  sp_wgroup_free(g);
  finish_and_free(&h, a);
}

int main(void) {
  test_sequential();
  test_accept_chain();
  test_reject_rollback();
  test_late_and_error();
  test_verifier_error();
  test_candidates();
  test_raw_candidate();
  test_k_bound();
  test_random_orders();
  test_deferred_gate();
  test_cancel_on_free();
  test_cancel_running();
  test_group();
  printf("test_window: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
