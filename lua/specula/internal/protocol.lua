-- specula.agent: the agent protocol (docs/agents.md#the-agent-protocol) and the adapter the C window
-- calls. A script returns specula.agent{ init, step, update, tools, verify,
-- predict, policy }; the window (engine/sp_window.c) runs its functions in
-- job coroutines through the adapter below, which validates what the script
-- returns and turns mistakes into errors naming the script and line.
local sched = require "specula.internal.sched"
local output = require "specula.internal.output"

local type, pairs, ipairs, tostring, tonumber, setmetatable, getmetatable, error =
  type, pairs, ipairs, tostring, tonumber, setmetatable, getmetatable, error
local ffi = require "ffi"
local sort, concat = table.sort, table.concat
local now = sched.now
-- Mistakes the adapter detects are reported without its own traceback.
local plain = sched.plain_error

local M = {}

-- The wrapper of the agent's calls and of the adapter's window jobs, or
-- nil: { bind(ctx), observe(tool, args, call, ctx), speculator(S, tool,
-- is_cands, cands), adapter(A) }. A cassette puts its own here while it is
-- open (specula.run.cassette plugs it in); the agent does not require it.
local wrapper = nil
function M.set_wrapper(w) wrapper = w end

local CANDS_MT = { __name = "specula.candidates" }

-- Several candidate observations from one speculator call:
-- specula.candidates{ {value = o1, confidence = 0.6}, {value = o2, confidence = 0.3} }
function M.candidates(list)
  if type(list) ~= "table" then error("specula.candidates: expected a list", 2) end
  for i, c in ipairs(list) do
    if type(c) ~= "table" or c.value == nil then
      error("specula.candidates: element " .. i .. " must be a table with a value", 2)
    end
    local conf = c.confidence
    if conf ~= nil and (type(conf) ~= "number" or conf < 0 or conf > 1) then
      error("specula.candidates: element " .. i .. " has a confidence outside [0, 1]", 2)
    end
  end
  return setmetatable(list, CANDS_MT)
end
local function is_cands(r) return getmetatable(r) == CANDS_MT end

local function where(fn)
  local info = debug.getinfo(fn, "S")
  if not info then return "?" end
  return info.short_src .. ":" .. tostring(info.linedefined)
end
M.where = where

-- A mistake in an agent's definition, raised with where the script made it:
-- the line that called specula.agent, or, when that frame is gone (`return
-- specula.agent{...}` is a tail call, and the error named the engine's
-- cmd/run.lua instead), where the definition's first function is defined.
local DEF_FNS = { "init", "step", "update", "verify", "speculate", "context" }
local function bad(def, msg)
  local loc = sched.where(2)
  if not loc then
    for _, k in ipairs(DEF_FNS) do
      if type(def[k]) == "function" then loc = where(def[k]); break end
    end
  end
  if not loc and type(def.tools) == "table" then
    local names = {}
    for name, t in pairs(def.tools) do
      if type(name) == "string" and (type(t) == "function" or (type(t) == "table" and type(t.call) == "function")) then
        names[#names + 1] = name
      end
    end
    table.sort(names)
    local t = names[1] and def.tools[names[1]]
    if t then loc = where(type(t) == "function" and t or t.call) end
  end
  error((loc and (loc .. ": ") or "") .. "specula.agent: " .. msg, 0)
end

local function check_fn(def, name, required, owner, top)
  local f = def[name]
  if f == nil then
    if required then bad(top or def, (owner or "agent") .. "." .. name .. " is required") end
    return
  end
  if type(f) ~= "function" then
    bad(top or def, (owner or "agent") .. "." .. name .. " must be a function, got " .. type(f))
  end
end

-- Validate an agent definition and mark it. Tools may be given as plain
-- functions, tool tables, or specula.tools specs (HTTP, sim, ...).
function M.agent(def)
  if type(def) ~= "table" then bad(def, "expected a table, got " .. type(def)) end
  check_fn(def, "init", true)
  check_fn(def, "step", true)
  check_fn(def, "update", true)
  check_fn(def, "verify", false)
  if def.predict ~= nil and type(def.predict) ~= "function"
     and not (type(def.predict) == "table" and getmetatable(def.predict) and getmetatable(def.predict).__call) then
    bad(def, "predict must be a function or a predictor (specula.predict.*)")
  end
  check_fn(def, "speculate", false)
  check_fn(def, "context", false)
  if def.name ~= nil and type(def.name) ~= "string" then bad(def, "name must be a string") end
  local tools = def.tools
  if tools == nil then tools = {} def.tools = tools end
  if type(tools) ~= "table" then bad(def, "tools must be a table of name -> tool") end
  for name, t in pairs(tools) do
    if type(name) ~= "string" then bad(def, "tool names must be strings") end
    if type(t) == "function" then
      t = { call = t }
      tools[name] = t
    elseif type(t) ~= "table" then
      bad(def, "tool '" .. name .. "' must be a function or a table")
    end
    if type(t.call) == "table" then
      -- a declarative spec (HTTP tool etc.); it may carry cost and class
      local spec = t.call
      t.call = require("specula.tools").compile(name, spec)
      if t.cost == nil then t.cost = spec.cost end
      if t.class == nil then t.class = spec.class end
    end
    if type(t.call) ~= "function" then
      bad(def, "tool '" .. name .. "' needs a call function (or an HTTP spec)")
    end
    for _, f in ipairs({ "speculate", "verify", "warmup" }) do check_fn(t, f, false, "tools." .. name, def) end
    -- the declared input, as a model is shown it (predictors read it)
    for _, f in ipairs({ "schema", "input_schema" }) do
      if t[f] ~= nil and type(t[f]) ~= "table" then
        bad(def, "tools." .. name .. "." .. f .. " must be a JSON Schema table, got " .. type(t[f]))
      end
    end
    if t.description ~= nil and type(t.description) ~= "string" then
      bad(def, "tools." .. name .. ".description must be a string")
    end
    if t.cost ~= nil and (type(t.cost) ~= "number" or t.cost < 0) then
      bad(def, "tools." .. name .. ".cost must be a non-negative number")
    end
  end
  def.__specula_agent = true
  return def
end

-- ---- the adapter ------------------------------------------------------------

local core = require "specula.internal.core"
local DECISION = { forbid = tonumber(core.C.SP_FORBID), warmup = tonumber(core.C.SP_WARMUP),
                   full = tonumber(core.C.SP_FULL) }
-- The script raised or returned a non-decision: the C gate counts it and
-- forbids (fail closed).
local HINT_ERROR = tonumber(core.C.SP_HINT_ERROR)
local HINT_NONE = tonumber(core.C.SP_HINT_NONE)

-- A deep copy of predicted arguments: the predictor keeps its own table, so
-- what the policy was asked about is exactly what runs (nothing it holds can
-- change the call after the decision). Cycles and non-data values fail.
local jsonlib = require "specula.json"
local JNULL, ARRAY_MT, OBJECT_MT = jsonlib.null, jsonlib.array_mt, jsonlib.object_mt
local function copy_args(v, depth)
  if type(v) ~= "table" then
    local tv = type(v)
    if tv == "string" or tv == "number" or tv == "boolean" or v == JNULL then return v end
    error("arguments hold a " .. tv, 0)
  end
  if depth > 32 then error("arguments nested deeper than 32 levels", 0) end
  local out = {}
  for k, x in pairs(v) do
    local tk = type(k)
    if tk ~= "string" and tk ~= "number" then error("arguments have a " .. tk .. " key", 0) end
    out[k] = copy_args(x, depth + 1)
  end
  local mt = getmetatable(v)
  if mt == ARRAY_MT or mt == OBJECT_MT then setmetatable(out, mt) end
  return out
end
require("specula.internal.nojit")(copy_args)   -- a pairs() walk that decides a call's args

-- ---- the adapter: one function per job kind --------------------------------
--
-- The window runs an agent through jobs, one kind per call it makes
-- (engine/sp_api.h, "the job protocol"). Each kind has a function below,
-- called as KIND(A, qmt, ...): A is the adapter of a run (the agent's
-- functions and the run's options, built by M.adapter), qmt the metatable
-- the window's step ctx tables share ({ __index = the query's ctx }). The
-- job functions at the end read a job's arguments from the C struct by name,
-- call these and write the results back by name.

local C, cctx = core.C, core.ctx
local VALS = sched.vals
local STEP_ACTION, STEP_FINAL = tonumber(C.SP_STEP_ACTION), tonumber(C.SP_STEP_FINAL)
local json = jsonlib
local HIST = 16   -- actions a thread's history keeps for the predictor

-- One ctx per thread step: step() sees it first; once the step has
-- decided, ctx.step and ctx.action are filled in and the same table goes
-- to the tool, speculator and verifier calls of that step.
-- Its own fields are four (hop, state, step, action: a table of four
-- fields is 160 bytes, one of five or six 256, and a query in flight holds
-- one a live thread, a new one each hop); what the calls of a query share
-- is read through its metatable: the query's ctx (qmt, M.query_ctx) for a
-- verified state, or the query's speculative layer over it (speculative =
-- true), which the same table switches to when a call's flag changes.
local function spec_mt(qmt)
  local s = rawget(qmt, "__spec")
  if s then return s end
  s = { speculative = true, __index = false }
  s.__index = s
  setmetatable(s, qmt)
  rawset(qmt, "__spec", s)
  return s
