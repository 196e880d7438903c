/* `specula theory`: the latency theory at given p, alpha, beta (sp_theory.c)
   beside the event-level RelLat of the window itself on synthetic draws
   (sp_replay_model). */
#include "sp_cmd.h"
#include "sp_opt.h"
#include "sp_replay.h"
#include "sp_theory.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
  double event = sp_replay_model(a.p, a.alpha, a.beta, a.nu, isinf(k) ? SP_K_UNBOUNDED : (int)k, "spechop", a.launch, 30,
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
