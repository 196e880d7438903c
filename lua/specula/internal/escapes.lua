-- specula.internal.escapes: text read as it would read after one, two or
-- three rounds of unescaping (JSON, percent-encoding, "+" for a space, HTML
-- references), without decoding it: where a given byte string could stand
-- in s however a writer escaped it. specula.secrets searches for declared
-- secrets with it.
--
--   escapes.begin() / escapes.finish()   around one text's searches: what a
--       (position, layer) reads as is remembered in between
--   escapes.read(s, i, L) -> { text, end, text, end, ... }   the characters
--       s holds at i read at layer L (text: the bytes one stands for)
--   escapes.match_at(s, i, k, off [, heads]) -> end | nil   where k[off..]
--       ends when read from s[i..] through DEPTH layers; with heads, also
--       the end of a head of k (4 bytes or more) an excerpt's cut mark follows
--   escapes.starter_positions(s) -> positions | nil   the bytes that start
--       an escape, in order
--   escapes.has_cut_mark(s), escapes.CUT_MARKS, escapes.DEPTH
local bit = require "bit"

local ipairs, pairs, tonumber = ipairs, pairs, tonumber
local byte, char, find, sub = string.byte, string.char, string.find, string.sub
local sort = table.sort
local band, bor, lshift, rshift = bit.band, bit.bor, bit.lshift, bit.rshift

local M = {}

-- how many layers of escaping are looked through (JSON text in a JSON
-- string in a record; a percent-encoded value in a JSON-escaped URL ...)
local DEPTH = 3
M.DEPTH = DEPTH

-- The matcher reads s as if it had been decoded L times: one character at
-- layer L is a character at layer L - 1 taken as it is, or, when that
-- character starts an escape ("\" JSON, "%" percent, "+" a space, "&" an
-- HTML reference), the escape read from layer L - 1 characters and
-- decoded. So "\\u00e4" reads as "\u00e4" at layer 1 and "ä" at layer 2.
-- Only positions holding one of the four starters branch; every other
-- byte reads as itself at every layer.

-- Bytes that start an escape in some encoding.
local STARTER = { [92] = true, [37] = true, [38] = true, [43] = true }

local JSON_SHORT = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }
local HTML_NAMED = { amp = "&", lt = "<", gt = ">", quot = '"', apos = "'" }

local CH = {}
for c = 0, 255 do CH[c] = char(c) end

local function utf8_of(cp)
  if cp < 0x80 then return CH[cp] end
  if cp < 0x800 then return char(bor(0xC0, rshift(cp, 6)), bor(0x80, band(cp, 0x3F))) end
  if cp < 0x10000 then
    return char(bor(0xE0, rshift(cp, 12)), bor(0x80, band(rshift(cp, 6), 0x3F)), bor(0x80, band(cp, 0x3F)))
  end
  return char(bor(0xF0, rshift(cp, 18)), bor(0x80, band(rshift(cp, 12), 0x3F)),
              bor(0x80, band(rshift(cp, 6), 0x3F)), bor(0x80, band(cp, 0x3F)))
end

