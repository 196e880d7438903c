-- bench/core.lua — scheduling overhead per hop: a trivial chain agent (Lua
-- step, update, tool, speculator, verifier and policy function called on
-- every hop) at zero latency, k in {1, 4, inf}, beside the Python asyncio
-- reference (bench/ref/spechop_ref.py) running the same schedule and agent.
--   specula bench core [--queries Q] [--hops N] [--no-ref]
local specula = require "specula"
local json = specula.json
local root = require("specula.internal.core").host.root

local Q, N, REF = 100, 100, true
for i = 1, #arg do
  if arg[i] == "--queries" then Q = tonumber(arg[i + 1]) end
  if arg[i] == "--hops" then N = tonumber(arg[i + 1]) end
  if arg[i] == "--no-ref" then REF = false end
end

local function load_agent(n)
  local saved = os.getenv
  -- the trivial agent reads its hop count from BENCH_HOPS
  os.getenv = function(k) if k == "BENCH_HOPS" then return tostring(n) end return saved(k) end
  local a = assert(loadfile(root .. "/bench/trivial_agent.lua"))()
  os.getenv = saved
  return a
end

local RUNS = 5   -- ours and the reference run in alternation, RUNS times each

local median = dofile(root .. "/bench/lib.lua").median

local function batch(agent, qs, k, light)
  collectgarbage()
  local t0 = specula.now()
  local recs, a = specula.run(agent, { queries = qs, k = k, concurrency = Q, max_hops = N + 2, light = light })
  local dt = specula.now() - t0
  for _, rec in ipairs(recs) do assert(rec.answer == "done " .. N, rec.error) end
  return dt * 1000 / a.hops
end

local function ref_once(k)
  local cmd = string.format("python3 %s/bench/ref/spechop_ref.py --queries %d --hops %d --k %s --json 2>/dev/null",
    root, Q, N, tostring(k))
  local p = io.popen(cmd)
  local out = p and p:read("*a") or ""
  if p then p:close() end
  local res = json.decode(out:match("{.*}") or "")
  return res and res.us_per_hop
end

print(string.format("%d queries x %d hops, concurrently, zero latency, p = 1", Q, N))
print(string.format("medians of %d runs; each specula run is followed by a reference run, and the ratio", RUNS))
print("is the median of those paired ratios (the host is shared: pairs see the same load)")
print(string.format("%-6s %14s %14s %16s %14s %8s", "k", "us/hop", "hops/s", "us/hop (records)", "python us/hop", "ratio"))
for _, k in ipairs({ 1, 4, "inf" }) do
  local agent = load_agent(N)
  local qs = {}
  for i = 1, Q do qs[i] = "q" .. i end
  -- warm up: one batch of each shape first, so the figures are the steady
  -- state (traces compiled, pools filled), not the JIT's compile time
  batch(agent, qs, k, true)
  local us, full, py, ratio = {}, {}, {}, {}
  for r = 1, RUNS do
    us[r] = batch(agent, qs, k, true)
    if REF then
      py[r] = ref_once(k)
      if py[r] then ratio[#ratio + 1] = py[r] / us[r] end
    end
  end
  batch(agent, qs, k, false)
  for r = 1, 3 do full[r] = batch(agent, qs, k, false) end
  local m = median(us)
  local pm = #ratio > 0 and median(py) or nil
  local rm = #ratio > 0 and median(ratio) or nil
  print(string.format("%-6s %14.2f %14.0f %16.2f %14s %8s", tostring(k), m, 1e6 / m, median(full),
    pm and string.format("%.1f", pm) or "-", rm and string.format("%.1fx", rm) or "-"))
end
print("(us/hop = wall / committed hops for the whole batch; 'records' also builds the per-hop result")
print(" records of every query; the reference checks answers only, like the first column)")
