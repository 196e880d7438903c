/* libFuzzer target for the JSON parser and canonical encoder: any input must
 * parse or fail cleanly; a valid one must canonicalize, and the canonical form
 * must be a fixed point (canonicalizing it again gives the same bytes). The
 * first 8 bytes, read as a double, must print as the printf rule of sp_json.h
 * says (sp_json_write_number's fast path skips printf). A valid input is also
 * decoded into Lua (an embedded LuaJIT running lua/specula/json.lua) and
 * encoded by the C table encoder (sp_jsonenc.c) and by json.lua's own: both
 * canonical() and encode() must give the same bytes. */
#include "sp_buf.h"
#include "sp_json.h"
#include "sp_jsonenc.h"
#include <lauxlib.h>
#include <lualib.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Touches every node through the public accessors. */
static size_t walk(const sp_json *v) {
  size_t n = 1, len = 0;
  switch (sp_json_typeof(v)) {
    case SP_JSON_STRING:
      if (!sp_json_string(v, &len)) abort();
      break;
    case SP_JSON_NUMBER:
      (void)sp_json_number(v);
      break;
    case SP_JSON_OBJECT:
      for (size_t i = 0; i < sp_json_len(v); i++) {
        const char *k = sp_json_key_at(v, i, &len);
        if (!k) abort();
        if (!memchr(k, '\0', len) && !sp_json_get(v, k)) abort();
      }
      /* fall through */
    case SP_JSON_ARRAY:
      for (size_t i = 0; i < sp_json_len(v); i++) n += walk(sp_json_at(v, i));
      break;
    default:
      break;
  }
  return n;
}

static void check_number(double d) {
  char want[48];
  if (d > -9007199254740992.0 && d < 9007199254740992.0 && (double)(long long)d == d) {
    snprintf(want, sizeof want, "%lld", (long long)d);
  } else {
    for (int prec = 15; prec <= 17; prec++) {
      snprintf(want, sizeof want, "%.*g", prec, d);
      if (strtod(want, NULL) == d) break;
    }
  }
  sp_buf b;
  sp_buf_init(&b);
  if (sp_json_write_number(&b, d) != 0 || strcmp(b.data, want) != 0) abort();
  sp_buf_free(&b);
}

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
  "package.path = root .. '/lua/?.lua;' .. package.path\n"
  "local json = require 'specula.json'\n"
  "assert(json.c_encoder, 'the C encoder is not loaded')\n"
  "return function(text)\n"
  "  local v = json.decode(text)\n"
  "  if v == nil then return end\n"
  "  local okc, c = pcall(json.canonical, v)\n"
  "  local okl, l = pcall(json.canonical_lua, v)\n"
  "  if okc ~= okl or c ~= l then error('canonical: C ' .. tostring(c) .. ' Lua ' .. tostring(l)) end\n"
  "  local ec, ece = json.encode(v)\n"
  "  local el, ele = json.encode_lua(v)\n"
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
  if (size >= 8) {
    double d;
    memcpy(&d, data, sizeof d);
    if (isfinite(d)) check_number(d);
  }
  const char *s = (const char *)data;
  char err[128];
  sp_json *v = sp_json_parse(s, size, err, sizeof err);
  sp_buf c1, c2;
  sp_buf_init(&c1);
  sp_buf_init(&c2);
  int rc = sp_json_canonical(s, size, &c1, err, sizeof err);
  if ((v != NULL) != (rc == 0)) abort();
  if (v) {
    walk(v);
    check_encoders(s, size);
    sp_json_free(v);
    if (sp_json_canonical(c1.data, c1.len, &c2, err, sizeof err) != 0) abort();
    if (c1.len != c2.len || memcmp(c1.data, c2.data, c1.len) != 0) abort();
  } else if (strncmp(err, "JSON: ", 6) != 0) {
    abort();
  }
  sp_buf_free(&c1);
  sp_buf_free(&c2);
  return 0;
}
