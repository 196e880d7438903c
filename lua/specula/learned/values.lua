-- specula.learned.values: the candidate values of one argument at a view
-- (from the argument's sources, borrowed ones and the schema's enums) and
-- the value ranking: a conditional logit over them, and its SGD.
local common = require "specula.learned.common"
local sources = require "specula.learned.sources"
local views = require "specula.learned.view"
local desc = require "specula.learned.descriptors"

local type, ipairs, next = type, ipairs, next
local sort, sub, exp, log, sqrt = table.sort, string.sub, math.exp, math.log, math.sqrt
local is_array, vkey, bucket = common.is_array, common.vkey, common.bucket
local event_sources = sources.event_sources
local last_act, used_set = views.last_act, views.used_set
local parse_desc, produce = desc.parse_desc, desc.produce

local M = {}

local function precision(s) return s.hit / (s.avail + 2) end

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
local function value_candidates(self, view, tool, arg, prop)
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

local function value_features(self, view, tool, arg, c)
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
    local order
    order, seed = common.epoch_order(n, seed)
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

M.precision, M.type_ok, M.value_candidates, M.value_features = precision, type_ok, value_candidates, value_features
M.value_score, M.arg_values, M.value_sgd = value_score, arg_values, value_sgd

return M
