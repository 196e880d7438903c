--[[ specula.json: JSON for specula's Lua side (decode, encode, canonical).

Array/object rule (how Lua tables map to JSON):
  * Encoding: a table is a JSON array if it has json.array_mt, or if it is
    non-empty and its keys are exactly the integers 1..n. A table with
    json.object_mt, or any other non-empty table, is a JSON object; its integer
    keys become decimal string keys (other number keys, and keys of any other
    type, are an error, as is an integer key and a string key that spell the
    same name). An empty table with no marker encodes as {}. An array_mt
    table's elements are t[1]..t[n], n its largest integer key, holes encoding
    as null; a non-index key in it is an error.
  * Decoding: [] gives an empty table carrying array_mt, a non-empty array a
    plain sequence, an object a plain table (the last of duplicate keys wins),
    null gives json.null.
  So encode(decode(x)) is stable for every JSON text x, modulo whitespace and
  number formatting. Nesting deeper than 256 arrays/objects is an error both
  ways (the C parser's limit too).

canonical(v) is the same JSON with object keys sorted bytewise and numbers and
strings in the canonical form documented in engine/sp_json.h; it equals
sp_json_canonical(encode(v)) byte for byte. encode sorts object keys too:
LuaJIT's table order changes from process to process (its string hashes
are seeded at random), so text in next() order made one value's JSON (a
prompt, a request body, a log line) differ between two runs of the same
command; encode differs from canonical only in returning nil and the
error instead of raising it. Strings must be valid UTF-8 for
encode and canonical (the C parser demands it). encode writes numbers the same
way canonical does, so no precision is lost (cjson's encoder keeps only 14
digits, which is why cjson does not encode). Both are done by the C table
encoder of engine/sp_jsonenc.c (in the specula binary and the core
library); its reference written in Lua, which json_spec and fuzz_jsonenc
compare it with, is spec/support/json_ref.lua. docs/architecture.md
("Codecs") says why each JSON path exists.

decode rejects text that is not valid UTF-8 (error "JSON: invalid UTF-8 at
byte N", N from 0), then uses lua-cjson, which cannot tell [] from {} once
decoded, so a text that may contain an empty array goes through the pure-Lua
decoder below. Both accept the same inputs: strict JSON, plus what cjson also
takes (raw control characters inside strings, numbers like "1." or "-.5").

find_bad's table walk runs with the JIT off: see specula/internal/nojit.lua. ]]

local cjson = require("cjson")
local ffi = require("ffi")

local byte, char, find, format, match, sub =
  string.byte, string.char, string.find, string.format, string.match, string.sub
local concat, sort = table.concat, table.sort
local floor, huge = math.floor, math.huge
local type, next, rawget, pcall, error, tostring, tonumber, getmetatable, setmetatable =
  type, next, rawget, pcall, error, tostring, tonumber, getmetatable, setmetatable

local MAX_DEPTH = 256
local TWO53 = 2 ^ 53

-- A private cjson instance, so settings here never leak to other users.
local cj = cjson.new()
cj.decode_invalid_numbers(false)  -- no NaN, Infinity or hex
cj.decode_max_depth(MAX_DEPTH)

local M = {}
local null = cjson.null
local array_mt = { __name = "specula.json.array" }
local object_mt = { __name = "specula.json.object" }
M.null = null
M.array_mt = array_mt
M.object_mt = object_mt

-- Text that is already canonical JSON (e.g. a part of a record written by
-- the engine), emitted verbatim by encode and canonical: { text, ... } under
-- raw_mt, its pieces one after another (never joined into one string). The
-- caller vouches for the text; nothing checks it.
local raw_mt = { __name = "specula.json.raw" }
M.raw_mt = raw_mt
-- (up to three pieces without a vararg table: `{ ... }` is not compiled
-- by the JIT, and the callers that make one a query stayed interpreted)
function M.raw(a, b, c, ...)
  if select("#", ...) == 0 then return setmetatable({ a, b, c }, raw_mt) end
  return setmetatable({ a, b, c, ... }, raw_mt)
end

function M.array(t) return setmetatable(t or {}, array_mt) end
function M.object(t) return setmetatable(t or {}, object_mt) end

---------------------------------------------------------------------------
-- Pure-Lua decoder (only for texts that may hold an empty array)

local function derr(what, pos) error(format("JSON: %s at character %d", what, pos), 0) end

local unescape = {
  [34] = '"', [92] = "\\", [47] = "/", [98] = "\b", [102] = "\f", [110] = "\n", [114] = "\r", [116] = "\t",
}

local function utf8_char(cp)
  if cp < 0x80 then return char(cp) end
  if cp < 0x800 then return char(0xC0 + floor(cp / 64), 0x80 + cp % 64) end
  if cp < 0x10000 then
    return char(0xE0 + floor(cp / 4096), 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
  end
  return char(0xF0 + floor(cp / 262144), 0x80 + floor(cp / 4096) % 64, 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
end

local function skip_ws(s, i)
  local _, e = find(s, "^[ \t\n\r]*", i)
  return e + 1
end

-- s[i] is the opening quote; returns the string and the index after it.
local function dstring(s, i)
  local q = find(s, '["\\]', i + 1)
  if not q then derr("unterminated string", i) end
  if byte(s, q) == 34 then return sub(s, i + 1, q - 1), q + 1 end
  local parts, n, j = {}, 0, i + 1
  while true do
    q = find(s, '["\\]', j)
    if not q then derr("unterminated string", i) end
    if q > j then n = n + 1; parts[n] = sub(s, j, q - 1) end
    if byte(s, q) == 34 then return concat(parts, "", 1, n), q + 1 end
    local c = byte(s, q + 1)
    if c == 117 then -- \u
      local h = match(s, "^%x%x%x%x", q + 2)
      if not h then derr("invalid unicode escape", q) end
      local cp = tonumber(h, 16)
      j = q + 6
      if cp >= 0xD800 and cp <= 0xDBFF then
        local l = match(s, "^\\u(%x%x%x%x)", j)
        l = l and tonumber(l, 16)
        if not l or l < 0xDC00 or l > 0xDFFF then derr("lone surrogate in unicode escape", q) end
        cp = 0x10000 + (cp - 0xD800) * 1024 + (l - 0xDC00)
        j = j + 6
      elseif cp >= 0xDC00 and cp <= 0xDFFF then
        derr("lone surrogate in unicode escape", q)
      end
      n = n + 1; parts[n] = utf8_char(cp)
    else
      local e = unescape[c]
      if not e then derr("invalid escape", q) end
      n = n + 1; parts[n] = e
      j = q + 2
    end
  end
end

-- Same number syntax as cjson (strtod after a validity check): optional '-',
-- digits with an optional '.', an exponent only when digits follow it, no
-- leading zeros, no hex.
local function dnumber(s, i)
  local m = match(s, "^-?%d*%.?%d*", i)
  if not find(m, "%d") then derr("invalid number", i) end
  if find(m, "^-?0%d") then derr("invalid number (leading zero)", i) end
  local e = match(s, "^[eE][+-]?%d+", i + #m)
  if e then m = m .. e end
  return tonumber(m), i + #m
end

local dvalue

local function darray(s, i, depth)
  if depth > MAX_DEPTH then derr("nesting deeper than " .. MAX_DEPTH, i) end
  local t, n = {}, 0
  i = skip_ws(s, i + 1)
  if byte(s, i) == 93 then return setmetatable(t, array_mt), i + 1 end
  while true do
    local v
    v, i = dvalue(s, i, depth)
    n = n + 1; t[n] = v
    i = skip_ws(s, i)
    local c = byte(s, i)
    if c == 93 then return t, i + 1 end
    if c ~= 44 then derr(c and "expected ',' or ']'" or "unexpected end of input", i) end
    i = skip_ws(s, i + 1)
  end
end

local function dobject(s, i, depth)
  if depth > MAX_DEPTH then derr("nesting deeper than " .. MAX_DEPTH, i) end
  local t = {}
  i = skip_ws(s, i + 1)
  if byte(s, i) == 125 then return t, i + 1 end
  while true do
    if byte(s, i) ~= 34 then derr(byte(s, i) and "expected string key" or "unexpected end of input", i) end
    local k, v
    k, i = dstring(s, i)
    i = skip_ws(s, i)
    if byte(s, i) ~= 58 then derr(byte(s, i) and "expected ':'" or "unexpected end of input", i) end
    v, i = dvalue(s, skip_ws(s, i + 1), depth)
    t[k] = v
    i = skip_ws(s, i)
    local c = byte(s, i)
    if c == 125 then return t, i + 1 end
    if c ~= 44 then derr(c and "expected ',' or '}'" or "unexpected end of input", i) end
    i = skip_ws(s, i + 1)
  end
end

-- s[i] is the first byte of a value (whitespace already skipped).
dvalue = function(s, i, depth)
  local c = byte(s, i)
  if c == 34 then return dstring(s, i) end
  if c == 123 then return dobject(s, i, depth + 1) end
  if c == 91 then return darray(s, i, depth + 1) end
  if c == 45 or (c and c >= 48 and c <= 57) then return dnumber(s, i) end
  if c == 116 and sub(s, i, i + 3) == "true" then return true, i + 4 end
  if c == 102 and sub(s, i, i + 4) == "false" then return false, i + 5 end
  if c == 110 and sub(s, i, i + 3) == "null" then return null, i + 4 end
  derr(c and "expected a value" or "unexpected end of input", i)
end

local function lua_decode(s)
  local v, i = dvalue(s, skip_ws(s, 1), 0)
  i = skip_ws(s, i)
  if i <= #s then derr("unexpected data after the value", i) end
  return v
end

-- True if text has "[" followed by optional whitespace and "]" (perhaps
-- inside a string: that only costs the slower decoder). Plain finds are much
-- faster than an unanchored pattern over the whole text.
local function may_have_empty_array(text)
  local i = find(text, "[", 1, true)
  while i do
    if find(text, "^%s*%]", i + 1) then return true end
    i = find(text, "[", i + 1, true)
  end
  return false
end

-- Decodes text; returns the value, or nil and "JSON: <what> at character N".
local bad_utf8

function M.decode(text)
  if type(text) ~= "string" then return nil, "JSON: cannot decode a " .. type(text) end
  -- JSON text is UTF-8 (RFC 8259); lua-cjson would pass broken bytes through
  local at = bad_utf8(text)
  if at then return nil, format("JSON: invalid UTF-8 at byte %d", at) end
  local ok, v
  if may_have_empty_array(text) then
    ok, v = pcall(lua_decode, text)
  else
    ok, v = pcall(cj.decode, text)
    if not ok then v = "JSON: " .. tostring(v) end
  end
  if ok then return v end
  return nil, v
end

---------------------------------------------------------------------------
-- UTF-8 checks (decode, the error paths, and the reference encoder)

-- 0-based byte offset of the first invalid UTF-8 sequence in s (from byte
-- offset from on), or nil; the C parser's rules (no overlongs, surrogates,
-- or code points above U+10FFFF). The engine's C function checks a whole
-- string in one call (sp_json_utf8_bad), where this byte loop is a trace
-- entered and left per string and keeps whatever calls it out of compiled
-- code; the loop is what runs where the engine's library is not loaded
-- (the encoder's fuzzer embeds LuaJIT with the encoder alone), and the
-- reference json_spec checks the C function against.
local u8ptr = ffi.typeof("const uint8_t *")
local function bad_utf8_lua(s, from)
  local p, n, i = ffi.cast(u8ptr, s), #s, from or 0
  while i < n do
    local c = p[i]
    if c < 0x80 then
      i = i + 1
    else
      if c < 0xC2 or c > 0xF4 then return i end
      local len, lo, hi
      if c < 0xE0 then len, lo, hi = 2, 0x80, 0xBF
      elseif c < 0xF0 then len, lo, hi = 3, c == 0xE0 and 0xA0 or 0x80, c == 0xED and 0x9F or 0xBF
      else len, lo, hi = 4, c == 0xF0 and 0x90 or 0x80, c == 0xF4 and 0x8F or 0xBF end
      if i + len > n then return i end
      local c1 = p[i + 1]
      if c1 < lo or c1 > hi then return i end
      if len > 2 and (p[i + 2] < 0x80 or p[i + 2] > 0xBF) then return i end
      if len > 3 and (p[i + 3] < 0x80 or p[i + 3] > 0xBF) then return i end
      i = i + len
    end
  end
  return nil
end
M.bad_utf8_lua = bad_utf8_lua
local utf8_bad_c   -- (bound with the C encoder, below, when the engine's library is there)
local function bad_utf8_c(s, from)
  local at = utf8_bad_c(s, #s, from or 0)
  if at >= 0 then return at end
  if at == -1 then return nil end
  error("specula.json: a string too long to check", 2)
end
bad_utf8 = bad_utf8_lua

-- s with every invalid UTF-8 sequence replaced by U+FFFD (s itself when it
-- is valid): for text that must go into a message or a record whatever it
-- holds.
local REPL = "\239\191\189"
function M.utf8_clean(s)
  s = tostring(s)
  local at = bad_utf8(s)
  if not at then return s end
  local parts, n, from = {}, 0, 0
  while at do
    n = n + 1; parts[n] = sub(s, from + 1, at)
    n = n + 1; parts[n] = REPL
    -- skip the bad lead byte and any continuation bytes after it
    local j = at + 1
    while j < #s do
      local c = byte(s, j + 1)
      if c < 0x80 or c > 0xBF then break end
      j = j + 1
    end
    from = j
    at = bad_utf8(s, from)
  end
  n = n + 1; parts[n] = sub(s, from + 1)
  return concat(parts, "", 1, n)
end

-- The longest prefix of s of at most n bytes that does not end inside a
-- UTF-8 sequence (s is cleaned first), and whether anything was cut.
function M.utf8_cut(s, n)
  s = M.utf8_clean(s)
  if #s <= n then return s, false end
  local cut = n
  -- back off over continuation bytes to the start of the sequence at n+1
  while cut > 0 do
    local c = byte(s, cut + 1)
    if c < 0x80 or c >= 0xC0 then break end
    cut = cut - 1
  end
  return sub(s, 1, cut), true
end

-- The encoder is C's (engine/sp_jsonenc.h): preloaded by the specula
-- binary; under plain luajit, taken from the core library. (Its reference
-- in Lua, for json_spec and the fuzzer, is spec/support/json_ref.lua.)
local function c_encoder()
  local ok, new = pcall(require, "specula.jsonenc")
  local why = new
  if not ok then
    local lib = os.getenv("SPECULA_CORE_LIB") or "libspecula_core.so"
    new, why = package.loadlib(lib, "luaopen_specula_jsonenc")
    new = new and new()
  end
  if type(new) ~= "function" then
    error("specula.json: cannot load the C encoder (engine/sp_jsonenc.c) from the specula binary or "
      .. "the core library; set SPECULA_CORE_LIB to build/libspecula_core.so: " .. tostring(why), 0)
  end
  return new(array_mt, object_mt, null, raw_mt)
end
-- cenc(value, sorted) -> text; cenc_buf(value, sorted) -> state, length
-- of the text left in the encoder's buffer (M.cenc_buf); cenc_hop
-- (M.cenc_hop)
local cenc, cenc_buf, cenc_hop = c_encoder()
do
  local ok, core = pcall(require, "specula.internal.core")
  if ok then
    utf8_bad_c = core.C.sp_json_utf8_bad
    bad_utf8 = bad_utf8_c
  end
end

-- Encodes value as JSON text; returns the text, or nil and "JSON: <why>".
function M.encode(value) return cenc(value, true) end

-- Canonical JSON text of value (see the top of this file); raises
-- "JSON: <why>" for values that cannot be encoded.
function M.canonical(value)
  local s, err = cenc(value, true)
  if s == nil then error(err, 0) end
  return s
end

-- The canonical text of value and a newline written to the io file f and
-- flushed, from the C encoder's buffer (no Lua string): true and the bytes
-- written (newline included); nil and
-- "JSON: <why>" when value cannot be encoded (nothing written); false and
-- the OS error when the write or the flush failed.
-- write_line(f, value, true) returns third the canonical text of
-- { value.answer, value.trajectory } cut from the line (nil when value
-- lacks either): what --compare's agreement compares, without encoding
-- the trajectory twice. batched: the line is left in f's buffer, not
-- flushed (a file the engine flushes, engine/sp_outfile.h).
function M.write_line(f, value, pick, batched) return cenc(value, true, f, pick, batched) end

-- 0-based byte offset of the first invalid UTF-8 sequence in s (from the
-- 0-based offset from), or nil.
M.bad_utf8 = bad_utf8
M.MAX_DEPTH = MAX_DEPTH

-- The C encoder itself, for callers that encode many small values in a
-- loop: cenc(value, true) -> canonical text, or nil and "JSON: <why>"
-- (never raises). nil without the C encoder. cenc_buf(value, true) ->
-- the encoder's state and the text's length, the text left in the
-- encoder's own buffer: C.sp_jsonenc_text(state) points at it until the
-- encoder's next call (for an FFI call that copies it at once); or nil and
-- "JSON: <why>".
-- cenc_hop(segment, action, observation) -> what
-- cenc_buf({ segment =, action =, observation = }, true) gives, without
-- that table (a committed hop, specula.run.records).
M.cenc = cenc
M.cenc_buf = cenc_buf
M.cenc_hop = cenc_hop

-- Why value cannot be encoded, or nil when it can: the path of the first
-- offending part (root .. ".field[2].x", array indexes from 0 as in JSON)
-- and the reason. Same rules as the encoder; only called after it failed, so
-- it may be slow. Keys are visited in sorted order, so the answer is stable.
local function path_text(segs)
  local n = #segs
  if n > 16 then  -- a 100k-deep value: first and last parts only
    local t = {}
    for i = 1, 8 do t[#t + 1] = segs[i] end
    t[#t + 1] = format("[... %d levels ...]", n - 12)
    for i = n - 3, n do t[#t + 1] = segs[i] end
    segs = t
  end
  local s = concat(segs)
  return (s:gsub("^%.", ""))
end

local function key_seg(k)
  if match(k, "^[%a_][%w_]*$") then return "." .. k end
  return '["' .. M.utf8_clean(k):gsub('[\\"]', "\\%0") .. '"]'
end

local function find_bad(v, segs, depth, onpath)
  local tv = type(v)
  if tv == "string" then
    local at = bad_utf8(v)
    if at then return format("invalid UTF-8 in string at byte %d", at) end
  elseif tv == "number" then
    if v ~= v then return "NaN (not a number) cannot be encoded" end
    if v == huge or v == -huge then return "infinity cannot be encoded" end
  elseif tv == "table" then
    if getmetatable(v) == raw_mt then return nil end
    if onpath[v] then return "a table that contains itself (a cycle)" end
    if depth >= MAX_DEPTH then return "nested deeper than " .. MAX_DEPTH .. " tables" end
    local keys, count, maxn, indices = {}, 0, 0, true
    for k in next, v do
      count = count + 1; keys[count] = k
      if type(k) == "number" and k >= 1 and k % 1 == 0 then
        if k > maxn then maxn = k end
      else
        indices = false
      end
    end
    local mt = getmetatable(v)
    local arr = mt == array_mt or (count > 0 and indices and count == maxn and mt ~= object_mt)
    if mt == array_mt and not indices then return "array has a key that is not a positive integer" end
    onpath[v] = true
    local why
    if arr then
      for i = 1, maxn do
        segs[#segs + 1] = "[" .. (i - 1) .. "]"
        why = find_bad(rawget(v, i), segs, depth + 1, onpath)
        if why then return why end
        segs[#segs] = nil
      end
    else
      local names = {}
      for i = 1, count do
        local k = keys[i]
        local tk = type(k)
        if tk == "string" then
          if bad_utf8(k) then
            segs[#segs + 1] = key_seg(k)
            onpath[v] = nil
            return "invalid UTF-8 in a key"
          end
          names[#names + 1] = k
        elseif tk == "number" and k % 1 == 0 and k > -TWO53 and k < TWO53 then
          names[#names + 1] = k
        else
          onpath[v] = nil
          return "a key of type " .. (tk == "number" and "non-integer number" or tk) .. " cannot be encoded"
        end
      end
      sort(names, function(a, b) return tostring(a) < tostring(b) end)
      for _, k in ipairs(names) do
        segs[#segs + 1] = type(k) == "string" and key_seg(k) or "[" .. format("%d", k) .. "]"
        why = find_bad(rawget(v, k), segs, depth + 1, onpath)
        if why then return why end
        segs[#segs] = nil
      end
    end
    onpath[v] = nil
  elseif tv ~= "boolean" and v ~= nil and v ~= null then
    return "a " .. tv .. " cannot be encoded"
  end
  return nil
end
require("specula.internal.nojit")(find_bad)  -- a pairs() walk: see specula/internal/nojit.lua

function M.find_bad(value, root)
  local segs = { root or "" }
  local why = find_bad(value, segs, 0, {})
  if not why then return nil end
  return path_text(segs), why
end

return M
