-- specula.http: HTTP through the engine's libcurl multi. Looks synchronous;
-- yields to the loop while the transfer runs. Errors are values:
-- nil, "ECODE: METHOD url: detail" (the URL without its query string).
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"
local stream = require "specula.internal.stream"
local ffi = core.ffi
local C = core.C

local co_yield = require("specula.internal.sched").yield   -- the raw yield (sched guards the global one)
local type, tostring, pairs, ipairs, concat = type, tostring, pairs, ipairs, table.concat
local lower, gmatch, find = string.lower, string.gmatch, string.find

local HEADERS, DONE, ERROR = C.SP_HTTP_HEADERS, C.SP_HTTP_DONE, C.SP_HTTP_ERROR

local M = {}

local lenp = ffi.new("size_t[1]")

-- What carries a request: the live transfer below (libcurl), or a wrapper
-- put in front of it for a while (the cassette's recorder or replayer,
-- installed by specula.cassette while one is open). A wrapper is
-- function(opts, method, go) -> what request returns; go(opts) is
-- request itself, and opts.__live = true there makes the transfer live.
-- This module never knows what the wrapper is.
local wrapper = nil

-- Put w in front of the live transfer (nil: none); returns the one before.
function M.set_wrapper(w)
  if w ~= nil and type(w) ~= "function" then error("specula.http.set_wrapper: expected a function or nil", 2) end
  local prev = wrapper
  wrapper = w
  return prev
end

local function parse_headers(r)
  local p = C.sp_http_headers(r, lenp)
  local raw = ffi.string(p, lenp[0])
  local h = {}
  for name, value in gmatch(raw, "([^:\r\n]+):[ \t]*([^\r\n]*)") do
    name = lower(name)
    value = value:gsub("[ \t]+$", "")
    local prev = h[name]
    h[name] = prev and (prev .. ", " .. value) or value
  end
  return h
end

local function err_of(r) return ffi.string(C.sp_http_error(r)) end

local function check_number(opts, k)
  local v = opts[k]
  if v ~= nil and (type(v) ~= "number" or v < 0 or v ~= v) then
    error("specula.http.request: " .. k .. " must be a non-negative number", 3)
  end
  return v or 0
end

-- A header name for messages: control bytes shown as \ddd.
local function shown(name)
  return (tostring(name):gsub("%c", function(c) return "\\" .. c:byte() end))
end

-- NUL would cut the block short in C (dropping every later header) and CR
-- or LF would start a new header, so they are refused, naming the header;
-- the value itself is never shown (it may be a credential).
local function check_header(name, value)
  if not find(name, "^[%w!#$%%&'*+%-.^_`|~]+$") then
    error("specula.http.request: header name '" .. shown(name) .. "' is not a valid HTTP header name", 4)
  end
  if find(value, "%z") then
    error("specula.http.request: the value of header '" .. name .. "' contains a NUL byte", 4)
  end
  if find(value, "[\r\n]") then
    error("specula.http.request: the value of header '" .. name .. "' contains a line break (CR or LF)", 4)
  end
  if find(value, "[\1-\8\11\12\14-\31\127]") then
    error("specula.http.request: the value of header '" .. name .. "' contains a control character", 4)
  end
end

