/*
 * specula-testserver: a small libuv HTTP/1.1 server with scripted
 * (mis)behaviour, used by the test suites and as the benchmark target.
 *
 *   specula-testserver [--port N] [--host 127.0.0.1] [--files DIR]
 *
 * After binding it prints "PORT <n> PID <pid>\n" on stdout and serves until
 * SIGTERM/SIGINT.  The modes are selected by path; see ts_dispatch(), and
 * TS_HELP (--help) for what each path does.
 */
#define _POSIX_C_SOURCE 200809L

#include <uv.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define TS_MAX_HEAD      (64u * 1024u)                 /* request line + headers */
#define TS_MAX_BODY      (64u * 1024u * 1024u)         /* decoded request body */
#define TS_MAX_BUF       (TS_MAX_HEAD + TS_MAX_BODY + 65536u) /* read buffer cap */
#define TS_MAX_HEADERS   100                           /* headers per request */
#define TS_MAX_PARAMS    64                            /* query parameters kept */
#define TS_MAX_FILE      (256u * 1024u * 1024u)        /* /file size limit */
#define TS_READ_MIN      4096u                         /* min free space per read */
#define TS_KEEP_CAP      (256u * 1024u)                /* scratch kept between requests */
#define TS_ABUF_SIZE     (64u * 1024u)                 /* shared run of 'a' bytes */
#define TS_BIG_BUFS      4                             /* abuf slices per /big write */
#define TS_CHUNK         16384u                        /* /big?chunked=1 chunk size */
#define TS_CHUNK_HDR     "4000\r\n"                    /* hex of TS_CHUNK */
#define TS_CBLOCK_N      4                             /* prebuilt chunks per write */
#define TS_CSTRIDE       (sizeof(TS_CHUNK_HDR) - 1 + TS_CHUNK + 2) /* one framed chunk */
#define TS_LINGER_MS     1000                          /* wait for peer FIN after ours */
#define TS_FLAKY_BUCKETS 256                           /* /flaky hash table size */
#define TS_BACKLOG       8192                          /* listen() backlog */

#define TS_NOLEN   (-1)  /* ts_head_end: no Content-Length, no body framing */
#define TS_CHUNKED (-2)  /* ts_head_end: Transfer-Encoding: chunked */

typedef struct ts_server ts_server;
typedef struct ts_conn ts_conn;
typedef void (*ts_done_fn)(ts_conn *c);

/* A borrowed byte range. */
typedef struct {
  const char *p; /* first byte */
  size_t n;      /* length */
} ts_str;

/* A growable byte buffer. */
typedef struct {
  char *p;    /* storage (NULL until first use) */
  size_t len; /* bytes in use */
  size_t cap; /* bytes allocated */
} ts_buf;

/* One /flaky key and how many requests it has seen. */
typedef struct ts_flaky {
  struct ts_flaky *next; /* next entry in the same bucket */
  uint64_t count;        /* requests seen with this key */
  size_t klen;           /* key length */
  char key[];            /* key bytes */
} ts_flaky;

/* A parsed request; pointers refer to the connection's buffers. */
typedef struct {
  ts_str method;                /* method token */
  ts_str path;                  /* target before '?' */
  ts_str query;                 /* raw target after '?' (may be empty) */
  ts_str hname[TS_MAX_HEADERS]; /* header names as received */
  ts_str hval[TS_MAX_HEADERS];  /* header values, surrounding blanks trimmed */
  size_t nhdr;                  /* number of headers */
  ts_str qkey[TS_MAX_PARAMS];   /* decoded query keys (NUL-terminated) */
  ts_str qval[TS_MAX_PARAMS];   /* decoded query values (NUL-terminated) */
  size_t nparam;                /* number of query parameters */
  const char *body;             /* request body (de-chunked) */
  size_t body_len;              /* body length */
  int keep_alive;               /* connection persists after the response */
  int head;                     /* method is HEAD: send no body */
} ts_req;

/* Response modes that outlive the dispatching call. */
enum {
  TS_M_NONE,  /* idle, or a response that was queued in one go */
  TS_M_DELAY, /* /delay, /hold: timer then a short body */
  TS_M_SSE,   /* /sse: timed chunked events */
  TS_M_DRIP,  /* /drip: one byte per tick */
  TS_M_BIG,   /* /big: body pumped from shared buffers */
  TS_M_FILE,  /* /file: file pieces with pauses */
  TS_M_STALL, /* /stall: headers then silence */
  TS_M_RESET  /* /reset: waiting for the write, then RST */
};

/* /file piece schedule. */
enum {
  TS_F_WHOLE, /* everything at once */
  TS_F_SPLIT, /* [0,split), pause, rest */
  TS_F_CHUNK  /* fixed-size pieces with pauses */
};

/* A write whose bytes did not fit in the socket at once. */
typedef struct {
  uv_write_t req; /* libuv request (first member); req.data is the conn */
  ts_done_fn done; /* called after a successful write, or NULL */
  uv_buf_t buf;   /* describes data[] */
  char data[];    /* copy of the unsent bytes */
} ts_wreq;

/* One client connection. */
struct ts_conn {
  uv_tcp_t tcp;         /* client socket; tcp.data is this conn */
  uv_timer_t timer;     /* delays, streaming ticks and the lingering close */
  uv_write_t bigreq;    /* the single in-flight /big write */
  uv_shutdown_t sreq;   /* graceful close (FIN after pending writes) */
  ts_server *srv;       /* owning server */
  ts_conn *prev;        /* previous live connection */
  ts_conn *next;        /* next live connection */
  char *rbuf;           /* bytes read and not yet consumed */
  size_t rlen;          /* bytes used in rbuf */
  size_t rcap;          /* bytes allocated for rbuf */
  ts_buf obuf;          /* response being assembled */
  ts_buf jbuf;          /* JSON body scratch for /echo */
  char *qbuf;           /* decoded query strings; stable until the next request */
  size_t qcap;          /* bytes allocated for qbuf */
  int refs;             /* handles still to close before freeing */
  int counted;          /* accepted successfully (included in the stats) */
  int closing;          /* uv_close issued */
  int shutting;         /* uv_shutdown issued; input is discarded */
  int shut_done;        /* shutdown finished; lingering for the peer's FIN */
  int got_eof;          /* peer closed its sending side */
  int busy;             /* a response is in progress; don't parse more */
  int keep_alive;       /* current response keeps the connection open */
  int head;             /* current request is HEAD */
  int sent_continue;    /* "100 Continue" already sent for this request */
  int stall;            /* counted in stall_open */
  int mode;             /* TS_M_* of the response in progress */
  int chunked;          /* /big uses chunked encoding */
  int last;             /* /big: the in-flight write is the final one */
  int fmode;            /* /file TS_F_* schedule */
  int fphase;           /* /file: first piece already sent */
  uint64_t left;        /* events or bytes still to send */
  uint64_t idx;         /* next /sse event number */
  uint64_t interval;    /* ms between ticks */
  ts_str text;          /* /sse data text (points into qbuf or a literal) */
  const char *reply;    /* /delay and /hold body */
  char *fdata;          /* /file contents */
  size_t flen;          /* /file length */
  size_t foff;          /* /file bytes sent */
  size_t fsplit;        /* /file split offset */
  size_t fstep;         /* /file piece size */
  int fcut;             /* /file?cut=N: close (FIN) after flen bytes, body unfinished */
  char gate[48];        /* gate=KEY of /file or /reflect: the rest waits for /release ("" none) */
  uint64_t hold;        /* ms a gated rest waits for its /release before it goes anyway */
  char chdr[24];        /* chunk-size line for the last /big chunk */
};

/* The whole server. */
struct ts_server {
  uv_loop_t loop;                         /* event loop */
  uv_tcp_t listener;                      /* listening socket */
  uv_signal_t sigterm;                    /* SIGTERM watcher */
  uv_signal_t sigint;                     /* SIGINT watcher */
  int stopping;                           /* shutdown in progress */
  const char *files_dir;                  /* --files directory, or NULL */
  ts_conn *conns;                         /* live (not closing) connections */
  ts_flaky *flaky[TS_FLAKY_BUCKETS];      /* /flaky counters by key */
  char *abuf;                             /* TS_ABUF_SIZE bytes of 'a' */
  char *cblock;                           /* TS_CBLOCK_N framed chunks of 'a' */
  uint64_t accepted;                      /* connections accepted */
  uint64_t closed;                        /* connections closed */
  uint64_t stall_open;                    /* open connections in /stall */
  uint64_t requests;                      /* requests dispatched */
};

static void ts_conn_close(ts_conn *c, int reset);
static void ts_conn_shutdown(ts_conn *c);
static void ts_process(ts_conn *c);

/* ---- memory and buffers ---------------------------------------------- */

static void *ts_xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) {
    fprintf(stderr, "specula-testserver: out of memory\n");
    abort();
  }
  return q;
}

static void ts_buf_reserve(ts_buf *b, size_t extra) {
  if (b->cap - b->len >= extra)
    return;
  size_t cap = b->cap ? b->cap * 2 : 512;
  while (cap - b->len < extra)
    cap *= 2;
  b->p = ts_xrealloc(b->p, cap);
  b->cap = cap;
}

static void ts_buf_add(ts_buf *b, const void *p, size_t n) {
  ts_buf_reserve(b, n);
  if (n)
    memcpy(b->p + b->len, p, n);
  b->len += n;
}

static void ts_buf_adds(ts_buf *b, const char *s) { ts_buf_add(b, s, strlen(s)); }

