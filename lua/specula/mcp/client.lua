-- specula.mcp.client: an MCP session over any transport
-- (specula.mcp.transport): JSON-RPC 2.0 ids and pending requests, the
-- handshake, timeouts and cancellation, the server's own requests (ping
-- and the hooks), and the client API (specula.mcp documents it). It never
-- knows which transport it speaks through: stdio, Streamable HTTP, or a
-- wrapper around one of them that records or replays.
local core = require "specula.core"
local sched = require "specula.sched"
local json = require "specula.json"
-- a server's text may carry a credential: errors made of it are scrubbed
local secrets = require "specula.secrets"
local output = require "specula.output"
local transport = require "specula.mcp.transport"
local ffi = core.ffi
local C = core.C

local type, tostring, tonumber, pairs, ipairs, setmetatable, error, pcall =
  type, tostring, tonumber, pairs, ipairs, setmetatable, error, pcall
local format, concat = string.format, table.concat
local co_yield = sched.yield   -- the raw yield (sched guards the global one)
local encode, JNULL = json.encode, json.null
local scrub = secrets.scrub
local spawn_root, excerpt = transport.spawn_root, transport.excerpt

local M = {}

M.PROTOCOL_VERSIONS = { "2025-11-25", "2025-06-18", "2025-03-26" }
local SUPPORTED = {}
for _, v in ipairs(M.PROTOCOL_VERSIONS) do SUPPORTED[v] = true end
M.SUPPORTED = SUPPORTED
M.CLIENT_INFO = { name = "specula", version = ffi.string(C.sp_version()) }

local PENDING = tonumber(C.SP_RPC_PENDING)
local RPC_DONE = tonumber(C.SP_RPC_DONE)
local TIMEDOUT = tonumber(C.SP_RPC_TIMEDOUT)

local function obj(t) return setmetatable(t or {}, json.object_mt) end

local Client = {}
-- pid (stdio) and session_id (HTTP) are the transport's
local FROM_TRANSPORT = { pid = true, session_id = true }
Client.__index = function(c, k)
  local v = Client[k]
  if v ~= nil or not FROM_TRANSPORT[k] then return v end
  local t = rawget(c, "t")
  return t and t[k]
end

