-- specula.run.runner: `specula run AGENT.lua [options]` — runs an agent over
-- queries, one speculation window (engine/sp_window.c) per query, many
-- queries concurrently on the one loop, and writes one JSON result per query.
-- Its parts: specula.run.opts (the command line), specula.run.records (records
-- and output files), specula.run.aggregate (the run's figures and summary),
-- specula.run.tracewriter (--trace); this module is the run loop.
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"
local json = require "specula.json"
local agentlib = require "specula.internal.protocol"
local policylib = require "specula.policy"
local optslib = require "specula.internal.domains"
local runopts = require "specula.run.opts"
local records = require "specula.run.records"
local output = require "specula.internal.output"
local aggregate = require "specula.run.aggregate"
-- (--trace only: loaded when a run writes one)
local tracewriter = setmetatable({}, { __index = function(t, k)
  local v = require("specula.run.tracewriter")[k]
  rawset(t, k, v)
  return v
end })
local provlib = require "specula.provenance"
local ffi = core.ffi
local C = core.C

local type, tostring, ipairs, error, format = type, tostring, ipairs, error, string.format

local MODES, LAUNCH, MATCH, TRIGGER = runopts.MODES, runopts.LAUNCH, runopts.MATCH, runopts.TRIGGER
local D = optslib.DEFAULTS
local collect, strip, write_failed, open_output = records.collect, records.strip, records.write_failed, records.open_output
local gold_of = records.gold_of
local new_agg, fmt = aggregate.new_agg, aggregate.fmt

local M = {}

-- ---- running ----------------------------------------------------------------

-- A run configuration: mode, k, m, eps (plus shared options).
local function make_run(agent, o, script)
  local script_dir = script and script:match("^(.*)/[^/]*$") or "."
  local pspec = o.policy or agent.policy
  -- a policy that cannot be loaded is the user's file: its message, not
  -- the engine's stack
  local okp, pol = pcall(policylib.build, pspec, agent.tools, script_dir)
  if not okp then sched.plain_error((sched.errstr(pol):gsub("^specula: ", ""))) end
  local P = agent.predict
  -- --predictor / a --compare item's predictor= (runopts.load_knobs)
  if o.predictor == "off" then P = nil elseif type(o.predictor) == "table" then P = o.predictor.value end
  local pf, learn, match, similar = nil, nil, nil, nil
  local predict_fn, pdisable, pdisabled = nil, nil, nil
  -- asked for by name and impossible: saying nothing would look like a run
  -- with action speculation that never hit
  if P == nil and o.predict == "on" then
    error("specula: predict = \"on\", but " .. runopts.NO_PREDICTOR, 0)
  end
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
    pf = ffi.gc(C.sp_prefetch_new(MATCH[match], TRIGGER[o.trigger or "both"], o.ev_cost_ms or D.ev_cost_ms,
      o.ev_latency_ms or 0, o.predict_top or D.predict_top), C.sp_prefetch_free)
    -- The predictor is the user's code: a method of it that raises
    -- (predicting, learning, a restored state that is well formed but
    -- wrong) disables it for the rest of the run, with one warning naming
    -- the script and line; the queries go on without action speculation.
    local off = false
    -- where the predictor is defined, for a message that has no line of its
    -- own (it returned a number, it yielded)
    local function where_of()
      local fn = P
      if type(fn) == "table" then fn = (getmetatable(fn) or {}).__call or fn.predict end
      local info = type(fn) == "function" and debug.getinfo(fn, "S")
      return info and info.what == "Lua" and format("%s:%d", info.short_src, info.linedefined) or nil
    end
    local function disable(what, msg)
      if off then return end
      off = true
      msg = tostring(msg)
      local at = not msg:find("^[^\n]-%.lua:%d+:") and where_of()
      output.stderr("specula: warning: the predictor's " .. what .. " failed: " .. msg
        .. (at and (" (the predictor at " .. at .. ")") or "") .. "; the predictor is disabled for the rest of the run\n")
    end
    pdisable = disable
    local function call(what, fn, ...)
      if off then return false end
      local r = { sched.protect(false, fn, ...) }
      if not r[1] then disable(what, r[2]) return false end
      return unpack(r, 1, table.maxn(r))
    end
    if type(P) == "table" and P.observe_trajectory then
      -- the calls, and what a predictor that reads conversations needs:
      -- the query, the trajectory and, from the agent's context(), the
      -- committed conversation (taken from the window by finish_window)
      learn = function(traj, q, conv)
        local actions = {}
        for i, h in ipairs(traj) do actions[i] = h.action end
        call("observe_trajectory", P.observe_trajectory, P, actions, { id = q and q.id, query = q and q.query,
          trajectory = traj, conversation = conv })
      end
    elseif type(P) == "table" and P.observe then
      learn = function(traj)
        call("observe", function()
          for i = 2, #traj do P:observe(traj[i - 1].action, traj[i].action) end
        end)
      end
    end
    -- a disabled predictor predicts nothing (an empty list: no warning per step)
    predict_fn = function(h, ctx)
      local ok, preds = call("prediction", P, h, ctx)
      if not ok then return {} end
      -- not a list: as wrong as a raise (it was warned about once and asked
      -- again every step)
      if type(preds) ~= "table" then
        disable("prediction", format("it returned %s %s, not a list of { tool = ..., args = ..., confidence = ... }",
          type(preds), tostring(preds):sub(1, 60)))
        return {}
      end
      return preds
    end
    pdisabled = function() return off end
  end
  -- --keep-candidates: query ctx metatable -> its judged pairs, and query
  -- entry -> that metatable (weak: a window freed unread leaves nothing)
  local kept = o.keep_candidates and setmetatable({}, { __mode = "k" }) or nil
  local adapter = agentlib.adapter(agent, { debug = o.debug, decide = pol.decide, predict = predict_fn, kept = kept,
    verify_all = type(o.verifier) == "table" and o.verifier.value or nil,
    on_policy_error = pol.on_error,
    time_update = not o.light,
    predict_async = type(P) == "table" and P.async or false,
    match = match, similar = similar, C = C, cctx = core.ctx })
  local kauto = nil
  if o.k == 0 then
    kauto = ffi.gc(C.sp_kauto_new(o.eps or D.eps, D.kauto_min, D.kauto_max, D.kauto_default), C.sp_kauto_free)
  end
  return { agent = agent, adapter = adapter, policy = pol, kauto = kauto, o = o, pf = pf,
           learn = learn, predictor = learn and P or nil, pdisable = pdisable, pdisabled = pdisabled, learnt = learn and {} or nil, match = match, kept = kept, kept_q = kept and setmetatable({}, { __mode = "k" }) }
end
M.make_run = make_run

-- The provenance of a CLI run's records (specula.provenance): the parts
-- shared by every configuration of the command (version, agent, input),
-- fixed once before the first query runs.
local version = ffi.string(C.sp_version())
function M.prov_base(o, src, script)
  return { version = version, agent = provlib.agent(script), input = provlib.input(o, src) }
end

-- The provenance of one configuration (run = make_run's): built once; each
-- record splices its query digest into its text.
function M.prov_of(base, agent, o, run)
  local cassette = package.loaded["specula.cassette"]
  local config = provlib.config(agent, o, run, D, sched.clock(), cassette and cassette.state)
  run.prov = provlib.build(base.version, base.agent, base.input, config)
  return run.prov
end

-- A record sink that gives each record its provenance (q: the record's
-- query, as run_all hands it to emit): the first record of the run into the
-- sink's stream the whole object, the later ones its query and run only
-- (readers expand them from the first: specula.provenance.reader). One sink
-- per run and stream.
function M.with_prov(emit, run)
  local built, raw, short, qd = run.prov, provlib.raw, provlib.raw_short, provlib.query
  local first = true
  return function(rec, i, q)
    if rec._w then
      -- (a record the engine writes from its window: the provenance's text
      -- in pieces, no table)
      rec._qd = qd(q)
      if first then
        first = false
        rec._p1, rec._p3 = built.pre, built.post
      else
        rec._p1, rec._p3 = '{"query":"', provlib.short_post(built)
      end
    elseif first then
      first = false
      rec.provenance = raw(built, qd(q))
    else
      rec.provenance = short(built, qd(q))
    end
    return emit(rec, i, q)
  end
end

-- Hops a query in flight may hold as Lua values before they are encoded:
-- encoding each hop as it commits cost a 12-hop sweep 17 % of its CPU
-- (a call into the C encoder per hop instead of one per record), while a
-- query of 80 hops at 2,000 in flight needs it (179 MB peak without, 87
-- MB with). At 16, queries of up to 16 hops are encoded with their record.
-- (With more than 256 windows live the engine queues each sooner: all of
-- them together hold at most 4,096 hops as values; sp_window.c enc_batch.)
local ENCODE_BATCH = 16

-- A window for one query, handed its agent adapter and query context.
-- The window configuration of a run: the same for every query but its hop
-- limit, so set once (each field set from Lua outside a compiled trace
-- costs a conversion), again only if the run's record handling changed.
local function run_wcfg(run)
  local c = run.wcfg
  if c and run.wcfg_raw == run.raw_stages then return c end
  local o = run.o
  c = ffi.new("sp_window_cfg")
  c.mode = MODES[o.mode]
  c.k = o.k
  c.m = o.m or D.m
  c.debug = o.debug and 1 or 0
  c.trace = o.trace and 1 or 0
  c.spec_timeout_ms = o.spec_timeout or 0
  c.timeout_ms = o.query_timeout or 0
  c.spec_launch = LAUNCH[o.spec_launch or "eager"]
  c.policy = run.policy.ptr
  c.kauto = run.kauto
  c.prefetch = run.pf
  c.drop_trajectory = (o.light and not run.learn) and 1 or 0
  -- a run that writes each record and keeps none has its trajectory
  -- encoded as hops commit (specula.run.records), ENCODE_BATCH at a time
  run.encode_hops = run.raw_stages and not run.learn and records.encode_hops_ok or false
  c.encode_trajectory = run.encode_hops and ENCODE_BATCH or 0
  run.wcfg, run.wcfg_raw = c, run.raw_stages
  return c
end

-- (what each query calls, cached: the functions below run in the
-- interpreter, where each C.name is a namespace lookup)
local window_new, window_free, window_set_fns = C.sp_window_new, C.sp_window_free, C.sp_window_set_fns
local vals_new, vals_unref, window_start_in = C.sp_vals_new, C.sp_vals_unref, C.sp_window_start_in
local window_status, wgroup_pop, wgroup_wait = C.sp_window_status, C.sp_wgroup_pop, C.sp_wgroup_wait
local window_set_tag, window_tag = C.sp_window_set_tag, C.sp_window_tag
local tnew = require "table.new"
local band = require("bit").band
local host_signal = C.sp_host_signal
local WIN_CANCELLED, WIN_RUNNING = C.SP_WIN_CANCELLED, C.SP_WIN_RUNNING

-- owned: the caller frees the window on every path (run_batch: its ring,
-- and run_all on an error); otherwise the collector is the safety net.
-- (A finalizer set and cleared a query churned LuaJIT's finalizer table
-- like any table keyed by ever new objects: ~2.7 us a query with 2,000
-- in flight.)
local function new_window(run, q, index, owned)
  local o = run.o
  local cfg = run_wcfg(run)
  -- A safety limit above the agent's own hop budget (ctx.max_hops).
  local limit = o.max_hops or D.max_hops
  if q.max_hops and q.max_hops >= limit then limit = q.max_hops + 1 end
  cfg.max_hops = limit
  local err, errlen = core.errbuf()
  local w = window_new(core.ctx, cfg, err, errlen)
  if w == nil then return nil, ffi.string(err) end
  if not owned then w = ffi.gc(w, window_free) end
  -- the query's digest for its record's provenance, before the agent sees
  -- (and perhaps changes) its record
  if run.prov and not q.digest then provlib.query(q) end
  -- the window hands the adapter the query's ctx, the metatable of its
  -- step ctx tables (specula.internal.protocol)
  run.qshared = run.qshared or agentlib.query_shared(run.adapter, o)
  local qmt = agentlib.query_ctx(run.qshared, q.id, q.query, q.record, index, q.max_hops)
  local fns = run.fns
  fns.qctx = vals_new(core.ctx)
  sched.vals[fns.qctx] = qmt
  local rc = window_set_fns(w, fns, err, errlen)
  vals_unref(core.ctx, fns.qctx)   -- the window holds its own reference now
  fns.qctx = 0
  if rc ~= 0 then
    if owned then window_free(w) end
    return nil, ffi.string(err)
  end
  if run.kept then
    run.kept[qmt] = {}
    run.kept_q[q] = qmt
  end
  return w
end

-- Read a finished window into its record (the caller releases it).
local function finish_window(run, w, q, index, whole)
  local o = run.o
  local rec = collect(w, q, run, nil, whole)
  local cassette = package.loaded["specula.cassette"]
  if cassette and cassette.state then
    cassette.query_done(q.id, rec.error, rec.error == nil and sched.vals[C.sp_window_answer_ref(w)] or nil, index,
      q.query)
  end
  if run.kept then
    -- the query's pairs go into its record and leave the run
    local qmt = run.kept_q[q]
    run.kept_q[q] = nil
    local list = qmt and run.kept[qmt]
    if qmt then run.kept[qmt] = nil end
    if list then rec.candidates = json.array(list) end
  end
  -- a predictor that learns after each query reads the committed
  -- conversation: taken now, while the window still holds the final step
  if run.learn and run.adapter.conversation and rec.trajectory and not rec.error then
    rec._conv = run.adapter.conversation(sched.vals[C.sp_window_answer_ref(w)], q)
  end
  if o.trace and run.trace_out then
    tracewriter.events(w, index + (run.trace_pid or 0), q, run.trace_out, run.trace_config)
  end
  return rec
end

-- Run one query through a window (inside a task); returns its record.
local function run_query(run, q, index)
  local w, err = new_window(run, q, index)
  if not w then return { id = q.id, query = q.query, gold = gold_of(q), error = err } end
  local me = sched.current("run_query")
  C.sp_window_start(w, me)
  while window_status(w) == WIN_RUNNING do sched.yield() end
  -- (a whole record: the window goes now)
  local rec = finish_window(run, w, q, index, true)
  ffi.gc(w, nil)
  window_free(w)
  return rec
end
M.run_query = run_query

-- Whether file descriptor fd is a terminal (the progress line's default).
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

-- The adapter's functions as value-store slots for every window of a batch
-- (sp_window_set_fns); released when the batch ends, however it ends.
local FN_FIELDS = { "start", "advance", "call", "warmup", "verify", "speculate", "pfcall" }
local function fns_acquire(run)
  local fns = ffi.new("sp_window_fns")
  local jobs = agentlib.jobs(run.adapter)
  for _, f in ipairs(FN_FIELDS) do
    local fn = jobs[f]
    if fn ~= nil then
      local slot = vals_new(core.ctx)
      sched.vals[slot] = fn
      fns[f] = slot
    end
  end
  return fns
end
local function fns_release(fns)
  for _, f in ipairs(FN_FIELDS) do
    if fns[f] ~= 0 then vals_unref(core.ctx, fns[f]) end
    fns[f] = 0
  end
end

-- Run every query of `queries` with `run` at the given concurrency; call
-- emit(rec, i, q) in input order (i: the query's place in `queries`).
-- `queries` is a list, or a stream { n =, next() } (specula.run.inputs) that
-- is read as slots free up, so a large input is never held whole. Returns
-- the list of records (where emit returned a value, that value in the
-- record's place), whether a signal stopped the run, and how many records
-- were emitted; with keep = false the list stays empty and each record
-- goes once emitted (a large batch keeps none). One driver task runs the
-- whole batch: windows report to a group as they finish.
-- A sharded run whose queries share state: each shard has its own, so the
-- merged results differ from one machine's; said once on stderr.
function M.note_shard(run, o)
  local shared = o.shard and M.shared_state(run)
  if shared and not o.quiet then
    output.stderr(format("specula: note: %s, and a shard runs one query in %d: its "
      .. "results (times, not answers) differ from those of one machine running the whole input\n", shared,
      o.shard[2]))
  end
end

-- What the queries of a run share, which makes a query's result depend on
-- the others (nil if nothing): said in the notes of the virtual clock's
-- serial order and of --shard.
function M.shared_state(run)
  return run.learn and "the agent's predictor learns across queries"
    or run.kauto and "--k auto estimates alpha and beta over the whole run"
    or run.policy.rate_class and ("the policy's class '" .. tostring(run.policy.rate_class)
      .. "' has a rate, shared by the whole run")
end

local run_batch

-- A task with no parent, started from the loop (not from inside the
-- caller's job, whose window it may cancel).
local function spawn_root(fn)
  local p = C.sp_task_new(core.ctx, nil)
  if p == nil then return end
  local id = C.sp_task_id(p)
  sched.co_table[id] = coroutine.create(function() pcall(fn) end)
  C.sp_task_release(p)   -- the queue holds its own reference
end

-- The cassette's record file could not be written: the run stops as it
-- does when --out cannot be written (exit 1, the file and the OS error).
local function check_cassette()
  local cassette = package.loaded["specula.cassette"]
  local cf = cassette and cassette.failed()
  if cf then write_failed(cf.what, cf.err) end
end
M.check_cassette = check_cassette

local function run_all(run, queries, emit, progress, keep)
  run.fns = fns_acquire(run)
  -- (a cassette is loaded only when one was opened: --record, --replay-io)
  local cassette = package.loaded["specula.cassette"]
  local prev_hook = cassette and cassette.on_fail
  local ok, res, stopped, count = pcall(run_batch, run, queries, emit, progress, keep ~= false)
  -- the windows a failed batch still held (run_batch's ring): released here
  local R = run.ring
  run.ring = nil
  if not ok and R then
    -- (emptied as they go: a cassette's failure hook may still walk them)
    for s = 1, R.cap do
      local w = R.win[s]
      R.win[s] = nil
      if w then window_free(w) end
    end
  end
  if cassette then cassette.on_fail = prev_hook end
  fns_release(run.fns)
  run.fns = nil
  if not ok then error(res, 0) end
  return res, stopped, count
end

-- How many queries of the batch run at once.
-- State the queries share makes a query's result depend on which
-- others ran before or beside it: a predictor that learns across queries
-- (run_batch learns each trajectory in input order, so a query only ever
-- sees what the queries before it taught), --k auto's live estimates, a
-- policy class with a rate (one bucket for the run). Under the virtual
-- clock results must not depend on --concurrency, so such a run takes
-- its queries one at a time in input order, as --concurrency 1 does (it
-- costs little: nothing waits in real time, and each query is timed
-- from its own start).
-- The note is said once a process for each reason: a script that runs many
-- such runs (folds, configurations) says it once.
local SERIAL_NOTED = {}
local function batch_concurrency(run, n)
  local o = run.o
  local conc = math.min(o.concurrency or D.concurrency, math.max(n, 1))
  local shared = M.shared_state(run)
  if shared and conc > 1 and sched.clock() == "virtual" then
    if not SERIAL_NOTED[shared] and not o.quiet then
      SERIAL_NOTED[shared] = true
      output.stderr("specula: note: ", shared, ", so under the virtual clock the queries run one at a time in "
        .. "input order (--concurrency changes no result)\n")
    end
    conc = 1
  end
  return conc
end

-- Start query q's window w in group, after a keyed random delay with
-- --start-jitter-ms (spreads the starts of concurrent queries; keyed, so
-- runs repeat).
local function start_later(o, w, q, group)
  local idk = tostring(q.id)
  local delay = C.sp_rand_keyed(o.seed or D.seed, idk, #idk, 0, "start", 0) * o.start_jitter_ms
  sched.spawn(function() sched.sleep(delay) window_start_in(w, group) end)
end
-- (the closure in its own function: one here closed w and group on every
-- return, which the JIT does not compile, and kept the caller interpreted)
local function start_window(run, w, q, group)
  local o = run.o
  if o.start_jitter_ms and o.start_jitter_ms > 0 then
    start_later(o, w, q, group)
  else
    window_start_in(w, group)
  end
end

-- The queries of a batch from the oldest not yet written (next_emit) to the
-- next to start, their records and their windows, in three rings indexed by
-- the query's index modulo a power of two that grows with that span. (Tables
-- keyed by the index itself only ever gained new keys: their hash parts
-- filled with dead ones and were rebuilt again and again, ~5 us a query with
-- 2,000 in flight.)
local function ring_new(cap)
  return { cap = cap, q = tnew(cap, 0), res = tnew(cap, 0), win = tnew(cap, 0) }
end
-- Room for the indices lo .. hi (the span a new query at hi makes).
local function ring_grow(R, lo, hi)
  local cap = R.cap * 2
  while hi - lo >= cap do cap = cap * 2 end
  local N = ring_new(cap)
  local om, m = R.cap - 1, cap - 1
  for i = lo, hi - 1 do
    local a, b = band(i, om) + 1, band(i, m) + 1
    N.q[b], N.res[b], N.win[b] = R.q[a], R.res[a], R.win[a]
  end
  R.cap, R.q, R.res, R.win = cap, N.q, N.res, N.win
end

-- A record the engine wrote from its window (records.collect's window record,
-- run.direct) is out: the window the ring kept for it goes. (A batch that
-- fails before frees the ring's windows: run_all.)
local function drop_window(R, s, r)
  local w = r._w
  if w then
    R.win[s] = nil
    window_free(w)
  end
end

-- After an interrupt: write what finished behind the gap, in input order,
-- and return the kept records with no holes (and the emitted count).
local function emit_late(R, next_emit, next_i, emitted, emit, kept)
  local m = R.cap - 1
  for i = next_emit, next_i - 1 do
    local s = band(i, m) + 1
    local r = R.res[s]
    if r then
      local q = R.q[s]
      if q.shard then r.shard = q.shard end
      -- emitted whether or not records are kept (a run that keeps none:
      -- every CLI run without --trace)
      local e = emit(r, i, q)
      if kept then kept[i] = e or r end
      R.res[s] = nil
      drop_window(R, s, r)
      emitted = emitted + 1
    end
  end
  local list = {}
  if kept then
    for i = 1, next_i - 1 do
      if kept[i] then list[#list + 1] = kept[i] end
    end
  end
  return list, emitted
end

-- A failed cassette write cancels every window of ring R in the span
-- span() returns (first, past the last) from the loop, so the driver wakes
-- and stops the run at once. (No cassette loaded: none is open.)
local function hook_cassette(R, span)
  local cassette = package.loaded["specula.cassette"]
  if not cassette then return end
  cassette.on_fail = function()
    spawn_root(function()
      local m = R.cap - 1
      local lo, hi = span()
      for i = lo, hi - 1 do
        local w = R.win[band(i, m) + 1]
        if w then C.sp_window_cancel(w) end
      end
    end)
  end
end

-- Start query q, the batch's i-th: its window into ring R (a window that
-- cannot be made is the query's error record at once).
local function start_query(run, R, q, i, group, record)
  local s = band(i, R.cap - 1) + 1
  R.q[s] = q
  local w, err = new_window(run, q, i, true)
  if not w then return record(i, { id = q.id, query = q.query, gold = gold_of(q), error = err }) end
  window_set_tag(w, i)
  R.win[s] = w
  start_window(run, w, q, group)
end

-- A finished window is read into its record with no protected call around
-- each read: its return into a pcall frame ended the compiled trace of the
-- read (LuaJIT cannot return from a trace into a pcall below where it
-- started), so every record was read in the interpreter (8-12 % of a
-- one-hop query's instructions). The whole loop (pump) runs in one
-- protected call instead, and a failure while a window is read is that
-- query's error record, as before; any other ends the batch.
run_batch = function(run, queries, emit, progress, keep)
  local stream = queries.next and queries or nil
  local n = stream and stream.n or #queries
  -- R: the queries started and not yet emitted (above); kept: with keep,
  -- every record by index (what the run returns)
  local R = ring_new(64)
  run.ring = R   -- (its windows are run_all's to release should the batch fail)
  local kept = keep and {} or nil
  local next_emit, emitted, done, started, next_i = 1, 0, 0, 0, 1
  local t0 = sched.real_now()   -- the progress line's rate is real queries per second
  local sum_wall, sum_std, nfailed = 0, 0, 0
  local conc = batch_concurrency(run, n)
  local learn = run.learn
  local group = ffi.gc(C.sp_wgroup_new(core.ctx), C.sp_wgroup_free)
  local me = sched.current("specula.run")
  -- A SIGINT/SIGTERM (trapped by runner.main) cancels every window: then no
  -- query starts, the cancelled ones are dropped (a resume runs them) and
  -- the finished ones are still written.
  local cctx = core.ctx
  local interrupted = false
  hook_cassette(R, function() return next_emit, next_i end)
  -- Write the record in slot s, the query next_emit's, and free the slot.
  local function emit_slot(s)
    local r, q = R.res[s], R.q[s]
    if learn and r.trajectory and not r.error then
      learn(r.trajectory, q, r._conv)
      run.learnt[#run.learnt + 1] = q.index   -- what FILE.predictor covers (specula.run.predstate)
    end
    r._conv = nil
    if q.shard then r.shard = q.shard end
    -- what emit returns stands for the record from then on (--compare
    -- keeps a slim copy and lets the record go); without keep, nothing
    local e = emit(r, next_emit, q)
    if kept then kept[next_emit] = e or r end
    R.res[s], R.q[s] = nil, nil
    drop_window(R, s, r)
    next_emit, emitted = next_emit + 1, emitted + 1
  end
  local function record(i, rec)
    local m = R.cap - 1
    R.res[band(i, m) + 1] = rec
    done = done + 1
    -- a failed query is counted, not summed: its wall time is how long it took to fail
    if rec and rec.error then nfailed = nfailed + 1
    elseif rec and rec._agg then sum_wall, sum_std = sum_wall + rec._agg.wall, sum_std + rec._agg.std end
    -- (the slot of next_i is that of an index written already: empty)
    local s = band(next_emit, m) + 1
    -- the first record to write is taken before the loop, which is entered
    -- only when more are ready (see encode_window in specula.run.records:
    -- a loop entered every query keeps this path out of compiled traces)
    if R.res[s] then
      emit_slot(s)
      s = band(next_emit, m) + 1
      while R.res[s] do
        emit_slot(s)
        s = band(next_emit, m) + 1
      end
    end
    if progress and rec then progress(done, n, t0, sum_wall, sum_std, nfailed) end
  end
  -- (a failure while a window is read: fin_w set; see above)
  local fin_w, fin_q, fin_i, fin_cancelled
  local function finished(aw, q, ai, cancelled, rec)
    if cancelled and cctx ~= nil and host_signal(cctx) ~= 0 then
      interrupted = true
      rec = nil
    end
    -- (a record written from its window keeps it in the ring: drop_window)
    if rec and rec._w then R.win[band(ai, R.cap - 1) + 1] = aw else window_free(aw) end
    record(ai, rec)
  end
  local function pump()
    while done < n and not (interrupted and done == started) do
      check_cassette()
      if not interrupted and cctx ~= nil and host_signal(cctx) ~= 0 then interrupted = true end
      if interrupted and done == started then break end  -- nothing left to wait for
      while not interrupted and started - done < conc and next_i <= n do
        local i = next_i
        if i - next_emit >= R.cap then ring_grow(R, next_emit, i) end
        next_i, started = i + 1, started + 1
        local q
        if stream then q = stream.next() else q = queries[i] end
        start_query(run, R, q, i, group, record)
      end
      local fw = wgroup_pop(group)
      if fw == nil then
        if wgroup_wait(group, me) == 0 then sched.yield() end
      else
        -- the window's tag is its query's index; the ring holds the window
        -- (its finalizer) and the query
        local ai = window_tag(fw)
        local s = band(ai, R.cap - 1) + 1
        local aw, q = R.win[s], R.q[s]
        check_cassette()   -- (raises with the window still in the ring: run_all frees it)
        R.win[s] = nil
        local cancelled = window_status(fw) == WIN_CANCELLED
        fin_w, fin_q, fin_i, fin_cancelled = aw, q, ai, cancelled
        local rec = finish_window(run, aw, q, ai)
        fin_w = nil
        finished(aw, q, ai, cancelled, rec)
      end
    end
  end
  while true do
    local ok, e = pcall(pump)
    if ok then break end
    local aw, q = fin_w, fin_q
    if aw == nil then error(e, 0) end
    fin_w = nil
    finished(aw, q, fin_i, fin_cancelled, { id = q.id, query = q.query, gold = gold_of(q), error = sched.errstr(e) })
  end
  if stream and stream.finish then stream.finish() end
  if interrupted then
    -- write what finished behind a gap, in input order; return no holes
    local list
    list, emitted = emit_late(R, next_emit, next_i, emitted, emit, kept)
    return list, true, emitted
  end
  return kept or {}, false, emitted
end

M.run_all = run_all

-- The "done/n  q/s  ETA  RelLat" line on stderr, redrawn as queries finish
-- (nil when disabled).
local function progress_line(enabled)
  if not enabled then return nil end
  return function(done, n, t0, sw, ss, nf)
    local el = (sched.real_now() - t0) / 1000
    local rate = el > 0 and done / el or 0
    local eta = rate > 0 and (n - done) / rate or 0
    output.stderr(format("\r%d/%d  %.1f q/s  ETA %.0fs  RelLat %s%s   ", done, n, rate, eta,
      ss > 0 and fmt(sw / ss) or "-", (nf or 0) > 0 and format(" (%d failed, not in it)", nf) or ""))
    if done == n then output.stderr("\n") end
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
  local o, queries = runopts.from_api(opts)
  -- a cassette for this run only: record = DIR, replay_io = DIR, miss = MODE
  local cassette = package.loaded["specula.cassette"]
  local own_cassette = false
  if opts.record ~= nil or opts.replay_io ~= nil then
    cassette = require "specula.cassette"
    if cassette.state then error("specula.run: a cassette is already open (--record / --replay-io)", 2) end
    if opts.miss == "live" and (o.clock or sched.clock()) == "virtual" then
      error("specula.run: miss = 'live' makes real calls: it needs the real clock", 2)
    end
    local ok, cerr = require("specula.run.cassette").open({ record = opts.record, replay = opts.replay_io,
                                                           miss = opts.miss })
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
    if type(run) == "table" and run.plain then run = run.message end   -- a message for the caller
    error(run, 0)
  end
  if o.light then run.acc = new_agg() end
  -- the records say where they came from, as the command line's do: the
  -- script (opts.script, else the one `specula run` started), the queries
  -- (format "api": the digest of their records as given), the configuration
  -- (not a light record: it keeps only the answer and the counters)
  local qrecs = {}
  for i, q in ipairs(queries) do qrecs[i] = q.record or { id = q.id, query = q.query } end
  local okq, qtext = pcall(json.canonical, json.array(qrecs))
  M.prov_of({ version = version, agent = provlib.agent(opts.script, true),
              input = { file = json.null, format = "api", sha256 = provlib.sha256_hex(okq and qtext or "") } },
            agent, o, run)
  -- (the parts every record shares are one table each: read them, do not
  -- change them)
  local t, qd = run.prov.t, provlib.query
  local results = run_all(run, queries, not o.light and function(rec, _, q)
    rec.provenance = { version = t.version, agent = t.agent, input = t.input, config = t.config, run = t.run,
                       query = qd(q) }
  end or function() end, nil)
  if sched.clock() ~= prev_clock then sched.set_clock(prev_clock) end
  local cst = own_cassette and cassette.close()
  if cst and cst.failed then write_failed(cst.failed.what, cst.failed.err) end
  local agg = aggregate.of(results, o.k, run.acc)
  for _, r in ipairs(results) do
    if o.light and r.error and r.hops == nil then
      -- a query that failed before its window ran (no counters were added)
      agg.queries, agg.failed = agg.queries + 1, agg.failed + 1
    end
  end
  agg.policy_counts = policylib.counts(run.policy)
  if cst then
    agg.cassette = { served = cst.served, missed = cst.missed, missed_committed = cst.missed_committed,
                     live = cst.live, recorded = cst.recorded, held = cst.held, again = cst.again,
                     missed_cancelled = cst.missed_cancelled }
  end
  for _, r in ipairs(results) do strip(r) end
  return results, agg
end

-- `specula run` with an agent. compare(agent, o, src, script) runs
-- --compare (specula.run.compare.main, given by specula.cmd.run: compare
-- sits above the runner, whose pieces it uses).
-- The run's --out (else stdout) and --trace, opened before the run so that
-- a path that cannot be written fails first; an --out this run created for
-- nothing (the --trace path failed) is not left behind, empty.
local function open_outputs(o)
  local out, what = output.wrap(io.stdout, "canonical"), "stdout"
  local out_new = o.out and C.sp_host_path_kind(o.out) == 0
  if o.out then
    out, what = records.open_records(o.out, "--out file"), format("--out file '%s'", o.out)
  end
  if not o.trace then return out, what, nil end
  local tok, t = pcall(open_output, o.trace, "w", "--trace file", "json")
  if not tok then
    if out_new then
      records.close_records(out, format("--out file '%s'", o.out), o.out)
      os.remove(o.out)
    end
    error(t, 0)
  end
  return out, what, t
end

function M.main(agent, args, script, compare)
  local o = runopts.parse_args(args)
  if o.help then return nil, nil, "help" end   -- specula.cmd prints the usage
  if o.clock then
    local ok, cerr = sched.set_clock(o.clock)
    if not ok then sched.plain_error("specula run: --clock " .. o.clock .. ": " .. cerr) end
  end
  local cassette = package.loaded["specula.cassette"]
  if (o.record or o.replay_io) and not (cassette and cassette.state) then
    local ok, cerr, why = require("specula.run.cassette").open({ record = o.record, replay = o.replay_io,
                                                                 miss = o.miss })
    if not ok and why == "write" then sched.plain_error("specula run: " .. cerr, 1) end
    if not ok then runopts.usage_error(cerr) end
    cassette = package.loaded["specula.cassette"]
  end
  runopts.check_predict(o, agent)
  local src, warnings = runopts.load_queries(o)
  for _, w in ipairs(warnings) do output.stderr("specula: warning: " .. w .. "\n") end
  -- Ctrl-C / SIGTERM: stop, write what finished, exit 128 + signal.
  if core.ctx ~= nil then C.sp_host_trap_signals(core.ctx) end
  if o.compare then
    if type(compare) ~= "function" then
      error("specula.run.runner.main: --compare needs its driver (specula.run.compare.main) as 4th argument", 2)
    end
    local status = compare(agent, o, src, script)
    local cst = cassette and cassette.close()
    if cst and cst.failed then write_failed(cst.failed.what, cst.failed.err) end
    if cst and not o.quiet then output.stderr(cassette.summary(cst), "\n") end
    return status
  end
  runopts.load_knobs(o, script)
  local run = make_run(agent, o, script)
  -- every record says where it came from; a resumed --out must come from here
  local base = M.prov_base(o, src, script)
  M.prov_of(base, agent, o, run)
  M.note_shard(run, o)
  local skip, nprev = {}, 0
  -- a predictor that learns across queries is kept beside --out
  local pstate = o.out and run.learn and (o.out .. ".predictor") or nil
  local predstate = pstate and require("specula.run.predstate")
  -- (an --out that is not there yet has nothing to resume: the reader, a
  -- module of its own, is not loaded for it)
  if o.out and C.sp_host_path_kind(o.out) ~= 0 then
    local done, learnt, _
    done, nprev, _, learnt = require("specula.run.resume").read(o.out, { retry_failed = o.retry_failed, src = src,
      shard = o.shard, prov_of = function(r)
        if r.config ~= nil then
          return nil, format("the record is from a --compare run (configuration '%s'); this run is not: resume it "
            .. "with the same --compare list, or give a new --out file", tostring(r.config))
        end
        return run.prov
      end })
    skip = done[true] or {}
    if pstate and nprev > 0 then
      local ok, why = false, "a predictor without state() and restore()"
      if predstate.keepable(run.predictor) then
        local runs, rwhy = predstate.read(pstate)
        local raised
        ok, why, raised = predstate.restore(run.predictor, pstate, runs, rwhy, run.prov.run, learnt[true] or {})
        if raised then run.pdisable("restore", why) end
      end
      if not run.pdisabled() then predstate.resumed(run, ok, why, learnt[true] or {}, pstate, o.quiet) end
    end
  end
  -- the queries to run, read from the input as the run takes them (those
  -- whose record is in --out left out, by their position)
  local pending = src:stream(next(skip) ~= nil and function(q) return skip[q.index] end or nil)
  if nprev > 0 and not o.quiet then
    output.stderr(format("specula: resuming: %d results already in %s, %d queries to run\n", nprev, o.out, pending.n))
  end
  -- records are written and their stage times read again only by --trace
  run.raw_stages = not o.trace
  run.raw_stats = run.raw_stages
  local out, what, trace_f = open_outputs(o)
  if o.trace then run.trace_out = {} end
  local write = records.record_writer(out, nil, what, o.out)
  -- Without --trace a written record goes: its counters are folded into
  -- the aggregate as it is written (a large batch keeps no records).
  local acc = not o.trace and aggregate.new_agg() or nil
  -- records of the common shape written whole by the engine from their
  -- windows (specula.run.records, run.direct): a run that keeps none and
  -- reads nothing else of them
  run.direct = acc ~= nil and not run.learn and not run.kept and records.encode_hops_ok
  local emit = M.with_prov(acc and function(rec, i)
    write(rec, i)
    aggregate.add_record(acc, rec, true)
    return true
  end or write, run)
  local show = o.progress or (not o.quiet and o.out ~= nil and isatty(2))
  -- without --trace no record is kept once written
  local results, interrupted, emitted = run_all(run, pending, emit, progress_line(show), not acc)
  if o.out then records.close_records(out, what, o.out) end
  -- a predictor disabled by its failure keeps no state: a resume would
  -- run it again where this run did not
  if pstate and predstate.keepable(run.predictor) and not run.pdisabled() then
    local entry, err = predstate.entry(run.predictor, run.learnt)
    local ok = false
    if entry then ok, err = predstate.save(pstate, { [run.prov.run] = entry }) end
    if not ok then
      output.stderr(format("specula: warning: cannot write %s (%s): a resume of %s will "
        .. "start its predictor afresh\n", pstate, tostring(err), o.out))
    end
  end
  local agg = acc and aggregate.finish(acc, o.k) or aggregate.of(results, o.k)
  if trace_f then
    local entries = {}
    for _, r in ipairs(results) do entries[#entries + 1] = tracewriter.entry(r, o) end
    tracewriter.write(trace_f, o.trace, run.trace_out, entries, { run.prov.run })
  end
  if not o.quiet then output.stderr(aggregate.summary_text(agg, run), "\n") end
  local cst = cassette and cassette.close()
  if cst and cst.failed then write_failed(cst.failed.what, cst.failed.err) end
  if cst and not o.quiet then output.stderr(cassette.summary(cst), "\n") end
  if not acc then for _, r in ipairs(results) do strip(r) end end
  -- the exit status (specula.cmd sets it): a signal's, else 3 when a query failed
  if interrupted then return M.interrupted(emitted, pending.n, o.out) end
  if agg.failed > 0 then return 3 end
end

-- The end of a run stopped by a signal: say so and how to go on; returns
-- the exit status, 128 + signal. out: the --out file, nil when the records
-- went to stdout.
function M.interrupted(done, total, out)
  local sig = C.sp_host_signal(core.ctx)
  local next_step = out
    and format("run the same command again to resume: the queries already in %s are skipped", out)
    or "the records went to stdout, so nothing can be resumed: run with --out FILE, which a second run resumes"
  output.stderr(format("specula: %s: %d of %d queries finished and written; the rest did not run (%s)\n",
    sig == 15 and "terminated" or "interrupted", done, total, next_step))
  return 128 + sig
end

return M
