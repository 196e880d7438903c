#include "sp_sched.h"
#include "sp_outfile.h"
#include "sp_timer.h"
#include "sp_vals.h"
#include <lauxlib.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Work done per idle callback before I/O gets a turn. */
#define SP_DRAIN_BUDGET 20000
#define SP_DRAIN_REAL_NS 20000000ull  /* 20 ms: the longest a virtual drain keeps the loop from signals */

struct sp_waitop {
  sp_op op;                 /* linked to the waiting task */
  sp_task *target;          /* the task waited on */
  sp_waitop *wprev, *wnext; /* links in target->waiters */
};

typedef struct sp_sleepop {
  sp_op op;                 /* linked to the sleeping task */
  sp_deadline dl;           /* its precise deadline */
  sp_ctx *ctx;              /* owning context */
} sp_sleepop;

/* A window job's results waiting for the time sp_job_defer added. */
typedef struct sp_deferop {
  sp_op op;                 /* linked to the job */
  sp_deadline dl;           /* when the job finishes */
  sp_ctx *ctx;              /* owning context */
  sp_task *job;             /* the job (op.task is cleared before a cancel) */
  int status;               /* SP_TASK_DONE or SP_TASK_FAILED */
  sp_jobres res;            /* what the job returned; strings are owned copies */
} sp_deferop;

static void task_resume(sp_ctx *ctx, sp_runnable *r);
static void job_args_free(sp_task *t);
static void task_end(sp_task *t, int state);
static void task_unref(sp_task *t);
static void task_reap_later(sp_task *t);

double sp_now_ms(void) { return (double)uv_hrtime() / 1e6; }

double sp_clock_ms(const sp_ctx *ctx) {
  return ctx ? (double)sp_timers_now(&ctx->timers) / 1e6 : sp_now_ms();
}

int sp_clock_virtual(const sp_ctx *ctx) { return ctx && ctx->timers.virt; }

const sp_clock *sp_ctx_clock(const sp_ctx *ctx) { return ctx ? &ctx->timers : NULL; }

int sp_clock_set_virtual(sp_ctx *ctx, int on, char *err, size_t errlen) {
  if (!ctx) return -1;
  on = on != 0;
  if (on == ctx->timers.virt) return 0;
  /* deadlines armed on one clock mean nothing on the other */
  if (ctx->timers.n > 0 || ctx->counts.transfers > 0) {
    snprintf(err, errlen, "clock: cannot switch while timers or transfers are pending");
    return -1;
  }
  ctx->timers.virt = on;
  ctx->timers.vnow = 0;
  return 0;
}

static void on_ready_idle(uv_idle_t *h) { sp_sched_drain((sp_ctx *)h->data); }

/* Before blocking in poll, release what finished in callbacks that ran
   outside the drain (curl completions, timers). */
static void on_reap_prepare(uv_prepare_t *h) { sp_sched_reap((sp_ctx *)h->data); }

/* A deadline armed on the virtual clock: the scheduler advances virtual
   time, so it must keep the loop turning. */
static void wake_loop(void *ctx) { sp_sched_poke(ctx); }

static void sched_cancel(sp_ctx *ctx);
static void sched_close(sp_ctx *ctx);
static void sched_release(sp_ctx *ctx);
static const sp_owner sched_owner = { sched_cancel, sched_close, NULL, sched_release };

int sp_sched_init(sp_ctx *ctx) {
  sp_sched *s = calloc(1, sizeof *s);
  if (!s) return -1;
  ctx->sched = s;
  s->co_table_ref = LUA_NOREF;
  s->worker_body_ref = LUA_NOREF;
  s->disp_ref = LUA_NOREF;
  uv_idle_init(&ctx->loop, &s->ready_idle);
  s->ready_idle.data = ctx;
  uv_prepare_init(&ctx->loop, &s->reap_prep);
  s->reap_prep.data = ctx;
  uv_prepare_start(&s->reap_prep, on_reap_prepare);
  uv_unref((uv_handle_t *)&s->reap_prep);  /* never keeps the loop alive */
  s->next_id = 1;
  ctx->timers.wake = wake_loop;
  ctx->timers.wake_ud = ctx;
  sp_ctx_own(ctx, SP_OWN_SCHED, &sched_owner);
  return 0;
}

void sp_ctx_set_main(sp_ctx *ctx, sp_task *t) {
  if (!ctx || !t || ctx->sched->main_task) return;
  t->refs++;
  ctx->sched->main_task = t;
}

/* Runs. With thousands of queries in flight a plain FIFO runs one entry
   of each in turn, and by its next turn every query's window, coroutines
   and tables have left the cache (bench/README.md, the user's path, stop
   59). So an entry that the running entry's group (its window) queues,
   while that group has nothing else queued, goes to the head of the queue
   behind the ones it queued before in the same way (the run) and runs
   next, up to SP_RUN_MAX (sp_sched.h) in a row; after that, or when the
   group has entries further back, it queues at the tail. A group's own
   entries keep their FIFO order (one joins the run only when none of its
   group waits behind it), so what a window does, and each query's record,
   is what the FIFO gave; only how the queries' entries interleave
   changes. Entries of no group (the runner, other tasks) and entries
   queued outside any run (timers, I/O) go to the tail. With fewer than
   SP_RUN_WINDOWS windows live their data stays in cache anyway, and the
   queue is plain FIFO: the real clock's interleaving of a few queries is
   what it was (a cassette replays a recording's queueing delays to within
   0.002 of RelLat, spec/functional/cassette_timing_spec.lua). */

