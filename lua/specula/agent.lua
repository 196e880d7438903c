-- specula.agent: the agent protocol (DESIGN §3) and the adapter the C window
-- calls. A script returns specula.agent{ init, step, update, tools, verify,
-- predict, policy }; the window (engine/sp_window.c) runs its functions in
-- job coroutines through the adapter below, which validates what the script
-- returns and turns mistakes into errors naming the script and line.
local sched = require "specula.sched"
local cassette = require "specula.cassette"
local secrets = require "specula.secrets"

local type, pairs, ipairs, tostring, select, setmetatable, getmetatable, error =
  type, pairs, ipairs, tostring, select, setmetatable, getmetatable, error
local sort, concat = table.sort, table.concat
local now = sched.now
-- Mistakes the adapter detects are reported without its own traceback.
local plain = sched.plain_error

local M = {}

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

local function check_fn(def, name, required, owner)
  local f = def[name]
  if f == nil then
    if required then error("specula.agent: " .. (owner or "agent") .. "." .. name .. " is required", 3) end
    return
  end
  if type(f) ~= "function" then
    error("specula.agent: " .. (owner or "agent") .. "." .. name .. " must be a function, got " .. type(f), 3)
  end
end

-- Validate an agent definition and mark it. Tools may be given as plain
-- functions, tool tables, or specula.tools specs (HTTP, sim, ...).
function M.agent(def)
  if type(def) ~= "table" then error("specula.agent: expected a table", 2) end
  check_fn(def, "init", true)
  check_fn(def, "step", true)
  check_fn(def, "update", true)
  check_fn(def, "verify", false)
  if def.predict ~= nil and type(def.predict) ~= "function"
     and not (type(def.predict) == "table" and getmetatable(def.predict) and getmetatable(def.predict).__call) then
    error("specula.agent: predict must be a function or a predictor (specula.predict.*)", 2)
  end
  check_fn(def, "speculate", false)
  if def.name ~= nil and type(def.name) ~= "string" then error("specula.agent: name must be a string", 2) end
  local tools = def.tools
  if tools == nil then tools = {} def.tools = tools end
  if type(tools) ~= "table" then error("specula.agent: tools must be a table of name -> tool", 2) end
  for name, t in pairs(tools) do
    if type(name) ~= "string" then error("specula.agent: tool names must be strings", 2) end
    if type(t) == "function" then
      t = { call = t }
      tools[name] = t
    elseif type(t) ~= "table" then
      error("specula.agent: tool '" .. name .. "' must be a function or a table", 2)
    end
    if type(t.call) == "table" then
      -- a declarative spec (HTTP tool etc.); it may carry cost and class
      local spec = t.call
      t.call = require("specula.tools").compile(name, spec)
      if t.cost == nil then t.cost = spec.cost end
      if t.class == nil then t.class = spec.class end
    end
    if type(t.call) ~= "function" then
      error("specula.agent: tool '" .. name .. "' needs a call function (or an HTTP spec)", 2)
    end
    for _, f in ipairs({ "speculate", "verify", "warmup" }) do check_fn(t, f, false, "tools." .. name) end
    if t.cost ~= nil and (type(t.cost) ~= "number" or t.cost < 0) then
      error("specula.agent: tools." .. name .. ".cost must be a non-negative number", 2)
    end
  end
  def.__specula_agent = true
  return def
end

-- ---- the adapter ------------------------------------------------------------

local core = require "specula.core"
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
require("specula.nojit")(copy_args)   -- a pairs() walk that decides a call's args