static void ts_buf_addf(ts_buf *b, const char *fmt, ...) {
  va_list ap;
  ts_buf_reserve(b, 128);
  va_start(ap, fmt);
  int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if ((size_t)n >= b->cap - b->len) {
    ts_buf_reserve(b, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
  }
  b->len += (size_t)n;
}

/* Drop a scratch buffer that grew large for one request. */
static void ts_buf_trim(ts_buf *b) {
  if (b->cap > TS_KEEP_CAP && b->len == 0) {
    free(b->p);
    b->p = NULL;
    b->cap = 0;
  }
}

/* ---- small string helpers -------------------------------------------- */

static int ts_lower(int ch) { return ch >= 'A' && ch <= 'Z' ? ch + 32 : ch; }

static int ts_ieq(ts_str s, const char *lit) {
  size_t n = strlen(lit);
  if (s.n != n)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (ts_lower((unsigned char)s.p[i]) != ts_lower((unsigned char)lit[i]))
      return 0;
  return 1;
}

static int ts_eq(ts_str s, const char *lit) {
  size_t n = strlen(lit);
  return s.n == n && memcmp(s.p, lit, n) == 0;
}

/* If s starts with lit, store the remainder in *rest. */
static int ts_prefix(ts_str s, const char *lit, ts_str *rest) {
  size_t n = strlen(lit);
  if (s.n < n || memcmp(s.p, lit, n) != 0)
    return 0;
  rest->p = s.p + n;
  rest->n = s.n - n;
  return 1;
}

/* Strict unsigned decimal: digits only, no overflow. */
static int ts_u64(ts_str s, uint64_t *out) {
  uint64_t v = 0;
  if (s.n == 0 || s.n > 19)
    return -1;
  for (size_t i = 0; i < s.n; i++) {
    if (s.p[i] < '0' || s.p[i] > '9')
      return -1;
    v = v * 10 + (uint64_t)(s.p[i] - '0');
  }
  *out = v;
  return 0;
}

static int ts_hexval(int ch) {
  if (ch >= '0' && ch <= '9')
    return ch - '0';
  ch = ts_lower(ch);
  if (ch >= 'a' && ch <= 'f')
    return ch - 'a' + 10;
  return -1;
}

/* RFC 9110 token character. */
static int ts_tchar(unsigned char ch) {
  if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))
    return 1;
  return ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

/* A value that can be placed in a response header verbatim. */
static int ts_hdr_safe(ts_str s) {
  for (size_t i = 0; i < s.n; i++) {
    unsigned char ch = (unsigned char)s.p[i];
    if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
      return 0;
  }
  return 1;
}

/* Length of a well-formed UTF-8 multi-byte sequence at s, or 0. */
static size_t ts_utf8_seq(const unsigned char *s, size_t n) {
  unsigned char lo = 0x80, hi = 0xBF;
  size_t len;
  if (s[0] >= 0xC2 && s[0] <= 0xDF) {
    len = 2;
  } else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
    len = 3;
    if (s[0] == 0xE0)
      lo = 0xA0;
    else if (s[0] == 0xED)
      hi = 0x9F;
  } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
    len = 4;
    if (s[0] == 0xF0)
      lo = 0x90;
    else if (s[0] == 0xF4)
      hi = 0x8F;
  } else {
    return 0;
  }
  if (n < len || s[1] < lo || s[1] > hi)
    return 0;
  for (size_t k = 2; k < len; k++)
    if ((s[k] & 0xC0) != 0x80)
      return 0;
  return len;
}

/* Append p as a JSON string; invalid UTF-8 bytes become \u00XX. */
static void ts_json_str(ts_buf *b, const char *p, size_t n, int lower) {
  const unsigned char *s = (const unsigned char *)p;
  ts_buf_add(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned ch = lower ? (unsigned)ts_lower(s[i]) : s[i];
    ts_buf_reserve(b, 8);
    char *o = b->p + b->len;
    if (ch == '"' || ch == '\\') {
      o[0] = '\\';
      o[1] = (char)ch;
      b->len += 2;
    } else if (ch == '\n' || ch == '\r' || ch == '\t') {
      o[0] = '\\';
      o[1] = ch == '\n' ? 'n' : ch == '\r' ? 'r' : 't';
      b->len += 2;
    } else if (ch >= 0x20 && ch < 0x7f) {
      o[0] = (char)ch;
      b->len += 1;
    } else {
      size_t l = ch >= 0x80 ? ts_utf8_seq(s + i, n - i) : 0;
      if (l) {
        ts_buf_add(b, s + i, l);
        i += l - 1;
      } else {
        snprintf(o, 8, "\\u%04x", ch);
        b->len += 6;
      }
    }
  }
  ts_buf_add(b, "\"", 1);
}

/* ---- request parsing --------------------------------------------------- */

/* Decode %XX and '+' from src into dst; returns the decoded length. */
static size_t ts_pct_decode(char *dst, const char *src, size_t n) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    int hi, lo;
    if (src[i] == '+') {
      dst[o++] = ' ';
    } else if (src[i] == '%' && i + 2 < n && (hi = ts_hexval((unsigned char)src[i + 1])) >= 0 &&
               (lo = ts_hexval((unsigned char)src[i + 2])) >= 0) {
      dst[o++] = (char)(hi * 16 + lo);
      i += 2;
    } else {
      dst[o++] = src[i];
    }
  }
  return o;
}

/* Split the query into decoded key/value pairs stored in c->qbuf. */
static void ts_parse_query(ts_conn *c, ts_req *r) {
  const char *q = r->query.p, *end = q + r->query.n;
  size_t need = r->query.n * 3 + 4;
  r->nparam = 0;
  if (r->query.n == 0)
    return;
  if (c->qcap < need) {
    c->qbuf = ts_xrealloc(c->qbuf, need);
    c->qcap = need;
  }
  char *out = c->qbuf;
  while (q < end && r->nparam < TS_MAX_PARAMS) {
    const char *amp = memchr(q, '&', (size_t)(end - q));
    if (!amp)
      amp = end;
    if (amp > q) {
      const char *eq = memchr(q, '=', (size_t)(amp - q));
      const char *kend = eq ? eq : amp;
      size_t kn = ts_pct_decode(out, q, (size_t)(kend - q));
      r->qkey[r->nparam] = (ts_str){out, kn};
      out += kn;
      *out++ = '\0';
      size_t vn = eq ? ts_pct_decode(out, eq + 1, (size_t)(amp - eq - 1)) : 0;
      r->qval[r->nparam] = (ts_str){out, vn};
      out += vn;
      *out++ = '\0';
      r->nparam++;
    }
    q = amp + 1;
  }
}

static const ts_str *ts_param(const ts_req *r, const char *name) {
  for (size_t i = 0; i < r->nparam; i++)
    if (ts_eq(r->qkey[i], name))
      return &r->qval[i];
  return NULL;
}

/* Numeric query parameter with a default; -1 if present but malformed. */
static int ts_param_u64(const ts_req *r, const char *name, uint64_t def, uint64_t *out) {
  const ts_str *v = ts_param(r, name);
  if (!v) {
    *out = def;
    return 0;
  }
  return ts_u64(*v, out);
}

/*
 * Walk a chunked body in p[0..n).  Returns 1 when complete (setting the
 * decoded length and the wire length), 0 if more input is needed, -1 if
 * malformed.  With decode set, the data is compacted to the front of p.
 */
static int ts_chunked(char *p, size_t n, int decode, size_t *dlen, size_t *wire) {
  size_t i = 0, out = 0;
  for (;;) {
    size_t sz = 0, digits = 0, line = i;
    int v;
    while (i < n && (v = ts_hexval((unsigned char)p[i])) >= 0) {
      if (++digits > 8)
        return -1;
      sz = sz * 16 + (size_t)v;
      i++;
    }
    if (i >= n)
      return 0;
    if (digits == 0 || (p[i] != '\r' && p[i] != '\n' && p[i] != ';' && p[i] != ' ' && p[i] != '\t'))
      return -1;
    while (i < n && p[i] != '\n') { /* chunk extensions are ignored */
      if (i - line > 1024)
        return -1;
      i++;
    }
    if (i >= n)
      return 0;
    i++;
    if (sz == 0) { /* trailer section up to an empty line */
      for (;;) {
        const char *lf = memchr(p + i, '\n', n - i);
        if (!lf)
          return n - i > TS_MAX_HEAD ? -1 : 0;
        size_t ll = (size_t)(lf - (p + i));
        i += ll + 1;
        if (ll == 0 || (ll == 1 && p[i - 2] == '\r'))
          break;
      }
      *dlen = out;
      *wire = i;
      return 1;
    }
    if (out + sz > TS_MAX_BODY)
      return -1;
    if (n - i < sz + 1)
      return 0;
    if (decode)
      memmove(p + out, p + i, sz);
    out += sz;
    i += sz;
    if (p[i] == '\r') {
      if (i + 1 >= n)
        return 0;
      if (p[i + 1] != '\n')
        return -1;
      i += 2;
    } else if (p[i] == '\n') {
      i++;
    } else {
      return -1;
    }
  }
}

static void ts_send(ts_conn *c, const char *p, size_t n, ts_done_fn done);

/* Make rbuf hold at least need bytes (need <= TS_MAX_BUF). */
static void ts_rbuf_grow(ts_conn *c, size_t need) {
  if (c->rcap >= need)
    return;
  size_t cap = c->rcap ? c->rcap * 2 : TS_READ_MIN;
  if (cap < need)
    cap = need;
  if (cap > TS_MAX_BUF)
    cap = TS_MAX_BUF;
  c->rbuf = ts_xrealloc(c->rbuf, cap);
  c->rcap = cap;
}

/*
 * Parse one request from c->rbuf.  Returns 1 with *consumed set when a whole
 * request is present, 0 if more input is needed, or -status on error.
 */
