-- specula.gateway.session: one client of the gateway, over any server-side
-- transport (specula.mcp.transport: its peer:receive gets the client's
-- messages, t:send answers). The client sees one MCP server: the union of
-- the configured servers (specula.gateway.upstreams), each reached through
-- specula's own client with its version negotiated on its own.
--
-- Relayed both ways: requests and their results (a result's text as the
-- server wrote it when the transport kept it: rawjson), errors (the
-- server's own error object), progress (the client's token put back),
-- logging and list_changed notifications, cancellation (the client's
-- notifications/cancelled cancels the upstream call), and the servers'
-- requests to the client (sampling, elicitation, roots) when the client
-- declared the capability. A server that crashes fails the client's calls
-- then pending; the next call starts it again. The end of the client
-- (stdin closed) cancels every call in flight and stops the servers. A
-- client at the stateless 2026-07-28 sends no initialize: server/discover
-- and requests that carry their version in _meta; the servers' requests
-- reach it as InputRequiredResult rounds (below: "2026-07-28").
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"
local json = require "specula.json"
local output = require "specula.internal.output"
local transport = require "specula.mcp.transport"
local client = require "specula.mcp.client"
local rawjson = require "specula.mcp.rawjson"
local upstreams = require "specula.gateway.upstreams"
local speculate = require "specula.gateway.speculate"
local ffi, C = core.ffi, core.C

local type, pairs, ipairs, tostring, pcall, setmetatable, getmetatable =
  type, pairs, ipairs, tostring, pcall, setmetatable, getmetatable
local format = string.format
local co_yield = sched.yield
local encode, JNULL = json.encode, json.null
local spawn_root = transport.spawn_root

local M = {}

local PENDING = tonumber(C.SP_RPC_PENDING)
-- what the client may ask for: the versions of a session (initialize)
M.VERSIONS = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05" }
local VERSION_OK = {}
for _, v in ipairs(M.VERSIONS) do VERSION_OK[v] = true end
-- the stateless version (no initialize: server/discover, then every
-- request says its version, capabilities and client in _meta)
M.STATELESS = "2026-07-28"
-- what server/discover names: every version the gateway speaks
M.SUPPORTED = { M.STATELESS, unpack(M.VERSIONS) }
local META_VERSION = "io.modelcontextprotocol/protocolVersion"
local META_CAPS = "io.modelcontextprotocol/clientCapabilities"
local META_INFO = "io.modelcontextprotocol/clientInfo"
-- the ids of the gateway's own stand-ins for a stateless client's requests
local OP_PREFIX = "specula-gw-op-"

local function obj(t) return setmetatable(t or {}, json.object_mt) end
local function arr(t) return setmetatable(t or {}, json.array_mt) end

local Session = {}
Session.__index = Session

-- ---- writing to the client ------------------------------------------------------------

-- A message to the client, scrubbed of every declared secret (a server's
-- env is one: specula.mcp.stdio) and still valid JSON (the output layer's
-- "json" kind); nothing changes when there is none. A transport with
-- send_text gets the text; any other gets the table for t:send (its
-- fields route it: an HTTP response goes on its request's stream), whose
-- result may be a json.raw value (specula.json writes it as it is).
function Session:_send(msg)
  -- an answer: its request is answered, though its task may run on (the
  -- prediction round after a call); the session's end counts it so
  if msg.method == nil and msg.id ~= nil then
    local e = self.running[msg.id]
    if e then e.answered = true end
  end
  -- the answer to a stateless request's stand-in: kept for the request
  -- (or its retry) that waits for it (_op_wait)
  local op = msg.method == nil and msg.id ~= nil and self.ops[msg.id]
  if op then
    op.reply, op.reply_at = msg, sched.now()
    self:_wake(op)
    return true
  end
  local t = self.t
  -- an answer to an integer id past 2^53 carries the id's own text (the
  -- decoded double is another number; _receive kept the text)
  local big = t.send_text and msg.method == nil and type(msg.id) == "number" and self.big_ids[msg.id]
  if big then
    local copy = {}
    for k, v in pairs(msg) do copy[k] = v end
    copy.id = json.raw(big)
    msg = copy
  end
  local text, err = encode(msg)
  if not text then return nil, err end
  local clean = output.clean(text, "json")
  local send
  if t.send_text then
    send = function() return t:send_text(clean) end
  else
    if clean ~= text then
      -- a secret was in it: the scrubbed message, its result's text kept
      msg = json.decode(clean)
      local body = rawjson.member(clean, "result")
      if body then msg.result = json.raw(body) end
    end
    send = function() return t:send(msg) end
  end
  if t.send_waits then
    spawn_root(send)
    return true
  end
  return send()
end

-- A result: the server's own text when the client kept it, else encoded.
function Session:_result(id, r, raw)
  local body = raw and rawjson.member(raw, "result")
  if body then return self:_send({ jsonrpc = "2.0", id = id, result = json.raw(body) }) end
  return self:_send({ jsonrpc = "2.0", id = id, result = r == nil and obj() or r })
end

function Session:_error(id, code, message, data)
  local e = obj({ code = code, message = message })
  if data ~= nil then e.data = data end
  return self:_send({ jsonrpc = "2.0", id = id, error = e })
