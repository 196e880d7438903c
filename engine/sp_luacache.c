/* Bytecode cache of the engine's Lua modules (see sp_luacache.h).
 *
 * Parsing the ~50 modules a command loads was most of a start (about 20 ms
 * of 40 on the 2-CPU machine of bench/README.md); loading their bytecode
 * is over ten times faster. An entry is the file <cache>/<h>.bc, h the
 * first 128 bits of SHA-256(chunk name) in hex (one entry per module path:
 * an edited module replaces its entry), holding
 *   - a magic line;
 *   - the SHA-256 of this LuaJIT (its version and its bytecode of a probe
 *     chunk: another LuaJIT's entries are never loaded);
 *   - the SHA-256 of the chunk name and the source text;
 *   - the source file's identity when the entry was written (device, inode,
 *     size, modification and change times in ns): while stat() gives the
 *     same, the source is not even read (the change time moves with every
 *     write and cannot be set back); otherwise it is read and hashed, and
 *     the entry serves only the text it was compiled from;
 *   - a checksum of what follows (damage on disk: LuaJIT does not check
 *     the bytecode it loads, and a digest of it would cost what parsing
 *     saves);
 *   - the template plan (below), its length first;
 *   - the bytecode with its debug information, so tracebacks and error
 *     messages are the parsed module's.
 * Templates. A table constructor with computed fields ({ id = x, n = y })
 * copies a template that the parser gives every key, the computed ones
 * with nil values, so the copy has a slot for each before its fields are
 * stored. LuaJIT's bytecode writer keeps only the non-nil entries: loaded
 * from bytecode, every such table grew key by key (a five-field
 * constructor, interpreted, 196 -> 263 ns; a whole sweep +3.2 % of
 * instructions, which is why stop 48 took the first cache out). The
 * entry keeps, per template, the keys the parser gave nil values
 * (TEMPLATES_LUA's plan, read with jit.util from the parsed function), and
 * a load puts them back (a key set, then set to nil, keeps its slot): the
 * tables are then made exactly as the parsed module makes them. A nil
 * value is invisible to Lua, so a wrong plan could only cost speed.
 * Entries are written to a temporary name and renamed: a reader sees a
 * whole entry or none. */
#include "sp_luacache.h"
#include "sp_crypto.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <luajit.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SP_LUACACHE_MAGIC "specula-lua-bytecode 2\n"  /* the entry's first line */
#define SP_LUACACHE_MAGIC_LEN (sizeof SP_LUACACHE_MAGIC - 1)
#define SP_LUACACHE_ID_AT (SP_LUACACHE_MAGIC_LEN + 64)                    /* after the two digests */
#define SP_LUACACHE_SUM_AT (SP_LUACACHE_ID_AT + sizeof(sp_luacache_id))     /* checksum of the rest */
#define SP_LUACACHE_PLAN_AT (SP_LUACACHE_SUM_AT + 8)                        /* the plan's length (uint32) */
#define SP_LUACACHE_HDR (SP_LUACACHE_PLAN_AT + 4)                           /* then the plan, the bytecode */
#define SP_LUACACHE_MAX_BYTES (16u << 20)              /* a bigger source or entry is not cached */
#define SP_LUACACHE_KEEP_DAYS 30                        /* an entry not rewritten for longer is pruned */
#define SP_LUACACHE_PATH 4096                           /* room for a path */

/* A source file's identity (stat): an entry that carries the same one is
   for this very text. */
typedef struct {
  int64_t dev, ino, size;            /* device, inode, bytes */
  int64_t mtime_s, mtime_ns;         /* modification time */
  int64_t ctime_s, ctime_ns;         /* change time (any write moves it; no call sets it) */
} sp_luacache_id;

/* Upvalues of the searcher. */
#define UP_LUA_DIR lua_upvalueindex(1)   /* the engine's Lua tree, with a trailing '/' */
#define UP_CACHE_DIR lua_upvalueindex(2) /* the cache directory */
#define UP_RUNTIME lua_upvalueindex(3)   /* SHA-256 of this LuaJIT (32 bytes) */
#define UP_LUA_SEARCHER lua_upvalueindex(4) /* package.loaders[2] as it was: every other module */
#define UP_PRUNED lua_upvalueindex(5)    /* the directory was pruned by this process */
#define UP_PLAN lua_upvalueindex(6)      /* TEMPLATES_LUA's plan(fn) -> string */
#define UP_RESTORE lua_upvalueindex(7)   /* TEMPLATES_LUA's restore(fn, plan) */

