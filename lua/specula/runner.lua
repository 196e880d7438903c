-- specula.runner: `specula run AGENT.lua [options]` — runs an agent over
-- queries, one speculation window (engine/sp_window.c) per query, many
-- queries concurrently on the one loop, and writes one JSON result per query.
local core = require "specula.core"
local sched = require "specula.sched"
local json = require "specula.json"
local agentlib = require "specula.agent"
local policylib = require "specula.policy"
local optslib = require "specula.opts"
local ffi = core.ffi
local C = core.C

local type, tostring, tonumber, pairs, ipairs, error, format =
  type, tostring, tonumber, pairs, ipairs, error, string.format

local utf8_clean = json.utf8_clean

local M = {}

local MODES = { sequential = C.SP_MODE_SEQUENTIAL, window = C.SP_MODE_WINDOW, spechop = C.SP_MODE_SPECHOP }
M.MODES = MODES
local LAUNCH = { eager = C.SP_LAUNCH_EAGER, slot = C.SP_LAUNCH_SLOT }
M.LAUNCH = LAUNCH
local SPEC_NAMES = core.SPEC_NAMES
local MATCH = { exact = C.SP_MATCH_EXACT, name_only = C.SP_MATCH_NAME_ONLY, similar = C.SP_MATCH_SIMILAR }
local TRIGGER = { start = C.SP_TRIGGER_START, tool_name = C.SP_TRIGGER_TOOL_NAME,
                  both = C.SP_TRIGGER_START + C.SP_TRIGGER_TOOL_NAME }

