-- Agents for the window specs, selected by --set case=NAME.
local specula = require "specula"
local sim = specula.sim

local cases = {}
local function base(over)
  local a = sim.multihop { hops = 3, p = 1, seg = 2, spec = 1, target = 10 }
  for k, v in pairs(over or {}) do a[k] = v end
  return a
end

-- step returns a malformed table at hop 2
cases.malformed = function()
  local a = base()
  local step = a.step
  a.step = function(state, ctx)
    if state.hop == 2 and ctx.id == "bad" then return { action = "search" } end
    return step(state, ctx)
  end
  return a
end

-- update mutates its input state
cases.mutate = function()
  local a = base()
  a.update = function(state, step, obs, ctx)
    state.hop = state.hop + 1           -- the mistake
    return { q = state.q, hop = state.hop, n = state.n, last = obs,
             notes = state.notes and state.notes .. "|" .. obs or obs }
  end
  return a
end

-- the verifier raises
cases.verifier_error = function()
  local a = base()
  a.verify = function(pred, actual, ctx) error("verifier exploded") end
  return a
end

-- the speculator raises, or is too slow
cases.spec_error = function()
  local a = base()
  a.tools.search.speculate = function(args, ctx) error("speculator exploded") end
  return a
end
cases.spec_slow = function()
  -- a target far slower than the 3 ms timeout, so the timeout decides even
  -- on a loaded machine or under valgrind
  local a = sim.multihop { hops = 3, p = 1, seg = 2, spec = 1, target = 80 }
  a.tools.search.speculate = function(args, ctx) specula.sleep(5000) return "late" end
  return a
end

-- every guess wrong, a slow target that the next thread launches early, no
-- declared cost: the discarded calls still count as wasted
cases.wasted_nocost = function()
  local a = sim.multihop { hops = 4, p = 0, seg = 1, spec = 1, target = 30 }
  a.policy = { search = "full" }
  for _, t in pairs(a.tools) do t.cost = nil end
  return a
end

-- the tool raises (on the true path)
cases.tool_error = function()
  local a = base()
  local call = a.tools.search.call
  a.tools.search.call = function(args, ctx)
    if ctx.id == "bad" and ctx.hop == 1 then error("search backend is down") end
    return call(args, ctx)
  end
  return a
end

-- step names a tool the agent does not have
cases.unknown_tool = function()
  local a = base()
  local step = a.step
  a.step = function(state, ctx)
    local s = step(state, ctx)
    if ctx.id == "bad" and s.action then s.action.tool = "nope" end
    return s
  end
  return a
end

local name = nil
for i = 1, #arg do if arg[i] == "--set" and arg[i + 1]:match("^case=") then name = arg[i + 1]:sub(6) end end
assert(cases[name], "unknown case " .. tostring(name))
return cases[name]()
