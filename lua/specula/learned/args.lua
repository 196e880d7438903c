-- specula.learned.args: learning the argument model from the calls made:
-- per tool the key sets it is called with and which arguments share a
-- value, per argument (and per argument name across tools) its sources,
-- each with its replay precision; and pruning them to the best.
local common = require "specula.learned.common"
local desc = require "specula.learned.descriptors"
local values = require "specula.learned.values"

local type, ipairs, setmetatable = type, ipairs, setmetatable
local sort, concat, min = table.sort, table.concat, math.min
local SEP, keys_of, vkey = common.SEP, common.keys_of, common.vkey
local discover, parse_desc, produce = desc.discover, desc.parse_desc, desc.produce
local value_candidates, value_features = values.value_candidates, values.value_features

local M = {}

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

M.arg_entry, M.learn_args, M.prune = arg_entry, learn_args, prune

return M
