/* sp_host: the LuaJIT state — paths, bootstrap, running the main task. */
#ifndef SP_HOST_H
#define SP_HOST_H
#include "sp_ctx.h"

/* Create the Lua state, point package.path at specula's Lua tree and load
   the scheduler's trampoline. 0 ok, -1 with a message in err. */
int sp_host_init(sp_ctx *ctx, const char *argv0, char *err, size_t errlen);
/* Call specula.cmd.main(args) (the command table) and run the loop until the main task ends.
   Returns the process exit status. */
int sp_host_run(sp_ctx *ctx, int argc, char **argv);
/* The signal watch itself is sp_signal.c's: the first child process
   arms it too (sp_proc.c). */

#endif
