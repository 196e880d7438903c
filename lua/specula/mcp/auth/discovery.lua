-- specula.mcp.auth.discovery: where to authorize: the protected resource
-- metadata (RFC 9728) and the authorization server's (RFC 8414, OpenID
-- Discovery), else the 2025-03-26 defaults. Methods of the Auth object.
local type, tostring, tonumber, pairs, ipairs, setmetatable, error =
  type, tostring, tonumber, pairs, ipairs, setmetatable, error
local format, concat, lower = string.format, table.concat, string.lower
local U = require "specula.mcp.auth.urls"
local parse_url, form, urlenc, has = U.parse_url, U.form, U.urlenc, U.has

local M = {}
-- the methods init.lua puts on the Auth object
local Auth = {}
M.methods = Auth

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


return M
