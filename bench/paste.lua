-- bench/paste.lua — the research agent (examples/paste_research.lua) on the
-- simulated backend, the same queries side by side: sequential, action
-- speculation alone, SpecHop alone, both axes.
--   specula bench paste [--queries N]
local specula = require "specula"
local N = tonumber(os.getenv("BENCH_QUERIES") or "") or 40
for i = 1, #arg do if arg[i] == "--queries" then N = tonumber(arg[i + 1]) end end

local root = require("specula.internal.core").host.root
local function load_agent() return assert(loadfile(root .. "/examples/paste_research.lua"))() end

local qs = {}
for i = 1, N do qs[i] = { id = "p" .. i, query = "research topic " .. i } end

local configs = {
  { "sequential", { mode = "sequential", predict = "off" } },
  { "action speculation", { mode = "sequential" } },
  { "SpecHop (k=3)", { mode = "spechop", k = 3, predict = "off" } },
  { "both (k=3)", { mode = "spechop", k = 3 } },
}
print(string.format("research agent, %d queries, 6 tool calls each, simulated backend (concurrency 8)", N))
print(string.format("%-20s %10s %8s %9s %9s %8s %12s %7s", "configuration", "wall(ms)", "RelLat", "hit rate",
  "promoted", "wasted", "wasted cost", "same"))
local base
for _, c in ipairs(configs) do
  local opts = c[2]
  opts.queries, opts.concurrency = qs, 8
  local agent = load_agent()   -- a fresh predictor: every configuration learns from scratch
  local recs, a = specula.run(agent, opts)
  local traj = {}
  for i, r in ipairs(recs) do traj[i] = specula.json.canonical({ r.answer, r.trajectory }) end
  base = base or traj
  local same = 0
  for i = 1, #traj do if traj[i] == base[i] then same = same + 1 end end
  local pf = a.prefetch
  print(string.format("%-20s %10.0f %8.3f %9s %9s %8d %12.4f %3d/%d", c[1], a.wall_ms / #recs, a.rel_lat,
    pf and pf.hit_rate and string.format("%.3f", pf.hit_rate) or "-", pf and tostring(pf.promoted) or "-",
    a.wasted_calls, a.wasted_cost, same, #recs))
end
print("(wall = mean per query; wasted = speculative calls thrown away, both axes; same = answers and")
print(" trajectories identical to sequential)")
