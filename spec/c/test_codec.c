/* Tests for the engine's codecs taken from libraries: hex and Base64
 * (engine/sp_crypto.c, libcrypto), percent-encoding and URL parsing
 * (engine/sp_url.c, libcurl), and the one 64-bit mixer (sp_rand.h).
 * Exits non-zero on any failure. */
#include "sp_api.h"
#include "sp_crypto.h"
#include "sp_rand.h"
#include "sp_url.h"
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

static void hex_enc(const char *in, size_t n, const char *want) {
  char out[256], err[128] = "";
  int r = sp_crypto_hex_encode(in, n, out, sizeof out, err, sizeof err);
  CHECK(r == (int)strlen(want) && strcmp(out, want) == 0, "hex of %zu bytes: got %d [%s] (%s), want [%s]", n, r,
        r >= 0 ? out : "", err, want);
}

static void hex_bad(const char *in, const char *want_err) {
  unsigned char out[64];
  char err[128] = "";
  int r = sp_crypto_hex_decode(in, strlen(in), out, sizeof out, err, sizeof err);
  CHECK(r == -1 && strstr(err, want_err) != NULL, "unhex [%s]: got %d \"%s\", want -1 \"%s\"", in, r, err,
        want_err);
}

static void test_hex(void) {
  unsigned char out[64];
  char err[128] = "";
  hex_enc("", 0, "");
  hex_enc("\x00\xff\x10\xab", 4, "00ff10ab");
  int r = sp_crypto_hex_decode("00FF10ab", 8, out, sizeof out, err, sizeof err);
  CHECK(r == 4 && memcmp(out, "\x00\xff\x10\xab", 4) == 0, "unhex 00FF10ab: %d %s", r, err);
  r = sp_crypto_hex_decode("", 0, out, sizeof out, err, sizeof err);
  CHECK(r == 0, "unhex of nothing: %d %s", r, err);
  hex_bad("abc", "odd number");
  hex_bad("0g", "not a hex digit at byte 1");
  r = sp_crypto_hex_decode("00\0" "0", 4, out, sizeof out, err, sizeof err);
  CHECK(r == -1 && strstr(err, "at byte 2"), "unhex with a NUL: %d %s", r, err);
  char small[4];
  r = sp_crypto_hex_encode("ab", 2, small, sizeof small, err, sizeof err);
  CHECK(r == -1 && strstr(err, "too small"), "hex into a small buffer: %d %s", r, err);
}

static void b64_enc(const char *in, int url, const char *want) {
  char out[128], err[128] = "";
  int r = sp_crypto_b64_encode(in, strlen(in), url, out, sizeof out, err, sizeof err);
  CHECK(r == (int)strlen(want) && strcmp(out, want) == 0, "b64%s [%s]: got %d [%s] (%s), want [%s]",
        url ? "url" : "", in, r, r >= 0 ? out : "", err, want);
}

static void b64_dec(const char *in, const char *want, size_t wantlen) {
  unsigned char out[128];
  char err[128] = "";
  int r = sp_crypto_b64_decode(in, strlen(in), out, sizeof out, err, sizeof err);
  CHECK(r == (int)wantlen && memcmp(out, want, wantlen) == 0, "unb64 [%s]: got %d (%s), want %zu bytes", in, r,
        err, wantlen);
}

static void b64_bad(const char *in) {
  unsigned char out[128];
  char err[128] = "";
  int r = sp_crypto_b64_decode(in, strlen(in), out, sizeof out, err, sizeof err);
  CHECK(r == -1 && strncmp(err, "base64: ", 8) == 0, "unb64 [%s]: got %d \"%s\", want an error", in, r, err);
}

static void test_b64(void) {
  /* RFC 4648 §10 */
  static const char *v[][2] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},    {"foo", "Zm9v"},
                               {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    char nopad[16];
    size_t n = 0;
    for (const char *p = v[i][1]; *p; p++)
      if (*p != '=') nopad[n++] = *p;
    nopad[n] = 0;
    b64_enc(v[i][0], 0, v[i][1]);
    b64_enc(v[i][0], 1, nopad);
    b64_dec(v[i][1], v[i][0], strlen(v[i][0]));
    b64_dec(nopad, v[i][0], strlen(v[i][0]));
  }
  b64_enc("\xfb\xff", 0, "+/8=");
  b64_enc("\xfb\xff", 1, "-_8");
  b64_dec("-_8", "\xfb\xff", 2);
  b64_dec("+/8", "\xfb\xff", 2);
  b64_dec("AAAA", "\0\0\0", 3);
  b64_dec("Zg=====", "f", 1);
  b64_bad("Z");
  b64_bad("Zm9vY");
  b64_bad("a$bc");
  b64_bad("Zg=g");
  b64_bad("Zm 9v");
}

static void esc(const char *in, const char *keep, const char *want) {
  char out[256], err[128] = "";
  int r = sp_url_escape(in, strlen(in), keep, out, sizeof out, err, sizeof err);
  CHECK(r == (int)strlen(want) && strcmp(out, want) == 0, "escape [%s] keep [%s]: got %d [%s] (%s), want [%s]",
        in, keep ? keep : "", r, r >= 0 ? out : "", err, want);
}

