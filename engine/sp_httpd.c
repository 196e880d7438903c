#include "sp_httpd.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SP_HTTPD_HEAD (64u << 10)     /* default bound of a request's head */
#define SP_HTTPD_BODY (16u << 20)     /* default bound of a request body */
#define SP_HTTPD_CONNS 256            /* default bound of open connections */
#define SP_HTTPD_OUT (16u << 20)      /* default bound of bytes queued to one client */
#define SP_HTTPD_IDLE 60000           /* default ms a connection may sit between requests */
#define SP_HTTPD_MAXHDRS 128          /* header lines in one request */
#define SP_HTTPD_CHUNKLINE 1024       /* a chunk-size line */
#define SP_HTTPD_LINGER 2000          /* ms a closed connection's unread input is drained */

/* Where the parser of a connection is. */
enum { P_HEAD, P_BODY, P_CHUNK_SIZE, P_CHUNK_DATA, P_CHUNK_CRLF, P_TRAILER };
/* Where a request's response is. */
enum { R_NONE, R_STREAM, R_DONE };

typedef struct conn {
  sp_httpd *srv;             /* its listener (outlives it) */
  uv_tcp_t tcp;              /* the socket */
  int id;                    /* numbered from 1 per listener */
  int refs;                  /* the open handle + requests + writes in flight */
  int closing;               /* close begun (shutdown or uv_close) */
  int eof;                   /* the client's side ended, or an error */
  int paused;                /* reading stopped: too much unparsed while a request is served */
  int lingering;             /* FIN sent: input read and dropped until the client ends */
  uint64_t last;             /* loop time (ms) of its last read or response end */
  sp_buf in;                 /* bytes received, not yet parsed */
  sp_httpd_req *parsing;     /* the request being read */
  int pstate;                /* P_* */
  size_t need;               /* body or chunk bytes still to come */
  size_t trailer;            /* trailer bytes seen (bounded like the head) */
  sp_httpd_req *active;      /* complete, its response not ended */
  uv_shutdown_t sreq;        /* the graceful close */
  struct conn *next, *prev;  /* the listener's list */
} conn;

struct sp_httpd_req {
  conn *c;                   /* holds one reference */
  int conn_id;               /* c->id */
  sp_buf line;               /* method NUL target NUL */
  size_t target_off;         /* offset of the target in line */
  sp_buf hdrs;               /* "name: value\n" */
  sp_buf body;               /* dechunked */
  int http10;                /* HTTP/1.0: no chunked responses */
  int keepalive;             /* the connection may carry another request */
  int is_head;               /* HEAD: no body in the response */
  int chunked;               /* Transfer-Encoding: chunked */
  int have_len;              /* Content-Length given */
  size_t clen;               /* its value */
  int hosts;                 /* Host header lines */
  int expect;                /* Expect: 100-continue */
  int rstate;                /* R_* */
  int gone;                  /* the client went away */
  int poked;                 /* sp_httpd_poke since the last wait */
  int lua;                   /* handed to Lua by sp_httpd_next */
  sp_task *waiter;           /* the task in sp_httpd_req_wait */
  sp_op wait_op;             /* linked to it */
  sp_httpd_req *qnext;       /* the listener's queue */
};

struct sp_httpd {
  sp_ctx *ctx;               /* owner */
  uv_tcp_t tcp;              /* the listening socket */
  int port;                  /* bound port */
  size_t max_head, max_body; /* request bounds */
  size_t max_out;            /* bytes queued to one client before it counts as gone */
  int max_conns;             /* open connections allowed */
  int lua_open;              /* Lua has not closed it */
  int tcp_open;              /* the listening handle is not closed yet */
  uv_timer_t sweep;          /* closes connections idle too long */
  int sweep_open;            /* the timer is not closed yet */
  uint64_t idle_ms;          /* how long is too long */
  int closing;               /* closed: accept nothing more */
  int nconns;                /* connection structs not yet freed */
  int nopen;                 /* connections not closing */
  int next_id;               /* the next connection's id */
  conn *conns;               /* every connection not yet freed */
  sp_httpd_req *qhead, *qtail; /* complete requests Lua has not taken */
  sp_task *waiter;           /* the task in sp_httpd_wait */
  sp_op wait_op;             /* linked to it */
  char rbuf[65536];          /* every read lands here, then is copied to its connection */
  sp_httpd *next, *prev;     /* the context's list */
};

static sp_httpds *httpds_of(sp_ctx *ctx);
static void conn_parse(conn *c);

/* ---- lifetimes ------------------------------------------------------------- */

static void srv_maybe_free(sp_httpd *s) {
  if (s->lua_open || s->tcp_open || s->sweep_open || s->nconns > 0) return;
  sp_httpds *hs = s->ctx->httpd;
  if (s->prev) s->prev->next = s->next;
  else if (hs && hs->live == s) hs->live = s->next;
  if (s->next) s->next->prev = s->prev;
  free(s);
}

