/* `specula replay`: a recorded run's stage times re-scheduled on the window
   at other k values (sp_replay.c loads them, sp_winplay.c runs them). The
   command line is read and checked in Lua (lua/specula/cmd/replay.lua);
   this loads the file and prints the table. */
#include "sp_api.h"
#include "sp_buf.h"
#include "sp_est.h"
#include "sp_winplay.h"
#include "sp_replay.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sort key: finite k ascending, unbounded last. */
static int k_cmp(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  unsigned ux = x == SP_K_UNBOUNDED ? UINT_MAX : (unsigned)x, uy = y == SP_K_UNBOUNDED ? UINT_MAX : (unsigned)y;
  return ux < uy ? -1 : ux > uy;
}

/* Adds k to the list unless present; list has room for one more. */
static void k_add(int *list, size_t *n, int k) {
  for (size_t i = 0; i < *n; i++)
    if (list[i] == k) return;
  list[(*n)++] = k;
}

static void fmt_k(char *out, size_t n, int k) {
  if (k == SP_K_UNBOUNDED) snprintf(out, n, "inf");
  else snprintf(out, n, "%d", k);
}

/* Estimates of the theory's inputs from the recorded hops. */
typedef struct sp_replay_est {
  size_t hops;      /* recorded hops in total */
  size_t judged;    /* hops whose speculation was judged (accepted/rejected/error) */
  double p;         /* accepted / judged; NaN when none was judged */
  double alpha;     /* mean t_spec / mean t_target; NaN when unknown */
  double beta;      /* mean t_seg / mean t_target; NaN when unknown */
} sp_replay_est;

static sp_replay_est estimate(const sp_replay_set *set) {
  sp_replay_est e = {0, 0, NAN, NAN, NAN};
  sp_est acc;
  memset(&acc, 0, sizeof acc);
  /* the engine's one estimator (sp_api.h) over the recorded outcomes */
  for (size_t i = 0; i < set->n; i++) {
    const sp_replay_query *q = &set->queries[i];
    for (size_t j = 0; j < q->n_hops; j++) {
      const sp_replay_hop *h = &q->hops[j];
      sp_est_add(&acc, h->spec, h->t_seg, h->t_spec, h->t_target);
    }
  }
  e.hops = (size_t)acc.hops;
  e.judged = (size_t)acc.judged;
  sp_est_get(&acc, &e.p, &e.alpha, &e.beta);
  return e;
}

/* A JSON number, or null when it is not one. */
static void json_num(const char *key, double v) {
  if (isfinite(v)) printf("%s%.10g", key, v);
  else printf("%snull", key);
}