end

-- An upstream failure as the client sees it: the server's error object when
-- it sent one, else an internal error naming the server.
function Session:_upstream_error(id, c, err)
  local er = c and c.error_of[err]
  if type(er) == "table" and er.code ~= nil then
    return self:_send({ jsonrpc = "2.0", id = id, error = er })
  end
  return self:_error(id, -32603, tostring(err))
end

-- ---- the client's requests ---------------------------------------------------------------

function Session:_initialize(id, params)
  params = type(params) == "table" and params or {}
  local want = params.protocolVersion
  self.version = VERSION_OK[want] and want or M.VERSIONS[1]
  self.client_caps = type(params.capabilities) == "table" and params.capabilities or {}
  self.client_info = params.clientInfo
  self:_start_upstreams()
  local r = obj({ protocolVersion = self.version, capabilities = self:_capabilities(),
                  serverInfo = obj({ name = "specula-gateway", version = client.CLIENT_INFO.version }) })
  local instr = self:_instructions()
  if instr then r.instructions = instr end
  self.initialized = true
  self.rec:ready()
  return self:_send({ jsonrpc = "2.0", id = id, result = r })
end

-- What the union offers: a capability when any server has it.
function Session:_capabilities()
  local caps = obj()
  local any = { tools = false, resources = false, prompts = false, logging = false, completions = false }
  for _, e in ipairs(self.up:each()) do
    for k in pairs(any) do
      if (e.client.capabilities or {})[k] ~= nil then any[k] = true end
    end
  end
  if any.tools then caps.tools = obj({ listChanged = true }) end
  if any.resources then caps.resources = obj({ listChanged = true, subscribe = true }) end
  if any.prompts then caps.prompts = obj({ listChanged = true }) end
  if any.logging then caps.logging = obj() end
  if any.completions then caps.completions = obj() end
  return caps
end

