/* sp_theory: SpecHop latency theory (Corollaries 1, 3, 5; Theorem 4), pure
   functions of plain doubles (the `specula theory` command is sp_cmd_theory.c). */
#include "sp_theory.h"

#include <limits.h>
#include <math.h>

/* Slack for ceil(): 5.999999999 from rounding must not become 6 -> 6, and an
   exact integer must not round up to the next one. */
#define SP_THEORY_CEIL_SLACK 1e-9

static int ratios_ok(double alpha, double beta) {
  return isfinite(alpha) && isfinite(beta) && alpha >= 0 && beta >= 0;
}

/* INFINITY, or SP_K_UNBOUNDED (any negative k reads as unbounded). */
static int k_unbounded(double k) { return k < 0 || isinf(k); }

double sp_theory_rel_lat_star(double p, double alpha, double beta) {
  if (!(p >= 0 && p <= 1) || !ratios_ok(alpha, beta)) return NAN;
  return 1.0 - p * (1.0 - alpha) / (1.0 + beta);
}

double sp_theory_rel_lat_k(double p, double alpha, double beta, double k) {
  if (!(p >= 0 && p <= 1) || !ratios_ok(alpha, beta) || isnan(k)) return NAN;
  if (k_unbounded(k)) return sp_theory_rel_lat_star(p, alpha, beta);
  if (k < 1) return NAN;
  /* inv_mu = 1/mu_k = (1-p)/(1-p^k); the p -> 1 limit is 1/k. expm1/log
     keep 1 - p^k accurate when p is close to 1. */
  double inv_mu;
  if (p >= 1) inv_mu = 1.0 / k;
  else if (p <= 0) inv_mu = 1.0;
  else inv_mu = (1.0 - p) / -expm1(k * log(p));
  return (beta + alpha + (1.0 - alpha) * inv_mu) / (1.0 + beta);
}

double sp_theory_k_det(double alpha, double beta) {
  if (!ratios_ok(alpha, beta)) return NAN;
  if (alpha + beta == 0) return INFINITY;
  return (1.0 + beta) / (alpha + beta);
}

/* Standard normal CDF; erfc keeps the lower tail accurate. */
static double phi(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }

/* Spread term sqrt(k a^2 + (k-1) b^2 + 1) of Theorem 4 / Corollary 5. The
   radicand can only go negative for alpha > 1 (outside the model): clamp. */
static double spread(double k, double alpha, double beta) {
  double r = k * alpha * alpha + (k - 1.0) * beta * beta + 1.0;
  return sqrt(r > 0 ? r : 0);
}

double sp_theory_p_starve(double k, double alpha, double beta, double nu) {
  if (!ratios_ok(alpha, beta) || !(nu >= 0) || isinf(nu) || isnan(k)) return NAN;
  if (k_unbounded(k)) return 0.0;
  if (k < 1) return NAN;
  double num = (1.0 + beta) - k * (alpha + beta);
  double den = nu * spread(k, alpha, beta);
  if (den == 0) return num > 0 ? 1.0 : num < 0 ? 0.0 : 0.5;  /* no volatility: a step */
  return phi(num / den);
}

/* Lower half of the quantile, 0 < q <= 0.5: a rational approximation
   (P. J. Acklam's coefficients, relative error ~1e-9) polished by one
   Halley step against erfc, which brings it to near machine precision. */
static double z_lower(double q) {
  static const double a[6] = {-3.969683028665376e+01, 2.209460984245205e+02,
                              -2.759285104469687e+02, 1.383577518672690e+02,
                              -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[5] = {-5.447609879822406e+01, 1.615858368580409e+02,
                              -1.556989798598866e+02, 6.680131188771972e+01,
                              -1.328068155288572e+01};
  static const double c[6] = {-7.784894002430293e-03, -3.223964580411365e-01,
                              -2.400758277161838e+00, -2.549732539343734e+00,
                              4.374664141464968e+00, 2.938163982698783e+00};
  static const double d[4] = {7.784695709041462e-03, 3.224671290700398e-01,
                              2.445134137142996e+00, 3.754408661907416e+00};
  double x;
  if (q < 0.02425) {  /* tail: rational function of sqrt(-2 ln q) */
    double t = sqrt(-2.0 * log(q));
    double n = ((((c[0] * t + c[1]) * t + c[2]) * t + c[3]) * t + c[4]) * t + c[5];
    double m = (((d[0] * t + d[1]) * t + d[2]) * t + d[3]) * t + 1.0;
    x = n / m;
  } else {            /* centre: rational function of (q - 1/2)^2 */
    double u = q - 0.5, r = u * u;
    double n = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * u;
    double m = ((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0;
    x = n / m;
  }
  /* Halley step on f(x) = Phi(x) - q: f/f' = e * sqrt(2 pi) * exp(x^2/2). */
  double e = phi(x) - q;
  double h = e * 2.5066282746310002 * exp(0.5 * x * x);  /* sqrt(2 pi) */
  if (isfinite(h)) x -= h / (1.0 + 0.5 * x * h);
  return x;
}

double sp_theory_z(double q) {
  if (!(q >= 0 && q <= 1)) return NAN;
  if (q == 0) return -INFINITY;
  if (q == 1) return INFINITY;
  /* Evaluate the upper half through the lower one: 1 - q is exact there,
     the tail stays accurate, and z(1-q) = -z(q) holds bit for bit. */
  if (q > 0.5) return -z_lower(1.0 - q);
  return z_lower(q);
}

int sp_theory_k_eps(double alpha, double beta, double nu, double eps) {
  if (!ratios_ok(alpha, beta) || !(nu >= 0) || isinf(nu)) return 0;
  if (!(eps > 0 && eps < 1)) return 0;
  if (alpha + beta == 0) return SP_K_UNBOUNDED;
  double kd = sp_theory_k_det(alpha, beta);
  double z = -sp_theory_z(eps);  /* z_{1-eps}, from the accurate tail */
  double v = kd + z * nu * spread(kd, alpha, beta) / (alpha + beta);
  if (!(v < (double)INT_MAX)) return SP_K_UNBOUNDED;
  double k = ceil(v - SP_THEORY_CEIL_SLACK);
  return k < 1 ? 1 : (int)k;
}
