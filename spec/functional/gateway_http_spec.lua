-- `specula gateway CONFIG.lua --listen HOST:PORT`: the gateway over MCP
-- Streamable HTTP, driven by the official TypeScript SDK client
-- (spec/support/mcp_sdk_driver.js with a url: its
-- StreamableHTTPClientTransport) in front of the real server-filesystem,
-- server-memory and server-everything: the same steps give the same
-- answers as a direct stdio connection; two clients at once are two
-- sessions with records of their own; a write the policy does not allow
-- never reaches the server before the client asks; a client that dies
-- mid-call gets its upstream call cancelled; SIGTERM ends the sessions,
-- writes their records and exits 0. Then the official conformance suite's
-- server scenarios, against server-everything's own Streamable HTTP and
-- through the gateway: every scenario that passes directly passes through
-- the gateway (the table goes to stderr, one line per scenario).
local H = require "support.helpers"
local G = require "support.gateway_helpers"
local cjson = require "cjson"

local NM, MCP, TAP = G.CACHE .. "/node_modules/", G.MCP, G.TAP

local function guard() return G.guard(pending) end
local node, q, sleep, driver_cmd, drive, config, server_src, records, start, alive, stop, same_steps =
  G.node, G.q, G.sleep, G.driver_cmd, G.drive, G.config, G.server_src, G.records, G.start, G.alive, G.stop,
  G.same_steps

-- The same steps against the server over stdio and through a listening
-- gateway in front of it: both outputs, and the gateway's records.
local function direct_and_http(name, cmd, steps, env_direct, env_gw, extra)
  local direct = drive({ command = cmd[1], args = { unpack(cmd, 2) }, env = env_direct, steps = steps })
  local out = H.tmpdir() .. "/gw-http-" .. name .. ".jsonl"
  os.remove(out)
  local g = start(config("{ " .. name .. " = " .. server_src(cmd, env_gw) .. " }", extra),
    { "--listen", "127.0.0.1:0", "--out", out })
  local ok, gw = pcall(drive, { url = g.url, steps = steps })
  local err = stop(g)
  assert(ok, gw)
  return direct, gw, records(out), err
end

