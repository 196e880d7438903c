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
#include "sp_vals.h"

typedef struct sp_op sp_op;
typedef struct sp_runnable sp_runnable;
typedef void (*sp_op_cancel_fn)(sp_op *op);

/* A pending operation of a task. */
struct sp_op {
  sp_op *prev, *next;       /* links in the owner's pending list */
  sp_task *task;            /* owner, NULL once detached */
  sp_op_cancel_fn cancel;   /* cleanup run when the owner is cancelled or ends */
};

/* The entries of one query's window (its jobs, the tasks they spawn, its
   own callbacks): the ready queue keeps their order among themselves and
   runs what one of them queues right after it, up to SP_RUN_MAX in a row
   (sp_sched.c, "Runs"). */
#define SP_RUN_MAX 256
/* Runs only while at least this many windows are live (fewer fit in cache). */
#define SP_RUN_WINDOWS 64
typedef struct sp_rgroup {
  int queued;   /* its entries in the queue behind the run at the head */
} sp_rgroup;

/* An entry of the ready queue: a task to resume or a C callback to run. */
struct sp_runnable {
  sp_runnable *next;                          /* FIFO link */
  void (*run)(sp_ctx *ctx, sp_runnable *r);   /* what to do when dequeued */
  sp_rgroup *group;                           /* the window it belongs to, NULL none */
  unsigned char queued;                       /* already in the queue */
  unsigned char in_run;                       /* queued in the run at the head */
};

/* Called when a job ends (DONE or FAILED; never on cancel). For DONE, res
   holds its results; slots in res are released after the hook returns, so
   a hook retains what it keeps. For FAILED, res is NULL and the message is
   sp_task_error(t). Runs inside sp_job_done (an FFI call): no Lua state. */
typedef void (*sp_task_hook)(sp_task *t, const sp_jobres *res, int status, void *ud);

typedef struct sp_waitop sp_waitop;

/* The scheduler's state (ctx->sched): tasks, the ready queue, and the Lua
   dispatcher's coroutines. Made by sp_sched_init. */
typedef struct sp_sched {
  int co_table_ref;        /* registry ref of the table id -> coroutine */
  int worker_body_ref;     /* registry ref of the dispatcher loop (sched.lua) job coroutines run */
  lua_State **pool;        /* parked dispatcher coroutines */
  int *pool_refs;          /* their registry anchors */
  int npool, cappool;      /* used / allocated */
  lua_State *disp_co;      /* the dispatcher coroutine running now, NULL if none */
  int disp_ref;            /* its registry anchor */
  int disp_idle;           /* it asked for a job and there was none: park it */
  int budget;              /* jobs left in this drain before I/O gets a turn */
  int gc_pause;            /* the collector pause last set (gc_tune) */
  int hook_clock;          /* a job hook is running: hook_now is the time */
  uint64_t hook_now;       /* ns on the engine clock, read once when that hook started */
  sp_task *task_pool;      /* freed task structs kept for reuse (linked by reap_next) */
  int ntask_pool;          /* entries in task_pool */
  uv_idle_t ready_idle;    /* runs the ready queue while it is non-empty */
  uv_prepare_t reap_prep;  /* releases finished coroutines before each poll */
  sp_runnable *ready_head; /* FIFO of tasks to resume and C callbacks to run */
  sp_runnable *ready_tail; /* tail of that FIFO */
  sp_runnable *run_last;   /* last entry of the run at the head (one group's), NULL none */
  sp_rgroup *run_group;    /* the group of the entry running now, NULL none */
  int run_len;             /* entries of run_group run back to back so far */
  sp_task *reap;           /* finished tasks whose coroutine must be released */
  sp_task *running;        /* the task being resumed right now */
  sp_task *all_tasks;      /* every task not yet reaped */
  int *free_ids;           /* stack of reusable task ids */
  int n_free_ids;          /* entries in free_ids */
  int cap_free_ids;        /* capacity of free_ids */
  int next_id;             /* next never-used task id (ids start at 1) */
  sp_task *main_task;      /* the program's main task (one reference held) */
  int main_done;           /* the main task finished */
} sp_sched;