/* The template keys of a function and its nested functions (see the top
   of the file). plan(fn): for each template with nil-valued string keys,
   "c1,c2,...,t=n=" (the path of nested-function constants from fn, the
   template's constant, the key count) and each key as "len:bytes"; ";"
   after each. A nil-valued key is one next() accepts but rawget reads as
   nil; the candidates are the function's string constants (the stores
   that fill a constructor name their keys there). restore(fn, plan) puts
   the keys back, each set and then cleared. */
static const char TEMPLATES_LUA[] =
  "local ju = require('jit.util')\n"
  "local funck, funcbc = ju.funck, ju.funcbc\n"
  "local band, rshift = bit.band, bit.rshift\n"
  "local type, rawget, pcall, next, concat, tonumber, sub, find ="
  " type, rawget, pcall, next, table.concat, tonumber, string.sub, string.find\n"
  /* TDUP and TSETS by number (jit.vmdef, when installed): the candidates
     are a constructor's computed fields (below); without them every string
     constant is (right, and slow: next() raises for each key a template
     lacks) */
  "local TDUP, TSETS\n"
  "do\n"
  "  local ok, vmdef = pcall(require, 'jit.vmdef')\n"
  "  local names = ok and type(vmdef) == 'table' and vmdef.bcnames\n"
  "  if type(names) == 'string' then\n"
  "    for op = 0, #names / 6 - 1 do\n"
  "      local nm = sub(names, op * 6 + 1, op * 6 + 6)\n"
  "      if nm == 'TDUP  ' then TDUP = op elseif nm == 'TSETS ' then TSETS = op end\n"
  "    end\n"
  "  end\n"
  "end\n"
  /* Whether instruction x (mode m) ends the constructor of the table in
     register reg: anything but a store of a value under a string key into
     it that names the register (an operand of mode dst, var, or a base
     at or below it). The stores before that are the constructor's
     computed fields, the keys its template holds with nil values. */
  "local function ends(x, m, reg)\n"
  "  local op, a = band(x, 0xff), band(rshift(x, 8), 0xff)\n"
  "  if op == TSETS and rshift(x, 24) == reg then return a == reg end\n"
  "  local function hits(mode, v)\n"
  "    if mode == 1 or mode == 3 then return v == reg end\n"
  "    return (mode == 2 or mode == 4) and v <= reg\n"
  "  end\n"
  "  local mb, mc = band(rshift(m, 3), 15), band(rshift(m, 7), 15)\n"
  "  if hits(band(m, 7), a) then return true end\n"
  "  if mb ~= 0 then return hits(mb, rshift(x, 24)) or hits(mc, band(rshift(x, 16), 0xff)) end\n"
  "  return hits(mc, rshift(x, 16))\n"
  "end\n"
  "local function candidates(p)\n"
  "  if not (TDUP and TSETS) then return nil end\n"
  "  local by, pc = {}, 0\n"
  "  while true do\n"
  "    local ins = funcbc(p, pc)\n"
  "    if not ins then break end\n"
  "    if band(ins, 0xff) == TDUP then\n"
  "      local t, reg = -(rshift(ins, 16) + 1), band(rshift(ins, 8), 0xff)\n"
  "      local c = by[t] or {}\n"
  "      by[t] = c\n"
  "      for q = pc + 1, pc + 100000 do\n"
  "        local x, m = funcbc(p, q)\n"
  "        if not x or ends(x, m, reg) then break end\n"
  "        if band(x, 0xff) == TSETS and rshift(x, 24) == reg then\n"
  "          c[#c + 1] = funck(p, -(band(rshift(x, 16), 0xff) + 1))\n"
  "        end\n"
  "      end\n"
  "    end\n"
  "    pc = pc + 1\n"
  "  end\n"
  "  return by\n"
  "end\n"
  "local function walk(p, path, out)\n"
  "  local i, by = -1, candidates(p)\n"
  "  while true do\n"
  "    local k = funck(p, i)\n"
  "    if k == nil then return end\n"
  "    if type(k) == 'table' then\n"
  "      local keys, seen, list = nil, {}, by and by[i]\n"
  /* (a template that shows no key at all holds only nil values: a
     `{ a = nil }` read through a closure, out of the scan's sight) */
  "      if list and #list == 0 and next(k) == nil then list = nil end\n"
  "      local scanned = list ~= nil\n"
  "      if not list then\n"
  "        list = {}\n"
  "        local j = -1\n"
  "        while true do\n"
  "          local s = funck(p, j)\n"
  "          if s == nil then break end\n"
  "          list[#list + 1] = s\n"
  "          j = j - 1\n"
  "        end\n"
  "      end\n"
  "      for q = 1, #list do\n"
  "        local s = list[q]\n"
  /* a computed field is one the template holds (the parser keeps them
     all); one of every string constant must be there (a { a = nil } keeps
     its key or not as the parser's seeded hashing placed it) */
  "        if type(s) == 'string' and not seen[s] and rawget(k, s) == nil and (scanned or pcall(next, k, s)) then\n"
  "          seen[s] = true\n"
  "          keys = keys or {}\n"
  "          keys[#keys + 1] = #s .. ':' .. s\n"
  "        end\n"
  "      end\n"
  "      if keys then out[#out + 1] = path .. i .. '=' .. #keys .. '=' .. concat(keys) .. ';' end\n"
  "    elseif type(k) == 'proto' then\n"
  "      walk(k, path .. i .. ',', out)\n"
  "    end\n"
  "    i = i - 1\n"
  "  end\n"
  "end\n"
  "local function plan(fn)\n"
  "  local out = {}\n"
  "  walk(fn, '', out)\n"
  "  return concat(out)\n"
  "end\n"
  "local function restore(fn, plan)\n"
  "  local pos, n, keys = 1, #plan, {}\n"
  "  while pos <= n do\n"
  "    local e = find(plan, '=', pos, true)\n"
  "    local p, c = fn, pos\n"
  "    while true do\n"
  "      local comma = find(plan, ',', c, true)\n"
  "      if not comma or comma > e then break end\n"
  "      p = funck(p, tonumber(sub(plan, c, comma - 1)))\n"
  "      c = comma + 1\n"
  "    end\n"
  "    local t = funck(p, tonumber(sub(plan, c, e - 1)))\n"
  "    local ke = find(plan, '=', e + 1, true)\n"
  "    local nk = tonumber(sub(plan, e + 1, ke - 1))\n"
  "    pos = ke + 1\n"
  "    for q = 1, nk do\n"
  "      local colon = find(plan, ':', pos, true)\n"
  "      local len = tonumber(sub(plan, pos, colon - 1))\n"
  "      keys[q] = sub(plan, colon + 1, colon + len)\n"
  "      pos = colon + 1 + len\n"
  "    end\n"
  "    pos = pos + 1\n"
  "    if type(t) == 'table' then\n"
  "      for q = 1, nk do if rawget(t, keys[q]) == nil then t[keys[q]] = true else keys[q] = false end end\n"
  "      for q = 1, nk do if keys[q] then t[keys[q]] = nil end end\n"
  "    end\n"
  "  end\n"
  "end\n"
  "return plan, restore\n";

