-- `specula gateway` as a relay, with the official TypeScript SDK client
-- (spec/support/mcp_sdk_driver.js) in front of the specs' test server
-- (spec/support/mcp_testserver.js, tapped by spec/support/mcp_stdio_tap.js
-- to see what the server is asked and when): the servers' requests to the
-- client (sampling, elicitation, roots) and the client's answers; the
-- client's cancellation of a call reaches the server; a server that crashes
-- fails the call with its last stderr lines and is started again at the
-- next one; the end of stdin cancels the calls in flight upstream; a
-- declared secret never reaches the client, the record or stderr.
local H = require "support.helpers"
local MH = require "support.mcp_helpers"
local G = require "support.gateway_helpers"
local cjson = require "cjson"
local deps = require "support.deps"

local TAP, SERVER = G.TAP, G.SERVER

local function guard() return G.guard(pending) end
local node, drive, setup, tap = G.node, G.drive, G.tap_config, G.tap
local n = 0   -- config files of the tests' own

local function record(out) return cjson.decode(assert(H.read(out), "no --out record"):match("[^\n]+")) end
-- What the tap saw: how many times the server was initialized, and each
-- tool's calls by name.
local function tap_counts(log)
  local inits, calls = 0, {}
  for _, e in ipairs(tap(log)) do
    if e.method == "initialize" then inits = inits + 1 end
    if e.name then calls[e.name] = (calls[e.name] or 0) + 1 end
  end
  return inits, calls
end

local INIT = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
  .. '"capabilities":{},"clientInfo":{"name":"sh","version":"1"}}}'
local INITIALIZED = '{"jsonrpc":"2.0","method":"notifications/initialized"}'

-- The lines a stdio server writes for these request lines (stdin held
-- open for `wait` seconds), by id.
local function exchange(cmd, lines, wait)
  local input = H.tmpfile("in.jsonl", table.concat(lines, "\n") .. "\n")
  local status, out, err = H.sh("(cat " .. H.quote(input) .. "; sleep " .. (wait or 2) .. ") | " .. cmd)
  assert.are.equal(0, status, err)
  local by_id = {}
  for l in out:gmatch("[^\n]+") do
    local id = l:match('"id"%s*:%s*(%d+)')
    if id then by_id[tonumber(id)] = l end
  end
  return by_id
end

-- The text of a response's result member, cut from the line as it is.
local function result_text(line)
  return require("specula.mcp.rawjson").member(line, "result")
end

