/*
 * sp_api.h — the C/Lua boundary. Everything Lua may call lives here.
 *
 * Lua reads this file through ffi.cdef() (the build embeds it; lines that
 * start with '#' are dropped first), so it is written in the subset the
 * LuaJIT FFI parser accepts: no macros, no includes in the body.
 *
 * It is also a C header, and each declaration exists once: a module whose
 * functions or types Lua uses declares them here only, and its own header
 * (sp_sse.h, sp_theory.h, ...) includes this one and adds what only C uses.
 * So the cdef Lua loads is the very text the engine is compiled against;
 * no copy can drift.
 *
 * Rules of the boundary (docs/architecture.md#the-boundary-between-c-and-lua):
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
/* k, the active threads, has one meaning everywhere: an int k >= 1 is a
   bound, SP_K_AUTO lets the live estimator choose it (sp_kauto; a
   recording made so has no one fixed k), SP_K_UNBOUNDED is no bound. As a
   double (option values, the theory's functions) unbounded is INFINITY and
   auto 0. */
enum { SP_K_AUTO = 0, SP_K_UNBOUNDED = -1 };
typedef struct sp_policy sp_policy;    /* an eligibility policy */
typedef struct sp_prefetch sp_prefetch;/* the action-speculation cache of one query */

/* ---- how a hop's speculation ended (engine/sp_est.c) -------------------- *
 * The one list of outcomes: the window records them (sp_hop_info.spec), the
 * estimator below counts them, `specula replay` reads them back, and Lua
 * builds its name table from sp_spec_name at load. */
enum { SP_SPEC_NONE = 0, SP_SPEC_ACCEPTED = 1, SP_SPEC_REJECTED = 2, SP_SPEC_LATE = 3,
       SP_SPEC_ERROR = 4, SP_SPEC_N = 5 };
/* Its name in records and traces: "none", "accepted", "rejected", "late",
   "error"; NULL outside 0 .. SP_SPEC_N - 1. */
const char *sp_spec_name(int outcome);
/* The outcome named by the len bytes at name, -1 if none is. */
int sp_spec_code(const char *name, size_t len);

/* ---- the estimator of p, alpha, beta (engine/sp_est.c) ----------------- *
 * One definition, used by the runner, the report, --compare and replay:
 *   p_hat     = accepted / (accepted + rejected + failed) over hops whose
 *               speculation was judged or failed (late and unspeculated
 *               hops carry no evidence about the guess and are left out);
 *   alpha_hat = mean t_spec over hops whose speculator returned
 *               / mean t_target over all hops;
 *   beta_hat  = mean t_seg / mean t_target, over all hops.
 * Sums pool across queries (ratios of sums). outcome is SP_SPEC_*. */
typedef struct sp_est {
  double hops;      /* hops added */
  double accepted;  /* hops whose speculation was accepted */
  double judged;    /* hops accepted, rejected or whose speculation failed */
  double seg;       /* sum of t_seg (ms) */
  double tgt;       /* sum of t_target (ms) */
  double spec;      /* sum of t_spec over hops whose speculator returned */
  double nspec;     /* those hops */
} sp_est;
void sp_est_add(sp_est *e, int outcome, double t_seg, double t_spec, double t_target);
void sp_est_merge(sp_est *into, const sp_est *from);
/* NaN where a figure is undefined (no judged hop, no target time, ...). */
void sp_est_get(const sp_est *e, double *p, double *alpha, double *beta);

/* ---- buffers --------------------------------------------------------- */
typedef struct sp_buf {
  char *data;   /* bytes, NUL-terminated when cap > 0 */
  size_t len;   /* bytes used */
  size_t cap;   /* bytes allocated */
} sp_buf;

/* ---- the JSON encoder's text (engine/sp_jsonenc.c) ------------------- */
/* The text of an encoder's last call: state is what its enc_buf closure
   returned (json.cenc_buf), passed as its address; NULL for another value. */
const char *sp_jsonenc_text(const void *state);

/* ---- UTF-8 (engine/sp_json.c) ----------------------------------------- */
/* Offset of the first invalid UTF-8 sequence in s[from, n), or -1 when
   there is none (the rules of the JSON parser: no overlong forms,
   surrogates or code points above U+10FFFF); -2 when n is above INT_MAX
   (a Lua string never is: an int comes back to Lua unboxed). One call for
   a whole string: a byte loop in Lua is a trace entered and left per string. */
int sp_json_utf8_bad(const char *s, size_t n, size_t from);

/* ---- an input line, summarised (engine/sp_json.c) --------------------- */
/* What the first pass over a JSONL input needs of a line, read without
   making a Lua value (specula.run.inputs): the type of each watched
   top-level key's value, and the fingerprint of the first key's value when
   it is a string. The lines it cannot vouch for go to Lua's decoder, which
   says what is wrong; it accepts only what that decoder accepts. */
typedef struct sp_json_line {
  signed char type[16];  /* per watched key: 0 null, 1 false, 2 true, 3 number, 4 string, 5 array, 6 object; -1 absent */
  uint32_t fp[2];        /* keys[0]'s value a string: sp_json_fingerprint of "string:" and its decoded bytes */
} sp_json_line;
/* 0: s[0, n) is one JSON object (the strict parser's rules), summarised
   into out for keys[0 .. nkeys) (nkeys <= 16); 1: strict JSON but not an
   object; -1: not strict JSON, or out of memory (the caller decodes it). */
int sp_json_line_scan(const char *s, size_t n, const char **keys, int nkeys, sp_json_line *out);
/* Where a line that is exactly {"id": "...", "query": "..."} (the two
   members in either order, JSON whitespace around them, each string's
   bytes printable and valid UTF-8 with no escape, so the text between its
   quotes is its value) has its strings: the common line of specula's own
   JSONL, which the run then takes without a JSON decoder. */
typedef struct sp_json_idq {
  int32_t id_at, id_len;        /* the id's bytes: s[id_at, id_at + id_len) */
  int32_t query_at, query_len;  /* the query's */
} sp_json_idq;
/* 0: s[0, n) is such a line (out filled); 1: it is not (decode it);
   -1: bad arguments. Accepts nothing the strict parser or Lua's decoder
   would read differently. */
int sp_json_line_idq(const char *s, size_t n, sp_json_idq *out);
/* Pieces of the encoder's canonical text, for a Lua writer of a known
   shape (a committed hop's text, specula.run.records fast_hop): s[0, n) as a JSON
   string at o, quoted and escaped as the encoder writes it (room for 6n + 2
   bytes): the bytes written, or -1 when s is not valid UTF-8 or longer than
   SP_JSON_PUT_MAX (the caller leaves it to the encoder); d as the encoder
   writes a number (room for 40 bytes): the bytes written, or -1 when d is
   not finite. */
enum { SP_JSON_PUT_MAX = 64 * 1024 * 1024 };
int sp_json_put_utf8(char *o, const char *s, size_t n);
int sp_json_put_finite(char *o, double d);
/* A 64-bit fingerprint of s[0, n) into out[0], out[1] (FNV-1a): a set's
   key, never a digest; equal texts, equal fingerprints. */
void sp_json_fingerprint(const char *s, size_t n, uint32_t *out);

/* ---- context, clock, counters ----------------------------------------- */
double sp_now_ms(void);                          /* monotonic milliseconds, real time */
/* The engine's clock: real, or virtual (advanced by the scheduler to the
   next deadline whenever nothing is runnable). Every time the engine
   reports is on this clock. NULL ctx: real time. */
double sp_clock_ms(const sp_ctx *ctx);
int sp_clock_virtual(const sp_ctx *ctx);
/* Switch clocks; refused (-1, message in err) while timers or transfers are pending. */
int sp_clock_set_virtual(sp_ctx *ctx, int on, char *err, size_t errlen);
/* The clock itself (engine/sp_timer.c: real or virtual time, and the
   deadlines on it), for a unit that needs the time and nothing else. */
typedef struct sp_timers sp_clock;
const sp_clock *sp_ctx_clock(const sp_ctx *ctx);
typedef struct sp_counts {
  int tasks;          /* live tasks (not yet reaped) */
  int ready;          /* tasks queued to resume */
  int timers;         /* open timer handles (sleeps, idle timeouts) */
  int transfers;      /* easy handles inside the curl multi */
  int requests;       /* request objects not yet freed */
  int polls;          /* socket poll handles */
  int windows;        /* live speculation windows */
  int handles;        /* all libuv handles still open on the loop */
  int values;         /* value-store slots held by the engine */
  int procs;          /* child processes not yet closed and reaped */
  int rpc_cancels;    /* JSON-RPC requests given up on the wire (notifications/cancelled sent) */
  int http_lanes;     /* curl multi handles the HTTP driver has made (its lanes, sp_http.c) */
} sp_counts;
void sp_ctx_counts(sp_ctx *ctx, sp_counts *out);
const char *sp_version(void);
void sp_ctx_set_main(sp_ctx *ctx, sp_task *t);   /* the task whose end ends the program */
void sp_ctx_set_exit(sp_ctx *ctx, int code);     /* exit status if the main task succeeds */
/* Graceful stop of a run (sp_host.c): once armed, SIGINT/SIGTERM cancel every
   window and are remembered instead of ending the process; a second one ends it. */
