-- bench/sessions.lua — `specula whatif` over a large agent log, whole run:
-- a synthetic Claude Code transcript (one session, one prompt, tool results
-- of 256 KB, each different) of 128 MB, 512 MB and 1 GB (--sizes, in MB) is
-- read and replayed in the configurations that need no texts (recorded,
-- sequential, spechop, perfect-predictor, perfect-speculator, perfect-both:
-- the log kept as digests), each size in a fresh process (this file run
-- with --child). Per size it prints the calls, the wall time, the RSS
-- before the run, the run's peak RSS (VmHWM) and the sequential replay's
-- agent time (3 s a call here: a check that every call was replayed). The
-- verdict line is "flat" when the largest size's peak is within
-- max(3 MB, 10 %) of the smallest's, else "GROWING". --texts also runs all
-- eight rows (predictor and both need the texts, each cut to 4 KB) at the
-- smallest size only, for scale. --mb N: one size of N MB.
--   specula bench sessions [--sizes 128,512,1024] [--texts]
local json = require "specula.json"

local SIZES, TEXTS, CHILD = { 128, 512, 1024 }, false, nil
local i = 1
while i <= #arg do
  local a = arg[i]
  if a == "--mb" then SIZES = { assert(tonumber(arg[i + 1]), "--mb needs a number") } i = i + 1
  elseif a == "--sizes" then
    SIZES = {}
    for n in (arg[i + 1] or ""):gmatch("%d+") do SIZES[#SIZES + 1] = tonumber(n) end
    assert(#SIZES > 0, "--sizes needs a list of MB, e.g. 128,1024")
    i = i + 1
  elseif a == "--texts" then TEXTS = true
  elseif a == "--child" then CHILD = { log = arg[i + 1], compare = arg[i + 2] } i = i + 2
  end
  i = i + 1
end

local NO_TEXTS = "recorded,sequential,spechop,perfect-predictor,perfect-speculator,perfect-both"

local function status_kb(field)
  local f = io.open("/proc/self/status")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return tonumber(s:match(field .. ":%s*(%d+)"))
end

-- The child: one whatif run in this process, its figures as one JSON line.
if CHILD then
  local specula = require "specula"
  local whatif = require "specula.lab.whatif"
  collectgarbage()
  local rss0 = status_kb("VmRSS")
  local t0 = specula.real_now()
  local compare = assert(whatif.config_list(CHILD.compare))
  local res = assert(whatif.compute({ logs = { CHILD.log }, compare = compare }, function(m) io.stderr:write(m, "\n") end))
  local ms = specula.real_now() - t0
  local calls = 0
  for _, s in ipairs(res.list) do calls = calls + (s.n_calls or #s.calls) end
  local crypto = require "specula.crypto"
  print("CHILD " .. json.encode({ calls = calls, sessions = res.sessions, seconds = ms / 1000, rss0 = rss0,
    peak = status_kb("VmHWM"), sequential_ms = res.sequential_ms, best_ms = res.best_ms,
    table_sha256 = crypto.sha256_hex(whatif.text(res)) }))
  return
end

local B = dofile(require("specula.internal.core").host.root .. "/bench/lib.lua")
local self = B.self_bin() or (B.root .. "/build/specula")

-- 256 KB, each result told apart by its first bytes
local RESULT = string.rep("0123456789abcdef", 16384)
local function write(path, mb)
  local f = assert(io.open(path, "w"))
  local t = 1772445600   -- 2026-03-02T10:00:00Z
  local function ts(sec) return os.date("!%Y-%m-%dT%H:%M:%S", t + math.floor(sec)) .. ".000Z" end
  f:write(json.encode({ type = "user", sessionId = "bench", uuid = "u0", timestamp = ts(0),
                        message = { role = "user", content = "go" } }), "\n")
  local bytes, n = 0, 0
  while bytes < mb * 1048576 do
    n = n + 1
    local id = "tu" .. n
    local a = json.encode({ type = "assistant", sessionId = "bench", uuid = "a" .. n, timestamp = ts(n * 3),
      message = { id = "m" .. n, role = "assistant", content = { { type = "tool_use", id = id, name = "Read",
        input = { file_path = "/src/f" .. (n % 97) .. ".c" } } } } })
    local r = json.encode({ type = "user", sessionId = "bench", uuid = "r" .. n, timestamp = ts(n * 3 + 1),
      message = { role = "user", content = { { type = "tool_result", tool_use_id = id, content = ("%08d"):format(n) .. RESULT } } } })
    f:write(a, "\n", r, "\n")
    bytes = bytes + #a + #r + 2
  end
  f:close()
  return n
end

local function child(path, compare)
  local p = assert(io.popen(string.format("%s bench sessions -- --child %s %s", self, path, compare)))
  local got
  for line in p:lines() do
    local j = line:match("^CHILD (.*)$")
    if j then got = json.decode(j) end
  end
  p:close()
  return got
end

local function mb(kb) return kb and string.format("%.1f", kb / 1024) or "?" end

print("machine: " .. B.machine())
print("specula whatif LOG --compare " .. NO_TEXTS .. "  (one process a size)")
print(string.format("%8s  %6s  %8s  %8s  %9s  %14s", "log", "calls", "seconds", "RSS (MB)", "peak (MB)",
  "sequential (s)"))
local path = os.tmpname()
local peaks = {}
for _, size in ipairs(SIZES) do
  local calls = write(path, size)
  local r = child(path, NO_TEXTS)
  if not r then print(string.format("%5d MB  the run failed", size)) os.remove(path) os.exit(1) end
  assert(r.calls == calls, "calls replayed " .. tostring(r.calls) .. " of " .. calls)
  print(string.format("%5d MB  %6d  %8.1f  %8s  %9s  %14.1f", size, calls, r.seconds, mb(r.rss0), mb(r.peak),
    r.sequential_ms / 1000))
  peaks[#peaks + 1] = { size = size, calls = calls, peak = r.peak }
  if TEXTS and #peaks == 1 then
    local rt = child(path, table.concat(require("specula.lab.whatif").CONFIGS, ","))
    if rt then
      print(string.format("%5d MB  %6d  %8.1f  %8s  %9s  %14.1f  (all eight rows: texts kept)", size, calls,
        rt.seconds, mb(rt.rss0), mb(rt.peak), rt.sequential_ms / 1000))
    end
  end
end
os.remove(path)
if #peaks >= 2 then
  local a, b = peaks[1], peaks[#peaks]
  local d = b.peak - a.peak
  local allowed = math.max(3 * 1024, a.peak * 0.10)
  print(string.format("peak at %d MB minus peak at %d MB: %s MB (%.2f KB a call more; allowed: %s MB): %s",
    b.size, a.size, mb(d), d / math.max(1, b.calls - a.calls), mb(allowed), d <= allowed and "flat" or "GROWING"))
end
