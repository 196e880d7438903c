-- Under --clock virtual a run is deterministic (docs/architecture.md, The
-- clocks): the same command twice writes the same records, byte for byte,
-- for every example agent with a simulated backend. LuaJIT's table order
-- changes from process to process (its string hashes are seeded at
-- random), so any text the engine builds in next() order would differ
-- between the two runs: the draft predictor's prompt held its history's
-- observations as json.encode wrote them, and its simulated draws (keyed
-- by the prompt) and the records with them changed run to run.
local H = require "support.helpers"

local EX = H.root .. "/examples"

local function queries(n)
  local lines = {}
  for i = 1, n do
    lines[i] = string.format('{"id":"q%d","query":"question %d about item %d"}', i, i, i * 7)
  end
  return H.tmpfile(nil, table.concat(lines, "\n") .. "\n")
end

local function run_twice(script, args)
  local input = queries(12)
  local outs = {}
  for r = 1, 2 do
    local out = H.tmpdir() .. "/vdet" .. r .. ".jsonl"
    os.remove(out)
    local a = { "run", script, "--input", input, "--out", out, "--clock", "virtual", "--quiet" }
    for _, x in ipairs(args) do a[#a + 1] = x end
    local st, so, se = H.specula(a)
    assert.equals(0, st, so .. se)
    outs[r] = H.read(out)
    assert.is_truthy(outs[r] and #outs[r] > 0, "no records from " .. script)
  end
  return outs[1], outs[2]
end

describe("a run under --clock virtual", function()
  for _, case in ipairs({
    { "multihop_sim.lua", { "--k", "3" } },
    { "paste_research.lua", { "--k", "3" } },
    { "draft_predictor.lua", { "--k", "4", "--concurrency", "1" } },
    { "draft_predictor.lua", { "--mode", "sequential" } },
    { "tsss.lua", { "--k", "inf" } },
  }) do
    local script, args = case[1], case[2]
    it("writes the same records twice: " .. script .. " " .. table.concat(args, " "), function()
      local a, b = run_twice(EX .. "/" .. script, args)
      if a ~= b then
        -- the first line that differs, to say where
        local la, lb = {}, {}
        for l in a:gmatch("[^\n]+") do la[#la + 1] = l end
        for l in b:gmatch("[^\n]+") do lb[#lb + 1] = l end
        for i = 1, math.max(#la, #lb) do
          if la[i] ~= lb[i] then
            error(string.format("record %d differs:\n%s\n%s", i, tostring(la[i]):sub(1, 600), tostring(lb[i]):sub(1, 600)))
          end
        end
      end
      assert.equals(a, b)
    end)
  end
end)

-- What a query's record says does not depend on the queries in flight
-- beside it: the engine keeps each window's own events in their order
-- however it interleaves the windows (engine/sp_sched.c, "Runs": what a
-- window queues runs right after it). A simulated backend with fixed
-- latencies puts many calls of many queries at the same instant. There a
-- deferred call's delivery (a simulated call returns at once and its
-- result comes the latency later) was once taken by the job dispatcher as
-- a fresh job and the call ran a second time, its latency counted twice:
-- every record at 64 in flight differed from the one at 1.
describe("a query's record under --clock virtual", function()
  local FIXED = [[
local specula = require "specula"
return specula.sim.multihop {
  name = "fixed", hops = { 2, 5 }, p = 0.5,
  seg = { "fixed", 10 }, spec = { "fixed", 10 }, target = { "fixed", 10 },
}
]]
  local WAITS = [[
local specula = require "specula"
return specula.agent {
  name = "waits",
  init = function(q, ctx) return { q = q, hop = 0 } end,
  step = function(s, ctx)
    specula.sleep(0)
    if s.hop >= 4 then return { final = "done " .. s.q } end
    return { segment = "s" .. s.hop, action = { tool = "t", args = { q = s.q, i = s.hop } } }
  end,
  update = function(s, step, obs, ctx) return { q = s.q, hop = s.hop + 1 } end,
  tools = { t = {
    call = function(args, ctx) specula.sleep(args.i % 2) return args.q .. "/" .. args.i end,
    speculate = function(args, ctx) specula.sleep(0) return args.i % 3 == 0 and "wrong" or (args.q .. "/" .. args.i) end,
  } },
}
]]
  for _, case in ipairs({
    { "fixed-latency simulated agent, k=inf", FIXED, { "--k", "inf" } },
    { "fixed-latency simulated agent, k=3", FIXED, { "--k", "3" } },
    { "fixed-latency simulated agent, sequential", FIXED, { "--mode", "sequential" } },
    { "agent whose calls sleep 0 or 1 ms, k=inf", WAITS, { "--k", "inf" } },
    { "paste_research.lua, k=3", EX .. "/paste_research.lua", { "--k", "3" } },
  }) do
    local name, script, args = case[1], case[2], case[3]
    it("is the same at 1, 16 and 200 queries in flight: " .. name, function()
      if script:find("\n", 1, true) then script = H.tmpfile("vdet_agent.lua", script) end
      local input = queries(200)
      local text = {}
      for _, c in ipairs({ "1", "16", "200" }) do
        local out = H.tmpdir() .. "/vconc" .. c .. ".jsonl"
        os.remove(out)
        local a = { "run", script, "--input", input, "--out", out, "--clock", "virtual", "--quiet", "--concurrency", c }
        for _, x in ipairs(args) do a[#a + 1] = x end
        local st, so, se = H.specula(a)
        assert.equals(0, st, so .. se)
        text[c] = H.read(out) or ""
        local _, n = text[c]:gsub("\n", "")
        assert.equals(200, n, "records at concurrency " .. c)
      end
      for _, c in ipairs({ "16", "200" }) do
        if text[c] ~= text["1"] then
          local la, lb = {}, {}
          for l in text["1"]:gmatch("[^\n]+") do la[#la + 1] = l end
          for l in text[c]:gmatch("[^\n]+") do lb[#lb + 1] = l end
          local bad = 0
          for i = 1, #la do if la[i] ~= lb[i] then bad = bad + 1 end end
          for i = 1, #la do
            if la[i] ~= lb[i] then
              error(string.format("%d of 200 records differ at concurrency %s from concurrency 1; the first:\n%s\n%s",
                bad, c, la[i]:sub(1, 700), tostring(lb[i]):sub(1, 700)))
            end
          end
        end
      end
    end)
  end
end)
