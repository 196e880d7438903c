-- specula.stats: paired statistics for comparing two configurations that ran
-- the same queries (specula run --compare, specula compare, the report).
--
--   stats.binom_two_sided(k, n)        -> p   exact two-sided binomial test at 1/2
--   stats.sign_test(diffs)             -> p, pos, neg, zero
--   stats.median(list)                 -> number | nil
--   stats.paired(base, other, opts)    -> { n, mean, mean_lo, mean_hi, median,
--                                           median_lo, median_hi, ratio, ratio_lo,
--                                           ratio_hi, sign_p, pos, neg, zero }
--   stats.paired_records(recs, base, opts) -> { n, wall_ms =, wasted_cost =, calls = }
--   stats.by_id(recs)                  -> the records sorted by id (as text)
--
-- Differences are other - base, query by query (negative = other is lower).
-- The confidence intervals come from one bootstrap (metrics.bootstrap_ci):
-- queries are resampled as pairs, so each resample keeps a query's two values
-- together; the mean, median and ratio use the same resamples (same seed).

local metrics = require "specula.metrics"
local D = require("specula.internal.domains").DEFAULTS
local json_null = require("specula.json").null

local type, error, tostring, tonumber, ipairs, floor, exp, log, min, huge = type, error, tostring, tonumber, ipairs, math.floor, math.exp, math.log, math.min, math.huge

local M = {}

--- Exact two-sided p-value of k successes in n fair Bernoulli trials:
-- min(1, 2 P(X <= min(k, n-k))) for X ~ Binomial(n, 1/2). n = 0 gives 1.
function M.binom_two_sided(k, n)
  if type(k) ~= "number" or type(n) ~= "number" or n < 0 or k < 0 or k > n
    or k ~= floor(k) or n ~= floor(n) then
    error("specula.stats.binom_two_sided: expected integers 0 <= k <= n", 2)
  end
  if n == 0 then return 1 end
  local m = min(k, n - k)
  local tail
  if n <= 1000 then
    -- pmf(0) = 2^-n is a normal double up to n = 1022; the recurrence
    -- pmf(j+1) = pmf(j) (n-j)/(j+1) is exact for small n (dyadic values)
    local p = 2 ^ -n
    tail = p
    for j = 0, m - 1 do
      p = p * (n - j) / (j + 1)
      tail = tail + p
    end
  else
    -- log space: log pmf(j) = log C(n, j) - n log 2, summed as Σ exp(l - lmax)
    local ls, lc = {}, 0
    local lmax = -huge
    for j = 0, m do
      if j > 0 then lc = lc + log(n - j + 1) - log(j) end
      ls[j] = lc - n * log(2)
      if ls[j] > lmax then lmax = ls[j] end
    end
    local s = 0
    for j = 0, m do s = s + exp(ls[j] - lmax) end
    tail = exp(lmax) * s
  end
  return min(1, 2 * tail)
end

--- Sign test on paired differences: the signs of the nonzero differences
-- against Binomial(n, 1/2), exact and two-sided. Returns p, and the numbers
-- of positive, negative and zero differences.
function M.sign_test(diffs)
  if type(diffs) ~= "table" then error("specula.stats.sign_test: expected a list of numbers", 2) end
  local pos, neg, zero = 0, 0, 0
  for i = 1, #diffs do
    local d = diffs[i]
    if type(d) ~= "number" or d ~= d then
      error("specula.stats.sign_test: element " .. i .. " is not a number", 2)
    end
    if d > 0 then pos = pos + 1 elseif d < 0 then neg = neg + 1 else zero = zero + 1 end
  end
  return M.binom_two_sided(pos, pos + neg), pos, neg, zero
end

--- Median (metrics.percentile at 50: the mean of the two middle values for
-- an even count); nil when the list is empty.
function M.median(list)
  if #list == 0 then return nil end
  return metrics.percentile(list, 50)
end

local function mean_diff(sample)
  local s = 0
  for i = 1, #sample do s = s + (sample[i][2] - sample[i][1]) end
  return s / #sample
end

local function median_diff(sample)
  local d = {}
  for i = 1, #sample do d[i] = sample[i][2] - sample[i][1] end
  return M.median(d)
end

-- Σ other / Σ base. A resample whose baseline sum is 0 has no finite ratio:
-- it counts as +inf (1 when both sums are 0), so the interval says so.
local function ratio_of_sums(sample)
  local b, o = 0, 0
  for i = 1, #sample do b, o = b + sample[i][1], o + sample[i][2] end
  if b == 0 then return o == 0 and 1 or huge end
  return o / b
end