void sp_sched_enqueue(sp_ctx *ctx, sp_runnable *r) {
  if (r->queued) return;
  sp_sched *s = ctx->sched;
  sp_rgroup *g = r->group;
  r->queued = 1;
  if (g && g == s->run_group && g->queued == 0 && s->run_len < SP_RUN_MAX
      && ctx->counts.windows >= SP_RUN_WINDOWS) {
    sp_runnable *after = s->run_last;
    r->next = after ? after->next : s->ready_head;
    if (after) after->next = r;
    else s->ready_head = r;
    if (!r->next) s->ready_tail = r;
    s->run_last = r;
    r->in_run = 1;
  } else {
    r->next = NULL;
    r->in_run = 0;
    if (g) g->queued++;
    if (s->ready_tail) s->ready_tail->next = r;
    else s->ready_head = r;
    s->ready_tail = r;
  }
  ctx->counts.ready++;
  if (!uv_is_active((uv_handle_t *)&s->ready_idle))
    uv_idle_start(&s->ready_idle, on_ready_idle);
}

static sp_runnable *dequeue(sp_ctx *ctx) {
  sp_sched *s = ctx->sched;
  sp_runnable *r = s->ready_head;
  if (!r) return NULL;
  s->ready_head = r->next;
  if (!s->ready_head) s->ready_tail = NULL;
  if (s->run_last == r) s->run_last = NULL;
  if (!r->in_run) {
    if (r->group) r->group->queued--;
    s->run_len = 0;   /* the group's turn begins */
  }
  s->run_group = r->group;
  s->run_len++;
  r->next = NULL;
  r->queued = 0;
  r->in_run = 0;
  ctx->counts.ready--;
  return r;
}

void sp_sched_unqueue(sp_ctx *ctx, sp_runnable *r) {
  if (!r->queued) return;
  sp_sched *s = ctx->sched;
  sp_runnable *prev = NULL, *it = s->ready_head;
  while (it && it != r) {
    prev = it;
    it = it->next;
  }
  if (!it) return;
  if (prev) prev->next = r->next;
  else s->ready_head = r->next;
  if (s->ready_tail == r) s->ready_tail = prev;
  if (s->run_last == r) s->run_last = prev;   /* (the run is a prefix: prev is in it, or none) */
  if (!r->in_run && r->group) r->group->queued--;
  r->next = NULL;
  r->queued = 0;
  r->in_run = 0;
  ctx->counts.ready--;
}

/* The collector's pause, as the allocation a cycle waits for: on a heap
   under SP_GC_SLACK_MIN_KB that much, above it twice what the heap holds
   (a pause of 300) up to SP_GC_SLACK_MAX_KB; from 32 MB on, the pause
   stays at 150 (peak memory of large batches). Twice, not once (LuaJIT's
   default): with 2,000 queries in flight the heap (~9 MB) is out of
   cache, and every cycle marks and sweeps all of it again; half the
   cycles took a one-hop run's simulated cache misses from 1.20 M to
   1.01 M and its CPU by 0.91-0.93, peak RSS +2.3 MB (bench/README.md,
   stop 56). The cap is unchanged, so a large batch's peak is too. A cap
   of 8 MB took 10,000 live trajectories (19 MB of live Lua heap) from 84
   to 78 MB of peak RSS but cost 25-40 % more CPU, each extra cycle marking
   the whole cold heap (bench/README.md, scale): speed won. A cycle marks everything live, so a
   small heap (the loaded modules and a few hundred queries) with a
   proportional pause alone would run many cycles that each re-mark the
   same data: hence the minimum. It is kept small because heap the
   collector lets grow is memory touched for the first time, a page fault
   per 4 KB: 16 MB of it was about 4,000 faults, 20-25 us of CPU each on a
   2-CPU VM, more than the cycles it saved (bench/README.md, the user's
   path). Loop context; run every 256 runnables or jobs, since a pause set
   for the heap of one moment is only read when the next cycle ends. */
#define SP_GC_SLACK_MIN_KB 4096
#define SP_GC_SLACK_MAX_KB 16384
#define SP_GC_PAUSE_MIN 150
#define SP_GC_PAUSE_MAX 1000

static void gc_tune(sp_ctx *ctx) {
  lua_State *L = ctx->L;
  if (!L) return;
  int kb = lua_gc(L, LUA_GCCOUNT, 0);
  int slack = kb < SP_GC_SLACK_MIN_KB ? SP_GC_SLACK_MIN_KB
              : kb > SP_GC_SLACK_MAX_KB / 2 ? SP_GC_SLACK_MAX_KB : 2 * kb;
  int pause = kb > 0 ? 100 + (int)((long long)slack * 100 / kb) : SP_GC_PAUSE_MAX;
  if (pause < SP_GC_PAUSE_MIN) pause = SP_GC_PAUSE_MIN;
  if (pause > SP_GC_PAUSE_MAX) pause = SP_GC_PAUSE_MAX;
  if (pause != ctx->sched->gc_pause) {
    lua_gc(L, LUA_GCSETPAUSE, pause);
    ctx->sched->gc_pause = pause;
  }
}

void sp_sched_gc_defer(lua_State *L) {
  /* LUA_GCRESTART with -1 sets the threshold to the heap times the pause:
     a pause for (now + the minimum slack), then the state's own again */
  int kb = lua_gc(L, LUA_GCCOUNT, 0);
  int pause = lua_gc(L, LUA_GCSETPAUSE, kb > 0 ? (int)(100LL * (kb + SP_GC_SLACK_MIN_KB) / kb) : SP_GC_PAUSE_MAX);
  lua_gc(L, LUA_GCRESTART, -1);
  lua_gc(L, LUA_GCSETPAUSE, pause);
}

void sp_sched_poke(sp_ctx *ctx) {
  if (!uv_is_active((uv_handle_t *)&ctx->sched->ready_idle))
    uv_idle_start(&ctx->sched->ready_idle, on_ready_idle);
}