struct sp_task {
  sp_runnable run;          /* ready-queue entry: resume this task */
  sp_ctx *ctx;              /* owning context */
  int id;                   /* key of the coroutine in the coroutine table */
  int refs;                 /* engine (until reaped) + Lua handle + queue */
  int nargs;                /* values pushed on co for the first resume */
  int worker_ref;           /* anchor of the dispatcher coroutine a waiting job holds */
  unsigned char state;      /* SP_TASK_* */
  unsigned char reaping;    /* on the reap list */
  unsigned char job;        /* a window call run by the Lua dispatcher */
  unsigned char speculative; /* runs for an unverified state (eligibility) */
  unsigned char stalled;    /* woken from a task wait nothing could end (sp_sched_break_stall) */
  int job_id;               /* id of the window job it runs for (itself, or the job that spawned it), 0 none */
  int job_thread;           /* that job's window thread (the node's trace tid), 0 none */
  lua_State *co;            /* the coroutine, anchored in the coroutine table */
  sp_task *parent;          /* cancelling the parent cancels this task */
  sp_task *child;           /* first child */
  sp_task *prev_sib, *next_sib; /* siblings under parent */
  sp_op ops;                /* sentinel of the pending-operation list */
  sp_waitop *waiters;       /* waits of other tasks on this one */
  sp_task_hook hook;        /* C completion hook (window jobs) */
  void *hook_ud;            /* its argument */
  char *error;              /* message and traceback when FAILED */
  void *window_node;        /* the window node this job belongs to, if any */
  uint64_t job_born_ns;     /* engine clock when that job was created */
  sp_task *reap_next;       /* reap list link */
  sp_task *all_prev, *all_next; /* every live task, for shutdown */
  double defer_ms;          /* sp_job_defer: the job finishes this long after it returns */
  struct sp_deferop *deferred; /* its results while that time passes */
  sp_jobcall call;          /* a job's function and arguments (held until it ends);
                               last: a recycled struct is cleared up to here */
};

/* The loop has nothing left (no timer, transfer or ready task) while the
   main task waits: every other task waiting on tasks is woken to raise
   (tasks waiting on each other fail the query they belong to, not the
   process). Returns how many were woken; 0: the main task's wait itself
   can never end. */
int sp_sched_break_stall(sp_ctx *ctx);
/* Make ctx->sched and register its shutdown (sp_engine_init). 0 ok, -1 out of memory. */
int sp_sched_init(sp_ctx *ctx);
void sp_sched_enqueue(sp_ctx *ctx, sp_runnable *r);
void sp_sched_wake(sp_task *t);                     /* resume t at the next turn */
void sp_sched_unqueue(sp_ctx *ctx, sp_runnable *r);  /* take a C runnable off the queue */
/* Create a job of a kind (SP_JOB_*): a Lua call the dispatcher runs
   (sched.lua) without a coroutine switch unless it waits. The caller fills
   its arguments in t->call by name (the slots with a reference the job
   takes: sp_vals_ref), then queues it with sp_job_start. */
sp_task *sp_job_new(sp_ctx *ctx, int kind, sp_task_hook hook, void *ud);
void sp_job_start(sp_task *t);                      /* queue it */

void sp_op_link(sp_task *t, sp_op *op, sp_op_cancel_fn cancel);
void sp_op_unlink(sp_op *op);
void sp_sched_drain(sp_ctx *ctx);                   /* run the ready queue now */
/* Run the entry at the head of the ready queue if it is a C callback (a
   window's kick, a prediction trigger): 1 if it ran one, 0 if the queue is
   empty or a task or job is next. For a host without a Lua state, which
   takes jobs itself (sp_job_next / sp_job_done); see sp_window.h. */
int sp_sched_run_c(sp_ctx *ctx);
/* A new Lua state's first collection waits until its heap has grown by the
   least slack any later cycle gets (SP_GC_SLACK_MIN_KB): loading the
   engine's modules ran cycles that each re-marked what was loaded. */
void sp_sched_gc_defer(lua_State *L);
void sp_sched_poke(sp_ctx *ctx);                    /* keep the loop turning (virtual clock) */
void sp_sched_reap(sp_ctx *ctx);

#endif
