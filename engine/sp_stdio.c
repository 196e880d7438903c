#include "sp_stdio.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SP_STDIO_PREFIX 256               /* start of a dropped oversized line kept */
#define SP_STDIO_DEFAULT_LINE (16u << 20)
#define SP_STDIO_CHUNK 65536
#define SP_STDIO_FLUSH_MS 2000            /* at shutdown, how long unwritten output may take */

/* One end: a stream (pipe, socket, tty) read or written by libuv, or a
   file (read with uv_fs_read; written with plain write(), which a regular
   file or /dev/null never makes wait). */
typedef union sp_stream {
  uv_handle_t h;
  uv_stream_t s;
  uv_pipe_t pipe;
  uv_tty_t tty;
  uv_tcp_t tcp;
} sp_stream;

enum { END_NONE, END_STREAM, END_FILE };

struct sp_stdio {
  sp_ctx *ctx;              /* owning context */
  int in_kind, out_kind;    /* END_* */
  int in_fd, out_fd;        /* our own duplicates of 0 and 1 */
  sp_stream in, out;        /* the streams, when END_STREAM */
  int in_open, out_open;    /* handle initialised and not yet closed */
  int nopen;                /* handles whose close callback has not run */
  uv_fs_t fs_req;           /* a file read in flight */
  int fs_busy;              /* fs_req is in flight */
  char *fs_buf;             /* its buffer */
  int reading;              /* a stream read is started */
  int paused;               /* reading stopped: too much unread */
  int eof;                  /* stdin ended (EOF, error, stop) */
  char error[128];          /* why, when not a plain EOF */
  char open_error[160];     /* why sp_stdio_open failed (a later call says it again) */
  size_t max_line;          /* longest line kept */
  int discarding;           /* dropping the rest of an oversized line */
  size_t scanned;           /* bytes of in_buf up to the end of the last whole line */
  int oversized;            /* lines dropped since Lua last asked */
  char prefix[SP_STDIO_PREFIX]; /* start of the last dropped line */
  size_t prefix_len;        /* bytes in prefix */
  sp_buf in_buf;            /* unread stdin bytes */
  size_t unwritten;         /* bytes queued on stdout, not yet written */
  int out_broken;           /* a write failed: stdout is gone */
  char out_error[96];       /* why, once it is */
  uv_shutdown_t shut;       /* the final flush */
  uv_timer_t flush_timer;   /* gives up on the flush */
  int timer_open;           /* flush_timer initialised and not closed */
  sp_task *waiter;          /* task waiting for the next event */
  sp_op wait_op;            /* linked to that task */
};

typedef struct sp_stdio_write_req {
  uv_write_t req;           /* the libuv write */
  sp_stdio *s;              /* the owner */
  size_t len;               /* bytes */
  char data[];              /* copied bytes */
} sp_stdio_write_req;

static void wake(sp_stdio *s) {
  sp_task *t = s->waiter;
  if (!t) return;
  s->waiter = NULL;
  sp_op_unlink(&s->wait_op);
  sp_sched_wake(t);
}

static void handle_closed(uv_handle_t *h) {
  sp_stdio *s = h->data;
  s->nopen--;
}

static void close_handle(sp_stdio *s, uv_handle_t *h, int *open) {
  if (!*open) return;
  *open = 0;
  if (!uv_is_closing(h)) uv_close(h, handle_closed);
}

/* ---- lines ----------------------------------------------------------------- */

static void keep_prefix(sp_stdio *s, const char *p, size_t n) {
  if (n > SP_STDIO_PREFIX) n = SP_STDIO_PREFIX;
  memcpy(s->prefix, p, n);
  s->prefix_len = n;
}

/* Append a chunk of stdin, dropping any line longer than max_line. */
static void take(sp_stdio *s, const char *p, size_t n) {
  while (n > 0) {
    const char *nl = memchr(p, '\n', n);
    if (s->discarding) {
      if (!nl) return;
      s->discarding = 0;
      n -= (size_t)(nl + 1 - p);
      p = nl + 1;
      continue;
    }
    size_t piece = nl ? (size_t)(nl + 1 - p) : n;
    size_t partial = s->in_buf.len - s->scanned;   /* the unfinished line so far */
    size_t line = partial + (nl ? piece - 1 : piece);
    if (line > s->max_line) {
      s->oversized++;
      if (partial > 0) keep_prefix(s, s->in_buf.data + s->scanned, partial);
      else keep_prefix(s, p, piece);
      s->in_buf.len = s->scanned;
      if (s->in_buf.data) s->in_buf.data[s->in_buf.len] = '\0';
      if (!nl) {
        s->discarding = 1;
        return;
      }
    } else {
      sp_buf_append(&s->in_buf, p, piece);
      if (nl) s->scanned = s->in_buf.len;
    }
    p += piece;
    n -= piece;
  }
}

