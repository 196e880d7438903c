-- specula.learned.rank: ranking complete calls at a view by P(tool) x
-- P(args | tool), and the predictor's answer: the first `top` of them with
-- their calibrated confidence.
local json = require "specula.json"
local common = require "specula.learned.common"
local views = require "specula.learned.view"
local calls = require "specula.learned.calls"
local toolmodel = require "specula.learned.toolmodel"
local calibration = require "specula.learned.calibration"

local type, ipairs, require = type, ipairs, require
local sort, min, max = table.sort, math.min, math.max
local canonical = json.canonical
local TEXT, deep_copy = common.TEXT, common.deep_copy
local new_view = views.new_view
local partial_call = calls.partial_call
local turn_input, softmax = toolmodel.turn_input, toolmodel.softmax
local calibrate = calibration.calibrate

local M = {}

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
function M.predict(self, history, ctx)
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

M.rank = rank

return M
