-- The predictor lab beyond specula's own records: tool-call histories from
-- conversations in the OpenAI and Anthropic messages formats (hostile lines
-- included), the draft predictor, and what the EV gate would fire, waste
-- and save at each trigger on a cassette's recorded latencies.
local H = require "support.helpers"
local cjson = require "cjson"

local FIX = H.root .. "/spec/fixtures/conversations"
local TAPE = H.root .. "/examples/cassette/tape"

-- A predictor file that always guesses open(id=7) with confidence 1.
local function open7()
  return H.tmpfile("open7.lua", "return function() return { { tool = 'open', args = { id = 7 }, confidence = 1 } } end")
end

describe("specula predictors on conversations", function()
  it("reads OpenAI chat messages: tool_calls with JSON-string arguments, tool results by tool_call_id", function()
    local st, out, err = H.specula({ "predictors", FIX .. "/openai.jsonl", "--predictor", "pattern",
      "--predictor", open7(), "--json" })
    assert.are.equal(0, st, err)
    local r = cjson.decode(out)
    -- 4 conversations with calls (one without any, three bad lines skipped)
    assert.are.equal(4, r.trajectories)
    assert.are.equal(8, r.steps)
    -- every conversation's second call is open(id=7): its arguments were decoded
    assert.are.equal(4, r.predictors[2].top1)
    -- pattern: the tool of both calls of the last three conversations, but
    -- for the call after a search whose arguments were not JSON
    assert.are.same({ 0, 5 }, { r.predictors[1].top1, r.predictors[1].tool_top1 })
    assert.matches("openai.jsonl:3: not JSON", err)
    assert.matches("openai.jsonl:4: call 'search': arguments are not a JSON object: kept as text", err)
    assert.matches("openai.jsonl:4: a tool result without tool_call_id: matched to the earliest unanswered call", err)
    assert.matches("openai.jsonl:5: not a conversation", err)
    assert.matches("openai.jsonl:7: a tool call without a function name: skipped", err)
    assert.is_nil(err:find("openai.jsonl:6", 1, true))   -- a conversation without calls is fine
    -- timing needs recorded latencies
    assert.are.equal(0, r.timed_steps)
    assert.is_nil(r.predictors[1].start)
    st, out = H.specula({ "predictors", FIX .. "/openai.jsonl" })
    assert.are.equal(0, st)
    assert.matches("fired, wasted and saved: unavailable", out)
  end)

  it("reads Anthropic messages: tool_use and tool_result blocks", function()
    local st, out, err = H.specula({ "predictors", FIX .. "/anthropic.jsonl", "--predictor", open7(), "--json" })
    assert.are.equal(0, st, err)
    local r = cjson.decode(out)
    assert.are.equal(4, r.trajectories)
    assert.are.equal(8, r.steps)
    assert.are.equal(4, r.predictors[1].top1)
    assert.matches("anthropic.jsonl:3: not JSON", err)
    assert.matches("anthropic.jsonl:4: tool_use 'search': input is a string", err)
    assert.matches("anthropic.jsonl:4: a tool_use block without a name: skipped", err)
    assert.matches("anthropic.jsonl:4: a tool_result without tool_use_id", err)
    assert.matches("anthropic.jsonl:5: not a conversation", err)
    -- both files at once, and the format forced
    st, out = H.specula({ "predictors", FIX .. "/anthropic.jsonl", FIX .. "/openai.jsonl", "--format", "anthropic",
      "--json" })
    assert.are.equal(1, st)
    st, out, err = H.specula({ "predictors", FIX .. "/openai.jsonl", "--format", "anthropic" })
    assert.are.equal(1, st)
    assert.matches("openai.jsonl: no usable conversation", err)
    st, out = H.specula({ "predictors", FIX .. "/anthropic.jsonl", FIX .. "/openai.jsonl", "--json" })
    assert.are.equal(0, st)
    assert.are.equal(16, cjson.decode(out).steps)
    st, out, err = H.specula({ "predictors", FIX .. "/openai.jsonl", "--format", "xml" })
    assert.are.equal(2, st)
    assert.matches("--format must be openai, anthropic, results or cassette", err)
    st, out, err = H.specula({ "predictors", FIX .. "/openai.jsonl", "--format", "cassette" })
    assert.are.equal(1, st)
    assert.matches("needs a cassette directory", err)
  end)

  it("survives hostile lines: huge strings, deep nesting, binary, no usable line at all", function()
    local big = string.rep("x", 3 * 1024 * 1024)
    local lines = {
      cjson.encode({ messages = {
        { role = "assistant", tool_calls = { { id = "1", ["function"] = { name = "search", arguments = big } } } },
        { role = "tool", tool_call_id = "1", content = big },
        { role = "assistant", tool_calls = { { id = "2", ["function"] = { name = big, arguments = "{}" } } } },
        { role = "assistant", tool_calls = { { id = "3", ["function"] = { name = "open", arguments = "{\"id\":7}" } } } },
      } }),
      string.rep("[", 5000),
      "\255\254 binary",
      cjson.encode({ messages = { { role = "tool", tool_call_id = "nobody", content = "x" } } }),
      cjson.encode({ messages = { { role = "assistant", tool_calls = "many" } } }),
    }
    local f = H.tmpfile("hostile.jsonl", table.concat(lines, "\n") .. "\n")
    local st, out, err = H.specula({ "predictors", f, "--predictor", open7(), "--json" })
    assert.are.equal(0, st, err)
    local r = cjson.decode(out)
    assert.are.equal(3, r.steps)
    assert.are.equal(1, r.predictors[1].top1)
    assert.matches("hostile.jsonl:2: not JSON", err)
    assert.matches("hostile.jsonl:3: not JSON", err)
    assert.matches("hostile.jsonl:4: a tool result with no call to answer", err)
    assert.matches("hostile.jsonl:5: tool_calls is not a list", err)
    assert.is_true(#err < 10000, "a warning quotes a huge string")
    -- nothing usable: an error naming the file
    local g = H.tmpfile("nothing.jsonl", "{oops\n" .. cjson.encode({ messages = { { role = "user", content = "hi" } } })
      .. "\n")
    st, out, err = H.specula({ "predictors", g })
    assert.are.equal(1, st)
    assert.matches("nothing.jsonl: no usable conversation %(2 lines, 1 skipped", err)
    assert.are.equal("", out)
  end)
end)
