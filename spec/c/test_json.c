/* Tests for the JSON parser and canonical encoder (engine/sp_json.c).
 * Exits non-zero on any failure. */
#include "sp_api.h"
#include "sp_buf.h"
#include "sp_json.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* Parsing must fail with exactly this message. */
static void parse_err(const char *text, size_t len, const char *want) {
  char err[128];
  memset(err, 'x', sizeof err);
  sp_json *v = sp_json_parse(text, len, err, sizeof err);
  CHECK(v == NULL, "parse of [%.*s] should fail", (int)len, text);
  sp_json_free(v);
  CHECK(strcmp(err, want) == 0, "parse of [%.*s]: got \"%s\", want \"%s\"", (int)len, text, err, want);
}
#define PERR(lit, want) parse_err(lit, sizeof(lit) - 1, want)

/* Canonical form of text must be want (text as a literal may contain NULs). */
static void canon(const char *text, size_t len, const char *want) {
  char err[128] = "";
  sp_buf out;
  sp_buf_init(&out);
  int rc = sp_json_canonical(text, len, &out, err, sizeof err);
  CHECK(rc == 0, "canonical of [%.*s] failed: %s", (int)len, text, err);
  if (rc == 0) {
    CHECK(out.len == strlen(want) && memcmp(out.data, want, out.len) == 0,
          "canonical of [%.*s]:\n got: [%.*s]\nwant: [%s]", (int)len, text, (int)out.len, out.data, want);
    /* canonical output is a fixed point */
    sp_buf again;
    sp_buf_init(&again);
    rc = sp_json_canonical(out.data, out.len, &again, err, sizeof err);
    CHECK(rc == 0 && again.len == out.len && memcmp(again.data, out.data, out.len) == 0,
          "canonical not idempotent for [%s]", want);
    sp_buf_free(&again);
  }
  sp_buf_free(&out);
}
#define CANON(lit, want) canon(lit, sizeof(lit) - 1, want)

static void test_parse_errors(void) {
  PERR("", "JSON: unexpected end of input at byte 0");
  PERR("   ", "JSON: unexpected end of input at byte 3");
  PERR("[1,]", "JSON: expected a value at byte 3");
  PERR("{\"a\":1,}", "JSON: expected string key at byte 7");
  PERR("{\"a\" 1}", "JSON: expected ':' at byte 5");
  PERR("{\"a\":1 \"b\":2}", "JSON: expected ',' or '}' at byte 7");
  PERR("[1 2]", "JSON: expected ',' or ']' at byte 3");
  PERR("{1:2}", "JSON: expected string key at byte 1");
  PERR("[1,2", "JSON: unexpected end of input at byte 4");
  PERR("{\"a\":", "JSON: unexpected end of input at byte 5");
  PERR("{\"a\"", "JSON: unexpected end of input at byte 4");
  PERR("{", "JSON: unexpected end of input at byte 1");
  PERR("1 2", "JSON: unexpected data after the value at byte 2");
  PERR("{}x", "JSON: unexpected data after the value at byte 2");
  PERR("01", "JSON: leading zero in number at byte 0");
  PERR("-01", "JSON: leading zero in number at byte 0");
  PERR("[00]", "JSON: leading zero in number at byte 1");
  PERR("1.", "JSON: expected digit after '.' at byte 2");
  PERR("1.e5", "JSON: expected digit after '.' at byte 2");
  PERR(".5", "JSON: expected a value at byte 0");
  PERR("-", "JSON: invalid number at byte 0");
  PERR("-x", "JSON: invalid number at byte 0");
  PERR("+1", "JSON: expected a value at byte 0");
  PERR("1e", "JSON: expected digit in exponent at byte 2");
  PERR("1e+", "JSON: expected digit in exponent at byte 3");
  PERR("0x10", "JSON: unexpected data after the value at byte 1");
  PERR("1e400", "JSON: number out of range at byte 0");
  PERR("[-1e999]", "JSON: number out of range at byte 1");
  PERR("NaN", "JSON: expected a value at byte 0");
  PERR("Infinity", "JSON: expected a value at byte 0");
  PERR("-Infinity", "JSON: invalid number at byte 0");
  PERR("nul", "JSON: invalid literal at byte 0");
  PERR("[tru]", "JSON: invalid literal at byte 1");
  PERR("True", "JSON: expected a value at byte 0");
  PERR("nullx", "JSON: unexpected data after the value at byte 4");
  PERR("/*c*/1", "JSON: expected a value at byte 0");
  PERR("[1]//", "JSON: unexpected data after the value at byte 3");
  PERR("\"abc", "JSON: unterminated string at byte 0");
  PERR("\"abc\\", "JSON: unterminated string at byte 5");
  PERR("\"\\x\"", "JSON: invalid escape in string at byte 1");
  PERR("\"\\u12\"", "JSON: invalid \\u escape at byte 1");
  PERR("\"\\u12", "JSON: invalid \\u escape at byte 1");
  PERR("\"\\uGHIJ\"", "JSON: invalid \\u escape at byte 1");
  PERR("\"a\tb\"", "JSON: control character in string at byte 2");
  PERR("\"a\nb\"", "JSON: control character in string at byte 2");
  PERR("\"\0\"", "JSON: control character in string at byte 1");
  PERR("\v1", "JSON: expected a value at byte 0");
  PERR("\xEF\xBB\xBF" "1", "JSON: expected a value at byte 0");
  PERR("'a'", "JSON: expected a value at byte 0");
  parse_err(NULL, 0, "JSON: unexpected end of input at byte 0");
  /* the text need not be NUL-terminated: only len bytes are read */
  parse_err("123", 0, "JSON: unexpected end of input at byte 0");
  parse_err("[1]]", 2, "JSON: unexpected end of input at byte 2");
  /* a NULL/zero-size error buffer is allowed */
  CHECK(sp_json_parse("[", 1, NULL, 0) == NULL, "error without buffer");
  char tiny[8];
  CHECK(sp_json_parse("[", 1, tiny, sizeof tiny) == NULL && strcmp(tiny, "JSON: u") == 0, "truncated error");
}