void sp_sched_drain(sp_ctx *ctx) {
  /* the dispatcher counts the jobs it takes against the same budget */
  ctx->sched->budget = SP_DRAIN_BUDGET;
  sp_runnable *r;
  uint64_t t0 = ctx->timers.virt ? uv_hrtime() : 0;
  unsigned advances = 0;
  for (;;) {
    while (ctx->sched->budget-- > 0 && (r = dequeue(ctx)) != NULL) {
      if (ctx->sched->reap) sp_sched_reap(ctx);
      if ((ctx->sched->budget & 255) == 0) {
        gc_tune(ctx);
        if (ctx->outfiles) sp_outfile_tick(ctx);
      }
      r->run(ctx, r);
      ctx->sched->run_group = NULL;
    }
    /* Virtual clock: nothing is runnable at this instant, so time moves to
       the next deadline. The loop still gets a turn every budget's worth
       and every SP_DRAIN_REAL_NS of real time (checked every 8 instants),
       for signals and shutdown: an agent slow in real time (CPU, a blocking
       call) never advances the virtual clock, and a SIGTERM must not wait
       for the whole run. */
    if (!ctx->timers.virt || ctx->sched->ready_head || ctx->sched->budget <= 0 || ctx->stopping) break;
    if ((++advances & 7) == 0 && uv_hrtime() - t0 > SP_DRAIN_REAL_NS) break;
    if (ctx->sched->reap) sp_sched_reap(ctx);
    if (sp_timers_advance(&ctx->timers) == 0) break;
  }
  sp_sched_reap(ctx);
  sp_vals_sweep(ctx);
  gc_tune(ctx);
  /* the records this drain wrote reach their files before the loop waits */
  if (ctx->outfiles) sp_outfile_flush_all(ctx);
  if (!ctx->sched->ready_head && !(ctx->timers.virt && ctx->timers.n > 0)) uv_idle_stop(&ctx->sched->ready_idle);
}

/* Put a runnable back at the head of the queue (a fresh job handed to the
   dispatcher, which takes it with sp_job_next). */
static void requeue_front(sp_ctx *ctx, sp_runnable *r) {
  r->queued = 1;
  r->in_run = 1;   /* dequeued a moment ago: back where it was, not counted again */
  r->next = ctx->sched->ready_head;
  ctx->sched->ready_head = r;
  if (!ctx->sched->ready_tail) ctx->sched->ready_tail = r;
  if (!ctx->sched->run_last) ctx->sched->run_last = r;
  ctx->counts.ready++;
}

/* ---- task lifetime ------------------------------------------------------ */

static int alloc_id(sp_ctx *ctx) {
  if (ctx->sched->n_free_ids > 0) return ctx->sched->free_ids[--ctx->sched->n_free_ids];
  return ctx->sched->next_id++;
}

static void free_id(sp_ctx *ctx, int id) {
  if (ctx->sched->n_free_ids == ctx->sched->cap_free_ids) {
    int cap = ctx->sched->cap_free_ids ? ctx->sched->cap_free_ids * 2 : 256;
    int *p = realloc(ctx->sched->free_ids, (size_t)cap * sizeof *p);
    if (!p) return; /* the id is simply never reused */
    ctx->sched->free_ids = p;
    ctx->sched->cap_free_ids = cap;
  }
  ctx->sched->free_ids[ctx->sched->n_free_ids++] = id;
}

/* Task structs are recycled: a window makes several per hop, and
   malloc/free showed in the profile. A recycled struct is cleared up to
   its job arguments, which must stay the last member. */
_Static_assert(offsetof(sp_task, call) + sizeof(sp_jobcall) == sizeof(sp_task),
               "sp_task.call must be the last member");
#define SP_TASK_POOL_MAX 4096

static sp_task *task_alloc(sp_ctx *ctx, sp_task *parent) {
  sp_task *t = ctx->sched->task_pool;
  if (t) {
    ctx->sched->task_pool = t->reap_next;
    ctx->sched->ntask_pool--;
    memset(t, 0, offsetof(sp_task, call));   /* call: cleared when it ended (job_args_free) */
  } else {
    t = calloc(1, sizeof *t);
    if (!t) return NULL;
  }
  t->ctx = ctx;
  t->id = alloc_id(ctx);
  t->state = SP_TASK_NEW;
  t->refs = 1; /* the engine's, dropped when reaped */
  t->run.run = task_resume;
  t->worker_ref = LUA_NOREF;
  t->ops.next = t->ops.prev = &t->ops;
  if (parent && parent->state < SP_TASK_DONE) {
    t->parent = parent;
    t->next_sib = parent->child;
    if (parent->child) parent->child->prev_sib = t;
    parent->child = t;
    t->speculative = parent->speculative;
    t->window_node = parent->window_node;
    t->job_id = parent->job_id;
    t->job_thread = parent->job_thread;
    t->job_born_ns = parent->job_born_ns;
  }
  t->all_next = ctx->sched->all_tasks;
  if (ctx->sched->all_tasks) ctx->sched->all_tasks->all_prev = t;
  ctx->sched->all_tasks = t;
  ctx->counts.tasks++;
  return t;
}

static void task_detach_parent(sp_task *t) {
  if (!t->parent) return;
  if (t->prev_sib) t->prev_sib->next_sib = t->next_sib;
  else t->parent->child = t->next_sib;
  if (t->next_sib) t->next_sib->prev_sib = t->prev_sib;
  t->parent = t->prev_sib = t->next_sib = NULL;
}

static void task_unref(sp_task *t) {
  if (--t->refs > 0) return;
  sp_ctx *ctx = t->ctx;
  free_id(ctx, t->id);
  free(t->error);
  t->error = NULL;
  if (ctx->sched->ntask_pool < SP_TASK_POOL_MAX && !ctx->stopping) {
    t->reap_next = ctx->sched->task_pool;
    ctx->sched->task_pool = t;
    ctx->sched->ntask_pool++;
    return;
  }
  free(t);
}

