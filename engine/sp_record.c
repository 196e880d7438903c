#include "sp_record.h"
#include "sp_buf.h"
#include "sp_json.h"
#include <limits.h>
#include <math.h>
#include <string.h>

/* The writer: a cursor into a buffer that was checked once to hold the
   longest text the object can have (stats_bound), so each field is stored
   without a check or a call; rc is 0, or -1 once a figure was not finite.
   Keys come sorted from the caller (canonical order), each literal with the
   ',' or '{' before it. (It reserved and measured per field, and wrote into
   a buffer of its own then copied it: 9.7 K instructions a record.) */
typedef struct {
  char *o;           /* where the next byte goes */
  int rc;            /* 0, or -1 once a number was not finite */
} wr;

/* the longest number text: an integer's digits, sp_json_put_rounded's, or
   sp_json_write_number's (at most 24 bytes) */
#define NUM_MAX SP_JSON_ROUNDED_MAX
/* the object's keys and punctuation, all of them (the prefetch object's
   included): about 900 bytes */
#define KEYS_MAX 1536
/* figures in the object, the prefetch object's included: 60 */
#define NUMS_MAX 64

#define KEY(w, lit) ((w)->o = (char *)memcpy((w)->o, (lit), sizeof(lit) - 1) + sizeof(lit) - 1)

/* x as the number writer writes it, at o (the rare figure that is not a
   count); rc -1 when it is not finite */
static char *put_number(char *o, double x, int *rc) {
  if (!isfinite(x)) {
    *rc = -1;
    return o;
  }
  return sp_json_put_number(o, x);
}

/* (most figures are counts: a non-negative integer's digits written in
   place) */
static void num_at(wr *w, double x) {
  if (x >= 0 && x < 1e15 && x == (double)(unsigned long long)x) w->o = sp_json_put_uint(w->o, (unsigned long long)x);
  else w->o = put_number(w->o, x, &w->rc);
}
#define num(w, lit, x) (KEY(w, lit), num_at((w), (x)))

/* x rounded to d decimals as round(x, d) of lua/specula/run/aggregate.lua
   rounds it, written (sp_json_write_rounded: the same digits) */
static void rnum_at(wr *w, double x, int d) {
  char *e = sp_json_put_rounded_any(w->o, x, d);
  if (e) w->o = e;
  else w->rc = -1;
}
#define rnum(w, lit, x, d) (KEY(w, lit), rnum_at((w), (x), (d)))
/* rnum, or null where the figure is undefined (an estimate that is
   undefined: Lua's nil) */
#define rnum_or_null(w, lit, x, d, defined) \
  (KEY(w, lit), (defined) ? rnum_at((w), (x), (d)) : (void)KEY(w, "null"))

/* a string value (the run's settings), escaped */
static void str_at(wr *w, const char *s) { w->o = sp_json_put_string(w->o, s, strlen(s)); }
#define str(w, lit, s) (KEY(w, lit), str_at((w), (s)))
/* room a string value can take: each byte escaped at worst ("\u00XX") */
static size_t str_max(const char *s) { return s ? 6 * strlen(s) + 2 : 0; }

/* { forbid, full, warmup } of one trigger's row ([SP_FORBID, SP_WARMUP, SP_FULL]) */
#define gate_row(w, lit, row) \
  (num(w, lit, (row)[0]), num(w, ",\"full\":", (row)[2]), num(w, ",\"warmup\":", (row)[1]), KEY(w, "}"))

