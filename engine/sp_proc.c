#include "sp_proc.h"
#include "sp_http.h"
#include "sp_signal.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SP_PROC_ERRKEEP 4096          /* stderr bytes kept for messages */
#define SP_PROC_PREFIX 256            /* start of a dropped oversized line kept */
#define SP_PROC_DEFAULT_LINE (16u << 20)
#define SP_PROC_SHUTDOWN_GRACE 1000   /* ms between SIGTERM and SIGKILL at exit */

struct sp_proc {
  sp_ctx *ctx;             /* owning context */
  uv_process_t proc;       /* the child */
  uv_pipe_t in, out, err;  /* its stdin, stdout, stderr */
  uv_timer_t kill_timer;   /* SIGKILL after the grace period */
  int nopen;               /* handles not yet closed */
  int refs;                /* Lua's reference + requests that may write a cancel line */
  int spawned;             /* uv_spawn succeeded */
  int exited;              /* exit callback ran (the child is reaped) */
  long exit_status;        /* its status */
  int term_signal;         /* signal that ended it, 0 if none */
  int in_closed;           /* stdin closed or broken */
  int out_eof, err_eof;    /* stdout / stderr ended */
  int out_paused;          /* stdout reading stopped: too much unread */
  int closing;             /* close requested (Lua or shutdown) */
  int counted;             /* included in counts.procs */
  int killed;              /* SIGKILL sent */
  size_t max_line;         /* longest line kept */
  int discarding;          /* dropping the rest of an oversized line */
  size_t scanned;          /* bytes of out_buf known to hold no newline */
  int oversized;           /* lines dropped since Lua last asked */
  char prefix[SP_PROC_PREFIX]; /* start of the last dropped line */
  size_t prefix_len;       /* bytes in prefix */
  sp_buf out_buf;          /* unread stdout bytes */
  char errkeep[SP_PROC_ERRKEEP]; /* last stderr bytes */
  size_t err_len;          /* bytes in errkeep */
  sp_task *waiter;         /* task waiting for the next event */
  sp_op wait_op;           /* linked to that task */
  sp_proc *next, *prev;    /* context's list of live processes */
};

typedef struct sp_write {
  uv_write_t req;          /* the libuv write */
  sp_proc *p;              /* target (holds a reference while in flight) */
  char data[];             /* copied bytes */
} sp_write;

/* An HTTP POST carrying a cancel notification, owned by nobody but the
   context until it completes. */
typedef struct sp_rpc_post {
  sp_http_req *req;        /* the transfer */
  sp_ctx *ctx;             /* owner */
  struct sp_rpc_post *next, *prev; /* context's list */
} sp_rpc_post;

static sp_procs *procs_of(sp_ctx *ctx);
static void reap_now(sp_ctx *ctx);

struct sp_rpc {
  sp_ctx *ctx;             /* owning context */
  int state;               /* SP_RPC_* */
  sp_op op;                /* linked to the waiting task: cancelling it gives up */
  sp_task *task;           /* that task */
  int waiting;             /* the task yielded in sp_rpc_wait */
  sp_deadline dl;          /* timeout */
  int dl_armed;            /* dl is in the timer heap */
  sp_proc *proc;           /* cancel by writing this line to proc's stdin ... */
  char *line;              /* ... the line (with its newline) */
  size_t line_len;         /* its length */
  char *url, *headers, *body; /* ... or by this POST */
  size_t body_len;         /* bytes of body */
};

/* ---- process lifetime ---------------------------------------------------- */

static void proc_maybe_free(sp_proc *p) {
  if (p->nopen > 0 || p->refs > 0) return;
  if (p->prev) p->prev->next = p->next;
  else if (p->ctx->procs->live == p) p->ctx->procs->live = p->next;
  if (p->next) p->next->prev = p->prev;
  if (p->counted) p->ctx->counts.procs--;
  sp_buf_free(&p->out_buf);
  free(p);
}

static void proc_unref(sp_proc *p) {
  p->refs--;
  proc_maybe_free(p);
}

static void handle_closed(uv_handle_t *h) {
  sp_proc *p = h->data;
  p->nopen--;
  proc_maybe_free(p);
}

static void close_handle(sp_proc *p, uv_handle_t *h) {
  if (!uv_is_closing(h)) uv_close(h, handle_closed);
}

static void wake(sp_proc *p) {
  sp_task *t = p->waiter;
  if (!t) return;
  p->waiter = NULL;
  sp_op_unlink(&p->wait_op);
  sp_sched_wake(t);
}

