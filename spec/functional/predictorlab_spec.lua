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

-- Each of `want` ("LINE: text") is among the warnings on stderr for file `name`.
local function warned(err, name, want)
  for _, w in ipairs(want) do
    assert.is_not_nil(err:find(name .. ":" .. w, 1, true), name .. ":" .. w .. " not in:\n" .. err)
  end
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
    warned(err, "openai.jsonl", { "3: not JSON", "4: call 'search': arguments are not a JSON object: kept as text",
      "4: a tool result without tool_call_id: matched to the earliest unanswered call",
      "5: not a conversation", "7: a tool call without a function name: skipped" })
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
    warned(err, "anthropic.jsonl", { "3: not JSON", "4: tool_use 'search': input is a string",
      "4: a tool_use block without a name: skipped", "4: a tool_result without tool_use_id", "5: not a conversation" })
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
    -- a mistake the lab finds (it returns it; the command prints the usage)
    st, out, err = H.specula({ "predictors", FIX .. "/openai.jsonl", "--predictor", "nosuch" })
    assert.are.equal(2, st)
    assert.matches("specula predictors: unknown predictor 'nosuch'", err, 1, true)
    assert.matches("\nusage: specula predictors CASSETTE_DIR", err, 1, true)
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
    warned(err, "hostile.jsonl", { "2: not JSON", "3: not JSON", "4: a tool result with no call to answer",
      "5: tool_calls is not a list" })
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

describe("specula predictors --predictor draft", function()
  local server
  teardown(function() if server then server.stop() end end)

  it("asks a live model for the next call, and says why it cannot run offline without one", function()
    local dir = H.tmpdir()
    local f = assert(io.open(dir .. "/draft.json", "w"))
    f:write(cjson.encode({ id = "x", object = "chat.completion", model = "draft", choices = { { index = 0,
      message = { role = "assistant", content = '{"tool": "open", "args": {"id": 7}}' }, finish_reason = "stop" } } }))
    f:close()
    server = H.server { files = dir }
    local st, out, err = H.specula({ "predictors", FIX .. "/openai.jsonl", "--predictor", "draft", "--draft-url",
      server.url("/file?path=draft.json"), "--json" })
    assert.are.equal(0, st, err)
    local r = cjson.decode(out).predictors[1]
    -- its three samples agree on open(id=7): right at every second call
    assert.are.same({ "draft", 4, 4 }, { r.predictor, r.top1, r.tool_top1 })
    st, out, err = H.specula({ "predictors", FIX .. "/openai.jsonl", "--predictor", "draft", "--draft-url",
      server.url("/status/500") })
    assert.are.equal(1, st)
    -- asked at every model turn: 8 calls and 5 answers in text, 3 samples each
    assert.matches("draft: 39 of 39 model requests failed", err)
    st, out, err = H.specula({ "predictors", FIX .. "/openai.jsonl", "--predictor", "draft" }, { DRAFT_BASE_URL = "" })
    assert.are.equal(2, st)
    assert.matches("none is available offline", err)
  end)
end)

