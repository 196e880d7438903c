-- specula.learned.tokens: the learned predictor's reading of text: tokens,
-- their shapes, lower-case words (the tool model's) and word stems (the
-- overlap of a tool's name and description with what was said).
local tostring = tostring
local concat, sub, lower, max = table.concat, string.sub, string.lower, math.max

local M = {}

-- Token shapes: letters and digits by class, runs collapsed ("ab_cd_1234"
-- -> "a_a_9", "X7Y2Z" -> "A9A9A"); and a coarse one: the classes present and
-- the length ("X7Y2Z" -> "A9:5"), so ids that mix classes share a shape.
local function fine_shape(s)
  local sh = s:gsub("%u+", "A"):gsub("%l+", "a"):gsub("%d+", "9")
  if #sh > 24 then sh = sub(sh, 1, 24) .. "+" end
  return sh
end

local function coarse_shape(s)
  local cls = {}
  if s:find("%u") then cls[#cls + 1] = "A" end
  if s:find("%l") then cls[#cls + 1] = "a" end
  if s:find("%d") then cls[#cls + 1] = "9" end
  if s:find("[^%w]") then cls[#cls + 1] = "p" end
  local n = #s
  return concat(cls) .. ":" .. (n <= 16 and tostring(n) or "L")
end

-- Tokens of a text: whitespace-separated, with the punctuation around them
-- cut off (an id keeps its inner '_', '-', '.', '@', '/', ':').
local MAX_TOKENS = 1500
local function tokens(text)
  local out = {}
  for w in text:gmatch("%S+") do
    w = w:gsub("^[\"'%(%[{<*`]+", ""):gsub("[\"'%)%]}>*`.,;:!?]+$", "")
    if w ~= "" then
      out[#out + 1] = w
      if #out >= MAX_TOKENS then break end
    end
  end
  return out
end

local MAX_SPAN = 4

-- Lower-case words of a text for the tool model (digits as '#').
local function words(text, limit)
  local out, seen = {}, {}
  for w in lower(text):gmatch("[%a%d]+") do
    if w:find("%d") then w = "#" .. fine_shape(w) end
    if not seen[w] then
      seen[w] = true
      out[#out + 1] = w
      if #out >= limit then break end
    end
  end
  return out
end
-- Word stems (the first five letters of each word of four or more), for the
-- overlap of a tool's name and description with what was last said.
local function stems(text, into, limit)
  into = into or {}
  local n = 0
  text = text:gsub("(%l)(%u)", "%1 %2")
  for w in lower(text):gmatch("%a+") do
    if #w >= 4 then
      into[sub(w, 1, 5)] = true
      n = n + 1
      if limit and n >= limit then break end
    end
  end
  return into
end

local function tail_words(text, n)
  local ws = {}
  for w in text:gmatch("%S+") do ws[#ws + 1] = w end
  return concat(ws, " ", max(1, #ws - n + 1))
end

M.fine_shape, M.coarse_shape, M.tokens, M.words = fine_shape, coarse_shape, tokens, words
M.MAX_SPAN, M.stems, M.tail_words = MAX_SPAN, stems, tail_words

return M
