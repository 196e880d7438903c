-- specula.mcp.serve_http: the server side of MCP Streamable HTTP (spec
-- revisions 2025-03-26 to 2025-11-25, and 2026-07-28's stateless POSTs:
-- each one, its Mcp-Method, Mcp-Name and version checked against the body,
-- is served by a session of its own that ends with it, or with
-- stateless_key by one long-lived session per key) on the engine's HTTP/1.1 server
-- (engine/sp_httpd.c). One endpoint (http://HOST:PORT/mcp); each client
-- that initializes gets a session of its own (Mcp-Session-Id), handed to
-- on_session as a transport (specula.mcp.transport describes the
-- interface) for a server-side session to open:
--
--   t:open(peer)        the client's messages go to peer:receive(msg, via, raw)
--                       (raw: the message's own JSON text in the body)
--   t:send(msg, rel)    a response goes back on the POST that carried its
--                       request (its SSE stream or its JSON reply); a
--                       request or notification goes on the POST stream of
--                       request id rel when that is open (a progress
--                       notification: of the request whose _meta set its
--                       progressToken), else on the GET
--                       stream, else on the newest open POST stream, else it
--                       waits (bounded) for a GET stream
--   t:request(x)        t:send(x.msg, x.related): the answer comes back as a
--                       POST the session receives (no cancel is armed: the
--                       session sends its own notifications/cancelled)
--   t:close()           ends the session: its streams end, its id is unknown
--                       from then on (404)
--   peer:lost(why)      the client DELETEd the session, or the listener closed
--
-- A client that disconnects while its requests are unanswered cannot get
-- their answers (no stream here is resumable): the session receives a
-- notifications/cancelled for each, reason "the client disconnected".
--
-- listen{} binds to loopback unless allow_remote; a Host or Origin header
-- that names another host than loopback is refused (403) while bound to
-- loopback (DNS rebinding), and when `origins` lists the Origins allowed,
-- every other.
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"
local json = require "specula.json"
local crypto = require "specula.crypto"
local transport = require "specula.mcp.transport"
local output = require "specula.internal.output"
local ffi, C = core.ffi, core.C

local type, tostring, tonumber, pairs, ipairs, pcall = type, tostring, tonumber, pairs, ipairs, pcall
local format, concat = string.format, table.concat
local co_yield = sched.yield   -- the raw yield (sched guards the global one)
local encode, decode = json.encode, json.decode
local spawn_root = transport.spawn_root
local rawjson = require "specula.mcp.rawjson"

-- The text of each message as the client sent it (peer:receive's raw).
local raws = setmetatable({}, { __mode = "k" })

local M = {}

-- The versions whose MCP-Protocol-Version header is accepted.
M.VERSIONS = { ["2025-03-26"] = true, ["2025-06-18"] = true, ["2025-11-25"] = true }
-- Messages waiting for a GET stream, per session, before the oldest are dropped.
M.BACKLOG = 256

local lenp = ffi.new("size_t[1]")

-- ---- the HTTP layer: requests as Lua objects ------------------------------------

local Req = {}
Req.__index = Req

local function header_table(block)
  local h = {}
  for name, value in block:gmatch("([^:\n]+): ([^\n]*)\n") do
    h[name] = h[name] and (h[name] .. ", " .. value) or value
  end
  return h
end

local function wrap_req(p)
  local r = setmetatable({ ptr = ffi.gc(p, C.sp_httpd_req_free) }, Req)
  r.method = ffi.string(C.sp_httpd_method(p))
  r.target = ffi.string(C.sp_httpd_target(p))
  r.path, r.query = r.target:match("^([^?]*)%??(.*)$")
  r.headers = header_table(ffi.string(C.sp_httpd_headers(p, lenp), lenp[0]))
  r.body = ffi.string(C.sp_httpd_body(p, lenp), lenp[0])
  r.conn = C.sp_httpd_conn_id(p)
  return r
end

local function header_lines(h)
  local lines = {}
  for k, v in pairs(h or {}) do lines[#lines + 1] = k .. ": " .. tostring(v) end
  table.sort(lines)
  return concat(lines, "\n")
end

local FREED = "EINVAL: the request was already released"

function Req:respond(status, headers, body)
  if self.ptr == nil then return nil, FREED end
  body = body or ""
  local err, errlen = core.errbuf()
  if C.sp_httpd_respond(self.ptr, status, header_lines(headers), body, #body, err, errlen) ~= 0 then
    return nil, ffi.string(err)
  end
  return true
end

function Req:stream(status, headers)
  if self.ptr == nil then return nil, FREED end
  local err, errlen = core.errbuf()
  if C.sp_httpd_stream_start(self.ptr, status, header_lines(headers), err, errlen) ~= 0 then
    return nil, ffi.string(err)
  end
  return true
end

function Req:write(data)
  if self.ptr == nil then return nil, FREED end
  local err, errlen = core.errbuf()
  if C.sp_httpd_stream_write(self.ptr, data, #data, err, errlen) ~= 0 then return nil, ffi.string(err) end
  return true
end

function Req:finish() if self.ptr ~= nil then C.sp_httpd_stream_end(self.ptr) end end
function Req:gone() return self.ptr == nil or C.sp_httpd_gone(self.ptr) ~= 0 end
function Req:poke() if self.ptr ~= nil then C.sp_httpd_poke(self.ptr) end end

-- Wait until poked or the client has gone (in the task serving it).
function Req:wait()
  if self.ptr == nil then return end
  local me = sched.current("specula.mcp.serve_http")
  if C.sp_httpd_req_wait(self.ptr, me) == 0 then co_yield() end
end

function Req:free()
  local p = self.ptr
  if p ~= nil then
    self.ptr = nil
    ffi.gc(p, nil)
    C.sp_httpd_req_free(p)
  end
end

-- A plain HTTP server: handler(req) runs in a root task of its own per
-- request; the request is freed when it returns (unanswered: 500). o: host,
-- port, max_header_bytes, max_body_bytes, max_conns, max_pending_bytes,
-- idle_timeout_ms, handler, warn.
-- -> server { port(), close(), conns() } | nil, err
function M.http_listen(o)
  local ctx = core.ctx
  if ctx == nil then return nil, "EINVAL: specula.mcp.serve_http: needs the specula runtime" end
  local opts = ffi.new("sp_httpd_opts")
  local host = o.host or "127.0.0.1"
  opts.host = host
  opts.port = o.port or 0
  opts.max_header_bytes = o.max_header_bytes or 0
  opts.max_body_bytes = o.max_body_bytes or 0
  opts.max_conns = o.max_conns or 0
  opts.max_pending_bytes = o.max_pending_bytes or 0
  opts.idle_timeout_ms = o.idle_timeout_ms or 0
  local err, errlen = core.errbuf()
  local p = C.sp_httpd_listen(ctx, opts, err, errlen)
  if p == nil then return nil, ffi.string(err) end
  local srv = { ptr = ffi.gc(p, C.sp_httpd_close), handlers = {} }
  local warn = o.warn or function(msg) output.stderr("specula: warning: ", msg, "\n") end
  local function serve(r)
    local ok, e = xpcall(o.handler, debug.traceback, r)
    if not ok then
      warn("HTTP handler failed: " .. tostring(e))
      if r.ptr ~= nil and not r:gone() then r:respond(500, { ["Content-Type"] = "text/plain" }, "internal error\n") end
    end
    r:free()
  end
  srv.loop = spawn_root(function()
    local me = sched.current("specula.mcp.serve_http: accept")
    while srv.ptr ~= nil do
      local q = C.sp_httpd_next(srv.ptr)
      if q ~= nil then
        local r = wrap_req(q)
        spawn_root(function() serve(r) end)
      elseif C.sp_httpd_wait(srv.ptr, me) == 0 then
        co_yield()
      else
        break   -- closed
      end
    end
  end)
  function srv.port() return srv.ptr ~= nil and C.sp_httpd_port(srv.ptr) or nil end
  function srv.conns() return srv.ptr ~= nil and C.sp_httpd_conns(srv.ptr) or 0 end
  function srv.close()
    local q = srv.ptr
    if q == nil then return end
    srv.ptr = nil
    ffi.gc(q, nil)
    C.sp_httpd_close(q)
  end
  return srv
end

-- ---- the MCP layer -----------------------------------------------------------------

local function idkey(id) return type(id) .. ":" .. tostring(id) end

local function is_loopback(host)
  host = (host or ""):lower():gsub("^%[(.*)%]$", "%1")
  return host == "localhost" or host == "::1" or host:match("^127%.%d+%.%d+%.%d+$") ~= nil
end
M.is_loopback = is_loopback

-- The host of an Origin header ("http://host:port"), nil if none can be read.
local function origin_host(origin)
  local rest = origin:match("^%a[%w+.-]*://(.*)$")
  if not rest then return nil end
  rest = rest:match("^[^/]*")
  if rest:sub(1, 1) == "[" then return rest:match("^%[([^%]]*)%]") end
  return (rest:gsub(":%d*$", ""))
end

local function rpc_error(id, code, message)
  return encode({ jsonrpc = "2.0", id = id == nil and json.null or id, error = { code = code, message = message } })
end

local JSON_H = { ["Content-Type"] = "application/json" }

-- An HTTP error with a JSON-RPC error body (as the SDK's servers answer).
local function fail(r, status, code, message, extra)
  local h = { ["Content-Type"] = "application/json" }
  for k, v in pairs(extra or {}) do h[k] = v end
  r:respond(status, h, rpc_error(nil, code, message))
end

local function accepts(r, what)
  local a = (r.headers.accept or ""):lower()
  return a:find(what, 1, true) ~= nil or a:find("*/*", 1, true) ~= nil
end

local function sse_event(msg)
  local text = encode(msg)
  return "event: message\ndata: " .. text .. "\n\n"
end

-- ---- sessions ------------------------------------------------------------------

local Session = {}
Session.__index = Session

-- A stream a session writes to: a POST's (its requests' answers) or the GET one.
local function new_stream(sess, r, kind, mode)
  return { sess = sess, req = r, kind = kind, mode = mode, queue = {}, left = 0, replies = {}, ids = {} }
end

local function push(stream, msg)
  stream.queue[#stream.queue + 1] = msg
  stream.req:poke()
end

-- Where a message of the server's own (not a response) goes: a progress
-- notification follows its token to the request that set it.
function Session:_route(rel, msg)
  local s = rel ~= nil and self.routes[idkey(rel)] or nil
  if not s and msg.method == "notifications/progress" and type(msg.params) == "table"
     and msg.params.progressToken ~= nil then
    s = self.tokens[idkey(msg.params.progressToken)]
  end
  if s and s.mode == "sse" and not s.over then return s end
  if self.get and not self.get.over then return self.get end
  local newest
  for _, st in ipairs(self.posts) do
    if st.mode == "sse" and not st.over then newest = st end
  end
  return newest
end

-- t:send: a response to the POST that carried its request, anything else
-- by _route.
function Session:send(msg, rel)
  if self.closed then return nil, "ECLOSED: the session has ended" end
  if type(msg) ~= "table" then return nil, "EINVAL: send: a JSON-RPC message (table) expected" end
  local _, eerr = encode(msg)
  if eerr then return nil, "EINVAL: send: " .. tostring(eerr) end
  if msg.method == nil and msg.id ~= nil then
    local key = idkey(msg.id)
    local s = self.routes[key]
    if not s then return nil, "ENOENT: no open request " .. tostring(msg.id) .. " of the client to answer" end
    self.routes[key] = nil
    -- a shared stateless session: the client gets its own id back
    local orig = self.orig and self.orig[key]
    if orig ~= nil then
      self.orig[key] = nil
      local m = {}
      for k, v in pairs(msg) do m[k] = v end
      m.id = orig.client_text and json.raw(orig.client_text) or orig.client
      msg = m
    end
    local big = self.bigid and self.bigid[key]
    if big then
      self.bigid[key] = nil
      local m = {}
      for k, v in pairs(msg) do m[k] = v end
      m.id = json.raw(big)
      msg = m
    end
    s.left = s.left - 1
    if s.mode == "json" then s.replies[#s.replies + 1] = msg; s.req:poke() else push(s, msg) end
    return true
  end
  local s = self:_route(rel, msg)
  if s then push(s, msg); return true end
  local b = self.backlog
  b[#b + 1] = msg
  if #b > M.BACKLOG then table.remove(b, 1) end
  return true
end

function Session:request(x) return self:send(x.msg or decode(x.text), x.related) end
function Session:open(peer)
  self.peer = peer
  self.starts = self.starts + 1
  return true
end
function Session:set_version(v) self.protocol_version = v end
function Session:ready() end
function Session:abort() self:close() end
Session.roundtrip = transport.roundtrip

-- End the session here: its streams end, its id is forgotten.
function Session:close()
  if self.closed then return end
  self.closed = true
  if self.session_id then self.srv.sessions[self.session_id] = nil end
  if self.shared_key ~= nil and self.srv.shared[self.shared_key] == self then self.srv.shared[self.shared_key] = nil end
  if self.get then self.get.req:poke() end
  for _, s in ipairs(self.posts) do s.req:poke() end
end

-- ---- the endpoint -----------------------------------------------------------------

local Endpoint = {}
Endpoint.__index = Endpoint

-- A session (stateless: no id, known to no later request).
function Endpoint:_new_session(stateless)
  local id
  if not stateless then
    local raw = crypto.random(16)
    if not raw then return nil end
    id = crypto.hex(raw)
  end
  local sess = setmetatable({ kind = "http-server", answers_inline = false, send_waits = false, restartable = false,
                              starts = 0, session_id = id, stateless = stateless or nil, srv = self, routes = {},
                              tokens = {}, posts = {}, backlog = {} }, Session)
  if id then self.sessions[id] = sess end
  sess.last = sched.now()
  return sess
end

-- DNS rebinding: bound to loopback, a Host or an Origin that names another
-- host is refused (403); with `origins`, an Origin not listed. true, or
-- false with the answer given.
function Endpoint:_check_origin(r)
  local ok = true
  local host = r.headers.host
  if self.loopback and host then
    local name = host:match("^%[([^%]]*)%]") or host:gsub(":%d*$", "")
    ok = is_loopback(name)
  end
  local origin = r.headers.origin
  if ok and origin then
    if self.origins then
      ok = false
      for _, o in ipairs(self.origins) do if o == origin then ok = true end end
    elseif self.loopback then
      ok = is_loopback(origin_host(origin))
    end
  end
  if not ok then r:respond(403, { ["Content-Type"] = "text/plain" }, "host or origin not allowed\n") end
  return ok
end

-- The session a request names: sess, or nil with the answer given.
function Endpoint:_session_of(r)
  local sid = r.headers["mcp-session-id"]
  if not sid or sid == "" then
    fail(r, 400, -32000, "Bad Request: Mcp-Session-Id header is required")
    return nil
  end
  local sess = self.sessions[sid]
  if not sess then
    fail(r, 404, -32001, "Session not found")
    return nil
  end
  local v = r.headers["mcp-protocol-version"]
  if v and not M.VERSIONS[v] then
    fail(r, 400, -32000, "Bad Request: unsupported MCP-Protocol-Version " .. v)
    return nil
  end
  sess.last = sched.now()
  return sess
end

-- The messages of a POST body: list, batch?, or nil with the answer given.
local function read_messages(r)
  local ctype = (r.headers["content-type"] or ""):lower()
  if not ctype:find("application/json", 1, true) then
    fail(r, 415, -32000, "Unsupported Media Type: Content-Type must be application/json")
    return nil
  end
  local v, err = decode(r.body)
  if v == nil or type(v) ~= "table" then
    r:respond(400, JSON_H, rpc_error(nil, -32700, "Parse error: " .. tostring(err or "not a JSON-RPC message")))
    return nil
  end
  local batch = v[1] ~= nil or getmetatable(v) == json.array_mt
  local list = batch and v or { v }
  -- each message's own text, for a relay that passes an answer on byte for byte
  local texts = batch and rawjson.elements(r.body) or { r.body }
  if texts and #texts == #list then
    for i, m in ipairs(list) do if type(m) == "table" then raws[m] = texts[i] end end
  end
  if #list == 0 then
    r:respond(400, JSON_H, rpc_error(nil, -32600, "Invalid Request: an empty batch"))
    return nil
  end
  for _, m in ipairs(list) do
    if type(m) ~= "table" or m.jsonrpc ~= "2.0" or (m.method == nil and m.id == nil)
       or (m.method ~= nil and type(m.method) ~= "string") then
      r:respond(400, JSON_H, rpc_error(nil, -32600, "Invalid Request: not a JSON-RPC 2.0 message"))
      return nil
    end
    -- MCP's request ids are strings or integers, never null (before, such
    -- a request ran and was answered under id null)
    if m.method ~= nil and m.id == json.null then
      r:respond(400, JSON_H, rpc_error(nil, -32600, "Invalid Request: a request's id must be a string or an "
        .. "integer, not null (" .. m.method .. ")"))
      return nil
    end
  end
  return list, batch
end

-- The stateless revisions (no session: each POST stands alone).
M.STATELESS = { ["2026-07-28"] = true }

-- A header value, decoded when sent as "=?base64?...?=" (2026-07-28).
local function header_value(v)
  local b = v and v:match("^=%?base64%?(.*)%?=$")
  if b then return crypto.unb64(b) end
  return v
end

-- 2026-07-28: the headers must say what the body says (Mcp-Method,
-- Mcp-Name, the version in _meta). nil, or why not.
local function stateless_mismatch(r, m, v)
  if m.method == nil then return nil end
  if header_value(r.headers["mcp-method"]) ~= m.method then return "Mcp-Method header does not match the body" end
  local p = type(m.params) == "table" and m.params or {}
  local name
  if m.method == "tools/call" or m.method == "prompts/get" then name = p.name
  elseif m.method == "resources/read" then name = p.uri end
  if name ~= nil and header_value(r.headers["mcp-name"]) ~= name then return "Mcp-Name header does not match the body" end
  local meta = type(p._meta) == "table" and p._meta or {}
  if m.id ~= nil and meta["io.modelcontextprotocol/protocolVersion"] ~= v then
    return "MCP-Protocol-Version header does not match _meta"
  end
  return nil
end

-- Hand the messages of a POST to sess; its requests are answered on it.
-- h: the response's extra headers.
function Endpoint:_deliver(r, sess, list, batch, h)
  local nreq, ids = 0, {}
  for _, m in ipairs(list) do
    if m.method ~= nil and m.id ~= nil then
      local key = idkey(m.id)
      -- its answer could not be told from the other's
      if ids[key] or sess.routes[key] then
        return r:respond(400, JSON_H, rpc_error(m.id, -32600, "Invalid Request: request id " .. tostring(m.id)
          .. " is already in use"))
      end
      ids[key] = true
      nreq = nreq + 1
    end
  end
  if nreq == 0 then
    for _, m in ipairs(list) do sess.peer:receive(m, "post", raws[m]) end
    return r:respond(202, h)
  end
  local mode = (self.json_response or not accepts(r, "text/event-stream")) and "json" or "sse"
  if not accepts(r, "application/json") then mode = "sse" end
  local s = new_stream(sess, r, "post", mode)
  s.batch = batch
  for _, m in ipairs(list) do
    if m.method ~= nil and m.id ~= nil then
      s.ids[#s.ids + 1] = m.id
      sess.routes[idkey(m.id)] = s
      -- an integer id past 2^53 is answered under its own text (the
      -- decoded double is another number)
      if type(m.id) == "number" and (m.id >= 2 ^ 53 or m.id <= -2 ^ 53) and raws[m] then
        local text = rawjson.member(raws[m], "id")
        if text then
          sess.bigid = sess.bigid or {}
          sess.bigid[idkey(m.id)] = text
        end
      end
      local meta = type(m.params) == "table" and type(m.params._meta) == "table" and m.params._meta or {}
      if meta.progressToken ~= nil then
        s.tokens = s.tokens or {}
        s.tokens[#s.tokens + 1] = idkey(meta.progressToken)
        sess.tokens[idkey(meta.progressToken)] = s
      end
    end
  end
  s.left = nreq
  sess.posts[#sess.posts + 1] = s
  if mode == "sse" then
    h["Content-Type"], h["Cache-Control"] = "text/event-stream", "no-cache"
    r:stream(200, h)
  end
  for _, m in ipairs(list) do sess.peer:receive(m, "post", raws[m]) end
  self:_serve_stream(s, h)
end

-- A session for on_session: sess, or nil with the answer given.
function Endpoint:_start_session(r, stateless)
  local sess = self:_new_session(stateless)
  if not sess then
    fail(r, 500, -32603, "no session id (the random source failed)")
    return nil
  end
  local ok, err = pcall(self.on_session, sess)
  if not ok or not sess.peer then
    sess:close()
    fail(r, 500, -32603, "the session could not start: " .. tostring(ok and "on_session did not open it" or err))
    return nil
  end
  return sess
end

-- With stateless_key: the long-lived session of the POSTs whose key is
-- key (made at the first), or nil with the answer given.
function Endpoint:_shared_session(r, key, v)
  local sess = self.shared[key]
  if sess and not sess.closed then return sess end
  sess = self:_start_session(r, true)
  if not sess then return nil end
  sess.protocol_version, sess.shared_key, sess.orig, sess.n_ids = v, key, {}, 0
  self.shared[key] = sess
  return sess
end

-- A POST for a shared stateless session: its requests go in under ids of
-- the session's own (another client with the same key may use the same
-- ids at once); each answer goes back under the client's id. A
-- notifications/cancelled names the client's id: the session's is put in.
function Endpoint:_post_shared(r, list, batch, v)
  local ok, key = pcall(self.stateless_key, list, v, r.headers)
  if not ok then return fail(r, 500, -32603, "stateless_key failed: " .. tostring(key)) end
  local nreq = 0
  for _, m in ipairs(list) do if m.method ~= nil and m.id ~= nil then nreq = nreq + 1 end end
  if key == nil and nreq == 0 then
    -- notifications that name no client (a cancellation): every session
    -- takes them (only the one with the request named acts on a cancel)
    for _, sess in pairs(self.shared) do self:_shared_deliver(r, sess, list, batch, true) end
    return r:respond(202, {})
  end
  local sess = self:_shared_session(r, key == nil and "" or key, v)
  if not sess then return end
  return self:_shared_deliver(r, sess, list, batch)
end

function Endpoint:_shared_deliver(r, sess, list, batch, quiet)
  sess.last = sched.now()
  local mine = {}
  for i, m in ipairs(list) do
    local c = m
    if m.method ~= nil and m.id ~= nil then
      sess.n_ids = sess.n_ids + 1
      c = {}
      for k, x in pairs(m) do c[k] = x end
      c.id = "specula-sl-" .. sess.n_ids
      -- (an integer id past 2^53 keeps its text for the answer)
      local text = type(m.id) == "number" and (m.id >= 2 ^ 53 or m.id <= -2 ^ 53) and raws[m]
        and rawjson.member(raws[m], "id") or nil
      sess.orig[idkey(c.id)] = { client = m.id, client_text = text, own = c.id }
      raws[c] = raws[m]
    elseif m.method == "notifications/cancelled" and type(m.params) == "table" then
      for k, o in pairs(sess.orig) do
        if o.client == m.params.requestId and sess.routes[k] then
          c = { jsonrpc = "2.0", method = m.method, params = { requestId = o.own, reason = m.params.reason } }
        end
      end
    end
    mine[i] = c
  end
  if quiet then
    for i, m in ipairs(mine) do
      -- a cancellation only where it was mapped: the request is this session's
      local mapped = m ~= list[i]
      if m.method ~= "notifications/cancelled" or mapped then sess.peer:receive(m, "post", raws[m]) end
    end
    return
  end
  self:_deliver(r, sess, mine, batch, {})
end

-- 2026-07-28: a POST without a session, served by a session of its own
-- that ends with it (with stateless_key: by the shared session of its key).
function Endpoint:_post_stateless(r, list, batch, v)
  for _, m in ipairs(list) do
    local bad = stateless_mismatch(r, m, v)
    if bad then return r:respond(400, JSON_H, rpc_error(m.id, -32020, bad)) end
  end
  if self.stateless_key then return self:_post_shared(r, list, batch, v) end
  local sess = self:_start_session(r, true)
  if not sess then return end
  sess.protocol_version = v
  self:_deliver(r, sess, list, batch, {})
  sess:close()
  sess.peer:lost("the request has ended (stateless " .. v .. ")")
end

-- POST: messages for the session; requests are answered on this POST.
function Endpoint:_post(r)
  if not (accepts(r, "application/json") or accepts(r, "text/event-stream")) then
    return fail(r, 406, -32000, "Not Acceptable: Accept must include application/json and text/event-stream")
  end
  local list, batch = read_messages(r)
  if not list then return end
  local v = r.headers["mcp-protocol-version"]
  if v and M.STATELESS[v] and not r.headers["mcp-session-id"] and self.stateless then
    return self:_post_stateless(r, list, batch, v)
  end
  local init
  for _, m in ipairs(list) do if m.method == "initialize" then init = m end end
  if not init then
    local sess = self:_session_of(r)
    if sess then self:_deliver(r, sess, list, batch, {}) end
    return
  end
  if #list > 1 then
    return r:respond(400, JSON_H, rpc_error(nil, -32600, "Invalid Request: initialize must be sent alone"))
  end
  if r.headers["mcp-session-id"] then
    return r:respond(400, JSON_H, rpc_error(init.id, -32600, "Invalid Request: the session is already initialized"))
  end
  local sess = self:_start_session(r, false)
  if sess then self:_deliver(r, sess, list, batch, { ["Mcp-Session-Id"] = sess.session_id }) end
end

-- Write a stream's messages as they come until its requests are answered
-- (a POST), the session ends, or the client goes.
function Endpoint:_serve_stream(s, h)
  local sess, r = s.sess, s.req
  while true do
    if s.mode == "sse" then
      local q = s.queue
      s.queue = {}
      for _, m in ipairs(q) do r:write(sse_event(m)) end
    end
    if s.kind == "post" and s.left <= 0 then break end
    if sess.closed or r:gone() then break end
    r:wait()
  end
  s.over = true
  sess.last = sched.now()
  for _, k in ipairs(s.tokens or {}) do
    if sess.tokens[k] == s then sess.tokens[k] = nil end
  end
  for i, st in ipairs(sess.posts) do if st == s then table.remove(sess.posts, i); break end end
  if sess.get == s then sess.get = nil end
  if s.kind == "post" and s.left > 0 then
    -- unanswered: the answers cannot reach this client any more
    for _, id in ipairs(s.ids) do
      local key = idkey(id)
      if sess.routes[key] == s then
        sess.routes[key] = nil
        if sess.orig then sess.orig[key] = nil end
        if sess.bigid then sess.bigid[key] = nil end
        if not sess.closed and sess.peer then
          sess.peer:receive({ jsonrpc = "2.0", method = "notifications/cancelled",
                              params = { requestId = id, reason = "the client disconnected" } }, "post")
        end
      end
    end
  end
  if s.mode == "json" then
    if s.left > 0 then
      return r:respond(503, JSON_H, rpc_error(s.ids[1], -32603, "the session ended before the answer"))
    end
    h["Content-Type"] = "application/json"
    local body = s.batch and encode(setmetatable(s.replies, json.array_mt)) or encode(s.replies[1])
    return r:respond(200, h, body)
  end
  r:finish()
end

-- GET: the session's own stream of requests and notifications.
function Endpoint:_get(r)
  if not accepts(r, "text/event-stream") then
    return fail(r, 406, -32000, "Not Acceptable: Accept must include text/event-stream")
  end
  local sess = self:_session_of(r)
  if not sess then return end
  if sess.get and not sess.get.over then
    return fail(r, 409, -32000, "Conflict: only one GET stream per session")
  end
  local s = new_stream(sess, r, "get", "sse")
  sess.get = s
  s.queue, sess.backlog = sess.backlog, {}
  r:stream(200, { ["Content-Type"] = "text/event-stream", ["Cache-Control"] = "no-cache" })
  self:_serve_stream(s, {})
end

-- DELETE: the client ends its session.
function Endpoint:_delete(r)
  local sess = self:_session_of(r)
  if not sess then return end
  sess:close()
  if sess.peer then sess.peer:lost("the client ended the session (HTTP DELETE)") end
  r:respond(200, {})
end

-- Sessions with no stream open and no request for timeout_ms end (a
-- client that went without DELETE): a root task looks every so often.
function Endpoint:_sweep(timeout_ms)
  local every = math.max(10, math.min(1000, timeout_ms / 4))
  while true do
    sched.sleep(every)
    local now = sched.now()
    for _, all in ipairs({ self.sessions, self.shared }) do
      for _, sess in pairs(all) do
        if not (sess.get and not sess.get.over) and #sess.posts == 0 and now - sess.last > timeout_ms then
          sess:close()
          if sess.peer then sess.peer:lost(format("the session was idle for over %d ms", timeout_ms)) end
        end
      end
    end
  end
end

function Endpoint:_handle(r)
  if r.path ~= self.path then return r:respond(404, { ["Content-Type"] = "text/plain" }, "not found\n") end
  if not self:_check_origin(r) then return end
  if r.method == "POST" then return self:_post(r)
  elseif r.method == "GET" then return self:_get(r)
  elseif r.method == "DELETE" then return self:_delete(r) end
  fail(r, 405, -32000, "Method Not Allowed", { Allow = "GET, POST, DELETE" })
end

local function check_opts(o)
  if type(o) ~= "table" then return nil, "EINVAL: serve_http.listen: an options table expected" end
  if type(o.on_session) ~= "function" then return nil, "EINVAL: serve_http.listen: on_session must be a function" end
  if o.port ~= nil and (type(o.port) ~= "number" or o.port < 0 or o.port > 65535 or o.port % 1 ~= 0) then
    return nil, "EINVAL: serve_http.listen: port must be an integer from 0 to 65535, got " .. tostring(o.port)
  end
  if o.host ~= nil and (type(o.host) ~= "string" or o.host == "") then
    return nil, "EINVAL: serve_http.listen: host must be a non-empty string"
  end
  if o.path ~= nil and (type(o.path) ~= "string" or o.path:sub(1, 1) ~= "/") then
    return nil, "EINVAL: serve_http.listen: path must start with '/', got " .. tostring(o.path)
  end
  if o.session_timeout_ms ~= nil and (type(o.session_timeout_ms) ~= "number" or o.session_timeout_ms <= 0) then
    return nil, "EINVAL: serve_http.listen: session_timeout_ms must be a number of ms > 0, got "
      .. tostring(o.session_timeout_ms)
  end
  if o.stateless_key ~= nil and type(o.stateless_key) ~= "function" then
    return nil, "EINVAL: serve_http.listen: stateless_key must be a function(messages, version, headers)"
  end
  if o.origins ~= nil and type(o.origins) ~= "table" then
    return nil, "EINVAL: serve_http.listen: origins must be a list of Origin values"
  end
  return true
end

-- listen{ host = "127.0.0.1", port = 0, path = "/mcp", on_session =
-- function(t) end, allow_remote = false, origins = nil, json_response =
-- false, stateless = true, stateless_key = nil, session_timeout_ms = nil
-- (never), max_body_bytes, max_conns, max_pending_bytes, idle_timeout_ms,
-- warn } -> listener { port(), url(), close(), sessions(), conns() } | nil,
-- err. stateless = false: a POST at 2026-07-28 without a session is
-- refused like any other (400). stateless_key = function(messages,
-- version, headers) -> key: the stateless POSTs of one key are served by
-- one long-lived session (on_session once per key; it ends when idle for
-- session_timeout_ms, or at close) instead of one session each.
function M.listen(o)
  local ok, err = check_opts(o)
  if not ok then return nil, err end
  local host = o.host or "127.0.0.1"
  local loopback = is_loopback(host)
  if not loopback and not o.allow_remote then
    return nil, format("EPERM: serve_http.listen: %s is not a loopback address: give allow_remote = true "
      .. "to serve other hosts", host)
  end
  local warn = o.warn or function(msg) output.stderr("specula: warning: ", msg, "\n") end
  local ep = setmetatable({ path = o.path or "/mcp", on_session = o.on_session, sessions = {}, loopback = loopback,
                            origins = o.origins, json_response = o.json_response,
                            stateless = o.stateless ~= false, stateless_key = o.stateless_key, shared = {} },
                       Endpoint)
  local srv, lerr = M.http_listen { host = host, port = o.port or 0, max_body_bytes = o.max_body_bytes,
                                    max_conns = o.max_conns, max_pending_bytes = o.max_pending_bytes,
                                    idle_timeout_ms = o.idle_timeout_ms, warn = warn,
                                    handler = function(r) ep:_handle(r) end }
  if not srv then return nil, lerr end
  if not loopback then
    warn(format("serving MCP on %s port %d, reachable from other hosts (no authentication)", host, srv.port()))
  end
  local L = { endpoint = ep }
  if o.session_timeout_ms then L.sweeper = spawn_root(function() ep:_sweep(o.session_timeout_ms) end) end
  function L:port() return srv.port() end
  function L:url()
    local h = host:find(":", 1, true) and ("[" .. host .. "]") or host
    return format("http://%s:%d%s", h, srv.port() or 0, ep.path)
  end
  function L:conns() return srv.conns() end
  function L:sessions()
    local n = 0
    for _ in pairs(ep.sessions) do n = n + 1 end
    return n
  end
  function L:close()
    if self.sweeper and not self.sweeper:done() then C.sp_task_cancel(self.sweeper.ptr) end
    for _, all in ipairs({ ep.sessions, ep.shared }) do
      for _, sess in pairs(all) do
        sess:close()
        if sess.peer then sess.peer:lost("the server closed") end
      end
    end
    srv.close()
  end
  return L
end

return M
