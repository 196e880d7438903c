/* The C tests' window harness (spec/c/test_window.c, test_window_actspec.c): the
 * test plays the Lua dispatcher (sp_window.h says how) and a small fake
 * agent, predictor included. Values are value-store slots the test labels
 * (which hop, on the true path or not), so the committed trajectory, the
 * tree, the outcomes and the leaks can be checked after any order of job
 * completions. Header-only (static inline): each test is one file. */
#ifndef SPEC_C_WINDOW_HARNESS_H
#define SPEC_C_WINDOW_HARNESS_H
#include "sp_engine.h"
#include "sp_window_int.h"   /* white box: the tree (head, kids, live) */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* ---- the fake agent's world ---------------------------------------------- */

#define MAXH 64
#define MAXP 4

/* One prediction the fake predictor makes at the start of every step. */
typedef struct wpred {
  const char *tool;      /* predicted tool ("search": the step's; "fetch": never chosen) */
  int right;             /* its args are the ones the step will decide (under its own tool) */
  double conf;           /* its confidence */
  int hint;              /* the script's decision for it (SP_HINT_NONE: no script) */
  double tool_conf;      /* its confidence in the tool whatever the args (0: unknown) */
} wpred;

typedef struct world {
  int nhops;             /* the step at hop nhops is the final answer */
  int right[MAXH];       /* rank of the speculator's right candidate at hop h, -1 none */
  int ncands[MAXH];      /* candidates it returns at hop h (0: m; -1: one plain value) */
  int spec_fails[MAXH];  /* the speculator raises at hop h */
  int verify_fails[MAXH];/* the verifier raises at hop h */
  int no_spec;           /* steps say their tool has no speculator */
  wpred pred[MAXP];      /* predictions of each step's action, best first */
  int npred;             /* entries in pred */
  int pred_final;        /* the predictor also predicts at the final step */
  int stream_name;       /* each step streams its tool's name before it returns */
  int match_name;        /* the step reports a name-only match (lossy modes) */
} world;

/* What a slot holds, as the fake agent sees it. */
enum { V_FN = 1, V_STATE, V_STEP, V_ACTX, V_OBS, V_CANDS, V_ARGS };

typedef struct label {
  int kind;              /* V_* */
  int hop;               /* hop of the state it belongs to */
  int ok;                /* built only from real observations and right guesses */
} label;

/* Job kinds (the protocol's, sp_api.h). */
enum { J_START = SP_JOB_START, J_ADVANCE = SP_JOB_ADVANCE, J_CALL = SP_JOB_CALL, J_WARMUP = SP_JOB_WARMUP,
       J_SPEC = SP_JOB_SPECULATE, J_VERIFY = SP_JOB_VERIFY, J_PFCALL = SP_JOB_PFCALL, J_N = SP_JOB_KINDS };
static const char *const JOB_NAMES[J_N] = {
    [J_START] = "start", [J_ADVANCE] = "advance", [J_CALL] = "call", [J_WARMUP] = "warmup",
    [J_SPEC] = "speculate", [J_VERIFY] = "verify", [J_PFCALL] = "pfcall"};

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
  int taken[J_N];        /* jobs taken from the queue, by kind */
  int predictions;       /* predictions the window kept (sp_window_predict) */
  char key[64];          /* the decided action's canonical args, while its step ends */
  sp_policy *policy;     /* eligibility: every tool speculates in full */
  sp_prefetch *pf;       /* action speculation (harness_actspec), NULL = off */
} harness;

