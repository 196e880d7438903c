-- specula.cassette.nearest: for a request the tape does not hold at all,
-- the nearest recorded one of its kind and where the two differ (what a
-- replay miss says).
local json = require "specula.json"

local type, tostring, pairs, ipairs, format = type, tostring, pairs, ipairs, string.format
local tonumber = tonumber

local M = {}

-- The kind of a key, from its head ("MCP ...", "SPEC ...", "OBS ...",
-- "JOB ...", else an HTTP method and URL).
local function key_kind(key)
  local w = key:match("^(%u+) ")
  if w == "MCP" then return "mcp" elseif w == "SPEC" then return "spec" elseif w == "OBS" then return "obs"
  elseif w == "JOB" then return "job" elseif w == "COMMIT" then return "commit" end
  return "http"
end

-- The first place two decoded JSON values differ: a dotted path ("" for
-- the whole value), or nil when they are equal; and how many leaves differ
-- at the top level (to rank candidates).
local function first_diff(a, b, path)
  if type(a) == "table" and type(b) == "table" then
    local ks, seen = {}, {}
    for k in pairs(a) do if not seen[k] then seen[k] = true; ks[#ks + 1] = k end end
    for k in pairs(b) do if not seen[k] then seen[k] = true; ks[#ks + 1] = k end end
    table.sort(ks, function(x, y) return tostring(x) < tostring(y) end)
    local first, count = nil, 0
    for _, k in ipairs(ks) do
      local p = path == "" and tostring(k) or (path .. "." .. tostring(k))
      local d = first_diff(a[k], b[k], p)
      if d then first = first or d; count = count + 1 end
    end
    return first, count
  end
  if a == b then return nil, 0 end
  return path == "" and "(the whole body)" or path, 1
end

local function brief(v)
  local s = v == nil and "(absent)" or (type(v) == "table" and json.encode(v) or tostring(v))
  if #s > 60 then s = s:sub(1, 57) .. "..." end
  return s
end

-- A request the tape does not hold at all: the nearest one of its kind
-- on the tape (the same head first, then the fewest differing fields) and
-- where it differs, or nil when the tape has none of that kind.
local function nearest(st, key)
  local kind = key_kind(key)
  local head, body = key:match("^([^\n]*)\n?(.*)$")
  local asked = json.decode(body)
  local best, bscore, bpath, bwas, bnow
  for k in pairs(st.keys or {}) do
    if key_kind(k) == kind and k ~= key then
      local h, b = k:match("^([^\n]*)\n?(.*)$")
      -- bodies are decoded only under the same head (a tape's model calls
      -- are long; another head ranks after every same-head one anyway)
      local rec = h == head and json.decode(b) or nil
      local path, count
      if asked ~= nil and rec ~= nil then path, count = first_diff(rec, asked, "")
      elseif b ~= body then path, count = "(the whole body)", 1 end
      local score = (h == head and 0 or 1000) + (count or 0)
      if not best or score < bscore or (score == bscore and k < best) then
        best, bscore, bpath = k, score, path
        if h ~= head then bpath = nil end
        local function at(v)
          if not bpath or bpath == "(the whole body)" then return v end
          for part in bpath:gmatch("[^.]+") do
            if type(v) ~= "table" then return nil end
            v = v[part] ~= nil and v[part] or v[tonumber(part) or part]
          end
          return v
        end
        bwas, bnow = at(rec ~= nil and rec or b), at(asked ~= nil and asked or body)
      end
    end
  end
  if not best then return nil end
  local bh = best:match("^[^\n]*")
  if bh ~= head then return format("the nearest recorded %s request: %s (another request)", kind, bh) end
  if not bpath then return format("the nearest recorded %s request: %s", kind, bh) end
  return format("the nearest recorded %s request: %s, which differs at %s: recorded %s, asked %s", kind, bh,
    bpath, brief(bwas), brief(bnow))
end
M.nearest = nearest

return M