-- The resampling loop in C (engine/sp_bootstrap.c) when the core library is
-- loaded: the same draws and sums, about three times faster.
local boot_lua
local boot_c
do
  local ok, core = pcall(require, "specula.internal.core")
  if ok and core.C then
    local ffi, C = core.ffi, core.C
    local dbl, int = ffi.typeof("double[?]"), ffi.typeof("int[?]")
    boot_c = function(n, iters, state, diffs, base, other, rank, sorted, lo_r, frac)
      local d, b, o, rk, so = dbl(n), dbl(n), dbl(n), int(n), dbl(n)
      for i = 1, n do
        d[i - 1], b[i - 1], o[i - 1], rk[i - 1], so[i - 1] = diffs[i], base[i], other[i], rank[i], sorted[i]
      end
      local mo, me, ra = dbl(iters), dbl(iters), dbl(iters)
      C.sp_boot_paired(n, iters, state, d, b, o, rk, so, lo_r, frac, int(n), mo, me, ra)
      local means, medians, ratios = {}, {}, {}
      for it = 1, iters do means[it], medians[it], ratios[it] = mo[it - 1], me[it - 1], ra[it - 1] end
      return means, medians, ratios
    end
  end
end
M._boot_c = boot_c ~= nil

local ratio_c
if boot_c then
  local ffi, C = require("specula.internal.core").ffi, require("specula.internal.core").C
  local dbl = ffi.typeof("double[?]")
  ratio_c = function(num, den, iters, state)
    local n = #num
    local a, b, out = dbl(n), dbl(n), dbl(iters)
    for i = 1, n do a[i - 1], b[i - 1] = num[i], den[i] end
    C.sp_boot_ratio(n, iters, state, a, b, out)
    local t = {}
    for it = 1, iters do t[it] = out[it - 1] end
    return t
  end
end

-- Σ num / Σ den over a list of pairs. A resample whose Σ den is 0 (only
-- queries with no standard time) has no finite ratio: +inf (1 when Σ num
-- is 0 too), as ratio_of_sums counts it, not 0, the fastest possible.
local function rel_of(sample)
  local w, s = 0, 0
  for _, p in ipairs(sample) do w, s = w + p[1], s + p[2] end
  if s > 0 then return w / s end
  return w == 0 and 1 or huge
end
M.rel_of = rel_of

--- Bootstrap CI of the ratio of sums Σ num / Σ den (the RelLat column:
-- num = wall times, den = standard times), queries resampled as pairs:
-- lo, hi, and the ratio on the data. The same numbers as
-- metrics.bootstrap_ci on the list of pairs { num[i], den[i] } with that
-- ratio as its statistic (the same draws, sums in the same order); the
-- resampling loop runs in C when the core is loaded (use_lua: never); a
-- resample whose Σ den is 0 is rel_of's 1 or +inf there too.
-- An end that is not finite is +inf: callers print it so.
function M.ratio_ci(num, den, opts, use_lua)
  if type(num) ~= "table" or type(den) ~= "table" or #num ~= #den or #num == 0 then
    error("specula.stats.ratio_ci: expected two non-empty lists of the same length", 2)
  end
  opts = opts or {}
  local pairs_ = {}
  for i = 1, #num do pairs_[i] = { num[i], den[i] } end
  local bo = { iterations = opts.iterations or D.bootstrap_iterations, seed = opts.seed or D.bootstrap_seed,
               level = opts.level or D.bootstrap_level }
  if not ratio_c or use_lua then return metrics.bootstrap_ci(pairs_, rel_of, bo) end
  local st = ratio_c(num, den, bo.iterations, metrics.prng(bo.seed).state)
  table.sort(st)
  local alpha = (1 - bo.level) / 2
  return metrics.percentile_sorted(st, 100 * alpha), metrics.percentile_sorted(st, 100 * (1 - alpha)),
    rel_of(pairs_)
end

-- The three paired bootstraps in one pass. It draws exactly the resamples
-- metrics.bootstrap_ci would (one generator per statistic, the same seed:
-- the same index sequence), so the intervals are the same numbers; but it
-- neither builds a resample table per iteration nor sorts one for the
-- median: the differences are ranked once, a resample is a count per rank,
-- and its median is read off the cumulative counts (O(n), not O(n log n)).
-- (use_lua: take the Lua loop even when the C one is loaded; for the spec)
-- The differences' ranks, the differences by rank, and the median's ranks
-- (lo_r, lo_r + 1) and weight as metrics.percentile(…, 50) interpolates them.
local function rank_diffs(diffs)
  local n = #diffs
  local order = {}
  for i = 1, n do order[i] = i end
  table.sort(order, function(a, b) return diffs[a] < diffs[b] end)
  local rank, sorted = {}, {}
  for r = 1, n do rank[order[r]] = r; sorted[r] = diffs[order[r]] end
  local pos = 1 + 0.5 * (n - 1)
  local lo_r = floor(pos)
  return rank, sorted, lo_r, pos - lo_r
