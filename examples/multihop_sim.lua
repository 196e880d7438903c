-- examples/multihop_sim.lua — SpecHop on the simulated backend, no API key.
--
--   specula run examples/multihop_sim.lua            # demo: speedup vs sequential
--   specula run examples/multihop_sim.lua --query "who directed X?" --k 3
--   specula run examples/multihop_sim.lua --input queries.jsonl --k inf --out r.jsonl
--
-- The simulated agent answers a multi-hop question in `hops` retrieval hops.
-- Latencies follow the paper's web-search setting scaled to milliseconds:
-- model segment 15 ms, speculator 16 ms, target tool 100 ms (α ≈ 0.16,
-- β ≈ 0.15), speculator right with probability p = 0.45.
local specula = require "specula"

local P = tonumber(os.getenv("SPECHOP_P") or "") or 0.45

local agent = specula.sim.multihop {
  name = "multihop-sim",
  hops = { 3, 6 },                       -- per query, keyed by its id
  p = P,
  seg = { "lognormal", 15, 0.3 },
  spec = { "lognormal", 16, 0.3 },
  target = { "lognormal", 100, 0.4 },
  policy = { search = "full" },          -- retrieval is read-only: may run early
}

if #arg > 0 then return agent end        -- `specula run` runs it over the queries

-- Demo: the same 40 queries, sequential then SpecHop at several k.
local queries = {}
for i = 1, 40 do queries[i] = "simulated multi-hop question #" .. i end

print(string.format("%-22s %9s %9s %8s %8s %6s", "configuration", "wall(ms)", "RelLat", "RelLat*", "speedup", "same"))
local base, base_traj
for _, c in ipairs({ { "sequential", 1 }, { "spechop", 2 }, { "spechop", 3 }, { "spechop", "inf" }, { "spechop", "auto" } }) do
  local t0 = specula.now()
  local recs, agg = specula.run(agent, { queries = queries, mode = c[1], k = c[2], concurrency = 40 })
  local wall = specula.now() - t0
  local traj = {}
  for i, r in ipairs(recs) do traj[i] = specula.json.canonical({ r.answer, r.trajectory }) end
  base = base or agg.wall_ms
  base_traj = base_traj or traj
  local same = 0
  for i = 1, #traj do if traj[i] == base_traj[i] then same = same + 1 end end
  print(string.format("%-22s %9.0f %9.3f %8s %7.2fx %3d/%d",
    c[1] == "sequential" and "sequential" or ("spechop k=" .. tostring(c[2])),
    agg.wall_ms / #recs, agg.rel_lat or 0, agg.rel_lat_star and string.format("%.3f", agg.rel_lat_star) or "-",
    base / agg.wall_ms, same, #traj))
end
print(string.format("\n(mean wall per query; RelLat = Σ wall / Σ standard; p = %.2f)", P))
