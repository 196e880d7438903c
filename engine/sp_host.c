#include "sp_host.h"
#include "sp_luacache.h"
#include "sp_jsonenc.h"
#include "sp_sched.h"
#include "sp_signal.h"
#include "sp_window.h"
#include <lauxlib.h>
#include <lualib.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef SPECULA_SOURCE_DIR
#define SPECULA_SOURCE_DIR "."
#endif
#ifndef SPECULA_DATADIR
#define SPECULA_DATADIR "/usr/local/share/specula"
#endif

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Writes "<a><b>" into out; 0, or -1 when it does not fit (a cut-off path
   would name some other directory, so it is never used). */
static int join_path(char *out, size_t n, const char *a, const char *b) {
  int w = snprintf(out, n, "%s%s", a, b);
  return w >= 0 && (size_t)w < n ? 0 : -1;
}

/* Where the Lua tree is: $SPECULA_HOME, then next to an installed binary
   (<prefix>/share/specula/lua), then the source tree the binary was built
   from, then the install prefix. A candidate whose path does not fit is
   skipped; a $SPECULA_HOME that does not fit is an error. */
static int find_root(const char *argv0, char *root, size_t n, char *err, size_t errlen) {
  const char *env = getenv("SPECULA_HOME");
  if (env && *env) {
    /* a SPECULA_HOME that does not hold the tree is the user's mistake:
       said as such, not as a module the boot script cannot find */
    char cand[PATH_MAX + 64];
    if (join_path(cand, sizeof cand, env, "/lua/specula/internal/sched.lua") != 0 || !is_file(cand)) {
      snprintf(err, errlen, "cannot find specula's Lua modules: SPECULA_HOME is '%.200s', which does not hold "
               "lua/specula/internal/sched.lua (set it to the directory holding lua/specula, or unset it)", env);
      return -1;
    }
    return join_path(root, n, env, "");
  }
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = '\0';
      char cand[PATH_MAX + 64];
      if (join_path(cand, sizeof cand, exe, "/../share/specula/lua/specula") == 0 && is_dir(cand) &&
          join_path(root, n, exe, "/../share/specula") == 0)
        return 0;
    }
  }
  /* The build tree wins over an older install of the same prefix. */
  char cand[PATH_MAX + 64];
  if (join_path(cand, sizeof cand, SPECULA_SOURCE_DIR, "/lua/specula") == 0 && is_dir(cand) &&
      join_path(root, n, SPECULA_SOURCE_DIR, "") == 0)
    return 0;
  if (join_path(cand, sizeof cand, SPECULA_DATADIR, "/lua/specula") == 0 && is_dir(cand) &&
      join_path(root, n, SPECULA_DATADIR, "") == 0)
    return 0;
  (void)argv0;
  return -1;
}

static const char *BOOT =
  "local root, ctx = ...\n"
  "if os.getenv('SPECULA_JIT') == 'off' then jit.off() end\n"
  /* Room for the machine code and traces of a large script: at LuaJIT's
     defaults (512 KB of code, 1,000 traces) examples/real_traces filled the
     code area, flushed every trace 158 times and spent most of its time in
     mprotect; this is a ceiling, memory is taken as traces are made. */
  "if jit and jit.opt then jit.opt.start('maxmcode=65536', 'maxtrace=20000') end\n"
  /* LuaJIT's trace log (luajit -jv) and sampling profiler (luajit -jp)
     for the embedded state; the profiler prints when the state closes, so
     the anchor's finalizer stops it. */
  "if os.getenv('SPECULA_JITV') then require('jit.v').start(os.getenv('SPECULA_JITV')) end\n"
  "local prof = os.getenv('SPECULA_PROFILE')\n"
  "if prof and prof ~= '' then\n"
  "  local p = require 'jit.p'\n"
  "  p.start(prof, os.getenv('SPECULA_PROFILE_OUT'))\n"
  "  local anchor = newproxy(true)\n"
  "  getmetatable(anchor).__gc = function() p.stop() end\n"
  "  package.loaded['specula.profile_anchor'] = anchor\n"
  "end\n"
  "package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path\n"
  "package.loaded['specula.host'] = { ctx = ctx, root = root,\n"
  "  lua_dir = root .. '/lua', policies_dir = root .. '/policies', embedded = true }\n"
  "local sched = require 'specula.internal.sched'\n"
  "return sched.co_table, sched.worker_body, sched.vals\n";

