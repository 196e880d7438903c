-- `specula gateway` serving a stateless 2026-07-28 client: specula's own
-- MCP client pinned to 2026-07-28 (spec/support/mcp_lua_driver.lua under
-- `specula run`; the official SDK 1.32.2 speaks 2025-11-25 at most) through
-- the real binary, over stdio and over --listen (real sockets). The same
-- steps give the same answers as a direct connection to the same server
-- (the specs' test server, session-only or itself at 2026-07-28, and
-- server-everything); each side keeps its own version; the servers'
-- sampling, elicitation and roots requests (the test server's and
-- server-everything's) come back to the client as InputRequiredResult
-- rounds and its answers reach the server; a prefetch never asks it; a
-- predicted read is served from its prefetch while a write the policy does
-- not allow never reaches the server before the client asks (a control run
-- that allows it shows it would); over HTTP the stateless requests of one
-- client (its clientInfo) share one gateway session and one record, and a
-- client that goes away mid-call gets its upstream call cancelled; over
-- stdio, unknown versions, a late initialize and stray input responses
-- are refused.
local H = require "support.helpers"
local G = require "support.gateway_helpers"
local cjson = require "cjson"

local ANSWERS = {
  sampling = { role = "assistant", content = { type = "text", text = "a reply" }, model = "driver-model",
               stopReason = "endTurn" },
  elicitation = { action = "accept", content = { color = "green" } },
  roots = { roots = { { uri = "file:///tmp/proj", name = "proj" } } },
}
local ASKS = {
  { op = "call", name = "ask", arguments = { method = "sampling/createMessage",
    params = { messages = { { role = "user", content = { type = "text", text = "hi" } } }, maxTokens = 10 } } },
  { op = "call", name = "ask", arguments = { method = "elicitation/create", params = { message = "color?",
    requestedSchema = { type = "object", properties = { color = { type = "string" } } } } } },
  { op = "call", name = "ask", arguments = { method = "roots/list", params = {} } },
}

-- specula's client pinned to 2026-07-28 runs the plan through `specula
-- gateway CFG --out OUT`, over stdio or --listen (stopped after the
-- plan): the driver's output and the gateway's records.
local function run_plan(how, cfg, out, plan)
  os.remove(out)
  local p = {}
  for k, v in pairs(plan) do p[k] = v end
  p.protocol_version = "2026-07-28"
  if how == "stdio" then
    p.command = { H.bin, "gateway", cfg, "--out", out }
    local r = G.lua_drive(p)
    return r, G.records(out)
  end
  local g = G.start(cfg, { "--listen", "127.0.0.1:0", "--out", out })
  p.url = g.url
  local ok, r = pcall(G.lua_drive, p)
  G.stop(g)
  assert(ok, r)
  return r, G.records(out)
end

local outs = 0
-- The plan through a gateway in front of `servers` (Lua source).
local function through(how, servers, plan, extra)
  outs = outs + 1
  return run_plan(how, G.config(servers, extra), H.tmpdir() .. "/stateless-out" .. outs .. ".jsonl", plan)
end

for _, how in ipairs({ "stdio", "http" }) do
  describe("specula gateway, a 2026-07-28 client over " .. how, function()
    it("gets the test server's answers as a direct client does; each side keeps its own version", function()
      if not G.guard(pending) then return end
      local steps = {
        { op = "tools" }, { op = "resources" }, { op = "templates" },
        { op = "call", name = "add", arguments = { a = 0.1, b = 12345678901234567890 } },
        { op = "call", name = "echo", arguments = { text = "h\u{e9}llo \"w\u{f6}rld\" \\ \u{1F642}" } },
        { op = "call", name = "fail", arguments = {} },
        { op = "read", uri = "note:///a" },
        { op = "read", uri = "note:///missing-1" },
        { op = "call", name = "no_such_tool", arguments = {} },
      }
      local with_ping = { unpack(steps) }
      with_ping[#with_ping + 1] = { op = "ping" }
      for _, modern in ipairs({ false, true }) do
        local cmd = { G.node(), G.SERVER }
        if modern then cmd[#cmd + 1] = "--modern" end
        -- direct: the client's own choice (2026-07-28 with --modern, else a session)
        local direct = G.lua_drive({ command = cmd, steps = steps })
        assert.are.equal(modern and "2026-07-28" or "2025-11-25", direct.version)
        local gw, recs = through(how, "{ test = " .. G.server_src(cmd) .. " }",
          { steps = with_ping })
        -- the gateway answers ping itself
        assert.are.same({ op = "ping", ok = true, result = {} }, table.remove(gw.steps))
        assert.are.equal("2026-07-28", gw.version)
        assert.is_true(gw.stateless)
        assert.are.equal("specula-gateway", gw.server.name)
        -- tools/call results are the server's own (with --modern its
        -- resultType too); errors are the server's error objects
        G.same_steps(direct, gw)
        assert.is_true(#gw.steps[1].result.tools >= 5)
        assert.is_false(gw.steps[8].ok)
        assert.truthy(gw.steps[8].error:find("-32002", 1, true), gw.steps[8].error)
        assert.are.equal(1, #recs)
        assert.are.equal("2026-07-28", recs[1].version)
        assert.are.equal("specula", recs[1].client.name)
        assert.are.equal(modern and "2026-07-28" or "2025-11-25", recs[1].servers.test.version)
        assert.are.equal(4, recs[1].calls)
      end
    end)

    it("gives server-everything's answers as a direct client does", function()
      if not G.guard(pending) then return end
      local cmd = { G.node(), G.MCP .. "server-everything/dist/index.js", "stdio" }
      local steps = {
        { op = "tools" }, { op = "resources" }, { op = "templates" }, { op = "prompts" },
        { op = "call", name = "echo", arguments = { message = "h\u{e9}llo \"w\u{f6}rld\" \\ \u{1F642}" } },
        { op = "call", name = "get-sum", arguments = { a = 0.1, b = 1e21 } },
        { op = "call", name = "get-structured-content", arguments = { location = "Chicago" } },
        { op = "call", name = "get-tiny-image", arguments = {} },
        { op = "read", uri = "demo://resource/static/document/features." .. "md" },
        { op = "prompt", name = "args-prompt", arguments = { city = "Paris", state = "IDF" } },
        { op = "prompt", name = "no-such-prompt", arguments = {} },
      }
      local direct = G.lua_drive({ command = cmd, steps = steps })
      local gw = through(how, "{ everything = " .. G.server_src(cmd) .. " }", { steps = steps })
      assert.are.equal("2026-07-28", gw.version)
      G.same_steps(direct, gw)
      assert.is_true(#gw.steps[1].result.tools >= 5)
      assert.is_false(gw.steps[11].ok)
    end)

    it("bridges the servers' sampling, elicitation and roots requests as InputRequiredResult rounds", function()
      if not G.guard(pending) then return end
      for _, modern in ipairs({ false, true }) do
        local cmd = { G.node(), G.SERVER }
        if modern then cmd[#cmd + 1] = "--modern" end
        local direct = G.lua_drive({ command = cmd, answers = ANSWERS, steps = ASKS })
        local gw, recs = through(how, "{ test = " .. G.server_src(cmd) .. " }", { answers = ANSWERS, steps = ASKS })
        for i = 1, 3 do
          assert.is_true(gw.steps[i].ok, cjson.encode(gw.steps[i]))
          -- the server got the client's answer (it echoes it in its result)
          assert.are.same(direct.steps[i].result.structuredContent.result, gw.steps[i].result.structuredContent.result)
        end
        assert.are.same(direct.asked, gw.asked)
        assert.are.equal(3, #gw.asked)
        -- the client answered in rounds of its requests: one per ask
        assert.are.equal(3, gw.input_rounds)
        assert.are.equal(1, #recs)
        assert.are.equal(3, recs[1].tools.ask.calls)
        assert.are.equal(0, recs[1].tools.ask.errors)
      end
    end)

    it("bridges server-everything's sampling and elicitation requests, with the same results as direct", function()
      if not G.guard(pending) then return end
      local cmd = { G.node(), G.MCP .. "server-everything/dist/index.js", "stdio" }
      local answers = { sampling = ANSWERS.sampling, elicitation = { action = "accept", content = { name = "Ada" } } }
      local steps = {
        { op = "call", name = "trigger-sampling-request", arguments = { prompt = "hi", maxTokens = 5 } },
        { op = "call", name = "trigger-elicitation-request", arguments = {} },
      }
      local direct = G.lua_drive({ command = cmd, answers = answers, steps = steps })
      local gw = through(how, "{ everything = " .. G.server_src(cmd) .. " }", { answers = answers, steps = steps })
      assert.are.equal("2026-07-28", gw.version)
      for i = 1, 2 do assert.is_true(gw.steps[i].ok, cjson.encode(gw.steps[i])) end
      -- the server prints the answer it got as JSON: specula's client
      -- writes a table's keys in no fixed order, so that text is compared decoded
      for _, r in ipairs({ direct, gw }) do
        local c = r.steps[2].result.content
        local raw = c[#c].text:match("Raw result: (.*)$")
        assert.is_string(raw, c[#c].text)
        c[#c].text = cjson.decode(raw)
      end
      G.same_steps(direct, gw)
      assert.truthy(gw.steps[1].result.content[1].text:find("a reply", 1, true), cjson.encode(gw.steps[1]))
      assert.are.equal("Ada", gw.steps[2].result.content[3].text.content.name)
      assert.are.same(direct.asked, gw.asked)
      assert.are.equal(2, gw.input_rounds)
    end)

    it("never lets a prefetch ask the client: the prefetch is dropped, the client's own call asks", function()
      if not G.guard(pending) then return end
      local ask = ASKS[1].arguments
      local cfg, log, out = G.tap_config(string.format('policy = { ask = "full" },\n'
        .. '  predict = function(h) if h[#h].tool == "echo" then return { { tool = "ask", args = %s } } end return {} end,',
        "require('cjson').decode(" .. string.format("%q", cjson.encode(ask)) .. ")"))
      local steps = { { op = "call", name = "echo", arguments = { text = "a" } }, { op = "sleep", ms = 800 }, ASKS[1] }
      local r, recs = run_plan(how, cfg, out, { answers = ANSWERS, steps = steps })
      assert.is_true(r.steps[3].ok, cjson.encode(r.steps[3]))
      assert.are.same(ANSWERS.sampling.content, r.steps[3].result.structuredContent.result.content)
      -- asked once, by the client's own call
      assert.are.equal(1, #r.asked)
      assert.are.equal(1, r.input_rounds)
      local asks = 0
      for _, e in ipairs(G.tap(log)) do if e.name == "ask" then asks = asks + 1 end end
      assert.are.equal(2, asks)   -- the prefetch's, refused its input, and the client's
      assert.are.equal(1, #recs)
      assert.are.equal(1, recs[1].speculation.tainted)
      assert.are.equal(0, recs[1].speculation.hits)
    end)

    it("serves a predicted read from its prefetch; a write the policy forbids runs only when asked", function()
      if not G.guard(pending) then return end
      for _, allow_write in ipairs({ false, true }) do
        local cfg, log = G.tap_config(string.format([[
  policy = { echo = "full"%s },
  predict = function(h)
    if h[#h].tool == "echo" and h[#h].args.text == "a" then
      return { { tool = "echo", args = { text = "b" } }, { tool = "write", args = { path = "p", text = "t" } } }
    end
    return {}
  end,]], allow_write and ', write = "full"' or ""))
        local steps = {
          { op = "call", name = "echo", arguments = { text = "a" } },
          { op = "sleep", ms = 700 },
          { op = "peek", file = log, name = "write" },
          { op = "peek", file = log, name = "echo" },
          { op = "call", name = "echo", arguments = { text = "b" } },
          { op = "call", name = "write", arguments = { path = "p", text = "t" } },
          { op = "peek", file = log, name = "write" },
        }
        local r, rec = run_plan(how, cfg, H.tmpdir() .. "/stateless-pf-" .. how .. tostring(allow_write) .. ".jsonl",
          { steps = steps })
        assert.are.equal("2026-07-28", r.version)
        for i = 1, #steps do assert.is_true(r.steps[i].ok, cjson.encode(r.steps[i])) end
        assert.are.equal("echo: b", r.steps[5].result.content[1].text)
        -- both echoes reached the server before the client asked for the second
        assert.are.equal(2, r.steps[4].result.count)
        if allow_write then
          -- the control: allowed, the write reaches the server before the client asks
          assert.are.equal(1, r.steps[3].result.count)
        else
          assert.are.equal(0, r.steps[3].result.count)
          assert.are.equal(1, r.steps[7].result.count)
        end
        assert.are.equal(1, #rec)
        assert.are.equal("2026-07-28", rec[1].version)
        assert.are.equal(1, rec[1].tools.echo.hits)
        assert.is_true(rec[1].speculation.hits >= 1)
        if not allow_write then assert.is_true(rec[1].speculation.refused >= 1) end
      end
    end)
  end)
end

describe("specula gateway, stateless requests on the wire", function()
  it("over stdio: a request without server/discover is served; an unknown version, a late initialize and stray input responses are refused", function()
    if not G.guard(pending) then return end
    local cfg = G.tap_config()
    local function meta(v)
      return { ["io.modelcontextprotocol/protocolVersion"] = v, ["io.modelcontextprotocol/clientCapabilities"] = {},
               ["io.modelcontextprotocol/clientInfo"] = { name = "sh", version = "1" } }
    end
    local lines = {
      cjson.encode({ jsonrpc = "2.0", id = 1, method = "tools/call",
                     params = { name = "echo", arguments = { text = "first" }, _meta = meta("2026-07-28") } }),
      cjson.encode({ jsonrpc = "2.0", id = 2, method = "server/discover", params = { _meta = meta("2099-01-01") } }),
      cjson.encode({ jsonrpc = "2.0", id = 3, method = "tools/call",
                     params = { name = "echo", arguments = { text = "x" }, _meta = meta("2099-01-01") } }),
      cjson.encode({ jsonrpc = "2.0", id = 4, method = "initialize", params = { protocolVersion = "2025-11-25",
                     capabilities = {}, clientInfo = { name = "sh", version = "1" } } }),
      cjson.encode({ jsonrpc = "2.0", id = 5, method = "tools/call",
                     params = { name = "echo", arguments = { text = "b" }, requestState = "nothing", _meta = meta("2026-07-28") } }),
      -- input responses the gateway never asked for, or not objects (SEP-2322: an error, not a result)
      cjson.encode({ jsonrpc = "2.0", id = 6, method = "tools/call", params = { name = "echo", arguments = { text = "c" },
                     inputResponses = { user_name = 12345 }, _meta = meta("2026-07-28") } }),
      cjson.encode({ jsonrpc = "2.0", id = 7, method = "tools/call", params = { name = "echo", arguments = { text = "c" },
                     inputResponses = cjson.null, _meta = meta("2026-07-28") } }),
      cjson.encode({ jsonrpc = "2.0", id = 8, method = "tools/call", params = { name = "echo", arguments = { text = "c" },
                     inputResponses = { q = { action = "accept" } }, _meta = meta("2026-07-28") } }),
    }
    local input = H.tmpfile("stateless-in.jsonl", table.concat(lines, "\n") .. "\n")
    local st, out, err = H.sh("(cat " .. H.quote(input) .. "; sleep 3) | " .. H.quote(H.bin) .. " gateway " .. H.quote(cfg))
    assert.are.equal(0, st, err)
    local by = {}
    for l in out:gmatch("[^\n]+") do
      local m = cjson.decode(l)
      by[m.id] = m
    end
    assert.are.equal("echo: first", by[1].result.content[1].text)
    for _, id in ipairs({ 2, 3 }) do
      assert.are.equal(-32022, by[id].error.code)
      assert.are.equal("2099-01-01", by[id].error.data.requested)
      assert.are.equal("2026-07-28", by[id].error.data.supported[1])
    end
    assert.are.equal(-32600, by[4].error.code)
    assert.truthy(by[4].error.message:find("stateless", 1, true))
    assert.are.equal(-32602, by[5].error.code)
    assert.matches("inputResponses.user_name must be an object", by[6].error.message)
    assert.matches("inputResponses must be an object", by[7].error.message)
    assert.matches("inputResponses without a requestState", by[8].error.message)
    for id = 5, 8 do assert.are.equal(-32602, by[id].error.code) end
  end)
end)

describe("specula gateway --listen, stateless clients", function()
  -- A raw 2026-07-28 POST (curl): the decoded answer.
  -- A POST of the JSON text `text` (its method and name in the headers).
  -- max_s: curl gives up after that long (nil back); bg: it runs in the
  -- background (nil back at once). A 202 (no body) gives nil.
  local function post_text(url, text, method, name, max_s, bg)
    local body = H.tmpfile("post.json", text)
    local hs = { "Content-Type: application/json", "Accept: application/json, text/event-stream",
                 "MCP-Protocol-Version: 2026-07-28", "Mcp-Method: " .. method }
    if name then hs[#hs + 1] = "Mcp-Name: " .. name end
    local cmd = "curl -s -H 'Accept-Encoding: identity'"
    for _, h in ipairs(hs) do cmd = cmd .. " -H " .. H.quote(h) end
    if max_s then cmd = cmd .. " -m " .. max_s end
    cmd = cmd .. " --data-binary @" .. H.quote(body) .. " " .. H.quote(url)
    if bg then
      os.execute("( " .. cmd .. " >/dev/null 2>&1 & )")
      return nil
    end
    local st, out = H.sh(cmd)
    if max_s then return nil end   -- the client gave up (curl's own status)
    assert.are.equal(0, st)
    if out == "" then return nil end
    local data = out:match("data: ([^\n]+)") or out
    return cjson.decode(data), data
  end

  -- The _meta member of a raw 2026-07-28 request (caps: the client
  -- capabilities' JSON text).
  local function meta_text(name, caps)
    return '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
      .. '"io.modelcontextprotocol/clientCapabilities":' .. (caps or "{}") .. ','
      .. '"io.modelcontextprotocol/clientInfo":{"name":"' .. name .. '","version":"1"}}'
  end

  -- fn(g, log) against a gateway on a free loopback port, stopped however fn ends.
  local function served(fn)
    local cfg, log = G.tap_config()
    local g = G.start(cfg, { "--listen", "127.0.0.1:0" })
    local ok, err = pcall(fn, g, log)
    G.stop(g)
    assert(ok, err)
  end

  local function post(url, id, method, params, info, max_s)
    params._meta = { ["io.modelcontextprotocol/protocolVersion"] = "2026-07-28",
                     ["io.modelcontextprotocol/clientCapabilities"] = {},
                     ["io.modelcontextprotocol/clientInfo"] = info }
    return post_text(url, cjson.encode({ jsonrpc = "2.0", id = id, method = method, params = params }), method,
      params.name, max_s)
  end

  -- before, it ran and was answered under id null (over stdio such a
  -- request got no answer at all: gateway_relay_spec)
  it("refuses a request whose id is null (400, -32600) and serves the next", function()
    if not G.guard(pending) then return end
    served(function(g, log)
      local r = post_text(g.url, '{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"echo",'
        .. '"arguments":{"text":"never"},' .. meta_text("n") .. '}}', "tools/call", "echo")
      assert.are.equal(-32600, r.error.code)
      assert.are.equal("Invalid Request: a request's id must be a string or an integer, not null (tools/call)",
        r.error.message)
      assert.are.equal("echo: next", post(g.url, 2, "tools/call", { name = "echo", arguments = { text = "next" } },
        { name = "n", version = "1" }).result.content[1].text)
      local echoes = 0
      for _, e in ipairs(G.tap(log)) do if e.name == "echo" then echoes = echoes + 1 end end
      assert.are.equal(1, echoes)   -- the refused call never ran
    end)
  end)

  -- JSON's integers past 2^53 are not doubles: a client with 64-bit ids
  -- (Python, Go) must get its own id back, not the double it decodes to
  it("answers integer ids past 2^53 as sent, stateless and in a session", function()
    if not G.guard(pending) then return end
    local rawid = require("specula.mcp.rawjson").member
    served(function(g)
      for _, id in ipairs({ "9007199254740993", "-9007199254740993" }) do
        local r, data = post_text(g.url, '{"jsonrpc":"2.0","id":' .. id .. ',"method":"tools/call","params":{'
          .. '"name":"echo","arguments":{"text":"big"},' .. meta_text("n") .. '}}', "tools/call", "echo")
        assert.are.equal(id, rawid(data, "id"), data)
        assert.are.equal("echo: big", r.result.content[1].text)
      end
      -- a session of the 2025-11-25 revision: initialize, then a ping
      local curl = "curl -s -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' "
      local function send(text, sid, hdr)
        local body = H.tmpfile("big-session.json", text)
        local _, out = H.sh(curl .. (sid and ("-H " .. H.quote("Mcp-Session-Id: " .. sid) .. " ") or "")
          .. (hdr and ("-D " .. H.quote(hdr) .. " ") or "") .. "--data-binary @" .. H.quote(body) .. " " .. H.quote(g.url))
        return out:match("data: ([^\n]+)") or out
      end
      local hdr = H.tmpdir() .. "/big-hdr.txt"
      local data = send('{"jsonrpc":"2.0","id":18446744073709551615,"method":"initialize","params":{'
        .. '"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"n","version":"1"}}}', nil, hdr)
      assert.are.equal("18446744073709551615", rawid(data, "id"), data)
      local sid = H.read(hdr):match("[Mm]cp%-[Ss]ession%-[Ii]d: ([^\r\n]+)")
      assert.is_string(sid)
      send('{"jsonrpc":"2.0","method":"notifications/initialized"}', sid)
      data = send('{"jsonrpc":"2.0","id":-9007199254740995,"method":"ping"}', sid)
      assert.are.equal("-9007199254740995", rawid(data, "id"), data)
    end)
  end)

  it("answers a server's request as an InputRequiredResult; the retry's answer reaches the server as written", function()
    if not G.guard(pending) then return end
    served(function(g)
      local meta = meta_text("raw", '{"roots":{}}')
      local first = post_text(g.url, '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask",'
        .. '"arguments":{"method":"roots/list","params":{}},' .. meta .. '}}', "tools/call", "ask")
      assert.are.equal(1, first.id)
      local r = first.result
      assert.are.equal("input_required", r.resultType, cjson.encode(first))
      assert.is_string(r.requestState)
      local key, q = next(r.inputRequests)
      assert.are.equal("roots/list", q.method)
      assert.is_nil(next(r.inputRequests, key))
      -- the answer, its members in an order of the client's own
      local answer = '{"zeta":1.5,"roots":[{"uri":"file:///tmp/proj","name":"proj"}],"alpha":"a"}'
      local again = post_text(g.url, '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ask",'
        .. '"arguments":{"method":"roots/list","params":{}},"inputResponses":{' .. cjson.encode(key) .. ':' .. answer
        .. '},"requestState":' .. cjson.encode(r.requestState) .. ',' .. meta .. '}}', "tools/call", "ask")
      assert.are.equal(2, again.id)
      assert.is_nil(again.result.resultType)   -- the server's own, complete result
      -- the test server answers with JSON.stringify of what it got
      assert.are.equal(answer, again.result.content[1].text)
      -- the op is over: its requestState names nothing any more
      local late = post_text(g.url, '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ask",'
        .. '"arguments":{},"inputResponses":{' .. cjson.encode(key) .. ':' .. answer .. '},"requestState":'
        .. cjson.encode(r.requestState) .. ',' .. meta .. '}}', "tools/call", "ask")
      assert.are.equal(-32602, late.error.code)
    end)
  end)

  it("groups the requests of one client (clientInfo) into one session, another client's into another", function()
    if not G.guard(pending) then return end
    local cfg, log = G.tap_config()
    local out = H.tmpdir() .. "/stateless-groups.jsonl"
    os.remove(out)
    local g = G.start(cfg, { "--listen", "127.0.0.1:0", "--out", out })
    local ok, err = pcall(function()
      local a = { name = "client-a", version = "1" }
      local b = { name = "client-b", version = "2" }
      local d = post(g.url, 1, "server/discover", {}, a)
      assert.are.equal("complete", d.result.resultType)
      assert.truthy(d.result.capabilities.tools)
      local has = {}
      for _, v in ipairs(d.result.supportedVersions) do has[v] = true end
      assert.is_true(has["2026-07-28"] and has["2025-11-25"] or false)
      -- the same id from two clients at once is no clash: each its own answer
      assert.are.equal("echo: a1", post(g.url, 7, "tools/call", { name = "echo", arguments = { text = "a1" } }, a)
        .result.content[1].text)
      assert.are.equal("echo: b1", post(g.url, 7, "tools/call", { name = "echo", arguments = { text = "b1" } }, b)
        .result.content[1].text)
      assert.are.equal("echo: a2", post(g.url, 8, "tools/call", { name = "echo", arguments = { text = "a2" } }, a)
        .result.content[1].text)
    end)
    G.stop(g)
    assert(ok, err)
    local recs = G.records(out)
    table.sort(recs, function(x, y) return x.client.name < y.client.name end)
    assert.are.equal(2, #recs)
    assert.are.equal("client-a", recs[1].client.name)
    assert.are.equal(2, recs[1].calls)
    assert.are.equal("client-b", recs[2].client.name)
    assert.are.equal(1, recs[2].calls)
    for _, r in ipairs(recs) do assert.are.equal("the server closed", r.why) end
    -- each session started its own server
    local inits = 0
    for _, l in ipairs(G.tap(log)) do if l.method == "initialize" then inits = inits + 1 end end
    assert.are.equal(2, inits)
  end)
  it("cancels the upstream call of a stateless client that goes away mid-call or sends notifications/cancelled", function()
    if not G.guard(pending) then return end
    local cfg, log = G.tap_config()
    local out = H.tmpdir() .. "/stateless-cancel.jsonl"
    os.remove(out)
    local g = G.start(cfg, { "--listen", "127.0.0.1:0", "--out", out })
    local ok, err = pcall(function()
      local who = { name = "leaver", version = "1" }
      post(g.url, 1, "tools/call", { name = "slow", arguments = { ms = 8000, tag = "never" } }, who, 1)
      -- the session goes on: the same client's next call is served
      assert.are.equal("echo: still here", post(g.url, 2, "tools/call", { name = "echo",
        arguments = { text = "still here" } }, who).result.content[1].text)
      -- a notifications/cancelled POST (it names no client) for the client's id 5 while its POST waits
      post_text(g.url, cjson.encode({ jsonrpc = "2.0", id = 5, method = "tools/call", params = { name = "slow",
        arguments = { ms = 8000, tag = "second" }, _meta = { ["io.modelcontextprotocol/protocolVersion"] = "2026-07-28",
        ["io.modelcontextprotocol/clientInfo"] = who } } }), "tools/call", "slow", 20, true)
      G.sleep(0.8)
      assert.is_nil(post_text(g.url, '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,'
        .. '"reason":"not needed"}}', "notifications/cancelled"))
      G.sleep(0.3)
    end)
    G.stop(g)
    assert(ok, err)
    local slow_ids, cancelled = {}, {}
    for _, l in ipairs(G.tap(log)) do
      if l.name == "slow" then slow_ids[#slow_ids + 1] = l.id end
      if l.method == "notifications/cancelled" then cancelled[l.id] = true end
    end
    assert.are.equal(2, #slow_ids)
    for _, id in ipairs(slow_ids) do assert.is_true(cancelled[id], tostring(H.read(log))) end
    local recs = G.records(out)
    assert.are.equal(1, #recs)
    assert.are.equal(2, recs[1].cancelled_by_client)
    assert.are.equal(1, recs[1].calls)   -- the echo: a cancelled call has no answer to count
    -- nor a tool call: no call of 0 ms without an error (cancelled_by_client counts them)
    assert.are.equal(0, recs[1].tools.slow.calls)
    assert.are.equal(1, recs[1].tools.echo.calls)
  end)
end)
