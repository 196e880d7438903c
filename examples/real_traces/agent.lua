-- examples/real_traces/agent.lua — the recorded conversations as an agent
-- (specula.agents.conversation): model turns take their recorded output's
-- time, tools return their recorded results (latency model and costs:
-- traces_setup.lua; eligibility: policy.lua, reads early, writes never).
--
--   specula run examples/real_traces/agent.lua --input examples/real_traces/data/tau-airline-gpt4o-dev.jsonl \
--       --clock virtual --mode sequential --predict off
--   REAL_TRACES_MODEL=model.json specula run examples/real_traces/agent.lua --input ... --clock virtual --mode sequential
--
-- With $REAL_TRACES_MODEL (a model saved by `specula predictors --save-model`,
-- trained on other conversations than the ones run) it predicts the next call
-- with specula.predict.learned and learns online; run.lua does the whole
-- experiment (grouped folds, four configurations).
local setup = require "traces_setup"
local specula = require "specula"

local model = os.getenv("REAL_TRACES_MODEL")
local predict = model and model ~= "" and specula.predict.learned { model = model } or nil
return setup.make_agent { predict = predict, speculate = { p = 0.6, ms = 50 } }
