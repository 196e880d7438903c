/* sp_ctx: the engine context. One per process run; no globals anywhere. */
#ifndef SP_CTX_H
#define SP_CTX_H
#include <uv.h>
#include <lua.h>
#include "sp_api.h"
#include "sp_timer.h"

typedef struct sp_http sp_http;
typedef struct sp_runnable sp_runnable;

/* Bookkeeping of the value store (engine/sp_vals.c). */
typedef struct sp_vals {
  int *rc;                 /* slot -> reference count */
  int caprc;               /* entries allocated in rc */
  int top;                 /* highest slot handed out */
  int *free;               /* cleared slots ready for reuse */
  int nfree, capfree;      /* used / allocated */
  int *dead;               /* released slots not yet cleared in Lua */
  int ndead, capdead;      /* used / allocated */
  int live;                /* slots with references */
} sp_vals;

struct sp_ctx {
  uv_loop_t loop;          /* the one event loop */
  lua_State *L;            /* the one Lua state (main thread), NULL in pure-C tests */
  int co_table_ref;        /* registry ref of the table id -> coroutine */
  int worker_body_ref;     /* registry ref of the dispatcher loop (sched.lua) job coroutines run */
  lua_State **pool;        /* parked dispatcher coroutines */
  int *pool_refs;          /* their registry anchors */
  int npool, cappool;      /* used / allocated */
  lua_State *disp_co;      /* the dispatcher coroutine running now, NULL if none */
  int disp_ref;            /* its registry anchor */
  int disp_idle;           /* it asked for a job and there was none: park it */
  int budget;              /* jobs left in this drain before I/O gets a turn */
  int gc_pause;            /* the collector pause last set (sp_sched.c gc_tune) */
  int hook_clock;          /* a job hook is running: hook_now is the time */
  uint64_t hook_now;       /* ns on the engine clock, read once when that hook started */
  int vals_ref;            /* registry ref of the value-store table (sched.vals) */
  sp_vals vals;            /* its slot bookkeeping */
  sp_task *task_pool;      /* freed task structs kept for reuse (linked by ready_next) */
  int ntask_pool;          /* entries in task_pool */
  uv_idle_t ready_idle;    /* runs the ready queue while it is non-empty */
  uv_prepare_t reap_prep;  /* releases finished coroutines before each poll */
  sp_runnable *ready_head; /* FIFO of tasks to resume and C callbacks to run */
  sp_runnable *ready_tail; /* tail of that FIFO */
  sp_task *reap;           /* finished tasks whose coroutine must be released */
  sp_task *running;        /* the task being resumed right now */
  sp_task *all_tasks;      /* every task not yet reaped */
  int *free_ids;           /* stack of reusable task ids */
  int n_free_ids;          /* entries in free_ids */
  int cap_free_ids;        /* capacity of free_ids */
  int next_id;             /* next never-used task id (ids start at 1) */
  sp_http *http;           /* the curl multi driver, created on first use */
  sp_timers timers;        /* precise deadlines (sleeps) */
  sp_counts counts;        /* live-object counters, so leaks show in tests */
  int stopping;            /* shutdown in progress: no new work */
  sp_task *main_task;      /* the program's main task (one reference held) */
  int main_done;           /* the main task finished */
  int exit_code;           /* process exit status decided by the main task */
  struct sp_windows *windows; /* the window unit's own state (sp_window.c), NULL before the first window */
  uv_signal_t sig_int;     /* SIGINT watcher (sp_ctx_watch_signals) */
  uv_signal_t sig_term;    /* SIGTERM watcher of a run */
  int sig_armed;           /* the watchers are started (closed at shutdown, once the children are reaped) */
  int sig_run;             /* a run trapped them: its first signal stops it gracefully */
  int sig_caught;          /* first SIGINT/SIGTERM received while armed, 0 if none */
  struct sp_proc *procs;   /* live child processes (sp_proc.c), for shutdown */
  struct sp_rpc_post *rpc_posts; /* cancel notifications still being POSTed */
  /* windows with committed hops whose step and observation Lua has not yet
     encoded (sp_window_cfg.encode_trajectory), oldest first */
  sp_window *enc_head, *enc_tail;
  int enc_pending;         /* windows in that list: Lua reads it after each job */
};

int sp_ctx_init(sp_ctx *ctx);
/* Cancel everything, close every handle and run the loop until they are
   closed; returns the uv_loop_close() status (0 = clean). */
int sp_ctx_shutdown(sp_ctx *ctx);
/* Watch SIGINT/SIGTERM (once; started by the first child process and by a
   run, sp_host_trap_signals): a signal during a trapped run cancels every
   window, any other kills and reaps the children, then takes the default
   action. close stops watching (shutdown, once the children are reaped). */
void sp_ctx_watch_signals(sp_ctx *ctx);
void sp_ctx_close_signals(sp_ctx *ctx);

#endif
