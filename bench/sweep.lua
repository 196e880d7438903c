-- bench/sweep.lua — a policy sweep at the speed of simulation, end to end:
-- the CLI reads a JSONL input, runs every query under 5 configurations on the
-- simulated backend under the virtual clock, and writes full per-query
-- records (JSONL) to disk. The wall time covers all of it (process start to
-- the last record on disk), with the queries split into one shard per core
-- (--shard i/n: separate processes, as a cluster array job would run them).
--   specula bench sweep [--queries N] [--hops H] [--procs P] [--concurrency C]
local B = dofile(require("specula.internal.core").host.root .. "/bench/lib.lua")
local json = require("specula.json")
local specula = require("specula")

local N, HOPS, PROCS, CONC = 10000, 12, nil, nil
for i = 1, #arg do
  if arg[i] == "--queries" then N = tonumber(arg[i + 1]) end
  if arg[i] == "--hops" then HOPS = tonumber(arg[i + 1]) end
  if arg[i] == "--procs" then PROCS = tonumber(arg[i + 1]) end
  if arg[i] == "--concurrency" then CONC = tonumber(arg[i + 1]) end
end
if not PROCS then
  local p = io.popen("nproc 2>/dev/null")
  PROCS = tonumber(p and p:read("*l") or "") or 1
  if p then p:close() end
end
local CONFIGS = "sequential,spechop:k=2,spechop:k=3,spechop:k=inf,window:k=3"
local self = B.self_bin() or (B.root .. "/build/specula")

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. dir) == 0)
local agent = dir .. "/agent.lua"
local f = assert(io.open(agent, "w"))
f:write(string.format([[
local specula = require "specula"
-- SpecHop's web-search setting (p .68, alpha .19, beta .10; target 60 ms)
return specula.sim.multihop { hops = %d, p = 0.68, seg = { "lognormal", 6, 0.3 },
  spec = { "lognormal", 11.4, 0.3 }, target = { "lognormal", 60, 0.3 } }
]], HOPS))
f:close()
local input = dir .. "/queries.jsonl"
f = assert(io.open(input, "w"))
for i = 1, N do f:write('{"id":"s', i, '","query":"sweep question ', i, '"}\n') end
f:close()

print("machine: " .. B.machine())
print(string.format("%d queries x %d hops x 5 configurations (%s), virtual clock, full records, concurrency %s",
  N, HOPS, CONFIGS, CONC and tostring(CONC) or ("the default (" .. require("specula.internal.domains").DEFAULTS.concurrency .. ")")))

local function run(procs)
  local outs, cmds = {}, {}
  for i = 0, procs - 1 do
    outs[i + 1] = string.format("%s/out_%d_%d.jsonl", dir, procs, i)
    os.remove(outs[i + 1])
    cmds[#cmds + 1] = string.format("%s run %s --input %s --clock virtual --compare %q %s"
      .. "--shard %d/%d --out %s --quiet > /dev/null 2>%s.err &", self, agent, input, CONFIGS,
      CONC and ("--concurrency " .. CONC .. " ") or "", i, procs, outs[i + 1], outs[i + 1])
  end
  local t0 = specula.real_now()
  local ok = os.execute(table.concat(cmds, " ") .. " wait")
  local dt = (specula.real_now() - t0) / 1000
  local hops, recs, bytes, sim_ms, errors = 0, 0, 0, 0, 0
  for _, path in ipairs(outs) do
    local fh = io.open(path, "rb")
    if fh then
      for line in fh:lines() do
        bytes = bytes + #line + 1
        local r = json.decode(line)
        recs = recs + 1
        if r.error then errors = errors + 1 end
        hops = hops + (r.stats and r.stats.hops or 0)
        sim_ms = sim_ms + (r.stats and r.stats.wall_ms or 0)
      end
      fh:close()
    end
  end
  return { procs = procs, seconds = dt, hops = hops, records = recs, bytes = bytes, sim_ms = sim_ms,
           errors = errors, ok = ok == 0 }
end

print(string.format("%6s %9s %10s %9s %12s %10s %14s %10s", "procs", "seconds", "records", "MB", "hops", "hops/s",
  "simulated (h)", "x real"))
for _, p in ipairs(PROCS > 1 and { 1, PROCS } or { 1 }) do
  local r = run(p)
  print(string.format("%6d %9.2f %10d %9.1f %12d %10.0f %14.2f %10.0f%s", r.procs, r.seconds, r.records,
    r.bytes / 1e6, r.hops, r.hops / r.seconds, r.sim_ms / 3.6e6, r.sim_ms / 1000 / r.seconds,
    (r.ok and r.errors == 0 and r.records == N * 5) and "" or "  (INCOMPLETE: see " .. dir .. ")"))
end
print("(hops/s = committed hops over the wall time from process start to the last record on disk;")
print(" simulated = Σ wall_ms of the records, i.e. sequential-equivalent query time covered;")
print(" x real = simulated time / wall time; procs > 1 = one --shard per process)")
os.execute("rm -rf " .. dir)