static void test_surrogates_utf8(void) {
  PERR("\"\\ud800\"", "JSON: lone surrogate in \\u escape at byte 1");
  PERR("\"\\udc00\"", "JSON: lone surrogate in \\u escape at byte 1");
  PERR("\"\\uDBFF\\u0041\"", "JSON: lone surrogate in \\u escape at byte 1");
  PERR("\"\\udc00\\ud800\"", "JSON: lone surrogate in \\u escape at byte 1");
  PERR("\"ab\\ud83d\\ud83d\"", "JSON: lone surrogate in \\u escape at byte 3");
  PERR("\"\\ud83d\\u", "JSON: lone surrogate in \\u escape at byte 1");
  PERR("\"\\ud83dx\"", "JSON: lone surrogate in \\u escape at byte 1");
  PERR("\"a\xff\"", "JSON: invalid UTF-8 in string at byte 2");
  PERR("\"a\x80\"", "JSON: invalid UTF-8 in string at byte 2");
  PERR("\"\xc0\x80\"", "JSON: invalid UTF-8 in string at byte 1");       /* overlong NUL */
  PERR("\"\xc1\xbf\"", "JSON: invalid UTF-8 in string at byte 1");       /* overlong */
  PERR("\"\xe0\x9f\xbf\"", "JSON: invalid UTF-8 in string at byte 1");   /* overlong 3-byte */
  PERR("\"\xed\xa0\x80\"", "JSON: invalid UTF-8 in string at byte 1");   /* encoded surrogate */
  PERR("\"\xf0\x8f\xbf\xbf\"", "JSON: invalid UTF-8 in string at byte 1"); /* overlong 4-byte */
  PERR("\"\xf4\x90\x80\x80\"", "JSON: invalid UTF-8 in string at byte 1"); /* > U+10FFFF */
  PERR("\"\xf5\x80\x80\x80\"", "JSON: invalid UTF-8 in string at byte 1");
  PERR("\"ok\xe2\x82\"", "JSON: invalid UTF-8 in string at byte 3");      /* truncated */
  PERR("\"\xe2\x82", "JSON: invalid UTF-8 in string at byte 1");          /* truncated at end */
  PERR("{\"k\xff\":1}", "JSON: invalid UTF-8 in string at byte 3");        /* in a key */

  static const char t[] = "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\\u00e9\\u20AC\\ud83d\\ude00\\u0000|"
                          "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xef\xbf\xbf\xf4\x8f\xbf\xbf\"";
  static const char want[] = "\"\\/\b\f\n\r\tA\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\0|"
                             "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xef\xbf\xbf\xf4\x8f\xbf\xbf";
  char err[128];
  sp_json *v = sp_json_parse(t, sizeof t - 1, err, sizeof err);
  CHECK(v != NULL, "escapes: %s", err);
  if (v) {
    size_t n = 0;
    const char *s = sp_json_string(v, &n);
    CHECK(s && n == sizeof want - 1 && memcmp(s, want, n) == 0 && s[n] == '\0', "decoded escapes (len %zu)", n);
    sp_json_free(v);
  }
}

