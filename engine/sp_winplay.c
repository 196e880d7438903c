/* sp_winplay: the window on recorded stage times (see sp_winplay.h). */
#include "sp_winplay.h"
#include "sp_engine.h"
#include "sp_sched.h"
#include "sp_vals.h"
#include "sp_window.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What ends a job, in the order of their ends at one instant. */
enum { PB_STEP, PB_SPEC, PB_TARGET, PB_VERIFY };

/* A job's end, waiting for its time. */
typedef struct pb_ev {
  double t;          /* when, ms */
  int what;          /* PB_* */
  uint64_t seq;      /* order in which the jobs were taken: the last tie-break */
  sp_task *job;      /* the job */
} pb_ev;

/* The thread of the committed path at one hop (the path has one at a
   time: a thread opened on a wrong guess never advances). */
typedef struct pb_hop {
  int lane;          /* its lane in the timeline */
  double t_start;    /* its step started (after the update that built its state) */
  double t_head;     /* it became the verified thread; INFINITY before */
  double t_step;     /* its step ended: its target call started */
  double t_spec;     /* its speculator started */
  double t_verify;   /* its verifier started */
  int spec_running;  /* its speculator has not returned */
} pb_hop;

/* A thread opened on a wrong guess: drawn as its first step until the
   window discards it. */
typedef struct pb_wrong {
  int lane;          /* its lane */
  size_t parent;     /* the hop whose speculator made it */
  double t0;         /* its step started */
  double seg;        /* the step time it is drawn with (the committed path's next step) */
} pb_wrong;

struct sp_winplay {
  sp_ctx ctx;                /* a private engine context: no Lua, virtual clock */
  sp_policy *policy;         /* every recorded call runs in full */
  sp_window_fns fns;         /* the adapter's function slots (labels: no Lua runs them) */
  /* one run */
  const sp_replay_query *q;  /* the recorded stages */
  size_t m;                  /* candidates per speculator return */
  double now;                /* ms since the first step started */
  pb_ev *ev;                 /* binary min-heap of jobs' ends */
  size_t nev, capev;
  uint64_t seq;              /* next job number */
  sp_task **parked;          /* jobs that never end by themselves (a wrong thread's step, a lost speculator) */
  size_t npark, cappark;
  int *hop_of;               /* window thread -> hop + 1 of its committed-path thread, 0: none */
  size_t caphop_of;
  pb_hop *hop;               /* per hop 0 .. n_hops */
  size_t caphop;
  sp_winplay_tl *tl;        /* the timeline being drawn, or NULL */
  pb_wrong *wrong;           /* wrong-guess threads not yet discarded (timeline) */
  size_t nwrong, capwrong;
  int oom;                   /* an allocation failed: the run is void */
};

/* Grow *arr (of size elements) to hold need entries. */
static int grow(void **arr, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap : 16;
  while (n < need) n *= 2;
  void *p = realloc(*arr, n * size);
  if (!p) return -1;
  *arr = p;
  *cap = n;
  return 0;
}

sp_winplay *sp_winplay_new(void) {
  sp_winplay *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  char err[128];
  if (sp_engine_init(&p->ctx) != 0) {
    free(p);
    return NULL;
  }
  sp_clock_set_virtual(&p->ctx, 1, err, sizeof err);
  p->policy = sp_policy_new();
  if (!p->policy || sp_policy_class(p->policy, "recorded", SP_FULL, 0, 0) < 0 ||
      sp_policy_tool(p->policy, "t", "recorded", 0) < 0) {
    sp_winplay_free(p);
    return NULL;
  }
  int *fn[] = {&p->fns.start, &p->fns.advance, &p->fns.call, &p->fns.warmup, &p->fns.verify,
               &p->fns.speculate, &p->fns.qctx};
  for (size_t i = 0; i < sizeof fn / sizeof fn[0]; i++) {
    *fn[i] = sp_vals_new(&p->ctx);
    if (*fn[i] == SP_NOVAL) {
      sp_winplay_free(p);
      return NULL;
    }
  }
  return p;
}

