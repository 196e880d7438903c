/* C test of action speculation inside the window (engine/sp_window_actspec.c)
 * without Lua: the fake predictor of window_harness.h hands each step its
 * predictions as the adapter does (sp_window_predict, sp_window_predicted,
 * sp_window_tool_name from inside the running step), and the test checks
 * what a user relies on: a right prediction replaces the call, a wrong one
 * is cancelled and counted as waste, nothing runs early that the policy
 * (or a failing script, or the expected value) does not allow, a rolled
 * back thread takes its predictions with it, and nothing leaks. */
#include "window_harness.h"
#include <math.h>

/* The pending predicted call of `tool` for the state at hop, or -1. */
static int find_act(harness *h, const char *tool, int hop) {
  for (int i = 0; i < h->npend; i++) {
    sp_task *t = h->pend[i];
    if (sp_task_state(t) == SP_TASK_CANCELLED || job_kind(h, t) != J_PFCALL) continue;
    const sp_jobcall *c = sp_job_call(t);
    if (!c->tool || (size_t)c->tool_len != strlen(tool) || memcmp(c->tool, tool, strlen(tool)) != 0) continue;
    if (hop < 0 || job_label(h, t).hop == hop) return i;
  }
  return -1;
}

/* End pending job i after ms. */
static void end_job(harness *h, int i, double ms) {
  CHECK(i >= 0, "the job is pending");
  if (i < 0) return;
  advance_clock(h, ms);
  complete(h, i);
  pump(h);
}

static double gate_sum(const sp_window_stats *st, int trigger) {
  return st->gate[trigger][SP_FORBID] + st->gate[trigger][SP_WARMUP] + st->gate[trigger][SP_FULL];
}

static sp_gate_counts tool_counts(harness *h, const char *tool, int trigger) {
  sp_gate_counts c;
  sp_policy_tool_counts(h->policy, sp_policy_tool_index(h->policy, tool, strlen(tool)), trigger, &c);
  return c;
}

static const wpred RIGHT = {"search", 1, 0.9, SP_HINT_NONE, 0};   /* the call the step decides */

/* A fresh harness with action speculation and a started window: the start
   job is taken (its predictions made) but not ended. ev_cost_ms 0: every
   prediction with some confidence is worth firing. */
static sp_window *begin_act(harness *h, const world *wd, int trigger, int mode, int k, int m) {
  harness_init(h, wd);
  harness_actspec(h, SP_MATCH_EXACT, trigger, 0, 10);
  sp_window *w = window_new(h, mode, k, m, SP_LAUNCH_EAGER);
  sp_window_start(w, NULL);
  pump(h);
  CHECK(find(h, J_START, 0) >= 0, "the start job is taken");
  return w;
}

/* With the harness made (and its policy set): action speculation on, a
   window run to the end (FIFO, or random with a seed), its trajectory
   checked. */
static sp_window *run_act(harness *h, int trigger, double ev_cost_ms, int mode, int k, uint64_t seed) {
  harness_actspec(h, SP_MATCH_EXACT, trigger, ev_cost_ms, 10);
  sp_window *w = window_new(h, mode, k, 1, SP_LAUNCH_EAGER);
  sp_window_start(w, NULL);
  run_all(h, w, k, seed);
  check_trajectory(h, w, h->wd.nhops);
  return w;
}

/* The window's risk and in-flight accounting is back to zero. */
static void check_settled(sp_window *w) {
  CHECK(fabs(w->at_risk) < 1e-9 && w->inflight == 0, "nothing left at risk (%g) or in flight (%g)", w->at_risk,
        w->inflight);
}

/* (a) A prediction equal to the decided call is that call: it runs once,
   its result is the hop's observation, the step's own call never starts —
   whether it finished before the step ended or was still running. */
