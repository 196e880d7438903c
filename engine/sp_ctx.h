/*
 * sp_ctx: the engine context. One per process run; no globals anywhere.
 *
 * The context holds the loop, the Lua state, the clock and the live-object
 * counters, and one pointer per owner of the rest: each module declares its
 * own state struct in its own header, creates it (sp_engine_init, or at its
 * first use) and registers its shutdown with sp_ctx_own. The context knows
 * the owners' order, never their insides: sp_ctx.c includes no module above
 * it (docs/architecture.md, Layers).
 */
#ifndef SP_CTX_H
#define SP_CTX_H
#include <uv.h>
#include <lua.h>
#include "sp_api.h"
#include "sp_timer.h"

/* The owners of the context's state, in the order its shutdown runs them:
   the windows are cancelled before the tasks their jobs run in; the
   scheduler reaps before the processes and http close; the processes'
   cancel notifications are http requests, freed before http itself; the
   HTTP servers' listeners and connections close with them; the process's
   own stdio last, so an answer written at the end is flushed. The record
   files' buffers are written before lua_close closes the files and freed
   after it (sp_outfile.h). */
enum { SP_OWN_WINDOWS, SP_OWN_SCHED, SP_OWN_PROCS, SP_OWN_HTTPD, SP_OWN_HTTP, SP_OWN_SIGNALS,
       SP_OWN_VALS, SP_OWN_OUTFILES, SP_OWN_STDIO, SP_OWNERS };

/* An owner's part in the shutdown (sp_ctx_shutdown), each step optional. */
typedef struct sp_owner {
  void (*cancel)(sp_ctx *ctx);  /* stop what runs; the Lua state is still open */
  void (*close)(sp_ctx *ctx);   /* Lua is closed: close handles, kill children (the loop then runs) */
  void (*reaped)(sp_ctx *ctx);  /* after that turn of the loop: children are reaped */
  void (*release)(sp_ctx *ctx); /* free the state, before the loop closes */
} sp_owner;

struct sp_ctx {
  uv_loop_t loop;               /* the one event loop */
  lua_State *L;                 /* the one Lua state (main thread), NULL in pure-C tests */
  sp_timers timers;             /* the engine clock and its precise deadlines (sleeps) */
  sp_counts counts;             /* live-object counters, so leaks show in tests */
  int stopping;                 /* shutdown in progress: no new work */
  int exit_code;                /* process exit status decided by the main task */
  struct sp_sched *sched;       /* tasks, ready queue, dispatcher (sp_sched.h) */
  struct sp_vals *vals;         /* the value store's bookkeeping (sp_vals.h) */
  struct sp_http *http;         /* the curl multi driver (sp_http.c), NULL before the first transfer */
  struct sp_procs *procs;       /* child processes (sp_proc.c), NULL before the first one */
  struct sp_httpds *httpd;      /* HTTP servers (sp_httpd.c), NULL before the first listener */
  struct sp_windows *windows;   /* the window unit (sp_window_int.h), NULL before the first window */
  struct sp_signals *signals;   /* the SIGINT/SIGTERM watch (sp_signal.h), NULL until armed */
  struct sp_stdio *stdio;       /* the process's own stdin/stdout (sp_stdio.c), NULL until opened */
  struct sp_outfiles *outfiles; /* record files flushed per drain (sp_outfile.c), NULL until the first */
  const sp_owner *owners[SP_OWNERS]; /* each owner's shutdown, by SP_OWN_* */
};

/* The loop and the clock only; sp_engine_init (sp_engine.h) adds the
   owners a context always has. 0 ok, -1 if the loop cannot start. */
int sp_ctx_init(sp_ctx *ctx);
/* Register an owner's shutdown in its slot (SP_OWN_*); o must outlive ctx. */
void sp_ctx_own(sp_ctx *ctx, int slot, const sp_owner *o);
/* Cancel everything, close every handle and run the loop until they are
   closed, each owner in its turn; returns the uv_loop_close() status
   (0 = clean). */
int sp_ctx_shutdown(sp_ctx *ctx);

#endif
