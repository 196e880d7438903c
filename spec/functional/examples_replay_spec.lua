-- Every example agent that calls a tool records and replays: `specula run
-- SCRIPT ... --record DIR` on its documented input (a few queries, offline:
-- the simulated backends), then `--replay-io DIR --clock virtual` (the
-- default --miss error: a request not on tape fails its call) gives the
-- same answers, and the replay's cassette line says it served from the tape
-- (N > 0) with 0 misses on the committed path. A miss off that path, on a
-- speculative thread the replay discards, may happen: see record_replay.
--
-- Covered elsewhere, by the same checks: examples/cassette/agent.lua
-- (cassette_spec.lua, a tape recorded against the test server and the
-- example tape) and examples/mcp_files.lua (mcp_npm_spec.lua: the npm MCP
-- server). The exceptions, asserted below: examples/offline_world.lua is a
-- module the multi-hop examples share, not an agent; examples/cluster/
-- holds Slurm scripts that run examples/multihop_sim.lua (covered here)
-- under the virtual clock, where nothing is recorded; and
-- examples/real_traces/run.lua runs its experiment under the virtual clock
-- from Lua (specula.run), so there is nothing real to record: its agent,
-- examples/real_traces/agent.lua, is covered here.
local H = require "support.helpers"
local cjson = require "cjson"

local EX = H.root .. "/examples"
local n = 0

