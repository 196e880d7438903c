-- specula.mcp.auth.challenge: what a server asks for: the parameters of its
-- WWW-Authenticate challenge, and the scope sets compared and joined for a
-- step-up.
local type, tostring, tonumber, pairs, ipairs, setmetatable, error =
  type, tostring, tonumber, pairs, ipairs, setmetatable, error
local format, concat, lower = string.format, table.concat, string.lower

local M = {}

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


M.scope_set, M.scope_union, M.scope_covers = scope_set, scope_union, scope_covers

return M
