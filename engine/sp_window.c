/*
 * The speculation window (SpecHop) — the heart of specula.
 *
 * A query's trajectory is a chain of hops s_i -> (segment, action) ->
 * observation -> s_{i+1}. The window keeps a tree of threads ("nodes"), one
 * per speculative stage of that trajectory:
 *
 *   - The HEAD is the only verified node. Its target tool call runs as a
 *     normal call. Every other node's state was built from a speculator's
 *     guess, so any tool it launches is speculative and asks the eligibility
 *     gate first (full / warmup / forbid; forbid waits for verification).
 *   - Extension: while live threads < k, the best expandable node (highest
 *     path confidence, then shallowest) launches its speculator; each
 *     candidate observation it returns becomes a child node (update + step
 *     on the guessed observation). With m = 1 this is exactly Algorithm 1.
 *   - Verification: only the head is verified, when its target result is
 *     back. The verifier checks the head's children in rank order; the first
 *     accepted child becomes the head (commit, the window shifts, the
 *     frontier extends at once). If none is accepted, every child subtree is
 *     discarded — their in-flight model, speculator and tool calls are
 *     cancelled on the wire — and a new head is built from the real
 *     observation (rollback).
 *   - The answer is released only when the head itself is final.
 *
 * Modes: spechop (continuous, k active threads, k may be unbounded or auto),
 * window (the bounded window of SpecHop §3.3: a round creates at most k
 * threads, then waits for it to resolve), sequential (k = 1, no speculator).
 *
 * Lua is reached only through jobs: calls this file queues and the Lua
 * dispatcher (lua/specula/internal/sched.lua) runs; the agent adapter
 * (lua/specula/internal/protocol.lua) is what they call, and its functions arrive as
 * value slots (sp_window_set_fns). Action speculation lives in
 * sp_window_actspec.c, window groups in sp_wgroup.c; what the three share is
 * sp_window_int.h. A job's hook runs here when
 * the call returns, inside an FFI call: it reads the results from a
 * sp_jobres and keeps Lua values as value-store slots (sp_vals.h), so
 * nothing below the hooks touches the Lua state.
 */
#include "sp_window.h"
#include "sp_window_int.h"
#include "sp_stats.h"
#include "sp_est.h"
#include "sp_vals.h"
#include "sp_buf.h"
#include "sp_json.h"
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static void on_advance(sp_task *t, const sp_jobres *res, int status, void *ud);
static void on_target(sp_task *t, const sp_jobres *res, int status, void *ud);
static void on_spec(sp_task *t, const sp_jobres *res, int status, void *ud);
static void on_verify(sp_task *t, const sp_jobres *res, int status, void *ud);
static void on_warmup(sp_task *t, const sp_jobres *res, int status, void *ud);
static void verify_head(sp_window *w);
static void try_extend(sp_window *w);
static void finish(sp_window *w);
static void fail(sp_window *w, const char *msg);
static void fail_nojob(sp_window *w, const char *what);
static void promote(sp_window *w, sp_node *n);
static sp_hop_rec *last_rec(sp_window *w);
static void complete_rec(sp_window *w, sp_hop_rec *r, double t_update);


/* ---- small helpers ------------------------------------------------------ */

/* prefix + msg, msg cut to at most 400 bytes on a UTF-8 character
   boundary (a reason goes to records and traces: it stays short and valid). */
static char *reason_dup(const char *prefix, const char *msg) {
  if (!msg) msg = "";
  size_t pl = strlen(prefix), ml = strlen(msg);
  if (ml > 400) {
    ml = 400;
    while (ml > 0 && ((unsigned char)msg[ml] & 0xC0) == 0x80) ml--;
  }
  char *s = malloc(pl + ml + 1);
  if (!s) return NULL;
  memcpy(s, prefix, pl);
  memcpy(s + pl, msg, ml);
  s[pl + ml] = '\0';
  return s;
}


static int current_k(sp_window *w) {
  if (w->cfg.mode == SP_MODE_SEQUENTIAL) return 1;
  if (w->cfg.k == SP_K_AUTO) return sp_kauto_k(w->cfg.kauto);
  return w->cfg.k;
}

/* A thread slot is free: fewer than k live threads (and, in window mode,
   fewer than k made in this round); an unbounded k bounds neither. */
static int has_room(sp_window *w) {
  int k = current_k(w);
  if (k == SP_K_UNBOUNDED) return 1;
  if (w->live >= k) return 0;
  if (w->cfg.mode == SP_MODE_WINDOW && w->round >= k) return 0;
  return 1;
}

static void note_live(sp_window *w, int delta) {
  w->live += delta;
  if (w->live > w->st.max_threads) w->st.max_threads = w->live;
}

/* Eager launch: spechop mode unless the run asked for the slot variant. */
static int eager(const sp_window *w) {
  return w->cfg.mode == SP_MODE_SPECHOP && w->cfg.spec_launch == SP_LAUNCH_EAGER;
}

/* A slot-launched speculator reserved its first child's slot; give it back
   (it failed, was cancelled, or its node goes). */
static void spec_unreserve(sp_window *w, sp_node *n) {
  if (!n->spec_slot) return;
  n->spec_slot = 0;
  note_live(w, -1);
}


/* ---- nodes -------------------------------------------------------------- */

/* Node structs are recycled in the unit's pool (ctx->windows), shared by
   the windows of a context (a window makes one or more per hop). */
#define NODE_POOL_MAX 4096

static sp_node *node_alloc(sp_ctx *ctx) {
  sp_windows *ws = ctx->windows;
  sp_node *n = ws->node_pool;
  if (!n) return calloc(1, sizeof *n);
  ws->node_pool = n->parent;
  ws->nnode_pool--;
  memset(n, 0, sizeof *n);
  return n;
}

static void node_release(sp_ctx *ctx, sp_node *n) {
  sp_windows *ws = ctx->windows;
  if (ws->nnode_pool >= NODE_POOL_MAX || ctx->stopping) {
    free(n);
    return;
  }
  n->parent = ws->node_pool;   /* the pool's link */
  ws->node_pool = n;
  ws->nnode_pool++;
}

/* Shutdown, last step: free the recycled node structs, and the state
   unless a window not freed yet still unlinks itself from it. */
static void windows_release(sp_ctx *ctx) {
  sp_windows *ws = ctx->windows;
  while (ws->node_pool) {
    sp_node *n = ws->node_pool;
    ws->node_pool = n->parent;
    free(n);
  }
  ws->nnode_pool = 0;
  if (ws->live) return;   /* a window not freed yet still unlinks itself from the list */
  free(ws);
  ctx->windows = NULL;
}

static const sp_owner windows_owner = { sp_window_cancel_all, NULL, NULL, windows_release };

/* The unit's state, made with the first window (or the first question
   about the encoding queue) and registered with the context. */
static sp_windows *windows_of(sp_ctx *ctx) {
  if (!ctx->windows && (ctx->windows = calloc(1, sizeof *ctx->windows)) != NULL)
    sp_ctx_own(ctx, SP_OWN_WINDOWS, &windows_owner);
  return ctx->windows;
}

