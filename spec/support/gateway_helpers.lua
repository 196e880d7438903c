-- Helpers of the gateway specs (gateway_spec, gateway_relay_spec,
-- gateway_http_spec, gateway_stateless_spec): the clients that drive a
-- gateway (the official SDK's, spec/support/mcp_sdk_driver.js, and
-- specula's own, spec/support/mcp_lua_driver.lua), config files, the
-- specs' test server behind the tap (spec/support/mcp_stdio_tap.js), the
-- --out records, and a gateway listening over HTTP in the background.
local H = require "support.helpers"
local cjson = require "cjson"
local deps = require "support.deps"
-- busted's assert (a module sees the global one, not the spec's)
local assert = require "luassert"

local M = {}

M.CACHE = deps.cache()
M.MCP = M.CACHE .. "/node_modules/@modelcontextprotocol/"
M.DRIVER = H.root .. "/spec/support/mcp_sdk_driver.js"
M.LUA_DRIVER = H.root .. "/spec/support/mcp_lua_driver.lua"
M.TAP = H.root .. "/spec/support/mcp_stdio_tap.js"
M.SERVER = H.root .. "/spec/support/mcp_testserver.js"
M.missing = deps.npm()

-- true when the npm packages are there, else the spec is pending (busted's
-- `pending` of the calling spec) and false.
function M.guard(pend)
  if not M.missing then return true end
  return H.require_or_pend(pend, M.missing)
end

-- The same for the specs that run the conformance suite (node >= 22).
M.suite_missing = deps.conformance()
function M.suite_guard(pend)
  if not M.suite_missing then return true end
  return H.require_or_pend(pend, M.suite_missing)
end

function M.node() return deps.use_node() and (deps.use_node() .. "/node") or "node" end
function M.q(s) return string.format("%q", s) end
function M.sleep(s) os.execute("sleep " .. s) end

local files = 0
-- A temporary file of its own (two runs may be under way at once).
local function own_file(name, content)
  files = files + 1
  return H.tmpfile(name:gsub("(%.%w+)$", files .. "%1"), content)
end

-- The shell command that runs the SDK driver with a plan.
function M.driver_cmd(plan)
  return H.quote(M.node()) .. " " .. H.quote(M.DRIVER) .. " " .. H.quote(own_file("plan.json", cjson.encode(plan)))
end

-- Run the SDK driver with a plan: its decoded output, and its stderr.
function M.drive(plan)
  local status, out, err = H.sh(M.driver_cmd(plan))
  assert.are.equal(0, status, "driver failed: " .. err)
  return cjson.decode(out:match("[^\n]+")), err
end

-- Run specula's own client (spec/support/mcp_lua_driver.lua, under
-- `specula run`) with a plan: its decoded output, and its stderr.
function M.lua_drive(plan)
  local path = own_file("lplan.json", cjson.encode(plan))
  local status, out, err = H.specula({ "run", M.LUA_DRIVER, path }, {})
  assert.are.equal(0, status, "lua driver failed: " .. err .. out)
  local line = out:match("[^\n]+")
  assert.is_string(line, "no output: " .. err)
  return cjson.decode(line), err
end

-- A config file serving the given servers (Lua source of the table) and knobs.
function M.config(servers, extra)
  return own_file("gateway.lua", "local specula = require 'specula'\nreturn specula.gateway {\n  servers = "
    .. servers .. ",\n" .. (extra or "") .. "}\n")
end

-- Lua source of a stdio server's entry: { command = {...}, env = {...} }.
function M.server_src(cmd, env)
  local parts = {}
  for _, a in ipairs(cmd) do parts[#parts + 1] = M.q(a) end
  local e = ""
  if env then
    local l = {}
    for k, v in pairs(env) do l[#l + 1] = k .. " = " .. M.q(v) end
    e = ", env = { " .. table.concat(l, ", ") .. " }"
  end
  return "{ command = { " .. table.concat(parts, ", ") .. " }" .. e .. " }"
end

-- The lines of a JSON-lines file (--out, the tap's log), decoded.
function M.records(path)
  local l = {}
  for line in (H.read(path) or ""):gmatch("[^\n]+") do l[#l + 1] = cjson.decode(line) end
  return l
end
M.tap = M.records

-- Two drivers' outputs for the same steps: the same answers, step by step.
function M.same_steps(direct, gw)
  assert.are.equal(#direct.steps, #gw.steps)
  for i, d in ipairs(direct.steps) do
    local g = gw.steps[i]
    assert.are.same(d.ok, g.ok, "step " .. i .. " (" .. d.op .. ")")
    assert.are.same(d.result, g.result, "step " .. i .. " (" .. d.op .. ")")
    if not d.ok then assert.are.same(d.error, g.error, "step " .. i .. " (" .. d.op .. ")") end
  end
end

local n = 0
-- A config with the specs' test server behind the tap (server args: extra
-- arguments of the test server): its config, tap log and --out paths.
function M.tap_config(extra, env, server_args, server_opts)
  n = n + 1
  local dir = H.tmpdir()
  local log, out = dir .. "/tap" .. n .. ".jsonl", dir .. "/out" .. n .. ".jsonl"
  os.remove(log)
  os.remove(out)
  local e = ""
  for k, v in pairs(env or {}) do e = e .. string.format("%s = %q, ", k, v) end
  local cmd = { M.node(), M.TAP, log, M.node(), M.SERVER }
  for _, a in ipairs(server_args or {}) do cmd[#cmd + 1] = a end
  local parts = {}
  for _, a in ipairs(cmd) do parts[#parts + 1] = M.q(a) end
  local cfg = H.tmpfile("relay" .. n .. ".lua", string.format([[
local specula = require "specula"
return specula.gateway {
  servers = { test = { command = { %s }, env = { %s }, %s } },
  %s
}
]], table.concat(parts, ", "), e, server_opts or "", extra or ""))
  return cfg, log, out
end

local started = 0

-- `specula gateway CFG --listen 127.0.0.1:0 ARGS...` in the background:
-- { url, pid, err (its stderr file) } once it says where it listens.
function M.start(cfg, args)
  started = started + 1
  local errf = H.tmpdir() .. "/gw-http-err" .. started
  os.remove(errf)
  local parts = { H.quote(H.bin), "gateway", H.quote(cfg) }
  for _, a in ipairs(args or { "--listen", "127.0.0.1:0" }) do parts[#parts + 1] = H.quote(a) end
  local _, out = H.sh(table.concat(parts, " ") .. " </dev/null >/dev/null 2>" .. H.quote(errf) .. " & echo $!")
  local g = { pid = tonumber(out:match("%d+")), err = errf }
  for _ = 1, 200 do
    g.url = (H.read(errf) or ""):match("listening on (http://%S+)")
    if g.url then return g end
    M.sleep(0.05)
  end
  error("the gateway did not say where it listens: " .. tostring(H.read(errf)))
end

function M.alive(pid) return os.execute("kill -0 " .. pid .. " 2>/dev/null") == 0 end

-- SIGTERM, then its end: its stderr.
function M.stop(g)
  os.execute("kill -TERM " .. g.pid)
  for _ = 1, 200 do
    if not M.alive(g.pid) then break end
    M.sleep(0.05)
  end
  assert.is_false(M.alive(g.pid), "the gateway did not exit on SIGTERM")
  return H.read(g.err) or ""
end

return M