/* A growing byte buffer for lua_dump. */
typedef struct {
  char *data;  /* the bytes */
  size_t len;  /* used */
  size_t cap;  /* allocated */
  int failed;  /* out of memory */
} dumpbuf;

static int dump_writer(lua_State *L, const void *p, size_t n, void *ud) {
  (void)L;
  dumpbuf *b = ud;
  if (b->failed) return 1;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 16384;
    while (cap < b->len + n) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
      b->failed = 1;
      return 1;
    }
    b->data = d;
    b->cap = cap;
  }
  memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}

/* The whole file at path (NUL-terminated, *len bytes), or NULL. */
static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  struct stat st;
  char *data = NULL;
  if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size <= SP_LUACACHE_MAX_BYTES) {
    size_t n = (size_t)st.st_size;
    data = malloc(n + 1);
    if (data && fread(data, 1, n, f) == n && fgetc(f) == EOF) {
      data[n] = '\0';
      *len = n;
    } else {
      free(data);
      data = NULL;
    }
  }
  fclose(f);
  return data;
}

/* SHA-256 of the chunk name and the source text. */
static int digest_of(const char *chunk, const char *src, size_t len, unsigned char out[32]) {
  sp_sha256 *h = sp_crypto_sha256_new();
  if (!h) return -1;
  sp_crypto_sha256_add(h, chunk, strlen(chunk) + 1);
  sp_crypto_sha256_add(h, src, len);
  sp_crypto_sha256_finish(h, out);   /* (frees h) */
  return 0;
}

