-- bench/sessions.lua — reading an agent's log streams: a synthetic Claude
-- Code transcript of --mb MB (default 1024: 1 GB; tool results of 256 KB)
-- is written, then read by specula.convtraces.sessions at an eighth of its
-- size and at full size, each twice: keeping per call its times, tool,
-- arguments and digests (keep_text = false: what the replay needs), then
-- also the texts cut to 4 KB (what a predictor reads). It prints the read
-- rate, the Lua heap, the RSS before the read and the read's peak RSS
-- (VmHWM, reset before each read): flat memory means the peaks at the two
-- sizes are close (a line is decoded and let go; what stays is per call).
--   specula bench sessions [--mb N]
local json = require "specula.json"
local specula = require "specula"
local sessions = require "specula.convtraces.sessions"

local MB = 1024
for i = 1, #arg do
  if arg[i] == "--mb" then MB = assert(tonumber(arg[i + 1]), "--mb needs a number") end
end

-- 256 KB, each result told apart by its first bytes (as its 4 KB cut is)
local RESULT = string.rep("0123456789abcdef", 16384)
local function write(path, mb)
  local f = assert(io.open(path, "w"))
  local t = 1772445600   -- 2026-03-02T10:00:00Z
  local function ts(sec) return os.date("!%Y-%m-%dT%H:%M:%S", t + math.floor(sec)) .. ".000Z" end
  f:write(json.encode({ type = "user", sessionId = "bench", uuid = "u0", timestamp = ts(0),
                        message = { role = "user", content = "go" } }), "\n")
  local bytes, i = 0, 0
  while bytes < mb * 1048576 do
    i = i + 1
    local id = "tu" .. i
    local a = json.encode({ type = "assistant", sessionId = "bench", uuid = "a" .. i, timestamp = ts(i * 3),
      message = { id = "m" .. i, role = "assistant", content = { { type = "tool_use", id = id, name = "Read",
        input = { file_path = "/src/f" .. (i % 97) .. ".c" } } } } })
    local r = json.encode({ type = "user", sessionId = "bench", uuid = "r" .. i, timestamp = ts(i * 3 + 1),
      message = { role = "user", content = { { type = "tool_result", tool_use_id = id, content = ("%08d"):format(i) .. RESULT } } } })
    f:write(a, "\n", r, "\n")
    bytes = bytes + #a + #r + 2
  end
  f:close()
  return i
end

local function hwm_kb()
  local f = io.open("/proc/self/status")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return tonumber(s:match("VmHWM:%s*(%d+)")), tonumber(s:match("VmRSS:%s*(%d+)"))
end

-- Linux resets the peak (VmHWM) to the current RSS on "5" (clear_refs), so
-- each read's peak is its own, not the largest of the run so far.
local function reset_peak()
  local f = io.open("/proc/self/clear_refs", "w")
  if not f then return false end
  local ok = f:write("5")
  f:close()
  return ok and true or false
end

local function mb(kb) return kb and string.format("%.1f", kb / 1024) or "?" end

local path = os.tmpname()
print(string.format("%7s  %6s  %-28s  %8s  %13s  %8s  %8s", "size", "calls", "kept", "MB/s", "Lua heap (MB)",
  "RSS (MB)", "peak"))
local seen = {}   -- [keep] = { {calls, heap, peak} per size }
for _, size in ipairs({ MB / 8, MB }) do
  local calls = write(path, size)
  -- digests only (what the replay needs), then the texts cut to 4 KB (what
  -- a predictor reads: `specula whatif` keeps them for the predictor rows)
  for _, keep in ipairs({ false, true }) do
    collectgarbage()
    collectgarbage()
    local reset = reset_peak()
    local _, rss0 = hwm_kb()
    local t0 = specula.real_now()
    local s = assert(sessions.read(path, { keep_text = keep }))
    local ms = specula.real_now() - t0
    assert(#s.calls == calls, "calls read " .. #s.calls .. " of " .. calls)
    collectgarbage()
    local heap = collectgarbage("count") / 1024
    local peak = hwm_kb()
    print(string.format("%5.0f MB  %6d  %-28s  %8.1f  %13.1f  %8s  %8s%s", size, calls,
      keep and "texts (4 KB cut)" or "times, tools, args, digests", size / (ms / 1000), heap, mb(rss0), mb(peak),
      reset and "" or " (run's peak: no clear_refs)"))
    s = nil
    seen[keep] = seen[keep] or {}
    table.insert(seen[keep], { calls = calls, heap = heap * 1024, peak = peak })
  end
end
os.remove(path)
-- what each more call costs, between the two sizes
for _, keep in ipairs({ false, true }) do
  local a, b = seen[keep][1], seen[keep][2]
  local n = b.calls - a.calls
  if n > 0 then
    print(string.format("%-28s  %.2f KB of Lua heap and %s KB of peak RSS a call (%d calls more)",
      keep and "texts (4 KB cut)" or "times, tools, args, digests", (b.heap - a.heap) / n,
      (a.peak and b.peak) and string.format("%.2f", (b.peak - a.peak) / n) or "?", n))
  end
end
