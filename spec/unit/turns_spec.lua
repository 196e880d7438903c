-- Unit tests for specula.convtraces.turns: a timed conversation as columns
-- and the steps made from it (what agents.conversation reads of the
-- equivalent messages; whatif_figures_spec checks the figures end to end).
local turns = require "specula.convtraces.turns"
local json = require "specula.json"

-- prompt; a turn of one call; a turn of two calls (the second answered by
-- the first's id: it takes that result); a text turn the person answers;
-- a last turn of one call (the conversation ends on calls)
local function sample()
  local T = turns.new()
  turns.user(T, "go")
  turns.turn(T, "", 1000, { { id = "a", tool = "Read", args = { path = "x" }, obs = "rx", tms = 200, own = 200, off = 0 } })
  turns.turn(T, "both", 500, {
    { id = "b", tool = "Grep", args = '{"q":"y"}', obs = "gy", tms = 300, own = 300, off = 0 },
    { id = "b", tool = "Read", args = { path = "z" }, obs = "rz", tms = 100, own = 350, off = 50 },
    { id = "c", tool = "", args = {}, obs = "none" } })   -- no tool name: not a call
  turns.turn(T, "which one?", 700, nil)
  turns.user(T, "the first")
  turns.user(T, "please")
  turns.turn(T, "", 400, { { id = "d", tool = "Read", args = "not json", obs = "rd", tms = 50, own = 50, off = 0 } })
  return T
end

describe("convtraces.turns", function()
  it("keeps calls with a tool name, their arguments as the replay reads them, the widest turn", function()
    local T = sample()
    assert.equals(4, T.n)
    assert.equals(4, T.nc)
    assert.equals(3, T.widest)
    assert.same({ "Read", "Grep" }, { T.tools[1], T.tools[2] })
    assert.equals(json.canonical({ q = "y" }), T.key[2])
    -- (a text that is not JSON reads as no arguments; JSON that is not an
    -- object or list as { _text = it })
    assert.equals("{}", T.key[4])
    local U = turns.new()
    turns.turn(U, "", 0, { { id = "e", tool = "Bash", args = "42", obs = "" } })
    assert.equals(json.canonical({ _text = "42" }), U.key[1])
    -- the second call of turn 2 is answered by id "b": the first result with it
    assert.equals("gy", T.obs[3])
    assert.equals("the first\nplease", T.said[3])
  end)

  it("makes steps: a call each, or a group a turn; a reply; the empty final answer after calls", function()
    local T = sample()
    local ix = turns.index(T, false)
    assert.equals(6, ix.n)   -- Read, Grep, Read, reply, Read, final ""
    local s1 = turns.step(T, ix, 1, "reply", nil)
    assert.same({ tool = "Read", key = json.canonical({ path = "x" }), obs = "rx", model_ms = 1000, name_ms = 1000,
                  tool_ms = 200, call_ms = 200, offset_ms = 0 }, s1)
    local s3 = turns.step(T, ix, 3, "reply", nil)
    assert.equals(0, s3.model_ms)   -- the turn's second call: the model's time went to the first
    local r = turns.step(T, ix, 4, "reply", nil)
    assert.is_true(r.reply)
    assert.equals("reply", r.tool)
    assert.equals(json.canonical({ text = "which one?" }), r.key)
    assert.equals("the first\nplease", r.obs)
    assert.same({ final = "", model_ms = 0 }, turns.step(T, ix, 6, "reply", nil))
    assert.is_nil(turns.step(T, ix, 7, "reply", nil))

    local gx = turns.index(T, true)
    assert.equals(5, gx.n)
    local g = turns.step(T, gx, 2, "reply", "group")
    assert.equals("group", g.tool)
    assert.equals(2, #g.members)
    assert.equals(400, g.tool_ms)   -- the longest: 50 ms after the decision, 350 ms
    assert.equals(json.encode(json.array({ "gy", "gy" })), g.obs)
    assert.same({ calls = { { tool = "Grep", args = { q = "y" } }, { tool = "Read", args = { path = "z" } } } },
      json.decode(g.key))
  end)

  it("ends on a text turn: that turn is the final answer", function()
    local T = turns.new()
    turns.turn(T, "hello", 300, nil)
    local ix = turns.index(T, true)
    assert.equals(1, ix.n)
    assert.same({ final = "hello", model_ms = 300 }, turns.step(T, ix, 1, "reply", "group"))
  end)

  it("finds the latest earlier result of a call, a group's members included, from the columns", function()
    local T = sample()
    local gx = turns.index(T, true)
    -- (the member answered by the group's first id: that result)
    assert.equals("gy", turns.find(T, gx, 4, "Read", json.canonical({ path = "z" }), "reply"))
    assert.equals("rx", turns.find(T, gx, 4, "Read", json.canonical({ path = "x" }), "reply"))
    assert.is_nil(turns.find(T, gx, 1, "Read", json.canonical({ path = "z" }), "reply"))
    assert.equals("the first\nplease", turns.find(T, gx, 3, "reply", json.canonical({ text = "which one?" }), "reply"))
    assert.is_nil(turns.find(T, gx, 5, "Edit", "{}", "reply"))
  end)
end)
