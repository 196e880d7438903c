-- A lying model stream (Anthropic Messages over loopback SSE): each step's
-- response opens a tool_use block for send_email before the one it acts on,
-- so the streamed-name trigger sees send_email first. The policy (a function,
-- or a per-tool table: arg[3]) forbids send_email; the predictor proposes it
-- with confidence 0.99. Prints one JSON line of counts.
-- The server holds each stream after the tool names (gate=QUERY ID) until
-- the early lookup they trigger asks /release?gate=QUERY ID: the names
-- arrive apart from the rest however slow the machine is (a pause alone
-- raced the clock under valgrind); a stream nobody releases goes on after
-- the server's hold (10 s), and the counts below then fall short.
-- usage: specula run gate_stream.lua BASE_URL FIXTURE function|table
local specula = require "specula"
local json = specula.json
local BASE, FIXTURE, FORM = arg[1], arg[2], arg[3] or "function"

-- one client per query: each query's stream has its own gate
local clients = {}
local function client(id)
  clients[id] = clients[id] or specula.llm.anthropic.new {
    api_key = "sk-test-not-a-secret", model = "claude-test",
    messages_url = BASE .. "/file?path=" .. FIXTURE .. "&split=" .. arg[4] .. "&gate=" .. id,
    retry = { base_ms = 1, max_retries = 0 },
  }
  return clients[id]
end

local early = { send_email = 0, lookup = 0 }
local policies = {
  ["function"] = function(tool) return tool == "lookup" and "full" or "forbid" end,
  table = { lookup = "full", send_email = "forbid" },
}

local agent = specula.agent {
  policy = policies[FORM],
  tools = {
    lookup = function(args, ctx)
      if ctx.predicted then
        early.lookup = early.lookup + 1
        assert(specula.http.request { url = BASE .. "/release?gate=" .. ctx.id })
      end
      return "page " .. tostring(args.q)
    end,
    send_email = function(args, ctx)
      if ctx.predicted or ctx.speculative then early.send_email = early.send_email + 1 end
      return "sent"
    end,
  },
  predict = function(history, ctx)
    return { { tool = "send_email", args = { to = "all@corp" }, confidence = 0.99 },
             { tool = "lookup", args = { q = "weather" }, confidence = 0.99 } }
  end,
  init = function(q) return { h = 0 } end,
  step = function(s, ctx)
    if s.h >= 3 then return { final = "done" } end
    local r = assert(client(ctx.id):chat { messages = { { role = "user", content = "hop " .. s.h } },
                                   on_tool_name = ctx.on_tool_name })
    -- the block the model acts on is the last one
    local call = r.tool_calls[#r.tool_calls]
    return { action = { tool = call.name, args = call.input or call.arguments } }
  end,
  update = function(s) return { h = s.h + 1 } end,
}

local qs = {}
for i = 1, 20 do qs[i] = "q" .. i end
local res, agg = specula.run(agent, { queries = qs, mode = "sequential", trigger = "tool_name", concurrency = 20 })
local errors = 0
for _, r in ipairs(res) do if r.error then errors = errors + 1; io.stderr:write(r.error, "\n") end end
local c = agg.policy_counts.tools
print(json.encode({ early_send_email = early.send_email, early_lookup = early.lookup, errors = errors,
  send_email_name_forbid = c.send_email.triggers.predicted_name.forbid,
  send_email_full = c.send_email.full, lookup_name_full = c.lookup.triggers.predicted_name.full,
  promoted = agg.prefetch and agg.prefetch.promoted or 0 }))
