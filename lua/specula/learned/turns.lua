-- specula.learned.turns: a conversation's turns ({ events, turns }, as
-- specula.convtraces reads them), learnt and judged: the next event of each
-- turn, the tool model's inputs and the argument model's calls, the
-- held-out (score, hit) pairs, and a conversation's digest.
local json = require "specula.json"
local common = require "specula.learned.common"
local views = require "specula.learned.view"
local model = require "specula.learned.model"
local args = require "specula.learned.args"
local toolmodel = require "specula.learned.toolmodel"
local ranking = require "specula.learned.rank"

local type, ipairs, tostring, pcall = type, ipairs, tostring, pcall
local min = math.min
local canonical = json.canonical
local TEXT, SEP = common.TEXT, common.SEP
local new_view = views.new_view
local class_index = model.class_index
local learn_args = args.learn_args
local turn_input = toolmodel.turn_input
local rank = ranking.rank

local M = {}

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

local function learn_arg_model(self, conv, items)
  for _, t in ipairs(conv.turns) do
    local _, call = turn_target(conv, t)
    if call then learn_args(self, new_view(conv.events, t.at), call.tool, call.args, items) end
  end
end

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

-- A conversation as train and learn take it.
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

M.turn_target, M.learn_tools, M.learn_arg_model, M.judged_pairs = turn_target, learn_tools, learn_arg_model,
  judged_pairs
M.conv_ok, M.digest_conv = conv_ok, digest_conv

return M
