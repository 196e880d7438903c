-- Requests from an MCP server to the client: sampling/createMessage,
-- elicitation/create (SEP-1034 defaults) and roots/list answered by Lua
-- hooks, over stdio, on a call's SSE stream and on the GET stream; refused
-- with -32601 without a hook.
local H = require "support.helpers"
local MH = require "support.mcp_helpers"

local last_json = H.last_json

local PRELUDE = [[
local specula = require "specula"
local json = specula.json
local SERVER = ]] .. string.format("%q", MH.SERVER) .. "\n"

local function run(code, env)
  local st, out, err = H.run_lua(PRELUDE .. code, {}, env)
  assert.are.equal(0, st, "exit status " .. st .. "\nstdout: " .. out .. "\nstderr: " .. err)
  return last_json(out), err
end

-- What the server asks, and the hooks that answer: a sampling hook that
-- asks its own model (an OpenAI-compatible endpoint), an elicitation hook
-- that accepts with part of the content, a roots list.
local HOOKS = [[
local LLM = os.getenv("LLM_BASE")
local model = specula.llm.openai.new{ base_url = LLM, api_key = "sk-hook-test-key", model = "m", retry = false }
local seen = {}
local hooks = {
  on_sampling = function(params, info)
    seen.sampling_server = info.server
    local msgs = {}
    for _, m in ipairs(params.messages) do msgs[#msgs + 1] = { role = m.role, content = m.content.text } end
    local r, err = model:chat{ messages = msgs, stream = false }
    if not r then return nil, err end
    return { role = "assistant", content = { type = "text", text = r.content }, model = r.model, stopReason = "endTurn" }
  end,
  on_elicitation = function(params)
    if params.message == "decline" then return { action = "decline" } end
    if params.message == "raise" then error("the user closed the window") end
    if params.message == "nothing" then return nil, "no one answered" end
    return { action = "accept", content = { name = "Ada" } }
  end,
  on_roots = { "/work/my project", "file:///srv/data", { uri = "file:///tmp", name = "scratch" } },
}
local SCHEMA = { type = "object", properties = {
  name = { type = "string", default = "John Doe" }, age = { type = "integer", default = 30 },
  score = { type = "number", default = 95.5 }, status = { type = "string", enum = { "active", "pending" }, default = "active" },
  verified = { type = "boolean", default = true }, note = { type = "string" } }, required = json.array({}) }
local function ask(c, method, params, via)
  local r = assert(c:call("ask", { method = method, params = params or json.object(), via = via }))
  return r.structuredContent
end
local function exercise(c, via)
  local out = {}
  out.sampling = ask(c, "sampling/createMessage", { messages = { { role = "user", content = { type = "text", text = "what is 2+2?" } } },
    maxTokens = 10 }, via)
  out.elicit = ask(c, "elicitation/create", { message = "fill it", requestedSchema = SCHEMA }, via)
  out.decline = ask(c, "elicitation/create", { message = "decline", requestedSchema = SCHEMA }, via)
  out.required = ask(c, "elicitation/create", { message = "fill it", requestedSchema = { type = "object",
    properties = { name = { type = "string" }, email = { type = "string" } }, required = { "email" } } }, via)
  out.raised = ask(c, "elicitation/create", { message = "raise", requestedSchema = SCHEMA }, via)
  out.nothing = ask(c, "elicitation/create", { message = "nothing", requestedSchema = SCHEMA }, via)
  out.roots = ask(c, "roots/list", nil, via)
  out.unknown = ask(c, "no/such_method", nil, via)
  out.echo = assert(c:call("echo", { text = "still here" })).content[1].text
  return out
end
]]

local function check(r)
  local s = r.sampling.result
  assert.are.equal("assistant", s.role)
  assert.are.equal("model says: what is 2+2?", s.content.text)
  assert.are.equal("m", s.model)
  -- SEP-1034: every default filled in, the hook's own value kept, no default: absent
  assert.are.same({ action = "accept", content = { name = "Ada", age = 30, score = 95.5, status = "active",
    verified = true } }, r.elicit.result)
  assert.are.same({ action = "decline" }, r.decline.result)
  assert.are.equal(-32603, r.required.error.code)
  assert.matches("lacks the required field 'email'", r.required.error.message, 1, true)
  assert.are.equal(-32603, r.raised.error.code)
  assert.matches("raised: .*the user closed the window", r.raised.error.message)
  assert.are.equal(-1, r.nothing.error.code)               -- a refusal, with the hook's reason
  assert.matches("no one answered", r.nothing.error.message, 1, true)
  assert.are.same({ { uri = "file:///work/my%20project" }, { uri = "file:///srv/data" },
                    { uri = "file:///tmp", name = "scratch" } }, r.roots.result.roots)
  assert.are.equal(-32601, r.unknown.error.code)
  assert.are.equal("echo: still here", r.echo)
  -- what the client told the server it can do
  assert.are.same({}, r.caps.sampling)
  assert.are.same({ form = {}, url = {} }, r.caps.elicitation)
  assert.are.same({ listChanged = true }, r.caps.roots)
  assert.are.equal(1, r.roots_changed)
  assert.are.equal(1, r.hooks.sampling)
  assert.are.equal(5, r.hooks.elicitation)
  assert.are.equal(1, r.hooks.roots)
  assert.are.equal(3, r.hooks.errors)
end

describe("hooks for server-to-client requests", function()
  local llm
  -- (without Node.js there is no server: each test below is pending)
  setup(function() if not H.node_missing() then llm = MH.http_server() end end)
  teardown(function() if llm then llm.stop() end end)

  it("answer sampling (with the script's own model), elicitation (SEP-1034 defaults) and roots over stdio", function()
    if not H.need_node(pending) then return end
    local r, err = run(HOOKS .. [[
local c = assert(specula.mcp.connect{ command = { "node", SERVER }, name = "hooks",
  on_sampling = hooks.on_sampling, on_elicitation = hooks.on_elicitation, on_roots = hooks.on_roots })
local out = exercise(c)
assert(c:roots_changed())
specula.sleep(50)
local log = assert(c:call("log")).structuredContent
out.caps = log.client_capabilities
out.roots_changed = log.roots_changed
out.hooks = c:stats().hooks
out.server = seen.sampling_server
c:close()
print(json.encode(out))
]], { LLM_BASE = llm.base .. "/v1" })
    check(r)
    assert.are.equal("hooks", r.server)
    -- each failed hook is a warning naming the server and the hook
    assert.matches("mcp server 'hooks': on_elicitation hook for elicitation/create: raised", err, 1, true)
  end)

  it("answer requests on a call's SSE stream and on the GET stream over HTTP", function()
    if not H.need_node(pending) then return end
    local srv = MH.http_server()
    local ok, r = pcall(run, HOOKS .. [[
local c = assert(specula.mcp.connect{ url = ]] .. string.format("%q", srv.url) .. [[, name = "hooks",
  on_sampling = hooks.on_sampling, on_elicitation = hooks.on_elicitation, on_roots = hooks.on_roots })
local out = exercise(c)
local get = exercise(c, "get")
assert(c:roots_changed())
specula.sleep(50)
local log = assert(c:call("log")).structuredContent
out.caps = log.client_capabilities
out.roots_changed = log.roots_changed
out.hooks = c:stats().hooks
out.listen_status = c:stats().listen_status
out.get = get
out.gets = #log.gets
c:close()
print(json.encode(out))
]], { LLM_BASE = llm.base .. "/v1" })
    srv.stop()
    assert(ok, r)
    assert.are.equal(200, r.listen_status)
    assert.are.equal(1, r.gets)                      -- one GET stream, opened at connect
    local hooks = r.hooks
    r.hooks = { sampling = hooks.sampling / 2, elicitation = hooks.elicitation / 2, roots = hooks.roots / 2,
                errors = hooks.errors / 2 }
    check(r)
    r.get.caps, r.get.roots_changed, r.get.hooks = r.caps, r.roots_changed, r.hooks
    check(r.get)
  end)

  it("refuses with -32601 without hooks, opens no GET stream, and copes with a server that has none", function()
    if not H.need_node(pending) then return end
    local srv = MH.http_server({ "--no-get" })
    local ok, r, err = pcall(run, [[
local plain = assert(specula.mcp.connect{ url = ]] .. string.format("%q", srv.url) .. [[, name = "plain" })
local a = assert(plain:call("ask", { method = "elicitation/create", params = { message = "x" } })).structuredContent
local g = assert(plain:call("ask", { method = "elicitation/create", via = "get" }))
local st = plain:stats()
plain:close()
local hooked = assert(specula.mcp.connect{ url = ]] .. string.format("%q", srv.url) .. [[, name = "hooked",
  on_elicitation = function() return { action = "cancel" } end })
local b = assert(hooked:call("ask", { method = "elicitation/create", params = { message = "x" } })).structuredContent
local st2 = hooked:stats()
local log = assert(hooked:call("log")).structuredContent
hooked:close()
print(json.encode({ a = a, g_error = g.isError, g = g.content[1].text, listen = st.listen_status,
  listen2 = st2.listen_status, b = b, caps = log.client_capabilities }))
]])
    srv.stop()
    assert(ok, r)
    assert.are.equal(-32601, r.a.error.code)
    assert.is_true(r.g_error)                           -- no GET stream was opened
    assert.are.equal("no GET stream", r.g)
    assert.is_nil(r.listen)
    assert.are.equal(405, r.listen2)                    -- asked, refused, no warning
    assert.are.same({ action = "cancel" }, r.b.result)
    assert.are.same({ elicitation = { form = {}, url = {} } }, r.caps)
    assert.is_nil(err:find("warning", 1, true))
  end)

  it("rejects hooks of the wrong type at connect", function()
    local r = run([[
local ok1, e1 = pcall(specula.mcp.connect, { command = { "node", SERVER }, on_sampling = "yes" })
local ok2, e2 = pcall(specula.mcp.connect, { command = { "node", SERVER }, on_roots = 5 })
local ok3, e3 = pcall(specula.mcp.connect, { command = { "node", SERVER }, listen = "yes" })
print(json.encode({ e1 = e1, e2 = e2, e3 = e3 }))
]])
    assert.matches("on_sampling must be a function", r.e1, 1, true)
    assert.matches("on_roots must be a function or a list of roots", r.e2, 1, true)
    assert.matches("listen must be a boolean", r.e3, 1, true)
  end)
end)
