/* Tests for the SSE parser (engine/sp_sse.c). Exits non-zero on any failure. */
#include "sp_buf.h"
#include "sp_sse.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* Renders every pending event as "event|data|id|retry\n", with bytes outside
 * printable ASCII (and | \) escaped, so whole streams compare as one string. */
static void drain(sp_sse *p, sp_buf *out) {
  sp_sse_event ev;
  while (sp_sse_next(p, &ev)) {
    const char *parts[3] = {ev.event, ev.data, ev.id};
    size_t lens[3] = {ev.event_len, ev.data_len, ev.id_len};
    for (int k = 0; k < 3; k++) {
      CHECK(parts[k][lens[k]] == '\0', "field %d not NUL-terminated", k);
      for (size_t i = 0; i < lens[k]; i++) {
        unsigned char c = (unsigned char)parts[k][i];
        if (c < 0x20 || c >= 0x7f || c == '|' || c == '\\')
          sp_buf_printf(out, "\\x%02x", c);
        else
          sp_buf_putc(out, (char)c);
      }
      sp_buf_putc(out, '|');
    }
    sp_buf_printf(out, "%ld\n", ev.retry);
  }
}

/* Feeds the chunks (NULL-terminated array of NUL-terminated strings), drains
 * after each, finishes; returns the rendered events. *dropped gets finish(). */
static char *run_chunks(const char *const *chunks, int *dropped) {
  sp_sse *p = sp_sse_new(0);
  sp_buf out;
  sp_buf_init(&out);
  sp_buf_puts(&out, "");
  for (int i = 0; chunks[i]; i++) {
    int rc = sp_sse_feed(p, chunks[i], strlen(chunks[i]));
    CHECK(rc == 0, "feed failed: %s", sp_sse_error(p));
    drain(p, &out);
  }
  int d = sp_sse_finish(p);
  if (dropped) *dropped = d;
  drain(p, &out);
  sp_sse_free(p);
  return out.data;
}

static void expect(const char *name, const char *const *chunks, const char *want, int want_dropped) {
  int dropped = -1;
  char *got = run_chunks(chunks, &dropped);
  CHECK(strcmp(got, want) == 0, "%s:\n got: [%s]\nwant: [%s]", name, got, want);
  CHECK(dropped == want_dropped, "%s: finish returned %d, want %d", name, dropped, want_dropped);
  free(got);
}

#define CHUNKS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_fields(void) {
  expect("simple", CHUNKS("data: hello\n\n"), "message|hello||-1\n", 0);
  expect("event type", CHUNKS("event: delta\ndata: x\n\n"), "delta|x||-1\n", 0);
  expect("type resets", CHUNKS("event: a\ndata: 1\n\ndata: 2\n\n"), "a|1||-1\nmessage|2||-1\n", 0);
  expect("empty event field", CHUNKS("event:\ndata: 1\n\n"), "message|1||-1\n", 0);
  expect("no space", CHUNKS("data:x\n\n"), "message|x||-1\n", 0);
  expect("one space stripped", CHUNKS("data:  x \n\n"), "message| x ||-1\n", 0);
  expect("multi-line data", CHUNKS("data: a\ndata:\ndata: b\n\n"), "message|a\\x0a\\x0ab||-1\n", 0);
  expect("empty data dispatches", CHUNKS("data\n\n"), "message|||-1\n", 0);
  expect("data: only", CHUNKS("data:\n\n"), "message|||-1\n", 0);
  expect("colon in value", CHUNKS("data: a:b: c\n\n"), "message|a:b: c||-1\n", 0);
  expect("comment", CHUNKS(": keep-alive\n\n:x\ndata: 1\n:y\n\n"), "message|1||-1\n", 0);
  expect("unknown field", CHUNKS("foo: bar\nDATA: no\ndata: yes\nevent2: z\n\n"), "message|yes||-1\n", 0);
  expect("no data no dispatch", CHUNKS("event: a\n\ndata: b\n\n"), "message|b||-1\n", 0);
  expect("blank lines only", CHUNKS("\n\n\r\n\r\r"), "", 0);
  expect("id", CHUNKS("id: 7\ndata: a\n\n"), "message|a|7|-1\n", 0);
  expect("id persists", CHUNKS("id: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\n"),
         "message|a|7|-1\nmessage|b|7|-1\nmessage|c||-1\n", 0);
  expect("id set without dispatch", CHUNKS("id: 9\n\ndata: a\n\n"), "message|a|9|-1\n", 0);
  expect("retry", CHUNKS("retry: 1500\ndata: a\n\nretry: 15x\ndata: b\n\nretry:\ndata: c\n\n"),
         "message|a||1500\nmessage|b||1500\nmessage|c||1500\n", 0);
  expect("retry negative ignored", CHUNKS("retry: -5\nretry:  5\ndata: a\n\n"), "message|a||-1\n", 0);
  expect("retry overflow ignored", CHUNKS("retry: 99999999999999999999999\ndata: a\n\n"), "message|a||-1\n", 0);
  expect("several events one chunk", CHUNKS("data: 1\n\ndata: 2\n\nevent: e\ndata: 3\n\n"),
         "message|1||-1\nmessage|2||-1\ne|3||-1\n", 0);
  expect("incomplete event", CHUNKS("data: 1\n\ndata: 2\n"), "message|1||-1\n", 1);
  expect("unterminated data line", CHUNKS("data: 1"), "", 1);
  expect("unterminated other line", CHUNKS("event: 1"), "", 0);
  expect("trailing comment", CHUNKS("data: 1\n\n: bye"), "message|1||-1\n", 0);
}

