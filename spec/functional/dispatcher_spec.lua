-- The job dispatcher (lua/specula/internal/sched.lua): window calls run one
-- after another in a loop that sits inside one protected call, re-entered
-- when a job raises.
local H = require "support.helpers"

local SIM = [[
local specula = require "specula"
return specula.sim.multihop { hops = 6, p = 0.7, seg = { "lognormal", 6, 0.3 },
  spec = { "lognormal", 11, 0.3 }, target = { "lognormal", 60, 0.3 } }
]]

local function queries(n, name)
  local lines = {}
  for i = 1, n do lines[i] = string.format('{"id":"q%d","query":"question %d"}', i, i) end
  return H.tmpfile(name, table.concat(lines, "\n") .. "\n")
end

describe("the job dispatcher", function()
  it("fails only the query whose job raised, and goes on with the jobs after it", function()
    -- update() raises on every third query at its second hop, between
    -- other queries' jobs (speculative ones included)
    local agent = H.tmpfile("dispatch_agent.lua", [[
local specula = require "specula"
return specula.agent {
  policy = { search = "full" },
  tools = { search = { call = function(args) specula.sleep(5) return "r:" .. args.q end,
                       speculate = function(args) specula.sleep(1) return "r:" .. args.q end } },
  init = function(q, ctx) return { id = ctx.id, hop = 0 } end,
  step = function(s)
    if s.hop >= 3 then return { final = s.id .. " done" } end
    return { action = { tool = "search", args = { q = s.id .. "/" .. s.hop } } }
  end,
  update = function(s, step, obs)
    if s.hop == 1 and tonumber(s.id:match("%d+")) % 3 == 0 then error("update failed for " .. s.id) end
    return { id = s.id, hop = s.hop + 1 }
  end,
}
]])
    local out = H.tmpfile("dispatch_out.jsonl")
    local st, _, err = H.specula({ "run", agent, "--input", queries(12, "dispatch_q.jsonl"), "--out", out,
                                   "--clock", "virtual", "--k", "3", "--concurrency", "5", "--quiet" })
    assert.equals(3, st, err)
    local recs = H.jsonl(H.read(out))
    assert.equals(12, #recs)
    for i, r in ipairs(recs) do
      assert.equals("q" .. i, r.id)
      if i % 3 == 0 then
        assert.is_nil(r.answer)
        assert.matches("dispatch_agent.lua:%d+: update failed for q" .. i, r.error)
        assert.matches("stack traceback", r.error, 1, true)
        -- the user's frames only: none of the engine's own, the dispatcher's included
        assert.is_nil(r.error:find("internal/sched.lua", 1, true))
      else
        assert.is_nil(r.error)
        assert.equals("q" .. i .. " done", r.answer)
        assert.equals(3, r.stats.hops)
      end
    end
  end)

  -- What the loop inside one xpcall is for: a job's function returns to a
  -- Lua frame, so its trace is compiled. Returning into an xpcall per job
  -- aborted each such trace ("NYI: return to lower frame") and left the
  -- job functions in the interpreter.
  it("has the job functions compiled: no trace aborts returning from a job", function()
    if not jit or not jit.status() then pending("the JIT is off") return end
    local log = H.tmpfile("dispatch_jitv.txt")
    local st, _, err = H.specula({ "run", H.tmpfile("dispatch_sim.lua", SIM), "--input", queries(200, "dispatch_q200.jsonl"),
                                   "--clock", "virtual", "--k", "3", "--quiet" }, { SPECULA_JITV = log })
    assert.equals(0, st, err)
    local text = H.read(log) or ""
    assert.is_truthy(text:find("[TRACE", 1, true), "no trace log written")
    for line in text:gmatch("[^\n]+") do
      assert.is_nil(line:find("return to lower frame at protocol.lua", 1, true), line)
    end
  end)
end)
