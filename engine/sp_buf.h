/* sp_buf: a growable byte buffer. Owns its memory; sp_buf_free releases it. */
#ifndef SP_BUF_H
#define SP_BUF_H
#include <stddef.h>
#include <stdarg.h>
#include "sp_api.h"   /* struct sp_buf is part of the FFI boundary */

void sp_buf_init(sp_buf *b);
void sp_buf_free(sp_buf *b);
void sp_buf_reset(sp_buf *b);                  /* len = 0, keeps memory */
int sp_buf_reserve(sp_buf *b, size_t extra);   /* 0 ok, -1 out of memory */
int sp_buf_append(sp_buf *b, const void *p, size_t n);
int sp_buf_putc(sp_buf *b, char c);
int sp_buf_puts(sp_buf *b, const char *s);
int sp_buf_printf(sp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int sp_buf_vprintf(sp_buf *b, const char *fmt, va_list ap);
void sp_buf_consume(sp_buf *b, size_t n);      /* drop n bytes from the front */

/* sp_buf_append inlined for the encoders' many small pieces: room left is
   the usual case, a copy without a call; otherwise sp_buf_append grows it. */
#include <string.h>
static inline int sp_buf_add(sp_buf *b, const void *p, size_t n) {
  if (b->cap - b->len > n) {
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
  }
  return sp_buf_append(b, p, n);
}
/* a C string (a literal's length is known where it is inlined) */
static inline int sp_buf_adds(sp_buf *b, const char *s) { return sp_buf_add(b, s, strlen(s)); }

#endif
