/* Incremental SSE parser. Complete lines inside a chunk are parsed in place;
 * only a line cut by a chunk boundary is copied (into p->line). Dispatched
 * events are packed into one queue buffer so draining them costs no malloc. */
#include "sp_sse.h"
#include "sp_buf.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SP_SSE_DEFAULT_MAX ((size_t)16 << 20)

struct sp_sse {
  size_t max;        /* byte limit for one line and for one event's data */
  sp_buf line;       /* unterminated line carried over from earlier chunks */
  sp_buf data;       /* data buffer of the event being built: each value + "\n" */
  sp_buf type;       /* event type buffer of the event being built */
  sp_buf id;         /* last event id; persists across events */
  long retry;        /* last valid retry value, -1 if none */
  sp_buf q;          /* dispatched events, packed as sp_sse_rec + strings */
  size_t qhead;      /* offset in q of the next undrained event */
  int cr_pending;    /* the previous chunk ended in CR: swallow one leading LF */
  int bom_seen;      /* bytes of a UTF-8 BOM matched so far at stream start */
  int started;       /* the stream start (BOM or not) has been decided */
  int failed;        /* sticky error state */
  char err[64];      /* message of the last error */
};

/* Header of a queued event; followed by type, data and id, each + NUL. */
typedef struct sp_sse_rec {
  size_t event_len;  /* bytes of event type */
  size_t data_len;   /* bytes of data */
  size_t id_len;     /* bytes of id */
  long retry;        /* retry value at dispatch */
} sp_sse_rec;

static const unsigned char sp_sse_bom[3] = {0xEF, 0xBB, 0xBF};

sp_sse *sp_sse_new(size_t max_event_bytes) {
  sp_sse *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->max = max_event_bytes ? max_event_bytes : SP_SSE_DEFAULT_MAX;
  sp_buf_init(&p->line);
  sp_buf_init(&p->data);
  sp_buf_init(&p->type);
  sp_buf_init(&p->id);
  sp_buf_init(&p->q);
  p->retry = -1;
  return p;
}

void sp_sse_free(sp_sse *p) {
  if (!p) return;
  sp_buf_free(&p->line);
  sp_buf_free(&p->data);
  sp_buf_free(&p->type);
  sp_buf_free(&p->id);
  sp_buf_free(&p->q);
  free(p);
}

const char *sp_sse_error(const sp_sse *p) { return p->failed ? p->err : ""; }

static int fail_size(sp_sse *p) {
  p->failed = 1;
  snprintf(p->err, sizeof p->err, "SSE event exceeds %zu bytes", p->max);
  return -1;
}

static int fail_oom(sp_sse *p) {
  p->failed = 1;
  snprintf(p->err, sizeof p->err, "SSE: out of memory");
  return -1;
}

/* Blank line: queue the event built so far, if it has any data. */
static int dispatch_event(sp_sse *p) {
  if (p->data.len == 0) {
    sp_buf_reset(&p->type);
    return 0;
  }
  sp_sse_rec r;
  r.data_len = p->data.len - 1;  /* drop the "\n" that ends the last data line */
  r.event_len = p->type.len ? p->type.len : 7;
  r.id_len = p->id.len;
  r.retry = p->retry;
  const char *type = p->type.len ? p->type.data : "message";
  size_t need = sizeof r + r.event_len + r.data_len + r.id_len + 3;
  if (sp_buf_reserve(&p->q, need) != 0) return fail_oom(p);
  /* reserve succeeded, so these appends cannot fail */
  sp_buf_append(&p->q, &r, sizeof r);
  sp_buf_append(&p->q, type, r.event_len + 1);
  sp_buf_append(&p->q, p->data.data, r.data_len);
  sp_buf_putc(&p->q, '\0');
  sp_buf_append(&p->q, p->id.len ? p->id.data : "", r.id_len + 1);
  sp_buf_reset(&p->data);
  sp_buf_reset(&p->type);
  return 0;
}

/* retry is honoured only when the value is all ASCII digits and fits a long. */
static void set_retry(sp_sse *p, const char *v, size_t n) {
  if (n == 0) return;
  long r = 0;
  for (size_t i = 0; i < n; i++) {
    if (v[i] < '0' || v[i] > '9') return;
    int d = v[i] - '0';
    if (r > (LONG_MAX - d) / 10) return;
    r = r * 10 + d;
  }
  p->retry = r;
}