end
-- (a call mostly keeps its step's flag: compared first, as setmetatable
-- costs a write barrier)
local function set_spec(ctx, qmt, spec)
  local mt = spec and spec_mt(qmt) or qmt
  if getmetatable(ctx) ~= mt then setmetatable(ctx, mt) end
end

-- The query ctx of one window (the metatable of its step ctx tables): the
-- query's own fields; what every query of the run shares (--set, --seed,
-- the mode, speculative = false, on_tool_name) is read through shared, the
-- run's metatable from M.query_shared.
function M.query_ctx(shared, id, query, record, index, max_hops)
  local q = { id = id, query = query, record = record, index = index, max_hops = max_hops, __index = false,
              __spec = false }
  q.__index = q
  setmetatable(q, shared)
  return q
end
local function mkctx(qmt, hop, spec, state)
  local ctx = setmetatable({ hop = hop, state = state, step = false, action = false },
                           spec and spec_mt(qmt) or qmt)
  if wrapper then wrapper.bind(ctx) end   -- model calls of the step know their query
  return ctx
end

local function tool_name_cb(name)
  if type(name) == "string" then C.sp_window_tool_name(cctx, name, #name) end
end
local function no_tool_name() end

-- The metatable every query ctx of a run shares (o: the run's options).
-- In a step, ctx.on_tool_name(name) tells the engine a streamed response
-- named its tool; without a predictor nothing listens.
function M.query_shared(A, o)
  return { __index = { set = o.set, seed = o.seed, mode = o.mode, speculative = false,
                       on_tool_name = A.predictor and tool_name_cb or no_tool_name } }
end

-- History of a thread's path (last HIST actions with their observations).
local function extend_history(A, state, step, obs, s2)
  local hist_of = A.hist_of
  local h = hist_of[state] or {}
  local n = #h
  local h2 = {}
  local first = n >= HIST and 2 or 1
  for i = first, n do h2[#h2 + 1] = h[i] end
  h2[#h2 + 1] = { tool = step.action.tool, args = step.action.args, observation = obs }
  hist_of[s2] = h2
end

-- The script's decision for one exact call. Whatever it does, the gate
-- gets a decision or HINT_ERROR (forbid): a policy error never ends the
-- query and never opens the gate.
-- (xpcall directly rather than sched.protect: this runs on every hop, and
-- protect's pack/unpack made a table each time; same message, first line.)
local job_error = sched.job_error
local function script_decision(A, name, args, ctx)
  local ok, d = xpcall(A.decide, job_error, name, args, ctx)
  if not ok then d = tostring(d):match("^[^\n]*") end
  local h = ok and DECISION[d]
  if h then return h end
  A.on_policy_error(name, ok and ("returned " .. (type(d) == "string" and ("'" .. d .. "'") or type(d))
    .. ", expected full, warmup or forbid") or ("raised: " .. tostring(d)))
  return HINT_ERROR
end

-- The conversation of a state as events (specula.convtraces): the
-- agent's context(state) when it has one (a failure is warned about once,
-- and the calls stand in), else the query and the calls so far. Returns
-- events, turns.
-- (loaded on first use: only predictors read conversations, and parsing a
-- module is part of every command's start)
local convtraces
local function messages_of(A, state, query)
  convtraces = convtraces or require("specula.convtraces")
  if A.context_fn then
    local ok, msgs = sched.protect(false, A.context_fn, state)
    local events, turns
    if ok and type(msgs) == "table" then events, turns = convtraces.events(msgs) end
    if events then return events, turns end
    if not A.ctx_warned then
      A.ctx_warned = true
      output.stderr("specula: warning: agent context(state) " .. (ok and ("returned " .. type(msgs)
        .. ", not a list of messages") or ("failed: " .. tostring(msgs))) .. "; predictors read the calls only\n")
    end
  end
  local c = convtraces.synthesize(type(query) == "string" and query or nil, A.hist_of[state] or {})
  return c.events, c.turns
end

-- (one comparator, not a closure made each step: see predictor_ctx)
local function by_confidence(a, b) return a.confidence > b.confidence end

-- The predictor's ctx: the step's, with `messages` (read on first use) and
-- `tools` (the tools' declared inputs). Its metatable carries what the one
-- __index reads (a closure made each step kept the step out of the JIT:
-- "NYI: bytecode 51", FNEW, 65 aborted traces in a paste_research run).
local function predictor_index(t, k)
  local mt = getmetatable(t)
  if k == "messages" then
    local m = messages_of(mt.A, mt.state, mt.ctx.query)
    rawset(t, "messages", m)
    return m
  end
  if k == "tools" then return mt.A.tool_specs end
  return mt.ctx[k]
end
local function predictor_ctx(A, state, ctx)
  return setmetatable({}, { __index = predictor_index, A = A, state = state, ctx = ctx })
end

-- Ask the predictor for the next action and hand the candidates to the
-- window, which gates and fires them while the model thinks.
local function predict(A, state, ctx)
  local tools, decide = A.tools, A.decide
  local ok, preds = sched.protect(false, A.predictor, A.hist_of[state] or {}, predictor_ctx(A, state, ctx))
  if not ok or type(preds) ~= "table" then
    if not A.warned then
      A.warned = true
      output.stderr("specula: warning: predictor failed (" .. sched.errstr(preds) .. "); no action speculation for this step\n")
    end
    return nil
  end
  local list = {}
  -- predictions are untrusted input: a copy of their args, and the
  -- script's decision for each (tool, args) as the gate will see it
  local pctx = decide and setmetatable({ predicted = true, speculative = true }, { __index = ctx })
  for _, p in ipairs(preds) do
    if type(p) == "table" and type(p.tool) == "string" and tools[p.tool] and type(p.args) == "table" then
      local okc, args = pcall(copy_args, p.args, 0)
      local key
      if okc then okc, key = pcall(json.canonical, args) end
      local conf = tonumber(p.confidence) or 0
      if conf ~= conf then conf = 0 end
      -- a probability: outside [0, 1] (inf, negative) it is clamped, and
      -- said once (an infinite one made the gate's expected saving infinite)
      if conf < 0 or conf > 1 then
        if not A.warned_conf then
          A.warned_conf = true
          output.stderr("specula: warning: a prediction's confidence " .. tostring(p.confidence)
            .. " is not in [0, 1] (tool '" .. p.tool .. "'): taken as " .. (conf < 0 and "0" or "1") .. "\n")
        end
        conf = conf < 0 and 0 or 1
      end
      local tconf = tonumber(p.tool_confidence) or -1
      if tconf ~= tconf then tconf = -1 end
      if okc then
        local e = { tool = p.tool, args = args, key = key, confidence = conf, tool_confidence = tconf }
        if decide then e.hint = script_decision(A, p.tool, args, pctx) end
        list[#list + 1] = e
      end
    end
  end
  if #list == 0 then return nil end
  sort(list, by_confidence)
  -- best first; the window keeps up to its max per step and takes each
  -- args slot's reference
  for i = 1, #list do
    local e = list[i]
    local slot = C.sp_vals_new(cctx)
    VALS[slot] = e.args
    if C.sp_window_predict(cctx, e.tool, #e.tool, e.key, #e.key, e.confidence, e.tool_confidence,
        e.hint or HINT_NONE, slot) == 0 then
      break
    end
  end
  C.sp_window_predicted(cctx)
  return list
end

-- Which prediction the decided action matches, for the lossy modes.
local function lossy_match(A, list, a)
  if not list or A.match_mode == "exact" then return 0 end
  local similar = A.similar
  for i = 1, #list do
    local p = list[i]
    if p.tool == a.tool then
      if A.match_mode == "name_only" then return i end
      if similar and similar(p.args, a.args) then return i end
    end
  end
  return 0
end

local function malformed(A, got, why)
  plain("step (" .. A.step_where .. ") returned " .. why .. "; expected { action = { tool = NAME, args = {...} } }"
    .. " or { final = ANSWER }, got " .. (type(got) == "table" and "a table" or type(got)))
end

-- step() and what the window needs to know about its result: the step
-- kind (SP_STEP_*), the step, the action's tool, the script's decision for
-- it and whether the tool has a speculator.
local function do_step(A, state, ctx)
  local s = A.step_fn(state, ctx)
  if type(s) ~= "table" then malformed(A, s, "a non-table") end
  if s.final ~= nil then
    if s.action ~= nil then malformed(A, s, "both final and action") end
    return STEP_FINAL, s, nil, HINT_NONE, false
  end
  local a = s.action
  if type(a) ~= "table" then malformed(A, s, "no action and no final") end
  local name = a.tool
  if type(name) ~= "string" then malformed(A, s, "an action without a tool name") end
  local tools = A.tools
  local t = tools[name]
  if t == nil then
    local known = {}
    for k in pairs(tools) do known[#known + 1] = k end
    sort(known)
    plain("step (" .. A.step_where .. ") chose unknown tool '" .. name .. "' (known: "
      .. concat(known, ", ") .. ")")
  end
  if a.args == nil then a.args = {} end
  if type(a.args) ~= "table" then malformed(A, s, "action.args that is not a table") end
  local hint = HINT_NONE
  if A.decide then hint = script_decision(A, name, a.args, ctx) end
  return STEP_ACTION, s, name, hint, (t.speculate ~= nil or A.agent_spec ~= nil)
end

-- A predictor that waits (a draft model) runs beside the step, not before
-- it; its candidates fire whenever it has them. (A function of its own:
-- the closure would keep step_with_predictions out of the JIT.)
local function predict_beside(A, state, ctx)
  local box = {}
  sched.spawn(function() box.list = predict(A, state, ctx) end)
  return setmetatable({}, { __index = function(_, k) return box.list and box.list[k] end,
                            __len = function() return box.list and #box.list or 0 end })
end

-- The step, and with action speculation the canonical args of its action
-- and the prediction it matches (lossy modes).
local function step_with_predictions(A, state, ctx)
  local list
  local predictor = A.predictor
  if predictor then
    if A.predict_async then list = predict_beside(A, state, ctx) else list = predict(A, state, ctx) end
  end
  local kind, s, tool, hint, can = do_step(A, state, ctx)
  if predictor and kind == STEP_FINAL then A.final_state_of[s] = state end
  if predictor and kind == STEP_ACTION then
    return kind, s, tool, hint, can, json.canonical(s.action.args), lossy_match(A, list, s.action)
  end
  return kind, s, tool, hint, can
end

-- What a start or advance job returns: the new state first (a cassette
-- keys the state's path by it), the step's ctx, the time update() took
-- (t_seg is measured by the window: the job's whole time minus t_update),
-- then what step_with_predictions returned.
local function stepped(ctx, state, t_upd, kind, s, tool, hint, can, key, midx)
  if kind == STEP_ACTION then ctx.step, ctx.action = s, s.action end
  return state, ctx, t_upd, kind, s, tool, hint, can, key, midx
end

-- SP_JOB_START: init() and the first step.
local function start(A, qmt)
  local ctx = mkctx(qmt, 0, false, nil)
  local time_update, init_fn = A.time_update, A.init_fn
  local t0 = time_update and now() or 0
  local state = init_fn(qmt.query, ctx)
  if state == nil then plain("init (" .. where(init_fn) .. ") returned nil") end
  local t1 = time_update and now() or 0
  ctx.state = state
  if A.predictor then A.hist_of[state] = {} end
  return stepped(ctx, state, t1 - t0, step_with_predictions(A, state, ctx))
end

-- SP_JOB_ADVANCE: update(state, step, observation) then step() of the new
-- state; the observation is obs, or candidate idx of cands (0: cands is
-- the one plain candidate).
local function advance(A, qmt, state, step, obs, cands, idx, hop, spec)
  if cands ~= nil then
    if idx == 0 then obs = cands else obs = cands[idx] end
  end
  local ctx = mkctx(qmt, hop, spec, state)
  local canonical = A.canonical
  local before = canonical and canonical(state)
  local time_update = A.time_update
  local t0 = time_update and now() or 0
  local s2 = A.update_fn(state, step, obs, ctx)
  local t1 = time_update and now() or 0
  if before and canonical(state) ~= before then
    plain("update (" .. A.update_where .. ") mutated its input state; update must return a new state")
  end
  if s2 == nil then plain("update (" .. A.update_where .. ") returned nil") end
  if A.predictor then extend_history(A, state, step, obs, s2) end
  ctx.state = s2
  return stepped(ctx, s2, t1 - t0, step_with_predictions(A, s2, ctx))
end

-- SP_JOB_PFCALL: a predicted call started early (always speculative).
local function pfcall(A, qmt, tool, args, hop)
  local ctx = setmetatable({ hop = hop, predicted = true }, spec_mt(qmt))
  if wrapper then
    wrapper.bind(ctx)
    -- its observation goes on tape too: one that serves its step's target
    -- is a committed call
    return wrapper.observe(tool, args, A.tools[tool].call, ctx)
  end
  return A.tools[tool].call(args, ctx)
end

-- SP_JOB_CALL: the target tool of ctx's action. spec: whether the call is
-- for an unverified state, as the window sees it when the call starts (a
-- promotion clears it).
local function call(A, qmt, ctx, spec)
  set_spec(ctx, qmt, spec)
  local a = ctx.action
  local tools = A.tools
  if wrapper then
    wrapper.bind(ctx)
    return wrapper.observe(a.tool, a.args, tools[a.tool].call, ctx)
  end
  return tools[a.tool].call(a.args, ctx)
end

-- SP_JOB_WARMUP: the warm-up hook of ctx's action's tool.
local function warmup(A, qmt, ctx, spec)
  set_spec(ctx, qmt, spec)
  local a = ctx.action
  local w = A.tools[a.tool].warmup
  if w then w(a.args, ctx) end
end

local function by_conf(a, b)
  if a.confidence ~= b.confidence then return a.confidence > b.confidence end
  return a.i < b.i
end

-- Candidates go back to C as a list of values (rank order), their count
-- and their confidences; a plain value is one candidate with confidence 1,
-- handed over as is (count -1) rather than wrapped in a list.
local function normalise(r, m)
  if getmetatable(r) ~= CANDS_MT then
    if r == nil then return nil, 0 end
    return r, -1
  end
  local list = {}
  for i, c in ipairs(r) do list[i] = { value = c.value, confidence = c.confidence or 1, i = i } end
  sort(list, by_conf)
  local n = #list
  if n > m then n = m end
  local values, confs = {}, {}
  for i = 1, n do values[i], confs[i] = list[i].value, list[i].confidence end
  return values, n, confs
end

local function run_spec(S, args, ctx, timeout)
  if not timeout or timeout <= 0 then return S(args, ctx) end
  local t = sched.spawn(S, args, ctx)
  local timer = sched.spawn(sched.sleep, timeout)
  local first = sched.wait_any({ t, timer })
  if first == timer then
    t:cancel()
    error("speculator timed out after " .. timeout .. " ms", 0)
  end
  timer:cancel()
  local r = { t:wait() }
  if not r[1] then error(r[2], 0) end
  return r[2]
end

-- SP_JOB_SPECULATE: the speculator of ctx's action, its candidates cut to m.
local function speculate(A, qmt, ctx, spec, m, timeout)
  set_spec(ctx, qmt, spec)
  local a = ctx.action
  local S = A.tools[a.tool].speculate or A.agent_spec
  if wrapper then
    wrapper.bind(ctx)
    S = wrapper.speculator(S, a.tool, is_cands, M.candidates)
  end
  return normalise(run_spec(S, a.args, ctx, timeout), m)
end

-- The head's children are candidates 1..nk in rank order; raw: the
-- speculator returned one plain value (accepted: -1). Returns the
-- accepted rank (0: none) and the verifier's reason.
local function verify_list(V, cands, obs, ctx, nk)
  local reasons = {}
  for r = 1, nk do
    local ok, reason = V(cands[r], obs, ctx)
    if ok then return r, reason or "accepted" end
    reasons[r] = reason or "rejected"
  end
  return 0, concat(reasons, "; ")
end

local function judge(A, ctx, cands, obs, nk, raw)
  local V = A.verify_all or A.tools[ctx.action.tool].verify or A.agent_verify
  if raw then
    local ok, reason = V(cands, obs, ctx)
    if ok then return -1, reason or "accepted" end
    return 0, reason or "rejected"
  end
  if nk == 1 then
    local ok, reason = V(cands[1], obs, ctx)
    if ok then return 1, reason or "accepted" end
    return 0, reason or "rejected"
  end
  return verify_list(V, cands, obs, ctx, nk)
end

-- --keep-candidates: kept[qmt] is the query's list of judged pairs (the
-- runner adds it when the window starts and takes it when it ends); the
-- verifier runs only on the verified thread, so each entry is on the
-- true path
local KEEP_BYTES = 65536
local function keep_text(v)
  local ok, s = pcall(json.canonical, v)
  if not ok then return json.utf8_clean(tostring(v)), true end   -- not JSON: the lab skips it
  if #s > KEEP_BYTES then return json.utf8_cut(s, KEEP_BYTES), true end
  return s, false
end
local function keep_pairs(list, ctx, cands, obs, nk, raw, idx)
  local tool = ctx.action.tool
  local otext, ocut = keep_text(obs)
  local n = raw and 1 or nk
  for r = 1, n do
    local ctext, ccut = keep_text(raw and cands or cands[r])
    local e = { hop = ctx.hop, tool = tool, rank = r - 1, candidate = ctext, observation = otext,
                accepted = idx == -1 or idx == r }
    if ocut or ccut then e.cut = true end
    -- the verifier stops at the first accepted candidate: later ranks
    -- were handed to it but never judged
    if idx > 0 and r > idx then e.judged = false end
    list[#list + 1] = e
  end
end

-- SP_JOB_VERIFY: the head's nk candidates (or its plain one) against its
-- real observation: the accepted rank and the verifier's reason.
local function verify(A, qmt, ctx, spec, cands, obs, nk, raw)
  set_spec(ctx, qmt, spec)
  local idx, reason = judge(A, ctx, cands, obs, nk, raw)
  local kept = A.kept
  local list = kept and kept[qmt]
  if list then keep_pairs(list, ctx, cands, obs, nk, raw, idx) end
  -- the engine cuts a long reason before it writes it: a secret it quotes
  -- goes before the cut could leave half of it
  if type(reason) == "string" then reason = output.clean(reason) end
  return idx, reason
end

-- The adapter's entry points by name: what the window's job functions
-- call, and what a cassette wraps to time each job.
local KINDS = { start = start, advance = advance, call = call, warmup = warmup, speculate = speculate,
                verify = verify, pfcall = pfcall }

-- Build the adapter the window calls. opts: debug (check update purity),
-- verify (default verifier when the agent has none), verify_all (the
-- verifier of every tool, over the agent's own), decide (the policy's
-- function: may only lower the C decision), on_policy_error, predict,
-- predict_async, match, similar (action speculation), kept
-- (--keep-candidates), time_update (false: skip update() timing).
function M.adapter(agent, opts)
  opts = opts or {}
  local debug_mode = opts.debug
  local A = {
    tools = agent.tools, step_fn = agent.step, update_fn = agent.update, init_fn = agent.init,
    agent_verify = agent.verify or opts.verify or require("specula.internal.exact"),
    -- a verifier for every tool, whatever the agent says (--compare verifier=...)
    verify_all = opts.verify_all,
    agent_spec = agent.speculate,
    decide = opts.decide,
    on_policy_error = opts.on_policy_error or function() end,
    predictor = opts.predict, predict_async = opts.predict_async,
    match_mode = opts.match or "exact", similar = opts.similar,
    hist_of = setmetatable({}, { __mode = "k" }),
    -- update() is timed apart from the step for the per-hop records; a
    -- light run (answers only) skips those two clock reads per hop
    time_update = opts.time_update ~= false,
    canonical = debug_mode and json.canonical or nil,
    step_where = where(agent.step), update_where = where(agent.update),
    kept = opts.kept,
    warned = false,
    -- what a predictor reads beside the history: the conversation (the
    -- agent's context(state)) and the tools' declared inputs
    context_fn = agent.context, ctx_warned = false, tool_specs = {},
    -- final step -> the state it was decided from (the committed
    -- conversation a learning predictor is handed)
    final_state_of = setmetatable({}, { __mode = "k" }),
  }
  for name, t in pairs(A.tools) do
    local schema = t.schema or t.input_schema or (type(t.mcp) == "table" and t.mcp.inputSchema) or nil
    local desc = t.description or (type(t.mcp) == "table" and t.mcp.description) or nil
    A.tool_specs[name] = { schema = type(schema) == "table" and schema or nil,
                           description = type(desc) == "string" and desc or nil }
  end
  for name, f in pairs(KINDS) do A[name] = function(...) return f(A, ...) end end
  -- The committed conversation a final step closed, for a predictor that
  -- learns after each query: { id, events, turns } (the final answer the
  -- last turn), or nil.
  function A.conversation(final_step, q)
    local state = A.final_state_of[final_step]
    if state == nil then return nil end
    local events, turns = messages_of(A, state, q and q.query)
    if not events then return nil end
    local t2 = {}
    for i, t in ipairs(turns or {}) do t2[i] = t end
    t2[#t2 + 1] = { at = #events }
    return { id = q and q.id, events = events, turns = t2 }
  end
  -- with a cassette open, each job is timed for the tape (or by it)
  if wrapper then return wrapper.adapter(A) end
  return A
end

-- ---- the job functions: the protocol, by name --------------------------------
-- Each reads its job's arguments (sp_jobcall) by name, calls the adapter's
-- entry point and writes the results (sp_jobres) by name once nothing can
-- raise or wait any more (R is shared by every job of the process). They
-- return the strings R points into, so those stay referenced until the
-- dispatcher has handed R to C.

local vals_new = C.sp_vals_new
local MAXCONF = tonumber(C.SP_JOB_MAXCONF)
local min = math.min

-- A fresh value-store slot holding v (0 for nil).
local function store(v)
  if v == nil then return 0 end
  local slot = vals_new(cctx)
  VALS[slot] = v
  return slot
end

local function put_step(R, state, ctx, t_upd, kind, s, tool, hint, can, key, midx)
  R.state = store(state)
  R.step = store(s)
  R.actx = store(ctx)
  R.step_kind = kind
  R.hint = hint
  R.can_spec = can and 1 or 0
  R.match = midx or 0
  R.t_update = t_upd
  if tool then R.tool = tool; R.tool_len = #tool end
  if key then R.key = key; R.key_len = #key end
  return key
end

local function put_cands(R, values, n, confs)
  R.value = store(values)
  R.ncands = n
  if confs then
    for i = 1, min(n, MAXCONF) do R.conf[i - 1] = confs[i] end
  elseif n == -1 then
    R.conf[0] = 1
  end
end

local function put_verdict(R, idx, reason)
  R.accepted = idx
  if type(reason) == "string" then R.reason = reason; R.reason_len = #reason end
  return reason
end

local JOB = {}
function JOB.start(E, c, R) return put_step(R, E.start(VALS[c.qctx])) end
function JOB.advance(E, c, R)
  return put_step(R, E.advance(VALS[c.qctx], VALS[c.state], VALS[c.step], VALS[c.obs], VALS[c.cands], c.rank,
                               c.hop, c.spec ~= 0))
end
function JOB.call(E, c, R) R.value = store(E.call(VALS[c.qctx], VALS[c.actx], c.spec ~= 0)) end
function JOB.warmup(E, c, R) E.warmup(VALS[c.qctx], VALS[c.actx], c.spec ~= 0) end
function JOB.speculate(E, c, R)
  put_cands(R, E.speculate(VALS[c.qctx], VALS[c.actx], c.spec ~= 0, c.m, c.timeout_ms))
end
-- A verifier that raises counts as a rejection (the engine rolls back, the
-- hop's reason says why): without a word a broken verifier reads as
-- speculation that never pays. One warning per distinct message; the job
-- still fails with the message and the user's frames, as before. Said from
-- the dispatcher's error path (sched.on_job_fail), not by a protected call
-- around each verify: a verifier that waits would return through that
-- frame, and the trace of its return path would be dropped.
local verifier_warned = {}
local JOB_VERIFY = tonumber(C.SP_JOB_VERIFY)
sched.on_job_fail = function(c, msg)
  if c.kind ~= JOB_VERIFY then return end
  local first = tostring(msg):match("^[^\n]*")
  if not verifier_warned[first] then
    verifier_warned[first] = true
    output.stderr("specula: warning: the verifier raised: ", first,
      "; each hop it raised on counts as a rejection (the reason in the record's stages.hops)\n")
  end
end
function JOB.verify(E, c, R)
  return put_verdict(R, E.verify(VALS[c.qctx], VALS[c.actx], c.spec ~= 0, VALS[c.cands], VALS[c.obs],
                                 c.nkids, c.raw ~= 0))
end
function JOB.pfcall(E, c, R)
  R.value = store(E.pfcall(VALS[c.qctx], ffi.string(c.tool, c.tool_len), VALS[c.args], c.hop))
end

-- The functions the window's jobs run for adapter E (M.adapter, maybe
-- wrapped by a cassette), by the names of sp_window_fns: each takes the
-- job's arguments (the dispatcher's copy of its sp_jobcall) and the result
-- struct.
function M.jobs(E)
  local fns = {}
  for name, job in pairs(JOB) do
    if E[name] ~= nil then fns[name] = function(c, R) return job(E, c, R) end end
  end
  return fns
end

return M
