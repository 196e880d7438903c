-- MCP 2026-07-28 in specula.mcp against the test server
-- (spec/support/mcp_testserver.js, --modern: it speaks 2026-07-28 beside
-- its 2025-11-25 sessions) over real loopback sockets and stdio: version
-- negotiation and its fallback, per-request _meta and the standard headers,
-- Mcp-Param headers and tools left out for invalid x-mcp-header, requests
-- in several rounds (InputRequiredResult), the list cache (ttlMs), URL-mode
-- elicitation; and one speculating agent at both versions.
local H = require "support.helpers"
local MH = require "support.mcp_helpers"
local AGENT = H.root .. "/spec/mcp/agent_testserver.lua"

local last_json = H.last_json

local PRELUDE = [[
local specula = require "specula"
local json = specula.json
local SERVER = ]] .. string.format("%q", MH.SERVER) .. "\n"

local function run(code, env)
  local st, out, err = H.run_lua(PRELUDE .. code, {}, env)
  assert.are.equal(0, st, "exit status " .. st .. "\nstdout: " .. out .. "\nstderr: " .. err)
  return last_json(out), err
end

-- code runs with URL set to a test server started with args; the server
-- stops whatever happens
local function with_server(args, code, env)
  local srv = MH.http_server(args)
  local ok, r, err = pcall(run, "local URL = " .. string.format("%q", srv.url) .. "\n" .. code, env)
  srv.stop()
  assert(ok, r)
  return r, err
end

