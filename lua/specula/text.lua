-- specula.text: shared text helpers for verifiers, terminators and metrics.
--
--   text.normalize(s)        SpecHop D.4 normalisation (see below)
--   text.fold(s)             diacritics -> ASCII base letters (UTF-8 aware)
--   text.lower(s)            lowercase, including Latin-1/Extended-A, Greek, Cyrillic
--   text.split(s)            whitespace split, no normalisation
--   text.tokens(s)           split(normalize(s))
--   text.content_tokens(s)   tokens(s) without stop-words
--   text.set(list)           list -> { [item] = true }, count
--   text.stopwords           set of English stop-words (normalised spelling)
--   text.is_stopword(w)
--   text.squad_normalize(s)  SQuAD answer normalisation (for EM/F1)
--   text.trim(s)
--   text.of(observation)     the text a verifier compares (see below)
--
-- Normalisation (text.normalize), our reading of SpecHop appendix D.4
-- ("lowercasing, diacritic and punctuation removal"):
--   1. accented letters become their ASCII base letter (é -> e, ß -> ss,
--      Ł -> l, Vietnamese ệ -> e, ...); combining marks (U+0300-U+036F) are
--      dropped, so NFC and NFD input give the same result; bytes that are not
--      valid UTF-8 are read as Latin-1;
--   2. lowercase;
--   3. a comma between two digits is deleted ("1,000" -> "1000") and a dot
--      between two digits is kept ("3.5" stays one token), so quantities
--      survive step 4;
--   4. every other punctuation or symbol character (ASCII and the common
--      Unicode ones: dashes, curly quotes, ellipsis, NBSP, ...) becomes a
--      space -- apostrophes included, so "don't" -> "don t";
--   5. control characters (tabs, newlines, ...) count as spaces; runs of
--      spaces collapse to one; leading/trailing space goes.
-- Characters we know nothing about (CJK, Arabic, ...) are kept as they are.

local byte, char, sub, find, gsub, lower_ascii =
  string.byte, string.char, string.sub, string.find, string.gsub, string.lower
local concat, type, tostring, floor = table.concat, type, tostring, math.floor

local M = {}

----------------------------------------------------------------------------
-- UTF-8 helpers
----------------------------------------------------------------------------