sp_task *sp_task_new(sp_ctx *ctx, sp_task *parent) {
  if (!ctx || ctx->stopping) return NULL;
  sp_task *t = task_alloc(ctx, parent);
  if (!t) return NULL;
  t->run.group = parent ? parent->run.group : NULL;   /* a job's tasks are its window's */
  t->refs++; /* Lua's handle */
  t->state = SP_TASK_READY;
  t->refs++; /* the queue's */
  sp_sched_enqueue(ctx, &t->run);
  return t;
}

/* Parked dispatcher coroutines kept for reuse; beyond this they are released. */
#define SP_POOL_MAX 4096

sp_task *sp_job_new(sp_ctx *ctx, int kind, sp_task_hook hook, void *ud) {
  if (ctx->stopping) return NULL;
  sp_task *t = task_alloc(ctx, NULL);
  if (!t) return NULL;
  memset(&t->call, 0, sizeof t->call);
  t->call.kind = kind;
  t->job = 1;
  t->hook = hook;
  t->hook_ud = ud;
  t->job_id = t->id;
  /* the instant the window launched it, as the window times its stages */
  t->job_born_ns = ctx->sched->hook_clock ? ctx->sched->hook_now : sp_timers_now(&ctx->timers);
  return t;
}

int sp_task_job(const sp_task *t, double *born_ms, int *thread) {
  if (!t || !t->job_id) return 0;
  if (born_ms) *born_ms = (double)t->job_born_ns / 1e6;
  if (thread) *thread = t->job_thread;
  return t->job_id;
}

/* Release a job's arguments (it ended, or was cancelled while queued):
   the slots it holds a reference to and its string. */
static void job_args_free(sp_task *t) {
  sp_jobcall *c = &t->call;
  int *held[] = {&c->state, &c->step, &c->obs, &c->cands, &c->actx, &c->args};
  for (size_t i = 0; i < sizeof held / sizeof held[0]; i++) {
    sp_vals_release(t->ctx, *held[i]);
    *held[i] = SP_NOVAL;
  }
  free((char *)c->tool);
  c->tool = NULL;
  c->tool_len = 0;
}

const sp_jobcall *sp_job_call(const sp_task *t) { return t ? &t->call : NULL; }

/* Drop the registry anchor of a dispatcher coroutine that will never run
   again (its job was cancelled while waiting, or the pool is full). */
static void anchor_drop(sp_ctx *ctx, int ref) {
  lua_State *L = ctx->L;
  if (!L || ref == LUA_NOREF || ref == 0) return;
  lua_rawgeti(L, LUA_REGISTRYINDEX, ctx->sched->co_table_ref);
  lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
  lua_pushnil(L);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  luaL_unref(L, LUA_REGISTRYINDEX, ref);
}

/* A dispatcher coroutine: a parked one, or a new one about to start the
   Lua dispatcher body. */
static lua_State *disp_take(sp_ctx *ctx, int *ref) {
  if (ctx->sched->npool > 0) {
    ctx->sched->npool--;
    *ref = ctx->sched->pool_refs[ctx->sched->npool];
    return ctx->sched->pool[ctx->sched->npool];
  }
  lua_State *L = ctx->L;
  lua_State *co = lua_newthread(L);
  /* CO[co] = true: Lua knows a dispatcher coroutine always runs the job C
     says is current (sched.current) */
  lua_rawgeti(L, LUA_REGISTRYINDEX, ctx->sched->co_table_ref);
  lua_pushvalue(L, -2);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  *ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_rawgeti(co, LUA_REGISTRYINDEX, ctx->sched->worker_body_ref);
  return co;
}

/* A dispatcher with no job left goes back to the pool. */
static void disp_park(sp_ctx *ctx, lua_State *co, int ref) {
  if (ctx->sched->npool == ctx->sched->cappool && ctx->sched->cappool < SP_POOL_MAX) {
    int cap = ctx->sched->cappool ? ctx->sched->cappool * 2 : 64;
    if (cap > SP_POOL_MAX) cap = SP_POOL_MAX;
    lua_State **p = realloc(ctx->sched->pool, (size_t)cap * sizeof *p);
    if (p) ctx->sched->pool = p;
    int *r = p ? realloc(ctx->sched->pool_refs, (size_t)cap * sizeof *r) : NULL;
    if (r) {
      ctx->sched->pool_refs = r;
      ctx->sched->cappool = cap;
    }
  }
  if (ctx->sched->npool < ctx->sched->cappool) {
    ctx->sched->pool[ctx->sched->npool] = co;
    ctx->sched->pool_refs[ctx->sched->npool] = ref;
    ctx->sched->npool++;
    return;
  }
  anchor_drop(ctx, ref);
}

/* The result slots the dispatcher made, once the window took its own
   references to what it keeps. */
static void release_results(sp_ctx *ctx, const sp_jobres *res) {
  if (!res) return;
  sp_vals_release(ctx, res->state);
  sp_vals_release(ctx, res->step);
  sp_vals_release(ctx, res->actx);
  sp_vals_release(ctx, res->value);
}

/* A job ended: run its hook (unless it was cancelled), then end the task
   and drop the reference of the run that executed it. */
static void job_finish(sp_ctx *ctx, sp_task *t, int status, const sp_jobres *res) {
  t->co = NULL;
  if (t->state >= SP_TASK_DONE) {
    /* cancelled while it ran: nobody wants the result */
    release_results(ctx, res);
    task_reap_later(t);
    task_unref(t);
    return;
  }
  if (t->hook) {
    sp_task_hook hook = t->hook;
    t->hook = NULL;
    t->state = status;
    ctx->sched->hook_now = sp_timers_now(&ctx->timers);
    ctx->sched->hook_clock = 1;
    hook(t, status == SP_TASK_DONE ? res : NULL, status, t->hook_ud);
    ctx->sched->hook_clock = 0;
  }
  release_results(ctx, res);
  task_end(t, status);
  task_unref(t);
}

int sp_sched_run_c(sp_ctx *ctx) {
  sp_runnable *r = ctx->sched->ready_head;
  if (!r || r->run == task_resume) return 0;
  dequeue(ctx);
  r->run(ctx, r);
  ctx->sched->run_group = NULL;
  return 1;
}

