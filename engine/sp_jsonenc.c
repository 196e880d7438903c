/* JSON text of a Lua value in C (rules: lua/specula/json.lua, sp_json.h).
 * Errors are returned, never raised, so the state is cleaned up before Lua
 * sees them; the messages and their order follow the Lua reference encoder
 * (spec/support/json_ref.lua: the first failing part in emission order wins). */
#include "sp_jsonenc.h"
#include "sp_buf.h"
#include "sp_json.h"
#include <errno.h>
#include <lauxlib.h>
#include <lualib.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#define SP_JSONENC_MAX_DEPTH 256                /* json.lua's MAX_DEPTH */
#define SP_JSONENC_KEEP_BYTES ((size_t)1 << 20)  /* a bigger text buffer is freed after the call */
#define SP_JSONENC_KEEP_KEYS 4096               /* a bigger key stack is freed after the call */
#define SP_JSONENC_MAX_ARRAY 2147483647.0       /* rawgeti's index range */
#define SP_JSONENC_STACK_PAIRS 128              /* values of a table's first keys stay on the Lua stack */
#define SP_JSONENC_STACK_BUDGET 4000            /* ...while the stack is below this (LuaJIT allows 8000) */
#define SP_JSONENC_MT "specula.jsonenc"
#define SP_JSONENC_MAGIC 0x6a736e65u            /* an encoder's state (and not another userdata) */

/* Upvalues of the encoder closure. */
#define SP_JSONENC_UP_ARRAY lua_upvalueindex(1)
#define SP_JSONENC_UP_OBJECT lua_upvalueindex(2)
#define SP_JSONENC_UP_NULL lua_upvalueindex(3)
#define SP_JSONENC_UP_STATE lua_upvalueindex(4)
#define SP_JSONENC_UP_RAW lua_upvalueindex(5)

typedef struct sp_jsonenc_key {
  const char *s;  /* a string key's bytes (owned by the table); NULL for a number */
  size_t len;     /* bytes in the key's text */
  double num;     /* a number key's value */
  int type;       /* the key's lua_type */
  int slot;       /* stack index of the value, 0 if not kept there */
  char text[24];  /* decimal text of an integer key */
} sp_jsonenc_key;

typedef struct sp_jsonenc {
  uint32_t magic;                              /* SP_JSONENC_MAGIC: sp_jsonenc_text's check */
  sp_buf out;                                  /* the text being built */
  sp_jsonenc_key *keys;                        /* keys of the open objects, innermost last */
  size_t nkeys;                                /* keys in use */
  size_t capkeys;                              /* keys allocated */
  const void *path[SP_JSONENC_MAX_DEPTH + 1];  /* open table at each depth (1-based): the cycle check */
  int sorted;                                  /* 1: object keys in bytewise order */
  int pick;                                    /* 1: note where "answer" and "trajectory" are */
  int batched;                                 /* 1: write_line leaves the line in the file's buffer (sp_outfile.h) */
  size_t picked[4];                            /* their values' [start, end) in out; SIZE_MAX: absent */
  char err[256];                               /* why the call failed */
} sp_jsonenc;

