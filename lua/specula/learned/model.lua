-- specula.learned.model: the learned predictor's object: its options and
-- their defaults, and the state it learns (the tool model's classes and
-- weights, the argument model, the calibration, the provenance). Its
-- methods come from the files of their concepts (specula/learned/init.lua).
local pairs, setmetatable = pairs, setmetatable

local M = {}

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

M.Learned, M.DEFAULTS, M.new, M.class_index = Learned, DEFAULTS, new_model, class_index

return M
