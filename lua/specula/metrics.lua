-- specula.metrics: answer quality and summary statistics.
--
--   metrics.em(prediction, gold)        -> 1 | 0   SQuAD exact match, max over golds
--   metrics.f1(prediction, gold)        -> [0,1]   SQuAD token F1, max over golds
--   metrics.mean(list)                  -> number | nil (empty list)
--   metrics.percentile(list, q)         -> number  q in [0,100], linear interpolation
--   metrics.bootstrap_ci(data, fn, opts) -> lo, hi, estimate
--   metrics.prng(seed)                  -> generator with :next() and :int(n)
--
-- gold is a string, or a list of strings (answer and aliases, as in the
-- records of specula.datasets), or a table with a `gold` list.

local text = require("specula.text")
local D = require("specula.internal.domains").DEFAULTS
local bit = require("bit")

local type, error, tostring, floor = type, error, tostring, math.floor
local sort = table.sort
local bxor, lshift, rshift, tobit = bit.bxor, bit.lshift, bit.rshift, bit.tobit
local squad_normalize = text.squad_normalize

local M = {}

----------------------------------------------------------------------------
-- EM / F1
----------------------------------------------------------------------------

local function golds_of(fname, gold)
  if type(gold) == "string" then return { gold } end
  if type(gold) == "number" then return { tostring(gold) } end
  if type(gold) == "table" then
    if type(gold.gold) == "table" then gold = gold.gold end
    local out = {}
    for i = 1, #gold do
      local g = gold[i]
      if type(g) == "number" then g = tostring(g) end
      if type(g) ~= "string" then
        error("specula.metrics." .. fname .. ": gold answer " .. i .. " is not a string", 3)
      end
      out[i] = g
    end
    if #out == 0 then
      error("specula.metrics." .. fname .. ": empty list of gold answers", 3)
    end
    return out
  end
  error("specula.metrics." .. fname .. ": gold must be a string or a list of strings", 3)
end

local function pred_of(fname, p)
  if p == nil then return "" end
  if type(p) == "number" then return tostring(p) end
  if type(p) ~= "string" then
    error("specula.metrics." .. fname .. ": prediction must be a string", 3)
  end
  return p
end

--- SQuAD exact match: 1 when squad_normalize(prediction) equals the
-- normalised form of some gold answer, else 0. A nil prediction is "".
function M.em(prediction, gold)
  local p = squad_normalize(pred_of("em", prediction))
  local golds = golds_of("em", gold)
  for i = 1, #golds do
    if squad_normalize(golds[i]) == p then return 1 end
  end
  return 0
end

local function f1_one(ptoks, g)
  local gtoks = text.split(squad_normalize(g))
  local np, ng = #ptoks, #gtoks
  -- SQuAD 2.0 rule for empty answers: F1 is 1 when both are empty, else 0
  if np == 0 or ng == 0 then return (np == ng) and 1 or 0 end
  local counts = {}
  for i = 1, ng do local w = gtoks[i]; counts[w] = (counts[w] or 0) + 1 end
  local same = 0
  for i = 1, np do
    local w = ptoks[i]
    local c = counts[w]
    if c and c > 0 then same = same + 1; counts[w] = c - 1 end
  end
  if same == 0 then return 0 end
  local precision, recall = same / np, same / ng
  return 2 * precision * recall / (precision + recall)
end

--- SQuAD token F1 (multiset overlap of normalised tokens), max over golds.
function M.f1(prediction, gold)
  local ptoks = text.split(squad_normalize(pred_of("f1", prediction)))
  local golds = golds_of("f1", gold)
  local best = 0
  for i = 1, #golds do
    local f = f1_one(ptoks, golds[i])
    if f > best then best = f end
  end
  return best
end

----------------------------------------------------------------------------
-- summary statistics
----------------------------------------------------------------------------

local function check_numbers(fname, list)
  if type(list) ~= "table" then
    error("specula.metrics." .. fname .. ": expected a list of numbers", 3)
  end
  for i = 1, #list do
    if type(list[i]) ~= "number" then
      error("specula.metrics." .. fname .. ": element " .. i .. " is not a number", 3)
    end
  end
end

--- Arithmetic mean; nil for an empty list.
function M.mean(list)
  check_numbers("mean", list)
  local n = #list
  if n == 0 then return nil end
  local s = 0
  for i = 1, n do s = s + list[i] end
  return s / n
end

local function percentile_sorted(xs, q)
  local n = #xs
  if n == 1 then return xs[1] end
  local pos = (q / 100) * (n - 1) + 1   -- 1-based fractional rank
  local lo = floor(pos)
  if lo >= n then return xs[n] end
  local frac = pos - lo
  -- equal neighbours (infinite ones too: inf - inf is NaN) need no interpolation
  if frac == 0 or xs[lo] == xs[lo + 1] then return xs[lo] end
  return xs[lo] + (xs[lo + 1] - xs[lo]) * frac
end
M.percentile_sorted = percentile_sorted   -- for stats.ratio_ci (xs sorted, not checked)

