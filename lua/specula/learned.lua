-- specula.learned: a learned, generic action predictor (specula.predict.learned).
--
-- It reads what the model read — the conversation so far (user and
-- assistant text, earlier calls and their results) and the tools' declared
-- input schemas — and predicts the next call in two parts:
--
--   which tool: a multinomial logistic model over the next event (a tool,
--     or a text reply: no call) with features of the event sequence (the
--     last one to three events, the calls so far), of the latest user and
--     assistant text (words, token shapes) and of the latest result (its
--     outcome and keys), plus features that ask the argument model whether
--     each tool's arguments can be filled right now;
--   which arguments: for each tool and argument, the sources its values
--     came from in training, each kept with its replay precision (how often
--     it gave the right value when it gave one): a span of the user's or the
--     assistant's text of a given token shape, a field of an earlier result
--     (a path, lists generalised, with the item taken: first, next unused,
--     last), an earlier argument, a constant, through simple transforms
--     (number <-> text, case, a projection of some keys of an object or of
--     each item of a list). Sources are learnt per tool and argument name
--     and pooled per argument name across tools (a new tool with a known
--     argument borrows them); a declared schema's types filter values and
--     its enums are candidates. A conditional logit ranks each argument's
--     candidate values (precision of the best source and the next, sources
--     agreeing, recency, new since the model last acted, used already,
--     said in the latest message), learnt on what the model would have
--     offered before it learnt each call.
--
-- Complete calls are ranked by P(tool) x P(arguments | tool), and that score
-- is mapped to a probability of being exactly the next call by an isotonic
-- fit on held-out predictions: folds of the training conversations (grouped
-- by `group(id)`), then every online prediction as it is judged. The EV gate
-- fires on that confidence, and a text turn (where no call comes) counts as
-- a miss for every candidate, as it is in a run. Each candidate also says
-- P(tool) (tool_confidence): what a streamed tool name tells about it.
--
-- Nothing here knows a tool, an argument or a domain. The model is a JSON
-- file (format, version, provenance: what it was trained on, by digest).
local json = require "specula.json"
local nojit = require "specula.nojit"

local type, pairs, ipairs, tostring, tonumber, error, setmetatable, pcall, unpack =
  type, pairs, ipairs, tostring, tonumber, error, setmetatable, pcall, unpack
local sort, concat, floor, exp, log, sqrt, min, max =
  table.sort, table.concat, math.floor, math.exp, math.log, math.sqrt, math.min, math.max
local format, byte, sub, lower, upper = string.format, string.byte, string.sub, string.lower, string.upper
local canonical, JNULL = json.canonical, json.null

local M = {}

M.FORMAT = "specula-learned-predictor"
M.VERSION = 1

local SEP = "\31"
local TEXT = "\0text"     -- the class "no call: the model answers in text"

-- ---- small helpers ----------------------------------------------------------

-- The keys of a table, sorted (numbers before strings): the one pairs()
-- walk, kept out of the JIT (specula/nojit.lua) and in a fixed order.
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

local getmetatable, next = getmetatable, next

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

-- Token shapes: letters and digits by class, runs collapsed ("ab_cd_1234"
-- -> "a_a_9", "X7Y2Z" -> "A9A9A"); and a coarse one: the classes present and
-- the length ("X7Y2Z" -> "A9:5"), so ids that mix classes share a shape.
local function fine_shape(s)
  local sh = s:gsub("%u+", "A"):gsub("%l+", "a"):gsub("%d+", "9")
  if #sh > 24 then sh = sub(sh, 1, 24) .. "+" end
  return sh
end