static void close_stdin(sp_proc *p) {
  if (p->in_closed) return;
  p->in_closed = 1;
  close_handle(p, (uv_handle_t *)&p->in);
}

static void on_kill_timer(uv_timer_t *t) {
  sp_proc *p = t->data;
  if (!p->exited && p->spawned) {
    p->killed = 1;
    uv_process_kill(&p->proc, SIGKILL);
  }
}

/* Ask the child to go: SIGTERM now, SIGKILL after grace_ms. */
static void terminate(sp_proc *p, double grace_ms) {
  close_stdin(p);
  if (p->exited || !p->spawned) return;
  uv_process_kill(&p->proc, SIGTERM);
  if (!uv_is_closing((uv_handle_t *)&p->kill_timer) && !uv_is_active((uv_handle_t *)&p->kill_timer))
    uv_timer_start(&p->kill_timer, on_kill_timer, grace_ms > 0 ? (uint64_t)grace_ms : 1, 0);
}

static void take_stdout(sp_proc *p, const char *s, size_t n);
static void keep_stderr(sp_proc *p, const char *s, size_t n);

/* Read what a pipe holds now (it is non-blocking), at most `cap` bytes, into
   stdout's buffer or stderr's tail. */
static void drain_pipe(sp_proc *p, uv_pipe_t *pipe, int is_out, size_t cap) {
  uv_os_fd_t fd;
  if (uv_is_closing((uv_handle_t *)pipe) || uv_fileno((uv_handle_t *)pipe, &fd) != 0) return;
  char buf[16384];
  size_t got = 0;
  while (got < cap) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (is_out) take_stdout(p, buf, (size_t)n);
    else keep_stderr(p, buf, (size_t)n);
    got += (size_t)n;
  }
}

static void on_child_exit(uv_process_t *h, int64_t status, int sig) {
  sp_proc *p = h->data;
  p->exited = 1;
  p->exit_status = (long)status;
  p->term_signal = sig;
  close_handle(p, (uv_handle_t *)&p->proc);
  uv_timer_stop(&p->kill_timer);
  close_handle(p, (uv_handle_t *)&p->kill_timer);
  close_stdin(p);
  /* The server is gone, whoever else holds its pipes: a child of its own
     that inherited stdout would keep them open for as long as it lives,
     and the crash would go unnoticed until then. What the server wrote
     before it exited is in the pipes now: take it (its last answers, the
     stderr lines that say why it died), then stop reading. */
  if (!p->closing) {
    drain_pipe(p, &p->out, 1, p->max_line + 65536);
    drain_pipe(p, &p->err, 0, SP_PROC_ERRKEEP * 4);
  }
  close_handle(p, (uv_handle_t *)&p->out);
  close_handle(p, (uv_handle_t *)&p->err);
  p->out_eof = p->err_eof = 1;
  wake(p);
}

/* ---- reading ------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  buf->base = malloc(65536);
  buf->len = buf->base ? 65536 : 0;
}

static void keep_prefix(sp_proc *p, const char *s, size_t n) {
  if (n > SP_PROC_PREFIX) n = SP_PROC_PREFIX;
  memcpy(p->prefix, s, n);
  p->prefix_len = n;
}

/* Append a stdout chunk, dropping any line longer than max_line. */
static void take_stdout(sp_proc *p, const char *s, size_t n) {
  while (n > 0) {
    if (p->discarding) {
      const char *nl = memchr(s, '\n', n);
      if (!nl) return;
      p->discarding = 0;
      n -= (size_t)(nl + 1 - s);
      s = nl + 1;
      continue;
    }
    const char *nl = memchr(s, '\n', n);
    size_t piece = nl ? (size_t)(nl + 1 - s) : n;
    /* bytes of the unfinished line already buffered */
    size_t partial = p->out_buf.len - p->scanned;
    size_t line = partial + (nl ? piece - 1 : piece);
    if (line > p->max_line) {
      p->oversized++;
      if (partial > 0) keep_prefix(p, p->out_buf.data + p->scanned, partial);
      else keep_prefix(p, s, piece);
      p->out_buf.len = p->scanned;   /* drop the partial line */
      if (p->out_buf.data) p->out_buf.data[p->out_buf.len] = '\0';
      if (!nl) {
        p->discarding = 1;
        return;
      }
    } else {
      sp_buf_append(&p->out_buf, s, piece);
      if (nl) p->scanned = p->out_buf.len;
    }
    s += piece;
    n -= piece;
  }
}

