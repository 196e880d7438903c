-- specula.run.cassette: the cassette plugged in from the top. The cassette
-- (specula.cassette) is a set of wrappers for the seams of the layers it
-- serves and requires none of them; the HTTP client, the MCP clients and
-- the agent's adapter name no cassette either. This module joins them:
-- while a cassette is open, specula.http's transfers and the agent's calls
-- and window jobs go through its wrappers, and every MCP client's
-- transport goes behind its MCP wrapper (set once: a client that connected
-- before a cassette opened is recorded too). Whoever opens a cassette
-- opens it here (`specula run`, specula.run{ record = DIR }, the verifier
-- lab), so the seams are plugged before it opens.
local cassette = require "specula.cassette"

local M = {}

local plugged = false
-- Plug the cassette into the seams (once; later calls do nothing).
function M.install()
  if plugged then return end
  plugged = true
  cassette.plug(require("specula.http").set_wrapper, cassette.http)
  cassette.plug(require("specula.internal.protocol").set_wrapper, cassette.agent_wrapper)
  require("specula.mcp").set_wrapper(cassette.mcp_transport)
end

-- specula.cassette.open with the seams plugged: true | nil, err[, "write"].
function M.open(o)
  M.install()
  return cassette.open(o)
end

-- specula.cassette.from_args with the seams plugged (`specula run`, before
-- the script's main chunk runs: it may connect to an MCP server at top
-- level).
function M.from_args(args)
  M.install()
  return cassette.from_args(args)
end

return M
