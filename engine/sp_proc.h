/*
 * sp_proc: child processes over stdio pipes (MCP servers and the like),
 * and sp_rpc: one outstanding JSON-RPC request whose waiting task, when it
 * is cancelled or times out, tells the peer (notifications/cancelled) at
 * once from C, since a cancelled task never runs Lua again.
 *
 * A child's stdout is cut into newline-terminated lines in a bounded
 * buffer; stderr keeps only its last bytes (for error messages). Closing a
 * process closes its stdin, sends SIGTERM, then SIGKILL after a grace
 * period; the handle stays open until the child has been reaped, and the
 * context's shutdown does the same for every process still running.
 */
#ifndef SP_PROC_H
#define SP_PROC_H
#include "sp_sched.h"
#include "sp_buf.h"
#include "sp_timer.h"

/* The processes' state (ctx->procs), made with the first child or the
   first cancel POST; at shutdown every process is killed and reaped, the
   posts freed. A signal that ends the process SIGKILLs and waits for every
   live child first (sp_signals_watch). */
typedef struct sp_procs {
  sp_proc *live;              /* live child processes, for shutdown */
  struct sp_rpc_post *posts;  /* cancel notifications still being POSTed */
} sp_procs;

#endif