-- specula run ARGS --out FILE (env on top); returns status, the records'
-- answers in input order, the ids, stderr
local function run(args, env)
  n = n + 1
  local out = H.tmpdir() .. "/exrep" .. n .. ".jsonl"
  local a = { "run" }
  for _, x in ipairs(args) do a[#a + 1] = x end
  a[#a + 1] = "--out"
  a[#a + 1] = out
  local st, so, se = H.specula(a, env)
  local answers, ids = {}, {}
  for _, r in ipairs(H.jsonl(H.read(out) or "")) do
    assert.is_nil(r.error, tostring(r.id) .. ": " .. tostring(r.error))
    answers[#answers + 1] = r.answer
    ids[#ids + 1] = r.id
  end
  return st, answers, ids, se .. so
end

-- The replay's cassette line: served, not in it, of those on the committed
-- path.
local function counts(err)
  local line = err:match("specula: cassette: [^\n]*") or ""
  local served, missed, committed = line:match("^specula: cassette: (%d+) served from .-(%d+) not in it %((%d+) on the "
    .. "committed path")
  return tonumber(served), tonumber(missed), tonumber(committed)
end

-- Record SCRIPT with ARGS, replay it (between(): after the recording, to
-- stop what the replay must do without); returns the recorded answers.
-- The recording runs on the real clock, the replay on the virtual one, so
-- their schedules differ a little, and more on a loaded machine: a
-- speculative thread the replay runs further (or starts) than the
-- recording did asks for a speculator's or model's answer the recording
-- never got (nothing to serve). Such a miss is on a thread that is
-- discarded and changes no result; a miss on the committed path would.
-- So every replay must give the same answers with 0 misses on the
-- committed path, and a miss elsewhere is allowed only on a discarded
-- thread (seen: 1 speculator call of multihop_sim and of paste_research
-- at load 7, none on a quiet machine; the experiment agent, whose model
-- calls run speculatively too, has them on a quiet machine as well).
local function record_replay(script, args, env, between)
  n = n + 1
  local dir = H.tmpdir() .. "/extape" .. n
  local rec = { script }
  for _, x in ipairs(args) do rec[#rec + 1] = x end
  rec[#rec + 1] = "--record"
  rec[#rec + 1] = dir
  local st, want, ids, err = run(rec, env)
  assert.are.equal(0, st, err)
  assert.matches("cassette: %d+ recorded to", err)
  assert.is_true(#want > 0, err)
  if between then between() end
  local rep = { script }
  for _, x in ipairs(args) do rep[#rep + 1] = x end
  for _, x in ipairs({ "--replay-io", dir, "--clock", "virtual" }) do rep[#rep + 1] = x end
  local got, gids
  st, got, gids, err = run(rep, env)
  assert.are.equal(0, st, err)
  assert.are.same(ids, gids)
  assert.are.same(want, got)
  local served, missed, committed = counts(err)
  assert.is_not_nil(served, err)
  assert.is_true(served > 0, err)
  assert.are.equal(0, committed, err)
  assert.is_not_nil(missed, err)
  return want
end

local function input(lines)
  n = n + 1
  local l = {}
  for i, x in ipairs(lines) do l[i] = cjson.encode(x) end
  return H.tmpfile("exin" .. n .. ".jsonl", table.concat(l, "\n") .. "\n")
end

describe("examples record and replay: the same answers, 0 misses on the committed path", function()
  it("multihop_sim.lua: three queries at k = inf", function()
    local inp = input({ { id = "a", query = "who directed X?" }, { id = "b", query = "where was Y born?" },
                        { id = "c", query = "when was Z built?" } })
    local ans = record_replay(EX .. "/multihop_sim.lua", { "--input", inp, "--k", "inf" })
    assert.are.equal(3, #ans)
  end)

  it("multihop_qa.lua: its documented question offline, at k = 3", function()
    local ans = record_replay(EX .. "/multihop_qa.lua", { "--query",
      "In which country was the director of The Glass Orchard born?", "--set", "offline=1", "--k", "3" })
    assert.are.same({ "Estria" }, ans)
  end)

  it("tsss.lua: its documented question offline, at k = 3", function()
    local ans = record_replay(EX .. "/tsss.lua", { "--query",
      "In which country was the director of The Glass Orchard born?", "--set", "offline=1", "--k", "3" })
    assert.matches("Estria", ans[1])
  end)

  it("paste_research.lua: two queries, offline, with its predicted calls", function()
    local inp = input({ { id = "p1", query = "speculative tool calls" }, { id = "p2", query = "prompt caching" } })
    assert.are.equal(2, #record_replay(EX .. "/paste_research.lua", { "--input", inp }))
  end)

  it("draft_predictor.lua: two queries with the offline draft model", function()
    -- (not its header's --mode sequential: there its tools and its stand-in
    -- draft model, all Lua, ask nothing a tape serves; SpecHop adds the
    -- speculators' calls)
    local inp = input({ { id = "d1", query = "speculative tool calls" }, { id = "d2", query = "prompt caching" } })
    assert.are.equal(2, #record_replay(EX .. "/draft_predictor.lua", { "--input", inp }))
  end)
end)

describe("examples record and replay on the committed path: real conversations and real tools", function()
  it("real_traces/agent.lua: its two shortest conversations at k = 3", function()
    -- the development set's conversations with the fewest tool calls (at
    -- least two): on the real clock a model turn takes 0.5-1 s
    local convs = {}
    for l in assert(H.read(EX .. "/real_traces/data/tau-airline-gpt4o-dev.jsonl")):gmatch("[^\n]+") do
      local c = cjson.decode(l)
      local calls = 0
      for _, m in ipairs(c.messages or {}) do
        if type(m.tool_calls) == "table" then calls = calls + #m.tool_calls end
      end
      if calls >= 2 then convs[#convs + 1] = { line = l, calls = calls } end
    end
    table.sort(convs, function(a, b) return a.calls < b.calls or (a.calls == b.calls and a.line < b.line) end)
    n = n + 1
    local file = H.tmpfile("traces" .. n .. ".jsonl", convs[1].line .. "\n" .. convs[2].line .. "\n")
    local ans = record_replay(EX .. "/real_traces/agent.lua", { "--input", file, "--k", "3" },
      { REAL_TRACES = file })
    assert.are.equal(2, #ans)
  end)

  it("experiment/agent.lua: two questions, its model (model.js) and the MCP filesystem server", function()
    if not H.need_node(pending) then return end
    local why = require("support.deps").npm()
    if why and not H.require_or_pend(pending, why) then return end
    n = n + 1
    local w = H.tmpdir() .. "/experiment" .. n
    assert(os.execute("mkdir -p " .. H.quote(w) .. " && cp -R " .. H.quote(EX .. "/experiment/store") .. " "
      .. H.quote(w .. "/store")))
    -- the model on a free port, until the recording is done
    local log = w .. "/model.log"
    local p = assert(io.popen("node " .. H.quote(EX .. "/experiment/model.js") .. " --port 0 >" .. H.quote(log)
      .. " 2>&1 & echo $!"))
    local pid = tonumber(p:read("*l"))
    p:close()
    local port
    for _ = 1, 100 do
      port = (H.read(log) or ""):match("listening on http://127%.0%.0%.1:(%d+)")
      if port then break end
      os.execute("sleep 0.1")
    end
    local function stop() if pid then os.execute("kill " .. pid .. " 2>/dev/null"); pid = nil end end
    finally(stop)
    assert.is_not_nil(port, H.read(log))
    local q = {}
    for l in assert(H.read(EX .. "/experiment/questions.jsonl")):gmatch("[^\n]+") do
      if #q < 2 then q[#q + 1] = l end
    end
    local file = H.tmpfile("questions" .. n .. ".jsonl", table.concat(q, "\n") .. "\n")
    local ans = record_replay(EX .. "/experiment/agent.lua", { "--input", file, "--k", "inf" },
      { EXPERIMENT_STORE = w .. "/store", EXPERIMENT_PORT = port, EXPERIMENT_STORE_MS = "20",
        SPECULA_NPM_CACHE = require("support.deps").cache() }, stop)
    assert.are.equal(2, #ans)
  end)
end)

describe("the examples that are no agent or record nothing", function()
  it("offline_world.lua is a module of facts, not an agent", function()
    local code = 'package.path = ' .. string.format("%q", EX .. "/?.lua;") .. ' .. package.path\n'
      .. 'local W = require "offline_world"\nprint(type(W.FACTS), W.step, W.tools)\n'
    local st, out, err = H.run_lua(code)
    assert.are.equal(0, st, err)
    assert.are.equal("table\tnil\tnil\n", out)
  end)

  it("real_traces/run.lua runs its agent (agent.lua, above) under the virtual clock, from Lua", function()
    local s = assert(H.read(EX .. "/real_traces/run.lua"))
    assert.matches('local agent = setup.make_agent {', s, 1, true)
    assert.matches('o.queries, o.clock, o.concurrency = test, "virtual", 8', s, 1, true)
  end)

  it("examples/cluster runs multihop_sim.lua under the virtual clock", function()
    local s = assert(H.read(EX .. "/cluster/sweep.slurm"))
    assert.matches("AGENT=${AGENT:-examples/multihop_sim.lua}", s, 1, true)
    assert.matches("CLOCK=${CLOCK:-virtual}", s, 1, true)
  end)
end)