static void prefetch(wr *w, const sp_prefetch_stats *pf, const sp_stats_opts *o) {
  num(w, ",\"prefetch\":{\"candidates\":", pf->candidates);
  num(w, ",\"fired\":", pf->fired);
  num(w, ",\"gated_ev\":", pf->gated_ev);
  num(w, ",\"gated_policy\":", pf->gated_policy);
  num(w, ",\"held\":", pf->held);
  rnum_or_null(w, ",\"hit_rate\":", pf->promoted / pf->fired, 4, pf->fired > 0);
  if (strcmp(o->match, "exact") != 0) KEY(w, ",\"lossy\":true");
  else KEY(w, ",\"lossy\":false");
  str(w, ",\"match\":", o->match);
  if (o->predictor_off) KEY(w, ",\"predictor_off\":true");
  num(w, ",\"promoted\":", pf->promoted);
  num(w, ",\"promoted_lossy\":", pf->promoted_lossy);
  rnum(w, ",\"saved_ms\":", pf->saved_ms, 3);
  num(w, ",\"wasted\":", pf->wasted);
  rnum(w, ",\"wasted_cost\":", pf->wasted_cost, 6);
  KEY(w, "}");
}

/* "k" and "k_config": "inf", the number, or (k_config only) "auto" */
#define kval(w, lit, v, auto_name)                                              \
  ((v) < 0 ? (void)(KEY(w, lit), KEY(w, "\"inf\""))                             \
   : ((v) == 0 && (auto_name)) ? (void)(KEY(w, lit), KEY(w, "\"auto\"")) : (void)num(w, lit, (v)))

int sp_record_stats_json(const sp_window_stats *st, const sp_stats_opts *o, char *out, int cap) {
  if (!st || !o || cap < 0 || !o->spec_launch) return -1;
  size_t bound = KEYS_MAX + (size_t)NUMS_MAX * NUM_MAX + str_max(o->mode) + str_max(o->spec_launch) +
                 str_max(o->match);
  /* too small a buffer: the caller grows it to this and asks again */
  if (bound > (size_t)INT_MAX) return -1;
  if ((size_t)cap < bound) return (int)bound;
  wr ww = { .o = out, .rc = 0 }, *w = &ww;
  double p, a, b;
  sp_est_get(&st->est, &p, &a, &b);
  int est = !isnan(p) && !isnan(a) && !isnan(b);
  int k_used = o->k_config == SP_K_AUTO ? st->k_last : o->k_config;
  double star = NAN, rk = NAN;
  if (est) {
    star = sp_theory_rel_lat_star(p, a, b);
    rk = sp_theory_rel_lat_k(p, a, b, k_used < 0 ? SP_K_UNBOUNDED : k_used);
  }
  rnum_or_null(w, "{\"alpha_hat\":", a, 4, !isnan(a));
  rnum_or_null(w, ",\"beta_hat\":", b, 4, !isnan(b));
  num(w, ",\"calls\":{\"model\":", st->model_calls);
  num(w, ",\"predicted\":", st->predicted_calls);
  num(w, ",\"speculator\":", st->spec_calls);
  num(w, ",\"target\":", st->target_calls);
  num(w, ",\"warmup\":", st->warmup_calls);
  num(w, "},\"cancelled\":{\"model\":", st->cancelled_model);
  num(w, ",\"speculator\":", st->cancelled_spec);
  num(w, ",\"target\":", st->cancelled_target);
  num(w, ",\"total\":", (double)st->cancelled_model + st->cancelled_target + st->cancelled_spec);
  num(w, "},\"commits\":", st->commits);
  num(w, ",\"deferred\":", st->deferred);
  /* triggers by name: predicted_name, predicted_start, target, warmup */
  gate_row(w, ",\"gate\":{\"predicted_name\":{\"forbid\":", st->gate[SP_TRIG_PRED_NAME]);
  gate_row(w, ",\"predicted_start\":{\"forbid\":", st->gate[SP_TRIG_PRED_START]);
  gate_row(w, ",\"target\":{\"forbid\":", st->gate[SP_TRIG_TARGET]);
  gate_row(w, ",\"warmup\":{\"forbid\":", st->gate[SP_TRIG_WARMUP]);
  num(w, "},\"hops\":", o->hops);
  kval(w, ",\"k\":", k_used, 0);
  kval(w, ",\"k_config\":", o->k_config, 1);
  if (o->match && st->pf.promoted_lossy > 0) KEY(w, ",\"lossy\":true");
  num(w, ",\"m\":", o->m);
  num(w, ",\"max_threads\":", st->max_threads);
  if (o->mode) str(w, ",\"mode\":", o->mode);
  rnum_or_null(w, ",\"p_hat\":", p, 4, !isnan(p));
  if (o->match) prefetch(w, &st->pf, o);
  rnum_or_null(w, ",\"rel_lat\":", st->wall_ms / st->standard_ms, 4, st->standard_ms > 0);
  rnum_or_null(w, ",\"rel_lat_k\":", rk, 4, !isnan(rk));
  rnum_or_null(w, ",\"rel_lat_star\":", star, 4, !isnan(star));
  num(w, ",\"rollbacks\":", st->rollbacks);
  str(w, ",\"spec_launch\":", o->spec_launch);
  num(w, ",\"speculative_launches\":", st->speculative_launches);
  rnum(w, ",\"standard_ms\":", st->standard_ms, 3);
  num(w, ",\"verify\":{\"accepted\":", st->accepted);
  num(w, ",\"errors\":", st->spec_errors);
  num(w, ",\"late\":", st->late);
  num(w, ",\"rejected\":", st->rejected);
  rnum(w, "},\"wall_ms\":", st->wall_ms, 3);
  num(w, ",\"wasted_calls\":", st->wasted_calls);
  rnum(w, ",\"wasted_cost\":", st->wasted_cost, 6);
  KEY(w, "}");
  return w->rc == 0 ? (int)(w->o - out) : -1;
}

