-- bench/fidelity.lua — measured RelLat against the event-level expectation
-- (a discrete-event re-schedule of the same recorded stage times, `specula
-- replay`) and against the theory (Cor. 1 and 3 at the measured p, alpha,
-- beta), at three settings of SpecHop's Table 1, on the simulated backend.
--   specula bench fidelity [--queries Q] [--hops N]
local specula = require "specula"
local json = specula.json
local B = dofile(require("specula.core").host.root .. "/bench/lib.lua")

local Q, N = 100, 30
for i = 1, #arg do
  if arg[i] == "--queries" then Q = tonumber(arg[i + 1]) end
  if arg[i] == "--hops" then N = tonumber(arg[i + 1]) end
end

-- (p, alpha, beta) from Table 1
local SETTINGS = {
  { "web/GPT-4o 2Wiki", 0.68, 0.19, 0.10 },
  { "web/4o-mini MuSiQue", 0.49, 0.20, 0.11 },
  { "E5/Llama-8B 2Wiki", 0.27, 0.30, 0.74 },
}
local TARGET = 60   -- ms, the target tool's mean latency
local self = B.self_bin() or (B.root .. "/build/specula")

print("machine: " .. B.machine())
print(string.format("%d queries x %d hops, lognormal latencies (CV 0.3), target mean %d ms", Q, N, TARGET))
print(string.format("%-36s %4s %9s %9s %7s %9s %9s", "setting (p, alpha, beta)", "k", "measured", "replay", "gap",
  "RelLat_k", "RelLat*"))
for _, s in ipairs(SETTINGS) do
  local name, p, a, b = s[1], s[2], s[3], s[4]
  local agent = specula.sim.multihop { hops = N, p = p, seg = { "lognormal", b * TARGET, 0.3 },
    spec = { "lognormal", a * TARGET, 0.3 }, target = { "lognormal", TARGET, 0.3 } }
  for _, k in ipairs({ 3, "inf" }) do
    local qs = {}
    for i = 1, Q do qs[i] = { id = name:sub(1, 3) .. i, query = "fidelity " .. i } end
    local recs, agg = specula.run(agent, { queries = qs, k = k, concurrency = Q, start_jitter_ms = TARGET })
    -- the event-level expectation: replay the recorded stages at the same k
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    for _, r in ipairs(recs) do
      f:write(json.encode({ id = r.id, stages = r.stages }), "\n")
    end
    f:close()
    local pr = io.popen(string.format("%s replay %s --k %s --json 2>/dev/null", self, path, tostring(k)))
    local rep = json.decode((pr:read("*a") or ""):match("{.*}") or "")
    pr:close()
    os.remove(path)
    local kk = k == "inf" and -1 or k
    local C = require("specula.core").C
    local rk = C.sp_theory_rel_lat_k(agg.p_hat, agg.alpha_hat, agg.beta_hat, kk)
    print(string.format("%-36s %4s %9.3f %9.3f %+7.3f %9.3f %9.3f",
      string.format("%s (%.2f, %.2f, %.2f)", name, p, a, b), tostring(k), agg.rel_lat,
      rep and rep.rel_lat or -1, agg.rel_lat - (rep and rep.rel_lat or 0), rk, agg.rel_lat_star or -1))
  end
end
print("(measured = Σ wall / Σ standard of the live run; replay = the discrete-event re-schedule of the")
print(" same stage records at the same k; RelLat_k (Cor. 3, bounded window) and RelLat* (Cor. 1) at the")
print(" measured p, alpha, beta)")
