#include "sp_http.h"
#include "sp_curl.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libcurl's functions (engine/sp_curl.h): loaded by the first get_http */
#define CU (sp_curl())

/* A streamed response pauses the transfer above this much unread data. */
#define SP_HTTP_HIGH_WATER (1u << 20)
/* libcurl's cap on a request line plus headers (DYN_HTTP_REQUEST) */
#define SP_HTTP_REQ_LIMIT ((size_t)1 << 20)

/* Event bits recorded inside libcurl callbacks, delivered after them. */
enum { EV_HEADERS = 1, EV_DATA = 2, EV_DONE = 4 };

struct sp_poll {
  uv_poll_t poll;          /* watches one socket for libcurl */
  curl_socket_t fd;        /* that socket */
  sp_http_lane *lane;      /* the multi handle it belongs to */
};

struct sp_http_req {
  sp_http *http;           /* driver */
  sp_http_lane *lane;      /* the multi handle the transfer runs in */
  CURL *easy;              /* the transfer; NULL once finished */
  int in_multi;            /* easy is added to the multi */
  int state;               /* SP_HTTP_* */
  long status;             /* HTTP status of the final response */
  int headers_done;        /* the final response's header block is complete */
  int stream;              /* chunks are consumed as they arrive */
  int paused;              /* write callback asked libcurl to pause */
  int events;              /* EV_* bits not yet delivered */
  int in_dirty;            /* on http->dirty */
  int too_large;           /* aborted: max_body_bytes exceeded */
  int idle_expired;        /* aborted: idle timeout */
  int oom;                 /* aborted: out of memory */
  int counted;             /* included in ctx->counts.requests */
  long os_errno;           /* errno of the last socket failure */
  size_t max_body;         /* 0 = unlimited */
  size_t req_bytes;        /* URL + request header bytes (libcurl caps them at 1 MB) */
  size_t received;         /* body bytes received so far */
  double idle_ms;          /* idle timeout, 0 = none */
  uint64_t last_rx;        /* ns of the last byte received */
  uv_timer_t *idle_timer;  /* idle watchdog, freed in its close callback */
  sp_buf headers;          /* raw header block of the final response */
  sp_buf body;             /* unread body bytes */
  sp_buf debug;            /* `verbose` lines not yet taken (sp_http_debug) */
  struct curl_slist *hdrs; /* request headers */
  char method[16];         /* for messages */
  char *where;             /* "METHOD url-without-query", for messages */
  char *error;             /* "ECODE: message" when state is ERROR */
  char curl_err[CURL_ERROR_SIZE]; /* libcurl's error buffer */
  sp_op owner_op;          /* linked to the task that started it: cancel aborts */
  sp_op wait_op;           /* linked to the task waiting for the next event */
  sp_task *waiter;         /* that task */
  sp_http_notify_fn notify;/* C hook instead of a task */
  void *notify_ud;         /* its argument */
  sp_http_req *dirty_next; /* link in http->dirty */
};

static void process(sp_http_lane *l);

/* ---- sockets and timer -------------------------------------------------- */

static void poll_closed(uv_handle_t *hd) {
  sp_ctx *ctx = hd->loop->data;
  ctx->counts.polls--;
  free(hd->data);
}

static void on_poll(uv_poll_t *hd, int status, int events) {
  sp_poll *p = hd->data;
  int flags = 0;
  /* On a socket error let libcurl read the socket itself, so it reports the
     real cause (e.g. a reset) rather than "select/poll returned error". */
  if (status < 0) flags = CURL_CSELECT_IN | CURL_CSELECT_OUT;
  if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
  if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
  int running = 0;
  sp_http_lane *l = p->lane;
  CU->multi_socket_action(l->multi, p->fd, flags, &running);
  process(l);
}

static int on_socket(CURL *e, curl_socket_t s, int what, void *userp, void *socketp) {
  sp_http_lane *l = userp;
  sp_http *h = l->http;
  if (s < 0) return 0;
  if ((size_t)s >= h->npolls) {
    size_t n = h->npolls ? h->npolls : 64;
    while (n <= (size_t)s) n *= 2;
    sp_poll **np = realloc(h->polls, n * sizeof *np);
    if (!np) return -1;
    memset(np + h->npolls, 0, (n - h->npolls) * sizeof *np);
    h->polls = np;
    h->npolls = n;
  }
  sp_poll *p = h->polls[s];
  if (what == CURL_POLL_REMOVE) {
    if (p && p->lane == l) {
      uv_poll_stop(&p->poll);
      uv_close((uv_handle_t *)&p->poll, poll_closed);
      h->polls[s] = NULL;
    }
    return 0;
  }
  if (!p) {
    p = calloc(1, sizeof *p);
    if (!p) return -1;
    p->fd = s;
    if (uv_poll_init_socket(&h->ctx->loop, &p->poll, s) != 0) {
      free(p);
      return -1;
    }
    p->poll.data = p;
    h->ctx->counts.polls++;
    h->polls[s] = p;
  }
  /* a descriptor number another lane closed and this one reopened */
  p->lane = l;
  int ev = 0;
  if (what & CURL_POLL_IN) ev |= UV_READABLE;
  if (what & CURL_POLL_OUT) ev |= UV_WRITABLE;
  uv_poll_start(&p->poll, ev, on_poll);
  return 0;
}