static void test_act_promote_exact(void) {
  harness h;
  world wd = world_all(3, 0);
  wd.pred[wd.npred++] = RIGHT;
  sp_window *w = begin_act(&h, &wd, SP_TRIGGER_START, SP_MODE_SEQUENTIAL, 1, 1);
  int p0 = find_act(&h, "search", 0);
  CHECK(p0 >= 0, "hop 0: the prediction fired while the step runs");
  CHECK(p0 >= 0 && sp_task_speculative(h.pend[p0]), "a predicted call runs as speculative, even for the head");
  run_one(&h, J_START, 0, 2);                 /* the step ends: the call in flight is promoted */
  CHECK(find(&h, J_CALL, 0) < 0, "hop 0: no call of its own for the decided action");
  run_one(&h, J_PFCALL, 0, 10);               /* its result is the head's */
  CHECK(find_act(&h, "search", 1) >= 0, "hop 1: the next step's prediction fired");
  run_one(&h, J_PFCALL, 1, 10);               /* done before the step ends */
  run_one(&h, J_ADVANCE, 1, 3);
  CHECK(find(&h, J_CALL, 1) < 0, "hop 1: no call of its own");
  run_all(&h, w, 1, 0);
  check_trajectory(&h, w, 3);
  sp_window_stats st = stats_of(w);
  CHECK(h.taken[J_CALL] == 0 && st.target_calls == 0, "no second call (%d taken, %d started)", h.taken[J_CALL],
        st.target_calls);
  CHECK(h.ran[J_PFCALL] == 3 && st.predicted_calls == 3, "one predicted call per hop (%d, %d)", h.ran[J_PFCALL],
        st.predicted_calls);
  CHECK(st.pf.candidates == 3 && st.pf.fired == 3 && st.pf.promoted == 3 && st.pf.promoted_lossy == 0,
        "candidates %g fired %g promoted %g lossy %g", st.pf.candidates, st.pf.fired, st.pf.promoted,
        st.pf.promoted_lossy);
  CHECK(st.pf.wasted == 0 && st.wasted_calls == 0 && st.cancelled_target == 0, "nothing wasted (%g, %g, %d)",
        st.pf.wasted, st.wasted_calls, st.cancelled_target);
  for (int i = 0; i < 3; i++) {
    sp_hop_info hi;
    sp_window_hop(w, i, &hi);
    CHECK(hi.promoted == 1, "hop %d: its result came from the prediction", i);
  }
  sp_hop_info h1;
  sp_window_hop(w, 1, &h1);
  CHECK(h1.t_target == 10, "hop 1: the target time is the predicted call's (%g)", h1.t_target);
  CHECK(st.pf.saved_ms > 0 && st.wall_ms < st.standard_ms, "latency hidden: saved %g, wall %g < standard %g",
        st.pf.saved_ms, st.wall_ms, st.standard_ms);
  check_settled(w);
  finish_and_free(&h, w);
}

/* (b) Predictions the step did not decide are orphans at its boundary: the
   running one is cancelled, the finished one dropped, both counted as waste
   (calls and cost), and the decided call runs as a normal call. A final
   step orphans every prediction. */
static void test_act_mismatch(void) {
  harness h;
  world wd = world_all(2, 0);
  wd.pred[wd.npred++] = (wpred){"search", 0, 0.9, SP_HINT_NONE, 0};   /* same tool, other args */
  wd.pred[wd.npred++] = (wpred){"fetch", 1, 0.6, SP_HINT_NONE, 0};    /* the same args, another tool */
  wd.pred_final = 1;
  sp_window *w = begin_act(&h, &wd, SP_TRIGGER_START, SP_MODE_SEQUENTIAL, 1, 1);
  int s = find_act(&h, "search", 0);
  CHECK(s >= 0 && find_act(&h, "fetch", 0) >= 0, "both predictions fired");
  sp_task *search_job = s >= 0 ? h.pend[s] : NULL;
  end_job(&h, find_act(&h, "fetch", 0), 4);   /* finished, result held */
  run_one(&h, J_START, 0, 2);                /* the step decides something else */
  CHECK(search_job && sp_task_state(search_job) == SP_TASK_CANCELLED, "the running orphan is cancelled");
  int c = find(&h, J_CALL, 0);
  CHECK(c >= 0 && !sp_task_speculative(h.pend[c]), "the decided call runs, as a normal call");
  sp_window_stats st = stats_of(w);
  CHECK(st.pf.wasted == 2 && st.pf.wasted_cost == 1.5, "both orphans wasted (%g, cost %g)", st.pf.wasted,
        st.pf.wasted_cost);
  CHECK(st.wasted_calls == 2 && st.wasted_cost == 1.5 && st.cancelled_target == 1,
        "window waste: %g calls, cost %g, %d cancelled", st.wasted_calls, st.wasted_cost, st.cancelled_target);
  CHECK(w->at_risk == 0, "nothing at risk after the boundary (%g)", w->at_risk);
  run_all(&h, w, 1, 0);
  check_trajectory(&h, w, 2);
  st = stats_of(w);
  CHECK(st.pf.fired == 6 && st.pf.promoted == 0 && st.pf.wasted == 6 && st.pf.wasted_cost == 4.5,
        "three steps, two orphans each: fired %g promoted %g wasted %g cost %g", st.pf.fired, st.pf.promoted,
        st.pf.wasted, st.pf.wasted_cost);
  CHECK(st.wasted_calls == 6 && st.wasted_cost == 4.5, "window waste %g, cost %g", st.wasted_calls, st.wasted_cost);
  CHECK(h.ran[J_CALL] == 2 && st.target_calls == 2, "each hop called its tool itself (%d)", h.ran[J_CALL]);
  for (int i = 0; i < 2; i++) {
    sp_hop_info hi;
    sp_window_hop(w, i, &hi);
    CHECK(hi.promoted == 0, "hop %d: not promoted", i);
  }
  check_settled(w);
  finish_and_free(&h, w);
}