static void conn_unref(conn *c) {
  if (--c->refs > 0) return;
  sp_httpd *s = c->srv;
  if (c->prev) c->prev->next = c->next;
  else if (s->conns == c) s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  sp_buf_free(&c->in);
  free(c);
  s->nconns--;
  srv_maybe_free(s);
}

static void req_destroy(sp_httpd_req *r) {
  if (r->waiter) {
    sp_op_unlink(&r->wait_op);
    r->waiter = NULL;
  }
  if (r->c->active == r) r->c->active = NULL;
  if (r->c->parsing == r) r->c->parsing = NULL;
  conn *c = r->c;
  sp_buf_free(&r->line);
  sp_buf_free(&r->hdrs);
  sp_buf_free(&r->body);
  free(r);
  conn_unref(c);
}

static void req_gone(sp_httpd_req *r) {
  if (!r || r->gone) return;
  r->gone = 1;
  sp_task *t = r->waiter;
  if (t) {
    r->waiter = NULL;
    sp_op_unlink(&r->wait_op);
    sp_sched_wake(t);
  }
}

static void on_conn_closed(uv_handle_t *h) { conn_unref(h->data); }

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf);
static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

/* The response and FIN are out. Closing now, with request bytes still
   unread (a body refused 413 while the client sends it), makes the kernel
   answer with a reset that can destroy the response before the client reads
   it: so read and drop until the client ends, for at most the linger time
   (the sweep closes what lingers longer). */
static void on_shutdown(uv_shutdown_t *req, int status) {
  conn *c = req->data;
  if (uv_is_closing((uv_handle_t *)&c->tcp)) return;
  if (status == 0 && !c->eof && !c->srv->closing &&
      uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) {
    c->lingering = 1;
    c->last = uv_now(c->tcp.loop);
    return;
  }
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

/* End a connection: gracefully (what was written is sent, then FIN) or at
   once. Its request in service learns that the client is gone. */
static void conn_close(conn *c, int graceful) {
  if (c->closing) return;
  c->closing = 1;
  c->srv->nopen--;
  req_gone(c->active);
  for (sp_httpd_req *q = c->srv->qhead; q; q = q->qnext)
    if (q->c == c) req_gone(q);
  if (c->parsing) req_destroy(c->parsing);
  uv_read_stop((uv_stream_t *)&c->tcp);
  if (graceful) {
    c->sreq.data = c;
    if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, on_shutdown) == 0) return;
  }
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

/* ---- writing --------------------------------------------------------------- */

typedef struct wr {
  uv_write_t req;            /* the libuv write */
  conn *c;                   /* holds a reference while in flight */
  char data[];               /* the bytes */
} wr;

static void on_written(uv_write_t *req, int status) {
  wr *w = (wr *)req;
  conn *c = w->c;
  if (status < 0) {
    c->eof = 1;
    conn_close(c, 0);   /* the client is gone (EPIPE, ECONNRESET) */
  }
  free(w);
  conn_unref(c);
}

/* Queue bytes; a closing connection takes none. A client that leaves more
   than max_out bytes unread is dropped (memory stays bounded): its request
   reports gone. */
static void conn_write(conn *c, const char *p, size_t n) {
  if (c->closing || n == 0) return;
  if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) + n > c->srv->max_out) {
    conn_close(c, 0);
    return;
  }
  wr *w = malloc(sizeof *w + n);
  if (!w) {
    conn_close(c, 0);
    return;
  }
  memcpy(w->data, p, n);
  w->c = c;
  uv_buf_t b = uv_buf_init(w->data, (unsigned)n);
  if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0) {
    free(w);
    conn_close(c, 0);
    return;
  }
  c->refs++;
}

static const char *reason(int status) {
  switch (status) {
  case 100: return "Continue";
  case 200: return "OK";
  case 201: return "Created";
  case 202: return "Accepted";
  case 204: return "No Content";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 406: return "Not Acceptable";
  case 409: return "Conflict";
  case 413: return "Content Too Large";
  case 415: return "Unsupported Media Type";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 503: return "Service Unavailable";
  case 505: return "HTTP Version Not Supported";
  default: return status < 300 ? "OK" : status < 400 ? "Redirect" : status < 500 ? "Client Error" : "Server Error";
  }
}

/* An error from the parser: a short text response, then close. */
static void conn_fail(conn *c, int status, const char *why) {
  sp_buf b;
  sp_buf_init(&b);
  sp_buf_printf(&b, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s\n",
                status, reason(status), strlen(why) + 1, why);
  if (b.data) conn_write(c, b.data, b.len);
  sp_buf_free(&b);
  conn_close(c, 1);
}

/* ---- parsing --------------------------------------------------------------- */

