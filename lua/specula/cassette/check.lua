-- specula.cassette.check: the check of one tape line's fields and types.
-- A tape is read back by code that trusts its types (a status compared
-- with numbers, a latency added to a clock): a line whose fields have the
-- wrong JSON types (an edited tape, another tool's file) is refused when
-- the tape is loaded, naming FILE:LINE and the field, never as an error
-- deep in the replay.
local json = require "specula.json"

local type, tostring, pairs, ipairs, format, concat = type, tostring, pairs, ipairs, string.format, table.concat
local tonumber = tonumber

local M = {}

local JNULL = json.null
local function jtype(v)
  if v == nil then return "nil" end
  if v == JNULL then return "null" end
  local t = type(v)
  if t == "table" then
    if getmetatable(v) == json.array_mt or v[1] ~= nil then return "array" end
    return "object"
  end
  return t
end

-- allowed JSON types -> what the message says is expected
local NUM, STR, BOOL, OBJ, ARR = { number = true }, { string = true }, { boolean = true }, { object = true },
  { array = true }
local function opt(t)
  local c = { ["nil"] = true }
  for k in pairs(t) do c[k] = true end
  return c
end
local O_NUM, O_STR, O_BOOL, O_OBJ, O_ARR = opt(NUM), opt(STR), opt(BOOL), opt(OBJ), opt(ARR)
local O_ID = opt({ string = true, number = true })
local WANT = { number = "a number", string = "a string", boolean = "true or false", object = "an object",
               array = "an array" }

local function shown(v)
  local ok, s = pcall(json.encode, v)
  s = ok and s or tostring(v)
  if #s > 40 then s = s:sub(1, 40) .. "..." end
  return s
end

-- nil, or why field `path` (value v) does not have one of the types allowed
local function bad(v, path, allowed)
  local t = jtype(v)
  if allowed[t] then return nil end
  local want = {}
  for _, k in ipairs({ "number", "string", "boolean", "object", "array" }) do
    if allowed[k] then want[#want + 1] = WANT[k] end
  end
  if t == "nil" then return format("field %s is missing (expected %s)", path, concat(want, " or ")) end
  return format("field %s is %s %s, expected %s", path, (t == "array" or t == "object") and "an" or "a", t
    .. " (" .. shown(v) .. ")", concat(want, " or "))
end

-- Bytes as a tape carries them: a string, or { hex = "..." }.
local function bad_bytes(v, path)
  if v == nil or type(v) == "string" then return nil end
  if jtype(v) == "object" and type(v.hex) == "string" and #v.hex % 2 == 0 and not v.hex:find("%X") then
    return nil
  end
  return format("field %s is %s, expected a string or {\"hex\": \"...\"}", path, shown(v))
end

local COMMON = { { "n", NUM }, { "at", O_NUM }, { "off", O_NUM }, { "ms", O_NUM }, { "first", O_NUM }, { "code", O_NUM },
                 { "end_ms", O_NUM }, { "start", O_BOOL }, { "err", O_STR }, { "stream", O_BOOL },
                 { "failed", O_BOOL }, { "closed", O_BOOL }, { "meta", O_OBJ }, { "req", O_OBJ } }
local META = { { "query", O_ID }, { "hop", O_NUM }, { "thread", O_NUM }, { "job", O_STR }, { "task", O_NUM },
               { "speculative", O_BOOL }, { "predicted", O_BOOL }, { "phase", O_STR } }

-- The times a line carries (ms): beyond 1e12 ms (31 years) a time is no
-- recording's (an edited or damaged tape); the clock would cut it to 1e12
-- ms without a word, so the line is refused instead.
local MAX_MS = 1e12
local TIMES = { "at", "off", "ms", "first", "code", "end_ms" }
local function bad_time(t, path)
  if type(t) ~= "number" then return nil end
  if t ~= t or t > MAX_MS or t < -MAX_MS then
    local text = format("%.15g", t)
    if tonumber(text) ~= t then text = format("%.17g", t) end
    return format("field %s is %s ms, not a time a recording holds (at most 1e12 ms): the tape was edited or "
      .. "damaged", path, t ~= t and "NaN" or text)
  end
  return nil
end

-- nil, or why an exchange line cannot be used.
local function check_line(v)
  local e
  for _, f in ipairs(COMMON) do
    e = bad(v[f[1]], f[1], f[2])
    if e then return e end
  end
  for _, k in ipairs(TIMES) do
    e = bad_time(v[k], k)
    if e then return e end
  end
  if v.n < 1 or v.n ~= math.floor(v.n) then return "field n is " .. shown(v.n) .. ", expected a count from 1" end
  if v.meta then
    for _, f in ipairs(META) do
      e = bad(v.meta[f[1]], "meta." .. f[1], f[2])
      if e then return e end
    end
  end
  local kind = v.kind
  if kind == "job" then return bad(v.ms, "ms", NUM) end
  if kind == "commit" then
    e = bad(v.paths, "paths", O_ARR) or bad(v.calls, "calls", O_ARR) or bad(v.index, "index", O_NUM)
      or bad(v.text, "text", O_STR)
    if e then return e end
    for i, p in ipairs(v.paths or {}) do
      e = bad(p, format("paths[%d]", i - 1), STR)
      if e then return e end
    end
    for i, c in ipairs(v.calls or {}) do
      local p = format("calls[%d]", i - 1)
      e = bad(c, p, OBJ) or bad(c.tool, p .. ".tool", STR)
      if e then return e end
    end
    return nil
  end
  if v.start or (kind ~= "http" and kind ~= "mcp" and kind ~= "spec" and kind ~= "obs") then return nil end
  local res = v.res
  if kind == "http" then
    if res == nil and v.err == nil then return "an answered http exchange needs res or err" end
    if res ~= nil then
      e = bad(res, "res", OBJ) or bad(res.status, "res.status", NUM) or bad(res.headers, "res.headers", O_OBJ)
        or bad_bytes(res.body, "res.body") or bad(res.ms, "res.ms", O_NUM) or bad_time(res.ms, "res.ms")
      if e then return e end
      for k, h in pairs(res.headers or {}) do
        if type(h) ~= "string" then return bad(h, "res.headers." .. tostring(k), STR) end
      end
    end
    e = bad(v.events, "events", O_ARR)
    if e then return e end
    for i, ev in ipairs(v.events or {}) do
      local p = format("events[%d]", i - 1)
      e = bad(ev, p, ARR) or bad(ev[1], p .. "[0]", NUM) or bad_time(ev[1], p .. "[0]") or bad_bytes(ev[2], p .. "[1]")
      if e then return e end
    end
  elseif kind == "mcp" then
    if res == nil and v.err == nil then return "an answered mcp exchange needs res or err" end
    return bad(res, "res", O_OBJ)
  elseif kind == "spec" then
    if res == nil and v.err == nil then return "an answered speculator call needs res or err" end
    e = bad(res, "res", O_OBJ)
    if e or res == nil then return e end
    e = bad(res.cands, "res.cands", O_ARR)
    if e then return e end
    for i, c in ipairs(res.cands or {}) do
      local p = format("res.cands[%d]", i - 1)
      e = bad(c, p, OBJ) or bad(c.confidence, p .. ".confidence", O_NUM)
      if e then return e end
    end
  elseif kind == "obs" then
    return bad(res, "res", OBJ)
  end
  return nil
end
M.check_line = check_line

return M