/* (c) The policy decides for predictions as for every early launch, on
   either trigger, in every mode: forbid and warmup never run a predicted
   call (nor a warm-up hook for it: only a thread's deferred target gets
   that), full runs it early and it is promoted. */
static void test_act_policy(void) {
  static const struct { int mode, k; } modes[] = {{SP_MODE_SEQUENTIAL, 1}, {SP_MODE_WINDOW, 2}, {SP_MODE_SPECHOP, 3}};
  static const int triggers[] = {SP_TRIGGER_START, SP_TRIGGER_TOOL_NAME};
  static const int decisions[] = {SP_FORBID, SP_WARMUP, SP_FULL};
  for (size_t mi = 0; mi < 3; mi++)
    for (size_t ti = 0; ti < 2; ti++)
      for (size_t di = 0; di < 3; di++)
        for (uint64_t seed = 0; seed < 3; seed++) {
          int mode = modes[mi].mode, k = modes[mi].k, d = decisions[di];
          int trig = triggers[ti] == SP_TRIGGER_START ? SP_TRIG_PRED_START : SP_TRIG_PRED_NAME;
          int other = trig == SP_TRIG_PRED_START ? SP_TRIG_PRED_NAME : SP_TRIG_PRED_START;
          harness h;
          world wd = world_all(3, 0);
          wd.pred[wd.npred++] = RIGHT;
          wd.stream_name = 1;   /* ignored unless the name trigger is on */
          harness_init(&h, &wd);
          sp_policy_class(h.policy, "io", d, 0, 0);
          sp_window *w = run_act(&h, triggers[ti], 0, mode, k, seed);
          sp_window_stats st = stats_of(w);
          sp_gate_counts c = tool_counts(&h, "search", trig);
          double cands = st.pf.candidates;
          char where[64];
          snprintf(where, sizeof where, "mode %d trigger %d decision %d seed %d", mode, triggers[ti], d, (int)seed);
          CHECK(cands == h.predictions && cands >= 3, "%s: %g candidates (%d made)", where, cands, h.predictions);
          CHECK(gate_sum(&st, other) == 0, "%s: the other trigger never fired", where);
          if (d != SP_FULL) {
            CHECK(h.taken[J_PFCALL] == 0 && st.pf.fired == 0 && st.predicted_calls == 0,
                  "%s: no predicted call runs (%d taken, %g fired)", where, h.taken[J_PFCALL], st.pf.fired);
            CHECK(st.pf.gated_policy == cands && st.gate[trig][d] == cands && gate_sum(&st, trig) == cands,
                  "%s: every candidate asked the gate once and was refused (%g, %d)", where, st.pf.gated_policy,
                  st.gate[trig][d]);
            CHECK((d == SP_WARMUP ? c.warmup : c.forbid) == cands && c.full == 0, "%s: the policy counted them",
                  where);
            /* warm-up hooks: one per deferred thread target under warmup, none for predictions */
            CHECK(h.taken[J_WARMUP] == st.warmup_calls, "%s: warm-ups %d taken, %d counted", where,
                  h.taken[J_WARMUP], st.warmup_calls);
            CHECK(st.warmup_calls == (d == SP_WARMUP ? st.deferred : 0), "%s: %d warm-ups for %d deferrals", where,
                  st.warmup_calls, st.deferred);
            if (mode == SP_MODE_SEQUENTIAL) CHECK(st.warmup_calls == 0 && st.deferred == 0, "%s: nothing deferred", where);
            else CHECK(st.deferred >= 1, "%s: thread targets deferred (%d)", where, st.deferred);
            CHECK(h.ran[J_CALL] >= 3, "%s: the decided calls ran as calls (%d)", where, h.ran[J_CALL]);
          } else {
            CHECK(st.pf.fired == cands && st.pf.gated_policy == 0 && st.gate[trig][SP_FULL] == cands && c.full == cands,
                  "%s: every candidate fired (%g of %g)", where, st.pf.fired, cands);
            CHECK(st.pf.promoted == cands && st.pf.wasted == 0, "%s: each one promoted (%g), none wasted (%g)", where,
                  st.pf.promoted, st.pf.wasted);
            CHECK(h.taken[J_CALL] == 0 && h.taken[J_WARMUP] == 0, "%s: no call and no warm-up besides (%d, %d)", where,
                  h.taken[J_CALL], h.taken[J_WARMUP]);
            for (int i = 0; i < 3; i++) {
              sp_hop_info hi;
              sp_window_hop(w, i, &hi);
              CHECK(hi.promoted == 1, "%s: hop %d promoted", where, i);
            }
          }
          check_settled(w);
          finish_and_free(&h, w);
        }
}

