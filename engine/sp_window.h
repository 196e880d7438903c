/*
 * sp_window: the speculation window of one query (SpecHop, Algorithms 1–2,
 * with several candidates per hop). The whole schedule — which thread runs,
 * when the head is verified, commit, rollback, the eligibility gate, the
 * timing of every stage — lives in sp_window.c. The public entry points are
 * in sp_api.h; this header holds what other C modules need.
 *
 * Driving a window without Lua (spec/c/test_window.c): the window reaches
 * Lua only through jobs on the ready queue, and its adapter functions are
 * plain value-store slots (sp_vals_new), so a C host can play the Lua
 * dispatcher's part on a context with no Lua state (ctx->L == NULL):
 *   - sp_sched_run_c runs the C callbacks at the head of the ready queue
 *     (the window's start and free kicks);
 *   - sp_job_next takes the next job (set ctx->sched->budget first: the dispatcher's
 *     per-drain allowance); sp_job_call shows its kind (SP_JOB_*) and its
 *     named arguments (sp_jobcall), the node's values among them;
 *   - sp_job_done ends it with the named results of its kind (sp_jobres),
 *     values as fresh slots; a job the window cancelled meanwhile is ended
 *     the same way, its hook does not run.
 * Jobs may be held and ended in any order, as the loop would end them.
 * sp_window_free then frees the window at once (no Lua state to sweep).
 * Action speculation (spec/c/test_window_actspec.c) needs one more piece: the
 * calls a step makes while it runs (sp_window_predict, sp_window_predicted,
 * sp_window_tool_name) find their thread through ctx->sched->running, which
 * sp_job_next sets to the job it hands out; a host calling them later for
 * a job it holds (a streamed tool name) sets ctx->sched->running to that job
 * around the call, as the dispatcher does when it resumes the step.
 */
#ifndef SP_WINDOW_H
#define SP_WINDOW_H
#include "sp_sched.h"

/* Cancel every live window (loop context): the first step of the
   shutdown, and a trapped run's first signal (sp_host.c). */
void sp_window_cancel_all(sp_ctx *ctx);

#endif