static sp_node *node_new(sp_window *w, int hop, sp_node *parent, int rank, double conf) {
  sp_node *n = node_alloc(w->ctx);
  if (!n) return NULL;
  n->w = w;
  n->tid = ++w->next_tid;
  n->hop = hop;
  n->parent = parent;
  n->rank = rank;
  n->conf = conf;
  n->phase = PH_ADVANCING;
  n->state_ref = n->step_ref = n->obs_ref = n->cands_ref = n->actx_ref = SP_NOVAL;
  n->tool = -1;
  n->hint = SP_HINT_NONE;
  n->t_spec = -1;
  n->act_promoted = -1;
  n->act_kick.run = sp_win_act_kick;
  n->act_kick.group = &w->rgroup;
  if (parent) {
    if (parent->nkids == parent->capkids) {
      int cap = parent->capkids ? parent->capkids * 2 : 2;
      sp_node **p = realloc(parent->kids, (size_t)cap * sizeof *p);
      if (!p) {
        node_release(w->ctx, n);
        return NULL;
      }
      parent->kids = p;
      parent->capkids = cap;
    }
    parent->kids[parent->nkids++] = n;
  }
  return n;
}

static void ext_add(sp_window *w, sp_node *n) {
  if (n->in_ext) return;
  if (w->next == w->capext) {
    int cap = w->capext ? w->capext * 2 : 8;
    sp_node **p = realloc(w->ext, (size_t)cap * sizeof *p);
    if (!p) return;
    w->ext = p;
    w->capext = cap;
  }
  w->ext[w->next++] = n;
  n->in_ext = 1;
}

static void ext_remove(sp_window *w, sp_node *n) {
  if (!n->in_ext) return;
  for (int i = 0; i < w->next; i++) {
    if (w->ext[i] == n) {
      w->ext[i] = w->ext[--w->next];
      break;
    }
  }
  n->in_ext = 0;
}

/* Cancel a job this node owns; counts what was thrown away on the wire. */
static void cancel_job(sp_window *w, sp_node *n, sp_task **slot, const char *kind, int *counter) {
  sp_task *t = *slot;
  if (!t) return;
  *slot = NULL;
  sp_task_cancel(t);
  if (counter) (*counter)++;
  sp_win_tev(w, "cancel", 'i', n, now_ms(w), 0, 0, kind);
}

/* What every node leaving the window releases: its warm-up, its slot in
   the extension list, its Lua values and its memory. */
static void node_free(sp_window *w, sp_node *n) {
  cancel_job(w, n, &n->j_warm, "warmup", NULL);
  ext_remove(w, n);
  unref(w, &n->state_ref);
  unref(w, &n->step_ref);
  unref(w, &n->obs_ref);
  unref(w, &n->cands_ref);
  unref(w, &n->actx_ref);
  free(n->kids);
  free(n->confs);
  free(n->err);
  free(n->tg_err);
  free(n->spec_err);
  note_live(w, -1);
  node_release(w->ctx, n);
}

/* Throw a node and its subtree away (rollback, sibling of the accepted
   candidate, or shutdown). */
static void discard(sp_window *w, sp_node *n) {
  sp_win_act_release(w, n, 1);
  for (int i = 0; i < n->nkids; i++) discard(w, n->kids[i]);
  free(n->kids);
  n->kids = NULL;
  n->nkids = 0;
  cancel_job(w, n, &n->j_adv, "model", &w->st.cancelled_model);
  if (n->j_target) {
    if (n->tg_spec) inflight_add(w, -1);
    cancel_job(w, n, &n->j_target, "target", &w->st.cancelled_target);
  }
  if (n->j_spec) {
    cancel_job(w, n, &n->j_spec, "spec", &w->st.cancelled_spec);
    spec_unreserve(w, n);
  }
  cancel_job(w, n, &n->j_verify, "verify", NULL);
  risk_wasted(w, &n->risk);
  w->st.discarded_threads++;
  node_free(w, n);
}

static void discard_kids(sp_window *w, sp_node *n, sp_node *keep) {
  for (int i = 0; i < n->nkids; i++)
    if (n->kids[i] != keep) discard(w, n->kids[i]);
  n->nkids = 0;
}

/* Free a node that leaves the window after its hop was committed. */
static void retire(sp_window *w, sp_node *n) {
  sp_win_act_release(w, n, 1);
  if (n->j_spec) {
    cancel_job(w, n, &n->j_spec, "spec", &w->st.cancelled_spec);
    spec_unreserve(w, n);
  }
  node_free(w, n);
}

/* ---- jobs --------------------------------------------------------------- */


static sp_task *job(sp_window *w, sp_node *n, int kind, sp_task_hook hook) {
  return sp_win_job(w, n, kind, hook, n);
}

/* update(state, step, observation) then step(): from a parent's state with
   either the real observation (obs_ref) or candidate `rank` of cands_ref. */
static int start_advance(sp_window *w, sp_node *n, sp_node *from, int use_obs) {
  sp_task *t = job(w, n, SP_JOB_ADVANCE, on_advance);
  if (!t) return -1;
  sp_jobcall *c = &t->call;
  c->state = keep(w, from->state_ref);
  c->step = keep(w, from->step_ref);
  if (use_obs) {
    c->obs = keep(w, from->obs_ref);
  } else {
    c->cands = keep(w, from->cands_ref);
    c->rank = from->cands_raw ? 0 : n->rank + 1;
  }
  c->hop = n->hop;
  n->j_adv = t;
  n->t_adv0 = now_ms(w);
  w->st.model_calls++;
  sp_job_start(t);
  return 0;
}

static void start_target(sp_window *w, sp_node *n) {
  sp_task *t = job(w, n, SP_JOB_CALL, on_target);
  if (!t) {
    fail_nojob(w, "starting a tool call");
    return;
  }
  /* the adapter sets ctx.speculative from the job's flag when it runs
     (a promotion while it is queued clears the flag) */
  t->call.actx = keep(w, n->actx_ref);
  n->j_target = t;
  n->tg = TG_RUNNING;
  n->tg_spec = is_speculative(w, n);
  if (n->tg_spec) {
    inflight_add(w, +1);
    w->st.speculative_launches++;
    risk_take(w, &n->risk, sp_policy_tool_cost(w->cfg.policy, n->tool));
  }
  n->t_target0 = now_ms(w);
  w->st.target_calls++;
  sp_job_start(t);
}

/* The warm-up hook of a deferred call: it passes the gate too (for the
   same call, as a warm-up), so no decision path skips the choke point. */
static void start_warmup(sp_window *w, sp_node *n) {
  if (sp_win_gate(w, n->tool, SP_TRIG_WARMUP, n->hint) < SP_WARMUP) return;
  sp_task *t = job(w, n, SP_JOB_WARMUP, on_warmup);
  if (!t) return;
  t->call.actx = keep(w, n->actx_ref);
  n->j_warm = t;
  w->st.warmup_calls++;
  sp_job_start(t);
}

static void start_spec(sp_window *w, sp_node *n) {
  sp_task *t = job(w, n, SP_JOB_SPECULATE, on_spec);
  if (!t) {
    /* returning with the node unchanged would make try_extend pick it
       again forever */
    fail_nojob(w, "starting a speculator");
    return;
  }
  t->call.actx = keep(w, n->actx_ref);
  t->call.m = w->cfg.m;
  t->call.timeout_ms = w->cfg.spec_timeout_ms;
  n->j_spec = t;
  n->spc = SPC_RUNNING;
  n->t_spec0 = now_ms(w);
  w->st.spec_calls++;
  if (!eager(w)) {
    note_live(w, +1); /* reserve the first child's slot */
    n->spec_slot = 1;
  }
  if (w->cfg.mode == SP_MODE_WINDOW) w->round++;
  sp_job_start(t);
}

/* The target call of a node: run it, or ask the gate if the node is not
   verified. Deferred calls start when the node becomes the head. */
