-- bench/batch.lua — a plain `specula run` over a large input, end to end:
-- JSONL in, records on disk, one process, the simulated backend under the
-- virtual clock (one configuration: spechop, k = 3). Prints, per input
-- size, the wall time, queries and committed hops per second, and the
-- process's peak RSS (VmHWM, sampled from /proc while it runs), so the cost
-- of a growing input shows: the input is read as the run goes
-- (specula.run.inputs), so the peak should stay flat.
--   specula bench batch [--sizes 10000,100000,1000000] [--hops H]
local B = dofile(require("specula.internal.core").host.root .. "/bench/lib.lua")
local json = require("specula.json")
local specula = require("specula")

local SIZES, HOPS = { 10000, 100000, 1000000 }, 12
for i = 1, #arg do
  if arg[i] == "--sizes" then
    SIZES = {}
    for n in (arg[i + 1] or ""):gmatch("%d+") do SIZES[#SIZES + 1] = tonumber(n) end
  end
  if arg[i] == "--hops" then HOPS = tonumber(arg[i + 1]) end
end
local self = B.self_bin() or (B.root .. "/build/specula")

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. dir) == 0)
local agent = dir .. "/agent.lua"
local f = assert(io.open(agent, "w"))
f:write(string.format([[
local specula = require "specula"
return specula.sim.multihop { hops = %d, p = 0.68, seg = { "lognormal", 6, 0.3 },
  spec = { "lognormal", 11.4, 0.3 }, target = { "lognormal", 60, 0.3 } }
]], HOPS))
f:close()

print("machine: " .. B.machine())
print(string.format("plain run, %d hops a query, spechop k = 3, virtual clock, records to --out", HOPS))
print(string.format("%9s %9s %10s %10s %10s", "queries", "seconds", "queries/s", "hops/s", "peak MB"))
for _, n in ipairs(SIZES) do
  local input = string.format("%s/q%d.jsonl", dir, n)
  f = assert(io.open(input, "w"))
  for i = 1, n do f:write('{"id":"b', i, '","query":"batch question ', i, '"}\n') end
  f:close()
  local out, hwm = string.format("%s/out%d.jsonl", dir, n), dir .. "/hwm"
  -- the peak RSS of the child: VmHWM read every 50 ms until it exits
  local cmd = string.format("%s run %s --input %s --clock virtual --k 3 --out %s --quiet & pid=$!; "
    .. "m=0; while kill -0 $pid 2>/dev/null; do v=$(awk '/^VmHWM/ {print $2}' /proc/$pid/status 2>/dev/null); "
    .. "[ -n \"$v\" ] && [ \"$v\" -gt \"$m\" ] && m=$v; sleep 0.05; done; wait $pid; echo $m > %s",
    self, agent, input, out, hwm)
  local t0 = specula.real_now()
  os.execute(cmd)
  local dt = (specula.real_now() - t0) / 1000
  local hops, recs = 0, 0
  for line in io.lines(out) do
    local r = json.decode(line)
    recs = recs + 1
    hops = hops + (r and r.stats and r.stats.hops or 0)
  end
  local h = io.open(hwm)
  local kb = h and tonumber(h:read("*l") or "") or 0
  if h then h:close() end
  print(string.format("%9d %9.2f %10.0f %10.0f %10.1f%s", n, dt, n / dt, hops / dt, kb / 1024,
    recs == n and "" or "  (INCOMPLETE: " .. recs .. " records)"))
end
print("(seconds: process start to the last record on disk; peak MB: VmHWM sampled every 50 ms)")
os.execute("rm -rf " .. dir)
