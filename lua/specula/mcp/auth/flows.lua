-- specula.mcp.auth.flows: the grants that obtain a token: authorization
-- code with PKCE (its state and iss checked), client credentials, JWT
-- bearer and the enterprise ID-JAG exchange (RFC 8693), chosen by
-- Auth:_authorize. Methods of the Auth object; codes, verifiers and
-- assertions declared.
local json = require "specula.json"
local crypto = require "specula.crypto"
local secrets = require "specula.secrets"
local C = require "specula.mcp.auth.challenge"
local scope_set = C.scope_set

local type, tostring, tonumber, pairs, ipairs, setmetatable, error =
  type, tostring, tonumber, pairs, ipairs, setmetatable, error
local format, concat, lower = string.format, table.concat, string.lower
local U = require "specula.mcp.auth.urls"
local parse_url, form, urlenc, has = U.parse_url, U.form, U.urlenc, U.has
local covers, query_params, join_query = U.covers, U.query_params, U.join_query
local M = {}
-- the methods init.lua puts on the Auth object
local Auth = {}
M.methods = Auth

local JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"         -- RFC 7523 §2.1
local TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"       -- RFC 8693
local ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
local ID_JAG_TYPE = "urn:ietf:params:oauth:token-type:id-jag"

local declare = secrets.declared   -- declares a credential and returns it

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

return M
