/* The paired bootstrap's resampling loop (see sp_bootstrap.h). The arithmetic
 * mirrors stats.lua line by line: the draw is floor(u * n) + 1 with u =
 * x / 2^32, the sums run in draw order, and the median is read off the
 * cumulative counts per rank. */
#include "sp_bootstrap.h"
#include <math.h>
#include <string.h>

/* Σ other / Σ base of a resample; a zero baseline sum is +inf (1 when both are 0). */
static double ratio_of(double sbase, double sother) {
  if (sbase == 0) return sother == 0 ? 1 : HUGE_VAL;
  return sother / sbase;
}

/* The resample's median from its count per rank: the values at ranks lo_r
   and lo_r + 1 of the resample, sorted, interpolated by frac. */
static double median_of(const int *counts, const double *sorted, int lo_r, double frac) {
  int acc = 0, r = 0, have_a = 0;
  double a = 0, b = 0;
  for (;;) {
    r++;
    acc += counts[r - 1];
    if (!have_a && acc >= lo_r) {
      a = sorted[r - 1];
      have_a = 1;
    }
    if (acc >= lo_r + 1 || (frac == 0 && have_a)) {
      b = sorted[r - 1];
      break;
    }
  }
  return frac == 0 ? a : a + frac * (b - a);
}

void sp_boot_paired(int n, int iters, int32_t state, const double *diffs, const double *base,
                    const double *other, const int *rank, const double *sorted, int lo_r, double frac,
                    int *counts, double *means, double *medians, double *ratios) {
  uint32_t x = (uint32_t)state;
  for (int it = 0; it < iters; it++) {
    memset(counts, 0, (size_t)n * sizeof *counts);
    double sd = 0, sbase = 0, sother = 0;
    for (int k = 0; k < n; k++) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      /* 0-based: Lua's int(n) - 1. The product is in [0, n), where the cast
         (truncation) is floor() without a libm call per draw. */
      int j = (int)((double)x / 4294967296.0 * n);
      sd = sd + diffs[j];
      sbase = sbase + base[j];
      sother = sother + other[j];
      counts[rank[j] - 1]++;
    }
    means[it] = sd / n;
    ratios[it] = ratio_of(sbase, sother);
    medians[it] = median_of(counts, sorted, lo_r, frac);
  }
}

void sp_boot_ratio(int n, int iters, int32_t state, const double *num, const double *den, double *out) {
  uint32_t x = (uint32_t)state;
  for (int it = 0; it < iters; it++) {
    double w = 0, s = 0;
    for (int k = 0; k < n; k++) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      int j = (int)((double)x / 4294967296.0 * n);  /* floor: see sp_boot_paired */
      w = w + num[j];
      s = s + den[j];
    }
    /* no standard time in the resample: 1 for no time at all, else
       unbounded (stats.rel_of's rule; 0 would read as the fastest) */
    out[it] = s > 0 ? w / s : (w == 0 ? 1 : HUGE_VAL);
  }
}

/* m measures of the same n queries share one stream of draws: each resample's
 * n indices are drawn once into idx, then every measure sums over them in
 * draw order, so each measure's figures are the doubles sp_boot_paired gives
 * it alone (same seed, same indices, same additions). Arrays are m blocks of
 * n (inputs, counts) or of iters (outputs), measure by measure. */
void sp_boot_paired_multi(int m, int n, int iters, int32_t state, const double *diffs, const double *base,
                          const double *other, const int *rank, const double *sorted, int lo_r, double frac,
                          int *idx, int *counts, double *means, double *medians, double *ratios) {
  uint32_t x = (uint32_t)state;
  for (int it = 0; it < iters; it++) {
    for (int k = 0; k < n; k++) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      idx[k] = (int)((double)x / 4294967296.0 * n);  /* floor: see sp_boot_paired */
    }
    for (int q = 0; q < m; q++) {
      const double *d = diffs + (size_t)q * n, *bs = base + (size_t)q * n, *ot = other + (size_t)q * n;
      const int *rk = rank + (size_t)q * n;
      const double *so = sorted + (size_t)q * n;
      int *cn = counts + (size_t)q * n;
      memset(cn, 0, (size_t)n * sizeof *cn);
      double sd = 0, sbase = 0, sother = 0;
      for (int k = 0; k < n; k++) {
        int j = idx[k];
        sd = sd + d[j];
        sbase = sbase + bs[j];
        sother = sother + ot[j];
        cn[rk[j] - 1]++;
      }
      size_t o = (size_t)q * iters + it;
      means[o] = sd / n;
      ratios[o] = ratio_of(sbase, sother);
      medians[o] = median_of(cn, so, lo_r, frac);
    }
  }
}
