-- The transport seam of specula.mcp (specula.mcp.transport): the session
-- (specula.mcp.client) speaks through any table that keeps the interface,
-- and the cassette records and replays MCP round trips as a wrapper around
-- such a transport, knowing nothing of stdio or HTTP.
local H = require "support.helpers"

local last_json = H.last_json

-- A transport with its server inside: each request is answered from a task
-- of its own 5 ms later, and before it answers a tools/call the server asks
-- the client a ping of its own.
local PRELUDE = [[
local specula = require "specula"
local json = specula.json
local client = require "specula.mcp.client"
local transport = require "specula.mcp.transport"

local function loop()
  local T = { kind = "loop", answers_inline = false, send_waits = false, restartable = false, starts = 0,
              roundtrip = transport.roundtrip, sent = {}, requests = {} }
  function T:open(peer) self.peer = peer; self.starts = self.starts + 1; return true end
  function T:request(x)
    local msg = assert(json.decode(x.text))
    self.requests[#self.requests + 1] = msg.method
    specula.spawn(function()
      specula.sleep(5)
      local r
      if msg.method == "initialize" then
        r = { protocolVersion = "2025-06-18", capabilities = json.object(), serverInfo = { name = "loop", version = "1" } }
      elseif msg.method == "tools/list" then
        r = { tools = { { name = "echo", inputSchema = { type = "object" } } } }
      elseif msg.method == "tools/call" then
        self.peer:receive({ jsonrpc = "2.0", id = "s1", method = "ping" }, "loop")
        r = { content = { { type = "text", text = json.canonical(msg.params.arguments) } } }
      end
      if r then
        self.peer:receive({ jsonrpc = "2.0", id = msg.id, result = r }, "loop")
      else
        self.peer:receive({ jsonrpc = "2.0", id = msg.id, error = { code = -32601, message = "no " .. msg.method } }, "loop")
      end
    end)
    return true
  end
  function T:send(msg)
    self.sent[#self.sent + 1] = msg.method or ("result for " .. tostring(msg.id))
    return true
  end
  function T:set_version(v) self.version = v end
  function T:ready() self.up = true end
  function T:close() self.closed = true end
  function T:abort() end
  return T
end
]]

local function run(code, args)
  local st, out, err = H.run_lua(PRELUDE .. code, args)
  assert.are.equal(0, st, "exit status " .. st .. "\nstdout: " .. out .. "\nstderr: " .. err)
  return last_json(out), err
end

describe("the MCP session over a transport of its own", function()
  it("makes the handshake, requests and the server's own requests through the interface alone", function()
    local r = run([[
local T = loop()
local c = assert(client.open(T, { timeout_ms = 2000 }, "loop"))
local tools = assert(c:list_tools())
local res = assert(c:call("echo", { x = 1 }))
local bad, err = c:request("nope")
c:close()
print(json.encode({ version = c.protocol_version, t_version = T.version, up = T.up, tools = #tools,
  text = res.content[1].text, bad = bad == nil, err = err, requests = T.requests, sent = T.sent,
  closed = T.closed, n = c:stats().requests, starts = T.starts }))
]])
    assert.are.equal("2025-06-18", r.version)
    assert.are.equal("2025-06-18", r.t_version)   -- the transport was told the version
    assert.is_true(r.up)                           -- and that the session is up
    assert.are.equal(1, r.tools)
    assert.are.equal('{"x":1}', r.text)
    assert.is_true(r.bad)
    assert.are.equal("mcp server 'loop': nope: error -32601: no nope", r.err)
    -- the 2026-07-28 probe first: refused (-32601), so a session follows
    assert.are.same({ "server/discover", "initialize", "tools/list", "tools/call", "nope" }, r.requests)
    -- the handshake's notification, and the answer to the server's ping
    -- (sent while the call waited, before its own answer came)
    assert.are.same({ "notifications/initialized", "result for s1" }, r.sent)
    assert.is_true(r.closed)
    assert.are.equal(5, r.n)
    assert.are.equal(1, r.starts)
  end)
end)

describe("the cassette's MCP transport wrapper", function()
  it("records round trips over a transport it does not know and replays them without it", function()
    local dir = H.tmpdir() .. "/tape"
    local CALLS = [[
local cassette = require "specula.cassette"
local c = assert(client.open(cassette.mcp_transport(T, "loop", {}), {}, "loop"))
local a = assert(c:call("echo", { x = 2 }))
local b, err = c:request("nope")
print(json.encode({ text = a.content[1].text, err = err, requests = T.requests, n = c:stats().requests,
  touched = touched }))
]]
    local rec = run("local T, touched = loop(), {}\n" .. CALLS, { "--record", dir })
    assert.are.equal('{"x":2}', rec.text)
    assert.are.equal("mcp server 'loop': nope: error -32601: no nope", rec.err)
    assert.are.same({ "server/discover", "initialize", "tools/call", "nope" }, rec.requests)
    local tape = assert(H.read(dir .. "/cassette-0001.jsonl"))
    assert.matches('"key":"MCP loop tools/call\\n{\\"arguments\\":{\\"x\\":2},\\"name\\":\\"echo\\"}"', tape, 1, true)
    assert.matches('"err":"mcp server \'loop\': nope: error -32601: no nope"', tape, 1, true)
    -- the replay's transport fails whatever moves a message: the tape answers
    local rep = run([[
local T, touched = loop(), {}
for _, k in ipairs({ "open", "request", "send" }) do
  T[k] = function() touched[#touched + 1] = k; return nil, "the replay reached the transport" end
end
]] .. CALLS, { "--replay-io", dir })
    assert.are.equal(rec.text, rep.text)
    assert.are.equal(rec.err, rep.err)
    assert.are.same({}, rep.requests)
    assert.are.same({}, rep.touched)
    assert.are.equal(0, rep.n)   -- served from the tape, no request made
  end)
end)
