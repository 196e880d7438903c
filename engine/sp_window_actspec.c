/*
 * Action speculation inside a window (PASTE, draft models): a thread's step
 * hands its predictions over (sp_window_predict); they fire at step start
 * or when a stream names their tool, through the one gate; the step's real
 * action promotes a matching one, the orphans are cancelled. The window
 * calls sp_win_act_settle, sp_win_act_release and sp_win_act_kick
 * (sp_window_int.h); the run-level estimates are sp_actspec.c's.
 */
#include "sp_window_int.h"

static void act_fire(sp_window *w, sp_node *n, sp_actent *e, double conf, int trigger);


/* The thread's step chose (tool, key): serve its target from a prediction
   that already ran (or is running) instead of calling again. */
static int act_promote(sp_window *w, sp_node *n, int idx, int lossy) {
  sp_actent *e = &n->acts[idx];
  if (e->state != ACT_RUNNING && e->state != ACT_DONE) return 0;
  double now = now_ms(w);
  sp_prefetch_stats *q = &w->st.pf;
  q->promoted++;
  if (lossy) q->promoted_lossy++;
  n->act_promoted = idx;
  n->tg_spec = is_speculative(w, n);
  if (n->tg_spec) {
    n->risk = e->risk;   /* still speculative: its fate is the thread's */
    e->risk.on = 0;
    e->risk.cost = 0;
  } else {
    risk_useful(w, &e->risk);
  }
  if (e->counted && !n->tg_spec) {
    inflight_add(w, -1);   /* it serves a verified state now */
    e->counted = 0;
  }
  n->t_target0 = e->t0;
  sp_win_tev(w, "promote", 'i', n, now, 0, lossy, e->name);
  if (e->state == ACT_DONE) {
    q->saved_ms += e->t1 - e->t0;
    n->obs_ref = e->obs_ref;
    e->obs_ref = SP_NOVAL;
    e->state = ACT_PROMOTED;
    n->t_target = e->t1 - e->t0;
    n->tg = TG_DONE;
    return 1;
  }
  q->saved_ms += now - e->t0;
  e->state = ACT_PROMOTED;
  n->j_target = e->job;   /* its hook delivers to the thread from now on */
  n->tg = TG_RUNNING;
  if (e->counted) {
    /* still in flight: it now counts as the thread's own speculative call */
    e->counted = 0;
    if (!n->tg_spec) inflight_add(w, -1);
  }
  return 1;
}

static void on_actent(sp_task *t, const sp_jobres *res, int status, void *ud) {
  sp_actent *e = ud;
  sp_node *n = e->n;
  sp_window *w = n->w;
  e->job = NULL;
  e->t1 = now_ms(w);
  sp_win_tev(w, "predicted", 'X', n, e->t0, e->t1, status == SP_TASK_DONE, e->name);
  if (e->state == ACT_PROMOTED) {
    /* the thread's target call */
    n->j_target = NULL;
    w->target_done(w, n, status == SP_TASK_DONE, res, sp_task_error(t));
    return;
  }
  if (e->counted) {
    e->counted = 0;
    inflight_add(w, -1);
  }
  if (status == SP_TASK_DONE) {
    e->obs_ref = keep(w, res->value);
    e->state = ACT_DONE;
  } else {
    e->state = ACT_FAILED;
  }
}

static void act_fire(sp_window *w, sp_node *n, sp_actent *e, double conf, int trigger) {
  sp_prefetch *pf = w->cfg.prefetch;
  sp_prefetch_stats *q = &w->st.pf;
  double cost = sp_policy_tool_cost(w->cfg.policy, e->tool);
  if (!sp_prefetch_ev(pf, e->tool, conf, cost)) {
    q->gated_ev++;
    return;   /* stays held: a tool-name trigger may raise its odds */
  }
  int d = sp_win_gate(w, e->tool, trigger, e->hint);
  if (d != SP_FULL) {
    /* warm-up and forbid both mean: not before the model decides */
    e->state = ACT_GATED;
    q->gated_policy++;
    return;
  }
  char *tool = dupstr(e->name);
  sp_task *t = tool ? sp_win_job(w, n, SP_JOB_PFCALL, on_actent, e) : NULL;
  if (!t) {
    free(tool);
    return;
  }
  t->speculative = 1;
  sp_jobcall *c = &t->call;
  c->tool = tool;
  c->tool_len = (int)strlen(tool);
  c->args = keep(w, e->args_ref);
  c->hop = n->hop;
  e->job = t;
  e->state = ACT_RUNNING;
  e->t0 = now_ms(w);
  e->counted = 1;
  inflight_add(w, +1);
  risk_take(w, &e->risk, cost);
  q->fired++;
  w->st.predicted_calls++;
  w->st.speculative_launches++;
  sp_job_start(t);
}

