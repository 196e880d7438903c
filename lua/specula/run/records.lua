-- specula.run.records: a query's result record, read from its finished window,
-- and the files records go to: one JSON line each, flushed at once, and the
-- checked writes of --trace and --summary (a resumed --out: specula.run.resume).
local core = require "specula.internal.core"
local ffi, C = core.ffi, core.C
local sched = require "specula.internal.sched"
local json = require "specula.json"
local output = require "specula.internal.output"
local agg = require "specula.run.aggregate"
local D = require("specula.internal.domains").DEFAULTS

local type, tostring, tonumber, ipairs, format = type, tostring, tonumber, ipairs, string.format

local utf8_clean = json.utf8_clean
local round, theory, est_get, agg_add, gate_stats = agg.round, agg.theory, agg.est_get, agg.agg_add, agg.gate_stats
local gate_text = agg.gate_text

local M = {}

-- ---- a window's record ------------------------------------------------------

local SPEC_NAMES = core.SPEC_NAMES   -- from sp_spec_name: the one outcome enum

-- Values the window keeps (steps, observations, the answer) by slot.
local registry = sched.vals
-- (what a query's record calls, cached: each C.name in the interpreter,
-- where the functions that finish a query run, is a namespace lookup)
local window_status, window_stats_get = C.sp_window_status, C.sp_window_stats_get
local window_stages_json, window_traj_text, window_answer_ref = C.sp_window_stages_json, C.sp_window_traj_text,
  C.sp_window_answer_ref
local window_error, record_stats_json = C.sp_window_error, C.sp_record_stats_json
local WIN_DONE = C.SP_WIN_DONE
local hop_info = ffi.new("sp_hop_info")
local EST = ffi.typeof("sp_est")   -- (a type name is parsed at each ffi.new)
local wstats = ffi.new("sp_window_stats")
local new_stats = ffi.typeof("sp_window_stats")

-- The "stages" object as JSON text written by the engine from the window
-- (sp_window_stages_json), for records that are written and then dropped:
-- no Lua table per hop. nil when the engine leaves it to the Lua path.
local stages_cap = 8192
local stages_buf = ffi.new("char[?]", stages_cap)
local function stages_text(w)
  local n = window_stages_json(w, stages_buf, stages_cap)
  if n > stages_cap then
    stages_cap = n
    stages_buf = ffi.new("char[?]", stages_cap)
    n = window_stages_json(w, stages_buf, stages_cap)
  end
  if n < 0 then return nil end
  -- (returned from a local, not as a tail call of ffi.string: a compiled
  -- trace that returns from such a call is dropped, "leaving loop in root
  -- trace", and its callers stay in the interpreter; so in traj_text,
  -- stats_text, crypto.sha256_hex)
  local s = ffi.string(stages_buf, n)
  return s
end

-- ---- the trajectory as text, hop by hop (sp_window_cfg.encode_trajectory) ----
-- A CLI run that writes each record and keeps none (run.raw_stages, no
-- learning predictor) has each committed hop encoded at once: the same
-- canonical text the record would hold, so the line written is the same,
-- and the hop's step and observation are released (a query in flight
-- keeps bytes, not tables the collector marks on every cycle). A hop that
-- cannot be encoded (a value JSON cannot hold, a step with a metatable)
-- stops it for its window: that hop and the later ones stay values and
-- the record is built and checked as before.
local cenc, cenc_hop = json.cenc, json.cenc_hop
M.encode_hops_ok = cenc ~= nil
local enc_next, enc_count, hop_text, enc_stop = C.sp_window_enc_next, C.sp_window_enc_count,
  C.sp_window_hop_text, C.sp_window_enc_stop