/* (d) A scripted policy fails closed: a prediction without the script's
   decision (none given, or the script failed) is forbid and counted as
   such; a decision below the class's lowers it; one that allows it runs. A
   thread's target without a decision is deferred the same way. */
static void test_act_scripted(void) {
  harness h;
  world wd = world_all(2, 0);
  wd.pred[wd.npred++] = (wpred){"search", 1, 0.9, SP_HINT_ERROR, 0};  /* the script raised */
  wd.pred[wd.npred++] = (wpred){"search", 0, 0.8, SP_HINT_NONE, 0};   /* nobody asked it */
  wd.pred[wd.npred++] = (wpred){"fetch", 0, 0.6, SP_FULL, 0};         /* it allows this one */
  wd.pred[wd.npred++] = (wpred){"search", 1, 0.5, SP_WARMUP, 0};      /* below the class's full */
  harness_init(&h, &wd);
  sp_policy_set_scripted(h.policy, 1);
  sp_window *w = run_act(&h, SP_TRIGGER_START, 0, SP_MODE_SEQUENTIAL, 1, 0);
  sp_window_stats st = stats_of(w);
  sp_gate_counts cs = tool_counts(&h, "search", SP_TRIG_PRED_START), cf = tool_counts(&h, "fetch", SP_TRIG_PRED_START);
  CHECK(cs.forbid == 4 && cs.by_script == 4, "no decision, or a failed script: forbid, counted (%g, %g)", cs.forbid,
        cs.by_script);
  CHECK(cs.warmup == 2 && cs.by_hint == 2 && cs.full == 0, "the script's warmup wins over full (%g, %g)", cs.warmup,
        cs.by_hint);
  CHECK(cf.full == 2 && cf.by_script == 0, "the allowed prediction is full (%g)", cf.full);
  CHECK(st.pf.fired == 2 && st.pf.gated_policy == 6 && h.taken[J_PFCALL] == 2, "fired %g gated %g taken %d",
        st.pf.fired, st.pf.gated_policy, h.taken[J_PFCALL]);
  CHECK(st.pf.promoted == 0 && st.pf.wasted == 2 && h.ran[J_CALL] == 2, "promoted %g wasted %g calls %d",
        st.pf.promoted, st.pf.wasted, h.ran[J_CALL]);
  finish_and_free(&h, w);

  /* the same policy in spechop: the steps give no decision for their own
     action, so no thread target runs before it is verified */
  world wt = world_all(3, 0);
  harness_init(&h, &wt);
  sp_policy_set_scripted(h.policy, 1);
  w = run_act(&h, SP_TRIGGER_START, 0, SP_MODE_SPECHOP, 3, 0);
  st = stats_of(w);
  sp_gate_counts ct = tool_counts(&h, "search", SP_TRIG_TARGET);
  CHECK(st.deferred >= 1 && st.speculative_launches == 0, "deferred %d, launched %d", st.deferred,
        st.speculative_launches);
  CHECK(ct.forbid == st.deferred && ct.by_script == st.deferred && ct.full == 0, "counted as script failures (%g of %d)",
        ct.by_script, st.deferred);
  finish_and_free(&h, w);
}