/* Fire what the trigger settings allow (loop context: a queued C
   runnable, never inside a hook): new predictions at step start, held ones
   whose tool a stream has named. */
void sp_win_act_kick(sp_ctx *ctx, sp_runnable *r) {
  sp_node *n = (sp_node *)((char *)r - offsetof(sp_node, act_kick));
  sp_window *w = n->w;
  if (w->status != SP_WIN_RUNNING || ctx->stopping) return;
  sp_prefetch *pf = w->cfg.prefetch;
  for (int i = 0; i < n->nact; i++) {
    sp_actent *e = &n->acts[i];
    if (!e->fresh) continue;
    e->fresh = 0;
    if ((pf->trigger & SP_TRIGGER_START) && e->state == ACT_HELD) act_fire(w, n, e, e->conf, SP_TRIG_PRED_START);
  }
  /* The article's trigger: a tool name is known (a stream may name several,
     one per parallel tool call); fire the held candidates of each name at
     their odds given that name: conf / the confidence of every candidate of
     the name, fired at the start or not (a guess kept back beside a likelier
     one already running stays unlikely) — or / the predictor's confidence
     in the tool itself when it says more: its candidates need not be all
     the calls of that tool it deems possible. */
  for (size_t off = 0; n->act_names && off < n->act_names_len;) {
    const char *name = n->act_names + off;
    off += strlen(name) + 1;
    double sum = 0, tool = 0;
    for (int i = 0; i < n->nact; i++)
      if (strcmp(n->acts[i].name, name) == 0) {
        sum += n->acts[i].conf;
        if (n->acts[i].tool_conf > tool) tool = n->acts[i].tool_conf;
      }
    if (tool > sum) sum = tool;
    for (int i = 0; i < n->nact; i++) {
      sp_actent *e = &n->acts[i];
      if (e->state == ACT_HELD && strcmp(e->name, name) == 0)
        act_fire(w, n, e, sum > 0 ? e->conf / sum : e->conf, SP_TRIG_PRED_NAME);
    }
  }
  free(n->act_names);
  n->act_names = NULL;
  n->act_names_len = 0;
}

/* The step boundary: whatever was predicted and not used is an orphan. */
void sp_win_act_release(sp_window *w, sp_node *n, int count_waste) {
  sp_prefetch_stats *q = &w->st.pf;
  sp_sched_unqueue(w->ctx, &n->act_kick);
  for (int i = 0; i < n->nact; i++) {
    sp_actent *e = &n->acts[i];
    if (e->state == ACT_PROMOTED) {
      if (e->job && n->j_target == e->job) {
        /* the thread's own target: cancelled like one */
        n->j_target = NULL;
        sp_task_cancel(e->job);
        w->st.cancelled_target++;
        if (n->tg_spec) inflight_add(w, -1);
        n->tg_spec = 0;
      }
    } else if (e->state == ACT_RUNNING || e->state == ACT_DONE || e->state == ACT_FAILED) {
      if (e->job) {
        sp_task_cancel(e->job);
        w->st.cancelled_target++;
        sp_win_tev(w, "cancel", 'i', n, now_ms(w), 0, 0, "predicted");
      }
      if (e->counted) inflight_add(w, -1);
      if (count_waste && e->risk.on) {
        q->wasted++;
        q->wasted_cost += e->risk.cost;
      }
      risk_wasted(w, &e->risk);
    } else if (e->state == ACT_HELD) {
      q->held++;
    }
    e->job = NULL;
    e->counted = 0;
    unref(w, &e->args_ref);
    unref(w, &e->obs_ref);
    free(e->name);
    free(e->key);
  }
  free(n->acts);
  n->acts = NULL;
  n->nact = 0;
  free(n->act_names);
  n->act_names = NULL;
  n->act_names_len = 0;
}

/* Settle a thread's predictions once its step chose an action: promote the
   match, drop the orphans. Returns 1 if the target is served. */