void sp_host_trap_signals(sp_ctx *ctx);
int sp_host_signal(sp_ctx *ctx);                 /* the signal caught, 0 if none */
/* The caught signal is how this program ends normally (a server told to
   stop): the exit status stays the program's own, not 128 + signal. */
void sp_host_signal_is_end(sp_ctx *ctx);
int sp_host_path_kind(const char *path);         /* 0 absent, 1 regular file, 2 directory, 3 other */

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
void sp_task_release(sp_task *t);                 /* drop Lua's reference */
/* Cancel t and its descendants: every pending operation's cleanup runs now. */
void sp_task_cancel(sp_task *t);
/* Mark the result of the running task's body (called by the Lua trampoline). */
void sp_task_set_error(sp_task *t, const char *msg, size_t len);
const char *sp_task_error(const sp_task *t);
int sp_task_speculative(const sp_task *t);       /* 1 when running for an unverified state */
/* The window job t runs for (t itself, or the job whose code spawned it):
   its task id, 0 when none; *born_ms: when the window launched it (engine
   clock, as sp_clock_ms), *thread: the window thread it belongs to (the tid
   traces show), 0 none. Either pointer may be NULL. */
int sp_task_job(const sp_task *t, double *born_ms, int *thread);
/* Wait for another task: 1 = already finished (do not yield), 0 = yield now. */
int sp_task_wait(sp_task *waiter, sp_task *target);
void sp_task_unwait(sp_task *waiter);              /* drop every pending wait of waiter */
/* 1 once, after the loop found nothing left to wake waiter's task waits
   (sp_sched_break_stall): its wait raises instead of waiting for ever. */
int sp_task_take_stall(sp_task *waiter);
/* Yield to the loop: resumed after ms (0 = next turn). 0 ok, -1 err. */
int sp_sleep(sp_task *t, double ms, char *err, size_t errlen);
/* The same for the running task (sp_task_current), and its id (0: none). */
int sp_sleep_running(sp_ctx *ctx, double ms, char *err, size_t errlen);
int sp_task_current_id(sp_ctx *ctx);

/* ---- the value store and window jobs (engine/sp_vals.c, sp_sched.c) ----
   Lua values the engine holds live in one Lua table, sched.vals, under an
   integer slot; C counts references per slot, so the window can keep,
   share and drop values without touching the Lua state. A window call (a
   "job") is run by the Lua dispatcher in sched.lua: it takes the next job
   with sp_job_next, reads its arguments from sp_job_call, calls the job's
   function and hands the results back with sp_job_done, all without a
   coroutine switch unless the call waits on the loop.

   The job protocol: every kind of job is named here, with the arguments
   the window gives it and the results it returns; the window
   (sp_window.c) and the agent adapter (lua/specula/internal/protocol.lua, one function
   per kind) read and write them by these names only. */
/* What a job runs. */
enum { SP_JOB_START = 0,       /* init() and the first step */
       SP_JOB_ADVANCE = 1,     /* update() from a parent's state, then step() */
       SP_JOB_CALL = 2,        /* the target tool of a step's action */
       SP_JOB_WARMUP = 3,      /* that tool's warm-up hook (its call was deferred) */
       SP_JOB_SPECULATE = 4,   /* the speculator of a step's action */
       SP_JOB_VERIFY = 5,      /* the verifier: the head's candidates against its observation */
       SP_JOB_PFCALL = 6,      /* a predicted call started early (action speculation) */
       SP_JOB_KINDS = 7 };
/* What a step decided (sp_jobres.step_kind). */
enum { SP_STEP_ACTION = 1, SP_STEP_FINAL = 2 };
/* Confidences a speculator's result carries (sp_jobres.conf); candidates
   past these count as confidence 0. */
enum { SP_JOB_MAXCONF = 10 };
/* A job's arguments. Slots are value-store slots, 0 for nil; the job holds
   a reference to each until it ends, except fn and qctx, which the window
   holds. A field is set for the kinds its comment names, 0 otherwise. */
typedef struct sp_jobcall {
  int kind;            /* SP_JOB_* */
  int fn;              /* slot: the adapter's function for this kind */
  int qctx;            /* slot: the query's step ctx metatable, { __index = the query ctx } */
  int state;           /* ADVANCE: slot of the state update() starts from */
  int step;            /* ADVANCE: slot of the step taken from that state */
  int obs;             /* ADVANCE from a verified state, VERIFY: slot of the real observation */
  int cands;           /* ADVANCE from a guess, VERIFY: slot of the speculator's candidates */
  int rank;            /* ADVANCE from a guess: its 1-based rank in cands, 0 when cands is one plain value */
  int hop;             /* ADVANCE: the hop of the state it builds; PFCALL: the predicting step's hop */
  int actx;            /* CALL, WARMUP, SPECULATE, VERIFY: slot of the ctx of the step whose action it serves */
  int m;               /* SPECULATE: candidates wanted */
  double timeout_ms;   /* SPECULATE: the speculator's time limit, 0 = none */
  int nkids;           /* VERIFY: candidates with a thread of their own (ranks 1 .. nkids) */
  int raw;             /* VERIFY: cands is one plain value */
  int args;            /* PFCALL: slot of the predicted arguments */
  const char *tool;    /* PFCALL: the predicted tool (a copy the job owns, NUL-terminated) */
  int tool_len;        /* PFCALL: its length */
  int spec;            /* the job runs for an unverified state (set when it is taken to run) */
} sp_jobcall;
/* A job's results. Slots are fresh value-store slots the dispatcher makes
   (0: none); they are released once the job has ended, after the window
   took what it keeps. Strings stay the caller's: valid until sp_job_done
   returns (NULL: none). A field is read for the kinds its comment names. */
typedef struct sp_jobres {
  int state;           /* START, ADVANCE: slot of the new state */
  int step;            /* START, ADVANCE: slot of the step, {segment, action} or {final} */
  int actx;            /* START, ADVANCE: slot of the ctx the step's tool, speculator and verifier calls share */
  int value;           /* CALL, PFCALL: slot of the observation; SPECULATE: of the candidates (a list, or one plain value) */
  int step_kind;       /* START, ADVANCE: SP_STEP_* */
  int hint;            /* START, ADVANCE: the policy script's decision for the action (SP_HINT_NONE: none) */
  int can_spec;        /* START, ADVANCE: the action's tool has a speculator */
  int match;           /* START, ADVANCE, lossy matching: 1-based index of the prediction the action matches, 0 none */
  double t_update;     /* START, ADVANCE: ms that update() (START: init()) took */
  int ncands;          /* SPECULATE: candidates in value (cut to m later), -1 when value is one plain value */
  int accepted;        /* VERIFY: 1-based rank of the accepted candidate, 0 none, -1 the plain value */
  double conf[10];     /* SPECULATE: confidences of the first SP_JOB_MAXCONF candidates, in their order */
  const char *tool;    /* START, ADVANCE: the action's tool */
  int tool_len;
  const char *key;     /* START, ADVANCE with action speculation: the canonical JSON of the action's args */
  int key_len;
  const char *reason;  /* VERIFY: the verifier's reason */
  int reason_len;
  const char *error;   /* a failed job: its message */
  int error_len;
} sp_jobres;
int sp_vals_new(sp_ctx *ctx);                    /* a fresh slot (one reference); Lua fills it */
void sp_vals_unref(sp_ctx *ctx, int slot);       /* drop one reference to a slot */
sp_task *sp_job_next(sp_ctx *ctx);               /* the next job to run here, or NULL: park */
const sp_jobcall *sp_job_call(const sp_task *t); /* its kind and arguments */
/* The Lua dispatcher's form of the two: take the next job (it becomes the
   running task) and copy its call into the caller's struct: 1, or 0: park.
   No task pointer crosses into Lua, where each would be a boxed object (an
   allocation per job and per wait); sp_job_finish and sp_sleep_running then
   act on the running task. */
int sp_job_take(sp_ctx *ctx, sp_jobcall *out);
/* The job ended: ok with results, or not ok with the message in res->error.
   Result slots are released after the window has taken what it keeps.
   Returns how many released slots it wrote to dead (at most maxdead):
   Lua clears them in sched.vals at once (they are reused from then on),
   so released values do not wait for the loop to become garbage. */