static int ts_parse(ts_conn *c, ts_req *r, size_t *consumed) {
  char *b = c->rbuf;
  size_t n = c->rlen, i = 0, hend = 0;

  while (i < n && (b[i] == '\r' || b[i] == '\n')) /* stray empty lines */
    i++;
  if (i > 0) {
    memmove(b, b + i, n - i);
    c->rlen = n = n - i;
  }
  if (n == 0)
    return 0;

  for (const char *p = b;;) {
    const char *lf = memchr(p, '\n', (size_t)(b + n - p));
    if (!lf)
      break;
    size_t k = (size_t)(lf - b) + 1;
    if (k >= n)
      break;
    if (b[k] == '\n') {
      hend = k + 1;
      break;
    }
    if (b[k] == '\r') {
      if (k + 1 >= n)
        break;
      if (b[k + 1] == '\n') {
        hend = k + 2;
        break;
      }
    }
    p = b + k;
  }
  if (!hend)
    return n > TS_MAX_HEAD ? -431 : 0;
  if (hend > TS_MAX_HEAD)
    return -431;

  /* request line */
  size_t le = (size_t)((const char *)memchr(b, '\n', hend) - b), lend = le, j = 0;
  if (lend > 0 && b[lend - 1] == '\r')
    lend--;
  while (j < lend && ts_tchar((unsigned char)b[j]))
    j++;
  if (j == 0 || j >= lend || b[j] != ' ')
    return -400;
  r->method = (ts_str){b, j};
  size_t ts = ++j;
  while (j < lend && b[j] != ' ') {
    unsigned char ch = (unsigned char)b[j];
    if (ch <= 0x20 || ch == 0x7f)
      return -400;
    j++;
  }
  if (j == ts || j >= lend || b[ts] != '/')
    return -400;
  ts_str target = {b + ts, j - ts};
  j++;
  if (lend - j != 8 || memcmp(b + j, "HTTP/1.", 7) != 0 || (b[j + 7] != '0' && b[j + 7] != '1'))
    return -400;
  int minor = b[j + 7] - '0';

  /* header fields */
  r->nhdr = 0;
  for (size_t pos = le + 1;;) {
    size_t lf = (size_t)((const char *)memchr(b + pos, '\n', hend - pos) - b), e = lf;
    if (e > pos && b[e - 1] == '\r')
      e--;
    if (e == pos)
      break;
    if (b[pos] == ' ' || b[pos] == '\t')
      return -400; /* obsolete line folding */
    size_t q = pos;
    while (q < e && ts_tchar((unsigned char)b[q]))
      q++;
    if (q == pos || q >= e || b[q] != ':')
      return -400;
    size_t vs = q + 1, ve = e;
    while (vs < ve && (b[vs] == ' ' || b[vs] == '\t'))
      vs++;
    while (ve > vs && (b[ve - 1] == ' ' || b[ve - 1] == '\t'))
      ve--;
    if (r->nhdr == TS_MAX_HEADERS)
      return -431;
    r->hname[r->nhdr] = (ts_str){b + pos, q - pos};
    r->hval[r->nhdr] = (ts_str){b + vs, ve - vs};
    if (!ts_hdr_safe(r->hval[r->nhdr]))
      return -400;
    r->nhdr++;
    pos = lf + 1;
  }

  /* semantics */
  int64_t clen = -1;
  int chunked = 0, conn_close = 0, conn_keep = 0, expect = 0;
  for (size_t h = 0; h < r->nhdr; h++) {
    ts_str nm = r->hname[h], v = r->hval[h];
    if (ts_ieq(nm, "content-length")) {
      uint64_t x;
      if (ts_u64(v, &x) != 0)
        return -400;
      if (x > TS_MAX_BODY)
        return -413;
      if (clen >= 0 && (uint64_t)clen != x)
        return -400;
      clen = (int64_t)x;
    } else if (ts_ieq(nm, "transfer-encoding")) {
      if (!ts_ieq(v, "chunked") || chunked)
        return -400;
      chunked = 1;
    } else if (ts_ieq(nm, "connection")) {
      size_t a = 0;
      while (a < v.n) {
        size_t z = a;
        while (z < v.n && v.p[z] != ',')
          z++;
        size_t s0 = a, s1 = z;
        while (s0 < s1 && (v.p[s0] == ' ' || v.p[s0] == '\t'))
          s0++;
        while (s1 > s0 && (v.p[s1 - 1] == ' ' || v.p[s1 - 1] == '\t'))
          s1--;
        ts_str tok = {v.p + s0, s1 - s0};
        if (ts_ieq(tok, "close"))
          conn_close = 1;
        else if (ts_ieq(tok, "keep-alive"))
          conn_keep = 1;
        a = z + 1;
      }
    } else if (ts_ieq(nm, "expect")) {
      expect = ts_ieq(v, "100-continue");
    }
  }
  if (chunked && clen >= 0)
    return -400;

  /* body */
  size_t total;
  if (chunked) {
    size_t dlen = 0, wire = 0;
    int rc = ts_chunked(b + hend, n - hend, 0, &dlen, &wire);
    if (rc < 0)
      return -400;
    if (rc == 0) {
      if (expect && !c->sent_continue) {
        c->sent_continue = 1;
        ts_send(c, "HTTP/1.1 100 Continue\r\n\r\n", 25, NULL);
      }
      return 0;
    }
    ts_chunked(b + hend, n - hend, 1, &dlen, &wire);
    r->body = b + hend;
    r->body_len = dlen;
    total = hend + wire;
  } else {
    size_t cl = clen < 0 ? 0 : (size_t)clen;
    if (n - hend < cl) {
      if (expect && !c->sent_continue) {
        c->sent_continue = 1;
        ts_send(c, "HTTP/1.1 100 Continue\r\n\r\n", 25, NULL);
      }
      ts_rbuf_grow(c, hend + cl); /* invalidates b; nothing uses it after this */
      return 0;
    }
    r->body = b + hend;
    r->body_len = cl;
    total = hend + cl;
  }

  const char *qm = memchr(target.p, '?', target.n);
  if (qm) {
    r->path = (ts_str){target.p, (size_t)(qm - target.p)};
    r->query = (ts_str){qm + 1, target.n - r->path.n - 1};
  } else {
    r->path = target;
    r->query = (ts_str){target.p + target.n, 0};
  }
  ts_parse_query(c, r);
  r->keep_alive = minor == 1 ? !conn_close : (conn_keep && !conn_close);
  r->head = ts_eq(r->method, "HEAD");
  *consumed = total;
  return 1;
}

/* ---- writing --------------------------------------------------------- */

static void ts_on_write(uv_write_t *req, int status) {
  ts_wreq *w = (ts_wreq *)req;
  ts_conn *c = req->data;
  ts_done_fn done = w->done;
  free(w);
  if (status < 0) {
    ts_conn_close(c, 0);
    return;
  }
  if (done && !c->closing)
    done(c);
}

/*
 * Queue n bytes.  Without a callback the bytes are first tried directly on
 * the socket, and only the remainder is copied into a write request; libuv
 * refuses a direct write while others are queued, so order is kept.
 */
static void ts_send(ts_conn *c, const char *p, size_t n, ts_done_fn done) {
  size_t off = 0;
  if (c->closing || c->shutting)
    return;
  if (!done) {
    if (n == 0)
      return;
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    int r = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (r >= 0)
      off = (size_t)r;
    else if (r != UV_EAGAIN) {
      ts_conn_close(c, 0);
      return;
    }
    if (off == n)
      return;
  }
  ts_wreq *w = ts_xrealloc(NULL, sizeof *w + (n - off));
  if (n > off)
    memcpy(w->data, p + off, n - off);
  w->req.data = c;
  w->done = done;
  w->buf = uv_buf_init(w->data, (unsigned)(n - off));
  if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &w->buf, 1, ts_on_write) != 0) {
    free(w);
    ts_conn_close(c, 0);
  }
}

static void ts_flush(ts_conn *c) {
  ts_send(c, c->obuf.p, c->obuf.len, NULL);
  c->obuf.len = 0;
}

static const char *ts_reason(int code) {
  switch (code) {
  case 100: return "Continue";
  case 200: return "OK";
  case 201: return "Created";
  case 202: return "Accepted";
  case 204: return "No Content";
  case 206: return "Partial Content";
  case 301: return "Moved Permanently";
  case 302: return "Found";
  case 304: return "Not Modified";
  case 307: return "Temporary Redirect";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 402: return "Payment Required";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 413: return "Content Too Large";
  case 422: return "Unprocessable Content";
  case 425: return "Too Early";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 529: return "Overloaded";
  default: return "Status";
  }
}

static int ts_no_body_status(int code) { return code < 200 || code == 204 || code == 304; }

static void ts_status_line(ts_conn *c, int code) {
  c->obuf.len = 0;
  ts_buf_addf(&c->obuf, "HTTP/1.1 %d %s\r\n", code, ts_reason(code));
}

static void ts_header(ts_conn *c, const char *name, ts_str v) {
  ts_buf_adds(&c->obuf, name);
  ts_buf_add(&c->obuf, ": ", 2);
  ts_buf_add(&c->obuf, v.p, v.n);
  ts_buf_add(&c->obuf, "\r\n", 2);
}

