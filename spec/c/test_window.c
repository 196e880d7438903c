/* C test of the speculation window (engine/sp_window.c) without Lua: the
 * tree, commits, rollbacks, outcomes and leaks after any order of job
 * completions. The harness (the dispatcher's part and a fake agent) is
 * window_harness.h; action speculation has its own file, test_window_actspec.c. */
#include "window_harness.h"

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

/* The bounded window with an unbounded k has no bound: it speculates as
   the continuous schedule does (it used to refuse every slot). */
static void test_window_unbounded(void) {
  harness h;
  world wd = world_all(4, 0);
  sp_window *w = begin(&h, &wd, SP_MODE_WINDOW, -1, 1, SP_LAUNCH_SLOT);
  run_all(&h, w, -1, 0);
  check_trajectory(&h, w, 4);
  sp_window_stats st = stats_of(w);
  CHECK(st.spec_calls == 4 && st.commits == 4, "window mode, k unbounded: speculators %d, commits %d", st.spec_calls,
        st.commits);
  CHECK(st.max_threads >= 2, "more than one live thread (%d)", st.max_threads);
  finish_and_free(&h, w);
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
  free_midflight(&h, w);
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
  test_window_unbounded();
  test_random_orders();
  test_deferred_gate();
  test_cancel_on_free();
  test_cancel_running();
  test_group();
  printf("test_window: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