void sp_winplay_free(sp_winplay *p) {
  if (!p) return;
  int *fn[] = {&p->fns.start, &p->fns.advance, &p->fns.call, &p->fns.warmup, &p->fns.verify,
               &p->fns.speculate, &p->fns.qctx};
  for (size_t i = 0; i < sizeof fn / sizeof fn[0]; i++) sp_vals_unref(&p->ctx, *fn[i]);
  sp_ctx_shutdown(&p->ctx);
  sp_policy_free(p->policy);
  free(p->ev);
  free(p->parked);
  free(p->hop_of);
  free(p->hop);
  free(p->wrong);
  free(p);
}

/* ---- jobs' ends ------------------------------------------------------------ */

static int ev_before(const pb_ev *a, const pb_ev *b) {
  if (a->t != b->t) return a->t < b->t;
  if (a->what != b->what) return a->what < b->what;
  return a->seq < b->seq;
}

/* Job t ends at t_end (ms). */
static void at(sp_winplay *p, double t_end, int what, sp_task *t) {
  if (grow((void **)&p->ev, &p->capev, p->nev + 1, sizeof *p->ev) != 0) {
    p->oom = 1;
    return;
  }
  pb_ev e = {t_end, what, p->seq++, t};
  size_t i = p->nev++;
  while (i > 0) {
    size_t up = (i - 1) / 2;
    if (!ev_before(&e, &p->ev[up])) break;
    p->ev[i] = p->ev[up];
    i = up;
  }
  p->ev[i] = e;
}

static pb_ev pop(sp_winplay *p) {
  pb_ev top = p->ev[0], last = p->ev[--p->nev];
  size_t i = 0, n = p->nev;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && ev_before(&p->ev[c + 1], &p->ev[c])) c++;
    if (!ev_before(&p->ev[c], &last)) break;
    p->ev[i] = p->ev[c];
    i = c;
  }
  if (n) p->ev[i] = last;
  return top;
}

/* A job that ends only when the window cancels it. */
static void park(sp_winplay *p, sp_task *t) {
  if (grow((void **)&p->parked, &p->cappark, p->npark + 1, sizeof *p->parked) != 0) {
    p->oom = 1;
    return;
  }
  p->parked[p->npark++] = t;
}

/* End job t: with res, or unheard (a job the window cancelled). */
static void end(sp_winplay *p, sp_task *t, const sp_jobres *res) {
  sp_jobres none;
  if (!res) {
    memset(&none, 0, sizeof none);
    res = &none;
  }
  sp_job_done(&p->ctx, t, 1, res, NULL, 0);
}

/* ---- the timeline (drawn only when asked for) -------------------------------- */

static void span(sp_winplay *p, int lane, int kind, size_t hop, int speculative, double t0, double t1) {
  sp_winplay_tl *tl = p->tl;
  if (!(t1 > t0)) return;   /* an instant call draws nothing */
  if (tl->n_spans < tl->max_spans) {
    sp_replay_span s = {lane, kind, (int)hop, speculative, t0, t1};
    tl->spans[tl->n_spans] = s;
  }
  tl->n_spans++;
}

/* A span of the committed path's thread at hop: speculative when it
   started before that thread was the verified one. */
static void hop_span(sp_winplay *p, int kind, size_t hop, double t0, double t1) {
  const pb_hop *h = &p->hop[hop];
  span(p, h->lane, kind, hop, !(h->t_head <= t0), t0, t1);
}

static void mark(sp_winplay *p, int lane, int kind, size_t hop, double t) {
  sp_winplay_tl *tl = p->tl;
  if (tl->n_marks < tl->max_marks) {
    sp_replay_mark mk = {lane, kind, (int)hop, t};
    tl->marks[tl->n_marks] = mk;
  }
  tl->n_marks++;
}

