/*
 * sp_synth: the event-level model of `specula theory`. Synthetic queries
 * whose stage times are drawn at (p, alpha, beta) are replayed on the
 * speculation window (sp_replay_run_on), the same schedule a recording is
 * replayed on, so the theory's event-level RelLat is what the engine does.
 */
#ifndef SP_SYNTH_H
#define SP_SYNTH_H
#include <stdint.h>

/* The event-level model at (p, alpha, beta): n_queries synthetic queries of
   n_hops hops (stage times with means beta, alpha and 1 for the target,
   lognormal with coefficient of variation cv, 0 = fixed; each guess right
   with probability p) replayed as sp_replay_run does (k: >= 1 or SP_K_UNBOUNDED). Returns
   sum wall / sum standard; NaN on invalid input. Deterministic in seed. */
double sp_synth_model(double p, double alpha, double beta, double cv, int k, const char *mode, int launch,
                      int n_hops, int n_queries, uint64_t seed);

#endif
