-- specula.learned.sources: what one event of a conversation offers as a
-- source of argument values: its channels (user or assistant text by token
-- shape, a result's JSON fields by path, an earlier call's arguments) and
-- an index from each value to the channels holding it. Kept on the event.
local json = require "specula.json"
local common = require "specula.learned.common"
local tk = require "specula.learned.tokens"

local type, ipairs, tostring, pcall = type, ipairs, tostring, pcall
local concat, sub, lower = table.concat, string.sub, string.lower
local JNULL = json.null
local SEP, keys_of, is_array, vkey = common.SEP, common.keys_of, common.is_array, common.vkey
local tokens, fine_shape, coarse_shape, MAX_SPAN = tk.tokens, tk.fine_shape, tk.coarse_shape, tk.MAX_SPAN

local M = {}

-- A result's text as JSON when it is JSON.
local function result_value(ev)
  if ev._value ~= nil then return ev._value end
  local v = ev.value
  if v == nil and type(ev.text) == "string" then
    local t = ev.text
    local c = t:match("^%s*([%[{])")
    if c and #t < 4e6 then
      local ok, d = pcall(json.decode, t)
      if ok and type(d) == "table" then v = d end
    end
  end
  ev._value = v or false
  return ev._value
end

-- How a result turned out: "err", "empty" or "ok".
local function outcome(ev)
  if ev._outcome then return ev._outcome end
  local t = type(ev.text) == "string" and ev.text or ""
  local o = "ok"
  local s = t:match("^%s*(.-)%s*$")
  if s == "" or s == "[]" or s == "{}" or s == "null" then o = "empty"
  elseif lower(sub(s, 1, 40)):find("^%W*error") or ev.is_error then o = "err"
  else
    local v = result_value(ev)
    if type(v) == "table" and not is_array(v) and (v.error ~= nil or v.isError == true) then o = "err" end
  end
  ev._outcome = o
  return o
end

-- Object keys that are data rather than names (ids, dates: they hold a
-- digit, or are long) are generalised like list indexes.
local function path_key(k)
  if type(k) == "number" then return "*" end
  if k:find("%d") or #k > 40 then return "*" end
  return k
end

local MAX_LEAVES = 4000

-- Channels of one event: chkey -> values in document order. A channel is
-- (kind, source tool, path or shape): U user text, S assistant text, T a
-- result's text (not JSON), R a result's JSON field, A an earlier call's
-- argument. `ix` maps a value key to the channels holding it; `tabs` lists
-- the tables (objects, lists) a projection may come from.
local function scan_json(kind, tool, v, path, ch, order, tabs, budget)
  if budget.n <= 0 then return end
  local function add(key, val)
    local l = ch[key]
    if not l then l = {}; ch[key] = l; order[#order + 1] = key end
    l[#l + 1] = val
    budget.n = budget.n - 1
  end
  local key = kind .. SEP .. tool .. SEP .. path
  if type(v) == "table" then
    if v == JNULL then return end
    tabs[#tabs + 1] = { key = key, value = v }
    add(key, v)
    if is_array(v) then
      for i = 1, #v do scan_json(kind, tool, v[i], path .. ".*", ch, order, tabs, budget) end
    else
      local ks = keys_of(v)
      local data_keys = false
      for _, k in ipairs(ks) do
        local pk = path_key(k)
        if pk == "*" then data_keys = true end
        scan_json(kind, tool, v[k], path .. "." .. pk, ch, order, tabs, budget)
      end
      -- the keys of a map of ids are values too
      if data_keys then
        for _, k in ipairs(ks) do
          if type(k) == "string" and path_key(k) == "*" then add(kind .. SEP .. tool .. SEP .. path .. ".@", k) end
        end
      end
    end
  else
    add(key, v)
  end
end

local function scan_text(kind, tool, text, ch, order)
  local toks = tokens(text)
  -- each token's shapes once; a span's are its tokens' joined
  local fs, cs = {}, {}
  for i = 1, #toks do fs[i], cs[i] = fine_shape(toks[i]), coarse_shape(toks[i]) end
  local prefix = kind .. SEP .. tool .. SEP
  local function put(key, span)
    local l = ch[key]
    if not l then l = {}; ch[key] = l; order[#order + 1] = key end
    l[#l + 1] = span
  end
  for i = 1, #toks do
    for n = 1, MAX_SPAN do
      if i + n - 1 > #toks then break end
      local j = i + n - 1
      local span = n == 1 and toks[i] or concat(toks, " ", i, j)
      put(prefix .. "f" .. (n == 1 and fs[i] or concat(fs, " ", i, j)), span)
      put(prefix .. "c" .. (n == 1 and cs[i] or concat(cs, " ", i, j)), span)
    end
  end
end

local function event_sources(ev)
  local src = ev._src
  if src then return src end
  local ch, order, tabs = {}, {}, {}
  local k = ev.kind
  if k == "user" and type(ev.text) == "string" then scan_text("U", "", ev.text, ch, order)
  elseif k == "assistant" and type(ev.text) == "string" then scan_text("S", "", ev.text, ch, order)
  elseif k == "result" then
    local v = result_value(ev)
    if v then scan_json("R", ev.tool or "", v, "", ch, order, tabs, { n = MAX_LEAVES })
    elseif type(ev.text) == "string" then scan_text("T", ev.tool or "", ev.text, ch, order) end
  elseif k == "call" and type(ev.args) == "table" then
    local args = ev.args
    for _, a in ipairs(keys_of(args)) do
      scan_json("A", ev.tool or "", args[a], tostring(a), ch, order, tabs, { n = MAX_LEAVES })
    end
  end
  local ix = {}
  for _, key in ipairs(order) do
    for _, v in ipairs(ch[key]) do
      local vk = vkey(v)
      if vk then
        local l = ix[vk]
        if not l then l = {}; ix[vk] = l end
        if l[#l] ~= key then l[#l + 1] = key end
        if type(v) == "string" then
          local lk = "l" .. lower(v)
          local ll = ix[lk]
          if not ll then ll = {}; ix[lk] = ll end
          if ll[#ll] ~= key then ll[#ll + 1] = key end
        end
      end
    end
  end
  src = { ch = ch, ix = ix, tabs = tabs }
  ev._src = src
  return src
end

M.result_value, M.outcome, M.path_key, M.event_sources = result_value, outcome, path_key, event_sources

return M
