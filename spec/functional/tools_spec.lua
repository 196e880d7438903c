-- specula.tools (HTTP, Lua and simulated tools) against the loopback test
-- server, and the offline examples end to end.
local H = require "support.helpers"

local SECRET = "tok-SEARCHSECRET-42"
local server

local PRELUDE = [[
local specula = require "specula"
local tools, json = specula.tools, specula.json
local BASE = %q
local function enc(v) return json.canonical(v) end
local function try(f, ...) local ok, r = pcall(f, ...) return ok and enc(r) or ("ERR " .. tostring(r)) end
]]

local function run(code, env)
  env = env or {}
  env.SEARCH_KEY = env.SEARCH_KEY or SECRET
  local st, out, err = H.run_lua(PRELUDE:format(server.base) .. code, nil, env)
  assert.equals(0, st, "script failed:\n" .. err .. out)
  return out, err
end

local function line(out, tag)
  return out:match("\n" .. tag .. "\t([^\n]*)") or out:match("^" .. tag .. "\t([^\n]*)")
end

describe("specula.tools", function()
  setup(function() server = H.server() end)
  teardown(function() server.stop() end)

  it("fills URL, header and body templates from args and the environment", function()
    local out = run([[
      local t = tools.http { name = "search", method = "POST",
        url = BASE .. "/echo?q={q}&n={n}&lang={env.SEARCH_LANG}",
        headers = { Authorization = "Bearer {env.SEARCH_KEY}", ["X-Query"] = "{q}" },
        body = { query = "{q}", n = "{n}", exact = "{exact}", filters = "{filters}",
                 label = "top {n} for {q}", list = { "{n}", "fixed" }, ["{q}"] = "keys stay" },
        result = "json", cost = 0.002 }
      print("cost", t.cost, type(t.call))
      local r = t.call({ q = "tides & moon/π+1", n = 5, exact = true, filters = { site = "x.org" } })
      print("method", r.method, r.path)
      print("query", r.query)
      print("auth", r.headers.authorization == "Bearer " .. os.getenv("SEARCH_KEY"), r.headers["x-query"],
            r.headers["content-type"])
      print("body", enc(json.decode(r.body)))
      -- a text body and an env base URL inserted as it is
      local t2 = tools.http { name = "raw", url = "{env.SEARCH_BASE}/echo/x?q={q}", body = "find {q} now", result = "json" }
      local r2 = t2.call({ q = "a b" })
      print("text", r2.method, r2.path, r2.query, r2.body, r2.headers["content-type"])
    ]], { SEARCH_LANG = "en-GB", SEARCH_BASE = server.base })
    assert.equals("0.002\tfunction", line(out, "cost"))
    assert.equals("POST\t/echo", line(out, "method"))
    assert.equals("q=tides%20%26%20moon%2F%CF%80%2B1&n=5&lang=en-GB", line(out, "query"))
    assert.equals("true\ttides & moon/π+1\tapplication/json", line(out, "auth"))
    assert.equals('{"exact":true,"filters":{"site":"x.org"},"label":"top 5 for tides & moon/π+1",'
      .. '"list":[5,"fixed"],"n":5,"query":"tides & moon/π+1","{q}":"keys stay"}', line(out, "body"))
    assert.equals("POST\t/echo/x\tq=a%20b\tfind a b now\ttext/plain; charset=utf-8", line(out, "text"))
  end)

  it("names a missing argument or variable, and reports non-2xx responses without secrets", function()
    local out, err = run([[
      local t = tools.http { name = "search", url = BASE .. "/echo?q={q}&n={n}" }
      print("missing", try(t.call, { q = "x" }))
      print("missing_body", try(tools.http { name = "b", url = BASE .. "/echo", body = { a = "{a}" } }.call, {}))
      print("missing_env", try(tools.http { name = "e", url = BASE .. "/echo", headers = { ["X-K"] = "{env.NOT_SET_ANYWHERE}" } }.call, {}))
      local function q(s) return (s:gsub("[^%w]", function(c) return string.format("%%%02X", c:byte()) end)) end
      local bad = tools.http { name = "search", url = BASE .. "/status/503?body=" .. q("backend down; token " .. os.getenv("SEARCH_KEY") .. " rejected") .. "&key={env.SEARCH_KEY}",
        headers = { ["X-Api-Key"] = "{env.SEARCH_KEY}" }, retry = { base_ms = 1, max_retries = 1 } }
      print("status", try(bad.call, {}))
      local html = tools.http { name = "proxy", url = BASE .. "/status/502?ctype=text/html&body=" .. q("<html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway</h1></body></html>"),
        retry = false }
      print("html", try(html.call, {}))
      print("refused", try(tools.http { name = "down", url = "http://127.0.0.1:1/search?q={q}", retry = { base_ms = 1, max_retries = 2 } }.call, { q = "x" }))
      print("notjson", try(tools.http { name = "j", url = BASE .. "/hello", result = "json" }.call, {}))
    ]])
    assert.equals("ERR tools.http 'search': missing argument 'n' (used as {n} in the url)", line(out, "missing"))
    assert.equals("ERR tools.http 'b': missing argument 'a' (used as {a} in body)", line(out, "missing_body"))
    assert.equals("ERR tools.http 'e': environment variable NOT_SET_ANYWHERE is not set (used as {env.NOT_SET_ANYWHERE} "
      .. "in header X-K)", line(out, "missing_env"))
    assert.equals("ERR tools.http 'search': HTTP 503 from GET " .. server.base .. "/status/503 (after 2 attempts): "
      .. "backend down; token [redacted] rejected", line(out, "status"))
    assert.equals("ERR tools.http 'proxy': HTTP 502 from GET " .. server.base .. "/status/502 (after 1 attempt): "
      .. "502 Bad Gateway - Bad Gateway", line(out, "html"))
    assert.matches("^ERR tools.http 'down': ECONNREFUSED: GET http://127%.0%.0%.1:1/search: .*%(after 3 attempts%)$",
                   line(out, "refused"))
    assert.matches("^ERR tools.http 'j': response of GET .*/hello is not JSON: JSON: .*; body starts \"hello\"$",
                   line(out, "notjson"))
    assert.is_nil(out:find(SECRET, 1, true))
    assert.is_nil(err:find(SECRET, 1, true))
  end)

  it("returns text, JSON or what a result function makes of the response", function()
    local out = run([[
      local url = BASE .. "/echo?q={q}"
      print("text", type(tools.http { url = url, result = "text" }.call({ q = "a" })))
      print("json", tools.http { url = url, result = "json" }.call({ q = "a" }).query)
      print("auto", type(tools.http { url = url }.call({ q = "a" })), tools.http { url = BASE .. "/hello" }.call({}))
      print("fn", tools.http { url = url, result = function(res, args, ctx)
        return res.status .. ":" .. json.decode(res.body).query .. ":" .. args.q .. ":" .. tostring(ctx.tag) end }
        .call({ q = "z" }, { tag = "c" }))
    ]])
    assert.equals("string", line(out, "text"))
    assert.equals("q=a", line(out, "json"))
    assert.equals("table\thello", line(out, "auto"))
    assert.equals("200:q=z:z:c", line(out, "fn"))
  end)

  it("keeps every argument inside its path segment: no dot segments, no /, ? or #", function()
    local out = run([[
      local t = tools.http { name = "profile", url = BASE .. "/echo/items/{id}/profile?v={v}", result = "json" }
      local function path(args) local ok, r = pcall(t.call, args) return ok and (r.path .. " " .. r.query) or ("ERR " .. r) end
      print("dotdot", path({ id = "..", v = 1 }))
      print("dot", path({ id = ".", v = 1 }))
      print("pair", try(tools.http { name = "two", url = BASE .. "/echo/{a}{b}/x" }.call, { a = ".", b = "." }))
      print("env", try(tools.http { name = "e", url = BASE .. "/echo/{env.UP}/x" }.call, {}))
      print("chars", path({ id = "a/../b?c=1#d", v = 1 }))
      print("dots_ok", path({ id = "...", v = "..%2e" }))
      print("num", path({ id = 42, v = ".." }))
      print("query_only", try(tools.http { name = "q", url = BASE .. "?p=/{v}", retry = false }.call, { v = ".." }))
      -- the path is sent as written: literal dot segments are not resolved either
      print("as_is", tools.http { name = "lit", url = BASE .. "/echo/a/../b/./{x}", result = "json" }.call({ x = 1 }).path)
    ]], { UP = ".." })
    assert.equals("ERR tools.http 'profile': {id} in the url makes the path segment \"..\"; a value cannot be "
      .. "\".\" or \"..\" in the path", line(out, "dotdot"))
    assert.equals("ERR tools.http 'profile': {id} in the url makes the path segment \".\"; a value cannot be "
      .. "\".\" or \"..\" in the path", line(out, "dot"))
    assert.equals("ERR tools.http 'two': {a} and {b} in the url makes the path segment \"..\"; a value cannot be "
      .. "\".\" or \"..\" in the path", line(out, "pair"))
    assert.equals("ERR tools.http 'e': {env.UP} in the url makes the path segment \"..\"; a value cannot be "
      .. "\".\" or \"..\" in the path", line(out, "env"))
    assert.equals("/echo/items/a%2F..%2Fb%3Fc%3D1%23d/profile v=1", line(out, "chars"))
    assert.equals("/echo/items/.../profile v=..%252e", line(out, "dots_ok"))
    assert.equals("/echo/items/42/profile v=..", line(out, "num"))
    -- no path at all: the "/" and ".." are in the query, so the server is asked (and says 404)
    assert.matches("^ERR tools.http 'q': HTTP 404 from GET http://127", line(out, "query_only"))
    assert.equals("/echo/a/../b/./1", line(out, "as_is"))
  end)

  it("refuses header values with NUL, CR or LF, naming the tool and the header", function()
    local out = run([[
      local t = tools.http { name = "note", url = BASE .. "/echo", result = "json",
        headers = { ["X-Note"] = "{note}", Authorization = "Bearer {env.SEARCH_KEY}" } }
      local function sent(args)
        local ok, r = pcall(t.call, args)
        if not ok then return "ERR " .. r end
        return tostring(r.headers["x-note"]) .. " auth=" .. tostring(r.headers.authorization ~= nil)
      end
      print("ok", sent({ note = "plain\tnote" }))
      print("nul", sent({ note = "before\0after" }))
      print("crlf", sent({ note = "x\r\nX-Injected: 1" }))
      print("lf", sent({ note = "x\nX-Injected: 1" }))
      local function make(spec) local ok, e = pcall(tools.http, spec) return ok and "made" or ("ERR " .. e) end
      print("static", make { name = "s", url = BASE .. "/echo", headers = { ["X-A"] = "a\0b" } })
      print("name", make { name = "n", url = BASE .. "/echo", headers = { ["X-A\r\nX-B"] = "v" } })
    ]])
    assert.equals("plain\tnote auth=true", line(out, "ok"))
    assert.equals("ERR tools.http 'note': the value of header 'X-Note' contains a NUL byte", line(out, "nul"))
    assert.equals("ERR tools.http 'note': the value of header 'X-Note' contains a line break (CR or LF)", line(out, "crlf"))
    assert.equals("ERR tools.http 'note': the value of header 'X-Note' contains a line break (CR or LF)", line(out, "lf"))
    assert.matches("^ERR .*specula%.tools%.http 's': the value of header 'X%-A' contains a NUL byte$", line(out, "static"))
    assert.matches("^ERR .*specula%.tools%.http: tool 'n': header name 'X%-A\\13\\10X%-B' is not a valid HTTP header name$",
                   line(out, "name"))
  end)

  it("never shows a secret from the environment in an error, in any encoding", function()
    local TOKEN = "123456:ABC/x+y"
    local out, err = run([[
      local function q(s) return (s:gsub("[^%w]", function(c) return string.format("%%%02X", c:byte()) end)) end
      -- the token in the path: the URL carries it percent-encoded
      print("path", try(tools.http { name = "bot", url = BASE .. "/status/404/bot{env.TG}/send", retry = false }.call, {}))
      print("refused", try(tools.http { name = "down", url = "http://127.0.0.1:1/bot{env.TG}/send", retry = false }.call, {}))
      -- a server that echoes the token JSON-escaped ("\/") in its error body
      print("json", try(tools.http { name = "api", headers = { Authorization = "Bearer {env.TG}" }, retry = false,
        url = BASE .. "/status/401?body=" .. q('{"error":"bad token 123456:ABC\\/x+y"}') .. "&ctype=text/plain" }.call, {}))
      -- userinfo: libcurl sends Basic base64("user:<token>"); the server echoes the request back
      print("basic", try(tools.http { name = "basic", retry = false,
        url = BASE:gsub("//", "//user:{env.TG}@") .. "/echo?status=403" }.call, {}))
      -- a result function quoting the response (which echoes the header)
      print("fn", try(tools.http { name = "fn", headers = { ["X-Token"] = "{env.TG}" }, url = BASE .. "/echo",
        result = function(res) error("cannot use " .. res.body, 0) end }.call, {}))
    ]], { TG = TOKEN })
    for _, tag in ipairs({ "path", "refused", "json", "basic", "fn" }) do
      local l = line(out, tag)
      assert.truthy(l and l:find("^ERR ") and l:find("[redacted]", 1, true), tag .. ": " .. tostring(l))
      -- (the test server's port is not the token: port 42345 holds "2345")
      local scan = l:gsub("127%.0%.0%.1:%d+", "127.0.0.1:PORT")
      for i = 1, #TOKEN - 3 do
        assert.is_nil(scan:find(TOKEN:sub(i, i + 3), 1, true), tag .. " leaks " .. TOKEN:sub(i, i + 3) .. ": " .. l)
      end
    end
    assert.matches("^ERR tools.http 'bot': HTTP 400 from GET http://127%.0%.0%.1:%d+/status/404/bot%[redacted%]/send",
                   line(out, "path"))
    assert.matches("ECONNREFUSED: GET http://127%.0%.0%.1:1/bot%[redacted%]/send", line(out, "refused"))
    assert.is_nil(line(out, "basic"):find("dXNlcjox", 1, true))   -- base64 of "user:1"
    assert.is_nil(line(out, "basic"):find("MjM0NTY6QUJDL3gr", 1, true))
    assert.is_nil(err:find("123456", 1, true))
  end)

  it("reads passages from the search response shapes servers use", function()
    local out = run([[
      local P = tools.passages
      print("searx", enc(P(json.encode { results = { { title = "Paris", content = "Capital\n  of France" },
        { title = "Lyon", snippet = "City" }, { url = "x" } } })))
      print("list", enc(P('["a  b", {"text": "c"}, 7, "d"]', 2)))
      print("hits", enc(P('{"hits": [{"passage": "p1"}], "took": 3}')))
      print("none", #P('{"results": []}'), P("<html>not json</html>"))
      print("bad", try(P, nil), try(P, "[]", 0))
    ]])
    assert.equals('["Paris: Capital of France","Lyon: City",""]', line(out, "searx"))
    assert.equals('["a b","c"]', line(out, "list"))
    assert.equals('["p1"]', line(out, "hits"))
    assert.equals("0\tnil", line(out, "none"))
    local bad = line(out, "bad")
    assert.truthy(bad:find("ERR .-body must be a string\tERR .-n must be a positive number"), bad)
  end)

  it("retries through the shared policy: 429 with retry-after, then success #timing", function()
    local out = run([[
      local t = tools.http { name = "flaky", url = BASE .. "/flaky/tool1/1/429?retry_after=1", retry = { base_ms = 1 } }
      local t0 = specula.now()
      local r = t.call({})
      local dt = specula.now() - t0
      print("flaky", r.ok, r.attempt, dt >= 950, dt < 2500)
    ]])
    assert.equals("true\t2\ttrue\ttrue", line(out, "flaky"))
  end)

  it("compiles declarative tools inside an agent, and wraps Lua and simulated tools", function()
    local script = H.tmpfile("http_agent.lua", ([[
      local specula = require "specula"
      local BASE = %q
      return specula.agent {
        init = function(q) return { q = q, hop = 0, notes = {} } end,
        step = function(s)
          if s.hop == 2 then return { final = table.concat(s.notes, ",") } end
          local tool = s.hop == 0 and "echo" or "local"
          return { action = { tool = tool, args = { q = s.q .. s.hop, n = s.hop } } }
        end,
        update = function(s, step, obs)
          local notes = { unpack(s.notes) }
          notes[#notes + 1] = type(obs) == "table" and obs.query or obs
          return { q = s.q, hop = s.hop + 1, notes = notes }
        end,
        tools = {
          echo = { call = { url = BASE .. "/echo?q={q}&n={n}", result = "json" }, cost = 0.01 },
          ["local"] = specula.tools.lua(function(args) return "lua:" .. args.q end, { cost = 0 }),
        },
        policy = { echo = "full", ["local"] = "full" },
      }
    ]]):format(server.base))
    local st, out, err = H.specula({ "run", script, "--query", "w x", "--mode", "sequential" })
    assert.equals(0, st, err)
    local rec = H.json().decode(out)
    assert.equals("q=w%20x0&n=0,lua:w x1", rec.answer)
    local out2 = run([[
      local t = tools.sim { latency = 20, result = function(args) return "sim:" .. args.q end, cost = 0.5 }
      local ctx = { id = "q1", seed = 0, hop = 0 }
      local t0 = specula.now()
      print("sim", t.call({ q = "a" }, ctx), t.cost, specula.now() - t0 >= 19)
      print("compile_sim", tools.compile("s", { sim = { latency = 0, result = function() return "ok" end } })({}, ctx))
      print("lua", tools.lua(function(a) return a.x * 2 end, { cost = 1, class = "read" }).call({ x = 4 }))
      print("bad", pcall(tools.compile, "weird", { nothing = true }))
    ]])
    assert.equals("sim:a\t0.5\ttrue", line(out2, "sim"))
    assert.equals("ok", line(out2, "compile_sim"))
    assert.equals("8", line(out2, "lua"))
    assert.matches("^false\t.*tool 'weird': cannot compile this spec", line(out2, "bad"))
  end)
end)

describe("offline examples", function()
  local QUESTIONS = {
    { id = "cmp", query = "Which film has the director who was born earlier, The Glass Orchard or Harbor of Ash?",
      answer = "Harbor of Ash", hops = 4 },
    { id = "country", query = "In which country was the director of The Glass Orchard born?", answer = "Estria", hops = 3 },
    { id = "place", query = "Where was the director of Seven Quiet Winters born?", answer = "Saldo Vale", hops = 2 },
    { id = "year", query = "When was the director of Harbor of Ash born?", answer = "1924", hops = 2 },
    { id = "budget", query = "In which country was the director of Harbor of Ash born?", answer = "Velmora",
      hops = 2, max_hops = 2 },
  }

  local function input_file()
    local cj = H.json()
    local lines = {}
    for i, q in ipairs(QUESTIONS) do
      lines[i] = cj.encode({ id = q.id, query = q.query, max_hops = q.max_hops })
    end
    return H.tmpfile("questions.jsonl", table.concat(lines, "\n") .. "\n")
  end

  local function run_example(name, extra)
    local args = { "run", H.root .. "/examples/" .. name, "--input", input_file(), "--set", "offline=1", "--quiet" }
    for _, a in ipairs(extra) do args[#args + 1] = a end
    local st, out, err = H.specula(args, { OPENAI_BASE_URL = "" })
    assert.equals(0, st, err .. out)
    local recs = {}
    for _, r in ipairs(H.jsonl(out)) do recs[r.id] = r end
    return recs
  end

  local function canon(r)
    local cj = H.json()
    local parts = {}
    for i, h in ipairs(r.trajectory) do
      parts[i] = h.segment .. "|" .. cj.encode(h.action) .. "|" .. cj.encode(h.observation)
    end
    return r.answer .. "\n" .. table.concat(parts, "\n")
  end

  for _, name in ipairs({ "multihop_qa.lua", "tsss.lua" }) do
    it(name .. " answers offline, and sequential and speculative runs agree", function()
      local seq = run_example(name, { "--mode", "sequential" })
      local accepted, rejected = 0, 0
      for _, seed in ipairs({ "0", "1", "2" }) do
        local spec = run_example(name, { "--k", "3", "--seed", seed })
        for _, q in ipairs(QUESTIONS) do
          local s, p = seq[q.id], spec[q.id]
          assert.equals(q.answer, s.answer, q.id)
          assert.equals(q.hops, s.stats.hops, q.id)
          assert.equals(canon(s), canon(p), q.id .. " (seed " .. seed .. ")")
          accepted = accepted + p.stats.verify.accepted
          rejected = rejected + p.stats.verify.rejected
        end
      end
      -- speculation happened both ways: some guesses committed, some rolled back
      assert.is_true(accepted > 0, "no speculation was accepted")
      assert.is_true(rejected > 0, "no speculation was rejected")
    end)
  end

  it("multihop_qa stops early on a repeated sub-question for a question it cannot decompose", function()
    local st, out, err = H.specula({ "run", H.root .. "/examples/multihop_qa.lua", "--query",
      "What is the airspeed of an unladen swallow?", "--set", "offline=1", "--quiet" })
    assert.equals(0, st, err)
    local r = H.json().decode(out)
    assert.equals("unknown", r.answer)
    assert.equals(1, r.stats.hops)
    assert.equals("No relevant information found", r.trajectory[1].observation)
  end)

  it("tsss stops through the retriever terminator before the hop budget", function()
    local st, out, err = H.specula({ "run", H.root .. "/examples/tsss.lua", "--query",
      "In which country was the director of The Glass Orchard born?", "--set", "offline=1", "--set", "max_hops=10",
      "--quiet" })
    assert.equals(0, st, err)
    local r = H.json().decode(out)
    assert.equals("Estria", r.answer)
    assert.equals(3, r.stats.hops)
    -- each prompt extends the previous one: the observations carry the retrieved contexts
    assert.matches("Maren Holt", r.trajectory[1].observation.contexts)
  end)

  it("run with no arguments as a demo", function()
    for _, name in ipairs({ "multihop_qa.lua", "tsss.lua" }) do
      local st, out, err = H.specula({ "run", H.root .. "/examples/" .. name }, { OPENAI_BASE_URL = "" })
      assert.equals(0, st, err)
      assert.matches("sequential k=1", out)
      assert.matches("spechop k=3", out)
      assert.matches("Ash%? %-> Harbor of Ash", out)
    end
  end)
end)