int sp_job_done(sp_ctx *ctx, sp_task *t, int ok, const sp_jobres *res, int *dead, int maxdead);
/* sp_job_done of the running job (the one sp_job_take took; C keeps it the
   running task through every resume of its coroutine). */
int sp_job_finish(sp_ctx *ctx, int ok, const sp_jobres *res, int *dead, int maxdead);
/* The running job t finishes ms after it returns (its hook then sees what
   it returned, at that time), as if it slept ms before returning, without
   suspending its coroutine. 0, or -1 when t is not the running job. */
int sp_job_defer(sp_task *t, double ms);

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
  int verbose;                   /* protocol chatter to stderr, credentials redacted (debugging) */
  const char *cainfo;            /* CA bundle file for TLS (private CAs), or NULL */
  int path_as_is;                /* 1 = send the path as written (no dot-segment removal) */
} sp_http_opts;
/* HTTP request states. */
enum { SP_HTTP_PENDING = 0, SP_HTTP_HEADERS = 1, SP_HTTP_DONE = 2, SP_HTTP_ERROR = 3,
       SP_HTTP_CANCELLED = 4 };
/* Start a transfer owned by task t (cancelling t aborts it). Lua owns the
   returned object and frees it with sp_http_free. NULL + err on bad input. */
sp_http_req *sp_http_start(sp_ctx *ctx, sp_task *t, const sp_http_opts *o, char *err, size_t errlen);
int sp_http_state(const sp_http_req *r);
long sp_http_status(const sp_http_req *r);   /* 0 until the final response's headers are complete */
const char *sp_http_headers(const sp_http_req *r, size_t *len);   /* raw header block */
const char *sp_http_body(const sp_http_req *r, size_t *len);      /* buffered body bytes */
void sp_http_consume(sp_http_req *r, size_t n);                   /* drop n buffered bytes */
const char *sp_http_error(const sp_http_req *r);                  /* "ECODE: message" */
/* `verbose` lines not yet taken (credential headers and parameters already
   hidden by name), and forgetting them; Lua writes them scrubbed. */
const char *sp_http_debug(const sp_http_req *r, size_t *len);
void sp_http_debug_clear(sp_http_req *r);
/* Register t to be resumed at the next event of r: 1 = something is already
   available (do not yield), 0 = yield now. */
int sp_http_wait(sp_http_req *r, sp_task *t);
void sp_http_abort(sp_http_req *r);     /* stop the transfer now (idempotent) */
void sp_http_free(sp_http_req *r);      /* abort if needed and free */
/* Connection caps of the shared multi handle (-1 leaves one unchanged). */
int sp_http_configure(sp_ctx *ctx, long max_host_conns, long max_total_conns);

/* ---- the process's own stdin and stdout (engine/sp_stdio.c) --------- */
typedef struct sp_stdio sp_stdio;      /* fd 0 read by lines, fd 1 written, on the loop */
/* Start reading stdin (a pipe, socket, tty or file) by lines of at most
   max_line_bytes (0 = 16 MiB). The context owns the result (one per
   context: a second call returns the same); NULL + err if fd 0 or 1 cannot
   be used. */
sp_stdio *sp_stdio_open(sp_ctx *ctx, double max_line_bytes, char *err, size_t errlen);
/* The first complete stdin line (without its newline), or NULL. */
const char *sp_stdio_line(sp_stdio *s, size_t *len);
void sp_stdio_consume(sp_stdio *s, size_t n);      /* drop a line of n bytes and its newline */
/* Lines dropped for exceeding the limit since the last call; *prefix gets
   the start of the last one (up to 256 bytes). */
int sp_stdio_oversized(sp_stdio *s, const char **prefix, size_t *len);
/* 1 when stdin has ended (EOF or a read error) and no whole line is left. */
int sp_stdio_eof(const sp_stdio *s);
/* Why reading stopped when it was not a plain EOF ("" otherwise). */
const char *sp_stdio_error(const sp_stdio *s);
/* Register t to be resumed at the next event (a line, an oversized line,
   the end): 1 = something is already there (do not yield), 0 = yield now. */
int sp_stdio_wait(sp_stdio *s, sp_task *t);
/* Queue bytes to stdout, in order: 0 ok, -1 (err) when stdout is closed or broken. */
int sp_stdio_write(sp_stdio *s, const char *data, size_t len, char *err, size_t errlen);
double sp_stdio_unwritten(const sp_stdio *s);     /* bytes queued, not yet written */
/* Why stdout is broken (a write failed, at once or later: the waiter of
   sp_stdio_wait is woken then), "" while it is not. */
const char *sp_stdio_out_error(const sp_stdio *s);
void sp_stdio_stop(sp_stdio *s);                   /* stop reading stdin (writes go on) */

/* ---- record files written in batches (engine/sp_outfile.c) ------------- */
/* f: a file of Lua's io library (the FFI passes its FILE *) not yet read or
   written. It gets a stdio buffer of bufsize bytes the context owns, and is
   flushed at the end of every drain of the ready queue (before the loop
   waits; within 100 ms while the CPU stays busy) rather than by the
   writer after each line. 0, or -1 and err ("ECODE: ..."). */
int sp_outfile_add(sp_ctx *ctx, void *f, double bufsize, char *err, size_t errlen);
/* 1 and the OS's reason in err when a flush of f at a drain's end failed
   (the writer stops there); 0 otherwise. */
int sp_outfile_check(sp_ctx *ctx, void *f, char *err, size_t errlen);
/* Write data[0, len) (whole lines) to f, a file of Lua's io library: into a
   batched file's buffer (flushed first when the line does not fit in what
   is left of it), any other flushed at once. 0, or -1 and the OS's reason
   in err. */
int sp_outfile_write(void *f, const char *data, double len, int batched, char *err, size_t errlen);
/* Stop batching f: flush what is buffered (discard != 0: drop it, after a
   failure), then f is the caller's again, to close. 0, or -1 and the OS's
   reason in err when a flush failed (what was buffered is dropped). */
int sp_outfile_remove(sp_ctx *ctx, void *f, int discard, char *err, size_t errlen);

/* ---- child processes and JSON-RPC requests (engine/sp_proc.c) --------- */
typedef struct sp_proc sp_proc;        /* a child process with stdio pipes */
typedef struct sp_rpc sp_rpc;          /* one outstanding JSON-RPC request */
typedef struct sp_proc_opts {
  const char *file;              /* program (looked up in PATH) */
  const char **args;             /* argv, NULL-terminated (args[0] = program name) */
  const char **env;              /* "NAME=value" list, NULL-terminated; NULL = inherit */
  const char *cwd;               /* working directory or NULL */
  double max_line_bytes;         /* longest stdout line kept (0 = 16 MiB) */
  const char *name;              /* for messages ("server 'fs'") */
} sp_proc_opts;
/* Start a child. NULL + err ("ENOENT: ...") when it cannot start. Lua owns
   the result and releases it with sp_proc_close. */
sp_proc *sp_proc_spawn(sp_ctx *ctx, const sp_proc_opts *o, char *err, size_t errlen);
int sp_proc_pid(const sp_proc *p);
/* Queue bytes to the child's stdin: 0 ok, -1 (err) when stdin is closed. */
int sp_proc_write(sp_proc *p, const char *data, size_t len, char *err, size_t errlen);
/* The first complete stdout line (without its newline), or NULL. */
const char *sp_proc_line(sp_proc *p, size_t *len);
void sp_proc_consume(sp_proc *p, size_t n);        /* drop n bytes (a line and its newline) */
/* Lines dropped for exceeding max_line_bytes since the last call; *prefix
   gets the start of the last one (up to 256 bytes). */
int sp_proc_oversized(sp_proc *p, const char **prefix, size_t *len);
/* 1 when stdout has ended and the child has been reaped. */
int sp_proc_finished(const sp_proc *p);
/* Exit status and terminating signal (0 if none); returns 1 once reaped. */
int sp_proc_exit(const sp_proc *p, long *status, int *signal);
const char *sp_proc_stderr(const sp_proc *p, size_t *len);  /* last stderr bytes */
/* Once stdout has ended: the bytes after its last newline (a line the child
   did not finish), or NULL when there are none. */
const char *sp_proc_rest(const sp_proc *p, size_t *len);
/* Register t to be resumed at the next event (a line, end of output, exit):
   1 = something is already there (do not yield), 0 = yield now. */
int sp_proc_wait(sp_proc *p, sp_task *t);
/* Close stdin, SIGTERM, SIGKILL after grace_ms; Lua keeps its reference
   (wait with sp_proc_wait until sp_proc_finished to see the child reaped). */
void sp_proc_kill(sp_proc *p, double grace_ms);
/* Close stdin, SIGTERM, SIGKILL after grace_ms; the child is reaped from
   the loop and the object freed when nothing refers to it any more. */
