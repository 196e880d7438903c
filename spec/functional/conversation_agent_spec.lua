-- The trace-driven agent (specula.agents.conversation) through the real
-- binary: recorded conversations replayed under the virtual clock with the
-- documented latency model, action speculation and SpecHop over them,
-- answers unchanged, and no write ever run early.
local H = require "support.helpers"
local cjson = require "cjson"
local SCRIPTS = H.root .. "/spec/functional/scripts/"

describe("conversation agent", function()
  local r
  setup(function()
    local dir = H.tmpdir() .. "/conv_agent"
    os.execute("mkdir -p " .. H.quote(dir))
    local st, out, err = H.specula({ "run", SCRIPTS .. "conversation_agent.lua", dir })
    assert.equals(0, st, err)
    r = H.last_json(out)
  end)

  it("replays recorded turns with the latency model: model time from output length, tool time per tool", function()
    local seq = r.configs.sequential
    assert.equals(0, seq.failed, seq.error)
    -- the sequential run takes exactly what the model says, turn by turn
    assert.equals(r.expected_ms, seq.wall)
    assert.equals(seq.wall, seq.standard)
  end)

  it("repeats: a second process gives the same figures, the learned predictor's included", function()
    local dir = H.tmpdir() .. "/conv_agent2"
    os.execute("mkdir -p " .. H.quote(dir))
    local st, out, err = H.specula({ "run", SCRIPTS .. "conversation_agent.lua", dir })
    assert.equals(0, st, err)
    assert.same(r.configs, H.last_json(out).configs)
  end)

  it("keeps every answer and trajectory of the sequential run, in every configuration", function()
    for name, c in pairs(r.configs) do
      assert.equals(0, c.failed, name .. ": " .. tostring(c.error))
      assert.equals(r.queries, c.same, name)
    end
  end)

  it("runs reads early and never a write: the policy forbids what the predictor proposes", function()
    for name, c in pairs(r.configs) do
      -- counted where calls execute (the agent's tools) and at the gate
      assert.is_nil(c.early.reroute, name)
      assert.is_nil(c.early.reply, name)
      assert.equals(0, c.gate.reroute.early_full, name)
      assert.equals(0, c.gate.reply.early_full, name)
    end
    -- the oracle proposed every reroute, and the gate said no each time
    assert.equals(2 * r.queries, r.configs.action.gate.reroute.forbid)
    assert.is_true(r.configs.action.early.track_parcel > 0)
  end)

  it("hides latency: predicted reads promoted, SpecHop threads ahead, both together fastest", function()
    local seq, act, hop, both = r.configs.sequential, r.configs.action, r.configs.spechop, r.configs.both
    -- the oracle's guesses of the two reads of each conversation are right
    assert.equals(2 * r.queries, act.promoted)
    assert.is_true(act.wall < seq.wall)
    assert.is_true(hop.wall < seq.wall)
    assert.is_true(both.wall < act.wall and both.wall < hop.wall)
    assert.is_true(act.wasted > 0)
  end)

  it("gives the predictor the conversation the model saw at each turn, and the tools", function()
    local seen = {}
    for _, s in ipairs(r.shown) do
      if s.id == "desk100" and not seen[s.hop] then seen[s.hop] = s end
    end
    -- system + user; then each call and its result; the reply and the user's answer
    local want = { { 2, "user" }, { 4, "result" }, { 6, "result" }, { 8, "user" }, { 10, "result" } }
    for hop, w in ipairs(want) do
      assert.same(w, { seen[hop - 1].n, seen[hop - 1].last })
      assert.is_true(seen[hop - 1].tools)
    end
  end)

  it("with the learned predictor trained on other conversations: hits, online learning, no early write", function()
    local l = r.configs.learned
    assert.equals(r.queries, l.same)
    assert.equals(2 * r.queries, l.promoted)
    assert.equals(r.queries, r.learned_online)
    assert.is_nil(l.early.reroute)
    assert.is_true(l.gate.reroute.forbid > 0)
  end)
end)

describe("conversation agent: input and options", function()
  local function conv_file()
    return H.tmpfile("convs.jsonl", cjson.encode({ id = "c1", messages = {
      { role = "user", content = "look up 42" },
      { role = "assistant", content = cjson.null, tool_calls = { { id = "a", type = "function",
        ["function"] = { name = "lookup", arguments = "{\"n\":42}" } } } },
      { role = "tool", tool_call_id = "a", content = "forty-two" },
      { role = "assistant", content = "It is forty-two." } } }) .. "\n")
  end

  it("runs from the command line over a conversations file (its records carry the messages)", function()
    local f = conv_file()
    local script = H.tmpfile("conv_agent.lua", "local specula = require 'specula'\n"
      .. "return specula.agents.conversation{ file = " .. string.format("%q", f) .. ", latency = { model = "
      .. "{ base_ms = 100, per_token_ms = 10 }, tools = { lookup = 50 } }, policy = { lookup = 'full' } }\n")
    local out = H.tmpfile()
    local st, _, err = H.specula({ "run", script, "--input", f, "--clock", "virtual", "--mode", "sequential",
      "--out", out, "--quiet" })
    assert.equals(0, st, err)
    local rec = H.jsonl(H.read(out))[1]
    assert.equals("It is forty-two.", rec.answer)
    assert.equals("forty-two", rec.trajectory[1].observation)
    -- the call: 100 + 10 x ceil((6 + 8) / 4) = 140 (name and arguments); the lookup 50; the answer
    -- (16 characters) 100 + 10 x 4 = 140
    assert.equals(330, rec.stats.wall_ms)
    -- with the learned predictor named on the command line: the same answer, and the records say so
    local out2 = H.tmpfile()
    st, _, err = H.specula({ "run", script, "--input", f, "--clock", "virtual", "--mode", "sequential",
      "--predictor", "learned", "--out", out2, "--quiet" })
    assert.equals(0, st, err)
    local rec2 = H.jsonl(H.read(out2))[1]
    assert.same(rec.trajectory, rec2.trajectory)
    assert.equals("learned", rec2.provenance.config.predictor)
    st, _, err = H.specula({ "run", script, "--input", f, "--clock", "virtual", "--predictor", "learned:absent.json" })
    assert.equals(2, st)
    assert.matches("no model file 'absent.json'", err)
  end)

  it("with parallel = true, runs a turn's calls side by side: one step, the longest call", function()
    local call = function(id, city)
      return { id = id, type = "function", ["function"] = { name = "weather", arguments = cjson.encode({ city = city }) } }
    end
    local conv = { id = "w", messages = {
      { role = "user", content = "weather in Paris, Lyon and Nice?" },
      { role = "assistant", content = "", tool_calls = { call("a", "Paris"), call("b", "Lyon"), call("c", "Nice") } },
      { role = "tool", tool_call_id = "a", content = "sun" }, { role = "tool", tool_call_id = "b", content = "rain" },
      { role = "tool", tool_call_id = "c", content = "wind" },
      { role = "assistant", content = "Sun, rain, wind." } } }
    local f = H.tmpfile("par.jsonl", cjson.encode(conv) .. "\n")
    local function wall(parallel)
      local script = H.tmpfile("par_agent.lua", "local specula = require 'specula'\nreturn specula.agents.conversation{ "
        .. "file = " .. string.format("%q", f) .. ", parallel = " .. tostring(parallel) .. ", latency = { model = { base_ms = 100, per_token_ms = 0 }, "
        .. "tools = { default_ms = 300 } } }\n")
      local out = H.tmpfile()
      local st, _, err = H.specula({ "run", script, "--input", f, "--clock", "virtual", "--mode", "sequential",
                                     "--out", out, "--quiet" })
      assert.equals(0, st, err)
      local rec = H.jsonl(H.read(out))[1]
      assert.equals("Sun, rain, wind.", rec.answer)
      return rec.stats.wall_ms, rec.stats.hops
    end
    local w, hops = wall(false)
    assert.equals(3, hops)
    assert.is_true(math.abs(w - (100 + 3 * 300 + 100)) < 1, w)
    w, hops = wall(true)
    assert.equals(1, hops)
    assert.is_true(math.abs(w - (100 + 300 + 100)) < 1, w)
  end)

  it("says what is wrong with its options and its input", function()
    local f = conv_file()
    local function try(opts)
      local script = H.tmpfile("bad_agent.lua", "local specula = require 'specula'\nreturn specula.agents.conversation"
        .. opts .. "\n")
      return H.specula({ "run", script, "--input", f, "--clock", "virtual" })
    end
    local st, _, err = try("{ latency = { model = { per_token_ms = -1 } } }")
    assert.are_not.equal(0, st)
    assert.matches("latency.model.per_token_ms must be a number >= 0", err)
    st, _, err = try("{ latency = { model = { speed = 3 } } }")
    assert.matches("latency.model.speed is not a setting", err)
    st, _, err = try("{ latency = { tools = { lookup = { 'lognormal', -1, 0 } } } }")
    assert.matches("lognormal needs mean > 0", err)
    st, _, err = try("{ speculate = 'maybe' }")
    assert.matches("speculate must be", err)
    st, _, err = try("{ parallel = 'yes' }")
    assert.matches("parallel must be a boolean", err)
    -- a query whose conversation it does not have
    st, _, err = try("{ file = " .. string.format("%q", f) .. " }")
    assert.equals(0, st, err)
    local q = H.tmpfile("q.jsonl", cjson.encode({ id = "nobody", query = "hi" }) .. "\n")
    local script = H.tmpfile("ok_agent.lua", "local specula = require 'specula'\nreturn specula.agents.conversation{ "
      .. "file = " .. string.format("%q", f) .. " }\n")
    local out = H.tmpfile()
    st, _, err = H.specula({ "run", script, "--input", q, "--clock", "virtual", "--out", out, "--quiet" })
    assert.equals(3, st, err)
    assert.matches("no recorded conversation for query 'nobody'", H.jsonl(H.read(out))[1].error)
  end)
end)
