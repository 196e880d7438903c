-- Shared helpers of the busted specs: run the real binary, start and stop
-- the loopback test server, write temporary files.
local H = {}

H.root = os.getenv("SPECULA_SOURCE_DIR") or "."
H.bin = os.getenv("SPECULA_BIN") or (H.root .. "/build/specula")
H.server_bin = os.getenv("SPECULA_TESTSERVER") or (H.root .. "/build/specula-testserver")
-- Under ASan the unit suite preloads the sanitizer runtime into luajit.
H.preload = os.getenv("SPECULA_PRELOAD")

local tmpdir
function H.tmpdir()
  if not tmpdir then
    local p = os.tmpname()
    os.remove(p)
    assert(os.execute("mkdir -p " .. p) == 0 or true)
    tmpdir = p
  end
  return tmpdir
end

local counter = 0
function H.tmpfile(name, content)
  counter = counter + 1
  local path = H.tmpdir() .. "/" .. (name or ("f" .. counter))
  if content then
    local f = assert(io.open(path, "w"))
    f:write(content)
    f:close()
  end
  return path
end

function H.read(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

function H.quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- Run a shell command; returns exit status, stdout, stderr.
function H.sh(cmd)
  counter = counter + 1
  local out = H.tmpdir() .. "/out" .. counter
  local err = H.tmpdir() .. "/err" .. counter
  local ok, how, code = os.execute(cmd .. " >" .. out .. " 2>" .. err)
  -- LuaJIT/5.1 os.execute returns the raw wait status
  local status = type(ok) == "number" and math.floor(ok / 256) or (code or (ok and 0 or 1))
  local so, se = H.read(out) or "", H.read(err) or ""
  os.remove(out)
  os.remove(err)
  return status, so, se
end

-- Run the specula binary with arguments (a list, quoted for the shell).
-- SPECULA_WRAP runs the binary under a tool (the CI's valgrind pass).
H.wrap = os.getenv("SPECULA_WRAP")

function H.specula(args, env)
  local parts = {}
  for k, v in pairs(env or {}) do parts[#parts + 1] = k .. "=" .. H.quote(v) end
  if H.wrap and H.wrap ~= "" then parts[#parts + 1] = H.wrap end
  parts[#parts + 1] = H.quote(H.bin)
  for _, a in ipairs(args) do parts[#parts + 1] = H.quote(a) end
  return H.sh(table.concat(parts, " "))
end

-- Write a Lua script and run it with `specula run`.
function H.run_lua(code, args, env)
  local path = H.tmpfile(nil, code)
  local a = { "run", path }
  for _, x in ipairs(args or {}) do a[#a + 1] = x end
  return H.specula(a, env)
end

-- Start the test server; returns { port, pid, base, stop() }.
function H.server(opts)
  opts = opts or {}
  local cmd = H.quote(H.server_bin)
  if opts.files then cmd = cmd .. " --files " .. H.quote(opts.files) end
  local p = assert(io.popen(cmd .. " 2>/dev/null & echo BGPID $!", "r"))
  local line, pid, port
  -- first the shell's background pid, then the server's PORT line
  for _ = 1, 2 do
    line = p:read("*l")
    if not line then break end
    local bg = line:match("^BGPID (%d+)")
    if bg then pid = tonumber(bg) end
    local pt, sp = line:match("^PORT (%d+) PID (%d+)")
    if pt then port, pid = tonumber(pt), tonumber(sp) end
  end
  assert(port, "test server did not start")
  local s = { port = port, pid = pid, pipe = p, base = "http://127.0.0.1:" .. port }
  function s.url(path) return s.base .. path end
  function s.stop()
    os.execute("kill " .. pid .. " 2>/dev/null")
    p:close()
  end
  return s
end

function H.json()
  return require("cjson")
end

-- Decode a JSONL string into a list of tables.
function H.jsonl(text)
  local cj = require "cjson"
  local out = {}
  for line in text:gmatch("[^\n]+") do out[#out + 1] = cj.decode(line) end
  return out
end

return H