void sp_proc_close(sp_proc *p, double grace_ms);
/* JSON-RPC request states. */
enum { SP_RPC_PENDING = 0, SP_RPC_DONE = 1, SP_RPC_CANCELLED = 2, SP_RPC_TIMEDOUT = 3 };
/* A request waited on by task t: when t is cancelled while it is pending,
   or timeout_ms (> 0) passes, the cancel message set below is sent at once
   and counted in sp_counts.rpc_cancels. Lua owns it (sp_rpc_free). */
sp_rpc *sp_rpc_new(sp_ctx *ctx, sp_task *t, double timeout_ms);
/* The cancel message: a line written to p's stdin ... */
int sp_rpc_cancel_write(sp_rpc *c, sp_proc *p, const char *line, size_t len);
/* ... or an HTTP POST with no task of its own ("Name: value" lines). */
int sp_rpc_cancel_post(sp_rpc *c, const char *url, const char *headers, const char *body,
                       size_t len);
int sp_rpc_state(const sp_rpc *c);
/* The response (or a failure) is in: wake the waiting task. */
void sp_rpc_complete(sp_rpc *c);
/* Give the request up now (a timeout seen elsewhere): send the message. */
void sp_rpc_cancel(sp_rpc *c);
/* 1 = no longer pending (do not yield), 0 = yield until it is. */
int sp_rpc_wait(sp_rpc *c, sp_task *t);
void sp_rpc_free(sp_rpc *c);

/* ---- HTTP/1.1 server (engine/sp_httpd.c) -------------------------------- *
 * A TCP listener that parses requests (Content-Length and chunked bodies,
 * keep-alive; one request at a time per connection: bytes pipelined behind
 * it wait until its response has ended) and queues complete ones for a Lua
 * task. A malformed request gets 400, an oversized head 431, an oversized
 * body 413 (an unknown transfer coding 501), from C, and the connection
 * closes. Each response is whole (Content-Length) or streamed (chunked). */
typedef struct sp_httpd sp_httpd;          /* a listener and its connections */
typedef struct sp_httpd_req sp_httpd_req;  /* one request and its response */
typedef struct sp_httpd_opts {
  const char *host;              /* an IPv4 or IPv6 literal, or "localhost" (127.0.0.1) */
  int port;                      /* 0: any free port (sp_httpd_port says which) */
  double max_header_bytes;       /* request line and headers (0 = 64 KiB) -> 431 */
  double max_body_bytes;         /* a request body (0 = 16 MiB) -> 413 */
  int max_conns;                 /* open connections (0 = 256); past it: 503 and close */
  double max_pending_bytes;      /* response bytes a client leaves unread (0 = 16 MiB); past
                                    it the connection is dropped and its request is gone */
  double idle_timeout_ms;        /* a connection with no request in service that sends nothing
                                    this long is closed (0 = 60 s): idle keep-alives, slow heads */
} sp_httpd_opts;
/* Listen. NULL + err ("EADDRINUSE: ...") when it cannot. Lua owns the
   result and releases it with sp_httpd_close. */
sp_httpd *sp_httpd_listen(sp_ctx *ctx, const sp_httpd_opts *o, char *err, size_t errlen);
int sp_httpd_port(const sp_httpd *s);              /* the bound port */
/* The oldest complete request not yet taken, or NULL. Lua owns it and
   releases it with sp_httpd_req_free. */
sp_httpd_req *sp_httpd_next(sp_httpd *s);
/* Register t to be resumed when a request is queued: 1 = one is there or
   the listener is closed (do not yield), 0 = yield now. */
int sp_httpd_wait(sp_httpd *s, sp_task *t);
int sp_httpd_conns(const sp_httpd *s);             /* connections open now */
/* Stop listening, close every connection (their requests report gone) and
   free the listener once its handles are closed. */
void sp_httpd_close(sp_httpd *s);
/* The request: method and target as sent (NUL-terminated), the headers as
   "name: value\n" lines with names in lowercase, the body (dechunked). */
const char *sp_httpd_method(const sp_httpd_req *r);
const char *sp_httpd_target(const sp_httpd_req *r);
const char *sp_httpd_headers(const sp_httpd_req *r, size_t *len);
const char *sp_httpd_body(const sp_httpd_req *r, size_t *len);
int sp_httpd_conn_id(const sp_httpd_req *r);       /* its connection, numbered from 1 */
/* A whole response: headers as "Name: value" lines separated by "\n" (or
   NULL); Content-Length is added. 0 ok, -1 (err) when a response was
   already started or a header line is invalid. A client that is gone
   makes it a no-op (0). */
int sp_httpd_respond(sp_httpd_req *r, int status, const char *headers, const char *body, size_t len,
                     char *err, size_t errlen);
/* A streamed response: status and headers now (Transfer-Encoding: chunked
   is added), then chunks, then the end. -1 (err) out of order. */
int sp_httpd_stream_start(sp_httpd_req *r, int status, const char *headers, char *err, size_t errlen);
int sp_httpd_stream_write(sp_httpd_req *r, const char *data, size_t len, char *err, size_t errlen);
int sp_httpd_stream_end(sp_httpd_req *r);
/* 1 when the client has gone (disconnected, or the listener was closed). */
int sp_httpd_gone(const sp_httpd_req *r);
/* Register t to be resumed when the client goes or sp_httpd_poke(r) is
   called (work for the task that serves r): 1 = gone or poked since the
   last wait (do not yield; the poke is taken), 0 = yield now. */
int sp_httpd_req_wait(sp_httpd_req *r, sp_task *t);
void sp_httpd_poke(sp_httpd_req *r);
/* Release: an unanswered request gets 500 and its connection closes, an
   unfinished stream closes its connection. */
void sp_httpd_req_free(sp_httpd_req *r);

/* ---- eligibility policy (engine/sp_policy.c) -------------------------- */
enum { SP_FORBID = 0, SP_WARMUP = 1, SP_FULL = 2 };
/* The script's own decision passed to the gate, when it has none to give:
   none asked (a table-only policy), or the script raised or returned
   something that is not a decision (counts as forbid). */
enum { SP_HINT_NONE = -1, SP_HINT_ERROR = -2 };
/* What asks the gate: a target call from an unverified thread, its warm-up
   hook, a prediction fired at step start, one fired on a streamed tool name. */
enum { SP_TRIG_TARGET = 0, SP_TRIG_WARMUP = 1, SP_TRIG_PRED_START = 2, SP_TRIG_PRED_NAME = 3,
       SP_TRIG_N = 4 };
/* Why a launch was not run in full. */
enum { SP_GATE_OK = 0, SP_GATE_CLASS = 1, SP_GATE_HINT = 2, SP_GATE_INFLIGHT = 3,
       SP_GATE_BUDGET = 4, SP_GATE_RATE = 5, SP_GATE_UNKNOWN = 6, SP_GATE_SCRIPT = 7 };
typedef struct sp_gate_counts {
  double full;          /* launches run in full */
  double warmup;        /* launches reduced to the warm-up hook */
  double forbid;        /* launches deferred until verified */
  double by_budget;     /* of those, refused by a per-query budget */
  double by_rate;       /* of those, refused by the class rate limit */
  double by_hint;       /* of those, lowered by a script's own decision */
  double by_script;     /* of those, forbidden because the script gave no decision (raised, bad value, none) */
} sp_gate_counts;
sp_policy *sp_policy_new(void);
void sp_policy_free(sp_policy *p);
/* Add or update a class; rate_per_s <= 0 means no rate limit. Returns its index. */
int sp_policy_class(sp_policy *p, const char *name, int decision, double rate_per_s, double burst);
/* Map a tool to a class (which must exist). Returns the tool index, -1 on error. */
int sp_policy_tool(sp_policy *p, const char *tool, const char *cls, double cost);
/* Per-query budgets: speculative calls in flight, and wasted cost (< 0: none). */
void sp_policy_budget(sp_policy *p, double max_inflight, double max_wasted_cost);
/* The policy has a script (a function or `decide`): every launch must then
   carry the script's decision for that very call; one without is forbid. */
void sp_policy_set_scripted(sp_policy *p, int scripted);
/* Rate limits run on this clock (sp_ctx_clock: virtual or real); NULL:
   real time. */
void sp_policy_set_clock(sp_policy *p, const sp_clock *clock);
int sp_policy_tool_index(const sp_policy *p, const char *tool, size_t len);
int sp_policy_ntools(const sp_policy *p);
int sp_policy_nclasses(const sp_policy *p);
const char *sp_policy_tool_name(const sp_policy *p, int i);
const char *sp_policy_class_name(const sp_policy *p, int i);
double sp_policy_tool_cost(const sp_policy *p, int tool);
/* The gate: the one choke point every early launch passes. tool < 0 is an
   unknown tool; trigger is SP_TRIG_*; hint is the script's decision for this
   very call (SP_HINT_*: none or error), and the lower of it and the class
   decision wins. inflight and wasted are the query's speculative calls in
   flight and wasted cost. Counts the decision per tool and trigger; *why
   gets an SP_GATE_* reason. */
