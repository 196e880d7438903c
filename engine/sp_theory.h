/*
 * sp_theory: the SpecHop latency theory (paper §3, appendix B) as pure
 * functions of plain doubles, so LuaJIT's FFI can call them directly.
 *
 *   p      speculation success probability per hop, in [0, 1]
 *   alpha  E[T_spec] / E[T_target]   (relative speculator latency, >= 0)
 *   beta   E[T_seg]  / E[T_target]   (decoding-to-tool latency ratio, >= 0)
 *   k      active threads / window size; k < 0 or k = INFINITY means unbounded
 *   nu     maximum coefficient of variation of the stage latencies (>= 0)
 *
 * Out-of-domain inputs give NaN (doubles) or 0 (k_eps); nothing aborts.
 */
#ifndef SP_THEORY_H
#define SP_THEORY_H
#include "sp_api.h"   /* sp_est, the estimator */

/* Corollary 1: oracle relative latency 1 - p(1-alpha)/(1+beta). */
double sp_theory_rel_lat_star(double p, double alpha, double beta);
/* Corollary 3: bounded-window relative latency with mu_k = (1-p^k)/(1-p);
   k = 1 gives 1, unbounded k gives RelLat*. k in [0, 1) is NaN. */
double sp_theory_rel_lat_k(double p, double alpha, double beta, double k);
/* Deterministic thread count (1+beta)/(alpha+beta) (Theorem 4, k_det). */
double sp_theory_k_det(double alpha, double beta);
/* Theorem 4: upper bound on the starvation probability with k threads. */
double sp_theory_p_starve(double k, double alpha, double beta, double nu);
/* Standard normal quantile: z(q) with Phi(z) = q; -inf/+inf at 0/1. */
double sp_theory_z(double q);
/* Corollary 5: threads needed for P_starve <= eps, at least 1;
   -1 when unbounded (alpha + beta = 0), 0 on invalid input. */
int sp_theory_k_eps(double alpha, double beta, double nu, double eps);

/* `specula theory ...`; argv[0] is the subcommand name. Returns the exit
   status: 0 ok, 2 usage error. */
int sp_theory_main(int argc, char **argv);

#endif
