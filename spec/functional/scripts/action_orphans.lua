-- Orphans are cancelled on the wire at every step boundary: wrong
-- predictions hit /stall; at the start of each step no transfer may be open.
local specula = require "specula"
local json = specula.json
local BASE = arg[1]
local MATCH = arg[2] or "exact"

local open_at_step, steps = {}, 0
local agent = specula.agent {
  policy = { get = "full" },
  tools = { get = { cost = 0.01, call = function(args, ctx)
    local path = args.good and "/delay/10" or "/stall"
    local r, err = specula.http.request{ url = BASE .. path }
    if not r then error(err, 0) end
    return "got " .. tostring(args.i)
  end } },
  -- one right and two wrong predictions every step
  predict = function(history)
    local i = #history
    return { { tool = "get", args = { i = i, good = true }, confidence = 0.5 },
             { tool = "get", args = { i = i, wrong = 1 }, confidence = 0.3 },
             { tool = "get", args = { i = i, wrong = 2 }, confidence = 0.2 } }
  end,
  init = function(q) return { i = 0 } end,
  step = function(s, ctx)
    steps = steps + 1
    open_at_step[#open_at_step + 1] = specula.counts().transfers
    specula.sleep(15)
    if s.i >= 5 then return { final = "done" } end
    return { action = { tool = "get", args = { i = s.i, good = true } } }
  end,
  update = function(s, step, obs) return { i = s.i + 1 } end,
}
local recs, agg = specula.run(agent, { queries = { "o1" }, mode = "sequential", ev_cost_ms = 0, match = MATCH })
local worst = 0
for _, n in ipairs(open_at_step) do if n > worst then worst = n end end
specula.sleep(20)
local stall = json.decode(specula.http.request{ url = BASE .. "/stats" }.body).stall_open
local pfs = recs[1].stats.prefetch
print(json.encode({ steps = steps, worst_open_at_step = worst, stall_open_after = stall,
  fired = pfs.fired, promoted = pfs.promoted, wasted = pfs.wasted, lossy = pfs.lossy,
  promoted_lossy = pfs.promoted_lossy, stats_lossy = recs[1].stats.lossy or false,
  answer = recs[1].answer, error = recs[1].error, transfers_after = specula.settle().transfers }))