static void test_line_ends(void) {
  expect("CR", CHUNKS("data: a\rdata: b\r\r"), "message|a\\x0ab||-1\n", 0);
  expect("CRLF", CHUNKS("data: a\r\ndata: b\r\n\r\n"), "message|a\\x0ab||-1\n", 0);
  expect("mixed", CHUNKS("data: a\ndata: b\rdata: c\r\n\n"), "message|a\\x0ab\\x0ac||-1\n", 0);
  expect("LF CR is two ends", CHUNKS("data: a\n\rdata: b\n\n"), "message|a||-1\nmessage|b||-1\n", 0);
  expect("CR | LF split", CHUNKS("data: a\r", "\ndata: b\r", "\n\r", "\n"), "message|a\\x0ab||-1\n", 0);
  /* the CR ended the line: an LF that is not next must not be swallowed */
  expect("CR | text", CHUNKS("data: a\r", "data: b\r", "\r"), "message|a\\x0ab||-1\n", 0);
  expect("CR | empty | LF", CHUNKS("data: a\r", "", "\n", "\n"), "message|a||-1\n", 0);
  expect("CR CR split", CHUNKS("data: a\r", "\r"), "message|a||-1\n", 0);
  expect("split mid field", CHUNKS("da", "ta: he", "llo\n", "\n"), "message|hello||-1\n", 0);
}

static void test_bom(void) {
  expect("BOM", CHUNKS("\xEF\xBB\xBF" "data: a\n\n"), "message|a||-1\n", 0);
  expect("BOM split", CHUNKS("\xEF", "\xBB", "\xBF" "data: a\n\n"), "message|a||-1\n", 0);
  expect("BOM only at start", CHUNKS("\xEF\xBB\xBF" "data: a\n\n\xEF\xBB\xBF" "data: b\n\n"), "message|a||-1\n", 0);
  /* a second BOM makes the field name "\xEF\xBB\xBFdata", which is unknown */
  expect("double BOM", CHUNKS("\xEF\xBB\xBF\xEF\xBB\xBF" "data: a\n\n"), "", 0);
  expect("BOM prefix is text", CHUNKS("\xEF\xBB", "x\ndata: a\n\n"), "message|a||-1\n", 0);
  expect("BOM prefix in data", CHUNKS("data: \xEF\xBB\n\n"), "message|\\xef\\xbb||-1\n", 0);
  /* a partial BOM prefix that turns out to be a data line: the bytes are kept */
  expect("partial BOM then text", CHUNKS("\xEF", "data: a\n\n"), "", 0);
}

