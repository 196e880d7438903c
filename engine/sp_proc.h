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

void sp_proc_shutdown(sp_ctx *ctx);   /* kill and close every process, free pending cancel posts */
void sp_proc_reap_now(sp_ctx *ctx);   /* SIGKILL every live child and wait for it (the process is about to die) */

#endif
