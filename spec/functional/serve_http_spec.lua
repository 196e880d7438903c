-- The server side of MCP Streamable HTTP (specula.mcp.serve_http): the
-- official TypeScript SDK's client (StreamableHTTPClientTransport, driven by
-- spec/support/mcp_http_client.mjs) against a tiny MCP server written on
-- serve_http (spec/mcp/serve_fixture.lua, which runs the driver against
-- itself). Without Node.js and the pinned SDK these are pending (failures
-- in CI); the option checks need neither.
local H = require "support.helpers"
local deps = require "support.deps"

local missing = deps.npm()
local FIXTURE = H.root .. "/spec/mcp/serve_fixture.lua"
local DRIVER = H.root .. "/spec/support/mcp_http_client.mjs"

local result
local function run()
  if result then return result end
  local st, out, err = H.specula({ "run", FIXTURE, "node", DRIVER, "{URL}" }, { SPECULA_SOURCE_DIR = H.root })
  assert(st == 0, "exit status " .. st .. "\nstdout: " .. out .. "\nstderr: " .. err)
  result = H.last_json(out)
  result.stderr_all = err
  local d = result.driver
  assert(type(d) == "table" and d.ok, "the SDK driver failed: " .. tostring(type(d) == "table" and d.error or d)
    .. "\nits stderr: " .. tostring(result.stderr))
  return result
end

local function guard()
  if not missing then return true end
  return H.require_or_pend(pending, missing)
end

-- the conformance suite needs node >= 22 (the SDK, >= 20)
local suite_missing = deps.conformance()
local function suite_guard()
  if not suite_missing then return true end
  return H.require_or_pend(pending, suite_missing)
end

