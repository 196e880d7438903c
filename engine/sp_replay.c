/* sp_replay: the stage-record reader, and replays of what it read on the
   window itself (sp_winplay.c). */
#include "sp_replay.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sp_buf.h"
#include "sp_est.h"
#include "sp_json.h"
#include "sp_winplay.h"

#define SP_REPLAY_MAX_MS 1e12        /* stage times above this are corrupt, not slow */
#define SP_REPLAY_MAX_M 4096         /* candidates per hop we are willing to model */
#define SP_REPLAY_WARN_KEPT 50       /* warnings kept verbatim; later ones are only counted */

/* ======================================================================
 * Loading
 * ====================================================================== */

typedef struct sp_replay_loader {
  const char *name;     /* input name used in every message */
  sp_replay_query *q;   /* queries loaded so far */
  size_t n;             /* entries used in q */
  size_t cap;           /* entries allocated in q */
  sp_replay_failed *failed; /* failed queries' records, left out of q */
  size_t n_failed;      /* entries used in failed */
  size_t cap_failed;    /* entries allocated in failed */
  sp_buf warn;          /* warning text, one per line */
  size_t n_warn;        /* warnings issued (including elided ones) */
  int oom;              /* an allocation failed */
} sp_replay_loader;

static void add_warning(sp_replay_loader *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_warning(sp_replay_loader *ld, const char *fmt, ...) {
  ld->n_warn++;
  if (ld->n_warn > SP_REPLAY_WARN_KEPT) return;  /* a broken 1 GB file must not echo itself */
  va_list ap;
  va_start(ap, fmt);
  if (sp_buf_vprintf(&ld->warn, fmt, ap) != 0 || sp_buf_putc(&ld->warn, '\n') != 0) ld->oom = 1;
  va_end(ap);
}

static int set_why(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set_why(char *why, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (n) vsnprintf(why, n, fmt, ap);
  va_end(ap);
  return -1;
}

static void query_clear(sp_replay_query *q) {
  free(q->id);
  free(q->mode);
  free(q->config);
  free(q->hops);
  memset(q, 0, sizeof *q);
}

static void failed_clear(sp_replay_failed *f) {
  free(f->id);
  free(f->config);
  memset(f, 0, sizeof *f);
}

void sp_replay_set_free(sp_replay_set *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n_failed; i++) failed_clear(&s->failed[i]);
  free(s->failed);
  for (size_t i = 0; i < s->n; i++) query_clear(&s->queries[i]);
  free(s->queries);
  free(s->mode);
  free(s->warnings);
  free(s);
}

static char *dup_n(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (!p) return NULL;
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

static int is_null(const sp_json *v) { return !v || sp_json_typeof(v) == SP_JSON_NULL; }

/* The first of a record's own stages object, the record, and the file-level
   defaults that has key: the engine may put k/m/mode at any of the three. */
static const sp_json *lookup(const sp_json *stages, const sp_json *rec,
                                       const sp_json *defaults, const char *key) {
  const sp_json *v = stages ? sp_json_get(stages, key) : NULL;
  if (is_null(v) && rec && rec != stages) v = sp_json_get(rec, key);
  if (is_null(v) && rec) {
    /* results JSONL: the run's settings are in the record's stats (k as k_config) */
    const sp_json *st = sp_json_get(rec, "stats");
    if (st && sp_json_typeof(st) == SP_JSON_OBJECT)
      v = sp_json_get(st, strcmp(key, "k") == 0 ? "k_config" : key);
  }
  if (is_null(v) && defaults) v = sp_json_get(defaults, key);
  return is_null(v) ? NULL : v;
}

/* A stage time in [0, SP_REPLAY_MAX_MS]; absent or null gives dflt unless required. */
static int time_field(const sp_json *o, const char *key, int required, double dflt,
                          double *out, const char *ctx, char *why, size_t n) {
  const sp_json *v = sp_json_get(o, key);
  if (is_null(v)) {
    if (required) return set_why(why, n, "%s\"%s\" is missing", ctx, key);
    *out = dflt;
    return 0;
  }
  if (sp_json_typeof(v) != SP_JSON_NUMBER)
    return set_why(why, n, "%s\"%s\" must be a number (milliseconds)", ctx, key);
  double t = sp_json_number(v);
  if (!(t >= 0 && t <= SP_REPLAY_MAX_MS))
    return set_why(why, n, "%s\"%s\" must be between 0 and 1e12 ms, got %g", ctx, key, t);
  *out = t;
  return 0;
}

/* An integer in [lo, hi]; v == NULL gives dflt. */
static int int_field(const sp_json *v, const char *key, int lo, int hi, int dflt, int *out,
                         const char *ctx, char *why, size_t n) {
  if (!v) { *out = dflt; return 0; }
  double d = sp_json_number(v);
  if (sp_json_typeof(v) != SP_JSON_NUMBER || d != floor(d) || d < lo || d > hi)
    return set_why(why, n, "%s\"%s\" must be an integer in [%d, %d]", ctx, key, lo, hi);
  *out = (int)d;
  return 0;
}

/* Recorded k: an integer >= 1, "inf", or a negative number (= inf); "auto"
   (--k auto: k moved during the run) is no one fixed k, SP_K_AUTO, as is a
   record without k: the query replays at the k values asked for. */
static int k_field(const sp_json *v, int *out, char *why, size_t n) {
  *out = SP_K_AUTO;
  if (!v) return 0;
  if (sp_json_typeof(v) == SP_JSON_STRING) {
    size_t len;
    const char *s = sp_json_string(v, &len);
    if ((len == 3 && memcmp(s, "inf", 3) == 0) || (len == 8 && memcmp(s, "infinity", 8) == 0)) {
      *out = SP_K_UNBOUNDED;
      return 0;
    }
    if (len == 4 && memcmp(s, "auto", 4) == 0) return 0;
  } else if (sp_json_typeof(v) == SP_JSON_NUMBER) {
    double d = sp_json_number(v);
    if (d < 0) { *out = SP_K_UNBOUNDED; return 0; }
    if (d >= 1 && d <= INT_MAX && d == floor(d)) { *out = (int)d; return 0; }
  }
  return set_why(why, n, "\"k\" must be an integer >= 1, \"inf\" or \"auto\"");
}

static int spec_field(const sp_json *v, int *out, const char *ctx, char *why, size_t n) {
  if (is_null(v)) { *out = SP_SPEC_NONE; return 0; }
  size_t len = 0;
  const char *s = sp_json_string(v, &len);
  int code = s ? sp_spec_code(s, len) : -1;
  if (code >= 0) {
    *out = code;
    return 0;
  }
  return set_why(why, n, "%s\"spec\" must be one of accepted, rejected, late, none, error", ctx);
}

/* A query id as text: strings as they are, numbers printed, else fallback. */
static char *id_text(const sp_json *rec, const char *fallback) {
  const sp_json *v = rec ? sp_json_get(rec, "id") : NULL;
  if (v && sp_json_typeof(v) == SP_JSON_STRING) {
    size_t len;
    const char *s = sp_json_string(v, &len);
    return dup_n(s, strlen(s) < len ? strlen(s) : len);  /* stop at an embedded NUL */
  }
  char tmp[64];
  if (v && sp_json_typeof(v) == SP_JSON_NUMBER) snprintf(tmp, sizeof tmp, "%.17g", sp_json_number(v));
  else snprintf(tmp, sizeof tmp, "%s", fallback);
  return dup_n(tmp, strlen(tmp));
}

static int parse_hop(const sp_json *h, size_t i, sp_replay_hop *out, char *why, size_t n) {
  char ctx[48];
  snprintf(ctx, sizeof ctx, "hop %zu: ", i);
  if (sp_json_typeof(h) != SP_JSON_OBJECT) return set_why(why, n, "%snot an object", ctx);
  if (time_field(h, "t_seg", 1, 0, &out->t_seg, ctx, why, n) != 0 ||
      time_field(h, "t_target", 1, 0, &out->t_target, ctx, why, n) != 0 ||
      time_field(h, "t_spec", 0, -1, &out->t_spec, ctx, why, n) != 0 ||
      time_field(h, "t_update", 0, 0, &out->t_update, ctx, why, n) != 0 ||
      time_field(h, "t_verify", 0, 0, &out->t_verify, ctx, why, n) != 0 ||
      spec_field(sp_json_get(h, "spec"), &out->spec, ctx, why, n) != 0)
    return -1;
  const sp_json *rank = sp_json_get(h, "rank");
  if (int_field(is_null(rank) ? NULL : rank, "rank", 0, INT_MAX, 0, &out->rank, ctx,
                    why, n) != 0)
    return -1;
  const sp_json *nc = sp_json_get(h, "ncands");
  if (int_field(is_null(nc) ? NULL : nc, "ncands", 0, INT_MAX, 0, &out->ncands, ctx,
                    why, n) != 0)
    return -1;
  if (out->spec == SP_SPEC_ACCEPTED && out->t_spec < 0)
    return set_why(why, n, "%san accepted speculation needs \"t_spec\"", ctx);
  if (out->spec == SP_SPEC_NONE) out->t_spec = -1;  /* no call: nothing to replay */
  return 0;
}

/* Fills q from a record whose hops live in rec.stages (results JSONL) or in
   rec itself (trace); defaults holds file-level k/m/mode (may be NULL). */
static int parse_record(const sp_json *rec, const sp_json *defaults, const char *fallback_id,
                                  sp_replay_query *q, char *why, size_t n) {
  memset(q, 0, sizeof *q);
  const sp_json *stages = sp_json_get(rec, "stages");
  if (is_null(stages)) stages = rec;
  else if (sp_json_typeof(stages) != SP_JSON_OBJECT)
    return set_why(why, n, "\"stages\" must be an object");
  const sp_json *hops = sp_json_get(stages, "hops");
  if (!hops) return set_why(why, n, "\"hops\" is missing");
  if (sp_json_typeof(hops) != SP_JSON_ARRAY) return set_why(why, n, "\"hops\" must be an array");

  if (time_field(stages, "final_seg", 1, 0, &q->final_seg, "", why, n) != 0) return -1;
  if (int_field(lookup(stages, rec, defaults, "m"), "m", 1, SP_REPLAY_MAX_M, 1, &q->m,
                    "", why, n) != 0)
    return -1;
  if (k_field(lookup(stages, rec, defaults, "k"), &q->k, why, n) != 0) return -1;
  const sp_json *mode = lookup(stages, rec, defaults, "mode");
  if (mode && sp_json_typeof(mode) != SP_JSON_STRING) return set_why(why, n, "\"mode\" must be a string");
  const sp_json *config = sp_json_get(rec, "config");
  if (is_null(config)) config = NULL;
  if (config && sp_json_typeof(config) != SP_JSON_STRING) return set_why(why, n, "\"config\" must be a string");
  /* files written before the eager schedule carry no spec_launch: slot */
  const sp_json *launch = lookup(stages, rec, defaults, "spec_launch");
  q->launch = SP_REPLAY_SLOT;
  if (launch) {
    size_t len = 0;
    const char *ls = sp_json_typeof(launch) == SP_JSON_STRING ? sp_json_string(launch, &len) : NULL;
    if (ls && len == 5 && memcmp(ls, "eager", 5) == 0) q->launch = SP_REPLAY_EAGER;
    else if (!(ls && len == 4 && memcmp(ls, "slot", 4) == 0))
      return set_why(why, n, "\"spec_launch\" must be \"eager\" or \"slot\"");
  }

  size_t nh = sp_json_len(hops);
  q->hops = calloc(nh ? nh : 1, sizeof *q->hops);
  q->id = id_text(rec, fallback_id);
  if (mode) {
    size_t len;
    const char *s = sp_json_string(mode, &len);
    q->mode = dup_n(s, strlen(s) < len ? strlen(s) : len);
  }
  if (config) {
    size_t len;
    const char *s = sp_json_string(config, &len);
    q->config = dup_n(s, strlen(s) < len ? strlen(s) : len);
  }
  if (!q->hops || !q->id || (mode && !q->mode) || (config && !q->config)) {
    query_clear(q);
    return set_why(why, n, "out of memory");
  }
  q->n_hops = nh;
  for (size_t i = 0; i < nh; i++) {
    if (parse_hop(sp_json_at(hops, i), i, &q->hops[i], why, n) != 0) {
      query_clear(q);
      return -1;
    }
    if (q->hops[i].spec != SP_SPEC_NONE) q->has_spec = 1;
  }
  return 0;
}

static int push(sp_replay_loader *ld, sp_replay_query *q) {
  if (ld->n == ld->cap) {
    size_t cap = ld->cap ? ld->cap * 2 : 16;
    sp_replay_query *p = realloc(ld->q, cap * sizeof *p);
    if (!p) { ld->oom = 1; query_clear(q); return -1; }
    ld->q = p;
    ld->cap = cap;
  }
  ld->q[ld->n++] = *q;
  return 0;
}

/* A record of a query that failed (results: "error"; trace entries:
   "failed"): its stage times stop where it failed, so it is no data point
   for a replay (a configuration whose queries failed must not look fast). */
static int is_failed(const sp_json *rec) {
  const sp_json *e = sp_json_get(rec, "error");
  const sp_json *f = sp_json_get(rec, "failed");
  return !is_null(e) || (f && sp_json_typeof(f) == SP_JSON_TRUE);
}

static void push_failed(sp_replay_loader *ld, const sp_json *rec, const char *fallback) {
  if (ld->n_failed == ld->cap_failed) {
    size_t cap = ld->cap_failed ? ld->cap_failed * 2 : 8;
    sp_replay_failed *p = realloc(ld->failed, cap * sizeof *p);
    if (!p) { ld->oom = 1; return; }
    ld->failed = p;
    ld->cap_failed = cap;
  }
  sp_replay_failed f = {id_text(rec, fallback), NULL};
  const sp_json *c = sp_json_get(rec, "config");
  if (c && sp_json_typeof(c) == SP_JSON_STRING) {
    size_t len;
    const char *s = sp_json_string(c, &len);
    f.config = dup_n(s, strlen(s) < len ? strlen(s) : len);
    if (!f.config) ld->oom = 1;
  }
  if (!f.id) ld->oom = 1;
  ld->failed[ld->n_failed++] = f;
}

/* Shape (a): {"traceEvents": [...], "specula": {"version": 1, "queries": [...]}}. */
static int load_trace(sp_replay_loader *ld, const sp_json *root, char *err, size_t errlen) {
  const sp_json *sp = sp_json_get(root, "specula");
  if (!sp) {
    snprintf(err, errlen, "%s: a trace without a \"specula\" section has no stage records "
             "(was it written by specula run --trace?)", ld->name);
    return -1;
  }
  if (sp_json_typeof(sp) != SP_JSON_OBJECT) {
    snprintf(err, errlen, "%s: \"specula\" must be an object", ld->name);
    return -1;
  }
  const sp_json *ver = sp_json_get(sp, "version");
  if (ver && (sp_json_typeof(ver) != SP_JSON_NUMBER || sp_json_number(ver) != 1)) {
    snprintf(err, errlen, "%s: unsupported specula trace version (this build reads version 1)", ld->name);
    return -1;
  }
  const sp_json *qs = sp_json_get(sp, "queries");
  if (!qs || sp_json_typeof(qs) != SP_JSON_ARRAY) {
    snprintf(err, errlen, "%s: \"specula.queries\" must be an array of stage records", ld->name);
    return -1;
  }
  for (size_t i = 0; i < sp_json_len(qs) && !ld->oom; i++) {
    const sp_json *rec = sp_json_at(qs, i);
    char fallback[48], why[256];
    snprintf(fallback, sizeof fallback, "#%zu", i);
    if (sp_json_typeof(rec) != SP_JSON_OBJECT) {
      add_warning(ld, "%s: specula.queries[%zu]: not an object, skipped", ld->name, i);
      continue;
    }
    if (is_failed(rec)) {
      push_failed(ld, rec, fallback);
      continue;
    }
    sp_replay_query q;
    if (parse_record(rec, sp, fallback, &q, why, sizeof why) != 0) {
      char *id = id_text(rec, fallback);
      add_warning(ld, "%s: specula.queries[%zu] (id %.64s): %s, skipped", ld->name, i, id ? id : "?", why);
      free(id);
      continue;
    }
    push(ld, &q);
  }
  return 0;
}

/* One line of shape (b): {"id": ..., "stages": {"hops": [...], "final_seg": x}, ...}. */
static void load_line(sp_replay_loader *ld, const sp_json *v, size_t line) {
  char fallback[48], why[256];
  snprintf(fallback, sizeof fallback, "line %zu", line);
  if (sp_json_typeof(v) != SP_JSON_OBJECT) {
    add_warning(ld, "%s:%zu: not a JSON object, skipped", ld->name, line);
    return;
  }
  if (is_failed(v)) {
    push_failed(ld, v, fallback);
    return;
  }
  char *id = id_text(v, fallback);
  if (is_null(sp_json_get(v, "stages"))) {
    add_warning(ld, "%s:%zu: no \"stages\" (id %.64s), skipped", ld->name, line, id ? id : "?");
  } else {
    sp_replay_query q;
    if (parse_record(v, NULL, fallback, &q, why, sizeof why) != 0)
      add_warning(ld, "%s:%zu: (id %.64s) %s, skipped", ld->name, line, id ? id : "?", why);
    else
      push(ld, &q);
  }
  free(id);
}

/* Shape (b), line by line. Returns how many lines were valid JSON. */
static size_t load_jsonl(sp_replay_loader *ld, const char *text, size_t len) {
  size_t pos = 0, line = 0, n_json = 0;
  while (pos < len && !ld->oom) {
    line++;
    const char *s = text + pos;
    const char *nl = memchr(s, '\n', len - pos);
    size_t n = nl ? (size_t)(nl - s) : len - pos;
    pos += n + (nl ? 1 : 0);
    size_t k = 0;
    while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')) k++;
    if (k == n) continue;  /* blank line */
    char jerr[160];
    sp_json *v = sp_json_parse(s, n, jerr, sizeof jerr);
    if (!v) {
      add_warning(ld, "%s:%zu: %s, skipped", ld->name, line, jerr);
      continue;
    }
    n_json++;
    load_line(ld, v, line);
    sp_json_free(v);
  }
  return n_json;
}

/* The k and mode every query agrees on (0 / NULL otherwise). */
static int set_common(sp_replay_set *set) {
  set->k = set->n ? set->queries[0].k : 0;
  const char *mode = set->n ? set->queries[0].mode : NULL;
  for (size_t i = 1; i < set->n; i++) {
    if (set->queries[i].k != set->k) set->k = 0;
    const char *m = set->queries[i].mode;
    if (mode && (!m || strcmp(m, mode) != 0)) mode = NULL;
  }
  set->mode = NULL;
  if (mode && !(set->mode = dup_n(mode, strlen(mode)))) return -1;
  return 0;
}

static int load_named(const char *name, const char *text, size_t len, sp_replay_set **out,
                                char *err, size_t errlen) {
  char dummy[1];
  if (!err || !errlen) { err = dummy; errlen = sizeof dummy; }
  err[0] = '\0';
  if (!out) { snprintf(err, errlen, "%s: no output pointer", name); return -1; }
  *out = NULL;
  if (!text) len = 0;

  sp_replay_loader ld;
  memset(&ld, 0, sizeof ld);
  ld.name = name;
  sp_buf_init(&ld.warn);

  size_t start = 0;
  if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) start = 3;  /* UTF-8 byte order mark */
  while (start < len && (text[start] == ' ' || text[start] == '\t' || text[start] == '\r' ||
                         text[start] == '\n'))
    start++;
  int rc = -1;
  if (start == len) {
    snprintf(err, errlen, "%s: empty input", name);
    goto done;
  }
  /* One JSON value: a trace (or a one-line results file). Otherwise JSONL. */
  char jerr[160];
  sp_json *root = sp_json_parse(text + start, len - start, jerr, sizeof jerr);
  if (root) {
    sp_json_type t = sp_json_typeof(root);
    if (t == SP_JSON_OBJECT && (sp_json_get(root, "specula") || sp_json_get(root, "traceEvents"))) {
      rc = load_trace(&ld, root, err, errlen);
    } else if (t == SP_JSON_OBJECT) {
      load_line(&ld, root, 1);
      rc = 0;
    } else if (t == SP_JSON_ARRAY) {
      snprintf(err, errlen, "%s: a JSON array of trace events carries no stage records; expected "
               "{\"traceEvents\": [...], \"specula\": {...}} or results JSONL", name);
    } else {
      snprintf(err, errlen, "%s: not a specula trace or results file (expected a JSON object)", name);
    }
    sp_json_free(root);
    if (rc != 0) goto done;
  } else {
    size_t n_json = load_jsonl(&ld, text, len);
    if (ld.n == 0 && !ld.oom && ld.n_failed == 0) {
      /* Say why under both readings: we cannot know which one was meant. */
      const char *first = ld.warn.data ? ld.warn.data : "";
      size_t flen = strcspn(first, "\n");
      snprintf(err, errlen, "%s: not a JSON trace (%s), nor JSONL with stage records (%zu lines "
               "skipped, %zu of them valid JSON%s%.*s)", name, jerr, ld.n_warn, n_json,
               flen ? "; first: " : "", (int)flen, first);
      goto done;
    }
  }
  if (ld.oom) {
    snprintf(err, errlen, "%s: out of memory", name);
    rc = -1;
    goto done;
  }
  if (ld.n == 0 && ld.n_failed > 0) {
    snprintf(err, errlen, "%s: every query in it failed (%zu; the first: '%.64s'): a failed query is no data "
             "point, so there is nothing to replay", name, ld.n_failed, ld.failed[0].id);
    rc = -1;
    goto done;
  }
  if (ld.n == 0) {
    const char *first = ld.warn.data ? ld.warn.data : "";
    size_t flen = strcspn(first, "\n");
    snprintf(err, errlen, "%s: no usable stage records (%zu skipped%s%.*s)", name, ld.n_warn,
             flen ? "; first: " : "", (int)flen, first);
    rc = -1;
    goto done;
  }

  sp_replay_set *set = calloc(1, sizeof *set);
  if (!set) { snprintf(err, errlen, "%s: out of memory", name); rc = -1; goto done; }
  set->queries = ld.q;
  set->n = ld.n;
  ld.q = NULL;
  ld.n = 0;
  set->failed = ld.failed;
  set->n_failed = ld.n_failed;
  ld.failed = NULL;
  ld.n_failed = 0;
  set->n_warnings = ld.n_warn;
  if (ld.n_warn > SP_REPLAY_WARN_KEPT)
    sp_buf_printf(&ld.warn, "%s: ... %zu more warnings not shown\n", name, ld.n_warn - SP_REPLAY_WARN_KEPT);
  set->warnings = ld.warn.data;  /* the set takes the buffer */
  sp_buf_init(&ld.warn);
  if (set_common(set) != 0) {
    sp_replay_set_free(set);
    snprintf(err, errlen, "%s: out of memory", name);
    rc = -1;
    goto done;
  }
  *out = set;
  rc = 0;
done:
  for (size_t i = 0; i < ld.n; i++) query_clear(&ld.q[i]);
  free(ld.q);
  for (size_t i = 0; i < ld.n_failed; i++) failed_clear(&ld.failed[i]);
  free(ld.failed);
  sp_buf_free(&ld.warn);
  return rc;
}

int sp_replay_load_buffer(const char *text, size_t len, sp_replay_set **out, char *err, size_t errlen) {
  return load_named("input", text, len, out, err, errlen);
}

int sp_replay_load_file(const char *path, sp_replay_set **out, char *err, size_t errlen) {
  if (out) *out = NULL;
  if (!path) path = "(null)";
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (errlen) snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  sp_buf b;
  sp_buf_init(&b);
  char chunk[65536];
  size_t got;
  int rc = 0;
  while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (sp_buf_append(&b, chunk, got) != 0) { rc = -1; break; }
  }
  if (rc != 0 || ferror(f)) {
    if (errlen) snprintf(err, errlen, "%s: %s", path, rc ? "out of memory" : "read error (is it a directory?)");
    fclose(f);
    sp_buf_free(&b);
    return -1;
  }
  fclose(f);
  rc = load_named(path, b.data ? b.data : "", b.len, out, err, errlen);
  sp_buf_free(&b);
  return rc;
}

