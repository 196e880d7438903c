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
--     [--agent FILE] [--against BIN [--against-home DIR]] [--no-memory] [--vm [--vm-interval MS]]
-- --against: another specula build (a before/after comparison) run in the
-- same alternation (this one, that one, the reference), a second row per
-- configuration marked "against"; --against-home: its Lua tree
-- (SPECULA_HOME) when that is not the one it was built from.
-- --vm: then, for each row, one more run of each build under LuaJIT's
-- sampler (SPECULA_PROFILE=vi1) and the share of its samples in compiled
-- code, the interpreter, C, the collector and the JIT compiler: a change
-- that leaves the path's hot loop to the interpreter (a trace that no
-- longer compiles) shows there, where the figures above only say slower.
-- --vm-interval: the sampler's period in ms of CPU (1); a run that ends
-- before its first tick has no samples: "-", not a failure.
-- Then memory: per live trajectory (the peak's growth per query in flight,
-- from the rows) and per finished query (runs of Q and 5Q one-hop queries;
-- --no-memory skips them).
-- A run that fails (status, or a record missing or wrong) makes its row
-- FAILED, never a figure; the other rows go on, and the bench then fails
-- naming every failed configuration.
local B = dofile(require("specula.internal.core").host.root .. "/bench/lib.lua")
local specula = require("specula")
local json = specula.json

local Q, RUNS, REF, WAIT, FINISHED, VM, VM_MS = 2000, 3, true, "sleep", true, false, 1
local AGENT   -- default: bench/userpath_agent.lua
local AGAINST, AGAINST_HOME
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
  if arg[i] == "--no-memory" then FINISHED = false end
  if arg[i] == "--vm" then VM = true end
end
-- the explicit choices win over --quick's, in any order
for i = 1, #arg do
  if arg[i] == "--queries" then Q = tonumber(arg[i + 1]) end
  if arg[i] == "--runs" then RUNS = tonumber(arg[i + 1]) end
  if arg[i] == "--wait" then WAIT = arg[i + 1] end
  if arg[i] == "--vm-interval" then VM_MS = tonumber(arg[i + 1]) end
  if arg[i] == "--agent" then AGENT = arg[i + 1] end
  if arg[i] == "--against" then AGAINST = arg[i + 1] end
  if arg[i] == "--against-home" then AGAINST_HOME = arg[i + 1] end
  if arg[i] == "--hops" then HOPS = nums(arg[i + 1]) end
  if arg[i] == "--k" then KS = list(arg[i + 1]) end
  if arg[i] == "--concurrency" then CONCS = nums(arg[i + 1]) end
