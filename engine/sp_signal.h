/*
 * sp_signal: the SIGINT/SIGTERM watch. Armed once, by the first child
 * process (sp_signals_watch: a signal that ends the process takes the
 * children with it, reaped) and by a run (sp_signals_trap: its first signal
 * stops it gracefully instead). The watch knows neither processes nor
 * windows: each arming module hands in what to do.
 */
#ifndef SP_SIGNAL_H
#define SP_SIGNAL_H
#include "sp_ctx.h"

typedef void (*sp_signal_fn)(sp_ctx *ctx);

/* The watch's state (ctx->signals), made when it is first armed and closed
   at shutdown once the children are reaped. */
typedef struct sp_signals {
  uv_signal_t sig_int;     /* SIGINT watcher */
  uv_signal_t sig_term;    /* SIGTERM watcher */
  int armed;               /* the watchers are started */
  int run;                 /* a run trapped them: its first signal stops it gracefully */
  int caught;              /* first SIGINT/SIGTERM received while trapped, 0 if none */
  int is_end;              /* the program ends on a signal by design: its exit status stays */
  sp_signal_fn stop;       /* what stops a trapped run (cancel every window) */
  sp_signal_fn die;        /* what runs before the default action (reap the children) */
} sp_signals;

/* Watch (once); die runs before a signal's default action ends the process.
   0 ok, -1 out of memory. */
int sp_signals_watch(sp_ctx *ctx, sp_signal_fn die);
/* A run traps them: its first signal is remembered and calls stop instead
   of ending the process; a second one ends it. */
int sp_signals_trap(sp_ctx *ctx, sp_signal_fn stop);
/* The run is over: a signal from here on ends the process. */
void sp_signals_untrap(sp_ctx *ctx);
int sp_signals_caught(const sp_ctx *ctx);   /* the signal a trapped run caught, 0 if none */

#endif
