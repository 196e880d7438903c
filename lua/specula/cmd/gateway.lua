-- specula gateway: an MCP server in front of other MCP servers, which runs
-- the client's predicted next calls early where the policy allows it (the
-- work: specula.gateway; docs/gateway.md).
local M = {
  name = "gateway",
  synopsis = "CONFIG.lua [--listen HOST:PORT [--allow-remote]] [--out FILE] [--record DIR]",
  summary = "an MCP gateway (stdio, or Streamable HTTP with --listen) that prefetches the client's next tool calls",
  positional = "configs",
  about = [[
CONFIG.lua returns specula.gateway{ servers = {...}, policy = ..., predict =
..., max_age_ms = ..., budget = {...} }. The gateway serves one MCP client
over stdio (the client starts it in place of a server): it offers the union
of the servers' tools, resources and prompts, relays everything both ways,
and after each result starts the predicted next calls that the policy allows
in full, so that the client's next call may find its result ready. A call the
policy does not allow never runs before the client asks for it. stdout
carries only the protocol; messages go to stderr. With --listen it serves
MCP Streamable HTTP at http://HOST:PORT/mcp instead, each client a session
of its own, until SIGINT or SIGTERM. See docs/gateway.md.]],
  options = {
    { "--listen", key = "listen", arg = "HOST:PORT",
      help = "serve Streamable HTTP at http://HOST:PORT/mcp, a session per client, until\n"
        .. "SIGINT/SIGTERM (port 0: a free one; the URL goes to stderr); default: stdio" },
    { "--allow-remote", key = "allow_remote", flag = true,
      help = "let --listen bind a host other than loopback (no authentication: whoever\n"
        .. "reaches it uses your servers)" },
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
  if o.allow_remote and not o.listen then return "--allow-remote goes with --listen HOST:PORT" end
  if o.listen then
    local _, _, err = require("specula.gateway.command").parse_listen(o.listen, o.allow_remote)
    if err then return err end
  end
end

function M.main(o) return require("specula.gateway.command").main(o) end

return M
