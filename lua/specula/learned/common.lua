-- specula.learned.common: what every part of the learned predictor shares:
-- the separator of its keys, the text class, a fixed walk over a table's
-- keys, and the key a value is compared and indexed by.
local json = require "specula.json"
local nojit = require "specula.internal.nojit"

local type, pairs, ipairs, tostring, setmetatable, getmetatable, pcall = type, pairs, ipairs, tostring, setmetatable,
  getmetatable, pcall
local sort, format = table.sort, string.format
local canonical, JNULL = json.canonical, json.null

local M = {}

M.SEP = "\31"
M.TEXT = "\0text"     -- the class "no call: the model answers in text"

-- The keys of a table, sorted (numbers before strings): the one pairs()
-- walk, kept out of the JIT (specula/internal/nojit.lua) and in a fixed order.
local function keys_of(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  sort(ks, function(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta < tb end
    return a < b
  end)
  return ks
end
nojit(keys_of)
M.keys_of = keys_of

local function is_array(t)
  local mt = getmetatable(t)
  if mt == json.array_mt then return true end
  if mt == json.object_mt then return false end
  return t[1] ~= nil
end

local function numstr(x)
  if x % 1 == 0 and x > -1e15 and x < 1e15 then return format("%d", x) end
  return format("%.17g", x)
end

-- The key a value is compared and indexed by (a table's is its canonical
-- JSON, kept: the values a conversation offers are not changed).
local tkeys = setmetatable({}, { __mode = "k" })
local function vkey(v)
  local t = type(v)
  if t == "string" then return "s" .. v end
  if t == "number" then return "n" .. numstr(v) end
  if t == "boolean" then return v and "btrue" or "bfalse" end
  if v == JNULL then return "null" end
  if t == "table" then
    local k = tkeys[v]
    if k then return k end
    local ok, s = pcall(canonical, v)
    if ok then
      k = "j" .. s
      tkeys[v] = k
      return k
    end
  end
  return nil
end
M.vkey = vkey

local function deep_copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for _, k in ipairs(keys_of(v)) do out[k] = deep_copy(v[k]) end
  local mt = getmetatable(v)
  if mt == json.array_mt or mt == json.object_mt then setmetatable(out, mt) end
  return out
end

-- A count as a feature's value: small counts apart, larger ones in ranges.
local function bucket(n)
  if n <= 3 then return tostring(n) end
  if n <= 5 then return "4-5" end
  if n <= 9 then return "6-9" end
  return "10+"
end

M.is_array, M.numstr, M.deep_copy, M.bucket = is_array, numstr, deep_copy, bucket

-- One epoch's order of n training items: a fixed pseudo-random shuffle (a
-- linear congruential walk from seed), so training is repeatable. Returns
-- the order and the seed the next epoch starts from.
function M.epoch_order(n, seed)
  local order = {}
  for i = 1, n do order[i] = i end
  for i = n, 2, -1 do
    seed = (seed * 1103515245 + 12345) % 2147483648
    local j = seed % i + 1
    order[i], order[j] = order[j], order[i]
  end
  return order, seed
end

return M