sp_task *sp_job_next(sp_ctx *ctx) {
  for (;;) {
    sp_runnable *r = ctx->sched->ready_head;
    if (!r || r->run != task_resume || ctx->stopping || ctx->sched->budget <= 0) break;
    sp_task *t = (sp_task *)r;
    /* a coroutine to resume, or a deferred job whose time has come: the
       loop does that (task_resume); taken here, the deferred one would run
       its function a second time */
    if (!t->job || t->co || t->deferred) break;
    dequeue(ctx);
    if (t->state >= SP_TASK_DONE) {   /* cancelled while queued */
      task_unref(t);
      continue;
    }
    /* the pause follows the heap within a burst of jobs too: one drain's
       jobs can take the heap from 1 to 20 MB, and a pause set for the
       small heap would let it grow past four times that before a cycle */
    if ((--ctx->sched->budget & 255) == 0) {
      gc_tune(ctx);
      if (ctx->outfiles) sp_outfile_tick(ctx);
    }
    t->state = SP_TASK_RUNNING;
    t->call.spec = t->speculative;
    ctx->sched->running = t;
    return t;
  }
  ctx->sched->disp_idle = 1;
  ctx->sched->running = NULL;
  return NULL;
}

int sp_job_take(sp_ctx *ctx, sp_jobcall *out) {
  sp_task *t = sp_job_next(ctx);
  if (!t) return 0;
  *out = t->call;
  return 1;
}

int sp_job_finish(sp_ctx *ctx, int ok, const sp_jobres *res, int *dead, int maxdead) {
  return ctx ? sp_job_done(ctx, ctx->sched->running, ok, res, dead, maxdead) : 0;
}

int sp_job_defer(sp_task *t, double ms) {
  if (!t || !t->job || t->state != SP_TASK_RUNNING || t->ctx->sched->running != t) return -1;
  if (ms > 0) t->defer_ms += ms;
  return 0;
}

/* The result strings a deferral keeps: copies, since the dispatcher's
   bytes are only valid until sp_job_done returns. */
#define SP_RES_STRINGS(r) {&(r)->tool, &(r)->key, &(r)->reason, &(r)->error}

static void defer_free(sp_deferop *d) {
  const char **strs[] = SP_RES_STRINGS(&d->res);
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) free((char *)*strs[i]);
  free(d);
}

static void defer_fired(sp_deadline *dl) {
  sp_deferop *d = (sp_deferop *)((char *)dl - offsetof(sp_deferop, dl));
  d->ctx->counts.timers--;
  sp_sched_wake(d->job);   /* task_resume finishes it, in queue order */
}

/* The job ended while waiting (cancelled): its results go unread. */
static void defer_cancel(sp_op *op) {
  sp_deferop *d = (sp_deferop *)op;
  if (d->dl.idx >= 0) {
    d->ctx->counts.timers--;
    sp_timers_remove(&d->ctx->timers, &d->dl);
  }
  release_results(d->ctx, &d->res);
  d->job->deferred = NULL;
  defer_free(d);
}

/* sp_job_done of a job with a deferral: keep its results (strings copied
   out of Lua) and arm the timer the sleep would have armed. 0, or -1 (out
   of memory: the caller finishes the job now). */
static int job_defer_results(sp_ctx *ctx, sp_task *t, int ok, const sp_jobres *res) {
  sp_deferop *d = calloc(1, sizeof *d);
  if (!d) return -1;
  d->ctx = ctx;
  d->job = t;
  d->status = ok ? SP_TASK_DONE : SP_TASK_FAILED;
  d->dl.fire = defer_fired;
  d->dl.idx = -1;
  if (ok && res) {
    d->res = *res;
    const char **strs[] = SP_RES_STRINGS(&d->res);
    const char *from[] = {res->tool, res->key, res->reason, res->error};
    const int lens[] = {res->tool_len, res->key_len, res->reason_len, res->error_len};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) *strs[i] = NULL;
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
      const char *s = from[i];
      if (!s) continue;
      size_t len = lens[i] > 0 ? (size_t)lens[i] : 0;
      char *c = malloc(len + 1);
      if (!c) {
        defer_free(d);
        return -1;
      }
      if (len) memcpy(c, s, len);
      c[len] = '\0';
      *strs[i] = c;
    }
  }
  double whole = t->defer_ms > 1e12 ? 1e12 : t->defer_ms;
  if (sp_timers_add(&ctx->timers, &d->dl, sp_timers_now(&ctx->timers) + (uint64_t)(whole * 1e6)) != 0) {
    defer_free(d);
    return -1;
  }
  if (!ok) release_results(ctx, res);   /* a failure keeps only its message (t->error) */
  ctx->counts.timers++;
  t->defer_ms = 0;
  t->deferred = d;
  t->co = NULL;
  t->state = SP_TASK_WAITING;
  sp_op_link(t, &d->op, defer_cancel);
  task_unref(t);   /* the run that executed it, as a job that waits */
  return 0;
}

/* The deferral's time has come (task_resume, in queue order): finish the
   job as sp_job_done would have. */
static void job_finish_deferred(sp_ctx *ctx, sp_task *t) {
  sp_deferop *d = t->deferred;
  t->deferred = NULL;
  sp_op_unlink(&d->op);
  t->state = SP_TASK_RUNNING;
  job_finish(ctx, t, d->status, d->status == SP_TASK_DONE ? &d->res : NULL);
  defer_free(d);
}

