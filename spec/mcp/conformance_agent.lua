-- The conformance client as an agent, for runs with --record, --trace and
-- --out under the conformance suite:
--   specula run spec/mcp/conformance_agent.lua --record DIR --trace T --out O --query <server-url>
-- (the suite appends the URL, so it becomes the query). It authorizes like
-- spec/mcp/conformance_client.lua, then each query's hops call the
-- server's tools in turn through specula.tools.mcp.
local specula = require "specula"

local url = arg[#arg]
if type(url) ~= "string" or not url:match("^https?://") then
  error("usage: specula run spec/mcp/conformance_agent.lua [options] --query <server-url>", 0)
end
local scenario = os.getenv("MCP_CONFORMANCE_SCENARIO") or "?"

local client = assert(specula.mcp.connect {
  url = url, name = "conformance:" .. scenario, timeout_ms = 20000,
  auth = { client_name = "specula-conformance-agent", redirect_uri = "http://localhost:3000/callback",
           client_metadata_url = "https://conformance-test.local/client-metadata.json" },
})
local tools = specula.tools.mcp(client)
local names = {}
for n in pairs(tools) do names[#names + 1] = n end
table.sort(names)

return specula.agent {
  name = "conformance-agent",
  tools = tools,
  policy = specula.policy.mcp(client),
  init = function(q) return { hop = 0, seen = {} } end,
  step = function(s)
    if s.hop >= #names then return { final = table.concat(s.seen, "|") } end
    return { segment = "call " .. names[s.hop + 1], action = { tool = names[s.hop + 1], args = {} } }
  end,
  update = function(s, step, obs)
    local seen = { unpack(s.seen) }
    seen[#seen + 1] = tostring(obs)
    return { hop = s.hop + 1, seen = seen }
  end,
}
