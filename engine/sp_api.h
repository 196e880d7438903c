/*
 * sp_api.h — the C/Lua boundary. Everything Lua may call lives here.
 *
 * Lua reads this file through ffi.cdef() (the build embeds it; lines that
 * start with '#' are dropped first), so it is written in the subset the
 * LuaJIT FFI parser accepts: no macros, no includes in the body.
 *
 * Rules of the boundary (DESIGN §2):
 * - Every function here is synchronous and pull-style: it starts work or
 *   reads state and returns at once. Errors come back as a status and a
 *   message written into a caller buffer (err, errlen), never as a crash.
 * - None of these functions touches the Lua state: C resumes coroutines only
 *   from loop callbacks, so a Lua call into C can never re-enter Lua.
 * - Pointers returned to Lua are owned as documented per function; Lua wraps
 *   owned ones with ffi.gc() as a safety net, and closes them explicitly.
 */
#ifndef SP_API_H
#define SP_API_H
#include <stddef.h>
#include <stdint.h>

typedef struct sp_ctx sp_ctx;          /* the engine context (loop, Lua, http) */
typedef struct sp_task sp_task;        /* a coroutine scheduled by the loop */
typedef struct sp_http_req sp_http_req;/* one HTTP transfer */
typedef struct sp_sse sp_sse;          /* an incremental SSE parser */
typedef struct sp_window sp_window;    /* the speculation window of one query */
typedef struct sp_policy sp_policy;    /* an eligibility policy */
typedef struct sp_prefetch sp_prefetch;/* the action-speculation cache of one query */

/* ---- buffers --------------------------------------------------------- */
typedef struct sp_buf {
  char *data;   /* bytes, NUL-terminated when cap > 0 */
  size_t len;   /* bytes used */
  size_t cap;   /* bytes allocated */
} sp_buf;
sp_buf *sp_buf_new(void);
void sp_buf_delete(sp_buf *b);

/* ---- context, clock, counters ----------------------------------------- */
double sp_now_ms(void);                          /* monotonic milliseconds */
uint64_t sp_now_ns(void);                        /* monotonic nanoseconds */
typedef struct sp_counts {
  int tasks;          /* live tasks (not yet reaped) */
  int ready;          /* tasks queued to resume */
  int timers;         /* open timer handles (sleeps, idle timeouts) */
  int transfers;      /* easy handles inside the curl multi */
  int requests;       /* request objects not yet freed */
  int polls;          /* socket poll handles */
  int windows;        /* live speculation windows */
  int handles;        /* all libuv handles still open on the loop */
} sp_counts;
void sp_ctx_counts(sp_ctx *ctx, sp_counts *out);
const char *sp_version(void);
void sp_ctx_set_main(sp_ctx *ctx, sp_task *t);   /* the task whose end ends the program */
void sp_ctx_set_exit(sp_ctx *ctx, int code);     /* exit status if the main task succeeds */
int sp_ctx_stopping(sp_ctx *ctx);                /* 1 while shutting down */

/* ---- tasks (scheduler) ------------------------------------------------ */
/* Task states. */
enum { SP_TASK_NEW = 0, SP_TASK_READY = 1, SP_TASK_RUNNING = 2, SP_TASK_WAITING = 3,
       SP_TASK_DONE = 4, SP_TASK_FAILED = 5, SP_TASK_CANCELLED = 6 };
/* A new task whose coroutine Lua creates and stores in the coroutine table
   under sp_task_id(); it is first resumed from the loop. The returned pointer
   carries one reference for Lua (release with sp_task_release). */
sp_task *sp_task_new(sp_ctx *ctx, sp_task *parent);
int sp_task_id(const sp_task *t);
int sp_task_state(const sp_task *t);
sp_task *sp_task_current(sp_ctx *ctx);            /* the task being resumed, or NULL */
int sp_task_is_current_co(sp_ctx *ctx, int id);   /* 1 if id is the running task */
void sp_task_release(sp_task *t);                 /* drop Lua's reference */
/* Cancel t and its descendants: every pending operation's cleanup runs now. */
void sp_task_cancel(sp_task *t);
/* Mark the result of the running task's body (called by the Lua trampoline). */
void sp_task_set_error(sp_task *t, const char *msg, size_t len);
const char *sp_task_error(const sp_task *t);
int sp_task_speculative(const sp_task *t);       /* 1 when running for an unverified state */
/* Wait for another task: 1 = already finished (do not yield), 0 = yield now. */
int sp_task_wait(sp_task *waiter, sp_task *target);
void sp_task_unwait(sp_task *waiter);              /* drop every pending wait of waiter */
/* Yield to the loop: resumed after ms (0 = next turn). 0 ok, -1 err. */
int sp_sleep(sp_task *t, double ms, char *err, size_t errlen);