local function encode(cp)
  if cp < 0x80 then
    return char(cp)
  elseif cp < 0x800 then
    return char(0xC0 + floor(cp / 0x40), 0x80 + cp % 0x40)
  elseif cp < 0x10000 then
    return char(0xE0 + floor(cp / 0x1000), 0x80 + floor(cp / 0x40) % 0x40,
                0x80 + cp % 0x40)
  end
  return char(0xF0 + floor(cp / 0x40000), 0x80 + floor(cp / 0x1000) % 0x40,
              0x80 + floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
end

-- Decode the sequence starting at byte i (first byte c >= 0x80).
-- Returns code point and length, or nil when the sequence is not valid UTF-8.
local function decode(s, i, c)
  local n, cp, min
  if c >= 0xC2 and c <= 0xDF then
    n, cp, min = 1, c - 0xC0, 0x80
  elseif c >= 0xE0 and c <= 0xEF then
    n, cp, min = 2, c - 0xE0, 0x800
  elseif c >= 0xF0 and c <= 0xF4 then
    n, cp, min = 3, c - 0xF0, 0x10000
  else
    return nil
  end
  for k = 1, n do
    local d = byte(s, i + k)
    if not d or d < 0x80 or d > 0xBF then return nil end
    cp = cp * 0x40 + (d - 0x80)
  end
  if cp < min or cp > 0x10FFFF or (cp >= 0xD800 and cp <= 0xDFFF) then
    return nil
  end
  return cp, n + 1
end

-- Walk s, replacing each non-ASCII code point through map (cp -> string).
-- Unmapped valid sequences are copied; invalid bytes are treated as Latin-1
-- code points (and dropped to a space when the map has nothing for them).
local function transcode(s, map)
  if not find(s, "[\128-\255]") then return s end
  local out, n, i, len = {}, 0, 1, #s
  while i <= len do
    local c = byte(s, i)
    if c < 0x80 then
      local j = find(s, "[\128-\255]", i) or len + 1
      n = n + 1; out[n] = sub(s, i, j - 1)
      i = j
    else
      local cp, size = decode(s, i, c)
      local rep
      if cp then
        rep = map[cp]
        if rep == nil then rep = sub(s, i, i + size - 1) end
      else
        size = 1
        rep = map[c]
        if rep == nil then rep = (c >= 0xA0) and encode(c) or " " end
      end
      n = n + 1; out[n] = rep
      i = i + size
    end
  end
  return concat(out, "", 1, n)
end

----------------------------------------------------------------------------
-- Tables
----------------------------------------------------------------------------

local FOLD = {}   -- cp -> ASCII replacement (letters lowercased) or " "/""
local LOWER = {}  -- cp -> UTF-8 of its lowercase form (non-ASCII only)

local function fold_range(first, last, rep)
  for cp = first, last do FOLD[cp] = rep end
end

-- Latin-1 supplement: symbols and punctuation become a space.
fold_range(0xA0, 0xBF, " ")
FOLD[0xAD] = ""                          -- soft hyphen
FOLD[0xAA], FOLD[0xBA] = "a", "o"        -- ordinal indicators
FOLD[0xB9], FOLD[0xB2], FOLD[0xB3] = "1", "2", "3"
FOLD[0xB4] = " "                         -- acute accent used as apostrophe
FOLD[0xB5] = nil                         -- micro sign: keep as is

-- Letters of Latin-1 (U+00C0-U+00FF), one entry per code point.
local LATIN1 = {
  "a","a","a","a","a","a","ae","c","e","e","e","e","i","i","i","i",      -- C0
  "d","n","o","o","o","o","o"," ","o","u","u","u","u","y","th","ss",     -- D0
  "a","a","a","a","a","a","ae","c","e","e","e","e","i","i","i","i",      -- E0
  "d","n","o","o","o","o","o"," ","o","u","u","u","u","y","th","y",      -- F0
}
for k = 1, #LATIN1 do FOLD[0xBF + k] = LATIN1[k] end

-- Latin Extended-A (U+0100-U+017F), one entry per code point.
local EXT_A = {
  "a","a","a","a","a","a","c","c","c","c","c","c","c","c","d","d",      -- 100
  "d","d","e","e","e","e","e","e","e","e","e","e","g","g","g","g",      -- 110
  "g","g","g","g","h","h","h","h","i","i","i","i","i","i","i","i",      -- 120
  "i","i","ij","ij","j","j","k","k","k","l","l","l","l","l","l","l",    -- 130
  "l","l","l","n","n","n","n","n","n","n","n","n","o","o","o","o",      -- 140
  "o","o","oe","oe","r","r","r","r","r","r","s","s","s","s","s","s",    -- 150
  "s","s","t","t","t","t","t","t","u","u","u","u","u","u","u","u",      -- 160
  "u","u","u","u","w","w","y","y","y","z","z","z","z","z","z","s",      -- 170
}
for k = 1, #EXT_A do FOLD[0xFF + k] = EXT_A[k] end

-- Common precomposed letters of Latin Extended-B.
local EXT_B = {
  {0x180, 0x180, "b"}, {0x18F, 0x18F, "e"}, {0x192, 0x192, "f"},
  {0x1A0, 0x1A1, "o"}, {0x1AF, 0x1B0, "u"}, {0x1CD, 0x1CE, "a"},
  {0x1CF, 0x1D0, "i"}, {0x1D1, 0x1D2, "o"}, {0x1D3, 0x1DC, "u"},
  {0x1DE, 0x1E1, "a"}, {0x1E6, 0x1E7, "g"}, {0x1E8, 0x1E9, "k"},
  {0x1EA, 0x1ED, "o"}, {0x1F0, 0x1F0, "j"}, {0x1F4, 0x1F5, "g"},
  {0x1F8, 0x1F9, "n"}, {0x1FA, 0x1FB, "a"}, {0x1FC, 0x1FD, "ae"},
  {0x1FE, 0x1FF, "o"}, {0x200, 0x203, "a"}, {0x204, 0x207, "e"},
  {0x208, 0x20B, "i"}, {0x20C, 0x20F, "o"}, {0x210, 0x213, "r"},
  {0x214, 0x217, "u"}, {0x218, 0x219, "s"}, {0x21A, 0x21B, "t"},
  {0x21E, 0x21F, "h"}, {0x226, 0x227, "a"}, {0x228, 0x229, "e"},
  {0x22A, 0x231, "o"}, {0x232, 0x233, "y"}, {0x259, 0x259, "e"},
}
for _, r in ipairs(EXT_B) do fold_range(r[1], r[2], r[3]) end

-- Latin Extended Additional (U+1E00-U+1EF9): transliterations, Vietnamese.
local EXT_ADD = {
  {0x1E00, 0x1E01, "a"}, {0x1E02, 0x1E07, "b"}, {0x1E08, 0x1E09, "c"},
  {0x1E0A, 0x1E13, "d"}, {0x1E14, 0x1E1D, "e"}, {0x1E1E, 0x1E1F, "f"},
  {0x1E20, 0x1E21, "g"}, {0x1E22, 0x1E2B, "h"}, {0x1E2C, 0x1E2F, "i"},
  {0x1E30, 0x1E35, "k"}, {0x1E36, 0x1E3D, "l"}, {0x1E3E, 0x1E43, "m"},
  {0x1E44, 0x1E4B, "n"}, {0x1E4C, 0x1E53, "o"}, {0x1E54, 0x1E57, "p"},
  {0x1E58, 0x1E5F, "r"}, {0x1E60, 0x1E69, "s"}, {0x1E6A, 0x1E71, "t"},
  {0x1E72, 0x1E7B, "u"}, {0x1E7C, 0x1E7F, "v"}, {0x1E80, 0x1E89, "w"},
  {0x1E8A, 0x1E8D, "x"}, {0x1E8E, 0x1E8F, "y"}, {0x1E90, 0x1E95, "z"},
  {0x1E96, 0x1E96, "h"}, {0x1E97, 0x1E97, "t"}, {0x1E98, 0x1E98, "w"},
  {0x1E99, 0x1E99, "y"}, {0x1E9A, 0x1E9A, "a"}, {0x1E9B, 0x1E9B, "s"},
  {0x1E9E, 0x1E9E, "ss"},
  {0x1EA0, 0x1EB7, "a"}, {0x1EB8, 0x1EC7, "e"}, {0x1EC8, 0x1ECB, "i"},
  {0x1ECC, 0x1EE3, "o"}, {0x1EE4, 0x1EF1, "u"}, {0x1EF2, 0x1EF9, "y"},
}
for _, r in ipairs(EXT_ADD) do fold_range(r[1], r[2], r[3]) end

-- Combining diacritical marks vanish; punctuation and spaces become a space.
fold_range(0x0300, 0x036F, "")
fold_range(0x2000, 0x206F, " ")          -- general punctuation, spaces
fold_range(0x200B, 0x200D, "")           -- zero-width space / joiners
FOLD[0x2060], FOLD[0xFEFF] = "", ""      -- word joiner, BOM
FOLD[0x3000] = " "                       -- ideographic space
FOLD[0x2212] = " "                       -- minus sign
fold_range(0x3001, 0x3003, " ")          -- CJK comma and full stops
fold_range(0xFF01, 0xFF0F, " ")          -- fullwidth ASCII punctuation

-- Lowercase mapping for non-ASCII letters (used by text.lower and, for
-- letters with no ASCII base, by text.fold).
local LOWER_CP = {}
local function lower_range(first, last, delta, step)
  for cp = first, last, step or 1 do LOWER_CP[cp] = cp + delta end
end
lower_range(0xC0, 0xD6, 0x20); lower_range(0xD8, 0xDE, 0x20)
lower_range(0x100, 0x12F, 1, 2)
lower_range(0x132, 0x137, 1, 2); lower_range(0x139, 0x148, 1, 2)
lower_range(0x14A, 0x177, 1, 2); LOWER_CP[0x178] = 0xFF
lower_range(0x179, 0x17E, 1, 2)
lower_range(0x1E00, 0x1E95, 1, 2); LOWER_CP[0x1E9E] = 0xDF
lower_range(0x1EA0, 0x1EFF, 1, 2)
LOWER_CP[0x386] = 0x3AC; lower_range(0x388, 0x38A, 37)
LOWER_CP[0x38C] = 0x3CC; lower_range(0x38E, 0x38F, 63)
lower_range(0x391, 0x3A1, 0x20); lower_range(0x3A3, 0x3AB, 0x20)
lower_range(0x400, 0x40F, 0x50); lower_range(0x410, 0x42F, 0x20)
for cp, lc in pairs(LOWER_CP) do LOWER[cp] = encode(lc) end
LOWER[0x130] = "i\204\135"              -- dotted capital I, as Python does

-- Folding of letters with no ASCII base: lowercase them and drop the accents
-- of Greek letters (tonos, dialytika); final sigma -> sigma; Cyrillic yo -> ye.
local FOLD_BASE = {
  [0x3AC] = 0x3B1, [0x3AD] = 0x3B5, [0x3AE] = 0x3B7, [0x3AF] = 0x3B9,
  [0x3CC] = 0x3BF, [0x3CD] = 0x3C5, [0x3CE] = 0x3C9, [0x3CA] = 0x3B9,
  [0x3CB] = 0x3C5, [0x390] = 0x3B9, [0x3B0] = 0x3C5, [0x3C2] = 0x3C3,
  [0x451] = 0x435,
}
for cp, lc in pairs(LOWER_CP) do
  if FOLD[cp] == nil then FOLD[cp] = encode(FOLD_BASE[lc] or lc) end
end
for cp, base in pairs(FOLD_BASE) do
  if FOLD[cp] == nil then FOLD[cp] = encode(base) end
end

----------------------------------------------------------------------------
-- Public functions
----------------------------------------------------------------------------

local function check_string(fname, s)
  if type(s) ~= "string" then
    error("specula.text." .. fname .. ": expected a string, got " .. type(s), 3)
  end
end

--- Remove diacritics: accented Latin letters become their ASCII base letter,
-- other letters with case are lowercased; ASCII is left untouched.
function M.fold(s)
  check_string("fold", s)
  return transcode(s, FOLD)
end

--- Lowercase ASCII and the non-ASCII letters listed above (Latin-1,
-- Latin Extended-A/Additional, Greek, Cyrillic); accents are kept.
function M.lower(s)
  check_string("lower", s)
  return lower_ascii(transcode(s, LOWER))
end

function M.trim(s)
  check_string("trim", s)
  return (gsub(s, "^%s+", ""):gsub("%s+$", ""))
end

local function normalize(s)
  s = lower_ascii(transcode(s, FOLD))
  -- control characters (tabs and newlines included) become spaces, which
  -- also frees \1 to mark decimal points below
  if find(s, "%c") then s = gsub(s, "%c", " ") end
  if find(s, "%p") then
    if find(s, "%d[,.]%d") then
      s = gsub(s, "(%d),%f[%d]", "%1")        -- 1,000 -> 1000
      s = gsub(s, "(%d)%.%f[%d]", "%1\1")     -- protect decimal points
      s = gsub(s, "%p+", " ")
      s = gsub(s, "\1", ".")
    else
      s = gsub(s, "%p+", " ")
    end
  end
  if find(s, "  ", 1, true) then s = gsub(s, "  +", " ") end
  if byte(s, 1) == 32 then s = sub(s, 2) end
  if byte(s, -1) == 32 then s = sub(s, 1, -2) end
  return s
end

--- SpecHop D.4 normalisation (see the header of this file).
function M.normalize(s)
  check_string("normalize", s)
  return normalize(s)
end

local function split(s)
  local out, n = {}, 0
  for w in s:gmatch("%S+") do n = n + 1; out[n] = w end
  return out, n
end

--- Split on whitespace, without normalising.
function M.split(s)
  check_string("split", s)
  return (split(s))
end

--- Tokens of the normalised text.
function M.tokens(s)
  check_string("tokens", s)
  return (split(normalize(s)))
end

--- English stop-words, in normalised spelling. Negations ("no", "not",
-- "nor", "never", "none", "neither", "nothing") and "yes" are deliberately
-- *not* stop-words: a verifier must see the difference between
-- "they are both American" and "they are not both American". The one-letter
-- fragments left by contractions once apostrophes are gone ("s", "t", "d",
-- "ll", "m", "re", "ve") are stop-words.
local STOPWORDS_LIST = [[
a about above after again against all also am an and any are as at
be because been before being below between both but by
can could did do does doing down during each either else ever every
few for from further had has have having he her here hers herself him
himself his how i if in into is it its itself just let me more most my
myself of off on once only or other others our ours ourselves out over own
per same shall she should since so some such than that the their theirs
them themselves then there these they this those though through thus to
too under until up upon us very via was we were what whatever when where
whether which while who whom whose why will with within without would
you your yours yourself yourselves
s t d ll m re ve
]]
local STOPWORDS = {}
for w in STOPWORDS_LIST:gmatch("%S+") do STOPWORDS[w] = true end
M.stopwords = STOPWORDS

function M.is_stopword(w)
  return STOPWORDS[w] == true
end

--- Normalised tokens without stop-words (stopwords: optional set to use).
function M.content_tokens(s, stopwords)
  check_string("content_tokens", s)
  stopwords = stopwords or STOPWORDS
  local out, n = {}, 0
  for w in normalize(s):gmatch("%S+") do
    if not stopwords[w] then n = n + 1; out[n] = w end
  end
  return out
end

--- List -> set table and the number of distinct items.
function M.set(list)
  local set, n = {}, 0
  for i = 1, #list do
    local w = list[i]
    if not set[w] then set[w] = true; n = n + 1 end
  end
  return set, n
end

--- SQuAD answer normalisation, as in the official evaluation script:
-- lowercase, delete ASCII punctuation (string.punctuation), remove the
-- articles a/an/the as whole words, collapse whitespace. Non-ASCII letters
-- are lowercased where text.lower knows them; bytes >= 0x80 count as word
-- characters for the article boundaries, like Python's Unicode \b.
function M.squad_normalize(s)
  check_string("squad_normalize", s)
  s = lower_ascii(transcode(s, LOWER))
  s = gsub(s, "%p", "")
  s = gsub(s, "%f[%w\128-\255]an?%f[^%w\128-\255]", " ")
  s = gsub(s, "%f[%w\128-\255]the%f[^%w\128-\255]", " ")
  s = gsub(s, "%s+", " ")
  if byte(s, 1) == 32 then s = sub(s, 2) end
  if byte(s, -1) == 32 then s = sub(s, 1, -2) end
  return s
end

----------------------------------------------------------------------------
-- Observation text
----------------------------------------------------------------------------

local json
local function canonical(v)
  if not json then json = require("specula.json") end
  local ok, out = pcall(json.canonical, v)
  if ok and type(out) == "string" then return out end
  return tostring(v)
end

--- The text a verifier compares for an observation: a string as is; a
-- number or boolean through tostring; nil as ""; for a table its `answer`
-- (string or number), else its `text` (string), else its `content` (string),
-- else its canonical JSON.
function M.of(v)
  local t = type(v)
  if t == "string" then return v end
  if t == "nil" then return "" end
  if t == "table" then
    local a = v.answer
    if type(a) == "string" then return a end
    if type(a) == "number" then return tostring(a) end
    if type(v.text) == "string" then return v.text end
    if type(v.content) == "string" then return v.content end
    return canonical(v)
  end
  if t == "number" or t == "boolean" then return tostring(v) end
  return canonical(v)
end


return M