static void on_out(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  sp_proc *p = st->data;
  if (nread > 0) {
    take_stdout(p, buf->base, (size_t)nread);
    /* Too much unread: stop until Lua catches up (bounded memory). */
    if (p->out_buf.len > p->max_line + 65536 && !p->out_paused) {
      uv_read_stop(st);
      p->out_paused = 1;
    }
  } else if (nread < 0) {
    p->out_eof = 1;
    close_handle(p, (uv_handle_t *)&p->out);
    /* A server that closed its stdout can never answer again. */
    if (!p->exited) terminate(p, 2000);
  }
  free(buf->base);
  if (nread != 0) wake(p);
}

/* Keep the last SP_PROC_ERRKEEP bytes of stderr. */
static void keep_stderr(sp_proc *p, const char *s, size_t n) {
  if (n >= SP_PROC_ERRKEEP) {
    s += n - SP_PROC_ERRKEEP;
    n = SP_PROC_ERRKEEP;
  }
  if (p->err_len + n > SP_PROC_ERRKEEP) {
    size_t drop = p->err_len + n - SP_PROC_ERRKEEP;
    memmove(p->errkeep, p->errkeep + drop, p->err_len - drop);
    p->err_len -= drop;
  }
  memcpy(p->errkeep + p->err_len, s, n);
  p->err_len += n;
}

static void on_err(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  sp_proc *p = st->data;
  if (nread > 0) {
    keep_stderr(p, buf->base, (size_t)nread);
  } else if (nread < 0) {
    p->err_eof = 1;
    close_handle(p, (uv_handle_t *)&p->err);
  }
  free(buf->base);
}

/* ---- public: processes ----------------------------------------------------- */

sp_proc *sp_proc_spawn(sp_ctx *ctx, const sp_proc_opts *o, char *err, size_t errlen) {
  if (!o || !o->file || !*o->file || !o->args || !o->args[0]) {
    snprintf(err, errlen, "EINVAL: spawn: a command is required");
    return NULL;
  }
  if (ctx->stopping) {
    snprintf(err, errlen, "ECANCELED: spawn: the engine is shutting down");
    return NULL;
  }
  if (ctx->timers.virt) {
    snprintf(err, errlen, "EPERM: real I/O under the virtual clock: spawn %s (run with --clock real)", o->file);
    return NULL;
  }
  sp_procs *ps = procs_of(ctx);
  sp_proc *p = ps ? calloc(1, sizeof *p) : NULL;
  if (!p) {
    snprintf(err, errlen, "ENOMEM: spawn: out of memory");
    return NULL;
  }
  p->ctx = ctx;
  p->max_line = o->max_line_bytes > 0 ? (size_t)o->max_line_bytes : SP_PROC_DEFAULT_LINE;
  sp_buf_init(&p->out_buf);
  p->next = ps->live;
  if (ps->live) ps->live->prev = p;
  ps->live = p;
  uv_pipe_init(&ctx->loop, &p->in, 0);
  uv_pipe_init(&ctx->loop, &p->out, 0);
  uv_pipe_init(&ctx->loop, &p->err, 0);
  uv_timer_init(&ctx->loop, &p->kill_timer);
  p->in.data = p->out.data = p->err.data = p->kill_timer.data = p->proc.data = p;
  p->nopen = 4;
  uv_stdio_container_t stdio[3];
  stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
  stdio[0].data.stream = (uv_stream_t *)&p->in;
  stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[1].data.stream = (uv_stream_t *)&p->out;
  stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[2].data.stream = (uv_stream_t *)&p->err;
  uv_process_options_t po;
  memset(&po, 0, sizeof po);
  po.exit_cb = on_child_exit;
  po.file = o->file;
  po.args = (char **)o->args;
  po.env = (char **)o->env;
  po.cwd = o->cwd && *o->cwd ? o->cwd : NULL;
  po.stdio_count = 3;
  po.stdio = stdio;
  int rc = uv_spawn(&ctx->loop, &p->proc, &po);
  p->nopen++;   /* the process handle must be closed even when spawn failed */
  if (rc != 0) {
    snprintf(err, errlen, "%s: cannot start %s%s'%s': %s", uv_err_name(rc),
             o->name ? o->name : "", o->name ? " " : "", o->file, uv_strerror(rc));
    p->in_closed = p->out_eof = p->err_eof = p->exited = 1;
    p->closing = 1;
    close_handle(p, (uv_handle_t *)&p->in);
    close_handle(p, (uv_handle_t *)&p->out);
    close_handle(p, (uv_handle_t *)&p->err);
    close_handle(p, (uv_handle_t *)&p->kill_timer);
    close_handle(p, (uv_handle_t *)&p->proc);
    return NULL;
  }
  p->spawned = 1;
  /* a signal that ends the process takes the children with it, reaped */
  sp_signals_watch(ctx, reap_now);
  p->refs = 1;   /* Lua's */
  p->counted = 1;
  ctx->counts.procs++;
  uv_read_start((uv_stream_t *)&p->out, on_alloc, on_out);
  uv_read_start((uv_stream_t *)&p->err, on_alloc, on_err);
  return p;
}