/* Content-Type, framing (a length, TS_CHUNKED or TS_NOLEN), Connection, blank line. */
static void ts_head_end(ts_conn *c, const char *ctype, int64_t clen) {
  ts_buf *o = &c->obuf;
  if (ctype) {
    ts_buf_add(o, "Content-Type: ", 14);
    ts_buf_adds(o, ctype);
    ts_buf_add(o, "\r\n", 2);
  }
  if (clen >= 0)
    ts_buf_addf(o, "Content-Length: %" PRId64 "\r\n", clen);
  else if (clen == TS_CHUNKED)
    ts_buf_adds(o, "Transfer-Encoding: chunked\r\n");
  ts_buf_adds(o, c->keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n");
}

/* Finish a response begun with ts_status_line() and send it. */
static void ts_finish(ts_conn *c, int code, const char *ctype, const char *body, size_t n) {
  if (ts_no_body_status(code)) {
    ts_head_end(c, NULL, TS_NOLEN);
  } else {
    ts_head_end(c, ctype, (int64_t)n);
    if (!c->head)
      ts_buf_add(&c->obuf, body, n);
  }
  ts_flush(c);
}

static void ts_reply(ts_conn *c, int code, const char *ctype, const char *body, size_t n) {
  ts_status_line(c, code);
  ts_finish(c, code, ctype, body, n);
}

static void ts_text(ts_conn *c, int code, const char *body) {
  ts_reply(c, code, "text/plain", body, strlen(body));
}

/* ---- connection lifecycle ------------------------------------------- */

static void ts_on_close(uv_handle_t *h) {
  ts_conn *c = h->data;
  if (--c->refs > 0)
    return;
  free(c->rbuf);
  free(c->obuf.p);
  free(c->jbuf.p);
  free(c->qbuf);
  free(c->fdata);
  free(c);
}

/* Close now; with reset, abort with RST (SO_LINGER 0) instead of FIN. */
static void ts_conn_close(ts_conn *c, int reset) {
  ts_server *s = c->srv;
  if (c->closing)
    return;
  c->closing = 1;
  if (c->counted)
    s->closed++;
  if (c->stall) {
    s->stall_open--;
    c->stall = 0;
  }
  if (c->prev)
    c->prev->next = c->next;
  else
    s->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  c->prev = c->next = NULL;
  c->refs = 2;
  uv_close((uv_handle_t *)&c->timer, ts_on_close);
  if (!reset || uv_tcp_close_reset(&c->tcp, ts_on_close) != 0)
    uv_close((uv_handle_t *)&c->tcp, ts_on_close);
}

static void ts_on_linger(uv_timer_t *t) { ts_conn_close(t->data, 0); }

static void ts_on_shutdown(uv_shutdown_t *req, int status) {
  ts_conn *c = req->data;
  if (c->closing)
    return;
  if (status < 0 || c->got_eof) {
    ts_conn_close(c, 0);
    return;
  }
  /* Our FIN is out; give the peer a moment to send its own, so that a late
   * byte from it cannot turn our close into an RST that eats the response. */
  c->shut_done = 1;
  uv_timer_start(&c->timer, ts_on_linger, TS_LINGER_MS, 0);
}

/* Close gracefully: FIN after all queued writes have gone out. */
static void ts_conn_shutdown(ts_conn *c) {
  if (c->closing || c->shutting)
    return;
  c->shutting = 1;
  c->busy = 1;
  c->rlen = 0;
  uv_timer_stop(&c->timer);
  c->sreq.data = c;
  if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, ts_on_shutdown) != 0)
    ts_conn_close(c, 0);
}

/* An asynchronous response has been fully queued. */
static void ts_response_done(ts_conn *c) {
  if (c->closing)
    return;
  c->busy = 0;
  c->mode = TS_M_NONE;
  free(c->fdata);
  c->fdata = NULL;
  if (!c->keep_alive)
    ts_conn_shutdown(c);
  else if (c->rlen)
    ts_process(c);
}

/* Start the connection timer unless the connection is going away. */
static int ts_arm(ts_conn *c, uv_timer_cb cb, uint64_t ms) {
  if (c->closing || c->shutting)
    return 0;
  uv_timer_start(&c->timer, cb, ms, 0);
  return 1;
}

/* ---- modes ----------------------------------------------------------- */

static void ts_on_delay(uv_timer_t *t) {
  ts_conn *c = t->data;
  ts_text(c, 200, c->reply);
  ts_response_done(c);
}

static int ts_h_delay(ts_conn *c, uint64_t ms, const char *reply) {
  c->mode = TS_M_DELAY;
  c->reply = reply;
  return ts_arm(c, ts_on_delay, ms);
}

/* /status/<code> and failing /flaky attempts. */
static int ts_h_status(ts_conn *c, const ts_req *r, uint64_t code) {
  const ts_str *ra = ts_param(r, "retry_after"), *ram = ts_param(r, "retry_after_ms");
  const ts_str *sr = ts_param(r, "should_retry"), *body = ts_param(r, "body");
  const ts_str *ct = ts_param(r, "ctype");
  char dflt[96];
  if (code < 200 || code > 599 || (ra && !ts_hdr_safe(*ra)) || (ram && !ts_hdr_safe(*ram)) ||
      (ct && !ts_hdr_safe(*ct)) || (sr && !ts_eq(*sr, "true") && !ts_eq(*sr, "false"))) {
    ts_text(c, 400, "bad status request");
    return 0;
  }
  ts_status_line(c, (int)code);
  if (ra)
    ts_header(c, "Retry-After", *ra);
  if (ram)
    ts_header(c, "retry-after-ms", *ram);
  if (sr)
    ts_header(c, "x-should-retry", *sr);
  size_t n;
  const char *p;
  if (body) {
    p = body->p;
    n = body->n;
  } else {
    n = (size_t)snprintf(dflt, sizeof dflt,
                         "{\"error\":{\"message\":\"status %d\",\"type\":\"test_error\"}}", (int)code);
    p = dflt;
  }
  ts_finish(c, (int)code, ct ? ct->p : "application/json", p, n);
  return 0;
}

static uint64_t ts_hash(const char *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
  return h;
}

static ts_flaky *ts_flaky_get(ts_server *s, ts_str key) {
  ts_flaky **slot = &s->flaky[ts_hash(key.p, key.n) % TS_FLAKY_BUCKETS];
  for (ts_flaky *f = *slot; f; f = f->next)
    if (f->klen == key.n && memcmp(f->key, key.p, key.n) == 0)
      return f;
  ts_flaky *f = ts_xrealloc(NULL, sizeof *f + key.n);
  f->next = *slot;
  f->count = 0;
  f->klen = key.n;
  memcpy(f->key, key.p, key.n);
  *slot = f;
  return f;
}

/* /flaky/<key>/<n>/<code> */
static int ts_h_flaky(ts_conn *c, const ts_req *r, ts_str rest) {
  const char *s2 = NULL, *s1 = NULL; /* last and second-to-last '/' */
  for (size_t i = rest.n; i-- > 0;) {
    if (rest.p[i] != '/')
      continue;
    if (!s2)
      s2 = rest.p + i;
    else {
      s1 = rest.p + i;
      break;
    }
  }
  uint64_t n, code;
  if (!s1 || s1 == rest.p || ts_u64((ts_str){s1 + 1, (size_t)(s2 - s1 - 1)}, &n) != 0 ||
      ts_u64((ts_str){s2 + 1, (size_t)(rest.p + rest.n - s2 - 1)}, &code) != 0 || code < 200 ||
      code > 599) {
    ts_text(c, 400, "bad flaky request");
    return 0;
  }
  ts_flaky *f = ts_flaky_get(c->srv, (ts_str){rest.p, (size_t)(s1 - rest.p)});
  uint64_t attempt = ++f->count;
  if (attempt <= n)
    return ts_h_status(c, r, code);
  char body[64];
  int bn = snprintf(body, sizeof body, "{\"ok\":true,\"attempt\":%" PRIu64 "}", attempt);
  ts_reply(c, 200, "application/json", body, (size_t)bn);
  return 0;
}

static void ts_on_sse(uv_timer_t *t);

/* Send the next /sse event; returns 1 if more are scheduled. */
static int ts_sse_step(ts_conn *c) {
  if (c->left > 0) {
    char num[24];
    int dn = snprintf(num, sizeof num, "%" PRIu64, c->idx);
    size_t plen = 6 + c->text.n + 1 + (size_t)dn + 2;
    ts_buf_addf(&c->obuf, "%zx\r\ndata: ", plen);
    ts_buf_add(&c->obuf, c->text.p, c->text.n);
    ts_buf_add(&c->obuf, " ", 1);
    ts_buf_add(&c->obuf, num, (size_t)dn);
    ts_buf_add(&c->obuf, "\n\n\r\n", 4);
    c->idx++;
    c->left--;
  }
  if (c->left == 0) {
    ts_buf_add(&c->obuf, "0\r\n\r\n", 5);
    ts_flush(c);
    return 0;
  }
  ts_flush(c);
  return ts_arm(c, ts_on_sse, c->interval);
}

static void ts_on_sse(uv_timer_t *t) {
  ts_conn *c = t->data;
  if (!ts_sse_step(c))
    ts_response_done(c);
}

static int ts_h_sse(ts_conn *c, const ts_req *r) {
  uint64_t n, interval;
  const ts_str *data = ts_param(r, "data");
  if (ts_param_u64(r, "n", 3, &n) || ts_param_u64(r, "interval", 10, &interval)) {
    ts_text(c, 400, "bad sse request");
    return 0;
  }
  c->mode = TS_M_SSE;
  c->left = n;
  c->idx = 0;
  c->interval = interval;
  c->text = data ? *data : (ts_str){"event", 5}; /* qbuf stays put until the next request */
  ts_status_line(c, 200);
  ts_buf_adds(&c->obuf, "Cache-Control: no-cache\r\n");
  ts_head_end(c, "text/event-stream", TS_CHUNKED);
  if (c->head) {
    ts_flush(c);
    return 0;
  }
  return ts_sse_step(c);
}

static void ts_on_drip(uv_timer_t *t) {
  ts_conn *c = t->data;
  ts_send(c, "x", 1, NULL);
  if (--c->left == 0 || !ts_arm(c, ts_on_drip, c->interval))
    ts_response_done(c);
}

static int ts_h_drip(ts_conn *c, const ts_req *r) {
  uint64_t n, interval;
  if (ts_param_u64(r, "bytes", 20, &n) || ts_param_u64(r, "interval", 100, &interval)) {
    ts_text(c, 400, "bad drip request");
    return 0;
  }
  ts_status_line(c, 200);
  ts_head_end(c, "text/plain", (int64_t)n);
  ts_flush(c);
  if (n == 0 || c->head)
    return 0;
  c->mode = TS_M_DRIP;
  c->left = n;
  c->interval = interval;
  return ts_arm(c, ts_on_drip, interval);
}

static void ts_big_pump(ts_conn *c);