int sp_job_done(sp_ctx *ctx, sp_task *t, int ok, const sp_jobres *res, int *dead, int maxdead) {
  if (!ctx || !t) return 0;
  ctx->sched->running = NULL;
  if (!ok) {
    if (res && res->error) sp_task_set_error(t, res->error, res->error_len > 0 ? (size_t)res->error_len : 0);
    else sp_task_set_error(t, "job failed", 10);
  }
  if (t->defer_ms > 0 && t->state == SP_TASK_RUNNING && job_defer_results(ctx, t, ok, res) == 0)
    return sp_vals_take_dead(ctx, dead, maxdead);
  job_finish(ctx, t, ok ? SP_TASK_DONE : SP_TASK_FAILED, ok ? res : NULL);
  if (!ok) release_results(ctx, res);
  return sp_vals_take_dead(ctx, dead, maxdead);
}

/* Run a dispatcher coroutine until it parks (no job left) or the job it
   runs waits on the loop. `t` is a waiting job resumed in it (NULL: a fresh
   start or a parked dispatcher taking new jobs). */
static void dispatch(sp_ctx *ctx, lua_State *co, int ref, sp_task *t) {
  sp_task *prev = ctx->sched->running;
  lua_State *prev_co = ctx->sched->disp_co;
  int prev_ref = ctx->sched->disp_ref;
  ctx->sched->disp_co = co;
  ctx->sched->disp_ref = ref;
  ctx->sched->disp_idle = 0;
  ctx->sched->running = t;
  if (t) t->state = SP_TASK_RUNNING;
  int nargs = t ? t->nargs : 0;
  if (t) t->nargs = 0;
  int rc = lua_resume(co, nargs);
  sp_task *cur = ctx->sched->running;   /* the job running in co when it stopped */
  int idle = ctx->sched->disp_idle;
  ctx->sched->running = prev;
  ctx->sched->disp_co = prev_co;
  ctx->sched->disp_ref = prev_ref;
  if (rc == LUA_YIELD) {
    lua_settop(co, 0);
    if (idle || !cur) {
      disp_park(ctx, co, ref);
      return;
    }
    if (cur->state == SP_TASK_RUNNING) {
      /* cur waits on the loop inside co: co is its coroutine until it ends */
      cur->co = co;
      cur->worker_ref = ref;
      cur->state = SP_TASK_WAITING;
    } else {
      /* cancelled from its own body: it stops here, with its coroutine */
      anchor_drop(ctx, ref);
      task_reap_later(cur);
    }
    task_unref(cur);
    return;
  }
  /* The dispatcher itself stopped (an error outside the job's protected
     call): the coroutine is dead; the job it ran fails with the message. */
  size_t len = 0;
  const char *msg = rc != 0 ? lua_tolstring(co, -1, &len) : NULL;
  if (cur) {
    if (!msg) msg = "the job dispatcher returned", len = strlen(msg);
    sp_task_set_error(cur, msg, len);
    job_finish(ctx, cur, SP_TASK_FAILED, NULL);
  } else if (msg) {
    fprintf(stderr, "specula: job dispatcher failed: %.*s\n", (int)len, msg);
  }
  lua_settop(co, 0);
  anchor_drop(ctx, ref);
}

void sp_job_start(sp_task *t) {
  t->state = SP_TASK_READY;
  t->refs++;
  sp_sched_enqueue(t->ctx, &t->run);
}

int sp_task_id(const sp_task *t) { return t ? t->id : 0; }
int sp_task_state(const sp_task *t) { return t ? t->state : SP_TASK_CANCELLED; }
sp_task *sp_task_current(sp_ctx *ctx) { return ctx ? ctx->sched->running : NULL; }
int sp_task_current_id(sp_ctx *ctx) { return ctx && ctx->sched->running ? ctx->sched->running->id : 0; }
int sp_task_speculative(const sp_task *t) { return t ? t->speculative : 0; }
const char *sp_task_error(const sp_task *t) { return t && t->error ? t->error : ""; }

void sp_task_release(sp_task *t) {
  if (t) task_unref(t);
}

void sp_task_set_error(sp_task *t, const char *msg, size_t len) {
  if (!t) return;
  free(t->error);
  t->error = malloc(len + 1);
  if (t->error) {
    memcpy(t->error, msg, len);
    t->error[len] = '\0';
  }
}

void sp_op_link(sp_task *t, sp_op *op, sp_op_cancel_fn cancel) {
  op->task = t;
  op->cancel = cancel;
  op->next = &t->ops;
  op->prev = t->ops.prev;
  t->ops.prev->next = op;
  t->ops.prev = op;
}

void sp_op_unlink(sp_op *op) {
  if (!op->task) return;
  op->prev->next = op->next;
  op->next->prev = op->prev;
  op->next = op->prev = NULL;
  op->task = NULL;
}

void sp_sched_wake(sp_task *t) {
  if (t->state >= SP_TASK_DONE || t->run.queued) return;
  if (t->state == SP_TASK_WAITING) t->state = SP_TASK_READY;
  t->refs++;
  sp_sched_enqueue(t->ctx, &t->run);
}

static void wake_waiters(sp_task *t) {
  sp_waitop *w;
  while ((w = t->waiters) != NULL) {
    t->waiters = w->wnext;
    if (t->waiters) t->waiters->wprev = NULL;
    sp_task *waiter = w->op.task;
    sp_op_unlink(&w->op);
    free(w);
    if (waiter) sp_sched_wake(waiter);
  }
}

/* Put a finished task on the reap list: its coroutine is released from the
   loop (the Lua state may not be touched from FFI context). */
/* The part of reaping that needs no Lua state. */
static void reap_now(sp_ctx *ctx, sp_task *t) {
  t->worker_ref = LUA_NOREF;
  t->co = NULL;
  if (t->all_prev) t->all_prev->all_next = t->all_next;
  else ctx->sched->all_tasks = t->all_next;
  if (t->all_next) t->all_next->all_prev = t->all_prev;
  t->all_prev = t->all_next = NULL;
  ctx->counts.tasks--;
  task_unref(t); /* the engine's reference */
}