static void unesc(const char *in, int form, const char *want, size_t wantlen) {
  char out[256], err[128] = "";
  int r = sp_url_unescape(in, strlen(in), form, out, sizeof out, err, sizeof err);
  CHECK(r == (int)wantlen && memcmp(out, want, wantlen) == 0, "unescape%s [%s]: got %d (%s)",
        form ? " (form)" : "", in, r, err);
}

static void test_escape(void) {
  esc("", NULL, "");
  esc("AZaz09-._~", NULL, "AZaz09-._~");
  esc("a b/c?%+", NULL, "a%20b%2Fc%3F%25%2B");
  esc("a b/c?%+", "", "a%20b%2Fc%3F%25%2B");
  esc("/tmp/a b/", "/", "/tmp/a%20b/");
  esc("//", "/", "//");
  esc("q=a b&c", "=&", "q=a%20b&c");
  char out[8], err[128] = "";
  char in[2] = {0, (char)0xff};
  int r = sp_url_escape(in, 2, NULL, out, sizeof out, err, sizeof err);
  CHECK(r == 6 && strcmp(out, "%00%FF") == 0, "escape of NUL and 0xff: %d %s", r, err);
  r = sp_url_escape("   ", 3, NULL, out, sizeof out, err, sizeof err);
  CHECK(r == -1 && strstr(err, "too small"), "escape into a small buffer: %d %s", r, err);
  unesc("a%20b+c", 0, "a b+c", 5);
  unesc("a+b%2Bc", 1, "a b+c", 5);
  unesc("%00%ff", 0, "\0\xff", 2);
  unesc("100% %z %4", 0, "100% %z %4", 10);
  unesc("", 1, "", 0);
}

static void parse_ok(const char *u, const char *scheme, const char *host, const char *port, const char *path,
                     const char *query) {
  char out[512], err[128] = "";
  long parts[2 * SP_URL_NPARTS];
  const char *want[SP_URL_NPARTS] = {scheme, host, port, path, query};
  int r = sp_url_parse(u, strlen(u), out, sizeof out, parts, err, sizeof err);
  CHECK(r == 0, "parse [%s]: %s", u, err);
  if (r != 0) return;
  for (int i = 0; i < SP_URL_NPARTS; i++) {
    long off = parts[2 * i], len = parts[2 * i + 1];
    if (!want[i])
      CHECK(len == -1, "parse [%s]: part %d present (%.*s)", u, i, (int)(len > 0 ? len : 0), out + off);
    else
      CHECK(len == (long)strlen(want[i]) && memcmp(out + off, want[i], (size_t)len) == 0,
            "parse [%s]: part %d is [%.*s], want [%s]", u, i, (int)(len > 0 ? len : 0), out + off, want[i]);
  }
}

static void parse_bad(const char *u, size_t n) {
  char out[512], err[128] = "";
  long parts[2 * SP_URL_NPARTS];
  int r = sp_url_parse(u, n, out, sizeof out, parts, err, sizeof err);
  CHECK(r == -1 && strncmp(err, "url: ", 5) == 0, "parse [%.*s]: got %d \"%s\", want an error", (int)n, u, r, err);
}

static void test_parse(void) {
  parse_ok("https://u:p@Example.com:8443/a/../b?x=1#f", "https", "Example.com", "8443", "/a/../b", "x=1");
  parse_ok("http://h", "http", "h", NULL, "/", NULL);
  parse_ok("custom://h/p", "custom", "h", NULL, "/p", NULL);
  parse_bad("/relative", 9);
  parse_bad("", 0);
  parse_bad("http://h:99999/", 15);
  parse_bad("http://h\0/", 10);
}

static void test_mixer(void) {
  /* splitmix64 from state 0: the published first outputs */
  uint64_t s = 0;
  CHECK(sp_rand_next(&s) == 0xe220a8397b1dcdafULL, "splitmix64 #1");
  CHECK(sp_rand_next(&s) == 0x6e789e6aa1b965f4ULL, "splitmix64 #2");
  CHECK(sp_rand_next(&s) == 0x06c45d188009454fULL, "splitmix64 #3");
  CHECK(sp_rand_mix64(0) == 0, "the mixer fixes 0");
  /* keyed draws depend on the key only, and lie in [0, 1) */
  double a = sp_rand_keyed(7, "q1", 2, 3, "tool", 1), b = sp_rand_keyed(7, "q1", 2, 3, "tool", 1);
  CHECK(a == b && a >= 0 && a < 1, "keyed draw not repeatable: %g %g", a, b);
  CHECK(sp_rand_keyed(7, "q1", 2, 3, "tool", 2) != a, "keyed draw ignores its branch");
}

int main(void) {
  test_hex();
  test_b64();
  test_escape();
  test_parse();
  test_mixer();
  if (failures) {
    fprintf(stderr, "test_codec: %d failure(s) of %d checks\n", failures, checks);
    return 1;
  }
  printf("test_codec: all %d checks passed\n", checks);
  return 0;
}
