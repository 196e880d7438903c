#include "sp_stats.h"
#include "sp_opt.h"
#include "sp_theory.h"
#include <math.h>
#include <stdlib.h>

struct sp_kauto {
  double eps;            /* starvation risk accepted (Cor. 5) */
  int k_min, k_max;      /* clamp */
  int k_default;         /* used until enough samples */
  sp_welford seg;        /* model step latencies */
  sp_welford spec;       /* speculator latencies */
  sp_welford target;     /* target latencies */
};

void sp_welford_add(sp_welford *w, double x) {
  w->n += 1;
  double d = x - w->mean;
  w->mean += d / w->n;
  w->m2 += d * (x - w->mean);
}

double sp_welford_cv(const sp_welford *w) {
  if (w->n < 2 || w->mean <= 0) return 0;
  return sqrt(w->m2 / (w->n - 1)) / w->mean;
}

sp_kauto *sp_kauto_new(double eps, int k_min, int k_max, int k_default) {
  sp_kauto *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  /* out-of-range arguments fall back to the shared defaults (sp_opt.c) */
  a->eps = eps > 0 && eps < 1 ? eps : sp_opt_default("eps");
  a->k_min = k_min >= 1 ? k_min : (int)sp_opt_default("kauto_min");
  a->k_max = k_max >= a->k_min ? k_max : (int)sp_opt_default("kauto_max");
  a->k_default = k_default >= a->k_min ? k_default : (int)sp_opt_default("kauto_default");
  return a;
}

void sp_kauto_free(sp_kauto *a) { free(a); }

void sp_kauto_add(sp_kauto *a, double t_seg, double t_spec, double t_target) {
  if (!a) return;
  if (t_seg >= 0) sp_welford_add(&a->seg, t_seg);
  if (t_spec >= 0) sp_welford_add(&a->spec, t_spec);
  if (t_target >= 0) sp_welford_add(&a->target, t_target);
}

void sp_kauto_estimates(const sp_kauto *a, double *alpha, double *beta, double *nu) {
  double tt = a->target.mean;
  *alpha = tt > 0 ? a->spec.mean / tt : 0;
  *beta = tt > 0 ? a->seg.mean / tt : 0;
  double v = sp_welford_cv(&a->seg);
  double v2 = sp_welford_cv(&a->spec);
  double v3 = sp_welford_cv(&a->target);
  if (v2 > v) v = v2;
  if (v3 > v) v = v3;
  *nu = v;
}

int sp_kauto_k(sp_kauto *a) {
  if (!a) return (int)sp_opt_default("kauto_default");
  if (a->target.n < 3 || a->spec.n < 3 || a->target.mean <= 0) return a->k_default;
  double alpha, beta, nu;
  sp_kauto_estimates(a, &alpha, &beta, &nu);
  if (alpha + beta <= 0) return a->k_max;
  int k = sp_theory_k_eps(alpha, beta, nu, a->eps);
  if (k == SP_K_UNBOUNDED) k = a->k_max;
  if (k < a->k_min) k = a->k_min;
  if (k > a->k_max) k = a->k_max;
  return k;
}
