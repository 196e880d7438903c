-- A tiny MCP server over specula.mcp.serve_http, for the specs: each
-- session answers initialize, ping, tools/list and tools/call of echo,
-- ping_client (asks the client a ping of its own on the call's stream and
-- waits for the answer), notify (a log message on the call's stream, a
-- list_changed on the session's GET stream) and shutdown. It runs a child
-- against itself and prints one JSON line: the child's last output line
-- and its own counts.
--   specula run spec/mcp/serve_fixture.lua COMMAND ARG... (the text {URL}
--   in an argument becomes the server's URL)
local specula = require "specula"
local json = specula.json
package.path = os.getenv("SPECULA_SOURCE_DIR") .. "/spec/support/?.lua;" .. package.path
local child = require "child"
local serve = require "specula.mcp.serve_http"
local transport = require "specula.mcp.transport"
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"
local C = core.C

local stats = { sessions = 0, lost = 0, initialized = 0, cancelled = 0, pongs = 0, versions = {}, lost_why = {} }
local done = false
local TOOLS = {
  { name = "echo", description = "the text back", inputSchema = { type = "object", properties = { text = { type = "string" } } } },
  { name = "ping_client", description = "pings the client first", inputSchema = { type = "object" } },
  { name = "notify", description = "sends notifications", inputSchema = { type = "object" } },
  { name = "hang", description = "answers only when cancelled", inputSchema = { type = "object" } },
  { name = "progress", description = "reports progress", inputSchema = { type = "object" } },
  { name = "shutdown", description = "ends the fixture", inputSchema = { type = "object" } },
}
local VERSIONS = { ["2025-03-26"] = true, ["2025-06-18"] = true, ["2025-11-25"] = true }

local function text(s) return { content = { { type = "text", text = s } } } end

-- One session: the transport t (serve_http's) opened with this peer.
local function session(t)
  stats.sessions = stats.sessions + 1
  local waits, n, hangs = {}, 0, {}
  local function ask(method, rel)
    n = n + 1
    local id = "srv-" .. n
    local me = sched.current("fixture")
    local gate = core.ffi.gc(C.sp_rpc_new(core.ctx, me, 5000), C.sp_rpc_free)
    waits[id] = { gate = gate }
    assert(t:send({ jsonrpc = "2.0", id = id, method = method }, rel))
    while C.sp_rpc_wait(gate, me) == 0 do sched.yield() end
    local w = waits[id]
    waits[id] = nil
    return w.msg
  end
  local function call(msg)
    local p = msg.params or {}
    local args = p.arguments or {}
    if p.name == "echo" then return text(tostring(args.text)) end
    if p.name == "ping_client" then
      local r = ask("ping", msg.id)
      if r and r.result then stats.pongs = stats.pongs + 1 end
      return text(r and r.result and "pong" or "no pong")
    end
    if p.name == "notify" then
      t:send({ jsonrpc = "2.0", method = "notifications/message",
               params = { level = "info", logger = "fixture", data = "hello from the fixture" } }, msg.id)
      t:send({ jsonrpc = "2.0", method = "notifications/tools/list_changed" })
      return text("notified")
    end
    if p.name == "progress" then
      -- no rel: the token alone routes it to this call's stream
      local meta = type(p._meta) == "table" and p._meta or {}
      for i = 1, 2 do
        t:send({ jsonrpc = "2.0", method = "notifications/progress",
                 params = { progressToken = meta.progressToken, progress = i, total = 2 } })
      end
      return text("progressed")
    end
    if p.name == "hang" then
      -- until the client cancels it (or goes: serve_http cancels it then)
      local me = sched.current("fixture")
      local gate = core.ffi.gc(C.sp_rpc_new(core.ctx, me, 10000), C.sp_rpc_free)
      hangs[#hangs + 1] = gate
      while C.sp_rpc_wait(gate, me) == 0 do sched.yield() end
      stats.hang_ended = (stats.hang_ended or 0) + 1
      return text("cancelled")
    end
    if p.name == "shutdown" then
      done = true
      return text("bye")
    end
    return nil, { code = -32602, message = "no tool " .. tostring(p.name) }
  end
  local function handle(msg)
    local result, err
    if msg.method == "initialize" then
      local want = msg.params and msg.params.protocolVersion
      local v = VERSIONS[want] and want or "2025-06-18"
      stats.versions[#stats.versions + 1] = v
      result = { protocolVersion = v, capabilities = { tools = { listChanged = true }, logging = json.object() },
                 serverInfo = { name = "specula-fixture", version = "1" } }
    elseif msg.method == "server/discover" then
      -- 2026-07-28, stateless: a session of one request (serve_http's)
      stats.discovered = (stats.discovered or 0) + 1
      result = { supportedVersions = { "2026-07-28" }, capabilities = { tools = json.object() },
                 serverInfo = { name = "specula-fixture", version = "1" } }
    elseif msg.method == "ping" then result = json.object()
    elseif msg.method == "tools/list" then result = { tools = TOOLS }
    elseif msg.method == "tools/call" then result, err = call(msg)
    elseif msg.method == "logging/setLevel" then result = json.object()
    else err = { code = -32601, message = "Method not found: " .. msg.method } end
    if result and t.stateless then
      -- 2026-07-28 results say they are complete; lists say how to cache them
      result.resultType = "complete"
      if msg.method == "tools/list" then result.ttlMs, result.cacheScope = 0, "private" end
    end
    t:send({ jsonrpc = "2.0", id = msg.id, result = result, error = err })
  end
  assert(t:open({
    st = {},
    receive = function(_, msg)
      if msg.method and msg.id ~= nil then
        transport.spawn_root(function() handle(msg) end)
      elseif msg.method == "notifications/initialized" then
        stats.initialized = stats.initialized + 1
      elseif msg.method == "notifications/cancelled" then
        stats.cancelled = stats.cancelled + 1
        stats.cancel_reason = msg.params and msg.params.reason
        for _, g in ipairs(hangs) do C.sp_rpc_complete(g) end
      elseif msg.method == nil and waits[msg.id] then
        waits[msg.id].msg = msg
        C.sp_rpc_complete(waits[msg.id].gate)
      end
    end,
    lost = function(_, why)
      stats.lost = stats.lost + 1
      stats.lost_why[#stats.lost_why + 1] = why
    end,
    malformed = function() end,
    warn = function() end,
  }))
end

local L = assert(serve.listen { port = 0, on_session = session,
                                session_timeout_ms = tonumber(os.getenv("FIXTURE_SESSION_TIMEOUT_MS")) })
local url = L:url()
assert(url == "http://127.0.0.1:" .. L:port() .. "/mcp", url)
local argv = {}
for i, a in ipairs(arg) do argv[i] = (a:gsub("{URL}", url)) end
local out, status, err = child.run(argv)
local sessions_open = L:sessions()
L:close()
local last = out:match("([^\n]*)%s*$")
local driver = json.decode(last or "")
print(json.encode({ driver = driver or json.null, out = not driver and out or nil, status = status, stderr = err,
                    stats = stats, sessions_open = sessions_open, done = done }))
