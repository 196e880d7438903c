-- examples/gateway/try.lua — a scripted MCP client for examples/gateway/files.lua:
-- it lists a directory, then reads its files one by one with a think time
-- between calls (as a model would), first straight from server-filesystem,
-- then through `specula gateway`, and prints both wall times and what the
-- gateway's record says (prefetch hits, hidden time).
--
--   specula run examples/gateway/try.lua [DIR] [THINK_MS]
--
-- DIR: the directory to read (default: docs/ of this repository); THINK_MS:
-- the pause between calls (default 300).
local specula = require "specula"
local json = specula.json

local here = debug.getinfo(1, "S").source:sub(2):match("^(.*)/[^/]*$") or "."
local dir = arg[1] or (here .. "/../../docs")
local think = tonumber(arg[2] or "300")
-- what is missing, said plainly (not a stack trace)
local function fail(msg)
  io.stderr:write("try.lua: ", msg, "\n")
  os.exit(1)
end
local abs = io.popen("cd '" .. dir .. "' 2>/dev/null && pwd"):read("*l")
if not abs then fail("no directory " .. dir .. " (DIR is read from the current directory)") end
local npm = os.getenv("SPECULA_NPM_CACHE") or ((os.getenv("HOME") or ".") .. "/.cache/specula-npm")
local modules = npm .. "/node_modules"
-- the Node that .ci/deps installs beside the servers, else the one on PATH
local node = modules .. "/.bin/node"
local nf = io.open(node)
if nf then nf:close() else node = "node" end
local server = modules .. "/@modelcontextprotocol/server-filesystem/dist/index.js"
local sf = io.open(server)
if not sf then
  fail("the npm package @modelcontextprotocol/server-filesystem is not in " .. npm .. " (run .ci/deps from the "
    .. "repository, or set SPECULA_NPM_CACHE to the folder where npm installed it)")
end
sf:close()
local vp = io.popen("'" .. node .. "' --version 2>/dev/null")
local version = vp and vp:read("*l") or ""
if vp then vp:close() end
local major = tonumber(version:match("^v(%d+)"))
if not major then
  fail("no Node.js to run server-filesystem: '" .. node .. " --version' did not answer (.ci/deps installs Node 22 "
    .. "into " .. npm .. ")")
elseif major < 20 then
  fail("Node " .. version .. " ('" .. node .. "') is too old: server-filesystem needs Node 20 or later (.ci/deps "
    .. "installs Node 22 into " .. npm .. ")")
end
-- this specula binary (the shell popen starts is its child)
local p = io.popen("readlink -f /proc/$PPID/exe 2>/dev/null")
local self = p and p:read("*l") or "specula"
if p then p:close() end
local out = os.tmpname()

-- cwd: the directory, which files.lua serves when $GATEWAY_ROOT is not set
local function session(command)
  local c = assert(specula.mcp.connect { command = command, cwd = abs, name = "try", quiet = true, max_restarts = 0 })
  local t0 = specula.real_now()
  local listing = assert(c:call("list_directory", { path = abs }))
  local n = 0
  for name in (listing.content[1].text or ""):gmatch("%[FILE%] ([^\n]+)") do
    if n == 6 then break end
    specula.sleep(think)                   -- the model thinking
    assert(c:call("read_text_file", { path = abs .. "/" .. name }))
    n = n + 1
  end
  local ms = specula.real_now() - t0
  c:close()
  return ms, n
end

local direct_ms, n = session({ node, server, abs })
os.remove(out)
local config = io.popen("cd '" .. here .. "' && pwd"):read("*l") .. "/files.lua"
local gw_ms = session({ self, "gateway", config, "--out", out })
local f = io.open(out)
local rec = f and json.decode(f:read("*l") or "null")
if f then f:close() end
os.remove(out)
print(string.format("%d files of %s, %d ms of thinking before each", n, abs, think))
print(string.format("direct            %7.0f ms", direct_ms))
print(string.format("through gateway   %7.0f ms  (%.2f of direct)", gw_ms, gw_ms / direct_ms))
if rec then
  local s = rec.speculation
  print(string.format("prefetch hits %d of %d reads, waste %d, upstream time hidden %.0f ms",
    s.hits, n, s.waste, s.hidden_ms))
  print("(a read of server-filesystem takes a few ms, so little is hidden here; with tools that take")
  print(" hundreds of ms the saving is the reads' time: `specula bench gateway`)")
else
  print("(no --out record: the gateway did not end cleanly)")
  os.exit(1)
end