static int id_of(const char *path, sp_luacache_id *id) {
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return -1;
  memset(id, 0, sizeof *id);
  id->dev = (int64_t)st.st_dev;
  id->ino = (int64_t)st.st_ino;
  id->size = (int64_t)st.st_size;
  id->mtime_s = (int64_t)st.st_mtim.tv_sec;
  id->mtime_ns = (int64_t)st.st_mtim.tv_nsec;
  id->ctime_s = (int64_t)st.st_ctim.tv_sec;
  id->ctime_ns = (int64_t)st.st_ctim.tv_nsec;
  return 0;
}

/* A 64-bit checksum of the bytecode (FNV-1a over 8-byte words, then the
   tail): finds damage, not tampering (the directory's owner and mode
   keep others out). */
static uint64_t checksum(const char *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ULL;
    h ^= h >> 29;
  }
  for (; i < n; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001b3ULL;
  return h ^ n;
}

/* The checksum of two pieces as one (the plan, then the bytecode). */
static uint64_t checksum2(const char *a, size_t alen, const char *b, size_t blen) {
  return checksum(a, alen) * 0x9e3779b97f4a7c15ULL ^ checksum(b, blen);
}

/* The plan's keys back into the templates of the function on top of the
   stack (loaded from bytecode). 0; -1 with the function popped when the
   plan raised (a damaged entry: the module is parsed). */
static int restore(lua_State *L, const char *plan, size_t planlen) {
  if (planlen == 0) return 0;
  lua_pushvalue(L, UP_RESTORE);
  lua_pushvalue(L, -2);
  lua_pushlstring(L, plan, planlen);
  if (lua_pcall(L, 2, 0, 0) != 0) {
    lua_pop(L, 2);
    return -1;
  }
  return 0;
}

/* <cache>/<first 128 bits of SHA-256(chunk) in hex>.bc into out. */
static int entry_path(const char *dir, const char *chunk, char *out, size_t n) {
  unsigned char d[32];
  char hex[33];
  sp_crypto_sha256(chunk, strlen(chunk), d);
  for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
  int w = snprintf(out, n, "%s/%s.bc", dir, hex);
  return w > 0 && (size_t)w < n ? 0 : -1;
}

/* Entries not rewritten for SP_LUACACHE_KEEP_DAYS, and temporaries a
   crashed writer left a day ago, are removed (run after a write, which
   happens once per module change). */
static void prune(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  time_t now = time(NULL);
  struct dirent *e;
  char path[SP_LUACACHE_PATH];
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    int bc = n > 3 && strcmp(e->d_name + n - 3, ".bc") == 0;
    int tmp = n > 4 && strcmp(e->d_name + n - 4, ".tmp") == 0;
    if (!bc && !tmp) continue;
    int w = snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (w <= 0 || (size_t)w >= sizeof path || lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    double age = difftime(now, st.st_mtime);
    if (age > (bc ? SP_LUACACHE_KEEP_DAYS * 86400.0 : 86400.0)) unlink(path);
  }
  closedir(d);
}

/* Writes the entry for the function on top of the stack (left there):
   runtime digest, source digest, the source's identity, then the plan and
   the bytecode (dumped and planned unless given: a function just parsed). */