static inline void set_label(harness *h, int slot, int kind, int hop, int ok) {
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

static inline label get_label(harness *h, int slot) {
  if (slot <= 0 || slot >= h->caplab) return (label){0, -1, 0};
  return h->lab[slot];
}

static inline int new_val(harness *h, int kind, int hop, int ok) {
  int slot = sp_vals_new(&h->ctx);
  if (slot == SP_NOVAL) abort();
  set_label(h, slot, kind, hop, ok);
  return slot;
}

/* A string result: bytes and length, as the dispatcher hands them over. */
#define RES_STR(field, s) (field = (s), field##_len = (int)strlen(field))

static inline void harness_init(harness *h, const world *wd) {
  memset(h, 0, sizeof *h);
  if (sp_engine_init(&h->ctx) != 0) abort();
  char err[128];
  /* virtual clock: the test moves time, so stage times are exact */
  if (sp_clock_set_virtual(&h->ctx, 1, err, sizeof err) != 0) abort();
  h->wd = *wd;
  for (int i = 0; i < J_N; i++) h->fn[i] = new_val(h, V_FN, -1, 1);
  h->qctx = new_val(h, V_FN, -1, 1);
  h->policy = sp_policy_new();
  sp_policy_class(h->policy, "io", SP_FULL, 0, 0);
  sp_policy_tool(h->policy, "search", "io", 1.0);
  sp_policy_class(h->policy, "aux", SP_FULL, 0, 0);
  sp_policy_tool(h->policy, "fetch", "aux", 0.5);
}

/* Turn action speculation on for the windows made from now on. */
static inline void harness_actspec(harness *h, int match, int trigger, double ev_cost_ms, double ev_latency_ms) {
  h->pf = sp_prefetch_new(match, trigger, ev_cost_ms, ev_latency_ms, MAXP);
  if (!h->pf) abort();
}

static inline void harness_free(harness *h) {
  for (int i = 0; i < J_N; i++) sp_vals_unref(&h->ctx, h->fn[i]);
  sp_vals_unref(&h->ctx, h->qctx);
  sp_counts c;
  sp_ctx_counts(&h->ctx, &c);
  CHECK(c.values == 0, "every value released at the end (%d left)", c.values);
  CHECK(c.tasks == 0, "every job reaped at the end (%d left)", c.tasks);
  CHECK(c.windows == 0, "no window left (%d)", c.windows);
  sp_ctx_shutdown(&h->ctx);
  sp_policy_free(h->policy);
  sp_prefetch_free(h->pf);
  free(h->lab);
}

static inline void advance_clock(harness *h, double ms) { h->ctx.timers.vnow += (uint64_t)(ms * 1e6); }

static inline sp_window *window_new(harness *h, int mode, int k, int m, int launch) {
  sp_window_cfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.mode = mode;
  cfg.k = k;
  cfg.m = m;
  cfg.max_hops = 64;
  cfg.spec_launch = launch;
  cfg.policy = h->policy;
  cfg.prefetch = h->pf;
  char err[256];
  sp_window *w = sp_window_new(&h->ctx, &cfg, err, sizeof err);
  CHECK(w != NULL, "window: %s", err);
  if (!w) abort();
  sp_window_fns f = {h->fn[J_START], h->fn[J_ADVANCE], h->fn[J_CALL], h->fn[J_WARMUP],
                     h->fn[J_VERIFY], h->fn[J_SPEC], h->pf ? h->fn[J_PFCALL] : 0, h->qctx};
  CHECK(sp_window_set_fns(w, &f, err, sizeof err) == 0, "set_fns: %s", err);
  return w;
}


static inline sp_window_stats stats_of(const sp_window *w) {
  sp_window_stats st;
  sp_window_stats_get(w, &st);
  return st;
}

/* A job's kind, -1 when its function slot is not the adapter's for it. */
static inline int job_kind(harness *h, sp_task *t) {
  const sp_jobcall *c = sp_job_call(t);
  if (c->kind < 0 || c->kind >= J_N || c->fn != h->fn[c->kind] || c->qctx != h->qctx) return -1;
  return c->kind;
}

/* The state a job acts for: its node's (advance: the parent's, plus one;
   a predicted call: its args). */
static inline label job_label(harness *h, sp_task *t) {
  const sp_jobcall *c = sp_job_call(t);
  int k = job_kind(h, t);
  if (k == J_START) return (label){V_STATE, 0, 1};
  if (k == J_ADVANCE) {
    label l = get_label(h, c->state);
    return (label){V_STATE, l.hop + 1, l.ok};
  }
  if (k == J_PFCALL) return get_label(h, c->args);
  return get_label(h, c->actx);
}

/* The state a start or advance job builds: its hop, and whether it is on
   the true path (the real observation, or the right candidate). */
static inline label step_state(harness *h, sp_task *t) {
  const sp_jobcall *c = sp_job_call(t);
  if (job_kind(h, t) == J_START) return (label){V_STATE, 0, 1};
  label st = get_label(h, c->state);
  label obs = get_label(h, c->obs);
  label cands = get_label(h, c->cands);
  int good;
  if (obs.kind == V_OBS) {
    good = st.ok && obs.ok && obs.hop == st.hop;
  } else {
    /* the rank: 1-based, 0 for a plain single value */
    int rank = c->rank > 0 ? c->rank - 1 : 0;
    good = st.ok && cands.ok && st.hop >= 0 && st.hop < MAXH && rank == h->wd.right[st.hop];
  }
  return (label){V_STATE, c->hop, good};
}

/* The canonical args the step of a state decides (off the true path the
   model decides something else). */
static inline const char *decided_key(char *buf, size_t n, int hop, int ok) {
  snprintf(buf, n, "{\"q\":\"hop %d%s\"}", hop, ok ? "" : " (wrong path)");
  return buf;
}

/* The fake predictor, as the adapter calls it when a step starts (the job
   is ctx->sched->running): each prediction's args are labelled with whether they
   are the call the step will decide on the true path. */
static inline void predict_step(harness *h, sp_task *t) {
  label s = step_state(h, t);
  if (s.hop >= h->wd.nhops && !h->wd.pred_final) return;
  char key[64];
  for (int i = 0; i < h->wd.npred; i++) {
    const wpred *p = &h->wd.pred[i];
    /* right args under another tool are still another call */
    int same = strcmp(p->tool, "search") == 0 && p->right;
    const char *k = p->right ? decided_key(key, sizeof key, s.hop, s.ok) : "{\"q\":\"elsewhere\"}";
    int slot = new_val(h, V_ARGS, s.hop, same && s.ok);
    h->predictions += sp_window_predict(&h->ctx, p->tool, strlen(p->tool), k, strlen(k), p->conf, p->tool_conf, p->hint,
                                      slot);
  }
  sp_window_predicted(&h->ctx);
}

/* Play the dispatcher: run the C callbacks, take every queued job. */
static inline void pump(harness *h) {
  for (;;) {
    if (sp_sched_run_c(&h->ctx)) continue;
    h->ctx.sched->budget = INT_MAX;
    sp_task *t = sp_job_next(&h->ctx);
    if (!t) break;
    if (h->npend == (int)(sizeof h->pend / sizeof h->pend[0])) abort();
    /* a call made for a state off the true path must run as speculative */
    label l = job_label(h, t);
    if (!l.ok && !sp_task_speculative(t)) h->unmarked_wrong++;
    h->pend[h->npend++] = t;
    int kind = job_kind(h, t);
    if (kind >= 0) h->taken[kind]++;
    if (h->pf && h->wd.npred > 0 && (kind == J_START || kind == J_ADVANCE)) predict_step(h, t);
  }
}

/* A streamed response of held job t names its tool: the body calls
   sp_window_tool_name while it runs (ctx->sched->running is t), and the loop gets
   to run before the step ends. */
static inline void stream_name(harness *h, sp_task *t, const char *name) {
  h->ctx.sched->running = t;
  sp_window_tool_name(&h->ctx, name, strlen(name));
  h->ctx.sched->running = NULL;
  pump(h);
}

/* The step of the state at `hop`: an action (search) or the final answer. */
static inline void fill_step(harness *h, sp_jobres *r, int state, int hop, int ok) {
  int final = hop >= h->wd.nhops;
  r->state = state;
  r->step_kind = final ? SP_STEP_FINAL : SP_STEP_ACTION;
  r->step = new_val(h, V_STEP, hop, ok);
  if (!final) RES_STR(r->tool, "search");
  r->t_update = 1.0;                                  /* ms */
  r->hint = SP_HINT_NONE;
  r->can_spec = !h->wd.no_spec;
  if (!final) RES_STR(r->key, decided_key(h->key, sizeof h->key, hop, ok));
  int midx = 0;   /* name-only match: the first prediction of the same tool, 1-based */
  for (int i = 0; h->wd.match_name && !final && !midx && i < h->wd.npred; i++)
    if (strcmp(h->wd.pred[i].tool, "search") == 0) midx = i + 1;
  r->match = midx;
  r->actx = new_val(h, V_ACTX, hop, ok);
}

/* End pending job i with what the fake agent returns for it. */
static inline void complete(harness *h, int i) {
  sp_task *t = h->pend[i];
  if (h->pf && h->wd.stream_name && sp_task_state(t) != SP_TASK_CANCELLED &&
      (job_kind(h, t) == J_START || job_kind(h, t) == J_ADVANCE) && step_state(h, t).hop < h->wd.nhops)
    stream_name(h, t, "search");   /* pump only appends: t stays at i */
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
    label st = get_label(h, c->state);
    label obs = get_label(h, c->obs);
    label cands = get_label(h, c->cands);
    label s = step_state(h, t);
    if (st.kind != V_STATE || s.hop != st.hop + 1) h->bad_args++;
    if (obs.kind != V_OBS && (cands.kind != V_CANDS || cands.hop != st.hop)) h->bad_args++;
    fill_step(h, &r, new_val(h, V_STATE, s.hop, s.ok), s.hop, s.ok);
    break;
  }
  case J_PFCALL: {
    /* (qctx, tool, args, hop): the predicted call's result is labelled
       like the real call's when its args are the decided ones */
    label a = get_label(h, c->args);
    if (!c->tool || c->tool_len != (int)strlen(c->tool) || a.kind != V_ARGS || c->hop != a.hop) h->bad_args++;
    r.value = new_val(h, V_OBS, a.hop, a.ok);
    break;
  }
  case J_CALL: {
    label a = get_label(h, c->actx);
    if (a.kind != V_ACTX) h->bad_args++;
    r.value = new_val(h, V_OBS, a.hop, a.ok);
    break;
  }
  case J_WARMUP:
    break;
  case J_SPEC: {
    label a = get_label(h, c->actx);
    if (a.kind != V_ACTX) h->bad_args++;
    int m = c->m;
    if (a.hop >= 0 && a.hop < MAXH && h->wd.spec_fails[a.hop]) {
      ok = 0;
      snprintf(msg, sizeof msg, "speculator down at hop %d", a.hop);
      RES_STR(r.error, msg);
      break;
    }
    int n = a.hop >= 0 && a.hop < MAXH && h->wd.ncands[a.hop] ? h->wd.ncands[a.hop] : m;
    r.value = new_val(h, V_CANDS, a.hop, a.ok);
    r.ncands = n;
    for (int j = 0; j < n && j < SP_JOB_MAXCONF; j++) r.conf[j] = 0.9 - 0.1 * j;
    break;
  }
  case J_VERIFY: {
    label a = get_label(h, c->actx);
    label obs = get_label(h, c->obs);
    /* only the head is verified, against its real observation */
    if (!a.ok || !obs.ok || obs.hop != a.hop) h->verify_wrong++;
    if (a.hop >= 0 && a.hop < MAXH && h->wd.verify_fails[a.hop]) {
      ok = 0;
      RES_STR(r.error, "verifier crashed");
      break;
    }
    int nkids = c->nkids;
    int raw = c->raw != 0;
    int right = a.hop >= 0 && a.hop < MAXH ? h->wd.right[a.hop] : -1;
    int idx = right >= 0 && right < nkids ? right + 1 : 0;
    if (raw) idx = right == 0 ? -1 : 0;
    r.accepted = idx;
    RES_STR(r.reason, idx ? "same observation" : "different observation");
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
static inline int find(harness *h, int kind, int hop) {
  for (int i = 0; i < h->npend; i++) {
    sp_task *t = h->pend[i];
    if (sp_task_state(t) == SP_TASK_CANCELLED || job_kind(h, t) != kind) continue;
    if (hop < 0 || job_label(h, t).hop == hop) return i;
  }
  return -1;
}

/* Pump, then end the oldest job of that kind at that hop; 0 if none. */
static inline int run_one(harness *h, int kind, int hop, double ms) {
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
static inline sp_window *begin(harness *h, const world *wd, int mode, int k, int m, int launch) {
  harness_init(h, wd);
  sp_window *w = window_new(h, mode, k, m, launch);
  sp_window_start(w, NULL);
  CHECK(run_one(h, J_START, 0, 2), "the window starts with one start job");
  return w;
}

/* Nodes in the tree under n (n included). */
static inline int tree_size(const sp_node *n) {
  if (!n) return 0;
  int s = 1;
  for (int i = 0; i < n->nkids; i++) s += tree_size(n->kids[i]);
  return s;
}

static inline void check_bound(harness *h, sp_window *w, int k) {
  if (w->status != SP_WIN_RUNNING) return;
  if (k > 0) CHECK(w->live <= k, "live threads %d <= k %d", w->live, k);
  CHECK(tree_size(w->head) <= w->live, "the tree (%d nodes) is counted in live (%d)", tree_size(w->head),
        w->live);
}

/* Run to the end in FIFO order (or random with a seed), checking k. */
static inline void run_all(harness *h, sp_window *w, int k, uint64_t seed) {
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
    advance_clock(h, kind == J_CALL || kind == J_PFCALL ? 10 : kind == J_SPEC ? 3 : kind == J_VERIFY ? 0.5 : 2);
    complete(h, i);
  }
  CHECK(0, "the window did not finish");
}

/* The committed trajectory is the sequential one: hop i's step and real
   observation, both on the true path, then the final answer. */
static inline void check_trajectory(harness *h, sp_window *w, int nhops) {
  CHECK(sp_window_status(w) == SP_WIN_DONE, "window done (status %d: %s)", sp_window_status(w),
        sp_window_error(w));
  CHECK(sp_window_nhops(w) == nhops, "%d committed hops, want %d", sp_window_nhops(w), nhops);
  for (int i = 0; i < sp_window_nhops(w); i++) {
    sp_hop_info hi;
    sp_window_hop(w, i, &hi);
    label sl = get_label(h, hi.step_ref), ol = get_label(h, hi.obs_ref);
    CHECK(sl.kind == V_STEP && sl.hop == i && sl.ok, "hop %d: its step is the true one", i);
    CHECK(ol.kind == V_OBS && ol.hop == i && ol.ok, "hop %d: its observation is the real one", i);
    if (hi.spec == SP_SPEC_ACCEPTED) CHECK(hi.rank == h->wd.right[i], "hop %d accepted rank %d", i, hi.rank);
  }
  label al = get_label(h, sp_window_answer_ref(w));
  CHECK(al.kind == V_STEP && al.hop == nhops && al.ok, "the answer is the true final step");
  CHECK(h->unmarked_wrong == 0, "%d wrong-path jobs ran unmarked", h->unmarked_wrong);
  CHECK(h->verify_wrong == 0, "%d verifications off the true path", h->verify_wrong);
  CHECK(h->bad_args == 0, "%d jobs with arguments that do not fit", h->bad_args);
}

/* Free the window, end the jobs it cancelled, check nothing is left. */
static inline void finish_and_free(harness *h, sp_window *w) {
  sp_window_free(w);
  pump(h);
  while (h->npend) {
    CHECK(sp_task_state(h->pend[0]) == SP_TASK_CANCELLED, "a %s job outlived its window",
          JOB_NAMES[job_kind(h, h->pend[0]) < 0 ? 0 : job_kind(h, h->pend[0])]);
    complete(h, 0);
  }
  harness_free(h);
}

/* Free a window in mid-flight (values held, jobs pending): every job is
   cancelled, each still ends unheard, and only the adapter's slots remain. */
static inline void free_midflight(harness *h, sp_window *w) {
  sp_counts c;
  sp_ctx_counts(&h->ctx, &c);
  CHECK(c.windows == 1 && c.values > J_N + 1 && h->npend > 0, "before: one window, values held (%d), jobs pending (%d)",
        c.values, h->npend);
  int pending = h->npend, seen = h->cancelled_seen;
  sp_window_free(w);
  int cancelled = 0;
  for (int i = 0; i < h->npend; i++) cancelled += sp_task_state(h->pend[i]) == SP_TASK_CANCELLED;
  CHECK(cancelled == pending, "all %d jobs cancelled (%d)", pending, cancelled);
  while (h->npend) complete(h, 0);
  CHECK(h->cancelled_seen - seen == pending, "each ended unheard");
  sp_ctx_counts(&h->ctx, &c);
  CHECK(c.windows == 0 && c.tasks == 0, "after: windows %d tasks %d", c.windows, c.tasks);
  CHECK(c.values == J_N + 1, "only the adapter's slots remain (%d)", c.values);
  harness_free(h);
}

static inline world world_all(int nhops, int right) {
  world wd;
  memset(&wd, 0, sizeof wd);
  wd.nhops = nhops;
  for (int i = 0; i < MAXH; i++) wd.right[i] = right;
  return wd;
}

#endif
