/* Strict JSON parser into an arena-allocated tree, and the canonical encoder
 * (rules in sp_json.h). Recursive descent; the depth limit bounds recursion.
 * Children of an open container are collected on a scratch stack and copied
 * into the arena, exactly sized, when the container closes. */
#include "sp_json.h"
#include "sp_api.h"
#include <limits.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SP_JSON_MAX_DEPTH 256

typedef struct sp_json_member sp_json_member;

struct sp_json {
  sp_json_type type;  /* which union member is live */
  size_t n;           /* string bytes, or array/object element count */
  union {
    double num;                /* SP_JSON_NUMBER */
    char *str;                 /* SP_JSON_STRING: decoded, NUL-terminated */
    sp_json *items;            /* SP_JSON_ARRAY: n elements */
    sp_json_member *members;   /* SP_JSON_OBJECT: n members in source order */
  } u;
};

struct sp_json_member {
  char *key;       /* decoded key, NUL-terminated */
  size_t key_len;  /* bytes in key */
  sp_json val;     /* the member's value */
};

/* One arena block; its payload follows the (aligned) header. */
typedef struct sp_json_chunk {
  struct sp_json_chunk *next;  /* previously filled block */
  size_t used;                 /* payload bytes handed out */
  size_t cap;                  /* payload bytes available */
} sp_json_chunk;

#define SP_JSON_ALIGN (alignof(sp_json))
#define SP_JSON_HDR ((sizeof(sp_json_chunk) + SP_JSON_ALIGN - 1) & ~(SP_JSON_ALIGN - 1))

/* What sp_json_parse returns: the root first, so the pointer converts back. */
typedef struct sp_json_doc {
  sp_json root;           /* the value handed to the caller */
  sp_json_chunk *chunks;  /* arena blocks holding every other node and string */
} sp_json_doc;

typedef struct sp_json_parser {
  const unsigned char *s;  /* input */
  size_t len;              /* input bytes */
  size_t pos;              /* next byte to read */
  int depth;               /* open arrays/objects */
  sp_json_doc *doc;        /* owner of the arena */
  sp_buf items;            /* stack of sp_json: elements of open arrays */
  sp_buf members;          /* stack of sp_json_member: members of open objects */
  sp_buf scratch;          /* decoded string or number text being built */
  char *err;               /* caller's error buffer */
  size_t errlen;           /* its size */
} sp_json_parser;

static int fail(sp_json_parser *p, const char *what, size_t at) {
  if (p->errlen) snprintf(p->err, p->errlen, "JSON: %s at byte %zu", what, at);
  return -1;
}

static void *arena_alloc(sp_json_parser *p, size_t n) {
  n = (n + SP_JSON_ALIGN - 1) & ~(SP_JSON_ALIGN - 1);
  sp_json_chunk *c = p->doc->chunks;
  if (!c || c->cap - c->used < n) {
    /* blocks grow with the input so a big document needs few of them */
    size_t cap = c ? c->cap * 2 : (p->len < 2048 ? 4096 : p->len * 2);
    if (cap < n) cap = n;
    if (cap > SIZE_MAX - SP_JSON_HDR) return NULL;
    sp_json_chunk *nc = malloc(SP_JSON_HDR + cap);
    if (!nc) return NULL;
    nc->next = c;
    nc->used = 0;
    nc->cap = cap;
    p->doc->chunks = nc;
    c = nc;
  }
  void *r = (char *)c + SP_JSON_HDR + c->used;
  c->used += n;
  return r;
}

static char *arena_strdup(sp_json_parser *p, const void *src, size_t n) {
  char *r = arena_alloc(p, n + 1);
  if (!r) return NULL;
  if (n) memcpy(r, src, n);
  r[n] = '\0';
  return r;
}