static void store(lua_State *L, const char *entry, const char *runtime, const unsigned char digest[32],
                  const sp_luacache_id *id, const char *plan, size_t planlen, const char *bc, size_t bclen,
                  int prune_dir) {
  dumpbuf b = { 0 };
  if (!bc) {
    if (lua_dump(L, dump_writer, &b) != 0 || b.failed || b.len == 0) {
      free(b.data);
      return;
    }
    bc = b.data;
    bclen = b.len;
    /* the plan of the parsed function (left below it until written) */
    lua_pushvalue(L, UP_PLAN);
    lua_pushvalue(L, -2);
    if (lua_pcall(L, 1, 1, 0) != 0 || !lua_isstring(L, -1)) {
      lua_pop(L, 1);
      free(b.data);
      return;
    }
    lua_insert(L, -2);
    plan = lua_tolstring(L, -2, &planlen);
  }
  if (planlen > SP_LUACACHE_MAX_BYTES) {
    if (b.data) lua_remove(L, -2);
    free(b.data);
    return;
  }
  char tmp[SP_LUACACHE_PATH];
  int w = snprintf(tmp, sizeof tmp, "%s.%ld.tmp", entry, (long)getpid());
  int fd = w > 0 && (size_t)w < sizeof tmp ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
  if (fd >= 0) {
    uint32_t pl = (uint32_t)planlen;
    uint64_t sum = checksum2(plan, planlen, bc, bclen);
    int ok = write(fd, SP_LUACACHE_MAGIC, SP_LUACACHE_MAGIC_LEN) == (ssize_t)SP_LUACACHE_MAGIC_LEN &&
             write(fd, runtime, 32) == 32 && write(fd, digest, 32) == 32 &&
             write(fd, id, sizeof *id) == (ssize_t)sizeof *id && write(fd, &sum, 8) == 8 &&
             write(fd, &pl, 4) == 4 && (planlen == 0 || write(fd, plan, planlen) == (ssize_t)planlen) &&
             write(fd, bc, bclen) == (ssize_t)bclen;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, entry) != 0) unlink(tmp);
  }
  if (b.data) lua_remove(L, -2);   /* the plan */
  free(b.data);
  if (fd >= 0 && prune_dir) {
    char dir[SP_LUACACHE_PATH];
    snprintf(dir, sizeof dir, "%s", entry);
    char *slash = strrchr(dir, '/');
    if (slash) {
      *slash = '\0';
      prune(dir);
    }
  }
}

/* The entry at path whose magic and runtime digest are this LuaJIT's and
   whose bytecode is whole (*len bytes), or NULL. */
static char *read_entry(const char *path, const char *runtime, size_t *len) {
  char *data = read_all(path, len);
  if (data && (*len <= SP_LUACACHE_HDR || memcmp(data, SP_LUACACHE_MAGIC, SP_LUACACHE_MAGIC_LEN) != 0 ||
               memcmp(data + SP_LUACACHE_MAGIC_LEN, runtime, 32) != 0)) {
    free(data);
    return NULL;
  }
  uint64_t sum;
  uint32_t pl = 0;
  if (data) {
    memcpy(&sum, data + SP_LUACACHE_SUM_AT, 8);
    memcpy(&pl, data + SP_LUACACHE_PLAN_AT, 4);
  }
  if (data && ((size_t)pl >= *len - SP_LUACACHE_HDR ||
               sum != checksum2(data + SP_LUACACHE_HDR, pl, data + SP_LUACACHE_HDR + pl,
                                *len - SP_LUACACHE_HDR - pl))) {
    free(data);
    return NULL;
  }
  return data;
}

/* store, pruning the directory on the process's first write only (a
   checkout that touched every module rewrites them all at the next start) */
static void store_once(lua_State *L, const char *entry, const char *runtime, const unsigned char digest[32],
                       const sp_luacache_id *id, const char *plan, size_t planlen, const char *bc,
                       size_t bclen) {
  int first = !lua_toboolean(L, UP_PRUNED);
  if (first) {
    lua_pushboolean(L, 1);
    lua_replace(L, UP_PRUNED);
  }
  store(L, entry, runtime, digest, id, plan, planlen, bc, bclen, first);
}

