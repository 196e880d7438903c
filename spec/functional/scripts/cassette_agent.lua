-- An agent that talks to the outside world in every way a cassette records:
-- a streamed OpenAI model call (the loopback test server's /file fixtures,
-- sent in timed pieces), an HTTP tool (/echo, with a secret header), an MCP
-- tool (spec/support/mcp_testserver.js over stdio) and speculators for both
-- tools. CAS_BASE: the test server; OPENAI_API_KEY and SEARCH_KEY: secrets
-- that must never reach the cassette.
local specula = require "specula"
local BASE = assert(os.getenv("CAS_BASE"), "CAS_BASE")
local server = os.getenv("SPECULA_SOURCE_DIR") .. "/spec/support/mcp_testserver.js"
local client = assert(specula.mcp.connect { command = { os.getenv("CAS_NODE") or "node", server }, name = "ts" })

local function model(fixture)
  return specula.llm.openai.new { api_key = os.getenv("OPENAI_API_KEY"), model = "gpt-test",
    chat_url = BASE .. "/file?path=" .. fixture .. "&chunk=90&pause=" .. (os.getenv("CAS_PAUSE") or "15"), retry = { max_retries = 0 } }
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
tools.lookup.speculate = function(args) specula.sleep(1) return "weather in " .. args.city end

return specula.agent {
  name = "cassette-agent",
  tools = tools,
  init = function(q) return { q = q, hop = 0, obs = {} } end,
  step = function(s, ctx)
    if s.hop == 0 then
      local r = assert(plan:chat { messages = { { role = "user", content = s.q } }, stream = true,
                                   on_tool_name = ctx.on_tool_name })
      local c = r.tool_calls[1]
      return { segment = "plan", action = { tool = c.name, args = { city = c.arguments.city .. "-" .. s.q } } }
    elseif s.hop == 1 then
      return { segment = "read", action = { tool = "slow", args = { ms = tonumber(os.getenv("CAS_SLOW_MS") or "40"), tag = s.q .. ":" .. #s.obs[1] } } }
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
