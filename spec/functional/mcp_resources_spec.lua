-- MCP resources through specula.mcp (list, templates, read) over stdio and
-- Streamable HTTP, specula.tools.mcp_resources, and their eligibility: a
-- resource read is `full` in the one gate without trusting any annotation,
-- unless the agent's policy decides for that tool itself.
local H = require "support.helpers"
local MH = require "support.mcp_helpers"

local last_json = H.last_json

local PRELUDE = [[
local specula = require "specula"
local json = specula.json
local SERVER = ]] .. string.format("%q", MH.SERVER) .. "\n"

local function run(code, env, args)
  local st, out, err = H.run_lua(PRELUDE .. code, args or {}, env)
  assert.are.equal(0, st, "exit status " .. st .. "\nstdout: " .. out .. "\nstderr: " .. err)
  return last_json(out), err
end

local CLIENT_CODE = [[
local tools_made = specula.tools.mcp_resources(c)
local list = assert(c:list_resources())
local tpls = assert(c:list_resource_templates())
local a = assert(c:read_resource("note:///alpha"))
local g = assert(c:read_resource("note:///gamma.bin"))
local miss, merr = c:read_resource("note:///missing-one")
local via_tpl = tools_made.note.call({ name = "x y/z" }, {})
local via_generic = tools_made.read_resource.call({ uri = "note:///beta" }, {})
local blob = tools_made.read_resource.call({ uri = "note:///gamma.bin" }, {})
local ok_noarg, noarg = pcall(tools_made.note.call, {}, {})
local names = {}
for n in pairs(tools_made) do names[#names + 1] = n end
table.sort(names)
local log = assert(c:call("log")).structuredContent
local st = c:stats()
c:close()
print(json.encode({ n = #list, uris = { list[1].uri, list[2].uri, list[3].uri }, mime3 = list[3].mimeType,
  tpl = tpls[1].uriTemplate, a = a.contents[1].text, a_uri = a.contents[1].uri, g = g.contents[1].blob,
  merr = merr, miss = miss == nil, via_tpl = via_tpl, via_generic = via_generic, blob_is_table = type(blob) == "table",
  blob = type(blob) == "table" and blob[1].blob or nil, noarg = tostring(noarg), ok_noarg = ok_noarg,
  names = names, reads = log.reads, st_reads = st.reads }))
]]

local function check_client(r)
  assert.are.equal(3, r.n)                              -- two pages of 2 and 1, followed
  assert.are.same({ "note:///alpha", "note:///beta", "note:///gamma.bin" }, r.uris)
  assert.are.equal("application/octet-stream", r.mime3)
  assert.are.equal("note:///{name}", r.tpl)
  assert.are.equal("alpha says hello", r.a)
  assert.are.equal("note:///alpha", r.a_uri)
  assert.are.equal("AAEC+g==", r.g)                   -- bytes 0 1 2 250, as the server sent them
  assert.is_true(r.miss)
  assert.matches("resources/read 'note:///missing-one': error -32002: Resource not found", r.merr, 1, true)
  -- the template's variable is percent-encoded into the URI (RFC 6570)
  assert.are.equal("note x y/z", r.via_tpl)
  assert.are.equal(1, r.reads["note:///x%20y%2Fz"])
  assert.are.equal("# beta\nsecond note", r.via_generic)
  assert.is_true(r.blob_is_table)                       -- a blob comes back as the contents
  assert.are.equal("AAEC+g==", r.blob)
  assert.is_false(r.ok_noarg)
  assert.matches("args.name is missing", r.noarg, 1, true)
  assert.are.same({ "note", "read_resource" }, r.names)
  assert.are.equal(6, r.st_reads)
end

describe("MCP resources", function()
  it("lists every page, lists templates, reads text and blobs, and exposes reads as tools (stdio)", function()
    if not H.need_node(pending) then return end
    local r = run("local c = assert(specula.mcp.connect{ command = { 'node', SERVER }, name = 'res' })\n" .. CLIENT_CODE)
    check_client(r)
  end)

  it("does the same over Streamable HTTP", function()
    if not H.need_node(pending) then return end
    local srv = MH.http_server()
    local ok, r = pcall(run, "local c = assert(specula.mcp.connect{ url = " .. string.format("%q", srv.url)
      .. ", name = 'res' })\n" .. CLIENT_CODE)
    srv.stop()
    assert(ok, r)
    check_client(r)
  end)

  it("expands RFC 6570 templates (every operator, prefixes, undefined variables)", function()
    local r = run([[
local T = specula.tools
local vars = { var = "value", hello = "Hello World!", path = "/foo/bar", x = "1024", y = "768", empty = "" }
local cases = {
  "{var}", "{hello}", "{+hello}", "{+path}/here", "{#path}", "X{.var}", "{/var,x}/here", "{;x,y,empty}",
  "{?x,y,empty}", "?fixed=yes{&x}", "{var:3}", "{undef}", "{?undef}", "map?{x,y}",
}
local out = {}
for i, c in ipairs(cases) do out[i] = T.expand_uri(c, vars) end
local names = T.uri_variables("db://{+host}/{table}{?limit,offset}")
local bad, berr = T.uri_variables("x{a b}")
print(json.encode({ out = out, names = names, bad = bad == nil, berr = berr }))
]])
    -- the examples of RFC 6570 §1.2 and §3.2
    assert.are.same({ "value", "Hello%20World%21", "Hello%20World!", "/foo/bar/here", "#/foo/bar", "X.value",
      "/value/1024/here", ";x=1024;y=768;empty", "?x=1024&y=768&empty=", "?fixed=yes&x=1024", "val", "", "",
      "map?1024,768" }, r.out)
    assert.are.same({ "host", "table", "limit", "offset" }, r.names)
    assert.is_true(r.bad)
    assert.matches("bad variable", r.berr)
  end)
end)

-- An agent whose every hop reads a resource through the template tool
-- (slow reads, a speculator that guesses right, so threads run ahead and
-- launch the next read early) and writes once at the end.
local AGENT = [[
local specula = require "specula"
-- MCP_MODERN=1: the test server speaks 2026-07-28 too (--modern)
local client = assert(specula.mcp.connect { command = { "node", ]] .. string.format("%q", MH.SERVER) .. [[,
  os.getenv("MCP_MODERN") == "1" and "--modern" or nil }, name = "res" })
local tools = specula.tools.mcp_resources(client)
for k, t in pairs(specula.tools.mcp(client, { include = { "write" } })) do tools[k] = t end
tools.note.speculate = function(args) return "note " .. args.name end
local POLICY = os.getenv("POLICY")
local policy
if POLICY == "mcp" then policy = specula.policy.mcp(client)
elseif POLICY == "table" then policy = { note = "forbid" }
elseif POLICY == "function" then policy = function(tool) return tool == "note" and "forbid" or "full" end
elseif POLICY == "classes" then policy = { classes = { w = "forbid" }, tools = { write = "w" } }
end
_G.CLIENT = client
return specula.agent {
  name = "resources",
  tools = tools,
  policy = policy,
  init = function(q) return { q = q, hop = 0, seen = {} } end,
  step = function(s)
    specula.sleep(1)
    if s.hop == 4 then return { segment = "done", action = { tool = "write", args = { path = s.q, text = s.seen[4] } } } end
    if s.hop == 5 then return { final = table.concat(s.seen, "|") } end
    return { segment = "read", action = { tool = "note", args = { name = "slow-40-" .. s.q .. "-" .. s.hop } } }
  end,
  update = function(s, step, obs)
    local seen = { unpack(s.seen) }
    seen[#seen + 1] = obs
    return { q = s.q, hop = s.hop + 1, seen = seen }
  end,
}
]]

local function run_agent(policy, modern)
  local path = H.tmpfile("resources_agent.lua", AGENT)
  local code = [[
local specula = require "specula"
local json = specula.json
local agent = assert(loadfile(]] .. string.format("%q", path) .. [[))()
local qs = { "a", "b", "c" }
local seq = specula.run(agent, { queries = qs, mode = "sequential" })
local spec, agg = specula.run(agent, { queries = qs, mode = "spechop", k = "inf" })
local same = 0
for i = 1, #qs do
  if json.canonical({ seq[i].answer, seq[i].trajectory }) == json.canonical({ spec[i].answer, spec[i].trajectory }) then same = same + 1 end
end
local t = agg.policy_counts.tools
local log = assert(CLIENT:call("log")).structuredContent
print(json.encode({ same = same, n = #qs, note = t.note, write = t.write, answer = spec[1].answer,
  version = CLIENT.protocol_version,
  journal = #log.journal, classes = agg.policy_counts.classes, unknown = agg.policy_counts.unknown }))
]]
  local st, out, err = H.run_lua(code, {}, { POLICY = policy, MCP_MODERN = modern and "1" or "" })
  assert.are.equal(0, st, out .. err)
  return last_json(out)
end

describe("resource reads and the eligibility gate", function()
  it("are full with no policy at all, counted in the gate with their source, and answers stay identical", function()
    if not H.need_node(pending) then return end
    local r = run_agent("")
    assert.are.equal(r.n, r.same)
    assert.are.equal("note slow-40-a-0|note slow-40-a-1|note slow-40-a-2|note slow-40-a-3|wrote a", r.answer)
    assert.are.equal("full", r.note.decision)
    assert.are.equal("mcp-resource", r.note.source)
    assert.is_true(r.note.full > 0, "no read ran early")
    assert.are.equal(0, r.note.forbid)
    assert.is_true(r.classes["mcp-resource"].full > 0)
    -- the write is unknown to the policy: never early
    assert.is_nil(r.write)
    assert.are.equal(0, r.unknown.full)
    assert.are.equal(6, r.journal)                       -- 3 queries, sequential and speculative
  end)

  it("are the same at 2026-07-28: reads full and early, the write never early, the same answers and counts", function()
    if not H.need_node(pending) then return end
    local old, new = run_agent(""), run_agent("", true)
    assert.are.equal("2025-11-25", old.version)
    assert.are.equal("2026-07-28", new.version)
    for _, r in ipairs({ old, new }) do
      assert.are.equal(r.n, r.same)
      assert.are.equal("full", r.note.decision)
      assert.is_true(r.note.full > 0, "no read ran early at " .. r.version)
      assert.is_nil(r.write)
      assert.are.equal(0, r.unknown.full)
      assert.are.equal(6, r.journal)
    end
    assert.are.equal(old.answer, new.answer)
  end)

  it("are full under policy.mcp without trusting annotations", function()
    if not H.need_node(pending) then return end
    local r = run_agent("mcp")
    assert.are.equal(r.n, r.same)
    assert.are.equal("mcp-resource", r.note.source)
    assert.is_true(r.note.full > 0)
    assert.are.equal("forbid", r.write.decision)
    assert.are.equal("default", r.write.source)
    assert.are.equal(0, r.write.full)
  end)

  it("are full beside a class policy that does not name them", function()
    if not H.need_node(pending) then return end
    local r = run_agent("classes")
    assert.are.equal(r.n, r.same)
    assert.is_true(r.note.full > 0)
    assert.are.equal(0, r.write.full)
  end)

  it("follow the policy when it names the tool (a table entry) or decides every tool (a function)", function()
    if not H.need_node(pending) then return end
    for _, p in ipairs({ "table", "function" }) do
      local r = run_agent(p)
      assert.are.equal(r.n, r.same)
      assert.are.equal(0, r.note.full, p)
      assert.is_true(r.note.forbid > 0, p)
      assert.is_nil(r.note.source, p)
    end
  end)
end)
