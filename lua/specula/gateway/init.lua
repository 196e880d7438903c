-- specula.gateway: an MCP server that stands in front of other MCP servers
-- and speculates on the client's next calls (docs/gateway.md).
--
--   -- CONFIG.lua
--   local specula = require "specula"
--   return specula.gateway {
--     servers = { fs = { command = { "npx", "server-filesystem", "/tmp" }, env = {...}, cwd = "..." },
--                 web = { url = "http://127.0.0.1:3000/mcp", headers = {...}, auth = {...} } },
--     policy = { read_file = "full" },   -- any policy `specula run` takes; none: nothing runs early
--     predict = "learned",               -- a name, a file, a predictor; "off": no speculation
--     max_age_ms = 30000,                -- a prefetched result older than this is never served
--     budget = { max_inflight = 2,       -- prefetches in flight per session
--                max_wasted_cost = 10,   -- what they may waste, per session (none: no limit)
--                cost = { TOOL = 0.5 } },-- one call's cost (1 when not named)
--   }
--
--   local gw = gateway.load("CONFIG.lua")               -- the file's gateway | error "FILE:LINE: ..."
--   local s = gateway.serve_session(gw, transport, o)   -- one client over a server-side transport
--   s:wait()                                             -- until the client is gone
--
-- serve_session takes any server-side transport (specula.mcp.transport):
-- the stdio one (specula.mcp.serve_stdio) for `specula gateway CONFIG`,
-- one per HTTP session for a listener (for stateless 2026-07-28 POSTs: one
-- per clientInfo); each is a session of its own, with servers, predictor
-- and counters of its own.
local json = require "specula.json"
local prov = require "specula.provenance"

local type, pairs, ipairs, tostring, error, setmetatable = type, pairs, ipairs, tostring, error, setmetatable
local format, concat, sort = string.format, table.concat, table.sort

local M = {}

local TOP = { servers = true, policy = true, predict = true, max_age_ms = true, budget = true }
local SERVER = { command = true, env = true, cwd = true, url = true, headers = true, auth = true, timeout_ms = true,
                 init_timeout_ms = true, max_restarts = true, protocol_version = true, max_message_bytes = true }
local BUDGET = { max_inflight = true, max_wasted_cost = true, cost = true }

