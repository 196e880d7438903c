-- specula.run.aggregate: the figures of a run, summed over its records (or, in a
-- light run, over the counters its windows add as they finish), and the
-- summary `specula run` prints at the end.
local core = require "specula.internal.core"
local policylib = require "specula.policy"
local output = require "specula.internal.output"
local json = require "specula.json"
local ffi = core.ffi
local C = core.C
local K_UNBOUNDED = tonumber(C.SP_K_UNBOUNDED)

local tonumber, pairs, ipairs, format = tonumber, pairs, ipairs, string.format

local M = {}

-- RelLat* and RelLat_k at the estimates (nil, nil while one is undefined).
local function theory(p, a, b, k)
  if p == nil or a == nil or b == nil then return nil, nil end
  local star = C.sp_theory_rel_lat_star(p, a, b)
  local kk = k < 0 and K_UNBOUNDED or k
  local rk = C.sp_theory_rel_lat_k(p, a, b, kk)
  if star ~= star then star = nil end
  if rk ~= rk then rk = nil end
  return star, rk
end

-- x rounded to d decimals (3 by default); nil stays nil.
local function round(x, d)
  if x == nil then return nil end
  local f = 10 ^ (d or 3)
  return math.floor(x * f + 0.5) / f
end

-- p_hat, alpha_hat, beta_hat of an estimator (sp_est: the engine's one
-- definition, docs/cli.md#estimates); nil where undefined.
local est_get = require("specula.estimate").get

-- The run's aggregate counters, before the derived figures (M.of).
local function new_agg()
  return { queries = 0, failed = 0, wall_ms = 0, standard_ms = 0, hops = 0, commits = 0,
           rollbacks = 0, accepted = 0, rejected = 0, model = 0, target = 0, speculator = 0,
           predicted = 0, warmup = 0, cancelled = 0, wasted_cost = 0, wasted_calls = 0,
           speculative_launches = 0, deferred = 0, est = ffi.new("sp_est") }
end

-- Add a finished window's counters to a running aggregate (light runs);
-- match: the run's match when it predicts (its prefetch counters summed as
-- a full record's are).
local prefetch_add
-- A query's prefetch counters (sp_prefetch_stats) as its record has them.
local function prefetch_of(pf, match)
  return { candidates = tonumber(pf.candidates), fired = tonumber(pf.fired),
    promoted = tonumber(pf.promoted), promoted_lossy = tonumber(pf.promoted_lossy), wasted = tonumber(pf.wasted),
    wasted_cost = round(tonumber(pf.wasted_cost), 6), gated_ev = tonumber(pf.gated_ev),
    gated_policy = tonumber(pf.gated_policy), held = tonumber(pf.held), saved_ms = round(tonumber(pf.saved_ms), 3),
    match = match }
end
-- A query's window statistics (sp_window_stats) into a's sums; hops and
-- wasted_cost as the caller counts them (a record: its committed hops and
-- the cost as rounded in it).
local function sum_window(a, st, hops, wasted_cost, match)
  a.wall_ms, a.standard_ms = a.wall_ms + st.wall_ms, a.standard_ms + st.standard_ms
  a.hops, a.commits, a.rollbacks = a.hops + hops, a.commits + st.commits, a.rollbacks + st.rollbacks
  a.accepted, a.rejected = a.accepted + st.accepted, a.rejected + st.rejected
  a.model, a.target, a.speculator = a.model + st.model_calls, a.target + st.target_calls, a.speculator + st.spec_calls
  a.predicted, a.warmup = a.predicted + st.predicted_calls, a.warmup + st.warmup_calls
  a.cancelled = a.cancelled + st.cancelled_model + st.cancelled_target + st.cancelled_spec
  a.wasted_cost, a.wasted_calls = a.wasted_cost + wasted_cost, a.wasted_calls + st.wasted_calls
  a.speculative_launches, a.deferred = a.speculative_launches + st.speculative_launches, a.deferred + st.deferred
  C.sp_est_merge(a.est, st.est)
  if match then prefetch_add(a, prefetch_of(st.pf, match)) end
end

local function agg_add(a, st, failed, match)
  a.queries = a.queries + 1
  -- a failed query is counted, never a data point: its wall time is how
  -- long it took to fail (docs/cli.md#failed-queries)
  if failed then
    a.failed = a.failed + 1
    return
  end
  sum_window(a, st, st.hops, st.wasted_cost, match)
end

-- The query's gate decisions per trigger ("zero forbidden launches" is a
-- number: docs/agents.md#counting): { target = { full =, warmup =, forbid = }, ... }.
local function gate_stats(st)
  local g = {}
  for _, tr in ipairs(policylib.TRIGGERS) do
    local row = st.gate[tonumber(tr[2])]
    g[tr[1]] = { forbid = row[0], warmup = row[1], full = row[2] }
  end
  return g
end

-- The same object as JSON text, keys in canonical order, for a record that
-- is written and dropped (run.raw_stages): one string instead of five
-- tables per record, copied by the encoder (json.raw). nil when the
-- triggers are not the four the format string spells out.
local gate_text
do
  local byname = {}
  for i, tr in ipairs(policylib.TRIGGERS) do byname[i] = tr end
  table.sort(byname, function(a, b) return a[1] < b[1] end)
  if #byname == 4 then
    local idx, parts = {}, {}
    for i, tr in ipairs(byname) do
      idx[i] = tonumber(tr[2])
      -- the row is { [0] forbid, [1] warmup, [2] full }: keys sorted, full before warmup
      parts[i] = '"' .. tr[1] .. '":{"forbid":%d,"full":%d,"warmup":%d}'
    end
    local fmt_ = "{" .. table.concat(parts, ",") .. "}"
    local i1, i2, i3, i4 = idx[1], idx[2], idx[3], idx[4]
    gate_text = function(st)
      local g = st.gate
      local a, b, c, d = g[i1], g[i2], g[i3], g[i4]
      return format(fmt_, a[0], a[2], a[1], b[0], b[2], b[1], c[0], c[2], c[1], d[0], d[2], d[1])
    end
  end
end

M.theory, M.round, M.est_get, M.new_agg, M.agg_add, M.gate_stats = theory, round, est_get, new_agg, agg_add, gate_stats
M.gate_text = gate_text

-- Aggregate figures of a list of records (or, for a light run, of the
-- counters its windows added to `acc` as they finished).
local add_record

function M.of(records, k, acc)
  local a = acc or new_agg()
  if not acc then a.queries = #records end
  for _, r in ipairs(acc and {} or records) do add_record(a, r) end
  return M.finish(a, k)
end

-- Add one record to an aggregate (M.of's loop; a run that writes its
-- records and keeps none folds them in as they are written, in the same
-- order, so the sums are the same numbers). Counts the query too when
-- `count` is set.
add_record = function(a, r, count)
  if count then a.queries = a.queries + 1 end
  if r.error then
    a.failed = a.failed + 1   -- counted, and left out of every sum (agg_add)
    M.note_failure(a, r.id, r.error)
    return
  end
  local s, g = r.stats, r._agg
  local st = g and g.st
  if st then
    -- a record whose stats went out as engine-written text (records.collect,
    -- run.raw_stats): the same figures from the window's statistics, rounded
    -- where the record rounds them
    sum_window(a, st, g.hops, round(st.wasted_cost, 6), g.match)
  elseif s and g then
    a.wall_ms, a.standard_ms = a.wall_ms + g.wall, a.standard_ms + g.std
    a.hops, a.commits, a.rollbacks = a.hops + s.hops, a.commits + s.commits, a.rollbacks + s.rollbacks
    a.accepted, a.rejected = a.accepted + g.acc, a.rejected + g.rej
    a.model, a.target, a.speculator = a.model + s.calls.model, a.target + s.calls.target, a.speculator + s.calls.speculator
    a.predicted, a.warmup = a.predicted + s.calls.predicted, a.warmup + s.calls.warmup
    a.cancelled = a.cancelled + s.cancelled.total
    a.wasted_cost, a.wasted_calls = a.wasted_cost + s.wasted_cost, a.wasted_calls + s.wasted_calls
    a.speculative_launches, a.deferred = a.speculative_launches + s.speculative_launches, a.deferred + s.deferred
    C.sp_est_merge(a.est, g.est)
    if s.prefetch then prefetch_add(a, s.prefetch) end
  end
end
M.add_record = add_record

-- A query's prefetch counters (a record's stats.prefetch) into a's.
prefetch_add = function(a, q)
  local p = a.prefetch or { candidates = 0, fired = 0, promoted = 0, promoted_lossy = 0, wasted = 0,
    wasted_cost = 0, gated_ev = 0, gated_policy = 0, held = 0, saved_ms = 0, match = q.match }
  for _, k in ipairs({ "candidates", "fired", "promoted", "promoted_lossy", "wasted", "wasted_cost",
                       "gated_ev", "gated_policy", "held", "saved_ms" }) do
    p[k] = p[k] + (q[k] or 0)
  end
  a.prefetch = p
end

-- The ratios and estimates of an aggregate whose sums are complete.
function M.finish(a, k)
  a.rel_lat = a.standard_ms > 0 and a.wall_ms / a.standard_ms or nil
  if a.est then
    a.p_hat, a.alpha_hat, a.beta_hat = est_get(a.est)
    a.est = nil   -- cdata: not part of what callers print or encode
  end
  a.rel_lat_star, a.rel_lat_k = theory(a.p_hat, a.alpha_hat, a.beta_hat, k or K_UNBOUNDED)
  if a.prefetch then a.prefetch.hit_rate = a.prefetch.fired > 0 and a.prefetch.promoted / a.prefetch.fired or nil end
  return a
end

-- A figure for the summary: d decimals (3 by default), "-" when undefined.
local function fmt(x, d)
  if x == nil then return "-" end
  return format("%." .. (d or 3) .. "f", x)
end
M.fmt = fmt

-- The gate's decisions per tool and trigger, one line per tool that was
-- asked: "send_email: target forbid 12; predicted_start forbid 40 ...".
function M.decision_lines(c)
  local names = {}
  for name in pairs(c.tools) do names[#names + 1] = name end
  table.sort(names)
  local rows = {}
  local function row(label, t)
    if t.full + t.warmup + t.forbid == 0 then return end
    local parts = {}
    for _, tr in ipairs(policylib.TRIGGERS) do
      local x = t.triggers[tr[1]]
      if x.full + x.warmup + x.forbid > 0 then
        local p = {}
        if x.full > 0 then p[#p + 1] = format("full %d", x.full) end
        if x.warmup > 0 then p[#p + 1] = format("warmup %d", x.warmup) end
        if x.forbid > 0 then p[#p + 1] = format("forbid %d", x.forbid) end
        parts[#parts + 1] = tr[1] .. " " .. table.concat(p, "/")
      end
    end
    local extra = t.by_script > 0 and format(" (%d forbid for a script error or no decision)", t.by_script) or ""
    rows[#rows + 1] = format("    %s: %s%s", label, table.concat(parts, "; "), extra)
  end
  for _, name in ipairs(names) do row(name, c.tools[name]) end
  row("(unlisted)", c.unknown)
  if #rows == 0 then return {} end
  local head = "  early-launch decisions by tool and trigger:"
  if (c.script_errors or 0) > 0 then head = head .. format(" [policy script errors: %d]", c.script_errors) end
  table.insert(rows, 1, head)
  return rows
end

-- The first failed query of an aggregate, for the summary: its id and its
-- error's first line (the record holds the whole of it).
function M.note_failure(a, id, err)
  if a.first_failure then return end
  -- (secrets scrubbed before the cut: a cut secret would not be recognised)
  local line = output.clean(tostring(err):match("^[^\n]*"))
  if #line > 300 then line = json.utf8_cut(line, 297) .. "..." end
  a.first_failure = { id = id, error = line }
end

-- "  first failure: query 'ID': ERROR" when a query failed: the summary said
-- how many and the reason was only in the records
local function first_failure_line(a)
  local f = a.first_failure
  if not f or a.failed == 0 then return nil end
  return format("  first failure: query '%s': %s%s", tostring(f.id), f.error,
    a.failed > 1 and " (each failed record holds its own error)" or "")
end

-- The summary `specula run` prints on stderr: a is M.of's result; run, when
-- given, adds the eligibility gate's decisions.
function M.summary_text(a, run)
  local lines = {}
  if a.queries > 0 and a.failed == a.queries then
    -- no query answered: no figure, not a row of zeros
    lines[1] = format("specula: %d quer%s (%d failed): no data, every query failed", a.queries,
      a.queries == 1 and "y" or "ies", a.failed)
    lines[#lines + 1] = first_failure_line(a)
    if run and run.policy then
      for _, l in ipairs(M.decision_lines(policylib.counts(run.policy))) do lines[#lines + 1] = l end
    end
    return table.concat(lines, "\n")
  end
  lines[#lines + 1] = format("specula: %d quer%s (%d failed), %d hop%s; RelLat %s (Σwall %.1f ms / Σstandard %.1f ms)",
    a.queries, a.queries == 1 and "y" or "ies", a.failed, a.hops, a.hops == 1 and "" or "s", fmt(a.rel_lat),
    a.wall_ms, a.standard_ms)
  lines[#lines + 1] = format("  p̂ %s  α̂ %s  β̂ %s  RelLat* %s  RelLat_k %s  commits %d  rollbacks %d",
    fmt(a.p_hat), fmt(a.alpha_hat), fmt(a.beta_hat), fmt(a.rel_lat_star), fmt(a.rel_lat_k), a.commits, a.rollbacks)
  lines[#lines + 1] = format("  calls: model %d, target %d, speculator %d, predicted %d, warmup %d; cancelled %d; wasted %d calls, cost %.4f",
    a.model, a.target, a.speculator, a.predicted, a.warmup, a.cancelled, a.wasted_calls, a.wasted_cost)
  if a.failed > 0 then
    lines[#lines + 1] = format("  ! %d of %d queries failed; every figure but the counts of queries is over the %d that "
      .. "succeeded", a.failed, a.queries, a.queries - a.failed)
    lines[#lines + 1] = first_failure_line(a)
  end
  if a.prefetch then
    local p = a.prefetch
    lines[#lines + 1] = format("  action speculation (%s%s): %d candidates, %d fired, %d promoted (hit rate %s), %d wasted (cost %.4f), gated: EV %d, policy %d; %.0f ms hidden",
      p.match, p.match ~= "exact" and ", LOSSY" or "", p.candidates, p.fired, p.promoted, fmt(p.hit_rate), p.wasted,
      p.wasted_cost, p.gated_ev, p.gated_policy, p.saved_ms)
  end
  if run and run.policy then
    for _, l in ipairs(M.decision_lines(policylib.counts(run.policy))) do lines[#lines + 1] = l end
  end
  return table.concat(lines, "\n")
end

return M
