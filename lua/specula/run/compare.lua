-- specula.run.compare: `specula run AGENT --input Q --compare "sequential,spechop:k=3,..."`
-- runs every query under every configuration and prints one table row per
-- configuration. On the simulated backend the keyed draws make the
-- comparison exact (every configuration sees the same latencies and
-- speculation outcomes); on real endpoints it reports what was measured.
local sched = require "specula.internal.sched"
local json = require "specula.json"
local metrics = require "specula.metrics"
local runner = require "specula.run.runner"
local runopts = require "specula.run.opts"
local records = require "specula.run.records"
local optslib = require "specula.internal.domains"
local stats = require "specula.stats"
local tally = require "specula.run.tally"
local provenance = require "specula.provenance"
local C = require("specula.internal.core").C

local format, concat = string.format, table.concat
local D = optslib.DEFAULTS
-- the bootstrap's confidence level as the tables print it ("95%")
local CI = format("%g%%", 100 * D.bootstrap_level)

local M = {}

-- The keys of a --compare item, each checked as its command-line option
-- is (runopts.parse_flag); loaded files (policy, verifier, predictor) are
-- checked before any configuration runs (M.main).
M.KEYS = { "mode", "k", "m", "eps", "spec_launch", "predict", "match", "trigger", "ev_cost_ms", "policy",
           "verifier", "predictor", "label" }
local KEYSET = {}
for _, k in ipairs(M.KEYS) do KEYSET[k] = true end

