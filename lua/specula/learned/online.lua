-- specula.learned.online: learning one more conversation while running:
-- its turns are judged by the model as it is (held-out pairs for the
-- calibration), then learnt; the runner hands over each committed query.
local args = require "specula.learned.args"
local values = require "specula.learned.values"
local toolmodel = require "specula.learned.toolmodel"
local calibration = require "specula.learned.calibration"
local turns = require "specula.learned.turns"

local type, ipairs, require = type, ipairs, require
local prune = args.prune
local value_sgd = values.value_sgd
local sgd_epochs = toolmodel.sgd_epochs
local refit = calibration.refit
local learn_arg_model, learn_tools, judged_pairs = turns.learn_arg_model, turns.learn_tools, turns.judged_pairs
local conv_ok, digest_conv = turns.conv_ok, turns.digest_conv

local M = {}

--- model:learn(conv): learn one more conversation online. Its turns are
-- first predicted with the model as it is (held-out pairs for the
-- calibration), then learnt.
function M.learn(self, conv, ctx_tools)
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

--- The runner's hook after a query: learn its committed conversation
-- (info.messages: events; else the query and the trajectory).
function M.observe_trajectory(self, actions, info)
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

return M