static void task_reap_later(sp_task *t) {
  if (t->reaping) return;
  t->reaping = 1;
  if (t->job && (t->worker_ref == LUA_NOREF || t->worker_ref == 0)) {
    /* a job holding no coroutine: nothing to release in Lua, so its struct
       goes back to the pool now (the dispatcher runs thousands per drain) */
    reap_now(t->ctx, t);
    return;
  }
  t->reap_next = t->ctx->sched->reap;
  t->ctx->sched->reap = t;
  if (!uv_is_active((uv_handle_t *)&t->ctx->sched->ready_idle))
    uv_idle_start(&t->ctx->sched->ready_idle, on_ready_idle);
}

static void cancel_ops(sp_task *t) {
  while (t->ops.next != &t->ops) {
    sp_op *op = t->ops.next;
    sp_op_unlink(op);
    op->cancel(op);
  }
}

/* A task that ends leaves its group: its window may be freed before a
   cancelled task's queue entry is taken. */
static void leave_group(sp_task *t) {
  sp_rgroup *g = t->run.group;
  if (!g) return;
  if (t->run.queued && !t->run.in_run) g->queued--;
  t->run.group = NULL;
}

/* Everything a task owns ends with it: children and pending operations. */
static void task_end(sp_task *t, int state) {
  leave_group(t);
  job_args_free(t);
  t->state = state;
  if (t == t->ctx->sched->main_task) t->ctx->sched->main_done = 1;
  while (t->child) sp_task_cancel(t->child);
  cancel_ops(t);
  wake_waiters(t);
  task_detach_parent(t);
  task_reap_later(t);
}

void sp_task_cancel(sp_task *t) {
  if (!t || t->state >= SP_TASK_DONE) return;
  if (t->state == SP_TASK_RUNNING) {
    /* Cancelled from its own body: it stops at its next yield. */
    leave_group(t);
    job_args_free(t);
    t->state = SP_TASK_CANCELLED;
    if (t == t->ctx->sched->main_task) t->ctx->sched->main_done = 1;
    while (t->child) sp_task_cancel(t->child);
    cancel_ops(t);
    wake_waiters(t);
    task_detach_parent(t);
    return;
  }
  task_end(t, SP_TASK_CANCELLED);
}

static void task_resume(sp_ctx *ctx, sp_runnable *r) {
  sp_task *t = (sp_task *)r;
  if (t->state >= SP_TASK_DONE || ctx->stopping) {
    task_unref(t); /* the queue's reference */
    return;
  }
  lua_State *L = ctx->L;
  if (t->job) {
    if (t->deferred) {
      job_finish_deferred(ctx, t);
      return;
    }
    if (!t->co) {
      /* a fresh job: a dispatcher takes it (and whatever jobs follow it) */
      requeue_front(ctx, &t->run);
      int ref = LUA_NOREF;
      lua_State *co = disp_take(ctx, &ref);
      dispatch(ctx, co, ref, NULL);
      return;
    }
    /* a job waiting in its dispatcher coroutine: continue it there */
    lua_State *co = t->co;
    int ref = t->worker_ref;
    t->worker_ref = LUA_NOREF;
    dispatch(ctx, co, ref, t);
    return;
  }
  lua_State *co = t->co;
  if (!co) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, ctx->sched->co_table_ref);
    lua_rawgeti(L, -1, t->id);
    co = lua_tothread(L, -1);
    lua_pop(L, 2);
    if (!co) {
      sp_task_set_error(t, "task has no coroutine (spawned outside specula.spawn?)", 54);
      task_end(t, SP_TASK_FAILED);
      task_unref(t);
      return;
    }
    t->co = co;
  }
  int nargs = t->nargs;
  t->nargs = 0;
  t->state = SP_TASK_RUNNING;
  sp_task *prev = ctx->sched->running;
  ctx->sched->running = t;
  int rc = lua_resume(co, nargs);
  ctx->sched->running = prev;
  if (rc == LUA_YIELD) {
    lua_settop(co, 0);
    if (t->state == SP_TASK_RUNNING) t->state = SP_TASK_WAITING;
    else if (t->state == SP_TASK_CANCELLED) task_reap_later(t);
    task_unref(t);
    return;
  }
  if (t->state == SP_TASK_CANCELLED) {
    lua_settop(co, 0);
    task_reap_later(t);
    task_unref(t);
    return;
  }
  int status = SP_TASK_DONE;
  if (rc != 0) {
    /* The trampoline catches errors; this is an error outside it. */
    size_t len = 0;
    const char *msg = lua_tolstring(co, -1, &len);
    luaL_traceback(L, co, msg ? msg : "(error object is not a string)", 0);
    const char *tb = lua_tolstring(L, -1, &len);
    sp_task_set_error(t, tb, len);
    lua_pop(L, 1);
    status = SP_TASK_FAILED;
  } else if (t->error) {
    status = SP_TASK_FAILED;
  }
  lua_settop(co, 0);
  task_end(t, status);
  task_unref(t);
}

/* Release the coroutines of finished tasks. Loop context only. */
void sp_sched_reap(sp_ctx *ctx) {
  while (ctx->sched->reap) {
    sp_task *t = ctx->sched->reap;
    ctx->sched->reap = t->reap_next;
    t->reap_next = NULL;
    if (ctx->L && !t->job && ctx->sched->co_table_ref != LUA_NOREF && ctx->sched->co_table_ref != 0) {
      lua_State *L = ctx->L;
      lua_rawgeti(L, LUA_REGISTRYINDEX, ctx->sched->co_table_ref);
      lua_pushnil(L);
      lua_rawseti(L, -2, t->id);
      lua_pop(L, 1);
    }
    if (t->worker_ref != LUA_NOREF && t->worker_ref != 0 && ctx->L) {
      /* A job that did not finish cleanly: its worker is abandoned. */
      lua_State *L = ctx->L;
      lua_rawgeti(L, LUA_REGISTRYINDEX, ctx->sched->co_table_ref);
      lua_rawgeti(L, LUA_REGISTRYINDEX, t->worker_ref);
      lua_pushnil(L);
      lua_rawset(L, -3);
      lua_pop(L, 1);
      luaL_unref(L, LUA_REGISTRYINDEX, t->worker_ref);
    }
    reap_now(ctx, t);
  }
}

