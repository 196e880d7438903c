-- specula.gateway.speculate: action speculation inside one gateway session.
--
-- After each result goes back to the client, the predictor proposes the
-- client's next calls; the eligibility gate (specula.policy, through the C
-- gate sp_policy_gate) lets some of them start upstream at once, each in a
-- root task, at most budget.max_inflight at a time. The client's next call
-- that equals one of them (the canonical JSON of name and arguments) gets
-- its result, or waits for it when it is still running; a prefetch older
-- than max_age_ms is never served. At the next round of predictions every
-- prefetch the client did not ask for is cancelled (the upstream request
-- gets notifications/cancelled) and counted as waste.
--
-- The rule that matters: a call the policy does not allow in full never
-- starts before the client asks for it. No policy: nothing is allowed.
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"
local json = require "specula.json"
local policy = require "specula.policy"
local output = require "specula.internal.output"
local transport = require "specula.mcp.transport"
local ffi, C = core.ffi, core.C

local type, pairs, ipairs, tostring, pcall = type, pairs, ipairs, tostring, pcall
local spawn_root = transport.spawn_root

local M = {}

local DECISION_OF = { full = tonumber(C.SP_FULL), warmup = tonumber(C.SP_WARMUP), forbid = tonumber(C.SP_FORBID) }
local HINT_NONE, HINT_ERROR = tonumber(C.SP_HINT_NONE), tonumber(C.SP_HINT_ERROR)
local FULL = tonumber(C.SP_FULL)
local whyp = ffi.new("int[1]")

local S = {}
S.__index = S

-- The key of a call: the canonical JSON of its name and arguments.
local function key_of(name, args)
  if args == nil or (type(args) == "table" and next(args) == nil) then args = json.object() end
  local ok, k = pcall(json.canonical, { name = name, arguments = args })
  return ok and k or nil
end
M.key_of = key_of

-- o: { predictor (callable, or nil: no speculation), policy (a spec
-- policy.build takes), policy_dir, max_age_ms, max_inflight,
-- max_wasted_cost (nil: none), cost ({ TOOL = cost of one call }, 1 when
-- not named), call =
-- function(name, args) -> result, err, info (an upstream tools/call),
-- tool_stats = function(name) -> the record's entry, server_up =
-- function(name) -> whether the tool's server is up now (else nothing is
-- launched for it: server_down), killed_server = function(name) -> whether
-- a prefetch of the tool once killed its server (never launched again:
-- killed_server) }.
function M.new(o)
  return setmetatable({
    predictor = o.predictor, policy_spec = o.policy, policy_dir = o.policy_dir,
    max_age_ms = o.max_age_ms or 60000, max_inflight = o.max_inflight or 2, call = o.call,
    max_wasted_cost = o.max_wasted_cost, cost = o.cost or {}, wasted_cost = 0,
    tool_stats = o.tool_stats, server_up = o.server_up, killed_server = o.killed_server, live = {}, history = {},
    round = 0,
    st = { predicted = 0, allowed = 0, refused = 0, launched = 0, hits = 0, joined = 0, waste = 0, stale = 0,
           cancelled = 0, hidden_ms = 0, predictor_errors = 0, by_budget = 0, wasted_cost = 0, tainted = 0,
           server_down = 0, killed_server = 0 },
  }, S)
end

