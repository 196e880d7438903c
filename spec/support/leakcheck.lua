-- spec/support/leakcheck.lua: does a secret show in a piece of output, in
-- any form a reader could decode it from? Written apart from
-- specula.secrets on purpose (its own decoders, no shared code), so a
-- blind spot of the scrubber is not a blind spot of the check.
--
--   L.views(text) -> list of decoded views of text: the text itself and
--       every composition of up to three of: JSON string unescaping (\",
--       \\, \/, \b..., \uXXXX with surrogate pairs), percent decoding
--       (with and without "+" as space), HTML references; and of the text
--       and its one-step decodings, the bytes of every Base64 run
--       (standard and URL-safe, at each of the four character offsets) and
--       of every hex run (both nibble alignments).
--   L.find(views, secret) -> the index of a view holding secret (as UTF-8,
--       UTF-16LE or UTF-16BE text), or nil
--   L.tape_views(text) -> views of a cassette file: each line's views plus,
--       for a streamed exchange, the views of its chunks joined
local cjson = require "cjson"

local L = {}

local byte, char, sub, format = string.byte, string.char, string.sub, string.format
local concat = table.concat

local function utf8(cp)
  if cp < 0x80 then return char(cp) end
  if cp < 0x800 then return char(0xC0 + math.floor(cp / 64), 0x80 + cp % 64) end
  if cp < 0x10000 then
    return char(0xE0 + math.floor(cp / 4096), 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
  end
  return char(0xF0 + math.floor(cp / 262144), 0x80 + math.floor(cp / 4096) % 64,
              0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
end

local function hexval(s) return tonumber(s, 16) end

-- JSON string unescaping over the whole text (what is not an escape stays).
local SHORT = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }
function L.unjson(s)
  if not s:find("\\", 1, true) then return s end
  local out, i, n = {}, 1, #s
  while i <= n do
    local c = sub(s, i, i)
    if c == "\\" and i < n then
      local d = sub(s, i + 1, i + 1)
      if SHORT[d] then
        out[#out + 1] = SHORT[d]
        i = i + 2
      elseif (d == "u" or d == "U") and sub(s, i + 2, i + 5):match("^%x%x%x%x$") then
        local v = hexval(sub(s, i + 2, i + 5))
        local lo = sub(s, i + 6, i + 11):match("^\\[uU](%x%x%x%x)$")
        if v >= 0xD800 and v <= 0xDBFF and lo and hexval(lo) >= 0xDC00 and hexval(lo) <= 0xDFFF then
          out[#out + 1] = utf8(0x10000 + (v - 0xD800) * 1024 + (hexval(lo) - 0xDC00))
          i = i + 12
        else
          out[#out + 1] = utf8(v)
          i = i + 6
        end
      else
        out[#out + 1] = c
        i = i + 1
      end
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
  return concat(out)
end

function L.unpct(s, plus)
  if plus then s = s:gsub("%+", " ") end
  return (s:gsub("%%(%x%x)", function(h) return char(hexval(h)) end))
end

local NAMED = { amp = "&", lt = "<", gt = ">", quot = '"', apos = "'" }
function L.unhtml(s)
  if not s:find("&", 1, true) then return s end
  s = s:gsub("&#[xX](%x+);", function(h) local v = hexval(h) return v <= 0x10FFFF and utf8(v) or nil end)
  s = s:gsub("&#(%d+);", function(d) local v = tonumber(d) return v <= 0x10FFFF and utf8(v) or nil end)
  s = s:gsub("&(%a+);", function(nm) return NAMED[nm:lower()] end)
  return s
end

local B64 = {}
do
  local a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
  for i = 1, 62 do B64[byte(a, i)] = i - 1 end
  B64[byte("+")], B64[byte("/")], B64[byte("-")], B64[byte("_")] = 62, 63, 62, 63
end

-- Bytes of the Base64 text t (no padding), from its first character.
local function unb64(t)
  local out, acc, bits = {}, 0, 0
  for i = 1, #t do
    acc = acc * 64 + B64[byte(t, i)]
    bits = bits + 6
    if bits >= 8 then
      bits = bits - 8
      local v = math.floor(acc / 2 ^ bits)
      out[#out + 1] = char(v)
      acc = acc - v * 2 ^ bits
    end
  end
  return concat(out)
end

-- The bytes of every Base64 run of s at each character offset, joined by NUL.
function L.b64_runs(s)
  local out = {}
  for run in s:gmatch("[%w%+/_%-]+") do
    if #run >= 8 then
      for off = 0, 3 do out[#out + 1] = unb64(sub(run, off + 1)) end
    end
  end
  return concat(out, "\0")
end

function L.hex_runs(s)
  local out = {}
  for run in s:gmatch("%x+") do
    if #run >= 8 then
      for off = 0, 1 do
        local r = sub(run, off + 1)
        r = sub(r, 1, #r - #r % 2)
        out[#out + 1] = (r:gsub("(%x%x)", function(h) return char(hexval(h)) end))
      end
    end
  end
  return concat(out, "\0")
end

local DECODERS = {
  L.unjson,
  function(s) return L.unpct(s, false) end,
  function(s) return L.unpct(s, true) end,
  L.unhtml,
}

function L.views(text)
  local seen, list = { [text] = true }, { text }
  local level = { text }
  for _ = 1, 3 do
    local nextl = {}
    for _, v in ipairs(level) do
      for _, d in ipairs(DECODERS) do
        local w = d(v)
        if not seen[w] then
          seen[w] = true
          list[#list + 1] = w
          nextl[#nextl + 1] = w
        end
      end
    end
    level = nextl
  end
  -- Base64 and hex hold no escapes: the text and its one-step decodings
  local n = math.min(#list, 1 + #DECODERS)
  for i = 1, n do
    list[#list + 1] = L.b64_runs(list[i])
    list[#list + 1] = L.hex_runs(list[i])
  end
  return list
end

-- The UTF-16 bytes of UTF-8 text (big: big-endian), by code points read
-- with a pattern here (not the scrubber's decoder); nil if not UTF-8.
function L.utf16(s, big)
  local out = {}
  local function unit(u)
    local hi, lo = math.floor(u / 256), u % 256
    out[#out + 1] = big and char(hi, lo) or char(lo, hi)
  end
  local i, n = 1, #s
  while i <= n do
    local ch = s:match("^[\1-\127]", i) or s:match("^[\194-\223][\128-\191]", i)
      or s:match("^[\224-\239][\128-\191][\128-\191]", i)
      or s:match("^[\240-\244][\128-\191][\128-\191][\128-\191]", i)
      or (byte(s, i) == 0 and "\0")
    if not ch then return nil end
    local b1, len = byte(ch), #ch
    local cp = len == 1 and b1 or (b1 % (2 ^ (7 - len)))
    for q = 2, len do cp = cp * 64 + (byte(ch, q) - 0x80) end
    if cp >= 0x10000 then
      unit(0xD800 + math.floor((cp - 0x10000) / 1024))
      unit(0xDC00 + (cp - 0x10000) % 1024)
    else
      unit(cp)
    end
    i = i + len
  end
  return concat(out)
end

-- The secret's forms searched in each view: its UTF-8 text and its UTF-16
-- text, little- and big-endian.
function L.find(views, secret)
  local forms = { secret, L.utf16(secret, false), L.utf16(secret, true) }
  for i, v in ipairs(views) do
    for _, f in ipairs(forms) do
      if v:find(f, 1, true) then return i end
    end
  end
  return nil
end

-- A cassette file: every line, and every streamed exchange's chunks joined
-- (a secret cut across two chunks joins again).
function L.tape_views(text)
  local all = L.views(text)
  for line in text:gmatch("[^\n]+") do
    local ok, v = pcall(cjson.decode, line)
    if ok and type(v) == "table" and type(v.events) == "table" then
      local parts = {}
      for _, e in ipairs(v.events) do
        local x = e[2]
        if type(x) == "table" and type(x.hex) == "string" then
          x = x.hex:gsub("(%x%x)", function(h) return char(hexval(h)) end)
        end
        if type(x) == "string" then parts[#parts + 1] = x end
      end
      for _, w in ipairs(L.views(concat(parts))) do all[#all + 1] = w end
    end
    if ok and type(v) == "table" and type(v.res) == "table" and type(v.res.body) == "table"
       and type(v.res.body.hex) == "string" then
      local raw = v.res.body.hex:gsub("(%x%x)", function(h) return char(hexval(h)) end)
      for _, w in ipairs(L.views(raw)) do all[#all + 1] = w end
    end
  end
  return all
end

return L
