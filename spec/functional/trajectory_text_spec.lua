-- A CLI run that writes its records encodes committed hops sixteen at a
-- time as they commit (specula.run.records encode_hops, sp_window_hop_text):
-- a long query in flight holds the text of its finished hops, not their Lua
-- values, and the record written is the same, byte for byte.
local H = require "support.helpers"

local function queries(n)
  local lines = {}
  for i = 1, n do lines[i] = string.format('{"id":"q%d","query":"question %d"}', i, i) end
  return H.tmpfile("traj_q.jsonl", table.concat(lines, "\n") .. "\n")
end

-- The records of agent over input written as a plain CLI run writes them
-- (hops encoded as they commit, stages and stats by the engine) and with
-- --trace, which keeps every record's values until it is written (the
-- trace reads them): the path the records were always built on. Returns
-- the two files' texts and the two runs' stderr; each run must exit with
-- status.
local function text_and_values(tag, agent, input, extra, status)
  local dir = H.tmpdir()
  local outs, errs = {}, {}
  for _, run in ipairs({ { "text" }, { "values", "--trace", dir .. "/" .. tag .. "_trace.json" } }) do
    local out = dir .. "/" .. tag .. "_" .. run[1] .. ".jsonl"
    local argv = { "run", agent, "--input", input, "--clock", "virtual", "--out", out, "--quiet" }
    for _, x in ipairs(extra) do argv[#argv + 1] = x end
    for i = 2, #run do argv[#argv + 1] = run[i] end
    local st, _, err = H.specula(argv)
    assert.equals(status, st, err)
    outs[#outs + 1], errs[#errs + 1] = H.read(out), err
  end
  return outs, errs
end

describe("a query's committed hops", function()
  -- The agent notes every step table it returns in a weak table; at its
  -- last step it collects garbage and answers with how many are still
  -- alive. Held until the record is written, all 100 of a query (300 in all) would be; encoded
  -- sixteen at a time, fewer than 16 (and the few a speculation holds).
  local agent = [[
    local specula = require "specula"
    local N = 100
    local alive = setmetatable({}, { __mode = "k" })
    return specula.agent {
      name = "held",
      init = function() return { hop = 0 } end,
      step = function(state)
        if state.hop >= N then
          collectgarbage("collect")
          collectgarbage("collect")
          local n = 0
          for _ in pairs(alive) do n = n + 1 end
          return { final = "alive " .. n }
        end
        local s = { segment = "s" .. state.hop, action = { tool = "t", args = { i = state.hop } } }
        alive[s] = true
        return s
      end,
      update = function(state) return { hop = state.hop + 1 } end,
      tools = { t = { call = function(args) return "o" .. args.i end,
                      speculate = function(args) return "o" .. args.i end } },
      policy = function() return "full" end,
    }
  ]]
  for _, mode in ipairs({ { "--mode", "sequential" }, { "--k", "3" } }) do
    it("are not held as Lua values until the record is written (" .. table.concat(mode, " ") .. ")", function()
      local a = H.tmpfile("held_agent.lua", agent)
      local out = H.tmpfile("held.jsonl")
      os.remove(out)
      local argv = { "run", a, "--input", queries(3), "--clock", "virtual", "--out", out, "--quiet",
                     "--concurrency", "3", "--max-hops", "120" }
      for _, x in ipairs(mode) do argv[#argv + 1] = x end
      local st, _, err = H.specula(argv)
      assert.equals(0, st, err)
      local n = 0
      for line in io.lines(out) do
        local r = H.json().decode(line)
        n = n + 1
        assert.equals(100, #r.trajectory)
        assert.equals("o99", r.trajectory[100].observation)
        local alive = tonumber(r.answer:match("^alive (%d+)$"))
        -- at most 15 hops not yet encoded and those in flight (the last one, a
        -- few speculative ones) of each of the 3 queries, not all 300
        assert.is_true(alive ~= nil and alive <= 3 * 20, r.answer)
      end
      assert.equals(3, n)
    end)
  end

  it("are encoded sooner when so many queries are in flight that sixteen each would be thousands of values", function()
    -- 1,000 queries of 12 hops at once: with sixteen at a time none would
    -- be encoded before its record (12,000 steps alive when the first
    -- query ends); with 1,000 windows live each holds 4 (4,096 / 1,000)
    local a = H.tmpfile("held12_agent.lua", (agent:gsub("local N = 100", "local N = 12")))
    local out = H.tmpfile("held12.jsonl")
    os.remove(out)
    local st, _, err = H.specula({ "run", a, "--input", queries(1000), "--clock", "virtual", "--out", out,
                                   "--quiet", "--concurrency", "1000", "--k", "3", "--max-hops", "20" })
    assert.equals(0, st, err)
    local n, most = 0, 0
    for line in io.lines(out) do
      local r = H.json().decode(line)
      n = n + 1
      assert.equals(12, #r.trajectory)
      assert.equals("o11", r.trajectory[12].observation)
      local alive = tonumber(r.answer:match("^alive (%d+)$"))
      assert.is_true(alive ~= nil, r.answer)
      if alive > most then most = alive end
    end
    assert.equals(1000, n)
    -- 4 a query not yet encoded, and those in flight (the last step, a
    -- few speculative ones), not 12 a query
    assert.is_true(most <= 1000 * 8, "steps alive at a query's end: " .. most)
  end)
end)

describe("records with trajectories encoded as hops commit", function()
  it("are the records built at the end, byte for byte, and fail the same way on values JSON cannot hold", function()
    -- per query, a kind of hop: odd values, a hop nested to the encoder's
    -- limit only once inside the record, a function, a step with a
    -- metatable, bytes that are not UTF-8, an observation of nil
    local a = H.tmpfile("odd_agent.lua", [[
      local specula = require "specula"
      local json = require "specula.json"
      local N = 20   -- past the 16 hops encoded at once
      local function deep(d)
        local v = {}
        for _ = 2, d do v = { v } end
        return v
      end
      local function odd(kind, hop)
        if kind == 1 then
          return { action = { tool = "t", args = { s = "\u{e9}\u{1F600}\"\\\n", x = 0.1, big = 1e300, neg = -0.0,
                   n = 2^53, list = { 1, 2, json.null, "z" }, empty = {}, arr = json.array({}), obj = json.object({}) } },
                   thought = "not recorded" }
        elseif kind == 2 and hop == 2 then
          return { segment = "s", action = { tool = "t", args = { d = 255 } } }
        elseif kind == 3 and hop == 1 then
          return { segment = "s", action = { tool = "t", args = { f = print } } }
        elseif kind == 4 and hop == 2 then
          return setmetatable({ action = { tool = "t", args = {} } }, { __index = { segment = "from __index" } })
        elseif kind == 5 and hop == 3 then
          return { segment = "s", action = { tool = "t", args = { bad = "x\255y" } } }
        elseif kind == 6 then
          return { segment = "s" .. hop, action = { tool = "t", args = { none = true } } }
        elseif kind == 7 and hop == 18 then
          -- past the first sixteen: among the last hops, encoded with the record
          return { segment = "s", action = { tool = "t", args = { f = print } } }
        end
        return { segment = "s" .. hop, action = { tool = "t", args = { i = hop } } }
      end
      return specula.agent {
        name = "odd",
        init = function(q) return { hop = 0, kind = tonumber(q:match("%d+")) } end,
        step = function(state)
          if state.hop >= N then return { final = "done" } end
          return odd(state.kind, state.hop)
        end,
        update = function(state) return { hop = state.hop + 1, kind = state.kind } end,
        tools = { t = {
          call = function(args)
            if args.none then return nil end
            if args.d then return deep(args.d) end
            return { seen = args.i or 0, list = { "a", { b = true } } }
          end,
          speculate = function(args) return nil end,
        } },
        policy = function() return "full" end,
      }
    ]])
    -- (some queries fail: exit 3)
    local outs, errs = text_and_values("odd", a, queries(8), { "--k", "2", "--concurrency", "8" }, 3)
    assert.equals(outs[2], outs[1])
    assert.equals(errs[2], errs[1])
    local text = outs[1]
    assert.is_falsy(text:find('"thought"', 1, true))
    assert.matches('"big":1e+300', text, 1, true)
    assert.matches('"observation":null', text, 1, true)
    assert.matches('"segment":"from __index"', text, 1, true)
    assert.matches("the record of query 'q2' cannot be written as JSON: %S*trajectory%[2%]", errs[1])
    assert.matches("the record of query 'q3' cannot be written as JSON: %S*trajectory%[1%]%.action%.args%.f", errs[1])
    assert.matches("the record of query 'q5' cannot be written as JSON: %S*trajectory%[3%]", errs[1])
    assert.matches("the record of query 'q7' cannot be written as JSON: %S*trajectory%[18%]%.action%.args%.f", errs[1])
    -- the queries around it are written whole
    assert.matches('"id":"q8".-"segment":"s19"', text)
  end)

  -- The "stages" object the engine writes (sp_window_stages_json) against
  -- the table the Lua path builds for --trace: stage times from under
  -- 0.0001 ms to 10^12 ms (past 10^11 a time has no short rounded form),
  -- verifier reasons with escapes, non-ASCII text and bytes that are not
  -- UTF-8 (which the Lua path cleans), rejected and accepted hops.
  it("have their stage times and verifier reasons written as the Lua record writes them", function()
    local a = H.tmpfile("stagey_agent.lua", [[
      local specula = require "specula"
      local WAITS = { 0.00003, 0.123456789, 7, 12345.678901, 2e15 + 0.5, 0.00049999 }
      local REASONS = { "\u{e9} \"quoted\"\n", "tab\there \\ back", "\u{1F600} emoji", "", "bad \255 byte" }
      local function wait(i) specula.sleep(WAITS[i % #WAITS + 1]) end
      return specula.agent {
        name = "stagey",
        init = function(q) return { hop = 0, n = tonumber(q:match("%d+")) } end,
        step = function(state)
          wait(state.hop + state.n)
          if state.hop >= 7 then return { final = "done" } end
          return { segment = "s", action = { tool = "t", args = { i = state.hop + state.n } } }
        end,
        update = function(state) return { hop = state.hop + 1, n = state.n } end,
        tools = { t = {
          call = function(args) wait(args.i * 3) return "o" .. args.i end,
          speculate = function(args) wait(args.i + 2) return args.i % 3 == 0 and "wrong" or "o" .. args.i end,
        } },
        verify = function(pred, actual) return pred == actual, REASONS[tonumber(actual:sub(2)) % #REASONS + 1] end,
        policy = function() return "full" end,
      }
    ]])
    local outs = text_and_values("stages", a, queries(12), { "--k", "3" }, 0)
    assert.equals(outs[2], outs[1])
    local text = outs[1]
    -- the cases were there
    assert.matches('"t_seg":1000000000000,', text, 1, true)
    assert.matches('"reason":"\u{e9} \\"quoted\\"\\n"', text, 1, true)
    assert.matches('"reason":"tab\\there \\\\ back"', text, 1, true)
    assert.matches('"spec":"rejected"', text, 1, true)
    assert.matches('"spec":"accepted"', text, 1, true)
    assert.matches('"reason":"bad \u{FFFD} byte"', text, 1, true)
  end)
end)
