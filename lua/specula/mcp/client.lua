-- specula.mcp.client: an MCP session over any transport
-- (specula.mcp.transport): JSON-RPC 2.0 ids and pending requests, the
-- handshake, timeouts and cancellation, the server's own requests (ping
-- and the hooks), and the client API (specula.mcp documents it). It never
-- knows which transport it speaks through: stdio, Streamable HTTP, or a
-- wrapper around one of them that records or replays.
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"
local json = require "specula.json"
-- a server's text may carry a credential: errors made of it are scrubbed
local secrets = require "specula.secrets"
local output = require "specula.internal.output"
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

-- Newest first. 2026-07-28 is stateless (no handshake: server/discover,
-- then every request carries the version and the client in its _meta);
-- the others open a session with initialize.
M.PROTOCOL_VERSIONS = { "2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26" }
local SUPPORTED = {}
for _, v in ipairs(M.PROTOCOL_VERSIONS) do SUPPORTED[v] = true end
M.SUPPORTED = SUPPORTED
local STATELESS = { ["2026-07-28"] = true }
M.STATELESS = STATELESS
-- what a client that wants a stateless version falls back to when the
-- server answers server/discover as a session server would (an error)
M.SESSION_VERSION = "2025-11-25"
local META_VERSION = "io.modelcontextprotocol/protocolVersion"
local META_CAPS = "io.modelcontextprotocol/clientCapabilities"
local META_INFO = "io.modelcontextprotocol/clientInfo"
local MAX_INPUT_ROUNDS = 16
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

