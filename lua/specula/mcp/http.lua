-- specula.mcp.http: the Streamable HTTP transport (specula.mcp.transport
-- describes the interface). Each message is POSTed; the answer to a
-- request comes back on the POST as JSON or as an SSE stream (resumed on
-- the GET stream with Last-Event-ID when it ends early, SEP-1699). The
-- server's GET stream carries what belongs to no request (its own requests,
-- list changes) for as long as the session lives. With auth a 401, or a
-- 403 asking for more scope, runs the authorization (specula.mcp.auth) and
-- sends the request again.
--
-- At 2026-07-28 (stateless) there is no session: no Mcp-Session-Id, no
-- GET stream, no DELETE; each POST carries MCP-Protocol-Version and the
-- standard headers Mcp-Method (and Mcp-Name: the tool or prompt name, the
-- resource URI) beside any Mcp-Param headers the session adds for a tool.
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"
local json = require "specula.json"
local secrets = require "specula.secrets"
local transport = require "specula.mcp.transport"
local ffi, C = core.ffi, core.C

local tostring, tonumber, pairs, ipairs, type = tostring, tonumber, pairs, ipairs, type
local format, concat = string.format, table.concat
local co_yield = sched.yield   -- the raw yield (sched guards the global one)
local encode, decode = json.encode, json.decode
local scrub = secrets.scrub
local excerpt, spawn_root = transport.excerpt, transport.spawn_root

local M = {}

local PENDING = tonumber(C.SP_RPC_PENDING)

local Http = { kind = "http", restartable = false, answers_inline = true, send_waits = true,
               roundtrip = transport.roundtrip }
Http.__index = Http

-- o: { url, headers, name, auth (a specula.mcp.auth flow or nil),
-- timeout_ms, init_timeout_ms, max_message_bytes, max_reconnects,
-- default_retry_ms, listen }
function M.new(o)
  return setmetatable({
    url = o.url, headers = o.headers, name = o.name, where = "mcp server '" .. o.name .. "'", auth = o.auth,
    timeout_ms = o.timeout_ms, init_timeout_ms = o.init_timeout_ms, max_message_bytes = o.max_message_bytes,
    max_reconnects = o.max_reconnects, default_retry_ms = o.default_retry_ms, listen = o.listen, starts = 0,
  }, Http)
end

function Http:_http_headers(extra)
  local h = {}
  for k, v in pairs(self.headers) do h[k] = v end
  h["Content-Type"] = "application/json"
  h["Accept"] = "application/json, text/event-stream"
  if self.session_id then h["Mcp-Session-Id"] = self.session_id end
  if self.protocol_version then h["MCP-Protocol-Version"] = self.protocol_version end
  for k, v in pairs(extra or {}) do h[k] = v end
  return h
end