/* stdin ended: a last line without its newline still counts. */
static void ended(sp_stdio *s, const char *why) {
  if (s->eof) return;
  s->eof = 1;
  if (why) snprintf(s->error, sizeof s->error, "%s", why);
  if (!s->discarding && s->in_buf.len > s->scanned) take(s, "\n", 1);
  wake(s);
}

static int too_full(const sp_stdio *s) { return s->in_buf.len > s->max_line + SP_STDIO_CHUNK; }

/* ---- reading a stream ------------------------------------------------------ */

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  (void)h;
  (void)hint;
  buf->base = malloc(SP_STDIO_CHUNK);
  buf->len = buf->base ? SP_STDIO_CHUNK : 0;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  sp_stdio *s = st->data;
  if (nread > 0) {
    take(s, buf->base, (size_t)nread);
    if (too_full(s) && s->reading) {   /* bounded memory: wait for Lua */
      uv_read_stop(st);
      s->reading = 0;
      s->paused = 1;
    }
    wake(s);
  } else if (nread < 0) {
    uv_read_stop(st);
    s->reading = 0;
    ended(s, nread == UV_EOF ? NULL : uv_strerror((int)nread));
  }
  free(buf->base);
}

/* ---- reading a file ----------------------------------------------------------- */

static void file_read(sp_stdio *s);

static void on_file_read(uv_fs_t *req) {
  sp_stdio *s = req->data;
  ssize_t n = req->result;
  uv_fs_req_cleanup(req);
  s->fs_busy = 0;
  if (n > 0) {
    take(s, s->fs_buf, (size_t)n);
    wake(s);
    if (!s->eof && !s->ctx->stopping) {
      if (too_full(s)) s->paused = 1;
      else file_read(s);
    }
  } else {
    ended(s, n == 0 ? NULL : uv_strerror((int)n));
  }
}

static void file_read(sp_stdio *s) {
  if (s->fs_busy || s->eof) return;
  uv_buf_t b = uv_buf_init(s->fs_buf, SP_STDIO_CHUNK);
  s->fs_req.data = s;
  if (uv_fs_read(&s->ctx->loop, &s->fs_req, s->in_fd, &b, 1, -1, on_file_read) == 0) s->fs_busy = 1;
  else ended(s, "cannot read stdin");
}

static void resume_reading(sp_stdio *s) {
  if (!s->paused || s->eof || too_full(s)) return;
  s->paused = 0;
  if (s->in_kind == END_FILE) {
    file_read(s);
  } else if (s->in_open && uv_read_start(&s->in.s, on_alloc, on_read) == 0) {
    s->reading = 1;
  }
}

/* ---- opening ---------------------------------------------------------------------- */

/* Put fd on a stream of the kind it is; END_FILE for a file, END_NONE when
   it cannot be used. `readable` for stdin. */
static int open_end(sp_stdio *s, int fd, sp_stream *st, int readable, int *open) {
  uv_loop_t *loop = &s->ctx->loop;
  int rc;
  switch (uv_guess_handle(fd)) {
  case UV_FILE:
    return END_FILE;
  case UV_TTY:
    rc = uv_tty_init(loop, &st->tty, fd, readable);
    break;
  case UV_NAMED_PIPE:
    rc = uv_pipe_init(loop, &st->pipe, 0);
    if (rc == 0) {
      s->nopen++;
      *open = 1;
      st->h.data = s;
      rc = uv_pipe_open(&st->pipe, fd);
      return rc == 0 ? END_STREAM : END_NONE;
    }
    break;
  case UV_TCP:
    rc = uv_tcp_init(loop, &st->tcp);
    if (rc == 0) {
      s->nopen++;
      *open = 1;
      st->h.data = s;
      rc = uv_tcp_open(&st->tcp, fd);
      return rc == 0 ? END_STREAM : END_NONE;
    }
    break;
  default:
    return END_NONE;
  }
  if (rc != 0) return END_NONE;
  s->nopen++;
  *open = 1;
  st->h.data = s;
  return END_STREAM;
}

static const sp_owner stdio_owner;

