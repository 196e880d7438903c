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
--
-- This file is the package's public surface: the predictor (new) and its
-- methods, each from the file of its concept:
--   common       keys, the text class, value keys      tokens     text: tokens, shapes, words, stems
--   sources      what one event offers as values       view       the conversation at a turn
--   descriptors  where a value comes from              values     an argument's candidate values, ranked
--   args         learning the argument sources         calls      complete calls of one tool
--   features     the tool model's features             toolmodel  the tool model: P(class), SGD
--   calibration  score -> probability (isotonic)       rank       ranked calls; predict
--   turns        a conversation's turns, learnt/judged train      offline training (folds)
--   online       learning while running                persist    the model file (state, save, load)
--   model        the object: options, defaults, state
local common = require "specula.learned.common"
local model = require "specula.learned.model"
local views = require "specula.learned.view"
local desc = require "specula.learned.descriptors"
local values = require "specula.learned.values"
local calibration = require "specula.learned.calibration"
local ranking = require "specula.learned.rank"
local train = require "specula.learned.train"
local online = require "specula.learned.online"
local persist = require "specula.learned.persist"

local type, pairs, ipairs, tostring, error, require = type, pairs, ipairs, tostring, error, require
local Learned, DEFAULTS, new_model = model.Learned, model.DEFAULTS, model.new

local M = {}

M.FORMAT, M.VERSION = persist.FORMAT, persist.VERSION

-- The methods (model:train(convs, opts) and so on; see each file).
Learned.train = train.train
Learned.learn, Learned.observe_trajectory = online.learn, online.observe_trajectory
Learned.predict = ranking.predict
Learned.state, Learned.restore, Learned.save, Learned.load = persist.state, persist.restore, persist.save, persist.load

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

-- What the specs and the lab reach inside for.
M.keys_of, M.vkey, M.TEXT = common.keys_of, common.vkey, common.TEXT
M.fit_isotonic, M.calibrate = calibration.fit_isotonic, calibration.calibrate
M.group_folds = train.group_folds
M.new_view = views.new_view
M.discover = desc.discover
M.rank = ranking.rank
M.arg_values = values.arg_values

return M