function Client:_warn(msg)
  msg = scrub(msg)   -- a server's text may carry a credential
  self.errors[#self.errors + 1] = msg
  if #self.errors > 50 then table.remove(self.errors, 1) end
  if not self.quiet then output.stderr("specula: warning: ", msg, "\n") end
end

function Client:_where() return "mcp server '" .. self.name .. "'" end

-- ---- message handling -----------------------------------------------------------------

-- Send a JSON-RPC message that needs no answer (a response or a
-- notification); a transport whose send waits (HTTP) sends from a task of
-- its own, so a reader never waits on it.
function Client:_send_oneway(msg)
  local t = self.t
  if not t.send_waits then return t:send(msg) end
  local text, eerr = encode(msg)
  if not text then return nil, eerr end
  local task = spawn_root(function() t:send(msg) end)
  return task ~= nil
end

-- One message from the server (already decoded).
function Client:_handle(msg, via)
  local st = self.st
  if type(msg) ~= "table" then
    st.malformed = st.malformed + 1
    self:_warn(self:_where() .. ": message is not a JSON object (" .. via .. ")")
    return
  end
  local id, method = msg.id, msg.method
  if method ~= nil and id ~= nil and id ~= JNULL then
    -- a request from the server: ping is answered, a hook answers its
    -- method, anything else is refused
    st.server_requests = st.server_requests + 1
    if method == "ping" then
      self:_send_oneway({ jsonrpc = "2.0", id = id, result = obj() })
    else
      self:_server_request(id, method, msg.params)
    end
    return
  end
  if method ~= nil then
    local params = type(msg.params) == "table" and msg.params or {}
    if method == "notifications/progress" then
      local e = self.by_token[params.progressToken]
      if e and e.on_progress then
        local ok, perr = pcall(e.on_progress, params)
        if not ok then self:_warn(self:_where() .. ": progress callback raised: " .. tostring(perr)) end
      end
      st.progress = st.progress + 1
    elseif method == "notifications/tools/list_changed" then
      self.tools_cache = nil
    elseif method == "notifications/resources/list_changed" then
      st.resources_changed = st.resources_changed + 1
    end
    return
  end
  if id == nil or (msg.result == nil and msg.error == nil) then
    st.malformed = st.malformed + 1
    self:_warn(self:_where() .. ": message is neither a request, a notification nor a response: "
      .. excerpt(encode(msg) or "?"))
    return
  end
  local e = self.pending[id]
  if e == nil then
    if self.given_up[id] then
      self.given_up[id] = nil
      st.late_dropped = st.late_dropped + 1
      return
    end
    st.unknown_ids = st.unknown_ids + 1
    self:_warn(self:_where() .. ": response with unknown id " .. excerpt(encode(id) or "?") .. " dropped")
    return
  end
  self.pending[id] = nil
  if e.token ~= nil then self.by_token[e.token] = nil end
  if C.sp_rpc_state(e.rpc) ~= PENDING then
    st.late_dropped = st.late_dropped + 1
    return
  end
  if msg.error ~= nil then
    local er = type(msg.error) == "table" and msg.error or {}
    e.err = scrub(format("%s: %s: error %s: %s", self:_where(), e.what, tostring(er.code),
      tostring(er.message)))
  else
    e.result = msg.result
  end
  C.sp_rpc_complete(e.rpc)
end

-- ---- requests from the server ----------------------------------------------------------

local HOOKS = { ["sampling/createMessage"] = "on_sampling", ["elicitation/create"] = "on_elicitation",
                ["roots/list"] = "on_roots" }
local HOOK_STAT = { ["sampling/createMessage"] = "sampling", ["elicitation/create"] = "elicitation",
                    ["roots/list"] = "roots" }
M.HOOKS = HOOKS

-- An accepted elicitation carries every field the requested schema gives a
-- default for (SEP-1034), then must hold the required ones.
local function elicitation_result(r, params)
  if type(r) ~= "table" then
    return nil, "returned " .. type(r) .. " (expected { action = 'accept'|'decline'|'cancel', content = {...} })"
  end
  local action = r.action
  if action ~= "accept" and action ~= "decline" and action ~= "cancel" then
    return nil, "action must be accept, decline or cancel, got " .. tostring(action)
  end
  if action ~= "accept" then return obj({ action = action }) end
  local content = {}
  if r.content ~= nil then
    if type(r.content) ~= "table" then return nil, "content must be a table" end
    for k, v in pairs(r.content) do content[k] = v end
  end
  local schema = type(params) == "table" and params.requestedSchema or nil
  local props = type(schema) == "table" and type(schema.properties) == "table" and schema.properties or {}
  for name, p in pairs(props) do
    if content[name] == nil and type(p) == "table" and p.default ~= nil and p.default ~= JNULL then
      content[name] = p.default
    end
  end
  if type(schema) == "table" and type(schema.required) == "table" then
    for _, name in ipairs(schema.required) do
      if content[name] == nil then
        return nil, "the accepted content lacks the required field '" .. tostring(name) .. "'"
      end
    end
  end
  return obj({ action = "accept", content = obj(content) })
end
M.elicitation_result = elicitation_result

-- A string is the text of the assistant's message.
local function sampling_result(r)
  if type(r) == "string" then
    return obj({ role = "assistant", content = obj({ type = "text", text = r }), model = "specula-hook",
                 stopReason = "endTurn" })
  end
  if type(r) ~= "table" then return nil, "returned " .. type(r) .. " (expected a CreateMessageResult or a string)" end
  if r.content == nil then return nil, "the result has no content" end
  local out = obj()
  for k, v in pairs(r) do out[k] = v end
  if out.role == nil then out.role = "assistant" end
  if out.model == nil then out.model = "specula-hook" end
  return out
end

-- every byte but the unreserved ones and "/" as %XX (libcurl's escape)
local function file_uri(path)
  return "file://" .. require("specula.url").escape(path, "/")
end

-- A list of paths, file:// URIs or { uri =, name = }.
local function roots_result(r)
  if type(r) ~= "table" then return nil, "expected a list of roots, got " .. type(r) end
  local out = {}
  for i, x in ipairs(r) do
    if type(x) == "string" then
      out[i] = obj({ uri = x:match("^file://") and x or file_uri(x) })
    elseif type(x) == "table" and type(x.uri) == "string" then
      out[i] = obj({ uri = x.uri, name = x.name })
    else
      return nil, "roots[" .. i .. "] must be a path, a file:// URI or { uri =, name = }"
    end
  end
  return obj({ roots = json.array(out) })
end

-- Answer a server's request with its hook, in a task of its own (a hook may
-- wait: an LLM call, a person); no hook: -32601.
function Client:_server_request(id, method, params)
  local hname = HOOKS[method]
  local hook = hname and self.hooks[hname]
  if hook == nil then
    self:_send_oneway({ jsonrpc = "2.0", id = id, error = { code = -32601,
      message = "Method not found: " .. tostring(method) .. " (the specula client has no hook for it)" } })
    return
  end
  local hs = self.st.hooks
  hs[HOOK_STAT[method]] = hs[HOOK_STAT[method]] + 1
  spawn_root(function()
    local result, why, code = nil, nil, -32603
    if method == "roots/list" and type(hook) == "table" then
      result, why = roots_result(hook)
    else
      -- the hook is the user's code: whatever it raises (or a bare yield),
      -- the server gets an error reply naming the script and line
      local ok, r, e2 = sched.protect(false, hook, params, { server = self.name, method = method })
      if not ok then why = "raised: " .. r
      elseif r == nil or r == false then
        -- a refusal (the user said no, the model failed): the hook's reason
        why, code = e2 ~= nil and sched.errstr(e2) or "declined", -1
      elseif method == "sampling/createMessage" then result, why = sampling_result(r)
      elseif method == "elicitation/create" then result, why = elicitation_result(r, params)
      else result, why = roots_result(r) end
    end
    local msg = result ~= nil and { jsonrpc = "2.0", id = id, result = result } or nil
    if msg and not encode(msg) then
      result, why, msg = nil, "its result cannot be written as JSON", nil
    end
    if not msg then
      why = scrub(format("%s: %s hook for %s: %s", self:_where(), hname, method, tostring(why)))
      hs.errors = hs.errors + 1
      self:_warn(why)
      msg = { jsonrpc = "2.0", id = id, error = { code = code, message = why } }
    end
    self:_send_oneway(msg)
  end)
end

-- Fail every pending request (the server went away).
function Client:_fail_all(msg)
  for id, e in pairs(self.pending) do
    self.pending[id] = nil
    if e.token ~= nil then self.by_token[e.token] = nil end
    if C.sp_rpc_state(e.rpc) == PENDING then
      e.err = self:_where() .. ": " .. e.what .. ": " .. msg
      C.sp_rpc_complete(e.rpc)
    end
  end
end

-- Forget requests whose task was cancelled or timed out; a late answer to
-- one of them is dropped quietly (given_up, bounded).
function Client:_sweep()
  for id, e in pairs(self.pending) do
    if C.sp_rpc_state(e.rpc) ~= PENDING and not e.live then
      self.pending[id] = nil
      if e.token ~= nil then self.by_token[e.token] = nil end
      self.given_up[id] = true
      self.n_given_up = self.n_given_up + 1
    end
  end
  if self.n_given_up > 4096 then self.given_up, self.n_given_up = {}, 0 end
end

-- ---- the transport's peer -------------------------------------------------------------

-- What a transport reports to (specula.mcp.transport: open(peer)).
function Client:_peer()
  local c = self
  return {
    st = c.st,
    receive = function(_, msg, via) return c:_handle(msg, via) end,
    malformed = function(_, why)
      c.st.malformed = c.st.malformed + 1
      c:_warn(why)
    end,
    warn = function(_, why) c:_warn(why) end,
    -- the request id failed in the transport (an oversized answer)
    fail = function(_, id, why)
      local e = c.pending[id]
      if e and C.sp_rpc_state(e.rpc) == PENDING then
        c.pending[id] = nil
        e.err = c:_where() .. ": " .. e.what .. ": " .. why
        C.sp_rpc_complete(e.rpc)
      end
    end,
    -- the connection ended (a stdio server exited)
    lost = function(_, why)
      c.last_exit = why
      c.state = c.closed and "closed" or "dead"
      c:_fail_all(why)
    end,
  }
end

-- ---- requests --------------------------------------------------------------------------

function Client:_cancel_line(id)
  return assert(encode({ jsonrpc = "2.0", method = "notifications/cancelled",
                         params = { requestId = id, reason = "cancelled by specula (task cancelled or timed out)" } }))
end

-- Send a request and wait for its response: result | nil, err. The
-- transport takes the whole round trip (a recording watches it, a replay
-- answers it); _rpc_live makes it.
function Client:_rpc(method, params, opts)
  return self.t:roundtrip({ method = method, params = params, what = opts and opts.what or method },
    function() return self:_rpc_live(method, params, opts) end)
end

function Client:_rpc_live(method, params, opts)
  local me = sched.current("specula.mcp: " .. method)
  opts = opts or {}
  if C.sp_clock_virtual(core.ctx) ~= 0 then
    -- a server answers in real time; the virtual clock cannot wait for it
    return nil, self:_where() .. ": real I/O under the virtual clock: MCP " .. tostring(opts.what or method)
      .. " (run with --clock real, or serve it from a recording)"
  end
  self:_sweep()
  local t = self.t
  local id = self.next_id
  self.next_id = id + 1
  local what = opts.what or method
  local timeout_ms = opts.timeout_ms or self.timeout_ms
  local e = { what = what, on_progress = opts.on_progress }
  if params == nil then params = obj() end
  if opts.on_progress then
    params._meta = obj({ progressToken = id })
    e.token = id
    self.by_token[id] = e
  end
  e.msg = { jsonrpc = "2.0", id = id, method = method, params = params }
  e.text = assert(encode(e.msg))
  -- a transport that reads the answer itself (HTTP) times it there
  local rpc = C.sp_rpc_new(core.ctx, me, t.answers_inline and 0 or timeout_ms)
  if rpc == nil then return nil, self:_where() .. ": out of memory" end
  e.rpc = ffi.gc(rpc, C.sp_rpc_free)
  e.id, e.timeout_ms = id, timeout_ms
  e.cancel = self:_cancel_line(id)
  self.st.requests = self.st.requests + 1
  self.pending[id] = e
  e.live = true
  local ok, err = t:request(e)
  e.live = nil
  if not t.answers_inline then
    if not ok then
      self.pending[id] = nil
      return nil, err
    end
    while C.sp_rpc_wait(e.rpc, me) == 0 do co_yield() end
  elseif not ok and C.sp_rpc_state(e.rpc) == PENDING then
    self.pending[id] = nil
    if err and err:find("ETIMEDOUT", 1, true) then
      C.sp_rpc_cancel(e.rpc)   -- tell the server: notifications/cancelled
      self.st.timeouts = self.st.timeouts + 1
      return nil, format("%s: %s: no response within %d ms", self:_where(), what, timeout_ms or 0)
    end
    C.sp_rpc_complete(e.rpc)
    return nil, err
  end
  local state = C.sp_rpc_state(e.rpc)
  if state == TIMEDOUT then
    self.pending[id] = nil
    self.given_up[id] = true
    self.n_given_up = self.n_given_up + 1
    self.st.timeouts = self.st.timeouts + 1
    return nil, format("%s: %s: no response within %d ms", self:_where(), what, timeout_ms or 0)
  end
  if state ~= RPC_DONE then return nil, self:_where() .. ": " .. what .. ": cancelled" end
  if e.err then return nil, e.err end
  return e.result
end

-- What the client offers the server: one capability per hook.
function Client:_capabilities()
  local caps = obj()
  if self.hooks.on_sampling then caps.sampling = obj() end
  if self.hooks.on_elicitation then caps.elicitation = obj({ form = obj() }) end
  if self.hooks.on_roots then caps.roots = obj({ listChanged = true }) end
  return caps
end

function Client:_initialize()
  local r, err = self:_rpc("initialize", {
    protocolVersion = self.want_version,
    capabilities = self:_capabilities(),
    clientInfo = M.CLIENT_INFO,
  }, { timeout_ms = self.init_timeout_ms })
  if not r then return nil, err end
  if type(r) ~= "table" or type(r.protocolVersion) ~= "string" then
    return nil, self:_where() .. ": initialize: the response has no protocolVersion"
  end
  if not SUPPORTED[r.protocolVersion] then
    return nil, format("%s: initialize: unsupported protocol version %s (specula speaks %s)",
      self:_where(), r.protocolVersion, concat(M.PROTOCOL_VERSIONS, ", "))
  end
  self.protocol_version = r.protocolVersion
  self.server_info = r.serverInfo
  if self.offline then   -- replayed: no server to notify
    self.capabilities = r.capabilities or {}
    self.state = "ready"
    return true
  end
  self.capabilities = r.capabilities or {}
  self.instructions = r.instructions
  self.t:set_version(r.protocolVersion)
  local ok, serr = self.t:send({ jsonrpc = "2.0", method = "notifications/initialized" })
  if not ok then return nil, self:_where() .. ": notifications/initialized: " .. tostring(serr) end
  self.state = "ready"
  self.t:ready()
  return true
end

-- Make sure the server runs: opens or reopens a transport that can be
-- (stdio: starts or restarts the process), once at a time.
function Client:_ready()
  if self.closed then return nil, self:_where() .. ": the client is closed" end
  if self.state == "ready" then return true end
  if not self.t.restartable then return nil, self:_where() .. ": not connected" end
  if self.state == "dead" then
    if self.t.starts > self.max_restarts then
      return nil, format("%s: gave up after %d restart(s) (max_restarts = %d); last: %s", self:_where(),
        self.t.starts - 1, self.max_restarts, tostring(self.last_exit))
    end
    self.st.restarts = self.st.restarts + 1
  end
  if not self.starter or self.starter:done() then
    self.state = "starting"
    self.starter = spawn_root(function()
      local ok, err = self.t:open(self.peer)
      if ok then ok, err = self:_initialize() end
      if not ok then
        if self.state ~= "closed" then self.state = "dead" end
        self.last_exit = err
        self.t:abort()
        return nil, err
      end
      return true
    end)
    if not self.starter then return nil, self:_where() .. ": the engine is shutting down" end
  end
  local okw, ok, err = self.starter:wait()
  if not okw then return nil, self:_where() .. ": start failed: " .. tostring(ok) end
  if not ok then return nil, err end
  if self.state ~= "ready" then return nil, self:_where() .. ": not running: " .. tostring(self.last_exit) end
  return true
end

-- A request by method name: result table | nil, err.
function Client:request(method, params, opts)
  if type(method) ~= "string" then error("mcp client:request: method must be a string", 2) end
  local ok, err = self:_ready()
  if not ok then return nil, err end
  return self:_rpc(method, params, opts)
end

function Client:ping(opts)
  local r, err = self:request("ping", nil, opts)
  if r == nil then return nil, err end
  return true
end

-- Every page of a list method: the items of `field` | nil, err.
function Client:_list_all(method, field, opts)
  local out, cursor, pages = {}, nil, 0
  repeat
    local r, err = self:request(method, cursor and { cursor = cursor } or nil, opts)
    if not r then return nil, err end
    if type(r) ~= "table" or type(r[field]) ~= "table" then
      return nil, self:_where() .. ": " .. method .. ": the result has no " .. field .. " list"
    end
    for _, t in ipairs(r[field]) do out[#out + 1] = t end
    cursor = r.nextCursor
    if cursor == JNULL then cursor = nil end
    pages = pages + 1
    if pages > 1000 then return nil, self:_where() .. ": " .. method .. ": more than 1000 pages" end
  until cursor == nil
  return out
end

-- The server's tools as it describes them, following pagination.
function Client:list_tools(opts)
  local out, err = self:_list_all("tools/list", "tools", opts)
  if not out then return nil, err end
  self.tools_cache = out
  return out
end

-- The server's resources ({ uri, name, title, description, mimeType, size,
-- annotations }) and resource templates ({ uriTemplate, name, ... }), every page.
function Client:list_resources(opts)
  return self:_list_all("resources/list", "resources", opts)