/* (e) A wrong guess rolls back: the predictions its threads fired go with
   them — the one serving a thread's target is cancelled, a finished one is
   dropped — and count as waste; the committed trajectory never sees them. */
static void test_act_rollback(void) {
  harness h;
  world wd = world_all(3, 0);
  wd.right[0] = -1;                                  /* hop 0's guess is wrong */
  wd.pred[wd.npred++] = RIGHT;
  sp_window *w = begin_act(&h, &wd, SP_TRIGGER_START, SP_MODE_SPECHOP, -1, 1);
  run_one(&h, J_START, 0, 2);                        /* the head's prediction serves its target */
  run_one(&h, J_SPEC, 0, 1);                         /* T(1), off the true path, predicts */
  int p1i = find_act(&h, "search", 1);
  CHECK(p1i >= 0 && sp_task_speculative(h.pend[p1i]), "T(1)'s prediction fired, speculative");
  sp_task *p1 = p1i >= 0 ? h.pend[p1i] : NULL;
  run_one(&h, J_ADVANCE, 1, 2);                      /* T(1) decides it: promoted, its target */
  CHECK(w->head->nkids == 1 && w->head->kids[0]->act_promoted >= 0, "T(1)'s target is its prediction");
  run_one(&h, J_SPEC, 1, 1);                         /* T(2) predicts too */
  end_job(&h, find_act(&h, "search", 2), 3);          /* ... and that call finishes */
  CHECK(tree_size(w->head) == 3 && w->head->kids[0]->nkids == 1, "tree: head -> T(1) -> T(2)");
  run_one(&h, J_PFCALL, 0, 10);                      /* the head's real observation */
  run_one(&h, J_VERIFY, 0, 0.5);                     /* rejected: roll back */
  CHECK(p1 && sp_task_state(p1) == SP_TASK_CANCELLED, "the promoted prediction of T(1) is cancelled");
  int live_wrong = 0;
  for (int i = 0; i < h.npend; i++)
    live_wrong += sp_task_state(h.pend[i]) != SP_TASK_CANCELLED && !job_label(&h, h.pend[i]).ok;
  CHECK(live_wrong == 0, "nothing of the wrong path still runs (%d)", live_wrong);
  sp_window_stats st = stats_of(w);
  CHECK(st.rollbacks == 1 && st.discarded_threads == 2, "rolled back (%d, %d)", st.rollbacks, st.discarded_threads);
  CHECK(st.pf.wasted == 1 && st.wasted_calls == 2 && st.wasted_cost == 2, "T(2)'s prediction wasted (%g); with "
        "T(1)'s target, %g calls, cost %g", st.pf.wasted, st.wasted_calls, st.wasted_cost);
  CHECK(st.cancelled_target >= 1, "a target cancelled (%d)", st.cancelled_target);
  run_all(&h, w, -1, 0);
  check_trajectory(&h, w, 3);
  sp_hop_info hi;
  sp_window_hop(w, 0, &hi);
  CHECK(hi.spec == SP_SPEC_REJECTED && hi.promoted == 1, "hop 0: rejected, served by its prediction");
  check_settled(w);
  finish_and_free(&h, w);
}

/* Two predictions per step, a stream naming the step's tool, both
   triggers, the EV gate at 100 ms a unit of cost: a sequential window run
   to the end. */
static sp_window *run_named(harness *h, wpred a, wpred b) {
  world wd = world_all(2, 0);
  wd.pred[wd.npred++] = a;
  wd.pred[wd.npred++] = b;
  wd.stream_name = 1;
  harness_init(h, &wd);
  return run_act(h, SP_TRIGGER_START | SP_TRIGGER_TOOL_NAME, 100, SP_MODE_SEQUENTIAL, 1, 0);
}

/* (f) The expected-value gate: a prediction whose odds do not pay for its
   cost is not fired (nor offered to the policy); a streamed tool name
   renormalises the odds among that tool's candidates and may fire it. */
