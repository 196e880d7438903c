/* sp_sse: incremental Server-Sent Events parser (WHATWG "event stream" rules).
 * Feed it arbitrary chunks of the response body; it queues complete events.
 * Plain types only, so the struct can be ffi.cdef()'d by LuaJIT as is. */
#ifndef SP_SSE_H
#define SP_SSE_H
#include <stddef.h>

typedef struct sp_sse sp_sse;  /* opaque parser state */

#ifndef SP_SSE_EVENT_DEFINED
#define SP_SSE_EVENT_DEFINED
typedef struct sp_sse_event {
  const char *event;  /* event type, "message" when none given (NUL-terminated) */
  size_t event_len;   /* bytes in event */
  const char *data;   /* data lines joined with "\n", final "\n" removed (NUL-terminated, may hold NULs) */
  size_t data_len;    /* bytes in data */
  const char *id;     /* last event id in effect at dispatch, "" if none (NUL-terminated) */
  size_t id_len;      /* bytes in id */
  long retry;         /* last valid retry value seen, -1 if none */
} sp_sse_event;
#endif

/* max_event_bytes bounds a single line and an event's accumulated data;
 * 0 means the default of 16 MiB. NULL on out of memory. */
sp_sse *sp_sse_new(size_t max_event_bytes);
void sp_sse_free(sp_sse *p);
/* 0 ok; -1 error (see sp_sse_error). After an error every feed fails. */
int sp_sse_feed(sp_sse *p, const char *buf, size_t len);
/* 1 = an event was written to *ev (pointers valid until the next
 * next/feed/finish/free call), 0 = none pending. Events come in stream order. */
int sp_sse_next(sp_sse *p, sp_sse_event *ev);
/* End of stream: drops any unterminated line and undispatched event; returns 1
 * if that discarded event data, else 0. Queued events stay drainable, the last
 * event id and retry persist, and the parser accepts a new stream (a BOM again). */
int sp_sse_finish(sp_sse *p);
/* Message of the last error, "" if none. */
const char *sp_sse_error(const sp_sse *p);

#endif