end

local function boot_ci(xs, bo)
  local alpha = (1 - bo.level) / 2
  return { metrics.percentile(xs, 100 * alpha), metrics.percentile(xs, 100 * (1 - alpha)) }
end

local function paired_bootstrap(base, other, diffs, bo, use_lua)
  local n, iters = #diffs, bo.iterations
  local rank, sorted, lo_r, frac = rank_diffs(diffs)
  local rng = metrics.prng(bo.seed)
  local means, medians, ratios
  if boot_c and n > 0 and not use_lua then
    means, medians, ratios = boot_c(n, iters, rng.state, diffs, base, other, rank, sorted, lo_r, frac)
  else
    means, medians, ratios = boot_lua(n, iters, rng, diffs, base, other, rank, sorted, lo_r, frac)
  end
  return boot_ci(means, bo), boot_ci(medians, bo), boot_ci(ratios, bo)
end
M._paired_bootstrap = paired_bootstrap

-- paired_bootstrap for several measures of the same n > 0 queries with the
-- same bo, in one pass of C (sp_boot_paired_multi): the same seed draws the
-- same indices for each, so each measure gets the very intervals its own
-- paired_bootstrap gives; only the drawing is shared. sets[q] = { base,
-- other, diffs }; returns a list of { mean_ci, median_ci, ratio_ci }.
local function paired_bootstrap_multi(sets, bo)
  local ffi, C = require("specula.internal.core").ffi, require("specula.internal.core").C
  local dbl, int = ffi.typeof("double[?]"), ffi.typeof("int[?]")
  local m, n, iters = #sets, #sets[1][3], bo.iterations
  local d, b, o, rk, so = dbl(m * n), dbl(m * n), dbl(m * n), int(m * n), dbl(m * n)
  local lo_r, frac
  for q = 1, m do
    local base, other, diffs = sets[q][1], sets[q][2], sets[q][3]
    local rank, sorted
    rank, sorted, lo_r, frac = rank_diffs(diffs)
    local z = (q - 1) * n - 1
    for i = 1, n do
      d[z + i], b[z + i], o[z + i], rk[z + i], so[z + i] = diffs[i], base[i], other[i], rank[i], sorted[i]
    end
  end
  local mo, me, ra = dbl(m * iters), dbl(m * iters), dbl(m * iters)
  C.sp_boot_paired_multi(m, n, iters, metrics.prng(bo.seed).state, d, b, o, rk, so, lo_r, frac,
    int(n), int(m * n), mo, me, ra)
  local out = {}
  for q = 1, m do
    local means, medians, ratios = {}, {}, {}
    local z = (q - 1) * iters - 1
    for it = 1, iters do means[it], medians[it], ratios[it] = mo[z + it], me[z + it], ra[z + it] end
    out[q] = { boot_ci(means, bo), boot_ci(medians, bo), boot_ci(ratios, bo) }
  end
  return out
end

-- The resampling loop in Lua: the reference engine/sp_bootstrap.c follows, and
-- the path taken where the core library is not loaded.
boot_lua = function(n, iters, rng, diffs, base, other, rank, sorted, lo_r, frac)
  local counts = {}
  local means, medians, ratios = {}, {}, {}
  for it = 1, iters do
    for r = 1, n do counts[r] = 0 end
    local sd, sbase, sother = 0, 0, 0
    for _ = 1, n do
      local j = rng:int(n)
      sd = sd + diffs[j]
      sbase, sother = sbase + base[j], sother + other[j]
      local r = rank[j]
      counts[r] = counts[r] + 1
    end
    means[it] = sd / n
    if sbase == 0 then ratios[it] = sother == 0 and 1 or huge else ratios[it] = sother / sbase end
    -- the values at ranks lo_r and lo_r + 1 of the resample, sorted
    local acc, r, a, b = 0, 0, nil, nil
    while b == nil do
      r = r + 1
      acc = acc + counts[r]
      if a == nil and acc >= lo_r then a = sorted[r] end
      if acc >= lo_r + 1 or (frac == 0 and a ~= nil) then b = sorted[r] end
    end
    medians[it] = frac == 0 and a or a + frac * (b - a)
  end
  return means, medians, ratios
end

