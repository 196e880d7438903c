-- examples/real_traces/traces_setup.lua — what agent.lua and run.lua share:
-- where the recorded conversations are, the latency model, the tools' costs
-- and the conversation agent built from them.
local specula = require "specula"

local M = {}

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
M.here = here

-- $REAL_TRACES, else the development set that ships beside this file
-- (data/, with its source and licence).
local function find_traces()
  local env = os.getenv("REAL_TRACES")
  if env and env ~= "" then return env end
  local p = here .. "/data/tau-airline-gpt4o-dev.jsonl"
  local f = io.open(p, "r")
  if f then f:close() return p end
  error("examples/real_traces: the development set " .. p .. " is missing (it ships with the repository); "
    .. "set REAL_TRACES to a conversations file", 0)
end
M.traces = find_traces()

local policy = dofile(here .. "/policy.lua")
M.policy = policy

-- The latency model (ms). A model turn: 500 ms before the first token
-- (queueing, prefill) and 12 ms per output token (about 80 tokens/s, a
-- GPT-4o-class model), four characters a token; the output is the turn's
-- text, tool name and arguments. A tool: by what it does, from its name's
-- first word (as the policy reads it): a lookup 400 ms, a search of the
-- inventory 1200 ms, a computation 50 ms, a write 800 ms. The user's own
-- time is left out (0 ms): it is not the agent's.
M.LATENCY = {
  model = { base_ms = 500, per_token_ms = 12, chars_per_token = 4 },
  user_ms = 0,
}
local VERB_MS = { get = 400, list = 400, find = 400, lookup = 400, read = 400, fetch = 400, check = 400,
                  search = 1200, calculate = 50, think = 50 }
local WRITE_MS = 800

function M.tool_ms(name)
  local verb = (name:match("^(%a+)") or ""):lower()
  return VERB_MS[verb] or WRITE_MS
end

-- What a call costs when its result is thrown away: a lookup or a search
-- M.READ_COST ($REAL_TRACES_READ_COST, default 0.05: a unit is worth
-- --ev-cost-ms, 1000 ms by default, so a guess fires when confidence x
-- time saved > (1 - confidence) x 50 ms), a computation a tenth of it. The
-- EV gate trades hits for waste on it.
M.READ_COST = tonumber(os.getenv("REAL_TRACES_READ_COST") or "") or 0.05
function M.tool_cost(name)
  local verb = (name:match("^(%a+)") or ""):lower()
  if verb == "calculate" or verb == "think" then return M.READ_COST / 10 end
  return M.READ_COST
end

-- The tool names of a conversations file (the agent's tools).
function M.tool_names(path)
  local convs = {}
  assert(require("specula.convtraces").read(path, nil, convs, function() end))
  local names, seen = {}, {}
  for _, c in ipairs(convs) do
    for _, s in ipairs(c.steps) do
      if not seen[s.tool] then seen[s.tool] = true; names[#names + 1] = s.tool end
    end
  end
  table.sort(names)
  return names
end

-- The conversation agent over `path` with this latency model, costs and
-- policy; opts.predict, opts.speculate as specula.agents.conversation.
function M.make_agent(opts)
  opts = opts or {}
  local path = opts.file or M.traces
  local lat = { model = M.LATENCY.model, user_ms = M.LATENCY.user_ms, tools = {} }
  for _, name in ipairs(M.tool_names(path)) do lat.tools[name] = M.tool_ms(name) end
  local agent = specula.agents.conversation { file = path, latency = lat, predict = opts.predict,
    speculate = opts.speculate, policy = policy }
  for name, t in pairs(agent.tools) do t.cost = M.tool_cost(name) end
  return agent
end

return M
