-- --query-timeout: a query with no answer in time ends as its own failure
-- (its error says at which hop and what it waited for), every call it had
-- in flight is cancelled (HTTP on the wire, MCP with
-- notifications/cancelled), and the other queries run on. Under the virtual
-- clock it is deterministic; files written without the option still resume.
local H = require "support.helpers"
local cjson = require "cjson"

-- The agent: two hops; the query "tool-hangs" waits forever in its second
-- tool call, "model-hangs" in its second step, "verifier-hangs" in its
-- second verification; WAIT (env) picks how the tool waits for ever:
-- sleep (default), http (GET $URL/stall) or mcp (the test server's slow tool).
local AGENT = [[
local specula = require "specula"
local WAIT, URL, SERVER = os.getenv("WAIT") or "sleep", os.getenv("URL"), os.getenv("MCP_SERVER")
local mcp
local function forever()
  if WAIT == "http" then
    local r, err = specula.http.request { url = URL .. "/stall" }
    error("the stalled request ended: " .. tostring(err or (r and r.status)))
  elseif WAIT == "mcp" then
    mcp = mcp or assert(specula.mcp.connect { command = { "node", SERVER } })
    return assert(mcp:call("slow", { ms = 60000 }))
  end
  specula.sleep(1e9)
end
return specula.agent {
  name = "hangs",
  init = function(q, ctx) return { q = q, hop = 0 } end,
  step = function(s, ctx)
    specula.sleep(10)
    if s.q == "model-hangs" and s.hop == 1 then specula.sleep(1e9) end
    if s.q == "mcp-log" then
      -- (run after the hanging query: what the MCP server saw cancelled)
      local log = assert(mcp:call("log")).structuredContent
      return { final = specula.json.encode(log.cancelled) }
    end
    if s.hop >= 2 then return { final = "ok " .. s.q } end
    return { segment = "s", action = { tool = "search", args = { q = s.q, hop = s.hop } } }
  end,
  update = function(s, step, obs, ctx) return { q = s.q, hop = s.hop + 1 } end,
  tools = { search = {
    call = function(a, ctx)
      specula.sleep(50)
      if a.q == "tool-hangs" and a.hop == 1 then forever() end
      return "r" .. a.hop
    end,
    speculate = function(a, ctx) specula.sleep(5) return "wrong" .. a.hop end,
  } },
  verify = function(pred, actual, ctx)
    if ctx.query == "verifier-hangs" and ctx.hop == 1 then specula.sleep(1e9) end
    return pred == actual, "eq"
  end,
  policy = function() return "full" end,
}
]]

local function input(list)
  local t = {}
  for i, q in ipairs(list) do t[i] = cjson.encode({ id = "q" .. i, query = q }) end
  return H.tmpfile("qt_in.jsonl", table.concat(t, "\n") .. "\n")
end

local function by_query(text)
  local out = {}
  for _, r in ipairs(H.records(text)) do out[r.query] = r end
  return out
end

local function run(args, env)
  local agent = H.tmpfile("qt_agent.lua", AGENT)
  local a = { "run", agent }
  for _, x in ipairs(args) do a[#a + 1] = x end
  return H.specula(a, env)
end

describe("--query-timeout", function()
  local QUERIES = { "fine", "tool-hangs", "model-hangs", "verifier-hangs", "fine too" }

  it("ends each hanging query with an error that names its hop and the call it waited for; the rest answer", function()
    local inp, out = input(QUERIES), H.tmpfile("qt_out.jsonl")
    os.remove(out)
    local st, _, err = run({ "--input", inp, "--out", out, "--clock", "virtual", "--query-timeout", "1000" })
    assert.are.equal(3, st, err)   -- some queries failed
    local r = by_query(H.read(out))
    assert.are.equal("ok fine", r["fine"].answer)
    assert.are.equal("ok fine too", r["fine too"].answer)
    assert.are.equal("timed out: no answer within 1000 ms (the query timeout) at hop 1, waiting for the tool 'search'",
      r["tool-hangs"].error)
    assert.are.equal("timed out: no answer within 1000 ms (the query timeout) at hop 1, waiting for the agent's step",
      r["model-hangs"].error)
    assert.matches("at hop 1, waiting for the verifier", r["verifier-hangs"].error, 1, true)
    -- a failed record keeps what it did, its wall time the timeout
    assert.are.equal(1000, r["tool-hangs"].stats.wall_ms)
    assert.are.equal(1, #r["tool-hangs"].trajectory)
    -- the summary names the first failure
    assert.matches("3 of 5 queries failed", err, 1, true)
    assert.matches("first failure: query 'q2': timed out: no answer within 1000 ms", err, 1, true)
    -- the option is part of the run's configuration, and named where runs are
    local first = H.records(H.read(out))[1]
    assert.are.equal(1000, first.provenance.config.query_timeout)
    local _, table_out = H.specula({ "compare", out })
    assert.matches("query_timeout=1000", table_out, 1, true)
  end)

  it("marks where the time ran out in --trace (an instant `timeout` with the message), beside the cancels", function()
    local out, trace = H.tmpfile("qt_tr.jsonl"), H.tmpfile("qt_tr.json")
    os.remove(out)
    local st, _, err = run({ "--input", input({ "fine", "tool-hangs" }), "--out", out, "--clock", "virtual",
      "--query-timeout", "1000", "--trace", trace })
    assert.are.equal(3, st, err)
    local doc = cjson.decode(H.read(trace))
    local names, timeouts, cancels = {}, {}, 0
    for _, e in ipairs(doc.traceEvents) do
      if e.name == "process_name" then names[e.pid] = e.args.name end
    end
    for _, e in ipairs(doc.traceEvents) do
      if e.name == "timeout" then timeouts[#timeouts + 1] = e end
      if e.name == "cancel" and names[e.pid] == "query q2" then cancels = cancels + 1 end
    end
    assert.are.equal(1, #timeouts)
    local t = timeouts[1]
    assert.are.equal("query q2", names[t.pid])
    assert.are.equal("i", t.ph)
    assert.are.equal(1000000, t.ts)   -- µs since the query started
    assert.are.equal(1, t.args.hop)
    assert.matches("waiting for the tool 'search'", t.args.detail, 1, true)
    assert.is_true(cancels >= 1)
  end)

  it("is deterministic under the virtual clock, and a query that answers in time is untouched by it", function()
    local inp = input(QUERIES)
    local a, b, c = H.tmpfile("qt_a.jsonl"), H.tmpfile("qt_b.jsonl"), H.tmpfile("qt_c.jsonl")
    for _, f in ipairs({ a, b, c }) do os.remove(f) end
    run({ "--input", inp, "--out", a, "--clock", "virtual", "--query-timeout", "1000" })
    run({ "--input", inp, "--out", b, "--clock", "virtual", "--query-timeout", "1000" })
    assert.are.equal(H.read(a), H.read(b))
    -- without the option the hanging queries would never end: only the
    -- answered ones are compared, and the config has no query_timeout key
    -- (a file written before the option existed resumes as it did)
    local fine = input({ "fine", "fine too" })
    local st = run({ "--input", fine, "--out", c, "--clock", "virtual" })
    assert.are.equal(0, st)
    -- 0 is none: the same bytes as without the option
    local d = H.tmpfile("qt_d.jsonl")
    os.remove(d)
    assert.are.equal(0, (run({ "--input", fine, "--out", d, "--clock", "virtual", "--query-timeout", "0" })))
    assert.are.equal(H.read(c), H.read(d))
    local with, without = by_query(H.read(a)), by_query(H.read(c))
    for _, q in ipairs({ "fine", "fine too" }) do
      assert.are.same(without[q].trajectory, with[q].trajectory)
      assert.are.same(without[q].stats, with[q].stats)
      assert.are.same(without[q].stages, with[q].stages)
    end
    assert.is_nil(H.records(H.read(c))[1].provenance.config.query_timeout)
  end)

  it("is checked on resume: another timeout is refused by name; --retry-failed runs the failed queries again", function()
    local inp, out = input(QUERIES), H.tmpfile("qt_resume.jsonl")
    os.remove(out)
    run({ "--input", inp, "--out", out, "--clock", "virtual", "--query-timeout", "1000" })
    local st, _, err = run({ "--input", inp, "--out", out, "--clock", "virtual", "--query-timeout", "2000" })
    assert.are.equal(2, st)
    assert.matches("provenance.config.query_timeout is 1000 there, 2000 here; resume with --query-timeout 1000",
      err, 1, true)
    st, _, err = run({ "--input", inp, "--out", out, "--clock", "virtual", "--query-timeout", "1000",
      "--retry-failed" })
    assert.are.equal(3, st, err)
    local recs = H.records(H.read(out))
    local answered, failed = 0, 0
    for _, r in ipairs(recs) do
      if r.error then failed = failed + 1 else answered = answered + 1 end
    end
    assert.are.equal(2, answered)
    assert.is_true(failed >= 3)
  end)

  it("refuses a value that is not a number of ms >= 0", function()
    for _, v in ipairs({ "-5", "abc", "nan", "inf" }) do
      local st, _, err = run({ "--query", "fine", "--clock", "virtual", "--query-timeout", v })
      assert.are.equal(2, st, v)
      assert.matches("--query-timeout expects a number >= 0, got '" .. v .. "'", err, 1, true)
    end
  end)

  it("cancels a stalled HTTP request on the wire (real clock)", function()
    local srv = H.server()
    local ok, e = pcall(function()
      local out = H.tmpfile("qt_http.jsonl")
      os.remove(out)
      local st, _, err = run({ "--input", input({ "fine", "tool-hangs" }), "--out", out, "--query-timeout", "400" },
        { WAIT = "http", URL = srv.base })
      assert.are.equal(3, st, err)
      local r = by_query(H.read(out))
      assert.are.equal("ok fine", r["fine"].answer)
      assert.matches("no answer within 400 ms .* at hop 1, waiting for the tool 'search'", r["tool-hangs"].error)
      -- the server saw the stalled connection closed
      local _, body = H.sh("curl -s " .. H.quote(srv.url("/stats")))
      local stats = cjson.decode(body)
      assert.are.equal(0, stats.stall_open, body)
      assert.is_true(stats.closed >= 1, body)
    end)
    srv.stop()
    assert(ok, e)
  end)

  it("sends notifications/cancelled for the MCP call in flight (real clock)", function()
    if not H.need_node(pending) then return end
    local out = H.tmpfile("qt_mcp.jsonl")
    os.remove(out)
    local st, _, err = run({ "--input", input({ "tool-hangs", "mcp-log" }), "--out", out, "--query-timeout", "1500",
      "--concurrency", "1" }, { WAIT = "mcp", MCP_SERVER = H.root .. "/spec/support/mcp_testserver.js" })
    assert.are.equal(3, st, err)
    local r = by_query(H.read(out))
    assert.matches("no answer within 1500 ms .* waiting for the tool 'search'", r["tool-hangs"].error)
    -- the next query asked the server what it saw cancelled: the slow call
    local cancelled = cjson.decode(r["mcp-log"].answer)
    assert.are.equal(1, #cancelled, r["mcp-log"].answer)
  end)
end)

describe("specula.run's query_timeout", function()
  it("ends a hanging query as its own error record, leaves nothing behind, and checks the value", function()
    local agent = H.tmpfile("qt_api_agent.lua", AGENT)
    local st, out, err = H.run_lua([[
local specula = require "specula"
local agent = dofile(]] .. string.format("%q", agent) .. [[)
local recs = specula.run(agent, { queries = { "fine", "tool-hangs" }, clock = "virtual", query_timeout = 700 })
local ok, bad = pcall(specula.run, agent, { queries = { "fine" }, query_timeout = -1 })
local n = specula.settle()
print(specula.json.encode({ a = recs[1].answer, e = recs[2].error, bad = tostring(bad), timers = n.timers,
  windows = n.windows, values = n.values }))
]])
    assert.are.equal(0, st, err)
    local r = H.last_json(out)
    assert.are.equal("ok fine", r.a)
    assert.matches("no answer within 700 ms (the query timeout) at hop 1, waiting for the tool 'search'", r.e, 1, true)
    assert.matches("query_timeout must be a number of ms >= 0, got -1", r.bad, 1, true)
    -- nothing of the timed-out query is left: its deadline, its cancelled
    -- sleeps, its window
    assert.are.equal(0, r.timers)
    assert.are.equal(0, r.windows)
  end)
end)
