-- specula.mcp.auth.token: requests to the token endpoint (with the client's
-- authentication and a DPoP proof) and the authorization endpoint fetched
-- headless. Methods of the Auth object; the tokens declared as they come.
local json = require "specula.json"
local secrets = require "specula.secrets"
local sched = require "specula.internal.sched"

local type, tostring, tonumber, pairs, ipairs, setmetatable, error =
  type, tostring, tonumber, pairs, ipairs, setmetatable, error
local format, concat, lower = string.format, table.concat, string.lower
local U = require "specula.mcp.auth.urls"
local parse_url, form, urlenc, has = U.parse_url, U.form, U.urlenc, U.has

local M = {}
-- the methods init.lua puts on the Auth object
local Auth = {}
M.methods = Auth

local declare = secrets.declared   -- declares a credential and returns it

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

return M