static int sp_jsonenc_fail(sp_jsonenc *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int sp_jsonenc_fail(sp_jsonenc *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  memcpy(e->err, "JSON: ", 6);
  vsnprintf(e->err + 6, sizeof e->err - 6, fmt, ap);
  va_end(ap);
  return -1;
}

/* Appends n bytes (no NUL kept while encoding: the caller copies by length). */
static inline int sp_jsonenc_put(sp_jsonenc *e, const char *s, size_t n) {
  sp_buf *b = &e->out;
  if (b->cap - b->len <= n && sp_buf_reserve(b, n) != 0) return sp_jsonenc_fail(e, "out of memory");
  memcpy(b->data + b->len, s, n);
  b->len += n;
  return 0;
}

static const char *sp_jsonenc_key_text(const sp_jsonenc_key *k) { return k->s ? k->s : k->text; }

/* A string literal; the bytes must be valid UTF-8 (json.lua's quote). */
static int sp_jsonenc_string(sp_jsonenc *e, const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  /* Most strings (every key, most values) are printable ASCII without a
     quote or backslash: one scan, then one copy. The first other byte
     goes on to the UTF-8 check and the escaping writer, from there. */
  size_t i = 0;
  while (i < n && u[i] >= 0x20 && u[i] < 0x80 && u[i] != '"' && u[i] != '\\') i++;
  if (i == n) {
    sp_buf *b = &e->out;
    if (n > (size_t)-1 - 3 || (b->cap - b->len <= n + 2 && sp_buf_reserve(b, n + 2) != 0))
      return sp_jsonenc_fail(e, "out of memory");
    char *o = b->data + b->len;
    o[0] = '"';
    memcpy(o + 1, s, n);
    o[n + 1] = '"';
    b->len += n + 2;
    b->data[b->len] = '\0';
    return 0;
  }
  for (; i < n; i++) {
    if (u[i] < 0x80) continue;
    size_t l = sp_json_utf8_seq(u + i, n - i);
    if (!l) return sp_jsonenc_fail(e, "invalid UTF-8 in string at byte %zu", i);
    i += l - 1;
  }
  return sp_json_write_string(&e->out, s, n) == 0 ? 0 : sp_jsonenc_fail(e, "out of memory");
}

static int sp_jsonenc_number(sp_jsonenc *e, double d) {
  if (!isfinite(d)) return sp_jsonenc_fail(e, "cannot encode NaN or infinity");
  return sp_json_write_number(&e->out, d) == 0 ? 0 : sp_jsonenc_fail(e, "out of memory");
}

static int sp_jsonenc_key_cmp(const void *a, const void *b) {
  const sp_jsonenc_key *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  const unsigned char *p = (const unsigned char *)sp_jsonenc_key_text(x);
  const unsigned char *q = (const unsigned char *)sp_jsonenc_key_text(y);
  /* keys mostly differ in their first byte: no memcmp call for those */
  if (n && p[0] != q[0]) return p[0] < q[0] ? -1 : 1;
  int c = n ? memcmp(p, q, n) : 0;
  if (c) return c;
  return x->len < y->len ? -1 : x->len > y->len;
}

/* Sorts keys[0..n) bytewise; small objects (the usual case) by insertion. */
static void sp_jsonenc_sort(sp_jsonenc_key *keys, size_t n) {
  if (n > 16) {
    qsort(keys, n, sizeof *keys, sp_jsonenc_key_cmp);
    return;
  }
  for (size_t i = 1; i < n; i++) {
    sp_jsonenc_key k = keys[i];
    size_t j = i;
    while (j > 0 && sp_jsonenc_key_cmp(&keys[j - 1], &k) > 0) {
      keys[j] = keys[j - 1];
      j--;
    }
    keys[j] = k;
  }
}

static sp_jsonenc_key *sp_jsonenc_push_key(sp_jsonenc *e) {
  if (e->nkeys == e->capkeys) {
    size_t cap = e->capkeys ? e->capkeys * 2 : 64;
    sp_jsonenc_key *p = realloc(e->keys, cap * sizeof *p);
    if (!p) return NULL;
    e->keys = p;
    e->capkeys = cap;
  }
  return &e->keys[e->nkeys++];
}

static int sp_jsonenc_value(sp_jsonenc *e, lua_State *L, int idx, int depth);

/* Elements 1..n of the table at idx; holes are null. */
static int sp_jsonenc_array(sp_jsonenc *e, lua_State *L, int idx, double n, int depth) {
  if (n == 0) return sp_jsonenc_put(e, "[]", 2);
  if (n > SP_JSONENC_MAX_ARRAY) return sp_jsonenc_fail(e, "out of memory");
  if (sp_jsonenc_put(e, "[", 1) != 0) return -1;
  int last = (int)n;
  for (int i = 1; i <= last; i++) {
    if (i > 1 && sp_jsonenc_put(e, ",", 1) != 0) return -1;
    lua_rawgeti(L, idx, i);
    int rc = lua_isnil(L, -1) ? sp_jsonenc_put(e, "null", 4) : sp_jsonenc_value(e, L, lua_gettop(L), depth);
    lua_pop(L, 1);
    if (rc != 0) return -1;
  }
  return sp_jsonenc_put(e, "]", 1);
}

/* A json.raw value (raw_mt): text that is canonical JSON already, copied
   as it is, its pieces one after another (a record's provenance: the run's
   text around the query's digest, never joined into one string). */
static int sp_jsonenc_raw(sp_jsonenc *e, lua_State *L, int idx) {
  int rc = 0;
  for (int i = 1;; i++) {
    lua_rawgeti(L, idx, i);
    size_t n = 0;
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &n) : NULL;
    if (!s) {
      lua_pop(L, 1);
      if (i == 1) rc = sp_jsonenc_fail(e, "a raw JSON value without its text");
      break;
    }
    rc = sp_jsonenc_put(e, s, n);
    lua_pop(L, 1);
    if (rc != 0) break;
  }
  return rc;
}

