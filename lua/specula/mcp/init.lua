-- specula.mcp: a Model Context Protocol client (JSON-RPC 2.0) over stdio
-- (a child process, engine/sp_proc.c) or Streamable HTTP (specula.http).
-- The package: this file (connect: options, the transport, the client),
-- client.lua (the session), transport.lua (the interface under it),
-- stdio.lua and http.lua (the transports), auth.lua (OAuth).
--
--   local c, err = specula.mcp.connect{ command = { "node", "server.js" }, env = {...}, cwd = ...,
--                                       name = "fs", max_restarts = 3, timeout_ms = 60000 }
--   local c, err = specula.mcp.connect{ url = "http://127.0.0.1:3000/mcp", headers = {...},
--                                       auth = { ... } }   -- OAuth: specula.mcp.auth, docs/mcp.md#authorization-oauth-21
--   c:list_tools()                      -> { {name, description, inputSchema, ...}, ... } | nil, err
--   c:call(name, args, { timeout_ms, on_progress }) -> { content, structuredContent, isError } | nil, err
--   c:list_resources(), c:list_resource_templates() -> every page | nil, err
--   c:read_resource(uri, { timeout_ms }) -> { contents = { {uri, mimeType, text | blob}, ... } } | nil, err
--   c:ping(), c:request(method, params, opts), c:stats(), c:auth_info(), c:close()
--
-- Protocol: 2026-07-28 (stateless: server/discover, then _meta and headers
-- on every request) with a server that speaks it, else a 2025-11-25
-- session (initialize); protocol_version pins one (client.lua: _start,
-- docs/mcp.md).
--
-- Requests from the server: ping is answered; sampling/createMessage,
-- elicitation/create and roots/list go to the hooks on_sampling,
-- on_elicitation and on_roots when given (each runs in a task of its own,
-- so it may call an LLM or wait), and anything else gets -32601. Over HTTP
-- a client with hooks (or listen = true) keeps the server's GET stream open
-- for requests that belong to no call.
--
-- on_notification = function(method, params, msg) sees every notification
-- the server sends (progress, logging, list_changed, ...) before the client
-- acts on it (a relay passes them on: specula.gateway).
--
-- A call whose task is cancelled (a discarded speculative thread, an
-- orphaned prediction) sends notifications/cancelled with its request id at
-- once, from C (the task never runs again); the late response is dropped.
-- Errors are values and name the server; a stdio server that dies fails its
-- calls with its last stderr lines, and the next call restarts it (at most
-- max_restarts times).
local sched = require "specula.internal.sched"
local secrets = require "specula.secrets"
local transport = require "specula.mcp.transport"
local client = require "specula.mcp.client"

local type, tostring, ipairs, error = type, tostring, ipairs, error

local M = {}

-- The wrapper every client's transport goes behind, or nil:
-- wrapper(live, name, headers) -> a transport (specula.mcp.transport).
local wrapper = nil
function M.set_wrapper(w) wrapper = w end

M.PROTOCOL_VERSIONS = client.PROTOCOL_VERSIONS
M.CLIENT_INFO = client.CLIENT_INFO
M.HOOKS = client.HOOKS
M.elicitation_result = client.elicitation_result
M.Client = client.Client

-- ---- connect ------------------------------------------------------------------------------

