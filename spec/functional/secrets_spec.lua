-- Secrets never leave the process (docs/agents.md#secrets): one spec per way
-- they used to, each through the real binary against the loopback test
-- server (/echo, /reflect) and the MCP test server, each output read back
-- by spec/support/leakcheck.lua, whose decoders owe nothing to the
-- scrubber.
local H = require "support.helpers"
local L = require "support.leakcheck"
local cjson = require "cjson"

local NODE = os.getenv("SPECULA_NODE") or "node"
local MCP_SERVER = H.root .. "/spec/support/mcp_testserver.js"

local server
setup(function() server = H.server() end)
teardown(function() if server then server.stop() end end)

local counter = 0
local function tmp(name)
  counter = counter + 1
  return H.tmpdir() .. "/sec" .. counter .. "-" .. name
end

-- The text of every cassette file of dir, one string.
local function tape(dir)
  local parts = {}
  for i = 1, 99 do
    local t = H.read(string.format("%s/cassette-%04d.jsonl", dir, i))
    if not t then break end
    parts[#parts + 1] = t
  end
  return table.concat(parts)
end

-- The lines of a tape of one kind.
local function lines_of(text, kind)
  local out = {}
  for line in text:gmatch("[^\n]+") do
    local v = cjson.decode(line)
    if v.kind == kind then out[#out + 1] = line end
  end
  return table.concat(out, "\n")
end

local function clean(text, secret, what, views)
  local i = L.find(views or L.views(text), secret)
  assert.is_nil(i, "the secret is in " .. what .. " (decoded view " .. tostring(i) .. "): " .. text:sub(1, 600))
end

-- specula run SCRIPT(code) ARGS..., with env; returns status, stdout, stderr
local function run(code, args, env)
  local script = tmp("agent.lua")
  local f = assert(io.open(script, "w"))
  f:write(code)
  f:close()
  local a = { "run", script }
  for _, x in ipairs(args) do a[#a + 1] = x end
  env = env or {}
  env.BASE = server.base
  return H.specula(a, env)
end

local ONE_TOOL = [[
local specula = require "specula"
local BASE = os.getenv("BASE")
local tool = %s
return specula.agent {
  tools = { t = tool },
  init = function(q) return { q = q, n = 0 } end,
  step = function(s)
    if s.n == 0 then return { segment = "call", action = { tool = "t", args = %s } } end
    return { final = "saw " .. (type(s.obs) == "string" and s.obs or specula.json.encode(s.obs)) }
  end,
  update = function(s, st, obs) return { q = s.q, n = s.n + 1, obs = obs } end,
}
]]

describe("secrets on tape and in every output", function()
  it("a secret with \" and \\ in a JSON request body is on tape in no form (body and request key)", function()
    local secret = 'ab"cd\\ef-12345'
    local dir, out = tmp("cas"), tmp("out.jsonl")
    local st, _, err = run(ONE_TOOL:format([[specula.tools.http { url = BASE .. "/echo",
      body = { token = "{env.API_TOKEN}", q = "{q}" }, result = "json" }]], "{ q = s.q }"),
      { "--query", "hello", "--k", "1", "--record", dir, "--out", out }, { API_TOKEN = secret })
    assert.equals(0, st, err)
    local t = tape(dir)
    local http = lines_of(t, "http")
    for line in http:gmatch("[^\n]+") do
      local v = cjson.decode(line)
      clean(v.key, secret, "the request key")
      if v.req then clean(v.req.body, secret, "the request body") end
    end
    clean(t, secret, "the tape", L.tape_views(t))
    clean(H.read(out), secret, "the records")
    assert.truthy(http:find("[redacted]", 1, true), http)
  end)

  it("a server echoing a secret with non-ASCII letters as \\u00e4 escapes: not on tape", function()
    local secret = "pässwörd-4711"
    local dir, out = tmp("cas"), tmp("out.jsonl")
    local st, _, err = run(ONE_TOOL:format([[specula.tools.http { url = BASE .. "/reflect?h=x-api-key&enc=jsona&wrap=json",
      headers = { ["X-Api-Key"] = "{env.SEARCH_SECRET}" }, result = "text" }]], "{}"),
      { "--query", "hello", "--k", "1", "--record", dir, "--out", out }, { SEARCH_SECRET = secret })
    assert.equals(0, st, err)
    local t = tape(dir)
    clean(t, secret, "the tape", L.tape_views(t))
    clean(H.read(out), secret, "the records")
    -- the server did echo it, escaped, and the tape holds where it was
    assert.truthy(lines_of(t, "obs"):find("[redacted]", 1, true), t)
  end)

  it("a streamed response that cuts a secret across two chunks: neither half on tape", function()
    local key = "sk-stream-SECRET-0042"
    local dir, out = tmp("cas"), tmp("out.jsonl")
    local st, _, err = run([[
local specula = require "specula"
local c = specula.llm.openai.new { model = "m", retry = false, headers = { ["X-Api-Key"] = os.getenv("OPENAI_API_KEY") },
  chat_url = os.getenv("BASE") .. "/reflect?h=x-api-key&wrap=sse&split=7&pause=30" }
return specula.agent {
  init = function(q) return q end,
  step = function(s)
    local r = assert(c:chat { messages = { { role = "user", content = s } }, stream = true })
    return { final = r.content }
  end,
  update = function(s) return s end,
}
]], { "--query", "hello", "--record", dir, "--out", out }, { OPENAI_API_KEY = key })
    assert.equals(0, st, err)
    local t = tape(dir)
    clean(t, key, "the tape", L.tape_views(t))
    -- the chunks joined hold the redaction (how many chunks arrive here
    -- depends on the machine's speed: the next spec fixes them at two)
    local http = cjson.decode(lines_of(t, "http"):match("[^\n]+$"))
    local joined = {}
    for _, e in ipairs(http.events) do joined[#joined + 1] = e[2] end
    joined = table.concat(joined)
    assert.truthy(joined:find("got <[redacted]> ok", 1, true), joined)
    local rec = cjson.decode(H.read(out))
    assert.equals("got <[redacted]> ok", rec.answer)
  end)

  it("a stream read as two chunks, a secret cut between them: the tape holds two chunks and neither half", function()
    -- the server sends the second chunk only when the agent, having read
    -- the first, asks /release: two chunks however slow the machine is
    local key = "sk-gated-SECRET-0077"
    local dir, out = tmp("cas"), tmp("out.jsonl")
    local st, _, err = run([[
local specula = require "specula"
return specula.agent {
  init = function(q) return q end,
  step = function(s)
    local base = os.getenv("BASE")
    local r = assert(specula.http.request { url = base .. "/reflect?h=x-api-key&split=7&gate=g1", stream = true,
      headers = { ["X-Api-Key"] = os.getenv("OPENAI_API_KEY") } })
    local first = assert(r:read())
    local rel = assert(specula.http.request { url = base .. "/release?gate=g1" })
    assert(rel.body == "released 1", rel.body)
    local rest = {}
    while true do
      local c = r:read()
      if not c then break end
      rest[#rest + 1] = c
    end
    r:close()
    return { final = #first .. "+" .. #table.concat(rest) }
  end,
  update = function(s) return s end,
}
]], { "--query", "hello", "--record", dir, "--out", out }, { OPENAI_API_KEY = key })
    assert.equals(0, st, err)
    local t = tape(dir)
    clean(t, key, "the tape", L.tape_views(t))
    clean(H.read(out), key, "the records")
    local streamed
    for line in lines_of(t, "http"):gmatch("[^\n]+") do
      local v = cjson.decode(line)
      if v.events then streamed = v end
    end
    assert.is_table(streamed, t)
    assert.equals(2, #streamed.events, t)
    -- the first chunk ends 7 bytes into the secret: the scrubber, seeing
    -- both, left neither half; joined they hold the redaction
    assert.is_nil(streamed.events[1][2]:find(key:sub(1, 7), 1, true), t)
    assert.is_nil(streamed.events[2][2]:find(key:sub(8), 1, true), t)
    assert.truthy((streamed.events[1][2] .. streamed.events[2][2]):find("got <[redacted]> ok", 1, true), t)
    local rec = cjson.decode(H.read(out))
    -- "got <" and 7 bytes of the key, then the rest of it and "> ok"
    assert.equals((5 + 7) .. "+" .. (#key - 7 + 4), rec.answer)
  end)

  it("a response body that is not UTF-8, stored as hex, holds no secret", function()
    local secret = "bin-token-7777"
    local dir, out = tmp("cas"), tmp("out.jsonl")
    local st, _, err = run(ONE_TOOL:format([[specula.tools.http { url = BASE .. "/reflect?h=x-auth-token&bin=1",
      headers = { ["X-Auth-Token"] = "{env.BIN_TOKEN}" }, result = function(res) return #res.body end }]], "{}"),
      { "--query", "hello", "--k", "1", "--record", dir, "--out", out }, { BIN_TOKEN = secret })
    assert.equals(0, st, err)
    local t = tape(dir)
    clean(t, secret, "the tape", L.tape_views(t))
    local http = cjson.decode(lines_of(t, "http"):match("[^\n]+$"))
    assert.is_string(http.res.body.hex, t)     -- stored as hex, and still read back
    local raw = http.res.body.hex:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end)
    assert.equals("\255\254 got <[redacted]> ok", raw)
  end)

  it("a tool result that echoes its own credential headers: not in the obs line", function()
    local dir, out = tmp("cas"), tmp("out.jsonl")
    local st, _, err = run(ONE_TOOL:format([[specula.tools.http { url = BASE .. "/echo", result = "json",
      headers = { ["X-Auth-Token"] = "literal-auth-5150", Cookie = "session=cookie-9988" } }]], "{}"),
      { "--query", "hello", "--k", "1", "--record", dir, "--out", out })
    assert.equals(0, st, err)
    local t = tape(dir)
    local obs = lines_of(t, "obs")
    for _, secret in ipairs({ "literal-auth-5150", "session=cookie-9988" }) do
      clean(obs, secret, "the obs line")
      clean(t, secret, "the tape", L.tape_views(t))
      clean(H.read(out), secret, "the records")
    end
    assert.truthy(obs:find("x-auth-token", 1, true), obs)   -- the echo is there, its values are not
  end)

  it("an MCP result that is JSON text holding a secret: not in the mcp and obs lines", function()
    if not H.need_node(pending) then return end
    local secret = 'mcp"tok\\en-777'
    for _, as in ipairs({ "json", "jsona", "text" }) do
      local dir, out = tmp("cas"), tmp("out.jsonl")
      local st, _, err = run(([[
local specula = require "specula"
local client = assert(specula.mcp.connect { command = { %q, %q }, name = "ts",
  env = { MCP_TOKEN = os.getenv("MCP_TOKEN_VALUE") } })
local tools = specula.tools.mcp(client, { include = { "env" } })
return specula.agent {
  tools = tools,
  init = function(q) return { n = 0 } end,
  step = function(s)
    if s.n == 0 then return { segment = "call", action = { tool = "env", args = { name = "MCP_TOKEN", as = %q } } } end
    return { final = s.obs }
  end,
  update = function(s, st, obs) return { n = s.n + 1, obs = obs } end,
}
]]):format(NODE, MCP_SERVER, as), { "--query", "hello", "--k", "1", "--record", dir, "--out", out },
        { MCP_TOKEN_VALUE = secret })
      assert.equals(0, st, err)
      local t = tape(dir)
      local mcp, obs = lines_of(t, "mcp"), lines_of(t, "obs")
      clean(mcp, secret, "the mcp lines (" .. as .. ")")
      clean(obs, secret, "the obs line (" .. as .. ")")
      clean(t, secret, "the tape (" .. as .. ")", L.tape_views(t))
      clean(H.read(out), secret, "the records (" .. as .. ")")
      assert.truthy(obs:find("[redacted]", 1, true), as .. ": " .. obs)
    end
  end)

  it("an MCP server that prints an environment secret on stderr as it dies: not in the record's error", function()
    if not H.need_node(pending) then return end
    local secret = "db-pässword-2024"
    local out = tmp("out.jsonl")
    local st, so, se = run(([[
local specula = require "specula"
local client = assert(specula.mcp.connect { command = { %q, %q }, name = "ts", max_restarts = 0,
  env = { DB_PASSWORD = os.getenv("DBPW") } })
local tools = specula.tools.mcp(client, { include = { "crash_env" } })
return specula.agent {
  tools = tools,
  init = function(q) return 0 end,
  step = function(s) return { action = { tool = "crash_env", args = { name = "DB_PASSWORD" } } } end,
  update = function(s) return s + 1 end,
}
]]):format(NODE, MCP_SERVER), { "--query", "hello", "--k", "1", "--out", out }, { DBPW = secret })
    assert.equals(3, st, se)
    clean(H.read(out), secret, "the records")
    clean(so .. se, secret, "stdout and stderr")
    local rec = cjson.decode(H.read(out))
    -- the error says what the server said, with the secret taken out
    assert.matches("last stderr: .*fatal: cannot reach the backend with token=%[redacted%]", rec.error)
  end)

  it("the end-of-run cassette miss summary names a request without its secret query parameter", function()
    local secret = "code-SECRET-31337"
    local dir = tmp("cas")
    local code = ONE_TOOL:format([[specula.tools.http { url = BASE .. "/echo?q={q}&code={env.ACCESS_CODE}",
      result = "json", retry = false }]], "{ q = s.q }")
    local st, _, err = run(code, { "--query", "one", "--k", "1", "--record", dir, "--out", tmp("o.jsonl") },
      { ACCESS_CODE = secret })
    assert.equals(0, st, err)
    local out = tmp("out.jsonl")
    local so, se
    st, so, se = run(code, { "--query", "two", "--k", "1", "--replay-io", dir, "--clock", "virtual", "--out", out },
      { ACCESS_CODE = secret })
    clean(so .. se, secret, "stdout and stderr")
    clean(H.read(out), secret, "the records")
    assert.equals(3, st, se)
    assert.matches("not in it: GET .*/echo%?q=two&code=%[redacted%]", se)
  end)

  it("--secret-env NAME keeps a value the engine never handles out of records, traces and messages", function()
    local secret = "user-declared-42"
    local out, trace = tmp("out.jsonl"), tmp("trace.json")
    local st, so, se = run([[
local specula = require "specula"
local v = os.getenv("MY_VALUE")
return specula.agent {
  init = function(q) return q end,
  step = function(s) return { final = "the value is " .. v .. " and " .. specula.json.encode({ v = v }) } end,
  update = function(s) return s end,
}
]], { "--query", "hello", "--out", out, "--trace", trace, "--secret-env", "MY_VALUE" }, { MY_VALUE = secret })
    assert.equals(0, st, se)
    local rec = cjson.decode(H.read(out))
    assert.equals('the value is [redacted] and {"v":"[redacted]"}', rec.answer)
    clean(H.read(out), secret, "the records")
    clean(H.read(trace), secret, "the trace")
    clean(so .. se, secret, "stdout and stderr")
    -- and from a script, specula.secrets.declare
    st, so = run([[
local specula = require "specula"
specula.secrets.declare("script-declared-77")
return specula.agent {
  init = function(q) return q end,
  step = function(s) return { final = "x script-declared-77 y" } end,
  update = function(s) return s end,
}
]], { "--query", "hello" })
    assert.equals(0, st)
    assert.equals("x [redacted] y", cjson.decode(so).answer)
  end)

  it("a script's own print, io.write and writes to stdout and stderr: no secret, in any encoding", function()
    local secret = "printed-secret-9431"
    local own = tmp("own.txt")
    local st, so, se = run([[
local specula = require "specula"
local v = os.getenv("MY_TOKEN")
print("plain", v, 42)
io.write("json ", specula.json.encode({ v = v }), "\n")
print("b64 " .. specula.crypto.b64(v))
io.stdout:write("direct ", v, "\n")
io.stderr:write("to stderr ", v, "\n")
local f = assert(io.open(os.getenv("OWN_FILE"), "w"))
f:write("own file ", v, "\n")
f:close()
return specula.agent {
  init = function(q) return q end,
  step = function(s) print("in a step: " .. v) return { final = "done" } end,
  update = function(s) return s end,
}
]], { "--query", "hello" }, { MY_TOKEN = secret, OWN_FILE = own })
    assert.equals(0, st, se)
    clean(so .. se, secret, "stdout and stderr")
    assert.truthy(so:find("direct [redacted]\n", 1, true), so)
    assert.truthy(se:find("to stderr [redacted]\n", 1, true), se)
    -- a file the script opens itself is its own: written as it wrote it
    assert.equals("own file " .. secret .. "\n", H.read(own))
    -- what is not secret still prints as print would
    assert.truthy(so:find("plain\t[redacted]\t42\n", 1, true), so)
    assert.truthy(so:find("in a step: [redacted]", 1, true), so)
    assert.truthy(so:find('json {"v":"[redacted]"}', 1, true), so)
  end)

  it("a resume that knows a secret the first run did not scrubs the records already in --out", function()
    local secret = "late-declared-5150"
    local out = tmp("resume.jsonl")
    local inp = tmp("in.jsonl")
    local f = assert(io.open(inp, "w"))
    for i = 1, 3 do f:write(cjson.encode({ id = "q" .. i, query = "q" .. i }), "\n") end
    f:close()
    local code = [[
local specula = require "specula"
local v = os.getenv("MY_VALUE")
return specula.agent {
  init = function(q) return q end,
  step = function(s) return { final = s .. " " .. v } end,
  update = function(s) return s end,
}
]]
    -- the first run writes two records with the value in the clear (not a secret to it)
    local first = tmp("first.jsonl")
    local g = assert(io.open(first, "w"))
    g:write(cjson.encode({ id = "q1", query = "q1" }), "\n", cjson.encode({ id = "q2", query = "q2" }), "\n")
    g:close()
    local script = tmp("agent.lua")
    local w = assert(io.open(script, "w"))
    w:write(code)
    w:close()
    local st, _, se = H.specula({ "run", script, "--input", first, "--out", out }, { MY_VALUE = secret })
    assert.equals(0, st, se)
    assert.truthy(H.read(out):find(secret, 1, true))
    -- the input grows by a query; the resume declares the value a secret
    st, _, se = H.specula({ "run", script, "--input", inp, "--out", out, "--secret-env", "MY_VALUE" },
      { MY_VALUE = secret })
    assert.equals(0, st, se)
    assert.matches("specula: resuming: 2 records in " .. out .. " held a secret this run knows: scrubbed", se, 1,
      true)
    clean(H.read(out), secret, "the resumed --out file")
    local n = 0
    for line in H.read(out):gmatch("[^\n]+") do
      n = n + 1
      assert.matches(" %[redacted%]$", cjson.decode(line).answer)
    end
    assert.equals(3, n)
  end)

  it("a learning predictor's state beside --out and its saved model hold no secret it learnt", function()
    local secret = "learnt-secret-31337"
    local out, model = tmp("pred.jsonl"), tmp("model.json")
    local inp = tmp("pin.jsonl")
    local f = assert(io.open(inp, "w"))
    for i = 1, 4 do f:write(cjson.encode({ id = "q" .. i, query = "q" .. i }), "\n") end
    f:close()
    local st, _, se = run([[
local specula = require "specula"
local v = os.getenv("MY_TOKEN")
local P = specula.predict.learned {}
local n = 0
return specula.agent {
  tools = { t = { call = function(args) return "ok" end } },
  predict = P,
  policy = { t = "full" },
  init = function(q) return { n = 0 } end,
  step = function(s)
    if s.n < 2 then return { segment = "call", action = { tool = "t", args = { key = v, n = s.n } } } end
    n = n + 1
    if n == 4 then assert(P:save(os.getenv("MODEL"))) end
    return { final = "done" }
  end,
  update = function(s) return { n = s.n + 1 } end,
}
]], { "--input", inp, "--out", out, "--clock", "virtual", "--quiet" }, { MY_TOKEN = secret, MODEL = model })
    assert.equals(0, st, se)
    local state = H.read(out .. ".predictor")
    assert.truthy(state and state:find("[redacted]", 1, true), state)
    clean(state, secret, "the predictor's state beside --out")
    local saved = H.read(model)
    assert.truthy(saved and saved:find("[redacted]", 1, true), saved)
    clean(saved, secret, "the predictor's saved model")
  end)

  it("--secret-env NAME of a variable that is not set says so on stderr (an error with --strict-secrets)", function()
    local st, _, se = H.specula({ "theory", "--p", "0.5", "--alpha", "0.2", "--beta", "0.1", "--secret-env",
      "SPECULA_SURELY_UNSET_VAR" })
    assert.equals(0, st, se)
    assert.truthy(se:find("--secret-env SPECULA_SURELY_UNSET_VAR: the variable is not set", 1, true), se)
    -- a set one says nothing
    st, _, se = H.specula({ "theory", "--p", "0.5", "--alpha", "0.2", "--beta", "0.1", "--secret-env", "MY_SET" },
      { MY_SET = "a-value-long-enough" })
    assert.equals(0, st, se)
    assert.is_nil(se:find("--secret-env", 1, true), se)
    -- --strict-secrets: an unset or too short one is a usage error
    local so
    st, so, se = H.specula({ "theory", "--p", "0.5", "--alpha", "0.2", "--beta", "0.1", "--secret-env",
      "SPECULA_SURELY_UNSET_VAR", "--strict-secrets" })
    assert.equals(2, st, se)
    assert.equals("", so)
    assert.truthy(se:find("--secret-env SPECULA_SURELY_UNSET_VAR: the variable is not set", 1, true), se)
    st, _, se = H.specula({ "report", "--strict-secrets", "--secret-env", "MY_SHORT", "/nonexistent.jsonl" },
      { MY_SHORT = "abc" })
    assert.equals(2, st, se)
    assert.truthy(se:find("--secret-env MY_SHORT: the value is shorter than 6 bytes", 1, true), se)
    st, _, se = H.specula({ "theory", "--strict-secrets", "--p", "0.5", "--alpha", "0.2", "--beta", "0.1",
      "--secret-env", "MY_SET" }, { MY_SET = "a-value-long-enough" })
    assert.equals(0, st, se)
  end)

  it("a secret re-encoded as UTF-16 (little- and big-endian) reaches no record or trace", function()
    -- ASCII: the UTF-16 of other letters is not UTF-8, so no record holds it
    -- (the unit spec covers them, in hex and Base64)
    local secret = "utf16-secret-Value-88"
    local out, trace = tmp("out16.jsonl"), tmp("trace16.json")
    local st, so, se = run([[
local specula = require "specula"
local v = os.getenv("MY_VALUE")
-- UTF-16 of v, by code points (v is UTF-8)
local function u16(s, big)
  local t = {}
  for ch in s:gmatch("[%z\1-\127\194-\244][\128-\191]*") do
    local cp = ch:byte(1)
    if #ch == 2 then cp = (cp - 0xC0) * 64 + ch:byte(2) - 0x80 end
    local hi, lo = math.floor(cp / 256), cp % 256
    t[#t + 1] = big and string.char(hi, lo) or string.char(lo, hi)
  end
  return table.concat(t)
end
print("le " .. u16(v) .. " be " .. u16(v, true))
return specula.agent {
  init = function(q) return q end,
  step = function(s) return { final = "le " .. u16(v) .. " be " .. u16(v, true) } end,
  update = function(s) return s end,
}
]], { "--query", "hello", "--out", out, "--trace", trace, "--secret-env", "MY_VALUE" }, { MY_VALUE = secret })
    assert.equals(0, st, se)
    assert.truthy(L.utf16(secret), "the check encodes UTF-16 itself")
    local text = H.read(out)
    assert.truthy(text:find("[redacted]", 1, true), text)
    clean(text, secret, "the records")
    clean(H.read(trace), secret, "the trace")
    clean(so .. se, secret, "stdout and stderr")
  end)

  it("a report caption cut inside a secret (with an ellipsis) shows none of its head", function()
    local secret = "caption-secret-ABCDEFGHIJ-0123"
    local q = tmp("capq.jsonl")
    local f = assert(io.open(q, "w"))
    f:write('{"id":"c1","query":"one"}\n{"id":"c2","query":"two"}\n')
    f:close()
    local out = tmp("cap.jsonl")
    local st, _, se = H.specula({ "run", H.root .. "/examples/multihop_sim.lua", "--clock", "virtual", "--quiet",
      "--input", q, "--out", out })
    assert.equals(0, st, se)
    -- a configuration named with the secret: the report cuts its label
    -- (at 18, 26 and 28 bytes) inside the secret, with "…"
    local lines = {}
    for l in H.read(out):gmatch("[^\n]+") do
      local r = cjson.decode(l)
      r.config = "k3 " .. secret
      lines[#lines + 1] = cjson.encode(r)
    end
    local edited = tmp("cap_named.jsonl")
    f = assert(io.open(edited, "w"))
    f:write(table.concat(lines, "\n") .. "\n")
    f:close()
    local html = tmp("cap.html")
    st, _, se = H.specula({ "report", edited, "-o", html, "--secret-env", "CAP_SECRET" }, { CAP_SECRET = secret })
    assert.equals(0, st, se)
    local page = H.read(html)
    clean(page, secret, "the report")
    -- no head of the secret before the cut mark: 4 bytes or more of it
    assert.is_nil(page:find("k3 " .. secret:sub(1, 4), 1, true), "a cut head of the secret is on the page")
    assert.truthy(page:find("k3 [redacted]\226\128\166", 1, true), "the cut label is not shown redacted")
  end)

  it("does not over-reach: a base URL from the environment stays readable in errors, short values stay", function()
    local out = tmp("out.jsonl")
    local st, _, se = run(ONE_TOOL:format([[specula.tools.http { url = "{env.SEARCH_BASE}/status/503?q={q}",
      headers = { ["X-Lang"] = "{env.LANG_CODE}" }, retry = false }]], "{ q = s.q }"),
      { "--query", "hello", "--k", "1", "--out", out }, { SEARCH_BASE = server.base, LANG_CODE = "en-GB" })
    assert.equals(3, st, se)
    local rec = cjson.decode(H.read(out))
    assert.truthy(rec.error:find("HTTP 503 from GET " .. server.base .. "/status/503", 1, true), rec.error)
  end)
end)