int sp_policy_gate(sp_policy *p, int tool, int trigger, int hint, double inflight, double wasted,
                   int *why);
/* Decisions of tool (-1: unknown tools) for trigger (-1: all triggers). */
void sp_policy_tool_counts(const sp_policy *p, int tool, int trigger, sp_gate_counts *out);
void sp_policy_class_counts(const sp_policy *p, int cls, sp_gate_counts *out);

/* ---- action speculation (engine/sp_actspec.c, window side in sp_window_actspec.c) */
enum { SP_MATCH_EXACT = 0, SP_MATCH_NAME_ONLY = 1, SP_MATCH_SIMILAR = 2 };
enum { SP_TRIGGER_START = 1, SP_TRIGGER_TOOL_NAME = 2 };
typedef struct sp_prefetch_stats {
  double candidates;        /* predictions considered */
  double fired;             /* speculative calls started from predictions */
  double promoted;          /* fired calls whose result the model's action used */
  double promoted_lossy;    /* of those, matched by a lossy rule (name_only, similar) */
  double wasted;            /* fired calls thrown away at the step boundary */
  double wasted_cost;       /* their cost */
  double gated_ev;          /* candidates the expected-value gate kept back */
  double gated_policy;      /* candidates the eligibility gate refused */
  double held;              /* candidates never fired (no trigger came) */
  double saved_ms;          /* target latency hidden by promotions */
} sp_prefetch_stats;
/* Run-level settings and live statistics, shared by the run's windows.
   ev_cost_ms: milliseconds of latency one unit of tool cost is worth;
   ev_latency_ms: fixed estimate of the latency a hit saves (<= 0: live). */
sp_prefetch *sp_prefetch_new(int match, int trigger, double ev_cost_ms, double ev_latency_ms,
                             int max_per_step);
void sp_prefetch_free(sp_prefetch *pf);
/* The EV gate: fire when conf * E[saved] > (1 - conf) * cost * ev_cost_ms. */
int sp_prefetch_ev(sp_prefetch *pf, int tool, double conf, double cost);
void sp_prefetch_observe(sp_prefetch *pf, int tool, double target_ms, double seg_ms);
/* Called from inside a window job (the running step, or a task it spawned):
   one prediction of the step's next call, best first. tool/key: the tool
   name and the canonical JSON of args; hint: the policy script's decision
   for this exact call (SP_HINT_NONE when the policy has no script);
   tool_confidence: the predictor's confidence that the call uses this
   tool, whatever its args (<= 0: unknown; a streamed name then gives the
   odds among the tool's candidates alone); args_slot: value-store slot of
   the args (the window takes that reference, also when it refuses).
   Returns 1 if kept, 0 if not (no action speculation here, or the step's
   max_per_step reached). */
int sp_window_predict(sp_ctx *ctx, const char *tool, size_t tool_len, const char *key, size_t key_len,
                      double confidence, double tool_confidence, int hint, int args_slot);
/* The step has handed over its predictions: fire what the trigger allows. */
int sp_window_predicted(sp_ctx *ctx);
/* Called from inside a running step when a streamed tool name is known. */
int sp_window_tool_name(sp_ctx *ctx, const char *name, size_t len);

/* ---- the speculation window (engine/sp_window.c) ------------------------ */
typedef struct sp_kauto sp_kauto;      /* live k chooser shared by a run */
enum { SP_MODE_SEQUENTIAL = 0, SP_MODE_WINDOW = 1, SP_MODE_SPECHOP = 2 };
/* Eager (default): a thread's speculator starts with its target call and k
   bounds live threads only; a result waiting for a slot is held. Slot: the
   speculator starts only when a thread slot is free (Alg. 2, read literally). */
enum { SP_LAUNCH_EAGER = 0, SP_LAUNCH_SLOT = 1 };
enum { SP_WIN_NEW = 0, SP_WIN_RUNNING = 1, SP_WIN_DONE = 2, SP_WIN_FAILED = 3, SP_WIN_CANCELLED = 4 };
typedef struct sp_window_cfg {
  int mode;                  /* SP_MODE_* */
  int k;                     /* active threads: >= 1, SP_K_UNBOUNDED, or SP_K_AUTO (with kauto) */
  int m;                     /* candidates per hop kept from the speculator (>= 1) */
  int max_hops;              /* a trajectory longer than this fails */
  int debug;                 /* check that update() leaves its input alone */
  int trace;                 /* record trace events */
  double spec_timeout_ms;    /* a speculator slower than this counts as failed, 0 = none */
  double timeout_ms;         /* the query fails when it has no answer this long after its start, 0 = none */
  int spec_launch;           /* SP_LAUNCH_*: when a thread's speculator starts (spechop mode) */
  sp_policy *policy;         /* eligibility (NULL: every speculative launch is forbid) */
  sp_kauto *kauto;           /* shared live estimator when k = 0 */
  sp_prefetch *prefetch;     /* action speculation cache, NULL = off */
  int drop_trajectory;       /* keep hop timings only, not the steps and observations */
  int encode_trajectory;     /* > 0: committed hops are handed to Lua to encode (sp_window_enc_next) once this many wait
                                (fewer with many windows live: at most 4,096 hops held as values in all) */
} sp_window_cfg;
typedef struct sp_hop_info {
  int step_ref;              /* value-store slot of the step {segment, action} (0: none) */
  int obs_ref;               /* value-store slot of the target observation (0: none) */
  double t_seg;              /* ms: model step of this hop */
  double t_spec;             /* ms: speculator, -1 if none ran to completion */
  double t_target;           /* ms: target tool */
  double t_update;           /* ms: update() that built the next state */
  double t_verify;           /* ms: verifier, 0 if not run */
  int spec;                  /* SP_SPEC_* */
  int rank;                  /* accepted candidate's rank (0-based), -1 if none */
  int ncands;                /* candidates the speculator returned */
  const char *reason;        /* verifier's reason ("" if none; valid until the window's next hop) */
  int promoted;              /* the target result came from the prefetch cache */
} sp_hop_info;
typedef struct sp_window_stats {
  double wall_ms;            /* start to answer release */
  double standard_ms;        /* the committed hops run back to back */
  double init_ms;            /* init() */
  double final_seg_ms;       /* the step that produced the answer */
  int hops;                  /* committed hops */
  int commits;               /* hops whose speculation was accepted */
  int rollbacks;             /* hops that resumed from the real observation, discarding speculation */
  int accepted, rejected, late, spec_errors; /* verification outcomes */
  int model_calls;           /* step() calls (each thread's segment) */
  int target_calls;          /* target tool calls started */
  int spec_calls;            /* speculator calls started */
  int warmup_calls;          /* warm-up hooks run instead of a speculative call */
  int predicted_calls;       /* action-speculation launches */
  int speculative_launches;  /* target calls started from unverified states */
  int deferred;              /* launches the gate deferred until verified */
  int cancelled_model;       /* in-flight steps cancelled by a rollback */
  int cancelled_target;      /* in-flight target calls cancelled */
  int cancelled_spec;        /* in-flight speculator calls cancelled */
  int discarded_threads;     /* threads discarded */
  int max_threads;           /* peak live threads */
  int k_last;                /* k in force at the end (auto mode changes it) */
  double wasted_cost;        /* cost of speculative target calls whose result was thrown away */
  double wasted_calls;       /* number of such calls (counted whether or not the tool declares a cost) */
  int gate[4][3];            /* gate decisions: [SP_TRIG_*][SP_FORBID, SP_WARMUP, SP_FULL] */
  sp_est est;                /* p, alpha, beta evidence of the committed hops */
  sp_prefetch_stats pf;      /* action speculation of this query */
} sp_window_stats;
sp_window *sp_window_new(sp_ctx *ctx, const sp_window_cfg *cfg, char *err, size_t errlen);
int sp_window_id(const sp_window *w);            /* a number naming the window (group results, traces) */
void sp_window_set_tag(sp_window *w, int tag);   /* the caller's own number for the window (a run's query index) */
int sp_window_tag(const sp_window *w);           /* that number; 0 until set */
/* The agent adapter's functions (lua/specula/internal/protocol.lua) and the step ctx
   metatable of the query, as value-store slots; SP_NOVAL (0) = none. */
