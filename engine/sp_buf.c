#include "sp_buf.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sp_buf_init(sp_buf *b) { b->data = NULL; b->len = 0; b->cap = 0; }

void sp_buf_free(sp_buf *b) {
  free(b->data);
  sp_buf_init(b);
}

void sp_buf_reset(sp_buf *b) {
  b->len = 0;
  if (b->data) b->data[0] = '\0';
}

int sp_buf_reserve(sp_buf *b, size_t extra) {
  if (extra > ((size_t)-1) / 2 - b->len) return -1;
  size_t need = b->len + extra + 1;
  if (need <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < need) cap *= 2;
  char *p = realloc(b->data, cap);
  if (!p) return -1;
  b->data = p;
  b->cap = cap;
  return 0;
}

int sp_buf_append(sp_buf *b, const void *p, size_t n) {
  if (sp_buf_reserve(b, n) != 0) return -1;
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = '\0';
  return 0;
}

int sp_buf_putc(sp_buf *b, char c) { return sp_buf_append(b, &c, 1); }

int sp_buf_puts(sp_buf *b, const char *s) { return sp_buf_append(b, s, strlen(s)); }

int sp_buf_vprintf(sp_buf *b, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  char tmp[256];
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap2);
  va_end(ap2);
  if (n < 0) return -1;
  if ((size_t)n < sizeof tmp) return sp_buf_append(b, tmp, (size_t)n);
  if (sp_buf_reserve(b, (size_t)n) != 0) return -1;
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  b->len += (size_t)n;
  return 0;
}

int sp_buf_printf(sp_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = sp_buf_vprintf(b, fmt, ap);
  va_end(ap);
  return r;
}

void sp_buf_consume(sp_buf *b, size_t n) {
  if (n >= b->len) { sp_buf_reset(b); return; }
  memmove(b->data, b->data + n, b->len - n);
  b->len -= n;
  b->data[b->len] = '\0';
}
