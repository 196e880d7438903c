/*
 * sp_engine: an engine context with its standing owners. sp_ctx_init makes
 * the loop and the clock; sp_engine_init adds what every context has from
 * the start (the scheduler and the value store). The other owners (http,
 * child processes, windows, the signal watch) make their state at first use
 * and register their shutdown with the context then; sp_ctx_shutdown runs
 * them all. The one module that sees every owner's state (for
 * sp_ctx_counts), so nothing includes it but the hosts: sp_main.c,
 * sp_winplay.c and the C tests.
 */
#ifndef SP_ENGINE_H
#define SP_ENGINE_H
#include "sp_ctx.h"

/* 0 ok, -1 if the loop cannot start or memory runs out (nothing is left
   to shut down then). */
int sp_engine_init(sp_ctx *ctx);

#endif