/* Shutdown, first step (the windows are cancelled already): cancel every
   live task and drop the main task's reference. */
static void sched_cancel(sp_ctx *ctx) {
  /* Roots first: cancelling a task cancels its descendants. */
  for (;;) {
    sp_task *t = ctx->sched->all_tasks;
    while (t && t->state >= SP_TASK_DONE) t = t->all_next;
    if (!t) break;
    while (t->parent && t->parent->state < SP_TASK_DONE) t = t->parent;
    sp_task_cancel(t);
    if (t->state == SP_TASK_CANCELLED && !t->reaping) task_reap_later(t);
  }
  /* Queued resumes are dropped (stopping is set), releasing their refs. */
  sp_runnable *r;
  while ((r = dequeue(ctx)) != NULL) r->run(ctx, r);
  sp_sched_reap(ctx);
  if (ctx->sched->main_task) {
    sp_task_release(ctx->sched->main_task);
    ctx->sched->main_task = NULL;
  }
}

/* Shutdown, once the Lua state is closed: release what its finalizers
   ended and close the scheduler's own handles. */
static void sched_close(sp_ctx *ctx) {
  sp_sched *s = ctx->sched;
  sp_sched_reap(ctx);
  uv_idle_stop(&s->ready_idle);
  uv_close((uv_handle_t *)&s->ready_idle, NULL);
  uv_close((uv_handle_t *)&s->reap_prep, NULL);
}

/* Shutdown, last step: free the pools and the state itself. */
static void sched_release(sp_ctx *ctx) {
  sp_sched *s = ctx->sched;
  free(s->free_ids);
  free(s->pool);
  free(s->pool_refs);
  while (s->task_pool) {
    sp_task *t = s->task_pool;
    s->task_pool = t->reap_next;
    free(t);
  }
  free(s);
  ctx->sched = NULL;
}


/* ---- waits between tasks ------------------------------------------------ */

static void waitop_cancel(sp_op *op) {
  sp_waitop *w = (sp_waitop *)op;
  sp_task *target = w->target;
  if (w->wprev) w->wprev->wnext = w->wnext;
  else target->waiters = w->wnext;
  if (w->wnext) w->wnext->wprev = w->wprev;
  free(w);
}

int sp_task_wait(sp_task *waiter, sp_task *target) {
  if (!target || target->state >= SP_TASK_DONE) return 1;
  if (!waiter || waiter == target) return 1;
  sp_waitop *w = calloc(1, sizeof *w);
  if (!w) return 1;
  w->target = target;
  w->wnext = target->waiters;
  if (target->waiters) target->waiters->wprev = w;
  target->waiters = w;
  sp_op_link(waiter, &w->op, waitop_cancel);
  return 0;
}

void sp_task_unwait(sp_task *waiter) {
  if (!waiter) return;
  sp_op *op = waiter->ops.next;
  while (op != &waiter->ops) {
    sp_op *next = op->next;
    if (op->cancel == waitop_cancel) {
      sp_op_unlink(op);
      waitop_cancel(op);
    }
    op = next;
  }
}

int sp_task_take_stall(sp_task *waiter) {
  if (!waiter || !waiter->stalled) return 0;
  waiter->stalled = 0;
  return 1;
}

static int waits_on_task(const sp_task *t) {
  for (const sp_op *op = t->ops.next; op != &t->ops; op = op->next)
    if (op->cancel == waitop_cancel) return 1;
  return 0;
}

int sp_sched_break_stall(sp_ctx *ctx) {
  int n = 0;
  for (sp_task *t = ctx->sched->all_tasks; t; t = t->all_next) {
    if (t == ctx->sched->main_task || t->state != SP_TASK_WAITING || !waits_on_task(t)) continue;
    sp_task_unwait(t);
    t->stalled = 1;
    sp_sched_wake(t);
    n++;
  }
  return n;
}

/* ---- sleep -------------------------------------------------------------- */

static void sleep_fired(sp_deadline *d) {
  sp_sleepop *s = (sp_sleepop *)((char *)d - offsetof(sp_sleepop, dl));
  sp_task *t = s->op.task;
  if (t) t->ctx->counts.timers--;
  sp_op_unlink(&s->op);
  free(s);
  if (t) sp_sched_wake(t);
}

static void sleep_cancel(sp_op *op) {
  sp_sleepop *s = (sp_sleepop *)op;
  s->ctx->counts.timers--;
  sp_timers_remove(&s->ctx->timers, &s->dl);
  free(s);
}

int sp_sleep(sp_task *t, double ms, char *err, size_t errlen) {
  if (!t || t->state != SP_TASK_RUNNING) {
    snprintf(err, errlen, "sleep: must be called from the running task");
    return -1;
  }
  if (!(ms > 0)) { /* NaN, zero and negatives yield one turn */
    sp_sched_wake(t);
    return 0;
  }
  sp_ctx *ctx = t->ctx;
  sp_sleepop *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "sleep: out of memory");
    return -1;
  }
  s->ctx = ctx;
  s->dl.fire = sleep_fired;
  s->dl.idx = -1;
  double whole = ms > 1e12 ? 1e12 : ms;
  if (sp_timers_add(&ctx->timers, &s->dl, sp_timers_now(&ctx->timers) + (uint64_t)(whole * 1e6)) != 0) {
    free(s);
    snprintf(err, errlen, "sleep: cannot arm the timer");
    return -1;
  }
  ctx->counts.timers++;
  sp_op_link(t, &s->op, sleep_cancel);
  return 0;
}

int sp_sleep_running(sp_ctx *ctx, double ms, char *err, size_t errlen) {
  return sp_sleep(ctx ? ctx->sched->running : NULL, ms, err, errlen);
}