--- q-th percentile (q in [0,100]) with linear interpolation between the two
-- nearest ranks: sort the values x_1 <= ... <= x_n, take the fractional
-- rank r = 1 + (q/100)(n-1) and return x_floor(r) + (r - floor(r)) *
-- (x_floor(r)+1 - x_floor(r)). This is numpy's default ("linear") method;
-- q = 50 is the median, q = 0 the minimum, q = 100 the maximum. The input
-- list is not modified. Raises on an empty list.
function M.percentile(list, q)
  check_numbers("percentile", list)
  if #list == 0 then error("specula.metrics.percentile: empty list", 2) end
  if type(q) ~= "number" or q ~= q or q < 0 or q > 100 then
    error("specula.metrics.percentile: q must be a number in [0,100]", 2)
  end
  local xs = {}
  for i = 1, #list do xs[i] = list[i] end
  sort(xs)
  return percentile_sorted(xs, q)
end

----------------------------------------------------------------------------
-- seeded PRNG (xorshift32) and bootstrap
----------------------------------------------------------------------------

local Prng = {}
Prng.__index = Prng

-- Mix a seed (any number) into a non-zero 32-bit state.
local function seed_state(seed)
  local lo = tobit(seed % 4294967296)
  local hi = tobit(floor(seed / 4294967296) % 4294967296)
  local x = bxor(lo, tobit(0x9E3779B9))
  x = bxor(x, lshift(hi, 7), rshift(hi, 3))
  for _ = 1, 4 do       -- a few xorshift rounds to spread small seeds
    x = bxor(x, lshift(x, 13)); x = bxor(x, rshift(x, 17)); x = bxor(x, lshift(x, 5))
    if x == 0 then x = tobit(0x6D2B79F5) end
  end
  if x == 0 then x = tobit(0x6D2B79F5) end
  return x
end

--- A small deterministic generator (xorshift32; period 2^32 - 1), so a
-- bootstrap never depends on math.random's global state.
function M.prng(seed)
  if seed == nil then seed = 0 end
  if type(seed) ~= "number" or seed ~= seed then
    error("specula.metrics.prng: seed must be a number", 2)
  end
  return setmetatable({ state = seed_state(seed) }, Prng)
end

--- Next value, uniform in [0,1).
function Prng:next()
  local x = self.state
  x = bxor(x, lshift(x, 13)); x = bxor(x, rshift(x, 17)); x = bxor(x, lshift(x, 5))
  self.state = x
  if x < 0 then x = x + 4294967296 end
  return x / 4294967296
end

--- Next integer, uniform in [1, n].
function Prng:int(n)
  return floor(self:next() * n) + 1
end

--- Bootstrap confidence interval (percentile method) of a statistic.
-- data: a list of observations; its items are resampled as units, so a list
--   of pairs {a, b} keeps each pair together (paired statistics).
-- fn: function(sample) -> number, called on each resample (a list of the
--   same length as data, reused between calls: fn must not keep it);
--   default metrics.mean (for a list of numbers).
-- opts.iterations, opts.seed, opts.level: by default bootstrap_iterations,
--   seed and bootstrap_level of specula.internal.domains.DEFAULTS.
-- Returns lo, hi (the (1-level)/2 and (1+level)/2 percentiles of the
-- resampled statistics, linear interpolation) and the statistic on data.
function M.bootstrap_ci(data, fn, opts)
  if type(data) ~= "table" or #data == 0 then
    error("specula.metrics.bootstrap_ci: data must be a non-empty list", 2)
  end
  if fn == nil then
    check_numbers("bootstrap_ci", data)
    fn = M.mean
  elseif type(fn) ~= "function" then
    error("specula.metrics.bootstrap_ci: fn must be a function", 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error("specula.metrics.bootstrap_ci: options must be a table", 2)
  end
  opts = opts or {}
  local iterations = opts.iterations or D.bootstrap_iterations
  if type(iterations) ~= "number" or iterations < 1 or iterations ~= floor(iterations) then
    error("specula.metrics.bootstrap_ci: iterations must be a positive integer", 2)
  end
  local level = opts.level or D.bootstrap_level
  if type(level) ~= "number" or level <= 0 or level >= 1 then
    error("specula.metrics.bootstrap_ci: level must be in (0,1)", 2)
  end
  local rng = M.prng(opts.seed or D.seed)
  local n = #data
  local stats = {}
  -- one resample table, refilled each iteration (fn must not keep it): the
  -- allocation of a fresh one per iteration dominated large batches
  local sample = {}
  for it = 1, iterations do
    for i = 1, n do sample[i] = data[rng:int(n)] end
    local v = fn(sample)
    if type(v) ~= "number" then
      error("specula.metrics.bootstrap_ci: fn returned " .. type(v) .. ", not a number", 2)
    end
    stats[it] = v
  end
  sort(stats)
  local alpha = (1 - level) / 2
  local lo = percentile_sorted(stats, 100 * alpha)
  local hi = percentile_sorted(stats, 100 * (1 - alpha))
  local copy = {}
  for i = 1, n do copy[i] = data[i] end
  return lo, hi, fn(copy)
end

return M