static void test_act_ev(void) {
  /* fire when conf * 10 ms > (1 - conf) * cost * 100 ms: search (cost 1)
     needs conf > 0.91, fetch (cost 0.5) conf > 0.83 */
  harness h;
  world wd = world_all(2, 0);
  wd.pred[wd.npred++] = (wpred){"search", 1, 0.95, SP_HINT_NONE, 0};
  wd.pred[wd.npred++] = (wpred){"fetch", 0, 0.5, SP_HINT_NONE, 0};
  harness_init(&h, &wd);
  sp_window *w = run_act(&h, SP_TRIGGER_START, 100, SP_MODE_SEQUENTIAL, 1, 0);
  sp_window_stats st = stats_of(w);
  CHECK(st.pf.fired == 2 && st.pf.gated_ev == 2 && st.pf.held == 2, "fired %g, kept back %g, held %g", st.pf.fired,
        st.pf.gated_ev, st.pf.held);
  CHECK(find_act(&h, "fetch", -1) < 0 && h.taken[J_PFCALL] == 2 && st.pf.promoted == 2, "only search ran (%d), promoted",
        h.taken[J_PFCALL]);
  sp_gate_counts cf = tool_counts(&h, "fetch", -1);
  CHECK(cf.full + cf.warmup + cf.forbid == 0 && gate_sum(&st, SP_TRIG_PRED_START) == 2,
        "the kept-back prediction never reached the policy");
  finish_and_free(&h, w);

  /* both triggers: at start no candidate pays; the streamed name leaves
     search alone among its tool's candidates (odds 1): it fires and is
     promoted, fetch stays held */
  w = run_named(&h, (wpred){"search", 1, 0.5, SP_HINT_NONE, 0}, (wpred){"fetch", 0, 0.3, SP_HINT_NONE, 0});
  st = stats_of(w);
  CHECK(st.pf.gated_ev == 4 && gate_sum(&st, SP_TRIG_PRED_START) == 0, "nothing pays at start (%g kept back)",
        st.pf.gated_ev);
  CHECK(st.pf.fired == 2 && st.gate[SP_TRIG_PRED_NAME][SP_FULL] == 2 && st.pf.promoted == 2 && st.pf.held == 2,
        "the name fired search (%g, %d), promoted %g, fetch held %g", st.pf.fired, st.gate[SP_TRIG_PRED_NAME][SP_FULL],
        st.pf.promoted, st.pf.held);
  finish_and_free(&h, w);

  /* both triggers, two guesses of the same tool: the likely one fires at
     the start; the name then says nothing new about the unlikely one (its
     odds given the name stay 0.05 / (0.95 + 0.05)), so it stays held and
     nothing is wasted */
  w = run_named(&h, (wpred){"search", 1, 0.95, SP_HINT_NONE, 0}, (wpred){"search", 2, 0.05, SP_HINT_NONE, 0});
  st = stats_of(w);
  CHECK(st.pf.fired == 2 && st.pf.promoted == 2 && st.pf.wasted == 0 && st.pf.held == 2,
        "the likely guess fired at start (%g, promoted %g), the unlikely one never did (wasted %g, held %g)",
        st.pf.fired, st.pf.promoted, st.pf.wasted, st.pf.held);
  CHECK(gate_sum(&st, SP_TRIG_PRED_NAME) == 0, "the name fired nothing (%g)", gate_sum(&st, SP_TRIG_PRED_NAME));
  check_settled(w);
  finish_and_free(&h, w);

  /* the predictor says how sure it is of the tool itself (0.9): search
     alone among its candidates is still only 0.5 / 0.9 = 0.56 likely once
     the name streams, short of the 0.91 its cost needs: held, not fired */
  w = run_named(&h, (wpred){"search", 1, 0.5, SP_HINT_NONE, 0.9}, (wpred){"fetch", 0, 0.3, SP_HINT_NONE, 0.3});
  st = stats_of(w);
  CHECK(st.pf.fired == 0 && gate_sum(&st, SP_TRIG_PRED_NAME) == 0 && st.pf.held == 4,
        "the name fired nothing (%g fired, %g held)", st.pf.fired, st.pf.held);
  finish_and_free(&h, w);
  /* 0.88 does not pay at the start; sure of the tool (0.9), the name makes
     it 0.88 / 0.9 = 0.98: fired there */
  w = run_named(&h, (wpred){"search", 1, 0.88, SP_HINT_NONE, 0.9}, (wpred){"fetch", 0, 0.02, SP_HINT_NONE, 0.02});
  st = stats_of(w);
  CHECK(st.pf.fired == 2 && st.pf.promoted == 2, "fired %g, promoted %g", st.pf.fired, st.pf.promoted);
  CHECK(st.gate[SP_TRIG_PRED_NAME][SP_FULL] == 2, "at the name (%d)", st.gate[SP_TRIG_PRED_NAME][SP_FULL]);
  finish_and_free(&h, w);
}

