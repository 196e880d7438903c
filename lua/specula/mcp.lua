-- specula.mcp: a Model Context Protocol client (JSON-RPC 2.0) over stdio
-- (a child process, engine/sp_proc.c) or Streamable HTTP (specula.http).
--
--   local c, err = specula.mcp.connect{ command = { "node", "server.js" }, env = {...}, cwd = ...,
--                                       name = "fs", max_restarts = 3, timeout_ms = 60000 }
--   local c, err = specula.mcp.connect{ url = "http://127.0.0.1:3000/mcp", headers = {...} }
--   c:list_tools()                      -> { {name, description, inputSchema, ...}, ... } | nil, err
--   c:call(name, args, { timeout_ms, on_progress }) -> { content, structuredContent, isError } | nil, err
--   c:ping(), c:request(method, params, opts), c:stats(), c:close()
--
-- A call whose task is cancelled (a discarded speculative thread, an
-- orphaned prediction) sends notifications/cancelled with its request id at
-- once, from C (the task never runs again); the late response is dropped.
-- Errors are values and name the server; a stdio server that dies fails its
-- calls with its last stderr lines, and the next call restarts it (at most
-- max_restarts times).
local core = require "specula.core"
local sched = require "specula.sched"
local json = require "specula.json"
local ffi = core.ffi
local C = core.C

local type, tostring, tonumber, pairs, ipairs, setmetatable, error, pcall, select =
  type, tostring, tonumber, pairs, ipairs, setmetatable, error, pcall, select
local format, concat = string.format, table.concat
local co_yield = coroutine.yield
local encode, decode, JNULL = json.encode, json.decode, json.null

local M = {}

M.PROTOCOL_VERSIONS = { "2025-11-25", "2025-06-18", "2025-03-26" }
local SUPPORTED = {}
for _, v in ipairs(M.PROTOCOL_VERSIONS) do SUPPORTED[v] = true end
M.CLIENT_INFO = { name = "specula", version = ffi.string(C.sp_version()) }

local PENDING = tonumber(C.SP_RPC_PENDING)
local RPC_DONE = tonumber(C.SP_RPC_DONE)
local TIMEDOUT = tonumber(C.SP_RPC_TIMEDOUT)

local lenp = ffi.new("size_t[1]")
local statusp, sigp = ffi.new("long[1]"), ffi.new("int[1]")
local prefixp = ffi.new("const char *[1]")

local function pack(...) return { n = select("#", ...), ... } end

local function obj(t) return setmetatable(t or {}, json.object_mt) end

