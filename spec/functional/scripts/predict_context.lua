-- specula run predict_context.lua: what a predictor is given in a run —
-- ctx.messages (the agent's context(state), else the query and the calls)
-- and ctx.tools (the declared input schemas) — and what a learning
-- predictor is handed after each query. Prints one JSON object.
local specula = require "specula"
local json = specula.json

local SCHEMA = { type = "object", properties = { code = { type = "string" } }, required = { "code" } }

-- A two-call agent that keeps its messages in its state: the user gives a
-- code in a second message, the agent looks it up, then looks up what the
-- first lookup named.
local function make(opts)
  local seen = {}
  local function predict(history, ctx)
    local msgs = ctx.messages
    local kinds = {}
    for i, e in ipairs(msgs) do kinds[i] = e.kind end
    seen[#seen + 1] = { hop = ctx.hop, kinds = table.concat(kinds, ","), last = msgs[#msgs] and (msgs[#msgs].text
      or msgs[#msgs].tool), schema = ctx.tools.lookup.schema, description = ctx.tools.lookup.description,
      history = #history }
    return {}
  end
  local agent = specula.agent {
    init = function(q)
      return { msgs = { { role = "user", content = q }, { role = "assistant", content = "Which code?" },
                        { role = "user", content = "It is ZX-" .. #q } }, n = 0 }
    end,
    step = function(s, ctx)
      specula.sleep(10)
      if s.n == 2 then return { final = "done" } end
      local code = s.n == 0 and s.msgs[3].content:match("(ZX%-%d+)") or s.last
      return { action = { tool = "lookup", args = { code = code } } }
    end,
    update = function(s, step, obs)
      local msgs = {}
      for i, m in ipairs(s.msgs) do msgs[i] = m end
      msgs[#msgs + 1] = { role = "assistant", content = json.null, tool_calls = { { id = "c" .. s.n, type = "function",
        ["function"] = { name = "lookup", arguments = json.encode(step.action.args) } } } }
      msgs[#msgs + 1] = { role = "tool", tool_call_id = "c" .. s.n, content = obs }
      return { msgs = msgs, n = s.n + 1, last = obs }
    end,
    context = opts.context,
    tools = { lookup = { call = function(args) specula.sleep(5) return "YY-" .. args.code end, schema = SCHEMA,
                         description = "look a code up" } },
    predict = opts.predict or predict,
    policy = { lookup = "full" },
  }
  return agent, seen
end

local out = {}
-- 1. context(state): the messages the model would see
local a1, s1 = make { context = function(s) return s.msgs end }
specula.run(a1, { queries = { "abc" }, mode = "sequential", clock = "virtual" })
out.with_context = s1
-- 2. no context: the query and the calls
local a2, s2 = make {}
specula.run(a2, { queries = { "abc" }, mode = "sequential", clock = "virtual" })
out.without_context = s2
-- 3. a context that raises: warned about, the calls stand in
local a3, s3 = make { context = function() error("no messages here") end }
local r3 = specula.run(a3, { queries = { "abc", "de" }, mode = "sequential", clock = "virtual" })
out.raising = s3
out.raising_answer = r3[1].answer
-- 4. a learning predictor gets the committed conversation after each query
local got = {}
local learner = setmetatable({
  observe_trajectory = function(self, actions, info)
    local kinds = {}
    for i, e in ipairs(info.conversation and info.conversation.events or {}) do kinds[i] = e.kind end
    local turns = {}
    for i, t in ipairs(info.conversation and info.conversation.turns or {}) do turns[i] = t.step and "call" or "text" end
    got[#got + 1] = { id = info.id, actions = #actions, kinds = table.concat(kinds, ","),
                      turns = table.concat(turns, ","), traj = #info.trajectory }
  end }, { __call = function() return {} end })
local a4 = make { context = function(s) return s.msgs end, predict = learner }
specula.run(a4, { queries = { "abc", "defg" }, mode = "sequential", clock = "virtual" })
table.sort(got, function(x, y) return x.id < y.id end)
out.learnt = got
-- 5. the learned predictor reads the user's words from the context
local a5 = make { context = function(s) return s.msgs end, predict = specula.predict.learned {} }
local qs = {}
for i = 1, 12 do qs[i] = string.rep("q", i) end
local recs, agg = specula.run(a5, { queries = qs, mode = "sequential", clock = "virtual", concurrency = 1 })
out.learned_promoted = agg.prefetch.promoted
out.learned_online = a5.predict.provenance.online.conversations
local src = {}
for _, s in ipairs(a5.predict.args.lookup.keys.code.src) do
  if s.hit >= 3 then src[#src + 1] = s.d:sub(1, 1) end
end
out.learned_sources = table.concat(src, ",")
print(json.encode(out))
