-- The client command for the MCP conformance suite's client scenarios:
--   specula run spec/mcp/conformance_client.lua <server-url>
-- (the suite appends the URL and sets MCP_CONFORMANCE_SCENARIO, and for some
-- scenarios MCP_CONFORMANCE_CONTEXT: pre-registered credentials, a private
-- key). One client for every scenario, configured as a user would: OAuth
-- with dynamic registration or a client ID metadata document, the
-- credentials the context hands over, and an elicitation hook that accepts
-- with the schema's defaults. It connects (2026-07-28 when the server
-- speaks it, else a 2025-11-25 session), lists the tools, calls each one
-- with arguments built from its input schema, lists and reads what the
-- server advertises (resources, prompts), and closes the client. Where a
-- scenario says which calls to make (the context's toolCalls) it makes
-- those; where it asks for a tool's inputSchema back (the
-- json_schema_echo tool of json-schema-2020-12-preservation) it sends the
-- schema it received. Exit status 1 on any error but a server's JSON-RPC
-- error answer to a tool call.
local specula = require "specula"
local json = specula.json

local url = arg[1]
if not url or not url:match("^https?://") then
  io.stderr:write("usage: specula run spec/mcp/conformance_client.lua <server-url>\n")
  require("specula.script").set_exit(2)
  return
end
local scenario = os.getenv("MCP_CONFORMANCE_SCENARIO") or "?"
local context = {}
if os.getenv("MCP_CONFORMANCE_CONTEXT") then
  context = json.decode(os.getenv("MCP_CONFORMANCE_CONTEXT")) or {}
end

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

-- Authorization, as a script would configure it for this server. The
-- authorization server of the suite approves at once, so the code flow runs
-- headless (the default: the authorization URL is fetched and its redirect
-- read); the client ID metadata document URL is the one the suite expects.
local auth = {
  client_name = "specula-conformance",
  redirect_uri = "http://localhost:3000/callback",
  client_metadata_url = "https://conformance-test.local/client-metadata.json",
}
if scenario:match("^auth/client%-credentials") then
  auth.grant = "client_credentials"
  auth.client_id = context.client_id
  auth.client_secret = context.client_secret
  auth.private_key = context.private_key_pem
  auth.signing_alg = context.signing_algorithm
elseif context.valid_jwt then
  -- workload identity federation: the workload's JWT is the grant (RFC 7523)
  auth.grant = "jwt_bearer"
  auth.client_id = context.client_id
  auth.assertion = context.valid_jwt
elseif context.idp_id_token then
  -- enterprise-managed authorization: the IdP's ID token exchanged for an
  -- ID-JAG, then the JWT bearer grant with the pre-registered client
  auth.grant = "enterprise"
  auth.client_id = context.client_id
  auth.client_secret = context.client_secret
  auth.id_token = context.idp_id_token
  auth.idp_token_endpoint = context.idp_token_endpoint
  auth.idp_client_id = context.idp_client_id
elseif context.client_id then
  auth.client_id = context.client_id          -- pre-registered
  auth.client_secret = context.client_secret
end

local c, err = specula.mcp.connect {
  url = url, name = "conformance:" .. scenario, timeout_ms = 20000, auth = auth,
  -- SEP-1034: accept, and let the client fill in every default
  on_elicitation = function(params) return { action = "accept", content = {} } end,
}
if not c then
  io.stderr:write("conformance client: ", tostring(err), "\n")
  require("specula.script").set_exit(1)
  return
end
local status = 0
local function fail(err)
  io.stderr:write("conformance client: ", tostring(err), "\n")
  status = 1
end
local function call(name, args)
  local r, cerr = c:call(name, args)
  if not r and tostring(cerr):match(": error %-?%d+: ") then
    -- the server's own JSON-RPC error to the call (a scenario server that
    -- only lists its tools): an answer, reported, not a client failure
    print(name .. ": " .. tostring(cerr))
    return
  end
  if not r then return fail(cerr) end
  local parts = {}
  for _, item in ipairs(r.content) do if item.type == "text" then parts[#parts + 1] = item.text end end
  print(name .. ": " .. table.concat(parts, " ") .. (r.isError and " (isError)" or ""))
end
local tools, terr = c:list_tools()
if not tools then
  fail(terr)
elseif type(context.toolCalls) == "table" then
  for _, tc in ipairs(context.toolCalls) do call(tc.name, tc.arguments) end
else
  local schemas = {}
  for _, t in ipairs(tools) do schemas[t.name] = t.inputSchema end
  for _, t in ipairs(tools) do
    if t.name == "json_schema_echo" and schemas.json_schema_2020_12_tool then
      call(t.name, { schema = schemas.json_schema_2020_12_tool })
    else
      call(t.name, args_for(t.inputSchema))
    end
  end
end
-- what else the server advertises: resources (each read) and prompts (each got)
local caps = c.capabilities or {}
if caps.resources then
  local rs, rerr = c:list_resources()
  if not rs then fail(rerr) else
    for _, r in ipairs(rs) do
      local got, gerr = c:read_resource(r.uri)
      if not got then fail(gerr) end
    end
  end
end
if caps.prompts then
  local r, perr = c:request("prompts/list")
  if not r then fail(perr) else
    for _, p in ipairs(type(r.prompts) == "table" and r.prompts or {}) do
      local got, gerr = c:request("prompts/get", { name = p.name })
      if not got then fail(gerr) end
    end
  end
end
local info = c:auth_info()
if info and info.authorizations > 0 then
  io.stderr:write(("conformance client: authorized %d time(s) (client %s, %s, %s)\n"):format(info.authorizations,
    tostring(info.client_source), tostring(info.token_endpoint_auth_method), tostring(info.grant)))
end
c:close()
-- the exit status goes through the engine (os.exit would skip its shutdown
-- and leave the Lua state and pending calls unfreed)
require("specula.script").set_exit(status)
