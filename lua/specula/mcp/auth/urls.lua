-- specula.mcp.auth.urls: the URLs and forms of the OAuth exchanges (the
-- origin and path a resource is compared by, form and query encoding), and
-- a value in a metadata list.
local urlmod = require "specula.url"

local type, tostring, tonumber, pairs, ipairs, setmetatable, error =
  type, tostring, tonumber, pairs, ipairs, setmetatable, error
local format, concat, lower = string.format, table.concat, string.lower

local M = {}

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
M.urlenc, M.urldec, M.form, M.join_query = urlenc, urldec, form, join_query

-- v is one of the values of a metadata list (nil: not)
function M.has(list, v)
  if type(list) ~= "table" then return false end
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

return M