describe("MCP Streamable HTTP, server side, with the official TypeScript SDK client", function()
  it("initializes a session and answers tools/list and tools/call", function()
    if not guard() then return end
    local a = run().driver.a
    assert.matches("^%x+$", a.session)
    assert.are.equal(32, #a.session)
    assert.are.equal("2025-11-25", a.version)
    assert.are.same({ "echo", "ping_client", "notify", "hang", "progress", "shutdown" }, a.tools)
    assert.are.equal("hi there", a.echo)
    assert.are.equal("{}", a.pingServer)
    assert.matches("MCP error %-32602: no tool nope", a.unknownTool)
  end)

  it("carries the server's own request (a ping) and notifications on the call's stream and the GET stream", function()
    if not guard() then return end
    local r = run()
    assert.are.equal("pong", r.driver.a.ping)         -- the client answered the server's ping
    assert.are.same({ "hello from the fixture" }, r.driver.a.logs)   -- on the POST's SSE stream
    assert.are.equal(1, r.driver.a.listChanged)      -- on the GET stream
    assert.are.equal(3, r.stats.pongs)
    assert.are.equal(4, r.stats.initialized)   -- a, b, c and the raw session of the progress case
  end)

  it("routes a progress notification by its token to the stream of the request that set it", function()
    if not guard() then return end
    local p = run().driver.progress
    assert.are.equal("progressed", p.text)
    assert.are.same({ 1, 2 }, p.seen)      -- the SDK's onprogress
    assert.are.equal(200, p.get)           -- a GET stream was open ...
    assert.are.equal(2, p.onPost)          -- ... yet both went on the POST's own stream
    assert.is_true(p.resultOnPost)
  end)

  it("serves two clients at once, each in a session of its own", function()
    if not guard() then return end
    local r = run()
    local t = r.driver.two
    assert.are_not.equal(t.b, t.c)
    assert.are_not.equal(r.driver.a.session, t.b)
    assert.are.same({ "from b", "from c" }, t.echo)
    assert.are.same({ "pong", "pong" }, t.ping)
    assert.are.equal(4, r.stats.sessions)
  end)

  it("ends a session on DELETE: the session is told, its id is unknown (404), others go on", function()
    if not guard() then return end
    local r = run()
    assert.are.equal(404, r.driver.deleted.after.status)
    assert.are.equal("still here", r.driver.deleted.other)
    assert.are.equal(4, r.stats.lost)        -- every one DELETEd
    assert.are.equal("the client ended the session (HTTP DELETE)", r.stats.lost_why[1])
    assert.are.equal(0, r.sessions_open)
  end)

  it("refuses what the transport does not allow, with the status the spec gives", function()
    if not guard() then return end
    local f = run().driver.refusals
    assert.are.equal(400, f.noSession)
    assert.are.equal(404, f.unknownSession)
    assert.are.equal(400, f.badVersion)
    assert.are.equal(403, f.badOrigin)           -- DNS rebinding: bound to loopback, a foreign Origin
    assert.are.equal(403, f.badHost)             -- and a foreign Host
    assert.are.equal(200, f.goodOrigin)
    assert.are.equal(415, f.notJson)
    assert.are.equal(400, f.parseError)
    assert.are.equal(406, f.noAccept)
    assert.are.equal(405, f.put)
    assert.are.equal(406, f.getNoAccept)
    assert.are.equal(409, f.secondGet)           -- one GET stream per session
    assert.are.equal(404, f.otherPath)
    assert.are.equal(202, f.notification)
    assert.are.equal(200, f.jsonOnly.status)     -- Accept: application/json alone: a JSON reply
    assert.are.equal("application/json", f.jsonOnly.ctype)
    assert.are.equal(6, f.jsonOnly.tools)
    assert.are.same({ 11, 12 }, f.batch)         -- a batch: its answers in one JSON array
    assert.are.same({ status = 400, code = -32600 }, f.duplicateId)   -- two requests, one id
  end)

  it("tells the session when a client goes away from an unanswered request (notifications/cancelled)", function()
    if not guard() then return end
    local r = run()
    assert.are.equal("text/event-stream", r.driver.hang.ctype)
    assert.are.equal(1, r.stats.cancelled)
    assert.are.equal("the client disconnected", r.stats.cancel_reason)
    assert.are.equal(1, r.stats.hang_ended)
    assert.are.equal("after the hang", r.driver.hang.after)
    assert.is_nil(r.stderr_all:find("still open at exit", 1, true), r.stderr_all)
  end)
end)

describe("specula.mcp.serve_http.listen", function()
  local function listen_run(code)
    local st, out, err = H.run_lua([[
local serve = require "specula.mcp.serve_http"
local json = require("specula").json
]] .. code)
    assert.are.equal(0, st, "stdout: " .. out .. "\nstderr: " .. err)
    return H.last_json(out), err
  end

  it("serves 2026-07-28 POSTs without a session unless stateless = false", function()
    local r = listen_run([[
local specula = require "specula"
local function answer(t)
  t:open({ receive = function(_, m)
    if m.id ~= nil then t:send({ jsonrpc = "2.0", id = m.id, result = { supportedVersions = { "2026-07-28" } } }) end
  end, lost = function() end })
end
local out = {}
for _, stateless in ipairs({ true, false }) do
  local l = assert(serve.listen({ port = 0, on_session = answer, stateless = stateless }))
  local res = assert(specula.http.request { method = "POST", url = l:url(), body = json.encode({ jsonrpc = "2.0", id = 1,
    method = "server/discover", params = { _meta = { ["io.modelcontextprotocol/protocolVersion"] = "2026-07-28" } } }),
    headers = { ["Content-Type"] = "application/json", Accept = "application/json", ["MCP-Protocol-Version"] = "2026-07-28",
                ["Mcp-Method"] = "server/discover" } })
  out[#out + 1] = { status = res.status, body = res.body }
  l:close()
end
print(json.encode({ out = out }))
]])
    r = r.out
    assert.are.equal(200, r[1].status)
    assert.matches('"supportedVersions":%["2026%-07%-28"%]', r[1].body)
    assert.are.equal(400, r[2].status)
    assert.matches("Mcp%-Session%-Id header is required", r[2].body)
  end)

  it("with stateless_key serves the 2026-07-28 POSTs of one key by one session, the client's ids kept", function()
    local r = listen_run([[
local specula = require "specula"
local sessions, seen, lost = 0, {}, {}
local function on_session(t)
  sessions = sessions + 1
  local me = sessions
  t:open({ receive = function(_, m)
    if m.id ~= nil then
      seen[#seen + 1] = { session = me, id = m.id }
      t:send({ jsonrpc = "2.0", id = m.id, result = { session = me, text = m.params.arguments.text } })
    end
  end, lost = function(_, why) lost[#lost + 1] = why end })
end
local l = assert(serve.listen({ port = 0, on_session = on_session, session_timeout_ms = 300,
  stateless_key = function(list) return list[1].params._meta["io.modelcontextprotocol/clientInfo"].name end }))
local function post(id, who, text)
  local res = assert(specula.http.request { method = "POST", url = l:url(), body = json.encode({ jsonrpc = "2.0",
    id = id, method = "tools/call", params = { name = "echo", arguments = { text = text }, _meta = {
      ["io.modelcontextprotocol/protocolVersion"] = "2026-07-28",
      ["io.modelcontextprotocol/clientInfo"] = { name = who, version = "1" } } } }),
    headers = { ["Content-Type"] = "application/json", Accept = "application/json",
                ["MCP-Protocol-Version"] = "2026-07-28", ["Mcp-Method"] = "tools/call", ["Mcp-Name"] = "echo" } })
  return json.decode(res.body)
end
local out = { a1 = post(1, "a", "x"), b1 = post(1, "b", "y"), a2 = post(1, "a", "z") }
out.sessions, out.seen = sessions, seen
specula.sleep(800)   -- idle past session_timeout_ms: both end
out.lost = lost
l:close()
print(json.encode(out))
]])
    assert.are.equal(2, r.sessions)
    -- the client's id back; each key its own session, kept across POSTs
    assert.are.same({ id = 1, session = 1, text = "x" }, { id = r.a1.id, session = r.a1.result.session, text = r.a1.result.text })
    assert.are.same({ id = 1, session = 2, text = "y" }, { id = r.b1.id, session = r.b1.result.session, text = r.b1.result.text })
    assert.are.same({ id = 1, session = 1, text = "z" }, { id = r.a2.id, session = r.a2.result.session, text = r.a2.result.text })
    -- the session saw ids of its own: a client's id 1, twice, is no clash
    assert.are_not.equal(r.seen[1].id, r.seen[3].id)
    assert.are.equal(2, #r.lost)
    assert.matches("idle for over 300 ms", r.lost[1])
  end)

  it("checks its options and binds to loopback unless allow_remote (then it warns)", function()
    local r, err = listen_run([[
local out = {}
local function try(o) local l, e = serve.listen(o); if l then l:close() end; return e or "ok" end
out.no_fn = try({ port = 0 })
out.bad_port = try({ port = 70000, on_session = print })
out.bad_path = try({ path = "mcp", on_session = print })
out.bad_timeout = try({ session_timeout_ms = 0, on_session = print })
out.bad_key = try({ stateless_key = "clientInfo", on_session = print })
out.remote = try({ host = "0.0.0.0", port = 0, on_session = print })
out.remote_ok = try({ host = "0.0.0.0", port = 0, on_session = print, allow_remote = true })
out.bad_host = try({ host = "not an address", port = 0, on_session = print, allow_remote = true })
local l = assert(serve.listen({ port = 0, on_session = print }))
out.busy = select(2, serve.listen({ port = l:port(), on_session = print }))
out.port = l:port()
l:close()
print(json.encode(out))
]])
    assert.matches("on_session must be a function", r.no_fn)
    assert.matches("port must be an integer from 0 to 65535", r.bad_port)
    assert.matches("path must start with '/'", r.bad_path)
    assert.matches("session_timeout_ms must be a number of ms > 0, got 0", r.bad_timeout)
    assert.matches("stateless_key must be a function", r.bad_key)
    assert.matches("^EPERM: .*0%.0%.0%.0 is not a loopback address: give allow_remote = true", r.remote)
    assert.are.equal("ok", r.remote_ok)
    assert.matches("specula: warning: serving MCP on 0%.0%.0%.0 port %d+, reachable from other hosts", err)
    assert.matches("^EINVAL: listen: 'not an address' is not an IP address", r.bad_host)
    assert.matches("^EADDRINUSE: listen on 127%.0%.0%.1 port %d+", r.busy)
    assert.is_true(r.port > 0)
  end)
end)

-- The official conformance suite's server scenarios that test the
-- transport (sessions, DELETE, streams, DNS rebinding, 2026-07-28's
-- standard headers) and the few methods the fixture serves; the rest need tools, resources and prompts
-- a toy server does not have.
describe("MCP Streamable HTTP, server side, under the official conformance suite", function()
  local SUITE_JS = deps.cache() .. "/node_modules/@modelcontextprotocol/conformance/dist/index.js"
  for _, sc in ipairs({ "server-initialize", "server-session-lifecycle", "server-sse-multiple-streams",
                        "dns-rebinding-protection", "http-header-validation", "ping", "logging-set-level",
                        "tools-list" }) do
    it("passes " .. sc, function()
      if not suite_guard() then return end
      local st, out, err = H.specula({ "run", FIXTURE, "node", SUITE_JS, "server", "--url", "{URL}", "--scenario", sc },
        { SPECULA_SOURCE_DIR = H.root })
      assert.are.equal(0, st, "stdout: " .. out .. "\nstderr: " .. err)
      local r = H.last_json(out)
      local text = (r.out or ""):gsub("\27%[[%d;]*m", "")
      local passed, total = text:match("Passed: (%d+)/(%d+)")
      assert.is_truthy(passed, "no 'Passed: n/m' line: " .. text)
      assert.is_true(tonumber(total) >= 2, text)
      assert.are.equal(total, passed, text)
      assert.is_nil(text:find("FAILURE", 1, true), text)
      assert.are.equal(0, r.status, text)
    end)
  end
end)

describe("MCP Streamable HTTP, server side, with specula's own client", function()
  local function run_client(version, idle_ms, env)
    local args = { "run", FIXTURE, H.bin, "run", H.root .. "/spec/mcp/serve_client.lua", "{URL}" }
    if version then args[#args + 1] = version end
    if idle_ms then args[#args + 1] = tostring(idle_ms) end
    local e = { SPECULA_SOURCE_DIR = H.root }
    for k, v in pairs(env or {}) do e[k] = v end
    local st, out, err = H.specula(args, e)
    assert.are.equal(0, st, "stdout: " .. out .. "\nstderr: " .. err)
    local r = H.last_json(out)
    assert.is_true(type(r.driver) == "table" and r.driver.ok, "the client failed: " .. out)
    return r
  end

  it("speaks 2025-11-25 and 2025-06-18 in a session, the server's ping included", function()
    for _, v in ipairs({ "2025-11-25", "2025-06-18" }) do
      local r = run_client(v)
      assert.are.equal(v, r.driver.version)
      assert.is_false(r.driver.stateless)
      assert.are.same({ 6, "from specula", "pong" }, { r.driver.tools, r.driver.echo, r.driver.ping })
      assert.are.same({ v }, r.stats.versions)
      -- the client's close DELETEs its session; then the raw stateless POST is one of its own
      assert.are.equal(2, r.stats.sessions)
      assert.are.equal(2, r.stats.lost)
      assert.are.equal("the client ended the session (HTTP DELETE)", r.stats.lost_why[1])
    end
  end)

  it("serves 2026-07-28 stateless: each POST a session of its own, the headers checked against the body", function()
    local r = run_client(nil)   -- the client's default: 2026-07-28 when the server speaks it
    local d = r.driver
    assert.are.equal("2026-07-28", d.version)
    assert.is_true(d.stateless)
    assert.are.same({ 6, "from specula" }, { d.tools, d.echo })
    assert.are.equal(1, r.stats.discovered)
    assert.are.equal(0, r.stats.initialized)
    -- server/discover, tools/list, tools/call, the matching raw POST: a session each, each ended
    assert.are.equal(4, r.stats.sessions)
    assert.are.equal(4, r.stats.lost)
    assert.are.equal("the request has ended (stateless 2026-07-28)", r.stats.lost_why[1])
    assert.are.same({ status = 400, code = -32020 }, { status = d.mismatch.status, code = d.mismatch.code })
    assert.are.same({ status = 200, tools = 6 }, { status = d.match.status, tools = d.match.tools })
    assert.are.equal(0, r.sessions_open)
  end)

  it("ends a session idle past session_timeout_ms (no stream open, no request): 404 from then on", function()
    local env = { FIXTURE_SESSION_TIMEOUT_MS = "600" }
    local r = run_client("2025-11-25", 100, env)   -- back within the timeout: the session is there
    assert.are.equal("after the wait", r.driver.after_idle)
    r = run_client("2025-11-25", 2000, env)       -- back after it: gone
    assert.matches("HTTP 404: the session has expired", r.driver.after_idle)
    assert.are.equal("the session was idle for over 600 ms", r.stats.lost_why[1])
  end)
end)
