/* sp_theory: SpecHop latency theory (Corollaries 1, 3, 5; Theorem 4) and the
   `specula theory` command. */
#include "sp_theory.h"
#include "sp_replay.h"
#include "sp_opt.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Slack for ceil(): 5.999999999 from rounding must not become 6 -> 6, and an
   exact integer must not round up to the next one. */
#define SP_THEORY_CEIL_SLACK 1e-9

static const char *const SPEC_NAMES[SP_SPEC_N] = {
  [SP_SPEC_NONE] = "none", [SP_SPEC_ACCEPTED] = "accepted", [SP_SPEC_REJECTED] = "rejected",
  [SP_SPEC_LATE] = "late", [SP_SPEC_ERROR] = "error"};

const char *sp_spec_name(int outcome) {
  return outcome >= 0 && outcome < SP_SPEC_N ? SPEC_NAMES[outcome] : NULL;
}

int sp_spec_code(const char *name, size_t len) {
  for (int i = 0; name && i < SP_SPEC_N; i++)
    if (strlen(SPEC_NAMES[i]) == len && memcmp(SPEC_NAMES[i], name, len) == 0) return i;
  return -1;
}

void sp_est_add(sp_est *e, int outcome, double t_seg, double t_spec, double t_target) {
  if (!e) return;
  e->hops += 1;
  e->seg += t_seg;
  e->tgt += t_target;
  if (t_spec >= 0) {
    e->spec += t_spec;
    e->nspec += 1;
  }
  if (outcome == SP_SPEC_ACCEPTED) e->accepted += 1;
  if (outcome == SP_SPEC_ACCEPTED || outcome == SP_SPEC_REJECTED || outcome == SP_SPEC_ERROR) e->judged += 1;
}

void sp_est_merge(sp_est *into, const sp_est *from) {
  if (!into || !from) return;
  into->hops += from->hops;
  into->accepted += from->accepted;
  into->judged += from->judged;
  into->seg += from->seg;
  into->tgt += from->tgt;
  into->spec += from->spec;
  into->nspec += from->nspec;
}

void sp_est_get(const sp_est *e, double *p, double *alpha, double *beta) {
  double pp = NAN, a = NAN, b = NAN;
  if (e && e->judged > 0) pp = e->accepted / e->judged;
  if (e && e->hops > 0 && e->tgt > 0) {
    double mt = e->tgt / e->hops;
    b = e->seg / e->hops / mt;
    if (e->nspec > 0) a = e->spec / e->nspec / mt;
  }
  if (p) *p = pp;
  if (alpha) *alpha = a;
  if (beta) *beta = b;
}

static int ratios_ok(double alpha, double beta) {
  return isfinite(alpha) && isfinite(beta) && alpha >= 0 && beta >= 0;
}

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
  if (alpha + beta == 0) return -1;
  double kd = sp_theory_k_det(alpha, beta);
  double z = -sp_theory_z(eps);  /* z_{1-eps}, from the accurate tail */
  double v = kd + z * nu * spread(kd, alpha, beta) / (alpha + beta);
  if (!(v < (double)INT_MAX)) return -1;
  double k = ceil(v - SP_THEORY_CEIL_SLACK);
  return k < 1 ? 1 : (int)k;
}

/* ---- the `specula theory` command ------------------------------------- */

typedef struct sp_theory_args {
  double p;      /* speculation success probability */
  double alpha;  /* relative speculator latency */
  double beta;   /* decoding-to-tool latency ratio */
  double k;      /* threads to evaluate; INFINITY = unbounded */
  double nu;     /* coefficient of variation bound */
  double eps;    /* target starvation probability */
  int have_p;    /* --p given */
  int have_a;    /* --alpha given */
  int have_b;    /* --beta given */
  int have_k;    /* --k given (else k = k*_eps) */
  int json;      /* --json */
  int launch;    /* --spec-launch: SP_REPLAY_EAGER (default) or SP_REPLAY_SLOT, for the event model */
} sp_theory_args;

