/*
 * sp_window_int.h — what the window's files share (sp_window.c: the tree,
 * extension, verify/commit/rollback; sp_window_actspec.c: action speculation;
 * sp_wgroup.c: window groups). Not part of the C/Lua boundary (sp_api.h).
 */
#ifndef SP_WINDOW_INT_H
#define SP_WINDOW_INT_H
#include "sp_sched.h"
#include "sp_policy.h"
#include "sp_actspec.h"
#include "sp_vals.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { PH_ADVANCING, PH_ACTED, PH_FINAL, PH_DEAD };           /* node phase */
enum { TG_NONE, TG_DEFERRED, TG_RUNNING, TG_DONE, TG_FAILED };   /* target call */
enum { SPC_NONE, SPC_RUNNING, SPC_DONE, SPC_FAILED };            /* speculator */

typedef struct sp_node sp_node;

/* A speculative call whose use is not known yet: launched from an
   unverified state or a prediction, until it proves useful or is wasted. */
typedef struct sp_risk {
  double cost;             /* its declared cost (0 when the tool declares none) */
  int on;                  /* a call is at risk */
} sp_risk;

enum { ACT_HELD, ACT_GATED, ACT_RUNNING, ACT_DONE, ACT_FAILED, ACT_PROMOTED };

/* One prediction of a thread's next action (action speculation). */
typedef struct sp_actent {
  sp_node *n;              /* owning thread */
  int tool;                /* policy tool index, -1 unknown */
  char *name;              /* tool name */
  char *key;               /* canonical JSON of the predicted args */
  double conf;             /* predictor's confidence */
  double tool_conf;        /* its confidence in the tool whatever the args, <= 0 unknown */
  int args_ref;            /* value slot of the predicted args */
  int state;               /* PF_* */
  int fresh;               /* not yet offered to the step-start trigger */
  sp_task *job;            /* the early call in flight */
  double t0, t1;           /* ms: started, finished */
  int obs_ref;             /* value slot of its result */
  int counted;             /* included in w->inflight */
  int hint;                /* the script's decision for this call (SP_HINT_* or a decision) */
  sp_risk risk;            /* the early call, at risk of being wasted */
} sp_actent;

struct sp_node {
  /* (the flags are bytes and the fields ordered without holes: a query in
     flight holds one node per live thread, and 2,000-10,000 queries in
     flight hold them all; 352 bytes each before) */
  sp_window *w;            /* owner */
  sp_node *parent;         /* node whose speculation made this one; NULL for the head */
  sp_node **kids;          /* children, in rank order */
  double conf;             /* path confidence: product of candidate confidences */
  int tid;                 /* thread number, for traces (T1, T2, ...) */
  int hop;                 /* hop index of this node's state */
  int rank;                /* this node's candidate rank among the parent's */
  int nkids, capkids;      /* used / allocated */
  int state_ref;           /* value slot of s_i */
  int actx_ref;            /* value slot of the ctx its tool, speculator and verifier calls share */
  int step_ref;            /* value slot of the step {segment, action} or {final} */
  int obs_ref;             /* value slot of the target's observation */
  int cands_ref;           /* value slot of the speculator's candidate list */
  int ncands;              /* its length */
  int next_cand;           /* next candidate rank to materialise */
  int tool;                /* policy index of the action's tool, -1 unknown */
  int hint;                /* the script's own gate decision for it, -1 none */
  unsigned char phase;     /* PH_* */
  unsigned char tg;        /* TG_* */
  unsigned char tg_spec;   /* the target call was started speculatively */
  unsigned char spc;       /* SPC_* */
  unsigned char spec_slot; /* its speculator holds a thread slot (slot launch) */
  unsigned char cands_raw; /* the speculator returned one plain value (cands_ref is it) */
  unsigned char in_ext;    /* listed in w->ext */
  unsigned char can_spec;  /* its action's tool has a speculator */
  char *err;               /* why the node is dead */
  sp_task *j_adv;          /* update + step in flight */
  sp_task *j_target;       /* target tool call in flight */
  sp_task *j_spec;         /* speculator in flight */
  sp_task *j_verify;       /* verifier in flight */
  sp_task *j_warm;         /* warm-up hook in flight */
  char *tg_err;            /* target error */
  double *confs;           /* candidate confidences */
  char *spec_err;          /* why its speculator failed (NULL: it did not) */
  sp_risk risk;            /* its speculative target call, at risk of being wasted */
  double t_adv0;           /* ms: advance job queued */
  double t_update;         /* ms: update() that built this state */
  double t_seg;            /* ms: step() */
  double t_target0;        /* ms: target job queued */
  double t_target;         /* ms: target duration */
  double t_spec0;          /* ms: speculator job queued */
  double t_spec;           /* ms: speculator duration, -1 none */
  double t_verify0;        /* ms: verifier queued */
  sp_actent *acts;         /* predictions for this thread's step (max_per_step entries) */
  int nact;                /* entries in acts */
  int act_promoted;        /* index of the entry serving as the target, -1 none */
  char *act_names;         /* streamed tool names not yet acted on, each NUL-terminated */
  size_t act_names_len;    /* bytes used in act_names */
  sp_runnable act_kick;    /* fires predictions from the loop */
};

