/*
 * sp_sched: tasks (coroutines resumed by the loop), their pending operations,
 * and the ready queue. The one place where C resumes Lua.
 *
 * A task's pending operations (sleeps, transfers, waits) are linked to it;
 * cancelling the task runs every operation's cleanup at once, so nothing it
 * started outlives it. Lua never runs inside an FFI call or a libcurl
 * callback: work that needs the Lua state is queued here and run from the
 * idle callback.
 */
#ifndef SP_SCHED_H
#define SP_SCHED_H
#include <stdint.h>
#include <lua.h>
#include "sp_ctx.h"

typedef struct sp_op sp_op;
typedef void (*sp_op_cancel_fn)(sp_op *op);

/* A pending operation of a task. */
struct sp_op {
  sp_op *prev, *next;       /* links in the owner's pending list */
  sp_task *task;            /* owner, NULL once detached */
  sp_op_cancel_fn cancel;   /* cleanup run when the owner is cancelled or ends */
};

/* An entry of the ready queue: a task to resume or a C callback to run. */
struct sp_runnable {
  sp_runnable *next;                          /* FIFO link */
  void (*run)(sp_ctx *ctx, sp_runnable *r);   /* what to do when dequeued */
  int queued;                                 /* already in the queue */
};

/* Called when a job task ends (DONE or FAILED; never on cancel). For DONE,
   the body's return values are on co's stack (index 1..n). */
typedef void (*sp_task_hook)(sp_task *t, lua_State *co, int status, void *ud);

typedef struct sp_waitop sp_waitop;

/* An argument of a job, kept in C until the job first runs: queued jobs
   hold no coroutine (a batch may queue tens of thousands of them). */
enum { SP_ARG_NIL, SP_ARG_REF, SP_ARG_INT, SP_ARG_NUM, SP_ARG_BOOL, SP_ARG_STR, SP_ARG_SREF };
typedef struct sp_jobarg {
  int kind;                 /* SP_ARG_* */
  union {
    int ref;                /* registry ref, pinned until pushed */
    long long i;            /* integer */
    double d;               /* number */
    int b;                  /* boolean */
    char *s;                /* owned string */
  } v;
} sp_jobarg;
#define SP_JOB_MAXARGS 24

struct sp_task {
  sp_runnable run;          /* ready-queue entry: resume this task */
  sp_ctx *ctx;              /* owning context */
  int id;                   /* key of the coroutine in the coroutine table */
  int state;                /* SP_TASK_* */
  int refs;                 /* engine (until reaped) + Lua handle + queue */
  int nargs;                /* values pushed on co for the first resume */
  int reaping;              /* on the reap list */
  int job;                  /* runs on a pooled worker coroutine */
  int worker_ref;           /* registry anchor of that worker while it runs this job */
  sp_jobarg *args;          /* a job's arguments until its first resume */
  int nargs_c;              /* entries in args */
  lua_State *co;            /* the coroutine, anchored in the coroutine table */
  sp_task *parent;          /* cancelling the parent cancels this task */
  sp_task *child;           /* first child */
  sp_task *prev_sib, *next_sib; /* siblings under parent */
  sp_op ops;                /* sentinel of the pending-operation list */
  sp_waitop *waiters;       /* waits of other tasks on this one */
  sp_task_hook hook;        /* C completion hook (window jobs) */
  void *hook_ud;            /* its argument */
  char *error;              /* message and traceback when FAILED */
  int speculative;          /* runs for an unverified state (eligibility) */
  void *window_node;        /* the window node this job belongs to, if any */
  sp_task *reap_next;       /* reap list link */
  sp_task *all_prev, *all_next; /* every live task, for shutdown */
};

void sp_sched_init(sp_ctx *ctx);
void sp_sched_enqueue(sp_ctx *ctx, sp_runnable *r);
void sp_sched_wake(sp_task *t);                     /* resume t at the next turn */
void sp_sched_unqueue(sp_ctx *ctx, sp_runnable *r);  /* take a C runnable off the queue */
/* Create a job: a task that runs a Lua function on a pooled worker
   coroutine. Add the function and its arguments with sp_job_* (the first
   argument is the function), then sp_job_start. A coroutine is only taken
   when the job first runs. */
sp_task *sp_job_new(sp_ctx *ctx, sp_task_hook hook, void *ud);
void sp_job_ref(sp_task *t, int ref);               /* a registry value (pinned) */
void sp_job_ref_stable(sp_task *t, int ref);        /* one that outlives the job (not pinned) */
void sp_job_int(sp_task *t, long long v);
void sp_job_num(sp_task *t, double v);
void sp_job_bool(sp_task *t, int v);
void sp_job_nil(sp_task *t);
void sp_job_str(sp_task *t, const char *s);
void sp_job_start(sp_task *t);                      /* queue the first resume */

/* Registry refs that queued jobs still need are pinned: a release while
   pinned is carried out when the last pin goes. Loop context for release. */
void sp_ref_pin(sp_ctx *ctx, int ref);
void sp_ref_unpin(sp_ctx *ctx, int ref);
void sp_ref_release(sp_ctx *ctx, int ref);
void sp_op_link(sp_task *t, sp_op *op, sp_op_cancel_fn cancel);
void sp_op_unlink(sp_op *op);
void sp_sched_drain(sp_ctx *ctx);                   /* run the ready queue now */
void sp_sched_reap(sp_ctx *ctx);
void sp_sched_cancel_all(sp_ctx *ctx);              /* shutdown: cancel every live task */

#endif