static int same_config(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Keep the queries of configuration `name` (NULL: the file must hold only
   one). 0, or after saying why: -1 (naming the configurations it holds),
   -2 when every query of that configuration failed. */
static int pick_config(const char *file, sp_replay_set *set, const char *name) {
  size_t distinct = 0;
  sp_buf names;
  sp_buf_init(&names);
  for (size_t i = 0; i < set->n; i++) {
    const char *c = set->queries[i].config;
    int seen = 0;
    for (size_t j = 0; j < i && !seen; j++) seen = same_config(set->queries[j].config, c);
    if (!seen) {
      distinct++;
      sp_buf_printf(&names, "%s%s", distinct > 1 ? ", " : "", c ? c : "(none)");
    }
  }
  /* a configuration whose every query failed is one it holds too */
  for (size_t i = 0; i < set->n_failed; i++) {
    const char *c = set->failed[i].config;
    int seen = 0;
    for (size_t j = 0; j < set->n && !seen; j++) seen = same_config(set->queries[j].config, c);
    for (size_t j = 0; j < i && !seen; j++) seen = same_config(set->failed[j].config, c);
    if (!seen) {
      distinct++;
      sp_buf_printf(&names, "%s%s", distinct > 1 ? ", " : "", c ? c : "(none)");
    }
  }
  int rc = 0;
  if (!name && distinct > 1) {
    fprintf(stderr, "specula replay: %s holds the records of %zu configurations (%s): replay one at a "
            "time with --config NAME\n", file, distinct, names.data ? names.data : "");
    rc = -1;
  } else if (name) {
    long kept = sp_replay_set_keep_config(set, name);
    if (kept == 0 && set->n_failed > 0) {
      fprintf(stderr, "specula replay: %s: every query of configuration '%s' failed (%zu; the first: '%.64s'): a "
              "failed query is no data point, so there is nothing to replay\n", file, name, set->n_failed,
              set->failed[0].id);
      rc = -2;
    } else if (kept == 0) {
      fprintf(stderr, "specula replay: %s has no record of configuration '%s' (it holds: %s)\n", file, name,
              names.data ? names.data : "");
      rc = -1;
    } else if (kept < 0) {
      fprintf(stderr, "specula replay: out of memory\n");
      rc = -1;
    }
  }
  sp_buf_free(&names);
  return rc;
}

/* The warnings of the load (lines or records skipped), one per line. */
static void print_warnings(const sp_replay_set *set) {
  if (!set->warnings) return;
  for (const char *w = set->warnings; *w;) {
    size_t len = strcspn(w, "\n");
    fprintf(stderr, "specula replay: warning: %.*s\n", (int)len, w);
    w += len + (w[len] == '\n');
  }
}

/* The k values to replay at, sorted, into ks (*nk of them): the asked ones
   or the default list, k = 1 alone for the sequential mode, and the
   recorded k (returned, 0 when there is none to mark: auto, mixed, another
   mode). */
static int choose_ks(const sp_replay_args *args, const sp_replay_set *set, const char *mode, int *ks, size_t *nk) {
  int recorded = set->k != SP_K_AUTO && set->mode && strcmp(set->mode, mode) == 0 ? set->k : 0;
  if (strcmp(mode, "sequential") == 0) {
    *nk = 0;
    ks[(*nk)++] = 1;
    if (recorded) recorded = 1;
  } else if (!args->nk) {
    static const int dflt[] = {1, 2, 3, 4, 8, SP_K_UNBOUNDED};
    for (size_t i = 0; i < sizeof dflt / sizeof dflt[0]; i++) k_add(ks, nk, dflt[i]);
  }
  if (recorded) k_add(ks, nk, recorded);
  qsort(ks, *nk, sizeof ks[0], k_cmp);
  return recorded;
}

/* Only recorded speculator stages can be re-scheduled: a sequential (or
   k = 1) recording has none, and at another k it would just come back
   unchanged. Refuse that (-1); name partial gaps. *no_spec_hops: the hops
   without a speculator stage. */
static int check_spec_stages(const char *file, const sp_replay_set *set, const char *mode, const int *ks,
                             size_t nk, int json, size_t *no_spec_hops) {
  size_t no_spec_q = 0, all_hops = 0;
  *no_spec_hops = 0;
  for (size_t j = 0; j < set->n; j++) {
    const sp_replay_query *q = &set->queries[j];
    if (!q->has_spec && q->n_hops > 0) no_spec_q++;
    for (size_t h = 0; h < q->n_hops; h++) {
      all_hops++;
      if (q->hops[h].spec == SP_SPEC_NONE) (*no_spec_hops)++;
    }
  }
  int wants_spec = 0;
  for (size_t i = 0; i < nk; i++)
    if (ks[i] != 1) wants_spec = 1;
  if (wants_spec && strcmp(mode, "sequential") != 0 && all_hops > 0 && *no_spec_hops == all_hops) {
    fprintf(stderr, "specula replay: %s has no speculator stages (recorded %s%s): there is nothing to "
            "re-speculate at another k; record the run with --mode spechop or window and k > 1\n",
            file, set->mode ? set->mode : "without speculation", set->k == 1 ? ", k = 1" : "");
    return -1;
  }
  if (wants_spec && *no_spec_hops > 0 && !json)
    fprintf(stderr, "specula replay: note: %zu of %zu hops (%zu of %zu queries entirely) had no speculator "
            "stage and replay as recorded, unspeculated, at every k\n", *no_spec_hops, all_hops, no_spec_q,
            set->n);
  return 0;
}

/* The text table's head: what was read, the estimates, the columns. */
static void print_head(const char *file, const sp_replay_set *set, const char *mode, const sp_replay_est *est) {
  char rk[32] = "";
  if (set->k != SP_K_AUTO) fmt_k(rk, sizeof rk, set->k);
  printf("replay %s: %zu queries, %zu hops; mode %s", file, set->n, est->hops, mode);
  if (set->mode || set->k != SP_K_AUTO)
    printf(" (recorded: %s%s%s)", set->mode ? set->mode : "mode ?", set->k != SP_K_AUTO ? ", k = " : "", rk);
  printf("\n");
  if (!isnan(est->p) && !isnan(est->alpha) && !isnan(est->beta))
    printf("estimated p = %.3f (%zu judged hops), alpha = %.3f, beta = %.3f\n"
           "  (compare: specula theory --p %.3f --alpha %.3f --beta %.3f)\n",
           est->p, est->judged, est->alpha, est->beta, est->p, est->alpha, est->beta);
  printf("\n       k   rel_lat      mean        wall_ms    standard_ms\n");
}

/* Every query replayed at one k, summed. */
typedef struct k_row {
  double wall_sum, std_sum;  /* Σ wall, Σ standard over the queries replayed */
  double rel, mean;          /* Σ wall / Σ standard; mean per-query RelLat */
  size_t n_bad;              /* queries that could not be replayed */
} k_row;

static k_row replay_at(sp_winplay *pb, const sp_replay_set *set, const char *mode, int k, int launch) {
  k_row row = {0, 0, NAN, 0, 0};
  size_t n_mean = 0;
  for (size_t j = 0; j < set->n; j++) {
    double w, st;
    double r = pb ? sp_replay_run_on(pb, &set->queries[j], mode, k, launch, &w, &st) : NAN;
    if (isnan(r)) { row.n_bad++; continue; }
    row.wall_sum += w;
    row.std_sum += st;
    if (st > 0) { row.mean += r; n_mean++; }
  }
  row.rel = row.std_sum > 0 ? row.wall_sum / row.std_sum : NAN;
  row.mean = n_mean ? row.mean / (double)n_mean : NAN;
  return row;
}

/* One k's line of the JSON output. */
static void print_json_row(const sp_replay_set *set, const char *mode, int k, int launch, int mark,
                           const k_row *row, const sp_replay_est *est, size_t no_spec_hops) {
  char kt[32];
  fmt_k(kt, sizeof kt, k);
  printf(k == SP_K_UNBOUNDED ? "{\"k\":\"%s\"" : "{\"k\":%s", kt);
  printf(",\"mode\":\"%s\",\"queries\":%zu,\"hops\":%zu", mode, set->n, est->hops);
  json_num(",\"rel_lat\":", row->rel);
  json_num(",\"mean_rel_lat\":", row->mean);
  printf(",\"wall_ms\":%.10g,\"standard_ms\":%.10g,\"recorded\":%s", row->wall_sum, row->std_sum,
         mark ? "true" : "false");
  int shown = launch != SP_REPLAY_LAUNCH_RECORDED ? launch
              : set->n ? set->queries[0].launch : SP_REPLAY_SLOT;
  printf(",\"spec_launch\":\"%s\",\"unspeculated_hops\":%zu",
         strcmp(mode, "spechop") != 0 || shown == SP_REPLAY_SLOT ? "slot" : "eager", no_spec_hops);
  json_num(",\"p_hat\":", est->p);
  json_num(",\"alpha_hat\":", est->alpha);
  json_num(",\"beta_hat\":", est->beta);
  printf("}\n");
}

int sp_replay_print(const sp_replay_args *args) {
  const char *file = args->file, *mode = args->mode, *config = args->config;
  int json = args->json, launch = args->launch;
  int ks[SP_REPLAY_MAX_KS + 1];
  size_t nk = 0;
  if (!file || args->nk > SP_REPLAY_MAX_KS || (args->nk && !args->ks)) return 2;
  for (size_t i = 0; i < args->nk; i++) k_add(ks, &nk, args->ks[i]);
  char err[512];
  sp_replay_set *set = NULL;
  if (sp_replay_load_file(file, &set, err, sizeof err) != 0) {
    /* a file that cannot be read or is not a trace: a failure, not a usage
       mistake (docs/cli.md, exit statuses) */
    fprintf(stderr, "specula replay: %s\n", err);
    return 1;
  }
  print_warnings(set);
  /* The records of a --compare run hold several configurations: mixing
     them would replay a sequential run's hops beside a speculative one's. */
  int picked = pick_config(file, set, config);
  if (picked != 0) {
    sp_replay_set_free(set);
    return picked == -2 ? 1 : 2;   /* nothing to replay is a failure, a wrong name a usage mistake */
  }
  /* failed queries are left out, and said so: their stage times stop where
     they failed (counted, they would make a failing configuration look fast) */
  if (set->n_failed > 0)
    fprintf(stderr, "specula replay: warning: %s: %zu failed quer%s left out (the first: '%.64s'): a failed query is "
            "no data point\n", file, set->n_failed, set->n_failed == 1 ? "y" : "ies", set->failed[0].id);
  if (!mode) {
    int rec_ok = set->mode && (strcmp(set->mode, "spechop") == 0 || strcmp(set->mode, "window") == 0);
    mode = rec_ok ? set->mode : "spechop";
  }
  int recorded = choose_ks(args, set, mode, ks, &nk);
  size_t no_spec_hops;
  if (check_spec_stages(file, set, mode, ks, nk, json, &no_spec_hops) != 0) {
    sp_replay_set_free(set);
    return 2;
  }
  sp_replay_est est = estimate(set);
  if (!json) print_head(file, set, mode, &est);
  int rc = 0;
  sp_winplay *pb = sp_winplay_new();
  for (size_t i = 0; i < nk; i++) {
    k_row row = replay_at(pb, set, mode, ks[i], launch);
    if (row.n_bad) {
      fprintf(stderr, "specula replay: %zu queries could not be replayed (out of memory)\n", row.n_bad);
      rc = 2;
    }
    int mark = recorded && ks[i] == recorded;
    if (json) {
      print_json_row(set, mode, ks[i], launch, mark, &row, &est, no_spec_hops);
    } else {
      char kt[32];
      fmt_k(kt, sizeof kt, ks[i]);
      printf("  %s %4s  %8.4f  %8.4f  %13.1f  %13.1f\n", mark ? "*" : " ", kt, row.rel, row.mean, row.wall_sum,
             row.std_sum);
    }
  }
  if (!json) {
    printf("\nrel_lat = sum wall / sum standard; mean = mean per-query RelLat%s\n",
           recorded ? "; * = the recorded k" : "");
  }
  sp_winplay_free(pb);
  sp_replay_set_free(set);
  return rc;
}
