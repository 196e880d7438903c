-- specula.learned.train: learning offline from conversations: the
-- argument and tool models on all of them, the calibration on held-out
-- folds (grouped, so a task's trials never sit on both sides).
local model = require "specula.learned.model"
local args = require "specula.learned.args"
local values = require "specula.learned.values"
local toolmodel = require "specula.learned.toolmodel"
local calibration = require "specula.learned.calibration"
local turns = require "specula.learned.turns"

local type, ipairs, tostring, error, require = type, ipairs, tostring, error, require
local sort, min = table.sort, math.min
local new_model = model.new
local prune = args.prune
local value_sgd = values.value_sgd
local sgd_epochs = toolmodel.sgd_epochs
local refit = calibration.refit
local learn_arg_model, learn_tools, judged_pairs = turns.learn_arg_model, turns.learn_tools, turns.judged_pairs
local conv_ok, digest_conv = turns.conv_ok, turns.digest_conv

local M = {}

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

--- model:train(convs, { group = fn(id) -> group, tools = specs }): learn
-- offline from conversations ({ id, events, turns }, as specula.convtraces
-- reads them); the calibration is fit on held-out folds (grouped).
function M.train(self, convs, opts)
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

M.fit, M.group_folds = fit, group_folds

return M