static int is_tchar(unsigned char ch) {
  if (ch >= '0' && ch <= '9') return 1;
  if ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z') return 1;
  return ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

/* a (n bytes, any case) equals the lowercase b */
static int ieq(const char *a, size_t n, const char *b) {
  if (strlen(b) != n) return 0;
  for (size_t i = 0; i < n; i++) {
    char ch = a[i] >= 'A' && a[i] <= 'Z' ? (char)(a[i] | 0x20) : a[i];
    if (ch != b[i]) return 0;
  }
  return 1;
}

/* Whether the comma-separated list at v has the token tok (any case). */
static int has_token(const char *v, size_t n, const char *tok) {
  size_t i = 0;
  while (i < n) {
    while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ',')) i++;
    size_t j = i;
    while (j < n && v[j] != ',') j++;
    size_t e = j;
    while (e > i && (v[e - 1] == ' ' || v[e - 1] == '\t')) e--;
    if (e > i && ieq(v + i, e - i, tok)) return 1;
    i = j;
  }
  return 0;
}

/* The request line: 0, or an HTTP status for what is wrong. */
static int parse_request_line(sp_httpd_req *r, const char *p, size_t n) {
  size_t i = 0;
  while (i < n && is_tchar((unsigned char)p[i])) i++;
  if (i == 0 || i >= n || p[i] != ' ') return 400;
  size_t m_end = i++;
  size_t t0 = i;
  while (i < n && (unsigned char)p[i] > 0x20 && (unsigned char)p[i] < 0x7f) i++;
  if (i == t0 || i >= n || p[i] != ' ') return 400;
  size_t t_end = i++;
  const char *v = p + i;
  size_t vn = n - i;
  if (vn != 8 || memcmp(v, "HTTP/1.", 7) != 0) {
    if (vn == 8 && memcmp(v, "HTTP/", 5) == 0 && v[5] >= '0' && v[5] <= '9' && v[6] == '.') return 505;
    return 400;
  }
  if (v[7] == '1') r->http10 = 0;
  else if (v[7] == '0') r->http10 = 1;
  else return 505;
  r->keepalive = !r->http10;
  sp_buf_append(&r->line, p, m_end);
  sp_buf_putc(&r->line, '\0');
  r->target_off = r->line.len;
  sp_buf_append(&r->line, p + t0, t_end - t0);
  if (!r->line.data) return 500;
  r->is_head = m_end == 4 && memcmp(p, "HEAD", 4) == 0;
  return 0;
}

/* What one header means to the framing. 0, or an HTTP status. */
static int header_meaning(sp_httpd_req *r, const char *name, size_t nn, const char *v, size_t vn) {
  if (ieq(name, nn, "content-length")) {
    if (vn == 0 || vn > 15) return 400;
    size_t x = 0;
    for (size_t i = 0; i < vn; i++) {
      if (v[i] < '0' || v[i] > '9') return 400;
      x = x * 10 + (size_t)(v[i] - '0');
    }
    if (r->have_len && x != r->clen) return 400;
    r->have_len = 1;
    r->clen = x;
  } else if (ieq(name, nn, "transfer-encoding")) {
    /* only "chunked", once: any other coding of a request is refused */
    if (r->chunked || !ieq(v, vn, "chunked")) return 501;
    r->chunked = 1;
  } else if (ieq(name, nn, "connection")) {
    if (has_token(v, vn, "close")) r->keepalive = 0;
    else if (r->http10 && has_token(v, vn, "keep-alive")) r->keepalive = 1;
  } else if (ieq(name, nn, "host")) {
    r->hosts++;
  } else if (ieq(name, nn, "expect")) {
    r->expect = ieq(v, vn, "100-continue");
  }
  return 0;
}

/* One header line (without its line end). 0, or an HTTP status. */
static int parse_header(sp_httpd_req *r, const char *p, size_t n) {
  if (p[0] == ' ' || p[0] == '\t') return 400;   /* obsolete line folding */
  size_t i = 0;
  while (i < n && is_tchar((unsigned char)p[i])) i++;
  if (i == 0 || i >= n || p[i] != ':') return 400;
  size_t nn = i++;
  while (i < n && (p[i] == ' ' || p[i] == '\t')) i++;
  size_t e = n;
  while (e > i && (p[e - 1] == ' ' || p[e - 1] == '\t')) e--;
  for (size_t k = i; k < e; k++) {
    unsigned char ch = (unsigned char)p[k];
    if ((ch < 0x20 && ch != '\t') || ch == 0x7f) return 400;
  }
  for (size_t k = 0; k < nn; k++) {
    char ch = p[k];
    sp_buf_putc(&r->hdrs, ch >= 'A' && ch <= 'Z' ? (char)(ch | 0x20) : ch);
  }
  sp_buf_append(&r->hdrs, ": ", 2);
  sp_buf_append(&r->hdrs, p + i, e - i);
  sp_buf_putc(&r->hdrs, '\n');
  return header_meaning(r, p, nn, p + i, e - i);
}

/* The end of the head in buf (just past its empty line), 0 when not all
   there; *skip: leading empty lines, which a server ignores. */
