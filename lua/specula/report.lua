-- specula.report: `specula report RESULTS.jsonl [MORE.jsonl ...] -o report.html`
--
-- Reads results files written by `specula run --out` (one JSON record per
-- query) and writes one self-contained HTML page (inline CSS and SVG, no
-- network references, no scripts) with:
--   1. a summary table per configuration (wall-time percentiles, RelLat with a
--      bootstrap 95% CI, p̂, α̂, β̂, RelLat*, commits, rollbacks, calls);
--   2. RelLat against k, with the theory's RelLat* (Corollary 1) and RelLat_k
--      (Corollary 3) at the pooled p̂, α̂, β̂, and the calls per query;
--   3. the distributions of the stage latencies t_seg, t_target, t_spec
--      (and t_verify when it is measured);
--   4. the timeline of one query's speculation window, from a Chrome trace
--      (--trace) or reconstructed from the record's stage times;
--   5. the per-query RelLat distribution, and a methods note.
--
-- Records are grouped by their `config` string (set by `--compare` runs);
-- records without one by their mode and stats.k, or one group per input file
-- with `--group file`. Malformed lines are reported as FILE:LINE and skipped.
-- A results record does not name its mode: a (file, k) group in which no
-- query speculated at all is taken for a sequential run.

local json = require "specula.json"
local metrics = require "specula.metrics"
local estimate = require "specula.estimate"
local pstats = require "specula.stats"
local sched = require "specula.sched"
local svg = require "specula.svg"

local format, floor, ceil, max, min, sqrt, huge = string.format, math.floor, math.ceil, math.max, math.min, math.sqrt, math.huge
local concat, sort = table.concat, table.sort
local type, tostring, tonumber, pairs, ipairs = type, tostring, tonumber, pairs, ipairs
local esc, num = svg.escape, svg.num

local M = {}

local usage_text = [[
usage: specula report RESULTS.jsonl [MORE.jsonl ...] [-o report.html] [options]

Writes one self-contained HTML report (inline CSS and SVG) of one or more
results files written by `specula run --out`.

options:
  -o, --out FILE        the HTML file to write (default: report.html)
  --trace FILE.json     a Chrome trace from `specula run --trace`: the timeline
                        figure then shows the recorded events of one query
  --query ID            the query shown in the timeline (default: the one with
                        the most commits + rollbacks)
  --group auto|file     auto (default): group records by their `config`, else
                        by mode and k; file: one configuration per input file
  --title TEXT          the report's title
  --bootstrap N         bootstrap resamples for the RelLat CI (default 1000)
  --seed N              bootstrap seed (default 1, as in `specula run --compare`)
  -h, --help            this text
]]

local function fail(msg) sched.plain_error("specula report: " .. msg) end

-- Usage mistakes end the command with status 2 (see main).
local USAGE = {}
local function usage_error(msg) error({ [USAGE] = msg }, 0) end

