-- The agent of bench/userpath.lua: the trivial chain agent of bench/core.lua
-- whose model step, tool call and speculator each wait once, as a user's
-- agent does (BENCH_WAIT: `sleep` = specula.sleep(0); `http` = a GET to
-- BENCH_URL, the loopback test server; `mcp` = a tools/call of `echo` on
-- the stdio MCP test server BENCH_MCP under node; `none` = no wait). BENCH_HOPS hops a query.
local specula = require "specula"
local N = tonumber(os.getenv("BENCH_HOPS") or "") or 20
local KIND = os.getenv("BENCH_WAIT") or "sleep"
local URL = os.getenv("BENCH_URL")

local wait
if KIND == "none" then
  wait = function() end   -- no wait at all: what the waits cost is the difference
elseif KIND == "sleep" then
  local sleep = specula.sleep
  wait = function() sleep(0) end
elseif KIND == "http" then
  assert(URL, "bench/userpath_agent.lua: BENCH_WAIT=http needs BENCH_URL")
  wait = function()
    local r, err = specula.http.request { url = URL .. "/hello" }
    assert(r and r.status == 200, err or (r and r.status))
  end
elseif KIND == "mcp" then
  -- one stdio MCP server (node BENCH_MCP, the specs' test server) for the
  -- whole run, as an agent holding an MCP client does
  local server = assert(os.getenv("BENCH_MCP"), "bench/userpath_agent.lua: BENCH_WAIT=mcp needs BENCH_MCP")
  local client = assert(specula.mcp.connect { command = { "node", server }, name = "bench" })
  wait = function()
    local r = assert(client:call("echo", { text = "x" }))
    assert(r.content and r.content[1].text == "echo: x", "bench/userpath_agent.lua: a wrong MCP answer")
  end
else
  error("bench/userpath_agent.lua: BENCH_WAIT must be none, sleep, http or mcp, got " .. KIND)
end

return specula.agent {
  name = "userpath",
  init = function(query, ctx) return { query = query, hop = 0 } end,
  step = function(state, ctx)
    wait()
    if state.hop >= N then return { final = "done " .. state.hop } end
    return { segment = "s" .. state.hop, action = { tool = "t", args = { i = state.hop } } }
  end,
  update = function(state, step, obs, ctx)
    return { query = state.query, hop = state.hop + 1, last = obs }
  end,
  tools = {
    t = {
      call = function(args, ctx) wait() return "o" .. args.i end,
      speculate = function(args, ctx) wait() return "o" .. args.i end,
    },
  },
  verify = function(pred, actual, ctx) return pred == actual, "eq" end,
  policy = function(tool, args, ctx) return "full" end,
}