/* The table at idx as an object, its count keys at e->keys[base..] (the
   first ones' values on the stack above top, at their slot). */
static int sp_jsonenc_object(sp_jsonenc *e, lua_State *L, int idx, size_t base, size_t count, int top,
                             int depth) {
  if (count == 0) return sp_jsonenc_put(e, "{}", 2);
  /* an object: integer keys are written in decimal */
  for (size_t i = 0; i < count; i++) {
    sp_jsonenc_key *k = &e->keys[base + i];
    if (k->type == LUA_TSTRING) continue;
    double n = k->num;
    if (k->type == LUA_TNUMBER && isfinite(n) && n == floor(n) && n > -9007199254740992.0 &&
        n < 9007199254740992.0) {
      k->len = (size_t)snprintf(k->text, sizeof k->text, "%lld", (long long)n);
      lua_pushlstring(L, k->text, k->len);
      lua_rawget(L, idx);
      int clash = !lua_isnil(L, -1);
      lua_pop(L, 1);
      if (clash) return sp_jsonenc_fail(e, "integer key %s and string key \"%s\" collide", k->text, k->text);
    } else {
      return sp_jsonenc_fail(e, "cannot encode a key of type %s",
                             k->type == LUA_TNUMBER ? "non-integer number" : lua_typename(L, k->type));
    }
  }
  if (e->sorted) sp_jsonenc_sort(e->keys + base, count);
  int rc = sp_jsonenc_put(e, "{", 1);
  for (size_t i = 0; i < count && rc == 0; i++) {
    /* re-read: a nested object may have grown (moved) the key stack */
    sp_jsonenc_key *k = &e->keys[base + i];
    if (i > 0 && (rc = sp_jsonenc_put(e, ",", 1)) != 0) break;
    if ((rc = sp_jsonenc_string(e, sp_jsonenc_key_text(k), k->len)) != 0) break;
    if ((rc = sp_jsonenc_put(e, ":", 1)) != 0) break;
    /* the top-level "answer" and "trajectory": the agreement text's parts */
    size_t *at = NULL;
    if (e->pick && depth == 1 && k->s) {
      if (k->len == 6 && memcmp(k->s, "answer", 6) == 0) at = &e->picked[0];
      else if (k->len == 10 && memcmp(k->s, "trajectory", 10) == 0) at = &e->picked[2];
    }
    if (at) at[0] = e->out.len;
    if (k->slot) {
      rc = sp_jsonenc_value(e, L, k->slot, depth);
    } else {
      if (k->s) lua_pushlstring(L, k->s, k->len);
      else lua_pushnumber(L, k->num);
      lua_rawget(L, idx);
      rc = sp_jsonenc_value(e, L, lua_gettop(L), depth);
      lua_pop(L, 1);
    }
    if (at) at[1] = e->out.len;
  }
  lua_settop(L, top);
  if (rc != 0) return -1;
  e->nkeys = base;
  return sp_jsonenc_put(e, "}", 1);
}