typedef struct sp_window_fns {
  int start;        /* init + first step */
  int advance;      /* update + step */
  int call;         /* a target tool call */
  int warmup;       /* a warm-up hook */
  int verify;       /* the verifier */
  int speculate;    /* the speculator (0: the agent has none) */
  int pfcall;       /* a predicted call (0: no action speculation) */
  int qctx;         /* { __index = the query's ctx } */
} sp_window_fns;
/* Hand them to a window before it starts; it takes a reference to each
   (the caller keeps its own). -1 with a message if a required one is
   missing. */
int sp_window_set_fns(sp_window *w, const sp_window_fns *f, char *err, size_t errlen);
/* Queue the start; waiter is resumed when the window finishes. */
int sp_window_start(sp_window *w, sp_task *waiter);
/* A group of windows run by one driver task: finished windows queue up in
   the group and wake its waiter, so a batch needs no task per query. */
typedef struct sp_wgroup sp_wgroup;
sp_wgroup *sp_wgroup_new(sp_ctx *ctx);
void sp_wgroup_free(sp_wgroup *g);
int sp_window_start_in(sp_window *w, sp_wgroup *g);
sp_window *sp_wgroup_pop(sp_wgroup *g);          /* next finished window, NULL if none */
int sp_wgroup_wait(sp_wgroup *g, sp_task *t);     /* 1: one is ready; 0: yield now */
int sp_window_status(const sp_window *w);
const char *sp_window_error(const sp_window *w);
int sp_window_answer_ref(const sp_window *w);    /* value-store slot of the final step */
int sp_window_nhops(const sp_window *w);
int sp_window_hop(const sp_window *w, int i, sp_hop_info *out);
/* The record's "stages" object of a finished window as canonical JSON
   (keys sorted, times rounded to 4 decimals as the Lua record does):
   written into out (no NUL) when cap bytes hold the longest text its hops
   can make, its length returned; otherwise nothing written and that bound
   returned (> cap: the caller asks again with a buffer that large); -1 when
   a time is not finite or a verifier reason is not valid UTF-8 (the caller
   then builds the object in Lua, which cleans or reports it). */
int sp_window_stages_json(const sp_window *w, char *out, int cap);
/* The record's "stats" object of a finished query as canonical JSON, from
   its window's statistics and what the run adds (engine/sp_record.c): the
   same bytes the Lua record's table encodes to (lua/specula/run/records.lua
   stats_table), for records written and dropped: written into out (no NUL)
   when cap bytes hold the longest text the settings allow, its length
   returned; otherwise nothing written and that bound returned (> cap: the
   caller asks again with a buffer that large); -1 when a figure is not
   finite or memory ran out (the caller then builds the table, which
   reports it). */
typedef struct sp_stats_opts {
  int hops;                  /* the window's committed hops (sp_window_nhops) */
  int k_config;              /* k configured: >= 1, SP_K_UNBOUNDED, SP_K_AUTO */
  double m;                  /* candidates a hop (1 in sequential mode) */
  const char *mode;          /* --mode, NULL: no "mode" key */
  const char *spec_launch;   /* "eager", "lazy" or "slot" */
  const char *match;         /* the predictor's match; NULL: no "prefetch" object */
  int predictor_off;         /* the predictor raised and was off for this query */
} sp_stats_opts;
int sp_record_stats_json(const sp_window_stats *st, const sp_stats_opts *o, char *out, int cap);
/* A record of the common shape as its whole JSON line, assembled from its
   finished window with no Lua table and no encoder walk (run.direct:
   a CLI run that writes each record and keeps none, lua/specula/run/records.lua):
   {"answer":A,["config":C,]["gold":G,]"id":I,"provenance":P,"query":Q,["shard":{..},]"stages":..,"stats":..,
   "trajectory":[..]}
   and "\n", the bytes json.canonical of the Lua record gives; with pick,
   followed by json.canonical({ answer, trajectory }) (--compare's
   agreement text), its length in h->agree_len. st: the
   window's statistics (sp_window_stats_get); so: as for sp_record_stats_json
   (its hops taken from the window). Written into out when cap bytes hold
   it, its length returned; otherwise nothing usable written and a bound
   returned (> cap: ask again with a buffer that large); -1 when the record
   is not of that shape (not done, a hop not yet text, a string not valid
   UTF-8, a time or figure not finite): the caller builds the Lua record,
   which reports what it cannot encode. */
typedef struct sp_record_head {
  const char *answer;        /* the final answer: a string, or JSON text (answer_json) */
  size_t answer_len;
  int answer_json;           /* 1: answer is the answer's canonical JSON text, copied as it is */
  const char *gold;          /* the gold answers' canonical JSON text, NULL: no "gold" key */
  size_t gold_len;
  const char *id;            /* the query's id, a string; NULL: id_number */
  size_t id_len;
  double id_number;          /* the query's id when it is a number */
  const char *query;         /* the query's text */
  size_t query_len;
  const char *prov[3];       /* the provenance object's text in three pieces (copied as they are) */
  size_t prov_len[3];
  const char *config;        /* the --compare configuration's name, NULL: no "config" key */
  size_t config_len;
  int shard;                 /* 1: a "shard" object of the five numbers below */
  double shard_of[5];        /* its count, index, of, pos and seed (its keys' order) */
  int pick;                  /* 1: the agreement text [answer,trajectory] after the line too */
  int agree_len;             /* out: that text's length (it starts where the line ends) */
} sp_record_head;
int sp_record_line(const sp_window *w, const sp_window_stats *st, const sp_stats_opts *so,
                   sp_record_head *h, char *out, int cap);
/* The trajectory as text, hop by hop as hops commit (cfg.encode_trajectory):
   a query in flight holds a few bytes per finished hop instead of its Lua
   step and observation, which the collector would mark again and again.
   A commit that leaves cfg.encode_trajectory hops unencoded queues the
   window (so a short query is encoded whole with its record, and a long
   one holds fewer than that many hops as values; with more than 4,096 /
   encode_trajectory windows live, fewer hops, so that all of them hold at
   most 4,096 hops as values, one each at least); Lua pops windows (enc_next) after a job
   and before reading a finished window, encodes the hops from
   sp_window_enc_count on (their slots via sp_window_hop) and hands each
   hop's JSON text back in order (sp_window_hop_text), which releases its
   step and observation. A hop that cannot be encoded stops it
   (sp_window_enc_stop): that hop and those after it keep their values
   and are read as before. */
int *sp_window_enc_pending(sp_ctx *ctx);          /* the count of windows queued; valid as long as ctx */
sp_window *sp_window_enc_next(sp_ctx *ctx);       /* the oldest queued window, unqueued; NULL if none */
int sp_window_enc_count(const sp_window *w);      /* hops encoded so far (hops 0 .. count-1) */
int sp_window_hop_text(sp_window *w, int i, const char *text, int len); /* i must be the count; 0, or -1 */
void sp_window_enc_stop(sp_window *w);
/* The text of encoded hops i .. j-1, joined by commas, and its length in
   *len; NULL when i .. j-1 are not all encoded. Valid until the window
   changes or is freed. */
const char *sp_window_traj_text(const sp_window *w, int i, int j, int *len);
void sp_window_stats_get(const sp_window *w, sp_window_stats *out);
void sp_window_cancel(sp_window *w);
void sp_window_free(sp_window *w);               /* refs are released from the loop */
/* Trace events recorded by the window (when cfg.trace). */
typedef struct sp_tev {
  const char *name;          /* "model", "spec", "target", "verify", "commit", ... */
  char ph;                   /* 'X' span or 'i' instant */
  int tid;                   /* window thread number */
  int hop;                   /* hop index */
  double ts_us;              /* start, microseconds since the window started */
  double dur_us;             /* span length */
  int flag;                  /* verify: accepted; target: speculative; cancel: kind */
  const char *detail;        /* reason or error text, may be "" */
} sp_tev;
int sp_window_ntev(const sp_window *w);
int sp_window_tev(const sp_window *w, int i, sp_tev *out);
double sp_window_t0_us(const sp_window *w);      /* window start on the process clock */
sp_kauto *sp_kauto_new(double eps, int k_min, int k_max, int k_default);
void sp_kauto_free(sp_kauto *a);
void sp_kauto_add(sp_kauto *a, double t_seg, double t_spec, double t_target);
int sp_kauto_k(sp_kauto *a);
void sp_kauto_estimates(const sp_kauto *a, double *alpha, double *beta, double *nu);

/* ---- SSE parser (engine/sp_sse.c: the WHATWG "event stream" rules) ----
   Feed it arbitrary chunks of a response body; it queues complete events. */
typedef struct sp_sse_event {
  const char *event;  /* event type, "message" when none given (NUL-terminated) */
  size_t event_len;   /* bytes in event */
  const char *data;   /* data lines joined with "\n", final "\n" removed (NUL-terminated, may hold NULs) */
  size_t data_len;    /* bytes in data */
  const char *id;     /* last event id in effect at dispatch, "" if none (NUL-terminated) */
  size_t id_len;      /* bytes in id */
  long retry;         /* last valid retry value seen, -1 if none */
} sp_sse_event;
/* max_event_bytes bounds a single line and an event's accumulated data;
   0 means the default of 16 MiB. NULL on out of memory. */