/* One complete line, without its terminator. */
static int take_line(sp_sse *p, const char *s, size_t n) {
  if (n == 0) return dispatch_event(p);
  if (s[0] == ':') return 0;
  const char *colon = memchr(s, ':', n);
  size_t flen = colon ? (size_t)(colon - s) : n;
  const char *v = colon ? colon + 1 : s + n;
  size_t vlen = colon ? n - flen - 1 : 0;
  if (vlen && *v == ' ') { v++; vlen--; }
  if (flen == 4 && memcmp(s, "data", 4) == 0) {
    if (p->data.len + vlen > p->max) return fail_size(p);
    if (sp_buf_reserve(&p->data, vlen + 1) != 0) return fail_oom(p);
    sp_buf_append(&p->data, v, vlen);
    sp_buf_putc(&p->data, '\n');
  } else if (flen == 5 && memcmp(s, "event", 5) == 0) {
    sp_buf_reset(&p->type);
    if (sp_buf_append(&p->type, v, vlen) != 0) return fail_oom(p);
  } else if (flen == 2 && memcmp(s, "id", 2) == 0) {
    if (memchr(v, '\0', vlen)) return 0;  /* WHATWG: ids with NUL are ignored */
    sp_buf_reset(&p->id);
    if (sp_buf_append(&p->id, v, vlen) != 0) return fail_oom(p);
  } else if (flen == 5 && memcmp(s, "retry", 5) == 0) {
    set_retry(p, v, vlen);
  }
  return 0;
}

static size_t find(const char *buf, size_t from, size_t len, char c) {
  const char *hit = memchr(buf + from, c, len - from);
  return hit ? (size_t)(hit - buf) : len;
}

/* Split bytes into lines (CR, LF or CRLF), carrying a partial last line over. */
static int take(sp_sse *p, const char *buf, size_t len) {
  if (len == 0) return 0;  /* also keeps a NULL buf away from memchr */
  size_t i = 0;
  if (p->cr_pending) {
    if (buf[0] == '\n') i = 1;  /* second half of a CRLF cut by the chunking */
    p->cr_pending = 0;
  }
  /* Cached positions of the next CR and LF, so each is searched for once per
   * occurrence rather than once per line (a stream may have only one kind). */
  size_t ncr = find(buf, i, len, '\r');
  size_t nlf = find(buf, i, len, '\n');
  while (i < len) {
    if (ncr < i) ncr = find(buf, i, len, '\r');
    if (nlf < i) nlf = find(buf, i, len, '\n');
    size_t e = ncr < nlf ? ncr : nlf;
    size_t n = e - i;
    if (p->line.len + n > p->max) return fail_size(p);
    if (e == len) {
      if (sp_buf_append(&p->line, buf + i, n) != 0) return fail_oom(p);
      break;
    }
    int rc;
    if (p->line.len) {
      if (sp_buf_append(&p->line, buf + i, n) != 0) return fail_oom(p);
      rc = take_line(p, p->line.data, p->line.len);
      sp_buf_reset(&p->line);
    } else {
      rc = take_line(p, buf + i, n);
    }
    if (rc != 0) return -1;
    if (buf[e] == '\n') {
      i = e + 1;
    } else if (e + 1 < len) {
      i = e + (buf[e + 1] == '\n' ? 2 : 1);
    } else {
      p->cr_pending = 1;
      i = e + 1;
    }
  }
  return 0;
}

int sp_sse_feed(sp_sse *p, const char *buf, size_t len) {
  if (p->failed) return -1;
  if (p->qhead) {  /* drained events are no longer referenced: drop them */
    sp_buf_consume(&p->q, p->qhead);
    p->qhead = 0;
  }
  size_t i = 0;
  if (!p->started) {
    while (i < len && p->bom_seen < 3 && (unsigned char)buf[i] == sp_sse_bom[p->bom_seen]) {
      p->bom_seen++;
      i++;
    }
    if (p->bom_seen == 3) {
      p->started = 1;
    } else if (i < len) {
      /* Not a BOM after all: the bytes matched so far are ordinary text. */
      p->started = 1;
      if (p->bom_seen && take(p, (const char *)sp_sse_bom, (size_t)p->bom_seen) != 0)
        return -1;
    } else {
      return 0;  /* the chunk was a BOM prefix; decide on the next one */
    }
  }
  return take(p, buf + i, len - i);
}

int sp_sse_next(sp_sse *p, sp_sse_event *ev) {
  if (p->qhead >= p->q.len) {
    sp_buf_reset(&p->q);
    p->qhead = 0;
    return 0;
  }
  sp_sse_rec r;
  memcpy(&r, p->q.data + p->qhead, sizeof r);
  const char *s = p->q.data + p->qhead + sizeof r;
  ev->event = s;
  ev->event_len = r.event_len;
  s += r.event_len + 1;
  ev->data = s;
  ev->data_len = r.data_len;
  s += r.data_len + 1;
  ev->id = s;
  ev->id_len = r.id_len;
  ev->retry = r.retry;
  p->qhead += sizeof r + r.event_len + r.data_len + r.id_len + 3;
  return 1;
}

int sp_sse_finish(sp_sse *p) {
  const char *s = p->line.data;
  size_t n = p->line.len;
  int pending_data = n >= 4 && memcmp(s, "data", 4) == 0 && (n == 4 || s[4] == ':');
  int dropped = !p->failed && (p->data.len > 0 || pending_data);
  sp_buf_reset(&p->line);
  sp_buf_reset(&p->data);
  sp_buf_reset(&p->type);
  p->cr_pending = 0;
  p->bom_seen = 0;
  p->started = 0;
  return dropped;
}
