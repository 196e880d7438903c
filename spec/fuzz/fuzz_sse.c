/* libFuzzer target for the SSE parser. The first byte picks a split point and
 * a size limit; the rest is the stream. Feeding it in two parts must give the
 * same events, finish() result and error state as feeding it whole. */
#include "sp_buf.h"
#include "sp_sse.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Runs the stream through a fresh parser, rendering events into out. */
static void run(const char *s, size_t n, size_t cut, size_t max, sp_buf *out) {
  sp_sse *p = sp_sse_new(max);
  if (!p) abort();
  sp_sse_event ev;
  int rc = sp_sse_feed(p, s, cut);
  while (sp_sse_next(p, &ev)) {
    sp_buf_append(out, ev.event, ev.event_len + 1);
    sp_buf_append(out, ev.data, ev.data_len + 1);
    sp_buf_append(out, ev.id, ev.id_len + 1);
    sp_buf_printf(out, "%ld;", ev.retry);
  }
  if (rc == 0) rc = sp_sse_feed(p, s + cut, n - cut);
  int fin = sp_sse_finish(p);
  while (sp_sse_next(p, &ev)) {
    sp_buf_append(out, ev.event, ev.event_len + 1);
    sp_buf_append(out, ev.data, ev.data_len + 1);
    sp_buf_append(out, ev.id, ev.id_len + 1);
    sp_buf_printf(out, "%ld;", ev.retry);
  }
  sp_buf_printf(out, "rc=%d fin=%d err=%s", rc, fin, sp_sse_error(p));
  sp_sse_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  unsigned char ctl = data[0];
  const char *s = (const char *)data + 1;
  size_t n = size - 1;
  size_t cut = n ? (size_t)ctl * n / 255 : 0;
  size_t max = ctl & 1 ? 0 : 16 + (ctl >> 2);  /* sometimes a tiny limit */
  sp_buf whole, split;
  sp_buf_init(&whole);
  sp_buf_init(&split);
  run(s, n, n, max, &whole);
  run(s, n, cut, max, &split);
  if (whole.len != split.len || memcmp(whole.data, split.data, whole.len) != 0) abort();
  sp_buf_free(&whole);
  sp_buf_free(&split);
  return 0;
}