static void on_timeout(uv_timer_t *t) {
  sp_http_lane *l = t->data;
  int running = 0;
  CU->multi_socket_action(l->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  process(l);
}

static int on_curl_timer(CURLM *m, long timeout_ms, void *userp) {
  sp_http_lane *l = userp;
  if (timeout_ms < 0) uv_timer_stop(&l->timer);
  else uv_timer_start(&l->timer, on_timeout, (uint64_t)timeout_ms, 0);
  return 0;
}

/* Lanes. Debian's libcurl (7.88) walks a multi handle's whole connection
   cache (curl_multi_remove_handle, looking for a connect-only connection),
   its connections to the host (Curl_connect, for one to reuse; the cache's
   pruning, for the oldest idle one) and its list of transfers waiting for a
   connection, for every transfer: with 2,000 transfers in flight in one
   multi, 60 % of the process's CPU and about 1 ms a request. So transfers
   are spread over several multi handles ("lanes") of about
   SP_HTTP_LANE_CAP connections per host each. A new transfer goes to the
   first lane with room (at low load all of them share lane 0 and its
   connections), else to the least busy one, where libcurl queues it. The
   connection limits are split over the lanes, so their sums are the limits:
   per host 1,024 by default (16 lanes of 64, as one multi handle had
   before), or what specula.http.configure sets. */
static void lane_closed(uv_handle_t *hd) {
  sp_http_lane *l = hd->data;
  sp_http *h = l->http;
  free(l);
  if (--h->open_lanes == 0) free(h);
}

/* share i of n of a limit x (0: none): the shares sum to x */
static long share(long x, int n, int i) { return x <= 0 ? 0 : x / n + (i < x % n ? 1 : 0); }

/* Lane i's limits from the driver's: per host, in all, its idle cache. */
static void lane_limits(sp_http *h, sp_http_lane *l, int i) {
  long host = share(h->host_limit, h->use, i), total = share(h->total_limit, h->use, i);
  long cap = host > 0 && (total <= 0 || host < total) ? host : total > 0 ? total : SP_HTTP_LANE_CAP;
  l->cap = (int)cap;
  CU->multi_setopt(l->multi, CURLMOPT_MAX_HOST_CONNECTIONS, host);
  CU->multi_setopt(l->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, total);
  CU->multi_setopt(l->multi, CURLMOPT_MAXCONNECTS, cap > SP_HTTP_LANE_CAP ? cap : (long)SP_HTTP_LANE_CAP);
}

/* How many lanes the limits make: about SP_HTTP_LANE_CAP connections each
   under the smaller limit given, 16 when neither limits anything. */
static int lanes_for(long host, long total) {
  long x = host > 0 && (total <= 0 || host < total) ? host : total;
  if (x <= 0) x = SP_HTTP_HOST_CONNS;
  long n = (x + SP_HTTP_LANE_CAP - 1) / SP_HTTP_LANE_CAP;
  return n < 1 ? 1 : n > SP_HTTP_LANES_MAX ? SP_HTTP_LANES_MAX : (int)n;
}

static sp_http_lane *lane_new(sp_http *h) {
  if (h->nlanes >= SP_HTTP_LANES_MAX) return NULL;
  sp_http_lane *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  l->http = h;
  l->multi = CU->multi_init();
  if (!l->multi) {
    free(l);
    return NULL;
  }
  uv_timer_init(&h->ctx->loop, &l->timer);
  l->timer.data = l;
  CU->multi_setopt(l->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  CU->multi_setopt(l->multi, CURLMOPT_SOCKETDATA, l);
  CU->multi_setopt(l->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
  CU->multi_setopt(l->multi, CURLMOPT_TIMERDATA, l);
  CU->multi_setopt(l->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
  lane_limits(h, l, h->nlanes);
  h->lanes[h->nlanes++] = l;
  h->open_lanes++;
  return l;
}

static sp_http *http_new(sp_ctx *ctx) {
  sp_http *h = calloc(1, sizeof *h);
  if (!h) return NULL;
  h->ctx = ctx;
  h->host_limit = SP_HTTP_HOST_CONNS;
  h->use = lanes_for(h->host_limit, h->total_limit);
  if (!lane_new(h)) {
    free(h);
    return NULL;
  }
  return h;
}

/* The lane for a new transfer: the first of the `use` lanes with room (made
   when first needed), else the least busy one made. */
static sp_http_lane *pick_lane(sp_http *h) {
  sp_http_lane *least = h->lanes[0];
  for (int i = 0; i < h->use; i++) {
    sp_http_lane *l = i < h->nlanes ? h->lanes[i] : lane_new(h);
    if (!l) break;
    if (l->active < l->cap) return l;
    if (l->active < least->active) least = l;
  }
  return least;
}

static void http_close(sp_ctx *ctx);
static const sp_owner http_owner = { NULL, http_close, NULL, NULL };

/* The driver, made by the first transfer (or configure), which loads
   libcurl first: every CU-> call below runs only while a driver exists. */
static sp_http *get_http(sp_ctx *ctx, char *err, size_t errlen) {
  if (!ctx->http && sp_curl_load(err, errlen) && (ctx->http = http_new(ctx)) != NULL)
    sp_ctx_own(ctx, SP_OWN_HTTP, &http_owner);
  return ctx->http;
}

/* New limits (-1: that one unchanged), split over the lanes they make.
   Lanes beyond those take no new transfer; their running transfers keep
   their connections until they end. */
int sp_http_configure(sp_ctx *ctx, long max_host_conns, long max_total_conns) {
  sp_http *h = get_http(ctx, NULL, 0);
  if (!h) return -1;
  if (max_host_conns >= 0) h->host_limit = max_host_conns;
  if (max_total_conns >= 0) h->total_limit = max_total_conns;
  h->use = lanes_for(h->host_limit, h->total_limit);
  for (int i = 0; i < h->nlanes && i < h->use; i++) lane_limits(h, h->lanes[i], i);
  return 0;
}

/* ---- callbacks: record only ---------------------------------------------- */

static void mark(sp_http_req *r, int ev) {
  r->events |= ev;
  if (!r->in_dirty) {
    r->in_dirty = 1;
    r->dirty_next = r->http->dirty;
    r->http->dirty = r;
  }
}

static size_t on_write(char *ptr, size_t size, size_t n, void *ud) {
  sp_http_req *r = ud;
  size_t len = size * n;
  r->last_rx = uv_hrtime();
  if (r->max_body && r->received + len > r->max_body) {
    r->too_large = 1;
    return 0;
  }
  if (r->stream && r->body.len >= SP_HTTP_HIGH_WATER) {
    r->paused = 1;
    return CURL_WRITEFUNC_PAUSE;
  }
  if (sp_buf_append(&r->body, ptr, len) != 0) {
    r->oom = 1;
    return 0;
  }
  r->received += len;
  mark(r, EV_DATA);
  return len;
}

/* A header name or query parameter that may carry a credential. */
static int secret_name(const char *p, size_t n) {
  static const char *const words[] = { "auth", "key", "token", "secret", "password", "cookie", "session" };
  char low[64];
  if (n >= sizeof low) n = sizeof low - 1;
  for (size_t i = 0; i < n; i++) low[i] = (char)(p[i] >= 'A' && p[i] <= 'Z' ? p[i] + 32 : p[i]);
  low[n] = '\0';
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (strstr(low, words[i])) return 1;
  return 0;
}

/* One line for `verbose`: a credential-looking header keeps its name only;
   in a request line or libcurl's own text (a redirect names the new URL),
   credential-looking query parameters keep their names only. Appended to
   the request's debug buffer: Lua takes the lines and writes them through
   the secrets scrubber, which knows every declared secret (a value in a
   header or a path that no name gives away). */
static void debug_line(sp_buf *out, char mark, const char *p, size_t n) {
  const char *colon = memchr(p, ':', n);
  const char *sp = memchr(p, ' ', n);
  if (mark != '*' && colon && (!sp || colon < sp)) {
    if (secret_name(p, (size_t)(colon - p))) {
      sp_buf_printf(out, "%c %.*s: [redacted]\n", mark, (int)(colon - p), p);
      return;
    }
    sp_buf_printf(out, "%c %.*s\n", mark, (int)n, p);
    return;
  }
  const char *q = memchr(p, '?', n);
  if (!q) {
    sp_buf_printf(out, "%c %.*s\n", mark, (int)n, p);
    return;
  }
  /* the request line "METHOD /path?a=1&b=2 HTTP/1.1" */
  const char *end = p + n;
  const char *qend = memchr(q, ' ', (size_t)(end - q));
  if (!qend) qend = end;
  sp_buf_printf(out, "%c %.*s", mark, (int)(q - p + 1), p);
  const char *a = q + 1;
  while (a < qend) {
    const char *amp = memchr(a, '&', (size_t)(qend - a));
    const char *e = amp ? amp : qend;
    const char *eq = memchr(a, '=', (size_t)(e - a));
    if (eq && secret_name(a, (size_t)(eq - a))) sp_buf_printf(out, "%.*s=[redacted]", (int)(eq - a), a);
    else sp_buf_append(out, a, (size_t)(e - a));
    if (amp) sp_buf_putc(out, '&');
    a = amp ? amp + 1 : qend;
  }
  sp_buf_printf(out, "%.*s\n", (int)(end - qend), qend);
}

/* `verbose`: libcurl's protocol chatter without credentials (CURLOPT_VERBOSE
   alone would print Authorization and x-api-key values), kept for Lua to
   write on stderr. Bodies are not kept. No libcurl call. */
static int on_debug(CURL *e, curl_infotype type, char *data, size_t size, void *ud) {
  (void)e;
  sp_http_req *r = ud;
  char mark;
  switch (type) {
  case CURLINFO_TEXT: mark = '*'; break;
  case CURLINFO_HEADER_OUT: mark = '>'; break;
  case CURLINFO_HEADER_IN: mark = '<'; break;
  default: return 0;
  }
  const char *p = data, *end = data + size;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *le = nl ? nl : end;
    size_t n = (size_t)(le - p);
    if (n > 0 && p[n - 1] == '\r') n--;
    if (n > 0) debug_line(&r->debug, mark, p, n);
    p = nl ? nl + 1 : end;
  }
  return 0;
}

static size_t on_header(char *buf, size_t size, size_t n, void *ud) {
  sp_http_req *r = ud;
  size_t len = size * n;
  r->last_rx = uv_hrtime();
  if (len >= 5 && memcmp(buf, "HTTP/", 5) == 0) {
    /* A new response (after 1xx or a redirect): start over. */
    sp_buf_reset(&r->headers);
    const char *sp = memchr(buf, ' ', len);
    r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
    return len;
  }
  if (len <= 2 && (buf[0] == '\r' || buf[0] == '\n')) {
    if (r->status >= 200) r->headers_done = 1;
    if (r->status >= 200 && r->state == SP_HTTP_PENDING) {
      r->state = SP_HTTP_HEADERS;
      mark(r, EV_HEADERS);
    }
    return len;
  }
  if (sp_buf_append(&r->headers, buf, len) != 0) {
    r->oom = 1;
    return 0;
  }
  return len;
}

/* ---- completion and delivery --------------------------------------------- */

static void set_error(sp_http_req *r, const char *code, const char *fmt, const char *detail) {
  sp_buf b;
  sp_buf_init(&b);
  sp_buf_printf(&b, "%s: %s: ", code, r->where ? r->where : "request");
  sp_buf_printf(&b, fmt, detail);
  free(r->error);
  r->error = b.data ? b.data : strdup(code);
}

static void classify(sp_http_req *r, CURLcode rc) {
  const char *detail = r->curl_err[0] ? r->curl_err : CU->easy_strerror(rc);
  char tmp[64];
  if (r->too_large) {
    snprintf(tmp, sizeof tmp, "%zu", r->max_body);
    set_error(r, "EBODYTOOLARGE", "response body exceeds max_body_bytes (%s)", tmp);
  } else if (r->idle_expired) {
    snprintf(tmp, sizeof tmp, "%.0f", r->idle_ms);
    set_error(r, "EIDLE", "no data received for %s ms (idle_timeout_ms)", tmp);
  } else if (r->oom) {
    set_error(r, "ENOMEM", "%s", "out of memory while receiving");
  } else if (rc == CURLE_OUT_OF_MEMORY && r->req_bytes > SP_HTTP_REQ_LIMIT - 4096) {
    /* libcurl says "Out of memory" when its request buffer is full */
    snprintf(tmp, sizeof tmp, "%zu", r->req_bytes);
    set_error(r, "EREQTOOLARGE", "URL and headers of %s bytes exceed libcurl's 1 MB request-header limit "
              "(send large data in the body)", tmp);
  } else switch (rc) {
    case CURLE_COULDNT_CONNECT:
      if (r->os_errno == ECONNREFUSED || strstr(detail, "refused"))
        set_error(r, "ECONNREFUSED", "connection refused (%s)", detail);
      else if (r->os_errno == ETIMEDOUT)
        set_error(r, "ETIMEDOUT", "%s", detail);
      else set_error(r, "ECONNECT", "%s", detail);
      break;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
      set_error(r, "ENOTFOUND", "%s", detail);
      break;
    case CURLE_OPERATION_TIMEDOUT:
      set_error(r, "ETIMEDOUT", "%s", detail);
      break;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
      if (strstr(detail, "chunk")) set_error(r, "EPROTO", "%s", detail);
      else if (r->os_errno == ECONNRESET || strstr(detail, "reset"))
        set_error(r, "ECONNRESET", "connection reset by peer (%s)", detail);
      else set_error(r, "EIO", "%s", detail);
      break;
    case CURLE_PARTIAL_FILE:
      set_error(r, "ETRUNCATED", "%s", detail);
      break;
    case CURLE_GOT_NOTHING:
      set_error(r, "EEMPTY", "%s", detail);
      break;
    case CURLE_FILESIZE_EXCEEDED:
      snprintf(tmp, sizeof tmp, "%zu", r->max_body);
      set_error(r, "EBODYTOOLARGE", "response body exceeds max_body_bytes (%s)", tmp);
      break;
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
      set_error(r, "EINVAL", "%s", detail);
      break;
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_BAD_CONTENT_ENCODING:
      set_error(r, "EPROTO", "%s", detail);
      break;
    default:
      set_error(r, "EIO", "%s", detail);
  }
}

static void idle_closed(uv_handle_t *hd) {
  sp_ctx *ctx = hd->loop->data;
  ctx->counts.timers--;
  free(hd);
}

static void stop_idle(sp_http_req *r) {
  if (!r->idle_timer) return;
  uv_timer_stop(r->idle_timer);
  uv_close((uv_handle_t *)r->idle_timer, idle_closed);
  r->idle_timer = NULL;
}

/* Take the easy handle out of the multi. Never called from a libcurl
   callback. Removing an unfinished transfer makes libcurl close its
   connection, so the server sees it go away. */
static void detach(sp_http_req *r) {
  stop_idle(r);
  if (r->easy) {
    if (r->in_multi) {
      CU->multi_remove_handle(r->lane->multi, r->easy);
      r->lane->active--;
      r->http->ctx->counts.transfers--;
      r->in_multi = 0;
    }
    CU->easy_cleanup(r->easy);
    r->easy = NULL;
  }
  if (r->hdrs) {
    CU->slist_free_all(r->hdrs);
    r->hdrs = NULL;
  }
  sp_op_unlink(&r->owner_op);
}

static void finish(sp_http_req *r, CURLcode rc) {
  if (rc == CURLE_OK && !r->too_large && !r->idle_expired && !r->oom) {
    long code = 0;
    CU->easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
    if (code) r->status = code;
    r->headers_done = 1;
    r->state = SP_HTTP_DONE;
  } else {
    CU->easy_getinfo(r->easy, CURLINFO_OS_ERRNO, &r->os_errno);
    classify(r, rc);
    r->state = SP_HTTP_ERROR;
  }
  detach(r);
  mark(r, EV_DONE);
}

static void deliver(sp_http_req *r) {
  int ev = r->events;
  r->events = 0;
  /* A buffered (non-stream) request only matters to its task once done. */
  if (!r->notify && !r->stream && !(ev & EV_DONE)) return;
  if (r->notify) {
    r->notify(r, r->notify_ud);
    return;
  }
  sp_task *t = r->waiter;
  if (t) {
    r->waiter = NULL;
    sp_op_unlink(&r->wait_op);
    sp_sched_wake(t);
  }
}

static void process(sp_http_lane *l) {
  sp_http *h = l->http;
  CURLMsg *msg;
  int left = 0;
  while ((msg = CU->multi_info_read(l->multi, &left)) != NULL) {
    if (msg->msg != CURLMSG_DONE) continue;
    sp_http_req *r = NULL;
    CU->easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
    if (r) finish(r, msg->data.result);
  }
  /* Deliver after libcurl has returned; a hook may start or free requests,
     so unlink each one before delivering. */
  while (h->dirty) {
    sp_http_req *r = h->dirty;
    h->dirty = r->dirty_next;
    r->dirty_next = NULL;
    r->in_dirty = 0;
    deliver(r);
  }
}

static void unmark(sp_http_req *r) {
  if (!r->in_dirty) return;
  sp_http_req **pp = &r->http->dirty;
  while (*pp && *pp != r) pp = &(*pp)->dirty_next;
  if (*pp) *pp = r->dirty_next;
  r->in_dirty = 0;
}

/* ---- idle watchdog ------------------------------------------------------- */

static void on_idle_check(uv_timer_t *t) {
  sp_http_req *r = t->data;
  uint64_t now = uv_hrtime();
  double quiet = (double)(now - r->last_rx) / 1e6;
  if (quiet + 0.5 < r->idle_ms) {
    uv_timer_start(t, on_idle_check, (uint64_t)(r->idle_ms - quiet) + 1, 0);
    return;
  }
  r->idle_expired = 1;
  classify(r, CURLE_OPERATION_TIMEDOUT);
  r->state = SP_HTTP_ERROR;
  detach(r);
  mark(r, EV_DONE);
  process(r->lane);
}

/* ---- public ---------------------------------------------------------------- */

static void owner_cancelled(sp_op *op) {
  sp_http_req *r = (sp_http_req *)((char *)op - offsetof(sp_http_req, owner_op));
  r->owner_op.task = NULL;
  if (r->state == SP_HTTP_PENDING || r->state == SP_HTTP_HEADERS) {
    detach(r);
    r->state = SP_HTTP_CANCELLED;
    set_error(r, "ECANCELED", "%s", "cancelled");
  }
}

static void waiter_cancelled(sp_op *op) {
  sp_http_req *r = (sp_http_req *)((char *)op - offsetof(sp_http_req, wait_op));
  r->waiter = NULL;
}

/* "METHOD scheme://host/path": the query string and any userinfo are left
   out, since either may carry a secret. */
static char *describe(const char *method, const char *url) {
  const char *q = url + strcspn(url, "?#");
  const char *scheme_end = strstr(url, "://");
  const char *host = scheme_end ? scheme_end + 3 : url;
  const char *slash = memchr(host, '/', (size_t)(q - host));
  const char *auth_end = slash ? slash : q;
  /* the last '@' of the authority: a password may hold a raw '@' */
  for (const char *c = host; c < auth_end; c++)
    if (*c == '@') host = c + 1;
  sp_buf b;
  sp_buf_init(&b);
  sp_buf_printf(&b, "%s ", method);
  if (scheme_end) sp_buf_append(&b, url, (size_t)(scheme_end + 3 - url));
  sp_buf_append(&b, host, (size_t)(q - host));
  return b.data;
}

/* One "Name: value" line of the header block: a token name, then a value
   without control bytes (a CR would start another header on the wire).
   The value is never quoted in the error: it may be a credential. */
static int check_header_line(const char *p, size_t n, int line, char *err, size_t errlen) {
  static const char tchar[] = "!#$%&'*+-.^_`|~";
  size_t k = 0;
  while (k < n && p[k] != ':' &&
         (((unsigned char)p[k] < 128 && ((p[k] >= '0' && p[k] <= '9') || ((p[k] | 32) >= 'a' && (p[k] | 32) <= 'z'))) ||
          strchr(tchar, p[k]) != NULL))
    k++;
  if (k == 0 || k >= n || p[k] != ':') {
    /* not quoted: without a valid name the line may be a bare credential */
    snprintf(err, errlen, "EINVAL: http.request: header line %d is not \"Name: value\" with a token name", line);
    return -1;
  }
  for (size_t i = k + 1; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    if ((c < 32 && c != '\t') || c == 127) {
      snprintf(err, errlen, "EINVAL: http.request: the value of header '%.*s' contains %s", (int)(k > 60 ? 60 : k), p,
               c == '\r' ? "a line break (CR)" : "a control character");
      return -1;
    }
  }
  return 0;
}

/* The transfer's options on its easy handle: callbacks, protocol, TLS,
   timeouts, the method and its body. */
static void set_options(sp_http_req *r, const sp_http_opts *o, const char *method) {
  CURL *e = r->easy;
  CU->easy_setopt(e, CURLOPT_URL, o->url);
  CU->easy_setopt(e, CURLOPT_PRIVATE, (char *)r);
  CU->easy_setopt(e, CURLOPT_ERRORBUFFER, r->curl_err);
  CU->easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  CU->easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
  CU->easy_setopt(e, CURLOPT_WRITEDATA, r);
  CU->easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  CU->easy_setopt(e, CURLOPT_HEADERDATA, r);
  /* Wait for a connection that may multiplex (HTTP/2) rather than open a
     new one. Not for h2c with prior knowledge: Debian's libcurl 7.88 breaks
     those streams behind PIPEWAIT with CURLE_HTTP2 (curl -Z shows the same). */
  if (o->http2 != 2) CU->easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
  CU->easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  CU->easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  if (o->verbose) {
    CU->easy_setopt(e, CURLOPT_DEBUGFUNCTION, on_debug);
    CU->easy_setopt(e, CURLOPT_DEBUGDATA, r);
    CU->easy_setopt(e, CURLOPT_VERBOSE, 1L);
  }
  if (o->path_as_is) CU->easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
  if (o->cainfo && *o->cainfo) CU->easy_setopt(e, CURLOPT_CAINFO, o->cainfo);
  if (o->http2 == 2) CU->easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
  else if (o->http2 == 1) CU->easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
  else CU->easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  if (o->timeout_ms > 0) CU->easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)o->timeout_ms);
  if (o->connect_timeout_ms > 0)
    CU->easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)o->connect_timeout_ms);
  if (r->max_body) CU->easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)r->max_body);
  if (strcmp(method, "GET") == 0) {
    CU->easy_setopt(e, CURLOPT_HTTPGET, 1L);
  } else if (strcmp(method, "HEAD") == 0) {
    CU->easy_setopt(e, CURLOPT_NOBODY, 1L);
  } else {
    if (strcmp(method, "POST") != 0) CU->easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    if (o->body || strcmp(method, "POST") == 0) {
      CU->easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(o->body ? o->body_len : 0));
      CU->easy_setopt(e, CURLOPT_COPYPOSTFIELDS, o->body ? o->body : "");
    }
  }
}

