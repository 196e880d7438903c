-- The binary as a user runs it: version/help, scripts, errors and exit codes.
local H = require "support.helpers"

describe("specula binary", function()
  it("prints its version and help", function()
    local st, out = H.specula({ "--version" })
    assert.equals(0, st)
    assert.matches("^specula %d+%.%d+%.%d+", out)
    st, out = H.specula({ "--help" })
    assert.equals(0, st)
    assert.matches("run SCRIPT.lua", out, 1, true)
    assert.matches("theory", out)
  end)

  it("rejects an unknown command with usage and status 2", function()
    local st, _, err = H.specula({ "frobnicate" })
    assert.equals(2, st)
    assert.matches("unknown command 'frobnicate'", err, 1, true)
  end)

  it("names the subcommand once in its error messages", function()
    local script = H.root .. "/examples/multihop_sim.lua"
    local st, _, err = H.specula({ "run", script, "--k", "foo" })
    assert.equals(2, st)
    assert.matches("^specula run: %-%-k must be", err)
    st, _, err = H.specula({ "run", script, "--input", "/nonexistent/q.jsonl" })
    assert.not_equals(0, st)
    assert.matches("^specula run: cannot read %-%-input file '/nonexistent/q.jsonl'", err)
    st, _, err = H.specula({ "report", "/nonexistent/r.jsonl" })
    assert.not_equals(0, st)
    assert.matches("^specula report: ", err)
  end)

  it("reports a missing script clearly", function()
    local st, _, err = H.specula({ "run", "/nonexistent/agent.lua" })
    -- a usage mistake, as a missing --input file is: status 2 and the usage line
    assert.equals(2, st)
    assert.matches("cannot open script '/nonexistent/agent.lua'", err, 1, true)
    assert.matches("\nusage: specula run SCRIPT.lua", err)
    -- a directory is no script either
    st, _, err = H.specula({ "run", H.root .. "/examples" })
    assert.equals(2, st)
    assert.matches("cannot open script", err, 1, true)
  end)

  it("counts one query and one hop in the singular in the run's summary", function()
    local inp = H.tmpfile("one.jsonl", '{"id":"q1","query":"x"}\n')
    local agent = H.tmpfile("onehop.lua", [[
local specula = require "specula"
return specula.sim.multihop { hops = 1, p = 1, seg = { "fixed", 1 }, spec = { "fixed", 1 }, target = { "fixed", 2 } }
]])
    local st, _, err = H.specula({ "run", agent, "--input", inp, "--clock", "virtual" })
    assert.equals(0, st, err)
    assert.matches("specula: 1 query (0 failed), 1 hop; RelLat", err, 1, true)
  end)

  it("reports a syntax error with file and line", function()
    local path = H.tmpfile("syntax.lua", "local x = 1\nlocal y = = 2\n")
    local st, _, err = H.specula({ "run", path })
    assert.not_equals(0, st)
    assert.matches("syntax.lua:2:", err, 1, true)
  end)

  it("prints a runtime error with a traceback naming file:line and exits non-zero", function()
    local st, _, err = H.run_lua("local function f() error('kaboom') end\nf()\n")
    assert.equals(1, st)
    assert.matches(":1: kaboom", err, 1, true)
    assert.matches("stack traceback:", err, 1, true)
    assert.matches(":2: in ", err, 1, true)
  end)

  it("runs a plain script whose main chunk uses async calls at top level", function()
    local st, out = H.run_lua([[
      local specula = require "specula"
      local t0 = specula.now()
      specula.sleep(20)
      print(string.format("slept %d", specula.now() - t0 >= 19 and 1 or 0))
      print(select('#', ...), ...)
    ]], { "a", "b" })
    assert.equals(0, st)
    assert.matches("slept 1", out, 1, true)
    assert.matches("2\ta\tb", out, 1, true)
  end)

  it("lets a script require modules beside it, from any working directory", function()
    local dir = H.tmpdir() .. "/sibling_mods"
    assert(os.execute("mkdir -p " .. H.quote(dir .. "/pkg")))
    H.tmpfile("sibling_mods/helper.lua", "return { answer = function() return 'from helper' end }\n")
    H.tmpfile("sibling_mods/pkg/init.lua", "return { name = 'pkg init' }\n")
    -- a file beside the script named like one of specula's modules does not replace it
    H.tmpfile("sibling_mods/specula.lua", "error('the sibling specula.lua was loaded')\n")
    local script = H.tmpfile("sibling_mods/main.lua", [[
      local specula = require "specula"
      print(require("helper").answer(), require("pkg").name, type(specula.run))
    ]])
    local st, out, err = H.sh("cd / && " .. H.quote(H.bin) .. " run " .. H.quote(script))
    assert.equals(0, st, err)
    assert.matches("from helper\tpkg init\tfunction", out, 1, true)
    -- a module that exists nowhere still fails with Lua's own message, naming the paths tried
    script = H.tmpfile("sibling_mods/missing.lua", "require 'no_such_module_here'\n")
    st, _, err = H.sh("cd / && " .. H.quote(H.bin) .. " run " .. H.quote(script))
    assert.equals(1, st)
    assert.matches("module 'no_such_module_here' not found", err, 1, true)
    assert.matches(dir .. "/no_such_module_here.lua", err, 1, true)
  end)

  it("runs the multi-hop examples offline from another directory (their shared world module)", function()
    for _, ex in ipairs({ "multihop_qa", "tsss" }) do
      local st, out, err = H.sh("cd / && " .. H.quote(H.bin) .. " run " .. H.quote(H.root .. "/examples/" .. ex .. ".lua")
        .. " --query 'In which country was the director of The Glass Orchard born?' --set offline=1 --k 3"
        .. " --clock virtual --out " .. H.quote(H.tmpfile(ex .. "_world.jsonl")))
      assert.equals(0, st, ex .. ": " .. err)
      local rec = H.jsonl(H.read(H.tmpdir() .. "/" .. ex .. "_world.jsonl"))[1]
      assert.equals("Estria", (tostring(rec.answer):match("Estria")), ex .. " answered " .. tostring(rec.answer))
    end
  end)

  it("detects a main task that can never be woken", function()
    -- the engine's raw yield with nothing armed (a bare coroutine.yield
    -- is refused before it gets there: below)
    local st, _, err = H.run_lua([[
      local specula = require "specula"
      local t = specula.spawn(function() require("specula.internal.sched").yield() end)
      t:wait()
    ]])
    assert.equals(1, st)
    assert.matches("can never happen", err, 1, true)
  end)

  it("fails a task that calls coroutine.yield itself, naming the line; the script goes on", function()
    local st, out, err = H.run_lua([[
      local specula = require "specula"
      local t = specula.spawn(function()
        coroutine.yield()
      end)
      print(select(2, t:wait()))
      -- a coroutine of the script's own still yields to its resumer
      print(coroutine.wrap(function() coroutine.yield("own coroutine") end)())
    ]])
    assert.equals(0, st, err)
    assert.matches(":3: coroutine%.yield%(%) called directly in a specula task", out)
    assert.matches("own coroutine", out, 1, true)
  end)

  it("theory reproduces the paper's worked examples", function()
    local st, out = H.specula({ "theory", "--p", "0.5", "--alpha", "0.2", "--beta", "0.15", "--nu", "0.4", "--json" })
    assert.equals(0, st)
    local r = require("cjson").decode(out)
    assert.is_true(math.abs(r.k_det - 3.2857) < 0.01)
    assert.equals(6, r.k_eps)
    st, out = H.specula({ "theory", "--p", "0.5", "--alpha", "0.3", "--beta", "0.75", "--nu", "0.4", "--json" })
    r = require("cjson").decode(out)
    assert.is_true(math.abs(r.k_det - 1.6667) < 0.01)
    assert.equals(3, r.k_eps)
    assert.is_true(math.abs(r.rel_lat_star - (1 - 0.5 * 0.7 / 1.75)) < 1e-9)
  end)

  it("theory rejects bad arguments with status 2", function()
    local st, _, err = H.specula({ "theory", "--p", "abc" })
    assert.equals(2, st)
    assert.is_true(#err > 0)
  end)
end)