static size_t head_end(const char *p, size_t n, size_t *skip) {
  size_t i = 0;
  while (i < n && (p[i] == '\r' || p[i] == '\n')) i++;
  *skip = i;
  for (; i < n; i++) {
    if (p[i] != '\n') continue;
    if (i + 1 < n && p[i + 1] == '\n') return i + 2;
    if (i + 2 < n && p[i + 1] == '\r' && p[i + 2] == '\n') return i + 3;
  }
  return 0;
}

/* Parse the head from c->in: 1 done, 0 more bytes needed, or a status. */
static int parse_head(conn *c) {
  sp_httpd_req *r = c->parsing;
  size_t skip, end = head_end(c->in.data, c->in.len, &skip);
  if (skip > 0 && end == 0) {
    sp_buf_consume(&c->in, skip);
    end = head_end(c->in.data, c->in.len, &skip);
  }
  if (end == 0) return c->in.len > c->srv->max_head ? 431 : 0;
  if (end - skip > c->srv->max_head) return 431;
  const char *p = c->in.data + skip, *stop = c->in.data + end;
  int nh = -1, st = 0;
  while (p < stop && !st) {
    const char *nl = memchr(p, '\n', (size_t)(stop - p));
    size_t n = (size_t)(nl - p);
    if (n > 0 && p[n - 1] == '\r') n--;
    if (n == 0) break;
    for (size_t k = 0; k < n; k++)
      if (p[k] == '\r' || p[k] == '\0') st = 400;
    if (st) break;
    st = nh < 0 ? parse_request_line(r, p, n) : parse_header(r, p, n);
    if (++nh > SP_HTTPD_MAXHDRS) st = 431;
    p = nl + 1;
  }
  sp_buf_consume(&c->in, end);
  if (st) return st;
  if (!r->http10 && r->hosts != 1) return 400;
  if (r->chunked && r->have_len) return 400;   /* both framings: refused (smuggling) */
  if (r->have_len && r->clen > c->srv->max_body) return 413;
  c->pstate = r->chunked ? P_CHUNK_SIZE : P_BODY;
  c->need = r->have_len ? r->clen : 0;
  c->trailer = 0;
  if (r->expect && !r->http10 && (r->chunked || r->clen > 0))
    conn_write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
  return 1;
}

/* A chunk-size line: 1 read, 0 more needed, or a status. */
static int parse_chunk_size(conn *c) {
  const char *p = c->in.data;
  const char *nl = memchr(p, '\n', c->in.len);
  if (!nl) return c->in.len > SP_HTTPD_CHUNKLINE ? 400 : 0;
  size_t n = (size_t)(nl - p), i = 0, x = 0;
  if (n > SP_HTTPD_CHUNKLINE) return 400;
  if (n > 0 && p[n - 1] == '\r') n--;
  for (; i < n; i++) {
    char ch = p[i];
    int d = ch >= '0' && ch <= '9' ? ch - '0' : (ch | 0x20) >= 'a' && (ch | 0x20) <= 'f' ? (ch | 0x20) - 'a' + 10 : -1;
    if (d < 0) break;
    if (i >= 15) return 400;
    x = x * 16 + (size_t)d;
  }
  if (i == 0) return 400;
  while (i < n && (p[i] == ' ' || p[i] == '\t')) i++;
  if (i < n && p[i] != ';') return 400;   /* only an extension may follow */
  for (; i < n; i++)
    if ((unsigned char)p[i] < 0x20 && p[i] != '\t') return 400;
  sp_buf_consume(&c->in, (size_t)(nl + 1 - p));
  if (x == 0) {
    c->pstate = P_TRAILER;
    return 1;
  }
  if (x > c->srv->max_body || c->parsing->body.len + x > c->srv->max_body) return 413;
  c->need = x;
  c->pstate = P_CHUNK_DATA;
  return 1;
}

/* Trailer lines up to the empty one: 1 when it came, 0 more needed, or a status. */
static int parse_trailer(conn *c) {
  for (;;) {
    const char *p = c->in.data;
    const char *nl = c->in.len ? memchr(p, '\n', c->in.len) : NULL;
    if (!nl) return c->trailer + c->in.len > c->srv->max_head ? 431 : 0;
    size_t n = (size_t)(nl + 1 - p);
    c->trailer += n;
    if (c->trailer > c->srv->max_head) return 431;
    int empty = n == 1 || (n == 2 && p[0] == '\r');
    sp_buf_consume(&c->in, n);
    if (empty) return 2;
  }
}

/* Move body bytes from c->in: 1 when the body is complete. */
static int take_body(conn *c) {
  size_t n = c->in.len < c->need ? c->in.len : c->need;
  if (n) {
    sp_buf_append(&c->parsing->body, c->in.data, n);
    sp_buf_consume(&c->in, n);
    c->need -= n;
  }
  return c->need == 0;
}