static void ts_on_big_write(uv_write_t *req, int status) {
  ts_conn *c = req->data;
  if (status < 0) {
    ts_conn_close(c, 0);
    return;
  }
  if (c->closing)
    return;
  if (c->last)
    ts_response_done(c);
  else
    ts_big_pump(c);
}

/* Write the next slice of a /big body straight from the shared buffers. */
static void ts_big_pump(ts_conn *c) {
  ts_server *s = c->srv;
  uv_buf_t bufs[TS_BIG_BUFS];
  unsigned nb = 0;
  if (!c->chunked) {
    while (nb < TS_BIG_BUFS && c->left > 0) {
      size_t k = c->left < TS_ABUF_SIZE ? (size_t)c->left : TS_ABUF_SIZE;
      bufs[nb++] = uv_buf_init(s->abuf, (unsigned)k);
      c->left -= k;
    }
    c->last = c->left == 0;
  } else if (c->left >= TS_CHUNK) {
    uint64_t k = c->left / TS_CHUNK;
    if (k > TS_CBLOCK_N)
      k = TS_CBLOCK_N;
    bufs[nb++] = uv_buf_init(s->cblock, (unsigned)(k * TS_CSTRIDE));
    c->left -= k * TS_CHUNK;
  } else {
    if (c->left > 0) {
      int hn = snprintf(c->chdr, sizeof c->chdr, "%x\r\n", (unsigned)c->left);
      bufs[nb++] = uv_buf_init(c->chdr, (unsigned)hn);
      bufs[nb++] = uv_buf_init(s->abuf, (unsigned)c->left);
      bufs[nb++] = uv_buf_init((char *)"\r\n0\r\n\r\n", 7);
    } else {
      bufs[nb++] = uv_buf_init((char *)"0\r\n\r\n", 5);
    }
    c->left = 0;
    c->last = 1;
  }
  c->bigreq.data = c;
  if (uv_write(&c->bigreq, (uv_stream_t *)&c->tcp, bufs, nb, ts_on_big_write) != 0)
    ts_conn_close(c, 0);
}

static int ts_h_big(ts_conn *c, const ts_req *r, ts_str rest) {
  uint64_t n;
  const ts_str *ch = ts_param(r, "chunked");
  if (ts_u64(rest, &n) != 0 || n > (UINT64_C(1) << 50)) {
    ts_text(c, 400, "bad big request");
    return 0;
  }
  c->chunked = ch && (ts_eq(*ch, "1") || ts_eq(*ch, "true"));
  ts_status_line(c, 200);
  ts_head_end(c, "application/octet-stream", c->chunked ? TS_CHUNKED : (int64_t)n);
  ts_flush(c);
  if (c->head || (n == 0 && !c->chunked) || c->closing)
    return 0;
  c->mode = TS_M_BIG;
  c->left = n;
  c->last = 0;
  ts_big_pump(c);
  return 1;
}

static void ts_reset_now(ts_conn *c) { ts_conn_close(c, 1); }

static int ts_h_reset(ts_conn *c, const ts_req *r) {
  uint64_t after;
  if (ts_param_u64(r, "after", 0, &after) || after > 1000000) {
    ts_text(c, 400, "bad reset request");
    return 0;
  }
  ts_status_line(c, 200);
  ts_head_end(c, "application/octet-stream", 1000000);
  while (after > 0) {
    size_t k = after < TS_ABUF_SIZE ? (size_t)after : TS_ABUF_SIZE;
    ts_buf_add(&c->obuf, c->srv->abuf, k);
    after -= k;
  }
  c->mode = TS_M_RESET;
  ts_send(c, c->obuf.p, c->obuf.len, ts_reset_now);
  c->obuf.len = 0;
  return 1;
}

static int ts_h_stall(ts_conn *c) {
  ts_status_line(c, 200);
  ts_head_end(c, "text/plain", 100);
  ts_flush(c);
  if (c->closing)
    return 0;
  c->mode = TS_M_STALL;
  c->stall = 1;
  c->srv->stall_open++;
  return 1; /* busy until the client goes away */
}

/* /echo[/...][?status=S]: the request as JSON, with status S (default 200),
   so an error response can carry the request's own headers back. */
static int ts_h_echo(ts_conn *c, const ts_req *r) {
  uint64_t status;
  if (ts_param_u64(r, "status", 200, &status) || status < 200 || status > 599 ||
      ts_no_body_status((int)status)) {
    ts_text(c, 400, "bad echo request");
    return 0;
  }
  ts_buf *j = &c->jbuf;
  j->len = 0;
  ts_buf_adds(j, "{\"method\":");
  ts_json_str(j, r->method.p, r->method.n, 0);
  ts_buf_adds(j, ",\"path\":");
  ts_json_str(j, r->path.p, r->path.n, 0);
  ts_buf_adds(j, ",\"query\":");
  ts_json_str(j, r->query.p, r->query.n, 0);
  ts_buf_adds(j, ",\"headers\":{");
  for (size_t i = 0; i < r->nhdr; i++) {
    if (i)
      ts_buf_add(j, ",", 1);
    ts_json_str(j, r->hname[i].p, r->hname[i].n, 1);
    ts_buf_add(j, ":", 1);
    ts_json_str(j, r->hval[i].p, r->hval[i].n, 0);
  }
  ts_buf_adds(j, "},\"body\":");
  ts_json_str(j, r->body, r->body_len, 0);
  ts_buf_add(j, "}", 1);
  ts_reply(c, (int)status, "application/json", j->p, j->len);
  j->len = 0;
  return 0;
}

static int ts_h_stats(ts_conn *c) {
  ts_server *s = c->srv;
  char body[256];
  int n = snprintf(body, sizeof body,
                   "{\"accepted\":%" PRIu64 ",\"open\":%" PRIu64 ",\"closed\":%" PRIu64
                   ",\"stall_open\":%" PRIu64 ",\"requests\":%" PRIu64 "}",
                   s->accepted, s->accepted - s->closed, s->closed, s->stall_open, s->requests);
  ts_reply(c, 200, "application/json", body, (size_t)n);
  return 0;
}

/* Read <files>/<name> into memory; returns 0 or an HTTP status. */
static int ts_load_file(ts_server *s, ts_str name, char **data, size_t *len) {
  char path[4096];
  struct stat st;
  if (!s->files_dir)
    return 404;
  if (name.n == 0 || strlen(name.p) != name.n || name.p[0] == '/')
    return 403;
  for (const char *p = name.p;;) {
    const char *e = strchr(p, '/');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (l == 2 && p[0] == '.' && p[1] == '.')
      return 403;
    if (!e)
      break;
    p = e + 1;
  }
  int pn = snprintf(path, sizeof path, "%s/%s", s->files_dir, name.p);
  if (pn < 0 || (size_t)pn >= sizeof path)
    return 403;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT || errno == ENOTDIR ? 404 : 403;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return 403;
  }
  if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > TS_MAX_FILE) {
    close(fd);
    return S_ISDIR(st.st_mode) ? 404 : 403;
  }
  char *buf = ts_xrealloc(NULL, (size_t)st.st_size + 1);
  size_t got = 0;
  while (got < (size_t)st.st_size) {
    ssize_t k = read(fd, buf + got, (size_t)st.st_size - got);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    got += (size_t)k;
  }
  close(fd);
  *data = buf;
  *len = got;
  return 0;
}

static void ts_on_file(uv_timer_t *t);
static void ts_on_gate_timeout(uv_timer_t *t);

/* gate=KEY[&hold=MS] of /file and /reflect: after the first piece the rest
   waits for /release?gate=KEY (or hold ms, 10 s by default) instead of the
   pause, so a client that reads the first piece before it releases the
   rest sees the pieces apart however slow it runs. */
static int ts_set_gate(ts_conn *c, const ts_req *r) {
  const ts_str *gate = ts_param(r, "gate");
  c->gate[0] = '\0';
  if (ts_param_u64(r, "hold", 10000, &c->hold))
    return -1;
  if (!gate)
    return 0;
  if (gate->n == 0 || gate->n >= sizeof c->gate)
    return -1;
  memcpy(c->gate, gate->p, gate->n);
  c->gate[gate->n] = '\0';
  return 0;
}

/* Send the next /file piece as one chunk; returns 1 if more are scheduled. */
static int ts_file_step(ts_conn *c) {
  size_t end = c->flen;
  if (c->fmode == TS_F_SPLIT && !c->fphase)
    end = c->fsplit;
  else if (c->fmode == TS_F_CHUNK && c->flen - c->foff > c->fstep)
    end = c->foff + c->fstep;
  c->fphase = 1;
  if (end > c->foff) {
    ts_buf_addf(&c->obuf, "%zx\r\n", end - c->foff);
    ts_buf_add(&c->obuf, c->fdata + c->foff, end - c->foff);
    ts_buf_add(&c->obuf, "\r\n", 2);
    c->foff = end;
  }
  if (c->foff >= c->flen) {
    if (c->fcut) {
      /* the server "dies" mid-body: no last chunk, just the close */
      ts_flush(c);
      c->keep_alive = 0;
      ts_conn_shutdown(c);
      return 0;
    }
    ts_buf_add(&c->obuf, "0\r\n\r\n", 5);
    ts_flush(c);
    return 0;
  }
  ts_flush(c);
  ts_buf_trim(&c->obuf);
  if (c->gate[0])
    return ts_arm(c, ts_on_gate_timeout, c->hold); /* parked until /release */
  return ts_arm(c, ts_on_file, c->interval);
}

static void ts_on_file(uv_timer_t *t) {
  ts_conn *c = t->data;
  if (!ts_file_step(c))
    ts_response_done(c);
}

/* Nobody released a gated response in time: it goes on, so a client that
   never asks for /release fails its checks instead of hanging. */
static void ts_on_gate_timeout(uv_timer_t *t) {
  ts_conn *c = t->data;
  c->gate[0] = '\0';
  if (!ts_file_step(c))
    ts_response_done(c);
}