/* A committed hop as the window keeps it until its record is written:
   sp_hop_info's values packed (72 bytes, not 104: every query in flight holds
   one per hop), its reason an offset into the window's reason text. */
typedef struct sp_hop_rec {
  double t_seg, t_spec, t_target, t_update, t_verify;  /* ms, as in sp_hop_info */
  int step_ref, obs_ref;   /* value slots of the step and the observation (0: none, or encoded) */
  int rank, ncands;        /* as in sp_hop_info */
  uint32_t reason;         /* 1 + offset of its reason in w->reasons; 0: none ("") */
  uint32_t enc_end;        /* encoded: where its text ends in the window's traj buffer */
  unsigned char spec;      /* SP_SPEC_* */
  unsigned char promoted;  /* the target result came from the prefetch cache */
  unsigned char update_pending; /* t_update not known yet (new head still advancing) */
} sp_hop_rec;

typedef struct sp_tev_rec {
  sp_tev ev;               /* the event */
  char *detail;            /* owned copy of ev.detail */
} sp_tev_rec;

struct sp_window {
  sp_ctx *ctx;             /* engine */
  int id;                  /* a number naming the window (groups, traces) */
  int tag;                 /* the caller's number for it (sp_window_set_tag) */
  int status;              /* SP_WIN_* */
  sp_window_cfg cfg;       /* configuration (copied) */
  char *error;             /* why it failed */
  int fn[SP_JOB_KINDS];    /* the adapter's function per job kind (slots; SP_NOVAL: none) */
  int qctx_ref;            /* value slot of { __index = the query's ctx }, the step ctx metatable */
  sp_node *head;           /* the verified node */
  int live;                /* live nodes plus speculator reservations */
  int round;               /* window mode: threads created this round */
  int next_tid;            /* next thread number */
  int answer_ref;          /* value slot of the final step */
  sp_node **ext;           /* nodes that may extend the window */
  int next, capext;        /* used / allocated */
  sp_hop_rec *hops;        /* committed hops */
  int nhops, caphops;      /* used / allocated */
  sp_hop_rec scratch;      /* the record in use when the trajectory is dropped */
  sp_buf reasons;          /* the hops' reasons, each NUL-terminated (sp_hop_rec.reason) */
  uint32_t last_reason;    /* the latest reason's sp_hop_rec.reason: a repeat shares it */
  int last_scratch;        /* the latest record is scratch, not hops[nhops-1] */
  double std_acc;          /* sum of completed records' t_seg + t_target + t_update */
  sp_window_stats st;      /* counters and timings */
  double t0;               /* ms: start, on the engine clock (traces) */
  uint64_t t0_ns;          /* ns: start; now_ms() counts from here */
  double inflight;         /* speculative target calls in flight (budget) */
  double at_risk;          /* cost of speculative calls whose use is not yet known */
  sp_task *waiter;         /* the task to resume when done */
  sp_wgroup *group;        /* or the group to report to */
  sp_window *gnext;        /* link in the group's finished list */
  sp_op wait_op;           /* links waiter's cancellation to us */
  sp_runnable kick;        /* deferred work that needs the Lua state */
  sp_rgroup rgroup;        /* its ready-queue entries (jobs, kicks) as one group */
  /* the target result of thread n is in (its own call or a promoted
     prediction; res holds the observation when ok): the window's reaction,
     handed to the action speculation it calls, which calls nothing of it */
  void (*target_done)(sp_window *w, sp_node *n, int ok, const sp_jobres *res, const char *err);
  int kick_action;         /* KICK_* */
  int freed;               /* Lua released it: free once refs are gone */
  sp_tev_rec *tev;         /* trace events */
  int ntev, captev;        /* used / allocated */
  sp_window *prev, *next_w; /* live windows of the context */
  sp_buf traj;             /* encoded hops' JSON, comma-separated (cfg.encode_trajectory) */
  int nenc;                /* hops encoded: 0 .. nenc-1 */
  unsigned char enc_stopped; /* a hop could not be encoded: the rest keep their values */
  unsigned char enc_queued;  /* in ctx's list of windows with hops to encode */
  sp_window *enc_prev, *enc_next; /* links in that list */
  sp_deadline *deadline;   /* armed at start when cfg.timeout_ms > 0, NULL otherwise or once gone */
};

