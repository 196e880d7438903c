/* sp_json: a strict JSON (RFC 8259) DOM parser and a canonical encoder.
 *
 * Parsing: the whole input must be exactly one value plus optional whitespace
 * (space, tab, LF, CR). No trailing commas, comments, NaN/Infinity, leading
 * zeros or raw control characters in strings. Nesting deeper than 256
 * arrays/objects is an error. Strings are decoded (\u escapes with surrogate pairs
 * become UTF-8; a lone surrogate is an error) and must be valid UTF-8 (no
 * overlong forms, no surrogates, nothing above U+10FFFF). Numbers that
 * overflow a double are an error; ones that underflow become 0. Error
 * messages read "JSON: <what> at byte <N>", N counting from 0.
 * (Numbers are read and printed with strtod/snprintf: the C numeric locale.)
 *
 * Canonical form (the key of a (tool, args) pair, so it must never change):
 *  - no whitespace at all;
 *  - object members sorted by bytewise comparison of their UTF-8 keys (a key
 *    that is a prefix of another sorts first); when a key occurs more than
 *    once, only its last occurrence is kept;
 *  - array elements keep their order;
 *  - a number that is integral with |v| < 2^53 prints as a plain integer
 *    (no exponent, no ".0"; -0 prints as 0); any other number prints as the
 *    shortest of printf's %.15g, %.16g, %.17g that reads back (strtod) as the
 *    same double, e.g. 0.1, 1e-07, 1e+21, 1.2345678901234568e+17;
 *  - strings print with '"' and '\' backslash-escaped, control characters
 *    below 0x20 as \b \f \n \r \t where those exist and \u00XX (lowercase hex)
 *    otherwise; everything else, including '/', DEL and all non-ASCII UTF-8,
 *    is written raw;
 *  - true, false and null as literals.
 * lua/specula/json.lua's canonical() produces the same bytes. */
#ifndef SP_JSON_H
#define SP_JSON_H
#include <stddef.h>
#include "sp_buf.h"

typedef enum sp_json_type {
  SP_JSON_NULL, SP_JSON_FALSE, SP_JSON_TRUE, SP_JSON_NUMBER,
  SP_JSON_STRING, SP_JSON_ARRAY, SP_JSON_OBJECT
} sp_json_type;

typedef struct sp_json sp_json;  /* a parsed value; the tree lives in one arena */

/* NULL on error with a message in err (when errlen > 0). */
sp_json *sp_json_parse(const char *text, size_t len, char *err, size_t errlen);
/* Frees a whole tree; pass only a root returned by sp_json_parse (or NULL). */
void sp_json_free(sp_json *v);
sp_json_type sp_json_typeof(const sp_json *v);
double sp_json_number(const sp_json *v);                    /* 0 if not a number */
/* Decoded UTF-8, NUL-terminated (it may also contain NULs); NULL if not a string. */
const char *sp_json_string(const sp_json *v, size_t *len);
size_t sp_json_len(const sp_json *v);                       /* array/object length, else 0 */
/* Array element i, or object member value i (source order); NULL if out of range. */
const sp_json *sp_json_at(const sp_json *v, size_t i);
const char *sp_json_key_at(const sp_json *v, size_t i, size_t *len); /* object key i */
/* Object lookup by NUL-terminated key; the last occurrence wins; NULL if absent. */
const sp_json *sp_json_get(const sp_json *v, const char *key);
/* Appends the canonical form above of text to out. 0 ok; -1 error (message
   in err, out left as it was). The definition of canonical JSON the
   encoders are checked against (spec/c/test_json.c, the fuzzers, and
   spec/unit/json_spec.lua through the FFI); no run path calls it. */
int sp_json_canonical(const char *text, size_t len, sp_buf *out, char *err, size_t errlen);

/* The pieces of the canonical form, for other encoders (sp_jsonenc.c):
 * a number as described above, and a string literal with its quotes (the
 * bytes are not checked: see sp_json_utf8_seq). 0 ok, -1 out of memory. */
int sp_json_write_number(sp_buf *out, double d);
int sp_json_write_string(sp_buf *out, const char *s, size_t n);
/* x rounded to d decimals (0 <= d <= 6) the way lua/specula/run/aggregate.lua
 * rounds a record's figures, floor(x * 10^d + 0.5) / 10^d, written as
 * sp_json_write_number writes that double, byte for byte, but from the
 * integer floor(x * 10^d + 0.5) without a search for the shortest decimal
 * (the record's stage times: five a hop). -1 when the rounded value is not
 * finite, or out of memory. */
int sp_json_write_rounded(sp_buf *out, double x, int d);
/* The same text written at o (room for SP_JSON_ROUNDED_MAX bytes, no NUL
 * added), returning its end; NULL, nothing written, where
 * sp_json_write_rounded takes its slow path: the rounded value is 10^15 or
 * more, under 1e-4 (exponent notation) or not finite. For writers that
 * reserve room once for many fields. */
#define SP_JSON_ROUNDED_MAX 40
char *sp_json_put_rounded(char *o, double x, int d);
/* sp_json_write_rounded's text, its slow path included, written at o (room
 * for SP_JSON_ROUNDED_MAX bytes, no NUL), returning its end; NULL, nothing
 * written, when the rounded value is not finite or d is out of range. */
char *sp_json_put_rounded_any(char *o, double x, int d);
/* sp_json_write_number's text at o (room for SP_JSON_ROUNDED_MAX bytes, no
 * NUL; d finite), returning its end. */
char *sp_json_put_number(char *o, double d);
/* sp_json_write_string's text at o (room for 6 * n + 2 bytes, no NUL),
 * returning its end. */
char *sp_json_put_string(char *o, const char *s, size_t n);
/* The decimal digits of v written at o (room for 20 bytes), returning the
 * end: what sp_json_write_number writes for an integral v below 2^53. */
char *sp_json_put_uint(char *o, unsigned long long v);
/* Length of the valid UTF-8 sequence at s (avail >= 1 bytes readable), 0 if
 * invalid: rejects overlong forms, surrogates and code points above U+10FFFF. */
size_t sp_json_utf8_seq(const unsigned char *s, size_t avail);

#endif
