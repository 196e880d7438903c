/* libFuzzer target for the JSON parser and canonical encoder: any input must
 * parse or fail cleanly; a valid one must canonicalize, and the canonical form
 * must be a fixed point (canonicalizing it again gives the same bytes). The
 * first 8 bytes, read as a double, must print as the printf rule of sp_json.h
 * says (sp_json_write_number's fast path skips printf). C only, so libFuzzer's
 * leak check applies; fuzz_jsonenc.c compares the two table encoders.
 * A line sp_json_line_idq reads in place must be one the parser reads as
 * exactly {"id": string, "query": string} with those bytes, and
 * sp_json_line_scan's summary of it must be the parser's. */
#include "sp_api.h"
#include "sp_buf.h"
#include "sp_json.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Touches every node through the public accessors. */
static size_t walk(const sp_json *v) {
  size_t n = 1, len = 0;
  switch (sp_json_typeof(v)) {
    case SP_JSON_STRING:
      if (!sp_json_string(v, &len)) abort();
      break;
    case SP_JSON_NUMBER:
      (void)sp_json_number(v);
      break;
    case SP_JSON_OBJECT:
      for (size_t i = 0; i < sp_json_len(v); i++) {
        const char *k = sp_json_key_at(v, i, &len);
        if (!k) abort();
        if (!memchr(k, '\0', len) && !sp_json_get(v, k)) abort();
      }
      /* fall through */
    case SP_JSON_ARRAY:
      for (size_t i = 0; i < sp_json_len(v); i++) n += walk(sp_json_at(v, i));
      break;
    default:
      break;
  }
  return n;
}

static void check_number(double d) {
  char want[48];
  if (d > -9007199254740992.0 && d < 9007199254740992.0 && (double)(long long)d == d) {
    snprintf(want, sizeof want, "%lld", (long long)d);
  } else {
    for (int prec = 15; prec <= 17; prec++) {
      snprintf(want, sizeof want, "%.*g", prec, d);
      if (strtod(want, NULL) == d) break;
    }
  }
  sp_buf b;
  sp_buf_init(&b);
  if (sp_json_write_number(&b, d) != 0 || strcmp(b.data, want) != 0) abort();
  sp_buf_free(&b);
}

/* The in-place reading of an id-and-query line against the parser's. */
static void check_idq(const char *s, size_t size, const sp_json *v) {
  sp_json_idq q;
  if (sp_json_line_idq(s, size, &q) != 0) return;
  if (!v || sp_json_typeof(v) != SP_JSON_OBJECT || sp_json_len(v) != 2) abort();
  const sp_json *id = sp_json_get(v, "id"), *query = sp_json_get(v, "query");
  size_t il = 0, ql = 0;
  const char *is = id ? sp_json_string(id, &il) : NULL, *qs = query ? sp_json_string(query, &ql) : NULL;
  if (!is || !qs || il != (size_t)q.id_len || ql != (size_t)q.query_len) abort();
  if (memcmp(is, s + q.id_at, il) != 0 || memcmp(qs, s + q.query_at, ql) != 0) abort();
  static const char *keys[] = { "id", "query", "type" };
  sp_json_line out;
  if (sp_json_line_scan(s, size, keys, 3, &out) != 0) abort();
  if (out.type[0] != SP_JSON_STRING || out.type[1] != SP_JSON_STRING || out.type[2] != -1) abort();
  char key[4096 + 8];
  if (il <= 4096) {
    memcpy(key, "string:", 7);
    memcpy(key + 7, is, il);
    uint32_t fp[2];
    sp_json_fingerprint(key, il + 7, fp);
    if (fp[0] != out.fp[0] || fp[1] != out.fp[1]) abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size >= 8) {
    double d;
    memcpy(&d, data, sizeof d);
    if (isfinite(d)) check_number(d);
  }
  const char *s = (const char *)data;
  char err[128];
  sp_json *v = sp_json_parse(s, size, err, sizeof err);
  sp_buf c1, c2;
  sp_buf_init(&c1);
  sp_buf_init(&c2);
  int rc = sp_json_canonical(s, size, &c1, err, sizeof err);
  if ((v != NULL) != (rc == 0)) abort();
  check_idq(s, size, v);
  if (v) {
    walk(v);
    sp_json_free(v);
    if (sp_json_canonical(c1.data, c1.len, &c2, err, sizeof err) != 0) abort();
    if (c1.len != c2.len || memcmp(c1.data, c2.data, c1.len) != 0) abort();
  } else if (strncmp(err, "JSON: ", 6) != 0) {
    abort();
  }
  sp_buf_free(&c1);
  sp_buf_free(&c2);
  return 0;
}
