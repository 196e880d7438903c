#include "sp_record.h"
#include "sp_buf.h"
#include "sp_json.h"
#include <limits.h>
#include <math.h>
#include <string.h>

/* The writer's state: one buffer and the first error; keys come sorted
   from the caller (canonical order), each one after a ',' but the first. */
typedef struct {
  sp_buf b;          /* the text so far */
  int rc;            /* 0, or -1 once a number was not finite or memory ran out */
} wr;

static void key(wr *w, const char *k) {
  if (w->rc == 0) w->rc = sp_buf_adds(&w->b, k);
}
/* (most figures are counts: a non-negative integer's digits written in
   place, the number writer's text without its checks) */
static void num(wr *w, const char *k, double x) {
  if (w->rc != 0) return;
  size_t klen = strlen(k);
  if (x >= 0 && x < 1e15 && x == (double)(unsigned long long)x) {
    if ((w->rc = sp_buf_reserve(&w->b, klen + 24)) != 0) return;
    char *o = w->b.data + w->b.len;
    memcpy(o, k, klen);
    o = sp_json_put_uint(o + klen, (unsigned long long)x);
    w->b.len = (size_t)(o - w->b.data);
    w->b.data[w->b.len] = '\0';
    return;
  }
  key(w, k);
  if (w->rc == 0 && !isfinite(x)) w->rc = -1;
  if (w->rc == 0) w->rc = sp_json_write_number(&w->b, x);
}
/* x rounded to d decimals as round(x, d) of lua/specula/run/aggregate.lua
   rounds it, written (sp_json_write_rounded: the same digits) */
static void rnum(wr *w, const char *k, double x, int d) {
  key(w, k);
  if (w->rc == 0) w->rc = sp_json_write_rounded(&w->b, x, d);
}
static void str(wr *w, const char *k, const char *s) {
  key(w, k);
  if (w->rc == 0) w->rc = sp_json_write_string(&w->b, s, strlen(s));
}
static void raw(wr *w, const char *s) {
  if (w->rc == 0) w->rc = sp_buf_adds(&w->b, s);
}

/* rnum, or null where the figure is undefined (an estimate that is
   undefined: Lua's nil) */
static void rnum_or_null(wr *w, const char *k, double x, int d, int defined) {
  if (defined) {
    rnum(w, k, x, d);
    return;
  }
  key(w, k);
  if (w->rc == 0) w->rc = sp_buf_adds(&w->b, "null");
}

/* { forbid, full, warmup } of one trigger's row ([SP_FORBID, SP_WARMUP, SP_FULL]) */
static void gate_row(wr *w, const char *k, const int *row) {
  num(w, k, row[0]);
  num(w, ",\"full\":", row[2]);
  num(w, ",\"warmup\":", row[1]);
  raw(w, "}");
}

static void prefetch(wr *w, const sp_prefetch_stats *pf, const sp_stats_opts *o) {
  num(w, ",\"prefetch\":{\"candidates\":", pf->candidates);
  num(w, ",\"fired\":", pf->fired);
  num(w, ",\"gated_ev\":", pf->gated_ev);
  num(w, ",\"gated_policy\":", pf->gated_policy);
  num(w, ",\"held\":", pf->held);
  rnum_or_null(w, ",\"hit_rate\":", pf->promoted / pf->fired, 4, pf->fired > 0);
  raw(w, strcmp(o->match, "exact") != 0 ? ",\"lossy\":true" : ",\"lossy\":false");
  str(w, ",\"match\":", o->match);
  if (o->predictor_off) raw(w, ",\"predictor_off\":true");
  num(w, ",\"promoted\":", pf->promoted);
  num(w, ",\"promoted_lossy\":", pf->promoted_lossy);
  rnum(w, ",\"saved_ms\":", pf->saved_ms, 3);
  num(w, ",\"wasted\":", pf->wasted);
  rnum(w, ",\"wasted_cost\":", pf->wasted_cost, 6);
  raw(w, "}");
}

/* "k" and "k_config": "inf", the number, or (k_config only) "auto" */
static void kval(wr *w, const char *k, int v, int auto_name) {
  if (v < 0) str(w, k, "inf");
  else if (v == 0 && auto_name) str(w, k, "auto");
  else num(w, k, v);
}