sp_sse *sp_sse_new(size_t max_event_bytes);
void sp_sse_free(sp_sse *p);
/* 0 ok; -1 error (see sp_sse_error). After an error every feed fails. */
int sp_sse_feed(sp_sse *p, const char *buf, size_t len);
/* 1 = an event was written to *ev (pointers valid until the next
   next/feed/finish/free call), 0 = none pending. Events come in stream order. */
int sp_sse_next(sp_sse *p, sp_sse_event *ev);
/* End of stream: drops any unterminated line and undispatched event; returns 1
   if that discarded event data, else 0. Queued events stay drainable, the last
   event id and retry persist, and the parser accepts a new stream (a BOM again). */
int sp_sse_finish(sp_sse *p);
/* Message of the last error, "" if none. */
const char *sp_sse_error(const sp_sse *p);

/* ---- keyed randomness (simulated backend) ----------------------------- */
/* A uniform draw in [0,1) that depends only on its key, never on call order. */
double sp_rand_keyed(uint64_t seed, const char *qid, size_t qid_len, int hop,
                     const char *kind, int branch);

/* ---- theory (engine/sp_theory.c; the notation is in sp_theory.h) ------- */
/* Corollary 1: oracle relative latency 1 - p(1-alpha)/(1+beta). */
double sp_theory_rel_lat_star(double p, double alpha, double beta);
/* Corollary 3: bounded-window relative latency with mu_k = (1-p^k)/(1-p);
   k = 1 gives 1, unbounded k (INFINITY, or SP_K_UNBOUNDED) gives RelLat*.
   k in [0, 1) is NaN. */
double sp_theory_rel_lat_k(double p, double alpha, double beta, double k);
/* Deterministic thread count (1+beta)/(alpha+beta) (Theorem 4, k_det). */
double sp_theory_k_det(double alpha, double beta);
/* Theorem 4: upper bound on the starvation probability with k threads. */
double sp_theory_p_starve(double k, double alpha, double beta, double nu);
/* Corollary 5: threads needed for P_starve <= eps, at least 1;
   SP_K_UNBOUNDED when no finite k does (alpha + beta = 0), 0 on invalid input. */
int sp_theory_k_eps(double alpha, double beta, double nu, double eps);

/* ---- paired bootstrap (engine/sp_bootstrap.c, used by specula.stats) --------- */
/* n pairs (base[i], other[i]) with diffs[i] = other[i] - base[i]; rank[i]
   the 1-based rank of diffs[i] among the diffs, sorted[r-1] the diff of
   rank r; the median sits at ranks lo_r and lo_r + 1 with weight frac.
   Fills means, medians, ratios[0..iters). state: metrics.prng's state. */
void sp_boot_paired(int n, int iters, int32_t state, const double *diffs, const double *base,
                    const double *other, const int *rank, const double *sorted, int lo_r, double frac,
                    int *counts, double *means, double *medians, double *ratios);
/* sp_boot_paired for m measures of the same n queries in one pass (one
   draw per query per resample, shared): diffs, base, other, rank, sorted are
   m blocks of n, measure by measure; counts m*n and idx n scratch; means,
   medians, ratios m blocks of iters. Each block equals sp_boot_paired's. */
void sp_boot_paired_multi(int m, int n, int iters, int32_t state, const double *diffs, const double *base,
                          const double *other, const int *rank, const double *sorted, int lo_r, double frac,
                          int *idx, int *counts, double *means, double *medians, double *ratios);
/* The ratio of sums of n pairs (num[i], den[i]) on each of `iters`
   resamples, as metrics.bootstrap_ci draws them: out[it] = Σ num / Σ den
   in draw order; when Σ den <= 0, 1 if Σ num is 0 too, else +inf (a
   ratio without a standard time is unbounded, not the fastest; the
   RelLat column of --compare). */
void sp_boot_ratio(int n, int iters, int32_t state, const double *num, const double *den, double *out);

/* ---- replay: the window on recorded stage times (sp_replay.c, sp_winplay.c)
 * `specula replay`, the report's timeline and the labs run the speculation
 * window itself on the virtual clock with a run's recorded stage times, so
 * a drawn timeline always ends at the replayed latency, and both are what
 * the engine does. Times in ms. */
typedef struct sp_replay_query sp_replay_query; /* one query's recorded stages (sp_replay.h) */
typedef struct sp_replay_set sp_replay_set;     /* queries loaded from one input (sp_replay.h) */
/* When a thread's speculator starts (as the engine's SP_LAUNCH_*), or as
   the recording says. */
enum { SP_REPLAY_EAGER = 0, SP_REPLAY_SLOT = 1, SP_REPLAY_LAUNCH_RECORDED = -1 };
/* The k a recording ran with, as a k to replay at (beside >= 1 and
   SP_K_UNBOUNDED; SP_K_AUTO cannot be replayed). */
enum { SP_REPLAY_K_RECORDED = -2 };
/* Span kinds of a replayed timeline. */
enum { SP_REPLAY_TL_MODEL = 0, SP_REPLAY_TL_TARGET = 1, SP_REPLAY_TL_SPEC = 2, SP_REPLAY_TL_VERIFY = 3 };
/* Mark kinds: a guess committed, speculative work rolled back, a call or
   branch cancelled, the answer released. */
enum { SP_REPLAY_TL_COMMIT = 0, SP_REPLAY_TL_ROLLBACK = 1, SP_REPLAY_TL_CANCEL = 2, SP_REPLAY_TL_ANSWER = 3 };
typedef struct sp_replay_span {
  int lane;          /* thread lane, 0-based in order of creation */
  int kind;          /* SP_REPLAY_TL_MODEL ... SP_REPLAY_TL_VERIFY */
  int hop;           /* the hop (node) it belongs to; n_hops = the final step */
  int speculative;   /* 1 when it started from a state not yet verified */
  double t0;         /* start */
  double t1;         /* end (>= t0) */
} sp_replay_span;
typedef struct sp_replay_mark {
  int lane;          /* thread lane it is drawn on */
  int kind;          /* SP_REPLAY_TL_COMMIT ... SP_REPLAY_TL_ANSWER */
  int hop;           /* the hop whose verdict (or call) it marks */
  double t;          /* when */
} sp_replay_mark;
typedef struct sp_replay_tl_info {
  size_t n_spans;    /* spans of the timeline (also when the array was too small) */
  size_t n_marks;    /* marks of the timeline (likewise) */
  int lanes;         /* lanes used */
  double wall;       /* replayed latency: when the answer is released */
  double standard;   /* the hops back to back, as sp_replay_run */
  int k;             /* the k replayed (>= 1 or SP_K_UNBOUNDED) */
  int m;             /* candidates per speculator return */
  int launch;        /* the launch replayed: SP_REPLAY_EAGER or SP_REPLAY_SLOT */
} sp_replay_tl_info;
/* Parses a Chrome trace with a "specula" section or results JSONL: 0 with
   *out owned by the caller (sp_replay_set_free), or -1 with a message in err
   naming the input and line. Never aborts on bad input. */
int sp_replay_load_buffer(const char *text, size_t len, sp_replay_set **out, char *err, size_t errlen);
void sp_replay_set_free(sp_replay_set *s);
size_t sp_replay_set_count(const sp_replay_set *s);
/* The i-th query, or NULL past the end; owned by the set. */
const sp_replay_query *sp_replay_set_query(const sp_replay_set *s, size_t i);
/* Replays q as sp_replay_run does (mode NULL = "spechop"; k >= 1,
   SP_K_UNBOUNDED or SP_REPLAY_K_RECORDED; launch as there) and writes its
   timeline: at most
   max_spans spans and max_marks marks. 0 on success; -1 with a message in
   err on bad arguments, or when an array is too small (info then holds the
   counts needed, so the caller can retry with room for them). */
int sp_replay_timeline(const sp_replay_query *q, const char *mode, int k, int launch, sp_replay_span *spans,
                       size_t max_spans, sp_replay_mark *marks, size_t max_marks, sp_replay_tl_info *info,
                       char *err, size_t errlen);

/* ---- the commands computed in C (engine/sp_cmd_theory.c, sp_cmd_replay.c)
 * Their command lines are read and checked in Lua (lua/specula/cmd/theory.lua,
 * replay.lua, from option tables like every command's); these compute and
 * print on stdout, and return the exit status (0, or 2 for an input that
 * cannot be used, after a message on stderr). */
