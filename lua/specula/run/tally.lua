-- specula.run.tally: what `--compare` keeps of a configuration's records once
-- they are written: the numbers of the table and the paired differences,
-- the id, answer, gold and error, and the agreement text. A sweep holds
-- every record of every configuration until its table is printed; as Lua
-- tables (a record's stats alone are a dozen) they made the collector
-- re-mark hundreds of megabytes on every cycle. Here the numbers live in
-- one cdata array and the agreement texts in one cdata buffer, which the
-- collector marks in one step each.
--
--   local t = tally.new(n)          -- positions 1..n
--   t:add(i, rec, text)             -- text: the agreement text, or nil
--   t:share(base)                   -- texts equal to base's at the same
--                                   -- position are not copied (below)
--   t:records()                     -- { slim records, in position order }
--   tally.agree_keys(tallies, base) -- record -> key (see below)
local ffi = require "ffi"
local stats = require "specula.stats"

local type, tonumber, tostring, ipairs, error = type, tonumber, tostring, ipairs, error
local new_double, new_int = ffi.typeof("double[?]"), ffi.typeof("int32_t[?]")
local copy = ffi.copy

pcall(ffi.cdef, "int memcmp(const void *a, const void *b, size_t n);")
local memcmp = ffi.C.memcmp

local M = {}

-- The numbers of a record's stats, in column order. The slim record's
-- stats carry the same keys (calls.* and cancelled.total nested).
local FIELDS = { "wall_ms", "standard_ms", "wasted_calls", "wasted_cost" }
local CALLS = { "model", "target", "speculator", "predicted", "warmup" }
local NF = #FIELDS + #CALLS + 1   -- + cancelled.total

local Tally = {}
Tally.__index = Tally

function M.new(n)
  if type(n) ~= "number" or n < 0 or n ~= math.floor(n) then
    error("specula.run.tally.new: expected a count >= 0", 2)
  end
  local cap = n > 0 and n or 1
  local self = setmetatable({
    n = n,
    num = new_double(cap * NF),     -- NaN: absent (not a number in the record)
    has = new_int(cap),             -- 1 stats, 0 none, -1 position empty
    id = {}, config = {}, answer = {}, gold = {}, err = {},
    pfoff = {},   -- positions whose query ran without its predictor (it raised earlier): sparse
    text = nil, text_cap = 0, text_len = 0,
    toff = new_double(cap), tlen = new_int(cap),   -- offsets past 2 GB stay exact; tlen -1: no text
  }, Tally)
  for i = 0, cap - 1 do self.has[i] = -1; self.tlen[i] = -1 end
  return self
end

-- x rounded to d decimals, as specula.run.aggregate rounds a record's figures
local floor = math.floor
local function round(x, d)
  local f = 10 ^ d
  return floor(x * f + 0.5) / f
end

local nan = 0 / 0
local function num(v)
  if type(v) == "number" then return v end
  return nan
end

-- Texts equal to those of tally `base` (the agreement baseline, whose
-- queries have all run) at the same position are kept as a reference to
-- base's copy: in a sweep nearly every configuration's text is the
-- baseline's, and copying each one cost a tenth of the sweep's CPU
-- (buffers grown by doubling, zero-filled, then copied) and most of the
-- memory the tallies hold. Equality is checked byte for byte before a text
-- is shared, so agree_keys compares the same bytes as before. base takes
-- no more records once shared.
function Tally:share(base)
  if getmetatable(base) ~= Tally then error("specula.run.tally: share expects a tally", 2) end
  if base == self then error("specula.run.tally: a tally cannot share its own texts", 2) end
  base.frozen = true
  self.base = base
end

-- The bytes of position z's text (a pointer and a length; length -1: none).
local function text_of(t, z)
  local len = t.tlen[z]
  if len < 0 then return nil, -1 end
  local off = t.toff[z]
  while off < 0 do   -- shared: base's text at the same position
    t = t.base
    off = t.toff[z]
  end
  return t.text + off, len
end

-- Keep what the table needs of record `rec` at position i (1-based).
function Tally:add(i, rec, text)
  if type(i) ~= "number" or i < 1 or i > self.n then error("specula.run.tally: position out of range", 2) end
  if self.frozen then error("specula.run.tally: a shared tally takes no more records", 2) end
  local z = i - 1
  self.id[i], self.config[i], self.answer[i], self.gold[i], self.err[i] =
    rec.id, rec.config, rec.answer, rec.gold, rec.error
  local s, g = rec.stats, rec._agg
  local st = type(g) == "table" and g.st or nil
  if st ~= nil then
    -- stats written as engine text (specula.run.records, run.raw_stats):
    -- the same numbers from the window's statistics, rounded as the
    -- record rounds them
    local base = z * NF
    local a = self.num
    a[base], a[base + 1] = round(st.wall_ms, 3), round(st.standard_ms, 3)
    a[base + 2], a[base + 3] = st.wasted_calls, round(st.wasted_cost, 6)
    local c = base + #FIELDS
    a[c], a[c + 1], a[c + 2] = st.model_calls, st.target_calls, st.spec_calls
    a[c + 3], a[c + 4] = st.predicted_calls, st.warmup_calls
    a[base + NF - 1] = st.cancelled_model + st.cancelled_target + st.cancelled_spec
    self.pfoff[i] = g.pfoff or nil
    self.has[z] = 1
  elseif s ~= nil then
    if type(s) ~= "table" then s = {} end   -- not an object: every number absent (compare counts it)
    local base = z * NF
    local a = self.num
    for j = 1, #FIELDS do a[base + j - 1] = num(s[FIELDS[j]]) end
    local c = type(s.calls) == "table" and s.calls or nil
    for j = 1, #CALLS do a[base + #FIELDS + j - 1] = c and num(c[CALLS[j]]) or nan end
    local cc = type(s.cancelled) == "table" and s.cancelled or nil
    a[base + NF - 1] = cc and num(cc.total) or nan
    self.pfoff[i] = type(s.prefetch) == "table" and s.prefetch.predictor_off == true or nil
    self.has[z] = 1
  else
    self.has[z] = 0
  end
  local b = self.base
  if text ~= nil and b ~= nil and z < b.n and b.tlen[z] == #text then
    local p, len = text_of(b, z)
    if memcmp(p, text, len) == 0 then
      self.toff[z], self.tlen[z] = -1, len
      text = nil
    end
  end
  if text ~= nil then
    local len = #text
    local need = self.text_len + len
    if need > self.text_cap then
      local cap = self.text_cap * 2
      if cap < need then cap = need end
      if cap < 65536 then cap = 65536 end
      local buf = ffi.new("char[?]", cap)
      if self.text_len > 0 then copy(buf, self.text, self.text_len) end
      self.text, self.text_cap = buf, cap
    end
    copy(self.text + self.text_len, text, len)
    self.toff[z], self.tlen[z] = self.text_len, len
    self.text_len = need
  end
end

local function get(v)
  if v ~= v then return nil end
  return v
end

-- The slim record at position i, or nil: { id, config, answer, gold,
-- error, stats = { wall_ms, standard_ms, wasted_calls, wasted_cost,
-- calls = { model, target, speculator, predicted, warmup },
-- cancelled = { total }, prefetch = { predictor_off } when set } }, the fields compare.summarise and
-- stats.paired_records read.
function Tally:record(i)
  local z = i - 1
  local h = self.has[z]
  if h < 0 then return nil end
  local r = { id = self.id[i], config = self.config[i], answer = self.answer[i], gold = self.gold[i],
              error = self.err[i] }
  if h == 1 then
    local a, base = self.num, z * NF
    local s = {}
    for j = 1, #FIELDS do s[FIELDS[j]] = get(a[base + j - 1]) end
    local c = {}
    for j = 1, #CALLS do c[CALLS[j]] = get(a[base + #FIELDS + j - 1]) end
    s.calls = c
    s.cancelled = { total = get(a[base + NF - 1]) }
    if self.pfoff[i] then s.prefetch = { predictor_off = true } end
    r.stats = s
  end
  return r
end

-- Every kept record in position order, and position_of[record] = i.
function Tally:records()
  local out, pos = {}, {}
  for i = 1, self.n do
    local r = self:record(i)
    if r then
      out[#out + 1] = r
      pos[r] = i
    end
  end
  self.pos = pos
  return out
end

local function same_text(a, ia, b, ib)
  local pa, la = text_of(a, ia - 1)
  local pb, lb = text_of(b, ib - 1)
  if la < 0 or lb < 0 or la ~= lb then return false end
  return pa == pb or memcmp(pa, pb, la) == 0
end

-- Agreement keys for compare.rows' cache: key[r] is a string that is the
-- same for two records exactly when their agreement texts are equal, for
-- every pair rows compares (a record and the baseline's record of its id
-- and occurrence, as stats.pair_keys pairs them). tallies[ci] hold the
-- records of configuration ci, after :records(); base: the baseline's index.
function M.agree_keys(tallies, base, all)
  local keys = {}
  local bt = tallies[base]
  if not bt then return keys end
  local bpos = {}   -- pairing key -> the baseline's position
  local bkeys = stats.pair_keys(all[base])
  for _, r in ipairs(all[base]) do bpos[bkeys[r]] = bt.pos[r] end
  for ci, t in ipairs(tallies) do
    local ckeys = stats.pair_keys(all[ci])
    for _, r in ipairs(all[ci]) do
      local i = t.pos[r]
      local ib = bpos[ckeys[r]]
      if i and ib then
        if same_text(t, i, bt, ib) then keys[r] = "b" .. ib
        else keys[r] = "c" .. ci .. ":" .. i end
      end
    end
  end
  return keys
end

return M