sp_stdio *sp_stdio_open(sp_ctx *ctx, double max_line_bytes, char *err, size_t errlen) {
  if (ctx->stdio) {
    if (!ctx->stdio->open_error[0]) return ctx->stdio;
    snprintf(err, errlen, "%s", ctx->stdio->open_error);
    return NULL;
  }
  if (ctx->stopping) {
    snprintf(err, errlen, "ECANCELED: stdio: the engine is shutting down");
    return NULL;
  }
  sp_stdio *s = calloc(1, sizeof *s);
  char *fsbuf = s ? malloc(SP_STDIO_CHUNK) : NULL;
  if (!s || !fsbuf) {
    free(s);
    free(fsbuf);
    snprintf(err, errlen, "ENOMEM: stdio: out of memory");
    return NULL;
  }
  s->ctx = ctx;
  s->fs_buf = fsbuf;
  s->max_line = max_line_bytes > 0 ? (size_t)max_line_bytes : SP_STDIO_DEFAULT_LINE;
  sp_buf_init(&s->in_buf);
  /* our own descriptors: closing the handles leaves 0 and 1 to the process */
  s->in_fd = fcntl(0, F_DUPFD_CLOEXEC, 3);
  s->out_fd = fcntl(1, F_DUPFD_CLOEXEC, 3);
  ctx->stdio = s;
  sp_ctx_own(ctx, SP_OWN_STDIO, &stdio_owner);
  if (s->in_fd < 0 || s->out_fd < 0) {
    snprintf(s->open_error, sizeof s->open_error, "EBADF: stdio: %s is not open",
             s->in_fd < 0 ? "stdin" : "stdout");
    snprintf(err, errlen, "%s", s->open_error);
    return NULL;
  }
  s->in_kind = open_end(s, s->in_fd, &s->in, 1, &s->in_open);
  s->out_kind = open_end(s, s->out_fd, &s->out, 0, &s->out_open);
  if (s->in_kind == END_NONE || s->out_kind == END_NONE) {
    snprintf(s->open_error, sizeof s->open_error,
             "EINVAL: stdio: %s is neither a pipe, a socket, a terminal nor a file",
             s->in_kind == END_NONE ? "stdin" : "stdout");
    snprintf(err, errlen, "%s", s->open_error);
    return NULL;
  }
  if (s->in_kind == END_FILE) {
    file_read(s);
  } else if (uv_read_start(&s->in.s, on_alloc, on_read) == 0) {
    s->reading = 1;
  } else {
    ended(s, "cannot read stdin");
  }
  return s;
}

/* ---- public: reading ------------------------------------------------------------ */

const char *sp_stdio_line(sp_stdio *s, size_t *len) {
  if (!s || s->scanned == 0) return NULL;
  const char *p = s->in_buf.data;
  const char *nl = memchr(p, '\n', s->scanned);
  if (!nl) return NULL;
  size_t n = (size_t)(nl - p);
  if (n > 0 && p[n - 1] == '\r') n--;
  *len = n;
  return p;
}

void sp_stdio_consume(sp_stdio *s, size_t n) {
  if (!s || !s->in_buf.data || n > s->in_buf.len) return;
  const char *p = s->in_buf.data;
  const char *nl = memchr(p + n, '\n', s->in_buf.len - n);
  size_t drop = nl ? (size_t)(nl + 1 - p) : n;
  sp_buf_consume(&s->in_buf, drop);
  s->scanned = s->scanned > drop ? s->scanned - drop : 0;
  resume_reading(s);
}

int sp_stdio_oversized(sp_stdio *s, const char **prefix, size_t *len) {
  if (!s) return 0;
  int n = s->oversized;
  s->oversized = 0;
  *prefix = s->prefix;
  *len = s->prefix_len;
  return n;
}

int sp_stdio_eof(const sp_stdio *s) {
  size_t n;
  return !s || (s->eof && !sp_stdio_line((sp_stdio *)s, &n));
}

const char *sp_stdio_error(const sp_stdio *s) { return s ? s->error : ""; }

static void waiter_cancelled(sp_op *op) {
  sp_stdio *s = (sp_stdio *)((char *)op - offsetof(sp_stdio, wait_op));
  s->waiter = NULL;
}

int sp_stdio_wait(sp_stdio *s, sp_task *t) {
  size_t n;
  if (!s || !t || sp_stdio_line(s, &n) || s->oversized || s->eof || s->out_broken) return 1;
  resume_reading(s);
  if (s->waiter) sp_op_unlink(&s->wait_op);
  s->waiter = t;
  sp_op_link(t, &s->wait_op, waiter_cancelled);
  return 0;
}

void sp_stdio_stop(sp_stdio *s) {
  if (!s || s->eof) return;
  if (s->reading) {
    uv_read_stop(&s->in.s);
    s->reading = 0;
  }
  ended(s, "stopped");
}

