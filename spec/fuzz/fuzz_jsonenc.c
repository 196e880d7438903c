/* libFuzzer target for the C table encoder (engine/sp_jsonenc.c): a valid
 * JSON input is decoded into Lua (an embedded LuaJIT running
 * lua/specula/json.lua) and encoded by the C encoder and by its reference in
 * Lua (spec/support/json_ref.lua);
 * canonical() and encode() must give the same bytes or the same error. The
 * Lua state lives across inputs and holds the encoder's buffers in memory
 * LeakSanitizer does not scan, so CI runs this target without the leak check
 * (as fuzz_llm); fuzz_json keeps it for the C parser. */
#include "sp_jsonenc.h"
#include <lauxlib.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef SPECULA_SOURCE_DIR
#define SPECULA_SOURCE_DIR "."
#endif

static lua_State *L;

/* Closed at exit so LeakSanitizer sees what the collector frees. */
static void close_state(void) {
  if (L) lua_close(L);
  L = NULL;
}

/* check(text): decode, then both encoders; raises on a difference. */
static const char *HARNESS =
  "local root = ...\n"
  "package.path = root .. '/lua/?.lua;' .. root .. '/spec/?.lua;' .. package.path\n"
  "local json = require 'specula.json'\n"
  "local ref = require 'support.json_ref'\n"
  "return function(text)\n"
  "  local v = json.decode(text)\n"
  "  if v == nil then return end\n"
  "  local okc, c = pcall(json.canonical, v)\n"
  "  local okl, l = pcall(ref.canonical, v)\n"
  "  if okc ~= okl or c ~= l then error('canonical: C ' .. tostring(c) .. ' Lua ' .. tostring(l)) end\n"
  "  local ec, ece = json.encode(v)\n"
  "  local el, ele = ref.encode(v)\n"
  "  if ec ~= el or ece ~= ele then error('encode: C ' .. tostring(ec or ece) .. ' Lua ' .. tostring(el or ele)) end\n"
  "end\n";

static int harness(void) {
  static int ref;
  if (L) return ref;
  L = luaL_newstate();
  luaL_openlibs(L);
  atexit(close_state);
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_specula_jsonenc);
  lua_setfield(L, -2, "specula.jsonenc");
  lua_pop(L, 2);
  if (luaL_loadstring(L, HARNESS) != 0) abort();
  const char *root = getenv("SPECULA_SOURCE_DIR");
  lua_pushstring(L, root && *root ? root : SPECULA_SOURCE_DIR);
  if (lua_pcall(L, 1, 1, 0) != 0) {
    fprintf(stderr, "fuzz_json: harness: %s\n", lua_tostring(L, -1));
    abort();
  }
  ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return ref;
}

static void check_encoders(const char *s, size_t size) {
  int ref = harness();
  lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
  lua_pushlstring(L, s, size);
  if (lua_pcall(L, 1, 0, 0) != 0) {
    fprintf(stderr, "fuzz_json: %s\n", lua_tostring(L, -1));
    abort();
  }
  lua_gc(L, LUA_GCSTEP, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check_encoders((const char *)data, size);
  return 0;
}