describe("MCP 2026-07-28 over Streamable HTTP", function()
  it("speaks 2026-07-28 to a server that does: no handshake, no session, _meta and headers on every request", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--modern" }, [[
local c = assert(specula.mcp.connect{ url = URL, name = "m" })
local tools = assert(c:list_tools())
local echo = assert(c:call("echo", { text = "stateless" }))
local note = assert(c:read_resource("note:///alpha"))
local log = assert(c:call("log")).structuredContent
c:close()
local names = {}
for _, t in ipairs(tools) do names[t.name] = true end
print(json.encode({ version = c.protocol_version, sid = tostring(c.session_id), ntools = #tools,
  routed = names.routed == true, bad = names.bad_header == true, excluded = c:stats().tools_excluded,
  echo = echo.content[1].text, note = note.contents[1].text, log = log }))
]])
    assert.are.equal("2026-07-28", r.version)
    assert.are.equal("nil", r.sid)
    assert.are.equal("echo: stateless", r.echo)
    assert.are.equal("alpha says hello", r.note)
    local log = r.log
    assert.are.equal(1, log.discovered)
    assert.are.equal(0, log.sessions)         -- no initialize
    assert.are.equal(0, log.initialized)
    assert.are.equal(0, log.deletes)          -- no session to end
    assert.are.same({}, log.gets)             -- no GET stream
    assert.are.equal("specula", log.client_info.name)
    -- discover, two pages... every request carried the version in _meta
    assert.is_true(log.modern >= 9, tostring(log.modern))
    -- the headers, as the server checked them (a mismatch is refused)
    local by = {}
    for _, h in ipairs(log.mcp_headers) do
      assert.are_not.equal("string", type(h.session))   -- never a session id
      if by[h.method] == nil then by[h.method] = type(h.name) == "string" and h.name or true end
    end
    assert.are.equal(true, by["server/discover"])
    assert.are.equal(true, by["tools/list"])
    assert.are.equal("echo", by["tools/call"])
    assert.are.equal("note:///alpha", by["resources/read"])
    -- 24 session tools + routed, schema_2020, schema_echo; bad_header is left out
    assert.are.equal(27, r.ntools)
    assert.is_true(r.routed)
    assert.is_false(r.bad)
    assert.are.equal(1, r.excluded)
  end)

  it("keeps a JSON Schema 2020-12 inputSchema as the server sent it ($ref not followed)", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--modern" }, [[
local c = assert(specula.mcp.connect{ url = URL, name = "m" })
local schema
for _, t in ipairs(assert(c:list_tools())) do if t.name == "schema_2020" then schema = t.inputSchema end end
local back = assert(c:call("schema_echo", { schema = schema }))
print(json.encode({ back = back.content[1].text }))
]])
    assert.are.equal("same", r.back)
  end)

  it("falls back to a 2025-11-25 session with a server that refuses server/discover; protocol_version pins either", function()
    if not H.need_node(pending) then return end
    local legacy = with_server({}, [[
local c = assert(specula.mcp.connect{ url = URL, name = "old" })
assert(c:call("echo", { text = "x" }))
local log = assert(c:call("log")).structuredContent
local pinned, perr = specula.mcp.connect{ url = URL, name = "old", protocol_version = "2026-07-28" }
c:close()
print(json.encode({ version = c.protocol_version, sid = c.session_id and "sess" or "none", sessions = log.sessions,
  modern = log.modern, pinned = pinned ~= nil, perr = perr }))
]])
    assert.are.equal("2025-11-25", legacy.version)
    assert.are.equal("sess", legacy.sid)
    assert.are.equal(1, legacy.sessions)
    assert.are.equal(0, legacy.modern)
    assert.is_false(legacy.pinned)
    assert.matches("server/discover: error -32601: Method not found", legacy.perr, 1, true)
    local dual = with_server({ "--modern" }, [[
local c = assert(specula.mcp.connect{ url = URL, name = "d", protocol_version = "2025-11-25" })
local log = assert(c:call("log")).structuredContent
c:close()
print(json.encode({ version = c.protocol_version, discovered = log.discovered, sessions = log.sessions, modern = log.modern }))
]])
    assert.are.equal("2025-11-25", dual.version)
    assert.are.equal(0, dual.discovered)        -- pinned: no probe
    assert.are.equal(1, dual.sessions)
    assert.are.equal(0, dual.modern)
  end)

  it("mirrors x-mcp-header parameters into Mcp-Param headers, encoded, and refuses a tool left out", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--modern" }, [[
local c = assert(specula.mcp.connect{ url = URL, name = "m", quiet = true })
local plain = assert(c:call("routed", { region = "us-west1", tier = 3, note = "not a header" }))
local enc = assert(c:call("routed", { region = " Zürich\r\nX: y" }))
local empty = assert(c:call("routed", { region = "" }))
local _, err = c:call("bad_header", { score = 1.5 })
print(json.encode({ plain = plain.structuredContent.headers, enc = enc.structuredContent.headers,
  empty = empty.structuredContent.headers, err = err, warnings = c:stats().errors }))
]])
    assert.are.same({ ["mcp-param-region"] = "us-west1", ["mcp-param-tier"] = "3" }, r.plain)
    -- leading space, CR LF and non-ASCII: Base64 of the UTF-8 bytes, never raw
    local b64 = MH.b64(" Zürich\r\nX: y")
    assert.are.same({ ["mcp-param-region"] = "=?base64?" .. b64 .. "?=" }, r.enc)
    assert.are.same({ ["mcp-param-region"] = "=?base64??=" }, r.empty)
    assert.matches("tools/call 'bad_header': the tool was left out: property 'score': x-mcp-header on a number", r.err, 1, true)
    assert.matches("tool 'bad_header' left out", r.warnings[1], 1, true)
  end)

  it("answers InputRequiredResult with the hooks and retries with the request state unchanged", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--modern" }, [[
local seen = {}
local c = assert(specula.mcp.connect{ url = URL, name = "m",
  on_elicitation = function(p) seen[#seen + 1] = p.mode == "url" and p.url or "form"
    if p.mode == "url" then return { action = "accept" } end
    return { action = "accept", content = { ok = true } } end,
  on_sampling = function(p) return "sampled" end })
local form = assert(c:call("ask", { method = "elicitation/create",
  params = { message = "ok?", requestedSchema = { type = "object", properties = { ok = { type = "boolean" } } } } }))
local url = assert(c:call("ask", { method = "elicitation/create",
  params = { mode = "url", url = "https://example.test/consent", elicitationId = "e1", message = "go" } }))
local nostate = assert(c:call("ask", { method = "sampling/createMessage", no_state = true,
  params = { messages = {}, maxTokens = 5 } }))
local plain = assert(specula.mcp.connect{ url = URL, name = "p", quiet = true })
local declined = assert(plain:call("ask", { method = "elicitation/create",
  params = { mode = "url", url = "https://example.test/x", elicitationId = "e2", message = "go" } }))
local _, serr = plain:call("ask", { method = "sampling/createMessage", params = { messages = {} } })
local log = assert(c:call("log")).structuredContent
print(json.encode({ form = form.structuredContent, url = url.structuredContent, nostate = nostate.structuredContent,
  declined = declined.structuredContent, serr = serr, seen = seen, rounds = log.rounds,
  st = c:stats().input_rounds, caps = log.client_capabilities }))
]])
    assert.are.same({ action = "accept", content = { ok = true } }, r.form.result)
    assert.are.equal("echoed", r.form.state)
    assert.are.same({ action = "accept" }, r.url.result)
    assert.are.same({ "form", "https://example.test/consent" }, r.seen)
    assert.are.equal("sampled", r.nostate.result.content.text)
    assert.are.equal("absent", r.nostate.state)   -- none sent, none returned
    assert.are.same({ action = "decline" }, r.declined.result)
    assert.matches("the server asked for sampling/createMessage and the client has no hook for it", r.serr, 1, true)
    assert.are.equal(3, r.st)
    -- each retry is a new request: its id is not the first round's
    assert.are.equal(4, #r.rounds)   -- form, url, no state, declined (the sampling one has no retry)
    assert.is_false(r.rounds[1].same_id)
    assert.is_false(r.rounds[2].same_id)
    assert.are.same({ form = {}, url = {} }, r.caps.elicitation)
  end)

  it("serves lists from its cache until their ttlMs runs out", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--modern", "--ttl-ms", "400" }, [[
local c = assert(specula.mcp.connect{ url = URL, name = "m" })
assert(c:list_tools()); assert(c:list_tools()); assert(c:list_resources()); assert(c:list_resources())
local mid = assert(c:call("log")).structuredContent.lists
specula.sleep(600)
assert(c:list_tools())
local after = assert(c:call("log")).structuredContent.lists
print(json.encode({ mid = mid, after = after, hits = c:stats().list_cache_hits }))
]])
    assert.are.equal(6, r.mid["tools/list"])       -- one listing of six pages, the second from the cache
    assert.are.equal(2, r.mid["resources/list"])
    assert.are.equal(12, r.after["tools/list"])    -- expired: asked again
    assert.are.equal(8, r.hits)
    local r0 = with_server({ "--modern" }, [[
local c = assert(specula.mcp.connect{ url = URL, name = "m" })
assert(c:list_tools()); assert(c:list_tools())
print(json.encode({ lists = assert(c:call("log")).structuredContent.lists, hits = c:stats().list_cache_hits }))
]])
    assert.are.equal(12, r0.lists["tools/list"])   -- ttlMs 0: never cached
    assert.are.equal(0, r0.hits)
  end)
