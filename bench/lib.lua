-- bench/lib.lua — small helpers shared by the benchmarks.
local core = require "specula.internal.core"
local L = {}

L.root = core.host.root

-- The running binary (so benches work from any build directory): the shell
-- io.popen starts is our child, so its parent is us.
function L.self_bin()
  local p = io.popen("readlink -f /proc/$PPID/exe 2>/dev/null")
  local s = p and p:read("*l")
  if p then p:close() end
  return s
end

local function status_kb(field)
  local f = io.open("/proc/self/status")
  if not f then return nil end
  for line in f:lines() do
    local v = line:match("^" .. field .. ":%s+(%d+) kB")
    if v then f:close() return tonumber(v) end
  end
  f:close()
end
function L.rss_bytes() return (status_kb("VmRSS") or 0) * 1024 end
function L.peak_rss_bytes() return (status_kb("VmHWM") or 0) * 1024 end

function L.open_fds()
  local p = io.popen("ls /proc/" .. L.pid() .. "/fd 2>/dev/null | wc -l")
  local n = tonumber(p:read("*l") or "")
  p:close()
  return n
end

local pid
function L.pid()
  if pid then return pid end
  local f = io.open("/proc/self/stat")
  pid = f and tonumber(f:read("*l"):match("^(%d+)"))
  if f then f:close() end
  return pid
end

-- CPU seconds used by this process so far (user + system).
function L.cpu_seconds()
  local f = io.open("/proc/self/stat")
  if not f then return 0 end
  local s = f:read("*l")
  f:close()
  local rest = s:match("%) (.*)$")
  local fields = {}
  for x in rest:gmatch("%S+") do fields[#fields + 1] = x end
  -- fields[12] = utime, fields[13] = stime (after pid and comm)
  return (tonumber(fields[12]) + tonumber(fields[13])) / 100
end

-- Start the loopback test server; returns base URL and a stop function.
function L.server()
  local bin = os.getenv("SPECULA_TESTSERVER") or (L.root .. "/build/specula-testserver")
  local p = assert(io.popen(bin .. " 2>/dev/null & echo BGPID $!"))
  local port, spid
  for _ = 1, 2 do
    local line = p:read("*l")
    if line then
      port = port or tonumber(line:match("^PORT (%d+)"))
      spid = tonumber(line:match("PID (%d+)")) or spid
    end
  end
  assert(port, "cannot start the test server (" .. bin .. ")")
  return "http://127.0.0.1:" .. port, function() os.execute("kill " .. spid .. " 2>/dev/null") p:close() end
end

-- The Python interpreter `python3` on PATH runs, as its own path, and its
-- version: ("/usr/bin/python3", "3.11.2"), or nil. A whole-process timing
-- of the reference runs this path: `python3` itself may be a version
-- manager's shim (pyenv's is a shell script that starts pyenv, ~100 ms a
-- process on the 2-CPU VM), and that start is not the reference's.
function L.python()
  local p = io.popen([[python3 -c "import sys, platform; print(sys.executable); print(platform.python_version())" 2>/dev/null]])
  local exe = p and p:read("*l")
  local ver = p and p:read("*l")
  if p then p:close() end
  if not exe or exe == "" then return nil end
  return exe, ver
end

function L.machine()
  local cpu = "?"
  local f = io.open("/proc/cpuinfo")
  if f then
    for line in f:lines() do
      local m = line:match("^model name%s*:%s*(.*)")
      if m then cpu = m break end
    end
    f:close()
  end
  local p = io.popen("nproc")
  local n = p:read("*l")
  p:close()
  return string.format("%s, %s CPUs", cpu, n or "?")
end

-- The median of a list of numbers (the lower one of the middle two for an
-- even count), the list left as it was.
function L.median(xs)
  local c = {}
  for i = 1, #xs do c[i] = xs[i] end
  table.sort(c)
  return c[math.floor((#c + 1) / 2)]
end

return L