static void launch_target(sp_window *w, sp_node *n) {
  if (!is_speculative(w, n)) {
    start_target(w, n);
    return;
  }
  int d = sp_win_gate(w, n->tool, SP_TRIG_TARGET, n->hint);
  if (d == SP_FULL) {
    start_target(w, n);
    return;
  }
  n->tg = TG_DEFERRED;
  w->st.deferred++;
  sp_win_tev(w, "deferred", 'i', n, now_ms(w), 0, d, d == SP_WARMUP ? "warmup" : "forbid");
  if (d == SP_WARMUP) start_warmup(w, n);
}

/* ---- job hooks (loop context) ------------------------------------------- */

static void on_advance(sp_task *t, const sp_jobres *res, int status, void *ud) {
  sp_node *n = ud;
  sp_window *w = n->w;
  n->j_adv = NULL;
  double end = now_ms(w);
  if (status != SP_TASK_DONE) {
    n->phase = PH_DEAD;
    n->err = dupstr(sp_task_error(t));
    sp_win_tev(w, "model", 'X', n, n->t_adv0, end, 0, "error");
    if (n == w->head) fail(w, n->err);
    return;
  }
  n->can_spec = res->can_spec != 0;
  n->actx_ref = keep(w, res->actx);
  /* update() is timed inside Lua; the step gets the rest of the job's time,
     queueing included, so stage times add up to what the loop saw. */
  n->t_update = res->t_update;
  n->t_seg = (end - n->t_adv0) - n->t_update;
  if (n->t_seg < 0) n->t_seg = 0;
  int final = res->step_kind == SP_STEP_FINAL;
  const char *tool = res->tool;   /* NUL-terminated: the bytes of a Lua string */
  n->tool = tool ? sp_policy_tool_index(w->cfg.policy, tool, (size_t)res->tool_len) : -1;
  n->hint = res->hint;
  n->step_ref = keep(w, res->step);
  n->state_ref = keep(w, res->state);
  sp_win_tev(w, "model", 'X', n, end - n->t_seg, end, 0, "");
  /* The hop record of the head's predecessor waits for this update time. */
  if (n == w->head && last_rec(w) && last_rec(w)->update_pending) {
    complete_rec(w, last_rec(w), n->t_update);
  } else if (n == w->head && w->st.hops == 0) {
    w->st.init_ms = n->t_update;
  }
  int served = 0;
  if (w->cfg.prefetch) {
    /* the strings live until the hook returns (Lua holds them) */
    const char *pkey = res->key;
    served = sp_win_act_settle(w, n, final ? NULL : tool, final ? NULL : (pkey ? pkey : ""), res->match);
  }
  if (w->cfg.prefetch) sp_prefetch_observe(w->cfg.prefetch, -1, -1, n->t_seg);
  if (final) {
    n->phase = PH_FINAL;
    if (n == w->head) finish(w);
    return;
  }
  if (w->cfg.max_hops > 0 && n->hop >= w->cfg.max_hops) {
    n->phase = PH_DEAD;
    char msg[96];
    snprintf(msg, sizeof msg, "the trajectory exceeded max_hops (%d) without a final answer",
             w->cfg.max_hops);
    n->err = dupstr(msg);
    if (n == w->head) fail(w, n->err);
    return;
  }
  n->phase = PH_ACTED;
  if (served) {
    /* The head's result is already in: verify now (the node may be gone
       after this, so nothing below may touch it). */
    if (n->tg == TG_DONE && n == w->head) {
      verify_head(w);
      return;
    }
  }
  /* The speculator goes first: when both return at once (cached or local
     tools) its guess must be in before the target's result is verified. */
  if (w->fn[SP_JOB_SPECULATE] != SP_NOVAL && n->can_spec) {
    if (!eager(w)) ext_add(w, n);
    else if (current_k(w) != 1) start_spec(w, n);   /* k = 1 could never use a guess */
  }
  try_extend(w);
  if (w->status != SP_WIN_RUNNING) return;
  if (!served) launch_target(w, n);
}

/* The target result of a node is in (from its own call or a promoted
   prediction); res holds the observation when ok. */
static void target_done(sp_window *w, sp_node *n, int ok, const sp_jobres *res, const char *err) {
  double end = now_ms(w);
  n->t_target = end - n->t_target0;
  if (n->tg_spec) inflight_add(w, -1);
  sp_win_tev(w, "target", 'X', n, n->t_target0, end, n->tg_spec, ok ? "" : "error");
  if (!ok) {
    n->tg = TG_FAILED;
    n->tg_err = dupstr(err);
    if (n == w->head) fail(w, n->tg_err);
    return;
  }
  if (res) n->obs_ref = keep(w, res->value);
  n->tg = TG_DONE;
  if (n == w->head) verify_head(w);
}

static void on_target(sp_task *t, const sp_jobres *res, int status, void *ud) {
  sp_node *n = ud;
  sp_window *w = n->w;
  n->j_target = NULL;
  target_done(w, n, status == SP_TASK_DONE, res, sp_task_error(t));
}

static void on_warmup(sp_task *t, const sp_jobres *res, int status, void *ud) {
  (void)res;
  sp_node *n = ud;
  n->j_warm = NULL;
  sp_win_tev(n->w, "warmup", 'i', n, now_ms(n->w), 0, status == SP_TASK_DONE, "");
}

static void on_spec(sp_task *t, const sp_jobres *res, int status, void *ud) {
  sp_node *n = ud;
  sp_window *w = n->w;
  n->j_spec = NULL;
  double end = now_ms(w);
  n->t_spec = end - n->t_spec0;
  sp_win_tev(w, "spec", 'X', n, n->t_spec0, end, 0, status == SP_TASK_DONE ? "" : "error");
  int ncands = 0;
  if (status != SP_TASK_DONE) {
    n->spec_err = reason_dup("speculator failed: ", sp_task_error(t));
  } else {
    ncands = res->ncands;
    n->cands_raw = ncands == -1;
    if (n->cands_raw) ncands = 1;
    if (ncands > w->cfg.m) ncands = w->cfg.m;
    if (ncands < 0) ncands = 0;
  }
  if (status != SP_TASK_DONE || ncands == 0) {
    if (!n->spec_err) n->spec_err = dupstr("speculator failed: it returned no candidate");
    n->spc = SPC_FAILED;
    spec_unreserve(w, n);
    ext_remove(w, n);
    try_extend(w);
    return;
  }
  n->confs = malloc((size_t)ncands * sizeof *n->confs);
  if (!n->confs) {
    n->spc = SPC_FAILED;
    spec_unreserve(w, n);
    ext_remove(w, n);
    fail_nojob(w, "keeping the speculator's candidates");
    return;
  }
  for (int i = 0; i < ncands; i++) {
    double c = i < SP_JOB_MAXCONF ? res->conf[i] : 0;
    n->confs[i] = c >= 0 && c <= 1 ? c : 0;
  }
  n->cands_ref = keep(w, res->value);
  n->ncands = ncands;
  n->spc = SPC_DONE;
  if (!n->spec_slot) {
    /* eager launch: the candidates wait for free slots, best first */
    n->next_cand = 0;
    ext_add(w, n);
    try_extend(w);
    return;
  }
  /* The first candidate takes the slot reserved at launch. */
  n->spec_slot = 0;
  n->next_cand = 1;
  sp_node *c = node_new(w, n->hop + 1, n, 0, n->conf * n->confs[0]);
  if (!c || start_advance(w, c, n, 0) != 0) {
    fail_nojob(w, "creating a speculative thread");
    return;
  }
  if (n->next_cand >= n->ncands) ext_remove(w, n);
  try_extend(w);
}

/* ---- extension ---------------------------------------------------------- */

/* Pick the best pending extension: a node that may launch its speculator,
   or a node with candidates not yet materialised. Higher path confidence
   first, then shallower, then older. */