local function check_opts(o)
  if type(o) ~= "table" then error("specula.mcp.connect: expected a table of options", 3) end
  if (o.command == nil) == (o.url == nil) then
    error("specula.mcp.connect: give either command = { program, args... } or url = 'http://...'", 3)
  end
  if o.command ~= nil then
    if type(o.command) ~= "table" or #o.command == 0 then
      error("specula.mcp.connect: command must be a non-empty list of strings", 3)
    end
    for i, a in ipairs(o.command) do
      if type(a) ~= "string" then error("specula.mcp.connect: command[" .. i .. "] must be a string", 3) end
    end
  end
  if o.url ~= nil and (type(o.url) ~= "string" or not o.url:match("^https?://")) then
    error("specula.mcp.connect: url must be an http:// or https:// URL", 3)
  end
  for _, k in ipairs({ "timeout_ms", "max_restarts", "max_message_bytes", "init_timeout_ms" }) do
    local v = o[k]
    if v ~= nil and (type(v) ~= "number" or v < 0 or v ~= v) then
      error("specula.mcp.connect: " .. k .. " must be a non-negative number", 3)
    end
  end
  if o.env ~= nil and type(o.env) ~= "table" then error("specula.mcp.connect: env must be a table", 3) end
  if o.headers ~= nil and type(o.headers) ~= "table" then error("specula.mcp.connect: headers must be a table", 3) end
  if o.cwd ~= nil and type(o.cwd) ~= "string" then error("specula.mcp.connect: cwd must be a string", 3) end
  for _, k in ipairs({ "on_sampling", "on_elicitation", "on_notification" }) do
    if o[k] ~= nil and type(o[k]) ~= "function" then error("specula.mcp.connect: " .. k .. " must be a function", 3) end
  end
  if o.on_roots ~= nil and type(o.on_roots) ~= "function" and type(o.on_roots) ~= "table" then
    error("specula.mcp.connect: on_roots must be a function or a list of roots", 3)
  end
  if o.listen ~= nil and type(o.listen) ~= "boolean" then error("specula.mcp.connect: listen must be a boolean", 3) end
  if o.auth ~= nil and o.auth ~= false then
    if o.url == nil then error("specula.mcp.connect: auth is for servers reached by url", 3) end
    require("specula.mcp.auth").check_options(o.auth, 3)
  end
  if o.protocol_version ~= nil and not client.SUPPORTED[o.protocol_version] then
    error("specula.mcp.connect: protocol_version must be one of " .. table.concat(client.PROTOCOL_VERSIONS, ", "), 3)
  end
end

-- Connect and initialize: a client | nil, err. Must run in a task (a
-- script's main chunk is one).
function M.connect(o)
  check_opts(o)
  sched.current("specula.mcp.connect")
  secrets.declare_headers(o.headers)
  secrets.declare_url(o.url)
  local name = o.name
  if name == nil then
    if o.url then name = o.url:gsub("%?.*$", "")
    else
      local last = o.command[#o.command]
      name = (last:match("([^/]+)$") or last)
      if #o.command == 1 then name = o.command[1] end
    end
  end
  name = tostring(name)
  local live, auth
  if o.url then
    local listen = o.listen
    if listen == nil then listen = (o.on_sampling or o.on_elicitation or o.on_roots) ~= nil end
    if o.auth then
      auth = require("specula.mcp.auth").new(o.auth == true and {} or o.auth, o.url, transport.spawn_root,
        "mcp server '" .. name .. "'")
    end
    live = require("specula.mcp.http").new {
      url = o.url, headers = o.headers or {}, name = name, auth = auth,
      timeout_ms = o.timeout_ms or 60000, init_timeout_ms = o.init_timeout_ms or 30000,
      max_message_bytes = o.max_message_bytes or 16 * 1024 * 1024,
      max_reconnects = o.max_reconnects or 5, default_retry_ms = o.default_retry_ms or 1000, listen = listen,
    }
  else
    live = require("specula.mcp.stdio").new({ command = o.command, env = o.env, cwd = o.cwd, name = name,
      max_message_bytes = o.max_message_bytes or 16 * 1024 * 1024 }, 3)
  end
  -- Behind the transport wrapper when one is set (specula.run.cassette sets
  -- the cassette's once, before scripts run: it records or replays while a
  -- cassette is open, one may open after the client connects with
  -- specula.run{ record = DIR }, and passes through when none is; a replay
  -- that needs no live server (offline) starts none).
  local t = wrapper and wrapper(live, name, o.headers or {}) or live
  local c, err = client.open(t, o, name)
  if not c then return nil, err end
  c.auth = auth
  return c
end

return M