-- A task with no parent: readers and restarts must outlive the (possibly
-- speculative) task that happened to need them.
local function spawn_root(fn)
  local p = C.sp_task_new(core.ctx, nil)
  if p == nil then return nil end
  local t = setmetatable({ ptr = ffi.gc(p, C.sp_task_release), id = C.sp_task_id(p) }, sched.Task)
  sched.co_table[t.id] = coroutine.create(function()
    local r = pack(xpcall(fn, sched.on_error))
    t.results = r
    if not r[1] then
      local msg = tostring(r[2])
      C.sp_task_set_error(t.ptr, msg, #msg)
    end
  end)
  return t
end

-- The last lines of a stderr tail, one line.
local function tail_lines(s, n)
  s = s:gsub("\r", "")
  local lines = {}
  for l in s:gmatch("[^\n]+") do
    if l:find("%S") then lines[#lines + 1] = l end
  end
  local from = #lines - (n or 3) + 1
  if from < 1 then from = 1 end
  local out = concat(lines, " | ", from, #lines)
  if #out > 600 then out = "..." .. out:sub(-600) end
  return out
end

local function excerpt(s, n)
  n = n or 80
  s = tostring(s):gsub("[%c]", " ")
  if #s > n then return s:sub(1, n) .. "..." end
  return s
end

local Client = {}
Client.__index = Client

function Client:_warn(msg)
  self.errors[#self.errors + 1] = msg
  if #self.errors > 50 then table.remove(self.errors, 1) end
  if not self.quiet then io.stderr:write("specula: warning: ", msg, "\n") end
end

function Client:_where() return "mcp server '" .. self.name .. "'" end

-- ---- message handling (both transports) ---------------------------------------

-- Send a JSON-RPC message that needs no answer (a response or a notification).
function Client:_send_oneway(msg)
  local text = assert(encode(msg))
  if self.transport == "stdio" then
    local p = self.proc
    if p == nil then return nil, "not running" end
    local err, errlen = core.errbuf()
    if C.sp_proc_write(p, text .. "\n", #text + 1, err, errlen) ~= 0 then return nil, ffi.string(err) end
    return true
  end
  -- HTTP: from a task of its own, so a reader never waits on it
  local t = spawn_root(function() self:_post_oneway(text) end)
  return t ~= nil
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
    -- a request from the server: ping is answered, anything else refused
    st.server_requests = st.server_requests + 1
    if method == "ping" then
      self:_send_oneway({ jsonrpc = "2.0", id = id, result = obj() })
    else
      self:_send_oneway({ jsonrpc = "2.0", id = id, error = { code = -32601,
        message = "Method not found: " .. tostring(method) .. " (the specula client does not support it)" } })
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
    e.err = format("%s: %s: error %s: %s", self:_where(), e.what, tostring(er.code),
      tostring(er.message))
  else
    e.result = msg.result
  end
  C.sp_rpc_complete(e.rpc)
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

-- ---- stdio transport ----------------------------------------------------------------

local function env_list(env)
  if env == nil then return nil end
  local list = {}
  -- the child inherits PATH and HOME unless given: node needs them
  local seen = {}
  for k, v in pairs(env) do
    if type(k) ~= "string" or k:find("[=%z]") then error("specula.mcp.connect: env keys must be names", 3) end
    list[#list + 1] = k .. "=" .. tostring(v)
    seen[k] = true
  end
  for _, k in ipairs({ "PATH", "HOME" }) do
    if not seen[k] and os.getenv(k) then list[#list + 1] = k .. "=" .. os.getenv(k) end
  end
  return list
end

function Client:_spawn()
  local cmd = self.command
  local n = #cmd
  local args = ffi.new("const char *[?]", n + 1)
  for i = 1, n do args[i - 1] = cmd[i] end
  args[n] = nil
  local o = ffi.new("sp_proc_opts")
  o.file = cmd[1]
  o.args = args
  local envc
  if self.env_list then
    envc = ffi.new("const char *[?]", #self.env_list + 1)
    for i, s in ipairs(self.env_list) do envc[i - 1] = s end
    envc[#self.env_list] = nil
    o.env = envc
  end
  o.cwd = self.cwd
  o.max_line_bytes = self.max_message_bytes
  local label = "mcp server '" .. self.name .. "':"
  o.name = label
  local err, errlen = core.errbuf()
  local p = C.sp_proc_spawn(core.ctx, o, err, errlen)
  local keep = { cmd, args, envc, label, self.env_list } -- alive across the call
  if p == nil then return nil, ffi.string(err) end
  keep = nil
  self.proc = ffi.gc(p, function(q) C.sp_proc_close(q, 2000) end)
  self.pid = C.sp_proc_pid(p)
  self.starts = self.starts + 1
  return true
end

-- Release the process object now (the child is killed and reaped from the loop).
function Client:_drop_proc()
  local p = self.proc
  if p ~= nil then
    self.proc = nil
    ffi.gc(p, nil)
    C.sp_proc_close(p, 2000)
  end
end

-- Why the server ended, with its last stderr lines.
function Client:_exit_message(p)
  local why
  if C.sp_proc_exit(p, statusp, sigp) == 1 then
    if sigp[0] ~= 0 then why = "was killed by signal " .. tonumber(sigp[0])
    else why = "exited with status " .. tonumber(statusp[0]) end
  else
    why = "closed its output"
  end
  local tail = tail_lines(ffi.string(C.sp_proc_stderr(p, lenp), lenp[0]), 3)
  return format("server %s (pid %d) %s%s", excerpt(concat(self.command, " "), 120), self.pid or 0, why,
    tail ~= "" and ("; last stderr: " .. tail) or "; no stderr output")
end

-- The reader: one root task per running process.
function Client:_read_loop(p, gen)
  local me = sched.current("mcp reader")
  local st = self.st
  while true do
    local s = C.sp_proc_line(p, lenp)
    if s ~= nil then
      local n = tonumber(lenp[0])
      local line = ffi.string(s, n)
      C.sp_proc_consume(p, n)
      if line:find("%S") then
        local msg, derr = decode(line)
        if msg == nil then
          st.malformed = st.malformed + 1
          self:_warn(format("%s: malformed JSON on stdout (%s): %s", self:_where(), tostring(derr), excerpt(line)))
        else
          self:_handle(msg, "stdout")
        end
      end
    else
      local nover = C.sp_proc_oversized(p, prefixp, lenp)
      if nover > 0 then
        st.oversized = st.oversized + nover
        local pre = ffi.string(prefixp[0], lenp[0])
        local msg = format("message larger than max_message_bytes (%d) dropped", self.max_message_bytes)
        self:_warn(self:_where() .. ": " .. msg)
        -- fail the request it answered, if its id is in the first bytes
        local id = tonumber(pre:match('"id"%s*:%s*(%-?%d+)'))
        local e = id and self.pending[id]
        if e and C.sp_rpc_state(e.rpc) == PENDING then
          self.pending[id] = nil
          e.err = self:_where() .. ": " .. e.what .. ": response " .. msg
          C.sp_rpc_complete(e.rpc)
        end
      elseif C.sp_proc_finished(p) == 1 then
        break
      elseif C.sp_proc_wait(p, me) == 0 then
        co_yield()
      end
    end
  end
  -- the server is gone
  local why = self:_exit_message(p)
  if self.gen == gen then
    self.last_exit = why
    self.state = self.closed and "closed" or "dead"
    st.exits = st.exits + 1
    self:_drop_proc()
    self:_fail_all(why)
  end
end

-- Start (or restart) the server and run the handshake, in a root task.
function Client:_start_stdio()
  local ok, err = self:_spawn()
  if not ok then return nil, err end
  self.gen = self.gen + 1
  local gen, p = self.gen, self.proc
  self.reader = spawn_root(function() self:_read_loop(p, gen) end)
  return self:_initialize()
end

-- ---- HTTP transport ------------------------------------------------------------------

function Client:_http_headers(extra)
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

function Client:_http_error(res, what)
  local body = res.read_all and res:read_all() or res.body or ""
  if res.close then res:close() end
  if res.status == 404 and self.session_id then
    return format("%s: %s: HTTP 404: the session has expired", self:_where(), what)
  end
  return format("%s: %s: HTTP %d: %s", self:_where(), what, res.status, excerpt(body or "", 200))
end

-- POST a message that gets no response (a notification or our answer).
function Client:_post_oneway(text)
  local http = require "specula.http"
  local res, err = http.request { method = "POST", url = self.url, headers = self:_http_headers(),
                                  body = text, timeout_ms = self.timeout_ms }
  if not res then return nil, err end
  if res.status >= 300 then return nil, self:_http_error(res, "POST") end
  return true
end

-- Read one SSE stream, handing each message to _handle, until our entry is
-- answered or the stream ends. Returns the last event id and retry seen.
function Client:_read_sse(res, e, state)
  local sse = require "specula.sse"
  local r = sse.reader(res, { max_event_bytes = self.max_message_bytes })
  while C.sp_rpc_state(e.rpc) == PENDING do
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
        self.st.malformed = self.st.malformed + 1
        self:_warn(format("%s: malformed JSON in an SSE event (%s): %s", self:_where(), tostring(derr), excerpt(ev.data)))
      else
        self:_handle(msg, "sse")
      end
    end
  end
  r:close()
  return true
end

-- A request over Streamable HTTP, in the calling task.
function Client:_http_request(e, text, timeout_ms)
  local http = require "specula.http"
  local t0 = sched.now()
  local function left()
    if not timeout_ms or timeout_ms <= 0 then return 0 end
    local l = timeout_ms - (sched.now() - t0)
    return l > 1 and l or 1
  end
  local res, err = http.request { method = "POST", url = self.url, headers = self:_http_headers(),
                                  body = text, stream = true, timeout_ms = left() }
  if not res then return nil, err end
  local ctype = (res.headers["content-type"] or ""):lower()
  if res.status >= 300 then return nil, self:_http_error(res, e.what) end
  local sid = res.headers["mcp-session-id"]
  if sid and sid ~= "" then self.session_id = sid end
  if ctype:find("text/event-stream", 1, true) then
    local state = { retry = nil, last_id = nil }
    local attempts = 0
    while true do
      local ok, rerr = self:_read_sse(res, e, state)
      if C.sp_rpc_state(e.rpc) ~= PENDING then return true end
      if not ok and rerr and rerr:find("ETIMEDOUT", 1, true) then return nil, rerr end
      -- the stream ended first: resume on the GET stream after the
      -- server's retry delay, from the last event id (SEP-1699)
      if not state.last_id or attempts >= self.max_reconnects then
        return nil, format("%s: %s: the response stream ended before the response%s",
          self:_where(), e.what, rerr and (" (" .. rerr .. ")") or "")
      end
      attempts = attempts + 1
      self.st.reconnects = self.st.reconnects + 1
      sched.sleep(state.retry or self.default_retry_ms)
      if C.sp_rpc_state(e.rpc) ~= PENDING then return true end
      local h = self:_http_headers({ ["Last-Event-ID"] = state.last_id })
      h["Content-Type"] = nil
      h["Accept"] = "text/event-stream"
      res, err = http.request { method = "GET", url = self.url, headers = h, stream = true, timeout_ms = left() }
      if not res then return nil, err end
      if res.status >= 300 then return nil, self:_http_error(res, e.what .. " (resuming the stream)") end
    end
  elseif ctype:find("application/json", 1, true) then
    local body, rerr = res:read_all()
    if not body then return nil, rerr end
    local msg, derr = decode(body)
    if msg == nil then
      self.st.malformed = self.st.malformed + 1
      return nil, format("%s: %s: malformed JSON response (%s): %s", self:_where(), e.what, tostring(derr), excerpt(body))
    end
    if type(msg) == "table" and msg[1] ~= nil then
      for _, m in ipairs(msg) do self:_handle(m, "json") end
    else
      self:_handle(msg, "json")
    end
    return true
  end
  res:close()
  return nil, format("%s: %s: unexpected response (HTTP %d, Content-Type '%s')", self:_where(), e.what,
    res.status, excerpt(ctype, 60))
end

-- ---- requests --------------------------------------------------------------------------

function Client:_cancel_line(id)
  return assert(encode({ jsonrpc = "2.0", method = "notifications/cancelled",
                         params = { requestId = id, reason = "cancelled by specula (task cancelled or timed out)" } }))
end

-- Send a request and wait for its response: result | nil, err. Through
-- the cassette when one is open (--record / --replay-io).
function Client:_rpc(method, params, opts)
  local cassette = require "specula.cassette"
  if cassette.state then
    return cassette.mcp(self, method, params, opts, function() return self:_rpc_live(method, params, opts) end)
  end
  return self:_rpc_live(method, params, opts)
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
  local text = assert(encode({ jsonrpc = "2.0", id = id, method = method, params = params }))
  local rpc = C.sp_rpc_new(core.ctx, me, self.transport == "stdio" and timeout_ms or 0)
  if rpc == nil then return nil, self:_where() .. ": out of memory" end
  e.rpc = ffi.gc(rpc, C.sp_rpc_free)
  local cancel = self:_cancel_line(id)
  self.st.requests = self.st.requests + 1
  self.pending[id] = e
  if self.transport == "stdio" then
    local p = self.proc
    if p == nil then
      self.pending[id] = nil
      return nil, self:_where() .. ": " .. what .. ": not running"
    end
    C.sp_rpc_cancel_write(e.rpc, p, cancel .. "\n", #cancel + 1)
    local err, errlen = core.errbuf()
    if C.sp_proc_write(p, text .. "\n", #text + 1, err, errlen) ~= 0 then
      self.pending[id] = nil
      return nil, self:_where() .. ": " .. what .. ": " .. ffi.string(err)
    end
    while C.sp_rpc_wait(e.rpc, me) == 0 do co_yield() end
  else
    local hdr = header_lines(self:_http_headers())
    C.sp_rpc_cancel_post(e.rpc, self.url, hdr, cancel, #cancel)
    e.live = true
    local ok, err = self:_http_request(e, text, timeout_ms)
    e.live = nil
    if not ok and C.sp_rpc_state(e.rpc) == PENDING then
      self.pending[id] = nil
      if err and err:find("ETIMEDOUT", 1, true) then
        C.sp_rpc_cancel(e.rpc)   -- tell the server: notifications/cancelled
        self.st.timeouts = self.st.timeouts + 1
        return nil, format("%s: %s: no response within %d ms", self:_where(), what, timeout_ms or 0)
      end
      C.sp_rpc_complete(e.rpc)
      return nil, err
    end
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

function Client:_initialize()
  local r, err = self:_rpc("initialize", {
    protocolVersion = self.want_version,
    capabilities = obj(),
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
  local note = { jsonrpc = "2.0", method = "notifications/initialized" }
  local ok, serr
  if self.transport == "stdio" then ok, serr = self:_send_oneway(note)
  else ok, serr = self:_post_oneway(assert(encode(note))) end
  if not ok then return nil, self:_where() .. ": notifications/initialized: " .. tostring(serr) end
  self.state = "ready"
  return true
end

-- Make sure the server runs: starts or restarts it (stdio), once at a time.
function Client:_ready()
  if self.closed then return nil, self:_where() .. ": the client is closed" end
  if self.state == "ready" then return true end
  if self.transport ~= "stdio" then return nil, self:_where() .. ": not connected" end
  if self.state == "dead" then
    if self.starts > self.max_restarts then
      return nil, format("%s: gave up after %d restart(s) (max_restarts = %d); last: %s", self:_where(),
        self.starts - 1, self.max_restarts, tostring(self.last_exit))
    end
    self.st.restarts = self.st.restarts + 1
  end
  if not self.starter or self.starter:done() then
    self.state = "starting"
    self.starter = spawn_root(function()
      local ok, err = self:_start_stdio()
      if not ok then
        if self.state ~= "closed" then self.state = "dead" end
        self.last_exit = err
        self:_drop_proc()
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

-- The server's tools as it describes them, following pagination.
function Client:list_tools(opts)
  local out, cursor, pages = {}, nil, 0
  repeat
    local r, err = self:request("tools/list", cursor and { cursor = cursor } or nil, opts)
    if not r then return nil, err end
    if type(r.tools) ~= "table" then return nil, self:_where() .. ": tools/list: the result has no tools list" end
    for _, t in ipairs(r.tools) do out[#out + 1] = t end
    cursor = r.nextCursor
    if cursor == JNULL then cursor = nil end
    pages = pages + 1
    if pages > 1000 then return nil, self:_where() .. ": tools/list: more than 1000 pages" end
  until cursor == nil
  self.tools_cache = out
  return out
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
  s.errors = { unpack(self.errors) }
  return s
end

function Client:close()
  if self.closed then return end
  self.closed = true
  if self.transport == "stdio" then
    self.state = "closed"
    self:_fail_all("the client was closed")
    if self.reader and not self.reader:done() then C.sp_task_cancel(self.reader.ptr) end
    local p = self.proc
    if p ~= nil and sched.in_task() then
      -- stop the child and wait until it is reaped (SIGKILL after the grace)
      local me = sched.current("mcp client:close")
      C.sp_proc_kill(p, 2000)
      while C.sp_proc_finished(p) == 0 do
        if C.sp_proc_line(p, lenp) ~= nil then C.sp_proc_consume(p, lenp[0])
        elseif C.sp_proc_oversized(p, prefixp, lenp) == 0 and C.sp_proc_wait(p, me) == 0 then co_yield() end
      end
    end
    self:_drop_proc()
  else
    self:_fail_all("the client was closed")
    if self.session_id and sched.in_task() then
      local http = require "specula.http"
      local h = self:_http_headers()
      h["Content-Type"] = nil
      local res = http.request { method = "DELETE", url = self.url, headers = h, timeout_ms = 5000 }
      self.st.deleted = res and res.status or 0
    end
    self.state = "closed"
  end
end

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
  if o.protocol_version ~= nil and not SUPPORTED[o.protocol_version] then
    error("specula.mcp.connect: protocol_version must be one of " .. concat(M.PROTOCOL_VERSIONS, ", "), 3)
  end
end

-- Connect and initialize: a client | nil, err. Must run in a task (a
-- script's main chunk is one).
function M.connect(o)
  check_opts(o)
  sched.current("specula.mcp.connect")
  local name = o.name
  if name == nil then
    if o.url then name = o.url:gsub("%?.*$", "")
    else
      local last = o.command[#o.command]
      name = (last:match("([^/]+)$") or last)
      if #o.command == 1 then name = o.command[1] end
    end
  end
  local self = setmetatable({
    name = tostring(name), transport = o.url and "http" or "stdio",
    command = o.command, env_list = env_list(o.env), cwd = o.cwd,
    url = o.url, headers = o.headers or {},
    timeout_ms = o.timeout_ms or 60000, init_timeout_ms = o.init_timeout_ms or 30000,
    max_restarts = o.max_restarts or 3, max_message_bytes = o.max_message_bytes or 16 * 1024 * 1024,
    max_reconnects = o.max_reconnects or 5, default_retry_ms = o.default_retry_ms or 1000,
    want_version = o.protocol_version or M.PROTOCOL_VERSIONS[1],
    quiet = o.quiet,
    state = "new", starts = 0, gen = 0, next_id = 1,
    pending = {}, by_token = {}, given_up = {}, n_given_up = 0, errors = {},
    st = { requests = 0, restarts = 0, exits = 0, malformed = 0, unknown_ids = 0, oversized = 0,
           late_dropped = 0, timeouts = 0, server_requests = 0, progress = 0, reconnects = 0, calls = {} },
  }, Client)
  if require("specula.cassette").offline() then
    -- every request is served from the cassette: the server is not started
    self.offline = true
    local ok, err = self:_initialize()
    if not ok then self.closed = true return nil, err end
  elseif self.transport == "stdio" then
    local ok, err = self:_ready()
    if not ok then
      self.closed = true
      self:_drop_proc()
      return nil, err
    end
  else
    local ok, err = self:_initialize()
    if not ok then return nil, err end
  end
  return self
end

M.Client = Client
return M