static void try_extend(sp_window *w) {
  if (w->status != SP_WIN_RUNNING || w->fn[SP_JOB_SPECULATE] == SP_NOVAL) return;
  while (has_room(w)) {
    sp_node *best = NULL;
    double best_p = -1;
    for (int i = 0; i < w->next; i++) {
      sp_node *n = w->ext[i];
      double p;
      if (n->phase != PH_ACTED) continue;
      if (n->spc == SPC_NONE && !eager(w)) p = n->conf;
      else if (n->spc == SPC_DONE && n->next_cand < n->ncands) p = n->conf * n->confs[n->next_cand];
      else continue;
      if (!best || p > best_p || (p == best_p && (n->hop < best->hop ||
                                                  (n->hop == best->hop && n->tid < best->tid)))) {
        best = n;
        best_p = p;
      }
    }
    if (!best) return;
    if (best->spc == SPC_NONE) {
      start_spec(w, best);
    } else {
      int r = best->next_cand++;
      sp_node *c = node_new(w, best->hop + 1, best, r, best->conf * best->confs[r]);
      if (!c) {
        fail_nojob(w, "creating a speculative thread");
        return;
      }
      note_live(w, +1);
      if (w->cfg.mode == SP_MODE_WINDOW) w->round++;
      if (start_advance(w, c, best, 0) != 0) {
        /* a thread with no step in flight would never resolve */
        fail_nojob(w, "creating a speculative thread");
        return;
      }
      if (best->next_cand >= best->ncands) ext_remove(w, best);
    }
  }
}

/* ---- verification, commit, rollback ------------------------------------- */

static const char *hop_reason(const sp_window *w, const sp_hop_rec *r) {
  return r->reason ? w->reasons.data + r->reason - 1 : "";
}

static sp_hop_rec *last_rec(sp_window *w) {
  if (w->last_scratch) return &w->scratch;
  return w->nhops > 0 ? &w->hops[w->nhops - 1] : NULL;
}

/* A record is complete once the update that followed its hop is timed. */
static void complete_rec(sp_window *w, sp_hop_rec *r, double t_update) {
  if (!r || !r->update_pending) return;
  r->t_update = t_update;
  r->update_pending = 0;
  w->std_acc += r->t_seg + r->t_target + r->t_update;
}

/* ---- the trajectory as text (cfg.encode_trajectory) --------------------- */

static void enc_queue(sp_window *w) {
  if (w->enc_queued || w->enc_stopped) return;
  sp_ctx *ctx = w->ctx;
  w->enc_queued = 1;
  w->enc_next = NULL;
  sp_windows *ws = ctx->windows;
  w->enc_prev = ws->enc_tail;
  if (ws->enc_tail) ws->enc_tail->enc_next = w;
  else ws->enc_head = w;
  ws->enc_tail = w;
  ws->enc_pending++;
}

static void enc_unqueue(sp_window *w) {
  if (!w->enc_queued) return;
  sp_windows *ws = w->ctx->windows;
  if (w->enc_prev) w->enc_prev->enc_next = w->enc_next;
  else ws->enc_head = w->enc_next;
  if (w->enc_next) w->enc_next->enc_prev = w->enc_prev;
  else ws->enc_tail = w->enc_prev;
  w->enc_prev = w->enc_next = NULL;
  w->enc_queued = 0;
  ws->enc_pending--;
}

int *sp_window_enc_pending(sp_ctx *ctx) {
  sp_windows *ws = ctx ? windows_of(ctx) : NULL;
  return ws ? &ws->enc_pending : NULL;
}

sp_window *sp_window_enc_next(sp_ctx *ctx) {
  sp_window *w = ctx && ctx->windows ? ctx->windows->enc_head : NULL;
  if (w) enc_unqueue(w);
  return w;
}

int sp_window_enc_count(const sp_window *w) { return w ? w->nenc : 0; }

/* Room for `extra` more bytes (and a NUL) of a window's text (its
   trajectory, its reasons), growing by half rather than doubling from
   `first` bytes: every query in flight holds its text until its record is
   written, and a doubled buffer is a quarter empty on average. */
static int text_reserve(sp_buf *b, size_t extra, size_t first) {
  /* offsets are kept in 32 bits (sp_hop_rec.enc_end, .reason): a query whose text
     would pass 4 GB stops encoding and keeps its hops as values */
  if (extra > ((size_t)-1) / 4 - b->len || b->len + extra + 1 > UINT32_MAX) return -1;
  size_t need = b->len + extra + 1;
  if (need <= b->cap) return 0;
  size_t cap = b->cap ? b->cap + b->cap / 2 : first;
  if (cap < need) cap = need;
  char *p = realloc(b->data, cap);
  if (!p) return -1;
  b->data = p;
  b->cap = cap;
  return 0;
}

int sp_window_hop_text(sp_window *w, int i, const char *text, int len) {
  if (!w || w->enc_stopped || i != w->nenc || i >= w->nhops || !text || len <= 0) return -1;
  if (text_reserve(&w->traj, (size_t)len + 1, 256) != 0 || (i > 0 && sp_buf_putc(&w->traj, ',') != 0) ||
      sp_buf_append(&w->traj, text, (size_t)len) != 0) {
    sp_window_enc_stop(w);   /* out of memory: the hop keeps its values */
    return -1;
  }
  sp_hop_rec *r = &w->hops[i];
  r->enc_end = (uint32_t)w->traj.len;
  unref(w, &r->step_ref);
  unref(w, &r->obs_ref);
  w->nenc++;
  return 0;
}

void sp_window_enc_stop(sp_window *w) {
  if (!w) return;
  w->enc_stopped = 1;
  enc_unqueue(w);
}

const char *sp_window_traj_text(const sp_window *w, int i, int j, int *len) {
  if (!w || i < 0 || j > w->nenc || i >= j || !len) return NULL;
  size_t from = i == 0 ? 0 : w->hops[i - 1].enc_end + 1;   /* past the comma */
  size_t to = w->hops[j - 1].enc_end;
  *len = (int)(to - from);
  return w->traj.data + from;
}

/* The hops a window may hold as values before it is queued for encoding:
   cfg.encode_trajectory, fewer when so many windows are live that they
   would together hold more than SP_ENC_HELD_MAX hops (at least one). With
   2,000 queries in flight, sixteen hops each held as Lua tables were ~9 MB
   the collector marked on every cycle and, with its slack, ~12 MB of peak
   memory; encoding them at once cost less CPU than that (bench/README.md,
   the user's path). Up to 256 windows keep the batch of 16. */
#define SP_ENC_HELD_MAX 4096
static int enc_batch(const sp_window *w) {
  int b = w->cfg.encode_trajectory;
  int live = w->ctx->counts.windows;
  if (live > 0 && b > SP_ENC_HELD_MAX / live) b = SP_ENC_HELD_MAX / live > 1 ? SP_ENC_HELD_MAX / live : 1;
  return b;
}