int sp_proc_pid(const sp_proc *p) { return p && p->spawned ? p->proc.pid : 0; }

static void on_written(uv_write_t *req, int status) {
  sp_write *w = (sp_write *)req;
  sp_proc *p = w->p;
  if (status < 0 && !p->in_closed) close_stdin(p);   /* EPIPE: the child is gone */
  free(w);
  proc_unref(p);
}

int sp_proc_write(sp_proc *p, const char *data, size_t len, char *err, size_t errlen) {
  if (p->in_closed || p->exited || p->closing) {
    snprintf(err, errlen, "EPIPE: the process's stdin is closed");
    return -1;
  }
  sp_write *w = malloc(sizeof *w + len);
  if (!w) {
    snprintf(err, errlen, "ENOMEM: out of memory");
    return -1;
  }
  memcpy(w->data, data, len);
  w->p = p;
  uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
  int rc = uv_write(&w->req, (uv_stream_t *)&p->in, &b, 1, on_written);
  if (rc != 0) {
    free(w);
    snprintf(err, errlen, "%s: write to the process: %s", uv_err_name(rc), uv_strerror(rc));
    close_stdin(p);
    return -1;
  }
  p->refs++;
  return 0;
}

const char *sp_proc_line(sp_proc *p, size_t *len) {
  if (p->scanned == 0) return NULL;
  const char *s = p->out_buf.data;
  const char *nl = memchr(s, '\n', p->scanned);
  if (!nl) return NULL;
  size_t n = (size_t)(nl - s);
  if (n > 0 && s[n - 1] == '\r') n--;
  *len = n;
  return s;
}

void sp_proc_consume(sp_proc *p, size_t n) {
  /* n is the line's length as returned: also drop its "\r\n" or "\n" */
  const char *s = p->out_buf.data;
  if (!s) return;
  const char *nl = memchr(s + n, '\n', p->out_buf.len - n);
  size_t drop = nl ? (size_t)(nl + 1 - s) : n;
  sp_buf_consume(&p->out_buf, drop);
  p->scanned = p->scanned > drop ? p->scanned - drop : 0;
  if (p->out_paused && p->out_buf.len <= p->max_line && !p->out_eof) {
    p->out_paused = 0;
    uv_read_start((uv_stream_t *)&p->out, on_alloc, on_out);
  }
}

int sp_proc_oversized(sp_proc *p, const char **prefix, size_t *len) {
  int n = p->oversized;
  p->oversized = 0;
  *prefix = p->prefix;
  *len = p->prefix_len;
  return n;
}

int sp_proc_finished(const sp_proc *p) { return p->out_eof && p->exited; }

const char *sp_proc_rest(const sp_proc *p, size_t *len) {
  *len = 0;
  if (!p->out_eof || p->out_buf.len == 0 || memchr(p->out_buf.data, '\n', p->out_buf.len)) return NULL;
  *len = p->out_buf.len;
  return p->out_buf.data;
}

int sp_proc_exit(const sp_proc *p, long *status, int *sig) {
  *status = p->exit_status;
  *sig = p->term_signal;
  return p->exited;
}

const char *sp_proc_stderr(const sp_proc *p, size_t *len) {
  *len = p->err_len;
  return p->errkeep;
}

static void proc_waiter_cancelled(sp_op *op) {
  sp_proc *p = (sp_proc *)((char *)op - offsetof(sp_proc, wait_op));
  p->waiter = NULL;
}

int sp_proc_wait(sp_proc *p, sp_task *t) {
  size_t n;
  if (!t || sp_proc_line(p, &n) || p->oversized || sp_proc_finished(p)) return 1;
  if (p->out_paused && !p->out_eof) {
    p->out_paused = 0;
    uv_read_start((uv_stream_t *)&p->out, on_alloc, on_out);
  }
  if (p->waiter) sp_op_unlink(&p->wait_op);
  p->waiter = t;
  sp_op_link(t, &p->wait_op, proc_waiter_cancelled);
  return 0;
}

