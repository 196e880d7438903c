-- specula.learned.descriptors: where an argument's value comes from. A
-- descriptor names a constant or a channel, the item taken from it and a
-- transform; `discover` finds every descriptor that gives a value at a
-- view, `produce` the value a descriptor gives there.
local json = require "specula.json"
local common = require "specula.learned.common"
local sources = require "specula.learned.sources"
local views = require "specula.learned.view"

local type, ipairs, tonumber, setmetatable = type, ipairs, tonumber, setmetatable
local concat, sub, lower, upper = table.concat, string.sub, string.lower, string.upper
local canonical, JNULL = json.canonical, json.null
local SEP, keys_of, is_array, numstr, vkey = common.SEP, common.keys_of, common.is_array, common.numstr, common.vkey
local event_sources = sources.event_sources
local chan_values, used_set = views.chan_values, views.used_set

local M = {}

-- ---- transforms -------------------------------------------------------------

local function pick(v, ks)
  if type(v) ~= "table" or v == JNULL then return nil end
  if is_array(v) then
    if #v == 0 then return nil end
    local out = {}
    for i = 1, #v do
      local p = pick(v[i], ks)
      if p == nil or is_array(v[i]) then return nil end
      out[i] = p
    end
    return setmetatable(out, json.array_mt)
  end
  local out = {}
  for _, k in ipairs(ks) do
    if v[k] == nil then return nil end
    out[k] = v[k]
  end
  return out
end

local function apply_xf(xf, v)
  if xf == "" then return v end
  if xf == "num" then
    if type(v) ~= "string" then return nil end
    local n = tonumber(v)
    if n == nil or numstr(n) ~= v then return nil end
    return n
  end
  if xf == "str" then
    if type(v) ~= "number" then return nil end
    return numstr(v)
  end
  if xf == "lower" then return type(v) == "string" and lower(v) or nil end
  if xf == "upper" then return type(v) == "string" and upper(v) or nil end
  local ks = xf:match("^pick:(.*)$")
  if ks then
    local list = {}
    for k in ks:gmatch("[^\30]+") do list[#list + 1] = k end
    return pick(v, list)
  end
  return nil
end

-- ---- descriptors: where a value comes from -------------------------------
-- "K" SEP canonical value                       a constant
-- chkey SEP sel SEP xf                          a channel (above), the item
--   taken (i0..i2: the n-th value, newest first; u0..u2: the n-th not yet
--   used for this argument; l0: the last value of the newest event that has
--   one) and a transform

local SELS = { "i0", "i1", "i2", "u0", "u1", "u2", "l0" }
local sel_kind, sel_rank = {}, {}
for _, sl in ipairs(SELS) do sel_kind[sl], sel_rank[sl] = sub(sl, 1, 1), tonumber(sub(sl, 2)) end

-- The value a selection takes from a channel's list, and the event it
-- came from.
local function select_value(view, list, sel, tool, arg)
  local kind, r = sel_kind[sel], sel_rank[sel]
  if kind == "i" then
    return list[r + 1]
  end
  if kind == "u" then
    local used = used_set(view, tool, arg)
    local c = 0
    for _, e in ipairs(list) do
      if not used[e.k] then
        if c == r then return e end
        c = c + 1
      end
    end
    return nil
  end
  if kind == "l" then
    local first = list[1]
    if not first then return nil end
    local last = first
    for _, e in ipairs(list) do
      if e.ev ~= first.ev then break end
      last = e
    end
    return last
  end
  return nil
end

-- parse once: descriptor key -> { const = v } or { chan =, sel =, xf = }
local parsed, nparsed = {}, 0
local function parse_desc(key)
  local d = parsed[key]
  if d ~= nil then return d end
  if sub(key, 1, 1) == "K" then
    local v = json.decode(sub(key, 3))
    d = v ~= nil and { const = v } or false
  else
    local a, b, c, sel, xf = key:match("^([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31(.*)$")
    d = a and { chan = a .. SEP .. b .. SEP .. c, sel = sel, xf = xf } or false
  end
  if nparsed >= 100000 then parsed, nparsed = {}, 0 end
  parsed[key] = d
  nparsed = nparsed + 1
  return d
end

-- The value a descriptor gives at a view, the event it came from and its key.
local function produce(view, d, tool, arg)
  if d.const ~= nil then
    local k = d.k
    if not k then k = vkey(d.const); d.k = k end
    return d.const, 0, k
  end
  local list = chan_values(view, d.chan)
  if #list == 0 then return nil end
  local e = select_value(view, list, d.sel, tool, arg)
  if e == nil then return nil end
  if d.xf == "" then return e.v, e.ev, e.k end
  local x = apply_xf(d.xf, e.v)
  if x == nil then return nil end
  return x, e.ev, vkey(x)
end

-- Every descriptor that gives `value` for (tool, arg) at this view.
local function discover(view, tool, arg, value)
  local out, seen = {}, {}
  local function add(k) if not seen[k] then seen[k] = true; out[#out + 1] = k end end
  local vk = vkey(value)
  if not vk then return out end
  add("K" .. SEP .. canonical(value))
  -- which channels hold it, and through which transform
  local chans, chorder = {}, {}
  local function want(key, xf)
    local id = key .. SEP .. xf
    if not chans[id] then chans[id] = { key = key, xf = xf }; chorder[#chorder + 1] = id end
  end
  local events = view.events
  local tv = type(value)
  for i = 1, view.n do
    local e = events[i]
    if e.kind ~= "system" then
      local ix = event_sources(e).ix
      for _, key in ipairs(ix[vk] or {}) do want(key, "") end
      if tv == "number" then
        for _, key in ipairs(ix["s" .. numstr(value)] or {}) do want(key, "num") end
      elseif tv == "string" then
        local n = tonumber(value)
        if n and numstr(n) == value then
          for _, key in ipairs(ix["n" .. value] or {}) do want(key, "str") end
        end
        for _, key in ipairs(ix["l" .. lower(value)] or {}) do
          if value == lower(value) then want(key, "lower") end
          if value == upper(value) then want(key, "upper") end
        end
      elseif tv == "table" and value ~= JNULL then
        -- a projection: some keys of an object, or of each item of a list
        local probe = value
        if is_array(value) then probe = value[1] end
        if type(probe) == "table" and not is_array(probe) then
          local ks = keys_of(probe)
          local xf = "pick:" .. concat(ks, "\30")
          for _, t in ipairs(event_sources(e).tabs) do
            local p = pick(t.value, ks)
            if p ~= nil and vkey(p) == vk then want(t.key, xf) end
          end
        end
      end
    end
  end
  for _, id in ipairs(chorder) do
    local c = chans[id]
    local list = chan_values(view, c.key)
    for _, sel in ipairs(SELS) do
      local e = select_value(view, list, sel, tool, arg)
      if e ~= nil then
        local x = apply_xf(c.xf, e.v)
        if x ~= nil and vkey(x) == vk then add(c.key .. SEP .. sel .. SEP .. c.xf) end
      end
    end
  end
  return out
end

M.SELS, M.parse_desc, M.produce, M.discover = SELS, parse_desc, produce, discover

return M