static sp_hop_rec *new_hop(sp_window *w, sp_node *h) {
  if (w->cfg.drop_trajectory) {
    sp_hop_rec *r = &w->scratch;
    memset(r, 0, sizeof *r);
    w->last_scratch = 1;
    r->step_ref = r->obs_ref = SP_NOVAL;
    unref(w, &h->step_ref);
    unref(w, &h->obs_ref);
    r->t_seg = h->t_seg;
    r->t_spec = h->t_spec;
    r->t_target = h->t_target;
    r->rank = -1;
    r->update_pending = 1;
    return r;
  }
  w->last_scratch = 0;
  if (w->nhops == w->caphops) {
    /* a query in flight holds its hops until its record is written: grow
       by half (not double) and never past max_hops + 1, so thousands of
       queries in flight do not each carry a mostly empty array */
    int cap = w->caphops ? w->caphops + w->caphops / 2 : 16;
    if (w->cfg.max_hops > 0 && cap > w->cfg.max_hops + 1) cap = w->cfg.max_hops + 1;
    if (cap <= w->nhops) cap = w->nhops + 1;
    sp_hop_rec *p = realloc(w->hops, (size_t)cap * sizeof *p);
    if (!p) return NULL;
    w->hops = p;
    w->caphops = cap;
  }
  sp_hop_rec *r = &w->hops[w->nhops++];
  memset(r, 0, sizeof *r);
  r->step_ref = h->step_ref;
  r->obs_ref = h->obs_ref;
  h->step_ref = SP_NOVAL; /* the record owns them now */
  h->obs_ref = SP_NOVAL;
  r->t_seg = h->t_seg;
  r->t_spec = h->t_spec;
  r->t_target = h->t_target;
  r->t_update = 0;
  r->rank = -1;
  r->ncands = h->ncands;
  r->promoted = h->act_promoted >= 0;
  r->update_pending = 1;
  /* queued once enc_batch hops wait: a short query is encoded whole with
     its record, a long one holds at most that many hops as values */
  if (w->cfg.encode_trajectory > 0 && w->nhops - w->nenc >= enc_batch(w)) enc_queue(w);
  return r;
}

/* A hop's reason goes into the window's reason text, once for a run of
   hops that give the same one (a verifier mostly says the same few words):
   no allocation per hop. Out of memory, the hop has no reason. */
static void set_reason(sp_window *w, sp_hop_rec *r, const char *reason) {
  r->reason = 0;
  if (w->cfg.drop_trajectory || !reason || !*reason) return;
  sp_buf *b = &w->reasons;
  if (w->last_reason && strcmp(b->data + w->last_reason - 1, reason) == 0) {
    r->reason = w->last_reason;
    return;
  }
  size_t n = strlen(reason) + 1;
  if (text_reserve(b, n, 32) != 0) return;
  memcpy(b->data + b->len, reason, n);
  w->last_reason = r->reason = (uint32_t)b->len + 1;
  b->len += n;
}

/* The head's result is in and no candidate of it will be used: build the
   next head from the real observation. */
static void advance_from_real(sp_window *w, int outcome, const char *reason, double t_verify) {
  sp_node *h = w->head;
  int had_spec = h->nkids > 0 || h->j_spec != NULL;
  if (h->j_spec) {
    cancel_job(w, h, &h->j_spec, "spec", &w->st.cancelled_spec);
    spec_unreserve(w, h);
  }
  discard_kids(w, h, NULL);
  sp_node *n = node_new(w, h->hop + 1, NULL, 0, 1.0);
  if (!n) {
    /* the head stays the head: fail() discards it */
    fail_nojob(w, "building the next state");
    return;
  }
  /* The job takes its arguments (state, step, observation) now, before the
     hop record takes the refs over. */
  w->head = n;
  if (start_advance(w, n, h, 1) != 0) {
    note_live(w, +1);
    retire(w, h);
    fail_nojob(w, "building the next state");
    return;
  }
  sp_hop_rec *r = new_hop(w, h);
  if (r) {
    r->spec = (unsigned char)outcome;
    r->t_verify = t_verify;
    set_reason(w, r, reason);
  }
  w->st.hops++;
  if (had_spec) {
    w->st.rollbacks++;
    sp_win_tev(w, "rollback", 'i', h, now_ms(w), 0, outcome, reason);
  }
  if (outcome == SP_SPEC_REJECTED) w->st.rejected++;
  else if (outcome == SP_SPEC_LATE) w->st.late++;
  else if (outcome == SP_SPEC_ERROR) w->st.spec_errors++;
  sp_est_add(&w->st.est, outcome, h->t_seg, h->t_spec, h->t_target);
  sp_kauto_add(w->cfg.kauto, h->t_seg, h->t_spec, h->t_target);
  if (w->cfg.prefetch) sp_prefetch_observe(w->cfg.prefetch, h->tool, h->t_target, -1);
  if (w->cfg.mode == SP_MODE_WINDOW) w->round = 1;
  retire(w, h);
  /* the new head counts once the old one is gone: the handover is not a
     second live thread (max_threads of k = 1 stays 1) */
  note_live(w, +1);
  try_extend(w);
}

static void commit(sp_window *w, sp_node *child, const char *reason, double t_verify) {
  sp_node *h = w->head;
  discard_kids(w, h, child);
  sp_hop_rec *r = new_hop(w, h);
  if (r) {
    r->spec = SP_SPEC_ACCEPTED;
    r->rank = child->rank;
    r->t_verify = t_verify;
    set_reason(w, r, reason);
    if (child->phase != PH_ADVANCING) complete_rec(w, r, child->t_update);
  }
  w->st.hops++;
  w->st.commits++;
  w->st.accepted++;
  sp_est_add(&w->st.est, SP_SPEC_ACCEPTED, h->t_seg, h->t_spec, h->t_target);
  sp_kauto_add(w->cfg.kauto, h->t_seg, h->t_spec, h->t_target);
  if (w->cfg.prefetch) sp_prefetch_observe(w->cfg.prefetch, h->tool, h->t_target, -1);
  sp_win_tev(w, "commit", 'i', child, now_ms(w), 0, child->rank, reason);
  child->parent = NULL;
  w->head = child;
  retire(w, h);
  promote(w, child);
}

/* A node just became the head: what it deferred or failed while it was
   speculative is redone as a normal call, and its result verified. */
static void promote(sp_window *w, sp_node *n) {
  /* calls made from here on are made for a verified state: queued jobs
     read the flag when they run (the adapter sets ctx.speculative) */
  if (n->j_adv) n->j_adv->speculative = 0;
  if (n->j_target) n->j_target->speculative = 0;
  if (n->tg_spec && n->j_target) inflight_add(w, -1);
  n->tg_spec = 0;
  risk_useful(w, &n->risk);
  if (n->phase == PH_DEAD) {
    fail(w, n->err ? n->err : "thread failed");
    return;
  }
  if (n->phase == PH_FINAL) {
    finish(w);
    return;
  }
  if (n->phase == PH_ACTED) {
    if (n->tg == TG_DEFERRED || n->tg == TG_FAILED) {
      free(n->tg_err);
      n->tg_err = NULL;
      cancel_job(w, n, &n->j_warm, "warmup", NULL);
      start_target(w, n);
    } else if (n->tg == TG_DONE) {
      verify_head(w);
      return;
    }
  }
  try_extend(w);
}

static void verify_head(sp_window *w) {
  sp_node *h = w->head;
  if (w->status != SP_WIN_RUNNING || h->tg != TG_DONE || h->j_verify) return;
  /* Candidates held for a slot (eager launch) take the slots free at this
     instant before the verdict, so it does not depend on whether a commit
     or the target's return was handled first. */
  if (h->spc == SPC_DONE && h->next_cand < h->ncands && has_room(w)) {
    try_extend(w);
    if (w->status != SP_WIN_RUNNING || w->head != h) return;
  }
  if (h->nkids == 0) {
    /* held: an eager speculator's candidates that never got a thread slot
       are as useless as a late guess now */
    int held = h->spc == SPC_DONE && h->next_cand == 0;
    int outcome = h->spc == SPC_RUNNING || held ? SP_SPEC_LATE
                : h->spc == SPC_FAILED ? SP_SPEC_ERROR
                : h->spc == SPC_DONE ? SP_SPEC_REJECTED : SP_SPEC_NONE;
    const char *reason = held ? "speculator result held: no thread slot was free"
                       : outcome == SP_SPEC_LATE ? "speculator slower than the target"
                       : outcome == SP_SPEC_ERROR ? (h->spec_err ? h->spec_err : "speculator failed")
                       : "";
    advance_from_real(w, outcome, reason, 0);
    return;
  }
  sp_task *t = job(w, h, SP_JOB_VERIFY, on_verify);
  if (!t) {
    fail_nojob(w, "starting the verifier");
    return;
  }
  /* the children are the candidates of ranks 0 .. nkids-1, in order */
  sp_jobcall *c = &t->call;
  c->actx = keep(w, h->actx_ref);
  c->cands = keep(w, h->cands_ref);
  c->obs = keep(w, h->obs_ref);
  c->nkids = h->nkids;
  c->raw = h->cands_raw;
  h->j_verify = t;
  h->t_verify0 = now_ms(w);
  sp_job_start(t);
}

