-- bench/core.lua — scheduling overhead per hop: a trivial chain agent (Lua
-- step, update, tool, speculator, verifier and policy function called on
-- every hop) at zero latency, k in {1, 4, inf}, beside the Python asyncio
-- reference (bench/ref/spechop_ref.py) running the same schedule and agent.
--   specula bench core [--queries Q] [--hops N] [--no-ref]
local specula = require "specula"
local json = specula.json
local root = require("specula.core").host.root

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

local RUNS = 3   -- each side runs this many times; the table shows medians

local function median(xs)
  table.sort(xs)
  return xs[math.floor((#xs + 1) / 2)]
end

local function ours(k, light)
  local agent = load_agent(N)
  local qs = {}
  for i = 1, Q do qs[i] = "q" .. i end
  -- warm up: one batch of the same shape first, so the figure is the
  -- steady state (traces compiled, pools filled), not the JIT's compile time
  specula.run(agent, { queries = qs, k = k, concurrency = Q, max_hops = N + 2, light = light })
  local us, hps = {}, {}
  for r = 1, RUNS do
    collectgarbage()
    local t0 = specula.now()
    local recs, a = specula.run(agent, { queries = qs, k = k, concurrency = Q, max_hops = N + 2, light = light })
    local dt = specula.now() - t0
    for _, rec in ipairs(recs) do assert(rec.answer == "done " .. N, rec.error) end
    us[r] = dt * 1000 / a.hops
  end
  local m = median(us)
  return m, 1e6 / m
end

local function ref(k)
  if not REF then return nil end
  local xs = {}
  for r = 1, RUNS do
    local cmd = string.format("python3 %s/bench/ref/spechop_ref.py --queries %d --hops %d --k %s --json 2>/dev/null",
      root, Q, N, tostring(k))
    local p = io.popen(cmd)
    local out = p and p:read("*a") or ""
    if p then p:close() end
    local res = json.decode(out:match("{.*}") or "")
    if not res then return nil end
    xs[r] = res.us_per_hop
  end
  return median(xs)
end

print(string.format("%d queries x %d hops, concurrently, zero latency, p = 1; median of %d runs each", Q, N, RUNS))
print(string.format("%-6s %14s %14s %16s %14s %8s", "k", "us/hop", "hops/s", "us/hop (records)", "python us/hop", "ratio"))
for _, k in ipairs({ 1, 4, "inf" }) do
  local us, hps = ours(k, true)
  local us_full = ours(k, false)
  local py = ref(k)
  print(string.format("%-6s %14.2f %14.0f %16.2f %14s %8s", tostring(k), us, hps, us_full,
    py and string.format("%.1f", py) or "-", py and string.format("%.1fx", py / us) or "-"))
end
print("(us/hop = wall / committed hops for the whole batch; 'records' also builds the per-hop result")
print(" records of every query; the reference checks answers only, like the first column)")