describe("specula gateway relays", function()
  it("a result byte for byte: the text the server wrote, under the client's id", function()
    if not guard() then return end
    local calls = {
      '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add","arguments":{"a":0.1,"b":12345678901234567890}}}',
      '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"\\u00e9 \\ud83d\\ude00 -0.0 1e400"}}}',
      '{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"note:///a"}}',
      '{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{}}',
    }
    local lines = { INIT, INITIALIZED, unpack(calls) }
    local direct = exchange(H.quote(node()) .. " " .. H.quote(SERVER), lines)
    local cfg = setup()
    local gw = exchange(H.quote(H.bin) .. " gateway " .. H.quote(cfg), lines, 3)
    for id = 2, 4 do
      assert.truthy(direct[id], "no answer " .. id)
      assert.are.equal(result_text(direct[id]), result_text(gw[id]))
    end
    -- a list is the gateway's own, every page in one: the server's first
    -- page is its start, the same tools in the same order
    local page, all = cjson.decode(direct[5]).result, cjson.decode(gw[5]).result
    assert.truthy(page.nextCursor)
    assert.is_nil(all.nextCursor)
    assert.is_true(#all.tools > #page.tools)
    for i, t in ipairs(page.tools) do assert.are.same(t, all.tools[i]) end
  end)

  it("a request sent before initialize is answered after it; a second initialize is refused", function()
    if not guard() then return end
    local cfg = setup()
    local gw = exchange(H.quote(H.bin) .. " gateway " .. H.quote(cfg), { INIT,
      '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"early"}}}',
      '{"jsonrpc":"2.0","id":3,"method":"initialize","params":{}}' }, 3)
    assert.are.equal("2025-11-25", cjson.decode(gw[1]).result.protocolVersion)
    assert.are.equal("echo: early", cjson.decode(gw[2]).result.content[1].text)
    assert.are.equal(-32600, cjson.decode(gw[3]).error.code)
  end)

  it("to a server over Streamable HTTP as to one over stdio", function()
    if not guard() then return end
    deps.use_node()
    local srv = MH.http_server({})
    local ok, err = pcall(function()
      n = n + 1
      local cfg = H.tmpfile("http" .. n .. ".lua", string.format([[
return require("specula").gateway { servers = { test = { url = %q } } }
]], srv.url))
      local stdio_cfg = setup()
      local steps = {
        { op = "tools" },
        { op = "call", name = "add", arguments = { a = 2, b = 3 } },
        { op = "call", name = "echo", arguments = { text = "over http" } },
        { op = "call", name = "fail", arguments = {} },
        { op = "resources" },
        { op = "read", uri = "note:///a" },
      }
      local via_http = drive({ command = H.bin, args = { "gateway", cfg }, steps = steps })
      local via_stdio = drive({ command = H.bin, args = { "gateway", stdio_cfg }, steps = steps })
      for i, s in ipairs(via_stdio.steps) do
        assert.are.same(s.ok, via_http.steps[i].ok)
        assert.are.same(s.result, via_http.steps[i].result, "step " .. i)
      end
      assert.are.equal(5, via_http.steps[2].result.structuredContent.sum)
    end)
    srv.stop()
    assert(ok, err)
  end)

  it("the servers' sampling, elicitation and roots requests to the client, and its answers back", function()
    if not guard() then return end
    local answers = {
      sampling = { role = "assistant", content = { type = "text", text = "a reply" }, model = "driver-model",
                   stopReason = "endTurn" },
      elicitation = { action = "accept", content = { color = "green" } },
      roots = { roots = { { uri = "file:///tmp/proj", name = "proj" } } },
    }
    local steps = {
      { op = "call", name = "ask", arguments = { method = "sampling/createMessage",
        params = { messages = { { role = "user", content = { type = "text", text = "hi" } } }, maxTokens = 10 } } },
      { op = "call", name = "ask", arguments = { method = "elicitation/create", params = { message = "color?",
        requestedSchema = { type = "object", properties = { color = { type = "string" } } } } } },
      { op = "call", name = "ask", arguments = { method = "roots/list", params = {} } },
    }
    local direct = drive({ command = node(), args = { SERVER }, answers = answers, steps = steps })
    local cfg = setup()
    local gw = drive({ command = H.bin, args = { "gateway", cfg }, answers = answers, steps = steps })
    for i = 1, 3 do
      assert.is_true(gw.steps[i].ok, cjson.encode(gw.steps[i]))
      assert.are.same(direct.steps[i].result, gw.steps[i].result)
    end
    assert.are.same(direct.asked, gw.asked)
    assert.are.equal(3, #gw.asked)
  end)

  -- the client's answer to a sampling request, and the test server's ask
  -- tool's arguments that make it send one
  local function sampling_answers()
    return { sampling = { role = "assistant", content = { type = "text", text = "a reply" }, model = "driver-model",
                          stopReason = "endTurn" } }
  end
  local function sampling_ask()
    return { method = "sampling/createMessage",
             params = { messages = { { role = "user", content = { type = "text", text = "hi" } } }, maxTokens = 10 } }
  end

  it("never lets a prefetch ask the client: the prefetch is dropped, the client's own call asks", function()
    if not guard() then return end
    local answers, ask = sampling_answers(), sampling_ask()
    local steps = {
      { op = "call", name = "echo", arguments = { text = "a" } }, { op = "sleep", ms = 800 },
      { op = "call", name = "ask", arguments = ask },
    }
    local direct = drive({ command = node(), args = { SERVER }, answers = answers, steps = steps })
    local cfg, log, out = setup(string.format('policy = { ask = "full" },\n'
      .. '  predict = function(h) if h[#h].tool == "echo" then return { { tool = "ask", args = %s } } end return {} end,',
      "require('cjson').decode(" .. string.format("%q", cjson.encode(ask)) .. ")"))
    local gw = drive({ command = H.bin, args = { "gateway", cfg, "--out", out }, answers = answers, steps = steps })
    assert.is_true(gw.steps[3].ok, cjson.encode(gw.steps[3]))
    assert.are.same(direct.steps[3].result, gw.steps[3].result)
    -- the client was asked once: by its own call, after it made it
    assert.are.equal(1, #gw.asked)
    assert.are.same(direct.asked, gw.asked)
    local asks = 0
    for _, e in ipairs(tap(log)) do
      if e.name == "ask" then asks = asks + 1 end
    end
    assert.are.equal(2, asks)   -- the prefetch, and the client's call
    local rec = record(out)
    assert.are.equal(1, rec.speculation.launched)
    assert.are.equal(1, rec.speculation.tainted)
    assert.are.equal(0, rec.speculation.hits)
  end)

  it("never lets a prefetch ask the client while the client's own call runs on another server", function()
    if not guard() then return end
    local answers, ask = sampling_answers(), sampling_ask()
    -- two test servers: b's names come second (b__ask); after echo the
    -- prefetch of b__ask starts and asks while the client waits on a's slow
    n = n + 1
    local dir = H.tmpdir()
    local log, out = dir .. "/two-tap" .. n .. ".jsonl", dir .. "/two-out" .. n .. ".jsonl"
    os.remove(log)
    os.remove(out)
    local q = G.q
    local cfg = H.tmpfile("two" .. n .. ".lua", string.format([[
local specula = require "specula"
local ask = require("cjson").decode(%s)
return specula.gateway {
  servers = { a = { command = { %s, %s } }, b = { command = { %s, %s, %s, %s, %s } } },
  policy = { b__ask = "full" },
  predict = function(h) if h[#h].tool == "echo" then return { { tool = "b__ask", args = ask } } end return {} end,
}
]], q(cjson.encode(ask)), q(node()), q(SERVER), q(node()), q(TAP), q(log), q(node()), q(SERVER)))
    local gw = drive({ command = H.bin, args = { "gateway", cfg, "--out", out }, answers = answers, steps = {
      { op = "call", name = "echo", arguments = { text = "a" } },
      { op = "call", name = "slow", arguments = { ms = 1500 } },
    } })
    assert.is_true(gw.steps[2].ok, cjson.encode(gw.steps[2]))
    -- b's prefetch asked (the tap saw it) but the client was never asked
    local asks = 0
    for _, e in ipairs(tap(log)) do
      if e.name == "ask" then asks = asks + 1 end
    end
    assert.are.equal(1, asks)
    assert.are.same({}, gw.asked)
    local rec = record(out)
    assert.are.equal(1, rec.speculation.launched, H.read(out))
    assert.are.equal(1, rec.speculation.tainted, H.read(out))
  end)

  -- (the record: before, the cancelled call counted in tools.slow.calls,
  -- with no error and 0 ms: a failure as a call)
  it("the client's cancellation to the server, counted as cancelled, not as a call", function()
    if not guard() then return end
    local cfg, log, out = setup()
    local gw = drive({ command = H.bin, args = { "gateway", cfg, "--out", out }, steps = {
      { op = "call", name = "slow", arguments = { ms = 5000, tag = "x" }, abort_ms = 300 },
      { op = "call", name = "log", arguments = {} },
    } })
    assert.is_false(gw.steps[1].ok)
    assert.is_true(gw.steps[2].recv_ms - gw.steps[1].sent_ms < 4000)
    local slow_id
    for _, e in ipairs(tap(log)) do if e.name == "slow" then slow_id = e.id end end
    assert.truthy(slow_id)
    assert.are.same({ slow_id }, gw.steps[2].result.structuredContent.cancelled)
    local rec = record(out)
    assert.are.equal(1, rec.cancelled_by_client)
    assert.are.equal(1, rec.calls)
    assert.are.equal(0, rec.tools.slow.calls)
    assert.are.equal(0, rec.tools.slow.ms)
    assert.are.equal(1, rec.tools.log.calls)
  end)

  -- before, a server's garbage lines and stray answers were in no count
  -- and on no stderr (its client is quiet)
  it("counts a server's garbage lines and stray answers in its record (the calls still answered)", function()
    if not guard() then return end
    local cfg, _, out = setup()
    local gw = drive({ command = H.bin, args = { "gateway", cfg, "--out", out }, steps = {
      { op = "call", name = "garbage", arguments = {} },
      { op = "call", name = "unknown_id", arguments = {} },
    } })
    assert.are.equal("after garbage", gw.steps[1].result.content[1].text)
    assert.are.equal("after stray", gw.steps[2].result.content[1].text)
    local srv = record(out).servers.test
    assert.are.equal(1, srv.malformed)
    assert.are.equal(1, srv.unknown_ids)
    assert.are.equal(0, srv.oversized)
    assert.are.equal(0, srv.timeouts)
  end)

  it("a crash as an error with the server's last words, then starts the server again", function()
    if not guard() then return end
    local cfg, log, out = setup()
    local gw = drive({ command = H.bin, args = { "gateway", cfg, "--out", out }, steps = {
      { op = "call", name = "crash", arguments = {} },
      { op = "call", name = "echo", arguments = { text = "again" } },
    } })
    assert.is_false(gw.steps[1].ok)
    assert.truthy(gw.steps[1].error.message:find("boom: crashing on purpose", 1, true), gw.steps[1].error.message)
    assert.is_true(gw.steps[2].ok)
    assert.are.equal("echo: again", gw.steps[2].result.content[1].text)
    local inits = 0
    for _, e in ipairs(tap(log)) do if e.method == "initialize" then inits = inits + 1 end end
    -- the tap died with the server it started: the log of the second one follows the first
    assert.are.equal(2, inits)
    local rec = record(out)
    assert.are.equal(1, rec.servers.test.restarts)
    assert.are.equal(1, rec.tools.crash.errors)
  end)

  -- before, a client that stopped reading (closed its end of our stdout)
  -- while it kept stdin open had its calls run on and their answers lost
  -- without a word, until stdin ended
  it("ends the session when the client no longer reads its answers (stdout closed)", function()
    if not guard() then return end
    local cfg, _, out = setup()
    local function call(id) return '{"jsonrpc":"2.0","id":' .. id
      .. ',"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}' end
    local feed = H.tmpfile("gw-epipe.sh", "printf '%s\\n%s\\n' " .. H.quote(INIT) .. " " .. H.quote(INITIALIZED)
      .. "\nsleep 1\nfor i in 2 3 4 5 6; do printf '%s\\n' \"$(echo " .. H.quote(call("ID")) .. " | sed s/ID/$i/)\"; "
      .. "sleep 0.3; done\nsleep 12\n")
    local t0 = os.time()
    local st = H.sh("sh " .. H.quote(feed) .. " | " .. H.quote(H.bin) .. " gateway " .. H.quote(cfg) .. " --out "
      .. H.quote(out) .. " | head -n 1 >/dev/null")
    assert.are.equal(0, st)
    assert.is_true(os.time() - t0 < 10, "the gateway waited for stdin to end")
    local rec = record(out)
    -- the failed write is seen where the loop finishes it, or at the next one
    assert.matches("^stdout closed %(EPIPE: ", rec.why)
  end)

  -- before, the failure of a write the loop finished later (an answer that
  -- came after the client stopped reading) was noticed only at the next
  -- write: with nothing more to say the gateway ran on, its record unwritten
  it("ends the session when its one answer cannot be written, though stdin stays open", function()
    if not guard() then return end
    local cfg, _, out = setup()
    local feed = H.tmpfile("gw-epipe1.sh", "printf '%s\\n%s\\n' " .. H.quote(INIT) .. " " .. H.quote(INITIALIZED)
      .. "\nsleep 0.5\nprintf '%s\\n' "
      .. H.quote('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow","arguments":{"ms":1500}}}')
      -- stdin stays open (for 15 s at most) until the session's record is written
      .. "\ni=0; while [ ! -s " .. H.quote(out) .. " ] && [ $i -lt 75 ]; do sleep 0.2; i=$((i+1)); done\n")
    local st = H.sh("sh " .. H.quote(feed) .. " | " .. H.quote(H.bin) .. " gateway " .. H.quote(cfg) .. " --out "
      .. H.quote(out) .. " | head -n 1 >/dev/null")
    assert.are.equal(0, st)
    local rec = record(out)
    assert.are.equal("stdout closed (EPIPE: write to stdout: broken pipe)", rec.why)
    assert.is_true(rec.ended_ms - rec.started_ms < 8000, "the session lasted " .. (rec.ended_ms - rec.started_ms)
      .. " ms: it waited for stdin to end")
  end)

  -- before, a call the session's end cancelled was in no count
  -- (cancelled_by_client 0, the tool's calls 0), and the end's message
  -- counted as unanswered the requests answered whose task ran on (a
  -- predictor still thinking after the answer)
  it("counts a call the session's end cancelled in cancelled_by_client; an answered request is no unanswered one",
    function()
    if not guard() then return end
    local cfg, _, out = setup()
    local slow = '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow","arguments":{"ms":5000}}}'
    local input = H.tmpfile("gw-endcancel.jsonl", table.concat({ INIT, INITIALIZED, slow }, "\n") .. "\n")
    local st, _, err = H.sh("(cat " .. H.quote(input) .. "; sleep 1) | " .. H.quote(H.bin) .. " gateway " .. H.quote(cfg)
      .. " --out " .. H.quote(out))
    assert.are.equal(0, st, err)
    local rec = record(out)
    assert.are.equal(1, rec.cancelled_by_client)
    assert.truthy(err:find("session ended (stdin closed) with 1 request(s) unanswered", 1, true), err)
    -- a predictor that thinks 2 s after each answer: every call answered
    local cfg2, _, out2 = setup("predict = function() require('specula').sleep(2000) return {} end,")
    local echo = '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}'
    local input2 = H.tmpfile("gw-answered.jsonl", table.concat({ INIT, INITIALIZED, echo }, "\n") .. "\n")
    local st2, so2, err2 = H.sh("(cat " .. H.quote(input2) .. "; sleep 1) | " .. H.quote(H.bin) .. " gateway "
      .. H.quote(cfg2) .. " --out " .. H.quote(out2))
    assert.are.equal(0, st2, err2)
    assert.truthy(so2:find('"id":2', 1, true), so2)
    assert.falsy(err2:find("unanswered", 1, true), err2)
    assert.are.equal(0, record(out2).cancelled_by_client)
  end)

  -- before, a call that joined a prefetch which then timed out was sent
  -- again with the whole timeout: the client waited about twice it
  it("a call that joins a prefetch which times out waits its own timeout in all, not twice it #timing", function()
    if not guard() then return end
    local cfg = H.tmpfile("gw-jointimeout.lua", string.format([[
local specula = require "specula"
return specula.gateway {
  servers = { test = { command = { %q, %q }, timeout_ms = 1500 } },
  policy = { slow = "full" },
  predict = function(history) return { { tool = "slow", args = { ms = 5000 }, confidence = 1 } } end,
}
]], node(), SERVER))
    local out = H.tmpdir() .. "/gw-jointimeout.jsonl"
    os.remove(out)
    -- the first call's answer starts the prefetch; the second asks for it at once
    local gw = drive({ command = H.bin, args = { "gateway", cfg, "--out", out }, steps = {
      { op = "call", name = "echo", arguments = { text = "x" } },
      { op = "call", name = "slow", arguments = { ms = 5000 } } } })
    assert.is_true(gw.steps[1].ok)
    local s2 = gw.steps[2]
    assert.is_false(s2.ok)
    local waited = s2.recv_ms - s2.sent_ms
    -- its own timeout is 1,500 ms: it waited that long, not 3,000
    assert.is_true(waited < 2400, "the client waited " .. waited .. " ms")
    assert.are.equal(1, record(out).speculation.joined)
  end)

  -- before, the warning repeated the client's bytes as they came
  it("says a line that is not UTF-8 with its bytes replaced, not raw, on its stderr", function()
    if not guard() then return end
    local cfg = setup()
    local input = H.tmpfile("gw-badutf.jsonl", INIT .. "\n\255\254 not json\n")
    local st, _, err = H.sh("(cat " .. H.quote(input) .. "; sleep 1) | " .. H.quote(H.bin) .. " gateway " .. H.quote(cfg))
    assert.are.equal(0, st, err)
    assert.truthy(err:find("malformed JSON on stdin", 1, true), err)
    assert.falsy(err:find("\255", 1, true), "raw bytes on stderr")
    assert.truthy(err:find("\239\191\189", 1, true), err)   -- U+FFFD in their place
  end)

  -- before, a cancelled initialize left a session that answered every
  -- request "not initialized" and a new initialize "sent already"
  it("does not cancel initialize (MCP: a client must not): the session is served", function()
    if not guard() then return end
    local cfg = setup()
    local got = exchange(H.quote(H.bin) .. " gateway " .. H.quote(cfg), { INIT,
      '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}', INITIALIZED,
      '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"up"}}}' }, 3)
    assert.is_not_nil(got[1], "no answer to initialize")
    assert.are.equal("2025-11-25", cjson.decode(got[1]).result.protocolVersion)
    assert.are.equal("echo: up", cjson.decode(got[2]).result.content[1].text)
  end)

  -- before, a request with "id": null was taken for a notification and
  -- dropped: the client waited for an answer that never came
  it("refuses a request whose id is null (-32600, said), and answers string and integer ids as sent, past 2^53 too", function()
    if not guard() then return end
    local cfg = setup()
    local function call(id) return '{"jsonrpc":"2.0","id":' .. id
      .. ',"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}' end
    local input = H.tmpfile("gw-ids.jsonl", table.concat({ INIT, INITIALIZED, call("null"), call('"s-1"'),
      call("9007199254740991"), '{"jsonrpc":"2.0","id":null,"method":"ping"}',
      -- integers past 2^53 (a client in a language with 64-bit integers)
      call("9007199254740993"), call("18446744073709551615"), call("-9007199254740993"),
      -- no id either: a fraction, an object, a list
      call("1.5"), call('{"a":1}'), call("[2]") }, "\n") .. "\n")
    local st, out, err = H.sh("(cat " .. H.quote(input) .. "; sleep 3) | " .. H.quote(H.bin) .. " gateway " .. H.quote(cfg))
    assert.are.equal(0, st, err)
    local refused, by_id = {}, {}
    for l in out:gmatch("[^\n]+") do
      if l:find('"id":null', 1, true) then refused[#refused + 1] = cjson.decode(l)
      else
        local id = require("specula.mcp.rawjson").member(l, "id")
        by_id[id] = cjson.decode(l)
      end
    end
    assert.are.equal(5, #refused, out)
    for i, method in ipairs({ "tools/call", "ping" }) do
      assert.are.equal(-32600, refused[i].error.code)
      assert.are.equal("Invalid Request: a request's id must be a string or an integer, not null (" .. method .. ")",
        refused[i].error.message)
    end
    for i, got in ipairs({ "1.5", "a JSON object or list", "a JSON object or list" }) do
      assert.are.equal(-32600, refused[2 + i].error.code)
      assert.are.equal("Invalid Request: a request's id must be a string or an integer, got " .. got .. " (tools/call)",
        refused[2 + i].error.message)
    end
    assert.are.equal("echo: x", by_id['"s-1"'].result.content[1].text)
    assert.are.equal("echo: x", by_id["9007199254740991"].result.content[1].text)
    -- answered under the id's own text, not the double it decodes to
    for _, big in ipairs({ "9007199254740993", "18446744073709551615", "-9007199254740993" }) do
      assert.is_not_nil(by_id[big], big .. " not answered as sent:\n" .. out)
      assert.are.equal("echo: x", by_id[big].result.content[1].text)
    end
    assert.falsy(err:find("unanswered", 1, true), err)
  end)

  -- before, an --out that could not be written was found when the session
  -- ended (its record lost after the whole session), and a record the
  -- disk had no room for was lost without a word, exit 0
  it("an --out it cannot write: refused before it serves (exit 1); a record not written: said, exit 1", function()
    n = n + 1
    local cfg = H.tmpfile("gw-out" .. n .. ".lua", "local specula = require 'specula'\n"
      .. "return specula.gateway { servers = { quiet = { command = { 'sh', '-c', 'exit 0' } } } }\n")
    local input = H.tmpfile("gw-out-in.jsonl", INIT .. "\n" .. INITIALIZED .. "\n")
    local dir = H.tmpdir()
    local st, out, err = H.sh("(cat " .. H.quote(input) .. "; sleep 1) | " .. H.quote(H.bin) .. " gateway "
      .. H.quote(cfg) .. " --out " .. H.quote(dir))
    assert.are.equal(1, st, err)
    assert.are.equal("", out)
    assert.truthy(err:find("specula gateway: cannot write --out " .. dir .. ": " .. dir .. ": Is a directory", 1, true), err)
    assert.falsy(err:find("did not start", 1, true), err)
    if io.open("/dev/full") then
      st, out, err = H.sh("(cat " .. H.quote(input) .. "; sleep 1) | " .. H.quote(H.bin) .. " gateway "
        .. H.quote(cfg) .. " --out /dev/full")
      assert.are.equal(1, st, err)
      assert.truthy(out:find('"id":1', 1, true), out)   -- served: the record is written at the end
      assert.truthy(err:find("specula gateway: cannot write --out /dev/full: No space left on device", 1, true), err)
    end
  end)

  -- before, the warning said only "initialize: not running": the server
  -- was gone before specula's client sent initialize (after
  -- server/discover), and why it ended was lost
  it("a server that exits at start: left out with its exit status and last stderr, the client served", function()
    n = n + 1
    local cfg = H.tmpfile("gw-exits" .. n .. ".lua", "local specula = require 'specula'\n"
      .. "return specula.gateway { servers = { gone = { command = { 'sh', '-c', "
      .. "\"echo 'Error: GITHUB_TOKEN is not set' >&2; exit 3\" } } } }\n")
    local list = '{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}'
    -- (a tool no server offers: invalid params, MCP's unknown tool; before, -32603, an internal error)
    local call = '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"search","arguments":{}}}'
    local input = H.tmpfile("gw-exits-in.jsonl", INIT .. "\n" .. INITIALIZED .. "\n" .. list .. "\n" .. call .. "\n")
    local rec = H.tmpdir() .. "/gw-exits" .. n .. ".out.jsonl"
    local tape = H.tmpdir() .. "/gw-exits-rec" .. n
    os.execute("rm -rf " .. H.quote(tape))
    local st, out, err = H.sh("(cat " .. H.quote(input) .. "; sleep 2) | " .. H.quote(H.bin) .. " gateway " .. H.quote(cfg)
      .. " --out " .. H.quote(rec) .. " --record " .. H.quote(tape))
    assert.are.equal(0, st, err)
    assert.truthy(err:find("mcp server 'gone' did not start: ", 1, true), err)
    -- a session without a call: its trace an empty list, as the record's doc has it (before, {})
    assert.truthy(H.read(rec):find('"trace":[]', 1, true), H.read(rec))
    -- and its spans an empty list, as OTLP has it (before, "spans":{})
    local spans = H.read(tape .. "/gateway-session-1.otlp.jsonl")
    assert.truthy(spans:find('"spans":[]', 1, true), spans)
    assert.truthy(err:find("exited with status 3; last stderr: Error: GITHUB_TOKEN is not set", 1, true), err)
    local got = {}
    for l in out:gmatch("[^\n]+") do local m = cjson.decode(l) got[m.id] = m end
    assert.are.equal("2025-11-25", got[1].result.protocolVersion)
    assert.are.same({}, got[2].result.tools)
    assert.are.equal(-32602, got[3].error.code)
    assert.are.equal("unknown tool 'search'", got[3].error.message)
  end)

  it("the end of stdin as a cancellation of every call in flight upstream", function()
    if not guard() then return end
    local cfg, log, out = setup()
    local init = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
      .. '"capabilities":{},"clientInfo":{"name":"sh","version":"1"}}}'
    local call = '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow","arguments":{"ms":20000}}}'
    local t0 = os.time()
    local status, stdout, stderr = H.sh("(printf '%s\\n%s\\n' " .. H.quote(init) .. " " .. H.quote(call)
      .. "; sleep 3) | " .. H.quote(H.bin) .. " gateway " .. H.quote(cfg) .. " --out " .. H.quote(out))
    assert.are.equal(0, status)
    -- said on stderr, for a client that did not expect it
    assert.matches("session ended %(stdin closed%) with 1 request%(s%) unanswered", stderr)
    assert.is_true(os.time() - t0 < 15)
    -- the answer to initialize, and none to the call that never ended
    local lines = {}
    for l in stdout:gmatch("[^\n]+") do lines[#lines + 1] = cjson.decode(l) end
    assert.are.equal(1, #lines)
    assert.are.equal(1, lines[1].id)
    local slow_id, cancelled
    for _, e in ipairs(tap(log)) do
      if e.name == "slow" then slow_id = e.id end
      if e.method == "notifications/cancelled" then cancelled = e.id end
    end
    assert.truthy(slow_id)
    assert.are.equal(slow_id, cancelled)
    local rec = record(out)
    assert.are.equal("stdin closed", rec.why)
  end)

  for _, sig in ipairs({ "TERM", "INT" }) do
    it("SIG" .. sig .. " as the end of stdin: the call in flight cancelled upstream, the record written, status 0", function()
      if not guard() then return end
      local cfg, log, out = setup()
      local call = '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow","arguments":{"ms":20000}}}'
      local input = H.tmpfile("sig.jsonl", INIT .. "\n" .. INITIALIZED .. "\n" .. call .. "\n")
      local errf = H.tmpdir() .. "/gw-sig-err"
      -- stdin held open by a writer that sleeps (a client that signals
      -- before it closes it); the shell waits for the gateway and prints
      -- its status, then ends the writer
      local t0 = os.time()
      local fifo = H.tmpdir() .. "/gw-sig-in"
      os.remove(fifo)
      local st, o = H.sh("( mkfifo " .. H.quote(fifo) .. "; (cat " .. H.quote(input) .. "; exec sleep 25) >" .. H.quote(fifo)
        .. " 2>/dev/null & w=$!; " .. H.quote(H.bin) .. " gateway " .. H.quote(cfg) .. " --out " .. H.quote(out)
        .. " <" .. H.quote(fifo) .. " >/dev/null 2>" .. H.quote(errf) .. " & p=$!; for i in $(seq 200); do grep -q '\"slow\"' "
        .. H.quote(log) .. " 2>/dev/null && break; sleep 0.05; done; kill -" .. sig .. " $p; "
        .. "wait $p; echo rc=$?; kill $w 2>/dev/null )")
      assert.are.equal(0, st)
      assert.truthy(o:find("rc=0", 1, true), o .. (H.read(errf) or ""))
      assert.is_true(os.time() - t0 < 20, "the gateway waited for stdin to end")
      local slow_id, cancelled
      for _, e in ipairs(tap(log)) do
        if e.name == "slow" then slow_id = e.id end
        if e.method == "notifications/cancelled" then cancelled = e.id end
      end
      assert.truthy(slow_id)
      assert.are.equal(slow_id, cancelled)
      assert.matches("^signal %d+$", record(out).why)
    end)
  end

  it("records the session with --record: a cassette of the round trips and spans `specula whatif` reads", function()
    if not guard() then return end
    local cfg = setup()
    local dir = H.tmpdir() .. "/rec" .. n
    os.execute("rm -rf " .. H.quote(dir))
    local gw = drive({ command = H.bin, args = { "gateway", cfg, "--record", dir }, steps = {
      { op = "call", name = "echo", arguments = { text = "one" } }, { op = "sleep", ms = 200 },
      { op = "call", name = "add", arguments = { a = 1, b = 2 } }, { op = "sleep", ms = 200 },
      { op = "call", name = "echo", arguments = { text = "two" } },
    } })
    assert.is_true(gw.steps[5].ok)
    local status, out, err = H.specula({ "cassette", "show", dir })
    assert.are.equal(0, status, err)
    local calls = 0
    for _ in out:gmatch("tools/call") do calls = calls + 1 end
    assert.are.equal(3, calls)
    assert.truthy(out:find("tools/call add", 1, true), out)
    local spans = H.tmpdir() .. "/rec" .. n .. "/gateway-session-1.otlp.jsonl"
    status, out, err = H.specula({ "whatif", spans, "--compare", "recorded,sequential" })
    assert.are.equal(0, status, err)
    assert.truthy(out:find("1 session (0 logs unreadable), 3 tool calls (0 untimed)", 1, true), out)
    assert.falsy(out:find("times assumed", 1, true), out)
    -- the model's time: at least the client's two sleeps between the calls
    local model = tonumber(out:match("model ([%d.]+) s"))
    assert.is_true(model >= 0.4, out)
    -- under another policy and predictor, with the tables for `specula report`
    local pol = H.tmpfile("ro.lua", "return { read_only = function(tool) return tool == 'echo' end }\n")
    local summary = H.tmpdir() .. "/rec" .. n .. "-summary.json"
    status, out, err = H.specula({ "whatif", spans, "--policy", pol, "--compare", "recorded,predictor,perfect-predictor",
      "--summary", summary })
    assert.are.equal(0, status, err)
    assert.truthy(out:find("perfect-predictor", 1, true), out)
    local html = H.tmpdir() .. "/rec" .. n .. "-report.html"
    status, out, err = H.specula({ "report", summary, "-o", html })
    assert.are.equal(0, status, err)
    assert.truthy(H.read(html):find("perfect-predictor", 1, true))
  end)

  it("over any server-side transport: serve_session(gw, t) with a transport that takes tables (send_waits)", function()
    if not guard() then return end
    local cfg = setup('policy = { echo = "full" },\n  predict = function() return { { tool = "echo", args = { text = "b" } } } end,')
    local status, out, err = H.run_lua([[
local specula = require "specula"
local json = specula.json
local gateway = require "specula.gateway"
local gw = gateway.load(arg[1])
-- a transport as an HTTP session would be: messages as tables, sends that
-- may wait (so the session sends from tasks of its own)
local T = { kind = "test", send_waits = true, sent = {} }
function T:open(peer) self.peer = peer; return true end
function T:send(msg) specula.sleep(1); self.sent[#self.sent + 1] = json.encode(msg); return true end
function T:close() end
local ended
local s = assert(gateway.serve_session(gw, T, { on_end = function(sess) ended = sess:stats() end }))
local function ask(id, method, params)
  T.peer:receive({ jsonrpc = "2.0", id = id, method = method, params = params })
  for _ = 1, 500 do
    for _, line in ipairs(T.sent) do
      local m = json.decode(line)
      if m.id == id then return m end
    end
    specula.sleep(10)
  end
  error("no answer to " .. id)
end
local init = ask(1, "initialize", { protocolVersion = "2025-06-18", capabilities = {}, clientInfo = { name = "t", version = "1" } })
local a = ask(2, "tools/call", { name = "echo", arguments = { text = "a" } })
specula.sleep(300)
local b = ask(3, "tools/call", { name = "echo", arguments = { text = "b" } })
T.peer:lost("the test is over")
s:wait()
print(json.encode({ version = init.result.protocolVersion, a = a.result.content[1].text, b = b.result.content[1].text,
  hits = ended.speculation.hits, why = ended.why }))
]], { cfg })
    assert.are.equal(0, status, err)
    local r = cjson.decode(out:match("([^\n]+)\n*$"))
    assert.are.same({ version = "2025-06-18", a = "echo: a", b = "echo: b", hits = 1, why = "the test is over" }, r)
  end)

  it("never serves a prefetch older than max_age_ms: the call runs again", function()
    if not guard() then return end
    local cfg, log, out = setup('policy = { echo = "full" }, max_age_ms = 100,\n'
      .. '  predict = function() return { { tool = "echo", args = { text = "b" } } } end,')
    local gw = drive({ command = H.bin, args = { "gateway", cfg, "--out", out }, steps = {
      { op = "call", name = "echo", arguments = { text = "a" } }, { op = "sleep", ms = 600 },
      { op = "call", name = "echo", arguments = { text = "b" } },
    } })
    assert.are.equal("echo: b", gw.steps[3].result.content[1].text)
    local bs = 0
    for _, e in ipairs(tap(log)) do if e.name == "echo" then bs = bs + 1 end end
    local rec = record(out)
    assert.are.equal(1, rec.speculation.stale)
    assert.are.equal(0, rec.speculation.hits)
    -- a, the prefetch of b, b again, and the prefetch after it
    assert.are.equal(rec.speculation.launched + 2, bs)
  end)

  it("keeps at most budget.max_inflight prefetches running, and cancels the unasked ones upstream", function()
    if not guard() then return end
    local cfg, log, out = setup('policy = { slow = "full" }, budget = { max_inflight = 2 },\n'
      .. '  predict = function() local l = {}\n'
      .. '    for i = 1, 5 do l[i] = { tool = "slow", args = { ms = 10000, tag = "p" .. i } } end\n'
      .. '    return l end,')
    local gw = drive({ command = H.bin, args = { "gateway", cfg, "--out", out }, steps = {
      { op = "call", name = "echo", arguments = { text = "a" } }, { op = "sleep", ms = 500 },
    } })
    assert.is_true(gw.steps[1].ok)
    local slow, cancelled = {}, {}
    for _, e in ipairs(tap(log)) do
      if e.name == "slow" then slow[#slow + 1] = e.id end
      if e.method == "notifications/cancelled" then cancelled[#cancelled + 1] = e.id end
    end
    assert.are.equal(2, #slow)
    table.sort(slow)
    table.sort(cancelled)
    assert.are.same(slow, cancelled)
    local rec = record(out)
    assert.are.equal(2, rec.speculation.launched)
    assert.are.equal(2, rec.speculation.waste)
    assert.are.equal(2, rec.speculation.cancelled)
    assert.are.equal(2, rec.tools.slow.waste)
  end)

  -- before, the predictor's guess after the last answer of a server that
  -- then died restarted it: speculation spent the max_restarts of the
  -- client's own calls (and started a process nobody asked for)
  it("never starts or restarts a server for a prefetch: the guess is counted as server_down", function()
    if not guard() then return end
    local cfg, log, out = setup('policy = { echo = "full" },\n'
      .. '  predict = function(h) return { { tool = "echo", args = { text = "guess " .. #h } } } end,')
    -- crash with cut = "whole": the answer comes (the call succeeds, and
    -- the predictor is asked), then the server exits
    local gw = drive({ command = H.bin, args = { "gateway", cfg, "--out", out }, steps = {
      { op = "call", name = "crash", arguments = { cut = "whole" } }, { op = "sleep", ms = 800 },
      { op = "call", name = "echo", arguments = { text = "mine" } }, { op = "sleep", ms = 300 },
    } })
    assert.is_true(gw.steps[1].ok, gw.steps[1].error and gw.steps[1].error.message)
    assert.is_true(gw.steps[2].ok, require("cjson").encode(gw.steps))
    local inits, calls = tap_counts(log)
    local echoes = calls.echo or 0
    -- two processes: the first, and the one the client's own call started
    assert.are.equal(2, inits)
    local rec = record(out)
    assert.are.equal(1, rec.servers.test.restarts)
    assert.are.equal(1, rec.speculation.server_down)
    -- after the client's call the server is up again: its guess is launched
    assert.are.equal(1, rec.speculation.launched)
    -- the server saw the client's echo and the one guess after it
    assert.are.equal(2, echoes)
  end)

  -- A prefetch that crashes its server (the policy let a call that kills it
  -- run early) must cost the client nothing: before, the client's next
  -- call spent one of max_restarts on the restart, and a guess proposed
  -- after every call crashed the server after every call until the
  -- client's calls ran out of restarts and failed.
  local function crash_config(max_restarts)
    -- a new guess every round (a guess still held, failed, is not made again)
    return setup('policy = { crash = "full" },\n'
      .. '  predict = function(h) if h[#h].tool == "echo" then return { { tool = "crash", args = { round = #h } } } end '
      .. 'return {} end,', nil, nil, "max_restarts = " .. max_restarts)
  end
  local crash_steps = {
    { op = "call", name = "echo", arguments = { text = "a" } }, { op = "sleep", ms = 800 },
    { op = "call", name = "echo", arguments = { text = "b" } }, { op = "sleep", ms = 800 },
    { op = "call", name = "echo", arguments = { text = "c" } }, { op = "sleep", ms = 800 },
    { op = "call", name = "echo", arguments = { text = "d" } },
  }

  it("does not let a prefetch that crashes its server spend the client's restarts, nor crash it twice", function()
    if not guard() then return end
    local direct = drive({ command = node(), args = { SERVER }, steps = crash_steps })
    -- max_restarts = 0: the restart after the prefetch's crash is the
    -- client's only chance; it is not counted
    local cfg, log, out = crash_config(0)
    local gw = drive({ command = H.bin, args = { "gateway", cfg, "--out", out }, steps = crash_steps })
    G.same_steps(direct, gw)
    for i = 1, #gw.steps do assert.is_true(gw.steps[i].ok, require("cjson").encode(gw.steps[i])) end
    local inits, calls = tap_counts(log)
    local crashes = calls.crash or 0
    -- the guess ran once, the server was started twice (the client's next
    -- call started it again), and the guess was never made again there
    assert.are.equal(1, crashes)
    assert.are.equal(2, inits)
    local rec = record(out)
    assert.are.equal(1, rec.speculation.launched)
    assert.is_true(rec.speculation.killed_server >= 2, require("cjson").encode(rec.speculation))
    assert.are.equal(1, rec.servers.test.restarts)
    assert.are.equal(1, rec.servers.test.prefetch_deaths)
  end)

  it("still counts a crash of the client's own call against max_restarts", function()
    if not guard() then return end
    local cfg, _, out = crash_config(0)
    local steps = { { op = "call", name = "crash", arguments = {} }, { op = "call", name = "echo", arguments = { text = "x" } } }
    local direct = drive({ command = node(), args = { SERVER }, steps = { steps[1] } })
    local gw = drive({ command = H.bin, args = { "gateway", cfg, "--out", out }, steps = steps })
    assert.is_false(direct.steps[1].ok)
    assert.is_false(gw.steps[1].ok)
    -- no restart left for the client's next call
    assert.is_false(gw.steps[2].ok)
    assert.truthy(gw.steps[2].error.message:find("gave up after 0 restart(s) (max_restarts = 0)", 1, true),
      gw.steps[2].error.message)
    local rec = record(out)
    assert.are.equal(0, rec.servers.test.prefetch_deaths)
  end)

  it("keeps a session's waste within budget.max_wasted_cost, at each tool's cost", function()
    if not guard() then return end
    -- five new guesses a round, each a slow call costing 0.5: 2.0 allows
    -- four prefetches that may all be wasted, and nothing after them
    local cfg, log, out = setup('policy = { slow = "full" },\n'
      .. '  budget = { max_inflight = 5, max_wasted_cost = 2, cost = { slow = 0.5 } },\n'
      .. '  predict = function(h) local l = {}\n'
      .. '    for i = 1, 5 do l[i] = { tool = "slow", args = { ms = 10000, tag = #h .. "." .. i } } end\n'
      .. '    return l end,')
    local gw = drive({ command = H.bin, args = { "gateway", cfg, "--out", out }, steps = {
      { op = "call", name = "echo", arguments = { text = "a" } }, { op = "sleep", ms = 300 },
      { op = "call", name = "echo", arguments = { text = "b" } }, { op = "sleep", ms = 300 },
      { op = "call", name = "echo", arguments = { text = "c" } }, { op = "sleep", ms = 300 },
    } })
    assert.is_true(gw.steps[1].ok)
    local slow = 0
    for _, e in ipairs(tap(log)) do
      if e.name == "slow" then slow = slow + 1 end
    end
    -- without the budget: five a round, fifteen in all
    assert.are.equal(4, slow)
    local rec = record(out)
    assert.are.equal(4, rec.speculation.launched)
    assert.are.equal(4, rec.speculation.waste)
    assert.are.equal(2, rec.speculation.wasted_cost)
    assert.are.equal(11, rec.speculation.by_budget)
  end)

  it("refuses a budget it cannot read, naming the key and the line", function()
    local bad = H.tmpfile("badbudget.lua", 'return require("specula").gateway {\n'
      .. '  servers = { a = { command = { "true" } } },\n'
      .. '  budget = { max_wasted_cost = -1 },\n}\n')
    local st, _, err = H.specula({ "gateway", bad })
    assert.are.equal(2, st)
    assert.matches("badbudget.lua:3: .*budget.max_wasted_cost must be a finite number >= 0", err)
    bad = H.tmpfile("badcost.lua", 'return require("specula").gateway {\n'
      .. '  servers = { a = { command = { "true" } } },\n'
      .. '  budget = { cost = { slow = "cheap" } },\n}\n')
    st, _, err = H.specula({ "gateway", bad })
    assert.are.equal(2, st)
    assert.matches("budget.cost: 'slow' must be a tool name with a finite number >= 0", err)
  end)

  it("the union of two servers with the same names: the later one's as SERVER__NAME, each call to its server", function()
    if not guard() then return end
    local dir = H.tmpdir()
    local la, lb = dir .. "/tap-a.jsonl", dir .. "/tap-b.jsonl"
    os.remove(la)
    os.remove(lb)
    local cfg = H.tmpfile("two.lua", string.format([[
return require("specula").gateway { servers = {
  b = { command = { %q, %q, %q, %q, %q } },
  a = { command = { %q, %q, %q, %q, %q } },
  gone = { command = { "/nonexistent/mcp-server" } },
} }
]], node(), TAP, lb, node(), SERVER, node(), TAP, la, node(), SERVER))
    local status, stdout, err = H.sh(G.driver_cmd({ command = H.bin, args = { "gateway", cfg }, steps = {
      { op = "tools" },
      { op = "call", name = "echo", arguments = { text = "to a" } },
      { op = "call", name = "b__echo", arguments = { text = "to b" } },
    } }))
    assert.are.equal(0, status, err)
    local gw = cjson.decode(stdout:match("[^\n]+"))
    local names = {}
    for _, t in ipairs(gw.steps[1].result.tools) do names[t.name] = true end
    assert.truthy(names.echo and names.b__echo and names.add and names.b__add)
    assert.are.equal("echo: to a", gw.steps[2].result.content[1].text)
    assert.are.equal("echo: to b", gw.steps[3].result.content[1].text)
    local function echoes(log)
      local l = {}
      for _, e in ipairs(tap(log)) do if e.name == "echo" then l[#l + 1] = e end end
      return l
    end
    assert.are.equal(1, #echoes(la))
    assert.are.equal(1, #echoes(lb))
    -- a server that cannot start is left out, with a warning; the others serve
    assert.truthy(err:find("mcp server 'gone' did not start", 1, true), err)
  end)

  it("no declared secret to the client, the record or stderr", function()
    if not guard() then return end
    local secret = "sk-gateway-" .. string.rep("7", 24)
    local cfg, _, out = setup(nil, { GW_SECRET = secret })
    local status, stdout, err = H.sh(G.driver_cmd({ command = H.bin, args = { "gateway", cfg, "--out", out,
      "--secret-env", "GW_SECRET" }, env = { GW_SECRET = secret }, steps = {
      { op = "call", name = "env", arguments = { name = "GW_SECRET", as = "text" } },
      { op = "call", name = "crash_env", arguments = { name = "GW_SECRET" } },
    } }))
    assert.are.equal(0, status, err)
    assert.falsy(stdout:find(secret, 1, true))
    assert.falsy(err:find(secret, 1, true))
    assert.falsy((H.read(out) or ""):find(secret, 1, true))
    local res = cjson.decode(stdout:match("[^\n]+"))
    assert.truthy(res.steps[1].result.content[1].text:find("[redacted]", 1, true))
  end)
end)