local enc_text = C.sp_jsonenc_text
local window_hop, window_nhops = C.sp_window_hop, C.sp_window_nhops
local enc_info = ffi.new("sp_hop_info")
local ENC_HOP = {}
local ENC_WRAP = { { ENC_HOP } }
-- In a record a hop is two levels down (record, trajectory): one nested
-- close to the encoder's depth limit is checked at that depth (a text that
-- deep is at least twice as many bytes long).
local DEEP_TEXT = 500
local NULL = json.null
local getmetatable = getmetatable
-- ---- a hop of the common shape, written by compiled Lua ----------------------
-- The encoder reads a hop through Lua's C API: 3.3 K instructions a hop,
-- 13 % of a 20-hop run's. A hop whose action is exactly { tool = a string,
-- args = a table of at most four string keys } and whose args' values,
-- segment and observation are strings, numbers, booleans or null is written
-- here instead, into a buffer of its own: the same text (its strings and
-- numbers by the encoder's own writers, sp_json_put_utf8 and
-- sp_json_put_finite; keys in the encoder's byte order, which Lua's string
-- comparison is). Anything else, or a string that is not UTF-8, a number
-- that is not finite: nil, and the encoder takes the hop (and says why it
-- cannot). No loop on the way: a compiled trace through here stays one.
local put_utf8, put_finite = C.sp_json_put_utf8, C.sp_json_put_finite
local next = next
local copy = ffi.copy
local fcap, fpos = 4096, 0
local fbuf = ffi.new("char[?]", fcap)
local function fgrow(need)
  local ncap = fcap
  while ncap < fpos + need do ncap = ncap * 2 end
  local nb = ffi.new("char[?]", ncap)
  copy(nb, fbuf, fpos)
  fbuf, fcap = nb, ncap
end
local function lit(s)
  local n = #s
  if fpos + n > fcap then fgrow(n) end
  copy(fbuf + fpos, s, n)
  fpos = fpos + n
end
-- (a string over FAST_STR goes to the encoder: room for six times its
-- bytes is not taken here; a buffer grown past FAST_KEEP is dropped at the
-- next hop)
local FAST_STR, FAST_KEEP = 65536, 262144
local function fstr(s)
  local n = #s
  if n > FAST_STR then return false end
  if fpos + 6 * n + 2 > fcap then fgrow(6 * n + 2) end
  local k = put_utf8(fbuf + fpos, s, n)
  if k < 0 then return false end
  fpos = fpos + k
  return true
end
local function fval(v)
  local t = type(v)
  if t == "string" then return fstr(v) end
  if t == "number" then
    if fpos + 40 > fcap then fgrow(40) end
    local k = put_finite(fbuf + fpos, v)
    if k < 0 then return false end
    fpos = fpos + k
    return true
  end
  if v == true then lit("true") return true end
  if v == false then lit("false") return true end
  if v == NULL then lit("null") return true end
  return false
end
-- sep, the member's quoted key and colon (a constant), its value
local function fmember(sep, keylit, v)
  lit(sep)
  lit(keylit)
  return fval(v)
end
-- "key":value, after sep
local function fpair(sep, k, v)
  lit(sep)
  if not fstr(k) then return false end
  lit(":")
  return fval(v)
end
local function fobj(t)
  if getmetatable(t) ~= nil then return false end
  local k1 = next(t)
  if k1 == nil then
    lit("{}")
    return true
  end
  local k2 = next(t, k1)
  local k3 = k2 ~= nil and next(t, k2) or nil
  local k4 = k3 ~= nil and next(t, k3) or nil
  if k4 ~= nil and next(t, k4) ~= nil then return false end
  if type(k1) ~= "string" or (k2 ~= nil and type(k2) ~= "string") or (k3 ~= nil and type(k3) ~= "string")
     or (k4 ~= nil and type(k4) ~= "string") then
    return false
  end
  -- sorted (each key into its place among the ones before it)
  if k2 ~= nil and k2 < k1 then k1, k2 = k2, k1 end
  if k3 ~= nil then
    if k3 < k2 then k2, k3 = k3, k2 end
    if k2 < k1 then k1, k2 = k2, k1 end
    if k4 ~= nil then
      if k4 < k3 then k3, k4 = k4, k3 end
      if k3 < k2 then k2, k3 = k3, k2 end
      if k2 < k1 then k1, k2 = k2, k1 end
    end
  end
  if not fpair("{", k1, t[k1]) then return false end
  if k2 ~= nil then
    if not fpair(",", k2, t[k2]) then return false end
    if k3 ~= nil then
      if not fpair(",", k3, t[k3]) then return false end
      if k4 ~= nil and not fpair(",", k4, t[k4]) then return false end
    end
  end
  lit("}")
  return true