/* The window discarded the wrong-guess threads of parent: each is drawn as
   its step up to now, the first marked with verdict (a rollback), the
   others as cancelled. */
static void discard_wrong(sp_winplay *p, size_t parent, int verdict) {
  size_t kept = 0;
  for (size_t i = 0; i < p->nwrong; i++) {
    pb_wrong w = p->wrong[i];
    if (w.parent != parent) {
      p->wrong[kept++] = w;
      continue;
    }
    double stop = w.t0 + w.seg < p->now ? w.t0 + w.seg : p->now;
    span(p, w.lane, SP_REPLAY_TL_MODEL, parent + 1, 1, w.t0, stop);
    mark(p, w.lane, verdict, parent, p->now);
    verdict = SP_REPLAY_TL_CANCEL;
  }
  p->nwrong = kept;
}

/* ---- taking jobs: what each one is for, and when it ends ------------------------ */

static double seg_of(const sp_replay_query *q, size_t hop) {
  return hop < q->n_hops ? q->hops[hop].t_seg : q->final_seg;
}

/* The thread of window thread number tid on the committed path: its hop. */
static int note_thread(sp_winplay *p, int tid, size_t hop) {
  size_t had = p->caphop_of;
  if (tid < 0 || grow((void **)&p->hop_of, &p->caphop_of, (size_t)tid + 1, sizeof *p->hop_of) != 0) {
    p->oom = 1;
    return -1;
  }
  if (p->caphop_of > had) memset(p->hop_of + had, 0, (p->caphop_of - had) * sizeof *p->hop_of);
  p->hop_of[tid] = (int)hop + 1;
  return 0;
}

static size_t hop_of(sp_winplay *p, sp_task *t) {
  int tid = 0;
  sp_task_job(t, NULL, &tid);
  return (size_t)p->hop_of[tid] - 1;
}

/* A step (update + step) for the state at hop, started now. rank: 0 for
   the first step or one from a real observation, else the 1-based rank
   of the guess it starts from. */
static void take_step(sp_winplay *p, sp_task *t, size_t hop, int rank) {
  const sp_replay_query *q = p->q;
  int tid = 0;
  sp_task_job(t, NULL, &tid);
  if (hop == 0) {
    /* the first step: at time 0, on lane 0 */
    if (note_thread(p, tid, 0) != 0) return;
    pb_hop *h = &p->hop[0];
    h->lane = p->tl ? p->tl->lanes++ : 0;
    h->t_start = h->t_head = 0.0;
    at(p, (p->now + 0.0) + seg_of(q, 0), PB_STEP, t);
    return;
  }
  size_t parent = hop - 1;
  const sp_replay_hop *ph = &q->hops[parent];
  double t0 = p->now + ph->t_update;
  if (rank == 0) {
    /* the verified thread goes on from the real result, on its own lane:
       a speculator still running for it was late */
    pb_hop *from = &p->hop[parent];
    if (p->tl && from->spec_running) {
      hop_span(p, SP_REPLAY_TL_SPEC, parent, from->t_spec, p->now);
      mark(p, from->lane, SP_REPLAY_TL_CANCEL, parent, p->now);
    }
    from->spec_running = 0;
    if (p->tl) discard_wrong(p, parent, SP_REPLAY_TL_ROLLBACK);
    if (note_thread(p, tid, hop) != 0) return;
    pb_hop *h = &p->hop[hop];
    memset(h, 0, sizeof *h);
    h->lane = from->lane;
    h->t_start = t0;
    h->t_head = p->now;
    at(p, t0 + seg_of(q, hop), PB_STEP, t);
    return;
  }
  int lane = p->tl ? p->tl->lanes++ : 0;
  if (ph->spec == SP_SPEC_ACCEPTED && ph->rank == rank - 1) {
    if (note_thread(p, tid, hop) != 0) return;
    pb_hop *h = &p->hop[hop];
    memset(h, 0, sizeof *h);
    h->lane = lane;
    h->t_start = t0;
    h->t_head = INFINITY;
    at(p, t0 + seg_of(q, hop), PB_STEP, t);
    return;
  }
  /* a wrong guess: its step never ends */
  if (p->tl) {
    if (grow((void **)&p->wrong, &p->capwrong, p->nwrong + 1, sizeof *p->wrong) != 0) {
      p->oom = 1;
      return;
    }
    pb_wrong w = {lane, parent, t0, seg_of(q, hop)};
    p->wrong[p->nwrong++] = w;
  }
  park(p, t);
}