enum { KICK_NONE, KICK_START, KICK_FREE };   /* deferred work of a window (kick_action) */

/* What the window unit keeps per engine context (ctx->windows), made
   with the first window; at shutdown every window is cancelled, then the
   pool freed. */
typedef struct sp_windows {
  sp_window *live;         /* live windows, for shutdown */
  sp_node *node_pool;      /* freed node structs kept for reuse (linked by parent) */
  int nnode_pool;          /* entries in node_pool */
  int next_id;             /* last window id handed out */
  /* windows with committed hops whose step and observation Lua has not yet
     encoded (sp_window_cfg.encode_trajectory), oldest first */
  sp_window *enc_head, *enc_tail;
  int enc_pending;         /* windows in that list: Lua reads it after each job */
} sp_windows;

/* ---- small helpers, shared ------------------------------------------------ */

/* A hook reacts at one instant: the scheduler reads the clock once per
   hook (ctx->sched->hook_now), and every timestamp the reaction takes uses it. */
static inline double now_ms(sp_window *w) {
  /* ms since the window started, from integer ns: a duration comes out the
     same whatever the absolute time (under the virtual clock, however far
     other queries have moved it) */
  uint64_t ns = w->ctx->sched->hook_clock ? w->ctx->sched->hook_now : sp_timers_now(&w->ctx->timers);
  return (double)(int64_t)(ns - w->t0_ns) / 1e6;
}

static inline char *dupstr(const char *s) {
  if (!s) s = "";
  size_t n = strlen(s);
  char *d = malloc(n + 1);
  if (d) memcpy(d, s, n + 1);
  return d;
}

/* A reference of the window's (or of a job it fills) to a stored value. */
static inline int keep(sp_window *w, int slot) { return sp_vals_ref(w->ctx, slot); }

/* Drop the window's reference to a stored value (no Lua state needed). */
static inline void unref(sp_window *w, int *slot) {
  sp_vals_release(w->ctx, *slot);
  *slot = SP_NOVAL;
}


static inline int is_speculative(sp_window *w, sp_node *n) { return n != w->head; }


/* Speculative calls in flight (the budget the gate checks). */
static inline void inflight_add(sp_window *w, int delta) { w->inflight += delta; }

/* Speculative cost is "at risk" from launch until the call's state is
   verified (it was useful) or discarded (it was wasted); the gate counts it
   against the wasted-cost budget, so waste can never exceed the budget. */