/* The per-query budgets bound predictions like every early launch: the
   calls in flight, and the wasted cost (what is at risk counts against it,
   so waste never exceeds the budget). */
static void test_act_budget(void) {
  harness h;
  world wd = world_all(2, 0);
  wd.pred[wd.npred++] = (wpred){"search", 0, 0.9, SP_HINT_NONE, 0};   /* cost 1, always wasted */
  wd.pred[wd.npred++] = (wpred){"fetch", 0, 0.8, SP_HINT_NONE, 0};    /* cost 0.5 */
  harness_init(&h, &wd);
  sp_policy_budget(h.policy, 1, -1);
  sp_window *w = run_act(&h, SP_TRIGGER_START, 0, SP_MODE_SEQUENTIAL, 1, 0);
  sp_window_stats st = stats_of(w);
  sp_gate_counts cf = tool_counts(&h, "fetch", SP_TRIG_PRED_START);
  CHECK(st.pf.fired == 2 && cf.forbid == 2 && cf.by_budget == 2, "one in flight at a time: fired %g, fetch refused %g",
        st.pf.fired, cf.by_budget);
  finish_and_free(&h, w);

  harness_init(&h, &wd);
  sp_policy_budget(h.policy, -1, 1.0);
  w = run_act(&h, SP_TRIGGER_START, 0, SP_MODE_SEQUENTIAL, 1, 0);
  st = stats_of(w);
  /* hop 0: search puts 1 at risk, fetch would pass the budget; hop 1:
     search's 1 is wasted, nothing more fits */
  CHECK(st.pf.fired == 1 && st.wasted_cost == 1 && st.pf.wasted_cost == 1, "fired %g, wasted cost %g within 1",
        st.pf.fired, st.wasted_cost);
  CHECK(tool_counts(&h, "search", SP_TRIG_PRED_START).by_budget == 1 && tool_counts(&h, "fetch", SP_TRIG_PRED_START).by_budget == 2,
        "refusals counted as budget");
  finish_and_free(&h, w);
}

/* Lossy matching (name_only): the step's reported match is promoted even
   with other args, counted as lossy, and its result is the observation;
   the same call decided exactly is lossless. */
static void test_act_lossy(void) {
  for (int right = 0; right <= 1; right++) {
    harness h;
    world wd = world_all(2, 0);
    wd.pred[wd.npred++] = (wpred){"search", right, 0.9, SP_HINT_NONE, 0};
    wd.match_name = 1;
    harness_init(&h, &wd);
    harness_actspec(&h, SP_MATCH_NAME_ONLY, SP_TRIGGER_START, 0, 10);
    sp_window *w = window_new(&h, SP_MODE_SEQUENTIAL, 1, 1, SP_LAUNCH_EAGER);
    sp_window_start(w, NULL);
    run_all(&h, w, 1, 0);
    sp_window_stats st = stats_of(w);
    CHECK(sp_window_status(w) == SP_WIN_DONE && sp_window_nhops(w) == 2, "done");
    CHECK(st.pf.promoted == 2 && st.pf.promoted_lossy == (right ? 0 : 2) && h.taken[J_CALL] == 0,
          "right %d: promoted %g, lossy %g, calls %d", right, st.pf.promoted, st.pf.promoted_lossy, h.taken[J_CALL]);
    for (int i = 0; i < 2; i++) {
      sp_hop_info hi;
      sp_window_hop(w, i, &hi);
      label ol = get_label(&h, hi.obs_ref);
      CHECK(hi.promoted && ol.kind == V_OBS && ol.hop == i && ol.ok == right,
            "hop %d: the observation is the predicted call's result", i);
    }
    finish_and_free(&h, w);
  }
}

/* (g) Freeing a window with predictions running, finished and promoted
   cancels them all and releases every value they held. */