int sp_host_init(sp_ctx *ctx, const char *argv0, char *err, size_t errlen) {
  char root[PATH_MAX];
  err[0] = '\0';
  if (find_root(argv0, root, sizeof root, err, errlen) != 0) {
    if (!err[0])
      snprintf(err, errlen, "cannot find specula's Lua modules (set SPECULA_HOME to the directory holding lua/specula)");
    return -1;
  }
  lua_State *L = luaL_newstate();
  if (!L) {
    snprintf(err, errlen, "cannot create the Lua state (out of memory)");
    return -1;
  }
  luaL_openlibs(L);
  /* Collect a little sooner than LuaJIT's default (200): batches allocate a
     lot of short-lived tables, and the slack shows up in peak RSS. The
     scheduler raises the pause while the heap is small (sp_sched.c). */
  lua_gc(L, LUA_GCSETPAUSE, 150);
  /* and finish a cycle in less allocation (LuaJIT's default is 200): what
     the heap grows while a cycle runs adds to the peak as the pause does.
     10,000 live trajectories: 89.7 -> 84.3 MB, no more CPU (the same
     marking, in larger steps) */
  lua_gc(L, LUA_GCSETSTEPMUL, 400);
  /* and no cycle while the modules load (sp_sched_gc_defer) */
  sp_sched_gc_defer(L);
  ctx->L = L;
  /* the engine's modules from their cached bytecode when it is the
     source's (parsing them was half of a start); any trouble: parsed */
  char lua_dir[PATH_MAX + 8];
  if (join_path(lua_dir, sizeof lua_dir, root, "/lua") == 0) (void)sp_luacache_install(L, lua_dir);
  /* C modules of the Lua tree: require() finds them here */
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_specula_jsonenc);
  lua_setfield(L, -2, "specula.jsonenc");
  lua_pop(L, 2);
  if (luaL_loadbuffer(L, BOOT, strlen(BOOT), "=specula.boot") != 0) {
    snprintf(err, errlen, "boot: %s", lua_tostring(L, -1));
    return -1;
  }
  lua_pushstring(L, root);
  lua_pushlightuserdata(L, ctx);
  if (lua_pcall(L, 2, 3, 0) != 0) {
    snprintf(err, errlen, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    return -1;
  }
  if (!lua_istable(L, -1) || !lua_isfunction(L, -2) || !lua_istable(L, -3)) {
    snprintf(err, errlen, "boot: specula.internal.sched did not export co_table, worker_body and vals");
    return -1;
  }
  ctx->vals->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  ctx->sched->worker_body_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  ctx->sched->co_table_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 0;
}

int sp_host_path_kind(const char *path) {
  struct stat st;
  if (!path || stat(path, &st) != 0) return 0;
  if (S_ISREG(st.st_mode)) return 1;
  if (S_ISDIR(st.st_mode)) return 2;
  return 3;
}

/* A run's first signal cancels every window: the run stops waiting and
   writes what finished. */
void sp_host_trap_signals(sp_ctx *ctx) { sp_signals_trap(ctx, sp_window_cancel_all); }

int sp_host_signal(sp_ctx *ctx) { return sp_signals_caught(ctx); }

void sp_host_signal_is_end(sp_ctx *ctx) {
  if (ctx->signals) ctx->signals->is_end = 1;
}

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  luaL_traceback(L, L, msg ? msg : "(error object is not a string)", 1);
  return 1;
}

static int run_main(sp_ctx *ctx, int argc, char **argv) {
  lua_State *L = ctx->L;
  lua_pushcfunction(L, traceback);
  lua_getglobal(L, "require");
  lua_pushstring(L, "specula.cmd");
  if (lua_pcall(L, 1, 1, 1) != 0) {
    fprintf(stderr, "specula: %s\n", lua_tostring(L, -1));
    lua_settop(L, 0);
    return 1;
  }
  lua_getfield(L, -1, "main");
  lua_newtable(L);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i + 1);
  }
  /* cmd.main only spawns the main task (or returns an exit status for
     commands that need no loop); nothing waits inside this call. */
  if (lua_pcall(L, 1, 1, 1) != 0) {
    fprintf(stderr, "specula: %s\n", lua_tostring(L, -1));
    lua_settop(L, 0);
    return 1;
  }
  int direct = lua_isnumber(L, -1) ? (int)lua_tointeger(L, -1) : -1;
  lua_settop(L, 0);
  if (direct >= 0 && !ctx->sched->main_task) return direct;
  if (!ctx->sched->main_task) {
    fprintf(stderr, "specula: internal error: no main task\n");
    return 1;
  }
  while (!ctx->sched->main_done) {
    int alive = uv_run(&ctx->loop, UV_RUN_ONCE);
    if (!alive && !ctx->sched->main_done && !ctx->sched->ready_head && !ctx->sched->reap) {
      /* tasks waiting on each other inside some query: their waits raise,
         that query fails, the others go on */
      if (sp_sched_break_stall(ctx) > 0) continue;
      fprintf(stderr, "specula: the main task is waiting for something that can never happen "
                      "(no timer, transfer or task left to wake it)\n");
      return 1;
    }
  }
  sp_task *m = ctx->sched->main_task;
  if (m->state == SP_TASK_FAILED) {
    const char *msg = m->error ? m->error : "main task failed";
    /* a subcommand's own message already names it ("specula run: ...") */
    fprintf(stderr, "%s%s\n", strncmp(msg, "specula ", 8) == 0 ? "" : "specula: ", msg);
    return ctx->exit_code ? ctx->exit_code : 1;
  }
  if (m->state == SP_TASK_CANCELLED) {
    fprintf(stderr, "specula: main task cancelled\n");
    return ctx->exit_code ? ctx->exit_code : 1;
  }
  return ctx->exit_code;
}

int sp_host_run(sp_ctx *ctx, int argc, char **argv) {
  int rc = run_main(ctx, argc, argv);
  /* the run is over: a signal from here on (the shutdown waits for the
     children) ends the process, its children reaped first */
  sp_signals_untrap(ctx);
  /* an interrupted run that otherwise succeeded still says so (128 + signal) */
  int sig = sp_signals_caught(ctx);
  if (sig && rc == 0 && !(ctx->signals && ctx->signals->is_end)) rc = 128 + sig;
  return rc;
}
