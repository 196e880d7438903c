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
