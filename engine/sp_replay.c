/* sp_replay: stage-record reader and discrete-event re-scheduler. */
#include "sp_replay.h"
#include "sp_api.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sp_buf.h"
#include "sp_json.h"

#define SP_REPLAY_MAX_MS 1e12        /* stage times above this are corrupt, not slow */
#define SP_REPLAY_MAX_M 4096         /* candidates per hop we are willing to model */
#define SP_REPLAY_MAX_K 1000000      /* largest finite k on the command line */
#define SP_REPLAY_WARN_KEPT 50       /* warnings kept verbatim; later ones are only counted */

/* ======================================================================
 * Loading
 * ====================================================================== */

typedef struct sp_replay_loader {
  const char *name;     /* input name used in every message */
  sp_replay_query *q;   /* queries loaded so far */
  size_t n;             /* entries used in q */
  size_t cap;           /* entries allocated in q */
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

void sp_replay_set_free(sp_replay_set *s) {
  if (!s) return;
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
   (--k auto: k moved during the run) is no one fixed k, so it reads as
   unknown (0) and the query replays at the k values asked for. */
static int k_field(const sp_json *v, int *out, char *why, size_t n) {
  *out = 0;
  if (!v) return 0;
  if (sp_json_typeof(v) == SP_JSON_STRING) {
    size_t len;
    const char *s = sp_json_string(v, &len);
    if ((len == 3 && memcmp(s, "inf", 3) == 0) || (len == 8 && memcmp(s, "infinity", 8) == 0)) {
      *out = -1;
      return 0;
    }
    if (len == 4 && memcmp(s, "auto", 4) == 0) return 0;
  } else if (sp_json_typeof(v) == SP_JSON_NUMBER) {
    double d = sp_json_number(v);
    if (d < 0) { *out = -1; return 0; }
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
    if (ld.n == 0 && !ld.oom) {
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
 * The discrete-event simulation
 *
 * Only the true path is recorded, so the simulation keeps one node per hop
 * index: the live true-path nodes form a chain head..tip. Wrong-path
 * children (a rejected guess, or the wrong siblings when m > 1) are inert:
 * they hold a slot until the next verification discards them, which is all
 * they can do to the true path.
 * ====================================================================== */

/* Event kinds; the order is also the tie-break at equal times (a step that
   ends, or a speculator that returns, at the very instant the target result
   arrives counts as having happened first). */
enum { SP_EV_STEP_END, SP_EV_SPEC_RET, SP_EV_TARGET_RET, SP_EV_VERIFY_END };

/* Speculator call state of a node. */
enum { SIM_SPEC_IDLE, SIM_SPEC_PENDING, SIM_SPEC_BACK, SIM_SPEC_CANCELLED };

/* What the timeline recorder keeps per node, beside the schedule's own state. */
typedef struct sp_replay_tl_node {
  int lane;          /* lane the node runs on */
  double t_start;    /* its step started */
  double t_step;     /* its step ended (its target call started) */
  double t_spec;     /* its speculator call started */
  double t_verify;   /* its verification started */
  double t_head;     /* it became the verified node; INFINITY before */
} sp_replay_tl_node;

/* An inert wrong-path child: drawn as its first step, until it is discarded. */
typedef struct sp_replay_tl_wrong {
  int lane;          /* its lane */
  size_t parent;     /* the hop whose speculator made it */
  double t0;         /* its step started */
  double seg;        /* the step time it is drawn with (the true path's next step) */
} sp_replay_tl_wrong;

/* The timeline recorder attached to a simulation (sp_replay_timeline). It
   only observes: the schedule runs the same with or without it. */
typedef struct sp_replay_rec {
  sp_replay_span *spans;       /* caller's span array */
  size_t max_spans;            /* its capacity */
  size_t n_spans;              /* spans produced (may exceed max_spans) */
  sp_replay_mark *marks;       /* caller's mark array */
  size_t max_marks;            /* its capacity */
  size_t n_marks;              /* marks produced (may exceed max_marks) */
  sp_replay_tl_node *node;     /* per node 0..N */
  sp_buf wrong;                /* sp_replay_tl_wrong entries not yet discarded */
  int lanes;                   /* lanes handed out */
  int oom;                     /* an allocation failed */
} sp_replay_rec;

typedef struct sp_replay_ev {
  double t;       /* when it happens */
  uint64_t seq;   /* scheduling order, the last tie-break */
  int kind;       /* SP_EV_* */
  size_t hop;     /* the node (hop index) it belongs to */
  unsigned gen;   /* the node's generation when scheduled */
} sp_replay_ev;

typedef struct sp_replay_node {
  unsigned gen;               /* bumped when the node leaves, so its events go stale */
  unsigned char alive;        /* in the window */
  unsigned char step_done;    /* its step (model segment) has ended */
  unsigned char target_back;  /* its target result has returned */
  unsigned char spec;         /* SIM_SPEC_* */
  unsigned char has_child;    /* its true-path child (node hop + 1) exists */
  unsigned char reserved;     /* slot launch: its pending speculator holds a slot */
  size_t wrong;               /* inert wrong-path children holding slots */
  size_t made;                /* candidates turned into children so far (rank order) */
  size_t held;                /* candidates back but waiting for a free slot */
} sp_replay_node;

typedef struct sp_replay_sim {
  const sp_replay_query *q;   /* the recorded stages */
  int window;                 /* bounded-window mode: at most k nodes per round */
  int eager;                  /* a speculator starts at its node's step end, not at a free slot */
  size_t k;                   /* slot limit; SIZE_MAX = unbounded */
  size_t m;                   /* candidates per speculator return, at most */
  sp_replay_node *node;       /* nodes by hop index, 0..N (N = the final step) */
  size_t head;                /* the verified node */
  size_t tip;                 /* the deepest live true-path node */
  size_t live;                /* slots in use: nodes, wrong children, reservations */
  size_t round;               /* nodes created in the current round (window mode) */
  sp_replay_ev *ev;           /* binary min-heap of pending events */
  size_t n_ev;                /* events in the heap */
  size_t cap_ev;              /* heap capacity */
  uint64_t seq;               /* next event sequence number */
  int done;                   /* the final answer has been released */
  int oom;                    /* an allocation failed: the result is NaN */
  double wall;                /* release time of the final answer */
  sp_replay_rec *rec;         /* timeline recorder, or NULL (sp_replay_run) */
} sp_replay_sim;

static int ev_before(const sp_replay_ev *a, const sp_replay_ev *b) {
  if (a->t != b->t) return a->t < b->t;
  if (a->kind != b->kind) return a->kind < b->kind;
  return a->seq < b->seq;
}

static void schedule(sp_replay_sim *s, double t, int kind, size_t hop) {
  if (s->n_ev == s->cap_ev) {
    size_t cap = s->cap_ev ? s->cap_ev * 2 : 64;
    sp_replay_ev *p = realloc(s->ev, cap * sizeof *p);
    if (!p) { s->oom = 1; return; }
    s->ev = p;
    s->cap_ev = cap;
  }
  sp_replay_ev e = {t, s->seq++, kind, hop, s->node[hop].gen};
  size_t i = s->n_ev++;
  while (i > 0) {  /* sift up */
    size_t parent = (i - 1) / 2;
    if (!ev_before(&e, &s->ev[parent])) break;
    s->ev[i] = s->ev[parent];
    i = parent;
  }
  s->ev[i] = e;
}

static sp_replay_ev pop(sp_replay_sim *s) {
  sp_replay_ev top = s->ev[0];
  sp_replay_ev last = s->ev[--s->n_ev];
  size_t i = 0, n = s->n_ev;
  for (;;) {  /* sift down */
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && ev_before(&s->ev[c + 1], &s->ev[c])) c++;
    if (!ev_before(&s->ev[c], &last)) break;
    s->ev[i] = s->ev[c];
    i = c;
  }
  if (n) s->ev[i] = last;
  return top;
}

static double seg_of(const sp_replay_sim *s, size_t hop) {
  return hop < s->q->n_hops ? s->q->hops[hop].t_seg : s->q->final_seg;
}

/* ---- timeline hooks: each is called only when s->rec is set ---------- */

static void tl_span(sp_replay_rec *r, int lane, int kind, size_t hop, int spec, double t0, double t1) {
  if (!(t1 > t0)) return;  /* an instant call draws nothing */
  if (r->n_spans < r->max_spans) {
    sp_replay_span sp = {lane, kind, (int)hop, spec, t0, t1};
    r->spans[r->n_spans] = sp;
  }
  r->n_spans++;
}

/* A span of a true-path node, in its lane: speculative when it started
   before the node was the verified one. */
static void tl_node_span(sp_replay_rec *r, int kind, size_t hop, double t0, double t1) {
  const sp_replay_tl_node *n = &r->node[hop];
  tl_span(r, n->lane, kind, hop, !(n->t_head <= t0), t0, t1);
}

static void tl_mark(sp_replay_rec *r, int lane, int kind, size_t hop, double t) {
  if (r->n_marks < r->max_marks) {
    sp_replay_mark mk = {lane, kind, (int)hop, t};
    r->marks[r->n_marks] = mk;
  }
  r->n_marks++;
}

/* Node hop entered the window at t_start on lane (-1: a new lane). */
static void tl_enter(sp_replay_rec *r, size_t hop, int lane, double t_start, double t_head) {
  sp_replay_tl_node *n = &r->node[hop];
  n->lane = lane >= 0 ? lane : r->lanes++;
  n->t_start = t_start;
  n->t_step = n->t_spec = n->t_verify = t_start;
  n->t_head = t_head;
}

static void tl_wrong_child(sp_replay_sim *s, size_t parent, double t0) {
  sp_replay_rec *r = s->rec;
  sp_replay_tl_wrong w = {r->lanes++, parent, t0, seg_of(s, parent + 1)};
  if (sp_buf_append(&r->wrong, &w, sizeof w) != 0) r->oom = 1;
}

/* The verification of parent discarded its wrong-path children at now: the
   first is marked with the verdict (rollback), the others as cancelled. */
static void tl_discard(sp_replay_rec *r, size_t parent, double now, int verdict) {
  size_t n = r->wrong.len / sizeof(sp_replay_tl_wrong), kept = 0;
  for (size_t i = 0; i < n; i++) {
    sp_replay_tl_wrong w;  /* copied out: the buffer's bytes carry no alignment promise */
    memcpy(&w, r->wrong.data + i * sizeof w, sizeof w);
    if (w.parent != parent) {
      memcpy(r->wrong.data + kept++ * sizeof w, &w, sizeof w);
      continue;
    }
    double end = w.t0 + w.seg < now ? w.t0 + w.seg : now;
    tl_span(r, w.lane, SP_REPLAY_TL_MODEL, parent + 1, 1, w.t0, end);
    tl_mark(r, w.lane, verdict, parent, now);
    verdict = SP_REPLAY_TL_CANCEL;
  }
  r->wrong.len = kept * sizeof(sp_replay_tl_wrong);
}

/* A node for hop enters the window; its step starts at t. The caller accounts its slot. */
static void node_start(sp_replay_sim *s, size_t hop, double t) {
  sp_replay_node *n = &s->node[hop];
  unsigned gen = n->gen;
  memset(n, 0, sizeof *n);
  n->gen = gen;
  n->alive = 1;
  schedule(s, t + seg_of(s, hop), SP_EV_STEP_END, hop);
}

static void node_leave(sp_replay_sim *s, size_t hop) {
  s->node[hop].alive = 0;
  s->node[hop].gen++;
}

static void resolve(sp_replay_sim *s, double now, int commit);

static void materialize(sp_replay_sim *s, size_t i, double now);

/* The head's target result is back (or it just became head with the result
   already back): verify against the speculative child, if there is one. */
static void begin_verify(sp_replay_sim *s, double now) {
  sp_replay_node *n = &s->node[s->head];
  if (n->spec == SIM_SPEC_PENDING) {  /* late: the guess is useless now */
    n->spec = SIM_SPEC_CANCELLED;
    if (n->reserved) s->live--;
    n->reserved = 0;
    if (s->rec) {
      tl_node_span(s->rec, SP_REPLAY_TL_SPEC, s->head, s->rec->node[s->head].t_spec, now);
      tl_mark(s->rec, s->rec->node[s->head].lane, SP_REPLAY_TL_CANCEL, s->head, now);
    }
  }
  /* held candidates take the slots free now, before the verdict (as the
     window does); what still finds none is as late */
  if (n->held) materialize(s, s->head, now);
  n->held = 0;
  if (n->has_child || n->wrong) {
    if (s->rec) s->rec->node[s->head].t_verify = now;
    schedule(s, now + s->q->hops[s->head].t_verify, SP_EV_VERIFY_END, s->head);
  } else
    resolve(s, now, 0);  /* nothing to verify: continue from the real observation */
}

/* Commit the head's child, or roll back to the verified state. In window
   mode a rollback (or reaching a head with no child) starts a new round. */
static void resolve(sp_replay_sim *s, double now, int commit) {
  size_t h = s->head;
  if (commit) {
    s->live -= 1 + s->node[h].wrong;  /* the old head and its wrong siblings leave */
    node_leave(s, h);
    s->head = h + 1;
    if (s->rec) {
      s->rec->node[h + 1].t_head = now;
      tl_mark(s->rec, s->rec->node[h + 1].lane, SP_REPLAY_TL_COMMIT, h, now);
      tl_discard(s->rec, h, now, SP_REPLAY_TL_CANCEL);
    }
    sp_replay_node *n = &s->node[s->head];
    if (s->head == s->q->n_hops) {
      if (n->step_done) { s->done = 1; s->wall = now; }
    } else if (n->target_back) {
      begin_verify(s, now);
    }
    return;
  }
  for (size_t i = h; i <= s->tip; i++)
    if (s->node[i].alive) node_leave(s, i);
  s->head = s->tip = h + 1;
  s->live = 1;
  s->round = 1;
  node_start(s, h + 1, now + s->q->hops[h].t_update);
  if (s->rec) {
    /* the verified thread goes on from the real result, on its own lane */
    tl_discard(s->rec, h, now, SP_REPLAY_TL_ROLLBACK);
    tl_enter(s->rec, h + 1, s->rec->node[h].lane, now + s->q->hops[h].t_update, now);
  }
}

/* Turn node i's held candidates into children, best rank first, while
   slots (and, in window mode, the round's budget) allow. The recorded rank
   of the accepted candidate becomes the true-path child; the others are
   inert wrong-path children. */
static void materialize(sp_replay_sim *s, size_t i, double now) {
  sp_replay_node *n = &s->node[i];
  const sp_replay_hop *hop = &s->q->hops[i];
  while (n->held > 0 && s->live < s->k && !(s->window && s->round >= s->k)) {
    size_t r = n->made++;
    n->held--;
    s->live++;
    s->round++;
    if (hop->spec == SP_SPEC_ACCEPTED && (size_t)hop->rank == r) {
      n->has_child = 1;
      s->tip = i + 1;
      node_start(s, i + 1, now + hop->t_update);
      if (s->rec) tl_enter(s->rec, i + 1, -1, now + hop->t_update, INFINITY);
    } else {
      n->wrong++;
      if (s->rec) tl_wrong_child(s, i, now + hop->t_update);
    }
  }
}

/* Starts node i's speculator call (its return is scheduled when known; an
   unknown t_spec never returns and, in slot launch, holds its slot). */
static void spec_start(sp_replay_sim *s, size_t i, double now, int reserve) {
  sp_replay_node *n = &s->node[i];
  const sp_replay_hop *hop = &s->q->hops[i];
  n->spec = SIM_SPEC_PENDING;
  if (s->rec) s->rec->node[i].t_spec = now;
  if (reserve) {
    n->reserved = 1;
    s->live++;
    s->round++;
  }
  if (hop->t_spec >= 0) schedule(s, now + hop->t_spec, SP_EV_SPEC_RET, i);
}

/* Slot launch: extend the frontier by one speculator call if a slot (and,
   in window mode, the round's budget) allows. The true-path nodes form a
   chain in which every node but the tip already has a child, so the tip is
   the only (and the shallowest) frontier node; wrong-path nodes never
   extend. Both launches: held candidates take the slots that are free,
   shallowest node first. */
static void try_extend(sp_replay_sim *s, double now) {
  if (s->done) return;
  for (size_t i = s->head; i <= s->tip && i < s->q->n_hops; i++)
    if (s->node[i].alive && s->node[i].held) materialize(s, i, now);
  if (s->eager || s->live >= s->k || (s->window && s->round >= s->k)) return;
  size_t i = s->tip;
  sp_replay_node *n = &s->node[i];
  if (i >= s->q->n_hops || !n->alive || !n->step_done || n->spec != SIM_SPEC_IDLE || n->has_child ||
      n->wrong)
    return;
  if (s->q->hops[i].spec == SP_SPEC_NONE) return;
  spec_start(s, i, now, 1);
}

static void spec_ret(sp_replay_sim *s, size_t i, double now) {
  sp_replay_node *n = &s->node[i];
  const sp_replay_hop *hop = &s->q->hops[i];
  n->spec = SIM_SPEC_BACK;
  if (s->rec) tl_node_span(s->rec, SP_REPLAY_TL_SPEC, i, s->rec->node[i].t_spec, now);
  size_t nc = s->m;
  if (hop->ncands > 0 && (size_t)hop->ncands < nc) nc = (size_t)hop->ncands;
  n->held = nc;
  if (n->reserved) {
    /* the reservation becomes the first child (its slot is counted) */
    n->reserved = 0;
    s->live--;
    s->round--;
  }
  materialize(s, i, now);
}

static void dispatch(sp_replay_sim *s, const sp_replay_ev *e) {
  sp_replay_node *n = &s->node[e->hop];
  if (!n->alive || n->gen != e->gen) return;  /* the node was discarded meanwhile */
  switch (e->kind) {
  case SP_EV_STEP_END:
    n->step_done = 1;
    if (s->rec) {
      sp_replay_tl_node *tn = &s->rec->node[e->hop];
      tl_node_span(s->rec, SP_REPLAY_TL_MODEL, e->hop, tn->t_start, e->t);
      tn->t_step = e->t;
    }
    if (e->hop == s->q->n_hops) {  /* the final step: released once it is verified */
      if (e->hop == s->head) { s->done = 1; s->wall = e->t; }
    } else {
      schedule(s, e->t + s->q->hops[e->hop].t_target, SP_EV_TARGET_RET, e->hop);
      /* eager launch: the speculator starts with the target call (a k of 1
         could never use its guess, so none starts) */
      if (s->eager && s->k > 1 && s->q->hops[e->hop].spec != SP_SPEC_NONE)
        spec_start(s, e->hop, e->t, 0);
    }
    break;
  case SP_EV_SPEC_RET:
    if (n->spec == SIM_SPEC_PENDING) spec_ret(s, e->hop, e->t);
    break;
  case SP_EV_TARGET_RET:
    n->target_back = 1;
    if (s->rec) {
      sp_replay_tl_node *tn = &s->rec->node[e->hop];
      tl_node_span(s->rec, SP_REPLAY_TL_TARGET, e->hop, tn->t_step, e->t);
    }
    if (e->hop == s->head) begin_verify(s, e->t);
    break;
  case SP_EV_VERIFY_END:
    if (e->hop == s->head && s->rec) {
      tl_node_span(s->rec, SP_REPLAY_TL_VERIFY, e->hop, s->rec->node[e->hop].t_verify, e->t);
    }
    if (e->hop == s->head) resolve(s, e->t, n->has_child);
    break;
  }
}

/* sp_replay_run, with a timeline recorder when rec is not NULL: the one
   code path behind both the replayed numbers and the drawn timeline. */
static double simulate(const sp_replay_query *q, const char *mode, int k, int launch,
                                 sp_replay_rec *rec, double *wall_out, double *standard_out) {
  if (wall_out) *wall_out = NAN;
  if (standard_out) *standard_out = NAN;
  if (!q || (q->n_hops && !q->hops) || k == 0) return NAN;
  int window = 0;
  if (!mode || strcmp(mode, "spechop") == 0) window = 0;
  else if (strcmp(mode, "window") == 0) window = 1;
  else if (strcmp(mode, "sequential") == 0) k = 1;
  else return NAN;

  /* Accumulated in the order a sequential run's clock advances, so that a
     k = 1 replay reproduces it bit for bit. */
  double standard = 0;
  for (size_t i = 0; i < q->n_hops; i++) {
    standard += q->hops[i].t_seg;
    standard += q->hops[i].t_target;
    standard += q->hops[i].t_update;
  }
  standard += q->final_seg;

  sp_replay_sim s;
  memset(&s, 0, sizeof s);
  s.q = q;
  s.window = window;
  if (launch == SP_REPLAY_LAUNCH_RECORDED) launch = q->launch;
  s.eager = !window && launch == SP_REPLAY_EAGER;
  s.k = k < 0 ? SIZE_MAX : (size_t)k;
  s.m = q->m >= 1 ? (size_t)q->m : 1;
  s.node = calloc(q->n_hops + 1, sizeof *s.node);
  if (!s.node) return NAN;
  s.rec = rec;
  s.live = s.round = 1;
  node_start(&s, 0, 0.0);
  if (rec) tl_enter(rec, 0, -1, 0.0, 0.0);
  while (!s.done && !s.oom && s.n_ev > 0) {
    sp_replay_ev e = pop(&s);
    dispatch(&s, &e);
    if (!s.done) try_extend(&s, e.t);
  }
  int ok = s.done && !s.oom && !(rec && rec->oom);
  if (ok && rec) tl_mark(rec, rec->node[q->n_hops].lane, SP_REPLAY_TL_ANSWER, q->n_hops, s.wall);
  free(s.node);
  free(s.ev);
  if (!ok) return NAN;
  if (wall_out) *wall_out = s.wall;
  if (standard_out) *standard_out = standard;
  if (standard > 0) return s.wall / standard;
  return s.wall > 0 ? INFINITY : 1.0;
}

double sp_replay_run(const sp_replay_query *q, const char *mode, int k, int launch, double *wall_out,
                     double *standard_out) {
  return simulate(q, mode, k, launch, NULL, wall_out, standard_out);
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
  if (mode && strcmp(mode, "spechop") != 0 && strcmp(mode, "window") != 0 && strcmp(mode, "sequential") != 0)
    return set_why(err, errlen, "mode must be spechop, window or sequential, got '%.32s'", mode);
  if (k == 0) k = q->k;
  if (k == 0) return set_why(err, errlen, "the recorded k is unknown: give k");
  int seq = mode && strcmp(mode, "sequential") == 0;
  if (launch == SP_REPLAY_LAUNCH_RECORDED) launch = q->launch;
  info->k = seq ? 1 : k < 0 ? -1 : k;
  info->m = q->m >= 1 ? q->m : 1;
  /* as simulate: the bounded window always launches in slot */
  info->launch = mode && strcmp(mode, "window") == 0 ? SP_REPLAY_SLOT : launch == SP_REPLAY_EAGER ? SP_REPLAY_EAGER
                                                                                                 : SP_REPLAY_SLOT;
  sp_replay_rec rec;
  memset(&rec, 0, sizeof rec);
  rec.spans = spans;
  rec.max_spans = max_spans;
  rec.marks = marks;
  rec.max_marks = max_marks;
  sp_buf_init(&rec.wrong);
  rec.node = calloc(q->n_hops + 1, sizeof *rec.node);
  if (!rec.node) return set_why(err, errlen, "out of memory");
  double r = simulate(q, mode, k, launch, &rec, &info->wall, &info->standard);
  free(rec.node);
  sp_buf_free(&rec.wrong);
  if (isnan(r)) return set_why(err, errlen, "the replay failed (out of memory)");
  info->n_spans = rec.n_spans;
  info->n_marks = rec.n_marks;
  info->lanes = rec.lanes;
  if (rec.n_spans > max_spans || rec.n_marks > max_marks)
    return set_why(err, errlen, "the timeline has %zu spans and %zu marks; the arrays hold %zu and %zu",
                         rec.n_spans, rec.n_marks, max_spans, max_marks);
  return 0;
}

/* ======================================================================
 * The event-level model at given (p, alpha, beta): synthetic stage draws
 * through the same schedule
 * ====================================================================== */

static uint64_t mix(uint64_t *s) {   /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double unif(uint64_t *s) { return ((double)(mix(s) >> 11) + 0.5) / 9007199254740992.0; }

/* A draw with the given mean and coefficient of variation (lognormal; cv 0: fixed). */
static double draw(uint64_t *s, double mean, double cv) {
  if (mean <= 0) return 0;
  if (cv <= 0) return mean;
  double s2 = log(1 + cv * cv);
  double z = sqrt(-2 * log(unif(s))) * cos(2 * M_PI * unif(s));
  return mean * exp(sqrt(s2) * z - s2 / 2);
}

double sp_replay_model(double p, double alpha, double beta, double cv, int k, const char *mode, int launch,
                       int n_hops, int n_queries, uint64_t seed) {
  if (!(p >= 0 && p <= 1) || !(alpha >= 0) || !(beta >= 0) || !(cv >= 0) || n_hops < 1 || n_queries < 1 ||
      !isfinite(alpha) || !isfinite(beta) || !isfinite(cv))
    return NAN;
  sp_replay_hop *hops = calloc((size_t)n_hops, sizeof *hops);
  if (!hops) return NAN;
  uint64_t st = seed ^ 0x5bd1e995ull;
  double wall = 0, std = 0;
  for (int qi = 0; qi < n_queries; qi++) {
    for (int i = 0; i < n_hops; i++) {
      sp_replay_hop *h = &hops[i];
      memset(h, 0, sizeof *h);
      h->t_seg = draw(&st, beta, cv);
      h->t_spec = draw(&st, alpha, cv);
      h->t_target = draw(&st, 1.0, cv);
      h->spec = unif(&st) < p ? SP_SPEC_ACCEPTED : SP_SPEC_REJECTED;
      h->ncands = 1;
    }
    sp_replay_query q;
    memset(&q, 0, sizeof q);
    q.hops = hops;
    q.n_hops = (size_t)n_hops;
    q.m = 1;
    q.launch = launch == SP_REPLAY_EAGER ? SP_REPLAY_EAGER : SP_REPLAY_SLOT;
    q.has_spec = 1;
    q.final_seg = draw(&st, beta, cv);
    double w = 0, sd = 0;
    if (isnan(sp_replay_run(&q, mode, k, q.launch, &w, &sd))) {
      free(hops);
      return NAN;
    }
    wall += w;
    std += sd;
  }
  free(hops);
  return std > 0 ? wall / std : NAN;
}

/* ======================================================================
 * `specula replay`
 * ====================================================================== */

#define SP_REPLAY_USAGE \
  "usage: specula replay FILE [--k 1,2,3,inf] [--mode spechop|window|sequential] " \
  "[--spec-launch eager|slot] [--config NAME] [--json]\n"

static void usage(FILE *f) {
  fputs(SP_REPLAY_USAGE
        "  FILE        a trace (specula run --trace) or a results file (specula run --out)\n"
        "  --k LIST    comma-separated thread counts, integers >= 1 or inf\n"
        "              (default 1,2,3,4,8,inf plus the recorded k)\n"
        "  --mode M    spechop (continuous, default), window (bounded) or sequential\n"
        "  --spec-launch eager|slot\n"
        "              when a thread's speculator starts (default: as recorded; files\n"
        "              without the field were recorded with slot)\n"
        "  --config NAME\n"
        "              the configuration to replay from the records of a --compare run\n"
        "              (required when the file holds several)\n"
        "  --json      one JSON object per k\n",
        f);
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("specula replay: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fputs(SP_REPLAY_USAGE, stderr);
  return 2;
}

/* Sort key: finite k ascending, inf (-1) last. */
static int k_cmp(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  unsigned ux = x < 0 ? UINT_MAX : (unsigned)x, uy = y < 0 ? UINT_MAX : (unsigned)y;
  return ux < uy ? -1 : ux > uy;
}

/* Adds k to the list unless present; list has room for one more. */
static void k_add(int *list, size_t *n, int k) {
  for (size_t i = 0; i < *n; i++)
    if (list[i] == k) return;
  list[(*n)++] = k;
}

/* Parses "1,2,inf" into list (capacity cap - 1, leaving room for the
   recorded k). 0 ok, -1 bad. */
static int parse_klist(const char *s, int *list, size_t cap, size_t *n) {
  *n = 0;
  while (*s) {
    size_t len = strcspn(s, ",");
    char tok[32];
    if (len == 0 || len >= sizeof tok || *n + 1 >= cap) return -1;
    memcpy(tok, s, len);
    tok[len] = '\0';
    int k;
    if (strcmp(tok, "inf") == 0 || strcmp(tok, "infinity") == 0) {
      k = -1;
    } else {
      char *end;
      errno = 0;
      long v = strtol(tok, &end, 10);
      if (*end || end == tok || errno || v < 1 || v > SP_REPLAY_MAX_K) return -1;
      k = (int)v;
    }
    k_add(list, n, k);
    s += len;
    if (*s == ',') {
      s++;
      if (!*s) return -1;
    }
  }
  return *n ? 0 : -1;
}

static void fmt_k(char *out, size_t n, int k) {
  if (k < 0) snprintf(out, n, "inf");
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
   one). 0, or -1 after saying why (naming the configurations it holds). */
static int pick_config(const char *file, sp_replay_set *set, const char *name) {
  size_t distinct = 0, kept = 0;
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
  int rc = 0;
  if (!name && distinct > 1) {
    fprintf(stderr, "specula replay: %s holds the records of %zu configurations (%s): replay one at a "
            "time with --config NAME\n", file, distinct, names.data ? names.data : "");
    rc = -1;
  } else if (name) {
    for (size_t i = 0; i < set->n; i++) {
      if (set->queries[i].config && strcmp(set->queries[i].config, name) == 0) set->queries[kept++] = set->queries[i];
      else query_clear(&set->queries[i]);
    }
    set->n = kept;
    if (kept == 0) {
      fprintf(stderr, "specula replay: %s has no record of configuration '%s' (it holds: %s)\n", file, name,
              names.data ? names.data : "");
      rc = -1;
    } else {
      free(set->mode);
      if (set_common(set) != 0) {
        fprintf(stderr, "specula replay: out of memory\n");
        rc = -1;
      }
    }
  }
  sp_buf_free(&names);
  return rc;
}

int sp_replay_main(int argc, char **argv) {
  const char *file = NULL, *mode = NULL, *klist = NULL, *launch_s = NULL, *config = NULL;
  int json = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { usage(stdout); return 0; }
    if (strcmp(a, "--json") == 0) { json = 1; continue; }
    const char **dst = NULL;
    const char *val = NULL;
    if (strncmp(a, "--k", 3) == 0 && (a[3] == '\0' || a[3] == '=')) dst = &klist;
    else if (strncmp(a, "--mode", 6) == 0 && (a[6] == '\0' || a[6] == '=')) dst = &mode;
    else if (strncmp(a, "--spec-launch", 13) == 0 && (a[13] == '\0' || a[13] == '=')) dst = &launch_s;
    else if (strncmp(a, "--config", 8) == 0 && (a[8] == '\0' || a[8] == '=')) dst = &config;
    if (dst) {
      const char *eq = strchr(a, '=');
      if (eq) val = eq + 1;
      else if (i + 1 < argc) val = argv[++i];
      else return fail("%s needs a value", a);
      *dst = val;
      continue;
    }
    if (a[0] == '-' && a[1] != '\0') return fail("unknown option '%s'", a);
    if (file) return fail("one FILE only (got '%s' and '%s')", file, a);
    file = a;
  }
  if (!file) return fail("missing FILE (a trace or a results JSONL file)");
  if (mode && strcmp(mode, "spechop") != 0 && strcmp(mode, "window") != 0 &&
      strcmp(mode, "sequential") != 0)
    return fail("--mode must be spechop, window or sequential, got '%s'", mode);
  int launch = SP_REPLAY_LAUNCH_RECORDED;
  if (launch_s) {
    if (strcmp(launch_s, "eager") == 0) launch = SP_REPLAY_EAGER;
    else if (strcmp(launch_s, "slot") == 0) launch = SP_REPLAY_SLOT;
    else return fail("--spec-launch must be eager or slot, got '%s'", launch_s);
  }
  int ks[65];
  size_t nk = 0;
  if (klist && parse_klist(klist, ks, sizeof ks / sizeof ks[0], &nk) != 0)
    return fail("--k takes up to 64 comma-separated values, each an integer in "
                          "[1, %d] or inf; got '%s'", SP_REPLAY_MAX_K, klist);

  char err[512];
  sp_replay_set *set = NULL;
  if (sp_replay_load_file(file, &set, err, sizeof err) != 0) {
    fprintf(stderr, "specula replay: %s\n", err);
    return 2;
  }
  if (set->warnings) {
    for (const char *w = set->warnings; *w;) {
      size_t len = strcspn(w, "\n");
      fprintf(stderr, "specula replay: warning: %.*s\n", (int)len, w);
      w += len + (w[len] == '\n');
    }
  }
  /* The records of a --compare run hold several configurations: mixing
     them would replay a sequential run's hops beside a speculative one's. */
  if (pick_config(file, set, config) != 0) {
    sp_replay_set_free(set);
    return 2;
  }
  if (!mode) {
    int rec_ok = set->mode && (strcmp(set->mode, "spechop") == 0 || strcmp(set->mode, "window") == 0);
    mode = rec_ok ? set->mode : "spechop";
  }
  int recorded = set->k != 0 && set->mode && strcmp(set->mode, mode) == 0 ? set->k : 0;
  if (strcmp(mode, "sequential") == 0) {
    nk = 0;
    ks[nk++] = 1;
    if (recorded) recorded = 1;
  } else if (!klist) {
    static const int dflt[] = {1, 2, 3, 4, 8, -1};
    for (size_t i = 0; i < sizeof dflt / sizeof dflt[0]; i++) k_add(ks, &nk, dflt[i]);
  }
  if (recorded) k_add(ks, &nk, recorded);
  qsort(ks, nk, sizeof ks[0], k_cmp);

  /* Only recorded speculator stages can be re-scheduled: a sequential (or
     k = 1) recording has none, and at another k it would just come back
     unchanged. Refuse that; name partial gaps. */
  size_t no_spec_q = 0, no_spec_hops = 0, all_hops = 0;
  for (size_t j = 0; j < set->n; j++) {
    const sp_replay_query *q = &set->queries[j];
    if (!q->has_spec && q->n_hops > 0) no_spec_q++;
    for (size_t h = 0; h < q->n_hops; h++) {
      all_hops++;
      if (q->hops[h].spec == SP_SPEC_NONE) no_spec_hops++;
    }
  }
  int wants_spec = 0;
  for (size_t i = 0; i < nk; i++)
    if (ks[i] != 1) wants_spec = 1;
  if (wants_spec && strcmp(mode, "sequential") != 0 && all_hops > 0 && no_spec_hops == all_hops) {
    fprintf(stderr, "specula replay: %s has no speculator stages (recorded %s%s): there is nothing to "
            "re-speculate at another k; record the run with --mode spechop or window and k > 1\n",
            file, set->mode ? set->mode : "without speculation", set->k == 1 ? ", k = 1" : "");
    sp_replay_set_free(set);
    return 2;
  }
  if (wants_spec && no_spec_hops > 0 && !json)
    fprintf(stderr, "specula replay: note: %zu of %zu hops (%zu of %zu queries entirely) had no speculator "
            "stage and replay as recorded, unspeculated, at every k\n", no_spec_hops, all_hops, no_spec_q,
            set->n);

  sp_replay_est est = estimate(set);
  if (!json) {
    char rk[32] = "";
    if (set->k) fmt_k(rk, sizeof rk, set->k);
    printf("replay %s: %zu queries, %zu hops; mode %s", file, set->n, est.hops, mode);
    if (set->mode || set->k)
      printf(" (recorded: %s%s%s)", set->mode ? set->mode : "mode ?", set->k ? ", k = " : "", rk);
    printf("\n");
    if (!isnan(est.p) && !isnan(est.alpha) && !isnan(est.beta))
      printf("estimated p = %.3f (%zu judged hops), alpha = %.3f, beta = %.3f\n"
             "  (compare: specula theory --p %.3f --alpha %.3f --beta %.3f)\n",
             est.p, est.judged, est.alpha, est.beta, est.p, est.alpha, est.beta);
    printf("\n       k   rel_lat      mean        wall_ms    standard_ms\n");
  }
  int rc = 0;
  for (size_t i = 0; i < nk; i++) {
    double wall_sum = 0, std_sum = 0, mean = 0;
    size_t n_mean = 0, n_bad = 0;
    for (size_t j = 0; j < set->n; j++) {
      double w, st;
      double r = sp_replay_run(&set->queries[j], mode, ks[i], launch, &w, &st);
      if (isnan(r)) { n_bad++; continue; }
      wall_sum += w;
      std_sum += st;
      if (st > 0) { mean += r; n_mean++; }
    }
    if (n_bad) {
      fprintf(stderr, "specula replay: %zu queries could not be replayed (out of memory)\n", n_bad);
      rc = 2;
    }
    double rel = std_sum > 0 ? wall_sum / std_sum : NAN;
    mean = n_mean ? mean / (double)n_mean : NAN;
    char kt[32];
    fmt_k(kt, sizeof kt, ks[i]);
    int mark = recorded && ks[i] == recorded;
    if (json) {
      printf(ks[i] < 0 ? "{\"k\":\"%s\"" : "{\"k\":%s", kt);
      printf(",\"mode\":\"%s\",\"queries\":%zu,\"hops\":%zu", mode, set->n, est.hops);
      json_num(",\"rel_lat\":", rel);
      json_num(",\"mean_rel_lat\":", mean);
      printf(",\"wall_ms\":%.10g,\"standard_ms\":%.10g,\"recorded\":%s", wall_sum, std_sum,
             mark ? "true" : "false");
      int shown = launch != SP_REPLAY_LAUNCH_RECORDED ? launch
                  : set->n ? set->queries[0].launch : SP_REPLAY_SLOT;
      printf(",\"spec_launch\":\"%s\",\"unspeculated_hops\":%zu",
             strcmp(mode, "spechop") != 0 || shown == SP_REPLAY_SLOT ? "slot" : "eager", no_spec_hops);
      json_num(",\"p_hat\":", est.p);
      json_num(",\"alpha_hat\":", est.alpha);
      json_num(",\"beta_hat\":", est.beta);
      printf("}\n");
    } else {
      printf("  %s %4s  %8.4f  %8.4f  %13.1f  %13.1f\n", mark ? "*" : " ", kt, rel, mean, wall_sum,
             std_sum);
    }
  }
  if (!json) {
    printf("\nrel_lat = sum wall / sum standard; mean = mean per-query RelLat%s\n",
           recorded ? "; * = the recorded k" : "");
  }
  sp_replay_set_free(set);
  return rc;
}
