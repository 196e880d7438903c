/* sp_opt: one definition of each shared option's domain (see sp_opt.h). */
#include "sp_opt.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest seed: every integer up to 2^53 is exact in a double (Lua's number),
   so two different seeds never collapse into one uint64_t key. */
#define SP_OPT_SEED_MAX 9007199254740992.0

typedef struct sp_opt_def {
  const char *name;  /* option name without the dashes */
  double lo;         /* smallest allowed value */
  double hi;         /* largest allowed value */
  int lo_open;       /* lo itself is excluded */
  int hi_open;       /* hi itself is excluded */
  int integer;       /* only whole numbers */
  int inf_ok;        /* "inf" (INFINITY) and "auto" (0) are allowed: k only */
  const char *rule;  /* the domain as the error message states it */
} sp_opt_def;

static const sp_opt_def sp_opt_defs[] = {
  {"p", 0, 1, 0, 0, 0, 0, "must be in [0, 1]"},
  {"alpha", 0, HUGE_VAL, 0, 1, 0, 0, "must be a number >= 0"},
  {"beta", 0, HUGE_VAL, 0, 1, 0, 0, "must be a number >= 0"},
  {"nu", 0, HUGE_VAL, 0, 1, 0, 0, "must be a number >= 0"},
  {"eps", 0, 1, 1, 1, 0, 0, "must be in (0, 1)"},
  {"k", 1, INT_MAX, 0, 0, 1, 1, "must be an integer in [1, 2147483647], inf or auto"},
  {"m", 1, INT_MAX, 0, 0, 1, 0, "must be an integer in [1, 2147483647]"},
  {"seed", 0, SP_OPT_SEED_MAX, 0, 0, 1, 0, "must be an integer in [0, 2^53]"},
  {"concurrency", 1, INT_MAX, 0, 0, 1, 0, "must be an integer in [1, 2147483647]"},
};

/* The default of every option that has one, kept once: `specula run`,
   specula.run(), --compare, `specula theory`, `specula compare|report`, the
   k-auto estimator and the prefetcher all read it from here (Lua through
   specula.internal.domains.DEFAULTS), and the usage texts print it. */
typedef struct sp_opt_default_def {
  const char *name;  /* option name, dashes as underscores (max_hops) */
  double value;      /* the value used when the option is not given */
} sp_opt_default_def;

static const sp_opt_default_def sp_opt_defaults[] = {
  {"k", 3},                       /* active threads */
  {"m", 1},                       /* candidates kept per speculator call */
  {"eps", 0.05},                  /* starvation risk for --k auto */
  {"nu", 0.4},                    /* CV bound of `specula theory` */
  {"seed", 0},                    /* keyed draws of the simulated backend */
  {"concurrency", 16},            /* queries in flight at once */
  {"max_hops", 64},               /* a trajectory longer than this fails */
  {"ev_cost_ms", 1000},           /* latency one unit of tool cost is worth */
  {"predict_top", 3},             /* predictions considered per step */
  {"bootstrap_iterations", 1000}, /* resamples of a bootstrap CI */
  {"bootstrap_seed", 1},          /* seed of the comparison/report bootstrap */
  {"bootstrap_level", 0.95},      /* confidence level of a bootstrap CI */
  {"kauto_min", 1},               /* --k auto: smallest k */
  {"kauto_max", 64},              /* --k auto: largest k */
  {"kauto_default", 4},           /* --k auto: k until enough samples */
};

#define SP_OPT_NDEFAULTS ((int)(sizeof sp_opt_defaults / sizeof sp_opt_defaults[0]))

double sp_opt_default(const char *name) {
  for (int i = 0; name && i < SP_OPT_NDEFAULTS; i++)
    if (strcmp(sp_opt_defaults[i].name, name) == 0) return sp_opt_defaults[i].value;
  return NAN;
}

const char *sp_opt_default_at(int i, double *value) {
  if (i < 0 || i >= SP_OPT_NDEFAULTS) return NULL;
  *value = sp_opt_defaults[i].value;
  return sp_opt_defaults[i].name;
}

static const sp_opt_def *find(const char *name) {
  for (size_t i = 0; i < sizeof sp_opt_defs / sizeof sp_opt_defs[0]; i++)
    if (strcmp(sp_opt_defs[i].name, name) == 0) return &sp_opt_defs[i];
  return NULL;
}

static int in_domain(const sp_opt_def *d, double v) {
  if (d->inf_ok && (v == 0 || isinf(v))) return 1;  /* auto, inf */
  if (!isfinite(v)) return 0;
  if (d->lo_open ? !(v > d->lo) : !(v >= d->lo)) return 0;
  if (d->hi_open ? !(v < d->hi) : !(v <= d->hi)) return 0;
  return !d->integer || v == floor(v);
}

int sp_opt_check(const char *name, double v, char *err, size_t errlen) {
  const sp_opt_def *d = name ? find(name) : NULL;
  if (!d) {
    snprintf(err, errlen, "unknown option '%s'", name ? name : "(null)");
    return -1;
  }
  if (in_domain(d, v) && !(d->inf_ok && v < 0)) return 0;
  snprintf(err, errlen, "--%s %s, got %.17g", d->name, d->rule, v);
  return -1;
}

int sp_opt_parse(const char *name, const char *text, double *out, char *err, size_t errlen) {
  const sp_opt_def *d = name ? find(name) : NULL;
  if (!d) {
    snprintf(err, errlen, "unknown option '%s'", name ? name : "(null)");
    return -1;
  }
  if (!text) {
    snprintf(err, errlen, "--%s needs a value", d->name);
    return -1;
  }
  double v = NAN;
  if (d->inf_ok && (strcmp(text, "inf") == 0 || strcmp(text, "infinity") == 0)) {
    v = INFINITY;
  } else if (d->inf_ok && strcmp(text, "auto") == 0) {
    v = 0;
  } else {
    /* The whole text must be one decimal number: no blanks, no trailing
       junk, no hex (strtod reads "0x10" as 16), no inf/nan spelled out. */
    char *end;
    errno = 0;
    v = strtod(text, &end);
    int plain = text[0] != '\0' && strpbrk(text, "xXnNiI \t\n\r\v\f") == NULL;
    if (!plain || end == text || *end != '\0' || errno == ERANGE || !isfinite(v) ||
        (v == 0 && d->inf_ok)) {
      snprintf(err, errlen, "--%s %s, got '%s'", d->name, d->rule, text);
      return -1;
    }
  }
  /* an integer written with more digits than a double keeps exactly
     (9007199254740993 reads as 2^53): another number than the one given */
  if (d->integer && isfinite(v) && fabs(v) >= 9007199254740992.0) {
    const char *t = text + (text[0] == '+' || text[0] == '-');
    int digits_only = *t != '\0' && strspn(t, "0123456789") == strlen(t);
    if (digits_only) {
      char back[64];
      snprintf(back, sizeof back, "%.0f", fabs(v));
      while (*t == '0' && t[1] != '\0') t++;
      if (strcmp(back, t) != 0) {
        snprintf(err, errlen, "--%s %s, got '%s'", d->name, d->rule, text);
        return -1;
      }
    }
  }
  if (!in_domain(d, v)) {
    snprintf(err, errlen, "--%s %s, got '%s'", d->name, d->rule, text);
    return -1;
  }
  *out = v;
  return 0;
}
