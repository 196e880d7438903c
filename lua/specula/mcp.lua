-- specula.mcp: a Model Context Protocol client (JSON-RPC 2.0) over stdio
-- (a child process, engine/sp_proc.c) or Streamable HTTP (specula.http).
--
--   local c, err = specula.mcp.connect{ command = { "node", "server.js" }, env = {...}, cwd = ...,
--                                       name = "fs", max_restarts = 3, timeout_ms = 60000 }
--   local c, err = specula.mcp.connect{ url = "http://127.0.0.1:3000/mcp", headers = {...},
--                                       auth = { ... } }   -- OAuth: specula.mcpauth, docs/mcp.md#authorization-oauth-21
--   c:list_tools()                      -> { {name, description, inputSchema, ...}, ... } | nil, err
--   c:call(name, args, { timeout_ms, on_progress }) -> { content, structuredContent, isError } | nil, err
--   c:list_resources(), c:list_resource_templates() -> every page | nil, err
--   c:read_resource(uri, { timeout_ms }) -> { contents = { {uri, mimeType, text | blob}, ... } } | nil, err
--   c:ping(), c:request(method, params, opts), c:stats(), c:auth_info(), c:close()
--
-- Requests from the server: ping is answered; sampling/createMessage,
-- elicitation/create and roots/list go to the hooks on_sampling,
-- on_elicitation and on_roots when given (each runs in a task of its own,
-- so it may call an LLM or wait), and anything else gets -32601. Over HTTP
-- a client with hooks (or listen = true) keeps the server's GET stream open
-- for requests that belong to no call.
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
local co_yield = require("specula.sched").yield   -- the raw yield (sched guards the global one)
local encode, decode, JNULL = json.encode, json.decode, json.null
local secrets = require "specula.secrets"
local urlmod = require "specula.url"
local scrub = secrets.scrub

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
  msg = scrub(msg)   -- a server's text may carry a credential
  self.errors[#self.errors + 1] = msg
  if #self.errors > 50 then table.remove(self.errors, 1) end
  if not self.quiet then secrets.stderr("specula: warning: ", msg, "\n") end
end

function Client:_where() return "mcp server '" .. self.name .. "'" end

-- ---- message handling (both transports) ---------------------------------------

-- Send a JSON-RPC message that needs no answer (a response or a notification).
function Client:_send_oneway(msg)
  local text, eerr = encode(msg)
  if not text then return nil, eerr end
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
  return "file://" .. urlmod.escape(path, "/")
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

-- ---- stdio transport ----------------------------------------------------------------

-- Variables given to a server that say nothing secret (paths, locales).
local PLAIN_ENV = { PATH = true, HOME = true, LANG = true, LC_ALL = true, TERM = true, TMPDIR = true,
                    NODE_PATH = true, PYTHONPATH = true, NODE_ENV = true, USER = true, SHELL = true, PWD = true }

local function env_list(env)
  if env == nil then return nil end
  local list = {}
  -- the child inherits PATH and HOME unless given: node needs them
  local seen = {}
  for k, v in pairs(env) do
    if type(k) ~= "string" or k:find("[=%z]") then error("specula.mcp.connect: env keys must be names", 3) end
    list[#list + 1] = k .. "=" .. tostring(v)
    seen[k] = true
    -- what a script hands its server is its credentials, as a rule: it
    -- never leaves the process (a URL gives only its userinfo)
    if not PLAIN_ENV[k] then
      v = tostring(v)
      if v:find("^%a[%w+.-]*://") then secrets.declare_url(v) else secrets.declare(v, "mcp env " .. k) end
    end
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
  local tail = tail_lines(secrets.scrub(ffi.string(C.sp_proc_stderr(p, lenp), lenp[0])), 3)
  -- a dying server may print its environment: scrubbed before the tail
  -- becomes part of an error (and the cut of the tail is handled there)
  return secrets.scrub(format("server %s (pid %d) %s%s", excerpt(concat(self.command, " "), 120), self.pid or 0,
    why, tail ~= "" and ("; last stderr: " .. tail) or "; no stderr output"))
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
  local hint = ""
  if res.status == 401 and not self.auth then
    hint = " (the server wants authorization: give auth = { ... } to specula.mcp.connect)"
  end
  return scrub(format("%s: %s: HTTP %d%s: %s", self:_where(), what, res.status, hint, excerpt(body or "", 200)))
end

-- An HTTP request to the server: the session headers, and with auth the
-- access token; a 401, or a 403 asking for more scope, runs the
-- authorization (specula.mcpauth) and sends the request again. o: method,
-- body, stream, extra (headers), accept, timeout (a function giving the ms
-- left), live (bypass the cassette). -> res (any status) | nil, err
function Client:_send(o)
  local http = require "specula.http"
  local st = {}
  while true do
    local h = self:_http_headers(o.extra)
    if o.body == nil then h["Content-Type"] = nil end
    if o.accept then h["Accept"] = o.accept end
    local sent
    if self.auth then
      sent = self.auth:token()
      if sent then h["Authorization"] = "Bearer " .. sent end
    end
    local res, err = http.request { method = o.method, url = self.url, headers = h, body = o.body, stream = o.stream,
                                    timeout_ms = o.timeout and o.timeout() or self.timeout_ms,
                                    __cassette_live = o.live }
    if not res then return nil, scrub(err) end
    if not self.auth or (res.status ~= 401 and res.status ~= 403) then return res end
    if res.close then res:close() end
    local ok, aerr = self.auth:challenge(res.status, res.headers["www-authenticate"], st, sent)
    if not ok then return nil, aerr, "auth" end
  end
end

-- POST a message that gets no response (a notification or our answer).
function Client:_post_oneway(text)
  local res, err = self:_send { method = "POST", body = text }
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
  local t0 = sched.now()
  local function left()
    if not timeout_ms or timeout_ms <= 0 then return 0 end
    local l = timeout_ms - (sched.now() - t0)
    return l > 1 and l or 1
  end
  local res, err = self:_send { method = "POST", body = text, stream = true, timeout = left }
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
      res, err = self:_send { method = "GET", extra = { ["Last-Event-ID"] = state.last_id },
                              accept = "text/event-stream", stream = true, timeout = left }
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

-- The server's GET stream (requests and notifications that belong to no
-- call: elicitations, sampling, list changes), read by a root task for as
-- long as the client lives; resumed after the server's retry with
-- Last-Event-ID. gate (an sp_rpc the connecting task waits on) is completed
-- once the stream is open or refused, so no early request is lost.
function Client:_listen_loop(gate)
  local sse = require "specula.sse"
  local st = self.st
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
      self:_warn(self:_where() .. ": the GET stream: " .. tostring(err))
      return
    elseif not res then
      fails = fails + 1
      opened(0)
      if fails > self.max_reconnects then
        self:_warn(self:_where() .. ": the GET stream failed " .. fails .. " times, given up: " .. tostring(err))
        return
      end
    elseif res.status ~= 200 or not (res.headers["content-type"] or ""):lower():find("text/event-stream", 1, true) then
      -- 405 (or another 4xx): the server offers no such stream
      res:close()
      opened(res.status)
      if res.status >= 500 and not self.closed then
        self:_warn(format("%s: the GET stream was refused (HTTP %d)", self:_where(), res.status))
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
            st.malformed = st.malformed + 1
            self:_warn(format("%s: malformed JSON on the GET stream (%s): %s", self:_where(), tostring(derr),
              excerpt(ev.data)))
          else
            self:_handle(msg, "get")
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
function Client:_listen()
  local me = sched.current("specula.mcp: GET stream")
  local gate = C.sp_rpc_new(core.ctx, me, self.init_timeout_ms)
  if gate == nil then return end
  gate = ffi.gc(gate, C.sp_rpc_free)
  self.listener = spawn_root(function()
    local ok, err = pcall(self._listen_loop, self, gate)
    -- whatever happened, the connecting task goes on
    if C.sp_rpc_state(gate) == PENDING then C.sp_rpc_complete(gate) end
    if not ok then self:_warn(self:_where() .. ": the GET stream reader failed: " .. tostring(err)) end
  end)
  if not self.listener then return end
  while C.sp_rpc_wait(gate, me) == 0 do co_yield() end
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
    local h = self:_http_headers()
    local tok = self.auth and self.auth.entry.tokens
    if tok then h["Authorization"] = "Bearer " .. tok.access_token end
    local hdr = header_lines(h)
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
  local note = { jsonrpc = "2.0", method = "notifications/initialized" }
  local ok, serr
  if self.transport == "stdio" then ok, serr = self:_send_oneway(note)
  else ok, serr = self:_post_oneway(assert(encode(note))) end
  if not ok then return nil, self:_where() .. ": notifications/initialized: " .. tostring(serr) end
  self.state = "ready"
  if self.transport == "http" and self.listen and not self.listener then self:_listen() end
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
  local note = { jsonrpc = "2.0", method = "notifications/roots/list_changed" }
  if self.transport == "stdio" then return self:_send_oneway(note) end
  return self:_post_oneway(assert(encode(note)))
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
    if self.listener and not self.listener:done() then C.sp_task_cancel(self.listener.ptr) end
    if self.session_id and sched.in_task() then
      local res = self:_send { method = "DELETE", timeout = function() return 5000 end }
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
  for _, k in ipairs({ "on_sampling", "on_elicitation" }) do
    if o[k] ~= nil and type(o[k]) ~= "function" then error("specula.mcp.connect: " .. k .. " must be a function", 3) end
  end
  if o.on_roots ~= nil and type(o.on_roots) ~= "function" and type(o.on_roots) ~= "table" then
    error("specula.mcp.connect: on_roots must be a function or a list of roots", 3)
  end
  if o.listen ~= nil and type(o.listen) ~= "boolean" then error("specula.mcp.connect: listen must be a boolean", 3) end
  if o.auth ~= nil and o.auth ~= false then
    if o.url == nil then error("specula.mcp.connect: auth is for servers reached by url", 3) end
    require("specula.mcpauth").check_options(o.auth, 3)
  end
  if o.protocol_version ~= nil and not SUPPORTED[o.protocol_version] then
    error("specula.mcp.connect: protocol_version must be one of " .. concat(M.PROTOCOL_VERSIONS, ", "), 3)
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
    hooks = { on_sampling = o.on_sampling, on_elicitation = o.on_elicitation, on_roots = o.on_roots },
    st = { requests = 0, restarts = 0, exits = 0, malformed = 0, unknown_ids = 0, oversized = 0,
           late_dropped = 0, timeouts = 0, server_requests = 0, progress = 0, reconnects = 0, calls = {},
           reads = 0, resources_changed = 0, listens = 0,
           hooks = { sampling = 0, elicitation = 0, roots = 0, errors = 0 } },
  }, Client)
  if o.listen ~= nil then self.listen = o.listen
  else self.listen = (o.on_sampling or o.on_elicitation or o.on_roots) ~= nil end
  if o.auth and self.transport == "http" then
    self.auth = require("specula.mcpauth").new(o.auth == true and {} or o.auth, o.url, spawn_root, self:_where())
  end
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
    if not ok then self.closed = true return nil, err end
  end
  return self
end

M.Client = Client
return M
