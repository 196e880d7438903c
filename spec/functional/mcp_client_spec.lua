-- specula.mcp against a real MCP server process (spec/support/mcp_testserver.js)
-- over stdio and Streamable HTTP on loopback: the protocol, its faults, and
-- cancellation on the wire.
local H = require "support.helpers"
local cjson = require "cjson"
local SERVER = H.root .. "/spec/support/mcp_testserver.js"

local last_json = H.last_json

local PRELUDE = [[
local specula = require "specula"
local json = specula.json
local SERVER = ]] .. string.format("%q", SERVER) .. "\n"

local function run(code, env)
  local st, out, err = H.run_lua(PRELUDE .. code, {}, env)
  assert.are.equal(0, st, "exit status " .. st .. "\nstdout: " .. out .. "\nstderr: " .. err)
  return last_json(out), err
end

-- The HTTP flavour of the test server; stop() ends it.
local function http_server()
  local p = assert(io.popen("node " .. H.quote(SERVER) .. " --http 2>/dev/null & echo BGPID $!", "r"))
  local pid = tonumber(p:read("*l"):match("BGPID (%d+)"))
  local port = tonumber(p:read("*l"):match("PORT (%d+)"))
  return { url = "http://127.0.0.1:" .. port .. "/mcp", stop = function() os.execute("kill " .. pid); p:close() end }
end

