-- robust_spec: a query that waits (GAP_SLOW_MS, default 30 s) between
-- queries that finish at once; each quick one appends its id to GAP_MARK
-- once it is done, so the spec knows when to send its signal.
local specula = require "specula"
local SLOW = tonumber(os.getenv("GAP_SLOW_MS") or "") or 30000
local MARK = os.getenv("GAP_MARK")
return specula.agent {
  init = function(q) return { hop = 0 } end,
  step = function(s, ctx)
    if s.hop > 0 then
      if MARK and ctx.id ~= "slow" then
        local f = assert(io.open(MARK, "a"))
        f:write(ctx.id, "\n")
        f:close()
      end
      return { final = "answer " .. ctx.id }
    end
    return { segment = "s", action = { tool = "t", args = {} } }
  end,
  update = function(s) return { hop = s.hop + 1 } end,
  tools = { t = function(args, ctx) specula.sleep(ctx.id == "slow" and SLOW or 5) return "ok" end },
}