static void test_nul(void) {
  static const char s[] = "id: a\0b\ndata: x\0y\n\nid: ok\ndata: z\n\n";
  sp_sse *p = sp_sse_new(0);
  sp_buf out;
  sp_buf_init(&out);
  sp_buf_puts(&out, "");
  CHECK(sp_sse_feed(p, s, sizeof s - 1) == 0, "feed with NUL");
  drain(p, &out);
  CHECK(strcmp(out.data, "message|x\\x00y||-1\nmessage|z|ok|-1\n") == 0, "NUL in id/data: [%s]", out.data);
  sp_buf_free(&out);
  sp_sse_free(p);
}

/* A realistic stream exercising every rule, fed split at every offset. */
static const char sample[] =
    "\xEF\xBB\xBF: OPENROUTER PROCESSING\r\n\r\n"
    "retry: 3000\n"
    "id: 1\n"
    "event: message_start\n"
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\"}}\n\n"
    "event: content_block_delta\r"
    "data: {\"type\":\"content_block_delta\",\r"
    "data:  \"delta\":{\"text\":\"h\xC3\xA9llo\"}}\r\r"
    "id: 2\r\n"
    "data: line1\r\n"
    "data\r\n"
    "data: line3\r\n"
    "\r\n"
    ": ping\n"
    "event: ignored-without-data\n\n"
    "data: [DONE]\n\n"
    "data: tail";

static const char sample_want[] =
    "message_start|{\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\"}}|1|3000\n"
    "content_block_delta|{\"type\":\"content_block_delta\",\\x0a \"delta\":{\"text\":\"h\\xc3\\xa9llo\"}}|1|3000\n"
    "message|line1\\x0a\\x0aline3|2|3000\n"
    "message|[DONE]|2|3000\n";

static char *run_split(const char *s, size_t n, const size_t *cuts, int ncuts, int *dropped) {
  sp_sse *p = sp_sse_new(0);
  sp_buf out;
  sp_buf_init(&out);
  sp_buf_puts(&out, "");
  size_t at = 0;
  for (int k = 0; k <= ncuts; k++) {
    size_t end = k < ncuts ? cuts[k] : n;
    CHECK(sp_sse_feed(p, s + at, end - at) == 0, "split feed: %s", sp_sse_error(p));
    /* draining only sometimes exercises queued events across feeds */
    if (k % 2 == 0) drain(p, &out);
    at = end;
  }
  *dropped = sp_sse_finish(p);
  drain(p, &out);
  sp_sse_free(p);
  return out.data;
}

static void test_splits(void) {
  size_t n = sizeof sample - 1;
  int dropped;
  char *whole = run_split(sample, n, NULL, 0, &dropped);
  CHECK(strcmp(whole, sample_want) == 0, "sample whole:\n got: [%s]\nwant: [%s]", whole, sample_want);
  CHECK(dropped == 1, "sample: trailing data not reported");
  int bad = 0;
  for (size_t i = 0; i <= n; i++) {
    size_t cut[1] = {i};
    char *got = run_split(sample, n, cut, 1, &dropped);
    if (strcmp(got, whole) != 0 || dropped != 1) {
      if (bad++ < 3) CHECK(0, "split at %zu:\n got: [%s]", i, got);
    }
    free(got);
  }
  for (size_t i = 0; i <= n; i += 3) {
    for (size_t j = i; j <= n; j++) {
      size_t cut[2] = {i, j};
      char *got = run_split(sample, n, cut, 2, &dropped);
      if (strcmp(got, whole) != 0 || dropped != 1) {
        if (bad++ < 3) CHECK(0, "split at %zu,%zu:\n got: [%s]", i, j, got);
      }
      free(got);
    }
  }
  size_t *cuts = malloc(n * sizeof *cuts);
  for (size_t i = 0; i < n; i++) cuts[i] = i + 1;
  char *bytes = run_split(sample, n, cuts, (int)n - 1, &dropped);
  CHECK(strcmp(bytes, whole) == 0 && dropped == 1, "byte by byte:\n got: [%s]", bytes);
  free(bytes);
  free(cuts);
  free(whole);
  CHECK(bad == 0, "%d split runs differed", bad);
}