-- The committed calls of the example tape, read here on their own: per
-- query and hop the `obs` line (tool, args, latency) and its step job's
-- length, and when a streamed tool name completed its event.
local function tape_steps()
  local recs = {}
  for line in io.lines(TAPE .. "/cassette-0001.jsonl") do recs[#recs + 1] = cjson.decode(line) end
  local jobs, names, steps = {}, {}, {}
  local function key(m) return m.query .. "/" .. m.thread .. "/" .. m.hop end
  for _, r in ipairs(recs) do
    local m = r.meta
    if m and (m.job == "start" or m.job == "advance") then
      if r.kind == "job" then jobs[key(m)] = r.ms end
      if r.kind == "http" and r.events then
        local text = ""
        for _, e in ipairs(r.events) do
          text = text .. e[2]
          if not names[key(m)] and text:find('"name":"lookup"[^\n]*\n\n') then names[key(m)] = r.off + e[1] end
        end
      end
    end
  end
  for _, r in ipairs(recs) do
    local m = r.meta
    if r.kind == "obs" and not m.speculative then
      steps[#steps + 1] = { query = m.query, hop = m.hop, tool = r.req.tool, args = r.req.args, tool_ms = r.ms,
                            step_ms = jobs[key(m)], name_at = names[key(m)] }
    end
  end
  return steps
end

describe("specula predictors: what would fire, waste and save", function()
  local steps = tape_steps()
  local want = {}
  for _, s in ipairs(steps) do want[s.query .. "/" .. s.hop] = { tool = s.tool, args = s.args } end
  -- right with 0.9, and a wrong call of the same tool with 0.1
  local oracle = H.tmpfile("oracle.lua", "local json = require 'specula.json'\nlocal W = json.decode([==["
    .. cjson.encode(want) .. "]==])\nreturn function(h, ctx)\n  local a = W[ctx.id .. '/' .. ctx.hop]\n"
    .. "  return { { tool = a.tool, args = a.args, confidence = 0.9 },\n"
    .. "           { tool = a.tool, args = { wrong = true }, confidence = 0.1 } }\nend\n")

  it("fires at step start and on the streamed tool name, saving the recorded latency each could hide", function()
    assert.are.equal(12, #steps)
    local save_start, save_name, named = 0, 0, 0
    for _, s in ipairs(steps) do
      assert.is_number(s.step_ms)
      save_start = save_start + math.min(s.tool_ms, s.step_ms)
      if s.name_at then
        named = named + 1
        save_name = save_name + math.min(s.tool_ms, s.step_ms - s.name_at)
      end
    end
    assert.are.equal(6, named)
    local st, out, err = H.specula({ "predictors", TAPE, "--predictor", oracle, "--json" })
    assert.are.equal(0, st, err)
    local r = cjson.decode(out)
    assert.are.same({ 12, 6 }, { r.timed_steps, r.named_steps })
    local p = r.predictors[1]
    assert.are.equal(12, p.top1)
    -- cost 0: the gate lets every candidate through
    assert.are.same({ 24, 12, 12, 0 }, { p.start.fired, p.start.hits, p.start.wasted, p.start.wasted_cost })
    assert.is_true(math.abs(p.start.saved_ms - save_start) < 1e-6, p.start.saved_ms .. " vs " .. save_start)
    -- a stream names only the lookups: their two candidates fire there
    assert.are.same({ 12, 6, 6 }, { p.tool_name.fired, p.tool_name.hits, p.tool_name.wasted })
    assert.is_true(math.abs(p.tool_name.saved_ms - save_name) < 1e-6, p.tool_name.saved_ms .. " vs " .. save_name)
    -- the name comes late in the stream: it hides less than a start would
    assert.is_true(save_name < save_start)
    -- both: everything fired at the start, nothing was kept back for the name
    assert.are.same(p.start, p.both)
  end)

  it("keeps back what the EV gate would: a costly unlikely guess that can save little", function()
    -- cost 2 at 1 ms a unit: a 0.1 guess must save > 18 ms. The lookup
    -- (about 5 ms) never does once its latency is known; the 600 ms MCP
    -- call does. The very first call fires: the gate has no data yet; the
    -- first MCP call is taken at the latency of the tools seen so far (the
    -- lookups'), so its unlikely guess stays back.
    local st, out, err = H.specula({ "predictors", TAPE, "--predictor", oracle, "--cost", "2", "--ev-cost-ms", "1",
      "--json" })
    assert.are.equal(0, st, err)
    local p = cjson.decode(out).predictors[1]
    assert.are.same({ 18, 12, 6, 12 }, { p.start.fired, p.start.hits, p.start.wasted, p.start.wasted_cost })
    assert.are.same({ 7, 6, 1, 2 }, { p.tool_name.fired, p.tool_name.hits, p.tool_name.wasted,
                                      p.tool_name.wasted_cost })
    -- both: the 5 guesses kept back at the start are the unlikely ones; the
    -- name leaves their odds at 0.1 (the likely guess of the name counts),
    -- so they stay back, as the engine keeps them (test_window_actspec.c)
    assert.are.same(p.start, p.both)
    -- per tool: a free lookup fires again (the first MCP call's unlikely
    -- guess still stays back)
    st, out = H.specula({ "predictors", TAPE, "--predictor", oracle, "--cost", "2", "--cost", "lookup=0",
      "--ev-cost-ms", "1", "--json" })
    assert.are.equal(0, st)
    p = cjson.decode(out).predictors[1]
    assert.are.same({ 23, 11 }, { p.start.fired, p.start.wasted })
    st, out, err = H.specula({ "predictors", TAPE, "--cost", "lookup=-1" })
    assert.are.equal(2, st)
    assert.matches("%-%-cost must be TOOL=X or X", err)
    -- the table
    st, out = H.specula({ "predictors", TAPE, "--predictor", oracle })
    assert.are.equal(0, st)
    assert.matches("EV gate at ev_cost_ms 1000 over the 12 of 12 calls with recorded latencies %(6 with a streamed "
      .. "tool name%)", out)
    assert.matches("\n%S+oracle.lua%s+start%s+24%s+12%s+12%s+0.000%s+[%d.]+\n", out)
  end)

  it("reads a predictor's tool_confidence: a streamed name makes a guess only as likely as that says", function()
    local function guess(tool_conf)
      return H.tmpfile("guess" .. tostring(tool_conf) .. ".lua", "local json = require 'specula.json'\nlocal W = "
        .. "json.decode([==[" .. cjson.encode(want) .. "]==])\nreturn function(h, ctx)\n  local a = W[ctx.id .. '/' "
        .. ".. ctx.hop]\n  return { { tool = a.tool, args = a.args, confidence = 0.5, tool_confidence = "
        .. tostring(tool_conf) .. " } }\nend\n")
    end
    -- alone among its tool's candidates the guess is sure once the name
    -- streams, unless the predictor says the tool itself was 0.9 likely
    local fired = {}
    for _, tc in ipairs({ 0, 0.9 }) do
      local st, out, err = H.specula({ "predictors", TAPE, "--predictor", guess(tc), "--cost", "10", "--ev-cost-ms",
        "1", "--json" })
      assert.are.equal(0, st, err)
      fired[#fired + 1] = cjson.decode(out).predictors[1].tool_name.fired
    end
    assert.is_true(fired[2] < fired[1], fired[1] .. " then " .. fired[2])
  end)

  it("reads the stage times of a results file: start only, no stream", function()
    local rec = { id = "q1", answer = "x", trajectory = {
      { action = { tool = "search", args = { q = "a" } }, observation = "1" },
      { action = { tool = "search", args = { q = "a" } }, observation = "2" } },
      stages = { hops = { { hop = 0, t_seg = 100, t_target = 30 }, { hop = 1, t_seg = 10, t_target = 30 } } } }
    local f = H.tmpfile("timed.jsonl", cjson.encode(rec) .. "\n")
    local g = H.tmpfile("always.lua", "return function() return { { tool = 'search', args = { q = 'a' }, confidence = 1 } } end")
    local st, out, err = H.specula({ "predictors", f, "--predictor", g, "--json" })
    assert.are.equal(0, st, err)
    local r = cjson.decode(out)
    assert.are.same({ 2, 0 }, { r.timed_steps, r.named_steps })
    local p = r.predictors[1]
    assert.are.same({ 2, 2, 0, 40 }, { p.start.fired, p.start.hits, p.start.wasted, p.start.saved_ms })
    assert.is_nil(p.tool_name)
  end)
end)

-- Conversations of a made-up workshop: the user names a part, the agent
-- finds it, checks each bin the result lists (one after another), and
-- orders the amount the user said. Ids "taskN-trialM": trials of one task
-- share the part.
local function workshop(n_tasks, trials, seed)
  local s = seed
  local function r(n) s = (s * 1103515245 + 12345) % 2147483648 return s % n + 1 end
  local lines = {}
  for t = 1, n_tasks do
    local part = string.format("WX-%04d", r(9999))
    for k = 1, trials do
      local qty = r(30)
      local bins = {}
      for j = 1, 1 + r(2) do bins[j] = "bin" .. r(500) end
      local m = {
        { role = "user", content = "I need part " .. part .. ", " .. qty .. " pieces." },
        { role = "assistant", content = cjson.null, tool_calls = { { id = "f", type = "function",
          ["function"] = { name = "find_part", arguments = cjson.encode({ part = part }) } } } },
        { role = "tool", tool_call_id = "f", content = cjson.encode({ part = part, bins = bins }) },
      }
      for j, b in ipairs(bins) do
        m[#m + 1] = { role = "assistant", content = cjson.null, tool_calls = { { id = "b" .. j, type = "function",
          ["function"] = { name = "check_bin", arguments = cjson.encode({ bin = b }) } } } }
        m[#m + 1] = { role = "tool", tool_call_id = "b" .. j, content = "empty" }
      end
      m[#m + 1] = { role = "assistant", content = cjson.null, tool_calls = { { id = "o", type = "function",
        ["function"] = { name = "order", arguments = cjson.encode({ part = part, qty = qty }) } } } }
      m[#m + 1] = { role = "tool", tool_call_id = "o", content = "ordered" }
      m[#m + 1] = { role = "assistant", content = "Ordered." }
      lines[#lines + 1] = cjson.encode({ id = "task" .. t .. "-trial" .. k, messages = m })
    end
  end
  return table.concat(lines, "\n") .. "\n"
end

describe("specula predictors: learned, --train, --folds, calibration", function()
  it("trains on --train, then predicts online: hit rates, per tool, a calibration table and Brier score", function()
    local train = H.tmpfile("ws-train.jsonl", workshop(12, 2, 3))
    local test = H.tmpfile("ws-test.jsonl", workshop(5, 2, 77))
    local st, out, err = H.specula({ "predictors", test, "--train", train, "--predictor", "learned",
      "--predictor", "pattern", "--json" })
    assert.are.equal(0, st, err)
    local r = cjson.decode(out)
    assert.are.equal(24, r.train_trajectories)
    local l, p = r.predictors[1], r.predictors[2]
    assert.are.equal("learned", l.predictor)
    assert.are.equal(r.steps, l.steps)
    assert.is_true(l.top1_rate >= 0.9, "learned top-1 " .. l.top1_rate)
    assert.is_true(l.top3_rate >= l.top1_rate and l.tool_top1_rate >= l.top1_rate)
    assert.is_true(p.top1_rate < l.top1_rate)
    -- per tool
    assert.are.equal(10, l.per_tool.find_part.steps)
    assert.are.equal(10, l.per_tool.order.steps)
    -- calibration over every model turn (the final answers in text too)
    assert.are.equal(r.steps + 10, r.turns)
    local c = l.calibration
    local n = 0
    for _, b in ipairs(c.bins) do
      n = n + b.candidates
      assert.is_true(b.confidence >= b.lo and b.confidence <= b.hi)
    end
    assert.are.equal(c.candidates, n)
    assert.is_true(c.brier >= 0 and c.brier < 0.1, "Brier " .. c.brier)
    assert.is_true(c.ece >= 0 and c.ece < 0.15, "ECE " .. c.ece)
    -- the tables
    st, out = H.specula({ "predictors", test, "--train", train, "--predictor", "learned" })
    assert.are.equal(0, st)
    assert.matches("trained on 24 %-%-train trajectories", out)
    assert.matches("calibration: first 3 candidates at every model turn", out)
    assert.matches("per tool %(learned%)", out)
    assert.matches("\ncheck_bin%s+%d+%s", out)
  end)

  it("computes the Brier score and calibration error of the candidates it is given", function()
    -- open(id=7) at 0.9 at each of the 13 model turns; right at the 4 second calls
    local st, out, err = H.specula({ "predictors", FIX .. "/openai.jsonl", "--predictor", open7(), "--json" })
    assert.are.equal(0, st, err)
    local c = cjson.decode(out).predictors[1].calibration
    -- open7 says 1: (4 x 0 + 9 x 1) / 13
    assert.are.equal(13, c.candidates)
    assert.is_true(math.abs(c.brier - 9 / 13) < 1e-9, c.brier)
    assert.is_true(math.abs(c.ece - 9 / 13) < 1e-9, c.ece)
    assert.are.equal(1, #c.bins)
    assert.is_true(math.abs(c.bins[1].hit_rate - 4 / 13) < 1e-9)
  end)

  it("--folds never puts a task on both sides, and every conversation is predicted once", function()
    local data = H.tmpfile("ws-folds.jsonl", workshop(9, 3, 5))
    local log = H.tmpfile("leak.log")
    os.remove(log)
    local spy = H.tmpfile("spy.lua", [[
local log = assert(io.open(os.getenv("LEAK_LOG"), "a"))
log:write("new\n") log:flush()
local P = {}
function P:train(convs) for _, c in ipairs(convs) do log:write("train ", c.id, "\n") end log:flush() end
function P:observe_trajectory(actions, info) log:write("learn ", tostring(info.id), "\n") log:flush() end
return setmetatable(P, { __call = function(self, hist, ctx) log:write("ask ", tostring(ctx.id), "\n") log:flush()
  return {} end })
]])
    local st, out, err = H.specula({ "predictors", data, "--folds", "3", "--predictor", spy, "--json" },
      { LEAK_LOG = log })
    assert.are.equal(0, st, err)
    local r = cjson.decode(out)
    local function task(id) return id:match("^(task%d+)%-") end
    -- the folds the lab reports: tasks apart
    local fold_of = {}
    for f, fold in ipairs(r.folds) do
      for _, id in ipairs(fold.test) do
        assert.is_true(fold_of[task(id)] == nil or fold_of[task(id)] == f, task(id) .. " in two folds")
        fold_of[task(id)] = f
      end
      assert.are.equal(27 - #fold.test, fold.train_trajectories)
    end
    -- what each fold's predictor was trained on and asked about
    local folds, cur = {}, nil
    for line in io.lines(log) do
      if line == "new" then cur = { train = {}, ask = {} }; folds[#folds + 1] = cur
      else
        local what, id = line:match("^(%a+) (.*)$")
        if what == "train" then cur.train[task(id)] = true end
        if what == "ask" then cur.ask[id] = true end
      end
    end
    assert.are.equal(3, #folds)
    local asked = {}
    for _, f in ipairs(folds) do
      for id in pairs(f.ask) do
        assert.is_nil(f.train[task(id)], id .. " asked by a predictor trained on its task")
        assert.is_nil(asked[id], id .. " predicted twice")
        asked[id] = true
      end
    end
    local n = 0
    for _ in pairs(asked) do n = n + 1 end
    assert.are.equal(27, n)
    -- the learned predictor under the same folds
    st, out = H.specula({ "predictors", data, "--folds", "3", "--predictor", "learned", "--json" })
    assert.are.equal(0, st)
    assert.is_true(cjson.decode(out).predictors[1].top1_rate > 0.5)
  end)

  it("saves the learned model and reads it back as learned:FILE", function()
    local train = H.tmpfile("ws-train2.jsonl", workshop(8, 2, 9))
    local test = H.tmpfile("ws-test2.jsonl", workshop(3, 2, 19))
    local model = H.tmpfile("model.json")
    local st, out, err = H.specula({ "predictors", test, "--train", train, "--predictor", "learned", "--save-model",
      model, "--json" })
    assert.are.equal(0, st, err)
    local m = cjson.decode(H.read(model))
    assert.are.equal("specula-learned-predictor", m.format)
    assert.are.equal(16, m.provenance.offline.conversations)
    assert.are.equal(6, m.provenance.online.conversations)
    st, out, err = H.specula({ "predictors", test, "--predictor", "learned:" .. model, "--json" })
    assert.are.equal(0, st, err)
    assert.is_true(cjson.decode(out).predictors[1].top1_rate >= 0.9)
    st, out, err = H.specula({ "predictors", test, "--predictor", "learned:" .. H.tmpfile("nothing.json") })
    assert.are.equal(2, st)
    assert.matches("learned predictor load", err)
    st, out, err = H.specula({ "predictors", test, "--predictor", "pattern", "--save-model", model })
    assert.are.equal(1, st)
    assert.matches("no learned predictor in this run", err)
  end)

  it("says what is wrong with --folds and --group-by", function()
    local st, _, err = H.specula({ "predictors", FIX .. "/openai.jsonl", "--folds", "1" })
    assert.are.equal(2, st)
    assert.matches("%-%-folds must be a whole number >= 2", err)
    st, _, err = H.specula({ "predictors", FIX .. "/openai.jsonl", "--folds", "9" })
    assert.are.equal(1, st)
    assert.matches("hold 5 groups", err)
    st, _, err = H.specula({ "predictors", FIX .. "/openai.jsonl", "--folds", "2", "--group-by", "task" })
    assert.are.equal(2, st)
    assert.matches("needs a capture", err)
    st, _, err = H.specula({ "predictors", FIX .. "/openai.jsonl", "--train", H.tmpfile("absent.jsonl") })
    assert.are.equal(1, st)
    assert.matches("%-%-train", err)
  end)
end)

-- A tape and the records of the same run: the predictor lab reads the same
-- committed calls from both (examples/multihop_sim.lua: 8 queries of 3-6
-- hops, its speculator right 45 % of the time, k = inf, so calls are made
-- from speculative states whose guesses are accepted or rejected later).
describe("specula predictors: a tape counts the calls its run committed", function()
  local SIM = H.root .. "/examples/multihop_sim.lua"
  local n = 0
  local function input()
    local l = {}
    for i = 1, 8 do l[i] = cjson.encode({ id = "q" .. i, query = "question " .. i }) end
    return H.tmpfile("sim_in.jsonl", table.concat(l, "\n") .. "\n")
  end
  -- record one run; returns the tape, the results file and its records
  local function record(agent, extra, status)
    n = n + 1
    local dir, out = H.tmpdir() .. "/simtape" .. n, H.tmpdir() .. "/simout" .. n .. ".jsonl"
    local a = { "run", agent, "--input", input(), "--k", "inf", "--record", dir, "--out", out }
    for _, x in ipairs(extra or {}) do a[#a + 1] = x end
    local st, _, err = H.specula(a)
    assert.are.equal(status or 0, st, err)
    return dir, out, H.jsonl(H.read(out))
  end
  -- beside the built-in predictors, the sim's own rule: the next search
  -- names the query, the hop and the last observation (at hop 0 the lab
  -- knows the query's id, not its text: a miss), so its top-1 says whether
  -- the lab has the same calls with the same observations in the same order
  local rule = H.tmpfile("sim_rule.lua", [[
return function(h, ctx)
  local prev = h[#h] and h[#h].observation or ctx.query
  return { { tool = "search", args = { q = tostring(ctx.id) .. "/" .. #h .. "/" .. tostring(prev) }, confidence = 1 } }
end
]])
  local function lab(src)
    local st, out, err = H.specula({ "predictors", src, "--json", "--predictor", "learned", "--predictor", "pattern",
      "--predictor", "ngram", "--predictor", rule })
    assert.are.equal(0, st, err)
    local r = cjson.decode(out)
    local p = r.predictors[4]
    assert.is_true(p.top1 > 0 and p.top1 < r.steps, cjson.encode(p))
    return r
  end
  -- the lab's figures from tape and records are the same; returns them
  local function same(dir, out)
    local a, b = lab(dir), lab(out)
    assert.are.same({ b.steps, b.trajectories, b.turns }, { a.steps, a.trajectories, a.turns })
    assert.are.equal(#b.predictors, #a.predictors)
    for i, p in ipairs(b.predictors) do
      local q = a.predictors[i]
      assert.are.same({ p.predictor, p.top1, p.top3, p.tool_top1, p.top1_rate },
        { q.predictor, q.top1, q.top3, q.tool_top1, q.top1_rate })
    end
    return a
  end
  local function tape_lines(dir) return H.jsonl(H.read(dir .. "/cassette-0001.jsonl")) end
  local function verdicts(recs)
    local c = { accepted = 0, rejected = 0 }
    for _, r in ipairs(recs) do
      for v in H.verdicts(r):gmatch("[^,]+") do c[v] = (c[v] or 0) + 1 end
    end
    return c
  end

  it("counts every committed call, whatever state it ran from, on tapes and on records alike", function()
    local dir, out, recs = record(SIM)
    local calls = 0
    for _, r in ipairs(recs) do
      assert.is_nil(r.error)
      calls = calls + #r.trajectory
    end
    local v = verdicts(recs)
    assert.is_true(v.accepted > 0 and v.rejected > 0, cjson.encode(v))
    -- the tape holds calls made from speculative states: committed ones
    -- (an accepted guess) and discarded ones (a rejected guess)
    local verified, spec = 0, 0
    for _, l in ipairs(tape_lines(dir)) do
      if l.kind == "obs" then
        if l.meta.speculative then spec = spec + 1 else verified = verified + 1 end
      end
    end
    assert.is_true(verified < calls and verified + spec > calls, verified .. " " .. spec .. " " .. calls)
    local r = same(dir, out)
    assert.are.equal(calls, r.steps)
    assert.are.equal(8, r.trajectories)
    -- a tape written before commit lines (format 3) does not say which
    -- speculative calls were committed: it gives those from verified states
    local old = H.tmpdir() .. "/simtape_old" .. n
    os.execute("mkdir -p " .. H.quote(old))
    local lines = {}
    for _, l in ipairs(tape_lines(dir)) do
      if l.specula_cassette then l.specula_cassette = 3 end
      if l.kind ~= "commit" then lines[#lines + 1] = cjson.encode(l) end
    end
    H.tmpfile("simtape_old" .. n .. "/cassette-0001.jsonl", table.concat(lines, "\n") .. "\n")
    assert.are.equal(verified, lab(old).steps)
    -- what each query committed, shown
    local st, shown = H.specula({ "cassette", "show", dir, "--kind", "commit", "--query", "q1" })
    assert.are.equal(0, st)
    assert.matches("^commit #1\tcommit %d calls: search, search, search[^\n]*\tok\t", shown)
  end)

  it("counts a predicted call that served its step, and a failed query not at all", function()
    -- an oracle for the sim's next call at even hops: those steps' targets
    -- are served by the predicted call (no call of their own)
    local oracle = H.tmpfile("sim_oracle.lua", [[
return function(h, ctx)
  if ctx.hop % 2 == 1 then return {} end
  local prev = h[#h] and h[#h].observation or ctx.query
  return { { tool = "search", args = { q = tostring(ctx.id) .. "/" .. ctx.hop .. "/" .. prev }, confidence = 1 } }
end
]])
    -- the sim, whose query q3 fails at its second call
    local agent = H.tmpfile("sim_failing.lua", [[
local specula = require "specula"
local a = specula.sim.multihop { hops = { 3, 6 }, p = 0.45, seg = { "lognormal", 15, 0.3 },
  spec = { "lognormal", 16, 0.3 }, target = { "lognormal", 100, 0.4 } }
local call = a.tools.search.call
a.tools.search.call = function(args, ctx)
  if ctx.id == "q3" and ctx.hop >= 1 then error("no such page", 0) end
  return call(args, ctx)
end
return a
]])
    local dir, out, recs = record(agent, { "--predictor", oracle }, 3)   -- 3: a query failed
    local calls, failed = 0, 0
    for _, r in ipairs(recs) do
      if r.error then failed = failed + 1 else calls = calls + #r.trajectory end
    end
    assert.are.equal(1, failed)
    local committed, own, predicted = {}, 0, 0
    local lines = tape_lines(dir)
    for _, l in ipairs(lines) do
      if l.kind == "commit" then
        for _, p in ipairs(l.paths or {}) do committed[l.meta.query .. " " .. p] = true end
      end
    end
    for _, l in ipairs(lines) do
      if l.kind == "obs" and l.meta.predicted then predicted = predicted + 1 end
      if l.kind == "obs" and not l.meta.predicted and committed[l.meta.query .. " " .. l.meta.path] then
        own = own + 1
      end
    end
    assert.is_true(predicted > 0 and own < calls, predicted .. " " .. own .. " " .. calls)
    local r = same(dir, out)
    assert.are.equal(calls, r.steps)
    assert.are.equal(7, r.trajectories)
  end)
end)