static void on_verify(sp_task *t, const sp_jobres *res, int status, void *ud) {
  sp_node *h = ud;
  sp_window *w = h->w;
  h->j_verify = NULL;
  double end = now_ms(w);
  double dt = end - h->t_verify0;
  if (status != SP_TASK_DONE) {
    /* A verifier that raises counts as a failed speculation. */
    char reason[600];
    snprintf(reason, sizeof reason, "verifier error: %.560s", sp_task_error(t));
    sp_win_tev(w, "verify", 'X', h, h->t_verify0, end, 0, reason);
    advance_from_real(w, SP_SPEC_REJECTED, reason, dt);
    return;
  }
  int idx = res->accepted;
  const char *why = res->reason ? res->reason : "";   /* alive until the hook returns */
  sp_win_tev(w, "verify", 'X', h, h->t_verify0, end, idx > 0, why);
  sp_node *child = NULL;
  /* idx: 1-based rank of the accepted candidate, 0 = none, -1 = the single
     plain candidate */
  for (int i = 0; idx != 0 && i < h->nkids; i++)
    if (idx == -1 || h->kids[i]->rank == idx - 1) child = h->kids[i];
  if (child) commit(w, child, why, dt);
  else advance_from_real(w, SP_SPEC_REJECTED, why, dt);
}

/* ---- end of a window ---------------------------------------------------- */

static void deadline_drop(sp_window *w);

static void wake_waiter(sp_window *w) {
  deadline_drop(w);   /* every end of a started window comes here */
  if (w->group) {
    sp_win_group_done(w);
    return;
  }
  sp_task *t = w->waiter;
  if (!t) return;
  w->waiter = NULL;
  sp_op_unlink(&w->wait_op);
  sp_sched_wake(t);
}

static void finish(sp_window *w) {
  sp_node *h = w->head;
  double end = now_ms(w);
  w->status = SP_WIN_DONE;
  w->answer_ref = h->step_ref;
  h->step_ref = SP_NOVAL;
  w->st.final_seg_ms = h->t_seg;
  complete_rec(w, last_rec(w), h->t_update);
  if (w->st.hops == 0) w->st.init_ms = h->t_update;
  w->st.wall_ms = end;
  w->st.standard_ms = w->st.init_ms + w->st.final_seg_ms + w->std_acc;
  sp_win_tev(w, "answer", 'i', h, end, 0, 0, "");
  w->head = NULL;
  retire(w, h);
  w->st.k_last = current_k(w);
  wake_waiter(w);
}

/* A job could not be made: the engine is stopping (a signal), or memory
   ran out. Either way the window ends rather than retrying forever. */
static void fail_nojob(sp_window *w, const char *what) {
  char msg[160];
  snprintf(msg, sizeof msg, "%s %s", w->ctx->stopping ? "interrupted (the engine is stopping):"
           : "out of memory", what);
  fail(w, msg);
}

/* End the query with msg (kept whole: a cut could split a UTF-8 sequence). */
static void fail(sp_window *w, const char *msg) {
  if (w->status != SP_WIN_RUNNING && w->status != SP_WIN_NEW) return;
  free(w->error);
  w->error = dupstr(msg ? msg : "window failed");
  w->status = SP_WIN_FAILED;
  w->st.wall_ms = now_ms(w);
  if (w->head) {
    sp_node *h = w->head;
    w->head = NULL;
    discard(w, h);
  }
  wake_waiter(w);
}

/* ---- public API ---------------------------------------------------------- */

static void kick_run(sp_ctx *ctx, sp_runnable *r);

sp_window *sp_window_new(sp_ctx *ctx, const sp_window_cfg *cfg, char *err, size_t errlen) {
  if (!ctx || !cfg) {
    snprintf(err, errlen, "window: missing context or configuration");
    return NULL;
  }
  if (cfg->mode < SP_MODE_SEQUENTIAL || cfg->mode > SP_MODE_SPECHOP) {
    snprintf(err, errlen, "window: unknown mode %d", cfg->mode);
    return NULL;
  }
  if (cfg->k < SP_K_UNBOUNDED || (cfg->k == SP_K_AUTO && !cfg->kauto)) {
    snprintf(err, errlen, "window: k must be >= 1, unbounded (SP_K_UNBOUNDED) or auto (SP_K_AUTO, with an estimator)");
    return NULL;
  }
  if (cfg->m < 1) {
    snprintf(err, errlen, "window: m must be >= 1");
    return NULL;
  }
  if (!(cfg->timeout_ms >= 0)) {
    snprintf(err, errlen, "window: timeout_ms must be a number of ms >= 0 (0: none)");
    return NULL;
  }
  if (!windows_of(ctx)) {
    snprintf(err, errlen, "window: out of memory");
    return NULL;
  }
  sp_window *w = calloc(1, sizeof *w);
  if (!w) {
    snprintf(err, errlen, "window: out of memory");
    return NULL;
  }
  static const int none = SP_NOVAL;
  w->ctx = ctx;
  w->t0_ns = sp_timers_now(&ctx->timers);   /* do_start restarts it; a window failing before that has a sane wall time */
  w->t0 = (double)w->t0_ns / 1e6;
  w->cfg = *cfg;
  if (w->cfg.mode == SP_MODE_SEQUENTIAL) w->cfg.k = 1;
  if (w->cfg.drop_trajectory) w->cfg.encode_trajectory = 0;   /* nothing is kept to encode */
  sp_buf_init(&w->traj);
  sp_buf_init(&w->reasons);
  for (int i = 0; i < SP_JOB_KINDS; i++) w->fn[i] = none;
  w->qctx_ref = w->answer_ref = none;
  w->kick.run = kick_run;
  w->kick.group = &w->rgroup;
  w->target_done = target_done;
  ctx->counts.windows++;
  sp_windows *ws = ctx->windows;
  w->id = ++ws->next_id;
  /* live windows list */
  sp_window *head = ws->live;
  w->next_w = head;
  if (head) head->prev = w;
  ws->live = w;
  return w;
}

int sp_window_id(const sp_window *w) { return w ? w->id : 0; }
void sp_window_set_tag(sp_window *w, int tag) {
  if (w) w->tag = tag;
}
int sp_window_tag(const sp_window *w) { return w ? w->tag : 0; }

int sp_window_start_in(sp_window *w, sp_wgroup *g) {
  if (!w || !g || w->status != SP_WIN_NEW) return -1;
  w->group = g;
  w->status = SP_WIN_RUNNING;
  w->kick_action = KICK_START;
  sp_sched_enqueue(w->ctx, &w->kick);
  return 0;
}

static void waiter_gone(sp_op *op) {
  sp_window *w = (sp_window *)((char *)op - offsetof(sp_window, wait_op));
  w->waiter = NULL;
  /* Whoever waited for this query is gone (cancelled): stop the query. */
  sp_window_cancel(w);
}