/* ---- a whole record's line (sp_record_line) ---------------------------- */

/* the line's keys and punctuation around its pieces (about 100 bytes):
   {"answer":,"config":,"gold":,"id":,"provenance":,"query":,"stages":,"stats":,"trajectory":[]}\n */
#define LINE_KEYS 128
/* ,"shard":{"count":,"index":,"of":,"pos":,"seed":} (49 bytes) */
#define SHARD_KEYS 56

/* s as a JSON string at *o (room for 6n + 2 checked by the caller); 0, or
   -1 when it is not valid UTF-8 */
static int line_str(char **o, const char *s, size_t n) {
  int k = sp_json_put_utf8(*o, s, n);
  if (k < 0) return -1;
  *o += k;
  return 0;
}

#define LIT(o, lit) ((o) = (char *)memcpy((o), (lit), sizeof(lit) - 1) + sizeof(lit) - 1)

int sp_record_line(const sp_window *w, const sp_window_stats *st, const sp_stats_opts *so,
                   sp_record_head *h, char *out, int cap) {
  if (!w || !st || !so || !h || cap < 0 || !h->answer || !h->query) return -1;
  for (int i = 0; i < 3; i++)
    if (!h->prov[i]) return -1;
  if (sp_window_status(w) != SP_WIN_DONE) return -1;
  int n = sp_window_nhops(w);
  if (sp_window_enc_count(w) != n) return -1;   /* a hop left as values: the Lua record */
  int tlen = 0;
  const char *traj = "";
  if (n > 0 && !(traj = sp_window_traj_text(w, 0, n, &tlen))) return -1;
  /* head and tail: the strings at their longest, the provenance, the
     trajectory's text (the stages and stats objects measure themselves) */
  size_t strs = h->answer_len + (h->id ? h->id_len : 0) + h->query_len + (h->config ? h->config_len : 0);
  size_t fixed = LINE_KEYS + 6 * strs + 8 + NUM_MAX + (h->gold ? h->gold_len : 0) + h->prov_len[0] +
                 h->prov_len[1] + h->prov_len[2] + (size_t)tlen;
  /* the agreement text: [answer,[trajectory]] */
  if (h->pick) fixed += 6 * h->answer_len + 2 + (size_t)tlen + 5;
  if (h->shard) fixed += SHARD_KEYS + 5 * NUM_MAX;
  if (strs > SP_JSON_PUT_MAX || fixed > (size_t)INT_MAX / 2) return -1;
  sp_stats_opts o = *so;
  o.hops = n;
  if ((size_t)cap < fixed) {
    /* too small: the whole bound, for the caller to ask again with */
    int sb = sp_window_stages_json(w, NULL, 0), tb = sp_record_stats_json(st, &o, NULL, 0);
    if (sb < 0 || tb < 0 || (size_t)sb + (size_t)tb > (size_t)INT_MAX - fixed) return -1;
    return (int)(fixed + (size_t)sb + (size_t)tb);
  }
  char *p = out;
  LIT(p, "{\"answer\":");
  char *a0 = p;
  if (h->answer_json) {
    memcpy(p, h->answer, h->answer_len);
    p += h->answer_len;
  } else if (line_str(&p, h->answer, h->answer_len) != 0) {
    return -1;
  }
  size_t alen = (size_t)(p - a0);
  if (h->config) {
    LIT(p, ",\"config\":");
    if (line_str(&p, h->config, h->config_len) != 0) return -1;
  }
  if (h->gold) {
    LIT(p, ",\"gold\":");
    memcpy(p, h->gold, h->gold_len);
    p += h->gold_len;
  }
  LIT(p, ",\"id\":");
  if (h->id) {
    if (line_str(&p, h->id, h->id_len) != 0) return -1;
  } else {
    int k = sp_json_put_finite(p, h->id_number);
    if (k < 0) return -1;
    p += k;
  }
  LIT(p, ",\"provenance\":");
  for (int i = 0; i < 3; i++) {
    memcpy(p, h->prov[i], h->prov_len[i]);
    p += h->prov_len[i];
  }
  LIT(p, ",\"query\":");
  if (line_str(&p, h->query, h->query_len) != 0) return -1;
  if (h->shard) {
    static const char *const keys[5] = { ",\"shard\":{\"count\":", ",\"index\":", ",\"of\":", ",\"pos\":",
                                         ",\"seed\":" };
    for (int i = 0; i < 5; i++) {
      size_t kl = strlen(keys[i]);
      memcpy(p, keys[i], kl);
      p += kl;
      int k = sp_json_put_finite(p, h->shard_of[i]);
      if (k < 0) return -1;
      p += k;
    }
    *p++ = '}';
  }
  LIT(p, ",\"stages\":");
  /* what the tail needs stays free: ,"trajectory":[...]}\n and the
     agreement text */
  size_t tail = 16 + (size_t)tlen + 3 + (h->pick ? alen + (size_t)tlen + 5 : 0);
  int room = (int)((size_t)cap - (size_t)(p - out) - tail - 9);   /* 9: ,"stats": */
  int sb = sp_window_stages_json(w, p, room);
  if (sb < 0) return -1;
  if (sb > room) {
    int tb = sp_record_stats_json(st, &o, NULL, 0);
    if (tb < 0 || (size_t)sb + (size_t)tb > (size_t)INT_MAX - fixed) return -1;
    return (int)(fixed + (size_t)sb + (size_t)tb);
  }
  p += sb;
  LIT(p, ",\"stats\":");
  room = (int)((size_t)cap - (size_t)(p - out) - tail);
  int tb = sp_record_stats_json(st, &o, p, room);
  if (tb < 0) return -1;
  if (tb > room) {
    if ((size_t)sb + (size_t)tb > (size_t)INT_MAX - fixed) return -1;
    return (int)(fixed + (size_t)sb + (size_t)tb);
  }
  p += tb;
  LIT(p, ",\"trajectory\":[");
  memcpy(p, traj, (size_t)tlen);
  p += tlen;
  LIT(p, "]}\n");
  int len = (int)(p - out);
  h->agree_len = 0;
  if (h->pick) {
    *p++ = '[';
    memcpy(p, a0, alen);
    p += alen;
    LIT(p, ",[");
    memcpy(p, traj, (size_t)tlen);
    p += tlen;
    LIT(p, "]]");
    h->agree_len = (int)(p - (out + len));
  }
  return len;
}