end

function Client:list_resource_templates(opts)
  return self:_list_all("resources/templates/list", "resourceTemplates", opts)
end

-- resources/read: { contents = { { uri, mimeType, text | blob }, ... } } | nil, err.
function Client:read_resource(uri, opts)
  if type(uri) ~= "string" or uri == "" then error("mcp client:read_resource: uri must be a non-empty string", 2) end
  if opts ~= nil and type(opts) ~= "table" then error("mcp client:read_resource: options must be a table", 2) end
  opts = opts or {}
  self.st.reads = self.st.reads + 1
  local r, err = self:request("resources/read", { uri = uri },
    { timeout_ms = opts.timeout_ms, what = "resources/read '" .. excerpt(uri, 120) .. "'" })
  if not r then return nil, err end
  if type(r) ~= "table" or type(r.contents) ~= "table" then
    return nil, self:_where() .. ": resources/read '" .. excerpt(uri, 120) .. "': the result has no contents"
  end
  return r
end

-- Tell the server the roots changed (it asks roots/list again).
function Client:roots_changed()
  if not self.hooks.on_roots then error("mcp client:roots_changed: the client has no on_roots hook", 2) end
  return self.t:send({ jsonrpc = "2.0", method = "notifications/roots/list_changed" })
end

-- The authorization state without any credential (nil without auth):
-- grant, resource, authorization_server, client_id and how it was had,
-- token_endpoint_auth_method, scope, expires_in_s, counts of
-- authorizations, refreshes, registrations, step_ups.
function Client:auth_info()
  return self.auth and self.auth:info() or nil