end
-- cenc_hop's text of (seg, act, obs) in fbuf: its length, or nil
local function fast_hop(seg, act, obs)
  fpos = 0
  if fcap > FAST_KEEP then
    fcap = 4096
    fbuf = ffi.new("char[?]", fcap)
  end
  local sep = "{"
  if act ~= nil then
    if type(act) ~= "table" or getmetatable(act) ~= nil then return nil end
    local tool, args = act.tool, act.args
    if type(tool) ~= "string" or type(args) ~= "table" then return nil end
    -- (two keys, both set: they are tool and args)
    local k1 = next(act)
    if next(act, next(act, k1)) ~= nil then return nil end
    lit('{"action":{"args":')
    if not fobj(args) then return nil end
    lit(',"tool":')
    if not fstr(tool) then return nil end
    lit("}")
    sep = ","
  end
  if obs ~= nil then
    if not fmember(sep, '"observation":', obs) then return nil end
    sep = ","
  end
  if seg ~= nil and not fmember(sep, '"segment":', seg) then return nil end
  if fpos == 0 then lit("{") end
  lit("}")
  return fpos
end
-- (for hop_text_spec: the text, or nil)
function M.fast_hop_text(seg, act, obs)
  local n = fast_hop(seg, act, obs)
  return n and ffi.string(fbuf, n) or nil
end