describe("specula gateway --listen (official TypeScript SDK client over Streamable HTTP)", function()
  local dir
  before_each(function()
    dir = H.tmpdir() .. "/fsroot"
    os.execute("rm -rf " .. H.quote(dir) .. " && mkdir -p " .. H.quote(dir .. "/sub"))
    for _, f in ipairs({ { "a.txt", "alpha\n" }, { "b.txt", "beta\n" }, { "sub/d.txt", "delta\n" } }) do
      local fh = assert(io.open(dir .. "/" .. f[1], "w"))
      fh:write(f[2])
      fh:close()
    end
  end)

  it("refuses a host other than loopback without --allow-remote, and a bad HOST:PORT", function()
    local cfg = config("{ a = { command = { 'true' } } }")
    local st, _, err = H.specula({ "gateway", cfg, "--listen", "0.0.0.0:0" }, {})
    assert.are.equal(2, st)
    assert.truthy(err:find("0.0.0.0 is not a loopback address", 1, true), err)
    assert.truthy(err:find("--allow-remote", 1, true), err)
    st, _, err = H.specula({ "gateway", cfg, "--listen", "localhost" }, {})
    assert.are.equal(2, st)
    assert.truthy(err:find("--listen: expected HOST:PORT", 1, true), err)
    st, _, err = H.specula({ "gateway", cfg, "--allow-remote" }, {})
    assert.are.equal(2, st)
    assert.truthy(err:find("--allow-remote goes with --listen", 1, true), err)
  end)

  it("binds another host with --allow-remote, with a warning, and ends on SIGTERM with status 0", function()
    local cfg = config("{ a = { command = { 'true' } } }")
    local g = start(cfg, { "--listen", "0.0.0.0:0", "--allow-remote" })
    assert.matches("^http://0%.0%.0%.0:%d+/mcp$", g.url)
    local err = stop(g)
    assert.truthy(err:find("reachable from other hosts (no authentication)", 1, true), err)
  end)

  for _, sig in ipairs({ "TERM", "INT" }) do
    it("exits 0 on SIG" .. sig, function()
      local cfg = config("{ a = { command = { 'true' } } }")
      local errf = H.tmpdir() .. "/gw-http-rc"
      -- the shell waits for it and prints its status
      local st, out = H.sh("( " .. H.quote(H.bin) .. " gateway " .. H.quote(cfg) .. " --listen 127.0.0.1:0 </dev/null 2>"
        .. H.quote(errf) .. " & p=$!; for i in $(seq 100); do grep -q listening " .. H.quote(errf)
        .. " 2>/dev/null && break; sleep 0.05; done; kill -" .. sig .. " $p; wait $p; echo rc=$? )")
      assert.are.equal(0, st)
      assert.truthy(out:find("rc=0", 1, true), out .. (H.read(errf) or ""))
    end)
  end

  it("gives server-filesystem's answers unchanged, one record per session", function()
    if not guard() then return end
    local cmd = { node(), MCP .. "server-filesystem/dist/index.js", dir }
    local steps = {
      { op = "tools" },
      { op = "call", name = "list_directory", arguments = { path = dir } },
      { op = "call", name = "read_text_file", arguments = { path = dir .. "/a.txt" } },
      { op = "call", name = "read_multiple_files", arguments = { paths = { dir .. "/b.txt", dir .. "/sub/d.txt" } } },
      { op = "call", name = "directory_tree", arguments = { path = dir } },
      { op = "call", name = "read_text_file", arguments = { path = "/etc/passwd" } },   -- refused: outside
      { op = "call", name = "no_such_tool", arguments = {} },
    }
    local direct, gw, recs = direct_and_http("fs", cmd, steps)
    same_steps(direct, gw)
    assert.are.equal("specula-gateway", gw.server.name)
    assert.is_string(gw.session)
    assert.are.equal(1, #recs)
    assert.are.equal(6, recs[1].calls)
    assert.are.equal("the client ended the session (HTTP DELETE)", recs[1].why)
  end)

  it("gives server-memory's answers unchanged", function()
    if not guard() then return end
    local cmd = { node(), MCP .. "server-memory/dist/index.js" }
    local steps = {
      { op = "tools" },
      { op = "call", name = "create_entities", arguments = { entities = {
        { name = "Ada", entityType = "person", observations = { "wrote the first program" } },
        { name = "Engine", entityType = "machine", observations = { "analytical" } } } } },
      { op = "call", name = "create_relations", arguments = { relations = {
        { from = "Ada", to = "Engine", relationType = "programmed" } } } },
      { op = "call", name = "read_graph", arguments = {} },
      { op = "call", name = "search_nodes", arguments = { query = "Engine" } },
    }
    local tmp = H.tmpdir()
    os.remove(tmp .. "/hdirect.jsonl")
    os.remove(tmp .. "/hgw.jsonl")
    local direct, gw = direct_and_http("memory", cmd, steps, { MEMORY_FILE_PATH = tmp .. "/hdirect.jsonl" },
      { MEMORY_FILE_PATH = tmp .. "/hgw.jsonl" })
    same_steps(direct, gw)
    assert.are.equal(H.read(tmp .. "/hdirect.jsonl"), H.read(tmp .. "/hgw.jsonl"))
  end)

  it("gives server-everything's tools, resources, prompts, progress and logs unchanged", function()
    if not guard() then return end
    local cmd = { node(), MCP .. "server-everything/dist/index.js", "stdio" }
    local steps = {
      { op = "tools" }, { op = "resources" }, { op = "templates" }, { op = "prompts" },
      { op = "call", name = "echo", arguments = { message = "héllo \"wörld\" \\ 🙂" } },
      { op = "call", name = "get-sum", arguments = { a = 0.1, b = 1e21 } },
      { op = "call", name = "get-structured-content", arguments = { location = "Chicago" } },
      { op = "call", name = "get-tiny-image", arguments = {} },
      { op = "call", name = "get-resource-links", arguments = { count = 2 } },
      { op = "read", uri = "demo://resource/static/document/features." .. "md" },
      { op = "prompt", name = "args-prompt", arguments = { city = "Paris", state = "IDF" } },
      { op = "prompt", name = "no-such-prompt", arguments = {} },
      { op = "call", name = "trigger-long-running-operation", arguments = { duration = 1, steps = 4 }, progress = true },
      { op = "level", level = "debug" },
      { op = "call", name = "toggle-simulated-logging", arguments = {} },
      { op = "sleep", ms = 500 },
    }
    local direct, gw = direct_and_http("everything", cmd, steps)
    same_steps(direct, gw)
    for _, got in ipairs({ direct.notifications, gw.notifications }) do
      assert.is_true(#got >= 1)
      assert.are.equal("notifications/message", got[1].method)
    end
    for _, got in ipairs({ direct.progress, gw.progress }) do
      assert.is_true(#got >= 3)
      for i, p in ipairs(got) do assert.are.same({ progress = i, total = 4 }, p) end
    end
  end)

  it("passes a client's answer to a server's request on as the client wrote it (key order kept)", function()
    if not guard() then return end
    -- the test server's `ask` answers with JSON.stringify of the client's
    -- reply: its text shows the members in the order they came
    local SERVER = G.SERVER
    local meta = {}
    for i = 1, 16 do meta["k" .. string.char(96 + i) .. (17 - i)] = i end
    local answers = { roots = { roots = { { uri = "file:///tmp/proj", name = "proj", _meta = meta } }, zeta = 1.5,
                                alpha = "a" } }
    local steps = { { op = "call", name = "ask", arguments = { method = "roots/list", params = {} } } }
    local direct = drive({ command = node(), args = { SERVER }, answers = answers, steps = steps })
    local g = start(config("{ t = " .. server_src({ node(), SERVER }) .. " }"))
    local ok, gw = pcall(drive, { url = g.url, answers = answers, steps = steps })
    stop(g)
    assert(ok, gw)
    local text = direct.steps[1].result.content[1].text
    assert.truthy(text:find('"kp1"', 1, true), text)
    assert.are.equal(text, gw.steps[1].result.content[1].text)
  end)

  it("serves two clients at once, each a session of its own with its own servers, record and spans", function()
    if not guard() then return end
    local log = H.tmpdir() .. "/tap-two.jsonl"
    os.remove(log)
    local out = H.tmpdir() .. "/gw-http-two.jsonl"
    os.remove(out)
    local cfg = config("{ fs = " .. server_src({ node(), TAP, log, node(), MCP .. "server-filesystem/dist/index.js", dir })
      .. " }")
    local rec = H.tmpdir() .. "/gw-http-two-rec"
    os.execute("rm -rf " .. H.quote(rec))
    local g = start(cfg, { "--listen", "127.0.0.1:0", "--out", out, "--record", rec })
    -- (long enough that both are connected at once on a loaded machine)
    local a = { url = g.url, steps = { { op = "sleep", ms = 1000 },
      { op = "call", name = "read_text_file", arguments = { path = dir .. "/a.txt" } },
      { op = "call", name = "read_text_file", arguments = { path = dir .. "/a.txt" } },
      { op = "call", name = "read_text_file", arguments = { path = dir .. "/a.txt" } } } }
    local b = { url = g.url, steps = { { op = "sleep", ms = 1000 },
      { op = "call", name = "read_text_file", arguments = { path = dir .. "/b.txt" } } } }
    local oa, ob = H.tmpdir() .. "/two-a.json", H.tmpdir() .. "/two-b.json"
    local st = H.sh(driver_cmd(a) .. " >" .. oa .. " & " .. driver_cmd(b) .. " >" .. ob .. "; wait")
    stop(g)
    assert.are.equal(0, st)
    local ra, rb = cjson.decode(H.read(oa)), cjson.decode(H.read(ob))
    assert.are_not.equal(ra.session, rb.session)
    assert.are.equal("alpha\n", ra.steps[4].result.content[1].text)
    assert.are.equal("beta\n", rb.steps[2].result.content[1].text)
    -- both were connected at once: each initialized before the other ended
    local recs = records(out)
    assert.are.equal(2, #recs)
    table.sort(recs, function(x, y) return x.calls < y.calls end)
    assert.are.same({ 1, 3 }, { recs[1].calls, recs[2].calls })
    assert.are_not.equal(recs[1].session, recs[2].session)
    assert.is_true(recs[1].started_ms < recs[2].ended_ms and recs[2].started_ms < recs[1].ended_ms)
    -- each session its own server: two initializes went upstream
    local inits = 0
    for line in (H.read(log) or ""):gmatch("[^\n]+") do
      if cjson.decode(line).method == "initialize" then inits = inits + 1 end
    end
    assert.are.equal(2, inits)
    -- --record: one cassette, each session's spans in a file of its own
    for _, r in ipairs(recs) do
      assert.truthy(H.read(rec .. "/gateway-session-" .. r.session .. ".otlp.jsonl"), "no spans of session " .. r.session)
    end
    local _, ls = H.specula({ "cassette", "ls", rec }, {})
    assert.truthy(ls:find("exchanges", 1, true), ls)
  end)

  it("never runs a write tool the policy does not allow before the client asks (and a control that allows it does)", function()
    if not guard() then return end
    local predictor = [[
  predict = function(history)
    return { { tool = "create_entities", confidence = 0.99,
               args = { entities = { { name = "Early", entityType = "probe", observations = { "x" } } } } },
             { tool = "read_graph", args = {}, confidence = 0.9 } }
  end,
]]
    local steps = {
      { op = "call", name = "read_graph", arguments = {} }, { op = "sleep", ms = 300 },
      { op = "call", name = "read_graph", arguments = {} }, { op = "sleep", ms = 300 },
      { op = "call", name = "read_graph", arguments = {} }, { op = "sleep", ms = 300 },
      { op = "call", name = "create_entities", arguments = {
        entities = { { name = "Early", entityType = "probe", observations = { "x" } } } } },
    }
    local function run(policy, tag)
      local mem, log = H.tmpdir() .. "/hmem-" .. tag .. ".jsonl", H.tmpdir() .. "/htap-" .. tag .. ".jsonl"
      os.remove(mem)
      os.remove(log)
      local cfg = config("{ memory = " .. server_src({ node(), TAP, log, node(), MCP .. "server-memory/dist/index.js" },
        { MEMORY_FILE_PATH = mem }) .. " }", predictor .. "  policy = " .. policy .. ",\n")
      local out = H.tmpdir() .. "/gw-http-write-" .. tag .. ".jsonl"
      os.remove(out)
      local g = start(cfg, { "--listen", "127.0.0.1:0", "--out", out })
      local ok, gw = pcall(drive, { url = g.url, steps = steps })
      stop(g)
      assert(ok, gw)
      local writes = {}
      for line in (H.read(log) or ""):gmatch("[^\n]+") do
        local e = cjson.decode(line)
        if e.method == "tools/call" and e.name == "create_entities" then writes[#writes + 1] = e.t_ms end
      end
      return gw, writes, records(out)[1]
    end
    local gw, w, rec = run('{ read_graph = "full" }', "deny")
    assert.are.equal(1, #w)
    assert.is_true(w[1] >= gw.steps[7].sent_ms,
      "the server was asked to write at " .. w[1] .. ", before the client's request at " .. gw.steps[7].sent_ms)
    assert.are.equal(0, rec.tools.create_entities.prefetched)
    assert.is_true(rec.speculation.refused >= 3)
    assert.is_true(rec.tools.read_graph.hits >= 2)
    local gw2, w2, rec2 = run('{ read_graph = "full", create_entities = "full" }', "allow")
    assert.is_true(#w2 >= 1)
    assert.is_true(w2[1] < gw2.steps[7].sent_ms - 200)
    assert.is_true(rec2.tools.create_entities.prefetched >= 1)
    assert.are.same(gw.steps[7].result, gw2.steps[7].result)
  end)

  it("cancels the upstream call of a client that disconnects mid-call; SIGTERM writes the session's record", function()
    if not guard() then return end
    local log = H.tmpdir() .. "/tap-gone.jsonl"
    os.remove(log)
    local out = H.tmpdir() .. "/gw-http-gone.jsonl"
    os.remove(out)
    local cfg = config("{ everything = " .. server_src({ node(), TAP, log, node(),
      MCP .. "server-everything/dist/index.js", "stdio" }) .. " }")
    local g = start(cfg, { "--listen", "127.0.0.1:0", "--out", out })
    local ok, r = pcall(drive, { url = g.url, steps = {
      { op = "exit", name = "trigger-long-running-operation", arguments = { duration = 10, steps = 5 }, after_ms = 700 } } })
    -- the upstream call's id, and its notifications/cancelled
    local call_id, cancelled
    for _ = 1, 60 do
      for line in (H.read(log) or ""):gmatch("[^\n]+") do
        local e = cjson.decode(line)
        if e.method == "tools/call" then call_id = e.id end
        if e.method == "notifications/cancelled" and e.id == call_id then cancelled = e.t_ms end
      end
      if cancelled then break end
      sleep(0.1)
    end
    local err = stop(g)
    assert(ok, r)
    assert.is_not_nil(call_id, H.read(log))
    assert.is_not_nil(cancelled, "no notifications/cancelled upstream: " .. tostring(H.read(log)))
    -- well before the call would have ended (10 s)
    assert.is_true(cancelled - r.exited_ms < 3000)
    local recs = records(out)
    assert.are.equal(1, #recs, err)
    assert.are.equal(1, recs[1].cancelled_by_client)
    assert.are.equal("the server closed", recs[1].why)
  end)
end)

-- ---- the official conformance suite's server scenarios --------------------------------

local SUITE_JS = NM .. "@modelcontextprotocol/conformance/dist/index.js"

-- Every server scenario of the suite (--suite all) against URL: { name =
-- { ok, passed, failed } }, the names in the suite's order.
local function conformance(url)
  local st, out, err = H.sh(H.quote(node()) .. " " .. H.quote(SUITE_JS) .. " server --url " .. H.quote(url)
    .. " --suite all")
  local res, order = {}, {}
  for line in out:gsub("\27%[[%d;]*m", ""):gmatch("[^\n]+") do
    -- "✓ NAME: P passed, F failed" (✗ for a failed scenario)
    local mark, name, p, f = line:match("^(\226\156[\147\151]) ([%w%-_]+): (%d+) passed, (%d+) failed")
    if mark then
      order[#order + 1] = name
      res[name] = { ok = mark == "\226\156\147", passed = tonumber(p), failed = tonumber(f) }
    end
  end
  assert.is_true(#order > 0, "no scenario results (status " .. st .. "): " .. out .. err)
  return res, order
end

local function free_port()
  local _, out = H.sh("python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); "
    .. "print(s.getsockname()[1])'")
  return tonumber(out:match("%d+"))
end

describe("specula gateway --listen under the official conformance suite (server scenarios) #slow", function()
  it("passes every scenario through the gateway that server-everything passes on its own", function()
    if not G.suite_guard(pending) then return end
    local EV = MCP .. "server-everything/dist/index.js"
    -- server-everything's own Streamable HTTP (PORT from the environment)
    local port = free_port()
    local evlog = H.tmpdir() .. "/everything-http.log"
    local _, pid = H.sh("PORT=" .. port .. " " .. H.quote(node()) .. " " .. H.quote(EV) .. " streamableHttp </dev/null >"
      .. H.quote(evlog) .. " 2>&1 & echo $!")
    pid = tonumber(pid:match("%d+"))
    for _ = 1, 200 do
      if (H.read(evlog) or ""):find("listening on port", 1, true) then break end
      sleep(0.05)
    end
    local okd, direct, order = pcall(conformance, "http://127.0.0.1:" .. port .. "/mcp")
    os.execute("kill " .. pid)
    assert(okd, direct)
    local g = start(config("{ everything = " .. server_src({ node(), EV, "stdio" }) .. " }"))
    local okg, gw = pcall(conformance, g.url)
    stop(g)
    assert(okg, gw)
    assert.is_true(#order >= 60, "the suite lists " .. #order .. " server scenarios")
    local lines, worse = { "[conformance] scenario | direct (server-everything) | through the gateway" }, {}
    local function cell(r)
      if not r then return "missing" end
      return string.format("%s %d/%d", r.ok and "pass" or "FAIL", r.passed, r.passed + r.failed)
    end
    local npass = { 0, 0 }
    for _, name in ipairs(order) do
      local d, w = direct[name], gw[name]
      if d.ok then npass[1] = npass[1] + 1 end
      if w and w.ok then npass[2] = npass[2] + 1 end
      lines[#lines + 1] = string.format("[conformance] %s | %s | %s", name, cell(d), cell(w))
      if d.ok and not (w and w.ok and w.passed >= d.passed) then worse[#worse + 1] = name end
    end
    lines[#lines + 1] = string.format("[conformance] scenarios passed: direct %d/%d, through the gateway %d/%d",
      npass[1], #order, npass[2], #order)
    io.stderr:write(table.concat(lines, "\n"), "\n")
    assert.are.same({}, worse)
  end)
end)