-- A plain run loads no module it does not use: not the cassette's (nor the
-- HTTP and MCP clients it plugs into) without a cassette option, not the
-- resume reader for an --out that is not there yet, not the predictor's
-- state file, the conversation reader or the --trace writer. Parsing them
-- was a fifth of every run's start. The cassette's options still reach it
-- in both spellings, NAME VALUE and NAME=VALUE.
describe("a plain run's start", function()
  local LAZY = { "specula.cassette", "specula.run.cassette", "specula.mcp", "specula.http", "specula.convtraces",
                 "specula.run.tracewriter", "specula.run.resume", "specula.run.predstate", "specula.tools",
                 "specula.verify", "specula.text", "specula.llm.retry", "specula.url" }
  local agent = H.tmpfile("lazy_agent.lua", [[
local specula = require "specula"
local LAZY = { ]] .. '"' .. table.concat(LAZY, '", "') .. '"' .. [[ }
return specula.agent {
  init = function(q) return { q = q } end,
  step = function(state)
    local loaded = {}
    for _, m in ipairs(LAZY) do if package.loaded[m] then loaded[#loaded + 1] = m end end
    io.stderr:write("loaded: [", table.concat(loaded, ","), "]\n")
    return { final = "a " .. state.q }
  end,
  update = function(state) return state end,
}
]])

  it("loads none of those modules, and answers as before", function()
    local out = H.tmpdir() .. "/lazy.jsonl"
    local st, so, se = H.specula({ "run", agent, "--query", "x", "--out", out, "--quiet" })
    assert.are.equal(0, st, se .. so)
    assert.truthy(se:find("loaded: []", 1, true), se)
    local recs = H.jsonl(H.read(out))
    assert.are.equal(1, #recs)
    assert.are.equal("a x", recs[1].answer)
  end)

  it("still checks --miss without --replay-io, and reads NAME=VALUE options", function()
    local st, so, se = H.specula({ "run", agent, "--query", "x", "--miss", "skip" })
    assert.are.equal(2, st, se .. so)
    assert.matches("%-%-miss needs %-%-replay%-io DIR", se)
    st, so, se = H.specula({ "run", agent, "--query", "x", "--miss=skip" })
    assert.are.equal(2, st, se .. so)
    assert.matches("%-%-miss needs %-%-replay%-io DIR", se)
    st, so, se = H.specula({ "run", agent, "--query", "x", "--replay-io=" .. H.tmpdir() .. "/absent-eq" })
    assert.are.equal(2, st, se .. so)
    assert.matches("cassette '.-/absent%-eq': no such directory", se)
  end)

  it("loads the cassette when one is named, before the script's main chunk runs", function()
    local dir = H.tmpdir() .. "/lazy-rec"
    local st, so, se = H.specula({ "run", agent, "--query", "x", "--record", dir, "--out", H.tmpdir() .. "/lr.jsonl" })
    assert.are.equal(0, st, se .. so)
    local line = se:match("loaded: %[([^%]]*)%]")
    assert.truthy(line and line:find("specula.cassette", 1, true), se)
  end)
end)

-- libcurl and the thirty libraries it links are mapped by the first HTTP
-- transfer (engine/sp_curl.h), not by every start.
describe("libcurl, loaded on first use", function()
  local agent = H.tmpfile("curl_agent.lua", [[
local specula = require "specula"
local function mapped()
  local f = assert(io.open("/proc/self/maps"))
  local m = f:read("*a"):find("libcurl", 1, true) ~= nil
  f:close()
  return m
end
return specula.agent {
  init = function(q) return { q = q } end,
  step = function(state)
    local before = mapped()
    if state.q ~= "http" then return { final = "plain mapped=" .. tostring(before) } end
    local r, err = specula.http.request { url = os.getenv("CURL_URL") .. "/hello" }
    if not r then error(err, 0) end
    return { final = "http " .. r.status .. " before=" .. tostring(before) .. " after=" .. tostring(mapped()) }
  end,
  update = function(state) return state end,
}
]])

  it("is not mapped by a run that makes no transfer; the first transfer maps it and works", function()
    local st, so, se = H.specula({ "run", agent, "--query", "plain", "--quiet" })
    assert.are.equal(0, st, se .. so)
    assert.truthy(so:find("plain mapped=false", 1, true), so .. se)
    local srv = H.server()
    st, so, se = H.specula({ "run", agent, "--query", "http", "--quiet" }, { CURL_URL = srv.base })
    srv.stop()
    assert.are.equal(0, st, se .. so)
    assert.truthy(so:find("http 200 before=false after=true", 1, true), so .. se)
  end)

  it("one that cannot be loaded fails the queries that call HTTP, saying why, and no other", function()
    local input = H.tmpfile("curl_q.jsonl", '{"id":"a","query":"http"}\n{"id":"b","query":"plain"}\n')
    local out = H.tmpdir() .. "/curl-missing.jsonl"
    local st, so, se = H.specula({ "run", agent, "--input", input, "--out", out, "--quiet" },
      { CURL_URL = "http://127.0.0.1:9", SPECULA_LIBCURL = "/nonexistent/libcurl.so.4" })
    assert.are_not.equal(0, st, se .. so)
    local recs = {}
    for _, r in ipairs(H.jsonl(H.read(out))) do recs[r.id] = r end
    assert.are.equal("plain mapped=false", recs.b and recs.b.answer, so .. se)
    assert.truthy(recs.a and recs.a.error, so .. se)
    assert.truthy(recs.a.error:find("libcurl: cannot load /nonexistent/libcurl.so.4", 1, true), recs.a.error)
    -- --version says it too, rather than failing
    st, so = H.specula({ "--version" }, { SPECULA_LIBCURL = "/nonexistent/libcurl.so.4" })
    assert.are.equal(0, st)
    assert.truthy(so:find("libcurl: cannot load /nonexistent/libcurl.so.4", 1, true), so)
    st, so = H.specula({ "--version" })
    assert.truthy(so:find("libcurl/%d"), so)
  end)
end)