-- The servers' instructions, each under its name, or nil.
function Session:_instructions()
  local instr = {}
  for _, e in ipairs(self.up:each()) do
    if type(e.client.instructions) == "string" and e.client.instructions ~= "" then
      instr[#instr + 1] = e.name .. ": " .. e.client.instructions
    end
  end
  return #instr > 0 and table.concat(instr, "\n\n") or nil
end

-- A list, all pages in one.
function Session:_list(id, field, items)
  return self:_send({ jsonrpc = "2.0", id = id, result = obj({ [field] = arr(items) }) })
end

local CLIENT_META = { [META_VERSION] = true, [META_CAPS] = true, [META_INFO] = true }

-- params for a server: the client's, with the names the server knows and
-- without the client's progress token (the server gets ours).
local function upstream_params(params, name_key, name)
  local p = obj()
  for k, v in pairs(type(params) == "table" and params or {}) do p[k] = v end
  if name_key then p[name_key] = name end
  if type(p._meta) == "table" then
    local m = obj()
    -- the client's version, capabilities and info (2026-07-28) are of the
    -- client's side: each server has its own
    for k, v in pairs(p._meta) do
      if k ~= "progressToken" and not CLIENT_META[k] then m[k] = v end
    end
    p._meta = next(m) ~= nil and m or nil
  end
  return p
end

-- The relay of the server's progress to the client's token, if it gave one.
function Session:_progress_fn(params)
  local meta = type(params) == "table" and type(params._meta) == "table" and params._meta or nil
  local token = meta and meta.progressToken
  if token == nil or token == JNULL then return nil end
  return function(p)
    local q = obj()
    for k, v in pairs(p) do q[k] = v end
    q.progressToken = token
    self:_send({ jsonrpc = "2.0", method = "notifications/progress", params = q })
  end
end

-- One request to one server for the client: result, err, client, ms.
-- (prefetch: a call the client has not made; the others count in
-- self.busy[server], the client's requests in flight at each server)
function Session:_forward(server, method, params, on_progress, what, prefetch, since)
  local c = self.up:client(server)
  if not c then return nil, "mcp server '" .. tostring(server) .. "' is not running: " .. tostring(self.up.errors[server]) end
  -- a prefetch never starts or restarts a server: a restart would spend
  -- the client's max_restarts on a call it never made (and a dead server's
  -- next start is for the client's own call)
  if prefetch and not c:is_ready() then
    return nil, "mcp server '" .. tostring(server) .. "' is not up: a prefetch does not start it"
  end
  local t0 = sched.now()
  -- since: when the client asked, for a call that waited on a prefetch
  -- first: it gets what is left of the server's timeout, not all of it
  -- again (a joined prefetch that timed out made the client wait twice)
  local timeout_ms
  if since and c.timeout_ms then timeout_ms = math.max(1, c.timeout_ms - (t0 - since)) end
  local busy = self.busy
  if not prefetch then busy[server] = (busy[server] or 0) + 1 end
  -- (a prefetch names its tool: a death it alone was running for is not
  -- counted against the client's restarts; specula.mcp.client)
  local r, err = c:request(method, params, { on_progress = on_progress, what = what, timeout_ms = timeout_ms,
    prefetch = prefetch and (type(params) == "table" and params.name or method) or nil })
  if not prefetch then busy[server] = busy[server] - 1 end
  local ms = sched.now() - t0
  local us = self.rec:server(server)
  us.requests, us.ms = us.requests + 1, us.ms + ms
  if r == nil then us.errors = us.errors + 1 end
  return r, err, c, ms
end

-- A name no server lists goes as it is to the first server that has the
-- capability: the answer (an error, as a rule) is that server's own, and in
-- front of one server exactly what it would say.
function Session:_fallback(cap, name)
  for _, e in ipairs(self.up:each()) do
    if (e.client.capabilities or {})[cap] ~= nil then return { server = e.name, name = name } end
  end
  return nil
end

-- The server and upstream name behind an exposed tool name, or nil.
function Session:_tool_route(name)
  local _, routes = self.up:tools()
  return routes[name] or self:_fallback("tools", name)
end

-- Whether the server behind an exposed tool name is up (speculation asks
-- before it launches: a prefetch never starts a server).
function Session:_server_up(name)
  local route = self:_tool_route(name)
  local c = route and self.up:client(route.server)
  return c ~= nil and c:is_ready()
end

-- Whether a prefetch of this tool once killed its server (it was all that
-- ran there when the server died; specula.mcp.client): never again on it
-- (this session's own server: each session starts its own).
function Session:_killed_server(name)
  local route = self:_tool_route(name)
  local c = route and self.up:client(route.server)
  return c ~= nil and c.prefetch_killers ~= nil and c.prefetch_killers[route.name] == true
end

-- tools/call for an exposed name (speculation's calls come here too).
function Session:_call_tool(name, args, on_progress, meta, prefetch, since)
  local route = self:_tool_route(name)
  if not route then return nil, "unknown tool '" .. tostring(name) .. "'", nil, -32602 end
  local p = upstream_params({ _meta = meta }, "name", route.name)
  p.arguments = (args == nil or args == JNULL) and obj() or args
  local r, err, c, ms = self:_forward(route.server, "tools/call", p, on_progress, "tools/call '" .. route.name .. "'",
    prefetch, since)
  return r, err, { client = c, ms = ms, raw = r and c and c.raw_of[r] }
end

function Session:_tools_call(id, params)
  params = type(params) == "table" and params or {}
  local name, args = params.name, params.arguments
  if type(name) ~= "string" then return self:_error(id, -32602, "tools/call: params.name must be a string") end
  local ts = self.rec:tool(name)
  local t0 = sched.now()
  local relay = self:_progress_fn(params)
  local r, err, info, hidden, joined = self.spec:take(name, args, relay)
  local served = r ~= nil
  if not served then
    local code
    r, err, info, code = self:_call_tool(name, args, relay, params._meta, nil, joined and t0 or nil)
    if code then return self:_error(id, code, err) end
  end
  -- counted once answered (a call cancelled by the client, or by the
  -- session's end, is no call of 0 ms: cancelled_by_client counts those)
  local ms = sched.now() - t0
  ts.calls, ts.ms = ts.calls + 1, ts.ms + ms
  local rtext
  if self.rec.spans then
    rtext = r ~= nil and ((info and info.raw and rawjson.member(info.raw, "result")) or encode(r)) or tostring(err)
  end
  self.rec:call(name, args, t0, ms, served, hidden, rtext)
  if r == nil then
    ts.errors = ts.errors + 1
    return self:_upstream_error(id, info and info.client, err)
  end
  self:_result(id, r, info and info.raw)
  self.spec:after(name, args, r)
end

-- resources/read and subscriptions: the lister of the URI, then the others.
function Session:_by_uri(id, method, params)
  local uri = type(params) == "table" and params.uri
  if type(uri) ~= "string" then return self:_error(id, -32602, method .. ": params.uri must be a string") end
  local last_err, last_c = "no server offers resources", nil
  for _, server in ipairs(self.up:resource_servers(uri)) do
    local r, err, c = self:_forward(server, method, upstream_params(params), self:_progress_fn(params), method)
    if r ~= nil then return self:_result(id, r, c.raw_of[r]) end
    last_err, last_c = err, c
  end
  return self:_upstream_error(id, last_c, last_err)
end

function Session:_by_name(id, method, params, routes)
  local name = type(params) == "table" and params.name
  local route = type(name) == "string" and (routes[name] or self:_fallback("prompts", name))
  if not route then return self:_error(id, -32602, method .. ": unknown name '" .. tostring(name) .. "'") end
  local r, err, c = self:_forward(route.server, method, upstream_params(params, "name", route.name),
    self:_progress_fn(params), method)
  if r == nil then return self:_upstream_error(id, c, err) end
  return self:_result(id, r, c.raw_of[r])
end

-- completion/complete: by the prompt or the resource it completes for.
function Session:_complete(id, params)
  local ref = type(params) == "table" and type(params.ref) == "table" and params.ref or {}
  if ref.type == "ref/prompt" then
    local _, routes = self.up:prompts()
    local route = routes[ref.name]
    if not route then return self:_error(id, -32602, "completion/complete: unknown prompt '" .. tostring(ref.name) .. "'") end
    local p = upstream_params(params)
    p.ref = obj({ type = "ref/prompt", name = route.name })
    local r, err, c = self:_forward(route.server, "completion/complete", p, nil, "completion/complete")
    if r == nil then return self:_upstream_error(id, c, err) end
    return self:_result(id, r, c.raw_of[r])
  end
  return self:_by_uri_ref(id, params, ref)
end

function Session:_by_uri_ref(id, params, ref)
  local uri = ref.uri
  if type(uri) ~= "string" then return self:_error(id, -32602, "completion/complete: ref needs a prompt name or a uri") end
  local last_err, last_c = "no server offers resources", nil
  for _, server in ipairs(self.up:resource_servers(uri)) do
    local r, err, c = self:_forward(server, "completion/complete", upstream_params(params), nil, "completion/complete")
    if r ~= nil then return self:_result(id, r, c.raw_of[r]) end
    last_err, last_c = err, c
  end
  return self:_upstream_error(id, last_c, last_err)
end

-- logging/setLevel: every server that logs.
function Session:_set_level(id, params)
  for _, e in ipairs(self.up:each()) do
    if (e.client.capabilities or {}).logging ~= nil then
      self:_forward(e.name, "logging/setLevel", upstream_params(params), nil, "logging/setLevel")
    end
  end
  return self:_send({ jsonrpc = "2.0", id = id, result = obj() })
end

local ROUTES = {
  ["tools/list"] = function(s, id) return s:_list(id, "tools", (s.up:tools())) end,
  ["prompts/list"] = function(s, id) return s:_list(id, "prompts", (s.up:prompts())) end,
  ["resources/list"] = function(s, id) return s:_list(id, "resources", (s.up:resources())) end,
  ["resources/templates/list"] = function(s, id) return s:_list(id, "resourceTemplates", s.up:templates()) end,
  ["tools/call"] = function(s, id, p) return s:_tools_call(id, p) end,
  ["resources/read"] = function(s, id, p) return s:_by_uri(id, "resources/read", p) end,
  ["resources/subscribe"] = function(s, id, p) return s:_by_uri(id, "resources/subscribe", p) end,
  ["resources/unsubscribe"] = function(s, id, p) return s:_by_uri(id, "resources/unsubscribe", p) end,
  ["prompts/get"] = function(s, id, p)
    local _, routes = s.up:prompts()
    return s:_by_name(id, "prompts/get", p, routes)
  end,
  ["completion/complete"] = function(s, id, p) return s:_complete(id, p) end,
  ["logging/setLevel"] = function(s, id, p) return s:_set_level(id, p) end,
  ["ping"] = function(s, id) return s:_send({ jsonrpc = "2.0", id = id, result = obj() }) end,
}

local unsupported

-- One request of the client, in a root task of its own (the reader goes on).
function Session:_request(id, method, params)
  local meta = type(params) == "table" and type(params._meta) == "table" and params._meta or nil
  local sv = meta and meta[META_VERSION]
  if method == "server/discover" then return self:_discover(id, sv) end
  if method == "initialize" then
    if self.stateless then
      return self:_error(id, -32600, "this session is stateless (" .. M.STATELESS .. "): no initialize")
    end
    if not self.init_task or self.init_task.ptr ~= sched.current("gateway: initialize") then
      return self:_error(id, -32600, "initialize was sent already")
    end
    return self:_initialize(id, params)
  end
  if self.stateless then
    if sv == nil then
      return self:_error(id, -32600, "a " .. M.STATELESS .. " request names its version in _meta ("
        .. META_VERSION .. ")")
    end
    return self:_stateless(id, method, params, sv)
  end
  -- a version before initialize that is not one the gateway speaks
  if sv ~= nil and not self.init_task and sv ~= M.STATELESS then return unsupported(self, id, sv) end
  -- a request sent before initialize was answered waits for it
  if self.init_task and not self.initialized and method ~= "ping" then self.init_task:wait() end
  if not self.initialized and method ~= "ping" then
    return self:_error(id, -32600, "the session is not initialized (send initialize first)")
  end
  return self:_dispatch(id, method, params)
end

-- A request of a ready session, by its method.
function Session:_dispatch(id, method, params)
  local fn = ROUTES[method]
  if not fn then return self:_error(id, -32601, "Method not found: " .. tostring(method)) end
  -- tools are listed once before the first call (routes, the gate's tools)
  if method == "tools/call" or method == "tools/list" then self:_tools_known() end
  return fn(self, id, params)
end

-- ---- 2026-07-28: stateless requests ---------------------------------------------------------
--
-- No handshake: the first request that names 2026-07-28 in its _meta (as
-- a rule server/discover) makes the session stateless and starts the
-- servers, each offering what that request's clientCapabilities offer;
-- the session (its servers, predictor, counters) serves every later one.
-- A request runs as a stand-in with an id of the gateway's own (an op) so
-- that a server's request to the client (sampling, elicitation, roots)
-- can come back as an InputRequiredResult: the client's request is
-- answered with inputRequests and a requestState naming the op, the op
-- goes on running, and the client's retry (a new id, with inputResponses
-- and that requestState) hands the answers to the server's waiting
-- requests and waits for the op's real answer, or the next inputRequests.

unsupported = function(self, id, sv)
  return self:_send({ jsonrpc = "2.0", id = id, error = obj({ code = -32022, message = "Unsupported protocol version",
    data = obj({ supported = arr({ unpack(M.SUPPORTED) }), requested = tostring(sv) }) }) })
end

-- The first request that names 2026-07-28 (before any initialize) makes
-- the session stateless, as it is read (the mode follows the order of the
-- client's messages, not of their tasks); the servers start in a task.
function Session:_mark_stateless(meta)
  self.stateless = true
  self.version = M.STATELESS
  local caps = meta[META_CAPS]
  self.client_caps = type(caps) == "table" and caps or {}
  local info = meta[META_INFO]
  self.client_info = type(info) == "table" and info or nil
  self.start_task = spawn_root(function()
    self:_start_upstreams()
    self.stateless_ready = true
    self.rec:ready()
  end)
end

-- The servers of a stateless session have started (the first request's
-- task may still be starting them: wait).
function Session:_begin_stateless()
  if not self.stateless_ready and self.start_task then self.start_task:wait() end
  return self.stateless_ready
end

-- server/discover: the versions, the union's capabilities, the gateway. A
-- version other than 2026-07-28 before initialize gets -32022 naming the
-- versions (the client asks again in one of them, or initializes).
function Session:_discover(id, sv)
  if self.init_task and not self.initialized then self.init_task:wait() end
  if not self.initialized then
    if not self.stateless or sv ~= M.STATELESS then return unsupported(self, id, sv) end
    if not self:_begin_stateless() then
      return self:_error(id, -32603, "specula gateway: the servers could not be started")
    end
  end
  local r = obj({ resultType = "complete", supportedVersions = arr({ unpack(M.SUPPORTED) }),
                  capabilities = self:_capabilities(),
                  serverInfo = obj({ name = "specula-gateway", version = client.CLIENT_INFO.version }) })
  local instr = self:_instructions()
  if instr then r.instructions = instr end
  return self:_send({ jsonrpc = "2.0", id = id, result = r })
end

-- Wake the request waiting on an op (its answer or an input request came).
function Session:_wake(op)
  local w = op.waiter
  if w ~= nil and C.sp_rpc_state(w) == PENDING then C.sp_rpc_complete(w) end
end

function Session:_stateless(id, method, params, sv)
  if sv ~= M.STATELESS then return unsupported(self, id, sv) end
  if not self:_begin_stateless() then
    return self:_error(id, -32603, "specula gateway: the servers could not be started")
  end
  if method == "ping" then return self:_send({ jsonrpc = "2.0", id = id, result = obj() }) end
  if not ROUTES[method] then return self:_error(id, -32601, "Method not found: " .. tostring(method)) end
  local entry = self.running[id]
  local state = params.requestState
  -- input responses answer the gateway's own input requests: they come
  -- with its requestState, as an object of objects
  local answers = params.inputResponses
  if answers ~= nil then
    if answers == JNULL or type(answers) ~= "table" or getmetatable(answers) == json.array_mt or answers[1] ~= nil then
      return self:_error(id, -32602, "inputResponses must be an object")
    end
    for k, a in pairs(answers) do
      if type(a) ~= "table" then
        return self:_error(id, -32602, "inputResponses." .. tostring(k) .. " must be an object")
      end
    end
    if state == nil or state == JNULL then
      return self:_error(id, -32602, "inputResponses without a requestState: no input was asked for")
    end
  end
  if state ~= nil and state ~= JNULL then
    -- a retry: the answers go to the server's requests waiting in the op
    local op = type(state) == "string" and self.ops[state]
    if not op then
      return self:_error(id, -32602, "requestState " .. tostring(state) .. " names no request in progress")
    end
    answers = answers or {}
    -- each answer's own text goes to the server unchanged (as a session
    -- client's answer does)
    local texts = entry and entry.raw and rawjson.member(rawjson.member(entry.raw, "params") or "", "inputResponses")
    for key, e in pairs(op.asks) do
      local a = answers[key]
      if a ~= nil and C.sp_rpc_state(e.rpc) == PENDING then
        local text = texts and rawjson.member(texts, key)
        e.result = text and json.raw(text) or a
        C.sp_rpc_complete(e.rpc)
      end
    end
    if entry then entry.op = op end
    return self:_op_wait(op, id)
  end
  -- answers a client never came back for (it went away after input
  -- requests) are kept as long as an input request may wait, no longer
  local now = sched.now()
  for _, o in pairs(self.ops) do
    if o.reply_at and now - o.reply_at > self.ask_timeout_ms then self:_op_done(o) end
  end
  self.n_ops = self.n_ops + 1
  local op = { key = OP_PREFIX .. self.n_ops, n = self.n_ops, asks = {}, new = {} }
  self.ops[op.key] = op
  op.work = spawn_root(function()
    local ok, err = pcall(self._dispatch, self, op.key, method, params)
    if not ok then self:_error(op.key, -32603, "specula gateway: " .. tostring(err)) end
  end)
  if not op.work then
    self.ops[op.key] = nil
    return self:_error(id, -32603, "specula gateway: the engine is shutting down")
  end
  self.op_of_task[tonumber(op.work.id)] = op
  if entry then entry.op = op end
  return self:_op_wait(op, id)
end

-- The op's answer, under the client's id; or its input requests, as an
-- InputRequiredResult (the op goes on; the client's retry waits again).
function Session:_op_wait(op, id)
  local me = sched.current("gateway: stateless request")
  while true do
    if op.reply then
      self:_op_done(op)
      local m = {}
      for k, v in pairs(op.reply) do m[k] = v end
      m.id = id
      return self:_send(m)
    end
    if next(op.new) ~= nil then
      local reqs = obj()
      for k, q in pairs(op.new) do reqs[k] = obj({ method = q.method, params = q.params }) end
      op.new = {}
      return self:_send({ jsonrpc = "2.0", id = id, result = obj({ resultType = "input_required",
        inputRequests = reqs, requestState = op.key }) })
    end
    local rpc = C.sp_rpc_new(core.ctx, me, 0)
    if rpc == nil then return self:_error(id, -32603, "out of memory") end
    op.waiter = ffi.gc(rpc, C.sp_rpc_free)
    while C.sp_rpc_wait(op.waiter, me) == 0 do co_yield() end
    op.waiter = nil
  end
end

-- A stateless request's op still runs (its answer not in yet).
function Session:_op_running()
  for _, op in pairs(self.ops) do
    if not op.reply then return true end
  end
  return false
end

-- The op is over (answered, or cancelled by the client).
function Session:_op_done(op)
  self.ops[op.key] = nil
  if op.work then self.op_of_task[tonumber(op.work.id)] = nil end
  for _, e in pairs(op.asks) do
    if C.sp_rpc_state(e.rpc) == PENDING then C.sp_rpc_cancel(e.rpc) end
  end
end

-- A request out to the client: a fresh id and its pending rpc, which the
-- client's answer (or the ask timeout) ends. id, entry | nil, why.
function Session:_new_ask(me)
  self.next_out = self.next_out + 1
  local rpc = C.sp_rpc_new(core.ctx, me, self.ask_timeout_ms)
  if rpc == nil then return nil, "out of memory" end
  return "specula-gw-" .. self.next_out, { rpc = ffi.gc(rpc, C.sp_rpc_free) }
end

-- Wait in task me for that answer: true once answered, false when the ask
-- timed out or was cancelled.
local function await_ask(e, me)
  while C.sp_rpc_wait(e.rpc, me) == 0 do co_yield() end
  return C.sp_rpc_state(e.rpc) == tonumber(C.SP_RPC_DONE)
end

-- A server's request to a stateless client: an input request of the op
-- that asks (the task's own, else the newest running), answered by the
-- client's retry. result | nil, why.
function Session:_ask_inline(method, params)
  local me = sched.current("gateway: " .. method)
  local op = self.op_of_task[tonumber(C.sp_task_id(me))]
  if not op then
    for _, o in pairs(self.ops) do
      if not o.reply and (not op or o.n > op.n) then op = o end
    end
  end
  if not op then return nil, "specula gateway: no request of the client is running to carry " .. method end
  local key, e = self:_new_ask(me)
  if not key then return nil, e end
  op.asks[key] = e
  op.new[key] = { method = method, params = params }
  self:_wake(op)
  local answered = await_ask(e, me)
  op.asks[key] = nil
  if not answered then return nil, "the client did not answer " .. method end
  return e.result
end

-- The tools the client may call are known: the gate and the predictor see them.
function Session:_tools_known()
  if self.tools_seen == self.up.catalog.tools and self.tools_seen then return end
  local tools = self.up:tools()
  self.tools_seen = tools
  local names, schemas = {}, {}
  for i, t in ipairs(tools) do
    names[i] = t.name
    schemas[t.name] = t.inputSchema
  end
  self.spec.schemas = schemas
  self.spec:set_tools(names, self.up:ambiguous_tools())
end

-- ---- the servers' side -------------------------------------------------------------------

-- The server a tool the client sees runs on (nil: none known).
function Session:_server_of(tool)
  local _, routes = self.up:tools()
  local r = routes[tool]
  return r and r.server
end

-- A request of a server to the client (sampling, elicitation, roots),
-- relayed in the calling task: result | nil, why. server: the one asking.
function Session:_ask_client(method, params, server)
  -- Sampling or elicitation from a server that has no request of the
  -- client in flight can only come from a prefetch there (or the server on
  -- its own): a call the client has not made must not reach it. The
  -- prefetches running on that server are dropped (never served: their
  -- server was refused) and the server gets an error; the client's own
  -- call, if it comes, runs and asks again. With a request of the client
  -- in flight at that server the ask is relayed (it may be that call's).
  -- roots/list acts on nothing: always relayed. (A stateless client's
  -- request answered with input requests is still in flight upstream
  -- until the retry comes.)
  if method ~= "roots/list" then
    local quiet
    if server then
      quiet = (self.busy[server] or 0) == 0
    else
      quiet = next(self.running) == nil and not self:_op_running()
    end
    local on = server and function(tool) return self:_server_of(tool) == server end or nil
    if quiet and self.spec:taint_running(on) then
      return nil, "specula gateway: a call the client has not made yet cannot ask it (" .. method .. ")"
    end
  end
  if self.stateless then return self:_ask_inline(method, params) end
  local me = sched.current("gateway: " .. method)
  local id, e = self:_new_ask(me)
  if not id then return nil, e end
  self.asks[id] = e
  local ok, err = self:_send({ jsonrpc = "2.0", id = id, method = method, params = params })
  if not ok then
    self.asks[id] = nil
    return nil, "the client cannot be reached: " .. tostring(err)
  end
  local answered = await_ask(e, me)
  self.asks[id] = nil
  if not answered then return nil, "the client did not answer " .. method end
  if e.error ~= nil then
    local er = type(e.error) == "table" and e.error or {}
    return nil, format("the client refused %s: %s", method, tostring(er.message))
  end
  return e.raw or e.result
end

-- The hooks each server's client gets: only for what the client declared.
function Session:_hooks()
  local caps = self.client_caps or {}
  local h = { on_notification = function(server, method, params) return self:_upstream_note(server, method, params) end }
  if caps.sampling ~= nil then
    h.on_sampling = function(params, at)
      return self:_ask_client("sampling/createMessage", params, type(at) == "table" and at.server or nil)
    end
  end
  if caps.elicitation ~= nil then
    h.on_elicitation = function(params, at)
      return self:_ask_client("elicitation/create", params, type(at) == "table" and at.server or nil)
    end
  end
  if caps.roots ~= nil then
    h.on_roots = function()
      local r, err = self:_ask_client("roots/list", obj())
      if r == nil then return nil, err end
      if getmetatable(r) == json.raw_mt then return r end
      return type(r) == "table" and r.roots or {}
    end
  end
  return h
end

local CHANGED = { ["notifications/tools/list_changed"] = "tools", ["notifications/prompts/list_changed"] = "prompts",
                  ["notifications/resources/list_changed"] = "resources" }
-- relayed as they come (progress goes through the request's own relay)
local RELAYED = { ["notifications/message"] = true, ["notifications/resources/updated"] = true }

-- A notification of a server.
function Session:_upstream_note(server, method, params)
  local kind = CHANGED[method]
  if kind then
    self.up:forget(kind)
    -- before the client has its answer to initialize (a server that says
    -- so as it starts) there is nothing it listed yet: nothing to tell
    if self.initialized or self.stateless_ready then self:_send({ jsonrpc = "2.0", method = method }) end
  elseif RELAYED[method] then
    local p = obj()
    for k, v in pairs(params) do p[k] = v end
    self:_send({ jsonrpc = "2.0", method = method, params = p })
  end
end

function Session:_start_upstreams()
  if self.up then return end
  self.up = upstreams.new(self.gw.servers, self:_hooks())
  self.up:connect()
  for name, err in pairs(self.up.errors) do
    output.stderr("specula gateway: warning: mcp server '", name, "' did not start: ", err, "\n")
  end
end

-- ---- the client's messages -------------------------------------------------------------------

function Session:_notification(method, params)
  params = type(params) == "table" and params or {}
  if method == "notifications/cancelled" then
    local e = self.running[params.requestId]
    -- initialize is not cancelled (MCP: a client MUST NOT): cancelled, it
    -- left a session that refused every request, initialize included
    if e and not e.task:done() and e.task ~= self.init_task then
      C.sp_task_cancel(e.task.ptr)   -- its upstream request gets notifications/cancelled
      -- a stateless request: its op runs the upstream call
      local op = e.op
      if op and not op.reply then
        self:_op_done(op)
        if not op.work:done() then C.sp_task_cancel(op.work.ptr) end
      end
      self.rec.st.cancelled_by_client = self.rec.st.cancelled_by_client + 1
    end
  elseif method == "notifications/roots/list_changed" and self.up then
    for _, e in ipairs(self.up:each()) do
      if e.client.hooks.on_roots then pcall(e.client.roots_changed, e.client) end
    end
  end
end

function Session:_answer(msg, raw)
  local e = self.asks[msg.id]
  if not e or C.sp_rpc_state(e.rpc) ~= PENDING then return end
  e.result, e.error = msg.result, msg.error
  -- the answer's own text goes to the server unchanged
  local body = raw and msg.result ~= nil and rawjson.member(raw, "result")
  if body then e.raw = json.raw(body) end
  C.sp_rpc_complete(e.rpc)
end

-- One message of the client (raw: its text, when the transport kept it).
function Session:_receive(msg, raw)
  if type(msg) ~= "table" then
    return self:_error(JNULL, -32600, "a message must be a JSON object")
  end
  local id, method = msg.id, msg.method
  -- a request whose id is null (MCP: a string or an integer, never null)
  -- is no notification either: refused, not dropped without a word
  if method ~= nil and id == JNULL then
    return self:_error(JNULL, -32600, "Invalid Request: a request's id must be a string or an integer, not null ("
      .. tostring(method) .. ")")
  end
  -- an object, a list or a fraction is no id either (MCP: a string or an
  -- integer); answered with id null, as JSON-RPC says for an id it cannot use
  if method ~= nil and id ~= nil and type(id) ~= "string" and not (type(id) == "number" and id == math.floor(id)
    and id > -math.huge and id < math.huge) then
    return self:_error(JNULL, -32600, "Invalid Request: a request's id must be a string or an integer, got "
      .. (type(id) == "number" and tostring(id) or ("a JSON " .. (type(id) == "table" and "object or list" or type(id))))
      .. " (" .. tostring(method) .. ")")
  end
  if method ~= nil and id ~= nil then
    if not self.stateless and not self.init_task and method ~= "initialize" then
      local p = msg.params
      local meta = type(p) == "table" and type(p._meta) == "table" and p._meta or nil
      if meta and meta[META_VERSION] == M.STATELESS then self:_mark_stateless(meta) end
    end
    local key = id
    -- JSON's integers past 2^53 are not doubles: the id's text is kept for
    -- the answer (stdio; the request is keyed by the double meanwhile, and
    -- two such ids a double apart are one to a client that decodes them so)
    local big = type(id) == "number" and raw and (id >= 2 ^ 53 or id <= -2 ^ 53) and rawjson.member(raw, "id")
    if big then self.big_ids[key] = big end
    local e = { raw = raw }
    e.task = spawn_root(function()
      local ok, err = pcall(self._request, self, id, method, msg.params)
      self.running[key] = nil
      if not ok then self:_error(id, -32603, "specula gateway: " .. tostring(err)) end
      if big then self.big_ids[key] = nil end
    end)
    if e.task then self.running[key] = e end
    -- the first initialize is the one; the requests after it wait for it
    if method == "initialize" and not self.init_task then self.init_task = e.task end
    return
  end
  if method ~= nil then return self:_notification(method, msg.params) end
  if id ~= nil and (msg.result ~= nil or msg.error ~= nil) then return self:_answer(msg, raw) end
  return self:_error(JNULL, -32600, "neither a request, a notification nor a response")
end

-- The client is gone: cancel what runs for it, stop the servers, end.
function Session:_end(why)
  if self.ended then return end
  self.ended = true
  self.why = why
  local open = 0
  for _, e in pairs(self.running) do
    if not e.task:done() then
      C.sp_task_cancel(e.task.ptr)
      -- a request left unanswered (not one whose task ran on after its
      -- answer), cancelled by the session's end as by the client
      if not e.answered and e.task ~= self.init_task then
        open = open + 1
        self.rec.st.cancelled_by_client = self.rec.st.cancelled_by_client + 1
      end
    end
  end
  -- said, so that a client piping requests and closing at once (a first
  -- try from a shell) learns why it got no answers
  if open > 0 then
    output.stderr(format("specula gateway: session ended (%s) with %d request(s) unanswered: cancelled "
      .. "(a client keeps stdin open until its answers arrive; closing it ends the session)\n", tostring(why), open))
  end
  for _, e in pairs(self.asks) do C.sp_rpc_cancel(e.rpc) end
  for _, op in pairs(self.ops) do
    self:_op_done(op)
    if op.work and not op.work:done() then C.sp_task_cancel(op.work.ptr) end
  end
  self.spec:finish()
  self.rec:finish(self)
  spawn_root(function()
    if self.up then self.up:close() end
    if self.on_end then pcall(self.on_end, self) end
    if self.lifetime and not self.lifetime:done() then C.sp_task_cancel(self.lifetime.ptr) end
  end)
end

function Session:_peer()
  local s = self
  return {
    st = s.tst,
    receive = function(_, msg, _, raw) return s:_receive(msg, raw) end,
    malformed = function(_, why)
      output.stderr("specula gateway: warning: ", why, "\n")
      s:_error(JNULL, -32700, "Parse error")
    end,
    warn = function(_, why) output.stderr("specula gateway: warning: ", why, "\n") end,
    fail = function(_, id, why) s:_error(id, -32600, why) end,
    lost = function(_, why) s:_end(why) end,
  }
end

-- Wait (in a task) until the client is gone and the session wound down.
function Session:wait()
  if self.lifetime then self.lifetime:wait() end
  return self.why
end

function Session:stats() return self.rec:record(self) end

-- A session of gateway gw over the server-side transport t, started now:
-- session | nil, err. o: { on_end = function(session), record = the
-- session's record object (specula.gateway.record) }.
function M.start(gw, t, o)
  o = o or {}
  local self = setmetatable({
    gw = gw, t = t, running = {}, big_ids = {}, busy = {}, asks = {}, next_out = 0, ask_timeout_ms = gw.ask_timeout_ms or 600000,
    ops = {}, op_of_task = {}, n_ops = 0,
    tst = { malformed = 0, oversized = 0 }, on_end = o.on_end, rec = o.record,
  }, Session)
  self.spec = speculate.new {
    predictor = gw:new_predictor(), policy = gw.policy, policy_dir = gw.dir, max_age_ms = gw.max_age_ms,
    max_inflight = gw.budget.max_inflight, max_wasted_cost = gw.budget.max_wasted_cost, cost = gw.budget.cost,
    call = function(name, args, o) return self:_call_tool(name, args, o and o.on_progress, nil, true) end,
    tool_stats = function(name) return self.rec:tool(name) end,
    server_up = function(name) return self:_server_up(name) end,
    killed_server = function(name) return self:_killed_server(name) end,
  }
  self.lifetime = spawn_root(function() sched.sleep(1e12) end)
  local ok, err = t:open(self:_peer())
  if not ok then
    C.sp_task_cancel(self.lifetime.ptr)
    return nil, err
  end
  return self
end

return M
