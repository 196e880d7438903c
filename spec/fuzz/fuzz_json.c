/* libFuzzer target for the JSON parser and canonical encoder: any input must
 * parse or fail cleanly; a valid one must canonicalize, and the canonical form
 * must be a fixed point (canonicalizing it again gives the same bytes). */
#include "sp_buf.h"
#include "sp_json.h"
#include <stdint.h>
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *s = (const char *)data;
  char err[128];
  sp_json *v = sp_json_parse(s, size, err, sizeof err);
  sp_buf c1, c2;
  sp_buf_init(&c1);
  sp_buf_init(&c2);
  int rc = sp_json_canonical(s, size, &c1, err, sizeof err);
  if ((v != NULL) != (rc == 0)) abort();
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