-- One message from the server (already decoded); raw: its JSON text when
-- the transport has it (a result's own text is then kept: raw_of).
function Client:_handle(msg, via, raw)
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
    if self.on_notification then
      local ok, nerr = pcall(self.on_notification, method, params, msg)
      if not ok then self:_warn(self:_where() .. ": on_notification raised: " .. tostring(nerr)) end
    end
    if method == "notifications/progress" then
      local e = self.by_token[params.progressToken]
      if e and e.on_progress then
        local ok, perr = pcall(e.on_progress, params)
        if not ok then self:_warn(self:_where() .. ": progress callback raised: " .. tostring(perr)) end
      end
      st.progress = st.progress + 1
    elseif method == "notifications/tools/list_changed" then
      self.tools_cache = nil
      self:_uncache("tools/list")
    elseif method == "notifications/resources/list_changed" then
      st.resources_changed = st.resources_changed + 1
      self:_uncache("resources/list")
      self:_uncache("resources/templates/list")
    elseif method == "notifications/prompts/list_changed" then
      self:_uncache("prompts/list")
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
    local extra = ""
    -- an unsupported version names those the server speaks (the text
    -- carries them, so a recorded answer can be negotiated from too)
    if er.code == -32022 and type(er.data) == "table" and type(er.data.supported) == "table" then
      local l = {}
      for _, v in ipairs(er.data.supported) do l[#l + 1] = tostring(v) end
      extra = " (supported: " .. concat(l, ", ") .. ")"
    end
    e.err = scrub(format("%s: %s: error %s: %s%s", self:_where(), e.what, tostring(er.code),
      tostring(er.message), extra))
    -- the server's own error object, by the message it became (a relay
    -- passes the object on); the last few only
    if self.n_error_objs >= 64 then self.error_of, self.n_error_objs = {}, 0 end
    self.error_of[e.err] = er
    self.n_error_objs = self.n_error_objs + 1
  else
    e.result = msg.result
    -- the answer's own text, for a relay that passes it on unchanged
    -- (weak keys: gone with the result)
    if raw and type(msg.result) == "table" then self.raw_of[msg.result] = raw end
  end
  C.sp_rpc_complete(e.rpc)
end

-- ---- requests from the server: specula.mcp.hooks -------------------------------------

local hooks = require "specula.mcp.hooks"
for k, f in pairs(hooks.methods) do Client[k] = f end
M.HOOKS = hooks.HOOKS
M.elicitation_result = hooks.elicitation_result

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
-- one of them is dropped quietly (given_up, bounded). The walk covers every
-- pending request, so it runs once as many requests have started as were
-- pending after the last one (at least 64): with 2,000 in flight a walk per
-- request was most of the client's CPU. Until its walk, a given-up request
-- stays in pending, where a late answer is dropped the same way.
function Client:_sweep()
  local n = self.since_sweep + 1
  if n < self.sweep_every then
    self.since_sweep = n
    return
  end
  self.since_sweep = 0
  local kept = 0
  for id, e in pairs(self.pending) do
    if C.sp_rpc_state(e.rpc) ~= PENDING and not e.live then
      self.pending[id] = nil
      if e.token ~= nil then self.by_token[e.token] = nil end
      self.given_up[id] = true
      self.n_given_up = self.n_given_up + 1
    else
      kept = kept + 1
    end
  end
  self.sweep_every = kept > 64 and kept or 64
  if self.n_given_up > 4096 then self.given_up, self.n_given_up = {}, 0 end
end

-- ---- the transport's peer -------------------------------------------------------------

-- What a transport reports to (specula.mcp.transport: open(peer)).
function Client:_peer()
  local c = self
  return {
    st = c.st,
    receive = function(_, msg, via, raw) return c:_handle(msg, via, raw) end,
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
      -- A death while the only requests in flight were prefetches (a
      -- gateway's calls the client never made) is theirs: the restart it
      -- needs is not counted against max_restarts (the client's own calls
      -- must not run out of restarts a guess spent), and the tools they
      -- called are noted (prefetch_killers), so a guess that crashes the
      -- server is not made again on it.
      local theirs = false
      for _, e in pairs(c.pending) do
        if not e.prefetch then theirs = false break end
        theirs = true
      end
      if theirs then
        c.forgive = true
        c.st.prefetch_deaths = c.st.prefetch_deaths + 1
        for _, e in pairs(c.pending) do c.prefetch_killers[e.prefetch] = true end
      end
      c:_fail_all(why)
    end,
  }
end

-- ---- requests --------------------------------------------------------------------------

local function cancel_line(id)
  return assert(encode({ jsonrpc = "2.0", method = "notifications/cancelled",
                         params = { requestId = id, reason = "cancelled by specula (task cancelled or timed out)" } }))
end
-- Every request arms its cancel line before it is sent (C writes it if the
-- task is cancelled). The client's ids are whole numbers counted from 1:
-- the line's text around the id is made once, not a table encoded a request.
local CANCEL_HEAD, CANCEL_TAIL = cancel_line(0):match('^(.*"requestId":)0([,}].*)$')
assert(CANCEL_HEAD, "mcp client: the cancel line's shape")
function Client:_cancel_line(id)
  if type(id) == "number" and id >= 0 and id < 1e15 and id % 1 == 0 then
    return CANCEL_HEAD .. format("%d", id) .. CANCEL_TAIL
  end
  return cancel_line(id)
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
  -- prefetch: the tool a gateway's prefetch calls (a request the client never made)
  local e = { what = what, on_progress = opts.on_progress, headers = opts.headers, prefetch = opts.prefetch }
  -- a copy: the caller's params stay as given (a retry sends them again)
  local p = obj()
  if params ~= nil then for k, v in pairs(params) do p[k] = v end end
  local meta
  if opts.on_progress or self.stateless_version then
    meta = obj()
    if type(p._meta) == "table" then for k, v in pairs(p._meta) do meta[k] = v end end
    p._meta = meta
  end
  if opts.on_progress then
    meta.progressToken = id
    e.token = id
    self.by_token[id] = e
  end
  if self.stateless_version then
    -- 2026-07-28: no session; every request says who asks and in which version
    meta[META_VERSION] = self.stateless_version
    meta[META_CAPS] = self:_capabilities()
    meta[META_INFO] = M.CLIENT_INFO
  end
  e.msg = { jsonrpc = "2.0", id = id, method = method, params = p }
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
  if self.hooks.on_elicitation then caps.elicitation = obj({ form = obj(), url = obj() }) end
  if self.hooks.on_roots then caps.roots = obj({ listChanged = true }) end
  return caps
end

function Client:_initialize(version)
  local r, err = self:_rpc("initialize", {
    protocolVersion = version,
    capabilities = self:_capabilities(),
    clientInfo = M.CLIENT_INFO,
  }, { timeout_ms = self.init_timeout_ms })
  if not r then return nil, err end
  if type(r) ~= "table" or type(r.protocolVersion) ~= "string" then
    return nil, self:_where() .. ": initialize: the response has no protocolVersion"
  end
  if not SUPPORTED[r.protocolVersion] or STATELESS[r.protocolVersion] then
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

-- The versions of a "(supported: a, b)" list in an error text.
local function supported_in(err)
  local l = type(err) == "string" and err:match("error %-32022: .-%(supported: ([^)]*)%)")
  if not l then return nil end
  local set = {}
  for v in l:gmatch("[^,%s]+") do set[v] = true end
  return set
end

-- Stateless start (2026-07-28): server/discover in version v, with the
-- version's header and _meta. -> true | nil, err, fallback (fallback: the
-- server answered as a session server would, so initialize may follow).
-- An unsupported-version error that names a stateless version we speak is
-- retried in it once; one that names only session versions falls back.
function Client:_discover(v, retried)
  self.stateless_version = v
  if not self.offline then self.t:set_version(v) end   -- a replay has no wire
  local r, err = self:_rpc("server/discover", nil, { timeout_ms = self.discover_timeout_ms })
  local sup
  if r == nil then
    if self.t.auth_failed then return nil, err, false end   -- not a version question
    -- over HTTP a session server answers the probe at once (an error); no
    -- answer in time is a slow server, not an old one
    if self.t.kind == "http" and type(err) == "string" and err:find("no response within", 1, true) then
      return nil, err, false
    end
    sup = supported_in(err)
    if not sup then return nil, err, true end
  elseif type(r) == "table" and type(r.supportedVersions) == "table" then
    sup = {}
    for _, x in ipairs(r.supportedVersions) do sup[x] = true end
    if sup[v] then
      self.protocol_version = v
      self.stateless = true
      self.capabilities = type(r.capabilities) == "table" and r.capabilities or {}
      local meta = type(r._meta) == "table" and r._meta or {}
      self.server_info = r.serverInfo or meta["io.modelcontextprotocol/serverInfo"]
      self.instructions = r.instructions
      self.state = "ready"
      if not self.offline then self.t:ready() end
      return true
    end
  else
    return nil, self:_where() .. ": server/discover: the result has no supportedVersions", true
  end
  -- the server speaks other versions: the newest stateless one of ours it
  -- names (once), else a session
  if not retried then
    for _, w in ipairs(M.PROTOCOL_VERSIONS) do
      if STATELESS[w] and sup[w] then return self:_discover(w, true) end
    end
  end
  return nil, format("%s: server/discover: the server does not speak %s", self:_where(), v), true
end

-- Start the protocol: the version wanted (protocol_version pins it; by
-- default the newest) and, when that is stateless and the server turns out
-- to be a session server, initialize in the newest session version.
function Client:_start()
  local want = self.want_version
  if not STATELESS[want] then return self:_initialize(want) end
  if self.session_only then return self:_initialize(M.SESSION_VERSION) end   -- known from a first start
  local ok, err, fallback = self:_discover(want)
  if ok then return true end
  self.stateless_version = nil
  if not fallback or self.pinned then return nil, err end
  self.discover_error = err   -- why this server got a session
  self.session_only = true
  if not self.offline then self.t:set_version(nil) end
  return self:_initialize(M.SESSION_VERSION)
end

-- Whether the server is up now (initialized, not dead, not starting): a
-- request sent now needs no start or restart first.
function Client:is_ready() return self.state == "ready" end

-- Make sure the server runs: opens or reopens a transport that can be
-- (stdio: starts or restarts the process), once at a time.
function Client:_ready()
  if self.closed then return nil, self:_where() .. ": the client is closed" end
  if self.state == "ready" then return true end
  if not self.t.restartable then return nil, self:_where() .. ": not connected" end
  if self.state == "dead" then
    -- (a death prefetches alone caused: its restart is not counted)
    if self.forgive then
      self.forgive = false
      self.forgiven = self.forgiven + 1
    end
    if self.t.starts - self.forgiven > self.max_restarts then
      return nil, format("%s: gave up after %d restart(s) (max_restarts = %d); last: %s", self:_where(),
        self.t.starts - 1 - self.forgiven, self.max_restarts, tostring(self.last_exit))
    end
    self.st.restarts = self.st.restarts + 1
  end
  if not self.starter or self.starter:done() then
    self.state = "starting"
    self.starter = spawn_root(function()
      local ok, err = self.t:open(self.peer)
      if ok then ok, err = self:_start() end
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

-- A request and, at 2026-07-28, its further rounds: while the server
-- answers InputRequiredResult, the hooks answer its inputRequests and the
-- request goes again (a new id) with those inputResponses and the server's
-- requestState exactly as it came (absent when it sent none). A result
-- without resultType is complete.
function Client:_rounds(method, params, opts)
  local r, err = self:_rpc(method, params, opts)
  local rounds = 0
  while self.stateless and type(r) == "table" and r.resultType == "input_required" do
    rounds = rounds + 1
    self.st.input_rounds = self.st.input_rounds + 1
    local what = opts and opts.what or method
    if rounds > MAX_INPUT_ROUNDS then
      return nil, format("%s: %s: the server still asks for input after %d rounds", self:_where(), what,
        MAX_INPUT_ROUNDS)
    end
    local answers, aerr = self:_input_responses(r.inputRequests, what)
    if not answers then return nil, aerr end
    local again = obj()
    if params ~= nil then
      for k, v in pairs(params) do
        if k ~= "inputResponses" and k ~= "requestState" then again[k] = v end
      end
    end
    again.inputResponses = answers
    if r.requestState ~= nil and r.requestState ~= JNULL then again.requestState = r.requestState end
    r, err = self:_rpc(method, again, opts)
  end
  return r, err
end

-- A request by method name: result table | nil, err.
function Client:request(method, params, opts)
  if type(method) ~= "string" then error("mcp client:request: method must be a string", 2) end
  local ok, err = self:_ready()
  if not ok then return nil, err end
  return self:_rounds(method, params, opts)
end

function Client:ping(opts)
  local r, err = self:request("ping", nil, opts)
  if r == nil then return nil, err end
  return true
end

-- One page of a list: at 2026-07-28 a result with ttlMs > 0 is served
-- from this client's cache until it expires (per method and cursor).
function Client:_list_page(method, cursor, opts)
  local key = method .. "\n" .. (cursor or "")
  local hit = self.list_cache[key]
  if hit and sched.now() < hit.until_ms then
    self.st.list_cache_hits = self.st.list_cache_hits + 1
    return hit.result
  end
  self.list_cache[key] = nil
  local t0 = sched.now()
  local r, err = self:request(method, cursor and { cursor = cursor } or nil, opts)
  if r and self.stateless and type(r) == "table" then
    local ttl = tonumber(r.ttlMs)
    if ttl and ttl > 0 then self.list_cache[key] = { result = r, until_ms = t0 + ttl } end
  end
  return r, err
end

-- Forget cached list pages of one method (a list_changed notification) or all.
function Client:_uncache(method)
  for k in pairs(self.list_cache) do
    if method == nil or k:sub(1, #method + 1) == method .. "\n" then self.list_cache[k] = nil end
  end
end

-- Every page of a list method: the items of `field` | nil, err.
function Client:_list_all(method, field, opts)
  local out, cursor, pages = {}, nil, 0
  repeat
    local r, err = self:_list_page(method, cursor, opts)
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

-- ---- custom headers (2026-07-28) -----------------------------------------------------

-- A header name (RFC 9110 token): visible ASCII without separators.
local TOKEN = "^[%w!#$%%&'*+%-%.%^_`|~]+$"
local HEADER_TYPES = { string = true, integer = true, boolean = true }

-- The Mcp-Param headers a tool's inputSchema asks for with x-mcp-header:
-- { property = header name } | nil, why (the tool must not be used: an
-- empty or malformed name, a type that is not string, integer or
-- boolean, two properties with one name in any case).
local function param_headers(tool)
  local schema = type(tool) == "table" and tool.inputSchema
  local props = type(schema) == "table" and schema.properties
  local out, seen = {}, {}
  if type(props) ~= "table" then return out end
  for prop, p in pairs(props) do
    local h = type(p) == "table" and p["x-mcp-header"] or nil
    if h ~= nil then
      if type(h) ~= "string" or h == "" then return nil, "property '" .. tostring(prop) .. "': x-mcp-header is empty" end
      if not h:match(TOKEN) then
        return nil, "property '" .. tostring(prop) .. "': x-mcp-header '" .. excerpt(h, 60) .. "' is not a header name"
      end
      if not HEADER_TYPES[p.type] then
        return nil, "property '" .. tostring(prop) .. "': x-mcp-header on a " .. tostring(p.type)
          .. " (only string, integer and boolean)"
      end
      local low = h:lower()
      if seen[low] then return nil, "x-mcp-header '" .. h .. "' names two properties" end
      seen[low] = true
      out[prop] = h
    end
  end
  return out
end
M.param_headers = param_headers

-- A value as an MCP header carries it: booleans as true/false, numbers as
-- written, strings as they are when they are visible ASCII (spaces inside)
-- without leading or trailing whitespace, else =?base64?...?= of the UTF-8
-- bytes (the empty string too: an empty header may be dropped on the way).
local function header_value(v)
  if type(v) == "boolean" then return v and "true" or "false" end
  if type(v) == "number" then
    if v == math.floor(v) and v > -2^53 and v < 2^53 then return format("%d", v) end
    return format("%.17g", v)
  end
  local s = tostring(v)
  if s ~= "" and s:match("^[\32-\126]+$") and not s:match("^%s") and not s:match("%s$") then return s end
  return "=?base64?" .. require("specula.crypto").b64(s) .. "?="
end
M.header_value = header_value

-- The server's tools as it describes them, following pagination. At
-- 2026-07-28 a tool whose x-mcp-header annotations are invalid is left
-- out (with a warning): the client could not send its calls as the server
-- expects them.
function Client:list_tools(opts)
  local out, err = self:_list_all("tools/list", "tools", opts)
  if not out then return nil, err end
  if self.stateless then
    local kept = {}
    for _, t in ipairs(out) do
      local hs, why = param_headers(t)
      local name = type(t) == "table" and tostring(t.name) or "?"
      if hs then
        self.tool_headers[name] = hs
        kept[#kept + 1] = t
      else
        if not self.excluded[name] then
          self.st.tools_excluded = self.st.tools_excluded + 1
          self:_warn(format("%s: tool '%s' left out: %s", self:_where(), name, why))
        end
        self.excluded[name] = why
      end
    end
    out = kept
  end
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
  local ok, rerr = self:_ready()
  if not ok then return nil, rerr end
  local headers
  if self.stateless then
    -- the tool's x-mcp-header parameters go in Mcp-Param headers too:
    -- its definition first (once, when no list was asked for yet)
    if self.tools_cache == nil then self:list_tools() end
    if self.excluded[name] then
      return nil, format("%s: tools/call '%s': the tool was left out: %s", self:_where(), name, self.excluded[name])
    end
    for prop, h in pairs(self.tool_headers[name] or {}) do
      local v = cargs[prop]
      if v ~= nil and v ~= JNULL then
        headers = headers or {}
        headers["Mcp-Param-" .. h] = header_value(v)
      end
    end
  end
  local r, err = self:request("tools/call", { name = name, arguments = cargs },
    { timeout_ms = opts.timeout_ms, on_progress = opts.on_progress, what = "tools/call '" .. name .. "'",
      headers = headers })
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
    want_version = o.protocol_version or M.PROTOCOL_VERSIONS[1], pinned = o.protocol_version ~= nil,
    -- a session server over stdio may never answer an unknown method: there
    -- the probe is bounded below the start's own timeout
    discover_timeout_ms = t.kind == "stdio" and math.min(o.init_timeout_ms or 30000, 10000)
      or o.init_timeout_ms or 30000,
    quiet = o.quiet,
    state = "new", next_id = 1, forgive = false, forgiven = 0, prefetch_killers = {},
    pending = {}, by_token = {}, given_up = {}, n_given_up = 0, since_sweep = 0, sweep_every = 64, errors = {}, list_cache = {},
    tool_headers = {}, excluded = {}, on_notification = o.on_notification,
    raw_of = setmetatable({}, { __mode = "k" }), error_of = {}, n_error_objs = 0,
    hooks = { on_sampling = o.on_sampling, on_elicitation = o.on_elicitation, on_roots = o.on_roots },
    st = { requests = 0, restarts = 0, exits = 0, malformed = 0, unknown_ids = 0, oversized = 0,
           late_dropped = 0, timeouts = 0, server_requests = 0, progress = 0, reconnects = 0, calls = {},
           reads = 0, resources_changed = 0, listens = 0, input_requests = 0, input_rounds = 0,
           list_cache_hits = 0, tools_excluded = 0, prefetch_deaths = 0,
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
    ok, err = c:_start()
  elseif t.restartable then
    ok, err = c:_ready()
    if not ok then t:abort() end
  else
    ok, err = t:open(c.peer)
    if ok then ok, err = c:_start() end
  end
  if not ok then
    c.closed = true
    return nil, err
  end
  return c
end

M.Client = Client
return M