end

-- tools/call: { content, structuredContent, isError } | nil, err.
function Client:call(name, args, opts)
  if type(name) ~= "string" or name == "" then error("mcp client:call: tool name must be a non-empty string", 2) end
  if args ~= nil and type(args) ~= "table" then error("mcp client:call: arguments must be a table", 2) end
  if opts ~= nil and type(opts) ~= "table" then error("mcp client:call: options must be a table", 2) end
  opts = opts or {}
  self.st.calls[name] = (self.st.calls[name] or 0) + 1
  local cargs = args
  if cargs == nil or next(cargs) == nil then cargs = obj() end
  local r, err = self:request("tools/call", { name = name, arguments = cargs },
    { timeout_ms = opts.timeout_ms, on_progress = opts.on_progress, what = "tools/call '" .. name .. "'" })
  if not r then return nil, err end
  if type(r) ~= "table" then return nil, self:_where() .. ": tools/call '" .. name .. "': the result is not an object" end
  return { content = type(r.content) == "table" and r.content or {}, structuredContent = r.structuredContent,
           isError = r.isError == true }
end

-- Counters: requests, restarts, exits, malformed, unknown_ids, oversized,
-- late_dropped, timeouts, server_requests, progress, reconnects, calls[tool].
function Client:stats()
  local s = {}
  for k, v in pairs(self.st) do s[k] = v end
  local c = {}
  for k, v in pairs(self.st.calls) do c[k] = v end
  s.calls = c
  s.hooks = {}
  for k, v in pairs(self.st.hooks) do s.hooks[k] = v end
  s.errors = { unpack(self.errors) }
  return s