static void skip_ws(sp_json_parser *p) {
  while (p->pos < p->len) {
    unsigned char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

size_t sp_json_utf8_seq(const unsigned char *s, size_t avail) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;
  if (c < 0xE0) return avail >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
  if (c < 0xF0) {
    unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    if (avail < 3 || s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80) return 0;
    return 3;
  }
  if (c < 0xF5) {
    unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    if (avail < 4 || s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
      return 0;
    return 4;
  }
  return 0;
}

int sp_json_utf8_bad(const char *s, size_t n, size_t from) {
  if (n > (size_t)INT_MAX) return -2;
  const unsigned char *p = (const unsigned char *)s;
  size_t i = from;
  while (i < n) {
    /* ASCII eight bytes at a time: most text is */
    while (i + 8 <= n) {
      uint64_t w;
      memcpy(&w, p + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (p[i] < 0x80) {
      i++;
      continue;
    }
    size_t len = sp_json_utf8_seq(p + i, n - i);
    if (len == 0) return (int)i;
    i += len;
  }
  return -1;
}

static int hex4(const unsigned char *s, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned c = s[i], d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return -1;
    v = v << 4 | d;
  }
  *out = v;
  return 0;
}

static int put_utf8(sp_buf *b, unsigned cp) {
  char u[4];
  size_t n;
  if (cp < 0x80) { u[0] = (char)cp; n = 1; }
  else if (cp < 0x800) { u[0] = (char)(0xC0 | cp >> 6); u[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
  else if (cp < 0x10000) {
    u[0] = (char)(0xE0 | cp >> 12); u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    u[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
  } else {
    u[0] = (char)(0xF0 | cp >> 18); u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    u[2] = (char)(0x80 | (cp >> 6 & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
  }
  return sp_buf_add(b, u, n);
}

/* Decodes the escape at p->pos (just past the backslash) into scratch. */
static int decode_escape(sp_json_parser *p) {
  size_t at = p->pos - 1;
  if (p->pos >= p->len) return fail(p, "unterminated string", p->len);
  unsigned char c = p->s[p->pos++];
  char plain;
  switch (c) {
    case '"': plain = '"'; break;
    case '\\': plain = '\\'; break;
    case '/': plain = '/'; break;
    case 'b': plain = '\b'; break;
    case 'f': plain = '\f'; break;
    case 'n': plain = '\n'; break;
    case 'r': plain = '\r'; break;
    case 't': plain = '\t'; break;
    case 'u': {
      unsigned cp, lo;
      if (p->len - p->pos < 4 || hex4(p->s + p->pos, &cp) != 0)
        return fail(p, "invalid \\u escape", at);
      p->pos += 4;
      if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(p, "lone surrogate in \\u escape", at);
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (p->len - p->pos < 6 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u' ||
            hex4(p->s + p->pos + 2, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
          return fail(p, "lone surrogate in \\u escape", at);
        p->pos += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      }
      if (put_utf8(&p->scratch, cp) != 0) return fail(p, "out of memory", at);
      return 0;
    }
    default:
      return fail(p, "invalid escape in string", at);
  }
  if (sp_buf_putc(&p->scratch, plain) != 0) return fail(p, "out of memory", at);
  return 0;
}

/* Parses the string whose opening quote is at p->pos into the arena. Runs of
 * plain bytes are copied in one go; an escape-free string is copied once. */
static int string_at(sp_json_parser *p, char **out, size_t *out_len) {
  size_t open = p->pos++;
  size_t run = p->pos;  /* start of the current run of plain bytes */
  int escaped = 0;
  for (;;) {
    if (p->pos >= p->len) return fail(p, "unterminated string", open);
    unsigned char c = p->s[p->pos];
    if (c == '"') break;
    if (c == '\\') {
      if (!escaped) { sp_buf_reset(&p->scratch); escaped = 1; }
      if (sp_buf_add(&p->scratch, p->s + run, p->pos - run) != 0)
        return fail(p, "out of memory", p->pos);
      p->pos++;
      if (decode_escape(p) != 0) return -1;
      run = p->pos;
    } else if (c < 0x20) {
      return fail(p, "control character in string", p->pos);
    } else if (c < 0x80) {
      p->pos++;
    } else {
      size_t n = sp_json_utf8_seq(p->s + p->pos, p->len - p->pos);
      if (!n) return fail(p, "invalid UTF-8 in string", p->pos);
      p->pos += n;
    }
  }
  const void *src = p->s + run;
  size_t n = p->pos - run;
  if (escaped) {
    if (sp_buf_add(&p->scratch, src, n) != 0) return fail(p, "out of memory", p->pos);
    src = p->scratch.data;
    n = p->scratch.len;
  }
  p->pos++;  /* closing quote */
  *out = arena_strdup(p, src, n);
  *out_len = n;
  return *out ? 0 : fail(p, "out of memory", open);
}

static int is_digit(const sp_json_parser *p) {
  return p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9';
}

static int number_at(sp_json_parser *p, sp_json *v) {
  size_t start = p->pos;
  if (p->s[p->pos] == '-') p->pos++;
  if (!is_digit(p)) return fail(p, "invalid number", start);
  if (p->s[p->pos] == '0') {
    p->pos++;
    if (is_digit(p)) return fail(p, "leading zero in number", start);
  } else {
    while (is_digit(p)) p->pos++;
  }
  if (p->pos < p->len && p->s[p->pos] == '.') {
    p->pos++;
    if (!is_digit(p)) return fail(p, "expected digit after '.'", p->pos);
    while (is_digit(p)) p->pos++;
  }
  if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
    p->pos++;
    if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
    if (!is_digit(p)) return fail(p, "expected digit in exponent", p->pos);
    while (is_digit(p)) p->pos++;
  }
  /* strtod needs a terminator the input may lack: convert from a copy */
  size_t n = p->pos - start;
  char small[64];
  const char *txt;
  if (n < sizeof small) {
    memcpy(small, p->s + start, n);
    small[n] = '\0';
    txt = small;
  } else {
    sp_buf_reset(&p->scratch);
    if (sp_buf_add(&p->scratch, p->s + start, n) != 0) return fail(p, "out of memory", start);
    txt = p->scratch.data;
  }
  double d = strtod(txt, NULL);
  if (d > 1.7976931348623157e308 || d < -1.7976931348623157e308)
    return fail(p, "number out of range", start);
  v->type = SP_JSON_NUMBER;
  v->u.num = d;
  return 0;
}

static int parse_literal(sp_json_parser *p, const char *word, sp_json_type t, sp_json *v) {
  size_t n = strlen(word);
  if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
    return fail(p, "invalid literal", p->pos);
  p->pos += n;
  v->type = t;
  return 0;
}

static int parse_value(sp_json_parser *p, sp_json *v);

static int array_at(sp_json_parser *p, sp_json *v) {
  size_t base = p->items.len;
  p->pos++;
  skip_ws(p);
  if (p->pos < p->len && p->s[p->pos] == ']') {
    p->pos++;
  } else {
    for (;;) {
      sp_json child;
      if (parse_value(p, &child) != 0) return -1;
      if (sp_buf_add(&p->items, &child, sizeof child) != 0) return fail(p, "out of memory", p->pos);
      skip_ws(p);
      if (p->pos >= p->len) return fail(p, "unexpected end of input", p->pos);
      unsigned char c = p->s[p->pos++];
      if (c == ']') break;
      if (c != ',') return fail(p, "expected ',' or ']'", p->pos - 1);
    }
  }
  size_t bytes = p->items.len - base;
  v->type = SP_JSON_ARRAY;
  v->n = bytes / sizeof(sp_json);
  v->u.items = NULL;
  if (bytes) {
    v->u.items = arena_alloc(p, bytes);
    if (!v->u.items) return fail(p, "out of memory", p->pos);
    memcpy(v->u.items, p->items.data + base, bytes);
  }
  p->items.len = base;
  return 0;
}

static int object_at(sp_json_parser *p, sp_json *v) {
  size_t base = p->members.len;
  p->pos++;
  skip_ws(p);
  if (p->pos < p->len && p->s[p->pos] == '}') {
    p->pos++;
  } else {
    for (;;) {
      sp_json_member m;
      skip_ws(p);
      if (p->pos >= p->len) return fail(p, "unexpected end of input", p->pos);
      if (p->s[p->pos] != '"') return fail(p, "expected string key", p->pos);
      if (string_at(p, &m.key, &m.key_len) != 0) return -1;
      skip_ws(p);
      if (p->pos >= p->len) return fail(p, "unexpected end of input", p->pos);
      if (p->s[p->pos] != ':') return fail(p, "expected ':'", p->pos);
      p->pos++;
      if (parse_value(p, &m.val) != 0) return -1;
      if (sp_buf_add(&p->members, &m, sizeof m) != 0) return fail(p, "out of memory", p->pos);
      skip_ws(p);
      if (p->pos >= p->len) return fail(p, "unexpected end of input", p->pos);
      unsigned char c = p->s[p->pos++];
      if (c == '}') break;
      if (c != ',') return fail(p, "expected ',' or '}'", p->pos - 1);
    }
  }
  size_t bytes = p->members.len - base;
  v->type = SP_JSON_OBJECT;
  v->n = bytes / sizeof(sp_json_member);
  v->u.members = NULL;
  if (bytes) {
    v->u.members = arena_alloc(p, bytes);
    if (!v->u.members) return fail(p, "out of memory", p->pos);
    memcpy(v->u.members, p->members.data + base, bytes);
  }
  p->members.len = base;
  return 0;
}

static int parse_value(sp_json_parser *p, sp_json *v) {
  skip_ws(p);
  if (p->pos >= p->len) return fail(p, "unexpected end of input", p->pos);
  v->n = 0;
  v->u.num = 0;
  unsigned char c = p->s[p->pos];
  switch (c) {
    case '{':
    case '[': {
      if (p->depth >= SP_JSON_MAX_DEPTH) return fail(p, "nesting deeper than 256", p->pos);
      p->depth++;
      int rc = c == '{' ? object_at(p, v) : array_at(p, v);
      p->depth--;
      return rc;
    }
    case '"':
      v->type = SP_JSON_STRING;
      return string_at(p, &v->u.str, &v->n);
    case 't': return parse_literal(p, "true", SP_JSON_TRUE, v);
    case 'f': return parse_literal(p, "false", SP_JSON_FALSE, v);
    case 'n': return parse_literal(p, "null", SP_JSON_NULL, v);
    default:
      if (c == '-' || (c >= '0' && c <= '9')) return number_at(p, v);
      return fail(p, "expected a value", p->pos);
  }
}

static void free_doc(sp_json_doc *d) {
  sp_json_chunk *c = d->chunks;
  while (c) {
    sp_json_chunk *next = c->next;
    free(c);
    c = next;
  }
  free(d);
}

sp_json *sp_json_parse(const char *text, size_t len, char *err, size_t errlen) {
  sp_json_parser p;
  memset(&p, 0, sizeof p);
  p.s = (const unsigned char *)(text ? text : "");
  p.len = text ? len : 0;
  p.err = err;
  p.errlen = errlen;
  if (errlen) err[0] = '\0';
  sp_buf_init(&p.items);
  sp_buf_init(&p.members);
  sp_buf_init(&p.scratch);
  p.doc = calloc(1, sizeof *p.doc);
  int rc = -1;
  if (!p.doc) {
    fail(&p, "out of memory", 0);
  } else if (parse_value(&p, &p.doc->root) == 0) {
    skip_ws(&p);
    if (p.pos == p.len) rc = 0;
    else fail(&p, "unexpected data after the value", p.pos);
  }
  sp_buf_free(&p.items);
  sp_buf_free(&p.members);
  sp_buf_free(&p.scratch);
  if (rc != 0) {
    if (p.doc) free_doc(p.doc);
    return NULL;
  }
  return &p.doc->root;
}

void sp_json_free(sp_json *v) {
  if (v) free_doc((sp_json_doc *)(void *)v);
}

sp_json_type sp_json_typeof(const sp_json *v) { return v->type; }

double sp_json_number(const sp_json *v) { return v->type == SP_JSON_NUMBER ? v->u.num : 0; }

const char *sp_json_string(const sp_json *v, size_t *len) {
  if (v->type != SP_JSON_STRING) return NULL;
  if (len) *len = v->n;
  return v->u.str;
}

size_t sp_json_len(const sp_json *v) {
  return v->type == SP_JSON_ARRAY || v->type == SP_JSON_OBJECT ? v->n : 0;
}

const sp_json *sp_json_at(const sp_json *v, size_t i) {
  if (v->type == SP_JSON_ARRAY && i < v->n) return &v->u.items[i];
  if (v->type == SP_JSON_OBJECT && i < v->n) return &v->u.members[i].val;
  return NULL;
}

const char *sp_json_key_at(const sp_json *v, size_t i, size_t *len) {
  if (v->type != SP_JSON_OBJECT || i >= v->n) return NULL;
  if (len) *len = v->u.members[i].key_len;
  return v->u.members[i].key;
}

const sp_json *sp_json_get(const sp_json *v, const char *key) {
  if (v->type != SP_JSON_OBJECT) return NULL;
  size_t n = strlen(key);
  for (size_t i = v->n; i-- > 0;) {
    const sp_json_member *m = &v->u.members[i];
    if (m->key_len == n && memcmp(m->key, key, n) == 0) return &m->val;
  }
  return NULL;
}

/* ---- an input line, summarised (sp_api.h) ------------------------------- */

/* the type numbers sp_api.h gives Lua */
_Static_assert(SP_JSON_NULL == 0 && SP_JSON_FALSE == 1 && SP_JSON_TRUE == 2 && SP_JSON_NUMBER == 3 &&
               SP_JSON_STRING == 4 && SP_JSON_ARRAY == 5 && SP_JSON_OBJECT == 6, "sp_json_line.type numbers");

#define FNV_OFFSET 14695981039346656037ull
#define FNV_PRIME 1099511628211ull

static uint64_t fnv1a(uint64_t h, const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * FNV_PRIME;
  return h;
}

void sp_json_fingerprint(const char *s, size_t n, uint32_t *out) {
  uint64_t h = fnv1a(FNV_OFFSET, (const unsigned char *)s, n);
  out[0] = (uint32_t)h;
  out[1] = (uint32_t)(h >> 32);
}

static uint64_t fp_string(const char *s, size_t n) {
  /* the same bytes as the Lua side's key, type(id) .. ":" .. id */
  uint64_t h = fnv1a(FNV_OFFSET, (const unsigned char *)"string:", 7);
  return fnv1a(h, (const unsigned char *)s, n);
}

int sp_json_line_scan(const char *s, size_t n, const char **keys, int nkeys, sp_json_line *out) {
  if (!s || !out || nkeys < 0 || nkeys > 16 || (nkeys > 0 && !keys)) return -1;
  memset(out->type, -1, sizeof out->type);
  out->fp[0] = out->fp[1] = 0;
  /* the usual line, {"id": "...", "query": "..."}: read in place, no
     document built (its strings' bytes are their values) */
  sp_json_idq q;
  if (sp_json_line_idq(s, n, &q) == 0) {
    for (int k = 0; k < nkeys; k++) {
      if (!keys[k]) continue;
      int id = strcmp(keys[k], "id") == 0, query = !id && strcmp(keys[k], "query") == 0;
      if (!id && !query) continue;
      out->type[k] = SP_JSON_STRING;
      if (k == 0) {
        uint64_t h = id ? fp_string(s + q.id_at, (size_t)q.id_len) : fp_string(s + q.query_at, (size_t)q.query_len);
        out->fp[0] = (uint32_t)h;
        out->fp[1] = (uint32_t)(h >> 32);
      }
    }
    return 0;
  }
  sp_json *v = sp_json_parse(s, n, NULL, 0);
  if (!v) return -1;
  if (v->type != SP_JSON_OBJECT) {
    sp_json_free(v);
    return 1;
  }
  for (int k = 0; k < nkeys; k++) {
    const sp_json *m = keys[k] ? sp_json_get(v, keys[k]) : NULL;
    if (!m) continue;
    out->type[k] = (signed char)m->type;
    if (k == 0 && m->type == SP_JSON_STRING) {
      uint64_t h = fp_string(m->u.str, m->n);
      out->fp[0] = (uint32_t)h;
      out->fp[1] = (uint32_t)(h >> 32);
    }
  }
  sp_json_free(v);
  return 0;
}

/* ---- an input line that is only an id and a query (sp_api.h) ----------- */

static size_t idq_ws(const char *s, size_t n, size_t i) {
  while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
  return i;
}

/* A string at s[i] ('"' there) without escapes or control bytes, valid
   UTF-8: its bytes' start and length, and the index after its closing
   quote; 0 when it is anything else. */
static size_t idq_string(const char *s, size_t n, size_t i, size_t *at, size_t *len) {
  if (i >= n || s[i] != '"') return 0;
  const unsigned char *u = (const unsigned char *)s;
  size_t j = i + 1;
  while (j < n && u[j] != '"') {
    if (u[j] < 0x20 || u[j] == '\\') return 0;
    if (u[j] < 0x80) {
      j++;
      continue;
    }
    size_t l = sp_json_utf8_seq(u + j, n - j);
    if (!l) return 0;
    j += l;
  }
  if (j >= n) return 0;
  *at = i + 1;
  *len = j - i - 1;
  return j + 1;
}

/* A member "id": "..." or "query": "..." at s[i]: which (1 id, 2 query),
   its value's span, the index after it; 0 for any other member. */
static size_t idq_member(const char *s, size_t n, size_t i, int *which, size_t *at, size_t *len) {
  size_t kat, klen;
  *which = 0;
  size_t j = idq_string(s, n, i, &kat, &klen);
  if (!j) return 0;
  if (klen == 2 && memcmp(s + kat, "id", 2) == 0) *which = 1;
  else if (klen == 5 && memcmp(s + kat, "query", 5) == 0) *which = 2;
  else return 0;
  j = idq_ws(s, n, j);
  if (j >= n || s[j] != ':') return 0;
  j = idq_ws(s, n, j + 1);
  return idq_string(s, n, j, at, len);
}

int sp_json_line_idq(const char *s, size_t n, sp_json_idq *out) {
  if (!s || !out) return -1;
  if (n > INT32_MAX) return 1;
  size_t i = idq_ws(s, n, 0);
  if (i >= n || s[i] != '{') return 1;
  size_t at[3] = {0, 0, 0}, len[3] = {0, 0, 0};
  int seen = 0;
  i = idq_ws(s, n, i + 1);
  for (int m = 0; m < 2; m++) {
    int which;
    size_t a, l;
    i = idq_member(s, n, i, &which, &a, &l);
    /* (a key twice: the decoders keep the last one; left to them) */
    if (!i || (seen & which)) return 1;
    seen |= which;
    at[which] = a;
    len[which] = l;
    i = idq_ws(s, n, i);
    if (m == 0) {
      if (i >= n || s[i] != ',') return 1;
      i = idq_ws(s, n, i + 1);
    }
  }
  if (i >= n || s[i] != '}' || idq_ws(s, n, i + 1) != n) return 1;
  out->id_at = (int32_t)at[1];
  out->id_len = (int32_t)len[1];
  out->query_at = (int32_t)at[2];
  out->query_len = (int32_t)len[2];
  return 0;
}

/* ---- canonical encoder ---------------------------------------------------- */

/* Decimal digits of v (< 2^63) into the end of buf; returns the first. */
static char *utoa(char *end, unsigned long long v) {
  do { *--end = (char)('0' + v % 10); v /= 10; } while (v);
  return end;
}

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8,
                                       1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};

/* The %.15g text of d when d is the double of a decimal with at most 15
   significant digits and 1e-4 <= |d| < 1e15 (fixed notation); 0 otherwise.
   Such a decimal is unique (15-digit decimals are spaced far wider than
   doubles) and it is exactly what %.15g prints, so it is found without
   printf: the smallest k for which r = round(|d| * 10^k) < 10^15 gives
   r / 10^k == |d| (both exact integers: the division rounds correctly, as
   strtod does on the decimal). */
static size_t short_decimal(double d, char *out) {
  double a = d < 0 ? -d : d;
  if (!(a >= 1e-4 && a < 1e15)) return 0;
  for (int k = 1; k <= 15; k++) {
    double s = a * POW10[k];
    if (s >= 1e15) return 0;
    double r = (double)(unsigned long long)(s + 0.5);
    if (r / POW10[k] != a) continue;
    unsigned long long v = (unsigned long long)r;
    char digits[24], *end = digits + sizeof digits;
    char *p = utoa(end, v);
    size_t nd = (size_t)(end - p);
    int frac = k;
    while (frac > 0 && end[-1] == '0') { end--; nd--; frac--; }  /* %g drops trailing zeros */
    size_t o = 0;
    if (d < 0) out[o++] = '-';
    if ((size_t)frac >= nd) {  /* 0.000ddd */
      out[o++] = '0';
      out[o++] = '.';
      for (size_t z = nd; z < (size_t)frac; z++) out[o++] = '0';
      memcpy(out + o, p, nd);
      o += nd;
    } else {
      size_t ni = nd - (size_t)frac;
      memcpy(out + o, p, ni);
      o += ni;
      if (frac > 0) {
        out[o++] = '.';
        memcpy(out + o, p + ni, (size_t)frac);
        o += (size_t)frac;
      }
    }
    return o;
  }
  return 0;
}

char *sp_json_put_number(char *o, double d) {
  /* 2^53: below it every integral double is exact and prints without exponent */
  if (d > -9007199254740992.0 && d < 9007199254740992.0) {
    long long i = (long long)d;
    if ((double)i == d) {  /* -0 gives 0 */
      if (i < 0) *o++ = '-';
      return sp_json_put_uint(o, (unsigned long long)(i < 0 ? -i : i));
    }
  }
  char tmp[40];
  size_t n = short_decimal(d, tmp);
  if (!n) {
    for (int prec = 15; prec <= 17; prec++) {
      snprintf(tmp, sizeof tmp, "%.*g", prec, d);
      if (prec == 17 || strtod(tmp, NULL) == d) break;
    }
    n = strlen(tmp);
  }
  memcpy(o, tmp, n);
  return o + n;
}

int sp_json_put_utf8(char *o, const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  if (n > SP_JSON_PUT_MAX) return -1;
  /* as the encoder's string writer (sp_jsonenc.c): printable ASCII without
     a quote or backslash copied at once; anything else checked for UTF-8,
     then escaped */
  size_t i = 0;
  while (i < n && u[i] >= 0x20 && u[i] < 0x80 && u[i] != '"' && u[i] != '\\') i++;
  if (i == n) {
    o[0] = '"';
    memcpy(o + 1, s, n);
    o[n + 1] = '"';
    return (int)n + 2;
  }
  for (; i < n; i++) {
    if (u[i] < 0x80) continue;
    size_t l = sp_json_utf8_seq(u + i, n - i);
    if (!l) return -1;
    i += l - 1;
  }
  return (int)(sp_json_put_string(o, s, n) - o);
}

int sp_json_put_finite(char *o, double d) {
  if (!isfinite(d)) return -1;
  return (int)(sp_json_put_number(o, d) - o);
}

int sp_json_write_number(sp_buf *out, double d) {
  if (sp_buf_reserve(out, SP_JSON_ROUNDED_MAX) != 0) return -1;
  out->len = (size_t)(sp_json_put_number(out->data + out->len, d) - out->data);
  out->data[out->len] = '\0';
  return 0;
}

/* sp_json_put_rounded for one d, inlined where d is a constant (the
   divisions by 10^d become multiplications). */
static inline __attribute__((always_inline)) char *put_rounded_d(char *o, double x, int d, double f,
                                                                 unsigned long long ud) {
  double q = floor(x * f + 0.5);
  /* below 10^15 the integer q is exact and q / 10^d prints as q's digits
     with d of them after the point, trailing zeros dropped: decimals of at
     most 6 digits lie further apart than doubles there, so the shortest
     decimal of q / 10^d (what sp_json_write_number finds) is that one */
  if (!(q > -1e15 && q < 1e15)) return NULL;   /* (NaN too) */
  unsigned long long u = q < 0 ? (unsigned long long)(-q) : (unsigned long long)q;
  /* under 1e-4 the number writer uses exponent notation (d = 5, 6) */
  if (u != 0 && u * 10000ULL < ud) return NULL;
  unsigned long long ip = u / ud, fp = u % ud;
  char tmp[48], *end = tmp + sizeof tmp, *p = end;
  if (fp) {
    int nd = d;
    while (fp % 10 == 0) { fp /= 10; nd--; }
    for (int i = 0; i < nd; i++) { *--p = (char)('0' + fp % 10); fp /= 10; }
    *--p = '.';
  }
  p = utoa(p, ip);
  if (q < 0) *--p = '-';
  memcpy(o, p, (size_t)(end - p));
  return o + (end - p);
}

char *sp_json_put_uint(char *o, unsigned long long v) {
  char tmp[24], *end = tmp + sizeof tmp, *p = utoa(end, v);
  memcpy(o, p, (size_t)(end - p));
  return o + (end - p);
}

char *sp_json_put_rounded(char *o, double x, int d) {
  static const double P[] = { 1, 10, 100, 1e3, 1e4, 1e5, 1e6 };
  static const unsigned long long U[] = { 1, 10, 100, 1000, 10000, 100000, 1000000 };
  switch (d) {
    case 3: return put_rounded_d(o, x, 3, 1e3, 1000);      /* a record's ms */
    case 4: return put_rounded_d(o, x, 4, 1e4, 10000);     /* stage times, ratios */
    default: return d < 0 || d > 6 ? NULL : put_rounded_d(o, x, d, P[d], U[d]);
  }
}

char *sp_json_put_rounded_any(char *o, double x, int d) {
  static const double P[] = { 1, 10, 100, 1e3, 1e4, 1e5, 1e6 };
  if (d < 0 || d > 6) return NULL;
  char *e = sp_json_put_rounded(o, x, d);
  if (e) return e;
  double q = floor(x * P[d] + 0.5);
  if (!isfinite(q)) return NULL;
  return sp_json_put_number(o, q / P[d]);   /* 10^15 and over, or under 1e-4 */
}

int sp_json_write_rounded(sp_buf *out, double x, int d) {
  if (d < 0 || d > 6 || sp_buf_reserve(out, SP_JSON_ROUNDED_MAX) != 0) return -1;
  char *o = sp_json_put_rounded_any(out->data + out->len, x, d);
  if (!o) return -1;
  out->len = (size_t)(o - out->data);
  out->data[out->len] = '\0';
  return 0;
}

char *sp_json_put_string(char *o, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *u = (const unsigned char *)s;
  *o++ = '"';
  size_t run = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = u[i];
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    memcpy(o, s + run, i - run);
    o += i - run;
    run = i + 1;
    *o++ = '\\';
    switch (c) {
      case '"': *o++ = '"'; break;
      case '\\': *o++ = '\\'; break;
      case '\b': *o++ = 'b'; break;
      case '\f': *o++ = 'f'; break;
      case '\n': *o++ = 'n'; break;
      case '\r': *o++ = 'r'; break;
      case '\t': *o++ = 't'; break;
      default:
        o[0] = 'u'; o[1] = '0'; o[2] = '0'; o[3] = hex[c >> 4]; o[4] = hex[c & 15];
        o += 5;
    }
  }
  memcpy(o, s + run, n - run);
  o += n - run;
  *o++ = '"';
  return o;
}

int sp_json_write_string(sp_buf *out, const char *s, size_t n) {
  /* room for the worst case ("\u00XX" per byte) once, then plain stores */
  if (n > ((size_t)-1 - 2) / 6 || sp_buf_reserve(out, 6 * n + 2) != 0) return -1;
  out->len = (size_t)(sp_json_put_string(out->data + out->len, s, n) - out->data);
  out->data[out->len] = '\0';
  return 0;
}

/* Orders members by key bytes, then by position so the last duplicate is last. */
static int member_cmp(const void *a, const void *b) {
  const sp_json_member *x = *(const sp_json_member *const *)a;
  const sp_json_member *y = *(const sp_json_member *const *)b;
  size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
  int c = n ? memcmp(x->key, y->key, n) : 0;
  if (c) return c;
  if (x->key_len != y->key_len) return x->key_len < y->key_len ? -1 : 1;
  return x < y ? -1 : x > y;
}

static int same_key(const sp_json_member *x, const sp_json_member *y) {
  return x->key_len == y->key_len && memcmp(x->key, y->key, x->key_len) == 0;
}

static int emit(sp_buf *out, const sp_json *v) {
  switch (v->type) {
    case SP_JSON_NULL: return sp_buf_add(out, "null", 4);
    case SP_JSON_FALSE: return sp_buf_add(out, "false", 5);
    case SP_JSON_TRUE: return sp_buf_add(out, "true", 4);
    case SP_JSON_NUMBER: return sp_json_write_number(out, v->u.num);
    case SP_JSON_STRING: return sp_json_write_string(out, v->u.str, v->n);
    case SP_JSON_ARRAY:
      if (sp_buf_putc(out, '[') != 0) return -1;
      for (size_t i = 0; i < v->n; i++) {
        if (i && sp_buf_putc(out, ',') != 0) return -1;
        if (emit(out, &v->u.items[i]) != 0) return -1;
      }
      return sp_buf_putc(out, ']');
    case SP_JSON_OBJECT: {
      /* sort pointers, not members: a small object needs no heap at all */
      const sp_json_member *small[16];
      const sp_json_member **idx = small;
      if (v->n > 16) {
        idx = malloc(v->n * sizeof *idx);
        if (!idx) return -1;
      }
      for (size_t i = 0; i < v->n; i++) idx[i] = &v->u.members[i];
      qsort(idx, v->n, sizeof *idx, member_cmp);
      int rc = sp_buf_putc(out, '{');
      int first = 1;
      for (size_t i = 0; i < v->n && rc == 0; i++) {
        if (i + 1 < v->n && same_key(idx[i], idx[i + 1])) continue;
        if (!first) rc = sp_buf_putc(out, ',');
        first = 0;
        if (rc == 0) rc = sp_json_write_string(out, idx[i]->key, idx[i]->key_len);
        if (rc == 0) rc = sp_buf_putc(out, ':');
        if (rc == 0) rc = emit(out, &idx[i]->val);
      }
      if (idx != small) free(idx);
      return rc == 0 ? sp_buf_putc(out, '}') : -1;
    }
  }
  return -1;
}

int sp_json_canonical(const char *text, size_t len, sp_buf *out, char *err, size_t errlen) {
  sp_json *v = sp_json_parse(text, len, err, errlen);
  if (!v) return -1;
  size_t mark = out->len;
  int rc = emit(out, v);
  sp_json_free(v);
  if (rc != 0) {
    out->len = mark;
    if (out->data) out->data[mark] = '\0';
    if (errlen) snprintf(err, errlen, "JSON: out of memory");
    return -1;
  }
  return 0;
}