local usage_text = [[
usage: specula run AGENT.lua [--query TEXT | --input FILE] [options]
  --query TEXT          run one query
  --input FILE          JSONL {"id", "query", ...} per line (or a HotpotQA/2Wiki/MuSiQue file)
  --format NAME         input format: auto (default), jsonl, hotpotqa, 2wiki, musique
  --mode MODE           spechop (default), window, sequential
  --k N|inf|auto        active threads (default 3)
  --m N                 candidates kept per speculator call (default 1)
  --eps E               starvation risk for --k auto (default 0.05)
  --seed N              seed of the simulated backend's keyed draws (default 0)
  --concurrency N       queries in flight at once (default 16)
  --out FILE            write results here (JSONL); ids already in FILE are skipped
  --trace FILE          Chrome trace-event JSON (Perfetto, chrome://tracing)
  --set key=value       a value for ctx.set (repeatable)
  --policy FILE         eligibility policy (overrides the agent's)
  --max-hops N          fail a trajectory longer than N hops (default 64)
  --spec-timeout MS     a speculator slower than this counts as failed
  --clock real|virtual  virtual: time jumps to the next deadline when nothing can run, so a
                        simulated run takes no real waiting; every reported time is virtual ms;
                        real I/O (HTTP, MCP) is an error
  --spec-launch WHEN    eager (default: a speculator starts with its target call, k bounds
                        threads) or slot (it starts when a thread slot is free; Alg. 2 as written)
  --shard i/n|auto      run only queries whose index is i modulo n; auto: i and n from a Slurm
                        job array or a Kubernetes Indexed Job (see README, "Sharding")
  --shard-count N       with --shard auto under Kubernetes: the Job's completions
  --compare LIST        run every query under each config, e.g. "sequential,spechop:k=3:m=2"
  --summary FILE        with --compare: also write the table as JSON
  --predict on|off      action speculation with the agent's predictor (default on if it has one)
  --match MODE          exact (default, lossless), name_only or similar (both lossy)
  --trigger WHEN        start, tool_name or both (default): when predictions fire
  --ev-cost-ms MS       latency one unit of tool cost is worth, for the EV gate (default 1000)
  --ev-latency-ms MS    fixed estimate of latency saved per hit (default: live)
  --predict-top N       predictions considered per step (default 3)
  --debug               check that update() never mutates its input
  --retry-failed        when resuming --out, run again the queries whose records carry an error
  --record DIR          write every model, HTTP, MCP and speculator exchange to the cassette DIR
  --replay-io DIR       serve those exchanges from the cassette DIR with their recorded timing
  --miss MODE           a request the cassette lacks: error (default), live (real clock only;
                        with --record it is added) or skip (a failed speculation; never on the
                        committed path)
  --progress / --quiet  force the progress line on / silence the summary
]]

local function usage_error(msg)
  C.sp_ctx_set_exit(core.ctx, 2)
  sched.plain_error("specula run: " .. msg .. "\n" .. usage_text)
end

-- ---- options ------------------------------------------------------------

-- Shared numeric options (k, m, eps, seed, concurrency, ...): their domains
-- live in one C function (engine/sp_opt.c) that `specula theory` uses too.
local function parse_opt(name, text)
  local v, err = optslib.parse(name, text)
  if not v then usage_error(err) end
  return v
end
M.parse_opt = parse_opt

-- The window's encoding of k: -1 unbounded, 0 auto, else the count.
local function parse_k(v)
  local k = parse_opt("k", v)
  if k == math.huge then return -1 end
  return k
end
M.parse_k = parse_k

local function parse_args(args)
  local o = { mode = "spechop", k = 3, m = 1, eps = 0.05, seed = 0, concurrency = 16, set = {},
              max_hops = 64 }
  local i = 1
  local inline  -- the value of a --name=value argument, until val() takes it
  local function val(name)
    if inline then
      local v = inline
      inline = nil
      return v
    end
    local v = args[i + 1]
    if v == nil then usage_error(name .. " needs a value") end
    i = i + 1
    return v
  end
  local function num(name, lo)
    local raw = val(name)
    local v = tonumber(raw)
    if not v or (lo and v < lo) then usage_error(name .. " expects a number" .. (lo and (" >= " .. lo) or "") .. ", got '" .. raw .. "'") end
    return v
  end
  while i <= #args do
    local a = args[i]
    -- --name=value, as `specula theory` takes it too
    local name, v = tostring(a):match("^(%-%-%a[%w%-]*)=(.*)$")
    if name then a, inline = name, v end
    if a == "--query" then o.query = val(a)
    elseif a == "--input" then o.input = val(a)
    elseif a == "--format" then o.format = val(a)
    elseif a == "--mode" then
      o.mode = val(a)
      if not MODES[o.mode] then usage_error("--mode must be spechop, window or sequential") end
    elseif a == "--k" then o.k = parse_k(val(a))
    elseif a == "--m" then o.m = parse_opt("m", val(a))
    elseif a == "--eps" then o.eps = parse_opt("eps", val(a))
    elseif a == "--seed" then o.seed = parse_opt("seed", val(a))
    elseif a == "--concurrency" then o.concurrency = parse_opt("concurrency", val(a))
    elseif a == "--out" then o.out = val(a)
    elseif a == "--trace" then o.trace = val(a)
    elseif a == "--set" then
      local kv = val(a)
      local k, v = kv:match("^([^=]+)=(.*)$")
      if not k then usage_error("--set expects key=value, got '" .. kv .. "'") end
      o.set[k] = tonumber(v) or (v == "true" and true) or (v == "false" and false) or v
    elseif a == "--policy" then o.policy = val(a)
    elseif a == "--max-hops" then o.max_hops = num(a, 1)
    elseif a == "--spec-timeout" then o.spec_timeout = num(a, 0)
    elseif a == "--clock" then
      o.clock = val(a)
      if o.clock ~= "real" and o.clock ~= "virtual" then usage_error("--clock must be real or virtual") end
    elseif a == "--spec-launch" then
      o.spec_launch = val(a)
      if not LAUNCH[o.spec_launch] then usage_error("--spec-launch must be eager or slot") end
    elseif a == "--shard" then
      local s = val(a)
      if s == "auto" then
        o.shard = "auto"   -- resolved from the scheduler's environment (specula.shard)
      else
        local si, sn = s:match("^(%d+)/(%d+)$")
        si, sn = tonumber(si), tonumber(sn)
        if not si or sn < 1 or si >= sn then usage_error("--shard expects i/n with 0 <= i < n, or auto, got '" .. s .. "'") end
        o.shard = { si, sn }
      end
    elseif a == "--shard-count" then o.shard_count = val(a)
    elseif a == "--compare" then o.compare = val(a)
    elseif a == "--summary" then o.summary = val(a)
    elseif a == "--predict" then
      o.predict = val(a)
      if o.predict ~= "on" and o.predict ~= "off" then usage_error("--predict must be on or off") end
    elseif a == "--match" then
      o.match = val(a)
      if not MATCH[o.match] then usage_error("--match must be exact, name_only or similar") end
    elseif a == "--trigger" then
      o.trigger = val(a)
      if not TRIGGER[o.trigger] then usage_error("--trigger must be start, tool_name or both") end
    elseif a == "--ev-cost-ms" then o.ev_cost_ms = num(a, 0)
    elseif a == "--ev-latency-ms" then o.ev_latency_ms = num(a, 0)
    elseif a == "--predict-top" then o.predict_top = num(a, 1)
    elseif a == "--record" then o.record = val(a)
    elseif a == "--replay-io" then o.replay_io = val(a)
    elseif a == "--miss" then
      o.miss = val(a)
      if not require("specula.cassette").MISS[o.miss] then usage_error("--miss must be error, live or skip") end
    elseif a == "--debug" then o.debug = true
    elseif a == "--retry-failed" then o.retry_failed = true
    elseif a == "--progress" then o.progress = true
    elseif a == "--quiet" then o.quiet = true
    elseif a == "--help" or a == "-h" then o.help = true
    else usage_error("unknown option '" .. tostring(a) .. "'") end
    if inline then usage_error(a .. " takes no value, got '" .. args[i] .. "'") end
    i = i + 1
  end
  return o
end
M.parse_args = parse_args

-- ---- queries ------------------------------------------------------------

local function load_queries(o)
  if o.query and o.input then usage_error("give --query or --input, not both") end
  local list, warnings = {}, {}
  if o.query then
    list[1] = { id = "q1", query = o.query, record = { id = "q1", query = o.query } }
  elseif o.input then
    -- an input that cannot be read is a mistake in the command line (status 2)
    local f, err = io.open(o.input, "rb")
    if f and C.sp_host_path_kind(o.input) == 2 then f:close() f, err = nil, "Is a directory" end
    if not f then
      err = tostring(err)
      if err:sub(1, #o.input + 2) == o.input .. ": " then err = err:sub(#o.input + 3) end
      C.sp_ctx_set_exit(core.ctx, 2)
      sched.plain_error("specula run: cannot read --input file '" .. o.input .. "': " .. err)
    end
    f:close()
    local datasets = require "specula.datasets"
    local recs, w = datasets.load(o.input, { format = o.format or "auto" })
    if not recs then sched.plain_error("specula run: " .. tostring(w)) end
    warnings = w or {}
    for _, r in ipairs(recs) do
      list[#list + 1] = { id = r.id, query = r.query, record = r.record or r, gold = r.gold, max_hops = r.max_hops }
    end
  else
    usage_error("give --query TEXT or --input FILE")
  end
  if o.shard_count and o.shard ~= "auto" then usage_error("--shard-count goes with --shard auto") end
  if o.shard then
    local shard = require "specula.shard"
    if o.shard == "auto" then
      local si, sn = shard.resolve_auto(os.getenv, o.shard_count)
      if not si then usage_error("--shard auto: " .. sn) end
      o.shard = { si, sn }
    end
    list = shard.select(list, o.shard[1], o.shard[2], o.seed)
  end
  return list, warnings
end
M.load_queries = load_queries

-- ---- results --------------------------------------------------------------

-- Values the window keeps (steps, observations, the answer) by slot.
local registry = sched.vals
local hop_info = ffi.new("sp_hop_info")
local wstats = ffi.new("sp_window_stats")
local tev = ffi.new("sp_tev")


local function theory(p, a, b, k)
  if p == nil or a == nil or b == nil then return nil, nil end
  local star = C.sp_theory_rel_lat_star(p, a, b)
  local kk = k < 0 and -1 or k
  local rk = C.sp_theory_rel_lat_k(p, a, b, kk)
  if star ~= star then star = nil end
  if rk ~= rk then rk = nil end
  return star, rk
end

local function round(x, d)
  if x == nil then return nil end
  local f = 10 ^ (d or 3)
  return math.floor(x * f + 0.5) / f
end

-- p_hat, alpha_hat, beta_hat of an estimator (sp_est: the engine's one
-- definition, README "Estimates"); nil where undefined.
local est_get = require("specula.estimate").get

-- The run's aggregate counters, before the derived figures (M.aggregate).
local function new_agg()
  return { queries = 0, failed = 0, wall_ms = 0, standard_ms = 0, hops = 0, commits = 0,
           rollbacks = 0, accepted = 0, rejected = 0, model = 0, target = 0, speculator = 0,
           predicted = 0, warmup = 0, cancelled = 0, wasted_cost = 0, wasted_calls = 0,
           speculative_launches = 0, deferred = 0, est = ffi.new("sp_est") }
end

-- Add a finished window's counters to a running aggregate (light runs).
local function agg_add(a, st, failed)
  a.queries = a.queries + 1
  if failed then a.failed = a.failed + 1 end
  a.wall_ms, a.standard_ms = a.wall_ms + st.wall_ms, a.standard_ms + st.standard_ms
  a.hops, a.commits, a.rollbacks = a.hops + st.hops, a.commits + st.commits, a.rollbacks + st.rollbacks
  a.accepted, a.rejected = a.accepted + st.accepted, a.rejected + st.rejected
  a.model, a.target, a.speculator = a.model + st.model_calls, a.target + st.target_calls, a.speculator + st.spec_calls
  a.predicted, a.warmup = a.predicted + st.predicted_calls, a.warmup + st.warmup_calls
  a.cancelled = a.cancelled + st.cancelled_model + st.cancelled_target + st.cancelled_spec
  a.wasted_cost, a.wasted_calls = a.wasted_cost + st.wasted_cost, a.wasted_calls + st.wasted_calls
  a.speculative_launches, a.deferred = a.speculative_launches + st.speculative_launches, a.deferred + st.deferred
  C.sp_est_merge(a.est, st.est)
end

-- The query's gate decisions per trigger (DESIGN §5: "zero forbidden
-- launches" is a number): { target = { full =, warmup =, forbid = }, ... }.
local function gate_stats(st)
  local g = {}
  for _, tr in ipairs(policylib.TRIGGERS) do
    local row = st.gate[tonumber(tr[2])]
    g[tr[1]] = { forbid = row[0], warmup = row[1], full = row[2] }
  end
  return g
end

-- Read a finished window into a result record. A light run (answers
-- only, for benchmarks and large batches) keeps { id, query, answer or
-- error, hops } per query and adds the counters to `acc` instead.
local function collect(w, q, run)
  local o = run.o
  local k_cfg = o.mode == "sequential" and 1 or o.k
  local run_match = run.pf and (o.match or run.match or "exact") or nil
  local light, run_mode, acc = o.light, o.mode, run.acc
  local run_m = o.mode == "sequential" and 1 or (o.m or 1)
  local run_launch = o.mode == "spechop" and (o.spec_launch or "eager") or "slot"
  local status = C.sp_window_status(w)
  local rec = { id = q.id, query = q.query }
  if q.gold then rec.gold = q.gold end
  local traj, hops = {}, {}
  local n = C.sp_window_nhops(w)
  if light then
    C.sp_window_stats_get(w, wstats)
    rec.hops = wstats.hops
    if status == C.SP_WIN_DONE then
      local fin = registry[C.sp_window_answer_ref(w)]
      rec.answer = fin and fin.final
    else
      rec.error = utf8_clean(ffi.string(C.sp_window_error(w)))
    end
    if acc then agg_add(acc, wstats, rec.error ~= nil) end
    return rec
  end
  for i = 0, n - 1 do
    C.sp_window_hop(w, i, hop_info)
    local step = registry[hop_info.step_ref]
    local obs = registry[hop_info.obs_ref]
    if obs == nil then obs = json.null end
    traj[i + 1] = { segment = step.segment, action = step.action, observation = obs }
    local h = { hop = i, t_seg = round(hop_info.t_seg, 4), t_target = round(hop_info.t_target, 4),
                t_update = round(hop_info.t_update, 4), t_verify = round(hop_info.t_verify, 4),
                spec = SPEC_NAMES[hop_info.spec] or "none" }
    if hop_info.t_spec >= 0 then
      h.t_spec = round(hop_info.t_spec, 4)
    end
    if hop_info.rank >= 0 then h.rank = hop_info.rank end
    if hop_info.ncands > 0 then h.ncands = hop_info.ncands end
    -- C cuts messages at a byte count and passes on the agent's error text:
    -- what goes into a record must be valid UTF-8
    local reason = utf8_clean(ffi.string(hop_info.reason))
    if reason ~= "" then h.reason = reason end
    hops[i + 1] = h
  end
  C.sp_window_stats_get(w, wstats)
  local st = wstats
  local final_seg = st.final_seg_ms
  rec.trajectory = traj
  if status == C.SP_WIN_DONE then
    local fin = registry[C.sp_window_answer_ref(w)]
    rec.answer = fin and fin.final
  else
    rec.error = utf8_clean(ffi.string(C.sp_window_error(w)))
  end
  local p_hat, alpha, beta = est_get(st.est)
  local k_used = k_cfg == 0 and st.k_last or k_cfg
  local star, rk = theory(p_hat, alpha, beta, k_used)
  rec.stats = {
    hops = n, wall_ms = round(st.wall_ms, 3), standard_ms = round(st.standard_ms, 3),
    rel_lat = st.standard_ms > 0 and round(st.wall_ms / st.standard_ms, 4) or json.null,
    p_hat = round(p_hat, 4) or json.null, alpha_hat = round(alpha, 4) or json.null,
    beta_hat = round(beta, 4) or json.null,
    rel_lat_star = round(star, 4) or json.null, rel_lat_k = round(rk, 4) or json.null,
    commits = st.commits, rollbacks = st.rollbacks,
    verify = { accepted = st.accepted, rejected = st.rejected, late = st.late, errors = st.spec_errors },
    calls = { model = st.model_calls, target = st.target_calls, speculator = st.spec_calls,
              predicted = st.predicted_calls, warmup = st.warmup_calls },
    speculative_launches = st.speculative_launches, deferred = st.deferred,
    cancelled = { model = st.cancelled_model, target = st.cancelled_target, speculator = st.cancelled_spec,
                  total = st.cancelled_model + st.cancelled_target + st.cancelled_spec },
    wasted_calls = st.wasted_calls, wasted_cost = round(st.wasted_cost, 6),
    gate = gate_stats(st),
    max_threads = st.max_threads, k = k_used < 0 and "inf" or k_used,
    mode = run_mode, k_config = k_cfg < 0 and "inf" or (k_cfg == 0 and "auto" or k_cfg),
    m = run_m, spec_launch = run_launch,
  }
  if run_match then
    local pf = st.pf
    local fired = tonumber(pf.fired)
    rec.stats.prefetch = {
      candidates = tonumber(pf.candidates), fired = fired, promoted = tonumber(pf.promoted),
      promoted_lossy = tonumber(pf.promoted_lossy), wasted = tonumber(pf.wasted),
      wasted_cost = round(tonumber(pf.wasted_cost), 6), gated_ev = tonumber(pf.gated_ev),
      gated_policy = tonumber(pf.gated_policy), held = tonumber(pf.held),
      saved_ms = round(tonumber(pf.saved_ms), 3),
      hit_rate = fired > 0 and round(tonumber(pf.promoted) / fired, 4) or json.null,
      match = run_match, lossy = run_match ~= "exact",
    }
    if tonumber(pf.promoted_lossy) > 0 then rec.stats.lossy = true end
  end
  rec.stages = { hops = hops, final_seg = round(final_seg, 4), init = round(st.init_ms, 4) }
  -- sums for the run's aggregate
  rec._agg = { wall = st.wall_ms, std = st.standard_ms, acc = st.accepted, rej = st.rejected,
               est = ffi.new("sp_est", st.est) }
  return rec
end
M.collect = collect

-- Chrome trace events of one window, appended to a list of JSON strings.
local function trace_events(w, pid, q, out)
  local t0 = C.sp_window_t0_us(w)
  out[#out + 1] = json.encode({ name = "process_name", ph = "M", pid = pid, tid = 0,
                                args = { name = "query " .. tostring(q.id) } })
  local seen = {}
  for i = 0, C.sp_window_ntev(w) - 1 do
    C.sp_window_tev(w, i, tev)
    local name = ffi.string(tev.name)
    local tid = tev.tid
    if not seen[tid] then
      seen[tid] = true
      out[#out + 1] = json.encode({ name = "thread_name", ph = "M", pid = pid, tid = tid,
                                    args = { name = "T" .. tid } })
      out[#out + 1] = json.encode({ name = "thread_sort_index", ph = "M", pid = pid, tid = tid,
                                    args = { sort_index = tid } })
    end
    local e = { name = name, cat = name, ph = string.char(tev.ph), pid = pid, tid = tid,
                ts = round(t0 + tev.ts_us, 3), args = { hop = tev.hop } }
    if e.ph == "X" then e.dur = round(tev.dur_us, 3) else e.s = "t" end
    local detail = utf8_clean(ffi.string(tev.detail))
    if detail ~= "" then e.args.detail = detail end
    if name == "verify" then e.args.accepted = tev.flag == 1 end
    if name == "target" then e.args.speculative = tev.flag == 1 end
    out[#out + 1] = json.encode(e)
  end
end

-- ---- running ----------------------------------------------------------------

-- A run configuration: mode, k, m, eps (plus shared options).
local function make_run(agent, o, script)
  local script_dir = script and script:match("^(.*)/[^/]*$") or "."
  local pspec = o.policy or agent.policy
  local pol = policylib.build(pspec, agent.tools, script_dir)
  local P = agent.predict
  local pf, learn, match, similar = nil, nil, nil, nil
  if P ~= nil and o.predict ~= "off" then
    match = o.match or agent.match or "exact"
    if type(match) == "table" then
      similar, match = match.similar, "similar"
    end
    if not MATCH[match] then error("specula: agent.match must be exact, name_only or { similar = fn }", 0) end
    if match == "similar" and not similar then
      -- default likeness of two argument tables: their canonical texts
      local v = require("specula.verify").jaccard(0.6)
      similar = function(a, b) return (v(json.canonical(a), json.canonical(b))) end
    end
    pf = ffi.gc(C.sp_prefetch_new(MATCH[match], TRIGGER[o.trigger or "both"], o.ev_cost_ms or 1000,
      o.ev_latency_ms or 0, o.predict_top or 3), C.sp_prefetch_free)
    if type(P) == "table" and P.observe_trajectory then
      learn = function(traj)
        local actions = {}
        for i, h in ipairs(traj) do actions[i] = h.action end
        P:observe_trajectory(actions)
      end
    elseif type(P) == "table" and P.observe then
      learn = function(traj)
        for i = 2, #traj do P:observe(traj[i - 1].action, traj[i].action) end
      end
    end
  end
  local predict_fn = P and pf and function(h, ctx) return P(h, ctx) end or nil
  local adapter = agentlib.adapter(agent, { debug = o.debug, decide = pol.decide, predict = predict_fn,
    on_policy_error = pol.on_error,
    time_update = not o.light,
    predict_async = type(P) == "table" and P.async or false,
    match = match, similar = similar, C = C, cctx = core.ctx })
  local kauto = nil
  if o.k == 0 then
    kauto = ffi.gc(C.sp_kauto_new(o.eps or 0.05, 1, 64, 4), C.sp_kauto_free)
  end
  return { agent = agent, adapter = adapter, policy = pol, kauto = kauto, o = o, pf = pf,
           learn = learn, match = match }
end
M.make_run = make_run

local cfg = ffi.new("sp_window_cfg")

-- A window for one query, handed its agent adapter and query context.
local function new_window(run, q, index)
  local o = run.o
  cfg.mode = MODES[o.mode]
  cfg.k = o.k
  cfg.m = o.m or 1
  -- A safety limit above the agent's own hop budget (ctx.max_hops).
  local limit = o.max_hops or 64
  if q.max_hops and q.max_hops >= limit then limit = q.max_hops + 1 end
  cfg.max_hops = limit
  cfg.debug = o.debug and 1 or 0
  cfg.trace = o.trace and 1 or 0
  cfg.spec_timeout_ms = o.spec_timeout or 0
  cfg.spec_launch = LAUNCH[o.spec_launch or "eager"]
  cfg.policy = run.policy.ptr
  cfg.kauto = run.kauto
  cfg.prefetch = run.pf
  cfg.drop_trajectory = (o.light and not run.learn) and 1 or 0
  local err, errlen = core.errbuf()
  local w = C.sp_window_new(core.ctx, cfg, err, errlen)
  if w == nil then return nil, ffi.string(err) end
  w = ffi.gc(w, C.sp_window_free)
  local qctx = { id = q.id, query = q.query, record = q.record, set = o.set, seed = o.seed,
                 index = index, max_hops = q.max_hops, mode = o.mode }
  -- the window hands the adapter the metatable of the query's step ctx
  -- tables ({ __index = qctx }), not qctx itself (one field less per query)
  local fns = run.fns
  fns.qctx = C.sp_vals_new(core.ctx)
  sched.vals[fns.qctx] = { __index = qctx }
  local rc = C.sp_window_set_fns(w, fns, err, errlen)
  C.sp_vals_unref(core.ctx, fns.qctx)   -- the window holds its own reference now
  fns.qctx = 0
  if rc ~= 0 then return nil, ffi.string(err) end
  return w
end

-- Read a finished window into its record and release it.
local function finish_window(run, w, q, index)
  local o = run.o
  local rec = collect(w, q, run)
  if run.learn and rec.trajectory and not rec.error then run.learn(rec.trajectory) end
  if o.trace and run.trace_out then trace_events(w, index, q, run.trace_out) end
  ffi.gc(w, nil)
  C.sp_window_free(w)
  return rec
end

-- Run one query through a window (inside a task); returns its record.
local function run_query(run, q, index)
  local w, err = new_window(run, q, index)
  if not w then return { id = q.id, query = q.query, error = err } end
  local me = sched.current("run_query")
  C.sp_window_start(w, me)
  while C.sp_window_status(w) == C.SP_WIN_RUNNING do sched.yield() end
  return finish_window(run, w, q, index)
end
M.run_query = run_query

local function isatty(fd)
  local ok, r = pcall(function()
    ffi.cdef "int isatty(int fd);"
    return ffi.C.isatty(fd)
  end)
  if not ok then
    ok, r = pcall(function() return ffi.C.isatty(fd) end)
  end
  return ok and r == 1
end
M.isatty = isatty

-- Run every query of `queries` with `run` at the given concurrency; call
-- emit(rec, i) in input order. Returns the list of records. One driver
-- task runs the whole batch: windows report to a group as they finish.
-- The adapter's functions as value-store slots for every window of a batch
-- (sp_window_set_fns); released when the batch ends, however it ends.
local FN_FIELDS = { "start", "advance", "call", "warmup", "verify", "speculate", "pfcall" }
local function fns_acquire(run)
  local fns = ffi.new("sp_window_fns")
  for _, f in ipairs(FN_FIELDS) do
    local fn = run.adapter[f]
    if fn ~= nil then
      local slot = C.sp_vals_new(core.ctx)
      sched.vals[slot] = fn
      fns[f] = slot
    end
  end
  return fns
end
local function fns_release(fns)
  for _, f in ipairs(FN_FIELDS) do
    if fns[f] ~= 0 then C.sp_vals_unref(core.ctx, fns[f]) end
    fns[f] = 0
  end
end

local run_batch
local function run_all(run, queries, emit, progress)
  run.fns = fns_acquire(run)
  local ok, res = pcall(run_batch, run, queries, emit, progress)
  fns_release(run.fns)
  run.fns = nil
  if not ok then error(res, 0) end
  return res
end

run_batch = function(run, queries, emit, progress)
  local o = run.o
  local n = #queries
  local results, next_emit = {}, 1
  local done, started, next_i = 0, 0, 1
  local t0 = sched.real_now()   -- the progress line's rate is real queries per second
  local sum_wall, sum_std = 0, 0
  local conc = math.min(o.concurrency or 16, math.max(n, 1))
  local group = ffi.gc(C.sp_wgroup_new(core.ctx), C.sp_wgroup_free)
  local active_w, active_i = {}, {}   -- window id -> window, query index
  local me = sched.current("specula.run")
  local jitter = o.start_jitter_ms and o.start_jitter_ms > 0
  -- A SIGINT/SIGTERM (trapped by runner.main) cancels every window: then no
  -- query starts, the cancelled ones are dropped (a resume runs them) and
  -- the finished ones are still written.
  local cctx = core.ctx
  local interrupted = false
  local function record(i, rec)
    results[i] = rec
    done = done + 1
    if rec and rec._agg then sum_wall, sum_std = sum_wall + rec._agg.wall, sum_std + rec._agg.std end
    while results[next_emit] do
      emit(results[next_emit], next_emit)
      next_emit = next_emit + 1
    end
    if progress and rec then progress(done, n, t0, sum_wall, sum_std) end
  end
  while done < n and not (interrupted and done == started) do
    if not interrupted and cctx ~= nil and C.sp_host_signal(cctx) ~= 0 then interrupted = true end
    if interrupted and done == started then break end  -- nothing left to wait for
    while not interrupted and started - done < conc and next_i <= n do
      local i = next_i
      next_i, started = i + 1, started + 1
      local q = queries[i]
      local w, err = new_window(run, q, i)
      if not w then
        record(i, { id = q.id, query = q.query, error = err })
      else
        local id = C.sp_window_id(w)
        active_w[id], active_i[id] = w, i
        if jitter then
          -- Spread the starts of concurrent queries (keyed, so runs repeat).
          local idk = tostring(q.id)
          local delay = C.sp_rand_keyed(o.seed or 0, idk, #idk, 0, "start", 0) * o.start_jitter_ms
          sched.spawn(function() sched.sleep(delay) C.sp_window_start_in(w, group) end)
        else
          C.sp_window_start_in(w, group)
        end
      end
    end
    local fw = C.sp_wgroup_pop(group)
    if fw == nil then
      if C.sp_wgroup_wait(group, me) == 0 then sched.yield() end
    else
      local id = C.sp_window_id(fw)
      local aw, ai = active_w[id], active_i[id]
      active_w[id], active_i[id] = nil, nil
      local cancelled = C.sp_window_status(fw) == C.SP_WIN_CANCELLED
      local ok, rec = pcall(finish_window, run, aw, queries[ai], ai)
      if not ok then rec = { id = queries[ai].id, query = queries[ai].query, error = tostring(rec) } end
      if cancelled and cctx ~= nil and C.sp_host_signal(cctx) ~= 0 then
        interrupted = true
        rec = nil
      end
      record(ai, rec)
    end
  end
  if interrupted then
    -- write what finished behind a gap, in input order; return no holes
    local kept = {}
    for i = 1, n do
      local r = results[i]
      if r then
        if i >= next_emit then emit(r, i) end
        kept[#kept + 1] = r
      end
    end
    return kept, true
  end
  return results, false
end
M.run_all = run_all

-- Aggregate figures of a list of records (or, for a light run, of the
-- counters its windows added to `acc` as they finished).
function M.aggregate(records, k, acc)
  local a = acc or new_agg()
  if not acc then a.queries = #records end
  for _, r in ipairs(acc and {} or records) do
    if r.error then a.failed = a.failed + 1 end
    local s, g = r.stats, r._agg
    if s and g then
      a.wall_ms, a.standard_ms = a.wall_ms + g.wall, a.standard_ms + g.std
      a.hops, a.commits, a.rollbacks = a.hops + s.hops, a.commits + s.commits, a.rollbacks + s.rollbacks
      a.accepted, a.rejected = a.accepted + g.acc, a.rejected + g.rej
      a.model, a.target, a.speculator = a.model + s.calls.model, a.target + s.calls.target, a.speculator + s.calls.speculator
      a.predicted, a.warmup = a.predicted + s.calls.predicted, a.warmup + s.calls.warmup
      a.cancelled = a.cancelled + s.cancelled.total
      a.wasted_cost, a.wasted_calls = a.wasted_cost + s.wasted_cost, a.wasted_calls + s.wasted_calls
      a.speculative_launches, a.deferred = a.speculative_launches + s.speculative_launches, a.deferred + s.deferred
      C.sp_est_merge(a.est, g.est)
      if s.prefetch then
        local p = a.prefetch or { candidates = 0, fired = 0, promoted = 0, promoted_lossy = 0, wasted = 0,
          wasted_cost = 0, gated_ev = 0, gated_policy = 0, held = 0, saved_ms = 0, match = s.prefetch.match }
        for _, k in ipairs({ "candidates", "fired", "promoted", "promoted_lossy", "wasted", "wasted_cost",
                             "gated_ev", "gated_policy", "held", "saved_ms" }) do
          p[k] = p[k] + (s.prefetch[k] or 0)
        end
        a.prefetch = p
      end
    end
  end
  a.rel_lat = a.standard_ms > 0 and a.wall_ms / a.standard_ms or nil
  if a.est then
    a.p_hat, a.alpha_hat, a.beta_hat = est_get(a.est)
    a.est = nil   -- cdata: not part of what callers print or encode
  end
  a.rel_lat_star, a.rel_lat_k = theory(a.p_hat, a.alpha_hat, a.beta_hat, k or -1)
  if a.prefetch then a.prefetch.hit_rate = a.prefetch.fired > 0 and a.prefetch.promoted / a.prefetch.fired or nil end
  return a
end

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

function M.summary_text(a, run)
  local lines = {}
  lines[#lines + 1] = format("specula: %d queries (%d failed), %d hops; RelLat %s (Σwall %.1f ms / Σstandard %.1f ms)",
    a.queries, a.failed, a.hops, fmt(a.rel_lat), a.wall_ms, a.standard_ms)
  lines[#lines + 1] = format("  p̂ %s  α̂ %s  β̂ %s  RelLat* %s  RelLat_k %s  commits %d  rollbacks %d",
    fmt(a.p_hat), fmt(a.alpha_hat), fmt(a.beta_hat), fmt(a.rel_lat_star), fmt(a.rel_lat_k), a.commits, a.rollbacks)
  lines[#lines + 1] = format("  calls: model %d, target %d, speculator %d, predicted %d, warmup %d; cancelled %d; wasted %d calls, cost %.4f",
    a.model, a.target, a.speculator, a.predicted, a.warmup, a.cancelled, a.wasted_calls, a.wasted_cost)
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

-- ---- output files ---------------------------------------------------------

pcall(ffi.cdef, "int truncate(const char *path, int64_t length);")

-- A failed write ends the run (status 1): going on would lose results
-- silently. `what` names the file, err is the OS error.
local function write_failed(what, err, note)
  C.sp_ctx_set_exit(core.ctx, 1)
  sched.plain_error(format("specula run: cannot write %s: %s%s", what, tostring(err), note or ""))
end
M.write_failed = write_failed

-- 0 absent, 1 regular file, 2 directory, 3 other (device, FIFO...)
function M.path_kind(path) return C.sp_host_path_kind(path) end

-- io.open's message starts with the path, which the caller names already.
local function os_reason(path, err)
  err = tostring(err)
  if err:sub(1, #path + 2) == path .. ": " then return err:sub(#path + 3) end
  return err
end

-- Open an output file (`what`: "--out file" ...), or end the run saying why.
local function open_output(path, mode, what)
  local f, err = io.open(path, mode)
  if not f then write_failed(format("%s '%s'", what, path), os_reason(path, err)) end
  return f
end
M.open_output = open_output

-- Write the strings of list to f and close it, checking every step; a file
-- left incomplete is removed when it is a regular file (no half JSON).
local function write_whole(f, path, what, list)
  local ok, err = true, nil
  for _, piece in ipairs(list) do
    ok, err = f:write(piece)
    if not ok then break end
  end
  if ok then ok, err = f:flush() end
  local cok, cerr = f:close()
  if ok and not cok then ok, err = false, cerr end
  if not ok then
    local note
    if C.sp_host_path_kind(path) == 1 and os.remove(path) then note = " (the incomplete file was removed)" end
    write_failed(format("%s '%s'", what, path), err, note)
  end
end
M.write_whole = write_whole

-- Ids already present in an output file (for resuming). A run killed in
-- the middle of a write leaves a last line without its newline: that line is
-- cut off so the appended results start on a line of their own. With
-- retry_failed, records that carry an error are dropped from the file (so it
-- ends with one record per id) and their queries run again. Only a regular
-- file is read (a device such as /dev/full never ends).
local function done_ids(path, retry_failed)
  local ids = {}
  local kind = C.sp_host_path_kind(path)
  if kind == 2 then write_failed(format("--out file '%s'", path), "Is a directory") end
  if kind ~= 1 then return ids, 0, 0 end
  local f, err = io.open(path, "rb")
  if not f then write_failed(format("--out file '%s'", path), os_reason(path, err)) end
  local text, rerr = f:read("*a")
  f:close()
  if not text then write_failed(format("--out file '%s'", path), "cannot read it to resume: " .. tostring(rerr)) end
  local rewrite, dropped = false, 0
  if #text > 0 and text:sub(-1) ~= "\n" then
    text = text:match("^(.*\n)") or ""
    rewrite = true
    io.stderr:write("specula: resuming: dropped an incomplete last line of " .. path .. "\n")
  end
  local n, keep = 0, {}
  for line in text:gmatch("[^\n]+") do
    local r = json.decode(line)
    if retry_failed and type(r) == "table" and r.error ~= nil then
      dropped, rewrite = dropped + 1, true
    else
      keep[#keep + 1] = line
      if type(r) == "table" and r.id ~= nil then
        ids[tostring(r.id)] = r.config and r or true
        n = n + 1
      end
    end
  end
  if rewrite then
    -- a new file renamed over the old one: a crash here loses nothing
    local tmp = path .. ".specula-tmp"
    local w = open_output(tmp, "wb", "--out file")
    keep[#keep + 1] = ""
    write_whole(w, tmp, "--out file", { table.concat(keep, "\n") })
    local ok, rerr2 = os.rename(tmp, path)
    if not ok then os.remove(tmp) write_failed(format("--out file '%s'", path), rerr2) end
  end
  if dropped > 0 then
    io.stderr:write(format("specula: resuming: removed %d failed record%s from %s to run again\n",
      dropped, dropped == 1 and "" or "s", path))
  end
  return ids, n, dropped
end
M.done_ids = done_ids

local function strip(rec)
  rec._agg = nil
  return rec
end

-- The JSON line of a record. A value that cannot be encoded (invalid UTF-8,
-- NaN, a function, a cycle, too deep) turns the record into an error record
-- naming the query, the field and the reason, so the run goes on; the
-- record is changed in place, so the run's tallies count it as failed.
local KEPT = { "id", "query", "gold", "config", "stats" }
local function clear(t)
  for k in next, t do t[k] = nil end
end
require("specula.nojit")(clear)  -- a next() walk: see specula/nojit.lua

local function record_line(rec)
  -- Sorted keys: result files diff cleanly and compare byte for byte.
  local ok, line = pcall(json.canonical, rec)
  if ok then return line end
  local where, why = json.find_bad(rec)
  if not where then where, why = "(record)", tostring(line) end
  local idtext = json.utf8_clean(tostring(rec.id))
  local msg = format("the record of query '%s' cannot be written as JSON: %s: %s", idtext, where, why)
  io.stderr:write("specula: " .. msg .. "\n")
  local keep = { id = rec.id, query = rec.query, gold = rec.gold, config = rec.config, stats = rec.stats }
  clear(rec)
  for _, k in ipairs(KEPT) do
    local v = keep[k]
    if v ~= nil then
      if json.find_bad(v) == nil then rec[k] = v
      elseif k == "id" or k == "query" then rec[k] = json.utf8_clean(tostring(v)) end
    end
  end
  rec.error = msg
  return json.canonical(rec)
end
M.record_line = record_line

-- A record sink for run_all: one JSON line per finished query, flushed at
-- once so a killed run loses at most the line in flight (resume repairs it).
-- `config` tags each record with its configuration (used by --compare).
-- `what` names the output in messages; `path`, when it is a regular file,
-- is cut back to its last complete line should a write fail.
local function record_writer(out, config, what, path)
  what = what or "stdout"
  local regular = path and C.sp_host_path_kind(path) == 1
  return function(rec)
    if config then rec.config = config end
    -- the run's sums are not part of the record (no pairs() copy: see json.lua)
    local agg = rec._agg
    rec._agg = nil
    local line = record_line(rec)
    rec._agg = agg
    local size = regular and out:seek("end")
    local ok, err = out:write(line, "\n")
    if ok then ok, err = out:flush() end
    if not ok then
      if size then C.truncate(path, size) end
      write_failed(what, err)
    end
  end
end
M.record_writer = record_writer

local function progress_line(enabled)
  if not enabled then return nil end
  return function(done, n, t0, sw, ss)
    local el = (sched.real_now() - t0) / 1000
    local rate = el > 0 and done / el or 0
    local eta = rate > 0 and (n - done) / rate or 0
    io.stderr:write(format("\r%d/%d  %.1f q/s  ETA %.0fs  RelLat %s   ", done, n, rate, eta,
      ss > 0 and fmt(sw / ss) or "-"))
    if done == n then io.stderr:write("\n") end
    io.stderr:flush()
  end
end
M.progress_line = progress_line

-- Run an agent from Lua (inside a task): specula.run(agent, { queries = {...},
-- mode =, k =, m =, seed =, concurrency =, policy =, set =, record = DIR,
-- replay_io = DIR, miss = "error"|"live"|"skip" }) -> records, aggregate
-- (aggregate.cassette: served, missed, missed_committed, live, recorded).
-- queries may be strings or { id =, query = } tables.
function M.run(agent, opts)
  if type(agent) ~= "table" or not agent.__specula_agent then
    error("specula.run: expected an agent (specula.agent{...})", 2)
  end
  opts = opts or {}
  local o = { mode = opts.mode or "spechop", k = opts.k or 3, m = opts.m or 1, eps = opts.eps or 0.05,
              seed = opts.seed or 0, concurrency = opts.concurrency or 16, set = opts.set or {},
              max_hops = opts.max_hops or 64, policy = opts.policy, debug = opts.debug,
              spec_timeout = opts.spec_timeout, trace = nil, start_jitter_ms = opts.start_jitter_ms,
              predict = opts.predict, match = opts.match, trigger = opts.trigger, ev_cost_ms = opts.ev_cost_ms,
              ev_latency_ms = opts.ev_latency_ms, predict_top = opts.predict_top, light = opts.light,
              spec_launch = opts.spec_launch, clock = opts.clock }
  if o.spec_launch ~= nil and not LAUNCH[o.spec_launch] then
    error("specula.run: spec_launch must be eager or slot", 2)
  end
  for _, name in ipairs({ "k", "m", "eps", "seed", "concurrency" }) do
    o[name] = optslib.check("specula.run", name, o[name], 2)
  end
  if o.k == math.huge then o.k = -1 end
  if not MODES[o.mode] then error("specula.run: unknown mode '" .. tostring(o.mode) .. "'", 2) end
  local queries = {}
  for i, q in ipairs(opts.queries or {}) do
    if type(q) == "string" then q = { id = "q" .. i, query = q } end
    queries[i] = { id = q.id or ("q" .. i), query = q.query, record = q, gold = q.gold, max_hops = q.max_hops }
  end
  -- a cassette for this run only: record = DIR, replay_io = DIR, miss = MODE
  local cassette = require "specula.cassette"
  local own_cassette = false
  if opts.record ~= nil or opts.replay_io ~= nil then
    if cassette.state then error("specula.run: a cassette is already open (--record / --replay-io)", 2) end
    if opts.miss == "live" and (o.clock or sched.clock()) == "virtual" then
      error("specula.run: miss = 'live' makes real calls: it needs the real clock", 2)
    end
    local ok, cerr = cassette.open({ record = opts.record, replay = opts.replay_io, miss = opts.miss })
    if not ok then error("specula.run: " .. cerr, 2) end
    own_cassette = true
  end
  -- a clock for this run only (the caller's clock comes back after it)
  local prev_clock = sched.clock()
  if o.clock and o.clock ~= prev_clock then
    local ok, cerr = sched.set_clock(o.clock)
    if not ok then
      if own_cassette then cassette.close() end
      error("specula.run: " .. cerr, 2)
    end
  end
  local okr, run = pcall(make_run, agent, o, opts.script)
  if not okr then
    if sched.clock() ~= prev_clock then sched.set_clock(prev_clock) end
    if own_cassette then cassette.close() end
    error(run, 0)
  end
  if o.light then run.acc = new_agg() end
  local results = run_all(run, queries, function() end, nil)
  if sched.clock() ~= prev_clock then sched.set_clock(prev_clock) end
  local cst = own_cassette and cassette.close()
  local agg = M.aggregate(results, o.k, run.acc)
  for _, r in ipairs(results) do
    if o.light and r.error and r.hops == nil then
      -- a query that failed before its window ran (no counters were added)
      agg.queries, agg.failed = agg.queries + 1, agg.failed + 1
    end
  end
  agg.policy_counts = policylib.counts(run.policy)
  if cst then
    agg.cassette = { served = cst.served, missed = cst.missed, missed_committed = cst.missed_committed,
                     live = cst.live, recorded = cst.recorded }
  end
  for _, r in ipairs(results) do strip(r) end
  return results, agg
end

function M.main(agent, args, script)
  local o = parse_args(args)
  if o.help then io.stdout:write(usage_text) return end
  if o.clock then
    local ok, cerr = sched.set_clock(o.clock)
    if not ok then sched.plain_error("specula run: --clock " .. o.clock .. ": " .. cerr) end
  end
  local cassette = require "specula.cassette"
  if (o.record or o.replay_io) and not cassette.state then
    local ok, cerr = cassette.open({ record = o.record, replay = o.replay_io, miss = o.miss })
    if not ok then usage_error(cerr) end
  end
  local queries, warnings = load_queries(o)
  for _, w in ipairs(warnings) do io.stderr:write("specula: warning: " .. w .. "\n") end
  -- Ctrl-C / SIGTERM: stop, write what finished, exit 128 + signal.
  if core.ctx ~= nil then C.sp_host_trap_signals(core.ctx) end
  if o.compare then
    require("specula.compare").main(agent, o, queries, script)
    local cst = cassette.close()
    if cst and not o.quiet then io.stderr:write(cassette.summary(cst), "\n") end
    return
  end
  local skip, nprev = {}, 0
  if o.out then skip, nprev = done_ids(o.out, o.retry_failed) end
  local pending = {}
  for _, q in ipairs(queries) do
    if not skip[tostring(q.id)] then pending[#pending + 1] = q end
  end
  if nprev > 0 and not o.quiet then
    io.stderr:write(format("specula: resuming: %d results already in %s, %d queries to run\n", nprev, o.out, #pending))
  end
  local run = make_run(agent, o, script)
  local out, what = io.stdout, "stdout"
  if o.out then
    out, what = open_output(o.out, "a", "--out file"), format("--out file '%s'", o.out)
  end
  -- opened now, so a path that cannot be written fails before the run
  local trace_f = o.trace and open_output(o.trace, "w", "--trace file")
  if o.trace then run.trace_out = {} end
  local emit = require("specula.shard").tag(record_writer(out, nil, what, o.out), pending)
  local show = o.progress or (not o.quiet and o.out ~= nil and isatty(2))
  local results, interrupted = run_all(run, pending, emit, progress_line(show))
  if o.out then
    local ok, err = out:close()
    if not ok then write_failed(what, err) end
  end
  local agg = M.aggregate(results, o.k)
  if trace_f then
    local parts = { '{"displayTimeUnit":"ms","traceEvents":[\n', table.concat(run.trace_out, ",\n"),
                    '\n],"specula":{"version":1,"queries":[\n' }
    local recs = {}
    for _, r in ipairs(results) do
      if r.stages then
        recs[#recs + 1] = json.encode({ id = r.id, mode = o.mode, k = o.k < 0 and "inf" or (o.k == 0 and "auto" or o.k),
          m = o.m or 1, spec_launch = r.stats.spec_launch,
          hops = r.stages.hops, final_seg = r.stages.final_seg, init = r.stages.init,
          wall_ms = r.stats.wall_ms, standard_ms = r.stats.standard_ms })
      end
    end
    parts[#parts + 1] = table.concat(recs, ",\n")
    parts[#parts + 1] = "\n]}}\n"
    write_whole(trace_f, o.trace, "--trace file", parts)
  end
  if not o.quiet then io.stderr:write(M.summary_text(agg, run), "\n") end
  local cst = cassette.close()
  if cst and not o.quiet then io.stderr:write(cassette.summary(cst), "\n") end
  for _, r in ipairs(results) do strip(r) end
  if agg.failed > 0 then require("specula.cli").set_exit(3) end
  if interrupted then M.interrupted(#results, #pending) end
end

-- The end of a run stopped by a signal: say so, exit 128 + signal.
function M.interrupted(done, total)
  local sig = C.sp_host_signal(core.ctx)
  io.stderr:write(format("specula: %s: %d of %d queries finished and written; the rest did not run "
    .. "(run the same command with --out to resume)\n", sig == 15 and "terminated" or "interrupted", done, total))
  C.sp_ctx_set_exit(core.ctx, 128 + sig)
end

return M
