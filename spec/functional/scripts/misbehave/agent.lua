-- A small agent for spec/functional/misbehave_spec.lua: two tool calls a
-- query; MISBEHAVE (env) names the query whose step misbehaves and how.
local specula = require "specula"
local how, bad = os.getenv("MISBEHAVE") or "", os.getenv("MISBEHAVE_Q") or "b"
local function misbehave(q)
  if q ~= bad then return end
  if how == "yield" then coroutine.yield()
  elseif how == "nil" then error(nil)
  elseif how == "number" then error(42)
  elseif how == "table" then error({ code = 7 })
  elseif how == "badtostring" then
    error(setmetatable({}, { __tostring = function() error("tostring fails too") end }))
  end
end
return specula.agent {
  name = "misbehave",
  init = function(q)
    if how == "init" and q == bad then error(setmetatable({}, { __tostring = function() return nil end })) end
    return { q = q, hop = 0 }
  end,
  step = function(s)
    if s.hop == 1 then misbehave(s.q) end
    if s.hop == 2 then return { final = s.q .. ":" .. s.last } end
    return { segment = "s", action = { tool = "look", args = { n = s.hop, q = s.q } } }
  end,
  update = function(s, step, obs)
    if how == "update" and s.q == bad then error() end
    return { q = s.q, hop = s.hop + 1, last = obs }
  end,
  tools = { look = { call = function(args)
    specula.sleep(5)
    if how == "tool" and args.q == bad then error({ tool = "broke" }) end
    return "seen" .. args.n
  end,
  speculate = function(args)
    if how == "speculate" and args.q == bad then error(nil) end
    return "seen" .. args.n
  end,
  verify = function(pred, actual, ctx)
    if how == "verify" and ctx.action.args.q == bad then error({}) end
    return pred == actual
  end } },
}