#define SP_THEORY_USAGE \
  "usage: specula theory --p P --alpha A --beta B [--k K|inf|auto] [--nu V] [--eps E] " \
  "[--spec-launch eager|slot] [--json]\n"

static void print_usage(FILE *f) {
  /* the defaults come from the one table of them (sp_opt.c) */
  fprintf(f,
          SP_THEORY_USAGE
          "  --p P       speculation success probability, 0 <= P <= 1\n"
          "  --alpha A   E[T_spec]/E[T_target], A >= 0\n"
          "  --beta B    E[T_seg]/E[T_target], B >= 0 (A + B > 0)\n"
          "  --k K       threads for rel_lat_k and p_starve: integer >= 1, inf, or\n"
          "              auto (default: k*_eps)\n"
          "  --nu V      coefficient of variation bound, V >= 0 (default %g)\n"
          "  --eps E     starvation target, 0 < E < 1 (default %g)\n"
          "  --spec-launch eager|slot\n"
          "              the schedule of the event model row (default eager, as specula run)\n"
          "  --json      print one JSON object\n",
          sp_opt_default("nu"), sp_opt_default("eps"));
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("specula theory: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fputs(SP_THEORY_USAGE, stderr);
  return 2;
}

/* Parses argv into a; returns 0, 1 for --help, or 2 after printing an error. */
static int parse(int argc, char **argv, sp_theory_args *a) {
  memset(a, 0, sizeof *a);
  a->nu = sp_opt_default("nu");
  a->eps = sp_opt_default("eps");
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) return 1;
    if (strcmp(arg, "--json") == 0) { a->json = 1; continue; }
    if (strncmp(arg, "--", 2) != 0) return fail("unexpected argument '%s'", arg);
    /* --name value or --name=value */
    char name[16];
    const char *val, *eq = strchr(arg, '=');
    size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
    if (nlen >= sizeof name) return fail("unknown option '%s'", arg);
    if (strncmp(arg, "--spec-launch", 13) == 0 && (arg[13] == '\0' || arg[13] == '=')) {
      const char *lv = arg[13] == '=' ? arg + 14 : (i + 1 < argc ? argv[++i] : NULL);
      if (lv && strcmp(lv, "eager") == 0) a->launch = SP_REPLAY_EAGER;
      else if (lv && strcmp(lv, "slot") == 0) a->launch = SP_REPLAY_SLOT;
      else return fail("--spec-launch must be eager or slot");
      continue;
    }
    memcpy(name, arg, nlen);
    name[nlen] = '\0';
    if (eq) val = eq + 1;
    else if (i + 1 < argc) val = argv[++i];
    else val = NULL;
    /* The values' domains live in sp_opt.c, shared with `specula run`. */
    static const char *const known[] = {"--p", "--alpha", "--beta", "--nu", "--eps", "--k"};
    int idx = -1;
    for (int j = 0; j < (int)(sizeof known / sizeof known[0]); j++)
      if (strcmp(name, known[j]) == 0) idx = j;
    if (idx < 0) return fail("unknown option '%s'", arg);
    if (!val) return fail("%s needs a value", name);
    double v;
    char err[160];
    if (sp_opt_parse(name + 2, val, &v, err, sizeof err) != 0) return fail("%s", err);
    switch (idx) {
      case 0: a->p = v; a->have_p = 1; break;
      case 1: a->alpha = v; a->have_a = 1; break;
      case 2: a->beta = v; a->have_b = 1; break;
      case 3: a->nu = v; break;
      case 4: a->eps = v; break;
      default: a->k = v; a->have_k = v != 0; break;  /* 0: auto, i.e. k*_eps */
    }
  }
  if (!a->have_p) return fail("missing --p (speculation success probability)");
  if (!a->have_a) return fail("missing --alpha (E[T_spec]/E[T_target])");
  if (!a->have_b) return fail("missing --beta (E[T_seg]/E[T_target])");
  if (a->alpha + a->beta <= 0) return fail("--alpha + --beta must be > 0");
  return 0;
}

