-- robust_spec: query "bad"'s tool starts two tasks that wait on each other
-- (a deadlock); the other queries finish at once.
local specula = require "specula"
return specula.agent {
  init = function(q) return { hop = 0 } end,
  step = function(s, ctx)
    if s.hop > 0 then return { final = "answer " .. ctx.id } end
    return { segment = "s", action = { tool = "t", args = {} } }
  end,
  update = function(s) return { hop = s.hop + 1 } end,
  tools = { t = { call = function(args, ctx)
    if ctx.id ~= "bad" then specula.sleep(5) return "fine" end
    local a, b
    a = specula.spawn(function() specula.sleep(1) return b:wait() end)
    b = specula.spawn(function() specula.sleep(1) return a:wait() end)
    return select(2, a:wait())
  end } },
}
