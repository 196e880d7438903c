-- specula.gateway.record: what one gateway session did, as one JSON record
-- (`specula gateway --out FILE` appends one line per session):
--
--   { kind = "gateway-session", session, started_ms, ended_ms, why (how it
--     ended), client ({ name, version } as the client said), version (the
--     protocol version agreed with the client), servers = { NAME = {
--     requests, errors, ms, version (agreed with that server), restarts } },
--     calls = N, tools = { NAME = { calls, errors, ms, hits, prefetched,
--     waste, hidden_ms } }, speculation = { predicted, allowed, refused,
--     launched, hits, joined, waste, stale, cancelled, hidden_ms, gate },
--     trace = { { tool, args_sha256, t_ms, ms, prefetched, hidden_ms } },
--     provenance }
--
-- Arguments are kept as digests only (a call's arguments may be private);
-- every text goes through the secrets scrubber (the output layer).
local json = require "specula.json"
local sched = require "specula.internal.sched"
local prov = require "specula.provenance"

local pairs, tostring, pcall = pairs, tostring, pcall

local M = {}

local R = {}
R.__index = R

-- id: the session's number in this process; built: the gateway's
-- provenance (specula.provenance.build).
function M.new(id, built)
  return setmetatable({ id = id, built = built, started = sched.now(), tools = {}, servers = {}, trace = {},
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

function R:call(name, args, t0, ms, prefetched, hidden)
  self.st.calls = self.st.calls + 1
  self.trace[#self.trace + 1] = { tool = name, args_sha256 = digest(args), t_ms = t0 - self.started, ms = ms,
                                  prefetched = prefetched == true, hidden_ms = hidden or 0 }
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
    speculation = session.spec:stats(), trace = self.trace,
    provenance = self.built and prov.raw(self.built, qd) or nil,
  }
end

return M