static void test_limits(void) {
  /* data accumulated over lines */
  sp_sse *p = sp_sse_new(12);
  CHECK(sp_sse_feed(p, "data: 123456\ndata: 12345\n\n", 26) == 0, "12 bytes of data fit: %s", sp_sse_error(p));
  sp_sse_event ev;
  CHECK(sp_sse_next(p, &ev) == 1 && ev.data_len == 12, "12-byte event");
  CHECK(strcmp(sp_sse_error(p), "") == 0, "no error yet");
  CHECK(sp_sse_feed(p, "data: 123456\ndata: 123456\n\n", 28) == -1, "13 bytes of data rejected");
  CHECK(strcmp(sp_sse_error(p), "SSE event exceeds 12 bytes") == 0, "message: %s", sp_sse_error(p));
  CHECK(sp_sse_feed(p, "data: 1\n\n", 9) == -1, "error is sticky");
  CHECK(sp_sse_next(p, &ev) == 0, "nothing queued after error");
  sp_sse_free(p);

  /* a single line, complete or cut across chunks */
  p = sp_sse_new(10);
  CHECK(sp_sse_feed(p, ":2345678901\n", 12) == -1, "long comment line rejected");
  sp_sse_free(p);
  p = sp_sse_new(10);
  CHECK(sp_sse_feed(p, "data: 1\n\n:23456", 15) == 0, "partial line fits");
  CHECK(sp_sse_feed(p, "78901", 5) == -1, "partial line grows past limit");
  CHECK(sp_sse_next(p, &ev) == 1 && ev.data_len == 1, "event before the error is kept");
  sp_sse_free(p);

  /* default limit is 16 MiB */
  p = sp_sse_new(0);
  size_t big = (size_t)16 << 20;
  char *buf = malloc(big + 2);
  memset(buf, 'x', big + 2);
  memcpy(buf, "data:", 5);
  CHECK(sp_sse_feed(p, buf, big) == 0, "16 MiB line fits");
  CHECK(sp_sse_feed(p, buf, 1) == -1, "16 MiB + 1 rejected");
  CHECK(strcmp(sp_sse_error(p), "SSE event exceeds 16777216 bytes") == 0, "message: %s", sp_sse_error(p));
  free(buf);
  sp_sse_free(p);
}

static void test_reuse(void) {
  sp_sse *p = sp_sse_new(0);
  sp_sse_event ev;
  CHECK(sp_sse_feed(p, "id: 5\nretry: 10\ndata: a\n\ndata: b", 32) == 0, "feed");
  CHECK(sp_sse_finish(p) == 1, "finish drops b");
  CHECK(sp_sse_next(p, &ev) == 1 && ev.data_len == 1 && ev.data[0] == 'a', "queued event survives finish");
  CHECK(sp_sse_next(p, &ev) == 0, "only one event");
  CHECK(sp_sse_finish(p) == 0, "finish on empty state");
  /* a new stream after finish: BOM allowed again, id and retry persist */
  CHECK(sp_sse_feed(p, "\xEF\xBB\xBF" "data: c\n\n", 12) == 0, "second stream");
  CHECK(sp_sse_next(p, &ev) == 1 && ev.data[0] == 'c' && strcmp(ev.id, "5") == 0 && ev.retry == 10,
        "id/retry persist across streams");
  CHECK(sp_sse_feed(p, NULL, 0) == 0, "empty feed");
  sp_sse_free(p);
  sp_sse_free(NULL);
}

int main(void) {
  test_fields();
  test_line_ends();
  test_bom();
  test_nul();
  test_splits();
  test_limits();
  test_reuse();
  if (failures) {
    fprintf(stderr, "test_sse: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_sse: all passed\n");
  return 0;
}
