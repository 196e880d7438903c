-- specula.mcp.auth (to scripts: specula.mcpauth): OAuth 2.1 for MCP servers
-- behind authorization (MCP authorization spec 2025-06-18 / 2025-11-25 /
-- 2026-07-28, and 2025-03-26 servers), with the auth extensions: client
-- credentials, enterprise-managed authorization, workload identity, DPoP.
-- specula.mcp uses it for connect{ url = ..., auth = { ... } }; the options
-- are documented in docs/mcp.md#authorization-oauth-21.
--
-- What happens on a 401 from the server:
--   1. protected resource metadata (RFC 9728): the resource_metadata URL of
--      WWW-Authenticate, else /.well-known/oauth-protected-resource/<path>,
--      then at the root; its `resource` must name this server (same origin,
--      a prefix of its path) or nothing is authorized. No metadata at all: a
--      2025-03-26 server, whose authorization server is its own origin.
--   2. authorization server metadata (RFC 8414, OpenID Discovery), path
--      inserted before path appended, its issuer the one asked of; none: the
--      2025-03-26 default endpoints /authorize, /token, /register.
--   3. a client id: pre-registered (auth.client_id), a client ID metadata
--      document URL when the server supports them, else dynamic registration
--      (RFC 7591, with an application_type); one per authorization server.
--   4. a token: authorization code with PKCE S256 (the redirect comes from
--      auth.authorize(url), or headless: the authorization URL fetched
--      without following its redirect; its state and iss checked), client
--      credentials (secret or a JWT assertion, RFC 7523), or a JWT bearer
--      grant (a workload's JWT, or an ID-JAG the enterprise identity provider
--      gave for the user's ID token, RFC 8693); RFC 8707 resource indicators
--      throughout; bound to a DPoP key (RFC 9449) where the server offers it.
-- Scopes: auth.scope, else the challenge's scope, else all of the resource's
-- scopes_supported, else none. A 403 insufficient_scope re-authorizes with the
-- union of the scopes held and the ones asked (at most max_step_up times per
-- request). Tokens are cached per server and refreshed (refresh_token grant)
-- before they expire and when the server rejects them.
--
-- Every credential (tokens, client secrets, assertions, codes, the PKCE
-- verifier, the private key) is declared to specula.secrets the moment it is
-- known, and every message this module returns is scrubbed. Its exchanges
-- with the authorization server bypass the cassette: they are credentials,
-- not experiment data.
local http = require "specula.http"
local json = require "specula.json"
local crypto = require "specula.crypto"
local urlmod = require "specula.url"
local secrets = require "specula.secrets"
local sched = require "specula.internal.sched"

local type, tostring, tonumber, pairs, ipairs, setmetatable, error =
  type, tostring, tonumber, pairs, ipairs, setmetatable, error
local format, concat, lower = string.format, table.concat, string.lower

local M = {}

M.DEFAULT_REDIRECT_URI = "http://127.0.0.1:33418/callback"
M.GRANTS = { authorization_code = true, client_credentials = true, jwt_bearer = true, enterprise = true }
M.METHODS = { none = true, client_secret_basic = true, client_secret_post = true, private_key_jwt = true }
local JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
local JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"         -- RFC 7523 §2.1
local TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"       -- RFC 8693
local ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
local ID_JAG_TYPE = "urn:ietf:params:oauth:token-type:id-jag"

local function declare(v)
  if type(v) == "string" then secrets.declare(v) end
  return v
end
local scrub = secrets.scrub

-- ---- URLs ------------------------------------------------------------------------------

local DEFAULT_PORT = { http = "80", https = "443" }

-- scheme, authority (host[:port], no userinfo, default port dropped), path
-- (at least "/"), query (nil when absent), origin; nil for anything that
-- libcurl's URL parser does not take as an absolute URL (specula.url).
local function parse_url(u)
  local p = urlmod.parse(u)
  if not p or p.host == "" then return nil end
  local scheme = lower(p.scheme)
  local authority = lower(p.host)
  if p.port and DEFAULT_PORT[scheme] ~= p.port then authority = authority .. ":" .. p.port end
  return { scheme = scheme, authority = authority, path = p.path, query = p.query,
           origin = scheme .. "://" .. authority }
end
M.parse_url = parse_url

-- The canonical resource identifier of a server URL (RFC 8707 as MCP uses
-- it): lowercase scheme and host, no default port, query kept, no
-- fragment, no trailing slash.
local function canonical(u)
  local p = parse_url(u)
  if not p then return nil end
  local path = p.path:gsub("/+$", "")
  return p.origin .. path .. (p.query and ("?" .. p.query) or "")
end
M.canonical = canonical

-- Does the protected resource `res` (from metadata) cover the server `url`?
-- The same origin, and its path is the server's path or a parent of it.
local function covers(res, url)
  local a, b = parse_url(res), parse_url(url)
  if not a or not b or a.origin ~= b.origin then return false end
  local rp, up = a.path:gsub("/+$", ""), b.path:gsub("/+$", "")
  return rp == "" or up == rp or up:sub(1, #rp + 1) == rp .. "/"
end
M.covers = covers

-- percent-encoding as forms and RFC 6749 §2.3.1 want it: all but the
-- unreserved characters (libcurl's curl_easy_escape)
local function urlenc(s) return urlmod.escape(tostring(s)) end
local urldec = urlmod.form_decode

-- application/x-www-form-urlencoded from a list of { name, value } (nil
-- values left out), in order.
local function form(pairs_list)
  local out = {}
  for _, kv in ipairs(pairs_list) do
    if kv[2] ~= nil then out[#out + 1] = urlenc(kv[1]) .. "=" .. urlenc(kv[2]) end
  end
  return concat(out, "&")
end

local function query_params(q)
  local t = {}
  for part in (q or ""):gmatch("[^&]+") do
    local k, v = part:match("^([^=]*)=?(.*)$")
    k = urldec(k)
    if t[k] == nil then t[k] = urldec(v) end
  end
  return t
end
M.query_params = query_params

local function join_query(base, q)
  return base .. (base:find("?", 1, true) and "&" or "?") .. q
end

-- ---- WWW-Authenticate (RFC 9110 §11.6.1, RFC 6750 §3) ------------------------------------

-- The parameters of the Bearer challenge (or of the `scheme` one, e.g.
-- "dpop") in a WWW-Authenticate value (several challenges may share the
-- header): { scope =, error =, resource_metadata =, ... } or nil when there
-- is no such challenge.
function M.parse_challenge(h, scheme)
  scheme = scheme or "bearer"
  if type(h) ~= "string" then return nil end
  local i, n = 1, #h
  local current, found
  while i <= n do
    local _, e = h:find("^[%s,]+", i)
    if e then i = e + 1 end
    if i > n then break end
    local name, e2 = h:match("^([%w!#$%%&'*+%-.^_`|~]+)()", i)
    if not name then break end
    local after = h:sub(e2):match("^%s*=")
    if after and current then
      -- a parameter of the current challenge
      local j = e2
      j = h:find("=", j, true) + 1
      local _, ws = h:find("^%s*", j)
      j = ws + 1
      local value
      if h:sub(j, j) == '"' then
        local buf = {}
        j = j + 1
        while j <= n do
          local c = h:sub(j, j)
          if c == "\\" then buf[#buf + 1] = h:sub(j + 1, j + 1); j = j + 2
          elseif c == '"' then j = j + 1; break
          else buf[#buf + 1] = c; j = j + 1 end
        end
        value = concat(buf)
      else
        local v, e3 = h:match("^([^%s,]*)()", j)
        value, j = v, e3
      end
      if current.params[lower(name)] == nil then current.params[lower(name)] = value end
      i = j
    elseif after then
      i = e2   -- a parameter with no challenge: skip it
      local _, e3 = h:find("^%s*=%s*\"[^\"]*\"", i)
      if not e3 then _, e3 = h:find("^%s*=%s*[^%s,]*", i) end
      i = (e3 or i) + 1
    else
      -- a new challenge (auth-scheme); a token68 may follow
      current = { scheme = lower(name), params = {} }
      if current.scheme == scheme and not found then found = current end
      i = e2
      local _, e3 = h:find("^%s+[%w%-%._~+/]+=*%s*$", i)
      if e3 then i = e3 + 1 end
    end
  end
  return found and found.params or nil
end

-- ---- scopes ----------------------------------------------------------------------------------

local function scope_set(s)
  local set, list = {}, {}
  for w in tostring(s or ""):gmatch("%S+") do
    if not set[w] then set[w] = true; list[#list + 1] = w end
  end
  return set, list
end

local function scope_union(a, b)
  local set, list = scope_set(a)
  for w in tostring(b or ""):gmatch("%S+") do
    if not set[w] then set[w] = true; list[#list + 1] = w end
  end
  if #list == 0 then return nil end
  return concat(list, " ")
end

local function scope_covers(held, asked)
  local set = scope_set(held)
  for w in tostring(asked or ""):gmatch("%S+") do
    if not set[w] then return false end
  end
  return true
end

-- ---- the shared cache: one entry per server and client identity ----------------------------

-- key -> { tokens, client, as, prm, resource, scope }; kept for the process.
local CACHE = {}
M._cache = CACHE

-- ---- options -------------------------------------------------------------------------------

local OPTION_TYPES = {
  grant = "string", client_id = "string", client_secret = "string", client_name = "string",
  client_metadata_url = "string", redirect_uri = "string", scope = "string",
  token_endpoint_auth_method = "string", private_key = "string", signing_alg = "string",
  authorization_server = "string", max_step_up = "number", timeout_ms = "number",
  authorize = "function", client_assertion = { "string", "function" }, store = "table",
  refresh_margin_s = "number", cache = "boolean", offline_access = "boolean", dpop = "boolean",
  assertion = { "string", "function" }, id_token = { "string", "function" }, idp_token_endpoint = "string",
  idp_client_id = "string", idp_client_secret = "string", application_type = "string",
}

function M.check_options(a, level)
  level = (level or 1) + 1
  if a == true then return {} end
  if type(a) ~= "table" then error("specula.mcp.connect: auth must be a table of options (or true)", level) end
  for k, v in pairs(a) do
    local want = OPTION_TYPES[k]
    if want == nil then
      error("specula.mcp.connect: auth." .. tostring(k) .. " is not an auth option", level)
    end
    local ok = type(want) == "table" and (type(v) == want[1] or type(v) == want[2]) or type(v) == want
    if not ok then
      error("specula.mcp.connect: auth." .. k .. " must be a " .. (type(want) == "table" and concat(want, " or ") or want), level)
    end
  end
  if a.grant and not M.GRANTS[a.grant] then
    error("specula.mcp.connect: auth.grant must be authorization_code, client_credentials, jwt_bearer or enterprise",
      level)
  end
  if a.token_endpoint_auth_method and not M.METHODS[a.token_endpoint_auth_method] then
    error("specula.mcp.connect: auth.token_endpoint_auth_method must be none, client_secret_basic, "
      .. "client_secret_post or private_key_jwt", level)
  end
  if a.signing_alg and a.signing_alg ~= "ES256" and a.signing_alg ~= "RS256" then
    error("specula.mcp.connect: auth.signing_alg must be ES256 or RS256", level)
  end
  if a.grant == "client_credentials" and not a.client_id then
    error("specula.mcp.connect: auth.grant = client_credentials needs auth.client_id", level)
  end
  if a.grant == "client_credentials" and not (a.client_secret or a.private_key or a.client_assertion) then
    error("specula.mcp.connect: auth.grant = client_credentials needs auth.client_secret, "
      .. "auth.private_key or auth.client_assertion", level)
  end
  if a.grant == "jwt_bearer" and not a.assertion then
    error("specula.mcp.connect: auth.grant = jwt_bearer needs auth.assertion (the workload's JWT, or a function "
      .. "returning one)", level)
  end
  if a.grant == "enterprise" then
    for _, k in ipairs({ "client_id", "id_token", "idp_token_endpoint" }) do
      if not a[k] then error("specula.mcp.connect: auth.grant = enterprise needs auth." .. k, level) end
    end
  end
  if a.application_type and a.application_type ~= "native" and a.application_type ~= "web" then
    error("specula.mcp.connect: auth.application_type must be native or web", level)
  end
  for _, k in ipairs({ "redirect_uri", "client_metadata_url", "authorization_server", "idp_token_endpoint" }) do
    if a[k] and not parse_url(a[k]) then error("specula.mcp.connect: auth." .. k .. " must be an absolute URL", level) end
  end
  if a.store and (type(a.store.load) ~= "function" or type(a.store.save) ~= "function") then
    error("specula.mcp.connect: auth.store needs load(key) and save(key, entry) functions", level)
  end
  -- credentials given by the script are secrets from now on
  declare(a.client_secret)
  declare(a.private_key)
  if type(a.client_assertion) == "string" then declare(a.client_assertion) end
  if type(a.assertion) == "string" then declare(a.assertion) end
  if type(a.id_token) == "string" then declare(a.id_token) end
  declare(a.idp_client_secret)
  return a
end

-- ---- the per-client object --------------------------------------------------------------

local Auth = {}
Auth.__index = Auth

-- o: checked options; url: the server URL; spawn: a function starting a
-- root task (the flow must outlive the request that needed it); where: the
-- client's name for messages.
function M.new(o, url, spawn, where)
  local grant = o.grant or "authorization_code"
  local key = concat({ canonical(url) or url, grant, o.client_id or "", o.client_metadata_url or "" }, "\n")
  local entry = o.cache ~= false and CACHE[key] or nil
  if not entry then
    entry = { key = key }
    if o.cache ~= false then CACHE[key] = entry end
  end
  local self = setmetatable({
    o = o, url = url, resource_url = canonical(url), grant = grant, entry = entry, spawn = spawn,
    where = where, timeout_ms = o.timeout_ms or 30000, max_step_up = o.max_step_up or 2,
    redirect_uri = o.redirect_uri or M.DEFAULT_REDIRECT_URI,
    st = { authorizations = 0, refreshes = 0, registrations = 0, refresh_failures = 0, step_ups = 0 },
  }, Auth)
  if o.store and not entry.loaded then
    entry.loaded = true
    local ok, saved = pcall(o.store.load, key)
    if ok and type(saved) == "table" and type(saved.access_token) == "string" then
      declare(saved.access_token)
      declare(saved.refresh_token)
      declare(saved.client_secret)
      entry.tokens = { access_token = saved.access_token, refresh_token = saved.refresh_token,
                       scope = saved.scope, requested_scope = saved.requested_scope,
                       expires_at_s = tonumber(saved.expires_at_s) }
      local left = tonumber(saved.expires_at_s) and (tonumber(saved.expires_at_s) - os.time())
      if left then entry.tokens.expires_at_ms = sched.real_now() + left * 1000 end
      if type(saved.client_id) == "string" and not o.client_id then
        -- the client the tokens were issued to (a refresh needs it)
        entry.client = { id = saved.client_id, secret = saved.client_secret, method = saved.token_endpoint_auth_method,
                         source = "stored", as = saved.issuer }
      end
    elseif not ok then
      self.store_error = scrub("auth.store.load raised: " .. tostring(saved))
    end
  end
  return self
end

function Auth:_err(msg) return scrub(self.where .. ": authorization: " .. msg) end

-- An HTTP exchange with the authorization side; never recorded.
function Auth:_http(o)
  o.__live = true
  o.timeout_ms = o.timeout_ms or self.timeout_ms
  local res, err = http.request(o)
  if not res then return nil, scrub(err) end
  return res
end

-- GET a JSON document: doc | nil, why (why = "404" etc. for misses).
function Auth:_get_json(url)
  local res, err = self:_http { method = "GET", url = url, headers = { Accept = "application/json" } }
  if not res then return nil, err, true end
  if res.status < 200 or res.status >= 300 then return nil, "HTTP " .. res.status end
  local doc = json.decode(res.body or "")
  if type(doc) ~= "table" then return nil, "not a JSON object" end
  return doc
end

-- ---- discovery --------------------------------------------------------------------------

-- Protected resource metadata: prm | false (none: a 2025-03-26 server) | nil, err.
function Auth:_discover_prm(hint)
  local e = self.entry
  if e.prm ~= nil and (not hint or hint == e.prm_url) then return e.prm end
  local p = parse_url(self.url)
  local cands = {}
  if hint then cands[#cands + 1] = hint end
  local path = p.path:gsub("/+$", "")
  if path ~= "" then cands[#cands + 1] = p.origin .. "/.well-known/oauth-protected-resource" .. path end
  cands[#cands + 1] = p.origin .. "/.well-known/oauth-protected-resource"
  local tried = {}
  for _, u in ipairs(cands) do
    local doc, why = self:_get_json(u)
    if doc then
      if type(doc.resource) ~= "string" then
        return nil, self:_err("the protected resource metadata at " .. u .. " has no resource")
      end
      e.prm, e.prm_url = doc, u
      return doc
    end
    tried[#tried + 1] = u .. " (" .. tostring(why) .. ")"
    if u == hint and why and not why:match("^HTTP 4") then
      return nil, self:_err("protected resource metadata " .. u .. ": " .. tostring(why))
    end
  end
  self.prm_tried = concat(tried, ", ")
  e.prm = false
  return false
end

-- The metadata URLs of an authorization server, in the order MCP asks for.
local function as_metadata_urls(issuer)
  local p = parse_url(issuer)
  local path = p.path:gsub("/+$", "")
  if path == "" then
    return { p.origin .. "/.well-known/oauth-authorization-server",
             p.origin .. "/.well-known/openid-configuration" }
  end
  return { p.origin .. "/.well-known/oauth-authorization-server" .. path,
           p.origin .. "/.well-known/openid-configuration" .. path,
           p.origin .. path .. "/.well-known/openid-configuration" }
end
M.as_metadata_urls = as_metadata_urls

-- Authorization server metadata for as_url: meta (legacy defaults when the
-- server publishes none) | nil, err.
function Auth:_discover_as(as_url)
  local e = self.entry
  if e.as and e.as.url == as_url then return e.as.meta end
  if not parse_url(as_url) then return nil, self:_err("the authorization server is not a URL: " .. tostring(as_url)) end
  local unreachable, last, mismatch = 0, nil, nil
  local urls = as_metadata_urls(as_url)
  for _, u in ipairs(urls) do
    local doc, why, transport = self:_get_json(u)
    if doc and type(doc.token_endpoint) == "string" then
      -- RFC 8414 §3.3: the issuer it states must be the one the URL was
      -- built from, or the document may be an attacker's (a trailing "/"
      -- of the identifier aside, which the URL construction drops)
      local iss = doc.issuer
      if iss == nil or iss == as_url or iss .. "/" == as_url or iss == as_url .. "/" then
        e.as = { url = as_url, meta = doc, from = u }
        return doc
      end
      mismatch = mismatch or format("the authorization server metadata at %s names the issuer %s, not %s: "
        .. "refusing to use it", u, tostring(iss), as_url)
    end
    if transport then unreachable, last = unreachable + 1, why end
  end
  if mismatch then return nil, self:_err(mismatch) end
  if unreachable == #urls then
    -- nothing answered at all: no defaults to fall back on
    return nil, self:_err("authorization server metadata: " .. tostring(last))
  end
  -- no metadata: the 2025-03-26 default endpoints at the server's root
  local origin = parse_url(as_url).origin
  local meta = { issuer = origin, authorization_endpoint = origin .. "/authorize",
                 token_endpoint = origin .. "/token", registration_endpoint = origin .. "/register",
                 legacy_defaults = true }
  e.as = { url = as_url, meta = meta, from = "defaults" }
  return meta
end

-- ---- the client identity ----------------------------------------------------------------

local function has(list, v)
  if type(list) ~= "table" then return false end
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

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
  if type(m) ~= "string" or not M.METHODS[m] then m = nil end
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

-- The public JWK of a P-256 key from its SubjectPublicKeyInfo PEM (what
-- crypto.pubkey gives): the DER is a fixed 26-byte prefix and the
-- uncompressed point 04 || X || Y.
local function ec_public_jwk(pub_pem)
  local body = pub_pem:gsub("%-%-%-%-%-[^%-]+%-%-%-%-%-", ""):gsub("%s", "")
  local der = crypto.unb64(body)
  if not der or #der ~= 91 or der:byte(27) ~= 4 then return nil end
  return json.object({ kty = "EC", crv = "P-256", x = crypto.b64url(der:sub(28, 59)), y = crypto.b64url(der:sub(60, 91)) })
end
M.ec_public_jwk = ec_public_jwk

-- Does this client bind its tokens to a DPoP key at this authorization
-- server? auth.dpop = true: always; false: never; unset: when the server
-- lists ES256 in dpop_signing_alg_values_supported.
function Auth:_use_dpop(meta)
  if self.o.dpop ~= nil then return self.o.dpop end
  return has(meta and meta.dpop_signing_alg_values_supported, "ES256")
end

-- The DPoP key of this server's tokens (made once, kept with them: a
-- refresh token bound to it needs the same key): { pem, jwk } | nil, err.
function Auth:_dpop_key()
  local e = self.entry
  if e.dpop_key then return e.dpop_key end
  local pem, err = crypto.keygen("ES256")
  if not pem then return nil, self:_err("making the DPoP key: " .. tostring(err)) end
  declare(pem)
  local pub, perr = crypto.pubkey(pem)
  local jwk = pub and ec_public_jwk(pub)
  if not jwk then return nil, self:_err("the DPoP public key: " .. tostring(perr or "not a P-256 key")) end
  e.dpop_key = { pem = pem, jwk = jwk }
  return e.dpop_key
end

-- A DPoP proof for one request (a new jti each time): htm the method, htu
-- the URL without query and fragment, ath the hash of the access token
-- sent with it, nonce the server's when it gave one.
function Auth:_dpop_proof(method, url, access_token, nonce)
  local key, kerr = self:_dpop_key()
  if not key then return nil, kerr end
  local header = crypto.b64url(json.encode(json.object({ typ = "dpop+jwt", alg = "ES256", jwk = key.jwk })))
  local claims = json.object({ jti = crypto.b64url(assert(crypto.random(16))), htm = method,
                               htu = (url:gsub("[?#].*$", "")), iat = os.time(), nonce = nonce })
  if access_token then claims.ath = crypto.b64url(crypto.sha256(access_token)) end
  local input = header .. "." .. crypto.b64url(json.encode(claims))
  local sig, err = crypto.sign("ES256", key.pem, input)
  if not sig then return nil, self:_err("signing a DPoP proof: " .. tostring(err)) end
  return input .. "." .. crypto.b64url(sig)
end

-- POST a form to a token endpoint: the decoded answer | nil, err, status.
-- A DPoP server's use_dpop_nonce refusal is answered once with its nonce
-- (RFC 9449 §8).
function Auth:_post_token(url, params, headers, what, dpop)
  local body = form(params)
  local res, err
  for _ = 1, 2 do
    if dpop then
      local proof, perr = self:_dpop_proof("POST", url, nil, self.entry.dpop_as_nonce)
      if not proof then return nil, perr end
      headers.DPoP = proof
    end
    res, err = self:_http { method = "POST", url = url, body = body, headers = headers }
    if not res then return nil, self:_err(what .. ": " .. err) end
    local nonce = res.headers["dpop-nonce"]
    if not (dpop and nonce) then break end
    local changed = nonce ~= self.entry.dpop_as_nonce
    self.entry.dpop_as_nonce = nonce
    local d = res.status == 400 and json.decode(res.body or "")
    if not (changed and type(d) == "table" and d.error == "use_dpop_nonce") then break end
  end
  local doc = json.decode(res.body or "")
  if type(doc) == "table" then
    declare(doc.access_token)
    declare(doc.refresh_token)
    declare(doc.id_token)
  end
  if res.status < 200 or res.status >= 300 then
    local why = ""
    if type(doc) == "table" and type(doc.error) == "string" then
      why = ": " .. doc.error .. (type(doc.error_description) == "string" and (": " .. doc.error_description) or "")
    end
    return nil, self:_err(format("%s at %s: HTTP %d%s", what, url, res.status, why)), res.status
  end
  if type(doc) ~= "table" or type(doc.access_token) ~= "string" or doc.access_token == "" then
    return nil, self:_err(what .. " at " .. url .. ": the response has no access_token")
  end
  return doc
end

-- POST to the token endpoint: tokens | nil, err.
function Auth:_token_request(meta, client, params, what)
  local headers = { ["Content-Type"] = "application/x-www-form-urlencoded", Accept = "application/json" }
  local ok, aerr = self:_client_auth(meta, client, params, headers)
  if not ok then return nil, aerr end
  local dpop = self:_use_dpop(meta)
  local doc, err, status = self:_post_token(meta.token_endpoint, params, headers, what, dpop)
  if not doc then return nil, err, status end
  local tt = type(doc.token_type) == "string" and lower(doc.token_type) or ""
  if not (tt == "bearer" or (dpop and tt == "dpop")) then
    return nil, self:_err(what .. ": unsupported token_type " .. tostring(doc.token_type)
      .. (dpop and " (Bearer and DPoP are)" or " (Bearer is)"))
  end
  local t = { access_token = doc.access_token, refresh_token = doc.refresh_token,
              scope = type(doc.scope) == "string" and doc.scope or nil, dpop = tt == "dpop" or nil }
  local ttl = tonumber(doc.expires_in)
  if ttl and ttl > 0 then
    t.expires_at_ms = sched.real_now() + ttl * 1000
    t.expires_at_s = os.time() + ttl
    t.ttl_ms = ttl * 1000
  end
  return t
end

-- ---- grants ---------------------------------------------------------------------------------

-- The redirect for an authorization URL without a browser: fetch it, do not
-- follow, read Location (an authorization server that approves at once,
-- as test and machine-to-machine servers do).
function Auth:_headless(url)
  local res, err = self:_http { method = "GET", url = url }
  if not res then return nil, err end
  local loc = res.headers["location"]
  local hint = "it needs a user; give auth.authorize = function(url) ... return redirect_url end"
  if not (res.status >= 300 and res.status < 400 and loc) then
    return nil, format("the authorization endpoint answered HTTP %d without a redirect: %s", res.status, hint)
  end
  local want, got = parse_url(self.redirect_uri), parse_url(loc)
  if not got or got.origin ~= want.origin or got.path ~= want.path then
    return nil, format("the authorization endpoint redirected to %s, not to the redirect URI (a login page?): %s",
      got and (got.origin .. got.path) or "a relative URL", hint)
  end
  return loc
end

function Auth:_authorization_code(meta, client, scope, resource)
  if type(meta.authorization_endpoint) ~= "string" then
    return nil, self:_err("the authorization server metadata has no authorization_endpoint")
  end
  if not meta.legacy_defaults and not has(meta.code_challenge_methods_supported, "S256") then
    return nil, self:_err("the authorization server does not list PKCE S256 in code_challenge_methods_supported: "
      .. "refusing to authorize without it")
  end
  local verifier = declare(crypto.b64url(assert(crypto.random(32))))
  local challenge = crypto.b64url(crypto.sha256(verifier))
  local state = crypto.b64url(assert(crypto.random(16)))
  local url = join_query(meta.authorization_endpoint, form({
    { "response_type", "code" }, { "client_id", client.id }, { "redirect_uri", self.redirect_uri },
    { "state", state }, { "code_challenge", challenge }, { "code_challenge_method", "S256" },
    { "scope", scope }, { "resource", resource } }))
  local redirect, rerr
  if self.o.authorize then
    local ok, r, e2 = pcall(self.o.authorize, url, { redirect_uri = self.redirect_uri, state = state,
                                                     server = self.url, authorization_server = self.entry.as.url })
    if not ok then return nil, self:_err("auth.authorize raised: " .. tostring(r)) end
    redirect, rerr = r, e2
  else
    redirect, rerr = self:_headless(url)
  end
  if type(redirect) ~= "string" then
    return nil, self:_err("no authorization code: " .. tostring(rerr or "auth.authorize returned nothing"))
  end
  local q = redirect:match("%?([^#]*)")
  local params = query_params(q)
  -- RFC 9207: a present iss must be the issuer recorded from the metadata,
  -- compared as strings (no URL normalization); a server that says it sends
  -- iss must send it. Otherwise the response may come from another server
  -- (a mix-up attack) and its code must not go to this token endpoint.
  if params.iss ~= nil then
    if params.iss ~= meta.issuer then
      return nil, self:_err(format("the authorization response names the issuer %s, not %s (iss, RFC 9207): "
        .. "refusing it", params.iss, tostring(meta.issuer)))
    end
  elseif meta.authorization_response_iss_parameter_supported == true then
    return nil, self:_err("the authorization server says it sends iss (authorization_response_iss_parameter_supported) "
      .. "but its response has none (RFC 9207): refusing it")
  end
  if params.error then
    return nil, self:_err("the authorization server refused: " .. params.error
      .. (params.error_description and (": " .. params.error_description) or ""))
  end
  if params.state ~= state then
    return nil, self:_err("the redirect's state does not match the request's (a forged or stale redirect)")
  end
  if not params.code or params.code == "" then return nil, self:_err("the redirect carries no code") end
  declare(params.code)
  return self:_token_request(meta, client, {
    { "grant_type", "authorization_code" }, { "code", params.code }, { "redirect_uri", self.redirect_uri },
    { "code_verifier", verifier }, { "resource", resource } }, "token request")
end

-- A string credential from an option that is a string or a function
-- (called with info): the value, declared secret | nil, err.
function Auth:_credential(name, info)
  local v = self.o[name]
  if type(v) == "function" then
    local ok, r = pcall(v, info)
    if not ok then return nil, self:_err("auth." .. name .. " raised: " .. tostring(r)) end
    v = r
  end
  if type(v) ~= "string" or v == "" then return nil, self:_err("auth." .. name .. " gave no " .. name) end
  return declare(v)
end

-- Enterprise-managed authorization (the MCP extension, RFC 8693 + RFC
-- 7523): the user's ID token from the enterprise identity provider is
-- exchanged there for an identity assertion authorization grant (ID-JAG)
-- for this authorization server and resource: the ID-JAG | nil, err.
function Auth:_id_jag(meta, resource, scope)
  local o = self.o
  local idt, ierr = self:_credential("id_token", { idp_token_endpoint = o.idp_token_endpoint,
                                                  authorization_server = meta.issuer, resource = resource })
  if not idt then return nil, ierr end
  local params = {
    { "grant_type", TOKEN_EXCHANGE }, { "requested_token_type", ID_JAG_TYPE },
    { "audience", meta.issuer or self.entry.as.url }, { "resource", resource }, { "scope", scope },
    { "subject_token", idt }, { "subject_token_type", ID_TOKEN_TYPE },
    { "client_id", o.idp_client_id }, { "client_secret", o.idp_client_secret } }
  local doc, err = self:_post_token(o.idp_token_endpoint, params,
    { ["Content-Type"] = "application/x-www-form-urlencoded", Accept = "application/json" },
    "token exchange at the identity provider")
  if not doc then return nil, err end
  if doc.issued_token_type ~= ID_JAG_TYPE then
    return nil, self:_err("token exchange at the identity provider: issued_token_type is "
      .. tostring(doc.issued_token_type) .. ", not " .. ID_JAG_TYPE)
  end
  return doc.access_token
end

-- Discovery, client, grant: new tokens in the cache | nil, err.
function Auth:_authorize(scope_hint, rm_url)
  local e = self.entry
  local prm, perr = self:_discover_prm(rm_url)
  if prm == nil then return nil, perr end
  local resource, as_url
  if prm then
    if not covers(prm.resource, self.url) then
      return nil, self:_err(format("the protected resource metadata names the resource %s, not this server (%s): "
        .. "refusing to authorize", tostring(prm.resource), tostring(self.resource_url)))
    end
    -- the identifier as the resource names itself (RFC 9728), without a fragment
    resource = (prm.resource:gsub("#.*$", ""))
    local list = prm.authorization_servers
    as_url = self.o.authorization_server or (type(list) == "table" and type(list[1]) == "string" and list[1])
    if not as_url then return nil, self:_err("the protected resource metadata names no authorization server") end
  else
    -- a 2025-03-26 server: its origin is the authorization server
    as_url = self.o.authorization_server or parse_url(self.url).origin
  end
  e.resource = resource
  local meta, merr = self:_discover_as(as_url)
  if not meta then return nil, merr end
  if type(meta.token_endpoint) ~= "string" then return nil, self:_err("the authorization server has no token endpoint") end
  -- scope: the script's, the challenge's, the resource's scopes_supported, or none
  local scope = self.o.scope or scope_hint
  if not scope and prm and type(prm.scopes_supported) == "table" and #prm.scopes_supported > 0 then
    scope = concat(prm.scopes_supported, " ")
  end
  -- SEP-2207: a refresh token is asked for with offline_access where the
  -- authorization server offers it (and only there)
  if self.grant == "authorization_code" and scope and self.o.offline_access ~= false
     and has(meta.scopes_supported, "offline_access") and not scope_set(scope).offline_access then
    scope = scope .. " offline_access"
  end
  local client, cerr = self:_client(meta, scope)
  if not client then return nil, cerr end
  self.client = client
  local tokens, terr
  if self.grant == "client_credentials" then
    tokens, terr = self:_token_request(meta, client, { { "grant_type", "client_credentials" }, { "scope", scope },
                                                       { "resource", resource } }, "client credentials token request")
  elseif self.grant == "jwt_bearer" or self.grant == "enterprise" then
    -- RFC 7523 §2.1: the workload's JWT, or the ID-JAG, is the grant
    local a, aerr
    if self.grant == "enterprise" then
      a, aerr = self:_id_jag(meta, resource, scope)
    else
      a, aerr = self:_credential("assertion", { authorization_server = meta.issuer or as_url, resource = resource,
                                                token_endpoint = meta.token_endpoint, scope = scope })
    end
    if not a then return nil, aerr end
    tokens, terr = self:_token_request(meta, client, { { "grant_type", JWT_BEARER_GRANT }, { "assertion", a },
      { "scope", scope }, { "resource", resource } }, "JWT bearer token request")
  else
    tokens, terr = self:_authorization_code(meta, client, scope, resource)
  end
  if not tokens then return nil, terr end
  tokens.requested_scope = scope
  self:_save(tokens)
  self.st.authorizations = self.st.authorizations + 1
  return true
end

function Auth:_save(tokens)
  self.entry.tokens = tokens
  -- a DPoP-bound token is worthless without its key, which never leaves
  -- the process: such tokens are not stored
  if self.o.store and not tokens.dpop then
    local c = self.client or {}
    local ok, err = pcall(self.o.store.save, self.entry.key, {
      access_token = tokens.access_token, refresh_token = tokens.refresh_token, scope = tokens.scope,
      requested_scope = tokens.requested_scope, expires_at_s = tokens.expires_at_s,
      client_id = c.id, client_secret = c.secret, token_endpoint_auth_method = self.method,
      issuer = c.as })
    if not ok then self.store_error = scrub("auth.store.save raised: " .. tostring(err)) end
  end
end

-- refresh_token grant: true | nil, err.
function Auth:_refresh()
  local e = self.entry
  local t = e.tokens
  if not (t and t.refresh_token) then return nil, "no refresh token" end
  local meta = e.as and e.as.meta
  if not meta then
    local prm = self:_discover_prm()
    local as_url = self.o.authorization_server
      or (prm and type(prm.authorization_servers) == "table" and prm.authorization_servers[1])
      or parse_url(self.url).origin
    meta = self:_discover_as(as_url)
    if prm then e.resource = (prm.resource:gsub("#.*$", "")) end
  end
  local client = self.client or (self.o.client_id and { id = self.o.client_id, secret = self.o.client_secret })
    or e.client
  if not meta or not client then return nil, "nothing to refresh with" end
  self.client = client
  local nt, err = self:_token_request(meta, client, { { "grant_type", "refresh_token" },
    { "refresh_token", t.refresh_token }, { "resource", e.resource } }, "token refresh")
  if not nt then
    self.st.refresh_failures = self.st.refresh_failures + 1
    e.tokens = nil
    return nil, err
  end
  nt.refresh_token = nt.refresh_token or t.refresh_token   -- kept unless rotated
  nt.requested_scope = t.requested_scope
  nt.scope = nt.scope or t.scope
  self:_save(nt)
  self.st.refreshes = self.st.refreshes + 1
  return true
end

-- Run fn once at a time per server (other callers wait for the same run).
function Auth:_once(fn)
  local e = self.entry
  local busy = e.busy
  if busy and not busy:done() then
    local okw, ok, err = busy:wait()
    if not okw then return nil, self:_err(tostring(ok)) end
    return ok, err
  end
  local t = self.spawn(fn)
  if not t then return nil, self:_err("the engine is shutting down") end
  e.busy = t
  local okw, ok, err = t:wait()
  if e.busy == t then e.busy = nil end
  if not okw then return nil, self:_err("failed: " .. scrub(tostring(ok))) end
  return ok, err
end

-- ---- what the transport calls ------------------------------------------------------------

-- The access token to send now (refreshed first when it is about to
-- expire), or nil when there is none yet.
function Auth:token()
  local t = self.entry.tokens
  if not t then return nil end
  if t.expires_at_ms and t.refresh_token then
    local margin = self.o.refresh_margin_s and self.o.refresh_margin_s * 1000 or math.min(30000, (t.ttl_ms or 0) / 10)
    if sched.real_now() >= t.expires_at_ms - margin then
      local sent = t
      self:_once(function()
        if self.entry.tokens ~= sent then return true end   -- refreshed meanwhile
        return self:_refresh()
      end)
      t = self.entry.tokens
      if not t then return nil end
    end
  end
  return t.access_token
end

-- The credential headers of a request to the server that carries the
-- access token `token` (from token()): Authorization with the token's
-- scheme, and for a DPoP-bound token a fresh proof of the key (RFC 9449 §7).
-- h: the headers to add to; method, url: the request's.
function Auth:authorize_request(h, method, url, token)
  local t = self.entry.tokens
  if t and t.dpop and t.access_token == token then
    local proof = self:_dpop_proof(method, url, token, self.entry.dpop_rs_nonce)
    if proof then
      h["Authorization"] = "DPoP " .. token
      h["DPoP"] = proof
      return h
    end
  end
  h["Authorization"] = "Bearer " .. token
  return h
end

-- The server refused a request (401/403) that carried `sent` (the access
-- token, or nil). st: this request's retry state; headers: the response's
-- (lowercase names). true: retry the request; nil, err: give up.
function Auth:challenge(status, www, st, sent, headers)
  local dch = M.parse_challenge(www, "dpop")
  local ch = M.parse_challenge(www) or dch or {}
  local e = self.entry
  -- RFC 9449 §9: a DPoP server asks for its nonce in the proof; once per request
  local nonce = headers and headers["dpop-nonce"]
  if status == 401 and dch and dch.error == "use_dpop_nonce" and nonce and sent and e.tokens and e.tokens.dpop then
    e.dpop_rs_nonce = nonce
    if not st.dpop_nonce then
      st.dpop_nonce = true
      return true
    end
    return nil, self:_err("the server still asks for a DPoP nonce after the one it gave was sent")
  end
  if status == 403 and ch.error ~= "insufficient_scope" then
    return nil, self:_err("HTTP 403 forbidden" .. (ch.error and (" (" .. ch.error .. ")") or ""))
  end
  -- another task got new tokens since this request left: just retry
  if sent and e.tokens and e.tokens.access_token ~= sent and not st.retried_new then
    st.retried_new = true
    return true
  end
  if status == 401 then
    -- a token this very request was just given is refused: authorizing
    -- again (maybe asking a person again) cannot help
    if st.granted then
      return nil, self:_err("the server still answers 401 after authorizing" ..
        (ch.error_description and (": " .. ch.error_description) or ""))
    end
    if sent and e.tokens and e.tokens.refresh_token and not st.refreshed then
      st.refreshed = true
      local ok = self:_once(function()
        if e.tokens and e.tokens.access_token ~= sent then return true end
        return self:_refresh()
      end)
      if ok then return true end
    end
    local ok, err = self:_once(function()
      if sent == nil and e.tokens then return true end   -- authorized by another request meanwhile
      -- a token refused: the resource may have moved to another
      -- authorization server (SEP-2352), so its metadata is read again
      if sent then e.prm = nil end
      return self:_authorize(ch.scope, ch.resource_metadata)
    end)
    if not ok then return nil, err end
    st.granted = e.tokens and (e.tokens.requested_scope or "")
    return true
  end
  -- 403 insufficient_scope: step up to the scopes held plus the ones asked
  st.step_ups = (st.step_ups or 0) + 1
  local held = e.tokens and e.tokens.requested_scope
  local want = scope_union(held, ch.scope)
  if st.step_ups > self.max_step_up then
    return nil, self:_err(format("gave up after %d step-up authorization(s) (max_step_up = %d): the server still "
      .. "asks for scope '%s'", st.step_ups - 1, self.max_step_up, tostring(ch.scope)))
  end
  -- the token this request just got already asked for that scope: asking
  -- again cannot help
  local fresh = st.stepped_to or st.granted
  if fresh and scope_covers(fresh, ch.scope) then
    return nil, self:_err(format("the server still refuses (403 insufficient_scope) with the scope '%s' just granted",
      tostring(want)))
  end
  st.stepped_to = want or ""
  self.st.step_ups = self.st.step_ups + 1
  local ok, err = self:_once(function() return self:_authorize(want, ch.resource_metadata) end)
  if not ok then return nil, err end
  return true
end

-- What a script may see (no credential): client, method, scopes, counts.
function Auth:info()
  local e = self.entry
  local t = e.tokens
  local cl = self.client or e.client
  local out = {
    grant = self.grant, resource = e.resource, authorization_server = e.as and e.as.url,
    metadata_from = e.as and e.as.from, client_id = cl and cl.id or self.o.client_id,
    client_source = cl and cl.source or (self.o.client_id and "pre-registered" or nil),
    token_endpoint_auth_method = self.method, has_token = t ~= nil, has_refresh_token = t and t.refresh_token ~= nil,
    scope = t and (t.scope or t.requested_scope), requested_scope = t and t.requested_scope,
    expires_in_s = t and t.expires_at_ms and math.floor((t.expires_at_ms - sched.real_now()) / 1000) or nil,
    store_error = self.store_error, dpop = t and t.dpop or false,
  }
  for k, v in pairs(self.st) do out[k] = v end
  return out
end

-- Forget the cached tokens of this server (the next request authorizes again).
function Auth:forget()
  self.entry.tokens = nil
end

M.Auth = Auth
return M
