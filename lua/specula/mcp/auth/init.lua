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
--
-- The parts, one concept each under specula/mcp/auth/: urls, challenge
-- (WWW-Authenticate, scopes), options, discovery, client (identity and its
-- authentication), dpop, token (the endpoints' requests), flows (the
-- grants); this file holds the per-server cache, the Auth object and what
-- it does on a request and on a 401 or 403.
local http = require "specula.http"
local json = require "specula.json"
local secrets = require "specula.secrets"
local sched = require "specula.internal.sched"
local U = require "specula.mcp.auth.urls"
local challenge = require "specula.mcp.auth.challenge"
local options = require "specula.mcp.auth.options"

local type, tostring, tonumber, pairs, ipairs, setmetatable, error =
  type, tostring, tonumber, pairs, ipairs, setmetatable, error
local format, concat, lower = string.format, table.concat, string.lower

local M = {}

M.DEFAULT_REDIRECT_URI, M.GRANTS, M.METHODS = options.DEFAULT_REDIRECT_URI, options.GRANTS, options.METHODS
M.check_options = options.check_options
M.parse_url, M.canonical, M.covers, M.query_params = U.parse_url, U.canonical, U.covers, U.query_params
M.parse_challenge = challenge.parse_challenge
local parse_url, canonical, form, has = U.parse_url, U.canonical, U.form, U.has
local scope_union, scope_covers = challenge.scope_union, challenge.scope_covers

local declare = secrets.declared   -- declares a credential and returns it
local scrub = secrets.scrub

-- ---- the shared cache: one entry per server and client identity ----------------------------

-- key -> { tokens, client, as, prm, resource, scope }; kept for the process.
local CACHE = {}
M._cache = CACHE

-- ---- the per-client object --------------------------------------------------------------

local Auth = {}
Auth.__index = Auth
-- its methods, part by part
for _, part in ipairs({ "discovery", "client", "dpop", "token", "flows" }) do
  local P = require("specula.mcp.auth." .. part)
  for k, f in pairs(P.methods) do Auth[k] = f end
end
M.as_metadata_urls = require("specula.mcp.auth.discovery").as_metadata_urls
M.application_type = require("specula.mcp.auth.client").application_type
M.ec_public_jwk = require("specula.mcp.auth.dpop").ec_public_jwk

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
