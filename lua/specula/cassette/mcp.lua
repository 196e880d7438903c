-- specula.cassette.mcp: the cassette's MCP transport wrapper (the
-- interface: specula.mcp.transport): whole round trips recorded around
-- the live transport or served from the tape.
local json = require "specula.json"
local sched = require "specula.internal.sched"
local transport = require "specula.mcp.transport"
local session = require "specula.cassette.session"
local match = require "specula.cassette.match"
local miss = require "specula.cassette.miss"
local clock = require "specula.cassette.clock"
local writer = require "specula.cassette.writer"

local type, tostring, pairs, format = type, tostring, pairs, string.format

local M = {}

local current_job, meta_now, scopes = session.current_job, session.meta_now, session.scopes
local take, count_served, on_miss = match.take, match.count_served, miss.on_miss
local sleep_until, depart = clock.sleep_until, clock.depart
local write, write_start = writer.write, writer.write_start

local function strip_meta(params)
  if type(params) ~= "table" or params._meta == nil then return params end
  local c = {}
  for k, v in pairs(params) do if k ~= "_meta" then c[k] = v end end
  return setmetatable(c, getmetatable(params))
end

-- Whether an MCP client may skip starting its server: every request is to
-- be served from the cassette (no live fallback).
function M.offline()
  local st = session.state
  return st ~= nil and st.replay ~= nil and st.miss ~= "live"
end

-- The MCP transport wrapper (the interface: specula.mcp.transport), which
-- specula.mcp puts around every live transport: while a cassette is open
-- it takes each whole round trip (a request to the answer the session
-- returns, an error included), records it around the live one or serves it
-- from the tape; with none open it passes through. Everything else is the
-- live transport's. offline: the replay needs no server (no live fallback),
-- so the session starts none.
local McpTape = {}

function M.mcp_transport(inner, server, headers)
  return transport.wrap(McpTape, { inner = inner, server = server, headers = headers,
                                   offline = M.offline() or nil })
end

function McpTape:roundtrip(x, go)
  local st = session.state
  if not st then return go() end
  local method, params = x.method, x.params
  local kp = strip_meta(params) or json.object()
  if method == "initialize" and type(kp) == "table" then
    -- the client's own name and version are not part of what was asked
    kp = { protocolVersion = kp.protocolVersion, capabilities = kp.capabilities }
  end
  local ok, pc = pcall(json.canonical, kp)
  if not ok then pc = tostring(params) end
  local key = "MCP " .. tostring(self.server) .. " " .. method .. "\n" .. pc
  local J = current_job()
  local meta = meta_now(J)
  local scope, qscope = scopes(meta, st.bypath)
  local rec, n, held, again = take(st, scope, qscope, key)
  local what = format("MCP %s %s", tostring(self.server), tostring(x.what or method))
  if st.replay then
    if rec and rec.kind == "mcp" and not rec.start then
      count_served(st, again)
      sleep_until(depart(J, rec) + (rec.ms or 0))
      if rec.err then return nil, rec.err end
      return rec.res
    end
    if method == "server/discover" and rec == nil and held == 0 then
      -- a tape from a session (before 2026-07-28, or a session server):
      -- answered as such a server answers the probe, so the client starts
      -- the session the tape holds; no miss
      return nil, what .. ": not in the cassette (it holds a session's initialize)"
    end
    local go_live, err = on_miss(st, "mcp", what, n, held, meta, rec ~= nil, key)
    if not go_live then return nil, err end
    if self.offline then return nil, what .. ": the server was not started (replaying offline)" end
  end
  write_start("mcp", key, n, meta)
  local t0 = sched.now()
  if J and not J.first then J.first = t0 - J.born end
  local r, err = go()
  if st.file then
    write({ kind = "mcp", key = key, n = n, at = t0 - st.t0, off = J and t0 - J.born, ms = sched.now() - t0, meta = meta,
            req = { server = self.server, method = method, params = strip_meta(params) },
            res = r, err = (r == nil) and err or nil })
  end
  return r, err
end

return M