end
function Client:close()
  if self.closed then return end
  self.closed = true
  self.state = "closed"
  self:_fail_all("the client was closed")
  self.t:close()
end

-- A client over transport t (opened by the caller: specula.mcp.connect).
-- o: connect's options; name: the server's name.
function M.new(t, o, name)
  local self = setmetatable({
    name = tostring(name), t = t, transport = t.kind, offline = t.offline,
    timeout_ms = o.timeout_ms or 60000, init_timeout_ms = o.init_timeout_ms or 30000,
    max_restarts = o.max_restarts or 3,
    want_version = o.protocol_version or M.PROTOCOL_VERSIONS[1],
    quiet = o.quiet,
    state = "new", next_id = 1,
    pending = {}, by_token = {}, given_up = {}, n_given_up = 0, errors = {},
    hooks = { on_sampling = o.on_sampling, on_elicitation = o.on_elicitation, on_roots = o.on_roots },
    st = { requests = 0, restarts = 0, exits = 0, malformed = 0, unknown_ids = 0, oversized = 0,
           late_dropped = 0, timeouts = 0, server_requests = 0, progress = 0, reconnects = 0, calls = {},
           reads = 0, resources_changed = 0, listens = 0,
           hooks = { sampling = 0, elicitation = 0, roots = 0, errors = 0 } },
  }, Client)
  self.peer = self:_peer()
  return self
end

-- A client over transport t, connected and initialized: client | nil,
-- err. An offline transport (a replay) is not opened; a restartable one
-- (stdio) is opened by _ready, which may open it again later.
function M.open(t, o, name)
  local c = M.new(t, o, name)
  local ok, err
  if t.offline then
    ok, err = c:_initialize()
  elseif t.restartable then
    ok, err = c:_ready()
    if not ok then t:abort() end
  else
    ok, err = t:open(c.peer)
    if ok then ok, err = c:_initialize() end
  end
  if not ok then
    c.closed = true
    return nil, err
  end
  return c
end

M.Client = Client
return M
