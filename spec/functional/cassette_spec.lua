-- Cassettes: `specula run --record DIR` against loopback servers (a streamed
-- OpenAI model from the test server's /file fixtures, an HTTP tool, an MCP
-- server over stdio, speculators), then `--replay-io DIR` with every server
-- stopped, misses in each --miss mode, secrets, and a recording killed midway.
local H = require "support.helpers"
local cjson = require "cjson"

local AGENT = H.root .. "/examples/cassette/agent.lua"
local KEY = "sk-TESTSECRET-cassette-4242"
local SEARCH_KEY = "search-SECRET-98765"

local PLAN = [==[
data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"lookup","arguments":""}}]},"finish_reason":null}]}

data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": \"Paris\"}"}}]},"finish_reason":null}]}

data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: [DONE]

]==]

local FINAL = [==[
data: {"id":"c2","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[{"index":0,"delta":{"role":"assistant","content":"Sunny"},"finish_reason":null}]}

data: {"id":"c2","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[{"index":0,"delta":{"content":" in Fran\u00e7e"},"finish_reason":"stop"}]}

data: [DONE]

]==]

local server, files, counter = nil, nil, 0
local base   -- the URL the recording used; a replay asks for the same one

local function input(ids)
  local lines = {}
  for _, id in ipairs(ids) do lines[#lines + 1] = cjson.encode({ id = id, query = id }) end
  counter = counter + 1
  return H.tmpfile("in" .. counter .. ".jsonl", table.concat(lines, "\n") .. "\n")
end

local function newdir()
  counter = counter + 1
  return H.tmpdir() .. "/cas" .. counter
end

local function env(extra)
  return H.cassette_env(server and server.base or base, { OPENAI_API_KEY = KEY, SEARCH_KEY = SEARCH_KEY }, extra)
end

-- specula run AGENT --input IN --k inf ARGS...; returns status, records by id, stderr
local function run(inp, args, extra_env)
  counter = counter + 1
  local out = H.tmpdir() .. "/out" .. counter .. ".jsonl"
  local a = { "run", AGENT, "--input", inp, "--k", "inf", "--out", out }
  for _, x in ipairs(args) do a[#a + 1] = x end
  local st, so, se = H.specula(a, env(extra_env))
  local by = {}
  for _, r in ipairs(H.jsonl(H.read(out) or "")) do by[r.id] = r end
  return st, by, se .. so
end

local verdicts = H.verdicts

local function cassette_files(dir)
  local list, i = {}, 1
  while true do
    local p = string.format("%s/cassette-%04d.jsonl", dir, i)
    if not H.read(p) then break end
    list[#list + 1] = p
    i = i + 1
  end
  return list
end

describe("cassettes", function()
  local rec_dir, recorded
  local IDS = { "q1", "q2", "q3" }

  -- the agent's MCP tool runs on the Node.js test server: without Node.js
  -- nothing is recorded, and every test below is pending
  setup(function()
    if H.node_missing() then return end
    files = H.tmpdir() .. "/fixtures"
    os.execute("mkdir -p " .. H.quote(files))
    H.tmpfile("fixtures/plan.sse", PLAN)
    H.tmpfile("fixtures/final.sse", FINAL)
    server = H.server { files = files }
    base = server.base
    rec_dir = newdir()
    -- "dir/", as docs/cassettes.md writes it: the file is named without "//"
    local st, by, err = run(input(IDS), { "--record", rec_dir .. "/" })
    assert.are.equal(0, st, err)
    recorded = by
    assert.matches("cassette: %d+ recorded to", err)
    assert.truthy(err:find(" recorded to " .. rec_dir .. "/cassette-0001.jsonl", 1, true), err)
  end)
  teardown(function() if server then server.stop() end end)

  it("replays a run offline with every server stopped: same answers, trajectories and verdicts", function()
    if not H.need_node(pending) then return end
    for _, id in ipairs(IDS) do
      assert.is_nil(recorded[id].error)
      assert.matches("^Sunny in Françe | weather in Paris | slow done: " .. id, recorded[id].answer)
    end
    server.stop()
    server = nil
    -- CAS_NODE: a program that does not exist, so starting the MCP server would fail
    local st, by, err = run(input(IDS), { "--replay-io", rec_dir, "--clock", "virtual" },
      { CAS_NODE = "/nonexistent/node" })
    assert.are.equal(0, st, err)
    -- a speculative thread the recording discarded early may ask for more
    -- in the replay; nothing on the committed path is missing
    assert.matches("[1-9]%d* served from .-%(0 on the committed path", err)
    for _, id in ipairs(IDS) do
      local a, b = recorded[id], by[id]
      assert.are.equal(a.answer, b.answer)
      assert.are.equal(cjson.encode(a.trajectory), cjson.encode(b.trajectory))
      assert.are.equal(verdicts(a), verdicts(b))
    end
    -- under the virtual clock a replay is deterministic, timings included
    local st2, by2, err2 = run(input(IDS), { "--replay-io", rec_dir, "--clock", "virtual" },
      { CAS_NODE = "/nonexistent/node" })
    assert.are.equal(0, st2, err2)
    for _, id in ipairs(IDS) do assert.are.equal(by[id].stats.wall_ms, by2[id].stats.wall_ms) end
    -- without the cassette the same offline run cannot work
    local st3, by3 = run(input(IDS), { "--clock", "virtual" }, { CAS_NODE = "/nonexistent/node" })
    assert.are_not.equal(0, st3)
    assert.is_nil(by3.q1 and by3.q1.answer)
  end)

  it("never stores a secret: not the API key, not the tool's header or query parameter", function()
    if not H.need_node(pending) then return end
    local list = cassette_files(rec_dir)
    assert.is_true(#list >= 1)
    for _, p in ipairs(list) do
      local text = H.read(p)
      assert.is_nil(text:find(KEY, 1, true), "the API key is in " .. p)
      assert.is_nil(text:find(SEARCH_KEY, 1, true), "the search key is in " .. p)
      assert.is_nil(text:find("TESTSECRET", 1, true), p)
      -- every line is one JSON object
      for line in text:gmatch("[^\n]+") do assert.is_table(cjson.decode(line)) end
    end
  end)

  it("lists, shows and summarises a cassette", function()
    if not H.need_node(pending) then return end
    local st, out, err = H.specula({ "cassette", "stats", rec_dir })
    assert.are.equal(0, st, err)
    -- 3 queries: 2 model streams each, 1 HTTP tool call each at least
    local http = out:match("\nhttp%s+(%d+)")
    local mcp = out:match("\nmcp%s+(%d+)")
    local spec = out:match("\nspec%s+(%d+)")
    assert.is_true(tonumber(http) >= 9, out)
    assert.is_true(tonumber(mcp) >= 4, out)     -- initialize, tools/list pages, 3 calls of slow
    assert.is_true(tonumber(spec) >= 3, out)
    st, out = H.specula({ "cassette", "show", rec_dir, "--kind", "spec", "--json" })
    assert.are.equal(0, st)
    local n = 0
    for _, r in ipairs(H.jsonl(out)) do
      assert.are.equal("spec", r.kind)
      assert.is_string(r.meta.query)
      n = n + 1
    end
    assert.are.equal(tonumber(spec), n)
    st, out = H.specula({ "cassette", "show", rec_dir, "--query", "q2" })
    assert.are.equal(0, st)
    assert.matches("POST http://127%.0%.0%.1:%d+/file%?path=plan%.sse", out)
    assert.is_nil(out:find("query q1", 1, true))
    st, out = H.specula({ "cassette", "ls", rec_dir })
    assert.are.equal(0, st)
    assert.matches("cassette%-0001%.jsonl", out)
    st, out, err = H.specula({ "cassette", "stats", rec_dir .. "/nope" })
    assert.are.equal(1, st)
    assert.matches("no such directory", err)
    st, out, err = H.specula({ "cassette", "frobnicate", rec_dir })
    assert.are.equal(2, st)
    assert.matches("unknown subcommand 'frobnicate'", err)
  end)

  it("specula verifiers judges every recorded (candidate, observation) pair with each verifier", function()
    if not H.need_node(pending) then return end
    local all = H.tmpfile("accept_all.lua", "return function() return true, 'accept: anything' end")
    local st, out, err = H.specula({ "verifiers", rec_dir, "--verifier", "exact", "--verifier", all, "--json" })
    assert.are.equal(0, st, err)
    local r = cjson.decode(out)
    local exact, any = r.verifiers[1], r.verifiers[2]
    assert.are.equal("exact", exact.verifier)
    -- the pairs, counted from the tape itself: each answered speculator call
    -- and the observation its target returned for the same (tool, args); the
    -- lookup guesses are always wrong ("Paris-qN"), the slow ones right but for q2
    local obs, specs = {}, {}
    for line in H.read(rec_dir .. "/cassette-0001.jsonl"):gmatch("[^\n]+") do
      local x = cjson.decode(line)
      if x.kind == "obs" then obs[x.key:sub(5)] = x.res.value end
      if x.kind == "spec" and not x.start and not x.err then specs[#specs + 1] = x end
    end
    local same = 0
    for _, x in ipairs(specs) do
      assert.is_not_nil(obs[x.key:sub(6)], x.key)
      if obs[x.key:sub(6)] == x.res.value then same = same + 1 end
    end
    assert.is_true(#specs >= 1)
    assert.are.equal(#specs, r.pairs)
    assert.are.equal(0, r.unpaired)
    assert.are.equal(same, exact.accepted)
    assert.are.equal(0, exact.false_accepts)
    assert.are.equal(r.pairs, any.accepted)
    assert.are.equal(1, any.p)
    assert.are.equal(r.pairs - exact.accepted, any.false_accepts)
    assert.is_true(any.rel_lat < exact.rel_lat, out)
    st, out = H.specula({ "verifiers", rec_dir })
    assert.are.equal(0, st)
    assert.matches("\nexact%s+%d+%s+[%d.]+%s+0%s", out)
    st, out, err = H.specula({ "verifiers", rec_dir, "--verifier", "nosuch" })
    assert.are.equal(2, st)
    assert.matches("unknown verifier 'nosuch'", err)
    -- the predictor lab reads the committed tool calls of the same cassette
    st, out, err = H.specula({ "predictors", rec_dir, "--json" })
    assert.are.equal(0, st, err)
    local pr = cjson.decode(out)
    assert.are.equal(3, pr.trajectories)
    assert.are.equal(6, pr.steps)
    st, out, err = H.specula({ "verifiers", all })
    assert.are.equal(1, st)
    assert.matches("results files hold no speculated candidates", err)
  end)

  it("replays a stream chunk by chunk at its recorded offsets: a tool name fires when it did", function()
    if not H.need_node(pending) then return end
    server = server or H.server { files = files }
    local sbase = server.base
    -- a plain script: --clock is an agent runner option, so it sets its own.
    -- 150 ms between the pieces: at 20 ms a loaded machine under valgrind
    -- read them as one, and the recording had nothing to replay piecewise
    local code = [[
local specula = require "specula"
if os.getenv("VCLOCK") then assert(specula.set_clock("virtual")) end
local c = specula.llm.openai.new { api_key = os.getenv("OPENAI_API_KEY"), model = "m", retry = { max_retries = 0 },
  chat_url = os.getenv("CAS_BASE") .. "/file?path=plan.sse&chunk=90&pause=150" }
local t0 = specula.now()
local at
local r = assert(c:chat { messages = { { role = "user", content = "x" } }, on_tool_name = function() at = at or specula.now() - t0 end })
print(string.format("NAME %.6f END %.6f TOOL %s", at, specula.now() - t0, r.tool_calls[1].name))
]]
    local dir = newdir()
    local st, out, err = H.run_lua(code, { "--record", dir }, env({ CAS_BASE = sbase }))
    assert.are.equal(0, st, err)
    local rec_name = tonumber(out:match("NAME ([%d.]+)"))
    -- the chunk that completed the first SSE event (the one naming the tool)
    local x
    for line in H.read(dir .. "/cassette-0001.jsonl"):gmatch("[^\n]+") do
      local v = cjson.decode(line)
      if v.kind == "http" and not v.start then x = v end
    end
    assert.is_true(#x.events >= 3, "the stream came in pieces")
    local text, at_chunk = "", nil
    for _, e in ipairs(x.events) do
      text = text .. e[2]
      if not at_chunk and text:find("\n\n", 1, true) then at_chunk = e[1] end
    end
    assert.is_true(at_chunk <= rec_name)
    server.stop()
    server = nil
    st, out, err = H.run_lua(code, { "--replay-io", dir }, env({ CAS_BASE = sbase, VCLOCK = "1" }))
    assert.are.equal(0, st, err)
    local name, fin, tool = out:match("NAME ([%d.]+) END ([%d.]+) TOOL (%w+)")
    assert.are.equal("lookup", tool)
    -- virtual time: the recorded offsets (to float rounding of the clock)
    assert.is_true(math.abs(tonumber(name) - at_chunk) < 1e-4, name .. " vs " .. at_chunk)
    assert.is_true(math.abs(tonumber(fin) - x.end_ms) < 1e-4, fin .. " vs " .. x.end_ms)
    assert.is_true(tonumber(name) < tonumber(fin))
  end)

  it("specula.run from Lua records with record = DIR and replays with replay_io = DIR", function()
    if not H.need_node(pending) then return end
    server = server or H.server { files = files }
    local sbase = server.base
    local code = [[
local specula = require "specula"
local mode = os.getenv("MODE")
local agent = specula.agent {
  tools = { echo = specula.tools.http { url = os.getenv("CAS_BASE") .. "/echo?n={n}", result = function(res)
    return specula.json.decode(res.body).query end, retry = false } },
  init = function(q) return { q = q, obs = {} } end,
  step = function(s)
    if #s.obs == 2 then return { final = table.concat(s.obs, "+") } end
    return { action = { tool = "echo", args = { n = s.q .. #s.obs } } }
  end,
  update = function(s, _, o) local obs = { unpack(s.obs) }; obs[#obs + 1] = o; return { q = s.q, obs = obs } end,
}
local opts = { queries = { "a", "b" }, mode = "sequential" }
if mode == "record" then opts.record = os.getenv("DIR") else opts.replay_io = os.getenv("DIR"); opts.clock = "virtual" end
local recs, agg = specula.run(agent, opts)
print(recs[1].answer, recs[2].answer, agg.cassette.recorded, agg.cassette.served, agg.cassette.missed)
print("clock after", specula.clock())
]]
    local dir = newdir()
    local st, out, err = H.run_lua(code, {}, env({ CAS_BASE = sbase, MODE = "record", DIR = dir }))
    assert.are.equal(0, st, err)
    assert.matches("^n=a0%+n=a1\tn=b0%+n=b1\t8\t0\t0\n", out)   -- 4 requests, 4 observations
    server.stop()
    server = nil
    st, out, err = H.run_lua(code, {}, env({ CAS_BASE = sbase, MODE = "replay", DIR = dir }))
    assert.are.equal(0, st, err)
    assert.matches("^n=a0%+n=a1\tn=b0%+n=b1\t0\t4\t0\n", out)
    assert.matches("clock after\treal", out)
  end)

  it("gives each query and thread its own answer to a request many of them make at once", function()
    if not H.need_node(pending) then return end
    server = server or H.server { files = files }
    local sbase = server.base
    -- each thread of each query asks the same request (scripts/
    -- cassette_same_request.lua): the queries in the order q3, q2, q1 at
    -- three at once, q1, q2, q3 one at a time
    local agent = H.root .. "/spec/functional/scripts/cassette_same_request.lua"
    local inp = input({ "q1", "q2", "q3" })
    local dir = newdir()
    local function saw(text)
      local l = {}
      for line in text:gmatch("SAW [^\n]+") do l[#l + 1] = line end
      table.sort(l)
      return l
    end
    finally(function() if server then server.stop() server = nil end end)
    local function go(args)
      counter = counter + 1
      local out = H.tmpdir() .. "/same" .. counter .. ".jsonl"
      local a = { "run", agent, "--input", inp, "--k", "inf", "--m", "2", "--out", out }
      for _, x in ipairs(args) do a[#a + 1] = x end
      local st, so, se = H.specula(a, { CAS_BASE = sbase })
      assert.are.equal(0, st, se .. so)
      local by = {}
      for _, r in ipairs(H.jsonl(H.read(out))) do by[r.id] = r.answer end
      return by, saw(se)
    end
    local rec, rec_saw = go({ "--concurrency", "3", "--record", dir })
    -- six threads saw six different counts
    assert.are.equal(6, #rec_saw)
    local counts = {}
    for _, l in ipairs(rec_saw) do counts[l:match("(%d+)$")] = true end
    local distinct = 0
    for _ in pairs(counts) do distinct = distinct + 1 end
    assert.are.equal(6, distinct, table.concat(rec_saw, "\n"))
    for _, id in ipairs({ "q1", "q2", "q3" }) do assert.matches("^held %d+$", rec[id]) end
    -- one query at a time: the requests come in another order (q1 first)
    server.stop()
    server = nil
    local got, got_saw = go({ "--concurrency", "1", "--replay-io", dir, "--clock", "virtual" })
    assert.are.same(rec, got)
    assert.are.same(rec_saw, got_saw)
    -- each entry says which query, hop, window thread and job asked
    local st, out = H.specula({ "cassette", "show", dir, "--kind", "http", "--query", "q2" })
    assert.are.equal(0, st)
    local threads = {}
    for t in out:gmatch("/stats[^\n]*query q2 hop 2 thread (%d+) call") do threads[#threads + 1] = t end
    assert.are.equal(2, #threads, out)
    assert.are_not.equal(threads[1], threads[2])
  end)

  it("cassette show prints each recorded MCP call with its arguments, a secret among them redacted", function()
    if not H.need_node(pending) then return end
    local st, out = H.specula({ "cassette", "show", rec_dir, "--kind", "mcp", "--query", "q1" })
    assert.are.equal(0, st)
    local tag = out:match('mcp ts tools/call slow {"ms":40,"tag":"(q1:%d+)"}\tok')
    assert.is_not_nil(tag, out)
    -- the same line with the argument made a secret (with its key: a
    -- secret needs 6 bytes at least)
    local secret = '"tag":"' .. tag
    st, out = H.specula({ "cassette", "show", rec_dir, "--kind", "mcp", "--query", "q1", "--secret-env", "CAS_TAG" },
      { CAS_TAG = secret })
    assert.are.equal(0, st)
    assert.matches('mcp ts tools/call slow {"ms":40,%[redacted%]"}\tok', out)
    assert.is_nil(out:find(secret, 1, true))
  end)

  it("refuses a cassette directory it cannot create or read, naming it", function()
    if not H.need_node(pending) then return end
    local notdir = H.tmpfile("plainfile", "x")
    local st, _, err = H.specula({ "run", AGENT, "--query", "q", "--record", notdir .. "/sub" }, env())
    assert.are.equal(2, st)
    assert.matches("cannot create the cassette directory '" .. notdir:gsub("%p", "%%%0") .. "/sub'", err)
    st, _, err = H.specula({ "run", AGENT, "--query", "q", "--replay-io", H.tmpdir() .. "/absent", "--clock", "virtual" }, env())
    assert.are.equal(2, st)
    assert.matches("cassette '.-/absent': no such directory", err)
    st, _, err = H.specula({ "run", AGENT, "--query", "q", "--replay-io", notdir, "--miss", "maybe" }, env())
    assert.are.equal(2, st)
    assert.matches("%-%-miss must be error, live or skip", err)
    st, _, err = H.specula({ "run", AGENT, "--query", "q", "--record", H.tmpdir() .. "/v", "--clock", "virtual" }, env())
    assert.are.equal(2, st)
    assert.matches("%-%-record needs real calls to record", err)
  end)

  it("--miss error fails the call naming the request; skip never covers the committed path", function()
    if not H.need_node(pending) then return end
    local st, by, err = run(input({ "q1", "q9" }), { "--replay-io", rec_dir, "--clock", "virtual" },
      { CAS_NODE = "/nonexistent/node" })
    assert.are.equal(3, st, err)       -- a failed query
    assert.is_nil(by.q1.error, by.q1.error)
    assert.are.equal(recorded.q1.answer, by.q1.answer)
    assert.matches("ECASSETTE: POST http://127%.0%.0%.1:%d+/file%?path=plan%.sse&chunk=90&pause=15: not in the cassette",
      by.q9.error)
    st, by, err = run(input({ "q9" }), { "--replay-io", rec_dir, "--clock", "virtual", "--miss", "skip" },
      { CAS_NODE = "/nonexistent/node" })
    assert.are.equal(3, st, err)
    assert.matches("%-%-miss skip does not apply to a call on the committed path", by.q9.error)
  end)

  it("a speculator call the cassette lacks is a failed speculation under --miss error and skip", function()
    if not H.need_node(pending) then return end
    -- the same cassette without its speculator exchanges
    local dir = newdir()
    os.execute("mkdir -p " .. H.quote(dir))
    local kept = {}
    for line in H.read(rec_dir .. "/cassette-0001.jsonl"):gmatch("[^\n]+") do
      if not cjson.decode(line).kind or cjson.decode(line).kind ~= "spec" then kept[#kept + 1] = line end
    end
    H.tmpfile(dir:match("[^/]+$") .. "/cassette-0001.jsonl", table.concat(kept, "\n") .. "\n")
    local st, by, err = run(input(IDS), { "--replay-io", dir, "--clock", "virtual", "--miss", "error" },
      { CAS_NODE = "/nonexistent/node" })
    assert.are.equal(0, st, err)
    for _, id in ipairs(IDS) do
      assert.are.equal(recorded[id].answer, by[id].answer)
      assert.matches("^error,error$", verdicts(by[id]))
      assert.matches("speculator of 'lookup'", by[id].stages.hops[1].reason)
      assert.is_nil(by[id].stages.hops[1].reason:find("skipped", 1, true))
    end
    st, by, err = run(input(IDS), { "--replay-io", dir, "--clock", "virtual", "--miss", "skip" },
      { CAS_NODE = "/nonexistent/node" })
    assert.are.equal(0, st, err)
    for _, id in ipairs(IDS) do
      assert.are.equal(recorded[id].answer, by[id].answer)
      assert.matches("^error,error$", verdicts(by[id]))
      assert.matches("skipped %(%-%-miss skip%): a failed speculation", by[id].stages.hops[1].reason)
    end
  end)

  it("--miss live makes the real call and, with --record, adds it to a new cassette", function()
    if not H.need_node(pending) then return end
    if not server then
      server = H.server { files = files }
    end
    -- the server's port changed, so every request is new: q1 is all misses
    local dir2 = newdir()
    os.execute("cp -r " .. H.quote(rec_dir) .. " " .. H.quote(dir2))
    local live_base = server.base
    local st, by, err = run(input({ "q1" }), { "--replay-io", dir2, "--miss", "live", "--record", dir2 })
    assert.are.equal(0, st, err)
    assert.are.equal(recorded.q1.answer, by.q1.answer)
    assert.matches("made live", err)
    assert.is_string(H.read(dir2 .. "/cassette-0002.jsonl"))
    server.stop()
    server = nil
    st, by, err = run(input({ "q1" }), { "--replay-io", dir2, "--clock", "virtual" },
      { CAS_NODE = "/nonexistent/node", CAS_BASE = live_base })
    assert.are.equal(0, st, err)
    assert.are.equal(recorded.q1.answer, by.q1.answer)
    -- live calls need the real clock
    st, by, err = run(input({ "q1" }), { "--replay-io", dir2, "--miss", "live", "--clock", "virtual" })
    assert.are.equal(2, st)
    assert.matches("%-%-miss live makes real calls: it needs the real clock", err)
  end)

  it("a recording killed midway still loads, drops its cut-off last line and replays up to the cut #slow", function()
    if not H.need_node(pending) then return end
    server = server or H.server { files = files }
    local kbase = server.base
    local ids = {}
    for i = 1, 40 do ids[i] = "k" .. i end
    local inp = input(ids)
    local dir = newdir()
    local pidf = H.tmpfile("rec.pid")
    local parts = {}
    for k, v in pairs(env()) do parts[#parts + 1] = k .. "=" .. H.quote(v) end
    os.execute(table.concat(parts, " ") .. " sh -c " .. H.quote("echo $$ > " .. H.quote(pidf) .. "; exec "
      .. H.quote(H.bin) .. " run " .. H.quote(AGENT) .. " --input " .. H.quote(inp)
      .. " --concurrency 1 --quiet --out /dev/null --record " .. H.quote(dir)) .. " >/dev/null 2>&1 &")
    -- wait until a few queries are on tape (a count of lines, not a time)
    local path = dir .. "/cassette-0001.jsonl"
    local lines = 0
    for _ = 1, 600 do
      local t = H.read(path) or ""
      lines = select(2, t:gsub("\n", ""))
      if lines >= 60 then break end
      os.execute("sleep 0.05")
    end
    local pid = H.read(pidf):match("%d+")
    os.execute("kill -9 " .. pid)
    os.execute("sleep 0.2")
    assert.is_true(lines >= 60)
    -- a kill in the middle of a write: the last line loses its end
    local text = H.read(path)
    local f = assert(io.open(path, "w"))
    f:write(text:sub(1, #text - 25))
    f:close()
    local st, out, err = H.specula({ "cassette", "ls", dir })
    assert.are.equal(0, st, err)
    assert.matches("dropped a cut%-off last record", err)
    assert.matches("1 cut%-off line dropped", out)
    server.stop()
    server = nil
    local st2, by, err2 = run(inp, { "--replay-io", dir, "--clock", "virtual", "--concurrency", "1" },
      { CAS_NODE = "/nonexistent/node", CAS_BASE = kbase })
    assert.are.equal(3, st2, err2)          -- queries after the cut fail
    assert.are.equal("Sunny in Françe | weather in Paris | slow done: k1:16", by.k1.answer)
    assert.matches("not in the cassette", by.k40.error)
  end)
end)

describe("specula predictors", function()
  -- search(q=a), search(q=a), open(id=7), four times: after the first, an
  -- order-2 context tells the second search from the open; one action of
  -- context (pattern) cannot, and its tie goes to "open" by name
  local lines = {}
  for i = 1, 4 do
    lines[i] = cjson.encode({ id = "t" .. i, answer = "x", trajectory = {
      { action = { tool = "search", args = { q = "a" } }, observation = "1" },
      { action = { tool = "search", args = { q = "a" } }, observation = "2" },
      { action = { tool = "open", args = { id = 7 } }, observation = "3" } } })
  end
  local results = H.tmpfile("traj.jsonl", table.concat(lines, "\n") .. "\n")

  it("replays committed histories online through each predictor: top-1, top-3 and tool hit rates", function()
    local st, out, err = H.specula({ "predictors", results, "--predictor", "pattern", "--predictor", "ngram:3", "--json" })
    assert.are.equal(0, st, err)
    local r = cjson.decode(out)
    assert.are.equal(12, r.steps)
    local p, n = r.predictors[1], r.predictors[2]
    assert.are.same({ "pattern", 0, 3, 6 }, { p.predictor, p.top1, p.top3, p.tool_top1 })
    assert.are.same({ "ngram:3", 3, 3, 9 }, { n.predictor, n.top1, n.top3, n.tool_top1 })
    -- a predictor from a file: always guesses search(q=a)
    local f = H.tmpfile("guess.lua", "return function() return { { tool = 'search', args = { q = 'a' }, confidence = 1 } } end")
    st, out = H.specula({ "predictors", results, "--predictor", f, "--json" })
    assert.are.equal(0, st)
    assert.are.equal(8, cjson.decode(out).predictors[1].top1)
    st, out, err = H.specula({ "predictors", results, "--predictor", "ngram:1" })
    assert.are.equal(2, st)
    assert.matches("ngram:N needs N >= 2", err)
    st, out, err = H.specula({ "predictors", H.tmpdir() .. "/none.jsonl" })
    assert.are.equal(1, st)
    assert.matches("no such file or directory", err)
  end)
end)

describe("examples/cassette", function()
  local EX = H.root .. "/examples/cassette"
  local readme = assert(H.read(EX .. "/README.md"))

  it("replays offline under the policies its README shows, with the answers the recording had", function()
    local answers
    for _, policy in ipairs({ { "--k", "inf" }, { "--k", "1" }, { "--mode", "sequential" } }) do
      assert.is_not_nil(readme:find("--clock virtual " .. policy[1] .. " " .. policy[2], 1, true))
      counter = counter + 1
      local out = H.tmpdir() .. "/ex" .. counter .. ".jsonl"
      -- no CAS_BASE: the recorded URL; CAS_NODE cannot start: nothing is started
      local st, _, err = H.specula({ "run", EX .. "/agent.lua", "--input", EX .. "/queries.jsonl", "--replay-io",
        EX .. "/tape", "--clock", "virtual", policy[1], policy[2], "--out", out },
        { OPENAI_API_KEY = "any", SEARCH_KEY = "any", CAS_NODE = "/nonexistent/node", SPECULA_SOURCE_DIR = H.root })
      assert.are.equal(0, st, err)
      assert.matches("%(0 on the committed path", err)
      local got = {}
      for _, r in ipairs(H.jsonl(H.read(out))) do got[r.id] = r.answer end
      for i = 1, 6 do
        assert.are.equal("Sunny in Françe | weather in Paris | slow done: city " .. i .. ":16", got["c" .. i])
      end
      answers = got
    end
    assert.is_table(answers)
    -- one replay under several configurations (each starts the tape over)
    local st, out, err = H.specula({ "run", EX .. "/agent.lua", "--input", EX .. "/queries.jsonl", "--replay-io",
      EX .. "/tape", "--clock", "virtual", "--compare", "sequential,spechop:k=inf,spechop:k=2", "--out", "-" },
      { OPENAI_API_KEY = "any", SEARCH_KEY = "any", CAS_NODE = "/nonexistent/node", SPECULA_SOURCE_DIR = H.root })
    assert.are.equal(0, st, err)
    local n = 0
    for line in out:gmatch("[^\n]+") do
      local r = line:sub(1, 1) == "{" and cjson.decode(line)
      if r then n = n + 1 end
      r = r or {}
      assert.is_nil(r.error)
      if r.id then assert.matches("^Sunny in Françe | weather in Paris | slow done: city %d:16$", r.answer) end
    end
    assert.are.equal(18, n)
    assert.matches("%(0 on the committed path", err)
    -- cassette show: each MCP call with its arguments, scrubbed; an
    -- unknown --kind is a usage error naming the kinds, not an empty list
    st, out = H.specula({ "cassette", "show", EX .. "/tape", "--kind", "mcp", "--secret-env", "CAS_TAG" },
      { CAS_TAG = "city 2:16" })
    assert.are.equal(0, st)
    assert.matches('mcp ts tools/call slow {"ms":600,"tag":"city 1:16"}\tok', out)
    assert.matches('mcp ts tools/call slow {"ms":600,"tag":"%[redacted%]"}\tok', out)
    assert.is_nil(out:find("city 2:16", 1, true))
    local _, err2
    st, _, err2 = H.specula({ "cassette", "show", EX .. "/tape", "--kind", "htp" })
    assert.are.equal(2, st)
    assert.matches("unknown kind 'htp' %(the kinds: http, mcp, spec, obs, job, commit%)", err2)
    st, out = H.specula({ "verifiers", EX .. "/tape" })
    assert.are.equal(0, st)
    -- the table in the README is what the lab prints for the tape
    local tbl = out:match("\n(alpha.-)\n$")
    assert.is_not_nil(tbl, out)
    assert.is_not_nil(readme:find(tbl, 1, true), out)
    -- and the predictor lab's tables
    st, out = H.specula({ "predictors", EX .. "/tape" })
    assert.are.equal(0, st)
    assert.matches("\nngram%s+tool_name", out)
    assert.is_not_nil(readme:find(out, 1, true), out)
  end)

  it("cassette show prints an HTTP request's body, scrubbed before it is cut", function()
    local st, out = H.specula({ "cassette", "show", EX .. "/tape", "--kind", "http", "--query", "c1" })
    assert.are.equal(0, st)
    assert.matches('\nhttp  #1\tPOST http://127%.0%.0%.1:%d+/file%?path=plan%.sse&chunk=90&pause=150 {"messages":%[{"content":'
      .. '"city 1","role":"user"}%],"model":"gpt%-test","stream":true,"stream_options":{"include_usage":true}}\t',
      "\n" .. out)
    -- a long body is cut at 160 bytes; a secret across the cut goes whole
    -- (scrubbed first), as does one in a call the recording cancelled
    local secret = "SECRETVALUE-1234567890abcdef"
    local body = '{"prompt":"' .. string.rep("a", 140) .. secret .. string.rep("b", 100) .. '"}'
    local dir = H.tmpdir() .. "/bodies"
    os.execute("mkdir -p " .. H.quote(dir))
    H.tmpfile("bodies/cassette-0001.jsonl", table.concat({
      cjson.encode({ specula_cassette = 4, clock = "real" }),
      cjson.encode({ kind = "http", key = "POST http://127.0.0.1:9/gen\n" .. body, n = 1, ms = 3,
        meta = { query = "q1" }, req = { method = "POST", url = "http://127.0.0.1:9/gen", body = body },
        res = { status = 200, body = "ok" } }),
      cjson.encode({ kind = "http", key = 'POST http://127.0.0.1:9/ask\n{"q":"' .. secret .. '"}', n = 1,
        start = true, meta = { query = "q1" } }) }, "\n") .. "\n")
    st, out = H.specula({ "cassette", "show", dir })
    assert.are.equal(0, st)
    assert.is_not_nil(out:find(" " .. body:sub(1, 157) .. "...\t200\t", 1, true), out)
    st, out = H.specula({ "cassette", "show", dir, "--secret-env", "CAS_SECRET" }, { CAS_SECRET = secret })
    assert.are.equal(0, st)
    local cut = (body:sub(1, 151) .. "[redacted]" .. body:sub(152 + #secret)):sub(1, 157)
    assert.is_not_nil(out:find("POST http://127.0.0.1:9/gen " .. cut .. "...\t200\t", 1, true), out)
    assert.is_not_nil(out:find('POST http://127.0.0.1:9/ask {"q":"[redacted]"}\tcancelled\t', 1, true), out)
    assert.is_nil(out:find("SECRE", 1, true), out)
  end)
end)

describe("specula cassette ls", function()
  -- --json is listed for ls as for show and stats: one JSON object, the
  -- same files and counts as the table (it was ignored: the table came out)
  it("--json gives the files and counts of the table as one JSON object", function()
    local tape = H.root .. "/examples/cassette/tape"
    local st, text, err = H.specula({ "cassette", "ls", tape })
    assert.are.equal(0, st, err)
    local nex, njob, nfiles = text:match("(%d+) exchanges and (%d+) job timings in (%d+) file")
    local lines = text:match("cassette%-0001%.jsonl\t(%d+) lines")
    assert.is_not_nil(nex, text)
    local out
    st, out, err = H.specula({ "cassette", "ls", tape, "--json" })
    assert.are.equal(0, st, err)
    local ok, r = pcall(cjson.decode, out)
    assert.is_true(ok, out)
    assert.are.equal(tape, r.dir)
    assert.are.equal(tonumber(nex), r.exchanges)
    assert.are.equal(tonumber(njob), r.job_timings)
    assert.are.equal(tonumber(nfiles), #r.files)
    assert.matches("cassette%-0001%.jsonl$", r.files[1].path)
    assert.are.equal(tonumber(lines), r.files[1].records)
    assert.are.equal(0, r.files[1].dropped)
    assert.is_string(r.files[1].created)
    assert.is_string(r.files[1].clock)
  end)
end)

describe("specula cassette --kind and --query", function()
  local tape = H.root .. "/examples/cassette/tape"

  -- the rows of the table: { kind = { exchanges, queries } }
  local function rows(text)
    local t = {}
    for kind, n, q in text:gmatch("\n(%a+)%s+(%d+)%s+%d+%s+%d+%s+%d+%s+(%d+)") do t[kind] = { tonumber(n), tonumber(q) } end
    return t
  end

  -- --kind and --query were options of show only (stats refused them as
  -- unknown): they filter the exchanges stats counts as they do show's
  it("--kind and --query count only those exchanges, as show lists them", function()
    local st, out, err = H.specula({ "cassette", "stats", tape })
    assert.are.equal(0, st, err)
    local all = rows(out)
    assert.is_not_nil(all.http, out)
    st, out, err = H.specula({ "cassette", "stats", tape, "--kind", "http" })
    assert.are.equal(0, st, err)
    assert.are.same({ http = all.http }, rows(out))
    st, out, err = H.specula({ "cassette", "stats", tape, "--query", "c1" })
    assert.are.equal(0, st, err)
    local one = rows(out)
    for _, kind in ipairs({ "http", "job", "mcp", "obs", "spec" }) do
      assert.is_not_nil(one[kind], out)
      assert.are.equal(1, one[kind][2], out)
      -- show --query lists as many of that kind
      local _, shown = H.specula({ "cassette", "show", tape, "--query", "c1", "--kind", kind })
      local n = 0
      for _ in shown:gmatch("[^\n]+") do n = n + 1 end
      assert.are.equal(n, one[kind][1], kind .. ": " .. shown)
    end
    st, out, err = H.specula({ "cassette", "stats", tape, "--query", "c1", "--kind", "mcp", "--json" })
    assert.are.equal(0, st, err)
    local r = cjson.decode(out)
    assert.are.equal(one.mcp[1], r.exchanges)
    assert.are.equal(1, #r.kinds)
    assert.are.equal("mcp", r.kinds[1].kind)
  end)

  it("ls refuses --kind and --query, and stats --kind commit, naming the option and the subcommand", function()
    for _, c in ipairs({
      { { "ls", tape, "--kind", "http" }, "specula cassette: --kind is an option of cassette show and stats, not of ls" },
      { { "ls", tape, "--query", "c1" }, "specula cassette: --query is an option of cassette show and stats, not of ls" },
      { { "stats", tape, "--kind", "commit" }, "specula cassette: --kind commit: stats counts exchanges and jobs, "
        .. "not commits (`specula cassette show DIR --kind commit` lists them)" },
    }) do
      local st, out, err = H.specula({ "cassette", unpack(c[1]) })
      assert.are.equal(2, st, err)
      assert.are.equal("", out)
      assert.matches(c[2], err, 1, true)
      assert.matches("usage: specula cassette ls|show|stats DIR [options]", err, 1, true)
    end
  end)
end)
