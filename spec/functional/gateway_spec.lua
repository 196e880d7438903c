-- `specula gateway CONFIG.lua` over stdio, driven by the official MCP
-- TypeScript SDK client (spec/support/mcp_sdk_driver.js) in front of the
-- real server-filesystem, server-memory and server-everything: the same
-- steps run against each server directly and through the gateway give the
-- same answers; a write tool the policy does not allow never runs before
-- the client's request (the memory file's write time against the client's
-- send time), while a control run that allows it shows it would; a
-- predictable read sequence is served from prefetches, counted in --out;
-- a bad config is refused naming the file and line.
local H = require "support.helpers"
local G = require "support.gateway_helpers"
local cjson = require "cjson"

local CACHE, MCP = G.CACHE, G.MCP

local function guard() return G.guard(pending) end
local node, drive, config, q, server_src, same_steps, records =
  G.node, G.drive, G.config, G.q, G.server_src, G.same_steps, G.records

local runs = 0

-- The same steps against the server and through a gateway in front of it
-- alone (its names as they are): both outputs.
local function direct_and_gateway(name, cmd, steps, env_direct, env_gw, extra)
  local direct = drive({ command = cmd[1], args = { unpack(cmd, 2) }, env = env_direct, steps = steps })
  local cfg = config("{ " .. name .. " = " .. server_src(cmd, env_gw) .. " }", extra)
  runs = runs + 1
  local out = H.tmpdir() .. "/gw-" .. name .. runs .. ".jsonl"
  local gw = drive({ command = H.bin, args = { "gateway", cfg, "--out", out }, steps = steps })
  return direct, gw, out
end

-- The last write of a file, in ms since the epoch (nil: never written).
local function mtime_ms(path)
  local p = io.popen("date -r " .. H.quote(path) .. " +%s%3N 2>/dev/null")
  local v = p:read("*l")
  p:close()
  return tonumber(v)
end