-- a code point as the bytes a secret holds: its UTF-8, and for U+0080 to
-- U+00FF also the single byte (a Latin-1 writer's view of a non-UTF-8 byte)
local function put_cp(cp, e, out)
  if cp > 0x10FFFF or (cp >= 0xD800 and cp <= 0xDFFF) then return end
  out[#out + 1] = utf8_of(cp); out[#out + 1] = e
  if cp >= 0x80 and cp <= 0xFF then out[#out + 1] = CH[cp]; out[#out + 1] = e end
end

local memo   -- between begin() and finish(): (position, layer) -> alternatives
local read

local HEXV = {}
for c = 48, 57 do HEXV[c] = c - 48 end
for c = 65, 70 do HEXV[c] = c - 55 end
for c = 97, 102 do HEXV[c] = c - 87 end

-- n hex digits read at layer L from j: flat list value, end, ...
local function read_hex(s, j, L, n)
  local cur = { 0, j }
  for _ = 1, n do
    local nxt = {}
    for a = 1, #cur, 2 do
      local alts = read(s, cur[a + 1], L)
      for q = 1, #alts, 2 do
        local x = alts[q]
        local v = #x == 1 and HEXV[byte(x)]
        if v then nxt[#nxt + 1] = cur[a] * 16 + v; nxt[#nxt + 1] = alts[q + 1] end
      end
    end
    if #nxt == 0 then return nxt end
    cur = nxt
  end
  return cur
end

-- ends of the ASCII word w (case-insensitive) read at layer L from j
local function read_word(s, j, L, w)
  local cur = { j }
  for k = 1, #w do
    local c, nxt = byte(w, k), {}
    for a = 1, #cur do
      local alts = read(s, cur[a], L)
      for q = 1, #alts, 2 do
        local x = alts[q]
        if #x == 1 then
          local b = byte(x)
          if b == c or (b >= 65 and b <= 90 and b + 32 == c) then nxt[#nxt + 1] = alts[q + 1] end
        end
      end
    end
    if #nxt == 0 then return nxt end
    cur = nxt
  end
  return cur
end

-- "\" read: the rest of a JSON escape at layer L from j
local function json_escape(s, j, L, out)
  local alts = read(s, j, L)
  for q = 1, #alts, 2 do
    local y, k = alts[q], alts[q + 1]
    if JSON_SHORT[y] then
      out[#out + 1] = JSON_SHORT[y]; out[#out + 1] = k
    elseif y == "u" or y == "U" then
      local hx = read_hex(s, k, L, 4)
      for a = 1, #hx, 2 do
        local v, e = hx[a], hx[a + 1]
        if v >= 0xD800 and v <= 0xDBFF then
          -- a surrogate pair: "\uD83D\uDE00"
          for _, e2 in ipairs(read_word(s, e, L, "\\u")) do
            local lo = read_hex(s, e2, L, 4)
            for b = 1, #lo, 2 do
              if lo[b] >= 0xDC00 and lo[b] <= 0xDFFF then
                put_cp(0x10000 + lshift(v - 0xD800, 10) + (lo[b] - 0xDC00), lo[b + 1], out)
              end
            end
          end
        else
          put_cp(v, e, out)
        end
      end
    end
  end
end

-- "&" read: the rest of an HTML reference at layer L from j
local function html_escape(s, j, L, out)
  local alts = read(s, j, L)
  for q = 1, #alts, 2 do
    local y, k = alts[q], alts[q + 1]
    if y == "#" then
      -- &#DDD; or &#xHHH;
      local hexa = read_word(s, k, L, "x")
      local starts = { { k, 10 } }
      for _, e in ipairs(hexa) do starts[#starts + 1] = { e, 16 } end
      for _, st in ipairs(starts) do
        local cur, base = { 0, st[1] }, st[2]
        for _ = 1, 8 do
          local nxt = {}
          for a = 1, #cur, 2 do
            local da = read(s, cur[a + 1], L)
            for b = 1, #da, 2 do
              local x = da[b]
              local v = #x == 1 and HEXV[byte(x)]
              if x == ";" and cur[a + 1] > st[1] then
                put_cp(cur[a], da[b + 1], out)
              elseif v and (base == 16 or v < 10) then
                nxt[#nxt + 1] = cur[a] * base + v; nxt[#nxt + 1] = da[b + 1]
              end
            end
          end
          if #nxt == 0 then break end
          cur = nxt
        end
      end
    end
  end
  for name, v in pairs(HTML_NAMED) do
    for _, e in ipairs(read_word(s, j, L, name .. ";")) do
      out[#out + 1] = v; out[#out + 1] = e
    end
  end
end

-- The characters s holds at i read at layer L: flat list text, end, ...
-- (text: the bytes the character stands for).
function read(s, i, L)
  local b = byte(s, i)
  if b == nil then return {} end
  if L == 0 or not STARTER[b] then return { CH[b], i + 1 } end
  local key = i * 4 + L
  local m = memo[key]
  if m then return m end
  local out = {}
  memo[key] = out   -- an escape never reads back to where it began
  local lower_alts = read(s, i, L - 1)
  for a = 1, #lower_alts, 2 do
    local x, j = lower_alts[a], lower_alts[a + 1]
    out[#out + 1] = x; out[#out + 1] = j
    if x == "\\" then json_escape(s, j, L - 1, out)
    elseif x == "%" then
      local hx = read_hex(s, j, L - 1, 2)
      for q = 1, #hx, 2 do out[#out + 1] = CH[hx[q]]; out[#out + 1] = hx[q + 1] end
    elseif x == "+" then out[#out + 1] = " "; out[#out + 1] = j
    elseif x == "&" then html_escape(s, j, L - 1, out)
    end
  end
  return out
end

-- The marks an excerpt is cut with: "..." and the ellipsis "…" (UTF-8, as
-- an HTML reference or a JSON escape): the head before one, or the tail
-- after one, of a secret goes whatever the writer cut it with.
local CUT_MARKS = { "...", "\226\128\166", "&hellip;", "&#8230;", "&#x2026;", "\\u2026" }
local CUT_FIRST = { [46] = true, [226] = true, [38] = true, [92] = true }
-- The length of the cut mark at s[p], or nil.
local function cut_mark_at(s, p)
  local b = byte(s, p)
  if not b or not CUT_FIRST[b] then return nil end
  for q = 1, #CUT_MARKS do
    local m = CUT_MARKS[q]
    if sub(s, p, p + #m - 1) == m then return #m end
  end
  return nil
end
local function has_cut_mark(s)
  for q = 1, #CUT_MARKS do
    if find(s, CUT_MARKS[q], 1, true) then return true end
  end
  return false
end

-- Where the bytes k[off..] end if read from s[i..] through DEPTH layers
-- (the last end of a full match), or nil. With heads: the end of a head
-- of at least 4 bytes that is followed by a cut mark (an excerpt cut it).
local function match_at(s, i, k, off, heads)
  local n = #k
  -- bytes that start no escape read as themselves at every layer: walk
  -- them without branching
  local p, o = i, off
  while o <= n do
    local b = byte(s, p)
    if b == nil then return nil end
    if STARTER[b] then break end
    if b ~= byte(k, o) then
      if heads and o - off >= 4 and cut_mark_at(s, p) then return p end
      return nil
    end
    p, o = p + 1, o + 1
  end
  if o > n then return p end
  -- an escape may start here: does any reading of it begin the rest?
  local alts = read(s, p, DEPTH)
  local kb, any = byte(k, o), false
  for q = 1, #alts, 2 do
    if byte(alts[q]) == kb then any = true break end
  end
  if not any then
    if heads and o - off >= 4 and cut_mark_at(s, p) then return p end
    return nil
  end
  local W = n + 2
  local seen = {}
  local stack = { p, o }
  local best, head
  while #stack > 0 do
    o = stack[#stack]; stack[#stack] = nil
    p = stack[#stack]; stack[#stack] = nil
    if o > n then
      if not best or p > best then best = p end
    else
      local b = byte(s, p)
      if b ~= nil then
        if not STARTER[b] then
          if b == byte(k, o) then
            local key = (p + 1) * W + o + 1
            if not seen[key] then seen[key] = true; stack[#stack + 1] = p + 1; stack[#stack + 1] = o + 1 end
          end
        else
          alts = read(s, p, DEPTH)
          for q = 1, #alts, 2 do
            local x = alts[q]
            local lx = #x
            if (lx == 1 and byte(x) == byte(k, o)) or (lx > 1 and sub(k, o, o + lx - 1) == x) then
              local e, o2 = alts[q + 1], o + lx
              local key = e * W + o2
              if not seen[key] then seen[key] = true; stack[#stack + 1] = e; stack[#stack + 1] = o2 end
            end
          end
        end
        if heads and o - off >= 4 and cut_mark_at(s, p) then
          if not head or p > head then head = p end
        end
      end
    end
  end
  return best or head
end

-- Positions of the bytes that start an escape, in order (plain searches:
-- a pattern class costs ten times more per byte), or nil when none.
local STARTER_CH = { "\\", "%", "&", "+" }
local function starter_positions(s)
  local pos
  for k = 1, 4 do
    local c = STARTER_CH[k]
    local i = find(s, c, 1, true)
    while i do
      pos = pos or {}
      pos[#pos + 1] = i
      i = find(s, c, i + 1, true)
    end
  end
  if pos then sort(pos) end
  return pos
end

function M.begin() memo = {} end
function M.finish() memo = nil end
M.read = read
M.match_at = match_at
M.starter_positions = starter_positions
M.has_cut_mark = has_cut_mark
M.CUT_MARKS = CUT_MARKS
M.CH = CH   -- CH[b]: the one-byte string of byte b

return M