static int sp_jsonenc_table(sp_jsonenc *e, lua_State *L, int idx, int depth) {
  const void *self = lua_topointer(L, idx);
  if (depth > SP_JSONENC_MAX_DEPTH) {
    for (int d = 1; d <= SP_JSONENC_MAX_DEPTH; d++) {
      if (e->path[d] == self) return sp_jsonenc_fail(e, "cannot encode a table that contains itself");
    }
    return sp_jsonenc_fail(e, "nesting deeper than %d", SP_JSONENC_MAX_DEPTH);
  }
  if (!lua_checkstack(L, 4)) return sp_jsonenc_fail(e, "out of memory");
  int mt = 0;  /* 1 array_mt, 2 object_mt, 3 another metatable, 4 raw_mt */
  if (lua_getmetatable(L, idx)) {
    mt = lua_rawequal(L, -1, SP_JSONENC_UP_ARRAY)    ? 1
         : lua_rawequal(L, -1, SP_JSONENC_UP_OBJECT) ? 2
         : lua_rawequal(L, -1, SP_JSONENC_UP_RAW)    ? 4
                                                     : 3;
    lua_pop(L, 1);
  }
  if (mt == 4) return sp_jsonenc_raw(e, L, idx);
  e->path[depth] = self;
  /* the keys, in next() order; are they exactly positive integers? */
  /* the first keys' values stay on the stack (key, value, key, value...),
     so writing them needs no lookup; the key copy on top drives lua_next */
  size_t base = e->nkeys, count = 0;
  double maxn = 0;
  int indices = 1, top = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    sp_jsonenc_key *k = sp_jsonenc_push_key(e);
    if (!k) {
      lua_settop(L, top);
      return sp_jsonenc_fail(e, "out of memory");
    }
    count++;
    k->slot = 0;
    if (count <= SP_JSONENC_STACK_PAIRS && top < SP_JSONENC_STACK_BUDGET && lua_checkstack(L, 3)) {
      k->slot = lua_gettop(L);
      lua_pushvalue(L, -2);
    } else {
      lua_pop(L, 1);
    }
    k->type = lua_type(L, -1);
    k->s = NULL;
    k->len = 0;
    k->num = 0;
    if (k->type == LUA_TSTRING) {
      k->s = lua_tolstring(L, -1, &k->len);
      indices = 0;
    } else if (k->type == LUA_TNUMBER) {
      double n = lua_tonumber(L, -1);
      k->num = n;
      if (indices) {
        if (isfinite(n) && n >= 1 && n == floor(n)) {
          if (n > maxn) maxn = n;
        } else {
          indices = 0;
        }
      }
    } else {
      indices = 0;
    }
  }
  if (mt == 1 || (indices && count > 0 && (double)count == maxn && mt != 2)) {
    lua_settop(L, top);
    e->nkeys = base;
    if (!indices) return sp_jsonenc_fail(e, "array has a key that is not a positive integer");
    return sp_jsonenc_array(e, L, idx, maxn, depth);
  }
  return sp_jsonenc_object(e, L, idx, base, count, top, depth);
}

static int sp_jsonenc_value(sp_jsonenc *e, lua_State *L, int idx, int depth) {
  switch (lua_type(L, idx)) {
    case LUA_TSTRING: {
      size_t n;
      const char *s = lua_tolstring(L, idx, &n);
      return sp_jsonenc_string(e, s, n);
    }
    case LUA_TNUMBER: return sp_jsonenc_number(e, lua_tonumber(L, idx));
    case LUA_TTABLE: return sp_jsonenc_table(e, L, idx, depth + 1);
    case LUA_TBOOLEAN: return lua_toboolean(L, idx) ? sp_jsonenc_put(e, "true", 4) : sp_jsonenc_put(e, "false", 5);
    case LUA_TNIL: return sp_jsonenc_put(e, "null", 4);
    default:
      if (lua_rawequal(L, idx, SP_JSONENC_UP_NULL)) return sp_jsonenc_put(e, "null", 4);
      return sp_jsonenc_fail(e, "cannot encode a %s", luaL_typename(L, idx));
  }
}

/* The FILE of an io library file handle at idx (Lua 5.1's convention: the
   userdata under LUA_FILEHANDLE starts with the FILE pointer); NULL when the
   value is not one, *closed = 1 when it is one that was closed. */
static FILE *sp_jsonenc_file(lua_State *L, int idx, int *closed) {
  *closed = 0;
  if (lua_type(L, idx) != LUA_TUSERDATA || !lua_getmetatable(L, idx)) return NULL;
  luaL_getmetatable(L, LUA_FILEHANDLE);
  int is_file = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  if (!is_file) return NULL;
  FILE *f = *(FILE **)lua_touserdata(L, idx);
  if (!f) *closed = 1;
  return f;
}

int sp_jsonenc_write_line_to(FILE *f, const char *data, size_t len, int batched) {
  errno = 0;
  int ok = 1;
  /* a line that does not fit in what is left of a batched file's buffer is
     preceded by a flush: each write(2) then holds whole lines, so a
     process killed between two of them leaves no cut line (and stdio
     never splits one) */
  if (batched && __fpending(f) > 0 && len > __fbufsize(f) - __fpending(f)) ok = fflush(f) == 0;
  if (ok) ok = fwrite(data, 1, len, f) == len;
  if (ok && !batched) ok = fflush(f) == 0;
  if (ok) return 0;
  return errno ? errno : -1;
}

/* The text and a newline written to f and flushed (the io library's
   write + flush, with its error text): true and the bytes written (and,
   when picking, the agreement text or nil), or false and the reason. */