/* ======================================================================
 * Replaying: the window itself on the recorded stage times (sp_winplay.c)
 * ====================================================================== */

/* The window mode a replay runs: SP_MODE_*, -1 if unknown (NULL: spechop). */
static int mode_code(const char *mode) {
  if (!mode || strcmp(mode, "spechop") == 0) return SP_MODE_SPECHOP;
  if (strcmp(mode, "window") == 0) return SP_MODE_WINDOW;
  if (strcmp(mode, "sequential") == 0) return SP_MODE_SEQUENTIAL;
  return -1;
}

/* The hops back to back, accumulated in the order a sequential run's clock
   advances, so that a k = 1 replay reproduces it bit for bit. */
static double standard_of(const sp_replay_query *q) {
  double standard = 0;
  for (size_t i = 0; i < q->n_hops; i++) {
    standard += q->hops[i].t_seg;
    standard += q->hops[i].t_target;
    standard += q->hops[i].t_update;
  }
  return standard + q->final_seg;
}

/* sp_replay_run on playback p (NULL: one made for this call), with a
   timeline when tl is not NULL: the one path behind the replayed numbers
   and the drawn timeline. */
static double replay_on(sp_winplay *p, const sp_replay_query *q, const char *mode, int k, int launch,
                        sp_winplay_tl *tl, double *wall_out, double *standard_out) {
  if (wall_out) *wall_out = NAN;
  if (standard_out) *standard_out = NAN;
  int mc = mode_code(mode);
  if (q && k == SP_REPLAY_K_RECORDED) k = q->k;
  if (!q || (q->n_hops && !q->hops) || k == SP_K_AUTO || k < SP_K_UNBOUNDED || mc < 0) return NAN;
  if (launch == SP_REPLAY_LAUNCH_RECORDED) launch = q->launch;
  sp_winplay *own = p ? NULL : sp_winplay_new();
  if (!p && !(p = own)) return NAN;
  double wall;
  int rc = sp_winplay_run(p, q, mc, k, launch, tl, &wall);
  sp_winplay_free(own);
  if (rc != 0) return NAN;
  double standard = standard_of(q);
  if (wall_out) *wall_out = wall;
  if (standard_out) *standard_out = standard;
  if (standard > 0) return wall / standard;
  return wall > 0 ? INFINITY : 1.0;
}

