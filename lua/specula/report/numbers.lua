-- specula.report.numbers: the numbers of `specula report`: per configuration
-- the wall-time percentiles, RelLat = Σ wall / Σ standard with its bootstrap
-- CI, p̂, α̂, β̂ (the engine's one estimator) and the theory's RelLat* and
-- RelLat_k at those values (the C theory, sp_theory_*).

local json, metrics = require "specula.json", require "specula.metrics"
local estimate, pstats = require "specula.estimate", require "specula.stats"
local common = require "specula.report.common"
local C = require("specula.internal.core").C

local sqrt = math.sqrt
local ipairs, tonumber = ipairs, tonumber
local N, T = common.N, common.T
local c_rel_lat_star, c_rel_lat_k = C.sp_theory_rel_lat_star, C.sp_theory_rel_lat_k

local M = {}

-- RelLat* (Corollary 1); nil while an input is undefined.
function M.rel_lat_star(p, a, b)
  if not (p and a and b) then return nil end
  return N(tonumber(c_rel_lat_star(p, a, b)))
end

-- RelLat_k (Corollary 3); k = SP_K_UNBOUNDED is the unbounded window.
function M.rel_lat_k(p, a, b, k)
  if not (p and a and b) then return nil end
  return N(tonumber(c_rel_lat_k(p, a, b, k)))
end
local rel_lat_star, rel_lat_k = M.rel_lat_star, M.rel_lat_k

local function sd(xs, mean)
  local n = #xs
  if n < 2 then return 0 end
  local s = 0
  for i = 1, n do s = s + (xs[i] - mean) ^ 2 end
  return sqrt(s / (n - 1))
end

-- (specula.stats.rel_of: a resample without a standard time is +inf, not 0)
local ratio_of_sums = pstats.rel_of

-- p̂, α̂, β̂ of records: the engine's one estimator (specula.estimate).
local function ratios(recs) return estimate.of_records(recs) end
M.sd = sd

local function failed(r) return r.error ~= nil and r.error ~= json.null end
M.failed = failed

local function summarize(g, o)
  local s = { queries = #g.recs, ok = 0, failed = 0, sum_wall = 0, sum_std = 0, commits = 0, rollbacks = 0,
              model = 0, target = 0, speculator = 0, cancelled = 0 }
  local walls, pairs_, rl = {}, {}, {}
  -- in id order: the bootstrap resamples by position, so a merged shard file
  -- and a single machine's file give the same intervals; a failed query is
  -- counted and left out of every figure (its wall time is how long it took
  -- to fail, not to answer)
  local recs = {}
  for _, r in ipairs(pstats.by_id(g.recs)) do
    if failed(r) then s.failed = s.failed + 1 else recs[#recs + 1] = r end
  end
  s.ok = #recs
  for i, r in ipairs(recs) do
    local st = r.stats
    walls[i] = st.wall_ms
    pairs_[i] = { st.wall_ms, st.standard_ms }
    s.sum_wall, s.sum_std = s.sum_wall + st.wall_ms, s.sum_std + st.standard_ms
    if st.standard_ms > 0 then rl[#rl + 1] = st.wall_ms / st.standard_ms end
    s.commits = s.commits + (N(st.commits) or 0)
    s.rollbacks = s.rollbacks + (N(st.rollbacks) or 0)
    local calls = T(st.calls) or {}
    s.model = s.model + (N(calls.model) or 0)
    s.target = s.target + (N(calls.target) or 0)
    s.speculator = s.speculator + (N(calls.speculator) or 0)
    local c = st.cancelled
    s.cancelled = s.cancelled + (N(c) or (T(c) and N(c.total)) or 0)
    -- its predictor raised earlier in the run and was off for this query
    local pf = T(st.prefetch)
    if pf and pf.predictor_off == true then s.predictor_off = (s.predictor_off or 0) + 1 end
  end
  s.walls, s.rel_lats = walls, rl
  if #walls > 0 then
    s.mean_wall = metrics.mean(walls)
    s.p50 = metrics.percentile(walls, 50)
    s.p95 = metrics.percentile(walls, 95)
    s.p99 = metrics.percentile(walls, 99)
  end
  if s.sum_std > 0 then
    s.rel_lat = s.sum_wall / s.sum_std
    -- a bootstrap of one query has no spread: no interval
    if #pairs_ >= 2 then
      s.ci_lo, s.ci_hi = metrics.bootstrap_ci(pairs_, ratio_of_sums, { iterations = o.iterations, seed = o.seed })
      -- an end past every finite value: none (the page prints inf)
      s.ci_lo, s.ci_hi = N(s.ci_lo), N(s.ci_hi)
      if not s.ci_hi then s.ci_unbounded = true end
    end
  end
  s.p_hat, s.alpha_hat, s.beta_hat = ratios(recs)
  s.rel_lat_star = rel_lat_star(s.p_hat, s.alpha_hat, s.beta_hat)
  local kx = g.kx
  local kk = N(kx) or (kx == "inf" and tonumber(C.SP_K_UNBOUNDED)) or nil
  if kk then s.rel_lat_k = rel_lat_k(s.p_hat, s.alpha_hat, s.beta_hat, kk) end
  if s.ok > 0 then
    s.model_pq, s.target_pq, s.spec_pq = s.model / s.ok, s.target / s.ok, s.speculator / s.ok
  else
    -- no query answered: no figure (not 0 commits, 0 calls: a cheap
    -- configuration, not one with no data)
    s.commits, s.rollbacks = nil, nil
  end
  return s
end
M.summarize = summarize

-- p̂, α̂, β̂ and RelLat* pooled over every record (the figures' theory lines).
function M.pooled(records)
  local pooled = {}
  local ok = {}
  for _, r in ipairs(records) do if not failed(r) then ok[#ok + 1] = r end end
  records = ok
  pooled.p_hat, pooled.alpha_hat, pooled.beta_hat = ratios(records)
  pooled.rel_lat_star = rel_lat_star(pooled.p_hat, pooled.alpha_hat, pooled.beta_hat)
  return pooled
end

return M
