/*
 * sp_window: the speculation window of one query (SpecHop, Algorithms 1–2,
 * with several candidates per hop). The whole schedule — which thread runs,
 * when the head is verified, commit, rollback, the eligibility gate, the
 * timing of every stage — lives in sp_window.c. The public entry points are
 * in sp_api.h; this header holds what other C modules need.
 */
#ifndef SP_WINDOW_H
#define SP_WINDOW_H
#include "sp_sched.h"

/* Shutdown: cancel every live window (loop context). */
void sp_window_cancel_all(sp_ctx *ctx);
void sp_window_pool_free(sp_ctx *ctx);   /* shutdown: free recycled node structs */

#endif