/* A complete request: queued for Lua, the listener's waiter woken. */
static void complete(conn *c) {
  sp_httpd_req *r = c->parsing;
  sp_httpd *s = c->srv;
  c->parsing = NULL;
  c->active = r;
  if (s->qtail) s->qtail->qnext = r;
  else s->qhead = r;
  s->qtail = r;
  sp_task *t = s->waiter;
  if (t) {
    s->waiter = NULL;
    sp_op_unlink(&s->wait_op);
    sp_sched_wake(t);
  }
}

/* One step of the parser: 1 progress, 0 more bytes needed, 2 a request
   complete, or an HTTP status. */
static int parse_step(conn *c) {
  switch (c->pstate) {
  case P_HEAD: {
    int st = parse_head(c);
    if (st == 1 && c->pstate == P_BODY && c->need == 0) return 2;
    return st;
  }
  case P_BODY:
    return take_body(c) ? 2 : 0;
  case P_CHUNK_SIZE:
    return parse_chunk_size(c);
  case P_CHUNK_DATA:
    return take_body(c) ? (c->pstate = P_CHUNK_CRLF, 1) : 0;
  case P_CHUNK_CRLF:
    if (c->in.len < 1 || (c->in.data[0] == '\r' && c->in.len < 2)) return 0;
    if (c->in.data[0] == '\n') sp_buf_consume(&c->in, 1);
    else if (c->in.data[0] == '\r' && c->in.data[1] == '\n') sp_buf_consume(&c->in, 2);
    else return 400;
    c->pstate = P_CHUNK_SIZE;
    return 1;
  default:
    return parse_trailer(c);
  }
}

static void conn_parse(conn *c) {
  while (!c->active && !c->closing && c->in.len > 0) {
    if (!c->parsing) {
      sp_httpd_req *r = calloc(1, sizeof *r);
      if (!r) {
        conn_close(c, 0);
        return;
      }
      r->c = c;
      r->conn_id = c->id;
      c->refs++;
      c->parsing = r;
      c->pstate = P_HEAD;
    }
    int st = parse_step(c);
    if (st == 0) break;
    if (st == 2) complete(c);
    else if (st > 2) {
      const char *why = st == 431 ? "request head too large" : st == 413 ? "request body too large"
                      : st == 501 ? "transfer coding not supported" : st == 505 ? "HTTP version not supported"
                      : "malformed request";
      conn_fail(c, st, why);
    }
  }
  if (c->in.len == 0 && c->in.cap > 65536 && !c->parsing) {
    sp_buf_free(&c->in);   /* a big request's buffer is not kept for the next */
    sp_buf_init(&c->in);
  }
}

/* ---- reading and accepting ---------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  conn *c = h->data;
  buf->base = c->srv->rbuf;
  buf->len = sizeof c->srv->rbuf;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  conn *c = st->data;
  if (c->lingering) {   /* dropped; the client's end (or an error) finishes the close */
    if (nread < 0 && !uv_is_closing((uv_handle_t *)st)) uv_close((uv_handle_t *)st, on_conn_closed);
    return;
  }
  if (nread > 0 && !c->closing) {
    c->last = uv_now(st->loop);
    if (sp_buf_append(&c->in, buf->base, (size_t)nread) != 0) {
      conn_close(c, 0);
      return;
    }
    if (c->active && c->in.len > c->srv->max_head + 65536) {
      uv_read_stop(st);   /* bounded: the next request waits for this one's response */
      c->paused = 1;
    }
    conn_parse(c);
  } else if (nread < 0) {
    c->eof = 1;
    uv_read_stop(st);
    if (c->active) req_gone(c->active);
    /* an error, or an end with no request in service: nothing more to do */
    if (nread != UV_EOF || !c->active) conn_close(c, 0);
  }
}

static void on_connection(uv_stream_t *ls, int status) {
  sp_httpd *s = ls->data;
  if (status < 0 || s->closing) return;
  conn *c = calloc(1, sizeof *c);
  if (!c) return;
  c->srv = s;
  c->id = ++s->next_id;
  c->last = uv_now(&s->ctx->loop);
  sp_buf_init(&c->in);
  uv_tcp_init(&s->ctx->loop, &c->tcp);
  c->tcp.data = c;
  c->refs = 1;   /* the handle's */
  c->next = s->conns;
  if (s->conns) s->conns->prev = c;
  s->conns = c;
  s->nconns++;
  s->nopen++;
  if (uv_accept(ls, (uv_stream_t *)&c->tcp) != 0) {
    conn_close(c, 0);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  if (s->nopen > s->max_conns) {
    conn_fail(c, 503, "too many connections");
    return;
  }
  uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* ---- public: the listener ------------------------------------------------------- */

static int bind_addr(const char *host, int port, struct sockaddr_storage *ss) {
  if (!host || !*host || strcmp(host, "localhost") == 0) host = "127.0.0.1";
  if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0) return 0;
  if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0) return 0;
  return -1;
}