int sp_window_start(sp_window *w, sp_task *waiter) {
  if (!w || w->status != SP_WIN_NEW) return -1;
  w->status = SP_WIN_RUNNING;
  w->waiter = waiter;
  if (waiter) sp_op_link(waiter, &w->wait_op, waiter_gone);
  w->kick_action = KICK_START;
  sp_sched_enqueue(w->ctx, &w->kick);
  return 0;
}

/* FFI: the adapter's functions and the step ctx metatable, as slots. */
int sp_window_set_fns(sp_window *w, const sp_window_fns *f, char *err, size_t errlen) {
  if (!w || !f || w->status != SP_WIN_NEW) {
    snprintf(err, errlen, "window: functions are set once, before the window starts");
    return -1;
  }
  if (!f->start || !f->advance || !f->call || !f->warmup || !f->verify || !f->qctx) {
    snprintf(err, errlen, "window: the agent adapter lacks a required function");
    return -1;
  }
  const int *src[] = {&f->start, &f->advance, &f->call, &f->warmup, &f->verify, &f->speculate, &f->pfcall,
                      &f->qctx};
  int *dst[] = {&w->fn[SP_JOB_START], &w->fn[SP_JOB_ADVANCE], &w->fn[SP_JOB_CALL], &w->fn[SP_JOB_WARMUP],
                &w->fn[SP_JOB_VERIFY], &w->fn[SP_JOB_SPECULATE], &w->fn[SP_JOB_PFCALL], &w->qctx_ref};
  for (size_t i = 0; i < sizeof src / sizeof src[0]; i++) {
    unref(w, dst[i]);
    *dst[i] = keep(w, *src[i]);
  }
  if (w->cfg.mode == SP_MODE_SEQUENTIAL) unref(w, &w->fn[SP_JOB_SPECULATE]);
  if (!w->cfg.prefetch) unref(w, &w->fn[SP_JOB_PFCALL]);
  if (w->fn[SP_JOB_PFCALL] == SP_NOVAL) w->cfg.prefetch = NULL;
  return 0;
}

/* ---- the query's deadline (cfg.timeout_ms) ------------------------------ */

/* The deadline and the window it ends (allocated only when a timeout is
   set: a window without one stays as small as before). */
typedef struct win_deadline {
  sp_deadline dl;          /* on the engine clock, so virtual runs time out deterministically */
  sp_window *w;            /* the window it fails */
} win_deadline;

static void deadline_drop(sp_window *w) {
  win_deadline *d = (win_deadline *)w->deadline;
  if (!d) return;
  w->deadline = NULL;
  if (d->dl.idx >= 0) {
    sp_timers_remove(&w->ctx->timers, &d->dl);
    w->ctx->counts.timers--;
  }
  free(d);
}

/* What the verified thread was waiting for when the time ran out, for the
   query's error: the user needs the call that hung, not just "timeout". */
static void describe_wait(const sp_window *w, char *out, size_t cap) {
  const sp_node *h = w->head;
  size_t n = 0;
  out[0] = '\0';
  if (!h) return;
  const char *parts[4];
  int np = 0;
  char tool[160];
  if (h->j_adv) parts[np++] = h->state_ref == SP_NOVAL && h->hop == 0 ? "the agent's init and first step" : "the agent's step";
  if (h->j_target || h->act_promoted >= 0) {
    const char *name = w->cfg.policy && h->tool >= 0 ? sp_policy_tool_name(w->cfg.policy, h->tool) : NULL;
    if (name) snprintf(tool, sizeof tool, "the tool '%.100s'", name);
    else snprintf(tool, sizeof tool, "the tool call");
    parts[np++] = tool;
  }
  if (h->j_verify) parts[np++] = "the verifier";
  if (h->j_spec && !h->j_target) parts[np++] = "the speculator";
  for (int i = 0; i < np && n + 1 < cap; i++) {
    int k = snprintf(out + n, cap - n, "%s%s", i == 0 ? ", waiting for " : " and ", parts[i]);
    if (k < 0) break;
    n += (size_t)k;
  }
}

static void deadline_fired(sp_deadline *dl) {
  win_deadline *d = (win_deadline *)((char *)dl - offsetof(win_deadline, dl));
  sp_window *w = d->w;
  w->ctx->counts.timers--;
  char what[400], msg[512];
  describe_wait(w, what, sizeof what);
  snprintf(msg, sizeof msg, "timed out: no answer within %.15g ms (the query timeout) at hop %d%s", w->cfg.timeout_ms,
           w->head ? w->head->hop : w->st.hops, what);
  sp_win_tev(w, "timeout", 'i', w->head, now_ms(w), 0, 0, msg);   /* (a trace shows where the time ran out) */
  fail(w, msg);   /* cancels its calls; wake_waiter frees d */
}

/* Armed when the window starts (its wall time's origin). 0, or -1 when out
   of memory. */
static int deadline_arm(sp_window *w) {
  if (!(w->cfg.timeout_ms > 0)) return 0;
  win_deadline *d = calloc(1, sizeof *d);
  if (!d) return -1;
  d->w = w;
  d->dl.fire = deadline_fired;
  d->dl.idx = -1;
  double ms = w->cfg.timeout_ms > 1e12 ? 1e12 : w->cfg.timeout_ms;   /* (as a sleep: ~30 years) */
  if (sp_timers_add(&w->ctx->timers, &d->dl, w->t0_ns + (uint64_t)(ms * 1e6)) != 0) {
    free(d);
    return -1;
  }
  w->ctx->counts.timers++;
  w->deadline = &d->dl;
  return 0;
}

/* Start in loop context: run init + the first step. */
static void do_start(sp_window *w) {
  w->t0_ns = w->ctx->sched->hook_clock ? w->ctx->sched->hook_now : sp_timers_now(&w->ctx->timers);
  w->t0 = (double)w->t0_ns / 1e6;
  if (deadline_arm(w) != 0) {
    fail(w, "out of memory");
    return;
  }
  if (w->fn[SP_JOB_START] == SP_NOVAL || w->qctx_ref == SP_NOVAL) {
    fail(w, "window started without its agent (sp_window_set_fns was not called)");
    return;
  }
  sp_node *n = node_new(w, 0, NULL, 0, 1.0);
  if (!n) {
    fail(w, "out of memory");
    return;
  }
  w->head = n;
  note_live(w, +1);
  w->round = 1;
  sp_task *t = job(w, n, SP_JOB_START, on_advance);
  if (!t) {
    fail(w, "out of memory");
    return;
  }
  n->j_adv = t;
  n->t_adv0 = now_ms(w);
  w->st.model_calls++;
  sp_job_start(t);
}

static void release_all(sp_window *w) {
  for (int i = 0; i < SP_JOB_KINDS; i++) unref(w, &w->fn[i]);
  unref(w, &w->qctx_ref);
  unref(w, &w->answer_ref);
  for (int i = 0; i < w->nhops; i++) {
    unref(w, &w->hops[i].step_ref);
    unref(w, &w->hops[i].obs_ref);
  }
  w->nhops = 0;
}

static void window_destroy(sp_window *w) {
  sp_ctx *ctx = w->ctx;
  deadline_drop(w);   /* (a window freed at shutdown without ending) */
  enc_unqueue(w);
  sp_buf_free(&w->traj);
  sp_buf_free(&w->reasons);
  release_all(w);
  if (w->prev) w->prev->next_w = w->next_w;
  else ctx->windows->live = w->next_w;
  if (w->next_w) w->next_w->prev = w->prev;
  for (int i = 0; i < w->ntev; i++) free(w->tev[i].detail);
  free(w->tev);
  free(w->hops);
  free(w->ext);
  free(w->error);
  ctx->counts.windows--;
  free(w);
}