static void test_depth(void) {
  char buf[2048];
  for (int i = 0; i < 256; i++) { buf[i] = '['; buf[256 + i] = ']'; }
  char err[128];
  sp_json *v = sp_json_parse(buf, 512, err, sizeof err);
  CHECK(v != NULL, "256 levels allowed: %s", err);
  sp_json_free(v);
  for (int i = 0; i < 257; i++) { buf[i] = '['; buf[257 + i] = ']'; }
  parse_err(buf, 514, "JSON: nesting deeper than 256 at byte 256");
  /* objects count too */
  size_t n = 0;
  for (int i = 0; i < 257; i++) { memcpy(buf + n, "{\"\":", 4); n += 4; }
  parse_err(buf, n, "JSON: nesting deeper than 256 at byte 1024");
  /* a huge nesting attempt must not recurse deeply or crash */
  size_t big = 1000000;
  char *deep = malloc(big);
  memset(deep, '[', big);
  parse_err(deep, big, "JSON: nesting deeper than 256 at byte 256");
  free(deep);
}

static void test_accessors(void) {
  static const char t[] = " {\"n\": -12.5e1, \"s\": \"h\\u00e9\", \"a\": [true, false, null, {}, []],"
                          " \"d\": 1, \"d\": 2, \"o\": {\"x\": \"y\"}} ";
  char err[128];
  sp_json *v = sp_json_parse(t, sizeof t - 1, err, sizeof err);
  CHECK(v != NULL, "accessors parse: %s", err);
  if (!v) return;
  CHECK(sp_json_typeof(v) == SP_JSON_OBJECT && sp_json_len(v) == 6, "root object of 6 members");
  size_t kl = 0;
  const char *k = sp_json_key_at(v, 1, &kl);
  CHECK(k && kl == 1 && k[0] == 's', "key_at keeps source order");
  CHECK(sp_json_key_at(v, 6, &kl) == NULL, "key_at out of range");
  const sp_json *n = sp_json_get(v, "n");
  CHECK(n && sp_json_typeof(n) == SP_JSON_NUMBER && sp_json_number(n) == -125.0, "number");
  size_t sl = 0;
  const char *s = sp_json_string(sp_json_get(v, "s"), &sl);
  CHECK(s && sl == 3 && memcmp(s, "h\xc3\xa9", 3) == 0, "string");
  CHECK(sp_json_string(n, &sl) == NULL && sp_json_number(sp_json_get(v, "s")) == 0, "type mismatch");
  const sp_json *a = sp_json_get(v, "a");
  CHECK(a && sp_json_typeof(a) == SP_JSON_ARRAY && sp_json_len(a) == 5, "array");
  if (a && sp_json_len(a) == 5) {
    CHECK(sp_json_typeof(sp_json_at(a, 0)) == SP_JSON_TRUE, "true");
    CHECK(sp_json_typeof(sp_json_at(a, 1)) == SP_JSON_FALSE, "false");
    CHECK(sp_json_typeof(sp_json_at(a, 2)) == SP_JSON_NULL, "null");
    CHECK(sp_json_typeof(sp_json_at(a, 3)) == SP_JSON_OBJECT && sp_json_len(sp_json_at(a, 3)) == 0, "{}");
    CHECK(sp_json_typeof(sp_json_at(a, 4)) == SP_JSON_ARRAY && sp_json_len(sp_json_at(a, 4)) == 0, "[]");
    CHECK(sp_json_at(a, 5) == NULL && sp_json_len(sp_json_at(a, 0)) == 0, "array bounds");
  }
  const sp_json *d = sp_json_get(v, "d");
  CHECK(d && sp_json_number(d) == 2, "get: last duplicate wins");
  CHECK(sp_json_at(v, 3) && sp_json_number(sp_json_at(v, 3)) == 1, "at: every duplicate is kept");
  CHECK(sp_json_get(v, "zz") == NULL && sp_json_get(a, "n") == NULL, "get misses");
  const sp_json *x = sp_json_get(sp_json_get(v, "o"), "x");
  CHECK(x && strcmp(sp_json_string(x, NULL), "y") == 0, "nested get");
  sp_json_free(v);
  sp_json_free(NULL);

  v = sp_json_parse("\"\"", 2, err, sizeof err);
  CHECK(v && sp_json_string(v, &sl) && sl == 0, "empty string");
  sp_json_free(v);
  v = sp_json_parse("0", 1, err, sizeof err);
  CHECK(v && sp_json_typeof(v) == SP_JSON_NUMBER && sp_json_number(v) == 0, "scalar root");
  sp_json_free(v);
  v = sp_json_parse("1e-400", 6, err, sizeof err);
  CHECK(v && sp_json_number(v) == 0, "underflow reads as 0");
  sp_json_free(v);
}

