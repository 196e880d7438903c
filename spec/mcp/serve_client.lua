-- specula's own MCP client (specula.mcp.connect over Streamable HTTP)
-- against spec/mcp/serve_fixture.lua: run by the fixture as its child.
-- Prints one JSON line of what it saw.
--   specula run spec/mcp/serve_client.lua URL [PROTOCOL_VERSION]
local specula = require "specula"
local json = specula.json
local mcp = require "specula.mcp"

local out = {}
local idle = tonumber(arg[3])   -- wait this long, then call again
local c, err = mcp.connect { name = "fixture", url = arg[1], protocol_version = arg[2], listen = not idle,
                             timeout_ms = 10000 }
if not c then
  out.error = err
else
  out.version = c.protocol_version
  out.stateless = c.stateless or false
  out.session = c.t and c.t.session_id or json.null
  local tools = assert(c:list_tools())
  out.tools = #tools
  local r = assert(c:call("echo", { text = "from specula" }))
  out.echo = r.content[1].text
  if idle then
    specula.sleep(idle)
    local again, aerr = c:call("echo", { text = "after the wait" })
    out.after_idle = again and again.content[1].text or aerr
  end
  if not out.stateless and not idle then   -- at 2026-07-28 a server sends no requests of its own
    local p, perr = c:call("ping_client", {})
    out.ping = p and p.content[1].text or perr
  end
  c:close()
  -- 2026-07-28: headers that contradict the body are refused (-32020)
  local body = json.encode({ jsonrpc = "2.0", id = 5, method = "tools/list",
    params = { _meta = { ["io.modelcontextprotocol/protocolVersion"] = "2026-07-28" } } })
  local h = { ["Content-Type"] = "application/json", Accept = "application/json",
              ["MCP-Protocol-Version"] = "2026-07-28" }
  local function post(method)
    h["Mcp-Method"] = method
    local res = assert(specula.http.request { method = "POST", url = arg[1], headers = h, body = body })
    local m = json.decode(res.body) or {}
    return { status = res.status, code = m.error and m.error.code or json.null,
             tools = m.result and #m.result.tools or json.null }
  end
  out.mismatch = post("tools/call")
  out.match = post("tools/list")
  out.ok = true
end
print(json.encode(out))
