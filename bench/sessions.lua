-- bench/sessions.lua — reading an agent's log streams: a synthetic Claude
-- Code transcript of --mb MB (default 1024: 1 GB; tool results of 256 KB)
-- is written, then read by specula.convtraces.sessions at an eighth of its
-- size and at full size. It prints the read rate and the process's peak
-- resident memory (VmHWM) after each: flat memory means the two peaks are
-- close, whatever the size (each text is kept cut to 4 KB; a line is
-- decoded and let go).
--   specula bench sessions [--mb N]
local json = require "specula.json"
local specula = require "specula"
local sessions = require "specula.convtraces.sessions"

local MB = 1024
for i = 1, #arg do
  if arg[i] == "--mb" then MB = assert(tonumber(arg[i + 1]), "--mb needs a number") end
end

local RESULT = string.rep("0123456789abcdef", 16384)   -- 256 KB
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
      message = { role = "user", content = { { type = "tool_result", tool_use_id = id, content = RESULT } } } })
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
  return tonumber(s:match("VmHWM:%s*(%d+)"))
end

local path = os.tmpname()
for _, mb in ipairs({ MB / 8, MB }) do
  local calls = write(path, mb)
  collectgarbage()
  local t0 = specula.real_now()
  local s = assert(sessions.read(path))
  local ms = specula.real_now() - t0
  assert(#s.calls == calls, "calls read " .. #s.calls .. " of " .. calls)
  collectgarbage()
  print(string.format("%7.0f MB  %6d calls  %7.1f MB/s  Lua heap %7.1f MB  peak RSS %s MB", mb, calls,
    mb / (ms / 1000), collectgarbage("count") / 1024, hwm_kb() and string.format("%.0f", hwm_kb() / 1024) or "?"))
end
os.remove(path)