typedef struct sp_theory_args {
  double p;      /* speculation success probability */
  double alpha;  /* relative speculator latency */
  double beta;   /* decoding-to-tool latency ratio */
  double k;      /* threads to evaluate (>= 1, INFINITY = unbounded); with have_k 0, k*_eps */
  double nu;     /* coefficient of variation bound */
  double eps;    /* target starvation probability */
  int have_k;    /* --k given as a count (else k = k*_eps) */
  int json;      /* one JSON object instead of the table */
  int launch;    /* the event model's schedule: SP_REPLAY_EAGER or SP_REPLAY_SLOT */
} sp_theory_args;
int sp_theory_print(const sp_theory_args *a);
/* The most k values one replay takes. */
enum { SP_REPLAY_MAX_KS = 64 };
typedef struct sp_replay_args {
  const char *file;    /* a trace or a results file */
  const char *mode;    /* "spechop", "window", "sequential", or NULL: as recorded */
  const char *config;  /* the configuration of a --compare run's records, or NULL */
  const int *ks;       /* nk values (>= 1 or SP_K_UNBOUNDED); nk 0: the default list */
  size_t nk;
  int launch;          /* SP_REPLAY_EAGER, SP_REPLAY_SLOT or SP_REPLAY_LAUNCH_RECORDED */
  int json;            /* one JSON object per k */
} sp_replay_args;
int sp_replay_print(const sp_replay_args *a);

/* ---- digests, random bytes, signatures, hex, Base64 (engine/sp_crypto.c: OpenSSL libcrypto) *
 * Never hand-written: every primitive is libcrypto's. Used for provenance
 * digests (SHA-256 of scripts, queries, configurations) and MCP
 * authorization (PKCE, JWT client assertions). Errors: -1 and a message in
 * err naming what failed (never key material). */
/* SHA-256 of len bytes at data into out (32 bytes). */
void sp_crypto_sha256(const void *data, size_t len, unsigned char *out);
/* A SHA-256 handle for many short inputs (the query digest every record
   carries; it once held an EVP algorithm fetched once, and stays a handle
   that can fail to be made). sum writes the 32 bytes to out, hex 64
   lowercase hex digits and a NUL (65 bytes); -1 if libcrypto failed. */
typedef struct sp_digester sp_digester;
sp_digester *sp_crypto_digester_new(void);
void sp_crypto_digester_free(sp_digester *d);
int sp_crypto_digester_sum(sp_digester *d, const void *data, size_t len, unsigned char *out);
int sp_crypto_digester_hex(sp_digester *d, const void *data, size_t len, char *out);
/* hex of the concatenation of n pieces (parts[i], lens[i] bytes each): a
   text assembled from pieces, digested without being made (the query
   digest of an input line read in place, specula.run.inputs) */
int sp_crypto_digester_hex_parts(sp_digester *d, const char *const *parts, const size_t *lens, int n, char *out);
/* Incremental SHA-256: new, add any number of times, finish (frees it;
   writes 32 bytes to out). free drops one without finishing. */
typedef struct sp_sha256 sp_sha256;
sp_sha256 *sp_crypto_sha256_new(void);
void sp_crypto_sha256_add(sp_sha256 *h, const void *data, size_t len);
void sp_crypto_sha256_finish(sp_sha256 *h, unsigned char *out);
void sp_crypto_sha256_free(sp_sha256 *h);
/* HMAC-SHA-256 of data under key into out (32 bytes). */
void sp_crypto_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
                           unsigned char *out);
/* len bytes from the system's CSPRNG. 0 ok, -1 err. */
int sp_crypto_random(unsigned char *out, size_t len, char *err, size_t errlen);
/* Signs data as JWS alg ("RS256": RSASSA-PKCS1-v1_5 with SHA-256; "ES256":
   ECDSA P-256 with SHA-256, as the 64-byte r||s JWS wants) with the PEM
   private key. Returns the signature's length (<= outcap, 512 is enough for
   RSA-4096), -1 with err. */
int sp_crypto_sign(const char *alg, const char *pem, size_t pemlen, const void *data, size_t len,
                   unsigned char *out, size_t outcap, char *err, size_t errlen);
/* Checks a JWS signature with a PEM public key (or the private key's public
   part). 1 valid, 0 invalid, -1 err. */
int sp_crypto_verify(const char *alg, const char *pem, size_t pemlen, const void *data, size_t len,
                     const unsigned char *sig, size_t siglen, char *err, size_t errlen);
/* A new private key for alg ("RS256": RSA-2048, "ES256": P-256) as PKCS#8
   PEM into out (NUL-terminated). Returns its length, -1 with err. */
int sp_crypto_keygen(const char *alg, char *out, size_t outcap, char *err, size_t errlen);
/* The public key of a PEM private key as PEM. Returns its length, -1 with err. */
int sp_crypto_pubkey(const char *pem, size_t pemlen, char *out, size_t outcap, char *err,
                     size_t errlen);

/* Encodings, libcrypto's too (no hand-written codec): each returns the
   output's length, or -1 with a message in err ("hex: ...", "base64: ...")
   for input no encoder wrote or an output buffer too small.
   hex_encode: lowercase digits, NUL-terminated (outcap >= 2*len + 1).
   hex_decode: digits of either case, an even number (outcap >= len/2).
   b64_encode: RFC 4648 §4 with "=" padding, or with url §5 (URL-safe
   alphabet, no padding), NUL-terminated (outcap >= 4*ceil(len/3) + 1).
   b64_decode: either alphabet, padded or not (outcap >= 3*ceil(len/4)). */
int sp_crypto_hex_encode(const void *data, size_t len, char *out, size_t outcap, char *err,
                         size_t errlen);
int sp_crypto_hex_decode(const char *text, size_t len, unsigned char *out, size_t outcap, char *err,
                         size_t errlen);
int sp_crypto_b64_encode(const void *data, size_t len, int url, char *out, size_t outcap, char *err,
                         size_t errlen);
int sp_crypto_b64_decode(const char *text, size_t len, unsigned char *out, size_t outcap, char *err,
                         size_t errlen);

/* ---- URLs (engine/sp_url.c: libcurl's URL API) --------------------------- *
 * Percent-encoding and URL parsing; nothing here is hand-written. Errors:
 * -1 and "url: ..." in err. */
/* Percent-encodes len bytes at s as curl_easy_escape does (every byte but
   the unreserved A-Z a-z 0-9 - . _ ~ as %XX, uppercase), except the bytes
   listed in keep (NULL or "": none), which are copied as they are (a path's
   "/", a URI template's reserved characters). NUL-terminated into out
   (outcap >= 3*len + 1); returns its length. */
int sp_url_escape(const char *s, size_t len, const char *keep, char *out, size_t outcap, char *err,
                  size_t errlen);
/* Decodes %XX (either case) as curl_easy_unescape does (a "%" not followed
   by two hex digits stays as it is); form != 0 reads "+" as a space first
   (application/x-www-form-urlencoded). outcap >= len + 1; returns the length. */
int sp_url_unescape(const char *s, size_t len, int form, char *out, size_t outcap, char *err,
                    size_t errlen);
/* The parts of an absolute URL, as curl_url reads it (any scheme, the path
   as written: no dot-segment removal): scheme, host, port, path, query,
   each copied into out one after another; parts[2*i] is part i's offset,
   parts[2*i + 1] its length, -1 when the URL has none (port, query; the
   path is at least "/"). Userinfo and fragment are left out. 0 ok, -1 with
   err for text curl does not take as an absolute URL. */
enum { SP_URL_SCHEME = 0, SP_URL_HOST = 1, SP_URL_PORT = 2, SP_URL_PATH = 3, SP_URL_QUERY = 4,
       SP_URL_NPARTS = 5 };
int sp_url_parse(const char *url, size_t len, char *out, size_t outcap, long *parts, char *err,
                 size_t errlen);

/* ---- shared options (sp_opt.c) ------------------------------------------ */
/* The domain of a numeric option several entry points share: p, alpha, beta,
   nu, eps, k, m, seed, concurrency (name without dashes). parse reads text
   (k also takes inf -> INFINITY and auto -> SP_K_AUTO); check tests a number. Both
   return 0, or -1 with "--NAME must be ..., got ..." in err. */
int sp_opt_parse(const char *name, const char *text, double *out, char *err, size_t errlen);
int sp_opt_check(const char *name, double v, char *err, size_t errlen);
/* The default of an option (k, m, eps, nu, seed, concurrency, max_hops,
   ev_cost_ms, predict_top, bootstrap_iterations, bootstrap_seed,
   bootstrap_level, kauto_min, kauto_max, kauto_default), NAN for a name
   without one. default_at walks the table: the i-th name (value in *value),
   NULL past the end. */
double sp_opt_default(const char *name);
const char *sp_opt_default_at(int i, double *value);

#endif