static void test_canonical(void) {
  /* whitespace, sorting, duplicates */
  CANON(" { \"b\" : 1 ,\n\t\"a\" : [ 1 , { } , [ ] ] }\r\n", "{\"a\":[1,{},[]],\"b\":1}");
  CANON("{\"b\":1,\"a\":2,\"\":0,\"ab\":3,\"\xc3\xa9\":4,\"z\":5,\"B\":6}",
        "{\"\":0,\"B\":6,\"a\":2,\"ab\":3,\"b\":1,\"z\":5,\"\xc3\xa9\":4}");
  CANON("{\"a\":1,\"b\":2,\"a\":3}", "{\"a\":3,\"b\":2}");
  CANON("{\"a\":1,\"a\":{\"y\":1,\"x\":2},\"a\":[3]}", "{\"a\":[3]}");
  CANON("{\"a\":{\"y\":1,\"x\":2},\"a\":{\"d\":1,\"c\":2}}", "{\"a\":{\"c\":2,\"d\":1}}");
  CANON("{\"\\u0000b\":1,\"\\u0000a\":2,\"\":3}", "{\"\":3,\"\\u0000a\":2,\"\\u0000b\":1}");
  CANON("{\"\xef\xbf\xbf\":1,\"\xf0\x9f\x98\x80\":2,\"\x7f\":3}",
        "{\"\x7f\":3,\"\xef\xbf\xbf\":1,\"\xf0\x9f\x98\x80\":2}");
  CANON("[3,1,2]", "[3,1,2]");
  CANON("[]", "[]");
  CANON("{}", "{}");
  CANON("[true,false,null]", "[true,false,null]");
  /* more than 16 members takes the heap path */
  CANON("{\"q\":1,\"p\":1,\"o\":1,\"n\":1,\"m\":1,\"l\":1,\"k\":1,\"j\":1,\"i\":1,\"h\":1,\"g\":1,"
        "\"f\":1,\"e\":1,\"d\":1,\"c\":1,\"b\":1,\"a\":1,\"a\":2}",
        "{\"a\":2,\"b\":1,\"c\":1,\"d\":1,\"e\":1,\"f\":1,\"g\":1,\"h\":1,\"i\":1,\"j\":1,\"k\":1,"
        "\"l\":1,\"m\":1,\"n\":1,\"o\":1,\"p\":1,\"q\":1}");

  /* numbers */
  CANON("1", "1");
  CANON("1.0", "1");
  CANON("-0", "0");
  CANON("-0.0", "0");
  CANON("1E2", "100");
  CANON("1e21", "1e+21");
  CANON("0.1", "0.1");
  CANON("1e-7", "1e-07");
  CANON("123456789012345678", "1.2345678901234568e+17");
  CANON("9007199254740991", "9007199254740991");
  CANON("-9007199254740991", "-9007199254740991");
  CANON("9007199254740992", "9007199254740992");
  CANON("9007199254740993", "9007199254740992");
  CANON("18014398509481984", "18014398509481984");
  CANON("1e16", "1e+16");
  CANON("0.30000000000000004", "0.30000000000000004");
  CANON("0.3333333333333333", "0.3333333333333333");
  CANON("-1.5e-10", "-1.5e-10");
  CANON("100.5", "100.5");
  CANON("1e-400", "0");
  CANON("5e-324", "4.94065645841247e-324");
  CANON("1.7976931348623157e308", "1.7976931348623157e+308");
  CANON("0.000001", "1e-06");
  CANON("0.0001", "0.0001");
  CANON("123.456e3", "123456");
  CANON("[1.25,-7,2.5e-3]", "[1.25,-7,0.0025]");
  /* exact decimal ties round to even (json.lua must match, see json_spec.lua) */
  CANON("1000000000000000.25", "1000000000000000.2");
  CANON("1000000000000000.75", "1000000000000000.8");
  CANON("2251799813685248.5", "2251799813685248.5");

  /* strings */
  CANON("\"\\u0001\\u001F\\b\\f\\n\\r\\t\\\"\\\\\\/\\u007f\\u00e9\\u2028\"",
        "\"\\u0001\\u001f\\b\\f\\n\\r\\t\\\"\\\\/\x7f\xc3\xa9\xe2\x80\xa8\"");
  CANON("\"\\u0000\\u000b\\u001b\"", "\"\\u0000\\u000b\\u001b\"");
  CANON("\"\\ud83d\\ude00 </script>\"", "\"\xf0\x9f\x98\x80 </script>\"");
  CANON("\"plain\"", "\"plain\"");

  /* errors leave the output untouched */
  sp_buf out;
  sp_buf_init(&out);
  sp_buf_puts(&out, "keep");
  char err[128];
  CHECK(sp_json_canonical("{\"a\":[1,2,}", 11, &out, err, sizeof err) == -1, "canonical error");
  CHECK(strcmp(err, "JSON: expected a value at byte 10") == 0, "canonical error message: %s", err);
  CHECK(out.len == 4 && strcmp(out.data, "keep") == 0, "output untouched on error");
  CHECK(sp_json_canonical("[2,1]", 5, &out, err, sizeof err) == 0 && strcmp(out.data, "keep[2,1]") == 0,
        "canonical appends");
  sp_buf_free(&out);
}