describe("specula.mcp over stdio", function()
  it("negotiates, lists every page of tools as described, calls, pings, reports progress and refuses server requests", function()
    if not H.need_node(pending) then return end
    local r = run([[
local c = assert(specula.mcp.connect{ command = { "node", SERVER }, name = "t" })
local tools = assert(c:list_tools())
local by = {}
for _, t in ipairs(tools) do by[t.name] = t end
local echo = assert(c:call("echo", { text = "hi" }))
local add = assert(c:call("add", { a = 2, b = 5 }))
local fail = assert(c:call("fail"))
local n = 0
local prog = assert(c:call("progress", { n = 4 }, { on_progress = function(p) n = n + 1 end }))
local ask = assert(c:call("ask", { method = "sampling/createMessage" }))
local log = assert(c:call("log")).structuredContent
local pid = c.pid
c:close()
local alive = os.execute("kill -0 " .. pid .. " 2>/dev/null") == 0
print(json.encode({ ntools = #tools, version = c.protocol_version, ping = true,
  echo_ro = by.echo.annotations.readOnlyHint, write_destr = by.write.annotations.destructiveHint,
  add_out = by.add.outputSchema.properties.sum.type, last = tools[#tools].name,
  echo = echo.content[1].text, sum = add.structuredContent.sum, fail = fail.isError, progress = n,
  ask = ask.content[1].text, initialized = log.initialized, alive = alive, procs = specula.settle().procs }))
]])
    assert.are.equal(24, r.ntools)              -- five pages (5, 5, 5, 5, 4) followed
    assert.are.equal("tool_07", r.last)
    assert.is_true(r.version == "2025-11-25" or r.version == "2025-06-18")
    assert.is_true(r.echo_ro)
    assert.is_true(r.write_destr)
    assert.are.equal("number", r.add_out)
    assert.are.equal("echo: hi", r.echo)
    assert.are.equal(7, r.sum)
    assert.is_true(r.fail)
    assert.are.equal(4, r.progress)
    assert.matches("-32601", r.ask)
    assert.are.equal(1, r.initialized)
    assert.is_false(r.alive)
    assert.are.equal(0, r.procs)
  end)

  it("survives a garbage line, a stray id and an oversized message, and restarts a crashed server (bounded)", function()
    if not H.need_node(pending) then return end
    local r, err = run([[
local c = assert(specula.mcp.connect{ command = { "node", SERVER }, name = "faulty", max_restarts = 1,
                                      max_message_bytes = 4000 })
local g = assert(c:call("garbage"))
local u = assert(c:call("unknown_id"))
local b1, berr = c:call("big", { bytes = 10000 })
local b2 = assert(c:call("big", { bytes = 100 }))
local x1, cerr = c:call("crash")
local e1 = assert(c:call("echo", { text = "again" }))
local x2, cerr2 = c:call("crash")
local e2, gerr = c:call("echo", { text = "once more" })
local st = c:stats()
c:close()
print(json.encode({ g = g.content[1].text, u = u.content[1].text, berr = berr, b2 = #b2.content[1].text,
  cerr = cerr, e1 = e1.content[1].text, gerr = gerr, st = st, procs = specula.settle().procs }))
]])
    assert.are.equal("after garbage", r.g)
    assert.are.equal("after stray", r.u)
    assert.are.equal(1, r.st.malformed)
    assert.are.equal(1, r.st.unknown_ids)
    assert.matches("max_message_bytes", r.berr)
    assert.are.equal(100, r.b2)
    assert.are.equal(1, r.st.oversized)
    -- the crash names the server, its status and its last stderr lines
    assert.matches("mcp server 'faulty'", r.cerr, 1, true)
    assert.matches("exited with status 3", r.cerr, 1, true)
    assert.matches("boom: crashing on purpose", r.cerr, 1, true)
    assert.are.equal("echo: again", r.e1)       -- restarted
    assert.matches("gave up after 1 restart", r.gerr, 1, true)
    assert.are.equal(1, r.st.restarts)
    assert.matches("malformed JSON on stdout", err, 1, true)
    assert.are.equal(0, r.procs)
  end)

  -- stdio messages end with a newline; a server that exits mid-write
  -- leaves a line without one: a whole message is still its answer, a cut
  -- one is named (a warning and the call's error), never dropped unsaid
  it("takes a whole last line without a newline as the answer and names a cut one when the server exits", function()
    if not H.need_node(pending) then return end
    local r, err = run([[
local c = assert(specula.mcp.connect{ command = { "node", SERVER }, name = "cutter", max_restarts = 2 })
local whole, werr = c:call("crash", { cut = "whole" })
local half, herr = c:call("crash", { cut = "half" })
local st = c:stats()
c:close()
print(json.encode({ whole = whole and whole.content[1].text or json.null, werr = werr or json.null,
  half = half and true or false, herr = herr or json.null, st = st, procs = specula.settle().procs }))
]])
    assert.are.equal("cut answer", r.whole, tostring(r.werr))
    assert.is_false(r.half)
    assert.matches("mcp server 'cutter'", r.herr, 1, true)
    assert.matches("exited with status 3", r.herr, 1, true)
    assert.matches("its last stdout line was cut off", r.herr, 1, true)
    assert.matches("mcp server 'cutter': its last stdout line was cut off when its output ended (20 bytes, no newline)",
      err, 1, true)
    assert.are.equal(1, r.st.malformed)
    assert.are.equal(0, r.procs)
  end)

  it("sends notifications/cancelled at once when the waiting task is cancelled or times out", function()
    if not H.need_node(pending) then return end
    local r = run([[
local c = assert(specula.mcp.connect{ command = { "node", SERVER } })
local t = specula.spawn(function() return c:call("slow", { ms = 30000 }) end)
specula.sleep(50)
t:cancel()
local cancels = specula.counts().rpc_cancels
local r2, terr = c:call("slow", { ms = 30000 }, { timeout_ms = 100 })
local e = assert(c:call("echo", { text = "still fine" }))
local log = assert(c:call("log")).structuredContent
c:close()
print(json.encode({ cancels = cancels, total = specula.counts().rpc_cancels, terr = terr,
  cancelled = log.cancelled, slow = log.calls.slow, echo = e.content[1].text, state = t:state() }))
]])
    assert.are.equal(1, r.cancels)
    assert.are.equal(2, r.total)
    assert.matches("no response within 100 ms", r.terr, 1, true)
    -- request ids of the two slow calls (1 was the server/discover probe, 2 initialize)
    assert.are.same({ 3, 4 }, r.cancelled)
    assert.are.equal(2, r.slow)
    assert.are.equal("echo: still fine", r.echo)
    assert.are.equal("cancelled", r.state)
  end)

  -- the client forgets given-up requests in a walk made once as many
  -- requests have started as were pending (not a walk per request): a late
  -- answer is dropped quietly whether its request was forgotten yet or not
  it("drops a late answer to a cancelled request quietly, before and after the client forgets it", function()
    if not H.need_node(pending) then return end
    local r, err = run([[
local c = assert(specula.mcp.connect{ command = { "node", SERVER } })
local function late(after)
  -- a resource read the server answers 150 ms later, even when cancelled
  local t = specula.spawn(function() return c:read_resource("note:///slow-150-" .. after) end)
  specula.sleep(20)
  t:cancel()
  for i = 1, after do assert(c:call("echo", { text = "n" .. i })) end
  specula.sleep(300)
  return t:state()
end
local s1 = late(2)
local st1 = c:stats()
local s2 = late(150)
local st2 = c:stats()
local e = assert(c:call("echo", { text = "still fine" }))
c:close()
print(json.encode({ s1 = s1, s2 = s2, late1 = st1.late_dropped, late2 = st2.late_dropped,
  unknown = st2.unknown_ids, echo = e.content[1].text }))
]])
    assert.are.equal("cancelled", r.s1)
    assert.are.equal("cancelled", r.s2)
    assert.are.equal(1, r.late1)
    assert.are.equal(2, r.late2)
    assert.are.equal(0, r.unknown)
    assert.are.equal("echo: still fine", r.echo)
    assert.are.equal("", err:gsub("%s+$", ""))
  end)

  it("kills and reaps the child when the program ends without closing, and reports a missing program", function()
    if not H.need_node(pending) then return end
    local st, out = H.run_lua(PRELUDE .. [[
local c = assert(specula.mcp.connect{ command = { "node", SERVER } })
print("PID " .. c.pid)
local bad, err = specula.mcp.connect{ command = { "/nonexistent/mcp-server" } }
print(json.encode({ bad = bad == nil, err = err }))
]])
    assert.are.equal(0, st)
    local pid = out:match("PID (%d+)")
    local r = last_json(out)
    assert.is_true(r.bad)
    assert.matches("ENOENT", r.err, 1, true)
    assert.matches("/nonexistent/mcp-server", r.err, 1, true)
    assert.are_not.equal(0, os.execute("kill -0 " .. pid .. " 2>/dev/null"))
  end)

  it("refuses calls and new servers under the virtual clock, naming the call", function()
    if not H.need_node(pending) then return end
    local r = run([[
local c = assert(specula.mcp.connect{ command = { "node", SERVER }, name = "vt" })
assert(c:call("echo", { text = "hi" }))          -- the real clock: fine
assert(specula.set_clock("virtual"))
local res, err = c:call("echo", { text = "again" })
local c2, err2 = specula.mcp.connect{ command = { "node", SERVER }, name = "late" }
assert(specula.set_clock("real"))
local ok = c:call("echo", { text = "real again" })
c:close()
print(json.encode({ res = res == nil, err = err, c2 = c2 == nil, err2 = err2, ok = ok ~= nil }))
]])
    assert.is_true(r.res)
    assert.matches("mcp server 'vt': real I/O under the virtual clock: MCP tools/call", r.err, 1, true)
    assert.is_true(r.c2)
    assert.matches("real I/O under the virtual clock: spawn node", r.err2, 1, true)
    assert.is_true(r.ok, "the real clock is back: calls work again")
  end)

  it("rejects bad options with a message naming them", function()
    local st, _, err = H.run_lua(PRELUDE .. [[ specula.mcp.connect{ command = "node" } ]])
    assert.are_not.equal(0, st)
    assert.matches("command must be a non-empty list", err, 1, true)
  end)
end)

describe("specula.mcp over Streamable HTTP", function()
  it("initializes a session, calls with SSE responses, resumes a dropped stream, cancels on the wire, deletes the session", function()
    if not H.need_node(pending) then return end
    local srv = http_server()
    local ok, r = pcall(run, [[
local url = ]] .. string.format("%q", srv.url) .. [[
local c = assert(specula.mcp.connect{ url = url, name = "h" })
local tools = assert(c:list_tools())
local echo = assert(c:call("echo", { text = "over http" }))
local n = 0
assert(c:call("progress", { n = 3 }, { on_progress = function() n = n + 1 end }))
local ask = assert(c:call("ask", { method = "roots/list" }))
local resumed = assert(c:call("drop_stream"))
local t = specula.spawn(function() return c:call("slow", { ms = 30000 }) end)
specula.sleep(100)
t:cancel()
local cancels = specula.counts().rpc_cancels
specula.sleep(100)
local sid = c.session_id
c:close()
local c2 = assert(specula.mcp.connect{ url = url })
local log = assert(c2:call("log")).structuredContent
print(json.encode({ ntools = #tools, echo = echo.content[1].text, progress = n, ask = ask.content[1].text,
  resumed = resumed.content[1].text, reconnects = c:stats().reconnects, gets = log.gets, cancels = cancels,
  cancelled = log.cancelled, deletes = log.deletes,
  -- the session id is a credential: what the script prints of it is scrubbed
  sid = type(sid) == "string" and sid:match("^sess%-") and "a sess- id" or tostring(sid),
  sid_printed = sid }))
]])
    srv.stop()
    assert(ok, r)
    assert.are.equal(24, r.ntools)
    assert.are.equal("echo: over http", r.echo)
    assert.are.equal(3, r.progress)
    assert.matches("-32601", r.ask)
    assert.are.equal("resumed", r.resumed)
    assert.are.equal(1, r.reconnects)
    assert.are.equal(1, #r.gets)
    assert.matches("^e%d+$", r.gets[1])         -- Last-Event-ID of the dropped stream
    assert.are.equal(1, r.cancels)
    assert.are.equal(1, #r.cancelled)
    assert.are.equal(1, r.deletes)
    assert.are.equal("a sess- id", r.sid)
    assert.are.equal("[redacted]", r.sid_printed)
  end)
end)