static void on_srv_closed(uv_handle_t *h) {
  sp_httpd *s = h->data;
  s->tcp_open = 0;
  srv_maybe_free(s);
}

static void on_sweep_closed(uv_handle_t *h) {
  sp_httpd *s = h->data;
  s->sweep_open = 0;
  srv_maybe_free(s);
}

/* A connection with no request in service that has sent nothing for
   idle_ms (an idle keep-alive, a head that never ends) is closed; so is one
   that has lingered (on_shutdown) for the linger time or idle_ms. */
static void on_sweep(uv_timer_t *t) {
  sp_httpd *s = t->data;
  uint64_t now = uv_now(t->loop);
  uint64_t linger = s->idle_ms < SP_HTTPD_LINGER ? s->idle_ms : SP_HTTPD_LINGER;
  for (conn *c = s->conns; c; c = c->next) {
    if (c->lingering) {
      if (now - c->last >= linger && !uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    } else if (!c->closing && !c->active && now - c->last >= s->idle_ms) {
      conn_close(c, 0);
    }
  }
}

sp_httpd *sp_httpd_listen(sp_ctx *ctx, const sp_httpd_opts *o, char *err, size_t errlen) {
  if (!o || o->port < 0 || o->port > 65535) {
    snprintf(err, errlen, "EINVAL: listen: a port from 0 to 65535 is required");
    return NULL;
  }
  if (ctx->stopping) {
    snprintf(err, errlen, "ECANCELED: listen: the engine is shutting down");
    return NULL;
  }
  if (ctx->timers.virt) {
    snprintf(err, errlen, "EPERM: real I/O under the virtual clock: listen (run with --clock real)");
    return NULL;
  }
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  if (bind_addr(o->host, o->port, &ss) != 0) {
    snprintf(err, errlen, "EINVAL: listen: '%s' is not an IP address (or localhost)", o->host ? o->host : "");
    return NULL;
  }
  sp_httpds *hs = httpds_of(ctx);
  sp_httpd *s = hs ? calloc(1, sizeof *s) : NULL;
  if (!s) {
    snprintf(err, errlen, "ENOMEM: listen: out of memory");
    return NULL;
  }
  s->ctx = ctx;
  s->max_head = o->max_header_bytes > 0 ? (size_t)o->max_header_bytes : SP_HTTPD_HEAD;
  s->max_body = o->max_body_bytes > 0 ? (size_t)o->max_body_bytes : SP_HTTPD_BODY;
  s->max_conns = o->max_conns > 0 ? o->max_conns : SP_HTTPD_CONNS;
  s->max_out = o->max_pending_bytes > 0 ? (size_t)o->max_pending_bytes : SP_HTTPD_OUT;
  s->idle_ms = o->idle_timeout_ms > 0 ? (uint64_t)o->idle_timeout_ms : SP_HTTPD_IDLE;
  s->next = hs->live;
  if (hs->live) hs->live->prev = s;
  hs->live = s;
  uv_tcp_init(&ctx->loop, &s->tcp);
  s->tcp.data = s;
  s->tcp_open = 1;
  uv_timer_init(&ctx->loop, &s->sweep);
  s->sweep.data = s;
  s->sweep_open = 1;
  int rc = uv_tcp_bind(&s->tcp, (const struct sockaddr *)&ss, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&s->tcp, 128, on_connection);
  if (rc != 0) {
    snprintf(err, errlen, "%s: listen on %s port %d: %s", uv_err_name(rc), o->host ? o->host : "127.0.0.1",
             o->port, uv_strerror(rc));
    s->closing = 1;
    uv_close((uv_handle_t *)&s->tcp, on_srv_closed);
    uv_close((uv_handle_t *)&s->sweep, on_sweep_closed);
    return NULL;
  }
  uint64_t every = s->idle_ms / 4 < 1000 ? s->idle_ms / 4 : 1000;
  uv_timer_start(&s->sweep, on_sweep, every ? every : 1, every ? every : 1);
  struct sockaddr_storage got;
  int len = sizeof got;
  if (uv_tcp_getsockname(&s->tcp, (struct sockaddr *)&got, &len) == 0)
    s->port = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
                                              : ((struct sockaddr_in *)&got)->sin_port);
  s->lua_open = 1;
  return s;
}

int sp_httpd_port(const sp_httpd *s) { return s ? s->port : 0; }

int sp_httpd_conns(const sp_httpd *s) { return s ? s->nopen : 0; }

sp_httpd_req *sp_httpd_next(sp_httpd *s) {
  sp_httpd_req *r = s ? s->qhead : NULL;
  if (!r) return NULL;
  s->qhead = r->qnext;
  if (!s->qhead) s->qtail = NULL;
  r->qnext = NULL;
  r->lua = 1;
  return r;
}