void sp_proc_kill(sp_proc *p, double grace_ms) {
  if (p && !p->closing) terminate(p, grace_ms > 0 ? grace_ms : 2000);
}

void sp_proc_close(sp_proc *p, double grace_ms) {
  if (!p) return;
  if (p->waiter) {
    sp_op_unlink(&p->wait_op);
    p->waiter = NULL;
  }
  if (!p->closing) {
    p->closing = 1;
    terminate(p, grace_ms > 0 ? grace_ms : 2000);
    if (p->exited) {
      close_handle(p, (uv_handle_t *)&p->out);
      close_handle(p, (uv_handle_t *)&p->err);
    }
    proc_unref(p);   /* Lua's reference */
  }
}

/* ---- JSON-RPC requests ------------------------------------------------------ */

static void post_notify(sp_http_req *r, void *ud) {
  sp_rpc_post *q = ud;
  if (sp_http_state(r) < SP_HTTP_DONE) return;
  if (q->prev) q->prev->next = q->next;
  else q->ctx->procs->posts = q->next;
  if (q->next) q->next->prev = q->prev;
  sp_http_free(r);
  free(q);
}

static void send_cancel(sp_rpc *c) {
  sp_ctx *ctx = c->ctx;
  int sent = 0;
  if (c->proc && c->line) {
    char err[128];
    sent = sp_proc_write(c->proc, c->line, c->line_len, err, sizeof err) == 0;
  } else if (c->url && !ctx->stopping) {
    sp_procs *ps = procs_of(ctx);
    sp_rpc_post *q = ps ? calloc(1, sizeof *q) : NULL;
    if (q) {
      sp_http_opts o;
      memset(&o, 0, sizeof o);
      o.method = "POST";
      o.url = c->url;
      o.headers = c->headers;
      o.body = c->body;
      o.body_len = c->body_len;
      o.timeout_ms = 10000;
      char err[256];
      q->ctx = ctx;
      q->req = sp_http_start_cb(ctx, &o, post_notify, q, err, sizeof err);
      if (q->req) {
        q->next = ps->posts;
        if (ps->posts) ps->posts->prev = q;
        ps->posts = q;
        sent = 1;
      } else {
        free(q);
      }
    }
  }
  if (sent) ctx->counts.rpc_cancels++;
}

static void rpc_disarm(sp_rpc *c) {
  if (c->dl_armed) {
    sp_timers_remove(&c->ctx->timers, &c->dl);
    c->dl_armed = 0;
  }
}

/* The waiting task was cancelled (a discarded speculative thread, an
   orphaned prediction, shutdown): nobody will read the answer. */
static void rpc_task_cancelled(sp_op *op) {
  sp_rpc *c = (sp_rpc *)((char *)op - offsetof(sp_rpc, op));
  c->task = NULL;
  c->waiting = 0;
  if (c->state != SP_RPC_PENDING) return;
  c->state = SP_RPC_CANCELLED;
  rpc_disarm(c);
  send_cancel(c);
}

static void rpc_timeout(sp_deadline *d) {
  sp_rpc *c = (sp_rpc *)((char *)d - offsetof(sp_rpc, dl));
  c->dl_armed = 0;
  if (c->state != SP_RPC_PENDING) return;
  c->state = SP_RPC_TIMEDOUT;
  send_cancel(c);
  if (c->waiting && c->task) {
    c->waiting = 0;
    sp_sched_wake(c->task);
  }
}

sp_rpc *sp_rpc_new(sp_ctx *ctx, sp_task *t, double timeout_ms) {
  sp_rpc *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->ctx = ctx;
  c->state = SP_RPC_PENDING;
  c->dl.idx = -1;
  c->dl.fire = rpc_timeout;
  if (t) {
    c->task = t;
    sp_op_link(t, &c->op, rpc_task_cancelled);
  }
  if (timeout_ms > 0) {
    double ms = timeout_ms > 1e12 ? 1e12 : timeout_ms;
    if (sp_timers_add(&ctx->timers, &c->dl, sp_timers_now(&ctx->timers) + (uint64_t)(ms * 1e6)) == 0) c->dl_armed = 1;
  }
  return c;
}