local function finite(x) if x and x == x and x ~= huge and x ~= -huge then return x end return nil end

--- Paired comparison of two lists of the same queries' values (base[i] and
-- other[i] belong to query i). opts.iterations, opts.seed and opts.level
-- drive the bootstrap (defaults: bootstrap_* in specula.internal.domains.DEFAULTS). The ratio (Σ other / Σ base) and its
-- interval are given only when Σ base > 0; an interval end that is not finite
-- (resamples with a zero baseline sum) is left out (nil).
local paired_prep, paired_finish
function M.paired(base, other, opts)
  if type(base) ~= "table" or type(other) ~= "table" then
    error("specula.stats.paired: expected two lists of numbers", 2)
  end
  if #base ~= #other then
    error("specula.stats.paired: the lists differ in length (" .. #base .. " and " .. #other .. ")", 2)
  end
  opts = opts or {}
  local n = #base
  if n == 0 then
    local r = { n = n }
    r.sign_p, r.pos, r.neg, r.zero = 1, 0, 0, 0
    return r
  end
  local p = paired_prep(base, other, opts, 3)
  return paired_finish(p, paired_bootstrap(base, other, p.diffs, p.bo))
end

-- M.paired's checks and differences (n > 0); level: error()'s.
paired_prep = function(base, other, opts, level)
  local n = #base
  local data, diffs, sb = {}, {}, 0
  for i = 1, n do
    local b, o = base[i], other[i]
    if type(b) ~= "number" or type(o) ~= "number" or b ~= b or o ~= o then
      error("specula.stats.paired: pair " .. i .. " is not two numbers", level)
    end
    data[i] = { b, o }
    diffs[i] = o - b
    sb = sb + b
  end
  local bo = { iterations = opts.iterations or D.bootstrap_iterations, seed = opts.seed or D.bootstrap_seed,
               level = opts.level or D.bootstrap_level }
  return { n = n, data = data, diffs = diffs, sb = sb, bo = bo }
end

-- M.paired's result from paired_prep's p and the three intervals.
paired_finish = function(p, mean, median, ratio)
  local data, diffs, sb = p.data, p.diffs, p.sb
  local r = { n = p.n }
  -- one pair: every resample is that pair, an interval of width 0 that
  -- says nothing of the spread; the estimates without intervals
  if p.n < 2 then mean, median, ratio = {}, {}, {} end
  r.mean_lo, r.mean_hi, r.mean = mean[1], mean[2], mean_diff(data)
  r.median_lo, r.median_hi, r.median = median[1], median[2], median_diff(data)
  if sb > 0 then
    r.ratio, r.ratio_lo, r.ratio_hi = ratio_of_sums(data), finite(ratio[1]), finite(ratio[2])
  end
  r.sign_p, r.pos, r.neg, r.zero = M.sign_test(diffs)
  return r
end

--- Records in a fixed order (by id, as text; ties by wall time): the
-- bootstrap resamples by position, so the same records in any file order
-- give the same intervals (a merged shard file prints the same table as a
-- single machine's file).
function M.by_id(recs)
  local out = {}
  for i = 1, #recs do out[i] = recs[i] end
  table.sort(out, function(a, b)
    local ia, ib = tostring(a.id), tostring(b.id)
    if ia ~= ib then return ia < ib end
    local wa = type(a.stats) == "table" and tonumber(a.stats.wall_ms) or -1
    local wb = type(b.stats) == "table" and tonumber(b.stats.wall_ms) or -1
    return wa < wb
  end)
  return out
end

--- Records by id (as text).
function M.id_map(recs)
  local m = {}
  if recs then for _, r in ipairs(recs) do m[tostring(r.id)] = r end end
  return m
end

--- The pairing key of each record: its id and which record of that id it
-- is, in the order given (an input may repeat an id: its first record
-- pairs with the baseline's first of that id, the second with the second;
-- keyed by id alone, every one paired with the baseline's last).
-- keys[r] = key; with `map`, also map[key] = r.
function M.pair_keys(recs, map)
  local keys, seen = {}, {}
  for _, r in ipairs(recs or {}) do
    local id = tostring(r.id)
    local n = (seen[id] or 0) + 1
    seen[id] = n
    local k = n == 1 and id or (id .. "\0" .. n)
    keys[r] = k
    if map then map[k] = r end
  end
  return keys
end

--- Records by pairing key (M.pair_keys).
function M.pair_map(recs)
  local map = {}
  M.pair_keys(recs, map)
  return map
end

--- Whether two paired records answer different questions: both name the
-- question they ran (provenance.query, the digest of the input record;
-- `qd` in a slim copy) and the two differ — two runs of different inputs
-- that share ids, whose "pairs" compare unlike with unlike.
local function question(r)
  if type(r.qd) == "string" then return r.qd end
  local p = r.provenance
  return type(p) == "table" and type(p.query) == "string" and p.query or nil
end
M.question = question
function M.other_question(a, b)
  local qa, qb = question(a), question(b)
  return qa ~= nil and qb ~= nil and qa ~= qb
end

local function numeric(v) if type(v) == "number" and v == v then return v end return nil end

-- Every call a query made: model, target, speculator, predicted (action
-- speculation) and warm-up calls. nil without the model/target/speculator counts.
local function total_calls(s)
  local c = s.calls
  if type(c) ~= "table" then return nil end
  local m, t, sp = numeric(c.model), numeric(c.target), numeric(c.speculator)
  if not (m and t and sp) then return nil end
  return m + t + sp + (numeric(c.predicted) or 0) + (numeric(c.warmup) or 0)
end

-- The measures compared query by query, read from a record's stats.
M.MEASURES = {
  { key = "wall_ms", get = function(s) return numeric(s.wall_ms) end, digits = 1 },
  { key = "wasted_cost", get = function(s) return numeric(s.wasted_cost) end, digits = 4 },
  { key = "calls", get = total_calls, digits = 2 },
}

-- The least share of a configuration's queries (matched with the baseline
-- by id) whose two records both succeeded for the paired differences to be
-- shown: the queries that fail are not a random sample (the hard ones, the
-- ones a tape misses), so with more than a fifth of them gone the survivors
-- compare two different sets of questions (docs/cli.md#failed-queries).
M.MIN_PAIRED_SHARE = 0.8

local function failed(r) return r.error ~= nil and r.error ~= json_null end

--- Paired differences of a configuration's records against the baseline's:
-- queries matched by id, taken in id order; a measure pairs the queries
-- whose two records both succeeded and both carry it (a query that failed
-- in either configuration is never a data point).
-- Returns { n = queries paired on wall time, matched = queries of recs the
-- baseline also ran, failed = those of them that failed in either,
-- comparable = n >= MIN_PAIRED_SHARE * matched, and, when comparable,
-- wall_ms = M.paired(...), wasted_cost = ..., calls = ... }.
function M.paired_records(recs, base, opts)
  local bmap = M.pair_map(base)
  local keys = M.pair_keys(recs)
  local cols = {}
  for _, m in ipairs(M.MEASURES) do cols[m.key] = { {}, {} } end
  local matched, nfailed, nother = 0, 0, 0
  for _, r in ipairs(M.by_id(recs)) do
    local b = bmap[keys[r]]
    if b and M.other_question(r, b) then
      nother, b = nother + 1, nil   -- the same id, another question: no pair
    end
    if b then
      matched = matched + 1
      if failed(r) or failed(b) then nfailed = nfailed + 1 end
    end
    if type(r.stats) == "table" and b and type(b.stats) == "table" and not failed(r) and not failed(b) then
      for _, m in ipairs(M.MEASURES) do
        local x, y = m.get(b.stats), m.get(r.stats)
        if x and y then
          local c = cols[m.key]
          c[1][#c[1] + 1], c[2][#c[2] + 1] = x, y
        end
      end
    end
  end
  local out = { n = #cols.wall_ms[1], matched = matched, failed = nfailed, other = nother > 0 and nother or nil }
  out.comparable = matched > 0 and out.n >= M.MIN_PAIRED_SHARE * matched
  if not out.comparable then return out end
  -- every measure paired on the same queries (the usual case): one shared
  -- pass of draws (paired_bootstrap_multi) gives each its own intervals
  local same = boot_c and out.n > 0 and not M._no_multi
  for _, m in ipairs(M.MEASURES) do same = same and #cols[m.key][1] == out.n end
  if not same then
    for _, m in ipairs(M.MEASURES) do
      out[m.key] = M.paired(cols[m.key][1], cols[m.key][2], opts)
    end
    return out
  end
  local preps, sets = {}, {}
  for q, m in ipairs(M.MEASURES) do
    preps[q] = paired_prep(cols[m.key][1], cols[m.key][2], opts or {}, 2)
    sets[q] = { cols[m.key][1], cols[m.key][2], preps[q].diffs }
  end
  local cis = paired_bootstrap_multi(sets, preps[1].bo)
  for q, m in ipairs(M.MEASURES) do
    out[m.key] = paired_finish(preps[q], cis[q][1], cis[q][2], cis[q][3])
  end
  return out
end

return M