int sp_win_act_settle(sp_window *w, sp_node *n, const char *tool, const char *key, int lossy_idx) {
  /* predictions the loop never got to fire (the step did not yield) are
     counted as held below */
  sp_sched_unqueue(w->ctx, &n->act_kick);
  int served = 0;
  sp_prefetch *pf = w->cfg.prefetch;
  if (pf && n->nact > 0) {
    int idx = -1, lossy = 0;
    if (pf->match == SP_MATCH_EXACT) {
      /* (tool, canonical args) equal: the very call the model decided */
      for (int i = 0; key && tool && i < n->nact; i++) {
        sp_actent *e = &n->acts[i];
        if ((e->state == ACT_RUNNING || e->state == ACT_DONE) && strcmp(e->key, key) == 0 &&
            strcmp(e->name, tool) == 0) {
          idx = i;
          break;
        }
      }
    } else if (lossy_idx > 0 && lossy_idx <= n->nact) {
      idx = lossy_idx - 1;
      /* lossless when it happens to be the same call */
      lossy = !(key && tool && strcmp(n->acts[idx].key, key) == 0 && strcmp(n->acts[idx].name, tool) == 0);
    }
    if (idx >= 0) served = act_promote(w, n, idx, lossy);
  }
  /* orphans: everything else goes now (the promoted entry stays until its
     call completes or the thread goes) */
  sp_prefetch_stats *q = &w->st.pf;
  for (int i = 0; i < n->nact; i++) {
    sp_actent *e = &n->acts[i];
    if (e->state == ACT_PROMOTED) continue;
    if (e->job) {
      sp_task_cancel(e->job);
      e->job = NULL;
      w->st.cancelled_target++;
      sp_win_tev(w, "cancel", 'i', n, now_ms(w), 0, 0, "orphan");
    }
    if (e->counted) {
      e->counted = 0;
      inflight_add(w, -1);
    }
    if (e->state == ACT_RUNNING || e->state == ACT_DONE || e->state == ACT_FAILED) {
      q->wasted++;
      q->wasted_cost += e->risk.cost;
      risk_wasted(w, &e->risk);
    } else if (e->state == ACT_HELD) {
      q->held++;
    }
    e->state = ACT_GATED; /* settled */
    unref(w, &e->args_ref);
    unref(w, &e->obs_ref);
  }
  return served;
}

/* FFI: one prediction of the running step's next call. */
int sp_window_predict(sp_ctx *ctx, const char *tool, size_t tool_len, const char *key, size_t key_len,
                      double confidence, double tool_confidence, int hint, int args_slot) {
  sp_task *t = ctx ? ctx->sched->running : NULL;
  sp_node *n = t ? t->window_node : NULL;
  sp_prefetch *pf = n ? n->w->cfg.prefetch : NULL;
  if (!pf || !tool || !key || n->phase != PH_ADVANCING || memchr(tool, '\0', tool_len)) {
    if (ctx) sp_vals_release(ctx, args_slot);
    return 0;
  }
  sp_window *w = n->w;
  if (!n->acts) {
    n->acts = calloc((size_t)pf->max_per_step, sizeof *n->acts);
    n->nact = 0;
  }
  char *name = n->acts && n->nact < pf->max_per_step ? malloc(tool_len + 1) : NULL;
  char *k = name ? malloc(key_len + 1) : NULL;
  if (!k) {
    free(name);
    sp_vals_release(ctx, args_slot);
    return 0;
  }
  memcpy(name, tool, tool_len);
  name[tool_len] = '\0';
  memcpy(k, key, key_len);
  k[key_len] = '\0';
  sp_actent *e = &n->acts[n->nact++];
  memset(e, 0, sizeof *e);
  e->n = n;
  e->name = name;
  e->key = k;
  e->tool = sp_policy_tool_index(w->cfg.policy, name, tool_len);
  e->conf = confidence == confidence ? confidence : 0;
  e->tool_conf = tool_confidence == tool_confidence && tool_confidence <= 1 ? tool_confidence : 0;
  /* the script's decision for this very prediction; none given is
     SP_HINT_NONE, which a scripted policy's gate treats as forbid */
  e->hint = hint;
  e->state = ACT_HELD;
  e->fresh = 1;
  e->obs_ref = SP_NOVAL;
  e->args_ref = args_slot;
  w->st.pf.candidates++;
  return 1;
}

/* FFI: the running step's predictions are in: fire from the loop. */
int sp_window_predicted(sp_ctx *ctx) {
  sp_task *t = ctx ? ctx->sched->running : NULL;
  sp_node *n = t ? t->window_node : NULL;
  if (!n || !n->w->cfg.prefetch || n->nact == 0) return 0;
  sp_sched_enqueue(ctx, &n->act_kick);
  return 1;
}

/* FFI: a streamed response of the running step named its tool. */
int sp_window_tool_name(sp_ctx *ctx, const char *name, size_t len) {
  sp_task *t = ctx ? ctx->sched->running : NULL;
  sp_node *n = t ? t->window_node : NULL;
  if (!n || !n->w->cfg.prefetch || !name) return 0;
  if (!(n->w->cfg.prefetch->trigger & SP_TRIGGER_TOOL_NAME)) return 0;
  /* A name is stream input: one with a NUL in it names no tool, and a
     step's pending names are bounded (a stream may repeat itself). */
  if (len == 0 || len > 256 || memchr(name, '\0', len)) return 0;
  if (n->act_names_len + len + 1 > 4096) return 0;
  char *b = realloc(n->act_names, n->act_names_len + len + 1);
  if (!b) return 0;
  memcpy(b + n->act_names_len, name, len);
  b[n->act_names_len + len] = '\0';
  n->act_names = b;
  n->act_names_len += len + 1;
  sp_sched_enqueue(ctx, &n->act_kick);
  return 1;
}