/* What package.loaders' own Lua file searcher says of the module. */
static int delegate(lua_State *L) {
  lua_settop(L, 1);
  lua_pushvalue(L, UP_LUA_SEARCHER);
  lua_insert(L, 1);
  lua_call(L, 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* package.loaders[2], the Lua file searcher, extended: name -> the
   module's loader (and its path); a module not under the engine's tree,
   and anything the cache cannot serve, goes to the searcher it replaced
   (so whoever wraps loaders[2] still sees every Lua module loaded). */
static int searcher(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  /* the file the Lua searcher would load: package.searchpath(name, package.path) */
  lua_getglobal(L, "package");
  if (!lua_istable(L, -1)) return delegate(L);
  lua_getfield(L, -1, "searchpath");
  lua_getfield(L, -2, "path");
  if (!lua_isfunction(L, -2) || !lua_isstring(L, -1)) return delegate(L);
  lua_pushvalue(L, 1);
  lua_insert(L, -2);
  lua_call(L, 2, 1);
  const char *path = lua_tostring(L, -1);
  size_t dlen = 0;
  const char *dir = lua_tolstring(L, UP_LUA_DIR, &dlen);
  const char *cache = lua_tostring(L, UP_CACHE_DIR);
  const char *runtime = lua_tostring(L, UP_RUNTIME);
  char chunk[SP_LUACACHE_PATH], entry[SP_LUACACHE_PATH];
  sp_luacache_id id;
  /* not the engine's own module (the standard searchers take it), no
     cache, or no such file to stat */
  if (!cache || !path || strncmp(path, dir, dlen) != 0 || strlen(path) + 2 > sizeof chunk ||
      id_of(path, &id) != 0)
    return delegate(L);
  snprintf(chunk, sizeof chunk, "@%s", path);
  if (entry_path(cache, chunk, entry, sizeof entry) != 0) return delegate(L);
  size_t elen = 0, len = 0;
  char *ent = read_entry(entry, runtime, &elen);
  uint32_t planlen = 0;
  if (ent) memcpy(&planlen, ent + SP_LUACACHE_PLAN_AT, 4);
  const char *plan = ent ? ent + SP_LUACACHE_HDR : NULL;
  const char *bc = ent ? plan + planlen : NULL;
  size_t bclen = ent ? elen - SP_LUACACHE_HDR - planlen : 0;
  unsigned char digest[32];
  char *src = NULL;
  int same = ent && memcmp(ent + SP_LUACACHE_ID_AT, &id, sizeof id) == 0;
  if (!same) {
    /* the file changed or was never seen: its text decides */
    src = read_all(path, &len);
    /* unreadable, a shebang line or bytecode: luaL_loadfile's own handling */
    if (!src || (len > 0 && (src[0] == '#' || src[0] == LUA_SIGNATURE[0])) ||
        digest_of(chunk, src, len, digest) != 0) {
      free(src);
      free(ent);
      return delegate(L);
    }
    if (ent && memcmp(ent + SP_LUACACHE_MAGIC_LEN + 32, digest, 32) != 0) bc = NULL;   /* another text */
  }
  int loaded = 0;
  if (bc) {
    loaded = luaL_loadbuffer(L, bc, bclen, chunk) == 0;
    if (!loaded) lua_pop(L, 1);                                  /* its message */
    else if (restore(L, plan, planlen) != 0) loaded = 0;          /* (popped) */
  }
  if (loaded) {
    /* the same text under a new identity (touched, checked out again):
       the entry learns it, so the next start needs no read */
    if (!same) store_once(L, entry, runtime, digest, &id, plan, planlen, bc, bclen);
    free(src);
    free(ent);
    lua_pushstring(L, path);
    return 2;
  }
  /* (a damaged entry: parsed, and written again) */
  free(ent);
  if (!src) {
    src = read_all(path, &len);
    if (!src || (len > 0 && (src[0] == '#' || src[0] == LUA_SIGNATURE[0])) ||
        digest_of(chunk, src, len, digest) != 0) {
      free(src);
      return delegate(L);
    }
  }
  int rc = luaL_loadbuffer(L, src, len, chunk);
  free(src);
  if (rc != 0) {
    /* the message of package.loaders' Lua searcher, word for word */
    return luaL_error(L, "error loading module '%s' from file '%s':\n\t%s", name, path, lua_tostring(L, -1));
  }
  store_once(L, entry, runtime, digest, &id, NULL, 0, NULL, 0);
  lua_pushstring(L, path);
  return 2;
}

/* mkdir -p with mode 0700 for what it makes; 0 when dir is then a directory. */
static int make_dirs(char *dir) {
  for (char *p = dir + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    int rc = mkdir(dir, 0700);
    *p = '/';
    if (rc != 0 && errno != EEXIST) return -1;
  }
  return mkdir(dir, 0700) == 0 || errno == EEXIST ? 0 : -1;
}

/* The cache directory into out, made if missing and checked; 0, or -1: no cache. */
static int cache_dir(char *out, size_t n) {
  const char *env = getenv("SPECULA_BYTECODE_CACHE");
  const char *xdg = getenv("XDG_CACHE_HOME");
  const char *home = getenv("HOME");
  int w;
  if (env && *env) {
    if (strcmp(env, "off") == 0) return -1;
    w = snprintf(out, n, "%s", env);
  } else if (xdg && xdg[0] == '/') {
    w = snprintf(out, n, "%s/specula/lua-bytecode", xdg);
  } else if (home && home[0] == '/') {
    w = snprintf(out, n, "%s/.cache/specula/lua-bytecode", home);
  } else {
    return -1;
  }
  if (w <= 0 || (size_t)w >= n - 64) return -1;   /* room for an entry's name */
  if (make_dirs(out) != 0) return -1;
  struct stat st;
  /* another user's directory, or one others may write into, could hand us
     bytecode (which LuaJIT does not check): not used */
  if (lstat(out, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022) != 0)
    return -1;
  return access(out, W_OK | X_OK) == 0 ? 0 : -1;
}

/* SHA-256 of this LuaJIT: its version and its bytecode of a small chunk
   (pushed as a 32-byte string): a LuaJIT whose bytecode differs never
   loads another's entries. */
static int push_runtime(lua_State *L) {
  static const char PROBE[] =
    "local a, b = ... local t = { a, x = b } for i = 1, #t do a = a + i * 2 .. t.x end "
    "return function() return a, b, t end";
  dumpbuf b = { 0 };
  int rc = -1;
  if (luaL_loadbuffer(L, PROBE, sizeof PROBE - 1, "=probe") == 0) {
    sp_sha256 *h = lua_dump(L, dump_writer, &b) == 0 && !b.failed ? sp_crypto_sha256_new() : NULL;
    lua_pop(L, 1);
    if (h) {
      unsigned char d[32];
      sp_crypto_sha256_add(h, SP_LUACACHE_MAGIC, SP_LUACACHE_MAGIC_LEN);
      sp_crypto_sha256_add(h, LUAJIT_VERSION, sizeof LUAJIT_VERSION);
      sp_crypto_sha256_add(h, b.data, b.len);
      sp_crypto_sha256_finish(h, d);
      lua_pushlstring(L, (const char *)d, 32);
      rc = 0;
    }
  } else {
    lua_pop(L, 1);
  }
  free(b.data);
  return rc;
}

int sp_luacache_install(lua_State *L, const char *lua_dir) {
  int top = lua_gettop(L);
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "loaders");
  if (!lua_istable(L, -1)) {
    lua_settop(L, top);
    return -1;
  }
  /* no cache: loaders[2] stays what it was */
  char dir[SP_LUACACHE_PATH];
  if (cache_dir(dir, sizeof dir) != 0) {
    lua_settop(L, top);
    return 0;
  }
  lua_pushfstring(L, "%s/", lua_dir);
  lua_pushstring(L, dir);
  if (push_runtime(L) != 0) {
    lua_settop(L, top);
    return -1;
  }
  lua_rawgeti(L, -4, 2);   /* the Lua file searcher */
  if (!lua_isfunction(L, -1)) {
    lua_settop(L, top);
    return -1;
  }
  lua_pushboolean(L, 0);
  if (luaL_loadbuffer(L, TEMPLATES_LUA, sizeof TEMPLATES_LUA - 1, "=specula.luacache") != 0 ||
      lua_pcall(L, 0, 2, 0) != 0) {
    lua_settop(L, top);
    return -1;
  }
  lua_pushcclosure(L, searcher, 7);
  lua_rawseti(L, -2, 2);
  lua_settop(L, top);
  return 0;
}
