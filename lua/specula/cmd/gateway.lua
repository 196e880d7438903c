-- specula gateway: an MCP server in front of other MCP servers, which runs
-- the client's predicted next calls early where the policy allows it (the
-- work: specula.gateway; docs/gateway.md).
local M = {
  name = "gateway",
  synopsis = "CONFIG.lua [--out FILE] [--record DIR]",
  summary = "an MCP gateway over stdio that prefetches the client's next tool calls",
  positional = "configs",
  about = [[
CONFIG.lua returns specula.gateway{ servers = {...}, policy = ..., predict =
..., max_age_ms = ..., budget = {...} }. The gateway serves one MCP client
over stdio (the client starts it in place of a server): it offers the union
of the servers' tools, resources and prompts, relays everything both ways,
and after each result starts the predicted next calls that the policy allows
in full, so that the client's next call may find its result ready. A call the
policy does not allow never runs before the client asks for it. stdout
carries only the protocol; messages go to stderr. See docs/gateway.md.]],
  options = {
    { "--out", key = "out", arg = "FILE",
      help = "append one JSON record per session: calls, prefetch hits and waste,\n"
        .. "hidden latency per tool, upstream times, provenance" },
    { "--record", key = "record", arg = "DIR",
      help = "a cassette of every round trip with the servers (`specula cassette ls DIR`)\n"
        .. "and the session as timed OpenTelemetry GenAI spans (`specula whatif DIR/*.otlp.jsonl`)" },
  },
}

function M.check(o)
  if #o.configs == 0 then return "a CONFIG.lua is needed (it returns specula.gateway{ servers = {...} })" end
  if #o.configs > 1 then return "one CONFIG.lua only, got " .. #o.configs end
end

function M.main(o) return require("specula.gateway.command").main(o) end

return M
