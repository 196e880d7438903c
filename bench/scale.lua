-- bench/scale.lua — 10,000 concurrent trajectories at k = 4 (the trivial
-- agent, zero latency) and 10,000 sleeping coroutines: wall time, peak RSS
-- and bytes per thread, beside the Python reference.
--   specula bench scale [--queries Q] [--hops N] [--no-ref]
local specula = require "specula"
local json = specula.json
local B = dofile(require("specula.internal.core").host.root .. "/bench/lib.lua")

local Q, N, REF = 10000, 20, true
for i = 1, #arg do
  if arg[i] == "--queries" then Q = tonumber(arg[i + 1]) end
  if arg[i] == "--hops" then N = tonumber(arg[i + 1]) end
  if arg[i] == "--no-ref" then REF = false end
end

-- each measurement in a fresh process, so peak RSS is its own
local self = B.self_bin() or (B.root .. "/build/specula")
local function child(code, ...)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(code)
  f:close()
  local args = { ... }
  local p = io.popen(self .. " run " .. path .. " " .. table.concat(args, " ") .. " 2>&1")
  local out = p:read("*a")
  p:close()
  os.remove(path)
  return json.decode(out:match("{.*}") or "") or error("bench child failed: " .. out)
end

local TRAJ = [[
local specula = require "specula"
local B = dofile(require("specula.internal.core").host.root .. "/bench/lib.lua")
local Q, N = tonumber(arg[1]), tonumber(arg[2])
local saved = os.getenv
os.getenv = function(k) if k == "BENCH_HOPS" then return tostring(N) end return saved(k) end
local agent = assert(loadfile(B.root .. "/bench/trivial_agent.lua"))()
os.getenv = saved
local qs = {}
for i = 1, Q do qs[i] = "q" .. i end
collectgarbage()
local base = B.rss_bytes()
local t0 = specula.now()
local recs, a = specula.run(agent, { queries = qs, k = 4, concurrency = Q, max_hops = N + 2, light = true })
local wall = specula.now() - t0
for _, r in ipairs(recs) do assert(r.answer == "done " .. N, r.error) end
print(specula.json.encode({ wall_s = wall / 1000, peak = B.peak_rss_bytes(), base = base, hops = a.hops,
  max_threads = 4 }))
]]

local SLEEP = [[
local specula = require "specula"
local B = dofile(require("specula.internal.core").host.root .. "/bench/lib.lua")
local n = tonumber(arg[1])
collectgarbage()
local base = B.rss_bytes()
local ts = {}
for i = 1, n do ts[i] = specula.spawn(specula.sleep, 200) end
specula.sleep(50)
collectgarbage()
local during = B.rss_bytes()
specula.wait_all(ts)
print(specula.json.encode({ base = base, during = during }))
]]

print("machine: " .. B.machine())
local r = child(TRAJ, Q, N)
local ref
if REF then
  local p = io.popen(string.format("python3 %s/bench/ref/spechop_ref.py --queries %d --hops %d --k 4 --json 2>/dev/null",
    B.root, Q, N))
  ref = json.decode((p:read("*a") or ""):match("{.*}") or "")
  p:close()
end
local bpt = (r.peak - r.base) / (Q * 4)
print(string.format("%d concurrent trajectories x %d hops at k = 4 (zero latency)", Q, N))
print(string.format("%-10s %10s %14s %18s", "", "wall (s)", "peak RSS (MB)", "bytes per thread"))
print(string.format("%-10s %10.2f %14.1f %18.0f", "specula", r.wall_s, r.peak / 1048576, bpt))
if ref then
  print(string.format("%-10s %10.2f %14.1f %18.0f", "python", ref.wall_s, ref.peak_rss_bytes / 1048576, ref.bytes_per_thread))
  print(string.format("%-10s %10.1fx %13.1fx %17.1fx", "ratio", ref.wall_s / r.wall_s,
    ref.peak_rss_bytes / r.peak, ref.bytes_per_thread / bpt))
end
local s = child(SLEEP, 10000)
print(string.format("10,000 sleeping coroutines: %.0f bytes each (RSS %.1f -> %.1f MB)",
  (s.during - s.base) / 10000, s.base / 1048576, s.during / 1048576))
