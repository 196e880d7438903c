-- specula.llm.common: what the provider clients (specula.llm.openai,
-- specula.llm.anthropic) share, so each keeps only its wire format: the
-- constructor's checks, the API key (from the options or the environment,
-- held outside the client table so dumping a client shows none), the base
-- URL, the request headers, and error messages with every secret scrubbed.
local retry = require "specula.llm.retry"
local secrets = require "specula.secrets"

local type, tostring, pairs, setmetatable, error = type, tostring, pairs, setmetatable, error
local find, concat = string.find, table.concat

local M = {}

-- client -> its API key (weak: a dropped client takes its key along)
local KEYS = setmetatable({}, { __mode = "k" })

function M.nonempty(s)
  if type(s) == "string" and s ~= "" then return s end
  return nil
end
local nonempty = M.nonempty

-- A new client of class Client from the user's options. p: the provider's
-- part: what (the constructor's name, for errors), name (default error
-- prefix), base_env / base_url (the base URL's variable and default),
-- key_env (the API key's variable). Sets the fields every client has
-- (name, base_url, model, timeouts, retry, headers, extra, endpoint) and
-- returns the client and the options (a table even when none were given).
-- Errors name the caller of the provider's constructor.
function M.new(Client, opts, p)
  if opts ~= nil and type(opts) ~= "table" then error(p.what .. ": options must be a table", 3) end
  opts = opts or {}
  local base = nonempty(opts.base_url) or nonempty(os.getenv(p.base_env)) or p.base_url
  base = base:gsub("/+$", "")
  local key = opts.api_key
  if key == nil then key = os.getenv(p.key_env) end
  if key ~= nil and type(key) ~= "string" then error(p.what .. ": api_key must be a string", 3) end
  if opts.headers ~= nil and type(opts.headers) ~= "table" then error(p.what .. ": headers must be a table", 3) end
  local hp = retry.header_problem(opts.headers)
  if hp then error(p.what .. ": " .. hp, 3) end
  -- the key goes into a header: the same bytes would break it
  if type(key) == "string" and find(key, "[%c\127]") then
    error(p.what .. ": api_key contains a control character (NUL, CR, LF, ...)", 3)
  end
  local self = setmetatable({
    name = opts.name or p.name,
    base_url = base,
    model = opts.model,
    timeout_ms = opts.timeout_ms or 600000,
    connect_timeout_ms = opts.connect_timeout_ms or 10000,
    retry = retry.new(opts.retry),
    headers = opts.headers or {},
    extra = opts.extra,
  }, Client)
  -- the key and the credential headers never leave the process (any
  -- output, not only this client's messages); the base URL stays readable
  if type(key) == "string" then secrets.declare(key, p.key_env) end
  secrets.declare_headers(self.headers)
  secrets.declare_url(base)
  self.endpoint = secrets.scrub_message(retry.endpoint(base), key)
  if nonempty(key) then KEYS[self] = key end
  self._secrets = secrets.header_values(self.headers)
  if nonempty(key) then table.insert(self._secrets, 1, key) end
  return self, opts
end

-- The request headers: the provider's own (h), the key under key_header
-- (prefixed, e.g. "Bearer "), then the user's headers, which win.
function M.headers(self, h, key_header, prefix)
  local key = KEYS[self]
  if key then h[key_header] = (prefix or "") .. key end
  for k, v in pairs(self.headers) do h[k] = v end
  return h
end

-- A message as the client reports it: prefixed with its name, scrubbed.
function M.message(self, msg)
  return secrets.scrub_message(self.name .. ": " .. msg, self._secrets)
end

-- The error of a failed request: prefixed, scrubbed, naming the endpoint
-- and the attempts. f: the retry policy's failure record, n: attempts,
-- why: why it stopped retrying (or nil).
function M.fail(self, f, n, why, method, url)
  local where = method .. " " .. retry.endpoint(url)
  -- the body is scrubbed before describe() cuts an excerpt out of it, so
  -- no part of a secret survives the cut
  if type(f.body) == "string" then f.body = secrets.scrub_message(f.body, self._secrets) end
  local msg
  if f.msg then
    msg = f.msg .. " (" .. where .. (n > 1 and (", " .. retry.attempts_text(n)) or "") .. ")"
  elseif f.err then
    msg = retry.describe(f) .. " (" .. retry.attempts_text(n) .. ")"
  else
    msg = retry.describe(f) .. " (" .. where .. ", " .. retry.attempts_text(n) .. ")"
  end
  if why then msg = msg .. "; " .. why end
  return M.message(self, msg)
end

-- A streamed error body, read up to 64 KiB, for the failure record.
function M.error_body(res)
  local parts, n = {}, 0
  while n < 65536 do
    local c = res:read()
    if not c then break end
    parts[#parts + 1] = c
    n = n + #c
  end
  res:close()
  return concat(parts)
end

-- A client class: its methods are looked up in it, tostring() shows
-- "<name> client (<endpoint>)" (the endpoint has no secret).
function M.class()
  local Client = {}
  Client.__index = Client
  Client.__tostring = function(self) return self.name .. " client (" .. tostring(self.endpoint) .. ")" end
  return Client
end

return M