static void srv_waiter_cancelled(sp_op *op) {
  sp_httpd *s = (sp_httpd *)((char *)op - offsetof(sp_httpd, wait_op));
  s->waiter = NULL;
}

int sp_httpd_wait(sp_httpd *s, sp_task *t) {
  if (!t || s->qhead || s->closing) return 1;
  if (s->waiter) sp_op_unlink(&s->wait_op);
  s->waiter = t;
  sp_op_link(t, &s->wait_op, srv_waiter_cancelled);
  return 0;
}

/* Stop accepting and close every connection; queued requests are freed. */
static void srv_close(sp_httpd *s) {
  if (s->waiter) {
    sp_task *t = s->waiter;
    s->waiter = NULL;
    sp_op_unlink(&s->wait_op);
    sp_sched_wake(t);
  }
  if (!s->closing) {
    s->closing = 1;
    uv_close((uv_handle_t *)&s->tcp, on_srv_closed);
    uv_close((uv_handle_t *)&s->sweep, on_sweep_closed);
  }
  while (s->qhead) {
    sp_httpd_req *r = s->qhead;
    s->qhead = r->qnext;
    req_destroy(r);
  }
  s->qtail = NULL;
  for (conn *c = s->conns; c; c = c->next) {
    conn_close(c, 0);
    /* one still flushing its last response closes now too */
    if (!uv_is_closing((uv_handle_t *)&c->tcp)) uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
  }
}

void sp_httpd_close(sp_httpd *s) {
  if (!s || !s->lua_open) return;
  srv_close(s);
  s->lua_open = 0;
  srv_maybe_free(s);
}

/* ---- public: requests and responses -------------------------------------------- */

const char *sp_httpd_method(const sp_httpd_req *r) { return r->line.data ? r->line.data : ""; }
const char *sp_httpd_target(const sp_httpd_req *r) { return r->line.data ? r->line.data + r->target_off : ""; }
int sp_httpd_conn_id(const sp_httpd_req *r) { return r->conn_id; }

const char *sp_httpd_headers(const sp_httpd_req *r, size_t *len) {
  *len = r->hdrs.len;
  return r->hdrs.data ? r->hdrs.data : "";
}

const char *sp_httpd_body(const sp_httpd_req *r, size_t *len) {
  *len = r->body.len;
  return r->body.data ? r->body.data : "";
}

int sp_httpd_gone(const sp_httpd_req *r) { return r->gone || r->c->closing; }

/* The status line and headers: -1 with err for a bad header line. */
static int build_head(sp_httpd_req *r, sp_buf *b, int status, const char *headers, char *err, size_t errlen) {
  sp_buf_printf(b, "HTTP/1.1 %d %s\r\n", status, reason(status));
  const char *p = headers ? headers : "";
  while (*p) {
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n > 0 && p[n - 1] == '\r') n--;
    if (n > 0) {
      size_t i = 0;
      while (i < n && is_tchar((unsigned char)p[i])) i++;
      int bad = i == 0 || i >= n || p[i] != ':' || ieq(p, i, "content-length") || ieq(p, i, "transfer-encoding")
             || ieq(p, i, "connection");
      for (size_t k = i; k < n && !bad; k++)
        if (((unsigned char)p[k] < 0x20 && p[k] != '\t') || p[k] == 0x7f) bad = 1;
      if (bad) {
        snprintf(err, errlen, "EINVAL: response header line '%.*s' is not 'Name: value' (framing headers are the server's)",
                 (int)(n > 80 ? 80 : n), p);
        return -1;
      }
      sp_buf_append(b, p, n);
      sp_buf_append(b, "\r\n", 2);
    }
    p = e ? e + 1 : p + strlen(p);
  }
  if (r->c->srv->closing) r->keepalive = 0;
  if (!r->keepalive) sp_buf_puts(b, "Connection: close\r\n");
  else if (r->http10) sp_buf_puts(b, "Connection: keep-alive\r\n");
  return 0;
}

/* The response has ended: the connection serves its next request or closes. */
static void finish(sp_httpd_req *r) {
  conn *c = r->c;
  r->rstate = R_DONE;
  if (c->active != r) return;
  c->active = NULL;
  if (c->closing) return;
  c->last = uv_now(&c->srv->ctx->loop);
  if (!r->keepalive || c->eof) {
    conn_close(c, 1);
    return;
  }
  if (c->paused) {
    c->paused = 0;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  }
  conn_parse(c);
}

static int check_order(sp_httpd_req *r, int want, const char *what, char *err, size_t errlen) {
  if (r->rstate == want && r->lua) return 0;
  snprintf(err, errlen, "EINVAL: %s: the response was %s", what,
           r->rstate == R_NONE ? "not started" : r->rstate == R_STREAM ? "already started" : "already sent");
  return -1;
}

