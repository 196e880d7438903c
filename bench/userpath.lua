-- bench/userpath.lua — the user's path, whole process: `specula run AGENT
-- --input FILE --out FILE` on a chain agent whose model step, tool and
-- speculator each wait once (bench/userpath_agent.lua; `sleep`:
-- specula.sleep(0), `http`: a GET to the loopback test server, `mcp`: a
-- tools/call to the stdio MCP test server under node), beside the
-- asyncio reference (bench/ref/spechop_ref.py --concurrency --out, every
-- call an asyncio.sleep(0)) running the same schedule, the two processes in
-- alternation. Prints µs per committed hop (process start to exit, records
-- on disk), the paired ratio and each process's peak RSS.
--   specula bench userpath [--quick] [--queries Q] [--hops 1,20,80]
--     [--k 1,4,inf,seq] [--concurrency 16,2000] [--runs R] [--wait sleep|http|mcp|none] [--no-ref]
local B = dofile(require("specula.internal.core").host.root .. "/bench/lib.lua")
local specula = require("specula")
local json = specula.json

local Q, RUNS, REF, WAIT = 2000, 3, true, "sleep"
local HOPS, KS, CONCS = { 1, 20, 80 }, { "1", "4", "inf", "seq" }, { 16, 2000 }
local function list(s)
  local t = {}
  for x in (s or ""):gmatch("[^,]+") do t[#t + 1] = x end
  return t
end
local function nums(s)
  local t = {}
  for _, x in ipairs(list(s)) do t[#t + 1] = tonumber(x) end
  return t
end
for i = 1, #arg do
  if arg[i] == "--quick" then HOPS, KS, CONCS, RUNS = { 20 }, { "inf", "seq" }, { 16, 2000 }, 2 end
  if arg[i] == "--no-ref" then REF = false end
end
-- the explicit choices win over --quick's, in any order
for i = 1, #arg do
  if arg[i] == "--queries" then Q = tonumber(arg[i + 1]) end
  if arg[i] == "--runs" then RUNS = tonumber(arg[i + 1]) end
  if arg[i] == "--wait" then WAIT = arg[i + 1] end
  if arg[i] == "--hops" then HOPS = nums(arg[i + 1]) end
  if arg[i] == "--k" then KS = list(arg[i + 1]) end
  if arg[i] == "--concurrency" then CONCS = nums(arg[i + 1]) end
end
assert(Q and Q >= 1 and RUNS and RUNS >= 1, "bench userpath: --queries and --runs need a number >= 1")
assert(#HOPS > 0 and #CONCS > 0 and #KS > 0, "bench userpath: --hops, --k and --concurrency need a list (1,20)")
for _, h in ipairs(HOPS) do assert(h >= 1, "bench userpath: --hops must be >= 1") end
for _, c in ipairs(CONCS) do assert(c >= 1, "bench userpath: --concurrency must be >= 1") end
for _, k in ipairs(KS) do
  assert(k == "inf" or k == "seq" or (tonumber(k) or 0) >= 1, "bench userpath: --k takes integers >= 1, inf or seq, got " .. k)
end
assert(WAIT == "none" or WAIT == "sleep" or WAIT == "http" or WAIT == "mcp", "bench userpath: --wait must be none, sleep, http or mcp")

local self = B.self_bin() or (B.root .. "/build/specula")
local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. dir) == 0)
local input = dir .. "/q.jsonl"
local f = assert(io.open(input, "w"))
for n = 1, Q do f:write('{"id":"q', n, '","query":"question ', n, '"}\n') end
f:close()

local url, stop_server = "", nil
if WAIT == "http" then url, stop_server = B.server() end

-- Runs CMD under /usr/bin/time; returns wall seconds (ours, finer than
-- time's), CPU seconds (user + system) and peak RSS in MB.
local function timed(cmd)
  local tf = dir .. "/time"
  local t0 = specula.real_now()
  local ok = os.execute(string.format("/usr/bin/time -f '%%U %%S %%M' -o %s %s", tf, cmd))
  local dt = (specula.real_now() - t0) / 1000
  local h = io.open(tf)
  local u, sy, kb = (h and h:read("*a") or ""):match("([%d.]+) ([%d.]+) (%d+)%s*$")
  if h then h:close() end
  return (ok == 0 or ok == true) and dt or nil, (tonumber(u) or 0) + (tonumber(sy) or 0), (tonumber(kb) or 0) / 1024
end

-- Every record present and answered like the sequential run.
local function check(out, hops)
  local n = 0
  for line in io.lines(out) do
    local r = json.decode(line)
    if not r or r.answer ~= "done " .. hops then return false end
    n = n + 1
  end
  return n == Q
end

local function ours(k, conc, hops)
  local out = dir .. "/ours.jsonl"
  os.remove(out)
  local mode = k == "seq" and "--mode sequential" or ("--k " .. k)
  local cmd = string.format("env BENCH_HOPS=%d BENCH_WAIT=%s BENCH_URL=%s BENCH_MCP=%s/spec/support/mcp_testserver.js %s run %s/bench/userpath_agent.lua "
    .. "--input %s --out %s %s --concurrency %d --max-hops %d --quiet >/dev/null 2>&1",
    hops, WAIT, url, B.root, self, B.root, input, out, mode, conc, hops + 2)
  local dt, cpu, mb = timed(cmd)
  assert(dt and check(out, hops), "bench userpath: specula run failed or its records are wrong: " .. cmd)
  return dt * 1e6 / (Q * hops), cpu * 1e6 / (Q * hops), mb
end

local function ref(k, conc, hops)
  local out = dir .. "/ref.jsonl"
  local mode = k == "seq" and "--k 1 --sequential" or ("--k " .. k)
  local cmd = string.format("python3 %s/bench/ref/spechop_ref.py --queries %d --hops %d %s --concurrency %d --out %s --json >/dev/null 2>&1",
    B.root, Q, hops, mode, conc, out)
  local dt, cpu, mb = timed(cmd)
  assert(dt and check(out, hops), "bench userpath: the reference failed: " .. cmd)
  return dt * 1e6 / (Q * hops), cpu * 1e6 / (Q * hops), mb
end

local function median(xs)
  local c = {}
  for j = 1, #xs do c[j] = xs[j] end
  table.sort(c)
  return c[math.floor((#c + 1) / 2)]
end

print("machine: " .. B.machine())
print(string.format("%d queries, records to --out, wait kind %s (specula: model, tool, speculator each wait once a hop;", Q, WAIT))
print(" reference: asyncio.sleep(0) in every call); whole process timed, start to exit; specula then the")
print(string.format(" reference, %d times in alternation per row; medians, and the median of the paired ratios", RUNS))
print(string.format("%-18s | %-25s | %-25s | %s", "", "specula us/hop", "asyncio us/hop", "ratio"))
print(string.format("%-5s %6s %5s | %8s %8s %7s | %8s %8s %7s | %7s %7s", "k", "conc", "hops",
  "wall", "cpu", "peak MB", "wall", "cpu", "peak MB", "wall", "cpu"))
local function f2(x) return x and string.format("%.2f", x) or "-" end
-- the test server and the temporary files go even when a run fails
local ok, err = pcall(function()
  for _, hops in ipairs(HOPS) do
    for _, conc in ipairs(CONCS) do
      for _, k in ipairs(KS) do
        local us, cpu, mb, pus, pcpu, pmb, rw, rc = {}, {}, {}, {}, {}, {}, {}, {}
        for r = 1, RUNS do
          us[r], cpu[r], mb[r] = ours(k, conc, hops)
          if REF then
            pus[r], pcpu[r], pmb[r] = ref(k, conc, hops)
            rw[r], rc[r] = pus[r] / us[r], pcpu[r] / cpu[r]
          end
        end
        print(string.format("%-5s %6d %5d | %8.2f %8.2f %7.1f | %8s %8s %7s | %7s %7s", k, conc, hops,
          median(us), median(cpu), median(mb), f2(REF and median(pus)), f2(REF and median(pcpu)),
          REF and string.format("%.1f", median(pmb)) or "-",
          REF and string.format("%.2fx", median(rw)) or "-", REF and string.format("%.2fx", median(rc)) or "-"))
        io.stdout:flush()
      end
    end
  end
end)
print("(wall: the process's wall time / committed hops (queries x hops), start-up and file writing included;")
print(" cpu: its user + system time / hops; peak MB: max RSS (/usr/bin/time); ratio: median of the paired")
print(" ratios; seq = --mode sequential / the reference's --sequential)")
if stop_server then stop_server() end
os.execute("rm -rf " .. dir)
if not ok then error(err, 0) end