describe("specula gateway (official TypeScript SDK client over stdio)", function()
  local dir
  before_each(function()
    dir = H.tmpdir() .. "/fsroot"
    os.execute("rm -rf " .. H.quote(dir) .. " && mkdir -p " .. H.quote(dir .. "/sub"))
    for _, f in ipairs({ { "a.txt", "alpha\n" }, { "b.txt", "beta\n" }, { "c.txt", "gamma\n" }, { "sub/d.txt", "delta\n" } }) do
      local fh = assert(io.open(dir .. "/" .. f[1], "w"))
      fh:write(f[2])
      fh:close()
    end
  end)

  it("gives server-filesystem's answers unchanged", function()
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
    local direct, gw, out = direct_and_gateway("fs", cmd, steps)
    same_steps(direct, gw)
    assert.are.equal("specula-gateway", gw.server.name)
    assert.is_true(direct.steps[6].result.isError)
    local r = records(out)
    assert.are.equal(1, #r)
    assert.are.equal("gateway-session", r[1].kind)
    assert.are.equal(6, r[1].calls)
    assert.are.equal(0, r[1].speculation.launched)   -- no policy: nothing runs early
    assert.are.equal("stdin closed", r[1].why)
    assert.is_string(r[1].provenance.run)
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
      { op = "call", name = "add_observations", arguments = { observations = {
        { entityName = "Ada", contents = { "born 1815" } } } } },
      { op = "call", name = "read_graph", arguments = {} },
      { op = "call", name = "search_nodes", arguments = { query = "Engine" } },
      { op = "call", name = "open_nodes", arguments = { names = { "Ada" } } },
    }
    local tmp = H.tmpdir()
    local direct, gw = direct_and_gateway("memory", cmd, steps, { MEMORY_FILE_PATH = tmp .. "/direct.jsonl" },
      { MEMORY_FILE_PATH = tmp .. "/gw.jsonl" })
    same_steps(direct, gw)
    assert.are.equal(H.read(tmp .. "/direct.jsonl"), H.read(tmp .. "/gw.jsonl"))
  end)

  it("gives server-everything's tools, resources, templates, prompts and progress unchanged", function()
    if not guard() then return end
    local cmd = { node(), MCP .. "server-everything/dist/index.js", "stdio" }
    local steps = {
      { op = "tools" }, { op = "resources" }, { op = "templates" }, { op = "prompts" },
      { op = "call", name = "echo", arguments = { message = "héllo \"wörld\" \\ 🙂" } },
      { op = "call", name = "get-sum", arguments = { a = 0.1, b = 1e21 } },
      { op = "call", name = "get-structured-content", arguments = { location = "Chicago" } },
      { op = "call", name = "get-tiny-image", arguments = {} },
      { op = "call", name = "get-annotated-message", arguments = { messageType = "error", includeImage = true } },
      { op = "call", name = "get-resource-links", arguments = { count = 2 } },
      -- (the name cut in two: no document of ours is cited)
      { op = "read", uri = "demo://resource/static/document/features." .. "md" },
      { op = "prompt", name = "args-prompt", arguments = { city = "Paris", state = "IDF" } },
      { op = "prompt", name = "no-such-prompt", arguments = {} },
      { op = "call", name = "trigger-long-running-operation", arguments = { duration = 1, steps = 4 }, progress = true },
      { op = "level", level = "debug" },
      { op = "call", name = "toggle-simulated-logging", arguments = {} },
      { op = "sleep", ms = 500 },
    }
    local direct, gw = direct_and_gateway("everything", cmd, steps)
    same_steps(direct, gw)
    -- the server sends all four before its result; the SDK client runs its
    -- progress handlers a turn after it reads them, so a last one read with
    -- the result may be lost, directly as through the gateway: each sees
    -- them in order, at least three
    -- the server's log messages (random levels and texts) reach the client
    for _, got in ipairs({ direct.notifications, gw.notifications }) do
      assert.is_true(#got >= 1)
      assert.are.equal("notifications/message", got[1].method)
      assert.truthy(tostring(got[1].params.data):find("message", 1, true))
    end
    for _, got in ipairs({ direct.progress, gw.progress }) do
      assert.is_true(#got >= 3)
      for i, p in ipairs(got) do assert.are.same({ progress = i, total = 4 }, p) end
    end
  end)

  it("never runs a write tool the policy does not allow before the client asks (and a control that allows it does)", function()
    if not guard() then return end
    -- a predictor that always proposes the write, and a read
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
    local TAP = G.TAP
    local function run(policy, tag)
      local mem, log = H.tmpdir() .. "/mem-" .. tag .. ".jsonl", H.tmpdir() .. "/tap-" .. tag .. ".jsonl"
      os.remove(mem)
      os.remove(log)
      local cfg = config("{ memory = " .. server_src({ node(), TAP, log, node(), MCP .. "server-memory/dist/index.js" },
        { MEMORY_FILE_PATH = mem }) .. " }", predictor .. "  policy = " .. policy .. ",\n")
      local out = H.tmpdir() .. "/gw-write-" .. tag .. ".jsonl"
      os.remove(out)
      local gw = drive({ command = H.bin, args = { "gateway", cfg, "--out", out }, steps = steps })
      local asked = {}
      for line in (H.read(log) or ""):gmatch("[^\n]+") do
        local e = cjson.decode(line)
        if e.method == "tools/call" then asked[#asked + 1] = e end
      end
      return gw, asked, records(out)[1]
    end
    local function writes(asked)
      local l = {}
      for _, e in ipairs(asked) do if e.name == "create_entities" then l[#l + 1] = e.t_ms end end
      return l
    end
    -- read_graph may run early, create_entities may not: the server is
    -- asked to write once, after the client sent its request
    local gw, asked, rec = run('{ read_graph = "full" }', "deny")
    local sent = gw.steps[7].sent_ms
    local w = writes(asked)
    assert.are.equal(1, #w)
    assert.is_true(w[1] >= sent, "the server was asked to write at " .. w[1] .. ", before the client's request at " .. sent)
    assert.are.equal(0, rec.tools.create_entities.prefetched)
    assert.is_true(rec.speculation.refused >= 3)
    assert.is_true(rec.tools.read_graph.hits >= 2)
    assert.is_true(rec.speculation.launched >= 2)
    assert.truthy(H.read(gw.steps[7].ok and (H.tmpdir() .. "/mem-deny.jsonl")):find("Early", 1, true))
    -- the control: allowed, the same write reaches the server long before
    -- the client asks (so the check above can fail), and is served then
    local gw2, asked2, rec2 = run('{ read_graph = "full", create_entities = "full" }', "allow")
    local w2 = writes(asked2)
    assert.is_true(#w2 >= 1)
    assert.is_true(w2[1] < gw2.steps[7].sent_ms - 200)
    assert.is_true(rec2.tools.create_entities.prefetched >= 1)
    assert.are.equal(1, rec2.tools.create_entities.hits)
    assert.are.same(gw.steps[7].result, gw2.steps[7].result)
  end)

  it("runs nothing early on a server after one that did not start (a tool's name may mean another tool then)",
    function()
    if not guard() then return end
    -- server "a" cannot start: had it started, a tool of its own named
    -- read_graph would have kept that name and memory's been memory__read_graph,
    -- so the policy's read_graph may not mean the tool the client now sees
    local predictor = [[
  predict = function(history) return { { tool = "read_graph", args = {}, confidence = 0.99 } } end,
]]
    local mem, log = H.tmpdir() .. "/mem-amb.jsonl", H.tmpdir() .. "/tap-amb.jsonl"
    os.remove(mem)
    os.remove(log)
    local memory = server_src({ node(), G.TAP, log, node(), MCP .. "server-memory/dist/index.js" },
      { MEMORY_FILE_PATH = mem })
    local cfg = config("{ a = " .. server_src({ H.tmpdir() .. "/no-such-server" }) .. ", memory = " .. memory .. " }",
      predictor .. '  policy = { read_graph = "full" },\n')
    local out = H.tmpdir() .. "/gw-amb.jsonl"
    os.remove(out)
    local steps = {
      { op = "call", name = "read_graph", arguments = {} }, { op = "sleep", ms = 300 },
      { op = "call", name = "read_graph", arguments = {} }, { op = "sleep", ms = 300 },
      { op = "call", name = "read_graph", arguments = {} },
    }
    local gw, err = drive({ command = H.bin, args = { "gateway", cfg, "--out", out }, steps = steps })
    for i = 1, 5, 2 do assert.is_true(gw.steps[i].ok, "step " .. i) end
    -- the server was asked exactly the client's three calls
    local calls = 0
    for line in (H.read(log) or ""):gmatch("[^\n]+") do
      if cjson.decode(line).method == "tools/call" then calls = calls + 1 end
    end
    assert.are.equal(3, calls)
    local rec = records(out)[1]
    assert.are.equal(0, rec.tools.read_graph.prefetched)
    assert.are.equal(0, rec.speculation.launched)
    assert.matches("server 'a' did not start, so", err, 1, true)
  end)

  it("serves a predictable read sequence from prefetches, the same answers, counted in --out", function()
    if not guard() then return end
    -- the next file of the last listing that was not read yet
    local predictor = [[
  predict = function(history)
    local listing
    for _, h in ipairs(history) do
      if h.tool == "list_directory" then listing = h.observation.content[1].text end
    end
    if not listing then return {} end
    local read = {}
    for _, h in ipairs(history) do if h.tool == "read_text_file" then read[h.args.path] = true end end
    for name in listing:gmatch("%[FILE%] ([^\n]+)") do
      local path = ]] .. q(dir) .. [[ .. "/" .. name
      if not read[path] then return { { tool = "read_text_file", args = { path = path }, confidence = 0.9 } } end
    end
    return {}
  end,
  policy = { read_text_file = "full", list_directory = "full" },
  max_age_ms = 20000,
]]
    local cmd = { node(), MCP .. "server-filesystem/dist/index.js", dir }
    local steps = { { op = "call", name = "list_directory", arguments = { path = dir } } }
    for _, f in ipairs({ "a.txt", "b.txt", "c.txt" }) do
      steps[#steps + 1] = { op = "sleep", ms = 250 }
      steps[#steps + 1] = { op = "call", name = "read_text_file", arguments = { path = dir .. "/" .. f } }
    end
    local direct, gw, out = direct_and_gateway("fs", cmd, steps, nil, nil, predictor)
    same_steps(direct, gw)
    local rec = records(out)[1]
    assert.are.equal(3, rec.speculation.hits, H.read(out))
    assert.are.equal(3, rec.tools.read_text_file.hits)
    assert.is_true(rec.tools.read_text_file.hidden_ms > 0)
    assert.are.equal(0, rec.speculation.waste)
    local served = 0
    for _, t in ipairs(rec.trace) do if t.prefetched then served = served + 1 end end
    assert.are.equal(3, served)
  end)

  -- a predictor is the user's code: when it fails the client's calls are
  -- untouched, the failures are counted, and each distinct one is said once
  it("goes on without the proposals of a predictor that raises or returns no list, saying each failure once", function()
    if not guard() then return end
    local predictor = [[
  predict = function(history)
    if #history == 1 then error("no guess for " .. history[1].tool) end
    return "not a list"
  end,
  policy = { read_text_file = "full", list_directory = "full" },
]]
    local cmd = { node(), MCP .. "server-filesystem/dist/index.js", dir }
    local steps = { { op = "call", name = "list_directory", arguments = { path = dir } } }
    for _, f in ipairs({ "a.txt", "b.txt", "c.txt" }) do
      steps[#steps + 1] = { op = "call", name = "read_text_file", arguments = { path = dir .. "/" .. f } }
    end
    local direct = drive({ command = cmd[1], args = { unpack(cmd, 2) }, steps = steps })
    local cfg = config("{ fs = " .. server_src(cmd) .. " }", predictor)
    local out = H.tmpdir() .. "/gw-prederr.jsonl"
    os.remove(out)
    local gw, err = drive({ command = H.bin, args = { "gateway", cfg, "--out", out }, steps = steps })
    same_steps(direct, gw)
    local rec = records(out)[1]
    assert.are.equal(4, rec.speculation.predictor_errors, H.read(out))
    assert.are.equal(0, rec.speculation.launched)
    -- two distinct failures, each said once, the raise with the config's line
    local _, n = err:gsub("warning: predictor ", "")
    assert.are.equal(2, n, err)
    assert.matches("warning: predictor raised: [^\n]*gateway%d*%.lua:%d+: no guess for list_directory", err)
    assert.matches("warning: predictor returned: string, expected a list", err, 1, true)
  end)

  it("relays the server's progress to a client that joins a prefetch still running (the latest so far, then each)", function()
    if not guard() then return end
    -- after echo, the long operation (2 s, a progress every 0.5 s) is
    -- predicted and starts; the client asks for it 0.8 s later and joins it
    local predictor = [[
  predict = function(history)
    if history[#history].tool ~= "echo" then return {} end
    return { { tool = "trigger-long-running-operation", args = { duration = 2, steps = 4 }, confidence = 0.9 } }
  end,
  policy = { ["trigger-long-running-operation"] = "full" },
  max_age_ms = 20000,
]]
    local cmd = { node(), MCP .. "server-everything/dist/index.js", "stdio" }
    local steps = {
      { op = "call", name = "echo", arguments = { message = "go" } },
      { op = "sleep", ms = 800 },
      { op = "call", name = "trigger-long-running-operation", arguments = { duration = 2, steps = 4 }, progress = true },
    }
    local direct, gw, out = direct_and_gateway("everything", cmd, steps, nil, nil, predictor)
    same_steps(direct, gw)
    local rec = records(out)[1]
    assert.are.equal(1, rec.speculation.hits, H.read(out))
    assert.are.equal(1, rec.speculation.joined, H.read(out))
    -- (the server sends its last progress with its result: a client may not
    -- see it, directly or not)
    assert.is_true(#direct.progress >= 3, cjson.encode(direct.progress))
    -- joined after the first progress: it, then the rest in order
    assert.is_true(#gw.progress >= 2, cjson.encode(gw.progress))
    local last = 0
    for _, p in ipairs(gw.progress) do
      assert.are.equal(4, p.total)
      assert.is_true(p.progress > last, cjson.encode(gw.progress))
      last = p.progress
    end
    assert.is_true(last >= 3, cjson.encode(gw.progress))
  end)

  it("refuses a mistake in a config whose call is not a tail call at the call's own line", function()
    local cfg = H.tmpfile("bad2.lua", "local specula = require 'specula'\nlocal gw = specula.gateway {\n"
      .. "  servers = { a = { command = { 'true' } } }, max_age_ms = -1 }\nreturn gw\n")
    local status, _, err = H.specula({ "gateway", cfg }, {})
    assert.are_not.equal(0, status)
    assert.truthy(err:find(cfg .. ":2: specula.gateway: max_age_ms must be a finite number >= 0", 1, true), err)
  end)

  describe("refuses a bad config naming the file and line", function()
    local function gateway_err(src)
      local cfg = H.tmpfile("bad.lua", src)
      local status, out, err = H.specula({ "gateway", cfg }, {})
      return status, out, err, cfg
    end

    it("a syntax error", function()
      local status, out, err, cfg = gateway_err("local specula = require 'specula'\nreturn specula.gateway {\n  servers = {,\n}\n")
      assert.are_not.equal(0, status)
      assert.are.equal("", out)
      assert.truthy(err:find(cfg .. ":3:", 1, true), err)
    end)

    it("an unknown key", function()
      local status, _, err, cfg = gateway_err("local specula = require 'specula'\n\nreturn specula.gateway {\n"
        .. "  servers = { a = { command = { 'true' } } },\n  polcy = {},\n}\n")
      assert.are_not.equal(0, status)
      assert.truthy(err:find(cfg .. ":5: specula.gateway: unknown key 'polcy'", 1, true), err)
    end)

    it("an unknown key of a server", function()
      local status, _, err, cfg = gateway_err("local specula = require 'specula'\nreturn specula.gateway {\n"
        .. "  servers = { a = { cmd = { 'true' } } },\n}\n")
      assert.are_not.equal(0, status)
      assert.truthy(err:find(cfg .. ":3: specula.gateway: servers.a: unknown key 'cmd'", 1, true), err)
    end)

    -- before, each was let through: the gateway served, and at the client's
    -- initialize the server was left out with a warning and a stack trace
    it("a server option specula.mcp.connect refuses", function()
      for _, c in ipairs({
        { "timeout_ms = -5", "servers.a: timeout_ms must be a finite number >= 0, got -5" },
        { "init_timeout_ms = 'soon'", "servers.a: init_timeout_ms must be a finite number >= 0, got soon" },
        { "protocol_version = '1999-01-01'", "servers.a: protocol_version must be one of 2026-07-28, " },
        { "auth = true", "servers.a: auth is for servers reached by url" },
      }) do
        local status, out, err, cfg = gateway_err("local specula = require 'specula'\nreturn specula.gateway {\n"
          .. "  servers = { a = { command = { 'cat' },\n    " .. c[1] .. " } },\n}\n")
        assert.are.equal(2, status, err)
        assert.are.equal("", out)
        assert.truthy(err:find(cfg .. ":4: specula.gateway: " .. c[2], 1, true), err)
        assert.falsy(err:find("traceback", 1, true), err)
      end
      local status, _, err, cfg = gateway_err("local specula = require 'specula'\nreturn specula.gateway {\n"
        .. "  servers = { a = { url = 'http://127.0.0.1:9/mcp',\n    auth = { client = 'x' } } },\n}\n")
      assert.are.equal(2, status, err)
      assert.truthy(err:find(cfg .. ":4: specula.gateway: servers.a: auth.client is not an auth option", 1, true), err)
    end)

    -- before, each passed the check: infinity failed every session (its
    -- record's JSON), a predictor name no loader knows was a stack trace at
    -- the first session, status 1
    it("an infinite number, and a predictor that cannot be loaded", function()
      for _, c in ipairs({
        { "  servers = { a = { command = { 'cat' } } },\n  budget = { max_inflight = math.huge },\n", ":4:",
          "specula.gateway: budget.max_inflight must be a whole number >= 0" },
        { "  servers = { a = { command = { 'cat' } } },\n  max_age_ms = math.huge,\n", ":4:",
          "specula.gateway: max_age_ms must be a finite number >= 0" },
        { "  servers = { a = { command = { 'cat' }, timeout_ms = 1/0 } },\n", ":3:",
          "specula.gateway: servers.a: timeout_ms must be a finite number >= 0, got inf" },
        { "  servers = { a = { command = { 'cat' } } },\n  predict = 'nosuch',\n", ":4:",
          "predict: unknown predictor 'nosuch'" },
        { "  servers = { a = { command = { 'cat' } } },\n  predict = 'learned:/no/such/model.json',\n", ":4:",
          "predict: learned: no model file '/no/such/model.json'" },
      }) do
        local status, out, err, cfg = gateway_err("local specula = require 'specula'\nreturn specula.gateway {\n"
          .. c[1] .. "}\n")
        assert.are.equal(2, status, err)
        assert.are.equal("", out)
        assert.truthy(err:find(cfg .. c[2] .. " " .. c[3], 1, true), err)
        assert.falsy(err:find("traceback", 1, true), err)
      end
    end)

    it("no servers", function()
      local status, _, err, cfg = gateway_err("return require('specula').gateway { servers = {} }\n")
      assert.are_not.equal(0, status)
      assert.truthy(err:find(cfg .. ":1: specula.gateway: servers: at least one server is needed", 1, true), err)
    end)

    it("a file that returns no gateway", function()
      local status, _, err, cfg = gateway_err("return { servers = {} }\n")
      assert.are_not.equal(0, status)
      assert.truthy(err:find(cfg .. " must return specula.gateway{", 1, true), err)
    end)

    -- before, each was a warning when a client connected, and the gateway
    -- served with nothing early
    it("a policy file with a syntax error, and a policy table with a decision no gate knows", function()
      local pol = H.tmpfile("gw_badpol.lua", "return { read_file = 'full'\n")
      local status, out, err, cfg = gateway_err("local specula = require 'specula'\nreturn specula.gateway {\n"
        .. "  servers = { a = { command = { 'cat' } } },\n  policy = '" .. pol .. "',\n}\n")
      assert.are.equal(2, status, err)
      assert.are.equal("", out)
      assert.truthy(err:find(cfg .. ":4: policy: cannot load " .. pol .. ": " .. pol .. ":2:", 1, true), err)
      assert.falsy(err:find("traceback", 1, true), err)
      status, out, err, cfg = gateway_err("local specula = require 'specula'\nreturn specula.gateway {\n"
        .. "  servers = { a = { command = { 'cat' } } },\n  policy = { read_file = 'fulll' },\n}\n")
      assert.are.equal(2, status, err)
      assert.are.equal("", out)
      assert.truthy(err:find(cfg .. ":4: policy: tool read_file: decision must be full, warmup or forbid, got fulll",
        1, true), err)
    end)
  end)
end)

describe("examples/gateway", function()
  it("try.lua runs as docs/gateway.md says: every read after the listing served from a prefetch, the same files", function()
    if not guard() then return end
    local dir = H.tmpdir() .. "/try-docs"
    os.execute("rm -rf " .. H.quote(dir) .. " && mkdir -p " .. H.quote(dir))
    for i = 1, 4 do
      local f = assert(io.open(dir .. "/note" .. i .. ".md", "w"))
      f:write("note ", i, "\n")
      f:close()
    end
    local status, out, err = H.specula({ "run", H.root .. "/examples/gateway/try.lua", dir, "100" },
      { SPECULA_NPM_CACHE = CACHE })
    assert.are.equal(0, status, err)
    assert.truthy(out:find("4 files of " .. dir, 1, true), out)
    assert.truthy(out:find("prefetch hits 4 of 4 reads", 1, true), out .. err)
  end)

  it("try.lua and files.lua say what is missing (a directory, the npm package, a Node too old or none), no stack trace", function()
    local empty = H.tmpdir() .. "/no-npm"
    os.execute("rm -rf " .. H.quote(empty) .. " && mkdir -p " .. H.quote(empty))
    -- a cache with the package but only an old Node on PATH (Debian 12's is 18)
    local fake = H.tmpdir() .. "/old-node"
    local pkg = fake .. "/node_modules/@modelcontextprotocol/server-filesystem/dist"
    os.execute("rm -rf " .. H.quote(fake) .. " && mkdir -p " .. H.quote(pkg) .. " " .. H.quote(fake .. "/bin"))
    assert(io.open(pkg .. "/index.js", "w")):close()
    local nf = assert(io.open(fake .. "/bin/node", "w"))
    nf:write("#!/bin/sh\necho v18.19.0\n")
    nf:close()
    os.execute("chmod +x " .. H.quote(fake .. "/bin/node"))
    local old_path = fake .. "/bin:" .. (os.getenv("PATH") or "/usr/bin:/bin")
    -- no Node at all: neither in the cache nor on PATH (an empty directory)
    local no_node = H.tmpdir() .. "/no-node-bin"
    os.execute("rm -rf " .. H.quote(no_node) .. " && mkdir -p " .. H.quote(no_node))
    local try, files = H.root .. "/examples/gateway/try.lua", H.root .. "/examples/gateway/files.lua"
    local cases = {
      { { "run", try, H.tmpdir() .. "/no-such-dir" }, { SPECULA_NPM_CACHE = empty }, 1, "try.lua: no directory " },
      { { "run", try, H.root .. "/docs" }, { SPECULA_NPM_CACHE = empty }, 1,
        "try.lua: the npm package @modelcontextprotocol/server-filesystem is not in " .. empty .. " (run .ci/deps" },
      { { "run", try, H.root .. "/docs" }, { SPECULA_NPM_CACHE = fake, PATH = old_path }, 1,
        "try.lua: Node v18.19.0 ('node') is too old: server-filesystem needs Node 20 or later" },
      { { "gateway", files }, { SPECULA_NPM_CACHE = empty }, 2,
        "specula gateway: files.lua: the npm package @modelcontextprotocol/server-filesystem is not in " .. empty },
      { { "gateway", files }, { SPECULA_NPM_CACHE = fake, PATH = old_path }, 2,
        "specula gateway: files.lua: server-filesystem needs Node 20 or later; 'node --version' gave 'v18.19.0'" },
      { { "run", try, H.root .. "/docs" }, { SPECULA_NPM_CACHE = fake, PATH = no_node }, 1,
        "try.lua: no Node.js to run server-filesystem: 'node --version' did not answer" },
      { { "gateway", files }, { SPECULA_NPM_CACHE = fake, PATH = no_node }, 2,
        "specula gateway: files.lua: no Node.js to run server-filesystem: 'node --version' did not answer" },
    }
    for _, c in ipairs(cases) do
      local status, out, err = H.specula(c[1], c[2])
      assert.are.equal(c[3], status, out .. err)
      assert.truthy(err:find(c[4], 1, true), err)
      assert.falsy(err:find("stack traceback", 1, true), err)
      assert.falsy(err:find("can't cd", 1, true), err)
    end
  end)
end)
