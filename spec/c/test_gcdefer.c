/* C test of the first collection of a new Lua state (sp_sched_gc_defer):
 * none runs while the heap grows by less than the scheduler's minimum
 * slack (4 MB), which is what loading the engine's modules allocates; one
 * runs once it has grown by more, and the state's own pause is kept for
 * the cycles after. */
#include "check.h"
#include "sp_sched.h"
#include <lauxlib.h>
#include <lualib.h>

/* Allocate about `mb` MB of garbage (two-slot tables of ~100 bytes);
   returns whether the finalizer of a proxy dropped before it ran. */
static const char *CHUNK =
  "local mb = ...\n"
  "local hit = false\n"
  "do local p = newproxy(true); getmetatable(p).__gc = function() hit = true end end\n"
  "local keep = {}\n"
  "for i = 1, mb * 10000 do keep[i % 100 + 1] = { i, i } end\n"
  "return hit\n";

static int run(lua_State *L, int mb) {
  if (luaL_loadstring(L, CHUNK) != 0) return -1;
  lua_pushinteger(L, mb);
  if (lua_pcall(L, 1, 1, 0) != 0) return -1;
  int hit = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return hit;
}

int main(void) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  lua_gc(L, LUA_GCSETPAUSE, 150);
  sp_sched_gc_defer(L);
  int kb0 = lua_gc(L, LUA_GCCOUNT, 0);
  CHECK(run(L, 2) == 0, "no collection while the heap grew by ~2 MB");
  int kb1 = lua_gc(L, LUA_GCCOUNT, 0);
  CHECK(kb1 - kb0 > 1500, "the garbage stayed: %d KB -> %d KB", kb0, kb1);
  CHECK(run(L, 8) == 1, "a collection once it grew by more than 4 MB");
  int pause = lua_gc(L, LUA_GCSETPAUSE, 150);
  CHECK(pause == 150, "the state's own pause is kept: %d", pause);
  lua_close(L);

  /* without the deferral the first cycles come at once (the control) */
  L = luaL_newstate();
  luaL_openlibs(L);
  lua_gc(L, LUA_GCSETPAUSE, 150);
  CHECK(run(L, 2) == 1, "a state left alone collects within 2 MB");
  lua_close(L);
  printf("test_gcdefer: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
