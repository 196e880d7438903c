-- The JSON encoder of specula.json written in Lua: the reference that
-- engine/sp_jsonenc.c (json.encode, json.canonical) must match byte for
-- byte and message for message. json_spec compares the two on random and
-- hand-made values, spec/fuzz/fuzz_jsonenc.c on every value its inputs
-- decode to. specula itself never runs it (docs/architecture.md, Codecs).
--
--   ref.encode(v)    -> text, or nil and "JSON: <why>"   (as json.encode)
--   ref.canonical(v) -> text; raises "JSON: <why>"        (as json.canonical)
local json = require "specula.json"
local ffi = require "ffi"

local format = string.format
local concat, sort = table.concat, table.sort
local huge = math.huge
local type, next, rawget, pcall, error, tostring, tonumber, getmetatable =
  type, next, rawget, pcall, error, tostring, tonumber, getmetatable

local ffi_string, C = ffi.string, ffi.C
-- pcall: another module may have declared these already
pcall(ffi.cdef, "int snprintf(char *s, size_t n, const char *fmt, ...);")
pcall(ffi.cdef, "double strtod(const char *s, char **end);")

local null, array_mt, object_mt, raw_mt = json.null, json.array_mt, json.object_mt, json.raw_mt
local bad_utf8 = json.bad_utf8
local MAX_DEPTH = json.MAX_DEPTH
local TWO53 = 2 ^ 53
local u8ptr = ffi.typeof("const uint8_t *")

local M = {}

local function eerr(msg) error("JSON: " .. msg, 0) end

-- Escape buffer for quote(), reused while small enough to keep around.
local QBUF_KEEP = 65536
local qbuf, qcap = ffi.new("uint8_t[?]", 1024), 1024
local ESC2 = { [8] = 98, [9] = 116, [10] = 110, [12] = 102, [13] = 114, [34] = 34, [92] = 92 }

-- The body of a JSON string literal for s (without the quotes). Byte loops
-- over the string through the FFI: the JIT compiles them, unlike patterns.
local function quote(s)
  local p, n, i = ffi.cast(u8ptr, s), #s, 0
  while i < n do  -- the common case: nothing to escape or check
    local c = p[i]
    if c < 0x20 or c == 34 or c == 92 or c >= 0x80 then break end
    i = i + 1
  end
  if i == n then return s end
  local at = bad_utf8(s, i)
  if at then eerr(format("invalid UTF-8 in string at byte %d", at)) end
  local j = i
  while j < n do
    local c = p[j]
    if c < 0x20 or c == 34 or c == 92 then break end
    j = j + 1
  end
  if j == n then return s end  -- only non-ASCII, which stays raw
  local need, out = n * 6, qbuf  -- "\u00XX" is the longest escape
  if need > qcap then
    out = ffi.new("uint8_t[?]", need)
    if need <= QBUF_KEEP then qbuf, qcap = out, need end
  end
  ffi.copy(out, p, j)
  local o = j
  for k = j, n - 1 do
    local c = p[k]
    if c >= 0x20 and c ~= 34 and c ~= 92 then
      out[o] = c; o = o + 1
    else
      out[o] = 92
      local e = ESC2[c]
      if e then
        out[o + 1] = e; o = o + 2
      else  -- \u00XX, lowercase hex
        local lo = c % 16
        out[o + 1] = 117; out[o + 2] = 48; out[o + 3] = 48
        out[o + 4] = c >= 16 and 49 or 48
        out[o + 5] = lo < 10 and 48 + lo or 87 + lo
        o = o + 6
      end
    end
  end
  return ffi_string(out, o)
end

-- Non-integers need the C library's snprintf, exactly as in sp_json.c:
-- LuaJIT's own %g rounds exact ties differently from glibc (e.g.
-- 1000000000000000.25 at %.17g), which would break byte-identity. At 15
-- digits LuaJIT's result is safe whenever it reads back as x: half a unit in
-- the 15th digit exceeds half the spacing of doubles, so a tie could not read
-- back. That covers most numbers, and string.format is compiled; 16 and 17
-- digits go through the FFI (tonumber rounds exactly like strtod).
local numbuf = ffi.new("char[40]")
local function number(x)
  if x ~= x or x == huge or x == -huge then eerr("cannot encode NaN or infinity") end
  if x % 1 == 0 and x > -TWO53 and x < TWO53 then
    -- tostring prints %.14g: exact for integers below 1e14, and much faster
    if x > -1e14 and x < 1e14 then return x == 0 and "0" or tostring(x) end
    return format("%d", x)
  end
  local s = format("%.15g", x)
  if tonumber(s) == x then return s end
  local n = C.snprintf(numbuf, 40, "%.16g", x)
  if C.strtod(numbuf, nil) ~= x then n = C.snprintf(numbuf, 40, "%.17g", x) end
  return ffi_string(numbuf, n)
end

-- '"key":' for a key string; cached, since object keys repeat a lot.
local keycache, keycache_n = {}, 0
local function keytext(k)
  local kt = keycache[k]
  if kt then return kt end
  kt = '"' .. quote(k) .. '":'
  if keycache_n >= 4096 then keycache, keycache_n = {}, 0 end
  keycache[k] = kt
  keycache_n = keycache_n + 1
  return kt
end

-- All keys of t, in a new array keys[1..count]; also says whether they are
-- exactly positive integers, and the largest. This is the only table
-- traversal, and it is kept out of the JIT (specula/internal/nojit.lua says why).
local function scan(t)
  local keys, count, maxn, indices = {}, 0, 0, true
  for k in next, t do
    count = count + 1
    keys[count] = k
    if indices then
      if type(k) == "number" and k >= 1 and k % 1 == 0 then
        if k > maxn then maxn = k end
      else
        indices = false
      end
    end
  end
  return keys, count, maxn, indices