static void kick_run(sp_ctx *ctx, sp_runnable *r) {
  sp_window *w = (sp_window *)((char *)r - offsetof(sp_window, kick));
  int action = w->kick_action;
  w->kick_action = KICK_NONE;
  if (action == KICK_FREE || w->freed) {
    window_destroy(w);
    return;
  }
  if (action == KICK_START && w->status == SP_WIN_RUNNING && !ctx->stopping) do_start(w);
}

int sp_window_status(const sp_window *w) { return w ? w->status : SP_WIN_FAILED; }
const char *sp_window_error(const sp_window *w) { return w && w->error ? w->error : ""; }
int sp_window_answer_ref(const sp_window *w) { return w ? w->answer_ref : SP_NOVAL; }
int sp_window_nhops(const sp_window *w) { return w ? w->nhops : 0; }

int sp_window_hop(const sp_window *w, int i, sp_hop_info *out) {
  if (!w || i < 0 || i >= w->nhops) return -1;
  const sp_hop_rec *r = &w->hops[i];
  memset(out, 0, sizeof *out);
  out->step_ref = r->step_ref;
  out->obs_ref = r->obs_ref;
  out->t_seg = r->t_seg;
  out->t_spec = r->t_spec;
  out->t_target = r->t_target;
  out->t_update = r->t_update;
  out->t_verify = r->t_verify;
  out->spec = r->spec;
  out->rank = r->rank;
  out->ncands = r->ncands;
  out->reason = hop_reason(w, r);   /* valid until the window commits another hop */
  out->promoted = r->promoted;
  return 0;
}

/* "key":ms at o (the literal key with its ',' or '{'; ms rounded to 4
   decimals, round(x, 4) of lua/specula/run/aggregate.lua: the same digits
   as sp_json_write_rounded), returning the end; NULL when ms is not finite
   (the Lua path then reports the record as unencodable, as before). */
#define PUT_LIT(o, lit) (memcpy((o), (lit), sizeof(lit) - 1), (o) + sizeof(lit) - 1)
#define PUT_MS(o, lit, ms) ((o) ? sp_json_put_rounded_any(PUT_LIT((o), lit), (ms), 4) : NULL)

/* room a hop's object can take besides its reason and spec name: the keys
   (~110 bytes), three integers (20 each), five times (SP_JSON_ROUNDED_MAX) */
#define HOP_MAX (128 + 3 * 20 + 5 * SP_JSON_ROUNDED_MAX)

int sp_window_stages_json(const sp_window *w, char *out, int cap) {
  if (!w || cap < 0) return -1;
  /* the longest text these hops can make, measured once; each field is then
     stored without a check or a call for room (this runs for every hop of
     every record) */
  size_t bound = 64 + 2 * SP_JSON_ROUNDED_MAX;
  for (int i = 0; i < w->nhops; i++) {
    const sp_hop_rec *h = &w->hops[i];
    const char *spec = sp_spec_name(h->spec);
    bound += HOP_MAX + 6 * (strlen(hop_reason(w, h)) + (spec ? strlen(spec) : 4)) + 4;
    if (bound > (size_t)INT_MAX) return -1;
  }
  /* too small a buffer: the caller grows it to this and asks again */
  if ((size_t)cap < bound) return (int)bound;
  char *o = PUT_MS(out, "{\"final_seg\":", w->st.final_seg_ms);
  if (o) o = PUT_LIT(o, ",\"hops\":[");
  for (int i = 0; i < w->nhops && o; i++) {
    const sp_hop_rec *h = &w->hops[i];
    const char *reason = hop_reason(w, h);
    size_t rlen = strlen(reason);
    /* a reason that is not valid UTF-8 is cleaned by the Lua path */
    for (size_t j = 0; j < rlen; j++) {
      if ((unsigned char)reason[j] < 0x80) continue;
      size_t l = sp_json_utf8_seq((const unsigned char *)reason + j, rlen - j);
      if (!l) return -1;
      j += l - 1;
    }
    const char *spec = sp_spec_name(h->spec);
    if (!spec) spec = "none";
    o = i ? PUT_LIT(o, ",{\"hop\":") : PUT_LIT(o, "{\"hop\":");
    o = sp_json_put_uint(o, (unsigned long long)i);
    if (h->ncands > 0) {
      o = PUT_LIT(o, ",\"ncands\":");
      o = sp_json_put_uint(o, (unsigned long long)h->ncands);
    }
    if (h->rank >= 0) {
      o = PUT_LIT(o, ",\"rank\":");
      o = sp_json_put_uint(o, (unsigned long long)h->rank);
    }
    if (rlen > 0) o = sp_json_put_string(PUT_LIT(o, ",\"reason\":"), reason, rlen);
    o = sp_json_put_string(PUT_LIT(o, ",\"spec\":"), spec, strlen(spec));
    o = PUT_MS(o, ",\"t_seg\":", h->t_seg);
    if (h->t_spec >= 0) o = PUT_MS(o, ",\"t_spec\":", h->t_spec);
    o = PUT_MS(o, ",\"t_target\":", h->t_target);
    o = PUT_MS(o, ",\"t_update\":", h->t_update);
    o = PUT_MS(o, ",\"t_verify\":", h->t_verify);
    if (o) o = PUT_LIT(o, "}");
  }
  o = PUT_MS(o, "],\"init\":", w->st.init_ms);
  if (o) o = PUT_LIT(o, "}");
  return o ? (int)(o - out) : -1;
}

void sp_window_stats_get(const sp_window *w, sp_window_stats *out) {
  if (!w) {
    memset(out, 0, sizeof *out);
    return;
  }
  *out = w->st;
  out->max_threads = w->st.max_threads;
}

void sp_window_cancel(sp_window *w) {
  if (!w || (w->status != SP_WIN_RUNNING && w->status != SP_WIN_NEW)) return;
  w->status = SP_WIN_CANCELLED;
  free(w->error);
  w->error = dupstr("cancelled");
  if (w->head) {
    sp_node *h = w->head;
    w->head = NULL;
    discard(w, h);
  }
  wake_waiter(w);
}

void sp_window_free(sp_window *w) {
  if (!w || w->freed) return;
  if (w->status == SP_WIN_RUNNING || w->status == SP_WIN_NEW) w->group = NULL;
  sp_window_cancel(w);
  sp_win_group_unlink(w);
  if (w->waiter) {
    sp_op_unlink(&w->wait_op);
    w->waiter = NULL;
  }
  w->freed = 1;
  enc_unqueue(w);   /* nobody reads its trajectory any more */
  if (w->ctx->L == NULL || w->ctx->stopping) {
    /* No loop turn is coming (shutdown, or a host without Lua): free now.
       Releasing the hop records' slots is integer work, safe either way. */
    window_destroy(w);
    return;
  }
  w->kick_action = KICK_FREE;
  sp_sched_enqueue(w->ctx, &w->kick);
}

int sp_window_ntev(const sp_window *w) { return w ? w->ntev : 0; }

int sp_window_tev(const sp_window *w, int i, sp_tev *out) {
  if (!w || i < 0 || i >= w->ntev) return -1;
  *out = w->tev[i].ev;
  return 0;
}

double sp_window_t0_us(const sp_window *w) { return w ? w->t0 * 1000.0 : 0; }

void sp_window_cancel_all(sp_ctx *ctx) {
  for (sp_window *w = ctx->windows ? ctx->windows->live : NULL; w; w = w->next_w) sp_window_cancel(w);
}
