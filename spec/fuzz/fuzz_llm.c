/* libFuzzer target for the streamed tool-call assembly of both LLM clients
 * (lua/specula/llm/openai.lua and anthropic.lua), driven through
 * spec/fuzz/llm_harness.lua in an embedded LuaJIT: any byte stream must be
 * assembled or rejected as a value, never raise. The SSE parsing underneath
 * is the engine's C parser, reached through the FFI. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "sp_jsonenc.h"

#ifndef SPECULA_SOURCE_DIR
#define SPECULA_SOURCE_DIR "."
#endif

static lua_State *L;

/* The harness state lives for the whole fuzzing run; closing it at exit
   lets the garbage collector free what it owns before LeakSanitizer looks. */
static void close_state(void) {
  if (L) lua_close(L);
  L = NULL;
}

static lua_State *harness_state(int *fn_ref) {
  static int ref;
  if (L) {
    *fn_ref = ref;
    return L;
  }
  L = luaL_newstate();
  luaL_openlibs(L);
  atexit(close_state);
  /* specula.json takes its encoder from here, as the binary gives it */
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_specula_jsonenc);
  lua_setfield(L, -2, "specula.jsonenc");
  lua_pop(L, 2);
  const char *boot =
    "local root = ...\n"
    "package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path\n"
    "package.loaded['specula.host'] = { embedded = true, root = root }\n"
    "return dofile(root .. '/spec/fuzz/llm_harness.lua')\n";
  if (luaL_loadstring(L, boot) != 0) abort();
  const char *root = getenv("SPECULA_SOURCE_DIR");
  lua_pushstring(L, root && *root ? root : SPECULA_SOURCE_DIR);
  if (lua_pcall(L, 1, 1, 0) != 0) {
    fprintf(stderr, "fuzz_llm: harness: %s\n", lua_tostring(L, -1));
    abort();
  }
  ref = luaL_ref(L, LUA_REGISTRYINDEX);
  *fn_ref = ref;
  return L;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int ref;
  lua_State *L = harness_state(&ref);
  lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
  lua_pushlstring(L, (const char *)data, size);
  if (lua_pcall(L, 1, 0, 0) != 0) {
    fprintf(stderr, "fuzz_llm: %s\n", lua_tostring(L, -1));
    abort();
  }
  lua_gc(L, LUA_GCSTEP, 0);
  return 0;
}