-- The gate over the tools the client sees (rebuilt when they change).
-- ambiguous: name -> a server that did not start (upstreams:ambiguous_tools):
-- such a name might be another server's tool than the one the policy was
-- written for (a write tool given the bare name of the read tool it
-- shadows), so it never runs early; said once a session.
function S:set_tools(names, ambiguous)
  self.ambiguous = ambiguous or {}
  local amb = {}
  for name in pairs(self.ambiguous) do amb[#amb + 1] = name end
  if #amb > 0 and not self.said_ambiguous then
    table.sort(amb)
    self.said_ambiguous = true
    output.stderr(string.format("specula gateway: warning: server '%s' did not start, so %d tool name%s the client "
      .. "sees (first: '%s') might be another server's tool than the policy means: %s never run%s early in this "
      .. "session\n", self.ambiguous[amb[1]], #amb, #amb == 1 and "" or "s", amb[1], #amb == 1 and "it" or "they",
      #amb == 1 and "s" or ""))
  end
  local set = {}
  -- a policy's own budget = { max_wasted_cost } counts these costs too
  for _, n in ipairs(names) do set[n] = { cost = self:cost_of(n) } end
  self.tools = set
  local ok, p = pcall(policy.build, self.policy_spec, set, self.policy_dir)
  if not ok then
    output.stderr("specula gateway: warning: policy: ", tostring(p), " (nothing runs early)\n")
    self.gate = nil
  else
    self.gate = p
  end
end

function S:cost_of(name)
  local c = self.cost[name]
  return c == nil and 1 or c
end

-- What could still be wasted: the waste so far and every prefetch not yet
-- served (any of them may never be asked for).
local function exposure(self)
  local x = self.wasted_cost
  for _, e in pairs(self.live) do x = x + self:cost_of(e.name) end
  return x
end

local function inflight(self)
  local n = 0
  for _, e in pairs(self.live) do if not e.done then n = n + 1 end end
  return n
end

-- May this exact call start before the client asks? Only a full decision.
function S:allowed(name, args)
  local g = self.gate
  if not g or not self.tools or not self.tools[name] or self.ambiguous[name] then return false end
  local idx = C.sp_policy_tool_index(g.ptr, name, #name)
  local hint = HINT_NONE
  if g.decide then
    local ok, d = pcall(g.decide, name, args, { gateway = true })
    hint = ok and DECISION_OF[d] or HINT_ERROR
    if not ok or DECISION_OF[d] == nil then g.on_error(name, ok and ("returned " .. tostring(d)) or d) end
  end
  local d = C.sp_policy_gate(g.ptr, idx, C.SP_TRIG_PRED_START, hint, inflight(self), exposure(self), whyp)
  return d == FULL
end

-- Cancel a prefetch the client did not ask for: waste.
function S:_drop(k, e, why)
  self.live[k] = nil
  if not e.done then
    C.sp_task_cancel(e.task.ptr)
    self.st.cancelled = self.st.cancelled + 1
  end
  self.st[why] = self.st[why] + 1
  local c = self:cost_of(e.name)
  self.wasted_cost = self.wasted_cost + c
  self.st.wasted_cost = self.wasted_cost
  local ts = self.tool_stats(e.name)
  ts.waste = ts.waste + 1
end

-- Start one prefetch.
function S:_launch(k, name, args)
  local e = { key = k, name = name, args = args, started = sched.now(), round = self.round }
  -- the server's progress is kept (the latest) and, once the client joins
  -- the call, relayed to the client's own token
  local function on_progress(p)
    e.last_progress = p
    local f = e.listener
    if f then f(p) end
  end
  e.task = spawn_root(function()
    local r, err, info = self.call(name, args, { prefetch = true, on_progress = on_progress })
    e.result, e.err, e.info = r, err, info
    e.done, e.finished = true, sched.now()
    return true
  end)
  if not e.task then return end
  self.live[k] = e
  self.st.launched = self.st.launched + 1
  self.tool_stats(name).prefetched = self.tool_stats(name).prefetched + 1
end

-- A predictor that failed: counted (predictor_errors), and each distinct
-- failure said once a process on stderr, naming the method and the script's
-- line; the gateway goes on without that round's proposals (the client's
-- calls are untouched).
local SAID = {}
local function predictor_failed(self, what, err)
  self.st.predictor_errors = self.st.predictor_errors + 1
  local msg = what .. ": " .. (sched.errstr(err):match("^[^\n]*") or "?")
  if SAID[msg] then return end
  SAID[msg] = true
  output.stderr("specula gateway: warning: predictor ", msg, " (nothing prefetched for it; counted as predictor_errors)\n")
end

-- A result went back to the client: learn the call, propose the next ones.
function S:after(name, args, observation)
  local h = self.history
  h[#h + 1] = { tool = name, args = args, observation = observation }
  local P = self.predictor
  if not P then return end
  if type(P) == "table" and P.observe and #h >= 2 then
    local ok, err = pcall(P.observe, P, { tool = h[#h - 1].tool, args = h[#h - 1].args }, { tool = name, args = args })
    if not ok then predictor_failed(self, "observe raised", err) end
  elseif type(P) == "table" and P.observe_trajectory and #h >= 2 then
    -- the last transition as a short conversation of its own
    local ok, err = pcall(P.observe_trajectory, P, { { tool = h[#h - 1].tool, args = h[#h - 1].args }, { tool = name, args = args } },
      { trajectory = { { observation = h[#h - 1].observation }, { observation = observation } } })
    if not ok then predictor_failed(self, "observe_trajectory raised", err) end
  end
  local ok, cands = pcall(P, h, { tools = self.schemas })
  if not ok then
    predictor_failed(self, "raised", cands)
    cands = {}
  elseif type(cands) ~= "table" then
    predictor_failed(self, "returned", type(cands) .. ", expected a list of { tool =, args = }")
    cands = {}
  end
  self.round = self.round + 1
  local keep = {}
  for _, c in ipairs(cands) do
    if type(c) == "table" and type(c.tool) == "string" then
      local k = key_of(c.tool, c.args)
      if k then keep[k] = c end
    end
  end
  -- the previous round's prefetches that are not proposed again: waste
  for k, e in pairs(self.live) do
    if not keep[k] then self:_drop(k, e, "waste") end
  end
  for _, c in ipairs(cands) do
    local k = type(c) == "table" and type(c.tool) == "string" and key_of(c.tool, c.args)
    if k and not self.live[k] then
      self.st.predicted = self.st.predicted + 1
      if inflight(self) >= self.max_inflight then break end
      local mw = self.max_wasted_cost
      if mw and exposure(self) + self:cost_of(c.tool) > mw then
        -- a launch that could be wasted must fit in what is left
        self.st.by_budget = self.st.by_budget + 1
      elseif self.server_up and not self.server_up(c.tool) then
        -- its server is down or starting: a prefetch never (re)starts one
        self.st.server_down = self.st.server_down + 1
      elseif self.killed_server and self.killed_server(c.tool) then
        -- a prefetch of it crashed its server once: a guess that always
        -- crashes it would restart it after every call
        self.st.killed_server = self.st.killed_server + 1
      elseif self:allowed(c.tool, c.args) then
        self.st.allowed = self.st.allowed + 1
        self:_launch(k, c.tool, type(c.args) == "table" and c.args or json.object())
      else
        self.st.refused = self.st.refused + 1
      end
    end
  end
end

-- The client asks for a call: a prefetch of it (done or running), or nil.
-- Returns result, err, info, hidden_ms when served from one. on_progress:
-- the relay to the client's progress token, if it gave one (a call joined
-- in flight gets the progress so far, then each as it comes).
function S:take(name, args, on_progress)
  -- no prefetch live (a relay, or a miss): no key to compute
  if next(self.live) == nil then return nil end
  local k = key_of(name, args)
  local e = k and self.live[k]
  if not e then return nil end
  local asked = sched.now()
  if e.done and asked - e.finished > self.max_age_ms then
    self:_drop(k, e, "stale")
    return nil
  end
  self.live[k] = nil
  if not e.done then
    self.st.joined = self.st.joined + 1
    if on_progress then
      e.listener = on_progress
      if e.last_progress then on_progress(e.last_progress) end
    end
    local okw = e.task:wait()
    if not okw or not e.done then return nil, nil, nil, nil, true end
    if e.err ~= nil and e.result == nil then
      -- joined, then failed (a timeout, say): the client's call runs as
      -- asked, within what is left of its own time (5th value: joined)
      return nil, nil, nil, nil, true
    end
  end
  if e.err ~= nil and e.result == nil then
    -- a failed prefetch is not an answer: the client's call runs as asked
    return nil
  end
  local hidden = (e.done and e.finished <= asked) and (e.finished - e.started) or (asked - e.started)
  if hidden < 0 then hidden = 0 end
  self.st.hits = self.st.hits + 1
  self.st.hidden_ms = self.st.hidden_ms + hidden
  local ts = self.tool_stats(name)
  ts.hits = ts.hits + 1
  ts.hidden_ms = ts.hidden_ms + hidden
  return e.result, e.err, e.info, hidden
end

-- The session ends: every prefetch still held is waste.
-- A server asked the client something while only prefetches ran on it:
-- drop every prefetch still running (waste, counted as tainted), or only
-- those whose tool `on(name)` says ran there. true when any.
function S:taint_running(on)
  local any = false
  for k, e in pairs(self.live) do
    if not e.done and (on == nil or on(e.name)) then
      self:_drop(k, e, "tainted")
      any = true
    end
  end
  return any
end

function S:finish()
  for k, e in pairs(self.live) do self:_drop(k, e, "waste") end
end

function S:stats()
  local s = {}
  for k, v in pairs(self.st) do s[k] = v end
  if self.gate then
    local ok, counts = pcall(policy.counts, self.gate)
    if ok then s.gate = counts end
  end
  return s
end

return M
