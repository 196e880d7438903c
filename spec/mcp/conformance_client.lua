-- The client command for the MCP conformance suite's client scenarios:
--   specula run spec/mcp/conformance_client.lua <server-url>
-- (the suite appends the URL and sets MCP_CONFORMANCE_SCENARIO). It connects,
-- lists the tools, calls each one with arguments built from its input
-- schema, and closes the session. Exit status 1 on any error.
local specula = require "specula"

local url = arg[1]
if not url or not url:match("^https?://") then
  io.stderr:write("usage: specula run spec/mcp/conformance_client.lua <server-url>\n")
  require("specula.cli").set_exit(2)
  return
end
local scenario = os.getenv("MCP_CONFORMANCE_SCENARIO") or "?"

-- Arguments for a schema: each required (or declared) property gets a
-- value of its type.
local SAMPLE = { number = 2, integer = 3, string = "specula", boolean = true }
local function args_for(schema)
  local out = {}
  local props = type(schema) == "table" and type(schema.properties) == "table" and schema.properties or {}
  for name, p in pairs(props) do
    local v = SAMPLE[type(p) == "table" and p.type or ""]
    if v ~= nil then out[name] = v end
  end
  return out
end

local c, err = specula.mcp.connect { url = url, name = "conformance:" .. scenario, timeout_ms = 20000 }
if not c then
  io.stderr:write("conformance client: ", tostring(err), "\n")
  require("specula.cli").set_exit(1)
  return
end
local status = 0
local tools, terr = c:list_tools()
if not tools then
  io.stderr:write("conformance client: ", tostring(terr), "\n")
  status = 1
else
  for _, t in ipairs(tools) do
    local r, cerr = c:call(t.name, args_for(t.inputSchema))
    if not r then
      io.stderr:write("conformance client: ", tostring(cerr), "\n")
      status = 1
    else
      local parts = {}
      for _, item in ipairs(r.content) do if item.type == "text" then parts[#parts + 1] = item.text end end
      print(t.name .. ": " .. table.concat(parts, " ") .. (r.isError and " (isError)" or ""))
    end
  end
end
c:close()
-- the exit status goes through the engine (os.exit would skip its shutdown
-- and leave the Lua state and pending calls unfreed)
require("specula.cli").set_exit(status)