/* ---- public: writing -------------------------------------------------------------- */

static void on_written(uv_write_t *req, int status) {
  sp_stdio_write_req *w = (sp_stdio_write_req *)req;
  sp_stdio *s = w->s;
  s->unwritten -= w->len;
  if (status < 0 && !s->out_broken) {
    /* EPIPE: the reader is gone. The task reading stdin learns it now, not
       at the next write (a session with nothing more to say ran on, its
       answers lost, until the client closed stdin too). */
    s->out_broken = 1;
    snprintf(s->out_error, sizeof s->out_error, "%s: write to stdout: %s", uv_err_name(status),
             uv_strerror(status));
    wake(s);
  }
  free(w);
}

const char *sp_stdio_out_error(const sp_stdio *s) { return s && s->out_broken ? s->out_error : ""; }

int sp_stdio_write(sp_stdio *s, const char *data, size_t len, char *err, size_t errlen) {
  if (!s || s->out_broken || s->out_kind == END_NONE || (s->out_kind == END_STREAM && !s->out_open)) {
    snprintf(err, errlen, "EPIPE: stdout is closed");
    return -1;
  }
  if (s->out_kind == END_FILE) {
    while (len > 0) {
      ssize_t n = write(s->out_fd, data, len);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        s->out_broken = 1;
        snprintf(err, errlen, "%s: write to stdout", n < 0 ? strerror(errno) : "EIO");
        snprintf(s->out_error, sizeof s->out_error, "%s", err);
        return -1;
      }
      data += n;
      len -= (size_t)n;
    }
    return 0;
  }
  sp_stdio_write_req *w = malloc(sizeof *w + len);
  if (!w) {
    snprintf(err, errlen, "ENOMEM: out of memory");
    return -1;
  }
  memcpy(w->data, data, len);
  w->s = s;
  w->len = len;
  uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
  int rc = uv_write(&w->req, &s->out.s, &b, 1, on_written);
  if (rc != 0) {
    free(w);
    s->out_broken = 1;
    snprintf(err, errlen, "%s: write to stdout: %s", uv_err_name(rc), uv_strerror(rc));
    snprintf(s->out_error, sizeof s->out_error, "%s", err);
    return -1;
  }
  s->unwritten += len;
  return 0;
}

double sp_stdio_unwritten(const sp_stdio *s) { return s ? (double)s->unwritten : 0; }

/* ---- shutdown ------------------------------------------------------------------------ */

static void flush_done(sp_stdio *s) {
  if (s->timer_open) {
    uv_timer_stop(&s->flush_timer);
    close_handle(s, (uv_handle_t *)&s->flush_timer, &s->timer_open);
  }
  close_handle(s, &s->out.h, &s->out_open);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)status;
  flush_done(req->data);
}

static void on_flush_timeout(uv_timer_t *t) { flush_done(t->data); }

/* Lua is closed: stop reading; let stdout drain (for at most a while),
   then close it. The loop that runs next finishes both. */
static void stdio_close(sp_ctx *ctx) {
  sp_stdio *s = ctx->stdio;
  if (s->waiter) {
    sp_op_unlink(&s->wait_op);
    s->waiter = NULL;
  }
  if (s->fs_busy) uv_cancel((uv_req_t *)&s->fs_req);
  close_handle(s, &s->in.h, &s->in_open);
  if (!s->out_open) return;
  if (s->unwritten > 0 && !s->out_broken) {
    s->shut.data = s;
    if (uv_shutdown(&s->shut, &s->out.s, on_shutdown) == 0) {
      if (uv_timer_init(&ctx->loop, &s->flush_timer) == 0) {
        s->flush_timer.data = s;
        s->nopen++;
        s->timer_open = 1;
        uv_timer_start(&s->flush_timer, on_flush_timeout, SP_STDIO_FLUSH_MS, 0);
      }
      return;
    }
  }
  close_handle(s, &s->out.h, &s->out_open);
}

/* Every handle is closed by now (the loop ran). */
static void stdio_release(sp_ctx *ctx) {
  sp_stdio *s = ctx->stdio;
  if (s->in_fd >= 0 && s->in_kind != END_STREAM) close(s->in_fd);
  if (s->out_fd >= 0 && s->out_kind != END_STREAM) close(s->out_fd);
  sp_buf_free(&s->in_buf);
  free(s->fs_buf);
  free(s);
  ctx->stdio = NULL;
}

static const sp_owner stdio_owner = { NULL, stdio_close, NULL, stdio_release };