/* The number rule of sp_json.h spelled out with printf: what the fast path
   of sp_json_write_number must reproduce byte for byte. */
static void number_ref(double d, char *out, size_t n) {
  if (d > -9007199254740992.0 && d < 9007199254740992.0 && (double)(long long)d == d) {
    snprintf(out, n, "%lld", (long long)d);
    return;
  }
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(out, n, "%.*g", prec, d);
    if (prec == 17 || strtod(out, NULL) == d) return;
  }
}

static void number_is(double d) {
  char want[48];
  number_ref(d, want, sizeof want);
  sp_buf out;
  sp_buf_init(&out);
  CHECK(sp_json_write_number(&out, d) == 0 && strcmp(out.data, want) == 0, "number %.17g: got %s, want %s", d,
        out.data ? out.data : "(null)", want);
  sp_buf_free(&out);
}

/* Values rounded to a few decimals (the records' usual numbers), values
   near the fixed/exponent boundaries, and random bit patterns. */
static void test_numbers(void) {
  static const double fixed[] = {0.1, 0.5, 1e-4, 9.99999999999999e-5, 1.0000000000000002e-4, 0.30000000000000004,
                                 123456789012345.6, 999999999999999.9, 99999999999999.98, 1e15 - 0.5, 2.5e-5,
                                 5e-324, 1.7976931348623157e308, 3.8961, 62.2018, 856.57, 0.0999, 1e21, 1e22};
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
    number_is(fixed[i]);
    number_is(-fixed[i]);
  }
  unsigned long long x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 50000; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    double u = (double)(x >> 11) / 9007199254740992.0;
    static const double scale[] = {1e-6, 1e-4, 1e-2, 1, 1e2, 1e4, 1e8, 1e12, 1e14, 1e15, 1e16};
    double v = u * scale[x % 11];
    double p = scale[(x >> 8) % 6 + 2];  /* round to 0..6 decimals, as the runner does */
    number_is(v);
    number_is(-v);
    number_is(floor(v * p + 0.5) / p);
    double bits;
    memcpy(&bits, &x, sizeof bits);
    if (isfinite(bits)) number_is(bits);
  }
}

