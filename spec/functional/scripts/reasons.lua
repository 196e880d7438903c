-- A chain agent whose verifier gives each hop a reason of its own, on a
-- plan both this script and window_spec compute from the query and the hop:
-- runs of the same reason, no reason (the engine's "accepted"), non-ASCII,
-- long, and a rejection naming its hop. Query "bad" gives one reason that is
-- not UTF-8 (its record is built by the Lua path). Waits are on the clock,
-- so under --clock virtual every speculator returns before its target.
local specula = require "specula"
local HOPS = 14

local function wrong(q, hop) return (hop + #q) % 3 == 0 end
local function reason(q, hop, ok)
  if not ok then return "mismatch at hop " .. hop .. ": " .. string.rep("ü", hop) end
  if q == "bad" and hop == 5 then return "bad \255 byte" end
  if hop % 4 == 0 then return "eq" end
  if hop % 4 == 1 then return nil end
  if hop % 4 == 2 then return "equal é " .. string.rep("x", 40 * hop) end
  return "eq"
end

return specula.agent {
  init = function(q) return { q = q, hop = 0 } end,
  step = function(s)
    specula.sleep(1)
    if s.hop >= HOPS then return { final = "done " .. s.hop } end
    return { segment = "s" .. s.hop, action = { tool = "t", args = { i = s.hop, q = s.q } } }
  end,
  update = function(s, step, obs) return { q = s.q, hop = s.hop + 1, last = obs } end,
  tools = { t = {
    call = function(a) specula.sleep(10) return "o" .. a.i end,
    speculate = function(a) specula.sleep(2) return (wrong(a.q, a.i) and "x" or "o") .. a.i end,
  } },
  verify = function(p, o, ctx)
    local ok = p == o
    return ok, reason(ctx.state.q, ctx.hop, ok)
  end,
}