-- "spechop:k=3:m=2:label=fast" -> { name = "fast", item = "spechop:k=3:m=2:label=fast", mode = "spechop",
-- k = 3, m = 2 }. An item's mode is its first part when that is a mode
-- name, else its mode= key, else default_mode (--mode). A part without '='
-- continues the value before it (verifier=jaccard:0.7).
function M.parse(list, default_mode)
  local function bad(msg) runopts.usage_error("--compare: " .. msg) end
  if type(list) ~= "string" or list == "" then
    bad("expects a list like \"sequential,spechop:k=3,spechop:k=inf:policy=forbid.lua\"")
  end
  local out, seen = {}, {}
  for item in list:gmatch("[^,]+") do
    item = item:gsub("^%s+", ""):gsub("%s+$", "")
    local parts = {}
    for p in item:gmatch("[^:]+") do parts[#parts + 1] = p end
    local c = { item = item }
    local first = 1
    if parts[1] and not parts[1]:find("=", 1, true) then
      if not runopts.MODES[parts[1]] then
        bad("unknown mode '" .. tostring(parts[1]) .. "' in '" .. item .. "' (use sequential, window or spechop)")
      end
      c.mode, first = parts[1], 2
    end
    local kv, last = {}, nil
    for i = first, #parts do
      local k, v = parts[i]:match("^%s*([%a_][%w_]*)%s*=(.*)$")
      if k then
        if not KEYSET[k] then
          bad("unknown key '" .. k .. "' in '" .. item .. "' (keys: " .. table.concat(M.KEYS, ", ") .. ")")
        end
        if kv[k] then bad("'" .. item .. "' gives " .. k .. " twice") end
        kv[k] = v
        last = k
      elseif last then
        kv[last] = kv[last] .. ":" .. parts[i]
      else
        bad("bad part '" .. parts[i] .. "' in '" .. item .. "' (expected KEY=VALUE)")
      end
    end
    local where = "--compare '" .. item .. "'"
    for _, k in ipairs(M.KEYS) do
      local v = kv[k]
      if v ~= nil then
        if v == "" then bad("'" .. item .. "': " .. k .. "= needs a value") end
        if k == "mode" then
          if c.mode and c.mode ~= v then bad("'" .. item .. "' names two modes") end
          if not runopts.MODES[v] then bad("unknown mode '" .. v .. "' in '" .. item .. "'") end
          c.mode = v
        elseif k == "k" then c.k = runopts.parse_k(v)
        elseif k == "m" or k == "eps" then c[k] = runopts.parse_opt(k, v)
        elseif k == "label" then c.label = v
        elseif k == "policy" or k == "verifier" or k == "predictor" then c[k] = v
        else c[k] = runopts.parse_flag(k:gsub("_", "-"), v, where) end
      end
    end
    c.mode = c.mode or default_mode or "spechop"
    c.name = c.label or item
    if seen[c.name] then
      bad("lists '" .. c.name .. "' twice" .. (c.label and " (a label names one row)" or ""))
    end
    seen[c.name] = true
    out[#out + 1] = c
  end
  return out
end

local function finite(x)
  if type(x) == "number" and x == x and x ~= math.huge and x ~= -math.huge then return x end
  return nil
end

local function answer_of(r)
  local a = r.answer
  if type(a) == "table" then a = a.answer or a.text or json.encode(a) end
  return a ~= nil and tostring(a) or nil
end

local by_id, id_map = stats.by_id, stats.id_map
M.by_id = by_id

-- A record that failed: its error is a value ("error": null in a results
-- file written by another tool is no error, as stats.paired_records and
-- the report read it).
local function failed_rec(r) return r.error ~= nil and r.error ~= json.null end

-- The canonical text of a record's answer and trajectory (what agreement
-- compares); `cache`, when given, keeps it per record table (M.rows passes
-- one: the baseline's texts are needed once per configuration). M.main
-- passes keys instead (tally.agree_keys): any string per record that is
-- equal for two records exactly when their texts are.
local function agree_text(r, cache)
  local t = cache and cache[r]
  if not t then
    t = json.canonical({ r.answer, r.trajectory })
    if cache then cache[r] = t end
  end
  return t
end
M.agree_text = agree_text

-- The numbers of one configuration's rows (pure: the spec recomputes them).
-- baseline: the records that answers and trajectories are compared with
-- (paired by query id). cache: an optional table for agree_text.
function M.summarise(recs, baseline, cache)
  -- pairs by id and occurrence, in the order given (stats.pair_keys)
  local keys = baseline and stats.pair_keys(recs)
  recs = by_id(recs)
  local bmap = baseline and stats.pair_map(baseline)
  local walls, stds, calls = {}, {}, { model = 0, target = 0, speculator = 0 }
  local cancelled, wasted_calls, wasted_cost, failed = 0, 0, 0, 0
  local em, f1, ngold, agree, nagree = 0, 0, 0, 0, 0
  -- results files are input from outside: a record whose stats are not
  -- numbers (an edited file, another tool's output) is left out of the
  -- columns it lacks and counted, never the end of the table
  local malformed, predictor_off = 0, 0
  for _, r in ipairs(recs) do
    local rfailed = failed_rec(r)
    if rfailed then failed = failed + 1 end
    local pf = type(r.stats) == "table" and type(r.stats.prefetch) == "table" and r.stats.prefetch or nil
    if pf and pf.predictor_off == true then predictor_off = predictor_off + 1 end
    -- a failed query is never a data point: its wall time is how long it
    -- took to fail, not how long the configuration takes to answer
    local s = not rfailed and r.stats or nil
    if s ~= nil then
      local bad = type(s) ~= "table"
      if bad then s = {} end
      local w, sd = finite(s.wall_ms), finite(s.standard_ms)
      if w and sd then
        walls[#walls + 1] = w
        stds[#stds + 1] = sd
      else
        bad = true
      end
      local c = type(s.calls) == "table" and s.calls or {}
      local cm, ct, cs = finite(c.model), finite(c.target), finite(c.speculator)
      local cc = finite(type(s.cancelled) == "table" and s.cancelled.total or nil)
      local wc, wx = finite(s.wasted_calls), finite(s.wasted_cost)
      if not (cm and ct and cs and cc and wc and wx) then bad = true end
      calls.model = calls.model + (cm or 0)
      calls.target = calls.target + (ct or 0)
      calls.speculator = calls.speculator + (cs or 0)
      cancelled = cancelled + (cc or 0)
      wasted_calls = wasted_calls + (wc or 0)
      wasted_cost = wasted_cost + (wx or 0)
      if bad then malformed = malformed + 1 end
    end
    local gold = r.gold
    if type(gold) == "table" and #gold == 0 then gold = nil end   -- no gold answer given
    local ans = answer_of(r)
    if gold ~= nil and ans and not rfailed then   -- a failed query's partial answer is not scored
      ngold = ngold + 1
      em = em + metrics.em(ans, gold)
      f1 = f1 + metrics.f1(ans, gold)
    end
    local b = bmap and bmap[keys[r]]
    -- agreement too is over the queries that answered, in both (and ask
    -- the same question)
    if b and not rfailed and not failed_rec(b) and not stats.other_question(r, b) then
      nagree = nagree + 1
      if agree_text(r, cache) == agree_text(b, cache) then
        agree = agree + 1
      end
    end
  end
  local n = #recs
  local ok = n - failed
  local row = { queries = n, ok = ok, failed = failed }
  if #walls > 0 then
    row.mean = metrics.mean(walls)
    -- one sorted copy for the three (metrics.percentile sorts a copy per call)
    local sorted = {}
    for i = 1, #walls do sorted[i] = walls[i] end
    table.sort(sorted)
    row.p50 = metrics.percentile_sorted(sorted, 50)
    row.p95 = metrics.percentile_sorted(sorted, 95)
    row.p99 = metrics.percentile_sorted(sorted, 99)
    -- RelLat = Σ wall / Σ standard: none while Σ standard is 0 (no query
    -- made a hop: no standard latency to compare with), not a ratio of 0
    local sstd = 0
    for i = 1, #stds do sstd = sstd + stds[i] end
    -- a bootstrap of one query has no spread: its RelLat, without an interval
    if sstd > 0 and #walls >= 2 then
      row.rel_lat_lo, row.rel_lat_hi, row.rel_lat = stats.ratio_ci(walls, stds)
      -- an end past every finite value (resamples of queries without a
      -- standard time): none in the JSON, "inf" in the table
      row.rel_lat_lo, row.rel_lat_hi = finite(row.rel_lat_lo), finite(row.rel_lat_hi)
      if row.rel_lat_hi == nil then row.rel_lat_unbounded = true end
    elseif sstd > 0 then row.rel_lat = walls[1] / sstd end
  end
  -- no query answered: no figure (not 0 calls, 0 cost: the configuration
  -- is not free, it has no data)
  if ok > 0 then
    row.model_per_q = calls.model / ok
    row.target_per_q = calls.target / ok
    row.spec_per_q = calls.speculator / ok
    row.cancelled = cancelled
    row.wasted_calls = wasted_calls
    row.wasted_cost = wasted_cost
  end
  if ngold > 0 then row.em, row.f1 = em / ngold, f1 / ngold end
  if nagree > 0 then row.agreement = agree / nagree end
  if malformed > 0 then row.malformed = malformed end
  if predictor_off > 0 then row.predictor_off = predictor_off end
  return row
end

M.PAIRED = stats.MEASURES

-- Paired differences of a configuration against the baseline (stats.paired_records).
function M.paired(recs, baseline, opts)
  return stats.paired_records(recs, baseline, opts)
end

-- All rows of a comparison: configs = { {name =}, ... }, all[i] = the records
-- of configs[i]. The first configuration is the baseline of the paired
-- differences; answers agree with the first sequential one.
function M.rows(configs, all, no_agree, cache)
  local agree_base
  for ci, c in ipairs(configs) do if c.mode == "sequential" then agree_base = all[ci] break end end
  if no_agree then agree_base = nil end
  local rows = {}
  cache = cache or {}
  for ci, c in ipairs(configs) do
    rows[ci] = M.summarise(all[ci], agree_base, cache)
    if ci > 1 then
      rows[ci].paired = M.paired(all[ci], all[1])
      rows[ci].paired.baseline = configs[1].name
    end
  end
  return rows
end

local function f(x, d) if x == nil then return "-" end return format("%." .. (d or 1) .. "f", x) end

-- The name column: as wide as the longest name, from 22 to NAME_MAX (60) characters;
-- a longer name is shown by a key ("[2] spechop:k=inf:verifier=jacc")
-- spelled out under the table, so the columns after it stay aligned.
local NAME_MIN, NAME_MAX = 22, 60
M.NAME_MAX = NAME_MAX
-- Widths count characters, not bytes: a name holding UTF-8 (a label of
-- one's own language) was padded by bytes and pushed its row's columns out
-- of line, and a long one could be cut inside a character.
local function width(s) return #s - select(2, s:gsub("[\128-\191]", "")) end
local function first_chars(s, n)
  local at = 0
  for i = 1, n do
    local nxt = s:find("[^\128-\191]", at + 2)
    if not nxt then return s end
    at = nxt - 1
    if i == n then return s:sub(1, at) end
  end
  return s
end
local function name_column(configs)
  local w, shown, keys = NAME_MIN, {}, {}
  for _, c in ipairs(configs) do w = math.max(w, math.min(width(c.name), NAME_MAX)) end
  for i, c in ipairs(configs) do
    if width(c.name) <= NAME_MAX then
      shown[i] = c.name
    else
      keys[#keys + 1] = i
      local tag = format("[%d] ", #keys)
      shown[i] = tag .. first_chars(c.name, NAME_MAX - #tag)
      keys[#keys] = format("%s= %s", tag, c.name)
    end
    -- padded here to w characters; format's %-Ws pads bytes, and adds
    -- nothing to a name already that long in bytes
    local pad = w - width(shown[i])
    if #shown[i] ~= width(shown[i]) and pad > 0 then shown[i] = shown[i] .. string.rep(" ", pad) end
  end
  return w, shown, keys
end

-- How a comparison with too few pairs says so (the table and stderr).
local function not_comparable(p)
  return format("not comparable: %d of %d queries succeeded in both (fewer than %d%%)", p.n, p.matched,
    math.floor(100 * stats.MIN_PAIRED_SHARE + 0.5))
end
M.not_comparable = not_comparable

function M.table_text(configs, rows)
  local lines = {}
  local W, shown, keys = name_column(configs)
  local NAME = "%-" .. W .. "s"
  local head = format(NAME .. " %5s %6s %8s %8s %8s %8s  %-22s %6s %6s %6s %7s %7s %9s %6s %6s %7s",
    "configuration", "n ok", "failed", "mean", "p50", "p95", "p99", "RelLat [" .. CI .. " CI]", "M/q", "T/q", "S/q",
    "cancel", "wasted", "cost", "EM", "F1", "agree")
  lines[1] = head
  lines[2] = string.rep("-", #head)
  for i in ipairs(configs) do
    local r = rows[i]
    local rl = r.rel_lat and ((r.rel_lat_lo or r.rel_lat_unbounded) and format("%.3f [%s, %s]", r.rel_lat,
      f(r.rel_lat_lo, 3):gsub("^%-$", "inf"), r.rel_lat_hi and format("%.3f", r.rel_lat_hi) or "inf")
      or format("%.3f [-, -]", r.rel_lat)) or "-"
    -- "!": some queries failed; the row's figures are over the others
    lines[#lines + 1] = format(NAME .. " %5d %6s %8s %8s %8s %8s  %-22s %6s %6s %6s %7s %7s %9s %6s %6s %7s",
      shown[i], r.ok or (r.queries - r.failed), r.failed > 0 and (r.failed .. "!") or "0", f(r.mean), f(r.p50),
      f(r.p95), f(r.p99), rl, f(r.model_per_q, 2), f(r.target_per_q, 2),
      f(r.spec_per_q, 2), f(r.cancelled, 0), f(r.wasted_calls, 0), f(r.wasted_cost, 4), r.em and f(100 * r.em) or "-",
      r.f1 and f(100 * r.f1) or "-", r.agreement and format("%.1f%%", 100 * r.agreement) or "-")
  end
  lines[#lines + 1] = "(latencies in ms per query; RelLat = Σ wall / Σ standard with a bootstrap " .. CI
    .. " CI over queries;"
  lines[#lines + 1] = " M/T/S = model, target and speculator calls per query; agree = trajectory and answer equal to sequential;"
  lines[#lines + 1] = " every figure but n ok and failed is over the queries that succeeded: a failed query is not a data point)"
  for _, k in ipairs(keys) do lines[#lines + 1] = k end
  for i, c in ipairs(configs) do
    local r = rows[i]
    if r.failed > 0 and r.failed == r.queries then
      lines[#lines + 1] = format("! %s: all %d queries failed; its row has no data", c.name, r.queries)
    elseif r.failed > 0 then
      lines[#lines + 1] = format("! %s: %d of %d queries failed; its row is over the %d that succeeded", c.name,
        r.failed, r.queries, r.queries - r.failed)
    end
  end
  for i, c in ipairs(configs) do
    local off = rows[i].predictor_off
    if off then
      lines[#lines + 1] = format("! %s: its predictor raised and was off for all or part of %d of %d queries (stats.prefetch.predictor_off): "
        .. "the row is not the predictor's alone", c.name, off, rows[i].queries)
    end
  end
  for i, c in ipairs(configs) do
    local m = rows[i].malformed
    if m then
      lines[#lines + 1] = format("(%s: %d record%s with stats that are not numbers, left out of the columns they lack)",
        c.name, m, m == 1 and "" or "s")
    end
  end
  if #configs > 1 then
    lines[#lines + 1] = ""
    lines[#lines + 1] = format("paired differences against %s (this configuration minus the baseline, query by query):", configs[1].name)
    -- "Δ" is two bytes: the header's widths are one more so the columns line up
    local ph = format(NAME .. " %-11s %5s  %-31s %-31s %-24s %-13s %9s", "configuration", "measure", "n",
      "mean Δ [" .. CI .. " CI]", "median Δ [" .. CI .. " CI]", "ratio [" .. CI .. " CI]", "+/-/=", "sign p")
    lines[#lines + 1] = ph
    lines[#lines + 1] = string.rep("-", #ph - 2)
    for i = 2, #configs do
      local p = rows[i].paired
      if p and p.comparable == false then
        lines[#lines + 1] = format(NAME .. " %-11s %5d  %s", shown[i], "-", p.n, not_comparable(p))
      end
      for j, m in ipairs(M.PAIRED) do
        local r = p and p[m.key]
        if r then
          local d = m.digits
          local function ci(est, lo, hi)
            if est == nil then return "-" end
            return format("%s [%s, %s]", f(est, d), f(lo, d), f(hi, d))
          end
          local ratio = "-"
          if r.ratio then
            -- no interval end: unbounded (zero baseline sums), or one pair (no interval)
            local none = r.n < 2 and "-" or "inf"
            ratio = format("%.3f [%s, %s]", r.ratio, r.ratio_lo and format("%.3f", r.ratio_lo) or none,
              r.ratio_hi and format("%.3f", r.ratio_hi) or none)
          end
          lines[#lines + 1] = format(NAME .. " %-11s %5d  %-30s %-30s %-24s %-13s %9s", j == 1 and shown[i] or "",
            m.key, r.n, ci(r.mean, r.mean_lo, r.mean_hi), ci(r.median, r.median_lo, r.median_hi), ratio,
            format("%d/%d/%d", r.pos, r.neg, r.zero), format("%.3g", r.sign_p))
        end
      end
      if p and p.other then
        lines[#lines + 1] = format(NAME .. " (%d quer%s share an id with %s but ask another question "
          .. "(provenance.query differs): not paired)", "", p.other, p.other == 1 and "y" or "ies", configs[1].name)
      end
      -- the pairs a failure took: said beside the numbers they are missing from
      if p and p.comparable and (p.failed or 0) > 0 then
        lines[#lines + 1] = format(NAME .. " (%d of %d queries left out: failed here or in %s)", "", p.failed,
          p.matched, configs[1].name)
      end
    end
    lines[#lines + 1] = format("(pairs = queries both ran and both answered, matched by id (a query that failed in either "
      .. "is left out; under %d%% of them left: not comparable);", math.floor(100 * stats.MIN_PAIRED_SHARE + 0.5))
    lines[#lines + 1] = format(" CI: paired bootstrap, %d resamples of queries, seed %d;",
      D.bootstrap_iterations, D.bootstrap_seed)
    lines[#lines + 1] = " ratio = Σ this / Σ baseline over the pairs; calls = model + target + speculator + predicted + warm-up;"
    lines[#lines + 1] = " sign p = exact two-sided binomial test on the signs of the nonzero differences)"
  end
  -- where the rows came from: one line per distinct run
  local runs = {}
  for _, c in ipairs(configs) do
    if c.prov then runs[#runs + 1] = { prov = c.prov, name = c.name } end
  end
  local plines = provenance.lines(runs, configs.unproven or 0)
  if #plines > 0 then
    lines[#lines + 1] = ""
    for _, l in ipairs(plines) do lines[#lines + 1] = l end
  end
  return concat(lines, "\n")
end

-- The --summary JSON: one object per configuration (its table row, with
-- `config` and, after the first, `paired`), keys sorted so that equal
-- tables give byte-identical files (written by a "canonical" writer, which
-- scrubs it).
function M.summary_json(configs, rows)
  for ci, c in ipairs(configs) do
    rows[ci].config = c.name
    if c.run then rows[ci].run = c.run end
  end
  return json.canonical(rows) .. "\n"
end

-- Records grouped by run: records that carry provenance by its run digest
-- and their configuration name (one row per distinct run, never two runs
-- in one row), the others by their configuration name
-- (specula.run.resultfiles.config_of), in the order
-- each first appears: configs = { {name =, mode =, run =, prov =}, ... },
-- all[i] = records. Two runs with one name are told apart by the first
-- field where they differ ("spechop:k=inf [policy forbid.lua 1a2b3c4d5e6f]").
-- A record that names no configuration and carries no provenance joins the
-- one before it.
function M.group(recs)
  local config_of = require("specula.run.resultfiles").config_of
  local configs, all, at, last = {}, {}, {}, nil
  local unproven = 0
  for _, r in ipairs(recs) do
    local p = type(r.provenance) == "table" and type(r.provenance.run) == "string" and r.provenance or nil
    local name = config_of(r) or (not p and last) or "(unknown)"
    last = name
    local key = p and ("run\0" .. p.run .. "\0" .. name) or ("name\0" .. name)
    if not p then unproven = unproven + 1 end
    local i = at[key]
    if not i then
      i = #configs + 1
      at[key] = i
      local st = type(r.stats) == "table" and r.stats or {}
      local mode = p and type(p.config) == "table" and p.config.mode or (type(st.mode) == "string" and st.mode)
        or name:match("^%s*([%a_]+)")
      configs[i] = { name = name, mode = mode, run = p and p.run or nil, prov = p }
      all[i] = {}
    end
    all[i][#all[i] + 1] = r
  end
  -- names shared by several runs (or by a run and records without provenance)
  local by_name = {}
  for i, c in ipairs(configs) do
    local l = by_name[c.name]
    if not l then l = {} by_name[c.name] = l end
    l[#l + 1] = i
  end
  for _, l in pairs(by_name) do
    if #l > 1 then
      local provs = {}
      for j, i in ipairs(l) do provs[j] = configs[i].prov end
      local tags = provenance.distinguish(provs, #l)
      for j, i in ipairs(l) do configs[i].name = configs[i].name .. " [" .. tags[j] .. "]" end
    end
  end
  configs.unproven = unproven
  return configs, all
end

-- `specula compare FILES...` (its command line: specula.cmd.compare); a
-- usage mistake found reading the files is returned as nil, msg (specula.cmd
-- prints it with the command's synopsis).
function M.cli_main(o)
  local files, baseline, summary = o.files, o.baseline, o.summary
  local resultfiles = require "specula.run.resultfiles"
  -- the same file twice would count every query twice
  local seen_file = {}
  for _, path in ipairs(files) do
    local d = C.sp_host_path_kind(path) == 1 and provenance.file_digest(path)
    if d then
      if seen_file[d] then
        sched.plain_error(format("specula compare: '%s' and '%s' are the same file (the same bytes): every query "
          .. "would count twice; give each results file once", seen_file[d], path), 2)
      end
      seen_file[d] = path
    end
  end
  local recs, skipped = {}, 0
  local first_of = {}   -- run .. id -> the entry that has it
  for _, e in ipairs(resultfiles.read_records(files, "specula compare")) do
    local p = e.rec.provenance
    if type(p) == "table" then
      -- (checked and expanded as read: specula.run.resultfiles)
      -- one run's query id in two files: the same run given twice, or one
      -- run's configuration on two inputs (one row cannot pair those)
      local key = p.run .. "\0" .. tostring(e.rec.id)
      local prev = first_of[key]
      if prev and prev.file ~= e.file then
        -- the files given are not a comparison: a usage error (docs/cli.md)
        if prev.rec.provenance.query == p.query then
          sched.plain_error(format("specula compare: %s:%d and %s:%d hold the same query '%s' of the same run "
            .. "(run %s): the files repeat one run; give its records once", prev.file, prev.line, e.file, e.line,
            tostring(e.rec.id), p.run:sub(1, 12)), 2)
        end
        sched.plain_error(format("specula compare: %s:%d and %s:%d are the same run (run %s) on two inputs: query "
          .. "'%s' is another question in each (provenance.query differs); compare runs of one input",
          prev.file, prev.line, e.file, e.line, p.run:sub(1, 12), tostring(e.rec.id)), 2)
      end
      first_of[key] = first_of[key] or e
    end
    -- a results record has its stats, or the error that took them
    if e.rec.stats == nil and e.rec.error == nil then
      skipped = skipped + 1
      if skipped <= 5 then
        require("specula.internal.output").stderr(format("specula compare: warning: %s:%d: not a results record (no stats, no error); "
          .. "line skipped\n", e.file, e.line))
      end
    else
      recs[#recs + 1] = e.rec
    end
  end
  if skipped > 5 then
    require("specula.internal.output").stderr(format("specula compare: warning: %d more lines skipped\n", skipped - 5))
  end
  if #recs == 0 then
    sched.plain_error("specula compare: no results records in " .. concat(files, ", ")
      .. (skipped > 0 and " (is it a queries file? give the --out of `specula run`)" or ""))
  end
  local configs, all = M.group(recs)
  if baseline then
    local at
    for ci, c in ipairs(configs) do if c.name == baseline then at = ci end end
    if not at then
      local names = {}
      for ci, c in ipairs(configs) do names[ci] = c.name end
      return nil, ("--baseline '" .. baseline .. "' is not a configuration of these files (" .. concat(names, ", ") .. ")")
    end
    table.insert(configs, 1, table.remove(configs, at))
    table.insert(all, 1, table.remove(all, at))
  end
  local rows = M.rows(configs, all)
  require("specula.internal.output").stdout(M.table_text(configs, rows), "\n")
  -- files of different inputs whose ids coincide: said, not paired
  for ci = 2, #configs do
    local p = rows[ci].paired
    if p and p.other then
      require("specula.internal.output").stderr(format("specula compare: warning: %s against %s: %d quer%s share "
        .. "an id but ask another question (provenance.query differs), so %s not paired; compare runs of one "
        .. "input\n", configs[ci].name, configs[1].name, p.other, p.other == 1 and "y" or "ies",
        p.other == 1 and "it is" or "they are"))
    end
  end
  if summary then resultfiles.write_file(summary, M.summary_json(configs, rows), "specula compare", "canonical") end
  -- failed records: the status `run --compare` gave when it wrote them
  return M.failures(configs, rows, "specula compare")
end

-- Some queries failed: stderr says which configurations and which
-- comparisons that left without enough pairs, and it returns the exit
-- status, 3 (docs/cli.md#exit-statuses); nil when none failed.
function M.failures(configs, rows, who)
  local failed, parts = 0, {}
  for ci, c in ipairs(configs) do
    local r = rows[ci]
    failed = failed + r.failed
    if r.failed > 0 then parts[#parts + 1] = format("%s: %d of %d", c.name, r.failed, r.queries) end
  end
  if failed == 0 then return end
  local msg = format("%s: exit 3: %d quer%s failed (%s); the table counts only the queries that succeeded\n", who,
    failed, failed == 1 and "y" or "ies", concat(parts, "; "))
  for ci = 2, #configs do
    local p = rows[ci].paired
    if p and p.comparable == false then
      msg = msg .. format("%s: %s against %s: %s\n", who, configs[ci].name, configs[1].name, not_comparable(p))
    end
  end
  require("specula.internal.output").stderr(msg)
  return 3
end

-- The options of configuration c: the command line's, with the item's keys.
local function options_of(o, c)
  local oc = {}
  for k, v in pairs(o) do oc[k] = v end
  oc.mode = c.mode
  oc.k = c.k or (c.mode == "sequential" and 1 or o.k)
  for _, k in ipairs({ "m", "eps", "spec_launch", "predict", "match", "trigger", "ev_cost_ms", "policy", "verifier",
                       "predictor" }) do
    if c[k] ~= nil then oc[k] = c[k] end
  end
  return oc
end

-- Each configuration's options, checked before any configuration runs: one
-- that cannot run says so now.
local function config_options(agent, o, configs, script)
  local opts = {}
  for ci, c in ipairs(configs) do
    local oc = options_of(o, c)
    runopts.load_knobs(oc, script, "--compare '" .. c.item .. "'")
    local has_predictor = agent.predict ~= nil
    if oc.predictor == "off" then
      has_predictor = false
    elseif type(oc.predictor) == "table" then
      has_predictor = true
    end
    if oc.predict == "on" and not has_predictor then
      runopts.usage_error("--compare '" .. c.item .. "': predict=on, but " .. (oc.predictor == "off"
        and "predictor off leaves no predictor to speculate with" or runopts.NO_PREDICTOR_CLI))
    end
    opts[ci] = oc
  end
  return opts
end

-- Every configuration's run and provenance, fixed before the first query
-- runs: a resumed --out is checked against them, and two items that are
-- the same configuration would be one run twice. Returns runs and
-- by_name[configuration name] = its index.
local function make_runs(agent, o, src, script, configs, opts)
  local base = runner.prov_base(o, src, script)
  local runs, by_run, by_name = {}, {}, {}
  for ci, c in ipairs(configs) do
    local run = runner.make_run(agent, opts[ci], script)
    runner.prov_of(base, agent, opts[ci], run)
    local same = by_run[run.prov.run]
    if same then
      runopts.usage_error(format("--compare: '%s' and '%s' are the same configuration (their provenance is equal): "
        .. "list it once", configs[same].item, c.item))
    end
    by_run[run.prov.run], by_name[c.name] = ci, ci
    runs[ci] = run
  end
  return runs, by_name
end

-- What the table needs of a record read back from --out (specula.run.tally
-- reads no more): its id, configuration, answer, gold and error, the
-- numbers of its stats, and its agreement text when a configuration is
-- sequential. The record's trajectory, stages and provenance go: a
-- resumed sweep keeps a few hundred bytes per skipped record, not its tables.
local TALLY_STATS = { "wall_ms", "standard_ms", "wasted_calls", "wasted_cost" }
local TALLY_CALLS = { "model", "target", "speculator", "predicted", "warmup" }
local function slim_record(r, agree)
  local st = r.stats
  if type(st) == "table" then
    local s = {}
    for _, k in ipairs(TALLY_STATS) do s[k] = st[k] end
    if type(st.calls) == "table" then
      local c = {}
      for _, k in ipairs(TALLY_CALLS) do c[k] = st.calls[k] end
      s.calls = c
    end
    if type(st.cancelled) == "table" then s.cancelled = { total = st.cancelled.total } end
    if type(st.prefetch) == "table" and st.prefetch.predictor_off then s.prefetch = { predictor_off = true } end
    st = s
  end
  return { id = r.id, config = r.config, answer = r.answer, gold = r.gold, error = r.error, stats = st,
           agree = agree and agree_text(r) or nil, qd = stats.question(r) }
end

-- What --out holds already (specula.run.resume, which also repairs a
-- cut-off last line and drops failed records with --retry-failed):
-- skip[configuration name][position] = its record, and learnt[name] the
-- positions its predictor learnt from.
local function resume_out(o, src, configs, runs, by_name)
  local names, agree = {}, false
  for ci, c in ipairs(configs) do
    names[ci] = c.name
    if c.mode == "sequential" then agree = true end
  end
  local skip, _, _, learnt = require("specula.run.resume").read(o.out, { retry_failed = o.retry_failed, src = src,
    shard = o.shard, keep = function(r) return slim_record(r, agree) end, prov_of = function(r)
      if r.config == nil then
        return nil, "the record is from a run without --compare; this is a --compare run: give a new --out file"
      end
      local ci = by_name[r.config]
      if not ci then
        return nil, format("the record's configuration '%s' is not in this --compare list (%s): add it to the "
          .. "list to resume the file, or give a new --out file", tostring(r.config), concat(names, ", "))
      end
      return runs[ci].prov
    end })
  return skip, learnt or {}   -- none without a file to resume
end

-- A predictor that learns across queries starts every configuration
-- from what it knew before the first: otherwise a configuration's
-- results would depend on the ones listed before it. (specula.predict's
-- predictors can be saved and restored; another predictor that learns
-- carries its learning from one configuration into the next.) Each
-- configuration's predictor after its queries is kept beside --out for a
-- resume (specula.run.predstate); what the file held stays for the
-- configurations this run does not reach. Returns { before = fn, after =
-- fn } to call around each configuration's queries.
local function predictor_keeper(P, runs, o)
  local function copy(v)
    if type(v) ~= "table" then return v end
    local t = {}
    for k, x in pairs(v) do t[k] = copy(x) end
    return t
  end
  local predstate = require "specula.run.predstate"
  -- state() and restore() are the user's code: a failure disables the
  -- predictor (of every configuration, or of the one restored), not the run
  local function pdisable(run, what, msg) if run.pdisable then run.pdisable(what, msg) end end
  local learned0 = nil
  if predstate.keepable(P) then
    local oks, st = sched.protect(false, P.state, P)
    if oks then learned0 = copy(st) else for _, r in ipairs(runs) do pdisable(r, "state", st) end end
  end
  local pstate = o.out and runs[1].learn and (o.out .. ".predictor") or nil
  local pentries, pruns, pwhy = {}, nil, nil
  if pstate and learned0 then
    pruns, pwhy = predstate.read(pstate)
    for k, e in pairs(pruns or {}) do
      local ok, text = pcall(json.canonical, e)
      if ok then pentries[k] = text end
    end
  end
  local keeper = {}
  -- before configuration ci (c) runs: its predictor as before the first,
  -- or as the state file left it when --out holds some of its records
  -- (done: by position; positions: those its predictor learnt from)
  function keeper.before(ci, c, done, positions)
    local run = runs[ci]
    if learned0 and ci > 1 then
      local okr, rerr = sched.protect(false, P.restore, P, copy(learned0))
      if not okr then pdisable(run, "restore", rerr) end
    end
    if pstate and next(done or {}) ~= nil then
      positions = positions or {}
      local ok, why = false, "a predictor without state() and restore()"
      local raised
      if learned0 then ok, why, raised = predstate.restore(P, pstate, pruns, pwhy, run.prov.run, positions) end
      if raised then pdisable(run, "restore", why) end
      if not (run.pdisabled and run.pdisabled()) then
        predstate.resumed(run, ok, why, positions, pstate, o.quiet, c.name)
      end
    end
  end
  -- after a configuration's queries: its predictor's state saved
  function keeper.after(run)
    if pstate and learned0 and not (run.pdisabled and run.pdisabled()) then
      local entry, err = predstate.entry(P, run.learnt)
      local ok = false
      if entry then
        pentries[run.prov.run] = entry
        ok, err = predstate.save(pstate, pentries)
      end
      if not ok then
        require("specula.internal.output").stderr(format("specula: warning: cannot write %s (%s): a resume of %s will "
          .. "start its predictor afresh\n", pstate, tostring(err), o.out))
      end
    end
  end
  return keeper
end

-- Where the records go: out and its name (--out, or stdout with --out -;
-- none else, said on stderr). stdout holds the table alone otherwise.
local function records_output(o)
  if o.out then
    return records.open_records(o.out, "--out file"), format("--out file '%s'", o.out)
  elseif o.records_stdout then
    return require("specula.internal.output").wrap(io.stdout, "canonical"), "stdout"   -- --out -: before the table
  elseif not o.quiet then
    require("specula.internal.output").stderr("specula: --compare without --out: the records are not kept (stdout holds "
      .. "the table; give --out FILE to keep them)\n")
  end
  return nil, nil
end

function M.main(agent, o, src, script)
  local configs = M.parse(o.compare, o.mode)
  local opts = config_options(agent, o, configs, script)
  local runs, by_name = make_runs(agent, o, src, script, configs, opts)
  runner.note_shard(runs[1], o)
  local skip, learnt = {}, {}
  if o.out then skip, learnt = resume_out(o, src, configs, runs, by_name) end
  local out, what = records_output(o)
  -- opened now, so a path that cannot be written fails before the run
  local summary_f = o.summary and records.open_output(o.summary, "w", "--summary file", "canonical")
  -- --trace: one file for every configuration (a process per query and
  -- configuration), the stage times of each record taken as it is written
  local tracewriter = o.trace and require("specula.run.tracewriter")
  local trace_f = o.trace and records.open_output(o.trace, "w", "--trace file", "json")
  local trace_events, trace_entries = {}, {}
  local nq = src.n
  local all, interrupted, ndone, ntotal = {}, false, 0, nq * #configs
  -- What the table needs of each record, kept out of the Lua heap once the
  -- record is written (specula.run.tally); agreement is computed against the
  -- first sequential configuration, when there is one.
  local tallies, agree_base = {}, nil
  for ci, c in ipairs(configs) do if c.mode == "sequential" and not agree_base then agree_base = ci end end
  local keeper = predictor_keeper(agent.predict, runs, o)
  for ci, c in ipairs(configs) do
    if interrupted then break end
    keeper.before(ci, c, skip[c.name], learnt[c.name])
    local oc = opts[ci]
    local t = tally.new(nq)
    tallies[ci] = t
    -- the baseline has run: a text equal to its text is kept once
    if agree_base and ci > agree_base then t:share(tallies[agree_base]) end
    -- the queries this configuration still has to run, read from the input
    -- as it runs them; those already in --out (by position) go straight to
    -- the tally
    local done = skip[c.name] or {}
    local function prev_of(q) return done[q.index] end
    local list = src:stream(next(done) ~= nil and prev_of or nil, function(q)
      local prev = prev_of(q)
      t:add(q.index, prev, agree_base and (prev.agree or agree_text(prev)))
    end)
    -- a replayed cassette starts over for each config (none is open when
    -- its module was never loaded)
    local cassette = package.loaded["specula.cassette"]
    if cassette then cassette.rewind() end
    local run = runs[ci]
    -- written, then dropped (below): engine-written JSON, unless traced
    run.raw_stages = not o.trace
    run.raw_stats = run.raw_stages
    -- records of the common shape written whole by the engine (specula.run.records)
    run.direct = out ~= nil and not o.trace and not run.learn and not run.kept and records.encode_hops_ok
    if o.trace then
      run.trace_out, run.trace_pid, run.trace_config = trace_events, (ci - 1) * nq, c.name
    end
    local show = o.progress or (not o.quiet and o.out ~= nil and runner.isatty(2))
    if show then require("specula.internal.output").stderr(format("%s:\n", c.name)) end
    -- Once written, a record goes: the tally keeps what the table needs
    -- (emit's `true` stands for it in run_all's list).
    local write = out and records.record_writer(out, c.name, what, o.out, agree_base ~= nil) or function(rec)
      rec.config = c.name
      return agree_base and agree_text(rec) or nil
    end
    local emit = runner.with_prov(function(rec, j, q)
      t:add(q.index, rec, write(rec, j))
      if trace_f then trace_entries[#trace_entries + 1] = tracewriter.entry(rec, oc, c.name) end
      return true
    end, run)
    local _, stopped, got = runner.run_all(run, list, emit, runner.progress_line(show), false)
    keeper.after(run)
    -- a signal stopped the run: this configuration has only what finished
    if stopped then interrupted = true end
    ndone = ndone + got + (nq - list.n)
  end
  -- the slim records, built once every configuration has run (none for a
  -- configuration a signal kept from starting)
  for ci = 1, #configs do all[ci] = tallies[ci] and tallies[ci]:records() or {} end
  if o.out then records.close_records(out, what, o.out) end
  if trace_f then
    local digests = {}
    for ci = 1, #configs do digests[ci] = runs[ci].prov.run end
    tracewriter.write(trace_f, o.trace, trace_events, trace_entries, digests)
  end
  -- agreement pairs queries by position: not meaningful on a partial run
  local rows = M.rows(configs, all, interrupted,
    agree_base and not interrupted and tally.agree_keys(tallies, agree_base, all) or nil)
  for ci, c in ipairs(configs) do c.run, c.prov = runs[ci].prov.run, runs[ci].prov.t end
  local ok, err = require("specula.internal.output").stdout(M.table_text(configs, rows), "\n")
  if ok then ok, err = io.stdout:flush() end
  if not ok then records.write_failed("stdout", err) end
  if summary_f then
    local okj, text = pcall(M.summary_json, configs, rows)
    if not okj then
      summary_f:close()
      records.write_failed(format("--summary file '%s'", o.summary), text)
    end
    records.write_whole(summary_f, o.summary, "--summary file", { text })
  end
  local status = M.failures(configs, rows, "specula")
  if interrupted then return runner.interrupted(ndone, ntotal, o.out) end
  return status
end

return M
