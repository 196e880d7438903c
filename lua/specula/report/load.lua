-- specula.report.load: the inputs of `specula report`. Results files are
-- read record by record (a malformed line is a FILE:LINE warning, not an
-- error), the records are grouped into configurations, and a Chrome trace is
-- read into its queries' events for the timeline.
--
-- Records are grouped by their `config` string (set by `--compare` runs);
-- records without one by their mode and stats.k, or one group per input file
-- with `--group file`. A results record does not name its mode: a (file, k)
-- group in which no query speculated at all is taken for a sequential run.

local json = require "specula.json"
local common = require "specula.report.common"
local lines_of = require("specula.internal.lines").lines   -- NUL-safe file:lines()
local compressed_hint = require("specula.internal.lines").compressed_hint

local format, huge = string.format, math.huge
local sort = table.sort
local type, tostring, tonumber, ipairs, pcall = type, tostring, tonumber, ipairs, pcall
local N, S, T, k_label = common.N, common.S, common.T, common.k_label
local fail, warn, open_reason = common.fail, common.warn, common.open_reason

local M = {}

-- Why a decoded line is not a usable results record (nil when it is).
local function record_problem(r)
  if type(r) ~= "table" then return "not a JSON object" end
  local st = T(r.stats)
  if r.error ~= nil and r.error ~= json.null then
    -- a failed query: a failure to count, not a line to skip, whatever its
    -- stats hold (none when its window never ran); no figure reads them
    if r.config ~= nil and not S(r.config) then return "config is not a string" end
    if not st then r.stats = {} end
    return nil
  end
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
  -- a directory opens but cannot be read
  local _, rerr = f:read(0)
  if rerr then
    f:close()
    fail("cannot read results file '" .. path .. "': " .. open_reason(path, rerr))
  end
  local recs, lineno, nonblank = {}, 0, 0
  -- a record naming its run only takes the rest from the run's first record
  -- above it (specula.provenance.reader)
  local rd = require("specula.provenance").reader()
  for line in lines_of(f) do
    lineno = lineno + 1
    if line:find("%S") then
      nonblank = nonblank + 1
      local r, derr = json.decode(line)
      -- a compressed file: what to do, not a warning a line
      local packed = r == nil and lineno == 1 and compressed_hint(path, line)
      if packed then
        f:close()
        fail(path .. ": " .. packed)
      end
      local problem
      if r == nil then problem = "invalid JSON (" .. tostring(derr) .. ")" else problem = record_problem(r) end
      if problem then
        -- skipped, but a run's whole provenance on it still counts below
        if type(r) == "table" then rd:expand(r, path, lineno) end
        local w = format("%s:%d: %s; line skipped", path, lineno, problem)
        warn(w)
        warnings[#warnings + 1] = w
      else
        -- an edited provenance is refused, as by every reader of records
        local ok, why = rd:expand(r, path, lineno)
        if not ok then
          f:close()
          fail(why)
        end
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
M.file = load_file

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
    -- two runs never share a group (specula.provenance): same label, other run
    local p = T(r.provenance)
    local run = p and S(p.run)
    if run then key = key .. "\0" .. run end
    local g = groups[key]
    if not g then
      g = { key = key, label = label, mode = mode, kstr = kstr, recs = {}, first = r._seq, prov = run and p or nil }
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
        -- a labelled configuration (--compare "...:label=fast") names no
        -- mode or k: its provenance and stats do
        local pc = T(r.provenance) and T(r.provenance.config)
        local mode = (pc and S(pc.mode)) or S(r.stats.mode) or c:match("^%s*([%a_][%w_%-]*)")
        local kc = config_k(c) or (pc and pc.k ~= nil and tostring(pc.k)) or nil
        add("config:" .. c, c, mode, kc, r)
      else
        -- (a failed record without stats: its run's provenance names them)
        local pc = T(r.provenance) and T(r.provenance.config)
        local mode = S(r.mode) or S(r.stats.mode) or (pc and S(pc.mode))
        -- the configured k (k_config) keeps an auto run together
        local kv = r.stats.k_config or r.stats.k
        if kv == nil and pc then kv = pc.k end
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
  -- runs that share a label are told apart by the first field where they differ
  local by_label = {}
  for _, g in ipairs(order) do
    local l = by_label[g.label]
    if not l then l = {} by_label[g.label] = l end
    l[#l + 1] = g
  end
  for _, l in pairs(by_label) do
    if #l > 1 then
      local provs = {}
      for i, g in ipairs(l) do provs[i] = g.prov end
      local tags = require("specula.provenance").distinguish(provs, #l)
      for i, g in ipairs(l) do g.label = g.label .. " [" .. tags[i] .. "]" end
    end
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
M.group = group_records

-- The events of one query of a Chrome trace: pid -> { spans, marks, lanes }.
local function load_trace(path)
  local f, err = io.open(path, "r")
  if not f then fail("cannot open trace '" .. path .. "': " .. open_reason(path, err)) end
  local _, rerr = f:read(0)
  if rerr then
    f:close()
    fail("cannot read trace '" .. path .. "': " .. open_reason(path, rerr))
  end
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
  -- the runs it says it holds (a trace written before it said so, or by
  -- another program: nil)
  local sp = T(doc.specula)
  local runs = sp and T(sp.runs) or nil
  return procs, runs
end
M.trace = load_trace

return M