local function header_lines(h)
  local lines = {}
  for k, v in pairs(h) do lines[#lines + 1] = k .. ": " .. tostring(v) end
  return concat(lines, "\n")
end

function Http:_http_error(res, what)
  local body = res.read_all and res:read_all() or res.body or ""
  if res.close then res:close() end
  if res.status == 404 and self.session_id then
    return format("%s: %s: HTTP 404: the session has expired", self.where, what)
  end
  local hint = ""
  if res.status == 401 and not self.auth then
    hint = " (the server wants authorization: give auth = { ... } to specula.mcp.connect)"
  end
  return scrub(format("%s: %s: HTTP %d%s: %s", self.where, what, res.status, hint, excerpt(body or "", 200)))
end

-- An HTTP request to the server: the session headers, and with auth the
-- access token; a 401, or a 403 asking for more scope, runs the
-- authorization (specula.mcp.auth) and sends the request again. o: method,
-- body, stream, extra (headers), accept, timeout (a function giving the ms
-- left), live (past any wrapper of specula.http: never recorded). -> res (any status) |
-- nil, err
function Http:_send(o)
  local http = require "specula.http"
  local st = {}
  while true do
    local h = self:_http_headers(o.extra)
    if o.body == nil then h["Content-Type"] = nil end
    if o.accept then h["Accept"] = o.accept end
    local sent
    if self.auth then
      sent = self.auth:token()
      if sent then self.auth:authorize_request(h, o.method, self.url, sent) end
    end
    local res, err = http.request { method = o.method, url = self.url, headers = h, body = o.body, stream = o.stream,
                                    timeout_ms = o.timeout and o.timeout() or self.timeout_ms,
                                    __live = o.live }
    if not res then return nil, scrub(err) end
    if not self.auth or (res.status ~= 401 and res.status ~= 403) then return res end
    if res.close then res:close() end
    local ok, aerr = self.auth:challenge(res.status, res.headers["www-authenticate"], st, sent, res.headers)
    if not ok then
      self.auth_failed = true
      return nil, aerr, "auth"
    end
  end
end

-- POST a message that gets no response (a notification or our answer).
function Http:_post_oneway(text)
  local res, err = self:_send { method = "POST", body = text }
  if not res then return nil, err end
  if res.status >= 300 then return nil, self:_http_error(res, "POST") end
  return true
end

function Http:open(peer)
  self.peer = peer
  self.starts = self.starts + 1
  return true
end

-- The standard headers of a message at 2026-07-28 (nil before): Mcp-Method,
-- and Mcp-Name for the methods that name something; with extra on top.
function Http:_std_headers(msg, extra)
  if not self.stateless or type(msg) ~= "table" or type(msg.method) ~= "string" then return extra end
  local h = { ["Mcp-Method"] = msg.method }
  local p = type(msg.params) == "table" and msg.params or {}
  local nm
  if msg.method == "tools/call" or msg.method == "prompts/get" then nm = p.name
  elseif msg.method == "resources/read" then nm = p.uri end
  if type(nm) == "string" then h["Mcp-Name"] = require("specula.mcp.client").header_value(nm) end
  for k, v in pairs(extra or {}) do h[k] = v end
  return h
end

function Http:send(msg)
  local text, eerr = encode(msg)
  if not text then return nil, eerr end
  local res, err = self:_send { method = "POST", body = text, extra = self:_std_headers(msg) }
  if not res then return nil, err end
  if res.status >= 300 then return nil, self:_http_error(res, "POST") end
  return true
end

-- Read one SSE stream, handing each message to the session, until x is
-- answered or the stream ends. Returns the last event id and retry seen.
function Http:_read_sse(res, x, state)
  local sse = require "specula.sse"
  local peer = self.peer
  local r = sse.reader(res, { max_event_bytes = self.max_message_bytes })
  while C.sp_rpc_state(x.rpc) == PENDING do
    local ev, err = r:next()
    if ev == nil then
      r:close()
      return nil, err
    end
    if ev.id ~= "" then state.last_id = ev.id end
    if ev.retry then state.retry = ev.retry end
    if ev.data:find("%S") and (ev.event == "message" or ev.event == "") then
      local msg, derr = decode(ev.data)
      if msg == nil then
        peer:malformed(format("%s: malformed JSON in an SSE event (%s): %s", self.where, tostring(derr),
          excerpt(ev.data)))
      else
        peer:receive(msg, "sse")
      end
    end
  end
  r:close()
  return true
end

-- A request over Streamable HTTP, in the calling task: the cancel POST
-- armed, the request POSTed and its answer read.
function Http:request(x)
  local h = self:_http_headers(self:_std_headers({ method = "notifications/cancelled" }))
  local tok = self.auth and self.auth.entry.tokens
  if tok then self.auth:authorize_request(h, "POST", self.url, tok.access_token) end
  local hdr = header_lines(h)
  C.sp_rpc_cancel_post(x.rpc, self.url, hdr, x.cancel, #x.cancel)
  local peer, timeout_ms = self.peer, x.timeout_ms
  local t0 = sched.now()
  local function left()
    if not timeout_ms or timeout_ms <= 0 then return 0 end
    local l = timeout_ms - (sched.now() - t0)
    return l > 1 and l or 1
  end
  local res, err = self:_send { method = "POST", body = x.text, stream = true, timeout = left,
                                extra = self:_std_headers(x.msg, x.headers) }
  if not res then return nil, err end
  local ctype = (res.headers["content-type"] or ""):lower()
  if res.status >= 400 and res.status ~= 401 and not (res.status == 404 and self.session_id)
     and ctype:find("application/json", 1, true) then
    -- a JSON-RPC error to this very request (2026-07-28 answers with one
    -- and a 4xx: an unsupported version, a header mismatch): the session
    -- gets it as the request's error, with its code and data
    local body = res:read_all() or ""
    local msg = decode(body)
    if type(msg) == "table" and msg.error ~= nil and msg.id == x.id then
      peer:receive(msg, "json")
      return true
    end
    return nil, self:_http_error({ status = res.status, body = body }, x.what)
  end
  if res.status >= 300 then return nil, self:_http_error(res, x.what) end
  local sid = res.headers["mcp-session-id"]
  if sid and sid ~= "" and not self.stateless then self.session_id = sid end
  if ctype:find("text/event-stream", 1, true) then
    local state = { retry = nil, last_id = nil }
    local attempts = 0
    while true do
      local ok, rerr = self:_read_sse(res, x, state)
      if C.sp_rpc_state(x.rpc) ~= PENDING then return true end
      if not ok and rerr and rerr:find("ETIMEDOUT", 1, true) then return nil, rerr end
      -- the stream ended first: resume on the GET stream after the
      -- server's retry delay, from the last event id (SEP-1699)
      if not state.last_id or attempts >= self.max_reconnects then
        return nil, format("%s: %s: the response stream ended before the response%s",
          self.where, x.what, rerr and (" (" .. rerr .. ")") or "")
      end
      attempts = attempts + 1
      peer.st.reconnects = peer.st.reconnects + 1
      sched.sleep(state.retry or self.default_retry_ms)
      if C.sp_rpc_state(x.rpc) ~= PENDING then return true end
      res, err = self:_send { method = "GET", extra = { ["Last-Event-ID"] = state.last_id },
                              accept = "text/event-stream", stream = true, timeout = left }
      if not res then return nil, err end
      if res.status >= 300 then return nil, self:_http_error(res, x.what .. " (resuming the stream)") end
    end
  elseif ctype:find("application/json", 1, true) then
    local body, rerr = res:read_all()
    if not body then return nil, rerr end
    local msg, derr = decode(body)
    if msg == nil then
      peer.st.malformed = peer.st.malformed + 1
      return nil, format("%s: %s: malformed JSON response (%s): %s", self.where, x.what, tostring(derr), excerpt(body))
    end
    if type(msg) == "table" and msg[1] ~= nil then
      for _, m in ipairs(msg) do peer:receive(m, "json") end
    else
      peer:receive(msg, "json")
    end
    return true
  end
  res:close()
  return nil, format("%s: %s: unexpected response (HTTP %d, Content-Type '%s')", self.where, x.what,
    res.status, excerpt(ctype, 60))
end

-- The server's GET stream (requests and notifications that belong to no
-- call: elicitations, sampling, list changes), read by a root task for as
-- long as the session lives; resumed after the server's retry with
-- Last-Event-ID. gate (an sp_rpc the connecting task waits on) is completed
-- once the stream is open or refused, so no early request is lost.
function Http:_listen_loop(gate)
  local sse = require "specula.sse"
  local peer = self.peer
  local st = peer.st
  local last_id, retry, fails = nil, nil, 0
  local function opened(status)
    st.listen_status = status
    if gate then C.sp_rpc_complete(gate); gate = nil end
  end
  while not self.closed do
    local res, err, kind = self:_send { method = "GET", accept = "text/event-stream", stream = true, live = true,
                                        extra = last_id and { ["Last-Event-ID"] = last_id } or nil,
                                        timeout = function() return 0 end }
    if not res and kind == "auth" then
      -- not authorized: trying again would run the authorization again
      opened(401)
      peer:warn(self.where .. ": the GET stream: " .. tostring(err))
      return
    elseif not res then
      fails = fails + 1
      opened(0)
      if fails > self.max_reconnects then
        peer:warn(self.where .. ": the GET stream failed " .. fails .. " times, given up: " .. tostring(err))
        return
      end
    elseif res.status ~= 200 or not (res.headers["content-type"] or ""):lower():find("text/event-stream", 1, true) then
      -- 405 (or another 4xx): the server offers no such stream
      res:close()
      opened(res.status)
      if res.status >= 500 and not self.closed then
        peer:warn(format("%s: the GET stream was refused (HTTP %d)", self.where, res.status))
      end
      return
    else
      opened(200)
      st.listens = st.listens + 1
      local r = sse.reader(res, { max_event_bytes = self.max_message_bytes })
      while true do
        local ev = r:next()
        if ev == nil then break end
        fails = 0
        if ev.id ~= "" then last_id = ev.id end
        if ev.retry then retry = ev.retry end
        if ev.data:find("%S") and (ev.event == "message" or ev.event == "") then
          local msg, derr = decode(ev.data)
          if msg == nil then
            peer:malformed(format("%s: malformed JSON on the GET stream (%s): %s", self.where, tostring(derr),
              excerpt(ev.data)))
          else
            peer:receive(msg, "get")
          end
        end
      end
      r:close()
      fails = fails + 1
      if fails > self.max_reconnects then return end
    end
    if self.closed then return end
    sched.sleep(retry or self.default_retry_ms)
  end
end

-- Open the GET stream and wait (bounded) until it is open or refused.
function Http:_listen()
  local me = sched.current("specula.mcp: GET stream")
  local gate = C.sp_rpc_new(core.ctx, me, self.init_timeout_ms)
  if gate == nil then return end
  gate = ffi.gc(gate, C.sp_rpc_free)
  self.listener = spawn_root(function()
    local ok, err = pcall(self._listen_loop, self, gate)
    -- whatever happened, the connecting task goes on
    if C.sp_rpc_state(gate) == PENDING then C.sp_rpc_complete(gate) end
    if not ok then self.peer:warn(self.where .. ": the GET stream reader failed: " .. tostring(err)) end
  end)
  if not self.listener then return end
  while C.sp_rpc_wait(gate, me) == 0 do co_yield() end
end

-- The negotiated version goes with every request from now on (nil: none,
-- as before a handshake).
function Http:set_version(v)
  self.protocol_version = v
  self.stateless = v ~= nil and require("specula.mcp.client").STATELESS[v] or nil
end

-- The session is up: with listen, open the GET stream (a stateless
-- server has none).
function Http:ready()
  if self.listen and not self.listener and not self.stateless then self:_listen() end
end

-- Nothing to release at once: no process, and requests end with their tasks.
function Http:abort() end

-- Stop the GET stream and end the session on the server (DELETE).
function Http:close()
  self.closed = true
  if self.listener and not self.listener:done() then C.sp_task_cancel(self.listener.ptr) end
  if self.session_id and sched.in_task() then
    local res = self:_send { method = "DELETE", timeout = function() return 5000 end }
    self.peer.st.deleted = res and res.status or 0
  end
end

return M