static void take(sp_winplay *p, sp_task *t) {
  const sp_jobcall *c = sp_job_call(t);
  const sp_replay_query *q = p->q;
  switch (c->kind) {
  case SP_JOB_START:
    take_step(p, t, 0, 0);
    return;
  case SP_JOB_ADVANCE:
    take_step(p, t, (size_t)c->hop, c->rank);
    return;
  case SP_JOB_CALL: {
    size_t hop = hop_of(p, t);
    p->hop[hop].t_step = p->now;
    at(p, p->now + q->hops[hop].t_target, PB_TARGET, t);
    return;
  }
  case SP_JOB_SPECULATE: {
    size_t hop = hop_of(p, t);
    pb_hop *h = &p->hop[hop];
    h->t_spec = p->now;
    h->spec_running = 1;
    /* a speculator with no recorded time never returns */
    if (q->hops[hop].t_spec >= 0) at(p, p->now + q->hops[hop].t_spec, PB_SPEC, t);
    else park(p, t);
    return;
  }
  case SP_JOB_VERIFY: {
    size_t hop = hop_of(p, t);
    p->hop[hop].t_verify = p->now;
    at(p, p->now + q->hops[hop].t_verify, PB_VERIFY, t);
    return;
  }
  default:
    park(p, t);   /* no warm-ups or predictions on recorded stages */
    return;
  }
}

/* Play the loop: run the window's callbacks, take every job it queued. */
static void pump(sp_winplay *p) {
  for (;;) {
    if (sp_sched_run_c(&p->ctx)) continue;
    p->ctx.sched->budget = INT_MAX;
    sp_task *t = sp_job_next(&p->ctx);
    if (!t) break;
    take(p, t);
  }
}

/* ---- ending jobs: the results the recording implies ------------------------------- */

static void finish_job(sp_winplay *p, const pb_ev *e) {
  sp_task *t = e->job;
  if (sp_task_state(t) == SP_TASK_CANCELLED) {
    end(p, t, NULL);
    return;
  }
  const sp_replay_query *q = p->q;
  const sp_jobcall *c = sp_job_call(t);
  size_t hop = hop_of(p, t);
  pb_hop *h = &p->hop[hop];
  sp_jobres r;
  memset(&r, 0, sizeof r);
  switch (e->what) {
  case PB_STEP:
    if (p->tl) hop_span(p, SP_REPLAY_TL_MODEL, hop, h->t_start, p->now);
    r.step_kind = hop == q->n_hops ? SP_STEP_FINAL : SP_STEP_ACTION;
    if (hop < q->n_hops) {
      r.tool = "t";
      r.tool_len = 1;
      r.can_spec = q->hops[hop].spec != SP_SPEC_NONE;
    }
    r.hint = SP_HINT_NONE;
    r.t_update = hop > 0 && c->kind == SP_JOB_ADVANCE ? q->hops[hop - 1].t_update : 0;
    break;
  case PB_SPEC: {
    if (p->tl) hop_span(p, SP_REPLAY_TL_SPEC, hop, h->t_spec, p->now);
    h->spec_running = 0;
    /* the recorded count of candidates (unknown: m) */
    size_t nc = p->m;
    int rec = q->hops[hop].ncands;
    if (rec > 0 && (size_t)rec < nc) nc = (size_t)rec;
    r.ncands = (int)nc;
    for (size_t i = 0; i < nc && i < SP_JOB_MAXCONF; i++) r.conf[i] = 1.0;
    break;
  }
  case PB_TARGET:
    if (p->tl) hop_span(p, SP_REPLAY_TL_TARGET, hop, h->t_step, p->now);
    break;
  case PB_VERIFY: {
    if (p->tl) hop_span(p, SP_REPLAY_TL_VERIFY, hop, h->t_verify, p->now);
    const sp_replay_hop *rh = &q->hops[hop];
    /* the recorded guess, if it got a thread (candidates get threads in
       rank order: ranks 0 .. nkids - 1) */
    int accepted = rh->spec == SP_SPEC_ACCEPTED && rh->rank < c->nkids ? rh->rank + 1 : 0;
    r.accepted = accepted;
    if (accepted) {
      pb_hop *child = &p->hop[hop + 1];
      child->t_head = p->now;
      if (p->tl) {
        mark(p, child->lane, SP_REPLAY_TL_COMMIT, hop, p->now);
        discard_wrong(p, hop, SP_REPLAY_TL_CANCEL);
      }
    }
    break;
  }
  }
  end(p, t, &r);
}