local function coarse_shape(s)
  local cls = {}
  if s:find("%u") then cls[#cls + 1] = "A" end
  if s:find("%l") then cls[#cls + 1] = "a" end
  if s:find("%d") then cls[#cls + 1] = "9" end
  if s:find("[^%w]") then cls[#cls + 1] = "p" end
  local n = #s
  return concat(cls) .. ":" .. (n <= 16 and tostring(n) or "L")
end

-- Tokens of a text: whitespace-separated, with the punctuation around them
-- cut off (an id keeps its inner '_', '-', '.', '@', '/', ':').
local MAX_TOKENS = 1500
local function tokens(text)
  local out = {}
  for w in text:gmatch("%S+") do
    w = w:gsub("^[\"'%(%[{<*`]+", ""):gsub("[\"'%)%]}>*`.,;:!?]+$", "")
    if w ~= "" then
      out[#out + 1] = w
      if #out >= MAX_TOKENS then break end
    end
  end
  return out
end

local MAX_SPAN = 4

-- Lower-case words of a text for the tool model (digits as '#').
local function words(text, limit)
  local out, seen = {}, {}
  for w in lower(text):gmatch("[%a%d]+") do
    if w:find("%d") then w = "#" .. fine_shape(w) end
    if not seen[w] then
      seen[w] = true
      out[#out + 1] = w
      if #out >= limit then break end
    end
  end
  return out
end

-- ---- what one event offers as a value source --------------------------------

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

-- ---- a view: the conversation as the model saw it at a turn --------------

local function bucket(n)
  if n <= 3 then return tostring(n) end
  if n <= 5 then return "4-5" end
  if n <= 9 then return "6-9" end
  return "10+"
end

local function new_view(events, n)
  local v = { events = events, n = n, chans = {}, used = {} }
  local calls, toks, last = {}, {}, {}
  for i = 1, n do
    local e = events[i]
    local k = e.kind
    if k == "user" then toks[#toks + 1] = "U"; last.user = i
    elseif k == "assistant" then toks[#toks + 1] = "A"; last.assistant = i
    elseif k == "call" then
      calls[#calls + 1] = i
      toks[#toks + 1] = "C" .. tostring(e.tool)
    elseif k == "result" then
      last.result = i
      -- a call's token carries its result's outcome
      if #toks > 0 and toks[#toks]:sub(1, 1) == "C" then toks[#toks] = toks[#toks] .. "/" .. outcome(e) end
    end
  end
  v.calls, v.toks, v.last = calls, toks, last
  return v
end

-- The last thing the model did (its text or a call): what came after it is
-- new to it.
local function last_act(view)
  local act = view.act
  if act then return act end
  act = 0
  for i = view.n, 1, -1 do
    local k = view.events[i].kind
    if k == "assistant" or k == "call" then act = i break end
  end
  view.act = act
  return act
end

-- A channel's distinct values at this view, newest event first, each with
-- the event it came from.
local function chan_values(view, key)
  local l = view.chans[key]
  if l then return l end
  l = {}
  local seen = {}
  local kind = sub(key, 1, 1)
  local want = kind == "U" and "user" or kind == "S" and "assistant" or kind == "A" and "call" or "result"
  local events = view.events
  for i = view.n, 1, -1 do
    local e = events[i]
    if e.kind == want then
      local vals = event_sources(e).ch[key]
      if vals then
        for _, x in ipairs(vals) do
          local vk = vkey(x)
          if vk and not seen[vk] then
            seen[vk] = true
            l[#l + 1] = { v = x, ev = i, k = vk }
          end
        end
      end
    end
  end
  view.chans[key] = l
  return l
end

-- Values of (tool, arg) in the calls so far: a "next unused" source skips them.
local function used_set(view, tool, arg)
  local key = tool .. SEP .. arg
  local s = view.used[key]
  if s then return s end
  s = {}
  local events = view.events
  for _, i in ipairs(view.calls) do
    local e = events[i]
    if e.tool == tool and type(e.args) == "table" then
      local x = e.args[arg]
      if x ~= nil then
        local vk = vkey(x)
        if vk then s[vk] = true end
      end
    end
  end
  view.used[key] = s
  return s
end

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

-- ---- the model ---------------------------------------------------------------

local Learned = {}
Learned.__index = Learned
Learned.__call = function(self, history, ctx) return self:predict(history, ctx) end

local DEFAULTS = {
  top = 3,              -- candidates returned
  epochs = 12,          -- passes of the tool model over the training turns
  rate = 0.1,           -- its learning rate (decays with 1/sqrt(t))
  l2 = 1e-4,            -- and its weight decay
  online_epochs = 2,    -- passes over one conversation learnt online
  folds = 3,            -- held-out folds for the calibration fit
  min_hits = 2,         -- an argument source is used once it gave the right value this often
  max_sources = 64,     -- sources kept per tool and argument
  consider = 64,        -- the best of them offering values at a turn
  cal_keep = 20000,     -- held-out (score, hit) pairs kept for the calibration
  values_per_arg = 3,   -- values tried per argument when calls are assembled
}

local function new_model(opts)
  local self = setmetatable({}, Learned)
  for k, v in pairs(DEFAULTS) do self[k] = opts[k] ~= nil and opts[k] or v end
  self.classes = {}      -- class names (tools, and TEXT); index by name in cidx
  self.cidx = {}
  self.W = {}            -- feature -> { [class index] = weight }
  self.V = {}            -- shared weights of the class-specific features
  self.VW = { lq = 1 }   -- weights of the value ranking (untrained: by source precision)
  self.args = {}         -- tool -> { n, keysets = {ks = count}, keys = {arg = {n, src = {desc = {hit, avail}}}} }
  self.pool = {}         -- arg name -> { src = {desc = {hit, avail}} } across tools
  self.cal = nil         -- { x = {...}, y = {...} } isotonic steps
  self.cal_pairs = {}    -- { {score, hit}, ... }
  self.t = 0             -- SGD steps taken
  self.provenance = { offline = { conversations = 0, turns = 0 }, online = { conversations = 0, turns = 0 } }
  self.schemas = nil
  return self
end

local function class_index(self, name)
  local i = self.cidx[name]
  if not i then
    i = #self.classes + 1
    self.classes[i] = name
    self.cidx[name] = i
  end
  return i
end

-- ---- tool model features -----------------------------------------------------

local function tool_features(view)
  local f = {}
  local function add(name, val) f[#f + 1] = name; f[#f + 1] = val or 1 end
  add("b")
  local toks = view.toks
  local n = #toks
  local t1, t2, t3 = toks[n] or "^", toks[n - 1] or "^", toks[n - 2] or "^"
  add("t1=" .. t1)
  add("t2=" .. t2 .. " " .. t1)
  add("t3=" .. t3 .. " " .. t2 .. " " .. t1)
  local events, calls = view.events, view.calls
  local nc = #calls
  add("nc=" .. bucket(nc))
  local lc1 = nc > 0 and events[calls[nc]].tool or "^"
  local lc2 = nc > 1 and events[calls[nc - 1]].tool or "^"
  add("c1=" .. tostring(lc1))
  add("c2=" .. tostring(lc2) .. " " .. tostring(lc1))
  add("c1t=" .. tostring(lc1) .. " " .. sub(t1, 1, 1))
  local seen = {}
  for _, i in ipairs(calls) do
    local tl = tostring(events[i].tool)
    seen[tl] = (seen[tl] or 0) + 1
  end
  for _, tl in ipairs(keys_of(seen)) do
    add("seen=" .. tl)
    if seen[tl] > 1 then add("seen2=" .. tl) end
  end
  local nu = 0
  for _, tk in ipairs(toks) do if tk == "U" then nu = nu + 1 end end
  add("nu=" .. bucket(nu))
  local last = view.last
  if last.user then
    local e = events[last.user]
    local ws = words(e.text, 48)
    local wv = 1 / sqrt(max(1, #ws))
    for _, w in ipairs(ws) do add("uw=" .. w, wv) end
    local shapes = {}
    for _, tk in ipairs(tokens(e.text)) do
      if tk:find("%d") or tk:find("[%a]_") then shapes[fine_shape(tk)] = true end
    end
    for _, sh in ipairs(keys_of(shapes)) do add("us=" .. sh) end
    add("since_user=" .. bucket(view.n - last.user))
  end
  if last.assistant then
    local text = events[last.assistant].text
    local ws = words(text, 48)
    local wv = 1 / sqrt(max(1, #ws))
    for _, w in ipairs(ws) do add("aw=" .. w, wv) end
  end
  if last.result then
    local e = events[last.result]
    local o = outcome(e)
    add("ro=" .. o)
    local v = result_value(e)
    if type(v) == "table" then
      if is_array(v) then
        add("ry=list" .. bucket(#v))
        if type(v[1]) == "table" and not is_array(v[1]) then
          for _, k in ipairs(keys_of(v[1])) do add("rk=*." .. path_key(tostring(k))) end
        end
      else
        add("ry=obj")
        local ks = keys_of(v)
        for i = 1, min(#ks, 24) do add("rk=" .. path_key(tostring(ks[i]))) end
      end
    else
      add("ry=text")
      if o == "err" then
        local ws = words(e.text, 16)
        for _, w in ipairs(ws) do add("ew=" .. w, 0.5) end
      end
    end
  end
  return f
end

-- ---- argument model ------------------------------------------------------------

local function arg_entry(self, tool)
  local a = self.args[tool]
  if not a then a = { n = 0, keysets = {}, keys = {} }; self.args[tool] = a end
  return a
end

-- Sources of an argument: a list of { d = descriptor, hit =, avail = } in
-- the order they were found (saved as is), with an index by descriptor
-- kept beside it.
local src_index = setmetatable({}, { __mode = "k" })
local function src_ix(tab)
  local ix = src_index[tab]
  if not ix then
    ix = {}
    for _, s in ipairs(tab) do ix[s.d] = s end
    src_index[tab] = ix
  end
  return ix
end

local function src_entry(tab, key)
  local ix = src_ix(tab)
  local s = ix[key]
  if not s then
    s = { d = key, hit = 0, avail = 0 }
    tab[#tab + 1] = s
    ix[key] = s
  end
  return s
end

-- Learn the arguments of one call (tool, args) made at `view`: which
-- sources give each value (discovery), then how each known source of that
-- argument did here (replay precision).
local value_candidates, value_features

local function learn_args(self, view, tool, args, items)
  local a = arg_entry(self, tool)
  a.n = a.n + 1
  if type(args) ~= "table" then return end
  local ks = {}
  for _, k in ipairs(keys_of(args)) do if type(k) == "string" then ks[#ks + 1] = k end end
  local kss = concat(ks, SEP)
  a.keysets[kss] = (a.keysets[kss] or 0) + 1
  -- which arguments of a call share a value (a call rarely repeats one)
  a.eq = a.eq or {}
  for i = 1, #ks do
    for j = i + 1, #ks do
      local pk = ks[i] .. SEP .. ks[j]
      if vkey(args[ks[i]]) == vkey(args[ks[j]]) then a.eq[pk] = (a.eq[pk] or 0) + 1 end
    end
  end
  for _, k in ipairs(ks) do
    if type(k) == "string" then
      local ke = a.keys[k]
      if not ke then ke = { n = 0, src = {}, cov = 0 }; a.keys[k] = ke end
      local pool = self.pool[k]
      if not pool then pool = { src = {}, n = 0, cov = 0 }; self.pool[k] = pool end
      local v = args[k]
      local vk = vkey(v)
      -- first, what the model would have offered (before it learns this
      -- call): how often the right value is among its candidates, and an
      -- example for the value ranking
      local cands = value_candidates(self, view, tool, k, nil)
      local found
      for i, c in ipairs(cands) do if c.k == vk then found = i break end end
      ke.n = ke.n + 1
      pool.n = (pool.n or 0) + 1
      if found then
        ke.cov = (ke.cov or 0) + 1
        pool.cov = (pool.cov or 0) + 1
        if items and #cands > 1 then
          local xs = {}
          for i, c in ipairs(cands) do xs[i] = value_features(self, view, tool, k, c) end
          items[#items + 1] = { xs = xs, y = found }
        end
      end
      for _, d in ipairs(discover(view, tool, k, v)) do
        src_entry(ke.src, d)
        src_entry(pool.src, d)
      end
      -- replay: every known source of this argument
      for _, tab in ipairs({ ke.src, pool.src }) do
        for _, s in ipairs(tab) do
          local pd = parse_desc(s.d)
          if pd then
            local x, _, xk = produce(view, pd, tool, k)
            if x ~= nil then
              s.avail = s.avail + 1
              if xk == vk then s.hit = s.hit + 1 end
            end
          end
        end
      end
    end
  end
end

-- Keep the best sources of each argument, best first (used enough, then
-- by precision).
local function prune_sources(tab, keep, min_hits)
  local list = {}
  for i, s in ipairs(tab) do list[i] = s end
  sort(list, function(x, y)
    local px, py = x.hit / (x.avail + 2), y.hit / (y.avail + 2)
    if x.hit >= min_hits ~= (y.hit >= min_hits) then return x.hit >= min_hits end
    if px ~= py then return px > py end
    return x.d < y.d
  end)
  for i = #tab, 1, -1 do tab[i] = nil end
  for i = 1, min(keep, #list) do tab[i] = list[i] end
  src_index[tab] = nil
end

local function prune(self)
  for _, tool in ipairs(keys_of(self.args)) do
    for _, k in ipairs(keys_of(self.args[tool].keys)) do
      prune_sources(self.args[tool].keys[k].src, self.max_sources, self.min_hits)
    end
  end
  for _, k in ipairs(keys_of(self.pool)) do prune_sources(self.pool[k].src, self.max_sources, self.min_hits) end
end

local function precision(s) return s.hit / (s.avail + 2) end

-- The schema of a tool's input, if declared.
local function schema_of(self, tool, ctx_tools)
  local t = ctx_tools and ctx_tools[tool] or (self.schemas and self.schemas[tool])
  local s = type(t) == "table" and (t.schema or t.input_schema or t.inputSchema or t.parameters)
  return type(s) == "table" and s or nil
end

local function type_ok(prop, v)
  if type(prop) ~= "table" or type(prop.type) ~= "string" then return true end
  local t = prop.type
  local tv = type(v)
  if t == "string" then return tv == "string" end
  if t == "number" then return tv == "number" end
  if t == "integer" then return tv == "number" and v % 1 == 0 end
  if t == "boolean" then return tv == "boolean" end
  if t == "array" then return tv == "table" and (is_array(v) or next(v) == nil) end
  if t == "object" then return tv == "table" and not is_array(v) end
  return true
end

-- Candidate values of one argument at a view, each with what the value
-- ranking reads: the precision of its best source and of the next, how
-- many sources agree, the event it came from and the kind of source.
value_candidates = function(self, view, tool, arg, prop)
  local a = self.args[tool]
  local ke = a and a.keys[arg]
  local pool = self.pool[arg]
  local by, order = {}, {}
  local limit = self.consider
  local function consider(tab, weight, nmin, from_pool)
    local seen = 0
    for _, s in ipairs(tab) do
      if seen >= limit then break end
      if s.hit >= nmin then
        seen = seen + 1
        local pd = parse_desc(s.d)
        local x, ev, vk
        if pd then x, ev, vk = produce(view, pd, tool, arg) end
        if x ~= nil and (prop == nil or type_ok(prop, x)) then
          if vk then
            local q = precision(s) * weight
            local c = by[vk]
            if not c then
              c = { v = x, k = vk, q1 = 0, q2 = 0, ns = 0, ev = 0, kind = "K" }
              by[vk] = c
              order[#order + 1] = vk
            end
            c.ns = c.ns + 1
            if q > c.q1 then
              c.q2, c.q1, c.ev, c.kind, c.pool = c.q1, q, ev or 0, pd.const ~= nil and "K" or sub(pd.chan, 1, 1),
                from_pool
              c.sel = pd.sel
            elseif q > c.q2 then c.q2 = q end
          end
        end
      end
    end
  end
  local nmin = self.min_hits
  if ke then consider(ke.src, 1, (ke.n < 2 * nmin) and 1 or nmin, false) end
  -- what the argument name's sources did for other tools, discounted: a
  -- new tool, or one seen rarely, borrows them
  if pool and (not ke or ke.n < 5) then consider(pool.src, 0.6, nmin, true) end
  if prop and type(prop.enum) == "table" then
    for _, e in ipairs(prop.enum) do
      local vk = vkey(e)
      if vk and not by[vk] then
        by[vk] = { v = e, k = vk, q1 = 0.5 / #prop.enum, q2 = 0, ns = 1, ev = 0, kind = "E" }
        order[#order + 1] = vk
      end
    end
  end
  local list = {}
  for i, vk in ipairs(order) do list[i] = by[vk] end
  return list
end

value_features = function(self, view, tool, arg, c)
  local f = {}
  local function add(n, v) if v ~= 0 then f[#f + 1] = n; f[#f + 1] = v end end
  add("lq", log(c.q1 + 0.01))
  add("q2", c.q2)
  add("ns", log(1 + c.ns))
  add("k=" .. c.kind, 1)
  if c.sel then add("sel=" .. c.sel, 1) end
  if c.pool then add("pool", 1) end
  if c.ev > 0 then
    if c.ev > last_act(view) then add("new", 1) end
    add("rec=" .. bucket(view.n - c.ev), 1)
    local last = view.last
    if c.ev == last.user then add("src=lu", 1)
    elseif c.ev == last.assistant then add("src=la", 1)
    elseif c.ev == last.result then add("src=lr", 1) end
  end
  if used_set(view, tool, arg)[c.k] then add("used", 1) end
  -- said in the latest message, whatever source gave it
  local last = view.last
  for _, w in ipairs({ { "in_lu", last.user }, { "in_la", last.assistant }, { "in_lr", last.result } }) do
    local i = w[2]
    if i and i ~= c.ev then
      local ix = event_sources(view.events[i]).ix
      if ix[c.k] then add(w[1], 1) end
    end
  end
  return f
end

local function value_score(self, x)
  local s, W = 0, self.VW
  for i = 1, #x, 2 do s = s + (W[x[i]] or 0) * x[i + 1] end
  return s
end

-- Candidate values of one argument at a view: { {v, p, k, ev}, ... } best
-- first; p = P(the right value is offered) x its share by the value ranking.
local function arg_values(self, view, tool, arg, prop)
  local cands = value_candidates(self, view, tool, arg, prop)
  if #cands == 0 then return cands end
  local a = self.args[tool]
  local ke = a and a.keys[arg]
  local pool = self.pool[arg]
  local cover
  if ke and ke.n > 0 then cover = ((ke.cov or 0) + 0.5) / (ke.n + 1)
  elseif pool and (pool.n or 0) > 0 then cover = 0.6 * ((pool.cov or 0) + 0.5) / (pool.n + 1)
  else cover = 0.3 end
  local mx = -math.huge
  for _, c in ipairs(cands) do
    c.s = value_score(self, value_features(self, view, tool, arg, c))
    if c.s > mx then mx = c.s end
  end
  local z = 0
  for _, c in ipairs(cands) do c.p = exp(c.s - mx); z = z + c.p end
  for _, c in ipairs(cands) do c.p = cover * c.p / z end
  sort(cands, function(x, y) if x.p ~= y.p then return x.p > y.p end return x.k < y.k end)
  return cands
end

-- SGD on the value ranking: a conditional logit over each example's candidates.
local function value_sgd(self, items, epochs, rate0)
  local W, l2 = self.VW, self.l2
  local seed = 54321
  local n = #items
  for _ = 1, epochs do
    local order = {}
    for i = 1, n do order[i] = i end
    for i = n, 2, -1 do
      seed = (seed * 1103515245 + 12345) % 2147483648
      local j = seed % i + 1
      order[i], order[j] = order[j], order[i]
    end
    for _, i in ipairs(order) do
      local it = items[i]
      self.vt = (self.vt or 0) + 1
      local rate = rate0 / sqrt(1 + self.vt / 1000)
      local ss, mx = {}, -math.huge
      for j, x in ipairs(it.xs) do ss[j] = value_score(self, x); if ss[j] > mx then mx = ss[j] end end
      local z = 0
      for j = 1, #ss do ss[j] = exp(ss[j] - mx); z = z + ss[j] end
      for j, x in ipairs(it.xs) do
        local g = ss[j] / z - (j == it.y and 1 or 0)
        if g ~= 0 then
          for q = 1, #x, 2 do
            local old = W[x[q]] or 0
            W[x[q]] = old - rate * (g * x[q + 1] + l2 * old)
          end
        end
      end
    end
  end
end

-- The key sets a tool is called with, { {keys, p} }: learnt, else the
-- schema's required properties.
local ks_cache = setmetatable({}, { __mode = "k" })
local function keysets(self, tool, schema)
  local a = self.args[tool]
  if a and a.n > 0 then
    local c = ks_cache[a]
    if c and c.n == a.n then return c.out end
    local out = {}
    local names = keys_of(a.keysets)
    local total = 0
    for _, ks in ipairs(names) do total = total + a.keysets[ks] end
    for _, ks in ipairs(names) do
      local p = a.keysets[ks] / max(total, a.n)
      if p >= 0.05 then
        local list = {}
        for k in ks:gmatch("[^\31]+") do list[#list + 1] = k end
        out[#out + 1] = { keys = list, p = p, s = ks }
      end
    end
    sort(out, function(x, y) if x.p ~= y.p then return x.p > y.p end return x.s < y.s end)
    while #out > 2 do out[#out] = nil end
    ks_cache[a] = { n = a.n, out = out }
    return out
  elseif schema then
    local req = type(schema.required) == "table" and schema.required or {}
    local list = {}
    for _, k in ipairs(req) do if type(k) == "string" then list[#list + 1] = k end end
    sort(list)
    return { { keys = list, p = 0.5, s = concat(list, SEP) } }
  end
  return {}
end

-- Complete calls of one tool: { {args, p}, ... } best first (at most `n`).
local function tool_calls(self, view, tool, n, ctx_tools)
  local schema = schema_of(self, tool, ctx_tools)
  local props = schema and type(schema.properties) == "table" and schema.properties or {}
  local out = {}
  for _, ks in ipairs(keysets(self, tool, schema)) do
    -- a beam holds one value (and its key) per argument so far, in order
    local beams = { { vals = {}, keys = {}, p = ks.p, ev = 0 } }
    local a = self.args[tool]
    local eq = a and a.n >= 3 and a.eq or nil
    for ki, k in ipairs(ks.keys) do
      local vals = arg_values(self, view, tool, k, props[k])
      local nxt = {}
      -- pairs of arguments that never shared a value in training
      local apart
      if eq then
        for kj = 1, ki - 1 do
          local k1, k2 = ks.keys[kj], k
          if k1 > k2 then k1, k2 = k2, k1 end
          if not eq[k1 .. SEP .. k2] then apart = apart or {}; apart[#apart + 1] = kj end
        end
      end
      for _, b in ipairs(beams) do
        local taken = 0
        for j = 1, #vals do
          if taken >= self.values_per_arg then break end
          local vj = vals[j]
          local clash = false
          if apart then
            for _, kj in ipairs(apart) do
              if b.keys[kj] == vj.k then clash = true break end
            end
          end
          if not clash then
            taken = taken + 1
            local vs, kk = {}, {}
            for q = 1, ki - 1 do vs[q], kk[q] = b.vals[q], b.keys[q] end
            vs[ki], kk[ki] = vj.v, vj.k
            nxt[#nxt + 1] = { vals = vs, keys = kk, p = b.p * vj.p, ev = max(b.ev, vj.ev) }
          end
        end
      end
      if #nxt > n then
        sort(nxt, function(x, y) return x.p > y.p end)
        for q = #nxt, n + 1, -1 do nxt[q] = nil end
      end
      beams = nxt
      if #beams == 0 then break end
    end
    for _, b in ipairs(beams) do
      local args = {}
      for ki, k in ipairs(ks.keys) do args[k] = b.vals[ki] end
      out[#out + 1] = { args = args, p = b.p, ev = b.ev }
    end
  end
  sort(out, function(x, y) return x.p > y.p end)
  while #out > n do out[#out] = nil end
  return out
end

-- A call of the tool that names it with what can be filled (an argument
-- without any source left out): a first guess of the tool whose arguments
-- are unknown. Its score is 0: it is never fired.
local function partial_call(self, view, tool, ctx_tools)
  local schema = schema_of(self, tool, ctx_tools)
  local props = schema and type(schema.properties) == "table" and schema.properties or {}
  local ks = keysets(self, tool, schema)[1]
  local args = {}
  for _, k in ipairs(ks and ks.keys or {}) do
    local vals = arg_values(self, view, tool, k, props[k])
    if vals[1] then args[k] = vals[1].v end
  end
  return { args = args, p = 0, ev = 0, partial = true }
end

-- ---- the tool model: scores and training --------------------------------------

local function known_tools(self, ctx_tools)
  local list, seen = {}, {}
  for _, c in ipairs(self.classes) do
    if c ~= TEXT and not seen[c] then seen[c] = true; list[#list + 1] = c end
  end
  if ctx_tools then
    for _, name in ipairs(keys_of(ctx_tools)) do
      if type(name) == "string" and not seen[name] then seen[name] = true; list[#list + 1] = name end
    end
  end
  return list
end

-- Word stems (the first five letters of each word of four or more), for the
-- overlap of a tool's name and description with what was last said.
local function stems(text, into, limit)
  into = into or {}
  local n = 0
  text = text:gsub("(%l)(%u)", "%1 %2")
  for w in lower(text):gmatch("%a+") do
    if #w >= 4 then
      into[sub(w, 1, 5)] = true
      n = n + 1
      if limit and n >= limit then break end
    end
  end
  return into
end

local function tail_words(text, n)
  local ws = {}
  for w in text:gmatch("%S+") do ws[#ws + 1] = w end
  return concat(ws, " ", max(1, #ws - n + 1))
end

-- What was last said, as stems (once per view).
local function said(view)
  local s = view.said
  if s then return s end
  local ev, last = view.events, view.last
  local u = last.user and ev[last.user].text or ""
  local a = last.assistant and ev[last.assistant].text or ""
  s = { u = stems(u, nil, 200), a = stems(a, nil, 400), al = stems(tail_words(a, 16)), act = last_act(view) }
  view.said = s
  return s
end

local name_stems_cache = {}
local function tool_stems(tool, spec)
  local key = tool .. SEP .. (spec and type(spec.description) == "string" and spec.description or "")
  local c = name_stems_cache[key]
  if c then return c end
  local name = {}
  stems(tool:gsub("[^%w]", " "), name)
  local desc = spec and type(spec.description) == "string" and stems(spec.description, nil, 60) or nil
  c = { name = keys_of(name), desc = desc and keys_of(desc) or nil }
  name_stems_cache[key] = c
  return c
end

local function overlap(list, set)
  if not list or #list == 0 then return 0 end
  local n = 0
  for _, w in ipairs(list) do if set[w] then n = n + 1 end end
  return n / #list
end

-- Class-specific features (their weights are shared by every tool): what
-- the argument model can do for a tool now, and how the tool's name and
-- description overlap with what was last said.
local function class_features(self, view, tool, calls, spec)
  local best = calls[1] and calls[1].p or 0
  local f = {}
  local function add(name, v) if v ~= 0 then f[#f + 1] = name; f[#f + 1] = v end end
  local sd = said(view)
  if best > 0 then
    add("fill", 1)
    add("fillp", best)
    -- a call not made yet in this conversation, and one that uses what
    -- came after the model last acted
    -- as likely as the best call not made yet in this conversation is, and
    -- the best that uses what came after the model last acted
    local fresh, new = 0, 0
    for _, c in ipairs(calls) do
      local k = canonical(c.args)
      local made = false
      for _, i in ipairs(view.calls) do
        local e = view.events[i]
        if e.tool == tool and type(e.args) == "table" and canonical(e.args) == k then made = true break end
      end
      if not made and c.p > fresh then fresh = c.p end
      if not made and c.ev > sd.act and c.p > new then new = c.p end
    end
    add("fresh", fresh)
    add("new", new)
  end
  local nc = #view.calls
  if nc > 0 and view.events[view.calls[nc]].tool == tool then add("repeat", 1) end
  local ts = tool_stems(tool, spec)
  add("name_u", overlap(ts.name, sd.u))
  add("name_a", overlap(ts.name, sd.a))
  add("name_al", overlap(ts.name, sd.al))
  if ts.desc then
    add("desc_u", overlap(ts.desc, sd.u))
    add("desc_a", overlap(ts.desc, sd.a))
  end
  return f
end

-- P(class) over TEXT and the tools, given features x and per-tool class
-- features cf (tool -> list).
local function softmax(self, x, names, cf)
  local W, V = self.W, self.V
  local scores, mx = {}, -math.huge
  for ci, name in ipairs(names) do
    local s = 0
    local c = self.cidx[name]
    if c then
      for i = 1, #x, 2 do
        local w = W[x[i]]
        if w then s = s + (w[c] or 0) * x[i + 1] end
      end
    end
    local f = cf[name]
    if f then
      for i = 1, #f, 2 do s = s + (V[f[i]] or 0) * f[i + 1] end
    end
    scores[ci] = s
    if s > mx then mx = s end
  end
  local z = 0
  for i = 1, #scores do scores[i] = exp(scores[i] - mx); z = z + scores[i] end
  for i = 1, #scores do scores[i] = scores[i] / z end
  return scores
end

-- One SGD step on a turn whose next event is `target` (a tool or TEXT).
local function sgd_step(self, x, names, cf, target, rate)
  local probs = softmax(self, x, names, cf)
  local W, V, l2 = self.W, self.V, self.l2
  for ci, name in ipairs(names) do
    local g = probs[ci] - (name == target and 1 or 0)
    if g ~= 0 then
      local c = class_index(self, name)
      for i = 1, #x, 2 do
        local fname = x[i]
        local w = W[fname]
        if not w then w = {}; W[fname] = w end
        local old = w[c] or 0
        w[c] = old - rate * (g * x[i + 1] + l2 * old)
      end
      local f = cf[name]
      if f then
        for i = 1, #f, 2 do
          local old = V[f[i]] or 0
          V[f[i]] = old - rate * (g * f[i + 1] + l2 * old)
        end
      end
    end
  end
end

-- ---- turns of a conversation ---------------------------------------------------

-- What the tool model and the argument model see at one turn.
local function turn_input(self, view, ctx_tools)
  local x = tool_features(view)
  local names = { TEXT }
  local cf, calls = {}, {}
  for _, tool in ipairs(known_tools(self, ctx_tools)) do
    names[#names + 1] = tool
    local c = tool_calls(self, view, tool, self.top, ctx_tools)
    calls[tool] = c
    local spec = ctx_tools and ctx_tools[tool] or (self.schemas and self.schemas[tool])
    cf[tool] = class_features(self, view, tool, c, spec)
  end
  return x, names, cf, calls
end

-- Ranked complete calls at a view: { {tool, args, score} } (score before
-- calibration: P(tool) x P(args | tool)). The first is the best call of the
-- most likely tool (a tool guess even when its arguments are unknown: then
-- a partial call with score 0), the others by score.
local function rank(self, view, ctx_tools)
  local x, names, cf, calls = turn_input(self, view, ctx_tools)
  local probs = softmax(self, x, names, cf)
  local out = {}
  local best_tool, best_p = nil, -1
  for ci, name in ipairs(names) do
    if name ~= TEXT then
      if probs[ci] > best_p then best_tool, best_p = name, probs[ci] end
      for _, c in ipairs(calls[name] or {}) do
        out[#out + 1] = { tool = name, args = c.args, score = probs[ci] * c.p, key = canonical(c.args),
                          ptool = probs[ci] }
      end
    end
  end
  sort(out, function(a, b)
    if a.score ~= b.score then return a.score > b.score end
    if a.tool ~= b.tool then return a.tool < b.tool end
    return a.key < b.key
  end)
  if best_tool then
    local first
    for i, c in ipairs(out) do
      if c.tool == best_tool then first = i break end
    end
    if first then
      local c = table.remove(out, first)
      table.insert(out, 1, c)
    else
      local pc = partial_call(self, view, best_tool, ctx_tools)
      table.insert(out, 1, { tool = best_tool, args = pc.args, score = 0, key = canonical(pc.args), partial = true,
                             ptool = best_p })
    end
  end
  return out, best_tool
end

-- The turns of a conversation: { events, turns } (specula.convtraces).
local function turn_target(conv, t)
  if not t.step then return TEXT, nil end
  local e = conv.events[t.at + 1]
  -- the call event of the step: the first call after `at`
  for i = t.at + 1, #conv.events do
    e = conv.events[i]
    if e.kind == "call" then return e.tool, e end
  end
  return TEXT, nil
end

local function learn_tools(self, conv, ctx_tools)
  -- inputs first (the argument model is fixed during these passes)
  local items = {}
  for _, t in ipairs(conv.turns) do
    local target = turn_target(conv, t)
    local view = new_view(conv.events, t.at)
    local x, names, cf = turn_input(self, view, ctx_tools)
    if target ~= TEXT and not self.cidx[target] then class_index(self, target) end
    local known = false
    for _, nm in ipairs(names) do if nm == target then known = true break end end
    if not known then names[#names + 1] = target end
    items[#items + 1] = { x = x, names = names, cf = cf, target = target }
  end
  return items
end

local function sgd_epochs(self, items, epochs, rate0)
  local n = #items
  if n == 0 then return end
  -- a fixed pseudo-random order per epoch (a linear congruential walk), so
  -- training is repeatable
  local seed = 12345
  for _ = 1, epochs do
    local order = {}
    for i = 1, n do order[i] = i end
    for i = n, 2, -1 do
      seed = (seed * 1103515245 + 12345) % 2147483648
      local j = seed % i + 1
      order[i], order[j] = order[j], order[i]
    end
    for _, i in ipairs(order) do
      local it = items[i]
      self.t = self.t + 1
      local rate = rate0 / sqrt(1 + self.t / 1000)
      sgd_step(self, it.x, it.names, it.cf, it.target, rate)
    end
  end
end

local function learn_arg_model(self, conv, items)
  for _, t in ipairs(conv.turns) do
    local _, call = turn_target(conv, t)
    if call then learn_args(self, new_view(conv.events, t.at), call.tool, call.args, items) end
  end
end

-- ---- calibration -----------------------------------------------------------------

-- Isotonic regression (pool adjacent violators) of hit on score; the steps
-- are kept as block means at block mean scores and read by interpolation.
local function fit_isotonic(pairs_)
  local list = {}
  for i, p in ipairs(pairs_) do list[i] = p end
  sort(list, function(a, b) if a[1] ~= b[1] then return a[1] < b[1] end return a[2] < b[2] end)
  local blocks = {}
  for _, p in ipairs(list) do
    blocks[#blocks + 1] = { sx = p[1], sy = p[2], n = 1 }
    while #blocks > 1 do
      local b, a = blocks[#blocks], blocks[#blocks - 1]
      if a.sy / a.n >= b.sy / b.n then
        a.sx, a.sy, a.n = a.sx + b.sx, a.sy + b.sy, a.n + b.n
        blocks[#blocks] = nil
      else break end
    end
  end
  local xs, ys = {}, {}
  for i, b in ipairs(blocks) do
    xs[i] = b.sx / b.n
    -- shrunk toward the block's neighbourhood: a block of one is no certainty
    ys[i] = (b.sy + 0.5) / (b.n + 1)
  end
  -- shrinking can break monotonicity at small blocks: restore it
  for i = 2, #ys do if ys[i] < ys[i - 1] then ys[i] = ys[i - 1] end end
  return { x = xs, y = ys }
end

local function calibrate(cal, s)
  if not cal or #cal.x == 0 then return s end
  local xs, ys = cal.x, cal.y
  if s <= xs[1] then return ys[1] * (xs[1] > 0 and max(0, s) / xs[1] or 1) end
  if s >= xs[#xs] then return ys[#ys] end
  local lo, hi = 1, #xs
  while hi - lo > 1 do
    local mid = floor((lo + hi) / 2)
    if xs[mid] <= s then lo = mid else hi = mid end
  end
  local t = (s - xs[lo]) / (xs[hi] - xs[lo])
  return ys[lo] + t * (ys[hi] - ys[lo])
end
M.fit_isotonic, M.calibrate = fit_isotonic, calibrate

-- The (score, hit) pairs of the model's first `top` candidates at each turn
-- of a conversation it has not learnt.
local function judged_pairs(self, conv, out, ctx_tools)
  for _, t in ipairs(conv.turns) do
    local ranked = rank(self, new_view(conv.events, t.at), ctx_tools)
    local _, call = turn_target(conv, t)
    local want = call and (call.tool .. SEP .. (pcall(canonical, call.args) and canonical(call.args) or "?"))
    for i = 1, min(self.top, #ranked) do
      local c = ranked[i]
      out[#out + 1] = { c.score, (want and c.tool .. SEP .. c.key == want) and 1 or 0 }
    end
  end
end

local function refit(self)
  local p = self.cal_pairs
  if #p > self.cal_keep then
    local keep = {}
    for i = #p - self.cal_keep + 1, #p do keep[#keep + 1] = p[i] end
    self.cal_pairs = keep
    p = keep
  end
  self.cal = #p > 0 and fit_isotonic(p) or nil
end

-- ---- public API ---------------------------------------------------------------------

local function conv_ok(conv)
  return type(conv) == "table" and type(conv.events) == "table" and type(conv.turns) == "table"
end

local function digest_conv(h, conv)
  local list = {}
  for i, e in ipairs(conv.events) do
    list[i] = { kind = e.kind, text = e.text, tool = e.tool, args = e.args }
  end
  local ok, s = pcall(canonical, { id = conv.id, events = list })
  h:add(ok and s or tostring(conv.id))
  h:add("\n")
end

-- Fit the argument and tool models on conversations (no calibration).
local function fit(self, convs, ctx_tools)
  local vitems = {}
  for _, conv in ipairs(convs) do learn_arg_model(self, conv, vitems) end
  prune(self)
  value_sgd(self, vitems, self.epochs, self.rate)
  local items = {}
  for _, conv in ipairs(convs) do
    for _, it in ipairs(learn_tools(self, conv, ctx_tools)) do items[#items + 1] = it end
  end
  sgd_epochs(self, items, self.epochs, self.rate)
end

local function group_folds(convs, k, group)
  local gid, groups = {}, {}
  for i, c in ipairs(convs) do
    local g = tostring(group and group(c.id) or c.id)
    if not gid[g] then groups[#groups + 1] = g; gid[g] = {} end
    local l = gid[g]
    l[#l + 1] = i
  end
  sort(groups)
  local folds = {}
  for f = 1, k do folds[f] = {} end
  for gi, g in ipairs(groups) do
    local f = (gi - 1) % k + 1
    for _, i in ipairs(gid[g]) do folds[f][#folds[f] + 1] = i end
  end
  return folds
end
M.group_folds = group_folds

--- model:train(convs, { group = fn(id) -> group, tools = specs }): learn
-- offline from conversations ({ id, events, turns }, as specula.convtraces
-- reads them); the calibration is fit on held-out folds (grouped).
function Learned:train(convs, opts)
  opts = opts or {}
  if type(convs) ~= "table" then error("learned:train: expected a list of conversations", 2) end
  local list = {}
  for _, c in ipairs(convs) do if conv_ok(c) then list[#list + 1] = c end end
  local ctx_tools = opts.tools or self.schemas
  -- held-out scores: a model per fold, on the other folds
  local k = min(self.folds, #list)
  local pairs_ = {}
  if k >= 2 then
    local folds = group_folds(list, k, opts.group)
    for f = 1, k do
      local train, test = {}, {}
      local inf = {}
      for _, i in ipairs(folds[f]) do inf[i] = true; test[#test + 1] = list[i] end
      for i, c in ipairs(list) do if not inf[i] then train[#train + 1] = c end end
      if #test > 0 and #train > 0 then
        local sub_ = new_model(self)
        sub_.schemas = self.schemas
        fit(sub_, train, ctx_tools)
        for _, c in ipairs(test) do judged_pairs(sub_, c, pairs_, ctx_tools) end
      end
    end
  end
  fit(self, list, ctx_tools)
  for _, p in ipairs(pairs_) do self.cal_pairs[#self.cal_pairs + 1] = p end
  refit(self)
  local h = require("specula.crypto").hasher()
  if self.provenance.offline.digest then h:add(self.provenance.offline.digest) end
  local turns = 0
  for _, c in ipairs(list) do digest_conv(h, c); turns = turns + #c.turns end
  local off = self.provenance.offline
  off.conversations = off.conversations + #list
  off.turns = off.turns + turns
  off.digest = h:hex()
  return self
end

--- model:learn(conv): learn one more conversation online. Its turns are
-- first predicted with the model as it is (held-out pairs for the
-- calibration), then learnt.
function Learned:learn(conv, ctx_tools)
  if not conv_ok(conv) then return nil, "learned:learn: expected { events, turns }" end
  ctx_tools = ctx_tools or self.schemas
  judged_pairs(self, conv, self.cal_pairs, ctx_tools)
  local vitems = {}
  learn_arg_model(self, conv, vitems)
  prune(self)
  value_sgd(self, vitems, self.online_epochs, self.rate)
  sgd_epochs(self, learn_tools(self, conv, ctx_tools), self.online_epochs, self.rate)
  refit(self)
  local h = require("specula.crypto").hasher()
  local on = self.provenance.online
  if on.digest then h:add(on.digest) end
  digest_conv(h, conv)
  on.digest = h:hex()
  on.conversations = on.conversations + 1
  on.turns = on.turns + #conv.turns
  return true
end

-- The conversation a predictor is asked about: ctx.messages (events, from
-- the agent's context(state) or the lab), else the query and the history.
local function events_of(history, ctx)
  if type(ctx) == "table" and type(ctx.messages) == "table" then return ctx.messages end
  local steps = {}
  for i, h in ipairs(history or {}) do
    steps[i] = { tool = h.tool, args = h.args, observation = h.observation }
  end
  local q = type(ctx) == "table" and ctx.query or nil
  return require("specula.convtraces").synthesize(type(q) == "string" and q or nil, steps).events
end

--- model:predict(history, ctx) -> { {tool, args, confidence}, ... }
function Learned:predict(history, ctx)
  local events = events_of(history, ctx)
  local ctx_tools = type(ctx) == "table" and type(ctx.tools) == "table" and ctx.tools or self.schemas
  local ranked = rank(self, new_view(events, #events), ctx_tools)
  local out = {}
  for i = 1, min(self.top, #ranked) do
    local c = ranked[i]
    local conf = calibrate(self.cal, c.score)
    -- P(tool): what a streamed tool name says about this call's odds
    out[i] = { tool = c.tool, args = deep_copy(c.args), confidence = conf, score = c.score,
               tool_confidence = max(conf, c.ptool or 0) }
  end
  return out
end

--- The runner's hook after a query: learn its committed conversation
-- (info.messages: events; else the query and the trajectory).
function Learned:observe_trajectory(actions, info)
  info = info or {}
  local conv
  if type(info.conversation) == "table" and conv_ok(info.conversation) then
    conv = info.conversation
  else
    local steps = {}
    local traj = info.trajectory
    for i, a in ipairs(actions) do
      local h = type(traj) == "table" and traj[i]
      steps[i] = { tool = a.tool, args = a.args, observation = h and h.observation or nil }
    end
    conv = require("specula.convtraces").synthesize(info.query, steps)
  end
  conv.id = conv.id or info.id
  return self:learn(conv)
end

-- ---- persistence -----------------------------------------------------------------

function Learned:state()
  local W = {}
  for _, f in ipairs(keys_of(self.W)) do
    local w, row = self.W[f], {}
    for _, c in ipairs(keys_of(w)) do
      if w[c] ~= 0 then row[self.classes[c]] = w[c] end
    end
    if next(row) then W[f] = row end
  end
  local opts = {}
  for k in pairs(DEFAULTS) do opts[k] = self[k] end
  local classes = {}
  for i, c in ipairs(self.classes) do classes[i] = c end
  return {
    format = M.FORMAT, version = M.VERSION,
    provenance = self.provenance,
    options = opts, classes = json.array(classes), W = W, V = self.V, t = self.t, VW = self.VW, vt = self.vt or 0,
    args = self.args, pool = self.pool,
    cal = self.cal and { x = json.array(self.cal.x), y = json.array(self.cal.y) } or nil,
    cal_pairs = json.array(self.cal_pairs),
  }
end

local function restore(self, st, where)
  where = where or "model"
  if type(st) ~= "table" then return nil, where .. ": not a JSON object" end
  if st.format ~= M.FORMAT then
    return nil, where .. ": not a learned predictor model (format " .. tostring(st.format) .. ")"
  end
  if st.version ~= M.VERSION then
    return nil, format("%s: model format version %s, this specula reads %d", where, tostring(st.version), M.VERSION)
  end
  for _, f in ipairs({ "classes", "W", "V", "VW", "args", "pool", "cal_pairs" }) do
    if type(st[f]) ~= "table" then return nil, where .. ": missing or malformed '" .. f .. "'" end
  end
  for k in pairs(DEFAULTS) do
    local v = type(st.options) == "table" and st.options[k]
    if type(v) == "number" then self[k] = v end
  end
  self.classes, self.cidx = {}, {}
  for _, c in ipairs(st.classes) do
    if type(c) ~= "string" then return nil, where .. ": a class that is not a string" end
    class_index(self, c)
  end
  self.W = {}
  for _, f in ipairs(keys_of(st.W)) do
    local row = st.W[f]
    if type(row) ~= "table" then return nil, where .. ": malformed weights of '" .. tostring(f) .. "'" end
    local w = {}
    for _, c in ipairs(keys_of(row)) do
      local ci = self.cidx[c]
      if not ci or type(row[c]) ~= "number" then return nil, where .. ": malformed weight " .. tostring(f) end
      w[ci] = row[c]
    end
    self.W[f] = w
  end
  self.V = {}
  for _, f in ipairs(keys_of(st.V)) do
    if type(st.V[f]) ~= "number" then return nil, where .. ": malformed weight " .. tostring(f) end
    self.V[f] = st.V[f]
  end
  self.VW = {}
  for _, f in ipairs(keys_of(st.VW)) do
    if type(st.VW[f]) ~= "number" then return nil, where .. ": malformed weight " .. tostring(f) end
    self.VW[f] = st.VW[f]
  end
  self.vt = tonumber(st.vt) or 0
  self.args, self.pool = st.args, st.pool
  for _, tool in ipairs(keys_of(self.args)) do
    local a = self.args[tool]
    if type(a) ~= "table" or type(a.keys) ~= "table" or type(a.keysets) ~= "table" or type(a.n) ~= "number" then
      return nil, where .. ": malformed argument model of '" .. tostring(tool) .. "'"
    end
  end
  self.cal_pairs = {}
  for i, p in ipairs(st.cal_pairs) do
    if type(p) ~= "table" or type(p[1]) ~= "number" or type(p[2]) ~= "number" then
      return nil, where .. ": malformed calibration pair " .. i
    end
    self.cal_pairs[i] = { p[1], p[2] }
  end
  if type(st.cal) == "table" and type(st.cal.x) == "table" and type(st.cal.y) == "table" then
    self.cal = { x = st.cal.x, y = st.cal.y }
  else
    self.cal = nil
  end
  self.t = tonumber(st.t) or 0
  if type(st.provenance) == "table" then self.provenance = st.provenance end
  return true
end

-- The model from a state() table (it keeps the tables: give it a copy).
function Learned:restore(st) return restore(self, st, "learned predictor state") end

function Learned:save(path)
  local ok, text = pcall(canonical, self:state())
  if not ok then return nil, "learned predictor save: " .. tostring(text) end
  local tmp = path .. ".tmp"
  -- a model keeps argument values it saw: its writer lets no known secret
  -- go to disk (the text stays canonical JSON)
  local f, err = require("specula.output").open(tmp, "w", "canonical")
  if not f then return nil, "learned predictor save: " .. tostring(err) end
  local okw, werr = f:write(text, "\n")
  local okc, cerr = f:close()
  if not okw or not okc then
    os.remove(tmp)
    return nil, "learned predictor save: " .. path .. ": " .. tostring(werr or cerr)
  end
  local okr, rerr = os.rename(tmp, path)
  if not okr then os.remove(tmp) return nil, "learned predictor save: " .. tostring(rerr) end
  return true
end

function Learned:load(path)
  local f, err = io.open(path, "r")
  if not f then return nil, "learned predictor load: " .. tostring(err) end
  local text = f:read("*a")
  f:close()
  local st, derr = json.decode(text)
  if st == nil then return nil, "learned predictor load: " .. path .. ": " .. tostring(derr) end
  return restore(self, st, "learned predictor load: " .. path)
end

--- specula.predict.learned{ model = "model.json", train = { "conversations.jsonl", ... },
--    tools = specs, group = fn, top = 3, ... }
function M.new(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("specula.predict.learned: expected a table of options", 2) end
  for k, v in pairs(opts) do
    if DEFAULTS[k] ~= nil and (type(v) ~= "number" or v < 0 or v ~= v) then
      error("specula.predict.learned: " .. k .. " must be a number >= 0", 2)
    end
  end
  if opts.top ~= nil and opts.top < 1 then error("specula.predict.learned: top must be >= 1", 2) end
  local self = new_model(opts)
  if opts.tools ~= nil then
    if type(opts.tools) ~= "table" then error("specula.predict.learned: tools must be a table of specs", 2) end
    self.schemas = opts.tools
  end
  if opts.model ~= nil then
    if type(opts.model) ~= "string" then error("specula.predict.learned: model must be a file path", 2) end
    local ok, err = self:load(opts.model)
    if not ok then error("specula.predict.learned: " .. err, 2) end
  end
  -- what the records' provenance says of it: its options, the model file
  -- and the training files by digest
  local prov = require "specula.provenance"
  local desc = {}
  for k in pairs(DEFAULTS) do if opts[k] ~= nil then desc[k] = opts[k] end end
  if opts.model ~= nil then desc.model = prov.file(opts.model) end
  if opts.train ~= nil then
    local files = type(opts.train) == "string" and { opts.train } or opts.train
    if type(files) ~= "table" then error("specula.predict.learned: train must be a file or a list of files", 2) end
    local convs = {}
    desc.train = {}
    for i, f in ipairs(files) do
      local ok, err = require("specula.convtraces").read(f, nil, convs, function() end)
      if not ok then error("specula.predict.learned: train: " .. tostring(err), 2) end
      desc.train[i] = prov.file(f)
    end
    self:train(convs, { group = opts.group })
  end
  return prov.tag(self, "learned", desc)
end

M.TEXT = TEXT
M.new_view = new_view
M.discover = discover
M.rank = rank
M.arg_values = arg_values

return M