/* ---- HTTP (libcurl multi on libuv) ------------------------------------ */
typedef struct sp_http_opts {
  const char *method;            /* "GET", "POST", ... */
  const char *url;               /* absolute URL */
  const char *headers;           /* "Name: value" lines separated by "\n", or NULL */
  const char *body;              /* request body or NULL */
  size_t body_len;               /* bytes of body */
  double timeout_ms;             /* whole transfer, 0 = none */
  double connect_timeout_ms;     /* connect phase, 0 = libcurl default */
  double idle_timeout_ms;        /* no bytes received for this long, 0 = none */
  double max_body_bytes;         /* abort above this, 0 = unlimited */
  int stream;                    /* 1 = hand chunks to Lua as they arrive */
  int http2;                     /* 0 = default, 1 = prefer h2 (TLS), 2 = h2c prior knowledge */
  int verbose;                   /* libcurl verbose to stderr (debugging) */
} sp_http_opts;
/* HTTP request states. */
enum { SP_HTTP_PENDING = 0, SP_HTTP_HEADERS = 1, SP_HTTP_DONE = 2, SP_HTTP_ERROR = 3,
       SP_HTTP_CANCELLED = 4 };
/* Start a transfer owned by task t (cancelling t aborts it). Lua owns the
   returned object and frees it with sp_http_free. NULL + err on bad input. */
sp_http_req *sp_http_start(sp_ctx *ctx, sp_task *t, const sp_http_opts *o, char *err, size_t errlen);
int sp_http_state(const sp_http_req *r);
long sp_http_status(const sp_http_req *r);
const char *sp_http_headers(const sp_http_req *r, size_t *len);   /* raw header block */
const char *sp_http_body(const sp_http_req *r, size_t *len);      /* buffered body bytes */
void sp_http_consume(sp_http_req *r, size_t n);                   /* drop n buffered bytes */
const char *sp_http_error(const sp_http_req *r);                  /* "ECODE: message" */
/* Register t to be resumed at the next event of r: 1 = something is already
   available (do not yield), 0 = yield now. */
int sp_http_wait(sp_http_req *r, sp_task *t);
void sp_http_abort(sp_http_req *r);     /* stop the transfer now (idempotent) */
void sp_http_free(sp_http_req *r);      /* abort if needed and free */
/* Connection caps of the shared multi handle (-1 leaves one unchanged). */
int sp_http_configure(sp_ctx *ctx, long max_host_conns, long max_total_conns);

/* ---- SSE parser ------------------------------------------------------- */
#ifndef SP_SSE_EVENT_DEFINED
#define SP_SSE_EVENT_DEFINED
typedef struct sp_sse_event {
  const char *event; size_t event_len;   /* event type, "message" when none given */
  const char *data;  size_t data_len;    /* data lines joined with "\n" */
  const char *id;    size_t id_len;      /* last event id in effect ("" if none) */
  long retry;                            /* last valid retry value, -1 if none */
} sp_sse_event;
#endif
sp_sse *sp_sse_new(size_t max_event_bytes);
void sp_sse_free(sp_sse *p);
int sp_sse_feed(sp_sse *p, const char *buf, size_t len);
int sp_sse_next(sp_sse *p, sp_sse_event *ev);
int sp_sse_finish(sp_sse *p);
const char *sp_sse_error(const sp_sse *p);

/* ---- JSON ------------------------------------------------------------- */
int sp_json_canonical(const char *text, size_t len, sp_buf *out, char *err, size_t errlen);

/* ---- keyed randomness (simulated backend) ----------------------------- */
/* A uniform draw in [0,1) that depends only on its key, never on call order. */
double sp_rand_keyed(uint64_t seed, const char *qid, size_t qid_len, int hop,
                     const char *kind, int branch);

/* ---- theory ----------------------------------------------------------- */
double sp_theory_rel_lat_star(double p, double alpha, double beta);
double sp_theory_rel_lat_k(double p, double alpha, double beta, double k);
double sp_theory_k_det(double alpha, double beta);
double sp_theory_p_starve(double k, double alpha, double beta, double nu);
int sp_theory_k_eps(double alpha, double beta, double nu, double eps);

#endif