end
require("specula.internal.nojit")(scan)   -- a pairs() walk: see specula/internal/nojit.lua

local function lt(a, b) return a < b end

-- Sorts keys[1..n] bytewise (LuaJIT compares strings with memcmp, not strcoll).
local function sort_keys(keys, n)
  if n <= 12 then
    for i = 2, n do
      local k, j = keys[i], i - 1
      while j >= 1 and keys[j] > k do keys[j + 1] = keys[j]; j = j - 1 end
      keys[j + 1] = k
    end
    return keys
  end
  sort(keys, lt)
  return keys
end

local emit

local function emit_array(t, n, buf, bn, depth, sorted, stack)
  if n == 0 then bn = bn + 1; buf[bn] = "[]"; return bn end
  bn = bn + 1; buf[bn] = "["
  for i = 1, n do
    if i > 1 then bn = bn + 1; buf[bn] = "," end
    local v = rawget(t, i)
    if v == nil then bn = bn + 1; buf[bn] = "null"
    else bn = emit(v, buf, bn, depth, sorted, stack) end
  end
  bn = bn + 1; buf[bn] = "]"
  return bn
end

local function emit_table(t, buf, bn, depth, sorted, stack)
  if depth > MAX_DEPTH then
    for d = 1, MAX_DEPTH do
      if stack[d] == t then eerr("cannot encode a table that contains itself") end
    end
    eerr("nesting deeper than " .. MAX_DEPTH)
  end
  local mt = getmetatable(t)
  if mt == raw_mt then
    if type(rawget(t, 1)) ~= "string" then eerr("a raw JSON value without its text") end
    local i = 1
    while type(rawget(t, i)) == "string" do bn = bn + 1; buf[bn] = rawget(t, i); i = i + 1 end
    return bn
  end
  stack[depth] = t
  local keys, count, maxn, indices = scan(t)
  if mt == array_mt then
    if not indices then eerr("array has a key that is not a positive integer") end
    bn = emit_array(t, maxn, buf, bn, depth, sorted, stack)
    stack[depth] = nil
    return bn
  end
  if count == 0 then bn = bn + 1; buf[bn] = "{}"; stack[depth] = nil; return bn end
  if indices and count == maxn and mt ~= object_mt then
    bn = emit_array(t, maxn, buf, bn, depth, sorted, stack)
    stack[depth] = nil
    return bn
  end
  -- an object: integer keys are written in decimal; remember the originals
  local ints
  for i = 1, count do
    local k = keys[i]
    local tk = type(k)
    if tk ~= "string" then
      if tk == "number" and k % 1 == 0 and k > -TWO53 and k < TWO53 then
        local ks = format("%d", k)
        if rawget(t, ks) ~= nil then eerr("integer key " .. ks .. " and string key \"" .. ks .. "\" collide") end
        ints = ints or {}
        ints[ks] = k
        keys[i] = ks
      else
        eerr("cannot encode a key of type " .. (tk == "number" and "non-integer number" or tk))
      end
    end
  end
  if sorted then keys = sort_keys(keys, count) end
  bn = bn + 1; buf[bn] = "{"
  for i = 1, count do
    local k = keys[i]
    if i > 1 then bn = bn + 1; buf[bn] = "," end
    bn = bn + 1; buf[bn] = keytext(k)
    bn = emit(rawget(t, ints and ints[k] or k), buf, bn, depth, sorted, stack)
  end
  bn = bn + 1; buf[bn] = "}"
  stack[depth] = nil  -- the path must not pin the caller's tables
  return bn
end
-- This walk is the reference the C encoder is fuzzed against, so it must
-- not depend on the compiler: CI's fuzzer once saw it, compiled, read a nil
-- among an object's keys (18 keys, sorted by table.sort) that the
-- interpreter never sees (not reproduced here in 18 million inputs since;
-- its input was lost with the fuzzer's directory: .ci/run prints it now).
require("specula.internal.nojit")(emit_table)
require("specula.internal.nojit")(sort_keys)

emit = function(v, buf, bn, depth, sorted, stack)
  local tv = type(v)
  if tv == "string" then
    bn = bn + 3; buf[bn - 2] = '"'; buf[bn - 1] = quote(v); buf[bn] = '"'
  elseif tv == "number" then
    bn = bn + 1; buf[bn] = number(v)
  elseif tv == "table" then
    bn = emit_table(v, buf, bn, depth + 1, sorted, stack)
  elseif tv == "boolean" then
    bn = bn + 1; buf[bn] = v and "true" or "false"
  elseif v == null or v == nil then
    bn = bn + 1; buf[bn] = "null"
  else
    eerr("cannot encode a " .. tv)
  end
  return bn
end

-- The output buffer and the path of open tables are reused across calls (the
-- encoder runs no user code, so it is never re-entered). Entries past the
-- current count are stale and never read; the buffer is dropped after a big
-- output so it does not pin large strings.
local outbuf, path = {}, {}

local function run(value, sorted)
  local tv = type(value)
  -- scalars skip the buffer altogether
  if tv == "string" then return '"' .. quote(value) .. '"' end
  if tv == "number" then return number(value) end
  local buf = outbuf or {}
  outbuf = nil  -- should an error escape, the next call starts afresh
  local bn = emit(value, buf, 0, 0, sorted, path)
  local s = concat(buf, "", 1, bn)
  outbuf = (bn <= 4096 and #s <= 65536) and buf or {}
  return s
end

function M.encode(value)
  local ok, s = pcall(run, value, true)
  if ok then return s end
  return nil, s
end

function M.canonical(value)
  return run(value, true)
end

return M
