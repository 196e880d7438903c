-- specula.learned.toolmodel: the tool model, a multinomial logistic model
-- over the next event (TEXT or a tool): what it sees at a turn, P(class),
-- and its SGD (a fixed pseudo-random order per epoch: repeatable).
local common = require "specula.learned.common"
local model = require "specula.learned.model"
local features = require "specula.learned.features"
local calls = require "specula.learned.calls"

local type, ipairs = type, ipairs
local exp, sqrt = math.exp, math.sqrt
local TEXT, keys_of = common.TEXT, common.keys_of
local class_index = model.class_index
local tool_features, class_features = features.tool_features, features.class_features
local tool_calls = calls.tool_calls

local M = {}

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

local function sgd_epochs(self, items, epochs, rate0)
  local n = #items
  if n == 0 then return end
  -- a fixed pseudo-random order per epoch (a linear congruential walk), so
  -- training is repeatable
  local seed = 12345
  for _ = 1, epochs do
    local order
    order, seed = common.epoch_order(n, seed)
    for _, i in ipairs(order) do
      local it = items[i]
      self.t = self.t + 1
      local rate = rate0 / sqrt(1 + self.t / 1000)
      sgd_step(self, it.x, it.names, it.cf, it.target, rate)
    end
  end
end

M.known_tools, M.softmax, M.sgd_step, M.turn_input, M.sgd_epochs = known_tools, softmax, sgd_step, turn_input,
  sgd_epochs

return M