static void test_act_free_midflight(void) {
  harness h;
  world wd = world_all(4, 0);
  wd.pred[wd.npred++] = RIGHT;
  wd.pred[wd.npred++] = (wpred){"fetch", 0, 0.5, SP_HINT_NONE, 0};
  sp_window *w = begin_act(&h, &wd, SP_TRIGGER_START, SP_MODE_SPECHOP, -1, 1);
  run_one(&h, J_START, 0, 2);                 /* head: search promoted, fetch cancelled */
  run_one(&h, J_SPEC, 0, 1);                  /* T(1) predicts both */
  end_job(&h, find_act(&h, "fetch", 1), 1);    /* one finished, its result held */
  CHECK(h.npend >= 3, "in flight: %d jobs", h.npend);
  free_midflight(&h, w);
}

/* Random worlds, predictions, policies, triggers and completion orders:
   the committed trajectory is the sequential one (no wrong prediction's
   result is ever committed), the counters agree, nothing is left at risk. */
static void test_act_random(void) {
  static const int ks[] = {1, 2, 3, -1};
  static const char *const tools[] = {"search", "fetch"};
  for (uint64_t seed = 1; seed <= 150; seed++) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL;
#define NEXT() (s = s * 6364136223846793005ULL + 1442695040888963407ULL, (int)(s >> 33))
    int k = ks[NEXT() % 4], m = 1 + NEXT() % 2, n = 1 + NEXT() % 6;
    int mode = NEXT() % 3;   /* SP_MODE_SEQUENTIAL, WINDOW, SPECHOP */
    if (mode == SP_MODE_SEQUENTIAL) k = 1;
    if (mode == SP_MODE_WINDOW && k < 0) k = 2;
    int trigger = 1 + NEXT() % 3, d = NEXT() % 4 ? SP_FULL : NEXT() % 2;
    world wd = world_all(n, 0);
    for (int i = 0; i < n; i++) {
      wd.right[i] = NEXT() % (m + 1) - 1;
      wd.spec_fails[i] = NEXT() % 8 == 0;
      wd.verify_fails[i] = NEXT() % 10 == 0;
    }
    wd.npred = 1 + NEXT() % 3;
    for (int i = 0; i < wd.npred; i++)
      wd.pred[i] = (wpred){tools[NEXT() % 4 == 0], NEXT() % 2, 0.9 - 0.2 * i, SP_HINT_NONE, 0};
    wd.stream_name = NEXT() % 2;
    wd.pred_final = NEXT() % 2;
#undef NEXT
    harness h;
    harness_init(&h, &wd);
    sp_policy_class(h.policy, "io", d, 0, 0);
    sp_policy_class(h.policy, "aux", d, 0, 0);
    harness_actspec(&h, SP_MATCH_EXACT, trigger, 0, 10);
    sp_window *w = window_new(&h, mode, k, m, SP_LAUNCH_EAGER);
    sp_window_start(w, NULL);
    run_all(&h, w, k, seed);
    check_trajectory(&h, w, n);
    sp_window_stats st = stats_of(w);
    CHECK(st.pf.promoted <= st.pf.fired && st.pf.wasted <= st.pf.fired && st.predicted_calls == st.pf.fired,
          "seed %llu: fired %g promoted %g wasted %g", (unsigned long long)seed, st.pf.fired, st.pf.promoted,
          st.pf.wasted);
    CHECK(h.taken[J_PFCALL] <= st.pf.fired && st.pf.candidates == h.predictions, "seed %llu: counts agree",
          (unsigned long long)seed);
    int promoted = 0;
    for (int i = 0; i < sp_window_nhops(w); i++) {
      sp_hop_info hi;
      sp_window_hop(w, i, &hi);
      promoted += hi.promoted;
    }
    CHECK(promoted <= st.pf.promoted, "seed %llu: committed promotions %d <= %g", (unsigned long long)seed, promoted,
          st.pf.promoted);
    if (d != SP_FULL) CHECK(h.taken[J_PFCALL] == 0, "seed %llu: decision %d ran a prediction", (unsigned long long)seed, d);
    check_settled(w);
    finish_and_free(&h, w);
  }
}

int main(void) {
  static void (*const cases[])(void) = {test_act_promote_exact, test_act_mismatch, test_act_policy, test_act_scripted,
                                        test_act_rollback,      test_act_ev,       test_act_budget, test_act_lossy,
                                        test_act_free_midflight, test_act_random};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) cases[i]();
  printf("test_window_actspec: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