/* The request's header list: no "Expect:", then each line of headers
   (newline-separated), checked. -1 with a message in err on a bad line. */
static int set_headers(sp_http_req *r, const char *headers, char *err, size_t errlen) {
  /* No "Expect: 100-continue" round trip before bodies. */
  r->hdrs = CU->slist_append(NULL, "Expect:");
  if (headers) {
    const char *p = headers;
    int line = 0;
    while (*p) {
      size_t n = strcspn(p, "\n");
      line++;
      if (n > 0) {
        if (check_header_line(p, n, line, err, errlen) != 0) return -1;
        char *line = malloc(n + 1);
        if (line) {
          memcpy(line, p, n);
          line[n] = '\0';
          struct curl_slist *s = CU->slist_append(r->hdrs, line);
          if (s) r->hdrs = s;
          free(line);
        }
      }
      p += n;
      if (*p == '\n') p++;
    }
  }
  return 0;
}

static sp_http_req *start(sp_ctx *ctx, sp_task *t, const sp_http_opts *o, char *err, size_t errlen) {
  if (!o || !o->url || !*o->url) {
    snprintf(err, errlen, "EINVAL: http.request: url is required");
    return NULL;
  }
  if (ctx->stopping) {
    snprintf(err, errlen, "ECANCELED: http.request: the engine is shutting down");
    return NULL;
  }
  if (ctx->timers.virt) {
    /* the virtual clock cannot wait for the network; the query string is
       left out (it may carry a key) */
    snprintf(err, errlen, "EPERM: real I/O under the virtual clock: %s %.*s (run with --clock real, "
             "or serve it from a recording)", o->method ? o->method : "GET",
             (int)strcspn(o->url, "?#"), o->url);
    return NULL;
  }
  char why[300] = "";
  sp_http *h = get_http(ctx, why, sizeof why);
  sp_http_lane *lane = h ? pick_lane(h) : NULL;
  if (!lane) {
    if (why[0]) snprintf(err, errlen, "ENOSYS: http.request: %s", why);
    else snprintf(err, errlen, "ENOMEM: http.request: cannot create the curl multi handle");
    return NULL;
  }
  const char *method = o->method && *o->method ? o->method : "GET";
  if (strlen(method) >= 16 || strspn(method, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != strlen(method)) {
    snprintf(err, errlen, "EINVAL: http.request: bad method '%.20s'", method);
    return NULL;
  }
  sp_http_req *r = calloc(1, sizeof *r);
  if (!r) {
    snprintf(err, errlen, "ENOMEM: http.request: out of memory");
    return NULL;
  }
  r->http = h;
  snprintf(r->method, sizeof r->method, "%s", method);
  r->where = describe(method, o->url);
  r->req_bytes = strlen(o->url) + (o->headers ? strlen(o->headers) : 0);
  r->stream = o->stream;
  r->max_body = o->max_body_bytes > 0 ? (size_t)o->max_body_bytes : 0;
  r->idle_ms = o->idle_timeout_ms > 0 ? o->idle_timeout_ms : 0;
  sp_buf_init(&r->headers);
  sp_buf_init(&r->body);
  sp_buf_init(&r->debug);
  CURL *e = CU->easy_init();
  if (!e) {
    snprintf(err, errlen, "ENOMEM: http.request: curl_easy_init failed");
    sp_http_free(r);
    return NULL;
  }
  r->easy = e;
  set_options(r, o, method);
  if (set_headers(r, o->headers, err, errlen) != 0) {
    sp_http_free(r);
    return NULL;
  }
  CU->easy_setopt(e, CURLOPT_HTTPHEADER, r->hdrs);
  if (t) sp_op_link(t, &r->owner_op, owner_cancelled);
  CURLMcode mc = CU->multi_add_handle(lane->multi, e);
  if (mc != CURLM_OK) {
    snprintf(err, errlen, "EIO: http.request: %s", CU->multi_strerror(mc));
    sp_http_free(r);
    return NULL;
  }
  r->lane = lane;
  lane->active++;
  r->in_multi = 1;
  r->counted = 1;
  ctx->counts.transfers++;
  ctx->counts.requests++;
  r->last_rx = uv_hrtime();
  if (r->idle_ms > 0) {
    r->idle_timer = malloc(sizeof *r->idle_timer);
    if (r->idle_timer) {
      uv_timer_init(&ctx->loop, r->idle_timer);
      r->idle_timer->data = r;
      uv_timer_start(r->idle_timer, on_idle_check, (uint64_t)r->idle_ms + 1, 0);
      ctx->counts.timers++;
    }
  }
  return r;
}

sp_http_req *sp_http_start(sp_ctx *ctx, sp_task *t, const sp_http_opts *o, char *err, size_t errlen) {
  return start(ctx, t, o, err, errlen);
}

sp_http_req *sp_http_start_cb(sp_ctx *ctx, const sp_http_opts *o, sp_http_notify_fn fn,
                              void *ud, char *err, size_t errlen) {
  sp_http_req *r = start(ctx, NULL, o, err, errlen);
  if (r) {
    r->notify = fn;
    r->notify_ud = ud;
  }
  return r;
}

int sp_http_state(const sp_http_req *r) { return r ? r->state : SP_HTTP_ERROR; }
long sp_http_status(const sp_http_req *r) { return r && r->headers_done ? r->status : 0; }

const char *sp_http_headers(const sp_http_req *r, size_t *len) {
  *len = r->headers.len;
  return r->headers.data ? r->headers.data : "";
}

const char *sp_http_body(const sp_http_req *r, size_t *len) {
  *len = r->body.len;
  return r->body.data ? r->body.data : "";
}

void sp_http_consume(sp_http_req *r, size_t n) {
  sp_buf_consume(&r->body, n);
  if (r->paused && r->easy && r->body.len < SP_HTTP_HIGH_WATER / 2) {
    r->paused = 0;
    /* May deliver buffered data through on_write right here: this is an FFI
       call, not a libcurl callback, and on_write only records. */
    CU->easy_pause(r->easy, CURLPAUSE_CONT);
  }
}

const char *sp_http_debug(const sp_http_req *r, size_t *len) {
  *len = r->debug.len;
  return r->debug.data ? r->debug.data : "";
}

void sp_http_debug_clear(sp_http_req *r) { sp_buf_reset(&r->debug); }

const char *sp_http_error(const sp_http_req *r) { return r && r->error ? r->error : ""; }

int sp_http_wait(sp_http_req *r, sp_task *t) {
  if (r->state >= SP_HTTP_DONE || !t) return 1;
  if (r->paused && r->easy) {
    r->paused = 0;
    CU->easy_pause(r->easy, CURLPAUSE_CONT);
  }
  if (r->waiter) {
    sp_op_unlink(&r->wait_op);
    r->waiter = NULL;
  }
  r->waiter = t;
  sp_op_link(t, &r->wait_op, waiter_cancelled);
  return 0;
}

void sp_http_abort(sp_http_req *r) {
  if (!r) return;
  if (r->state == SP_HTTP_PENDING || r->state == SP_HTTP_HEADERS) {
    detach(r);
    r->state = SP_HTTP_CANCELLED;
    set_error(r, "ECANCELED", "%s", "aborted");
  }
}

void sp_http_free(sp_http_req *r) {
  if (!r) return;
  sp_http_abort(r);
  detach(r);
  unmark(r);
  if (r->waiter) sp_op_unlink(&r->wait_op);
  if (r->counted) r->http->ctx->counts.requests--;
  sp_buf_free(&r->headers);
  sp_buf_free(&r->body);
  sp_buf_free(&r->debug);
  free(r->where);
  free(r->error);
  free(r);
}

/* Shutdown, once Lua is closed: abort everything and close the handles
   (the state is freed by the timer's close callback). */
static void http_close(sp_ctx *ctx) {
  sp_http *h = ctx->http;
  ctx->http = NULL;
  h->closing = 1;
  /* Requests still owned by Lua were aborted when their tasks were
     cancelled; the multi is torn down here. */
  for (int i = 0; i < h->nlanes; i++) {
    sp_http_lane *l = h->lanes[i];
    CU->multi_cleanup(l->multi);
    l->multi = NULL;
    uv_timer_stop(&l->timer);
    uv_close((uv_handle_t *)&l->timer, lane_closed);
  }
  for (size_t i = 0; i < h->npolls; i++) {
    sp_poll *p = h->polls[i];
    if (p) {
      uv_poll_stop(&p->poll);
      uv_close((uv_handle_t *)&p->poll, poll_closed);
    }
  }
  free(h->polls);
  h->polls = NULL;
  h->npolls = 0;
  /* h itself is freed by the last lane's close callback. */
}
