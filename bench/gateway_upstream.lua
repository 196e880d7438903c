-- bench/gateway_upstream.lua — the upstream MCP server of `specula bench
-- gateway`, over stdio (specula.mcp.serve_stdio): a paged document whose
-- pages point to the next one, read with a set latency, and one write tool.
--   specula run bench/gateway_upstream.lua [READ_MS [WRITE_MS [WRITE_LOG]]]
-- READ_MS: read_page's latency (default 0); WRITE_MS: write_note's (default
-- 0); WRITE_LOG: a file that gets one line per write_note, the server's
-- monotonic clock in ms, so the bench can check that no write ran early.
-- (Arguments, not env: what a client hands a server in env is taken as a
-- secret and scrubbed from every output.)
-- Tools: read_page {n} -> "page n ... next: read_page n+1" (structuredContent
-- { page = n, next = n + 1 }); write_note {text} -> "noted"; anything else
-- is an error. Cancellations are ignored (a read ends anyway).
local specula = require "specula"
local ss = require "specula.mcp.serve_stdio"
local transport = require "specula.mcp.transport"
local sched = require "specula.internal.sched"

local function ms_arg(i, what)
  local v = arg and arg[i]
  if v == nil or v == "" then return 0 end
  local n = tonumber(v)
  if not n or n < 0 then error("bench/gateway_upstream.lua: " .. what .. " must be a number >= 0, got " .. v) end
  return n
end
local READ_MS, WRITE_MS = ms_arg(1, "READ_MS"), ms_arg(2, "WRITE_MS")
local WRITE_LOG = arg and arg[3] ~= "" and arg[3] or nil

local TOOLS = {
  { name = "read_page", description = "one page of the document; each page names the next",
    inputSchema = { type = "object", properties = { n = { type = "integer" } }, required = { "n" } },
    annotations = { readOnlyHint = true } },
  { name = "write_note", description = "appends a note (a write: never to run early)",
    inputSchema = { type = "object", properties = { text = { type = "string" } }, required = { "text" } } },
}
local VERSIONS = { ["2024-11-05"] = true, ["2025-03-26"] = true, ["2025-06-18"] = true, ["2025-11-25"] = true }

local t = ss.new {}
local done = false

local function text_result(s, structured)
  return { content = { { type = "text", text = s } }, structuredContent = structured }
end

local function call(p)
  local args = type(p.arguments) == "table" and p.arguments or {}
  if p.name == "read_page" then
    local n = tonumber(args.n)
    if not n then return text_result("read_page: n must be a number", nil), true end
    if READ_MS > 0 then sched.sleep(READ_MS) end
    return text_result(string.format("page %d of the document. next: read_page n=%d", n, n + 1),
      { page = n, next = n + 1 })
  elseif p.name == "write_note" then
    if WRITE_MS > 0 then sched.sleep(WRITE_MS) end
    if WRITE_LOG then
      local f = assert(io.open(WRITE_LOG, "a"))
      f:write(string.format("%.3f %s\n", specula.real_now(), tostring(args.text)))
      f:close()
    end
    return text_result("noted", nil)
  end
  return nil
end

local function handle(msg)
  local m, p, result, err = msg.method, type(msg.params) == "table" and msg.params or {}, nil, nil
  if m == "initialize" then
    local v = VERSIONS[p.protocolVersion] and p.protocolVersion or "2025-11-25"
    result = { protocolVersion = v, capabilities = { tools = {} },
               serverInfo = { name = "specula-bench-upstream", version = "1" } }
  elseif m == "ping" then
    result = {}
  elseif m == "tools/list" then
    result = { tools = TOOLS }
  elseif m == "tools/call" then
    local r, bad = call(p)
    if r == nil then err = { code = -32602, message = "unknown tool: " .. tostring(p.name) }
    else
      if bad then r.isError = true end
      result = r
    end
  else
    err = { code = -32601, message = "method not found: " .. tostring(m) }
  end
  t:send({ jsonrpc = "2.0", id = msg.id, result = result, error = err })
end

assert(t:open {
  st = {},
  receive = function(_, msg)
    if msg.method and msg.id ~= nil then transport.spawn_root(function() handle(msg) end) end
  end,
  lost = function() done = true end,
  malformed = function() end,
  warn = function() end,
  fail = function(_, id, why) t:send({ jsonrpc = "2.0", id = id, error = { code = -32600, message = tostring(why) } }) end,
})
while not done do sched.sleep(50) end
