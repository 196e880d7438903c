-- A misbehaving script never costs another query's record: the user's
-- code (the agent's init/step/update, a tool, the predictor in every
-- method, learning and a restored state included) runs protected. Its
-- failure ends only what it belongs to: a query gets an error record, a
-- predictor is disabled with one warning; every message names the script
-- and line, whatever was raised (nil, a number, a table, a table whose
-- __tostring fails), and a bare coroutine.yield() in a task is an error of
-- that task, not a run waiting forever.
local H = require "support.helpers"
local cjson = require "cjson"

local DIR = H.root .. "/spec/functional/scripts/misbehave/"
local AGENT, PRED = DIR .. "agent.lua", DIR .. "predictor.lua"
local AGENT_SHORT = "misbehave/agent.lua:"

local counter = 0
local function tmp(name)
  counter = counter + 1
  return H.tmpdir() .. "/mb" .. counter .. "-" .. name
end

local function input()
  local p = tmp("in.jsonl")
  local f = assert(io.open(p, "w"))
  for i, q in ipairs({ "a", "b", "c", "d" }) do f:write(cjson.encode({ id = "q" .. i, query = q }), "\n") end
  f:close()
  return p
end

-- Run the agent (extra args, env); returns status, records by id, stderr.
local function run(env, extra, out)
  local args = { "run", AGENT, "--input", input(), "--clock", "virtual", "--quiet", "--concurrency", "2" }
  for _, a in ipairs(extra or {}) do args[#args + 1] = a end
  if out then args[#args + 1] = "--out" args[#args + 1] = out end
  local st, so, se = H.specula(args, env)
  local text = out and (H.read(out) or "") or so
  local byid, n = {}, 0
  for _, r in ipairs(H.jsonl(text)) do byid[r.id] = r n = n + 1 end
  return st, byid, se, n
end

-- The queries other than q2 ("b") are all written, with their answers.
local function others_ok(byid, n)
  assert.equals(4, n)
  for i, q in ipairs({ "a", "b", "c", "d" }) do
    if q ~= "b" then
      assert.is_nil(byid["q" .. i].error)
      assert.equals(q .. ":seen1", byid["q" .. i].answer)
    end
  end
end

describe("a query whose own code fails", function()
  local cases = {
    { how = "nil", line = 8, says = "nil" },
    { how = "number", line = 9, says = "42" },
    { how = "table", line = 10, says = "table: " },
    { how = "badtostring", line = 12, says = "its __tostring failed" },
    { how = "init", line = 18, says = "its __tostring failed" },
    { how = "update", line = 27, says = "nil" },
    { how = "tool", line = 32, says = "table: " },
    { how = "yield", line = 7, says = "coroutine.yield() called directly in a specula task" },
  }
  for _, c in ipairs(cases) do
    it("(" .. c.how .. ") gets an error record naming the script and line; the others are all written", function()
      local st, byid, se, n = run({ MISBEHAVE = c.how })
      assert.equals(3, st, se)   -- some query failed
      assert.not_matches("error in error handling", se)
      others_ok(byid, n)
      local e = byid.q2.error
      assert.is_string(e)
      assert.is_nil(byid.q2.answer)
      -- the message itself says where (its first line), not only the traceback after it
      local first = e:match("^[^\n]*")
      assert.matches(AGENT_SHORT .. c.line .. ": ", first, 1, true)
      assert.matches(c.says, first, 1, true)
      assert.not_matches("error in error handling", e)
    end)
  end
end)

describe("a speculator or verifier that fails", function()
  local cases = {
    { how = "speculate", line = 36, says = "speculator failed: ", what = "nil" },
    { how = "verify", line = 40, says = "verifier error: ", what = "table: " },
  }
  for _, c in ipairs(cases) do
    it("(" .. c.how .. ") loses only that speculation, named by script and line in the hop; every record is written", function()
      local st, byid, se, n = run({ MISBEHAVE = c.how })
      assert.equals(0, st, se)
      others_ok(byid, n)
      assert.equals("b:seen1", byid.q2.answer)
      local reason = byid.q2.stages.hops[1].reason:match("^[^\n]*")
      assert.matches(c.says .. "[^\n]*" .. AGENT_SHORT:gsub("%p", "%%%0") .. c.line .. ": " .. c.what:gsub("%p", "%%%0"),
        reason)
      -- the other queries' speculations were accepted
      assert.equals("accepted", byid.q1.stages.hops[1].spec)
    end)
  end
end)

describe("a policy whose decide fails", function()
  local POLICY = DIR .. "policy.lua"
  local cases = {
    { how = "", line = 11, says = "a table error object (its __tostring failed)" },
    { how = "yield", line = 10, says = "coroutine.yield() called directly in a specula task" },
  }
  for _, c in ipairs(cases) do
    it("(" .. (c.how == "" and "raising a table" or c.how) .. ") forbids that call with one warning naming "
      .. "the script and line; every record is written", function()
      local st, byid, se, n = run({ POLICY_FAIL = c.how }, { "--policy", POLICY })
      assert.equals(0, st, se)
      others_ok(byid, n)
      assert.equals("b:seen1", byid.q2.answer)
      local _, count = se:gsub("warning: policy ", "")
      assert.equals(1, count, se)
      assert.matches("raised: [^\n]*misbehave/policy.lua:" .. c.line .. ": " .. c.says:gsub("%p", "%%%0")
        .. "[^\n]*counted as forbid", se)
    end)
  end

  -- before, a decision that is no decision was said without a script or line
  it("(returning a number) forbids that call with one warning naming where the decide function is", function()
    local st, byid, se, n = run({ POLICY_FAIL = "number" }, { "--policy", POLICY })
    assert.equals(0, st, se)
    others_ok(byid, n)
    local _, count = se:gsub("warning: policy ", "")
    assert.equals(1, count, se)
    assert.matches("returned number, expected full, warmup or forbid %(the policy at [^\n]*misbehave/policy.lua:9%)"
      .. " %(counted as forbid%)", se)
  end)

  it("a policy file that raises nil is refused before any query, naming the file and line", function()
    local st, _, se, n = run({ POLICY_FAIL = "load" }, { "--policy", POLICY })
    assert.equals(1, st, se)
    assert.equals(0, n)
    assert.matches("policy.lua raised: [^\n]*misbehave/policy.lua:5: nil", se)
  end)
end)

describe("a predictor that fails", function()
  local cases = {
    { fail = "observe", what = "observe_trajectory", line = 10, says = "table: " },
    { fail = "predict", what = "prediction", line = 23, says = "nil" },
  }
  -- before, a predictor that returned no list was warned about once and
  -- asked again at every step; and the warning named no script
  -- before, an infinite confidence went to the gate as it was, unsaid
  it("whose confidence is not in [0, 1] has it taken as 1 (or 0), said once; every record written", function()
    local out = tmp("out.jsonl")
    local st, byid, se, n = run({ PRED_FAIL = "confidence" }, { "--predictor", PRED }, out)
    assert.equals(0, st, se)
    assert.equals(4, n)
    for i, q in ipairs({ "a", "b", "c", "d" }) do assert.equals(q .. ":seen1", byid["q" .. i].answer) end
    local _, count = se:gsub("is not in %[0, 1%]", "")
    assert.equals(1, count, se)
    assert.matches("a prediction's confidence inf is not in [0, 1] (tool 'look'): taken as 1", se, 1, true)
  end)

  it("that returns no list is disabled like one that raises, the warning naming where it is defined", function()
    local out = tmp("out.jsonl")
    local st, byid, se, n = run({ PRED_FAIL = "number" }, { "--predictor", PRED }, out)
    assert.equals(0, st, se)
    assert.equals(4, n)
    for i, q in ipairs({ "a", "b", "c", "d" }) do assert.equals(q .. ":seen1", byid["q" .. i].answer) end
    local _, count = se:gsub("warning: the predictor's ", "")
    assert.equals(1, count, se)
    assert.matches("warning: the predictor's prediction failed: it returned number 42, not a list of [^\n]*"
      .. "%(the predictor at [^\n]*misbehave/predictor.lua:%d+%); the predictor is disabled for the rest of the run", se)
  end)
  for _, c in ipairs(cases) do
    it("in " .. c.what .. " is disabled with one warning naming the script and line; every record is written", function()
      local out = tmp("out.jsonl")
      local st, byid, se, n = run({ PRED_FAIL = c.fail }, { "--predictor", PRED }, out)
      assert.equals(0, st, se)
      assert.equals(4, n)
      for i, q in ipairs({ "a", "b", "c", "d" }) do assert.equals(q .. ":seen1", byid["q" .. i].answer) end
      local _, count = se:gsub("warning: the predictor's ", "")
      assert.equals(1, count, se)
      assert.matches("warning: the predictor's " .. c.what .. " failed: [^\n]*misbehave/predictor.lua:" .. c.line
        .. ": [^\n]*" .. c.says:gsub("%p", "%%%0") .. "[^\n]*disabled for the rest of the run", se)
      -- a disabled predictor keeps no state for a resume
      assert.is_nil(io.open(out .. ".predictor"))
    end)
  end

  it("under --compare is disabled in each configuration it fails in, with a warning each; every record is written",
    function()
    local out = tmp("out.jsonl")
    local st, _, se = run({ PRED_FAIL = "observe" }, { "--predictor", PRED, "--compare", "spechop:k=2,spechop:k=3" }, out)
    assert.equals(0, st, se)
    local recs = H.jsonl(H.read(out))
    assert.equals(8, #recs)
    for _, r in ipairs(recs) do assert.equals(r.query .. ":seen1", r.answer) end
    local _, count = se:gsub("warning: the predictor's observe_trajectory failed: [^\n]*misbehave/predictor.lua:10: ", "")
    assert.equals(2, count, se)
  end)

  it("file that raises as it loads is a usage error naming the file and line, before any query", function()
    local st, _, se, n = run({}, { "--predictor", DIR .. "predictor_load.lua" })
    assert.equals(2, st, se)
    assert.equals(0, n)
    assert.matches("predictor file '[^\n]*predictor_load.lua' raised: [^\n]*misbehave/predictor_load.lua:3: a table "
      .. "error object %(its __tostring failed%)", se)
  end)

  it("in state() loses only its saved state, with a warning naming the script and line", function()
    local out = tmp("out.jsonl")
    local st, byid, se, n = run({ PRED_FAIL = "state" }, { "--predictor", PRED }, out)
    assert.equals(0, st, se)
    others_ok(byid, n)
    assert.equals("b:seen1", byid.q2.answer)
    assert.matches("cannot write [^\n]*%.predictor %(the predictor's state%(%) failed: [^\n]*misbehave/predictor.lua:13: "
      .. "state%(%) broke%)", se)
  end)

  -- A run cut after two records, its FILE.predictor covering those two
  -- with the given state (as a run stopped there writes it).
  local function cut(state)
    local out = tmp("out.jsonl")
    local st, _, se = run({}, { "--predictor", PRED }, out)
    assert.equals(0, st, se)
    local lines = {}
    for l in H.read(out):gmatch("[^\n]+") do lines[#lines + 1] = l end
    local f = assert(io.open(out, "w"))
    f:write(lines[1], "\n", lines[2], "\n")
    f:close()
    local ps = cjson.decode(H.read(out .. ".predictor"))
    local _, sum = H.sh("printf '1\\n2' | sha256sum")
    for _, e in pairs(ps.runs) do e.learnt, e.n, e.state = sum:match("^(%x+)"), 2, state end
    f = assert(io.open(out .. ".predictor", "w"))
    f:write(cjson.encode(ps))
    f:close()
    return out
  end

  it("restored on resume from a state well formed but wrong is disabled; the batch goes on", function()
    local out = cut({ seen = "many" })
    local st, byid, se, n = run({}, { "--predictor", PRED }, out)
    assert.equals(0, st, se)
    assert.equals(4, n)
    for i, q in ipairs({ "a", "b", "c", "d" }) do assert.equals(q .. ":seen1", byid["q" .. i].answer) end
    assert.matches("the predictor's observe_trajectory failed: [^\n]*misbehave/predictor.lua:9: attempt to perform "
      .. "arithmetic", se)
  end)

  it("whose restore() raises on resume is disabled (not run half restored); the batch goes on", function()
    local out = cut({ seen = 2 })
    local st, byid, se, n = run({ PRED_FAIL = "restore" }, { "--predictor", PRED }, out)
    assert.equals(0, st, se)
    assert.equals(4, n)
    for i, q in ipairs({ "a", "b", "c", "d" }) do assert.equals(q .. ":seen1", byid["q" .. i].answer) end
    assert.matches("the predictor's restore failed: [^\n]*: the predictor's restore%(%) failed: [^\n]*"
      .. "misbehave/predictor.lua:17: restore%(%) broke", se)
    local _, count = se:gsub("warning: the predictor's ", "")
    assert.equals(1, count, se)
  end)
end)

describe("an MCP hook that fails", function()
  it("(a table whose __tostring raises, a bare yield) answers the server with an error naming the script and "
    .. "line; the client goes on", function()
    if not H.need_node(pending) then return end
    local MH = require "support.mcp_helpers"
    local script = tmp("hooks.lua")
    local f = assert(io.open(script, "w"))
    f:write(string.format([[
local specula = require "specula"
local json = specula.json
local c = assert(specula.mcp.connect{ command = { "node", %q }, name = "hooks",
  on_elicitation = function(params)
    if params.message == "yield" then coroutine.yield() end
    error(setmetatable({}, { __tostring = function() error("no") end }))
  end })
local out = {}
for _, m in ipairs({ "raise", "yield" }) do
  out[m] = assert(c:call("ask", { method = "elicitation/create", params = { message = m,
    requestedSchema = { type = "object", properties = { name = { type = "string" } } } } })).structuredContent
end
out.echo = assert(c:call("echo", { text = "still here" })).content[1].text
c:close()
print(json.encode(out))
]], MH.SERVER))
    f:close()
    local st, so, se = H.specula({ "run", script })
    assert.equals(0, st, se)
    local r = H.last_json(so)
    local base = script:match("[^/]+$"):gsub("%p", "%%%0")
    assert.matches("raised: [^\n]*" .. base .. ":6: a table error object %(its __tostring failed%)", r.raise.error.message)
    assert.matches("raised: [^\n]*" .. base .. ":5: coroutine%.yield%(%) called directly in a specula task",
      r.yield.error.message)
    assert.equals("echo: still here", r.echo)
    assert.not_matches("error in error handling", se)
  end)
end)
