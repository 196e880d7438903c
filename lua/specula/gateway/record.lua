-- specula.gateway.record: what one gateway session did, as one JSON record
-- (`specula gateway --out FILE` appends one line per session):
--
--   { kind = "gateway-session", session, started_ms, ended_ms, why (how it
--     ended), client ({ name, version } as the client said), version (the
--     protocol version agreed with the client), servers = { NAME = {
--     requests, errors, ms, version (agreed with that server), restarts,
--     prefetch_deaths (the deaths prefetches alone were running for) } },
--     calls = N, tools = { NAME = { calls, errors, ms, hits, prefetched,
--     waste, hidden_ms } }, speculation = { predicted, allowed, refused,
--     launched, hits, joined, waste, stale, cancelled, hidden_ms,
--     by_budget (refused by budget.max_wasted_cost), wasted_cost, tainted
--     (dropped: their server asked the client something), server_down
--     (not launched: the tool's server was not up), killed_server (not
--     launched: a prefetch of the tool once crashed its server), gate },
--     trace = { { tool, args_sha256, t_ms, ms, prefetched, hidden_ms } },
--     provenance }
--
-- Arguments are kept as digests only (a call's arguments may be private);
-- every text goes through the secrets scrubber (the output layer).
--
-- With spans (`--record DIR`) each call's arguments and result text are
-- kept too, for r:otlp(): the session as OpenTelemetry GenAI spans in the
-- OTLP JSON encoding (a `chat` span for the client's model time between a
-- result and the next call, an `execute_tool` span per call), which
-- `specula whatif` reads as a timed session (specula.convtraces.otel).
local json = require "specula.json"
local sched = require "specula.internal.sched"
local prov = require "specula.provenance"

local pairs, tostring, pcall = pairs, tostring, pcall

local M = {}

local R = {}
R.__index = R

-- id: the session's number in this process; built: the gateway's
-- provenance (specula.provenance.build).
function M.new(id, built, o)
  return setmetatable({ id = id, built = built, started = sched.now(), wall_ms = os.time() * 1000, tools = {},
                        servers = {}, trace = {}, spans = o and o.spans and {} or nil,
                        st = { calls = 0, cancelled_by_client = 0 } }, R)
end

function R:tool(name)
  local t = self.tools[name]
  if not t then
    t = { calls = 0, errors = 0, ms = 0, hits = 0, prefetched = 0, waste = 0, hidden_ms = 0 }
    self.tools[name] = t
  end
  return t
end

function R:server(name)
  local s = self.servers[name]
  if not s then
    s = { requests = 0, errors = 0, ms = 0 }
    self.servers[name] = s
  end
  return s
end

local function digest(v)
  local ok, text = pcall(json.canonical, v == nil and json.object() or v)
  return ok and prov.sha256_hex(text) or json.null
end

function R:call(name, args, t0, ms, prefetched, hidden, result_text)
  self.st.calls = self.st.calls + 1
  if self.spans then
    local ok, atext = pcall(json.encode, args == nil and json.object() or args)
    self.spans[#self.spans + 1] = { tool = name, args = ok and atext or "{}", t0 = t0, t1 = t0 + ms,
                                    result = result_text or "" }
  end
  self.trace[#self.trace + 1] = { tool = name, args_sha256 = digest(args), t_ms = t0 - self.started, ms = ms,
                                  prefetched = prefetched == true, hidden_ms = hidden or 0 }
end

-- The client is ready (initialize answered): its first model turn starts.
function R:ready() self.t_ready = self.t_ready or sched.now() end

local function attr(k, v)
  if type(v) == "number" then return { key = k, value = { intValue = string.format("%d", v) } } end
  return { key = k, value = { stringValue = tostring(v) } }
end

-- The session's spans as one OTLP JSON export (nil without spans).
function R:otlp()
  if not self.spans then return nil end
  local trace_id = prov.sha256_hex("gateway-session " .. self.id .. " " .. self.wall_ms):sub(1, 32)
  local conv = "specula-gateway-" .. self.id .. "-" .. self.wall_ms
  local function ns(t) return string.format("%.0f", (self.wall_ms + (t - self.started)) * 1e6) end
  local list, n = {}, 0
  local function span(name, op, t0, t1, extra)
    n = n + 1
    local a = { attr("gen_ai.operation.name", op), attr("gen_ai.conversation.id", conv) }
    for _, x in ipairs(extra or {}) do a[#a + 1] = x end
    list[#list + 1] = { traceId = trace_id, spanId = prov.sha256_hex(trace_id .. n):sub(1, 16), name = name,
                        startTimeUnixNano = ns(t0), endTimeUnixNano = ns(t1), attributes = a }
  end
  local calls = {}
  for i, s in ipairs(self.spans) do calls[i] = s end
  table.sort(calls, function(a, b) return a.t0 < b.t0 end)
  local free = self.t_ready or self.started
  for i, c in ipairs(calls) do
    if c.t0 > free then span("chat", "chat", free, c.t0) end
    span("execute_tool " .. c.tool, "execute_tool", c.t0, c.t1, {
      attr("gen_ai.tool.name", c.tool), attr("gen_ai.tool.call.id", "call-" .. i),
      attr("gen_ai.tool.call.arguments", c.args), attr("gen_ai.tool.call.result", c.result) })
    if c.t1 > free then free = c.t1 end
  end
  return { resourceSpans = { { resource = { attributes = { attr("service.name", "specula-gateway") } },
                               scopeSpans = { { scope = { name = "specula.gateway" }, spans = json.array(list) } } } } }
end

function R:finish(session)
  self.ended = sched.now()
  self.final = self:record(session)
end

-- The record as it stands.
function R:record(session)
  local servers = {}
  for name, s in pairs(self.servers) do servers[name] = { requests = s.requests, errors = s.errors, ms = s.ms } end
  if session.up then
    for _, e in ipairs(session.up:each()) do
      local s = servers[e.name] or { requests = 0, errors = 0, ms = 0 }
      s.version = e.client.protocol_version
      s.restarts = e.client.st.restarts
      -- of those deaths, the ones prefetches alone caused (their restarts
      -- not counted against max_restarts)
      s.prefetch_deaths = e.client.st.prefetch_deaths
      -- what the server did wrong on its transport (its client is quiet:
      -- a client's stderr is no place for it), counted here
      local cst = e.client.st
      s.malformed, s.unknown_ids, s.oversized, s.timeouts = cst.malformed, cst.unknown_ids, cst.oversized, cst.timeouts
      servers[e.name] = s
    end
    for name, err in pairs(session.up.errors) do
      servers[name] = servers[name] or { requests = 0, errors = 0, ms = 0 }
      servers[name].error = tostring(err)
    end
  end
  local tools = {}
  for name, t in pairs(self.tools) do
    local c = {}
    for k, v in pairs(t) do c[k] = v end
    tools[name] = c
  end
  local qd = digest(self.trace)
  return {
    kind = "gateway-session", session = self.id, started_ms = self.started, ended_ms = self.ended or json.null,
    why = session.why or json.null, client = session.client_info or json.null, version = session.version or json.null,
    servers = servers, calls = self.st.calls, cancelled_by_client = self.st.cancelled_by_client, tools = tools,
    -- (a list even when empty: a session without calls has "trace": [])
    speculation = session.spec:stats(), trace = json.array(self.trace),
    provenance = self.built and prov.raw(self.built, qd) or nil,
  }
end

return M