static int sp_jsonenc_write_line(sp_jsonenc *e, lua_State *L, FILE *f) {
  int ok = sp_jsonenc_put(e, "\n", 1) == 0;
  if (!ok) {
    lua_pushboolean(L, 0);
    lua_pushstring(L, e->err + 6);  /* "out of memory", without "JSON: " */
    return 2;
  }
  int werr = sp_jsonenc_write_line_to(f, e->out.data, e->out.len, e->batched);
  ok = werr == 0;
  if (ok) {
    size_t bytes = e->out.len;
    lua_pushboolean(L, 1);
    lua_pushnumber(L, (lua_Number)bytes);  /* the caller tracks the file's size */
    if (!e->pick) return 2;
    /* [answer,trajectory] from the line just written: the text
       json.canonical({ answer, trajectory }) gives, without a second walk */
    size_t a0 = e->picked[0], a1 = e->picked[1], t0 = e->picked[2], t1 = e->picked[3];
    if (a0 == SIZE_MAX || t0 == SIZE_MAX || sp_buf_reserve(&e->out, (a1 - a0) + (t1 - t0) + 3) != 0) {
      lua_pushnil(L);
      return 3;
    }
    char *d = e->out.data + bytes;
    *d++ = '[';
    memcpy(d, e->out.data + a0, a1 - a0);
    d += a1 - a0;
    *d++ = ',';
    memcpy(d, e->out.data + t0, t1 - t0);
    d += t1 - t0;
    *d++ = ']';
    lua_pushlstring(L, e->out.data + bytes, (size_t)(d - (e->out.data + bytes)));
    return 3;
  }
  lua_pushboolean(L, 0);
  lua_pushstring(L, werr > 0 ? strerror(werr) : "write error");
  return 2;
}

/* Encodes the value at stack index 1 into e->out (reset first); leaves the
   stack at that one value. 0, or -1 with e->err set. */
static int sp_jsonenc_run(sp_jsonenc *e, lua_State *L) {
  for (int i = 0; i < 4; i++) e->picked[i] = SIZE_MAX;
  lua_settop(L, 1);
  sp_buf_reset(&e->out);
  e->nkeys = 0;
  int rc = sp_jsonenc_value(e, L, 1, 0);
  lua_settop(L, 1);
  return rc;
}

/* A key stack grown by one big object is not kept. */
static void sp_jsonenc_trim_keys(sp_jsonenc *e) {
  if (e->capkeys > SP_JSONENC_KEEP_KEYS) {
    free(e->keys);
    e->keys = NULL;
    e->capkeys = 0;
  }
}

/* enc(value, sorted) -> text | nil, "JSON: <why>"
   enc(value, sorted, file [, pick [, batched]]) -> true, bytes [, agreement] | nil, "JSON: <why>" (nothing
   written) | false, "<OS error>" (a write or flush failed); batched: written into the file's buffer and
   not flushed (sp_outfile_add) */
static int sp_jsonenc_call(lua_State *L) {
  sp_jsonenc *e = lua_touserdata(L, SP_JSONENC_UP_STATE);
  e->sorted = lua_toboolean(L, 2);
  FILE *file = NULL;
  if (!lua_isnoneornil(L, 3)) {
    int closed;
    file = sp_jsonenc_file(L, 3, &closed);
    if (!file) {
      lua_pushboolean(L, 0);
      lua_pushstring(L, closed ? "attempt to use a closed file" : "not a file");
      return 2;
    }
  }
  e->pick = file && lua_toboolean(L, 4);
  e->batched = file && lua_toboolean(L, 5);
  int rc = sp_jsonenc_run(e, L);
  int nret = 1;
  if (rc == 0 && file) nret = sp_jsonenc_write_line(e, L, file);
  else if (rc == 0) lua_pushlstring(L, e->out.data ? e->out.data : "", e->out.len);
  /* do not pin the memory of one big value */
  if (e->out.cap > SP_JSONENC_KEEP_BYTES) sp_buf_free(&e->out);
  sp_jsonenc_trim_keys(e);
  if (rc == 0) return nret;
  lua_pushnil(L);
  lua_pushstring(L, e->err);
  return 2;
}

/* What enc_buf and enc_hop return after encoding (rc 0, or -1 with e->err):
   the encoder's state and the text's length, or nil and the reason. */
static int sp_jsonenc_buf_result(sp_jsonenc *e, lua_State *L, int rc) {
  sp_jsonenc_trim_keys(e);
  if (rc != 0) {
    lua_pushnil(L);
    lua_pushstring(L, e->err);
    return 2;
  }
  lua_pushvalue(L, SP_JSONENC_UP_STATE);
  lua_pushinteger(L, (lua_Integer)e->out.len);
  return 2;
}

