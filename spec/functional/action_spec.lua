-- Action speculation through the real binary.
local H = require "support.helpers"
local cjson = require "cjson"
local SCRIPTS = H.root .. "/spec/functional/scripts/"

local last_json = H.last_json

describe("action speculation", function()
  it("never launches a forbidden tool early, and stays lossless (1,000 adversarial queries) #slow", function()
    local st, out, err = H.specula({ "run", SCRIPTS .. "action_safety.lua", "1000" })
    assert.equals(0, st, err)
    local r = last_json(out)
    assert.is_true(r.checked >= 1000)
    assert.equals(0, r.mismatches)
    assert.equals(0, r.core_forbidden_full)
    assert.equals(0, r.tool_forbidden_early)
    assert.is_true(r.fired > 100 and r.promoted > 50, "predictions must actually fire and hit")
    assert.is_true(r.read_early > 0)
  end)

  it("cancels orphaned predictions at every step boundary", function()
    local server = H.server()
    local st, out, err = H.specula({ "run", SCRIPTS .. "action_orphans.lua", server.base })
    server.stop()
    assert.equals(0, st, err)
    local r = last_json(out)
    assert.equals("done", r.answer)
    assert.equals(0, r.worst_open_at_step)
    assert.equals(0, r.stall_open_after)
    assert.equals(0, r.transfers_after)
    assert.equals(5, r.promoted)
    assert.equals(13, r.wasted)  -- 2 wrong per action step, and all 3 at the final step
    assert.is_false(r.lossy)
  end)

  it("marks lossy matching modes in the stats", function()
    local server = H.server()
    local st, out, err = H.specula({ "run", SCRIPTS .. "action_orphans.lua", server.base, "name_only" })
    server.stop()
    assert.equals(0, st, err)
    local r = last_json(out)
    assert.is_true(r.lossy)
    assert.is_true(r.promoted >= 1)
  end)

  it("keeps every query's wasted cost within its budget", function()
    local st, out, err = H.specula({ "run", SCRIPTS .. "action_budget.lua" })
    assert.equals(0, st, err)
    local r = last_json(out)
    assert.is_true(r.total > 0, "the adversary must waste something")
    assert.is_true(r.worst <= r.budget + 1e-9, "wasted " .. r.worst .. " > budget " .. r.budget)
  end)

  it("speeds up the research example and reports hit rate and waste #timing", function()
    local q = H.tmpfile("pq.jsonl", (function()
      local t = {}
      for i = 1, 12 do t[i] = cjson.encode({ id = "p" .. i, query = "topic " .. i }) end
      return table.concat(t, "\n") .. "\n"
    end)())
    local function run(extra)
      local out = H.tmpfile()
      local args = { "run", H.root .. "/examples/paste_research.lua", "--input", q, "--out", out, "--concurrency", "3", "--quiet" }
      for _, a in ipairs(extra) do args[#args + 1] = a end
      local st, _, err = H.specula(args)
      assert.equals(0, st, err)
      return H.jsonl(H.read(out))
    end
    local seq = run({ "--mode", "sequential", "--predict", "off" })
    local act = run({ "--mode", "sequential" })
    local wall_s, wall_a, fired, promoted = 0, 0, 0, 0
    for i = 1, #seq do
      assert.same(seq[i].trajectory, act[i].trajectory)
      assert.equals(seq[i].answer, act[i].answer)
      wall_s, wall_a = wall_s + seq[i].stats.wall_ms, wall_a + act[i].stats.wall_ms
      fired, promoted = fired + act[i].stats.prefetch.fired, promoted + act[i].stats.prefetch.promoted
    end
    assert.is_true(wall_a < 0.95 * wall_s, string.format("no speedup: %.0f vs %.0f ms", wall_a, wall_s))
    assert.is_true(promoted > 0 and promoted <= fired)
  end)
end)
