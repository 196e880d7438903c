-- specula predictors: top-1/top-3 hit rates and calibration of action
-- predictors on committed tool calls (the work: specula.lab.predictors).
local D = require("specula.internal.domains").DEFAULTS

local function lab() return require "specula.lab.predictors" end

local M = {
  name = "predictors",
  synopsis = "CASSETTE_DIR|RESULTS.jsonl|CONVERSATIONS.jsonl... [--predictor P]... [options]",
  summary = "top-1/top-3 hit rates of action predictors on committed tool calls",
  positional = "sources",
  options = {
    { "--predictor", key = "predictors", arg = "P", list = true, default = {}, shown = "learned, pattern, ngram",
      help = "learned (specula.predict.learned), learned:MODEL.json (a saved model),\n"
        .. "pattern, ngram, ngram:N (context of N-1 actions), draft (a model proposes\n"
        .. "the call: needs --draft-url or DRAFT_BASE_URL), or a Lua file returning a\n"
        .. "predictor (a function(history, ctx) -> { {tool, args, confidence}, ... }, or\n"
        .. "a table with such a __call and optional train(convs, opts) and\n"
        .. "observe_trajectory(actions, info)) (repeatable)" },
    { "--train", key = "train", arg = "FILE", list = true, default = {},
      help = "conversations (or a results file, a cassette) each predictor learns before\n"
        .. "it is evaluated online on the sources (repeatable)" },
    { "--folds", key = "folds", arg = "N", shown = "none: one online pass", convert = function(v)
        local n = tonumber(v)
        if not n or n ~= math.floor(n) or n < 2 then return nil, "--folds must be a whole number >= 2, got '" .. v .. "'" end
        return n
      end,
      help = "grouped N-fold cross-validation over the sources: each fold is evaluated\n"
        .. "online by a predictor trained on the other folds; conversations of one\n"
        .. "group (task) are never on both sides" },
    { "--group-by", key = "group_by", arg = "PAT", shown = 'the id without a trailing -trialN: "task3-trial1" -> "task3"',
      convert = function(v)
        local ok, err = pcall(string.match, "", v)
        if not ok then return nil, "--group-by: not a Lua pattern: " .. tostring(err) end
        if not v:find("%(") then return nil, "--group-by: the pattern needs a capture (the group)" end
        return v
      end,
      help = "a Lua pattern whose first capture of a conversation id is its group" },
    { "--save-model", key = "save_model", arg = "FILE",
      help = "after the run, save the first learned predictor's model (trained on --train\n"
        .. "and what it learnt online) to FILE" },
    { "--format", key = "format", arg = "F", shown = "a directory is a cassette, a file's lines say which",
      convert = function(v)
        if v == "openai" or v == "anthropic" or v == "results" or v == "cassette" then return v end
        return nil, "--format must be openai, anthropic, results or cassette, got '" .. v .. "'"
      end,
      help = "openai, anthropic, results or cassette" },
    { "--cost", key = "cost", arg = "TOOL=X", default = {}, shown = "0, as a tool without a cost in a policy",
      convert = function(v, o) return lab().add_cost(v, o) end,
      help = "a tool's cost for the EV gate (repeatable); --cost X: every other tool's" },
    { "--ev-cost-ms", key = "ev_cost_ms", arg = "MS", shown = D.ev_cost_ms,
      convert = function(v) return lab().num_opt("--ev-cost-ms", 0)(v) end,
      help = "latency one unit of tool cost is worth" },
    { "--ev-latency-ms", key = "ev_latency_ms", arg = "MS", shown = "learnt from the recording",
      convert = function(v) return lab().num_opt("--ev-latency-ms", 0)(v) end,
      help = "fixed estimate of the latency a hit saves" },
    { "--draft-url", key = "draft_url", arg = "URL", shown = "DRAFT_BASE_URL",
      help = "the draft model's chat completions endpoint (key: DRAFT_API_KEY)" },
    { "--draft-model", key = "draft_model", arg = "M", shown = 'DRAFT_MODEL, else "draft"', help = "its model name" },
    { "--draft-samples", key = "draft_samples", arg = "N", shown = 3,
      convert = function(v) return lab().num_opt("--draft-samples", 1)(v) end, help = "draws per step" },
    { "--json", key = "json", flag = true, help = "one JSON object instead of the tables" },
  },
  epilog = [[
Hit rates count the model turns that made a call (top-1, top-3: tool and arguments equal; tool
top-1: the first guess names the tool). Calibration: each predictor's first three candidates at
every model turn, a turn answered in text included (a miss for every candidate, as in a run),
by confidence bin against how often they were the call made; Brier score and expected
calibration error (ECE) over them.]],
}

function M.check(o)
  if #o.sources == 0 then return "a cassette directory, a results file or a conversations file is needed" end
end

function M.main(o) return lab().main(o) end

return M