/* Inputs once found by fuzzing (none so far that failed); kept as regressions. */
static void test_regressions(void) {
  PERR("\"\\ud800\\", "JSON: lone surrogate in \\u escape at byte 1");
  PERR("[\"\\u", "JSON: invalid \\u escape at byte 2");
  PERR("-0.", "JSON: expected digit after '.' at byte 3");
}

/* sp_json_write_rounded(x, d) writes what sp_json_write_number writes for
   floor(x * 10^d + 0.5) / 10^d (the Lua record's round), byte for byte:
   times of every scale, ties, negatives, the exponent range under 1e-4,
   the 1e15 bound, and what cannot be written. */
static void rounded_is(double x, int d) {
  static const double P[] = { 1, 10, 100, 1e3, 1e4, 1e5, 1e6 };
  double r = floor(x * P[d] + 0.5) / P[d];
  sp_buf a, b;
  sp_buf_init(&a);
  sp_buf_init(&b);
  int ra = sp_json_write_rounded(&a, x, d);
  if (!isfinite(r)) {
    CHECK(ra == -1, "rounded %.17g to %d: not finite, want -1, got %d", x, d, ra);
  } else {
    int rb = sp_json_write_number(&b, r);
    CHECK(ra == 0 && rb == 0 && a.len == b.len && memcmp(a.data, b.data, a.len) == 0,
          "rounded %.17g to %d: got %.*s, want %.*s", x, d, (int)a.len, a.data ? a.data : "", (int)b.len,
          b.data ? b.data : "");
  }
  /* the in-place writer: the same bytes, or NULL exactly where the
     buffer writer leaves its fast path (not finite, 1e15 and over, under
     1e-4 but not 0) */
  char tmp[SP_JSON_ROUNDED_MAX + 1];
  char *e = sp_json_put_rounded(tmp, x, d);
  double q = floor(x * P[d] + 0.5);
  int slow = !(q > -1e15 && q < 1e15) || (q != 0 && fabs(q) / P[d] < 1e-4);
  if (e) {
    CHECK(!slow && ra == 0 && (size_t)(e - tmp) == a.len && memcmp(tmp, a.data, a.len) == 0,
          "put_rounded %.17g to %d: got %.*s, want %.*s", x, d, (int)(e - tmp), tmp, (int)a.len,
          a.data ? a.data : "");
  } else {
    CHECK(slow, "put_rounded %.17g to %d: NULL where the fast path applies", x, d);
  }
  sp_buf_free(&a);
  sp_buf_free(&b);
}

/* sp_json_put_uint: the number writer's digits for integers */
static void test_put_uint(void) {
  static const unsigned long long v[] = { 0, 1, 9, 10, 99, 100, 12345, 4294967295ULL, 9007199254740991ULL };
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    char tmp[24];
    sp_buf b;
    sp_buf_init(&b);
    char *e = sp_json_put_uint(tmp, v[i]);
    CHECK(sp_json_write_number(&b, (double)v[i]) == 0 && (size_t)(e - tmp) == b.len &&
          memcmp(tmp, b.data, b.len) == 0, "put_uint %llu: got %.*s", v[i], (int)(e - tmp), tmp);
    sp_buf_free(&b);
  }
}