-- Build the adapter the window calls. opts: debug (check update purity),
-- verify (default verifier when the agent has none), verify_all (the
-- verifier of every tool, over the agent's own).
function M.adapter(agent, opts)
  opts = opts or {}
  local tools = agent.tools
  local step_fn, update_fn, init_fn = agent.step, agent.update, agent.init
  local agent_verify = agent.verify or opts.verify or require("specula.verify").exact
  -- a verifier for every tool, whatever the agent says (--compare verifier=...)
  local verify_all = opts.verify_all
  local agent_spec = agent.speculate
  local decide = opts.decide        -- Lua policy function (may only lower the C decision)
  local on_policy_error = opts.on_policy_error or function() end
  -- action speculation: a predictor, how to match, and the C calls
  local predictor = opts.predict
  local predict_async = opts.predict_async
  local match_mode = opts.match or "exact"
  local similar = opts.similar
  local C, cctx = opts.C, opts.cctx
  local vals = sched.vals
  local json = require("specula.json")
  local hist_of = setmetatable({}, { __mode = "k" })
  local HIST = 16
  local debug_mode = opts.debug
  -- update() is timed apart from the step for the per-hop records; a light
  -- run (answers only) skips those two clock reads per hop
  local time_update = opts.time_update ~= false
  local canonical = debug_mode and require("specula.json").canonical
  local step_where, update_where = where(step_fn), where(update_fn)

  -- One ctx per thread step: step() sees it first; once the step has
  -- decided, ctx.step and ctx.action are filled in and the same table goes
  -- to the tool, speculator and verifier calls of that step.
  -- qmt, the first argument of every adapter function, is the metatable the
  -- window's step ctx tables share: { __index = the query's ctx }.
  local function mkctx(qmt, hop, spec, state)
    local ctx = setmetatable({ hop = hop, speculative = spec, state = state, step = false, action = false,
                               on_tool_name = false }, qmt)
    if cassette.state then cassette.bind(ctx) end   -- model calls of the step know their query
    return ctx
  end

  local function tool_name_cb(name)
    if type(name) == "string" then C.sp_window_tool_name(cctx, name, #name) end
  end
  local function no_tool_name() end

  -- History of a thread's path (last HIST actions with their observations).
  local function extend_history(state, step, obs, s2)
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
  local function script_decision(name, args, ctx)
    local ok, d = pcall(decide, name, args, ctx)
    local h = ok and DECISION[d]
    if h then return h end
    on_policy_error(name, ok and ("returned " .. (type(d) == "string" and ("'" .. d .. "'") or type(d))
      .. ", expected full, warmup or forbid") or ("raised: " .. tostring(d)))
    return HINT_ERROR
  end

  -- Ask the predictor for the next action and hand the candidates to the
  -- window, which gates and fires them while the model thinks.
  local warned = false
  local function predict(state, ctx)
    local ok, preds = pcall(predictor, hist_of[state] or {}, ctx)
    if not ok or type(preds) ~= "table" then
      if not warned then
        warned = true
        secrets.stderr("specula: warning: predictor failed (" .. tostring(preds) .. "); no action speculation for this step\n")
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
        if okc then
          local e = { tool = p.tool, args = args, key = key, confidence = conf }
          if decide then e.hint = script_decision(p.tool, args, pctx) end
          list[#list + 1] = e
        end
      end
    end
    if #list == 0 then return nil end
    sort(list, function(a, b) return a.confidence > b.confidence end)
    -- best first; the window keeps up to its max per step and takes each
    -- args slot's reference
    for i = 1, #list do
      local e = list[i]
      local slot = C.sp_vals_new(cctx)
      vals[slot] = e.args
      if C.sp_window_predict(cctx, e.tool, #e.tool, e.key, #e.key, e.confidence, e.hint or HINT_NONE, slot) == 0 then
        break
      end
    end
    C.sp_window_predicted(cctx)
    return list
  end

  -- Which prediction the decided action matches, for the lossy modes.
  local function lossy_match(list, a)
    if not list or match_mode == "exact" then return 0 end
    for i = 1, #list do
      local p = list[i]
      if p.tool == a.tool then
        if match_mode == "name_only" then return i end
        if similar and similar(p.args, a.args) then return i end
      end
    end
    return 0
  end

  local function malformed(got, why)
    plain("step (" .. step_where .. ") returned " .. why .. "; expected { action = { tool = NAME, args = {...} } }"
      .. " or { final = ANSWER }, got " .. (type(got) == "table" and "a table" or type(got)))
  end

  -- step() and what the window needs to know about its result.
  local function do_step(state, ctx)
    local s = step_fn(state, ctx)
    if type(s) ~= "table" then malformed(s, "a non-table") end
    if s.final ~= nil then
      if s.action ~= nil then malformed(s, "both final and action") end
      return 2, s, nil, -1, false
    end
    local a = s.action
    if type(a) ~= "table" then malformed(s, "no action and no final") end
    local name = a.tool
    if type(name) ~= "string" then malformed(s, "an action without a tool name") end
    local t = tools[name]
    if t == nil then
      local known = {}
      for k in pairs(tools) do known[#known + 1] = k end
      sort(known)
      plain("step (" .. step_where .. ") chose unknown tool '" .. name .. "' (known: "
        .. concat(known, ", ") .. ")")
    end
    if a.args == nil then a.args = {} end
    if type(a.args) ~= "table" then malformed(s, "action.args that is not a table") end
    local hint = -1
    if decide then hint = script_decision(name, a.args, ctx) end
    return 1, s, name, hint, (t.speculate ~= nil or agent_spec ~= nil)
  end

  local A = {}

  -- A predictor that waits (a draft model) runs beside the step, not before
  -- it; its candidates fire whenever it has them. (A function of its own:
  -- the closure would keep step_with_predictions out of the JIT.)
  local function predict_beside(state, ctx)
    local box = {}
    sched.spawn(function() box.list = predict(state, ctx) end)
    return setmetatable({}, { __index = function(_, k) return box.list and box.list[k] end,
                              __len = function() return box.list and #box.list or 0 end })
  end

  local function step_with_predictions(state, ctx)
    local list
    if predictor then
      if predict_async then list = predict_beside(state, ctx) else list = predict(state, ctx) end
      ctx.on_tool_name = tool_name_cb
    else
      ctx.on_tool_name = no_tool_name
    end
    local kind, s, tool, hint, can = do_step(state, ctx)
    if predictor and kind == 1 then
      return kind, s, tool, hint, can, json.canonical(s.action.args), lossy_match(list, s.action)
    end
    return kind, s, tool, hint, can
  end

  -- t_seg is measured by the window (the job's whole time minus t_update)
  local function ret(ctx, state, t_upd, kind, s, tool, hint, can, key, midx)
    if kind == 1 then ctx.step, ctx.action = s, s.action end
    return state, kind, s, tool, hint, t_upd, 0, can, key, midx, ctx
  end

  function A.start(qmt)
    local ctx = mkctx(qmt, 0, false, nil)
    local t0 = time_update and now() or 0
    local state = init_fn(qmt.__index.query, ctx)
    if state == nil then plain("init (" .. where(init_fn) .. ") returned nil") end
    local t1 = time_update and now() or 0
    ctx.state = state
    if predictor then hist_of[state] = {} end
    return ret(ctx, state, t1 - t0, step_with_predictions(state, ctx))
  end

  -- update(state, step, observation) then step() of the new state.
  function A.advance(qmt, state, step, obs, cands, idx, hop, spec)
    if cands ~= nil then
      if idx == 0 then obs = cands else obs = cands[idx] end
    end
    local ctx = mkctx(qmt, hop, spec, state)
    local before = debug_mode and canonical(state)
    local t0 = time_update and now() or 0
    local s2 = update_fn(state, step, obs, ctx)
    local t1 = time_update and now() or 0
    if before and canonical(state) ~= before then
      plain("update (" .. update_where .. ") mutated its input state; update must return a new state")
    end
    if s2 == nil then plain("update (" .. update_where .. ") returned nil") end
    if predictor then extend_history(state, step, obs, s2) end
    ctx.state = s2
    return ret(ctx, s2, t1 - t0, step_with_predictions(s2, ctx))
  end

  -- A predicted call started early (always speculative).
  function A.pfcall(qmt, tool, args, hop)
    local ctx = setmetatable({ hop = hop, speculative = true, predicted = true }, qmt)
    if cassette.state then cassette.bind(ctx) end
    return tools[tool].call(args, ctx)
  end

  -- spec: whether the call is for an unverified state, as the window sees
  -- it when the call starts (a promotion clears it)
  function A.call(qmt, ctx, spec)
    ctx.speculative = spec
    local a = ctx.action
    if cassette.state then
      cassette.bind(ctx)
      return cassette.observe(a.tool, a.args, tools[a.tool].call, ctx)
    end
    return tools[a.tool].call(a.args, ctx)
  end

  function A.warmup(qmt, ctx, spec)
    ctx.speculative = spec
    local a = ctx.action
    local w = tools[a.tool].warmup
    if w then w(a.args, ctx) end
  end

  local function by_conf(a, b)
    if a.confidence ~= b.confidence then return a.confidence > b.confidence end
    return a.i < b.i
  end

  -- Candidates go back to C as a list of values (rank order) plus their
  -- confidences; a plain value is one candidate with confidence 1, handed
  -- over as is (count -1) rather than wrapped in a list.
  local function normalise(r, m)
    if getmetatable(r) ~= CANDS_MT then
      if r == nil then return nil, 0 end
      return r, -1, 1
    end
    local list = {}
    for i, c in ipairs(r) do list[i] = { value = c.value, confidence = c.confidence or 1, i = i } end
    sort(list, by_conf)
    local n = #list
    if n > m then n = m end
    local values, confs = {}, {}
    for i = 1, n do values[i], confs[i] = list[i].value, list[i].confidence end
    return values, n, unpack(confs, 1, n)
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

  function A.speculate(qmt, ctx, spec, m, timeout)
    ctx.speculative = spec
    local a = ctx.action
    local S = tools[a.tool].speculate or agent_spec
    if cassette.state then
      cassette.bind(ctx)
      S = cassette.speculator(S, a.tool, is_cands, M.candidates)
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

  local function judge(ctx, cands, obs, nk, raw)
    local V = verify_all or tools[ctx.action.tool].verify or agent_verify
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
  local kept = opts.kept
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

  function A.verify(qmt, ctx, spec, cands, obs, nk, raw)
    ctx.speculative = spec
    local idx, reason = judge(ctx, cands, obs, nk, raw)
    local list = kept and kept[qmt]
    if list then keep_pairs(list, ctx, cands, obs, nk, raw, idx) end
    -- the engine cuts a long reason: a secret it quotes goes before the
    -- cut could leave half of it
    if secrets.count() > 0 and type(reason) == "string" then reason = secrets.scrub(reason) end
    return idx, reason
  end

  -- with a cassette open, each job is timed for the tape (or by it)
  if cassette.state then return cassette.wrap_adapter(A) end
  return A
end

return M
