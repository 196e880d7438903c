-- The per-query wasted-cost budget holds under a predictor that is always
-- wrong about allowed, costly tools.
local specula = require "specula"
local json, sim = specula.json, specula.sim
local BUDGET = 0.05
local agent = specula.agent {
  policy = { classes = { read = "full" }, tools = { search = "read" },
             budget = { max_wasted_cost = BUDGET, max_inflight = 10 } },
  tools = { search = { cost = 0.02,
    call = function(args, ctx) specula.sleep(3) return "r" .. args.i end,
    speculate = function(args, ctx) specula.sleep(1) return "wrong" end } },
  predict = function(history)
    local out = {}
    for j = 1, 3 do out[j] = { tool = "search", args = { i = #history, junk = j }, confidence = 0.9 } end
    return out
  end,
  init = function(q) return { i = 0 } end,
  step = function(s) specula.sleep(5) if s.i >= 8 then return { final = "ok" } end
    return { action = { tool = "search", args = { i = s.i } } } end,
  update = function(s, step, obs) return { i = s.i + 1 } end,
}
local qs = {}
for i = 1, 30 do qs[i] = "b" .. i end
local recs = specula.run(agent, { queries = qs, k = "inf", ev_cost_ms = 0 })
local worst, total, gated = 0, 0, 0
for _, r in ipairs(recs) do
  if r.stats.wasted_cost > worst then worst = r.stats.wasted_cost end
  total = total + r.stats.wasted_cost
end
print(json.encode({ budget = BUDGET, worst = worst, total = total, failed = #recs - #qs }))
