/*
 * sp_stdio: the process's own stdin read by lines and its stdout written,
 * on the loop, for a program that is itself a stdio server (the gateway):
 * one JSON-RPC message per line each way.
 *
 * stdin may be a pipe or a socket (what a client that spawns us gives), a
 * tty or a regular file; stdout the same. Lines longer than the limit are
 * dropped and counted, like a child's (sp_proc.c). The state is the
 * context's (ctx->stdio, made at the first sp_stdio_open): Lua never frees
 * it; the context's shutdown flushes what is left to write (for a while)
 * and closes the handles.
 */
#ifndef SP_STDIO_H
#define SP_STDIO_H
#include "sp_sched.h"
#include "sp_buf.h"

#endif