-- Encodes hop i of w into its text; false when it cannot be (the window
-- stops there: it and later hops keep their values) or the window takes no
-- more text (stopped already, out of memory). fast: a hop of the common
-- shape is written by fast_hop (as hops commit, in the dispatcher's trace);
-- not when a record is collected, where fast_hop inlined into the run's
-- pump made its compiled trace too long ("trace too long"): a one-hop run
-- then took 12 % more instructions.
local function encode_hop(w, i, fast)
  window_hop(w, i, enc_info)
  local step, obs = registry[enc_info.step_ref], registry[enc_info.obs_ref]
  -- the text is copied from the encoder's buffer into the window's
  -- (no Lua string a hop: one less object made, hashed and swept)
  local text, len
  if type(step) == "table" and getmetatable(step) == nil then
    if obs == nil then obs = NULL end
    local seg, act = step.segment, step.action
    local n = fast and fast_hop(seg, act, obs)
    if n then return hop_text(w, i, fbuf, n) == 0 end
    text, len = cenc_hop(seg, act, obs)
    if text and len >= DEEP_TEXT then
      -- (the check reuses the encoder's buffer: the hop is encoded again)
      ENC_HOP.segment, ENC_HOP.action, ENC_HOP.observation = seg, act, obs
      if cenc(ENC_WRAP, true) then text, len = cenc_hop(seg, act, obs) else text = nil end
      ENC_HOP.segment, ENC_HOP.action, ENC_HOP.observation = nil, nil, nil
    end
  end
  if not text then
    enc_stop(w)
    return false
  end
  return hop_text(w, i, enc_text(text), len) == 0
end

-- Encodes w's hops from the first one not yet text on, in order.
-- (The first hop is taken before the loop, and the loops below are entered
-- only when there is more than one: a compiled trace of a query's last
-- step, which usually has one hop left here, cannot enter a loop that is
-- not compiled itself, and LuaJIT then leaves the whole path to the
-- interpreter.)
local function encode_window(w, fast)
  local i, n = enc_count(w), window_nhops(w)
  if i >= n or not encode_hop(w, i, fast) then return end
  i = i + 1
  while i < n do
    if not encode_hop(w, i, fast) then return end
    i = i + 1
  end
end

local function encode_hops(fast)
  local cctx = core.ctx
  local w = enc_next(cctx)
  while w ~= nil do
    encode_window(w, fast)
    w = enc_next(cctx)
  end
end
M.encode_hops = encode_hops
if cenc then sched.on_commits = function() return encode_hops(true) end end

local traj_len = ffi.new("int[1]")
local function traj_text(w, i, j)
  local p = window_traj_text(w, i, j, traj_len)
  local s = ffi.string(p, traj_len[0])
  return s
end

-- A finished window's answer, or its error, into rec.
local function set_outcome(rec, w, status)
  if status == WIN_DONE then
    local fin = registry[window_answer_ref(w)]
    rec.answer = fin and fin.final
  else
    rec.error = utf8_clean(ffi.string(window_error(w)))
  end
end

-- The record's "stats" object of a finished window as a table: st its
-- statistics (sp_window_stats), n its committed hops, rc what the run adds
-- (k_cfg, mode, m, launch, match, pfoff).
local function stats_table(st, n, rc)
  local p_hat, alpha, beta = est_get(st.est)
  local k_cfg = rc.k_cfg
  local k_used = k_cfg == 0 and st.k_last or k_cfg
  local star, rk = theory(p_hat, alpha, beta, k_used)
  local s = {
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
    mode = rc.mode, k_config = k_cfg < 0 and "inf" or (k_cfg == 0 and "auto" or k_cfg),
    m = rc.m, spec_launch = rc.launch,
  }
  local match = rc.match
  if match then
    local pf = st.pf
    local fired = tonumber(pf.fired)
    s.prefetch = {
      candidates = tonumber(pf.candidates), fired = fired, promoted = tonumber(pf.promoted),
      promoted_lossy = tonumber(pf.promoted_lossy), wasted = tonumber(pf.wasted),
      wasted_cost = round(tonumber(pf.wasted_cost), 6), gated_ev = tonumber(pf.gated_ev),
      gated_policy = tonumber(pf.gated_policy), held = tonumber(pf.held),
      saved_ms = round(tonumber(pf.saved_ms), 3),
      hit_rate = fired > 0 and round(tonumber(pf.promoted) / fired, 4) or json.null,
      match = match, lossy = match ~= "exact",
    }
    -- the predictor raised earlier in the run and is off: this query ran
    -- without action speculation, whatever its configuration says
    if rc.pfoff then s.prefetch.predictor_off = true end
    if tonumber(pf.promoted_lossy) > 0 then s.lossy = true end
  end
  return s
end
M.stats_table = stats_table

-- the run's sp_stats_opts (made once per run's settings)
local function sopts_of(rc)
  local so = rc.sopts
  if not so then
    so = ffi.new("sp_stats_opts")
    so.k_config, so.m = rc.k_cfg, rc.m
    so.mode, so.spec_launch, so.match = rc.mode, rc.launch, rc.match
    so.predictor_off = rc.pfoff and 1 or 0
    rc.sopts = so
  end
  return so
end
-- The same object as JSON text written by the engine (sp_record_stats_json),
-- for a record written and dropped: no table, no key sorting. nil when a
-- figure is not finite (stats_table's record then says which).
-- The settings go to C once per run's settings (rc.sopts; its strings are
-- rc's, which keeps them alive), the hop count per record: each field set
-- from Lua outside a compiled trace costs a conversion.
local stats_cap = 8192
local stats_buf = ffi.new("char[?]", stats_cap)
local function stats_text(st, n, rc)
  local so = sopts_of(rc)
  so.hops = n
  local len = record_stats_json(st, so, stats_buf, stats_cap)
  if len > stats_cap then
    stats_cap = len
    stats_buf = ffi.new("char[?]", stats_cap)
    len = record_stats_json(st, so, stats_buf, stats_cap)
  end
  if len < 0 then return nil end
  local s = ffi.string(stats_buf, len)
  return s
end
M.stats_text = stats_text

-- What a record's stats take from the run (stats_table): one table a run,
-- made again only when the predictor's state changes.
local function run_cfg(run)
  local o = run.o
  local pfoff = run.pdisabled and run.pdisabled() or false
  local rc = run.stats_cfg
  if rc and rc.pfoff == pfoff then return rc end
  local seq = o.mode == "sequential"
  rc = { k_cfg = seq and 1 or o.k, mode = o.mode, m = seq and 1 or (o.m or D.m),
         launch = o.mode == "spechop" and (o.spec_launch or "eager") or "slot",
         match = run.pf and (o.match or run.match or "exact") or nil, pfoff = pfoff }
  run.stats_cfg = rc
  return rc
end

-- The record's gold answers: the query's, when it has any. An input
-- without them gives an empty list, which went out as "gold":{} (an object:
-- jq '.gold[0]' failed on it); now no key.
local next = next
local function gold_of(q)
  local g = q.gold
  if type(g) == "table" and g[1] == nil and next(g) == nil then return nil end
  return g
end
M.gold_of = gold_of

-- ---- a record the engine writes whole from its window (run.direct) -------
-- a shard field (specula.run.inputs makes it: count, index, of, pos, seed)
-- whose five are numbers (`of` is absent when the input's size is not known)
local function shard_ok(sh)
  return type(sh) == "table" and type(sh.count) == "number" and type(sh.index) == "number"
    and type(sh.of) == "number" and type(sh.pos) == "number" and type(sh.seed) == "number"
end

-- A CLI run that writes each record and keeps none (runner.main: no
-- --trace, learning predictor or kept candidates) and a query of the
-- common shape (its id a string or a number, its query a string, an
-- answer, every hop text) get no Lua record: collect returns a window
-- record, one small table that keeps the window (the driver frees it once
-- the record is written: specula.run.runner), and the writer has the
-- engine assemble the line from the window (sp_record_line), the same
-- bytes the Lua record would encode to: no record table of ten keys, no
-- stages, stats or trajectory string, no encoder walk. The window record
-- carries what the driver and the run's sums read of a record: wall, std
-- and, once written, st (aggregate.add_record).
-- A window the engine cannot write so (a string that is not UTF-8, a
-- figure that is not finite, an answer or gold the encoder refuses) gets
-- its Lua record when written, as before.
local function direct_of(w, q, run, rc)
  local id, query = q.id, q.query
  local tid = type(id)
  if (tid ~= "string" and tid ~= "number") or type(query) ~= "string" then return nil end
  local sh = q.shard
  if sh ~= nil and not shard_ok(sh) then return nil end
  local fin = registry[window_answer_ref(w)]
  local answer = fin and fin.final
  if answer == nil then return nil end
  local n = window_nhops(w)
  if n > 0 then
    if not run.encode_hops then return nil end
    encode_hops()
    encode_window(w)
    if enc_count(w) ~= n then return nil end
  end
  window_stats_get(w, wstats)
  local d = { _w = w, _q = q, _run = run, _rc = rc, _agg = nil, id = id, answer = answer, gold = gold_of(q),
              config = nil, wall = wstats.wall_ms, std = wstats.standard_ms, hops = n, match = rc.match,
              pfoff = rc.match and rc.pfoff or nil, st = nil, _p1 = nil, _qd = nil, _p3 = nil }
  d._agg = d
  return d
end

local record_line_c, window_stats_into = C.sp_record_line, C.sp_window_stats_get
-- v's canonical text as a member of the record (encoded inside a one-item
-- list, so at the depth the record puts it): a pointer to it and its length,
-- kept alive until the next call; nil when the encoder refuses it
local SUB = { false }
local sub_keep = { false, false }
local sub_i = 0
local function sub_text(v)
  SUB[1] = v
  local t = cenc(SUB, true)
  SUB[1] = false
  if not t then return nil end
  sub_i = 1 - sub_i
  sub_keep[sub_i + 1] = t
  return ffi.cast("const char *", t) + 1, #t - 2
end
local line_head = ffi.new("sp_record_head")
local line_cap = 16384
local line_buf = ffi.new("char[?]", line_cap)
local dstats = ffi.new("sp_window_stats")
-- The line of window record d (provenance pieces set: runner.with_prov) in line_buf,
-- tagged with config, and with pick the agreement text after it (its length
-- in line_head.agree_len): the line's length, or nil when the engine cannot
-- write it. Sets d.st.
local function direct_line(d, config, pick)
  local w = d._w
  window_stats_into(w, dstats)
  d.st = dstats
  local h = line_head
  local a, id, qt, p1, qd, p3 = d.answer, d._q.id, d._q.query, d._p1, d._qd, d._p3
  if type(a) == "string" then
    h.answer, h.answer_len, h.answer_json = a, #a, 0
  else
    -- (an answer or gold answers that are not a string: their text as the
    -- record would hold it, one level down; one the encoder refuses there
    -- goes to the Lua record, which says why)
    local t, n = sub_text(a)
    if not t then return nil end
    h.answer, h.answer_len, h.answer_json = t, n, 1
  end
  local g = d.gold
  if g ~= nil then
    local t, n = sub_text(g)
    if not t then return nil end
    h.gold, h.gold_len = t, n
  else
    h.gold = nil
  end
  h.query, h.query_len = qt, #qt
  if type(id) == "string" then
    h.id, h.id_len = id, #id
  else
    h.id, h.id_number = nil, id
  end
  h.prov[0], h.prov_len[0], h.prov[1], h.prov_len[1], h.prov[2], h.prov_len[2] = p1, #p1, qd, #qd, p3, #p3
  if config then h.config, h.config_len = config, #config else h.config = nil end
  local sh = d._q.shard
  if sh then
    h.shard = 1
    local v = h.shard_of
    v[0], v[1], v[2], v[3], v[4] = sh.count, sh.index, sh.of, sh.pos, sh.seed
  else
    h.shard = 0
  end
  h.pick = pick and 1 or 0
  local so = sopts_of(d._rc)
  local n = record_line_c(w, dstats, so, h, line_buf, line_cap)
  if n > line_cap then
    line_cap = n
    line_buf = ffi.new("char[?]", line_cap)
    n = record_line_c(w, dstats, so, h, line_buf, line_cap)
  end
  if n < 0 then return nil end
  return n
end

-- Read a finished window into a result record. A light run (answers
-- only, for benchmarks and large batches) keeps { id, query, answer or
-- error, hops } per query and adds the counters to `acc` instead. With
-- run.raw_stages (a CLI run that writes each record and keeps none of its
-- stage times) rec.stages is the same object as engine-written JSON text
-- (json.raw), encoded verbatim; with run.raw_stats too so is rec.stats,
-- and rec._agg then carries the window's statistics (_agg.st) for the
-- run's sums (aggregate.add_record) and --compare's table (tally).
local function collect(w, q, run, rc, whole)
  local o = run.o
  rc = rc or run_cfg(run)
  local light, acc = o.light, run.acc
  local status = window_status(w)
  if run.direct and status == WIN_DONE and not whole then
    local d = direct_of(w, q, run, rc)
    if d then return d end
  end
  -- every key a record gets, named at once: the table is made at its size
  -- (filled one key at a time it was rehashed twice a query)
  local rec = { id = q.id, query = q.query, gold = gold_of(q), trajectory = nil, answer = nil, error = nil,
                stages = nil, stats = nil, _agg = nil, provenance = nil }
  local traj, hops = {}, nil
  local n = window_nhops(w)
  if light then
    window_stats_get(w, wstats)
    rec.hops = wstats.hops
    -- the query's own time: what a caller comparing queries needs of it
    rec.wall_ms = round(wstats.wall_ms, 3)
    set_outcome(rec, w, status)
    if acc then
      agg_add(acc, wstats, rec.error ~= nil, rc.match)
      if rec.error ~= nil then agg.note_failure(acc, rec.id, rec.error) end
    end
    return rec
  end
  local stages = run.raw_stages and stages_text(w)
  if not stages then hops = {} end
  -- hops 0 .. ne-1 are text already (encode_hops)
  local ne = 0
  if n > 0 and run.encode_hops then
    encode_hops()
    -- and this window's last hops, fewer than a batch (as they would be
    -- encoded inside the record: the same text), so the trajectory is one
    -- piece of text, not a raw piece per hop and a table per hop left
    encode_window(w)
    ne = enc_count(w)
    if ne == n then
      traj = json.raw("[", traj_text(w, 0, n), "]")
    else
      for i = 0, ne - 1 do traj[i + 1] = json.raw(traj_text(w, i, i + 1)) end
    end
  end
  -- (with every hop text and the stages from the engine, nothing to read)
  for i = (stages and ne or 0), n - 1 do
    window_hop(w, i, hop_info)
    if i >= ne then
      local step = registry[hop_info.step_ref]
      local obs = registry[hop_info.obs_ref]
      if obs == nil then obs = json.null end
      traj[i + 1] = { segment = step.segment, action = step.action, observation = obs }
    end
    if not stages then
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
  end
  -- a record whose stats go out as text keeps the statistics themselves
  -- for the run's sums (below): read straight into its own struct
  local st = run.raw_stats and new_stats() or wstats
  window_stats_get(w, st)
  -- no hop (a final answer at once, a query failed at its first step): an
  -- empty list, written [] (it was {}: jq '.trajectory[0]' failed on it)
  rec.trajectory = n == 0 and json.array({}) or traj
  set_outcome(rec, w, status)
  local text = run.raw_stats and stats_text(st, n, rc)
  if stages then
    rec.stages = json.raw(stages)
  else
    -- (no hop: an empty list, [] as the engine writes it; it was {} here)
    rec.stages = { hops = n == 0 and json.array({}) or hops, final_seg = round(st.final_seg_ms, 4),
                   init = round(st.init_ms, 4) }
  end
  if text then
    rec.stats = json.raw(text)
    -- sums for the run's aggregate: the statistics themselves (add_record)
    rec._agg = { wall = st.wall_ms, std = st.standard_ms, acc = st.accepted, rej = st.rejected,
                 est = st.est, st = st, hops = n, match = rc.match, pfoff = rc.match and rc.pfoff or nil }
    return rec
  end
  rec.stats = stats_table(st, n, rc)
  if run.raw_stages and gate_text then rec.stats.gate = json.raw(gate_text(st)) end
  -- sums for the run's aggregate
  rec._agg = { wall = st.wall_ms, std = st.standard_ms, acc = st.accepted, rej = st.rejected,
               est = EST(st.est) }
  return rec
end
M.collect = collect

-- ---- output files ---------------------------------------------------------

pcall(ffi.cdef, "int truncate(const char *path, int64_t length);")

-- A failed write ends the run (status 1): going on would lose results
-- silently. `what` names the file, err is the OS error.
local function write_failed(what, err, note)
  sched.plain_error(format("specula run: cannot write %s: %s%s", what, tostring(err), note or ""), 1)
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

-- Open an output file (`what`: "--out file" ...) as a writer of kind
-- (specula.internal.output: "canonical" for records, "json" for a trace), or end
-- the run saying why; "-" is stdout (written and flushed, never closed).
local function open_output(path, mode, what, kind)
  if path == "-" then return output.wrap(io.stdout, kind) end
  local f, err = output.open(path, mode, kind)
  if not f then write_failed(format("%s '%s'", what, path), os_reason(path, err)) end
  return f
end
M.open_output = open_output

-- The --out file of a run's records, opened for appending (open_output).
-- A regular file is written in batches: its lines go into a buffer of
-- OUT_BUFFER bytes the engine flushes at the end of every drain of its
-- ready queue (before the loop waits for anything) and every 100 ms while
-- the CPU stays busy (engine/sp_outfile.h), not a write(2) and a
-- flush a line, which were 14 % of a one-hop query's CPU. A pipe, a
-- terminal or stdout still get each line at once.
local OUT_BUFFER = 262144
function M.open_records(path, what)
  local out = open_output(path, "a", what, "canonical")
  if path ~= "-" and core.ctx ~= nil and C.sp_host_path_kind(path) == 1 then
    local err, errlen = core.errbuf()
    out.batched = C.sp_outfile_add(core.ctx, out.file, OUT_BUFFER, err, errlen) == 0
  end
  return out
end

-- Cut path back to its last complete line at or before byte `size` (the
-- lines handed to it so far): a batched file may hold less than that, and
-- where its last write stopped is read back, not assumed.
local function cut_back(path, size)
  local f = io.open(path, "rb")
  if not f then return end
  local pos = f:seek("end") or 0
  if pos > size then pos = size end
  local cut = 0
  while pos > 0 do
    local from = pos > 65536 and pos - 65536 or 0
    f:seek("set", from)
    local after = (f:read(pos - from) or ""):match(".*\n()")
    if after then
      cut = from + after - 1
      break
    end
    pos = from
  end
  f:close()
  C.truncate(path, cut)
end

-- A batched file stops being one: its buffer is written (discard: dropped,
-- after a failure); the OS's reason when that write fails.
local function unbatch(out, discard)
  if not out.batched then return nil end
  out.batched = false
  local err, errlen = core.errbuf()
  if C.sp_outfile_remove(core.ctx, out.file, discard and 1 or 0, err, errlen) ~= 0 then return ffi.string(err) end
  return nil
end

-- Close what open_records opened, writing what it buffers first; a failed
-- write ends the run (write_failed), the file cut back to its last
-- complete line.
function M.close_records(out, what, path)
  local why = unbatch(out, false)
  if why then
    out:close()
    cut_back(path, math.huge)
    write_failed(what, why)
  end
  local ok, err = out:close()
  if not ok then write_failed(what, err) end
end

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
    if not f.std and C.sp_host_path_kind(path) == 1 and os.remove(path) then note = " (the incomplete file was removed)" end
    write_failed(format("%s '%s'", what, path), err, note)
  end
end
M.write_whole = write_whole


-- A record without the run's sums (what callers of specula.run get).
function M.strip(rec)
  rec._agg, rec._conv = nil, nil
  return rec
end

-- The JSON line of a record. A value that cannot be encoded (invalid UTF-8,
-- NaN, a function, a cycle, too deep) turns the record into an error record
-- naming the query, the field and the reason, so the run goes on; the
-- record is changed in place, so the run's tallies count it as failed.
local KEPT = { "id", "query", "gold", "config", "stats", "shard", "provenance" }
local function clear(t)
  for k in next, t do t[k] = nil end
end
require("specula.internal.nojit")(clear)  -- a next() walk: see specula/internal/nojit.lua

local function record_line(rec)
  -- Sorted keys: result files diff cleanly and compare byte for byte.
  local ok, line = pcall(json.canonical, rec)
  if ok then return line end
  local where, why = json.find_bad(rec)
  if not where then where, why = "(record)", tostring(line) end
  local idtext = json.utf8_clean(tostring(rec.id))
  local msg = format("the record of query '%s' cannot be written as JSON: %s: %s", idtext, where, why)
  output.stderr("specula: " .. msg .. "\n")
  local keep = { id = rec.id, query = rec.query, gold = rec.gold, config = rec.config, stats = rec.stats,
                 shard = rec.shard, provenance = rec.provenance }
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

-- A record sink for run_all: one JSON line per finished query, flushed at
-- once, or for a batched file (open_records) at the end of the engine's
-- drain that wrote it, so a killed run loses at most the lines of its last
-- drain (resume runs those queries again and repairs a cut line).
-- out is a "canonical" writer (open_output); while it has nothing to scrub
-- the line goes from the C encoder's buffer to its file (json.write_line).
-- `config` tags each record with its configuration (used by --compare).
-- `what` names the output in messages; `path`, when it is a regular file,
-- is cut back to its last complete line should a write fail.
-- With `pick`, the writer returns the record's agreement text
-- (json.canonical({ answer, trajectory })), cut from the written line when
-- the C encoder wrote it, else encoded again.
local write_line = json.write_line
local outfile_check = C.sp_outfile_check
local errbuf = core.errbuf
local outfile_write, raw = C.sp_outfile_write, json.raw
-- records written whole by the engine in this process (record_line_spec
-- reads it from an agent: which path a record took shows nowhere else)
local ndirect = 0
function M.direct_written() return ndirect end
local function record_writer(out, config, what, path, pick)
  what = what or "stdout"
  local regular = path and C.sp_host_path_kind(path) == 1
  -- the file's size after the last complete line: read once, then counted
  -- (a seek per record cost an lseek and an fstat)
  local size
  -- a line through the writer, which scrubs it: true and its bytes, or
  -- false and why not
  local function scrubbed(text)
    local before = out.bytes
    local ok, res = out:line(text)
    if ok then ok, res = out:flush() end
    if ok then res = out.bytes - before end
    return ok, res
  end
  -- the file's size past a line written, or the run ends there (the file
  -- cut back to its last complete line)
  local function account(ok, res)
    if not ok then
      unbatch(out, true)
      if size then cut_back(path, size) end
      write_failed(what, res)
    end
    if size then size = size + res end
  end
  local writer
  -- A window record of collect (run.direct): its line from the engine, or its Lua
  -- record when the engine cannot write it.
  local function write_direct(d)
    local n = direct_line(d, config, pick)
    if not n then
      local full = collect(d._w, d._q, d._run, d._rc, true)
      full.provenance = raw(d._p1, d._qd, d._p3)
      local agree = writer(full)
      -- what the run's sums read: this record as written (an error record
      -- when it could not be encoded)
      d.answer, d.error, d.stats, d._agg, d.config = full.answer, full.error, full.stats, full._agg, full.config
      return agree
    end
    d.config = config
    -- (--compare's agreement text: after the line in the same buffer)
    local agree = pick and ffi.string(line_buf + n, line_head.agree_len) or nil
    if regular and not size then size = out:seek("end") end
    local ok, res
    local file = out:direct()
    if file then
      local err, errlen = errbuf()
      local batched = out.batched
      if batched and outfile_check(core.ctx, file, err, errlen) ~= 0 then ok, res = false, ffi.string(err)
      elseif outfile_write(file, line_buf, n, batched and 1 or 0, err, errlen) == 0 then ok, res = true, n
      else ok, res = false, ffi.string(err) end
    else
      -- a secret is known: the writer scrubs the line
      ok, res = scrubbed(ffi.string(line_buf, n - 1))
    end
    account(ok, res)
    ndirect = ndirect + 1
    return agree
  end
  writer = function(rec)
    if rec._w then return write_direct(rec) end
    if config then rec.config = config end
    -- the run's sums are not part of the record (no pairs() copy: see json.lua)
    local agg = rec._agg
    rec._agg = nil
    if regular and not size then size = out:seek("end") end
    local ok, res, agree   -- res: the bytes written, or why not
    local file = write_line and out:direct()
    local batched = out.batched
    if file then
      -- (a flush at the end of an earlier drain may have failed)
      local err, errlen
      if batched then err, errlen = errbuf() end
      if batched and outfile_check(core.ctx, file, err, errlen) ~= 0 then ok, res = false, ffi.string(err)
      else ok, res, agree = write_line(file, rec, pick, batched) end
    end
    if ok == nil then
      -- a secret is known (the writer scrubs the line), or the record
      -- cannot be encoded (record_line's checked Lua path says where)
      ok, res = scrubbed(record_line(rec))
    end
    rec._agg = agg
    account(ok, res)
    if pick then return agree or json.canonical({ rec.answer, rec.trajectory }) end
  end
  return writer
end
M.record_writer = record_writer

return M