/* k as text: an integer, or "inf". */
static void fmt_k(char *out, size_t n, double k) {
  if (isinf(k)) snprintf(out, n, "inf");
  else snprintf(out, n, "%.0f", k);
}

/* "key":number, — or null for an overflowed extreme input: JSON has no inf/nan. */
static void json_num(const char *key, double v) {
  if (isfinite(v)) printf("\"%s\":%.12g,", key, v);
  else printf("\"%s\":null,", key);
}

int sp_theory_main(int argc, char **argv) {
  sp_theory_args a;
  int rc = parse(argc, argv, &a);
  if (rc == 1) { print_usage(stdout); return 0; }
  if (rc != 0) return rc;

  int k_eps = sp_theory_k_eps(a.alpha, a.beta, a.nu, a.eps);
  double k = a.have_k ? a.k : (k_eps > 0 ? (double)k_eps : INFINITY);
  double star = sp_theory_rel_lat_star(a.p, a.alpha, a.beta);
  double rel_k = sp_theory_rel_lat_k(a.p, a.alpha, a.beta, k);
  double k_det = sp_theory_k_det(a.alpha, a.beta);
  double starve = sp_theory_p_starve(k, a.alpha, a.beta, a.nu);
  /* the event level: the window itself (as `specula replay` runs it) on
     synthetic draws at these p, alpha, beta, CV nu, 200 x 30 hops */
  double event = sp_replay_model(a.p, a.alpha, a.beta, a.nu, isinf(k) ? -1 : (int)k, "spechop", a.launch, 30,
                                 200, 1);
  const char *launch = a.launch == SP_REPLAY_SLOT ? "slot" : "eager";
  char ks[32], keps[32];
  fmt_k(ks, sizeof ks, k);
  fmt_k(keps, sizeof keps, k_eps > 0 ? (double)k_eps : INFINITY);

  if (a.json) {
    /* k and k_eps are numbers, or the string "inf" when unbounded. */
    printf("{\"p\":%.12g,\"alpha\":%.12g,\"beta\":%.12g,\"nu\":%.12g,\"eps\":%.12g,",
           a.p, a.alpha, a.beta, a.nu, a.eps);
    printf(isinf(k) ? "\"k\":\"%s\"," : "\"k\":%s,", ks);
    printf("\"k_from\":\"%s\",", a.have_k ? "arg" : "k_eps");
    json_num("rel_lat_star", star);
    json_num("rel_lat_k", rel_k);
    json_num("k_det", k_det);
    json_num("p_starve", starve);
    json_num("rel_lat_event", event);
    printf("\"spec_launch\":\"%s\",", launch);
    printf(k_eps > 0 ? "\"k_eps\":%s}\n" : "\"k_eps\":\"%s\"}\n", keps);
    return 0;
  }
  printf("p = %g   alpha = %g   beta = %g   nu = %g   eps = %g   k = %s%s\n\n",
         a.p, a.alpha, a.beta, a.nu, a.eps, ks, a.have_k ? "" : " (k*_eps)");
  printf("  %-13s %10s   %s\n", "quantity", "value", "meaning");
  printf("  %-13s %10.6f   %s\n", "rel_lat_star", star, "oracle relative latency (Cor. 1)");
  printf("  %-13s %10.6f   relative latency, window of k = %s (Cor. 3)\n", "rel_lat_k", rel_k, ks);
  printf("  %-13s %10.6f   (1+beta)/(alpha+beta) (Thm. 4)\n", "k_det", k_det);
  printf("  %-13s %10.6f   starvation bound at k = %s, nu = %g (Thm. 4)\n", "p_starve", starve, ks, a.nu);
  printf("  %-13s %10s   threads for p_starve <= %g (Cor. 5)\n", "k_eps", keps, a.eps);
  printf("  %-13s %10.6f   event-level schedule at k = %s, %s launch (200 x 30 hops, CV %g)\n",
         "rel_lat_event", event, ks, launch, a.nu);
  return 0;
}
