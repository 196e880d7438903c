-- What a predictor reads in a run: the conversation the model sees (the
-- agent's context(state), else the query and the calls) and the tools'
-- declared input schemas (a tool's schema / input_schema, an MCP server's
-- inputSchema); and what a learning predictor is handed after each query.
local H = require "support.helpers"
local SCRIPTS = H.root .. "/spec/functional/scripts/"

describe("predictors read what the model reads", function()
  local r, err
  setup(function()
    local st, out
    st, out, err = H.specula({ "run", SCRIPTS .. "predict_context.lua" })
    assert.equals(0, st, err)
    r = H.last_json(out)
  end)

  it("gets the agent's context(state) as events at every step, and the tools' schemas", function()
    local w = r.with_context
    assert.equals(3, #w)
    assert.same({ "user,assistant,user", "user,assistant,user,call,result", "user,assistant,user,call,result,call,result" },
      { w[1].kinds, w[2].kinds, w[3].kinds })
    assert.equals("It is ZX-3", w[1].last)
    assert.equals("YY-ZX-3", w[2].last)
    assert.same({ 0, 1, 2 }, { w[1].history, w[2].history, w[3].history })
    assert.same({ "code" }, w[1].schema.required)
    assert.equals("look a code up", w[1].description)
  end)

  it("without context(state): the query as the user's message, then the calls and their results", function()
    local w = r.without_context
    assert.same({ "user", "user,call,result", "user,call,result,call,result" }, { w[1].kinds, w[2].kinds, w[3].kinds })
    assert.equals("abc", w[1].last)
    assert.same({ "code" }, w[1].schema.required)
  end)

  it("a context(state) that raises is warned about once, and the calls stand in; the run goes on", function()
    assert.equals("done", r.raising_answer)
    assert.equals("user", r.raising[1].kinds)
    local _, n = err:gsub("agent context%(state%) failed", "")
    assert.equals(1, n)
  end)

  it("hands a learning predictor the committed conversation after each query", function()
    assert.equals(2, #r.learnt)
    for _, l in ipairs(r.learnt) do
      assert.equals(2, l.actions)
      assert.equals(2, l.traj)
      assert.equals("user,assistant,user,call,result,call,result", l.kinds)
      -- the text turn it began with, its two calls, and its final answer
      assert.equals("text,call,call,text", l.turns)
    end
  end)

  it("the learned predictor learns from the context online: the code comes from the user's second message", function()
    assert.equals(12, r.learned_online)
    assert.is_true(r.learned_promoted >= 15, "promoted " .. r.learned_promoted)
    assert.matches("U", r.learned_sources)
  end)
end)

describe("MCP tools carry their input schema", function()
  it("tools.mcp keeps inputSchema and description; the predictor is given them", function()
    if not H.need_node(pending) then return end
    local code = [[
local specula = require "specula"
local server = os.getenv("SPECULA_SOURCE_DIR") .. "/spec/support/mcp_testserver.js"
local client = assert(specula.mcp.connect { command = { "node", server }, name = "testserver" })
local tools = specula.tools.mcp(client, { include = { "add", "echo" } })
local seen
local agent = specula.agent {
  tools = tools, policy = { add = "full" },
  init = function(q) return 0 end,
  step = function(s) if s == 1 then return { final = "ok" } end return { action = { tool = "add", args = { a = 1, b = 2 } } } end,
  update = function(s) return s + 1 end,
  predict = function(h, ctx) seen = seen or ctx.tools.add return {} end,
}
specula.run(agent, { queries = { "x" }, mode = "sequential" })
client:close()
print(specula.json.encode({ schema = tools.add.schema, description = tools.add.description, seen = seen }))
]]
    local st, out, err = H.run_lua(code)
    assert.equals(0, st, out .. err)
    local r = H.last_json(out)
    assert.same({ "a", "b" }, r.schema.required)
    assert.equals("number", r.schema.properties.a.type)
    assert.equals("Add two numbers", r.description)
    assert.same(r.schema, r.seen.schema)
  end)

  it("an agent's tool schema must be a table", function()
    local code = [[
local specula = require "specula"
local ok, err = pcall(specula.agent, { init = function() end, step = function() end, update = function() end,
  tools = { t = { call = function() end, schema = "object" } } })
print(specula.json.encode({ ok = ok, err = tostring(err) }))
local ok2, err2 = pcall(specula.agent, { init = function() end, step = function() end, update = function() end,
  context = "messages" })
print(specula.json.encode({ ok = ok2, err = tostring(err2) }))
]]
    local st, out, err = H.run_lua(code)
    assert.equals(0, st, out .. err)
    assert.matches("tools.t.schema must be a JSON Schema table", out)
    assert.matches("agent.context must be a function", out)
  end)
end)