static char *dup_bytes(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

int sp_rpc_cancel_write(sp_rpc *c, sp_proc *p, const char *line, size_t len) {
  if (!c || !p || c->proc) return -1;
  c->line = dup_bytes(line, len);
  if (!c->line) return -1;
  c->line_len = len;
  c->proc = p;
  p->refs++;
  return 0;
}

int sp_rpc_cancel_post(sp_rpc *c, const char *url, const char *headers, const char *body,
                       size_t len) {
  if (!c || !url || c->url) return -1;
  c->url = dup_bytes(url, strlen(url));
  c->headers = headers ? dup_bytes(headers, strlen(headers)) : NULL;
  c->body = dup_bytes(body ? body : "", body ? len : 0);
  c->body_len = body ? len : 0;
  return c->url && c->body ? 0 : -1;
}

int sp_rpc_state(const sp_rpc *c) { return c ? c->state : SP_RPC_CANCELLED; }

void sp_rpc_complete(sp_rpc *c) {
  if (!c || c->state != SP_RPC_PENDING) return;
  c->state = SP_RPC_DONE;
  rpc_disarm(c);
  sp_task *t = c->task;
  int waiting = c->waiting;
  c->waiting = 0;
  if (t) {
    sp_op_unlink(&c->op);
    c->task = NULL;
    if (waiting) sp_sched_wake(t);
  }
}

void sp_rpc_cancel(sp_rpc *c) {
  if (!c || c->state != SP_RPC_PENDING) return;
  c->state = SP_RPC_CANCELLED;
  rpc_disarm(c);
  if (c->task) {
    sp_op_unlink(&c->op);
    c->task = NULL;
  }
  c->waiting = 0;
  send_cancel(c);
}

int sp_rpc_wait(sp_rpc *c, sp_task *t) {
  if (!c || c->state != SP_RPC_PENDING || !t || t != c->task) return 1;
  c->waiting = 1;
  return 0;
}

void sp_rpc_free(sp_rpc *c) {
  if (!c) return;
  rpc_disarm(c);
  if (c->task) sp_op_unlink(&c->op);
  if (c->proc) proc_unref(c->proc);
  free(c->line);
  free(c->url);
  free(c->headers);
  free(c->body);
  free(c);
}

/* ---- shutdown ----------------------------------------------------------------- */

/* Shutdown, once Lua is closed: free the pending cancel posts (http
   requests, before http goes), kill and close every process; the loop
   that runs next reaps them. */
static void procs_close(sp_ctx *ctx) {
  sp_procs *ps = ctx->procs;
  while (ps->posts) {
    sp_rpc_post *q = ps->posts;
    ps->posts = q->next;
    sp_http_free(q->req);
    free(q);
  }
  for (sp_proc *p = ps->live; p; p = p->next) {
    if (p->waiter) {
      sp_op_unlink(&p->wait_op);
      p->waiter = NULL;
    }
    p->closing = 1;
    p->refs = 0;   /* Lua is gone: nothing else can hold it */
    close_handle(p, (uv_handle_t *)&p->out);
    close_handle(p, (uv_handle_t *)&p->err);
    if (p->exited || !p->spawned) {
      close_handle(p, (uv_handle_t *)&p->in);
      close_handle(p, (uv_handle_t *)&p->kill_timer);
      close_handle(p, (uv_handle_t *)&p->proc);
    } else {
      /* the loop runs until the child is reaped (SIGKILL after a grace) */
      terminate(p, SP_PROC_SHUTDOWN_GRACE);
    }
  }
}

/* The process dies now (a second signal): no loop will run to reap the
   children, so kill them and wait for each here. Left alone they would
   outlive it, or stay as zombies where nothing reaps orphans. */
static void reap_now(sp_ctx *ctx) {
  if (!ctx->procs) return;
  for (sp_proc *p = ctx->procs->live; p; p = p->next) {
    if (!p->spawned || p->exited) continue;
    pid_t pid = (pid_t)p->proc.pid;
    if (pid <= 0) continue;
    kill(pid, SIGKILL);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    p->exited = 1;
  }
}

/* Shutdown, last step: every process is reaped and freed by now. */
static void procs_release(sp_ctx *ctx) {
  free(ctx->procs);
  ctx->procs = NULL;
}

static const sp_owner procs_owner = { NULL, procs_close, NULL, procs_release };

static sp_procs *procs_of(sp_ctx *ctx) {
  if (!ctx->procs && (ctx->procs = calloc(1, sizeof *ctx->procs)) != NULL)
    sp_ctx_own(ctx, SP_OWN_PROCS, &procs_owner);
  return ctx->procs;
}