-- Credential headers (and a URL's userinfo and secret parameters) of any
-- request never leave the process: declared to specula.secrets.
local secrets = require "specula.secrets"
local secret_header, declare = secrets.secret_header, secrets.declare

local function header_block(h)
  if h == nil then return nil end
  if type(h) ~= "table" then error("specula.http.request: headers must be a table", 3) end
  local lines = {}
  for k, v in pairs(h) do
    if type(k) == "number" then
      local s = tostring(v)                    -- { "Name: value", ... }
      local name, value = s:match("^([^:]*):[ \t]*(.*)$")
      if not name then
        error("specula.http.request: headers[" .. k .. "] must be \"Name: value\"", 3)
      end
      check_header(name, value)
      if secret_header(name) then declare(value, "header " .. name) end
      lines[#lines + 1] = s
    elseif type(k) ~= "string" then
      error("specula.http.request: header names must be strings", 3)
    else
      local s = tostring(v)
      check_header(k, s)
      if secret_header(k) then declare(s, "header " .. k) end
      lines[#lines + 1] = k .. ": " .. s
    end
  end
  return concat(lines, "\n")
end

-- The `verbose` lines the core kept for r, written on stderr through the
-- output layer (every declared secret, in any encoding, not only the values
-- of credential-named headers and parameters, which the core hides itself).
local output = require "specula.internal.output"
local dlenp = ffi.new("size_t[1]")
local function flush_debug(r)
  local p = C.sp_http_debug(r, dlenp)
  local n = tonumber(dlenp[0])
  if n > 0 then
    output.stderr(ffi.string(p, n))
    C.sp_http_debug_clear(r)
  end
end

-- Block the running task until r has news (or is finished).
local function wait(r, me)
  if C.sp_http_wait(r, me) == 0 then co_yield() end
  flush_debug(r)
end

local Response = {}
Response.__index = Response

-- Next body chunk: string | nil (end of body) | nil, err.
function Response:read()
  local r = self._r
  if r == nil then return nil, self.err end
  local me = sched.current("response:read")
  while true do
    local p = C.sp_http_body(r, lenp)
    local n = tonumber(lenp[0])
    if n > 0 then
      local s = ffi.string(p, n)
      C.sp_http_consume(r, n)
      return s
    end
    local st = C.sp_http_state(r)
    if st == DONE then self:close(); return nil end
    if st >= ERROR then
      self.err = err_of(r)
      self:close()
      return nil, self.err
    end
    wait(r, me)
  end
end

-- chunks() (an iterator over body chunks, raising the transfer's error) and
-- read_all() (the rest of the body, or nil, err), shared with the cassette's
-- recorded and replayed responses.
Response.chunks = stream.chunks
Response.read_all = stream.read_all

-- Stop the transfer now (the connection is closed) and free it.
function Response:close()
  local r = self._r
  if r ~= nil then
    self._r = nil
    flush_debug(r)
    ffi.gc(r, nil)
    C.sp_http_free(r)
  end
end

-- specula.http.request{ method, url, headers, body, timeout_ms,
--   connect_timeout_ms, idle_timeout_ms, max_body_bytes, stream, http2,
--   path_as_is }
-- -> { status, headers, body } | response object when stream = true | nil, err
-- headers: { Name = value } or { "Name: value" }; a bad name or a value with
-- NUL, CR or LF raises an error naming the header. path_as_is: send the path
-- as written, without resolving "." and ".." segments.
function M.request(opts)
  if type(opts) ~= "table" then error("specula.http.request: expected a table of options", 2) end
  local url = opts.url
  if type(url) ~= "string" or url == "" then error("specula.http.request: url must be a non-empty string", 2) end
  local me = sched.current("specula.http.request")
  local body = opts.body
  if body ~= nil and type(body) ~= "string" then
    error("specula.http.request: body must be a string (encode tables with specula.json)", 2)
  end
  local method = opts.method or (body and "POST" or "GET")
  if type(method) ~= "string" then error("specula.http.request: method must be a string", 2) end
  if find(url, "[@?]") then secrets.declare_url(url) end
  -- through the wrapper (a recording or replay: --record / --replay-io),
  -- before any real I/O, so a replay runs under the virtual clock
  if wrapper and not opts.__live then
    header_block(opts.headers)   -- the same checks as a real request
    return wrapper(opts, method, M.request)
  end
  local headers = header_block(opts.headers)
  local o = ffi.new("sp_http_opts")
  o.method = method:upper()
  o.url = url
  o.headers = headers
  o.body = body
  o.body_len = body and #body or 0
  o.timeout_ms = check_number(opts, "timeout_ms")
  o.connect_timeout_ms = check_number(opts, "connect_timeout_ms")
  o.idle_timeout_ms = check_number(opts, "idle_timeout_ms")
  o.max_body_bytes = check_number(opts, "max_body_bytes")
  o.stream = opts.stream and 1 or 0
  o.http2 = opts.http2 == "prior_knowledge" and 2 or (opts.http2 and 1 or 0)
  o.verbose = opts.verbose and 1 or 0
  o.path_as_is = opts.path_as_is and 1 or 0
  local cainfo = opts.cainfo
  if cainfo ~= nil and type(cainfo) ~= "string" then error("specula.http.request: cainfo must be a file path", 2) end
  o.cainfo = cainfo
  local err, errlen = core.errbuf()
  local r = C.sp_http_start(core.ctx, me, o, err, errlen)
  if r == nil then return nil, ffi.string(err) end
  r = ffi.gc(r, C.sp_http_free)
  local keep = { method, url, headers, body, cainfo } -- alive until the call returns
  if not opts.stream then
    while C.sp_http_state(r) < DONE do wait(r, me) end
    local st = C.sp_http_state(r)
    local res, e
    if st == DONE then
      local p = C.sp_http_body(r, lenp)
      local body_s = ffi.string(p, lenp[0])
      res = { status = tonumber(C.sp_http_status(r)), headers = parse_headers(r), body = body_s }
    else
      e = err_of(r)
    end
    flush_debug(r)
    ffi.gc(r, nil)
    C.sp_http_free(r)
    keep = nil
    return res, e
  end
  while C.sp_http_state(r) < HEADERS do wait(r, me) end
  -- A failure after the headers (a status is known only then) still hands
  -- out the response: its buffered body comes first, then the error, so the
  -- caller sees the same events however late it noticed the failure.
  if C.sp_http_state(r) >= ERROR and C.sp_http_status(r) == 0 then
    local e = err_of(r)
    flush_debug(r)
    ffi.gc(r, nil)
    C.sp_http_free(r)
    return nil, e
  end
  keep = nil
  return setmetatable({ status = tonumber(C.sp_http_status(r)), headers = parse_headers(r), _r = r },
    Response)
end

-- Connection limits (per host and in total) of the HTTP driver: each is
-- split over the multi handles ("lanes", engine/sp_http.c) it makes, so
-- their limits sum to it; 0 is no limit, as libcurl's.
local LIMITS = { max_host_connections = true, max_total_connections = true }
function M.configure(opts)
  if type(opts) ~= "table" then error("specula.http.configure: expected a table", 2) end
  for k, v in pairs(opts) do
    if not LIMITS[k] then
      error("specula.http.configure: unknown option '" .. tostring(k)
        .. "' (max_host_connections, max_total_connections)", 2)
    end
    if type(v) ~= "number" or v < 0 or v % 1 ~= 0 or v > 2^31 - 1 then
      error("specula.http.configure: " .. k .. " must be a whole number >= 0 (0: no limit), got "
        .. (type(v) == "number" and tostring(v) or type(v)), 2)
    end
  end
  local ctx = core.require_ctx("specula.http.configure")
  C.sp_http_configure(ctx, opts.max_host_connections or -1, opts.max_total_connections or -1)
end

M.Response = Response
return M