/* ---- a run ------------------------------------------------------------------------ */

static uint64_t ns_of(double ms) {
  double ns = ms * 1e6;
  return ns < 1.8e19 ? (uint64_t)ns : (uint64_t)1.8e19;
}

int sp_winplay_run(sp_winplay *p, const sp_replay_query *q, int mode, int k, int launch, sp_winplay_tl *tl,
                    double *wall) {
  *wall = NAN;
  p->q = q;
  p->m = q->m >= 1 ? (size_t)q->m : 1;
  p->now = 0;
  p->nev = p->npark = p->nwrong = 0;
  p->seq = 0;
  p->tl = tl;
  p->oom = 0;
  if (grow((void **)&p->hop, &p->caphop, q->n_hops + 1, sizeof *p->hop) != 0) return -1;
  memset(p->hop, 0, (q->n_hops + 1) * sizeof *p->hop);
  if (p->hop_of) memset(p->hop_of, 0, p->caphop_of * sizeof *p->hop_of);
  p->ctx.timers.vnow = 0;
  sp_window_cfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.mode = mode;
  cfg.k = mode == SP_MODE_SEQUENTIAL ? 1 : k;
  cfg.m = (int)p->m;
  cfg.spec_launch = launch == SP_REPLAY_EAGER ? SP_LAUNCH_EAGER : SP_LAUNCH_SLOT;
  cfg.policy = p->policy;
  cfg.drop_trajectory = 1;
  char err[160];
  sp_window *w = sp_window_new(&p->ctx, &cfg, err, sizeof err);
  if (!w) return -1;
  int rc = -1;
  if (sp_window_set_fns(w, &p->fns, err, sizeof err) == 0 && sp_window_start(w, NULL) == 0) {
    pump(p);
    while (sp_window_status(w) == SP_WIN_RUNNING && p->nev > 0 && !p->oom) {
      pb_ev e = pop(p);
      p->now = e.t;
      p->ctx.timers.vnow = ns_of(e.t);
      finish_job(p, &e);
      if (sp_window_status(w) != SP_WIN_RUNNING) break;
      pump(p);
    }
    if (sp_window_status(w) == SP_WIN_DONE && !p->oom) {
      *wall = p->now;
      if (tl) mark(p, p->hop[q->n_hops].lane, SP_REPLAY_TL_ANSWER, q->n_hops, p->now);
      rc = 0;
    }
  }
  /* the window cancels what is left; every job taken still ends, unheard */
  sp_window_free(w);
  while (p->nev > 0) {
    pb_ev e = pop(p);
    end(p, e.job, NULL);
  }
  for (size_t i = 0; i < p->npark; i++) end(p, p->parked[i], NULL);
  p->npark = 0;
  p->q = NULL;
  p->tl = NULL;
  return rc;
}