end
assert(Q and Q >= 1 and RUNS and RUNS >= 1, "bench userpath: --queries and --runs need a number >= 1")
assert(VM_MS and VM_MS >= 1 and VM_MS == math.floor(VM_MS), "bench userpath: --vm-interval needs a whole number of ms >= 1")
assert(#HOPS > 0 and #CONCS > 0 and #KS > 0, "bench userpath: --hops, --k and --concurrency need a list (1,20)")
for _, h in ipairs(HOPS) do assert(h >= 1, "bench userpath: --hops must be >= 1") end
for _, c in ipairs(CONCS) do assert(c >= 1, "bench userpath: --concurrency must be >= 1") end
for _, k in ipairs(KS) do
  assert(k == "inf" or k == "seq" or (tonumber(k) or 0) >= 1, "bench userpath: --k takes integers >= 1, inf or seq, got " .. k)
end
assert(WAIT == "none" or WAIT == "sleep" or WAIT == "http" or WAIT == "mcp", "bench userpath: --wait must be none, sleep, http or mcp")

AGENT = AGENT or (B.root .. "/bench/userpath_agent.lua")
do
  local fa = io.open(AGENT, "r")
  assert(fa, "bench userpath: --agent: cannot read " .. AGENT)
  fa:close()
end
local self = B.self_bin() or (B.root .. "/build/specula")
if AGAINST then
  local fb = io.open(AGAINST, "r")
  assert(fb, "bench userpath: --against: cannot read " .. AGAINST)
  fb:close()
end
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
-- time's), CPU seconds (user + system) and peak RSS in MB. The CPU comes
-- from bash's `times` (its children's, to the millisecond), not from time's
-- %U %S, which print hundredths: a short run (a spec's few queries) read
-- 0.00 there and made an infinite ratio. bash's own start is not a child
-- of itself, so only CMD is counted; the peak is the largest process.
local function timed(cmd)
  local tf, tc, sh = dir .. "/time", dir .. "/times", dir .. "/timed.sh"
  local f = assert(io.open(sh, "w"))
  f:write(cmd, "\ns=$?\ntimes > ", tc, "\nexit $s\n")
  f:close()
  os.remove(tc)
  local t0 = specula.real_now()
  local ok = os.execute(string.format("/usr/bin/time -f '%%M' -o %s bash %s", tf, sh))
  local dt = (specula.real_now() - t0) / 1000
  local h = io.open(tf)
  local kb = (h and h:read("*a") or ""):match("(%d+)%s*$")
  if h then h:close() end
  -- `times`: the shell's own user and system time, then its children's
  h = io.open(tc)
  local text = h and h:read("*a") or ""
  if h then h:close() end
  local um, us, sm, ss = text:match("\n%s*(%d+)m([%d.]+)s%s+(%d+)m([%d.]+)s")
  local cpu = um and (tonumber(um) * 60 + tonumber(us) + tonumber(sm) * 60 + tonumber(ss)) or nil
  if not cpu then ok = false end
  return (ok == 0 or ok == true) and dt or nil, cpu or 0, (tonumber(kb) or 0) / 1024
end

-- Every record present and answered like the sequential run.
local function check(out, hops, nq)
  local h = io.open(out, "r")
  if not h then return false end
  local n = 0
  for line in h:lines() do
    local r = json.decode(line)
    if type(r) ~= "table" or r.answer ~= "done " .. hops then h:close() return false end
    n = n + 1
  end
  h:close()
  return n == (nq or Q)
end

-- inp, nq: another input and its query count (the memory section)
-- prof: a file for LuaJIT's sampler (SPECULA_PROFILE=vi<VM_MS>) to write
local function run_bin(bin, home, k, conc, hops, inp, nq, prof)
  local out = dir .. "/ours.jsonl"
  os.remove(out)
  local mode = k == "seq" and "--mode sequential" or ("--k " .. k)
  local cmd = string.format("env %s%sBENCH_HOPS=%d BENCH_WAIT=%s BENCH_URL=%s BENCH_MCP=%s/spec/support/mcp_testserver.js %s run %s "
    .. "--input %s --out %s %s --concurrency %d --max-hops %d --quiet >/dev/null 2>&1",
    home and ("SPECULA_HOME=" .. home .. " ") or "",
    prof and ("SPECULA_PROFILE=vi" .. VM_MS .. " SPECULA_PROFILE_OUT=" .. prof .. " ") or "", hops, WAIT, url, B.root, bin, AGENT, inp or input, out, mode, conc,
    hops + 2)
  local dt, cpu, mb = timed(cmd)
  -- a failed run is no figure: nil, and the command for the report
  nq = nq or Q
  if not (dt and check(out, hops, nq)) then return nil, cmd end
  return dt * 1e6 / (nq * hops), cpu * 1e6 / (nq * hops), mb
end
local function ours(k, conc, hops, inp, nq) return run_bin(self, nil, k, conc, hops, inp, nq) end
local function against(k, conc, hops, inp, nq) return run_bin(AGAINST, AGAINST_HOME, k, conc, hops, inp, nq) end

-- (the interpreter itself, not what `python3` names on PATH: see B.python)
local PYTHON, PYVER
if REF then PYTHON, PYVER = B.python() end
local function ref(k, conc, hops, _, nq)
  nq = nq or Q
  local out = dir .. "/ref.jsonl"
  local mode = k == "seq" and "--k 1 --sequential" or ("--k " .. k)
  local cmd = string.format("'%s' %s/bench/ref/spechop_ref.py --queries %d --hops %d %s --concurrency %d --out %s --json >/dev/null 2>&1",
    PYTHON or "python3", B.root, nq, hops, mode, conc, out)
  local dt, cpu, mb = timed(cmd)
  if not (dt and check(out, hops, nq)) then return nil, cmd end
  return dt * 1e6 / (nq * hops), cpu * 1e6 / (nq * hops), mb
end

local median = B.median

print("machine: " .. B.machine())
print(string.format("%d queries, records to --out, wait kind %s (specula: model, tool, speculator each wait once a hop;", Q, WAIT))
print(" reference: asyncio.sleep(0) in every call); whole process timed, start to exit; specula then the")
print(string.format(" reference, %d times in alternation per row; medians, and the median of the paired ratios", RUNS))
if REF then print(string.format("reference: %s (Python %s)", PYTHON or "python3 (not found)", PYVER or "?")) end
print(string.format("%-18s | %-25s | %-25s | %s", "", "specula us/hop", "asyncio us/hop", "ratio"))
print(string.format("%-5s %6s %5s | %8s %8s %7s | %8s %8s %7s | %7s %7s", "k", "conc", "hops",
  "wall", "cpu", "peak MB", "wall", "cpu", "peak MB", "wall", "cpu"))
local function f2(x) return x and string.format("%.2f", x) or "-" end
local function f1(x) return x and string.format("%.1f", x) or "-" end
local function fx(x) return x and string.format("%.2fx", x) or "-" end
local failed = {}
-- median peak MB per side, by k, then hops, then concurrency (nil: failed)
local peaks = {}
-- One side of a row: RUNS figures, or nil when any run failed (a failed
-- run's time says nothing of the path measured, so none of its row's
-- runs is kept).
local function side(fn, k, conc, hops, r, acc)
  if acc.failed then return end
  local us, cpu, mb = fn(k, conc, hops)
  if not us then
    acc.failed = cpu
    return
  end
  acc.us[r], acc.cpu[r], acc.mb[r] = us, cpu, mb
end
-- the test server and the temporary files go even when a run fails
local ok, err = pcall(function()
  for _, hops in ipairs(HOPS) do
    for _, conc in ipairs(CONCS) do
      for _, k in ipairs(KS) do
        local a, b = { us = {}, cpu = {}, mb = {} }, { us = {}, cpu = {}, mb = {} }
        local o = { us = {}, cpu = {}, mb = {} }   -- --against
        for r = 1, RUNS do
          side(ours, k, conc, hops, r, a)
          if AGAINST then side(against, k, conc, hops, r, o) end
          if REF then side(ref, k, conc, hops, r, b) end
        end
        local function cols(acc, on)
          if acc.failed then return string.format("%8s %8s %7s", "FAILED", "-", "-") end
          if not on then return string.format("%8s %8s %7s", "-", "-", "-") end
          return string.format("%8s %8s %7s", f2(median(acc.us)), f2(median(acc.cpu)), f1(median(acc.mb)))
        end
        -- paired ratios, only over runs where both sides succeeded
        local function row(label, acc)
          local rw, rc = {}, {}
          local both = REF and not acc.failed and not b.failed
          if both then
            -- (a CPU figure of 0, under the millisecond `times` reads,
            -- has no ratio: the pair is left out, never counted as infinite)
            for r = 1, RUNS do
              rw[#rw + 1] = b.us[r] / acc.us[r]
              if b.cpu[r] > 0 and acc.cpu[r] > 0 then rc[#rc + 1] = b.cpu[r] / acc.cpu[r] end
            end
          end
          print(string.format("%-5s %6d %5d | %s | %s | %7s %7s%s", k, conc, hops, cols(acc, true), cols(b, REF),
            both and fx(median(rw)) or "-", both and rc[1] and fx(median(rc)) or "-", label))
        end
        row("", a)
        if AGAINST then row("  against", o) end
        peaks[k] = peaks[k] or {}
        peaks[k][hops] = peaks[k][hops] or {}
        peaks[k][hops][conc] = { ours = not a.failed and median(a.mb) or nil,
          against = AGAINST and not o.failed and median(o.mb) or nil, ref = REF and not b.failed and median(b.mb) or nil }
        if a.failed then failed[#failed + 1] = string.format("k=%s conc=%d hops=%d specula: %s", k, conc, hops, a.failed) end
        if o.failed then failed[#failed + 1] = string.format("k=%s conc=%d hops=%d against: %s", k, conc, hops, o.failed) end
        if b.failed then failed[#failed + 1] = string.format("k=%s conc=%d hops=%d reference: %s", k, conc, hops, b.failed) end
        io.stdout:flush()
      end
    end
  end
end)
print("(wall: the process's wall time / committed hops (queries x hops), start-up and file writing included;")
print(" cpu: its user + system time (bash's `times`, to the ms) / hops; peak MB: max RSS (/usr/bin/time); ratio:")
print(" median of the paired ratios; seq = --mode sequential / the reference's --sequential)")

-- Where each build's samples fell, by LuaJIT's VM state (--vm): one run a
-- row and build under the sampler (1 ms), its output read back. A run that
-- fails, or a sampler that wrote nothing, is FAILED, never a share.
-- Returns the shares by state name and the run's CPU ms, or nil and why.
local VM_STATES = { { "Compiled", "compiled" }, { "Interpreted", "interp" }, { "C code", "C" },
                    { "Garbage Collector", "GC" }, { "JIT Compiler", "JIT" } }
local function vm_shares(bin, home, k, conc, hops)
  local prof = dir .. "/vm.txt"
  os.remove(prof)
  local us, cpu = run_bin(bin, home, k, conc, hops, nil, nil, prof)
  if not us then return nil, cpu end
  local cmd = "SPECULA_PROFILE=vi" .. VM_MS .. " run"
  local h = io.open(prof, "r")
  if not h then return nil, "the sampler wrote no " .. prof .. " (" .. cmd .. ")" end
  local shares, any, none = {}, false, false
  for line in h:lines() do
    local pct, name = line:match("^%s*(%d+)%%%s+(.-)%s*$")
    if pct then shares[name], any = tonumber(pct), true end
    if line:find("[No samples collected]", 1, true) then none = true end
  end
  h:close()
  -- a run that ended before the sampler's first tick measured nothing: not
  -- a failure of the build, and not a share either
  if none and not any then return false, cpu * Q * hops / 1000 end
  if not any then return nil, "the sampler's output has no VM state (" .. cmd .. ")" end
  return shares, cpu * Q * hops / 1000   -- the run's CPU ms: about its samples (one a ms)
end
if ok and VM then
  print("where the CPU went, % of LuaJIT's samples by VM state (SPECULA_PROFILE=vi" .. VM_MS .. ", one run a row):")
  local head = {}
  for _, st in ipairs(VM_STATES) do head[#head + 1] = string.format("%8s", st[2]) end
  print(string.format("%-5s %6s %5s %-8s %s %8s", "k", "conc", "hops", "build", table.concat(head, " "), "cpu ms"))
  local builds = { { "specula", self, nil } }
  if AGAINST then builds[2] = { "against", AGAINST, AGAINST_HOME } end
  local unsampled = false
  for _, hops in ipairs(HOPS) do
    for _, conc in ipairs(CONCS) do
      for _, k in ipairs(KS) do
        for _, bd in ipairs(builds) do
          local sh, why = vm_shares(bd[2], bd[3], k, conc, hops)
          local cells = {}
          for _, st in ipairs(VM_STATES) do
            local cell = sh and string.format("%d%%", sh[st[1]] or 0) or sh == false and "-" or "FAILED"
            cells[#cells + 1] = string.format("%8s", cell)
          end
          print(string.format("%-5s %6d %5d %-8s %s %8s%s", k, conc, hops, bd[1], table.concat(cells, " "),
            sh ~= nil and string.format("%.0f", why) or "-", sh == false and "  no samples" or ""))
          if sh == false then unsampled = true end
          if sh == nil then failed[#failed + 1] = string.format("vm k=%s conc=%d hops=%d %s: %s", k, conc, hops, bd[1], why) end
        end
        io.stdout:flush()
      end
    end
  end
  if unsampled then
    print("(no samples: the run ended before the sampler's first tick, " .. VM_MS .. " ms of CPU; more --queries sample it)")
  end
end

-- Memory. Per live trajectory: how much the peak grows per query in flight,
-- from the rows themselves (the lowest and the highest concurrency of a k and
-- hops). Per finished query: what a process keeps of each query it is done
-- with, from two runs that differ only in how many queries they get (1 hop,
-- the lowest concurrency): ~0 when records are streamed out. A failed side
-- is FAILED, never a figure.
local function kb(x) return x and string.format("%.2f", x / 1024) or "FAILED" end
local function bytes(x) return x and string.format("%.0f", x) or "FAILED" end
local sides = { { "ours", "specula" } }
if AGAINST then sides[#sides + 1] = { "against", "against" } end
if REF then sides[#sides + 1] = { "ref", "asyncio" } end
if ok and #CONCS >= 2 then
  local lo, hi = math.huge, -math.huge
  for _, c in ipairs(CONCS) do lo, hi = math.min(lo, c), math.max(hi, c) end
  -- no more queries are in flight than there are: the divisor is what was live
  local live_lo, live_hi = math.min(lo, Q), math.min(hi, Q)
  if live_hi > live_lo then
    print(string.format("memory per live trajectory, KB: (peak at %d in flight - peak at %d) / %d", live_hi, live_lo,
      live_hi - live_lo))
    for _, k in ipairs(KS) do
      for _, hops in ipairs(HOPS) do
        local p = peaks[k] and peaks[k][hops]
        local parts = {}
        for _, sd in ipairs(sides) do
          local a, b = p and p[hi] and p[hi][sd[1]], p and p[lo] and p[lo][sd[1]]
          parts[#parts + 1] = string.format("%s %s", sd[2], kb(a and b and (a - b) * 1048576 / (live_hi - live_lo)))
        end
        print(string.format("  k=%-4s hops=%-3d %s", k, hops, table.concat(parts, "   ")))
      end
    end
  end
end
if ok and FINISHED then
  local lo = math.huge
  for _, c in ipairs(CONCS) do lo = math.min(lo, c) end
  local n1, n2 = Q, 5 * Q
  local in2 = dir .. "/q5.jsonl"
  local g = assert(io.open(in2, "w"))
  for n = 1, n2 do g:write('{"id":"q', n, '","query":"question ', n, '"}\n') end
  g:close()
  local k = KS[1] == "seq" and "1" or KS[1]
  local fns = { ours = ours, against = against, ref = ref }
  local res = {}
  for _, sd in ipairs(sides) do res[sd[1]] = { {}, {} } end
  for r = 1, RUNS do
    for _, sd in ipairs(sides) do
      for j, spec in ipairs({ { input, n1 }, { in2, n2 } }) do
        local us, cpu, mb = fns[sd[1]](k, lo, 1, spec[1], spec[2])
        if not us then
          failed[#failed + 1] = string.format("memory k=%s conc=%d %d queries %s: %s", k, lo, spec[2], sd[2], cpu)
          res[sd[1]].failed = true
        else
          res[sd[1]][j][r] = mb
        end
      end
    end
  end
  print(string.format("memory per finished query, bytes: (peak with %d queries - peak with %d) / %d, 1 hop, k=%s, %d in flight",
    n2, n1, n2 - n1, k, lo))
  local parts = {}
  for _, sd in ipairs(sides) do
    local x = res[sd[1]]
    parts[#parts + 1] = string.format("%s %s", sd[2],
      bytes(not x.failed and (median(x[2]) - median(x[1])) * 1048576 / (n2 - n1) or nil))
  end
  print("  " .. table.concat(parts, "   "))
end
if stop_server then stop_server() end
os.execute("rm -rf " .. dir)
if not ok then error(err, 0) end
if #failed > 0 then
  -- a plain error: the message, no traceback of the bench itself
  require("specula.internal.sched").plain_error("bench userpath: " .. #failed
    .. " configuration(s) FAILED (status, or records missing or wrong):\n  " .. table.concat(failed, "\n  "))
end