static inline void risk_take(sp_window *w, sp_risk *r, double cost) {
  r->on = 1;
  r->cost = cost > 0 ? cost : 0;
  w->at_risk += r->cost;
}

/* Every discarded call counts, whether or not its tool declares a cost. */
static inline void risk_wasted(sp_window *w, sp_risk *r) {
  if (!r->on) return;
  w->at_risk -= r->cost;
  w->st.wasted_calls += 1;
  w->st.wasted_cost += r->cost;
  r->on = 0;
  r->cost = 0;
}

static inline void risk_useful(sp_window *w, sp_risk *r) {
  if (!r->on) return;
  w->at_risk -= r->cost;
  r->on = 0;
  r->cost = 0;
}

/* ---- what the window and its action speculation both use ------------------ */

/* A trace event (when cfg.trace). */
static inline void sp_win_tev(sp_window *w, const char *name, char ph, sp_node *n, double start_ms,
                              double end_ms, int flag, const char *detail) {
  if (!w->cfg.trace) return;
  if (w->ntev == w->captev) {
    int cap = w->captev ? w->captev * 2 : 64;
    sp_tev_rec *p = realloc(w->tev, (size_t)cap * sizeof *p);
    if (!p) return;
    w->tev = p;
    w->captev = cap;
  }
  sp_tev_rec *r = &w->tev[w->ntev++];
  r->detail = detail && *detail ? dupstr(detail) : NULL;
  r->ev.name = name;
  r->ev.ph = ph;
  r->ev.tid = n ? n->tid : 0;
  r->ev.hop = n ? n->hop : -1;
  r->ev.ts_us = start_ms * 1000.0;   /* window times count from its start */
  r->ev.dur_us = ph == 'X' ? (end_ms - start_ms) * 1000.0 : 0;
  r->ev.flag = flag;
  r->ev.detail = r->detail ? r->detail : "";
}

/* The window's one way to the gate: every launch from an unverified state
   or a prediction comes through here with its trigger and the script's
   decision for that very call; counted per query and trigger. */
_Static_assert(SP_TRIG_N == 4 && SP_FULL == 2, "sp_window_stats.gate is [SP_TRIG_N][3]");
static inline int sp_win_gate(sp_window *w, int tool, int trigger, int hint) {
  int why = 0;
  int d = sp_policy_gate(w->cfg.policy, tool, trigger, hint, w->inflight,
                         w->st.wasted_cost + w->at_risk, &why);
  w->st.gate[trigger][d]++;
  return d;
}

/* A job of node n running the adapter's function for `kind`; the caller
   fills its arguments (t->call) and starts it. */
static inline sp_task *sp_win_job(sp_window *w, sp_node *n, int kind, sp_task_hook hook, void *ud) {
  sp_task *t = sp_job_new(w->ctx, kind, hook, ud);
  if (!t) return NULL;
  t->run.group = &w->rgroup;
  t->speculative = is_speculative(w, n);
  t->window_node = n;
  t->job_thread = n ? n->tid : 0;
  /* the adapter and the query ctx outlive every job of the window (it
     cancels them before it goes): the job holds no reference of its own */
  t->call.fn = w->fn[kind];
  t->call.qctx = w->qctx_ref;
  return t;
}

/* ---- action speculation (sp_window_actspec.c) ----------------------------------- */
/* The step chose (tool, key): promote a matching prediction, drop the
   orphans. Returns 1 if the node's target is served by a prediction. */
int sp_win_act_settle(sp_window *w, sp_node *n, const char *tool, const char *key, int lossy_idx);
/* The node goes: cancel its predictions (counting waste when asked). */
void sp_win_act_release(sp_window *w, sp_node *n, int count_waste);
/* The node's runnable: fire predictions per the trigger settings. */
void sp_win_act_kick(sp_ctx *ctx, sp_runnable *r);

/* ---- window groups (sp_wgroup.c) ------------------------------------------ */
void sp_win_group_done(sp_window *w);    /* w finished: queue it in its group, wake the driver */
void sp_win_group_unlink(sp_window *w);  /* w is freed: take it off its group's list */

#endif