static void test_rounded(void) {
  static const double fixed[] = {0, -0.0, 0.5, 0.49999, 0.00005, 0.000049, 1e-7, 5e-7, 0.0001, 0.00015,
                                 1.23456789, -1.23456789, 2.5, -2.5, 0.1 + 0.2, 1234.56785, 99999.99995,
                                 1e9, 1e11 + 0.123, 1e15, 1e15 - 1, 123456789012.3456, 9e14 + 0.5, 1e20, -1e20,
                                 INFINITY, -INFINITY, NAN, 1e308, 4.4e-5, 0.0159, 62.2018};
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
    for (int d = 0; d <= 6; d++) rounded_is(fixed[i], d);
  CHECK(sp_json_write_rounded(NULL, 1.0, 7) == -1, "more than 6 decimals refused");
  srand(46);
  for (int i = 0; i < 300000; i++) {
    double mag = pow(10.0, (double)(rand() % 24) - 8.0);
    double x = mag * ((double)rand() / RAND_MAX);
    if (rand() % 5 == 0) x = -x;
    if (rand() % 7 == 0) x = floor(x * 1e4) / 1e4 + 0.00005;   /* a tie at 4 decimals */
    rounded_is(x, rand() % 7);
  }
}

/* sp_json_line_idq on a copy of text in a buffer of exactly its size (no
   NUL after it: a read past the end shows under ASan and valgrind). */
static int idq_exact(const char *text, size_t len, sp_json_idq *out) {
  char *buf = malloc(len ? len : 1);
  if (!buf) return -2;
  memcpy(buf, text, len);
  int rc = sp_json_line_idq(buf, len, out);
  free(buf);
  return rc;
}

static void idq_takes(const char *line, const char *id, const char *query) {
  sp_json_idq q;
  size_t n = strlen(line);
  int rc = idq_exact(line, n, &q);
  CHECK(rc == 0, "idq should take [%s] (rc %d)", line, rc);
  if (rc != 0) return;
  CHECK((size_t)q.id_len == strlen(id) && memcmp(line + q.id_at, id, strlen(id)) == 0, "id of [%s]", line);
  CHECK((size_t)q.query_len == strlen(query) && memcmp(line + q.query_at, query, strlen(query)) == 0,
        "query of [%s]", line);
  /* every shorter prefix is refused, and read within its own bytes */
  for (size_t k = 0; k < n; k++) {
    int pr = idq_exact(line, k, &q);
    /* (a prefix through the closing '}' and some of the blanks after it is
       still the whole line) */
    int whole = k > (size_t)(strrchr(line, '}') - line);
    CHECK(pr == (whole ? 0 : 1), "prefix %zu of [%s]: rc %d", k, line, pr);
  }
  /* the first pass's summary of it is the strict parser's */
  static const char *keys[] = { "id", "query", "type" };
  sp_json_line sum;
  CHECK(sp_json_line_scan(line, n, keys, 3, &sum) == 0 && sum.type[0] == SP_JSON_STRING &&
        sum.type[1] == SP_JSON_STRING && sum.type[2] == -1, "scan of [%s]", line);
  char key[256];
  snprintf(key, sizeof key, "string:%s", id);
  uint32_t fp[2];
  sp_json_fingerprint(key, strlen(key), fp);
  CHECK(fp[0] == sum.fp[0] && fp[1] == sum.fp[1], "the id's fingerprint in the scan of [%s]", line);
}

static void idq_refuses(const char *line, size_t n) {
  sp_json_idq q;
  int rc = idq_exact(line, n, &q);
  CHECK(rc == 1, "idq should refuse [%.*s] (rc %d)", (int)n, line, rc);
}
#define IDQ_NO(lit) idq_refuses(lit, sizeof(lit) - 1)

static void test_line_idq(void) {
  idq_takes("{\"id\":\"q1\",\"query\":\"what is x?\"}", "q1", "what is x?");
  idq_takes("{\"query\":\"x\",\"id\":\"q2\"}", "q2", "x");
  idq_takes(" \t{ \"id\" : \"q3\" ,\r\n \"query\" : \"caf\xc3\xa9 \xf0\x9f\x98\x80\" } \n", "q3",
            "caf\xc3\xa9 \xf0\x9f\x98\x80");
  idq_takes("{\"id\":\"\",\"query\":\"\"}", "", "");
  IDQ_NO("{\"id\":\"q\\u0031\",\"query\":\"x\"}");
  IDQ_NO("{\"id\":\"q1\",\"query\":\"x\",\"gold\":[]}");
  IDQ_NO("{\"id\":\"a\",\"id\":\"b\",\"query\":\"x\"}");
  IDQ_NO("{\"id\":1,\"query\":\"x\"}");
  IDQ_NO("{\"id\":\"q\x01\",\"query\":\"x\"}");
  IDQ_NO("{\"id\":\"q\0\",\"query\":\"x\"}");
  IDQ_NO("{\"id\":\"\xff\",\"query\":\"x\"}");
  IDQ_NO("{\"id\":\"\xed\xa0\x80\",\"query\":\"x\"}");
  IDQ_NO("{\"id\":\"\xc3\",\"query\":\"x\"}");
  IDQ_NO("{\"id\":\"q1\",\"query\":\"x\"}x");
  IDQ_NO("{\"id\":\"q1\";\"query\":\"x\"}");
  IDQ_NO("\f{\"id\":\"q1\",\"query\":\"x\"}");
  IDQ_NO("");
  sp_json_idq q;
  CHECK(sp_json_line_idq(NULL, 0, &q) == -1 && sp_json_line_idq("{}", 2, NULL) == -1, "bad arguments");
}

