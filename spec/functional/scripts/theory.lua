-- Measured RelLat against the SpecHop theory on the simulated backend:
-- fixed latencies with alpha = 0.2, beta = 0.15 (seg 6 ms, spec 8 ms,
-- target 40 ms), N = 30 hops, 200 concurrent queries, on the virtual clock.
-- Prints one JSON line per configuration.
local specula = require "specula"
local json = specula.json
local p, m = tonumber(arg[1]), tonumber(arg[2] or "1")
local rank = m > 1 and { 0.5, 0.3, 0.2 } or nil
local agent = specula.sim.multihop { hops = 30, p = p, m = m, rank = rank, seg = 6, spec = 8, target = 40 }
local qs = {}
for i = 1, 200 do qs[i] = "theory query " .. i end
for i = 3, #arg do
  local k = arg[i] == "inf" and "inf" or tonumber(arg[i])
  -- the virtual clock: the schedule itself, free of the machine's load
  local _, a = specula.run(agent, { queries = qs, k = k, m = m, concurrency = 200, clock = "virtual" })
  print(json.encode({ p = p, m = m, k = arg[i], rel_lat = a.rel_lat, p_hat = a.p_hat or json.null,
    alpha_hat = a.alpha_hat or json.null, beta_hat = a.beta_hat, failed = a.failed,
    rel_lat_star_measured = a.rel_lat_star or json.null }))
end