/* /file?path=NAME: the file as a chunked body; split=N or chunk=N with
   pause=MS schedule the pieces; cut=N sends only the first N bytes and then
   closes the connection without the last chunk (a server dying mid-body). */
static int ts_h_file(ts_conn *c, const ts_req *r) {
  const ts_str *name = ts_param(r, "path"), *ct = ts_param(r, "ctype");
  const ts_str *split = ts_param(r, "split"), *chunk = ts_param(r, "chunk");
  const ts_str *cut = ts_param(r, "cut");
  uint64_t status, pause, off = 0, step = 0, cutn = 0;
  if (!name || ts_param_u64(r, "status", 200, &status) || status < 200 || status > 599 ||
      ts_no_body_status((int)status) || ts_param_u64(r, "pause", 5, &pause) ||
      (split && ts_u64(*split, &off)) || (chunk && (ts_u64(*chunk, &step) || step == 0)) ||
      (ct && !ts_hdr_safe(*ct)) || (cut && ts_u64(*cut, &cutn))) {
    ts_text(c, 400, "bad file request");
    return 0;
  }
  char *data = NULL;
  size_t len = 0;
  int rc = ts_load_file(c->srv, *name, &data, &len);
  if (rc) {
    ts_text(c, rc, rc == 404 ? "not found" : "forbidden");
    return 0;
  }
  free(c->fdata);
  c->fdata = data;
  c->fcut = cut != NULL;
  if (cut && cutn < len)
    len = (size_t)cutn;
  c->flen = len;
  c->foff = 0;
  c->fphase = 0;
  c->fsplit = off < len ? (size_t)off : len;
  c->fstep = step > len ? (len ? len : 1) : (size_t)step;
  c->fmode = split ? TS_F_SPLIT : chunk ? TS_F_CHUNK : TS_F_WHOLE;
  c->interval = pause;
  if (ts_set_gate(c, r) != 0) {
    ts_text(c, 400, "bad gate or hold");
    return 0;
  }
  c->mode = TS_M_FILE;
  ts_status_line(c, (int)status);
  ts_buf_adds(&c->obuf, "Cache-Control: no-cache\r\n");
  ts_head_end(c, ct ? ct->p : "text/event-stream", TS_CHUNKED);
  if (c->head) {
    ts_flush(c);
    return 0;
  }
  return ts_file_step(c);
}

/* ---- /reflect: a secret echoed back in the encoding a writer might use -- */

/* Code point of the valid UTF-8 sequence at s (len l from ts_utf8_seq). */
static unsigned ts_utf8_cp(const unsigned char *s, size_t l) {
  unsigned cp = l == 2 ? (s[0] & 0x1Fu) : l == 3 ? (s[0] & 0x0Fu) : (s[0] & 0x07u);
  for (size_t k = 1; k < l; k++)
    cp = (cp << 6) | (s[k] & 0x3Fu);
  return cp;
}

