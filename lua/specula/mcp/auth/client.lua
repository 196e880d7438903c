-- specula.mcp.auth.client: the client identity at an authorization server
-- (pre-registered, a client ID metadata document, dynamic registration RFC
-- 7591) and how it authenticates at the token endpoint (secret, JWT
-- assertion RFC 7523). Methods of the Auth object; every secret declared.
local json = require "specula.json"
local crypto = require "specula.crypto"
local secrets = require "specula.secrets"
local METHODS = require("specula.mcp.auth.options").METHODS

local type, tostring, tonumber, pairs, ipairs, setmetatable, error =
  type, tostring, tonumber, pairs, ipairs, setmetatable, error
local format, concat, lower = string.format, table.concat, string.lower
local U = require "specula.mcp.auth.urls"
local parse_url, form, urlenc, has = U.parse_url, U.form, U.urlenc, U.has

local M = {}
-- the methods init.lua puts on the Auth object
local Auth = {}
M.methods = Auth

local JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

local declare = secrets.declared   -- declares a credential and returns it

-- The token endpoint authentication method for what we hold.
function Auth:_pick_method(meta, client)
  if self.o.token_endpoint_auth_method then return self.o.token_endpoint_auth_method end
  if client.method then return client.method end
  local sup = meta.token_endpoint_auth_methods_supported
  if self.o.private_key or self.o.client_assertion then return "private_key_jwt" end
  if client.secret then
    if type(sup) ~= "table" or has(sup, "client_secret_basic") then return "client_secret_basic" end
    if has(sup, "client_secret_post") then return "client_secret_post" end
  end
  return "none"
end

-- The application_type to register (OpenID Connect Dynamic Registration,
-- as MCP asks for it): "native" for a redirect to this machine (loopback)
-- or to a custom scheme, "web" for a redirect to a web site.
local function application_type(redirect_uri)
  local p = parse_url(redirect_uri)
  if not p or (p.scheme ~= "http" and p.scheme ~= "https") then return "native" end
  local host = p.authority:gsub(":%d+$", "")
  if host == "localhost" or host:match("^127%.%d+%.%d+%.%d+$") or host == "[::1]" then return "native" end
  return "web"
end
M.application_type = application_type

-- The method to ask for at dynamic registration.
local function registration_method(sup, forced)
  if forced then return forced end
  if type(sup) ~= "table" then return "none" end
  for _, m in ipairs({ "none", "client_secret_basic", "client_secret_post" }) do
    if has(sup, m) then return m end
  end
  return "none"
end

function Auth:_client(meta, scope)
  local e, o = self.entry, self.o
  if o.client_id then
    return { id = o.client_id, secret = o.client_secret, source = "pre-registered" }
  end
  if self.grant == "jwt_bearer" then
    -- RFC 7523 §3.1: the assertion identifies the workload; no client needed
    return { source = "assertion" }
  end
  if e.client and e.client.as == meta.issuer then return e.client end
  if o.client_metadata_url and meta.client_id_metadata_document_supported == true then
    e.client = { id = o.client_metadata_url, method = "none", source = "metadata document", as = meta.issuer }
    return e.client
  end
  if type(meta.registration_endpoint) ~= "string" then
    return nil, self:_err("the authorization server offers no dynamic registration and no client ID metadata "
      .. "documents: give auth.client_id (and auth.client_secret) of a client registered with it")
  end
  local method = registration_method(meta.token_endpoint_auth_methods_supported, o.token_endpoint_auth_method)
  local body = json.object({
    client_name = o.client_name or "specula",
    redirect_uris = json.array({ self.redirect_uri }),
    grant_types = json.array({ "authorization_code", "refresh_token" }),
    response_types = json.array({ "code" }),
    token_endpoint_auth_method = method,
    application_type = o.application_type or application_type(self.redirect_uri),
    scope = scope,
  })
  local res, err = self:_http { method = "POST", url = meta.registration_endpoint, body = json.encode(body),
                                headers = { ["Content-Type"] = "application/json", Accept = "application/json" } }
  if not res then return nil, self:_err("client registration: " .. err) end
  local doc = json.decode(res.body or "")
  if res.status < 200 or res.status >= 300 or type(doc) ~= "table" or type(doc.client_id) ~= "string" then
    return nil, self:_err(format("client registration at %s: HTTP %d%s", meta.registration_endpoint, res.status,
      type(doc) == "table" and doc.error and (": " .. tostring(doc.error) .. (doc.error_description and (": "
        .. tostring(doc.error_description)) or "")) or ""))
  end
  declare(doc.client_secret)
  self.st.registrations = self.st.registrations + 1
  local m = doc.token_endpoint_auth_method
  if type(m) ~= "string" or not METHODS[m] then m = nil end
  e.client = { id = doc.client_id, secret = type(doc.client_secret) == "string" and doc.client_secret or nil,
               method = m, source = "dynamic registration", as = meta.issuer }
  return e.client
end

-- A signed JWT client assertion (RFC 7523 §2.2) for the token endpoint.
function Auth:_assertion(meta, client)
  local o = self.o
  if type(o.client_assertion) == "string" then return o.client_assertion end
  local aud = meta.issuer or self.entry.as.url
  if type(o.client_assertion) == "function" then
    local ok, a = pcall(o.client_assertion, { client_id = client.id, audience = aud,
                                               token_endpoint = meta.token_endpoint })
    if not ok then return nil, self:_err("auth.client_assertion raised: " .. tostring(a)) end
    if type(a) ~= "string" or a == "" then return nil, self:_err("auth.client_assertion returned no assertion") end
    return declare(a)
  end
  local alg = o.signing_alg or "ES256"
  local now = os.time()
  local header = crypto.b64url(json.encode(json.object({ alg = alg, typ = "JWT" })))
  local jti = assert(crypto.random(16))
  local claims = crypto.b64url(json.encode(json.object({
    iss = client.id, sub = client.id, aud = aud, iat = now, exp = now + 300, jti = crypto.b64url(jti) })))
  local sig, err = crypto.sign(alg, o.private_key, header .. "." .. claims)
  if not sig then return nil, self:_err("signing the client assertion: " .. tostring(err)) end
  return declare(header .. "." .. claims .. "." .. crypto.b64url(sig))
end

-- Add the client's authentication to a token request.
function Auth:_client_auth(meta, client, params, headers)
  local method = self:_pick_method(meta, client)
  if method == "client_secret_basic" then
    if not client.secret then return nil, self:_err("client_secret_basic needs a client secret") end
    -- RFC 6749 §2.3.1: both form-encoded, then Base64
    local v = "Basic " .. crypto.b64(urlenc(client.id) .. ":" .. urlenc(client.secret))
    headers.Authorization = declare(v)
  elseif method == "client_secret_post" then
    if not client.secret then return nil, self:_err("client_secret_post needs a client secret") end
    params[#params + 1] = { "client_id", client.id }
    params[#params + 1] = { "client_secret", client.secret }
  elseif method == "private_key_jwt" then
    local a, err = self:_assertion(meta, client)
    if not a then return nil, err end
    params[#params + 1] = { "client_id", client.id }
    params[#params + 1] = { "client_assertion_type", JWT_BEARER }
    params[#params + 1] = { "client_assertion", a }
  else
    params[#params + 1] = { "client_id", client.id }
  end
  self.method = method
  return true
end

-- ---- DPoP (RFC 9449) ----------------------------------------------------------------------


return M