double sp_replay_run(const sp_replay_query *q, const char *mode, int k, int launch, double *wall_out,
                     double *standard_out) {
  return replay_on(NULL, q, mode, k, launch, NULL, wall_out, standard_out);
}

double sp_replay_run_on(sp_winplay *p, const sp_replay_query *q, const char *mode, int k, int launch,
                        double *wall_out, double *standard_out) {
  return replay_on(p, q, mode, k, launch, NULL, wall_out, standard_out);
}

long sp_replay_set_keep_config(sp_replay_set *set, const char *name) {
  size_t kept = 0;
  for (size_t i = 0; i < set->n; i++) {
    if (set->queries[i].config && strcmp(set->queries[i].config, name) == 0) set->queries[kept++] = set->queries[i];
    else query_clear(&set->queries[i]);
  }
  set->n = kept;
  size_t fk = 0;
  for (size_t i = 0; i < set->n_failed; i++) {
    if (set->failed[i].config && strcmp(set->failed[i].config, name) == 0) set->failed[fk++] = set->failed[i];
    else failed_clear(&set->failed[i]);
  }
  set->n_failed = fk;
  free(set->mode);
  set->mode = NULL;
  if (kept > 0 && set_common(set) != 0) return -1;
  return (long)kept;
}

size_t sp_replay_set_count(const sp_replay_set *s) { return s ? s->n : 0; }