/* \uXXXX for cp (a surrogate pair above U+FFFF). */
static void ts_add_u(ts_buf *b, unsigned cp) {
  if (cp >= 0x10000) {
    cp -= 0x10000;
    ts_buf_addf(b, "\\u%04X\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
  } else {
    ts_buf_addf(b, "\\u%04x", cp);
  }
}

/* Append v encoded as enc; 0, or -1 for an unknown encoding. pre bytes
   ("@@") go in front of v for the Base64 and hex forms (the three Base64
   alignments); pad = 0 drops Base64 padding. */
static int ts_encode(ts_buf *b, const char *enc, const unsigned char *v, size_t n, uint64_t pre, int pad) {
  static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  static const char b64u[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  if (!strcmp(enc, "raw")) {
    ts_buf_add(b, v, n);
  } else if (!strcmp(enc, "pct") || !strcmp(enc, "pctl") || !strcmp(enc, "plus")) {
    for (size_t i = 0; i < n; i++) {
      unsigned ch = v[i];
      if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
          (ch && strchr("-._~", (int)ch)))
        ts_buf_add(b, v + i, 1);
      else if (ch == ' ' && !strcmp(enc, "plus"))
        ts_buf_add(b, "+", 1);
      else
        ts_buf_addf(b, !strcmp(enc, "pctl") ? "%%%02x" : "%%%02X", ch);
    }
  } else if (!strcmp(enc, "json") || !strcmp(enc, "jsona") || !strcmp(enc, "jsonu")) {
    /* json: a JSON string's body as JavaScript writes it (non-ASCII raw);
       jsona: non-ASCII as \u escapes (Python's ensure_ascii); jsonu: every
       character as \u. A byte that is not UTF-8 becomes \u00XX. */
    int all = !strcmp(enc, "jsonu"), ascii = all || !strcmp(enc, "jsona");
    for (size_t i = 0; i < n; i++) {
      unsigned ch = v[i];
      size_t l = ch >= 0x80 ? ts_utf8_seq(v + i, n - i) : 1;
      if (ch >= 0x80 && l == 0) {
        ts_add_u(b, ch);
      } else if (ch >= 0x80) {
        if (ascii)
          ts_add_u(b, ts_utf8_cp(v + i, l));
        else
          ts_buf_add(b, v + i, l);
        i += l - 1;
      } else if (all || ch < 0x20 || ch == 0x7f) {
        ts_add_u(b, ch);
      } else if (ch == '"' || ch == '\\') {
        ts_buf_add(b, "\\", 1);
        ts_buf_add(b, v + i, 1);
      } else {
        ts_buf_add(b, v + i, 1);
      }
    }
  } else if (!strcmp(enc, "html") || !strcmp(enc, "htmlx") || !strcmp(enc, "htmln")) {
    /* html: &#DDD; for every character; htmlx: &#xHH;; htmln: only & < > " '
       as named or numeric references (what an HTML escaper does) */
    for (size_t i = 0; i < n; i++) {
      unsigned ch = v[i];
      size_t l = ch >= 0x80 ? ts_utf8_seq(v + i, n - i) : 1;
      unsigned cp = ch >= 0x80 && l ? ts_utf8_cp(v + i, l) : ch;
      if (l == 0)
        l = 1;
      if (!strcmp(enc, "htmln")) {
        const char *ref = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&quot;"
                          : ch == '\'' ? "&#x27;" : NULL;
        if (ref)
          ts_buf_adds(b, ref);
        else
          ts_buf_add(b, v + i, l);
      } else {
        ts_buf_addf(b, !strcmp(enc, "html") ? "&#%u;" : "&#x%X;", cp);
      }
      i += l - 1;
    }
  } else if (!strcmp(enc, "b64") || !strcmp(enc, "b64url")) {
    const char *al = !strcmp(enc, "b64") ? b64 : b64u;
    size_t m = (size_t)pre + n;
    unsigned char *t = malloc(m ? m : 1);
    if (!t)
      return -1;
    memset(t, '@', (size_t)pre);
    memcpy(t + pre, v, n);
    for (size_t i = 0; i < m; i += 3) {
      unsigned x = (unsigned)t[i] << 16 | (i + 1 < m ? (unsigned)t[i + 1] << 8 : 0) | (i + 2 < m ? t[i + 2] : 0);
      size_t k = i + 2 < m ? 4 : i + 1 < m ? 3 : 2;
      for (size_t j = 0; j < 4; j++) {
        if (j < k)
          ts_buf_add(b, &al[(x >> (18 - 6 * j)) & 63], 1);
        else if (pad)
          ts_buf_add(b, "=", 1);
      }
    }
    free(t);
  } else if (!strcmp(enc, "hex") || !strcmp(enc, "HEX")) {
    for (uint64_t i = 0; i < pre; i++)
      ts_buf_adds(b, "40");
    for (size_t i = 0; i < n; i++)
      ts_buf_addf(b, !strcmp(enc, "hex") ? "%02x" : "%02X", v[i]);
  } else {
    return -1;
  }
  return 0;
}

/* /reflect?h=NAME&enc=E[&pre=N][&pad=0][&wrap=text|json|sse][&bin=1]
   [&split=K&pause=MS[&gate=KEY]][&status=S]: the value of request header NAME (the
   body without h) echoed back, encoded as E (raw, pct, pctl, plus, json,
   jsona, jsonu, html, htmlx, htmln, b64, b64url, hex, HEX; see ts_encode),
   inside "got <...> ok" (wrap=text, the default), a JSON object
   {"echo": ...} (json), or an OpenAI-style SSE stream whose content
   holds it (sse). bin=1 puts two bytes that are not UTF-8 in front. With
   split=K the body goes in two chunks cut K bytes into the encoded value,
   pause ms apart (a secret cut across two chunks of a stream); with
   gate=KEY as well, the second waits for /release?gate=KEY (ts_set_gate). */
static int ts_h_reflect(ts_conn *c, const ts_req *r) {
  const ts_str *h = ts_param(r, "h"), *enc = ts_param(r, "enc"), *wrap = ts_param(r, "wrap");
  const ts_str *split = ts_param(r, "split"), *bin = ts_param(r, "bin");
  uint64_t pre, pad, pause, status, cut = 0;
  if (ts_param_u64(r, "pre", 0, &pre) || pre > 2 || ts_param_u64(r, "pad", 1, &pad) ||
      ts_param_u64(r, "pause", 20, &pause) || ts_param_u64(r, "status", 200, &status) || status < 200 ||
      status > 599 || ts_no_body_status((int)status) || (split && ts_u64(*split, &cut)) || (enc && enc->n > 15) ||
      (h && h->n > 255)) {
    ts_text(c, 400, "bad reflect request");
    return 0;
  }
  const unsigned char *v = (const unsigned char *)r->body;
  size_t vn = r->body_len;
  if (h) {
    char name[256];
    memcpy(name, h->p, h->n);
    name[h->n] = '\0';
    v = NULL;
    for (size_t i = 0; i < r->nhdr && !v; i++)
      if (ts_ieq(r->hname[i], name)) {
        v = (const unsigned char *)r->hval[i].p;
        vn = r->hval[i].n;
      }
    if (!v) {
      ts_text(c, 400, "reflect: no such request header");
      return 0;
    }
  }
  char e[16] = "raw";
  if (enc) {
    memcpy(e, enc->p, enc->n);
    e[enc->n] = '\0';
  }
  ts_buf enc_b = {0}, body = {0};
  ts_buf_adds(&enc_b, "got <");
  if (ts_encode(&enc_b, e, v, vn, pre, pad != 0) != 0) {
    free(enc_b.p);
    ts_text(c, 400, "reflect: unknown encoding");
    return 0;
  }
  ts_buf_adds(&enc_b, "> ok");
  const char *ctype = "text/plain; charset=utf-8";
  size_t at; /* where the encoded value starts in the body */
  if (bin && ts_eq(*bin, "1"))
    ts_buf_add(&body, "\xff\xfe ", 3);
  if (wrap && ts_eq(*wrap, "json")) {
    ctype = "application/json";
    ts_buf_adds(&body, "{\"echo\":");
    at = body.len + 1 + 5;
    ts_json_str(&body, enc_b.p, enc_b.len, 0);
    ts_buf_adds(&body, "}");
  } else if (wrap && ts_eq(*wrap, "sse")) {
    ctype = "text/event-stream";
    ts_buf_adds(&body, "data: {\"id\":\"r1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,"
                       "\"delta\":{\"role\":\"assistant\",\"content\":");
    at = body.len + 1 + 5;
    ts_json_str(&body, enc_b.p, enc_b.len, 0);
    ts_buf_adds(&body, "},\"finish_reason\":null}]}\n\ndata: {\"id\":\"r1\",\"object\":\"chat.completion.chunk\","
                       "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
  } else {
    at = body.len + 5;
    ts_buf_add(&body, enc_b.p, enc_b.len);
  }
  free(enc_b.p);
  if (!split) {
    ts_reply(c, (int)status, ctype, body.p, body.len);
    free(body.p);
    return 0;
  }
  /* two chunks, cut inside the value: the /file machinery sends them */
  free(c->fdata);
  c->fdata = body.p;
  c->flen = body.len;
  c->fcut = 0;
  c->foff = 0;
  c->fphase = 0;
  c->fsplit = at + cut < body.len ? at + (size_t)cut : body.len;
  c->fstep = 0;
  c->fmode = TS_F_SPLIT;
  c->interval = pause;
  if (ts_set_gate(c, r) != 0) {
    ts_text(c, 400, "bad gate or hold");
    return 0;
  }
  c->mode = TS_M_FILE;
  ts_status_line(c, (int)status);
  ts_buf_adds(&c->obuf, "Cache-Control: no-cache\r\n");
  ts_head_end(c, ctype, TS_CHUNKED);
  if (c->head) {
    ts_flush(c);
    return 0;
  }
  return ts_file_step(c);
}

/* /release[?gate=KEY]: every gated /file or /reflect response (of that
   key; without one, of any key) parked after its first piece sends the
   rest; answers with how many were released. */
static int ts_h_release(ts_conn *c, const ts_req *r) {
  const ts_str *key = ts_param(r, "gate");
  unsigned n = 0;
  for (ts_conn *o = c->srv->conns; o; o = o->next) {
    if (o == c || !o->gate[0] || o->mode != TS_M_FILE || !o->fphase ||
        (key && (strlen(o->gate) != key->n || memcmp(o->gate, key->p, key->n) != 0)))
      continue;
    o->gate[0] = '\0';
    uv_timer_stop(&o->timer);
    n++;
    if (!ts_file_step(o))
      ts_response_done(o);
  }
  char msg[32];
  snprintf(msg, sizeof msg, "released %u", n);
  ts_text(c, 200, msg);
  return 0;
}

/* Route one request.  Returns 1 if the response continues asynchronously. */
static int ts_dispatch(ts_conn *c, const ts_req *r) {
  ts_str p = r->path, rest;
  uint64_t v;
  c->srv->requests++;
  c->keep_alive = r->keep_alive;
  c->head = r->head;
  c->mode = TS_M_NONE;

  if (ts_eq(p, "/hello")) {
    ts_reply(c, 200, "text/plain", "hello", 5);
    return 0;
  }
  if (ts_prefix(p, "/delay/", &rest)) {
    if (ts_u64(rest, &v) != 0) {
      ts_text(c, 400, "bad delay");
      return 0;
    }
    return ts_h_delay(c, v, "ok");
  }
  if (ts_eq(p, "/hold")) {
    if (ts_param_u64(r, "ms", 100, &v) != 0) {
      ts_text(c, 400, "bad hold");
      return 0;
    }
    return ts_h_delay(c, v, "held");
  }
  if (ts_prefix(p, "/status/", &rest)) {
    if (ts_u64(rest, &v) != 0) {
      ts_text(c, 400, "bad status");
      return 0;
    }
    return ts_h_status(c, r, v);
  }
  if (ts_prefix(p, "/flaky/", &rest))
    return ts_h_flaky(c, r, rest);
  if (ts_eq(p, "/sse"))
    return ts_h_sse(c, r);
  if (ts_eq(p, "/reset"))
    return ts_h_reset(c, r);
  if (ts_eq(p, "/stall"))
    return ts_h_stall(c);
  if (ts_eq(p, "/drip"))
    return ts_h_drip(c, r);
  if (ts_prefix(p, "/big/", &rest))
    return ts_h_big(c, r, rest);
  if (ts_eq(p, "/badchunk")) {
    c->keep_alive = 0;
    ts_status_line(c, 200);
    ts_head_end(c, "text/plain", TS_CHUNKED);
    ts_buf_adds(&c->obuf, "zz\r\nhello\r\n");
    ts_flush(c);
    return 0;
  }
  if (ts_eq(p, "/truncated")) {
    static const char part[] = "{\"partial\": \"json that is cut off right ";
    _Static_assert(sizeof part - 1 == 40, "truncated body must be 40 bytes");
    c->keep_alive = 0;
    ts_status_line(c, 200);
    ts_head_end(c, "application/json", 100);
    ts_buf_add(&c->obuf, part, sizeof part - 1);
    ts_flush(c);
    return 0;
  }
  if (ts_eq(p, "/invalid_utf8")) {
    static const char body[] = "{\"text\":\"\xff\xfe\xc3\"}";
    ts_reply(c, 200, "application/json", body, sizeof body - 1);
    return 0;
  }
  if (ts_eq(p, "/echo") || ts_prefix(p, "/echo/", &rest))
    return ts_h_echo(c, r);
  if (ts_eq(p, "/file"))
    return ts_h_file(c, r);
  if (ts_eq(p, "/reflect"))
    return ts_h_reflect(c, r);
  if (ts_eq(p, "/release"))
    return ts_h_release(c, r);
  if (ts_eq(p, "/stats"))
    return ts_h_stats(c);
  ts_text(c, 404, "not found");
  return 0;
}

/* Answer a malformed request and close. */
static void ts_fail(ts_conn *c, int code) {
  c->keep_alive = 0;
  c->head = 0;
  ts_text(c, code, code == 413 ? "request too large" : code == 431 ? "headers too large" : "bad request");
  ts_conn_shutdown(c);
}

/* Serve every complete request in the read buffer, in order. */
static void ts_process(ts_conn *c) {
  while (!c->busy && !c->closing && !c->shutting && c->rlen > 0) {
    ts_req r;
    size_t used = 0;
    int rc = ts_parse(c, &r, &used);
    if (rc == 0)
      break;
    if (rc < 0) {
      ts_fail(c, -rc);
      return;
    }
    c->busy = ts_dispatch(c, &r);
    c->sent_continue = 0;
    if (c->closing || c->shutting)
      return;
    c->rlen -= used;
    if (c->rlen)
      memmove(c->rbuf, c->rbuf + used, c->rlen);
    ts_buf_trim(&c->obuf);
    ts_buf_trim(&c->jbuf);
    if (!c->busy && !c->keep_alive) {
      ts_conn_shutdown(c);
      return;
    }
  }
  if (c->rlen == 0 && c->rcap > TS_KEEP_CAP) {
    free(c->rbuf);
    c->rbuf = NULL;
    c->rcap = 0;
  }
}

static void ts_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  ts_conn *c = h->data;
  (void)suggested;
  if (c->shutting)
    c->rlen = 0; /* input after our FIN is read and dropped */
  if (c->rcap - c->rlen < TS_READ_MIN) {
    /* While a response is in progress only a modest pipeline is buffered. */
    size_t cap = c->busy && !c->shutting ? TS_MAX_HEAD : TS_MAX_BUF;
    if (c->rcap < cap)
      ts_rbuf_grow(c, c->rlen + TS_READ_MIN < cap ? c->rlen + TS_READ_MIN : cap);
  }
  buf->base = c->rbuf ? c->rbuf + c->rlen : NULL;
  buf->len = c->rcap - c->rlen;
}

static void ts_on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  ts_conn *c = st->data;
  (void)buf; /* data was read straight into c->rbuf */
  if (c->closing)
    return;
  if (nread > 0) {
    if (c->shutting)
      return;
    c->rlen += (size_t)nread;
    if (!c->busy)
      ts_process(c);
    return;
  }
  if (nread == 0)
    return;
  if (nread == UV_EOF) {
    c->got_eof = 1;
    if (c->shutting) {
      if (c->shut_done)
        ts_conn_close(c, 0);
    } else if (c->busy) {
      ts_conn_close(c, 0); /* client gave up on a response in progress */
    } else {
      ts_conn_shutdown(c);
    }
    return;
  }
  if (nread == UV_ENOBUFS && !c->busy) {
    ts_fail(c, 413);
    return;
  }
  ts_conn_close(c, 0);
}