-- io.open's message repeats the path: keep the reason only.
local function open_reason(path, err)
  err = tostring(err)
  if err:sub(1, #path + 2) == path .. ": " then return err:sub(#path + 3) end
  return err
end

local function warn(msg) io.stderr:write("specula report: warning: " .. msg .. "\n") end

-- A finite number, or nil (json.null, strings and NaN are not numbers here).
local function N(v)
  if type(v) == "number" and v == v and v ~= huge and v ~= -huge then return v end
  return nil
end

local function S(v) if type(v) == "string" then return v end return nil end

local function T(v) if type(v) == "table" then return v end return nil end

----------------------------------------------------------------------------
-- arguments
----------------------------------------------------------------------------

local function parse_args(args)
  local argv = require "specula.argv"
  local D = require("specula.opts").DEFAULTS
  local o, err = argv.parse(args, {
    ["-o"] = "out", ["--out"] = "out", ["--trace"] = "trace", ["--query"] = "query", ["--title"] = "title",
    ["--group"] = { "group", convert = argv.one_of({ auto = true, file = true }, "--group must be auto or file") },
    ["--bootstrap"] = { "iterations", convert = function(v)
      v = tonumber(v)
      if not v or v < 1 or v ~= floor(v) then return nil, "--bootstrap must be a positive integer" end
      return v
    end },
    ["--seed"] = { "seed", convert = function(v)
      v = tonumber(v)
      if not v then return nil, "--seed must be a number" end
      return v
    end },
    ["-h"] = argv.HELP, ["--help"] = argv.HELP,
  }, { positional = "files", option = "^%-.", into = { out = "report.html", group = "auto",
       iterations = D.bootstrap_iterations, seed = D.bootstrap_seed } })
  if not o then usage_error(err) end
  if not o.help and #o.files == 0 then usage_error("no results file given") end
  return o
end

----------------------------------------------------------------------------
-- input
----------------------------------------------------------------------------

-- Why a decoded line is not a usable results record (nil when it is).
local function record_problem(r)
  if type(r) ~= "table" then return "not a JSON object" end
  local st = T(r.stats)
  if not st then return "no stats object (not a `specula run` results record)" end
  if not N(st.wall_ms) then return "stats.wall_ms is not a number" end
  if not N(st.standard_ms) or st.standard_ms < 0 then return "stats.standard_ms is not a non-negative number" end
  if r.stages ~= nil and not T(r.stages) then return "stages is not an object" end
  if r.config ~= nil and not S(r.config) then return "config is not a string" end
  return nil
end

-- Read one results file: its valid records (with _file, _line, _seq set) and
-- the warnings for the lines skipped.
local function load_file(path, seq, warnings)
  local f, err = io.open(path, "r")
  if not f then fail("cannot open results file '" .. path .. "': " .. open_reason(path, err)) end
  local recs, lineno, nonblank = {}, 0, 0
  for line in f:lines() do
    lineno = lineno + 1
    if line:find("%S") then
      nonblank = nonblank + 1
      local r, derr = json.decode(line)
      local problem
      if r == nil then problem = "invalid JSON (" .. tostring(derr) .. ")" else problem = record_problem(r) end
      if problem then
        local w = format("%s:%d: %s; line skipped", path, lineno, problem)
        warn(w)
        warnings[#warnings + 1] = w
      else
        seq = seq + 1
        r._file, r._line, r._seq = path, lineno, seq
        recs[#recs + 1] = r
      end
    end
  end
  f:close()
  if nonblank == 0 then fail("results file '" .. path .. "' is empty") end
  if #recs == 0 then fail("results file '" .. path .. "' has no valid records (" .. nonblank .. " lines skipped)") end
  return recs, seq
end

----------------------------------------------------------------------------
-- configurations
----------------------------------------------------------------------------

local function k_label(k)
  if N(k) then
    if k == floor(k) then return format("%d", k) end
    return format("%g", k)
  end
  if S(k) then return k end
  return "?"
end

-- Did any record of the list speculate?
local function speculated(recs)
  for _, r in ipairs(recs) do
    local st = r.stats
    local calls, ver = T(st.calls) or {}, T(st.verify) or {}
    if (N(calls.speculator) or 0) > 0 or (N(st.commits) or 0) > 0 or (N(st.rollbacks) or 0) > 0
      or (N(ver.accepted) or 0) + (N(ver.rejected) or 0) + (N(ver.late) or 0) > 0 then
      return true
    end
  end
  return false
end

local function most_common(values)
  local count, best, bestn = {}, nil, 0
  for _, v in ipairs(values) do
    local key = tostring(v)
    count[key] = (count[key] or 0) + 1
    if count[key] > bestn then best, bestn = v, count[key] end
  end
  return best
end

-- The k of a configuration as an x position: a number, "inf" or "auto".
local function k_position(mode, kstr, recs)
  if mode == "sequential" then return 1 end
  if kstr == "inf" or kstr == "auto" then return kstr end
  if tonumber(kstr) then return tonumber(kstr) end
  local ks = {}
  for _, r in ipairs(recs) do ks[#ks + 1] = r.stats.k end
  local k = most_common(ks)
  if N(k) then return k end
  if k == "inf" or k == "auto" then return k end
  return nil
end

-- The k of a config string "mode:k=3:m=2" ("inf", "auto", "3" or nil).
local function config_k(c)
  return (":" .. c):match("[:,]%s*k%s*=%s*([%w%.]+)")
end

-- Split the records into configurations: a list of { label, mode, kx, recs }.
local function group_records(records, o)
  local groups, order = {}, {}
  local function add(key, label, mode, kstr, r)
    local g = groups[key]
    if not g then
      g = { key = key, label = label, mode = mode, kstr = kstr, recs = {}, first = r._seq }
      groups[key] = g
      order[#order + 1] = g
    end
    g.recs[#g.recs + 1] = r
  end
  if o.group == "file" then
    for _, r in ipairs(records) do
      local mode = S(r.mode) or S(r.stats.mode)
      local kc = S(r.config) and config_k(r.config)
      add("file:" .. r._file, r._file, mode, kc, r)
    end
  else
    -- records without a config: first by (file, explicit mode, k), so a
    -- file where nothing speculated can be recognised as a sequential run
    local pending, porder = {}, {}
    for _, r in ipairs(records) do
      if S(r.config) then
        local c = r.config
        add("config:" .. c, c, c:match("^%s*([%a_][%w_%-]*)"), config_k(c), r)
      else
        local mode = S(r.mode) or S(r.stats.mode)
        -- the configured k (k_config) keeps an auto run together
        local kv = r.stats.k_config or r.stats.k
        local key = r._file .. "\0" .. tostring(mode) .. "\0" .. k_label(kv)
        local p = pending[key]
        if not p then
          p = { mode = mode, k = kv, recs = {} }
          pending[key] = p
          porder[#porder + 1] = p
        end
        p.recs[#p.recs + 1] = r
      end
    end
    for _, p in ipairs(porder) do
      local mode, kl = p.mode, k_label(p.k)
      if not mode and kl ~= "1" and not speculated(p.recs) then mode = "sequential" end
      local label
      if mode == "sequential" then label = "sequential"
      elseif mode and mode ~= "spechop" then label = mode .. " k=" .. kl
      else label = "k=" .. kl end   -- spechop is the default mode
      for _, r in ipairs(p.recs) do add("mk:" .. label, label, mode, kl, r) end
    end
  end
  for _, g in ipairs(order) do
    g.kx = k_position(g.mode, g.kstr, g.recs)
    if g.kx == nil then g.kx = "?" end
  end
  local function rank(kx)
    if N(kx) then return kx, 0 end
    if kx == "inf" then return huge, 1 end
    if kx == "auto" then return huge, 2 end
    return huge, 3
  end
  sort(order, function(a, b)
    local ra, sa = rank(a.kx)
    local rb, sb = rank(b.kx)
    if sa ~= sb then return sa < sb end
    if ra ~= rb then return ra < rb end
    local seqa, seqb = a.mode == "sequential", b.mode == "sequential"
    if seqa ~= seqb then return seqa end
    return a.first < b.first
  end)
  return order
end

----------------------------------------------------------------------------
-- statistics
----------------------------------------------------------------------------

local C_theory
local function theory()
  if C_theory == nil then
    local ok, core = pcall(require, "specula.core")
    C_theory = ok and core.C or false
  end
  return C_theory
end

local function rel_lat_star(p, a, b)
  if not (p and a and b) then return nil end
  local C = theory()
  if not C then return 1 - p * (1 - a) / (1 + b) end
  return N(tonumber(C.sp_theory_rel_lat_star(p, a, b)))
end

local function rel_lat_k(p, a, b, k)
  if not (p and a and b) then return nil end
  local C = theory()
  if not C then return nil end
  return N(tonumber(C.sp_theory_rel_lat_k(p, a, b, k)))
end

local function sd(xs, mean)
  local n = #xs
  if n < 2 then return 0 end
  local s = 0
  for i = 1, n do s = s + (xs[i] - mean) ^ 2 end
  return sqrt(s / (n - 1))
end

local function ratio_of_sums(sample)
  local w, s = 0, 0
  for i = 1, #sample do w, s = w + sample[i][1], s + sample[i][2] end
  if s <= 0 then return 0 end
  return w / s
end

-- p̂, α̂, β̂ of records: the engine's one estimator (specula.estimate).
local function ratios(recs) return estimate.of_records(recs) end

local function summarize(g, o)
  local s = { queries = #g.recs, failed = 0, sum_wall = 0, sum_std = 0, commits = 0, rollbacks = 0,
              model = 0, target = 0, speculator = 0, cancelled = 0 }
  local walls, pairs_, rl = {}, {}, {}
  -- in id order: the bootstrap resamples by position, so a merged shard file
  -- and a single machine's file give the same intervals
  local recs = pstats.by_id(g.recs)
  for i, r in ipairs(recs) do
    local st = r.stats
    if r.error ~= nil and r.error ~= json.null then s.failed = s.failed + 1 end
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
  end
  s.walls, s.rel_lats = walls, rl
  s.mean_wall = metrics.mean(walls)
  s.p50 = metrics.percentile(walls, 50)
  s.p95 = metrics.percentile(walls, 95)
  s.p99 = metrics.percentile(walls, 99)
  if s.sum_std > 0 then
    s.rel_lat = s.sum_wall / s.sum_std
    s.ci_lo, s.ci_hi = metrics.bootstrap_ci(pairs_, ratio_of_sums, { iterations = o.iterations, seed = o.seed })
  end
  s.p_hat, s.alpha_hat, s.beta_hat = ratios(recs)
  s.rel_lat_star = rel_lat_star(s.p_hat, s.alpha_hat, s.beta_hat)
  local kx = g.kx
  local kk = N(kx) or (kx == "inf" and -1) or nil
  if kk then s.rel_lat_k = rel_lat_k(s.p_hat, s.alpha_hat, s.beta_hat, kk) end
  local n = s.queries
  s.model_pq, s.target_pq, s.spec_pq = s.model / n, s.target / n, s.speculator / n
  return s
end

----------------------------------------------------------------------------
-- formatting
----------------------------------------------------------------------------

local function fnum(x, d)
  if not N(x) then return "–" end
  return format("%." .. (d or 3) .. "f", x)
end

-- A latency in ms with precision to match its size.
local function fms(x)
  if not N(x) then return "–" end
  local a = x < 0 and -x or x
  if a >= 100 then return format("%.0f", x)
  elseif a >= 10 then return format("%.1f", x)
  elseif a >= 1 then return format("%.2f", x)
  elseif a >= 0.01 then return format("%.3f", x) end
  return format("%.2g", x)
end

local PALETTE = { "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9",
                  "#332288", "#882255", "#44AA99", "#999933", "#000000", "#AA4499" }
local KIND = { model = "#0072B2", spec = "#E69F00", target = "#009E73", verify = "#CC79A7" }
local MARK = { commit = "#117733", rollback = "#C0002A", cancel = "#444444", deferred = "#8A6D00", answer = "#111111" }

local function plural(n, word, words)
  return format("%d %s", n, n == 1 and word or (words or (word .. "s")))
end

-- At most n bytes (plus an ellipsis), never cutting a UTF-8 sequence.
local function truncate(s, n)
  s = tostring(s)
  if #s <= n then return s end
  local cut = n - 1
  while cut > 0 do
    local b = s:byte(cut + 1)
    if not b or b < 0x80 or b >= 0xC0 then break end
    cut = cut - 1
  end
  return s:sub(1, cut) .. "…"
end

----------------------------------------------------------------------------
-- 1. summary table
----------------------------------------------------------------------------

local function td(key, value, text, cls)
  local dv = ""
  if value ~= nil then
    dv = type(value) == "number" and format("%.17g", value) or tostring(value)
  end
  return format('<td class="%s" data-key="%s" data-value="%s">%s</td>', cls or "num", key, esc(dv), esc(text))
end

local function summary_table(configs)
  local h = {}
  h[#h + 1] = '<div class="table-wrap"><table class="summary" id="summary-table">'
  h[#h + 1] = "<caption>Per configuration. Wall times in ms; RelLat = Σ wall / Σ standard with its bootstrap 95% CI; "
    .. "p̂, α̂, β̂ pooled over the configuration's hops; RelLat* (Corollary 1) at those values.</caption>"
  h[#h + 1] = "<thead><tr>"
    .. '<th scope="col" class="txt">Configuration</th><th scope="col">Queries</th><th scope="col">Failed</th>'
    .. '<th scope="col">Mean wall (ms)</th><th scope="col">p50</th><th scope="col">p95</th><th scope="col">p99</th>'
    .. '<th scope="col">RelLat</th><th scope="col">95% CI</th>'
    .. '<th scope="col">p̂</th><th scope="col">α̂</th><th scope="col">β̂</th><th scope="col">RelLat*</th>'
    .. '<th scope="col">Commits</th><th scope="col">Rollbacks</th>'
    .. '<th scope="col" title="model / target / speculator calls per query">Calls per query<br>(M · T · S)</th>'
    .. "</tr></thead><tbody>"
  for _, g in ipairs(configs) do
    local s = g.stats
    local row = {}
    row[#row + 1] = format('<tr class="config" data-config="%s">', esc(g.label))
    row[#row + 1] = format('<th scope="row" class="txt" data-key="config"><span class="swatch" style="background:%s"></span>%s</th>',
      g.color, esc(g.label))
    row[#row + 1] = td("queries", s.queries, tostring(s.queries))
    row[#row + 1] = td("failed", s.failed, tostring(s.failed), s.failed > 0 and "num bad" or "num")
    row[#row + 1] = td("mean_wall", s.mean_wall, fnum(s.mean_wall, 1))
    row[#row + 1] = td("p50_wall", s.p50, fnum(s.p50, 1))
    row[#row + 1] = td("p95_wall", s.p95, fnum(s.p95, 1))
    row[#row + 1] = td("p99_wall", s.p99, fnum(s.p99, 1))
    row[#row + 1] = td("rel_lat", s.rel_lat, fnum(s.rel_lat, 3), "num strong")
    row[#row + 1] = td("rel_lat_ci", s.ci_lo and format("%.17g,%.17g", s.ci_lo, s.ci_hi),
      s.ci_lo and format("[%.3f, %.3f]", s.ci_lo, s.ci_hi) or "–", "num ci")
    row[#row + 1] = td("p_hat", s.p_hat, fnum(s.p_hat, 3))
    row[#row + 1] = td("alpha_hat", s.alpha_hat, fnum(s.alpha_hat, 3))
    row[#row + 1] = td("beta_hat", s.beta_hat, fnum(s.beta_hat, 3))
    row[#row + 1] = td("rel_lat_star", s.rel_lat_star, fnum(s.rel_lat_star, 3))
    row[#row + 1] = td("commits", s.commits, tostring(s.commits))
    row[#row + 1] = td("rollbacks", s.rollbacks, tostring(s.rollbacks))
    row[#row + 1] = td("calls_per_query", format("%.17g,%.17g,%.17g", s.model_pq, s.target_pq, s.spec_pq),
      format("%.1f · %.1f · %.1f", s.model_pq, s.target_pq, s.spec_pq))
    row[#row + 1] = "</tr>"
    h[#h + 1] = concat(row)
  end
  h[#h + 1] = "</tbody></table></div>"
  return concat(h, "\n")
end

-- Paired differences of every configuration against the first row's
-- (specula.stats.paired_records: per query, matched by id).
local function paired_table(configs, o)
  if #configs < 2 then return "" end
  local base = configs[1]
  local h = {}
  h[#h + 1] = '<div class="table-wrap"><table class="summary" id="paired-table">'
  h[#h + 1] = "<caption>Paired differences against <strong>" .. esc(base.label) .. "</strong>, query by query "
    .. "(this configuration minus the baseline; queries matched by id). Mean and median with a paired bootstrap "
    .. format("95%% CI (%d resamples of queries, seed %s); ratio = Σ this / Σ baseline with its paired CI; ", o.iterations,
      tostring(o.seed))
    .. "sign p = exact two-sided binomial test on the signs of the nonzero differences; calls = model + target + "
    .. "speculator + predicted + warm-up.</caption>"
  h[#h + 1] = '<thead><tr><th scope="col" class="txt">Configuration</th><th scope="col" class="txt">Measure</th>'
    .. '<th scope="col">Pairs</th><th scope="col">Mean Δ</th><th scope="col">95% CI</th><th scope="col">Median Δ</th>'
    .. '<th scope="col">95% CI</th><th scope="col">Ratio</th><th scope="col">95% CI</th>'
    .. '<th scope="col">+ / − / =</th><th scope="col">Sign p</th></tr></thead><tbody>'
  local function ci(lo, hi, d)
    if not (N(lo) and N(hi)) then return nil, "–" end
    return format("%.17g,%.17g", lo, hi), format("[%s, %s]", fnum(lo, d), fnum(hi, d))
  end
  for i = 2, #configs do
    local g = configs[i]
    local p = pstats.paired_records(g.recs, base.recs, { iterations = o.iterations, seed = o.seed })
    for _, m in ipairs(pstats.MEASURES) do
      local r = p[m.key]
      local d = m.digits
      local row = {}
      row[#row + 1] = format('<tr class="paired" data-config="%s" data-measure="%s">', esc(g.label), m.key)
      row[#row + 1] = format('<th scope="row" class="txt">%s</th><td class="txt">%s</td>', esc(g.label), m.key)
      row[#row + 1] = td("n", r.n, tostring(r.n))
      row[#row + 1] = td("mean", r.mean, fnum(r.mean, d))
      local v, t = ci(r.mean_lo, r.mean_hi, d)
      row[#row + 1] = td("mean_ci", v, t, "num ci")
      row[#row + 1] = td("median", r.median, fnum(r.median, d))
      v, t = ci(r.median_lo, r.median_hi, d)
      row[#row + 1] = td("median_ci", v, t, "num ci")
      row[#row + 1] = td("ratio", r.ratio, fnum(r.ratio, 3))
      v, t = ci(r.ratio_lo, r.ratio_hi, 3)
      row[#row + 1] = td("ratio_ci", v, t, "num ci")
      row[#row + 1] = td("signs", format("%d,%d,%d", r.pos, r.neg, r.zero), format("%d / %d / %d", r.pos, r.neg, r.zero))
      row[#row + 1] = td("sign_p", r.sign_p, format("%.3g", r.sign_p))
      row[#row + 1] = "</tr>"
      h[#h + 1] = concat(row)
    end
  end
  h[#h + 1] = "</tbody></table></div>"
  return concat(h, "\n")
end

----------------------------------------------------------------------------
-- 2. RelLat against k
----------------------------------------------------------------------------

-- Markers get a white halo so they stay visible on top of spans.
local function marker_triangle(c, cx, cy, color, size)
  size = size or 6
  local d = format("M%s %sL%s %sL%s %sZ", num(cx), num(cy - size), num(cx + size), num(cy + size * 0.8),
    num(cx - size), num(cy + size * 0.8))
  c:path(d, { fill = "#fff", stroke = "#fff", stroke_width = 3.5, stroke_linejoin = "round" })
  c:path(d, { fill = color })
end

local function marker_cross(c, cx, cy, color, size)
  size = size or 5
  local d = format("M%s %sL%s %sM%s %sL%s %s", num(cx - size), num(cy - size), num(cx + size), num(cy + size),
    num(cx - size), num(cy + size), num(cx + size), num(cy - size))
  c:path(d, { stroke = "#fff", stroke_width = 5, stroke_linecap = "round", fill = "none" })
  c:path(d, { stroke = color, stroke_width = 2.6, stroke_linecap = "round", fill = "none" })
end

local function marker_ring(c, cx, cy, color, size)
  c:circle(cx, cy, size or 4, { fill = "#fff", stroke = color, stroke_width = 2 })
end

local function marker_square(c, cx, cy, color, size)
  size = size or 4
  c:rect(cx - size, cy - size, 2 * size, 2 * size, { fill = "#fff", stroke = color, stroke_width = 2 })
end

local function marker_diamond(c, cx, cy, color, size)
  size = size or 6
  local d = format("M%s %sL%s %sL%s %sL%s %sZ", num(cx), num(cy - size), num(cx + size), num(cy),
    num(cx), num(cy + size), num(cx - size), num(cy))
  c:path(d, { fill = "#fff", stroke = "#fff", stroke_width = 3, stroke_linejoin = "round" })
  c:path(d, { fill = color })
end

local MARKER = { commit = marker_triangle, rollback = marker_cross, cancel = marker_ring,
                 deferred = marker_square, answer = marker_diamond }

local function fig_rel_lat_k(configs, pooled)
  local W, H = 1100, 470
  local c = svg.canvas(W, H, { id = "fig-k-svg", title = "Relative latency against the thread limit k",
    desc = "RelLat of each configuration against k with bootstrap 95% confidence intervals, the theoretical "
      .. "RelLat* as a dashed line, the k = 1 baseline at 1, and the calls per query of each configuration." })
  -- left panel geometry
  local L, R, Tp, B = 74, 650, 46, 360
  -- x positions: finite k on a linear axis, then inf and auto at the right end
  local fmax, has_inf, has_auto = 1, false, false
  for _, g in ipairs(configs) do
    if N(g.kx) then fmax = max(fmax, g.kx)
    elseif g.kx == "inf" then has_inf = true
    elseif g.kx == "auto" then has_auto = true end
  end
  local gap = max(1, fmax * 0.18)
  local inf_x = fmax + gap
  local auto_x = (has_inf and inf_x or fmax) + gap
  local xmax = has_auto and auto_x or (has_inf and inf_x or fmax)
  local x = svg.linear(1 - 0.35 * gap, xmax + 0.35 * gap, L, R)
  local function xpos(kx)
    if N(kx) then return x(kx) end
    if kx == "inf" then return x(inf_x) end
    if kx == "auto" then return x(auto_x) end
    return x(xmax)
  end
  -- theory curve RelLat_k over the finite range
  local p, a, b = pooled.p_hat, pooled.alpha_hat, pooled.beta_hat
  local star = pooled.rel_lat_star
  local curve = {}
  if p and a and b then
    local steps = 80
    for i = 0, steps do
      local kk = 1 + (fmax - 1) * i / steps
      local v = rel_lat_k(p, a, b, kk)
      if v then curve[#curve + 1] = { kk, v } end
    end
  end
  -- y domain
  local lo, hi = 1, 1
  for _, g in ipairs(configs) do
    local s = g.stats
    for _, v in ipairs({ s.rel_lat, s.ci_lo, s.ci_hi }) do
      if N(v) then lo, hi = min(lo, v), max(hi, v) end
    end
  end
  if star then lo, hi = min(lo, star), max(hi, star) end
  for _, pt in ipairs(curve) do lo, hi = min(lo, pt[2]), max(hi, pt[2]) end
  local pad = max(0.02, (hi - lo) * 0.08)
  local ylo, yhi = svg.nice_domain(lo - pad, hi + pad, 6)
  local y = svg.linear(ylo, yhi, B, Tp)
  c:text(L, 24, "RelLat against k", { class = "panel-title" })
  -- x ticks
  local values, labels = {}, {}
  if fmax <= 12 then
    for k = 1, fmax do values[#values + 1] = k; labels[k] = tostring(k) end
  else
    local t = svg.nice_ticks(1, fmax, 6)
    if t[1] ~= 1 then values[1] = 1; labels[1] = "1" end
    for _, v in ipairs(t) do if v >= 1 then values[#values + 1] = v; labels[v] = k_label(v) end end
  end
  if has_inf then values[#values + 1] = inf_x; labels[inf_x] = "∞" end
  if has_auto then values[#values + 1] = auto_x; labels[auto_x] = "auto" end
  c:axis_left(y, L, { ticks = 6, grid = { L, R }, label = "RelLat (Σ wall / Σ standard)", label_offset = 52 })
  c:axis_bottom(x, B, { values = values, labels = labels, label = "k (active-thread limit)" })
  if has_inf or has_auto then
    -- an axis break between the finite range and the ∞/auto slots
    local bx = x(fmax + gap / 2)
    c:rect(bx - 5, B - 4, 10, 8, { fill = "#fff" })
    c:line(bx - 6, B + 4, bx - 2, B - 4, { stroke = "#333" })
    c:line(bx + 2, B + 4, bx + 6, B - 4, { stroke = "#333" })
  end
  -- baseline and theory
  c:line(L, y(1), R, y(1), { stroke = "#777", stroke_width = 1.5,
    tip = "standard (k = 1, no speculation): RelLat = 1" })
  c:text(R - 4, y(1) - 6, "standard (k = 1) = 1", { class = "annot", text_anchor = "end", fill = "#555" })
  if #curve > 1 then
    local pts = {}
    for i, pt in ipairs(curve) do pts[i] = { x(pt[1]), y(pt[2]) } end
    if has_inf and star then pts[#pts + 1] = { x(inf_x), y(star) } end
    c:polyline(pts, { stroke = "#666", stroke_width = 1.4, stroke_dasharray = "1.5 3.5",
      tip = "RelLat_k, Corollary 3 (bounded window), at the pooled estimates" })
  end
  if star then
    c:line(L, y(star), R, y(star), { stroke = "#222", stroke_width = 1.6, stroke_dasharray = "7 5",
      tip = format("RelLat* = %.3f (Corollary 1) at pooled p̂ = %.3f, α̂ = %.3f, β̂ = %.3f", star, p, a, b) })
    c:text(L + 6, y(star) + 15, format("RelLat* = %.3f (p̂ %.2f, α̂ %.2f, β̂ %.2f)", star, p, a, b),
      { class = "annot", fill = "#222" })
  end
  -- points: configurations sharing an x are spread a little
  local at = {}
  for _, g in ipairs(configs) do
    local key = tostring(g.kx)
    at[key] = (at[key] or 0) + 1
  end
  local seen = {}
  for _, g in ipairs(configs) do
    local s = g.stats
    if N(s.rel_lat) then
      local key = tostring(g.kx)
      seen[key] = (seen[key] or 0) + 1
      local off = (seen[key] - (at[key] + 1) / 2) * 12
      local px = xpos(g.kx) + off
      local tip = format("%s: RelLat %.3f, 95%% CI [%s, %s], %d queries", g.label, s.rel_lat,
        fnum(s.ci_lo), fnum(s.ci_hi), s.queries)
      c:open("g", { class = "point", tip = tip })
      if s.ci_lo then
        c:line(px, y(s.ci_lo), px, y(s.ci_hi), { stroke = g.color, stroke_width = 1.6 })
        c:line(px - 4, y(s.ci_lo), px + 4, y(s.ci_lo), { stroke = g.color, stroke_width = 1.6 })
        c:line(px - 4, y(s.ci_hi), px + 4, y(s.ci_hi), { stroke = g.color, stroke_width = 1.6 })
      end
      c:circle(px, y(s.rel_lat), 5, { fill = g.color, stroke = "#fff", stroke_width = 1.2 })
      c:close()
      if at[key] == 1 then
        c:text(px + 8, y(s.rel_lat) - 6, format("%.3f", s.rel_lat), { class = "annot", fill = g.color })
      end
    end
  end
  -- legend under the left panel
  local items = {}
  for _, g in ipairs(configs) do items[#items + 1] = { label = truncate(g.label, 28), color = g.color, kind = "dot" } end
  items[#items + 1] = { label = "RelLat* (Cor. 1)", color = "#222", kind = "dash" }
  if #curve > 1 then items[#items + 1] = { label = "RelLat_k (Cor. 3)", color = "#666", kind = "line", dash = "1.5 3.5" } end
  c:legend(L, B + 58, items, { wrap = R - L })
  -- right panel: calls per query, grouped bars per configuration
  local L2, R2 = 740, 1080
  local cmax = 0
  for _, g in ipairs(configs) do
    local s = g.stats
    cmax = max(cmax, s.model_pq, s.target_pq, s.spec_pq)
  end
  local Tp2 = Tp + 14
  local y2lo, y2hi = svg.nice_domain(0, max(cmax, 1) * 1.05, 5)
  local y2 = svg.linear(y2lo, y2hi, B, Tp2)
  c:text(L2, 24, "Calls per query", { class = "panel-title" })
  c:legend(L2, 44, { { label = "model", color = KIND.model }, { label = "target", color = KIND.target },
    { label = "speculator", color = KIND.spec } })
  c:axis_left(y2, L2, { ticks = 5, grid = { L2, R2 }, label = "calls per query", label_offset = 40 })
  c:line(L2, B, R2, B, { class = "axis-line" })
  local n = #configs
  local slot = (R2 - L2) / max(n, 1)
  local bw = min(16, slot / 4)
  local kinds = { { "model_pq", KIND.model, "model" }, { "target_pq", KIND.target, "target" },
                  { "spec_pq", KIND.spec, "speculator" } }
  -- labels that do not fit their slot are turned, and cut at 18 characters
  local rotate = false
  for _, g in ipairs(configs) do
    if #g.label * 6.8 > slot - 4 then rotate = true end
  end
  for i, g in ipairs(configs) do
    local s = g.stats
    local cx = L2 + slot * (i - 0.5)
    for j, kd in ipairs(kinds) do
      local v = s[kd[1]]
      local bx = cx + (j - 2) * bw - bw / 2
      c:rect(bx, y2(v), bw - 1, y2(0) - y2(v), { fill = kd[2],
        tip = format("%s: %.2f %s calls per query", g.label, v, kd[3]) })
    end
    if rotate then
      local ly = B + 14
      c:text(cx + 4, ly, truncate(g.label, 18), { class = "tick-label", text_anchor = "end", tip = g.label,
        transform = format("rotate(-35 %s %s)", num(cx + 4), num(ly)) })
    else
      c:text(cx, B + 18, g.label, { class = "tick-label", text_anchor = "middle", tip = g.label })
    end
  end
  if not rotate then
    c:text((L2 + R2) / 2, B + 38, "configuration", { class = "axis-title", text_anchor = "middle" })
  end
  return c:render()
end

----------------------------------------------------------------------------
-- 3. stage latency distributions
----------------------------------------------------------------------------

local STAGES = {
  { key = "t_seg", name = "t_seg", what = "model segment", color = KIND.model },
  { key = "t_target", name = "t_target", what = "target tool", color = KIND.target },
  { key = "t_spec", name = "t_spec", what = "speculator", color = KIND.spec },
  { key = "t_verify", name = "t_verify", what = "verifier", color = KIND.verify },
}

local function collect_stages(records)
  local data = {}
  for _, st in ipairs(STAGES) do data[st.key] = {} end
  for _, r in ipairs(records) do
    local stages = T(r.stages)
    for _, h in ipairs(stages and T(stages.hops) or {}) do
      if T(h) then
        for _, st in ipairs(STAGES) do
          local v = N(h[st.key])
          if v then local d = data[st.key]; d[#d + 1] = v end
        end
      end
    end
  end
  return data
end

local function histogram_panel(c, x0, y0, w, h, st, xs)
  local L, R, Tp, B = x0 + 56, x0 + w - 12, y0 + 40, y0 + h - 44
  c:text(x0 + 56, y0 + 18, format("%s — %s", st.name, st.what), { class = "panel-title" })
  local n = #xs
  if n == 0 then
    c:text((L + R) / 2, (Tp + B) / 2, "no measurements", { class = "annot", text_anchor = "middle" })
    return nil
  end
  local mean = metrics.mean(xs)
  local sigma = sd(xs, mean)
  local p995 = metrics.percentile(xs, 99.5)
  local xmax = max(p995, mean)
  if xmax <= 0 then xmax = 1 end
  local xlo, xhi = svg.nice_domain(0, xmax, 6)
  local nb = max(10, min(40, ceil(sqrt(n))))
  local bw = (xhi - xlo) / nb
  local counts, over = {}, 0
  for i = 1, nb do counts[i] = 0 end
  for _, v in ipairs(xs) do
    local i = floor((v - xlo) / bw) + 1
    if i < 1 then i = 1 end
    if i > nb then i = nb; if v > xhi then over = over + 1 end end
    counts[i] = counts[i] + 1
  end
  local cmax = 0
  for i = 1, nb do cmax = max(cmax, counts[i]) end
  local x = svg.linear(xlo, xhi, L, R)
  local ylo, yhi = svg.nice_domain(0, cmax * 1.12, 4)
  local y = svg.linear(ylo, yhi, B, Tp)
  c:axis_left(y, L, { ticks = 4, grid = { L, R }, label = "hops", label_offset = 40 })
  c:axis_bottom(x, B, { ticks = 6, label = st.name .. " (ms)" })
  for i = 1, nb do
    if counts[i] > 0 then
      local a, b = xlo + (i - 1) * bw, xlo + i * bw
      c:rect(x(a) + 0.5, y(counts[i]), max(1, x(b) - x(a) - 1), y(0) - y(counts[i]),
        { fill = st.color, fill_opacity = 0.85,
          tip = format("%s–%s ms: %d hops", fms(a), fms(b), counts[i]) })
    end
  end
  c:line(x(mean), Tp - 4, x(mean), B, { stroke = "#222", stroke_width = 1.4, stroke_dasharray = "5 4",
    tip = "mean " .. fms(mean) .. " ms" })
  local lines = { format("μ = %s ms", fms(mean)), format("σ = %s ms", fms(sigma)), format("n = %d", n) }
  if over > 0 then lines[#lines + 1] = format("%d above %s ms (last bin)", over, fms(xhi)) end
  for i, s in ipairs(lines) do
    c:text(R - 4, Tp + 6 + 15 * (i - 1), s, { class = "annot stat", text_anchor = "end" })
  end
  return { mean = mean, sd = sigma, n = n }
end

local function fig_stages(records)
  local data = collect_stages(records)
  local panels = {}
  for _, st in ipairs(STAGES) do
    local xs = data[st.key]
    local any = false
    for _, v in ipairs(xs) do if v > 0 then any = true break end end
    if st.key ~= "t_verify" or any then panels[#panels + 1] = st end
  end
  local cols = 2
  local pw, ph = 550, 270
  local rows = ceil(#panels / cols)
  local c = svg.canvas(pw * cols, ph * rows + 6, { id = "fig-stages-svg", title = "Distributions of stage latencies",
    desc = "Histograms of the per-hop stage latencies over all configurations, with mean and standard deviation." })
  local summary = {}
  for i, st in ipairs(panels) do
    local col, row = (i - 1) % cols, floor((i - 1) / cols)
    summary[st.key] = histogram_panel(c, col * pw, row * ph, pw, ph, st, data[st.key])
  end
  return c:render(), summary, panels
end

----------------------------------------------------------------------------
-- 4. timeline of one query
----------------------------------------------------------------------------

-- Re-create a continuous SpecHop schedule from a record's stage times: the
-- verified thread runs each hop's segment, then the target call and (k > 1)
-- the speculator; when the speculator returns a thread forks for the next
-- hop; at most k hops are in flight. An accepted guess commits that thread
-- when the target result arrives, a rejected one rolls it (and everything
-- forked from it) back, and the verified thread goes on from the real result.
local function reconstruct(rec)
  local stages = T(rec.stages) or {}
  local hops = {}
  for _, h in ipairs(T(stages.hops) or {}) do if T(h) then hops[#hops + 1] = h end end
  local n = #hops
  local k = rec.stats.k
  local K = N(k) and max(1, k) or huge
  local final_seg = N(stages.final_seg) or 0
  -- eager launch (the spechop default): a speculator starts with its target
  -- and only the new thread waits for a slot; slot launch: the speculator
  -- itself waits (records without the field were made with slot)
  local eager = rec.stats.spec_launch == "eager" and (rec.stats.mode or "spechop") == "spechop"
  local spans, marks = {}, {}
  local ntid = 0
  local function new_tid() ntid = ntid + 1 return ntid end
  local function span(tid, kind, t0, t1, spec)
    if t1 > t0 then spans[#spans + 1] = { tid = tid, kind = kind, t0 = t0, t1 = t1, speculative = spec } end
  end
  local function mark(tid, kind, t) marks[#marks + 1] = { tid = tid, kind = kind, t = t } end
  local function d(h, key) return N(h and h[key]) or 0 end

  local Sx, Tx, Cx = {}, {}, {}   -- per hop: segment start, lane, commit time

  -- A speculative branch for hop j, forked at `start` and discarded at `stop`.
  -- Its speculator waits for a thread slot like the committed chain's does.
  local function discarded(j, start, stop)
    local tid = new_tid()
    local h = hops[j]
    local seg = h and d(h, "t_seg") or final_seg
    local seg_end = start + seg
    span(tid, "model", start, min(seg_end, stop), true)
    if seg_end >= stop then
      mark(tid, "cancel", stop)
      return tid
    end
    if not h then return tid end
    local tend = seg_end + d(h, "t_target")
    span(tid, "target", seg_end, min(tend, stop), true)
    if tend > stop then mark(tid, "cancel", stop) end
    local ts = N(h.t_spec)
    if ts and K > 1 then
      local s0, cap_i = seg_end, j + 1 - K
      local slot = cap_i >= 1 and (Cx[cap_i] or huge) or -huge
      if not eager then s0 = max(s0, slot) end
      if s0 < stop then
        local send = s0 + ts
        span(tid, "spec", s0, min(send, stop), true)
        if eager then send = max(send, slot) end
        if send < stop then discarded(j + 1, send, stop) end
      end
    end
    return tid
  end

  Sx[1], Tx[1] = N(stages.init) or 0, new_tid()
  local verified = Sx[1]
  for i = 1, n do
    local h = hops[i]
    local prevC = Cx[i - 1] or -huge
    local seg_end = Sx[i] + d(h, "t_seg")
    span(Tx[i], "model", Sx[i], seg_end, Sx[i] < prevC)
    local arrive = seg_end + d(h, "t_target")
    span(Tx[i], "target", seg_end, arrive, seg_end < prevC)
    local v0 = max(arrive, prevC)
    Cx[i] = v0 + d(h, "t_verify")
    -- the speculator takes a thread slot: it starts once hop i+1-k has committed
    local ts = N(h.t_spec)
    local fork
    if ts and K > 1 then
      local s0 = seg_end
      local cap_i = i + 1 - K
      local slot = (cap_i >= 1 and Cx[cap_i]) or -huge
      if not eager then s0 = max(s0, slot) end
      if s0 < Cx[i] then
        span(Tx[i], "spec", s0, min(s0 + ts, Cx[i]), s0 < prevC)
        -- eager: the guess may wait for a slot before its thread starts
        fork = eager and max(s0 + ts, slot) or s0 + ts
      end
    end
    span(Tx[i], "verify", v0, Cx[i], false)
    if fork and fork < Cx[i] and h.spec == "accepted" then
      Sx[i + 1], Tx[i + 1] = fork, new_tid()
      mark(Tx[i + 1], "commit", Cx[i])
    else
      if fork and fork < Cx[i] then
        local tid = discarded(i + 1, fork, Cx[i])
        mark(tid, "rollback", Cx[i])
      end
      Sx[i + 1], Tx[i + 1] = Cx[i] + d(h, "t_update"), Tx[i]
    end
    verified = Cx[i]
  end
  local fs = Sx[n + 1]
  span(Tx[n + 1], "model", fs, fs + final_seg, fs < verified)
  local done = max(fs + final_seg, verified)
  mark(Tx[n + 1], "answer", done)
  local lanes = {}
  for t = 1, ntid do lanes[t] = { tid = t, name = "T" .. t } end
  return { spans = spans, marks = marks, lanes = lanes, wall = done }
end

-- The events of one query of a Chrome trace: pid -> { spans, marks, lanes }.
local function load_trace(path)
  local f, err = io.open(path, "r")
  if not f then fail("cannot open trace '" .. path .. "': " .. open_reason(path, err)) end
  local text = f:read("*a")
  f:close()
  if not text:find("%S") then fail("trace '" .. path .. "' is empty") end
  local ok, doc = pcall(require("cjson").decode, text)
  if not ok or type(doc) ~= "table" or type(doc.traceEvents) ~= "table" then
    fail("trace '" .. path .. "' is not a Chrome trace with traceEvents"
      .. (not ok and (": " .. tostring(doc)) or ""))
  end
  local procs = {}
  local function proc(pid)
    local p = procs[pid]
    if not p then
      p = { pid = pid, spans = {}, marks = {}, threads = {}, score = 0 }
      procs[pid] = p
    end
    return p
  end
  for _, e in ipairs(doc.traceEvents) do
    if type(e) == "table" and N(e.pid) then
      local p = proc(e.pid)
      local args = T(e.args) or {}
      if e.ph == "M" then
        if e.name == "process_name" and S(args.name) then
          p.name = args.name
          p.id = args.name:match("^query (.*)$") or args.name
        elseif e.name == "thread_name" and N(e.tid) and S(args.name) then
          p.threads[e.tid] = args.name
        end
      elseif e.ph == "X" and N(e.ts) and N(e.dur) and N(e.tid) then
        local t0 = e.ts / 1000
        p.spans[#p.spans + 1] = { tid = e.tid, kind = tostring(e.name), t0 = t0, t1 = t0 + e.dur / 1000,
          speculative = args.speculative == true, hop = N(args.hop), detail = S(args.detail) }
      elseif (e.ph == "i" or e.ph == "I") and N(e.ts) and N(e.tid) then
        local kind = tostring(e.name)
        p.marks[#p.marks + 1] = { tid = e.tid, kind = kind, t = e.ts / 1000, hop = N(args.hop), detail = S(args.detail) }
        if kind == "commit" or kind == "rollback" then p.score = p.score + 1 end
      end
    end
  end
  return procs
end

local function normalise_trace_proc(p)
  local t0 = huge
  for _, s in ipairs(p.spans) do t0 = min(t0, s.t0) end
  for _, m in ipairs(p.marks) do t0 = min(t0, m.t) end
  if t0 == huge then t0 = 0 end
  local tids, seen = {}, {}
  local spans, marks, tend = {}, {}, 0
  for _, s in ipairs(p.spans) do
    spans[#spans + 1] = { tid = s.tid, kind = s.kind, t0 = s.t0 - t0, t1 = s.t1 - t0, speculative = s.speculative,
      hop = s.hop, detail = s.detail }
    tend = max(tend, s.t1 - t0)
    if not seen[s.tid] then seen[s.tid] = true; tids[#tids + 1] = s.tid end
  end
  for _, m in ipairs(p.marks) do
    marks[#marks + 1] = { tid = m.tid, kind = m.kind, t = m.t - t0, hop = m.hop, detail = m.detail }
    tend = max(tend, m.t - t0)
    if not seen[m.tid] then seen[m.tid] = true; tids[#tids + 1] = m.tid end
  end
  sort(tids)
  local lanes = {}
  for i, tid in ipairs(tids) do lanes[i] = { tid = tid, name = p.threads[tid] or ("T" .. tid) } end
  return { spans = spans, marks = marks, lanes = lanes, wall = tend }
end

local KIND_NAMES = { model = "model segment", spec = "speculator", target = "target tool", verify = "verify" }

local function fig_timeline(tl)
  local lanes = tl.lanes
  local lane_h, gap = 28, 8
  local L, R, Tp = 70, 1080, 72
  local H = Tp + #lanes * (lane_h + gap) + 60
  local c = svg.canvas(1100, H, { id = "fig-timeline-svg", title = "Timeline of one query's speculation window",
    desc = "One lane per window thread; spans for model segments, speculator, target and verify calls; "
      .. "markers for commits, rollbacks, cancellations and the answer." })
  local xhi = tl.wall > 0 and tl.wall or 1
  local x0, x1 = svg.nice_domain(0, xhi, 8)
  local x = svg.linear(x0, x1, L, R)
  local lane_y = {}
  for i, ln in ipairs(lanes) do lane_y[ln.tid] = Tp + (i - 1) * (lane_h + gap) end
  local B = Tp + #lanes * (lane_h + gap) - gap + 6
  -- legend
  local items = {
    { label = "model segment", color = KIND.model }, { label = "speculator", color = KIND.spec },
    { label = "target tool", color = KIND.target },
    { label = "target (from an unverified state)", color = KIND.target, kind = "marker",
      marker = function(cv, cx, cy) cv:rect(cx - 7, cy - 5, 14, 10, { fill = "url(#hatch-spec)", stroke = KIND.target }) end },
    { label = "verify", color = KIND.verify },
  }
  for _, kd in ipairs({ "commit", "rollback", "cancel", "deferred", "answer" }) do
    local fn = MARKER[kd]
    items[#items + 1] = { label = kd, color = MARK[kd], kind = "marker", marker = function(cv, cx, cy, col) fn(cv, cx, cy, col) end }
  end
  c:raw('<defs><pattern id="hatch-spec" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
    .. '<rect width="6" height="6" fill="' .. KIND.target .. '" fill-opacity="0.35"/>'
    .. '<line x1="0" y1="0" x2="0" y2="6" stroke="' .. KIND.target .. '" stroke-width="3"/></pattern></defs>')
  c:legend(L, 22, items, { wrap = R - L })
  c:axis_bottom(x, B, { ticks = 10, grid = { Tp - 6, B }, label = "time since the query started (ms)" })
  for _, ln in ipairs(lanes) do
    local ly = lane_y[ln.tid]
    c:rect(L, ly, R - L, lane_h, { fill = "#f4f6f8" })
    c:text(L - 10, ly + lane_h / 2 + 4, ln.name, { class = "lane-label", text_anchor = "end" })
  end
  -- spans: model full height, speculator in the upper half, target in the lower half
  local order = { model = 1, target = 2, spec = 3, verify = 4 }
  local spans = {}
  for i, s in ipairs(tl.spans) do spans[i] = s end
  sort(spans, function(a, b)
    local oa, ob = order[a.kind] or 0, order[b.kind] or 0
    if oa ~= ob then return oa < ob end
    return a.t0 < b.t0
  end)
  for _, s in ipairs(spans) do
    local ly = lane_y[s.tid]
    if ly then
      local xa, xb = x(s.t0), x(s.t1)
      local w = max(1.5, xb - xa)
      local yy, hh = ly + 2, lane_h - 4
      if s.kind == "spec" then yy, hh = ly + 2, lane_h / 2 - 3
      elseif s.kind == "target" then yy, hh = ly + lane_h / 2 + 1, lane_h / 2 - 3 end
      local fill = KIND[s.kind] or "#888"
      if s.kind == "target" and s.speculative then fill = "url(#hatch-spec)" end
      local tip = format("%s%s: %s–%s ms (%s ms)%s%s", KIND_NAMES[s.kind] or s.kind,
        s.hop and (" hop " .. s.hop) or "", fms(s.t0), fms(s.t1), fms(s.t1 - s.t0),
        s.speculative and ", from an unverified state" or "", s.detail and (" — " .. s.detail) or "")
      c:rect(xa, yy, w, hh, { fill = fill, stroke = s.kind == "target" and KIND.target or nil,
        stroke_width = s.kind == "target" and 0.8 or nil, tip = tip })
    end
  end
  for _, m in ipairs(tl.marks) do
    local ly = lane_y[m.tid]
    local fn = MARKER[m.kind]
    if ly and fn then
      local mx, my = x(m.t), ly + lane_h / 2
      local tip = format("%s%s at %s ms%s", m.kind, m.hop and (" (hop " .. m.hop .. ")") or "", fms(m.t),
        m.detail and (" — " .. m.detail) or "")
      c:open("g", { class = "mark", tip = tip })
      if m.kind == "commit" or m.kind == "rollback" then
        c:line(mx, ly - 3, mx, ly + lane_h + 3, { stroke = MARK[m.kind], stroke_width = 1.2 })
      end
      fn(c, mx, my, MARK[m.kind])
      c:close()
    end
  end
  return c:render()
end

-- Choose the query of the timeline and build it; returns markup and caption.
local function timeline_section(configs, records, o)
  local tl, caption
  if o.trace then
    local procs = load_trace(o.trace)
    local chosen
    if o.query then
      for _, p in pairs(procs) do
        if p.id == o.query and (not chosen or p.pid < chosen.pid) then chosen = p end
      end
      if not chosen then fail("--query '" .. o.query .. "': no such query in trace '" .. o.trace .. "'") end
    else
      for _, p in pairs(procs) do
        if #p.spans > 0 and (not chosen or p.score > chosen.score or (p.score == chosen.score and p.pid < chosen.pid)) then
          chosen = p
        end
      end
      if not chosen then fail("trace '" .. o.trace .. "' has no spans") end
    end
    tl = normalise_trace_proc(chosen)
    local qid = tostring(chosen.id or chosen.pid)
    local text
    for _, r in ipairs(records) do
      if tostring(r.id) == qid and S(r.query) then text = r.query break end
    end
    local nc, nr = 0, 0
    for _, m in ipairs(tl.marks) do
      if m.kind == "commit" then nc = nc + 1 elseif m.kind == "rollback" then nr = nr + 1 end
    end
    caption = format("Query %s%s, recorded in trace %s: %s, %s, %s, %s ms from the first "
      .. "to the last event (measured events).", qid, text and (" “" .. truncate(text, 160) .. "”") or "", o.trace,
      plural(#tl.lanes, "thread"),
      plural(nc, "commit"), plural(nr, "rollback"), fms(tl.wall))
  else
    local best, bestg
    for _, g in ipairs(configs) do
      for _, r in ipairs(g.recs) do
        if (not o.query or tostring(r.id) == o.query) and T(r.stages) then
          local score = (N(r.stats.commits) or 0) + (N(r.stats.rollbacks) or 0)
          if not best or score > best.score then best, bestg = { r = r, score = score }, g end
        end
      end
    end
    if not best then
      if o.query then fail("--query '" .. o.query .. "': no record with that id and stage times") end
      return nil, "No record carries stage times, so no timeline can be drawn."
    end
    local r = best.r
    tl = reconstruct(r)
    local nc, nr = 0, 0
    for _, m in ipairs(tl.marks) do
      if m.kind == "commit" then nc = nc + 1 elseif m.kind == "rollback" then nr = nr + 1 end
    end
    caption = format("Query %s%s (configuration %s, %s:%d): reconstructed, not measured — a continuous "
      .. "k = %s schedule re-created from the record's stage times (%s, %s; reconstructed "
      .. "wall %s ms against %s ms measured). Discarded speculative branches reuse the next hops' durations. "
      .. "Pass --trace with the run's trace to draw the recorded events instead.",
      tostring(r.id), S(r.query) and (" “" .. truncate(r.query, 160) .. "”") or "", bestg.label, r._file, r._line,
      k_label(r.stats.k), plural(nc, "commit"), plural(nr, "rollback"),
      fms(tl.wall), fms(r.stats.wall_ms))
  end
  return fig_timeline(tl), caption
end

----------------------------------------------------------------------------
-- 5. per-query RelLat
----------------------------------------------------------------------------

local function fig_rel_lat_dist(configs, pooled)
  local n = #configs
  local row_h = 46
  local L, R, Tp = 190, 1070, 40
  local B = Tp + n * row_h + 4
  local c = svg.canvas(1100, B + 70, { id = "fig-queries-svg", title = "Per-query relative latency",
    desc = "For each configuration, every query's RelLat as a dot, with the interquartile box, the median, "
      .. "the 5th to 95th percentile whiskers and the mean." })
  local lo, hi = 1, 1
  for _, g in ipairs(configs) do
    for _, v in ipairs(g.stats.rel_lats) do lo, hi = min(lo, v), max(hi, v) end
  end
  if pooled.rel_lat_star then lo = min(lo, pooled.rel_lat_star) end
  local pad = max(0.02, (hi - lo) * 0.04)
  local xlo, xhi = svg.nice_domain(lo - pad, hi + pad, 8)
  local x = svg.linear(xlo, xhi, L, R)
  c:axis_bottom(x, B, { ticks = 10, grid = { Tp - 8, B }, label = "RelLat of the query (wall / standard)" })
  c:line(x(1), Tp - 8, x(1), B, { stroke = "#777", stroke_width = 1.5, tip = "standard: RelLat = 1" })
  c:text(x(1) + 4, Tp - 12, "standard", { class = "annot", fill = "#555" })
  if pooled.rel_lat_star then
    local sx = x(pooled.rel_lat_star)
    c:line(sx, Tp - 8, sx, B, { stroke = "#222", stroke_width = 1.6, stroke_dasharray = "7 5",
      tip = format("RelLat* = %.3f at the pooled estimates", pooled.rel_lat_star) })
    c:text(sx - 4, Tp - 12, format("RelLat* %.3f", pooled.rel_lat_star), { class = "annot", text_anchor = "end" })
  end
  for i, g in ipairs(configs) do
    local cy = Tp + (i - 0.5) * row_h
    local xs = g.stats.rel_lats
    c:text(L - 12, cy + 4, truncate(g.label, 26), { class = "lane-label", text_anchor = "end", tip = g.label })
    if i > 1 then c:line(L, Tp + (i - 1) * row_h, R, Tp + (i - 1) * row_h, { stroke = "#eee" }) end
    if #xs > 0 then
      local q = function(p) return metrics.percentile(xs, p) end
      local p5, p25, p50, p75, p95 = q(5), q(25), q(50), q(75), q(95)
      local mean = metrics.mean(xs)
      c:open("g", { class = "box", tip = format("%s: %d queries; median %.3f, IQR [%.3f, %.3f], 5–95%% [%.3f, %.3f], mean %.3f",
        g.label, #xs, p50, p25, p75, p5, p95, mean) })
      c:line(x(p5), cy, x(p25), cy, { stroke = "#555" })
      c:line(x(p75), cy, x(p95), cy, { stroke = "#555" })
      c:line(x(p5), cy - 6, x(p5), cy + 6, { stroke = "#555" })
      c:line(x(p95), cy - 6, x(p95), cy + 6, { stroke = "#555" })
      c:rect(x(p25), cy - 12, max(1, x(p75) - x(p25)), 24, { fill = g.color, fill_opacity = 0.12, stroke = g.color })
      c:line(x(p50), cy - 12, x(p50), cy + 12, { stroke = g.color, stroke_width = 2.5 })
      c:close()
      -- every query as a dot, spread vertically by a fixed hash of its rank
      local sorted = {}
      for j, v in ipairs(xs) do sorted[j] = v end
      sort(sorted)
      -- (at most 1,000 dots per row: beyond that, 1,000 evenly spaced quantiles)
      local ndots = min(#sorted, 1000)
      for j = 1, ndots do
        local v = sorted[ndots == #sorted and j or (floor((j - 1) * (#sorted - 1) / (ndots - 1)) + 1)]
        local jit = ((j * 2654435761) % 1000) / 1000 - 0.5
        c:circle(x(v), cy + jit * 18, 2.2, { fill = g.color, fill_opacity = 0.55 })
      end
      marker_diamond(c, x(mean), cy, "#111", 5)
    end
  end
  c:legend(L, B + 58, {
    { label = "query", color = "#555", kind = "dot" },
    { label = "median and interquartile box", color = "#555", kind = "line" },
    { label = "mean", color = "#111", kind = "marker", marker = function(cv, cx, cy, col) marker_diamond(cv, cx, cy, col, 5) end },
    { label = "RelLat* (pooled)", color = "#222", kind = "dash" },
  })
  return c:render()
end

----------------------------------------------------------------------------
-- the page
----------------------------------------------------------------------------

local CSS = [[
:root { --ink: #1d2433; --muted: #5b6475; --rule: #d9dee7; --band: #f6f8fb; --accent: #0072B2; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: #fff;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 28px 24px 60px; }
header { border-bottom: 3px solid var(--accent); margin-bottom: 18px; padding-bottom: 10px; }
h1 { font-size: 26px; margin: 0 0 4px; letter-spacing: -0.01em; }
h2 { font-size: 19px; margin: 34px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--rule); }
.meta, figcaption, .note { color: var(--muted); font-size: 13.5px; }
nav ol { margin: 6px 0 0; padding-left: 20px; columns: 2; font-size: 14px; }
nav a, .meta a { color: var(--accent); text-decoration: none; }
.table-wrap { overflow-x: auto; }
table.summary { border-collapse: collapse; width: 100%; font-size: 12.5px; font-variant-numeric: tabular-nums; }
table.summary caption { caption-side: bottom; text-align: left; color: var(--muted); padding-top: 6px; font-size: 12.5px; }
table.summary th, table.summary td { padding: 5px 6px; border-bottom: 1px solid var(--rule); white-space: nowrap; }
table.summary thead th { background: var(--band); font-weight: 600; text-align: right; border-bottom: 2px solid #b9c1cf;
  white-space: normal; vertical-align: bottom; line-height: 1.25; }
table.summary tbody tr:nth-child(even) { background: #fbfcfd; }
table.summary .txt { text-align: left; }
table.summary td.num { text-align: right; }
table.summary td.strong { font-weight: 700; }
table.summary td.ci { color: var(--muted); }
table.summary td.bad { color: #C0002A; font-weight: 600; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 50%; margin-right: 7px; vertical-align: -1px; }
figure { margin: 10px 0 0; }
figure svg { width: 100%; height: auto; display: block; }
svg text { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; fill: #222; }
svg .tick-label { font-size: 11.5px; fill: #444; }
svg .axis-title { font-size: 12.5px; fill: #222; }
svg .panel-title { font-size: 14px; font-weight: 600; fill: #1d2433; }
svg .annot { font-size: 11.5px; }
svg .stat { font-variant-numeric: tabular-nums; }
svg .legend-label { font-size: 12px; fill: #333; }
svg .lane-label { font-size: 12px; fill: #333; font-weight: 600; }
svg .grid { stroke: #e8ebf0; stroke-width: 1; }
svg .axis-line, svg .tick { stroke: #333; stroke-width: 1; }
.warnings { background: #fff7e6; border: 1px solid #f1d9a6; padding: 8px 12px; border-radius: 4px; font-size: 13px; }
.warnings li { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; }
dl.methods dt { font-weight: 600; margin-top: 8px; }
dl.methods dd { margin: 2px 0 0 0; color: #333; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.92em; background: var(--band); padding: 0 3px; border-radius: 3px; }
]]

local function methods_note(pooled, iterations)
  return concat({
    '<dl class="methods">',
    "<dt>Standard latency</dt><dd>The latency of the same committed trajectory run without speculation: "
      .. "the hops back to back, <code>init + Σ (t_seg + t_target + t_update) + final segment</code>, "
      .. "from the stage times the loop measured (queueing included).</dd>",
    "<dt>RelLat</dt><dd>Relative latency of a configuration: <code>Σ wall / Σ standard</code> over its "
      .. "queries (1 = no gain; lower is faster). Failed queries count with the time they took. "
      .. format("The 95%% CI resamples queries with replacement (%d resamples, percentile method, fixed seed) ", iterations)
      .. "and recomputes the ratio of sums.</dd>",
    "<dt>p̂, α̂, β̂</dt><dd>p̂ = accepted / (accepted + rejected) speculations; α̂ = mean t_spec / mean t_target; "
      .. "β̂ = mean t_seg / mean t_target, each pooled over the hops of a configuration (the figure's theory lines "
      .. "pool all configurations" .. (pooled.p_hat and format(": p̂ = %.3f, α̂ = %.3f, β̂ = %.3f", pooled.p_hat,
        pooled.alpha_hat or 0, pooled.beta_hat or 0) or "") .. ").</dd>",
    "<dt>RelLat* and RelLat_k</dt><dd>RelLat* = 1 − p(1 − α)/(1 + β) is the unbounded-thread limit (Corollary 1); "
      .. "RelLat_k = (β + α + (1 − α)(1 − p)/(1 − p^k))/(1 + β) is the bounded-window prediction for k threads "
      .. "(Corollary 3).</dd>",
    "<dt>Stage latencies</dt><dd>t_seg: the model's segment before a tool call; t_target: the real tool call; "
      .. "t_spec: the speculator; t_verify: the verifier. One value per committed hop; μ is the mean and σ the "
      .. "sample standard deviation.</dd>",
    "</dl>" }, "\n")
end

local function render(o, configs, records, warnings, pooled)
  local title = o.title or "specula report"
  local nq = #records
  local files = {}
  for _, f in ipairs(o.files) do files[#files + 1] = "<code>" .. esc(f) .. "</code>" end
  local fig_k = fig_rel_lat_k(configs, pooled)
  local fig_st, st_summary, panels = fig_stages(records)
  local fig_tl, tl_caption = timeline_section(configs, records, o)
  local fig_q = fig_rel_lat_dist(configs, pooled)
  local h = {}
  local function add(s) h[#h + 1] = s end
  add("<!DOCTYPE html>")
  add('<html lang="en"><head><meta charset="utf-8">')
  add('<meta name="viewport" content="width=device-width, initial-scale=1">')
  add("<title>" .. esc(title) .. "</title>")
  add("<style>" .. CSS .. "</style></head><body><main>")
  add("<header><h1>" .. esc(title) .. "</h1>")
  add(format('<p class="meta">%d queries in %d configuration%s, from %s.%s</p></header>', nq, #configs,
    #configs == 1 and "" or "s", concat(files, ", "),
    o.trace and (" Timeline from trace <code>" .. esc(o.trace) .. "</code>.") or ""))
  add('<nav aria-label="Contents"><ol><li><a href="#summary">Summary per configuration</a></li>'
    .. '<li><a href="#fig-k">RelLat against k</a></li><li><a href="#fig-stages">Stage latencies</a></li>'
    .. '<li><a href="#fig-timeline">Timeline of one query</a></li><li><a href="#fig-queries">Per-query RelLat</a></li>'
    .. '<li><a href="#methods">Methods</a></li></ol></nav>')
  add('<section id="summary"><h2>1. Summary per configuration</h2>')
  add(summary_table(configs))
  add(paired_table(configs, o))
  if #warnings > 0 then
    add(format('<details class="warnings"><summary>%d input line%s skipped</summary><ul>', #warnings,
      #warnings == 1 and "" or "s"))
    for i, w in ipairs(warnings) do
      if i > 50 then add(format("<li>… and %d more</li>", #warnings - 50)) break end
      add("<li>" .. esc(w) .. "</li>")
    end
    add("</ul></details>")
  end
  add("</section>")
  add('<section id="fig-k"><h2>2. Relative latency against k</h2><figure>')
  add(fig_k)
  local right_end = ""
  for _, g in ipairs(configs) do
    if g.kx == "inf" or g.kx == "auto" then right_end = " (∞ and auto at the right end)" end
  end
  add("<figcaption>Left: RelLat of each configuration (dots) with its bootstrap 95% CI (whiskers), against the "
    .. "active-thread limit k" .. right_end .. ". The dashed line is the theoretical RelLat* "
    .. (pooled.rel_lat_star and format("= %.3f ", pooled.rel_lat_star) or "")
    .. "(Corollary 1) at the pooled p̂, α̂, β̂; the dotted curve is RelLat_k (Corollary 3); the grey line is "
    .. "the standard baseline (k = 1) at 1. Right: model, target and speculator calls per query — "
    .. "the compute paid for the latency.</figcaption></figure></section>")
  add('<section id="fig-stages"><h2>3. Stage latencies</h2><figure>')
  add(fig_st)
  local notes = {}
  for _, st in ipairs(panels) do
    local s = st_summary[st.key]
    if s then notes[#notes + 1] = format("%s μ = %s ms, σ = %s ms", st.name, fms(s.mean), fms(s.sd)) end
  end
  add(format("<figcaption>Distribution of each stage's latency per hop, pooled over all configurations (%s). "
    .. "The dashed line marks the mean.</figcaption></figure></section>", esc(concat(notes, "; "))))
  add('<section id="fig-timeline"><h2>4. Timeline of one query</h2><figure>')
  if fig_tl then add(fig_tl) end
  add("<figcaption>" .. esc(tl_caption) .. " One lane per window thread; the speculator runs in the upper half "
    .. "of a lane and the target call in the lower half, next to each other.</figcaption></figure></section>")
  add('<section id="fig-queries"><h2>5. Per-query relative latency</h2><figure>')
  add(fig_q)
  add("<figcaption>Each dot is one query's wall / standard latency; boxes span the interquartile range with the "
    .. "median as a bar, whiskers the 5th to 95th percentiles, the diamond the mean of the per-query ratios "
    .. "(the table's RelLat is the ratio of sums, which weighs long queries more).</figcaption></figure></section>")
  add('<section id="methods"><h2>Methods</h2>')
  add(methods_note(pooled, o.iterations))
  add("</section></main></body></html>")
  return concat(h, "\n") .. "\n"
end

----------------------------------------------------------------------------
-- main
----------------------------------------------------------------------------

function M.main(args)
  local ok, o = pcall(parse_args, args or {})
  if not ok then
    if type(o) == "table" and o[USAGE] then
      io.stderr:write("specula report: " .. o[USAGE] .. "\n" .. usage_text)
      require("specula.cli").set_exit(2)
      return
    end
    error(o, 0)
  end
  if o.help then io.stdout:write(usage_text) return end
  local records, warnings, seq = {}, {}, 0
  for _, path in ipairs(o.files) do
    local recs
    recs, seq = load_file(path, seq, warnings)
    for _, r in ipairs(recs) do records[#records + 1] = r end
  end
  local configs = group_records(records, o)
  for i, g in ipairs(configs) do
    g.color = PALETTE[(i - 1) % #PALETTE + 1]
    g.stats = summarize(g, o)
  end

  local pooled = {}
  pooled.p_hat, pooled.alpha_hat, pooled.beta_hat = ratios(records)
  pooled.rel_lat_star = rel_lat_star(pooled.p_hat, pooled.alpha_hat, pooled.beta_hat)
  local html = render(o, configs, records, warnings, pooled)
  local f, err = io.open(o.out, "w")
  if not f then fail("cannot write '" .. o.out .. "': " .. open_reason(o.out, err)) end
  -- a full disk shows at the write, the flush or the close: check all three
  local ok, werr = f:write(html)
  if ok then ok, werr = f:flush() end
  local cok, cerr = f:close()
  if ok and not cok then ok, werr = false, cerr end
  if not ok then
    local C = require("specula.core").C
    local note = ""
    if C.sp_host_path_kind(o.out) == 1 and os.remove(o.out) then note = " (the incomplete file was removed)" end
    fail("cannot write '" .. o.out .. "': " .. tostring(werr) .. note)
  end
  io.stderr:write(format("specula report: wrote %s (%d queries, %d configuration%s%s)\n", o.out, #records, #configs,
    #configs == 1 and "" or "s", #warnings > 0 and format(", %d lines skipped", #warnings) or ""))
end

-- exposed for tests
M._reconstruct = reconstruct
M._group = group_records

return M