end)

describe("a server that never answers server/discover", function()
  it("over stdio gets a session after the probe's bound; over HTTP it is an error, not a downgrade", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--mute-discover" }, [[
local t0 = specula.now()
local c = assert(specula.mcp.connect{ command = { "node", SERVER, "--mute-discover" }, name = "quiet", init_timeout_ms = 1500 })
local waited = specula.now() - t0
local h, herr = specula.mcp.connect{ url = URL, name = "slow", init_timeout_ms = 500 }
print(json.encode({ version = c.protocol_version, waited = waited, http = h ~= nil, herr = herr }))
c:close()
]])
    assert.are.equal("2025-11-25", r.version)
    assert.is_true(r.waited >= 1500, tostring(r.waited))
    assert.is_false(r.http)
    assert.matches("mcp server 'slow': server/discover: no response within 500 ms", r.herr, 1, true)
  end)
end)

describe("MCP 2026-07-28 on a cassette", function()
  local CODE = [[
local c = assert(specula.mcp.connect{ url = URL, name = "m", on_elicitation = function(p)
  return { action = "accept", content = { ok = true } } end })
local a = assert(c:call("routed", { region = "eu", tier = 2 }))
local b = assert(c:call("ask", { method = "elicitation/create",
  params = { message = "ok?", requestedSchema = { type = "object", properties = { ok = { type = "boolean" } } } } }))
local cs = require("specula.cassette").state
print(json.encode({ version = c.protocol_version, a = a.structuredContent, b = b.structuredContent.result,
  n = c:stats().requests, missed = cs and cs.missed or -1 }))
]]

  it("replays a 2026-07-28 recording offline: discovery, headers' tool, both rounds of a request", function()
    if not H.need_node(pending) then return end
    local dir = H.tmpdir() .. "/wire-tape"
    os.execute("rm -rf " .. H.quote(dir))
    local srv = MH.http_server({ "--modern" })
    local code = PRELUDE .. "local URL = " .. string.format("%q", srv.url) .. "\n" .. CODE
    local st, out, err = H.run_lua(code, { "--record", dir })
    srv.stop()
    assert.are.equal(0, st, out .. err)
    local rec = last_json(out)
    assert.are.equal("2026-07-28", rec.version)
    local tape = assert(H.read(dir .. "/cassette-0001.jsonl"))
    assert.matches("MCP m server/discover", tape, 1, true)
    -- the server is gone: the tape answers everything, rounds included
    st, out, err = H.run_lua(code, { "--replay-io", dir })
    assert.are.equal(0, st, out .. err)
    local rep = last_json(out)
    assert.are.same(rec.a, rep.a)
    assert.are.same(rec.b, rep.b)
    assert.are.equal("2026-07-28", rep.version)
    assert.are.equal(0, rep.n)
    assert.are.equal(0, rep.missed)
  end)

  it("replays a session's tape, which holds no server/discover, with no miss", function()
    if not H.need_node(pending) then return end
    local dir = H.tmpdir() .. "/session-tape"
    os.execute("rm -rf " .. H.quote(dir))
    local srv = MH.http_server({})
    local code = PRELUDE .. "local URL = " .. string.format("%q", srv.url) .. "\n" .. [[
local c = assert(specula.mcp.connect{ url = URL, name = "s" })
local echo = assert(c:call("echo", { text = "t" })).content[1].text
local cs = require("specula.cassette").state
print(json.encode({ version = c.protocol_version, echo = echo, missed = cs and cs.missed or -1 }))
]]
    local st, out, err = H.run_lua(code, { "--record", dir })
    srv.stop()
    assert.are.equal(0, st, out .. err)
    -- a tape made before 2026-07-28: its session only
    local path = dir .. "/cassette-0001.jsonl"
    local kept = {}
    for line in assert(H.read(path)):gmatch("[^\n]+") do
      if not line:find("server/discover", 1, true) then kept[#kept + 1] = line end
    end
    local f = assert(io.open(path, "w"))
    f:write(table.concat(kept, "\n"), "\n")
    f:close()
    st, out, err = H.run_lua(code, { "--replay-io", dir })
    assert.are.equal(0, st, out .. err)
    local rep = last_json(out)
    assert.are.equal("2025-11-25", rep.version)
    assert.are.equal("echo: t", rep.echo)
    assert.are.equal(0, rep.missed)
  end)
end)

describe("MCP 2026-07-28 over stdio", function()
  it("negotiates per server process: 2026-07-28 with --modern, a session without", function()
    if not H.need_node(pending) then return end
    local r = run([[
local m = assert(specula.mcp.connect{ command = { "node", SERVER, "--modern" }, name = "m" })
local o = assert(specula.mcp.connect{ command = { "node", SERVER }, name = "o" })
local a = assert(m:call("echo", { text = "1" })).content[1].text
local b = assert(o:call("echo", { text = "1" })).content[1].text
local lm = assert(m:call("log")).structuredContent
local lo = assert(o:call("log")).structuredContent
m:close(); o:close()
print(json.encode({ vm = m.protocol_version, vo = o.protocol_version, same = a == b,
  m = { lm.discovered, lm.sessions, lm.initialized }, o = { lo.discovered, lo.sessions, lo.initialized } }))
]])
    assert.are.equal("2026-07-28", r.vm)
    assert.are.equal("2025-11-25", r.vo)
    assert.is_true(r.same)
    assert.are.same({ 1, 0, 0 }, r.m)
    assert.are.same({ 0, 1, 1 }, r.o)
  end)
end)

describe("one speculating agent at both versions", function()
  -- the agent of mcp_agent_spec (reads speculated, writes gated by the
  -- annotations), sequentially and with SpecHop, against a session-only
  -- server and a 2026-07-28 one
  local function both(server_args)
    local code = [[
local specula = require "specula"
local json = specula.json
local agent = assert(loadfile(]] .. string.format("%q", AGENT) .. [[))()
local qs = { "a", "b", "c" }
local seq = specula.run(agent, { queries = qs, mode = "sequential" })
local spec, agg = specula.run(agent, { queries = qs, mode = "spechop", k = "inf" })
local records = {}
for i = 1, #qs do records[i] = { seq[i].answer, seq[i].trajectory, spec[i].answer, spec[i].trajectory } end
local t = agg.policy_counts.tools
local log = assert(MCP_CLIENT:call("log")).structuredContent
print(json.encode({ version = MCP_CLIENT.protocol_version, records = json.canonical(records),
  early_writes = MCP_EARLY_WRITES(), slow_early = t.slow.full, write_full = t.write.full,
  write_decision = t.write.decision, journal = #log.journal, modern = log.modern }))
]]
    local st, out, err = H.run_lua(code, {}, { MCP_TRUST = "1", MCP_SERVER_ARGS = server_args })
    assert.are.equal(0, st, out .. err)
    return last_json(out)
  end

  it("keeps the same records and makes no early write at 2025-11-25 and 2026-07-28", function()
    if not H.need_node(pending) then return end
    local old, new = both(""), both("--modern")
    -- shown (the figures of a note): each version's counts and records
    for _, r in ipairs({ old, new }) do
      io.stderr:write(string.format("[both versions] %s: early writes %d, write tool full %d (%s), slow read early %d, "
        .. "server journal %d, records %s\n", r.version, r.early_writes, r.write_full, r.write_decision, r.slow_early,
        r.journal, r.records))
    end
    assert.are.equal("2025-11-25", old.version)
    assert.are.equal("2026-07-28", new.version)
    assert.are.equal(0, old.modern)
    assert.is_true(new.modern > 0)
    assert.are.equal(old.records, new.records)
    for _, r in ipairs({ old, new }) do
      assert.are.equal(0, r.early_writes)
      assert.are.equal(0, r.write_full)
      assert.are.equal("forbid", r.write_decision)
      assert.is_true(r.slow_early > 0)
      assert.are.equal(3 * 3 * 2, r.journal)   -- three notes per query, sequential and speculative
    end
  end)
end)
