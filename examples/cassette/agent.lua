-- An agent that talks to the outside world in every way a cassette records:
-- a streamed OpenAI-style model call (specula-testserver replaying the
-- fixtures/*.sse files in timed pieces), an HTTP tool (/echo, with a secret
-- header and query parameter), an MCP tool (spec/support/mcp_testserver.js
-- over stdio) and speculators for both tools. See README.md here.
-- CAS_BASE: the test server (default http://127.0.0.1:18765); OPENAI_API_KEY
-- and SEARCH_KEY: secrets that must never reach the cassette; CAS_PAUSE,
-- CAS_SLOW_MS and CAS_SPEC_MS: the model's pause between pieces, the MCP
-- tool's latency and the lookup speculator's (defaults: as the tape here).
-- CAS_PREDICT=1 adds action speculation: a predictor that foresees each
-- tool call (fired at the step's start and on the streamed tool name) and
-- a policy that lets both read-only tools run early.
local specula = require "specula"
local BASE = os.getenv("CAS_BASE") or "http://127.0.0.1:18765"
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local server = here .. "/../../spec/support/mcp_testserver.js"
local client = assert(specula.mcp.connect { command = { os.getenv("CAS_NODE") or "node", server }, name = "ts" })

local function model(fixture)
  return specula.llm.openai.new { api_key = os.getenv("OPENAI_API_KEY"), model = "gpt-test",
    chat_url = BASE .. "/file?path=" .. fixture .. "&chunk=90&pause=" .. (os.getenv("CAS_PAUSE") or "150"), retry = { max_retries = 0 } }
end
local plan, final = model("plan.sse"), model("final.sse")

local tools = specula.tools.mcp(client, { include = { "slow" } })
tools.slow.speculate = function(args)
  specula.sleep(2)
  if args.tag:find("q2", 1, true) then return "a wrong guess" end
  return "slow done: " .. args.tag
end
tools.lookup = specula.tools.http { url = BASE .. "/echo?city={city}&api_key={env.SEARCH_KEY}",
  headers = { Authorization = "Bearer {env.SEARCH_KEY}" },
  result = function(res) return "weather in " .. specula.json.decode(res.body).query:match("city=(%w+)") end,
  retry = false }
tools.lookup.speculate = function(args)
  specula.sleep(tonumber(os.getenv("CAS_SPEC_MS") or "1"))
  return "weather in " .. args.city
end

-- the calls the step will make, from the query and the history so far
local function predict(history, ctx)
  if #history == 0 then return { { tool = "lookup", args = { city = "Paris-" .. ctx.query }, confidence = 0.9 } } end
  if #history == 1 then
    return { { tool = "slow", args = { ms = tonumber(os.getenv("CAS_SLOW_MS") or "600"),
                                       tag = ctx.query .. ":" .. #history[1].observation }, confidence = 0.9 } }
  end
  return {}
end
local predicting = os.getenv("CAS_PREDICT") == "1"

return specula.agent {
  name = "cassette-agent",
  tools = tools,
  predict = predicting and predict or nil,
  policy = predicting and { lookup = "full", slow = "full" } or nil,
  init = function(q) return { q = q, hop = 0, obs = {} } end,
  step = function(s, ctx)
    if s.hop == 0 then
      local r = assert(plan:chat { messages = { { role = "user", content = s.q } }, stream = true,
                                   on_tool_name = ctx.on_tool_name })
      local c = r.tool_calls[1]
      return { segment = "plan", action = { tool = c.name, args = { city = c.arguments.city .. "-" .. s.q } } }
    elseif s.hop == 1 then
      return { segment = "read", action = { tool = "slow", args = { ms = tonumber(os.getenv("CAS_SLOW_MS") or "600"), tag = s.q .. ":" .. #s.obs[1] } } }
    end
    local r = assert(final:chat { messages = { { role = "user", content = s.obs[2] } }, stream = true })
    return { final = r.content .. " | " .. table.concat(s.obs, " | ") }
  end,
  update = function(s, step, obs)
    local o = { unpack(s.obs) }
    o[#o + 1] = obs
    return { q = s.q, hop = s.hop + 1, obs = o }
  end,
}
