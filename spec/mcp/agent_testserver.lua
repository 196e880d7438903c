-- An agent over spec/support/mcp_testserver.js, connected in the main chunk
-- (async calls before the agent is returned). Two reads with `slow`
-- (readOnlyHint), then a note with `write` (destructiveHint), three times;
-- each read's arguments depend on the previous observation. The speculator
-- for `slow` is wrong on the first read of each round, so the speculative
-- thread that already launched the second read is discarded with that call
-- in flight.
-- MCP_TRUST=1 trusts the annotations; MCP_OVERRIDE=tool=decision overrides;
-- MCP_SERVER_ARGS: the server's own options (--modern: it speaks
-- 2026-07-28 too, and the client picks that).
local specula = require "specula"
local server = os.getenv("SPECULA_SOURCE_DIR") .. "/spec/support/mcp_testserver.js"
local command = { "node", server }
for a in (os.getenv("MCP_SERVER_ARGS") or ""):gmatch("%S+") do command[#command + 1] = a end
local client = assert(specula.mcp.connect { command = command, name = "testserver" })
local overrides = {}
local o = os.getenv("MCP_OVERRIDE")
if o and o ~= "" then
  local k, v = o:match("^([%w_]+)=(%a+)$")
  overrides[k] = v
end
local early_writes = 0
local tools = specula.tools.mcp(client, { include = { "slow", "write", "log" } })
local write = tools.write.call
tools.write.call = function(args, ctx)
  if ctx.speculative then early_writes = early_writes + 1 end
  return write(args, ctx)
end
tools.slow.speculate = function(args, ctx)
  specula.sleep(1)
  if ctx.hop % 3 == 0 then return "wrong guess" end
  return "slow done: " .. args.tag
end
_G.MCP_EARLY_WRITES = function() return early_writes end
_G.MCP_CLIENT = client

return specula.agent {
  name = "mcp-testserver",
  policy = specula.policy.mcp(client, { trust_annotations = os.getenv("MCP_TRUST") == "1", overrides = overrides }),
  tools = tools,
  init = function(q) return { q = q, hop = 0, notes = {} } end,
  step = function(s, ctx)
    specula.sleep(2)
    if s.hop >= 9 then return { final = table.concat(s.notes, "|") } end
    if s.hop % 3 ~= 2 then
      local prev = s.notes[#s.notes] or ""
      return { segment = "read", action = { tool = "slow", args = { ms = 60, tag = s.q .. "-" .. s.hop .. ":" .. #prev } } }
    end
    return { segment = "note", action = { tool = "write", args = { path = s.q, text = tostring(s.notes[#s.notes]) } } }
  end,
  update = function(s, step, obs)
    local notes = { unpack(s.notes) }
    notes[#notes + 1] = obs
    return { q = s.q, hop = s.hop + 1, notes = notes }
  end,
}
