/*
 * sp_theory: the SpecHop latency theory (paper §3, appendix B) as pure
 * functions of plain doubles, so LuaJIT's FFI can call them directly.
 *
 *   p      speculation success probability per hop, in [0, 1]
 *   alpha  E[T_spec] / E[T_target]   (relative speculator latency, >= 0)
 *   beta   E[T_seg]  / E[T_target]   (decoding-to-tool latency ratio, >= 0)
 *   k      active threads / window size; INFINITY (or SP_K_UNBOUNDED) is unbounded
 *   nu     maximum coefficient of variation of the stage latencies (>= 0)
 *
 * Out-of-domain inputs give NaN (doubles) or 0 (k_eps); nothing aborts.
 */
#ifndef SP_THEORY_H
#define SP_THEORY_H
#include "sp_api.h"   /* the theory functions Lua calls */

/* RelLat* (Corollary 1), RelLat_k (Corollary 3), k_det and P_starve
   (Theorem 4) and k_eps (Corollary 5) are declared in sp_api.h: Lua calls
   them through the FFI. What only C uses is below. */

/* Standard normal quantile: z(q) with Phi(z) = q; -inf/+inf at 0/1. */
double sp_theory_z(double q);

#endif
