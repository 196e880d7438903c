/* The event-level model at given (p, alpha, beta): synthetic stage draws
   played through the same schedule as a recording (sp_replay_run_on). */
#include "sp_synth.h"
#include "sp_winplay.h"
#include "sp_rand.h"
#include "sp_replay.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static double unif(uint64_t *s) { return ((double)(sp_rand_next(s) >> 11) + 0.5) / 9007199254740992.0; }

/* A draw with the given mean and coefficient of variation (lognormal; cv 0: fixed). */
static double draw(uint64_t *s, double mean, double cv) {
  if (mean <= 0) return 0;
  if (cv <= 0) return mean;
  double s2 = log(1 + cv * cv);
  double z = sqrt(-2 * log(unif(s))) * cos(2 * M_PI * unif(s));
  return mean * exp(sqrt(s2) * z - s2 / 2);
}

double sp_synth_model(double p, double alpha, double beta, double cv, int k, const char *mode, int launch,
                      int n_hops, int n_queries, uint64_t seed) {
  if (!(p >= 0 && p <= 1) || !(alpha >= 0) || !(beta >= 0) || !(cv >= 0) || n_hops < 1 || n_queries < 1 ||
      !isfinite(alpha) || !isfinite(beta) || !isfinite(cv))
    return NAN;
  sp_replay_hop *hops = calloc((size_t)n_hops, sizeof *hops);
  sp_winplay *pb = hops ? sp_winplay_new() : NULL;
  if (!pb) {
    free(hops);
    return NAN;
  }
  uint64_t st = seed ^ 0x5bd1e995ull;
  double wall = 0, std = 0;
  for (int qi = 0; qi < n_queries; qi++) {
    for (int i = 0; i < n_hops; i++) {
      sp_replay_hop *h = &hops[i];
      memset(h, 0, sizeof *h);
      h->t_seg = draw(&st, beta, cv);
      h->t_spec = draw(&st, alpha, cv);
      h->t_target = draw(&st, 1.0, cv);
      h->spec = unif(&st) < p ? SP_SPEC_ACCEPTED : SP_SPEC_REJECTED;
      h->ncands = 1;
    }
    sp_replay_query q;
    memset(&q, 0, sizeof q);
    q.hops = hops;
    q.n_hops = (size_t)n_hops;
    q.m = 1;
    q.launch = launch == SP_REPLAY_EAGER ? SP_REPLAY_EAGER : SP_REPLAY_SLOT;
    q.has_spec = 1;
    q.final_seg = draw(&st, beta, cv);
    double w = 0, sd = 0;
    if (isnan(sp_replay_run_on(pb, &q, mode, k, q.launch, &w, &sd))) {
      free(hops);
      sp_winplay_free(pb);
      return NAN;
    }
    wall += w;
    std += sd;
  }
  free(hops);
  sp_winplay_free(pb);
  return std > 0 ? wall / std : NAN;
}