local function keys(t)
  local l = {}
  for k in pairs(t) do l[#l + 1] = k end
  sort(l)
  return concat(l, ", ")
end

local Gateway = {}
Gateway.__index = Gateway

-- The key a mistake is about (the loader finds its line when the call's
-- own line is lost: `return specula.gateway{...}` is a tail call).
local bad_key
local function bad(msg, key)
  bad_key = key
  error("specula.gateway: " .. msg, 0)
end

-- a number >= 0 that is finite (infinity reached the records' provenance,
-- which JSON cannot hold, and failed every session)
local function count_ok(v) return type(v) == "number" and v >= 0 and v < math.huge end

local function check_server(name, s)
  if type(name) ~= "string" or not name:match("^[%w_%-]+$") then
    bad(format("servers: a server's name must be letters, digits, _ or -, got %s", tostring(name)), "servers")
  end
  if type(s) ~= "table" then bad(format("servers.%s must be a table", name), name) end
  for k in pairs(s) do
    if not SERVER[k] then bad(format("servers.%s: unknown key '%s' (known: %s)", name, tostring(k), keys(SERVER)), k) end
  end
  if (s.command == nil) == (s.url == nil) then
    bad(format("servers.%s: give either command = { program, args... } or url = 'http://...'", name), name)
  end
  if s.command ~= nil then
    if type(s.command) ~= "table" or #s.command == 0 then bad(format("servers.%s: command must be a non-empty list", name), name) end
    for i, a in ipairs(s.command) do
      if type(a) ~= "string" then bad(format("servers.%s: command[%d] must be a string", name, i), "command") end
    end
  end
  if s.url ~= nil and (type(s.url) ~= "string" or not s.url:match("^https?://")) then
    bad(format("servers.%s: url must be an http:// or https:// URL", name), name)
  end
  for _, k in ipairs({ "env", "headers" }) do
    if s[k] ~= nil and type(s[k]) ~= "table" then bad(format("servers.%s: %s must be a table", name, k), k) end
  end
  if s.cwd ~= nil and type(s.cwd) ~= "string" then bad(format("servers.%s: cwd must be a string", name), name) end
  -- what specula.mcp.connect takes besides, checked here as it checks it:
  -- a wrong value is the config's mistake, before the gateway serves, not
  -- a server left out at the client's initialize
  for _, k in ipairs({ "timeout_ms", "init_timeout_ms", "max_restarts", "max_message_bytes" }) do
    local v = s[k]
    if v ~= nil and not count_ok(v) then
      bad(format("servers.%s: %s must be a finite number >= 0, got %s", name, k, tostring(v)), k)
    end
  end
  local pv = s.protocol_version
  if pv ~= nil and not require("specula.mcp.client").SUPPORTED[pv] then
    bad(format("servers.%s: protocol_version must be one of %s, got %s", name,
      concat(require("specula.mcp.client").PROTOCOL_VERSIONS, ", "), tostring(pv)), "protocol_version")
  end
  if s.auth ~= nil and s.auth ~= false then
    if s.url == nil then bad(format("servers.%s: auth is for servers reached by url", name), "auth") end
    local ok, err = pcall(require("specula.mcp.auth").check_options, s.auth, 1)
    if not ok then bad(format("servers.%s: %s", name, tostring(err):gsub("^specula%.mcp%.connect: ", "")), "auth") end
  end
end

local function check(spec)
  if type(spec) ~= "table" then bad("expected a table { servers = {...}, ... }") end
  for k in pairs(spec) do
    if not TOP[k] then bad(format("unknown key '%s' (known: %s)", tostring(k), keys(TOP)), k) end
  end
  if type(spec.servers) ~= "table" or next(spec.servers) == nil then
    bad("servers: at least one server is needed: servers = { NAME = { command = {...} } | { url = ... } }", "servers")
  end
  for name, s in pairs(spec.servers) do check_server(name, s) end
  local age = spec.max_age_ms
  if age ~= nil and not count_ok(age) then bad("max_age_ms must be a finite number >= 0", "max_age_ms") end
  local b = spec.budget
  if b ~= nil then
    if type(b) ~= "table" then bad("budget must be a table { max_inflight = N }", "budget") end
    for k in pairs(b) do
      if not BUDGET[k] then bad(format("budget: unknown key '%s' (known: %s)", tostring(k), keys(BUDGET)), k) end
    end
    local n = b.max_inflight
    if n ~= nil and (not count_ok(n) or n ~= math.floor(n)) then
      bad("budget.max_inflight must be a whole number >= 0", "max_inflight")
    end
    local w = b.max_wasted_cost
    if w ~= nil and not count_ok(w) then
      bad("budget.max_wasted_cost must be a finite number >= 0", "max_wasted_cost")
    end
    if b.cost ~= nil then
      if type(b.cost) ~= "table" then bad("budget.cost must be a table { TOOL = cost of one call }", "cost") end
      for tool, c in pairs(b.cost) do
        if type(tool) ~= "string" or not count_ok(c) then
          bad(format("budget.cost: '%s' must be a tool name with a finite number >= 0", tostring(tool)), "cost")
        end
      end
    end
  end
  local p = spec.predict
  if p ~= nil and p ~= false and type(p) ~= "string" and type(p) ~= "function" and type(p) ~= "table" then
    bad("predict must be a name, a file, a predictor, or \"off\"", "predict")
  end
  local pol = spec.policy
  if pol ~= nil and type(pol) ~= "string" and type(pol) ~= "function" and type(pol) ~= "table" then
    bad("policy must be a table, a function or a file", "policy")
  end
end

-- specula.gateway{...}: the checked configuration. A mistake is raised at
-- `level` above this function (1: its caller), so that it names the line
-- of the call in the config file.
function M.new(spec, level)
  bad_key = nil
  local ok, err = pcall(check, spec)
  if not ok then
    M.bad_key = bad_key
    error(err, (level or 1) + 1)
  end
  local names = {}
  for name in pairs(spec.servers) do names[#names + 1] = name end
  sort(names)
  local servers = {}
  for i, name in ipairs(names) do servers[i] = { name = name, opts = spec.servers[name] } end
  return setmetatable({
    __specula_gateway = true, servers = servers, policy = spec.policy,
    predict = spec.predict == nil and "learned" or spec.predict,
    max_age_ms = spec.max_age_ms or 30000,
    budget = { max_inflight = spec.budget and spec.budget.max_inflight or 2,
               max_wasted_cost = spec.budget and spec.budget.max_wasted_cost,
               cost = spec.budget and spec.budget.cost },
  }, Gateway)
end

-- A predictor for a new session: by name or file a fresh one each time;
-- an object given in the config is shared. nil: no speculation.
function Gateway:new_predictor()
  local p = self.predict
  if p == "off" or p == false then return nil end
  if type(p) == "string" then
    local v, err = require("specula.run.opts").load_predictor(p, self.dir)
    if not v then error("specula gateway: predict: " .. tostring(err), 0) end
    if v == "off" then return nil end
    return v.value
  end
  return p
end

-- What the records say the gateway was: the config file by its digest, the
-- servers by name and kind, the knobs.
function Gateway:provenance()
  local servers = {}
  for _, s in ipairs(self.servers) do
    servers[s.name] = s.opts.url and "http" or "stdio"
  end
  local pol = self.policy
  local polp
  if type(pol) == "string" then polp = prov.file(pol)
  elseif pol == nil then polp = "none"
  else polp = prov.describe(pol) end
  local config = { servers = servers, policy = polp, predictor = type(self.predict) == "string" and self.predict
    or prov.describe(self.predict), max_age_ms = self.max_age_ms, budget = self.budget }
  local agent = self.file and prov.file(self.file) or { file = json.null }
  local core = require "specula.internal.core"
  return prov.build(core.ffi.string(core.C.sp_version()), agent, { file = json.null, format = "mcp-session" }, config)
end

-- FILE:LINE of a config's mistake about `key` when the error carries no
-- position (the call was a tail call): the first line that sets the key,
-- else the line of the specula.gateway call, else the file alone.
function M.where(path, key)
  local f = io.open(path, "r")
  if not f then return path end
  local n, call_line, key_line = 0, nil, nil
  for line in f:lines() do
    n = n + 1
    if not call_line and line:find("gateway%s*[{(]") then call_line = n end
    if key and not key_line and call_line then
      local k = key:gsub("%p", "%%%0")
      if line:find("^%s*" .. k .. "%s*=") or line:find("[{,]%s*" .. k .. "%s*=") or line:find('%[%s*"' .. k .. '"%s*%]%s*=') then
        key_line = n
      end
    end
  end
  f:close()
  local at = key_line or call_line
  return at and (path .. ":" .. at) or path
end

-- The gateway a config file returns | error "FILE:LINE: why" (raised plain).
function M.load(path)
  local sched = require "specula.internal.sched"
  local f = io.open(path, "r")
  if not f then sched.plain_error("specula gateway: cannot open config '" .. path .. "'", 2) end
  f:close()
  local chunk, err = loadfile(path)
  if not chunk then sched.plain_error("specula gateway: " .. tostring(err), 2) end
  M.bad_key = nil
  local ok, gw = pcall(chunk)
  if not ok then
    local msg = sched.errstr(gw)
    if msg:find("^specula%.gateway: ") then msg = M.where(path, M.bad_key) .. ": " .. msg end
    sched.plain_error("specula gateway: " .. msg, 2)
  end
  if type(gw) ~= "table" or not gw.__specula_gateway then
    sched.plain_error(format("specula gateway: %s must return specula.gateway{ servers = {...}, ... }, got %s",
      path, type(gw)), 2)
  end
  gw.file = path
  gw.dir = path:match("^(.*)/[^/]*$") or "."
  if type(gw.policy) == "string" then
    local resolved = require("specula.policy").resolve(gw.policy, gw.dir)
    if not resolved then sched.plain_error(format("specula gateway: %s: policy file '%s' not found", path, gw.policy), 2) end
    gw.policy = resolved
  end
  -- a mistake in the policy (its file's syntax, what it returns, a decision
  -- no gate knows) is the config's error, said now: found per session it was
  -- a warning on a stderr a client may hide, and the gateway ran with
  -- nothing early
  if gw.policy ~= nil then
    local pok, perr = pcall(require("specula.policy").build, gw.policy, {}, gw.dir)
    if not pok then
      sched.plain_error(format("specula gateway: %s: %s", M.where(path, "policy"), sched.errstr(perr)), 2)
    end
  end
  -- so is a predictor name or file that cannot be loaded (it was raised
  -- at the first session, a stack trace and status 1)
  local qok, qerr = pcall(gw.new_predictor, gw)
  if not qok then
    sched.plain_error(format("specula gateway: %s: %s", M.where(path, "predict"),
      (sched.errstr(qerr):gsub("^specula gateway: ", ""))), 2)
  end
  return gw
end

local n_sessions = 0

-- One client over a server-side transport t (specula.mcp.transport), in a
-- task: session | nil, err. The session runs on its own (root tasks);
-- session:wait() waits for its end. o: { on_end = function(session) (the
-- session's record is session:stats(); its spans session.rec:otlp()),
-- spans = true (keep each call's arguments and result for the spans) }.
function M.serve_session(gw, t, o)
  if type(gw) ~= "table" or not gw.__specula_gateway then
    error("specula.gateway.serve_session: expected a gateway (specula.gateway{...})", 2)
  end
  if type(t) ~= "table" or type(t.open) ~= "function" then
    error("specula.gateway.serve_session: expected a server-side transport", 2)
  end
  o = o or {}
  n_sessions = n_sessions + 1
  gw.built = gw.built or gw:provenance()
  local rec = require("specula.gateway.record").new(n_sessions, gw.built, { spans = o.spans })
  return require("specula.gateway.session").start(gw, t, { on_end = o.on_end, record = rec })
end

return M