int sp_record_stats_json(const sp_window_stats *st, const sp_stats_opts *o, char *out, int cap) {
  if (!st || !o || cap < 0 || !o->spec_launch) return -1;
  wr w = { .rc = 0 };
  sp_buf_init(&w.b);
  w.rc = sp_buf_reserve(&w.b, 1024);
  double p, a, b;
  sp_est_get(&st->est, &p, &a, &b);
  int est = !isnan(p) && !isnan(a) && !isnan(b);
  int k_used = o->k_config == SP_K_AUTO ? st->k_last : o->k_config;
  double star = NAN, rk = NAN;
  if (est) {
    star = sp_theory_rel_lat_star(p, a, b);
    rk = sp_theory_rel_lat_k(p, a, b, k_used < 0 ? SP_K_UNBOUNDED : k_used);
  }
  rnum_or_null(&w, "{\"alpha_hat\":", a, 4, !isnan(a));
  rnum_or_null(&w, ",\"beta_hat\":", b, 4, !isnan(b));
  num(&w, ",\"calls\":{\"model\":", st->model_calls);
  num(&w, ",\"predicted\":", st->predicted_calls);
  num(&w, ",\"speculator\":", st->spec_calls);
  num(&w, ",\"target\":", st->target_calls);
  num(&w, ",\"warmup\":", st->warmup_calls);
  num(&w, "},\"cancelled\":{\"model\":", st->cancelled_model);
  num(&w, ",\"speculator\":", st->cancelled_spec);
  num(&w, ",\"target\":", st->cancelled_target);
  num(&w, ",\"total\":", (double)st->cancelled_model + st->cancelled_target + st->cancelled_spec);
  num(&w, "},\"commits\":", st->commits);
  num(&w, ",\"deferred\":", st->deferred);
  /* triggers by name: predicted_name, predicted_start, target, warmup */
  gate_row(&w, ",\"gate\":{\"predicted_name\":{\"forbid\":", st->gate[SP_TRIG_PRED_NAME]);
  gate_row(&w, ",\"predicted_start\":{\"forbid\":", st->gate[SP_TRIG_PRED_START]);
  gate_row(&w, ",\"target\":{\"forbid\":", st->gate[SP_TRIG_TARGET]);
  gate_row(&w, ",\"warmup\":{\"forbid\":", st->gate[SP_TRIG_WARMUP]);
  num(&w, "},\"hops\":", o->hops);
  kval(&w, ",\"k\":", k_used, 0);
  kval(&w, ",\"k_config\":", o->k_config, 1);
  if (o->match && st->pf.promoted_lossy > 0) raw(&w, ",\"lossy\":true");
  num(&w, ",\"m\":", o->m);
  num(&w, ",\"max_threads\":", st->max_threads);
  if (o->mode) str(&w, ",\"mode\":", o->mode);
  rnum_or_null(&w, ",\"p_hat\":", p, 4, !isnan(p));
  if (o->match) prefetch(&w, &st->pf, o);
  rnum_or_null(&w, ",\"rel_lat\":", st->wall_ms / st->standard_ms, 4, st->standard_ms > 0);
  rnum_or_null(&w, ",\"rel_lat_k\":", rk, 4, !isnan(rk));
  rnum_or_null(&w, ",\"rel_lat_star\":", star, 4, !isnan(star));
  num(&w, ",\"rollbacks\":", st->rollbacks);
  str(&w, ",\"spec_launch\":", o->spec_launch);
  num(&w, ",\"speculative_launches\":", st->speculative_launches);
  rnum(&w, ",\"standard_ms\":", st->standard_ms, 3);
  num(&w, ",\"verify\":{\"accepted\":", st->accepted);
  num(&w, ",\"errors\":", st->spec_errors);
  num(&w, ",\"late\":", st->late);
  num(&w, ",\"rejected\":", st->rejected);
  rnum(&w, "},\"wall_ms\":", st->wall_ms, 3);
  num(&w, ",\"wasted_calls\":", st->wasted_calls);
  rnum(&w, ",\"wasted_cost\":", st->wasted_cost, 6);
  raw(&w, "}");
  int n = -1;
  if (w.rc == 0 && w.b.len <= (size_t)INT_MAX) {
    n = (int)w.b.len;
    if (n <= cap) memcpy(out, w.b.data, w.b.len);
  }
  sp_buf_free(&w.b);
  return n;
}