/* sp_json_put_utf8 writes what sp_json_write_string writes for valid
   UTF-8, into a buffer of exactly the 6n + 2 bytes it may take (a write past
   it shows under ASan and valgrind), and refuses what is not UTF-8;
   sp_json_put_finite writes sp_json_write_number's digits. */
static void put_utf8_is(const char *s, size_t n, int valid) {
  char *o = malloc(6 * n + 2);
  if (!o) return;
  int w = sp_json_put_utf8(o, s, n);
  if (!valid) {
    CHECK(w == -1, "put_utf8 should refuse [%.*s] (got %d)", (int)n, s, w);
  } else {
    sp_buf want = {0};
    CHECK(sp_json_write_string(&want, s, n) == 0, "write_string");
    CHECK(w >= 0 && (size_t)w == want.len && memcmp(o, want.data, want.len) == 0, "put_utf8 of [%.*s]: %d bytes",
          (int)n, s, w);
    sp_buf_free(&want);
  }
  free(o);
}
#define UTF8_OK(lit) put_utf8_is(lit, sizeof(lit) - 1, 1)
#define UTF8_BAD(lit) put_utf8_is(lit, sizeof(lit) - 1, 0)

static void test_put_pieces(void) {
  UTF8_OK("");
  UTF8_OK("plain words");
  UTF8_OK("say \"x\" \\ and \n\t\r\b\f\x01\x1f\x7f");
  UTF8_OK("\x01\x01\x01");   /* the worst case: six bytes each */
  UTF8_OK("caf\xc3\xa9 \xf0\x9f\x98\x80 \xe2\x80\xa8");
  UTF8_OK("a\0b");
  UTF8_BAD("\xff");
  UTF8_BAD("cut \xc3");
  UTF8_BAD("\xed\xa0\x80");   /* a surrogate */
  UTF8_BAD("\xc0\x80");       /* overlong */
  char big[1] = {0};
  CHECK(sp_json_put_utf8(big, "x", (size_t)SP_JSON_PUT_MAX + 1) == -1, "a string over SP_JSON_PUT_MAX is refused");
  static const double nums[] = { 0, -0.0, 1, -1, 7, 2147483648.0, 9007199254740992.0, 1e15, 1e16, 0.1, -2.5,
                                 1.0 / 3, 1e300, 5e-324, 1e-7, 123456.789 };
  for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
    char o[40];
    int w = sp_json_put_finite(o, nums[i]);
    sp_buf want = {0};
    CHECK(sp_json_write_number(&want, nums[i]) == 0, "write_number");
    CHECK(w > 0 && (size_t)w == want.len && memcmp(o, want.data, want.len) == 0, "put_finite of %.17g", nums[i]);
    sp_buf_free(&want);
  }
  char o[40];
  CHECK(sp_json_put_finite(o, NAN) == -1 && sp_json_put_finite(o, INFINITY) == -1 &&
        sp_json_put_finite(o, -INFINITY) == -1, "put_finite refuses what is not finite");
}

int main(void) {
  test_put_pieces();
  test_line_idq();
  test_parse_errors();
  test_surrogates_utf8();
  test_depth();
  test_accessors();
  test_canonical();
  test_regressions();
  test_numbers();
  test_rounded();
  test_put_uint();
  if (failures) {
    fprintf(stderr, "test_json: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_json: all passed\n");
  return 0;
}