int sp_httpd_respond(sp_httpd_req *r, int status, const char *headers, const char *body, size_t len,
                     char *err, size_t errlen) {
  if (check_order(r, R_NONE, "respond", err, errlen) != 0) return -1;
  if (status < 200 || status > 999) {
    snprintf(err, errlen, "EINVAL: respond: status %d is not a final status", status);
    return -1;
  }
  sp_buf b;
  sp_buf_init(&b);
  if (build_head(r, &b, status, headers, err, errlen) != 0) {
    sp_buf_free(&b);
    return -1;
  }
  sp_buf_printf(&b, "Content-Length: %zu\r\n\r\n", len);
  if (!r->is_head && len) sp_buf_append(&b, body, len);
  if (b.data) conn_write(r->c, b.data, b.len);
  else conn_close(r->c, 0);
  sp_buf_free(&b);
  finish(r);
  return 0;
}

int sp_httpd_stream_start(sp_httpd_req *r, int status, const char *headers, char *err, size_t errlen) {
  if (check_order(r, R_NONE, "stream", err, errlen) != 0) return -1;
  sp_buf b;
  sp_buf_init(&b);
  if (r->http10) r->keepalive = 0;   /* no chunks: the end of the stream is the close */
  if (build_head(r, &b, status, headers, err, errlen) != 0) {
    sp_buf_free(&b);
    return -1;
  }
  if (!r->http10) sp_buf_puts(&b, "Transfer-Encoding: chunked\r\n");
  sp_buf_puts(&b, "\r\n");
  if (b.data) conn_write(r->c, b.data, b.len);
  else conn_close(r->c, 0);
  sp_buf_free(&b);
  r->rstate = R_STREAM;
  return 0;
}

int sp_httpd_stream_write(sp_httpd_req *r, const char *data, size_t len, char *err, size_t errlen) {
  if (check_order(r, R_STREAM, "stream write", err, errlen) != 0) return -1;
  if (len == 0 || r->is_head) return 0;
  if (r->http10) {
    conn_write(r->c, data, len);
    return 0;
  }
  char *w = malloc(len + 32);
  if (!w) {
    conn_close(r->c, 0);
    return 0;
  }
  int h = snprintf(w, 32, "%zx\r\n", len);
  memcpy(w + h, data, len);
  memcpy(w + h + len, "\r\n", 2);
  conn_write(r->c, w, (size_t)h + len + 2);
  free(w);
  return 0;
}

int sp_httpd_stream_end(sp_httpd_req *r) {
  if (r->rstate != R_STREAM) return -1;
  if (!r->http10 && !r->is_head) conn_write(r->c, "0\r\n\r\n", 5);
  finish(r);
  return 0;
}

static void req_waiter_cancelled(sp_op *op) {
  sp_httpd_req *r = (sp_httpd_req *)((char *)op - offsetof(sp_httpd_req, wait_op));
  r->waiter = NULL;
}

int sp_httpd_req_wait(sp_httpd_req *r, sp_task *t) {
  if (!t || r->poked || sp_httpd_gone(r)) {
    r->poked = 0;
    return 1;
  }
  if (r->waiter) sp_op_unlink(&r->wait_op);
  r->waiter = t;
  sp_op_link(t, &r->wait_op, req_waiter_cancelled);
  return 0;
}

void sp_httpd_poke(sp_httpd_req *r) {
  r->poked = 1;
  sp_task *t = r->waiter;
  if (t) {
    r->waiter = NULL;
    sp_op_unlink(&r->wait_op);
    sp_sched_wake(t);
  }
}

void sp_httpd_req_free(sp_httpd_req *r) {
  if (!r) return;
  conn *c = r->c;
  if (c->active == r && !c->closing) {
    if (r->rstate == R_NONE && !c->srv->ctx->stopping) {
      /* nobody answered it: the client is told, not left waiting */
      static const char msg[] = "the request was dropped without a response\n";
      char err[160];
      r->keepalive = 0;
      sp_httpd_respond(r, 500, "Content-Type: text/plain", msg, sizeof msg - 1, err, sizeof err);
    } else {
      conn_close(c, 0);   /* a stream cut short: the client sees it end unfinished */
    }
  }
  req_destroy(r);
}

/* ---- shutdown -------------------------------------------------------------- */

/* Lua is closed: close every listener and connection; the loop then runs
   their close callbacks, which free them. */
static void httpds_close(sp_ctx *ctx) {
  for (sp_httpd *s = ctx->httpd->live; s; s = s->next) {
    s->lua_open = 0;
    srv_close(s);
  }
}

static void httpds_release(sp_ctx *ctx) {
  free(ctx->httpd);
  ctx->httpd = NULL;
}

static const sp_owner httpds_owner = { NULL, httpds_close, NULL, httpds_release };

static sp_httpds *httpds_of(sp_ctx *ctx) {
  if (!ctx->httpd && (ctx->httpd = calloc(1, sizeof *ctx->httpd)) != NULL)
    sp_ctx_own(ctx, SP_OWN_HTTPD, &httpds_owner);
  return ctx->httpd;
}