const sp_replay_query *sp_replay_set_query(const sp_replay_set *s, size_t i) {
  return s && i < s->n ? &s->queries[i] : NULL;
}

int sp_replay_timeline(const sp_replay_query *q, const char *mode, int k, int launch, sp_replay_span *spans,
                       size_t max_spans, sp_replay_mark *marks, size_t max_marks, sp_replay_tl_info *info,
                       char *err, size_t errlen) {
  char dummy[1];
  if (!err || !errlen) { err = dummy; errlen = sizeof dummy; }
  err[0] = '\0';
  sp_replay_tl_info none;
  if (!info) info = &none;
  memset(info, 0, sizeof *info);
  info->wall = info->standard = NAN;
  if (!q) return set_why(err, errlen, "no query");
  if ((!spans && max_spans) || (!marks && max_marks)) return set_why(err, errlen, "no array for the timeline");
  if (mode_code(mode) < 0)
    return set_why(err, errlen, "mode must be spechop, window or sequential, got '%.32s'", mode);
  if (k == SP_REPLAY_K_RECORDED) k = q->k;
  if (k == SP_K_AUTO)
    return set_why(err, errlen, "the recorded k is unknown (no one fixed k: auto or not recorded): give k");
  if (k < SP_K_UNBOUNDED) return set_why(err, errlen, "k must be >= 1, unbounded or the recorded k");
  int seq = mode_code(mode) == SP_MODE_SEQUENTIAL;
  if (launch == SP_REPLAY_LAUNCH_RECORDED) launch = q->launch;
  info->k = seq ? 1 : k;
  info->m = q->m >= 1 ? q->m : 1;
  /* the bounded window always launches in slot */
  info->launch = mode_code(mode) == SP_MODE_WINDOW ? SP_REPLAY_SLOT
               : launch == SP_REPLAY_EAGER ? SP_REPLAY_EAGER : SP_REPLAY_SLOT;
  sp_winplay_tl tl;
  memset(&tl, 0, sizeof tl);
  tl.spans = spans;
  tl.max_spans = max_spans;
  tl.marks = marks;
  tl.max_marks = max_marks;
  double r = replay_on(NULL, q, mode, k, launch, &tl, &info->wall, &info->standard);
  if (isnan(r)) return set_why(err, errlen, "the replay failed (out of memory)");
  info->n_spans = tl.n_spans;
  info->n_marks = tl.n_marks;
  info->lanes = tl.lanes;
  if (tl.n_spans > max_spans || tl.n_marks > max_marks)
    return set_why(err, errlen, "the timeline has %zu spans and %zu marks; the arrays hold %zu and %zu",
                   tl.n_spans, tl.n_marks, max_spans, max_marks);
  return 0;
}
