-- specula.compare: `specula run AGENT --input Q --compare "sequential,spechop:k=3,..."`
-- runs every query under every configuration and prints one table row per
-- configuration. On the simulated backend the keyed draws make the
-- comparison exact (every configuration sees the same latencies and
-- speculation outcomes); on real endpoints it reports what was measured.
local sched = require "specula.sched"
local json = require "specula.json"
local metrics = require "specula.metrics"
local runner = require "specula.runner"

local format, concat = string.format, table.concat

local M = {}

-- "spechop:k=3:m=2" -> { name = "spechop:k=3:m=2", mode = "spechop", k = 3, m = 2 }
function M.parse(list)
  if type(list) ~= "string" or list == "" then
    sched.plain_error("specula run: --compare expects a list like \"sequential,spechop:k=3,spechop:k=inf\"")
  end
  local out, seen = {}, {}
  for item in list:gmatch("[^,]+") do
    item = item:gsub("^%s+", ""):gsub("%s+$", "")
    local parts = {}
    for p in item:gmatch("[^:]+") do parts[#parts + 1] = p end
    local c = { name = item, mode = parts[1] }
    if not runner.MODES[c.mode] then
      sched.plain_error("specula run: --compare: unknown mode '" .. tostring(c.mode) .. "' in '" .. item
        .. "' (use sequential, window or spechop)")
    end
    for i = 2, #parts do
      local k, v = parts[i]:match("^(%w[%w_]*)=(.+)$")
      if not k then sched.plain_error("specula run: --compare: bad option '" .. parts[i] .. "' in '" .. item .. "'") end
      if k == "k" then c.k = runner.parse_k(v)
      elseif k == "m" then c.m = runner.parse_opt("m", v)
      elseif k == "predict" or k == "match" or k == "trigger" then c[k] = v
      elseif k == "eps" then c.eps = runner.parse_opt("eps", v)
      else sched.plain_error("specula run: --compare: unknown option '" .. k .. "' in '" .. item .. "'") end
    end
    if seen[item] then sched.plain_error("specula run: --compare lists '" .. item .. "' twice") end
    seen[item] = true
    out[#out + 1] = c
  end
  return out
end

local function answer_of(r)
  local a = r.answer
  if type(a) == "table" then a = a.answer or a.text or json.encode(a) end
  return a ~= nil and tostring(a) or nil
end

-- The numbers of one configuration's rows (pure: the spec recomputes them).
function M.summarise(recs, baseline)
  local walls, pairs_, calls = {}, {}, { model = 0, target = 0, speculator = 0 }
  local cancelled, wasted_calls, wasted_cost, failed = 0, 0, 0, 0
  local em, f1, ngold, agree, nagree = 0, 0, 0, 0, 0
  for i, r in ipairs(recs) do
    if r.error then failed = failed + 1 end
    local s = r.stats
    if s then
      walls[#walls + 1] = s.wall_ms
      pairs_[#pairs_ + 1] = { s.wall_ms, s.standard_ms }
      calls.model = calls.model + s.calls.model
      calls.target = calls.target + s.calls.target
      calls.speculator = calls.speculator + s.calls.speculator
      cancelled = cancelled + s.cancelled.total
      wasted_calls = wasted_calls + s.wasted_calls
      wasted_cost = wasted_cost + s.wasted_cost
    end
    local gold = r.gold
    if type(gold) == "table" and #gold == 0 then gold = nil end   -- no gold answer given
    local ans = answer_of(r)
    if gold ~= nil and ans then
      ngold = ngold + 1
      em = em + metrics.em(ans, gold)
      f1 = f1 + metrics.f1(ans, gold)
    end
    if baseline and baseline[i] then
      nagree = nagree + 1
      if json.canonical({ r.answer, r.trajectory }) == json.canonical({ baseline[i].answer, baseline[i].trajectory }) then
        agree = agree + 1
      end
    end
  end
  local n = #recs
  local row = { queries = n, failed = failed }
  if #walls > 0 then
    row.mean = metrics.mean(walls)
    row.p50 = metrics.percentile(walls, 50)
    row.p95 = metrics.percentile(walls, 95)
    row.p99 = metrics.percentile(walls, 99)
    local function rel(sample)
      local w, s = 0, 0
      for _, p in ipairs(sample) do w, s = w + p[1], s + p[2] end
      return s > 0 and w / s or 0
    end
    row.rel_lat_lo, row.rel_lat_hi, row.rel_lat = metrics.bootstrap_ci(pairs_, rel, { iterations = 1000, seed = 1 })
  end
  row.model_per_q = calls.model / math.max(n, 1)
  row.target_per_q = calls.target / math.max(n, 1)
  row.spec_per_q = calls.speculator / math.max(n, 1)
  row.cancelled = cancelled
  row.wasted_calls = wasted_calls
  row.wasted_cost = wasted_cost
  if ngold > 0 then row.em, row.f1 = em / ngold, f1 / ngold end
  if nagree > 0 then row.agreement = agree / nagree end
  return row
end

local function f(x, d) if x == nil then return "-" end return format("%." .. (d or 1) .. "f", x) end

function M.table_text(configs, rows)
  local lines = {}
  local head = format("%-22s %5s %8s %8s %8s %8s  %-22s %6s %6s %6s %7s %7s %9s %6s %6s %7s",
    "configuration", "n", "mean", "p50", "p95", "p99", "RelLat [95% CI]", "M/q", "T/q", "S/q",
    "cancel", "wasted", "cost", "EM", "F1", "agree")
  lines[1] = head
  lines[2] = string.rep("-", #head)
  for i, c in ipairs(configs) do
    local r = rows[i]
    local rl = r.rel_lat and format("%.3f [%.3f, %.3f]", r.rel_lat, r.rel_lat_lo, r.rel_lat_hi) or "-"
    lines[#lines + 1] = format("%-22s %5d %8s %8s %8s %8s  %-22s %6s %6s %6s %7d %7d %9s %6s %6s %7s",
      c.name, r.queries, f(r.mean), f(r.p50), f(r.p95), f(r.p99), rl, f(r.model_per_q, 2), f(r.target_per_q, 2),
      f(r.spec_per_q, 2), r.cancelled, r.wasted_calls, f(r.wasted_cost, 4), r.em and f(100 * r.em) or "-",
      r.f1 and f(100 * r.f1) or "-", r.agreement and format("%.1f%%", 100 * r.agreement) or "-")
  end
  lines[#lines + 1] = "(latencies in ms per query; RelLat = Σ wall / Σ standard with a bootstrap 95% CI over queries;"
  lines[#lines + 1] = " M/T/S = model, target and speculator calls per query; agree = trajectory and answer equal to sequential)"
  return concat(lines, "\n")
end

function M.main(agent, o, queries, script)
  local configs = M.parse(o.compare)
  local skip = {}
  if o.out then
    runner.done_ids(o.out)   -- repairs a cut-off last line
    local f = io.open(o.out, "r")
    if f then
      for line in f:lines() do
        local r = json.decode(line)
        if type(r) == "table" and r.id ~= nil and r.config then skip[r.config .. "\0" .. tostring(r.id)] = r end
      end
      f:close()
    end
  end
  local out = io.stdout
  if o.out then
    local fh, err = io.open(o.out, "a")
    if not fh then sched.plain_error("specula run: cannot open --out file: " .. tostring(err)) end
    out = fh
  end
  local all = {}
  for ci, c in ipairs(configs) do
    local oc = {}
    for k, v in pairs(o) do oc[k] = v end
    oc.mode = c.mode
    oc.k = c.k or (c.mode == "sequential" and 1 or o.k)
    oc.m = c.m or o.m
    oc.eps = c.eps or o.eps
    oc.predict = c.predict or o.predict
    oc.match = c.match or o.match
    oc.trigger = c.trigger or o.trigger
    local missing, kept = {}, {}
    for i, q in ipairs(queries) do
      local prev = skip[c.name .. "\0" .. tostring(q.id)]
      if prev then kept[i] = prev else missing[#missing + 1] = { q = q, i = i } end
    end
    local run = runner.make_run(agent, oc, script)
    local list = {}
    for j, t in ipairs(missing) do list[j] = t.q end
    local show = o.progress or (not o.quiet and o.out ~= nil and runner.isatty(2))
    if show then io.stderr:write(format("%s:\n", c.name)) end
    local emit = runner.record_writer(out, c.name)
    local got = runner.run_all(run, list, emit, runner.progress_line(show))
    local recs = {}
    for i in ipairs(queries) do recs[i] = kept[i] end
    for j, t in ipairs(missing) do recs[t.i] = got[j] end
    all[ci] = recs
  end
  if o.out then out:close() end
  local base
  for ci, c in ipairs(configs) do if c.mode == "sequential" then base = all[ci] break end end
  local rows = {}
  for ci in ipairs(configs) do rows[ci] = M.summarise(all[ci], base) end
  print(M.table_text(configs, rows))
  if o.summary then
    for ci, c in ipairs(configs) do rows[ci].config = c.name end
    local fh, err = io.open(o.summary, "w")
    if not fh then sched.plain_error("specula run: cannot write --summary: " .. tostring(err)) end
    fh:write(json.encode(rows), "\n")
    fh:close()
  end
  local failed = 0
  for ci in ipairs(configs) do failed = failed + rows[ci].failed end
  if failed > 0 then require("specula.cli").set_exit(3) end
end

return M