/* enc_buf(value, sorted) -> state, length | nil, "JSON: <why>"
   The text stays in the encoder's buffer, valid until the encoder's next
   call (any of its closures); state is the encoder's own userdata, which an FFI
   call passes as a pointer to sp_jsonenc_text. For a caller that copies the
   text at once into C (a committed hop into its window's trajectory text)
   with no Lua string made, hashed and collected in between. (A light
   userdata pointing at the text would be simpler, but LuaJIT's JIT does not
   compile its conversion to a C pointer on 64-bit: the loop would run
   interpreted.) A big buffer is kept until that next call, which frees it
   after its own text as usual. */
static int sp_jsonenc_call_buf(lua_State *L) {
  sp_jsonenc *e = lua_touserdata(L, SP_JSONENC_UP_STATE);
  e->sorted = lua_toboolean(L, 2);
  e->pick = 0;
  return sp_jsonenc_buf_result(e, L, sp_jsonenc_run(e, L));
}

/* enc_hop(segment, action, observation) -> state, length | nil, "JSON: <why>"
   The text enc_buf({ segment =, action =, observation = }, true) leaves in
   the buffer, without the table: a committed hop (specula.run.records),
   its keys in bytewise order, a nil one left out (as a table would have
   no such key), its values at the depth they would have there. */
static int sp_jsonenc_call_hop(lua_State *L) {
  static const struct {
    const char *key;  /* "key": */
    size_t len;       /* its bytes */
    int arg;          /* which argument */
  } K[] = { { "\"action\":", 9, 2 }, { "\"observation\":", 14, 3 }, { "\"segment\":", 10, 1 } };
  sp_jsonenc *e = lua_touserdata(L, SP_JSONENC_UP_STATE);
  e->sorted = 1;
  e->pick = 0;
  lua_settop(L, 3);
  sp_buf_reset(&e->out);
  e->nkeys = 0;
  e->path[1] = NULL;   /* the hop's own table, which no value can hold */
  int rc = sp_jsonenc_put(e, "{", 1), first = 1;
  for (int i = 0; i < 3 && rc == 0; i++) {
    if (lua_isnil(L, K[i].arg)) continue;
    if (!first) rc = sp_jsonenc_put(e, ",", 1);
    if (rc == 0) rc = sp_jsonenc_put(e, K[i].key, K[i].len);
    if (rc == 0) rc = sp_jsonenc_value(e, L, K[i].arg, 1);
    first = 0;
  }
  if (rc == 0) rc = sp_jsonenc_put(e, "}", 1);
  lua_settop(L, 3);
  return sp_jsonenc_buf_result(e, L, rc);
}

const char *sp_jsonenc_text(const void *state) {
  const sp_jsonenc *e = state;
  if (!e || e->magic != SP_JSONENC_MAGIC) return NULL;
  return e->out.data;
}

static int sp_jsonenc_gc(lua_State *L) {
  sp_jsonenc *e = luaL_checkudata(L, 1, SP_JSONENC_MT);
  sp_buf_free(&e->out);
  free(e->keys);
  e->keys = NULL;
  e->capkeys = 0;
  return 0;
}

/* new(array_mt, object_mt, null [, raw_mt]) -> enc, enc_buf, enc_hop */
static int sp_jsonenc_new(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 4);
  sp_jsonenc *e = lua_newuserdata(L, sizeof *e);
  memset(e, 0, sizeof *e);
  e->magic = SP_JSONENC_MAGIC;
  sp_buf_init(&e->out);
  if (luaL_newmetatable(L, SP_JSONENC_MT)) {
    lua_pushcfunction(L, sp_jsonenc_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  if (lua_isnoneornil(L, 4)) {
    lua_newtable(L);  /* no raw metatable given: one nothing can carry */
    lua_replace(L, 4);
  }
  /* upvalues array_mt, object_mt, null, state, raw_mt: the same for the
     three closures (one state, so one buffer) */
  lua_pushvalue(L, 4);
  lua_remove(L, 4);
  for (int i = 1; i <= 5; i++) lua_pushvalue(L, i);
  lua_pushcclosure(L, sp_jsonenc_call, 5);
  lua_insert(L, 1);
  for (int i = 2; i <= 6; i++) lua_pushvalue(L, i);
  lua_pushcclosure(L, sp_jsonenc_call_buf, 5);
  lua_insert(L, 2);
  lua_pushcclosure(L, sp_jsonenc_call_hop, 5);
  return 3;
}

int luaopen_specula_jsonenc(lua_State *L) {
  lua_pushcfunction(L, sp_jsonenc_new);
  return 1;
}
