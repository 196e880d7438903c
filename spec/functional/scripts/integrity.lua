-- An agent for the integrity specs: the query id picks a value that cannot
-- be written as JSON ("obs_<kind>": the first observation, "ans_<kind>": the
-- final answer); "fail_*" ids raise while --set fail=1 (or INTEGRITY_FAIL=1 in
-- the environment: a failure that is not part of the run's options); --set log=PATH
-- appends the id of every query that starts (to see how far a run got).
local specula = require "specula"
local a = specula.sim.multihop { hops = 2, p = 1, seg = 1, spec = 1, target = tonumber(os.getenv("INTEGRITY_TARGET_MS")) or 2 }

local BAD = {
  utf8 = function() return "bad \255\254 bytes" end,
  surrogate = function() return "surrogate \237\160\128 here" end,
  nan = function() return 0 / 0 end,
  inf = function() return -1 / 0 end,
  deep = function()
    local t = {}
    local c = t
    for _ = 1, 100000 do c.x = {} c = c.x end
    return t
  end,
  fn = function() return print end,
  cycle = function() local t = { n = 1 } t.self = t return t end,
}

local call, step, init = a.tools.search.call, a.step, a.init
a.init = function(q, ctx)
  if ctx.set.log then
    local f = io.open(ctx.set.log, "a")
    f:write(ctx.id, "\n")
    f:close()
  end
  local fail = ctx.set.fail == 1 or os.getenv("INTEGRITY_FAIL") == "1"
  if fail and tostring(ctx.id):match("^fail_") then error("planned failure of " .. ctx.id) end
  return init(q, ctx)
end
a.tools.search.call = function(args, ctx)
  local obs = call(args, ctx)
  local kind = tostring(ctx.id):match("^obs_(.*)")
  if kind then return BAD[kind]() end
  return obs
end
a.step = function(state, ctx)
  local s = step(state, ctx)
  local kind = tostring(ctx.id):match("^ans_(.*)")
  if kind and s.final ~= nil then return { final = BAD[kind]() } end
  return s
end
return a