static void ts_on_connection(uv_stream_t *server, int status) {
  ts_server *s = server->data;
  if (status < 0 || s->stopping)
    return;
  ts_conn *c = ts_xrealloc(NULL, sizeof *c);
  memset(c, 0, sizeof *c);
  c->srv = s;
  uv_tcp_init(&s->loop, &c->tcp);
  uv_timer_init(&s->loop, &c->timer);
  c->tcp.data = c;
  c->timer.data = c;
  c->next = s->conns;
  if (s->conns)
    s->conns->prev = c;
  s->conns = c;
  if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
    ts_conn_close(c, 0);
    return;
  }
  c->counted = 1;
  s->accepted++;
  uv_tcp_nodelay(&c->tcp, 1);
  if (uv_read_start((uv_stream_t *)&c->tcp, ts_on_alloc, ts_on_read) != 0)
    ts_conn_close(c, 0);
}

/* ---- server lifecycle ------------------------------------------------ */

static void ts_server_stop(ts_server *s) {
  if (s->stopping)
    return;
  s->stopping = 1;
  uv_close((uv_handle_t *)&s->listener, NULL);
  uv_close((uv_handle_t *)&s->sigterm, NULL);
  uv_close((uv_handle_t *)&s->sigint, NULL);
  while (s->conns)
    ts_conn_close(s->conns, 0); /* unlinks itself */
}

static void ts_on_signal(uv_signal_t *h, int signum) {
  (void)signum;
  ts_server_stop(h->data);
}

static void ts_raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max)
    return;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? 1048576 : rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0 && rl.rlim_cur > 65536) {
    rl.rlim_cur = 65536;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

static void ts_usage(FILE *f) {
  fprintf(f, "usage: specula-testserver [--port N] [--host ADDR] [--files DIR]\n");
}

/* --help: the flags and every endpoint ts_dispatch() routes (a spec checks
   that each route appears here). */
static const char TS_HELP[] =
  "\n"
  "A loopback HTTP/1.1 server with scripted (mis)behaviour, for specula's tests\n"
  "and benchmarks. It binds ADDR:N (default 127.0.0.1, port 0 = any free port),\n"
  "prints \"PORT <n> PID <pid>\" on stdout and serves until SIGTERM or SIGINT.\n"
  "\n"
  "  --port N      port to listen on (0: pick a free one)\n"
  "  --host ADDR   address to bind (default 127.0.0.1)\n"
  "  --files DIR   directory served by /file (without it /file answers 404)\n"
  "\n"
  "Endpoints (any method; query parameters in [brackets] are optional):\n"
  "  /hello                  200 \"hello\" (text/plain)\n"
  "  /delay/MS               200 \"ok\" after MS milliseconds\n"
  "  /hold[?ms=MS]           200 \"held\" after MS milliseconds (default 100)\n"
  "  /status/CODE            status CODE (200-599) with a JSON error body;\n"
  "                          [retry_after=V] Retry-After, [retry_after_ms=V]\n"
  "                          retry-after-ms, [should_retry=true|false]\n"
  "                          x-should-retry, [body=TEXT] the body instead,\n"
  "                          [ctype=TYPE] its Content-Type\n"
  "  /flaky/KEY/N/CODE       the first N requests for KEY get /status/CODE (same\n"
  "                          parameters), later ones 200 {\"ok\":true,\"attempt\":A}\n"
  "  /sse[?n=N&interval=MS&data=TEXT]\n"
  "                          text/event-stream, chunked: N events (default 3)\n"
  "                          \"data: TEXT I\" (default TEXT \"event\"), MS apart (10)\n"
  "  /drip[?bytes=N&interval=MS]\n"
  "                          Content-Length N (20), then one byte every MS (100)\n"
  "  /big/N[?chunked=1]      N bytes of 'a', with Content-Length or chunked\n"
  "  /reset[?after=N]        announces 1000000 bytes, sends N (0), then resets\n"
  "                          the connection (RST)\n"
  "  /stall                  headers (Content-Length 100), then silence until\n"
  "                          the client goes away\n"
  "  /badchunk               a chunked body with an invalid chunk size\n"
  "  /truncated              Content-Length 100, 40 bytes of JSON, then close\n"
  "  /invalid_utf8           200 JSON whose string holds bytes that are not UTF-8\n"
  "  /echo[/ANY][?status=S]  the request as JSON: method, path, query (raw),\n"
  "                          headers, body; with status S (default 200)\n"
  "  /file?path=NAME         the file DIR/NAME (no absolute path, no ..) as a\n"
  "                          chunked body: [split=N] the first N bytes, a pause,\n"
  "                          the rest; or [chunk=N] N-byte pieces with pauses;\n"
  "                          [pause=MS] between pieces (5); [status=S];\n"
  "                          [ctype=TYPE] (default text/event-stream);\n"
  "                          [cut=N] only N bytes, then close mid-body;\n"
  "                          [gate=KEY[&hold=MS]] after the first piece the rest\n"
  "                          waits for /release?gate=KEY (at most MS, 10000)\n"
  "  /reflect?h=NAME&enc=E   the value of request header NAME (without h: the\n"
  "                          body) echoed back encoded as E: raw, pct, pctl,\n"
  "                          plus, json, jsona, jsonu, html, htmlx, htmln, b64,\n"
  "                          b64url, hex, HEX; [pre=0..2] Base64 alignment,\n"
  "                          [pad=0] no Base64 padding; [wrap=text|json|sse]\n"
  "                          inside \"got <...> ok\", {\"echo\": ...} or an\n"
  "                          OpenAI-style stream; [bin=1] two non-UTF-8 bytes\n"
  "                          first; [split=K&pause=MS] two chunks cut K bytes\n"
  "                          into the value; [gate=KEY] as for /file; [status=S]\n"
  "  /release[?gate=KEY]     sends the rest of every gated /file or /reflect\n"
  "                          response of that key (or of any key)\n"
  "  /stats                  JSON counters: accepted, open, closed, stall_open,\n"
  "                          requests\n"
  "  anything else           404 \"not found\"\n"
  "Malformed parameters answer 400; a request head above 64 KB 431, a body above\n"
  "64 MB 413.\n";

static void ts_free_state(ts_server *s) {
  for (size_t i = 0; i < TS_FLAKY_BUCKETS; i++) {
    while (s->flaky[i]) {
      ts_flaky *f = s->flaky[i];
      s->flaky[i] = f->next;
      free(f);
    }
  }
  free(s->abuf);
  free(s->cblock);
}

int main(int argc, char **argv) {
  ts_server srv;
  ts_server *s = &srv;
  const char *host = "127.0.0.1";
  long port = 0;
  struct sockaddr_storage addr;
  int rc;

  memset(s, 0, sizeof *s);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      ts_usage(stdout);
      fputs(TS_HELP, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      ts_usage(stderr);
      return 2;
    }
    if (strcmp(a, "--port") == 0) {
      char *end;
      port = strtol(argv[++i], &end, 10);
      if (*argv[i] == '\0' || *end != '\0' || port < 0 || port > 65535) {
        fprintf(stderr, "specula-testserver: bad port '%s'\n", argv[i]);
        return 2;
      }
    } else if (strcmp(a, "--host") == 0) {
      host = argv[++i];
    } else if (strcmp(a, "--files") == 0) {
      s->files_dir = argv[++i];
    } else {
      ts_usage(stderr);
      return 2;
    }
  }

  ts_raise_nofile();
  signal(SIGPIPE, SIG_IGN);

  if (strcmp(host, "localhost") == 0)
    host = "127.0.0.1";
  if (strchr(host, ':'))
    rc = uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)&addr);
  else
    rc = uv_ip4_addr(host, (int)port, (struct sockaddr_in *)&addr);
  if (rc != 0) {
    fprintf(stderr, "specula-testserver: bad host '%s': %s\n", host, uv_strerror(rc));
    return 2;
  }

  s->abuf = ts_xrealloc(NULL, TS_ABUF_SIZE);
  memset(s->abuf, 'a', TS_ABUF_SIZE);
  s->cblock = ts_xrealloc(NULL, TS_CBLOCK_N * TS_CSTRIDE);
  for (size_t k = 0; k < TS_CBLOCK_N; k++) {
    char *p = s->cblock + k * TS_CSTRIDE;
    memcpy(p, TS_CHUNK_HDR, sizeof(TS_CHUNK_HDR) - 1);
    memset(p + sizeof(TS_CHUNK_HDR) - 1, 'a', TS_CHUNK);
    memcpy(p + TS_CSTRIDE - 2, "\r\n", 2);
  }

  if ((rc = uv_loop_init(&s->loop)) != 0) {
    fprintf(stderr, "specula-testserver: uv_loop_init: %s\n", uv_strerror(rc));
    ts_free_state(s);
    return 1;
  }
  uv_tcp_init(&s->loop, &s->listener);
  s->listener.data = s;
  if ((rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0)) != 0 ||
      (rc = uv_listen((uv_stream_t *)&s->listener, TS_BACKLOG, ts_on_connection)) != 0) {
    fprintf(stderr, "specula-testserver: cannot listen on %s:%ld: %s\n", host, port, uv_strerror(rc));
    uv_close((uv_handle_t *)&s->listener, NULL);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
    ts_free_state(s);
    return 1;
  }
  struct sockaddr_storage bound;
  int blen = (int)sizeof bound;
  uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &blen);
  int bport = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                          : ntohs(((struct sockaddr_in *)&bound)->sin_port);

  uv_signal_init(&s->loop, &s->sigterm);
  uv_signal_init(&s->loop, &s->sigint);
  s->sigterm.data = s;
  s->sigint.data = s;
  uv_signal_start(&s->sigterm, ts_on_signal, SIGTERM);
  uv_signal_start(&s->sigint, ts_on_signal, SIGINT);

  printf("PORT %d PID %ld\n", bport, (long)getpid());
  fflush(stdout);

  uv_run(&s->loop, UV_RUN_DEFAULT);
  ts_free_state(s);
  rc = uv_loop_close(&s->loop);
  if (rc != 0) {
    fprintf(stderr, "specula-testserver: uv_loop_close: %s\n", uv_strerror(rc));
    return 1;
  }
  return 0;
}
