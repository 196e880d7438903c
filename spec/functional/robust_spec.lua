-- Nothing lost, nothing hangs, every error names its place: a cassette
-- that cannot be written stops the run, a tape with wrong field types is
-- refused naming FILE:LINE and the field, an MCP server that dies while a
-- child of its own holds its stdout is noticed at once, a second signal
-- still reaps the children, results under the virtual clock do not depend
-- on --concurrency (learning predictors included), and the small things:
-- `--out -`, the test server's --help, `cassette show` of a cancelled call,
-- `report --query` on a --compare trace, the SIGINT message.
local H = require "support.helpers"
local cjson = require "cjson"

local counter = 0
local function tmp(name)
  counter = counter + 1
  return H.tmpdir() .. "/rb" .. counter .. "-" .. name
end

local function input(n, prefix)
  local lines = {}
  for i = 1, n do lines[i] = cjson.encode({ id = (prefix or "q") .. i, query = "question " .. i }) end
  local p = tmp("in.jsonl")
  local f = assert(io.open(p, "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
  return p
end

-- Two HTTP calls a query against the test server's /echo: every exchange
-- goes on tape.
local ECHO_AGENT = [[
local specula = require "specula"
local BASE = os.getenv("BASE")
return specula.agent {
  name = "echo-chain",
  init = function(q) return { q = q, hop = 0 } end,
  step = function(s)
    if s.hop == 2 then return { final = s.last } end
    return { segment = "s", action = { tool = "echo", args = { q = s.q .. "-" .. s.hop } } }
  end,
  update = function(s, step, obs) return { q = s.q, hop = s.hop + 1, last = obs } end,
  tools = { echo = { call = function(args)
    local r = assert(specula.http.request { url = BASE .. "/echo?q=" .. specula.tools.urlencode(args.q) })
    return r.body
  end } },
}
]]

describe("a cassette that cannot be written", function()
  local server, agent
  setup(function()
    server = H.server()
    agent = tmp("echo_agent.lua")
    local f = assert(io.open(agent, "w"))
    f:write(ECHO_AGENT)
    f:close()
  end)
  teardown(function() server.stop() end)

  it("stops the run (exit 1, the file and the OS error), and the tape ends on a complete line that loads", function()
    local inp, dir, out = input(200), tmp("cas"), tmp("out.jsonl")
    -- a file size limit (SIGXFSZ ignored: the write fails with EFBIG) cuts
    -- the tape after some tens of exchanges; --out goes to a device the
    -- limit does not apply to
    local cmd = string.format("trap '' XFSZ; BASE=%s prlimit --fsize=60000 %s run %s --input %s --record %s --out %s",
      H.quote(server.base), H.quote(H.bin), H.quote(agent), H.quote(inp), H.quote(dir), "/dev/null")
    local st, _, err = H.sh("(" .. cmd .. ")")
    local tape = dir .. "/cassette-0001.jsonl"
    assert.equals(1, st, err)
    assert.matches("cannot write --record file '" .. tape .. "': File too large", err, 1, true)
    assert.not_matches("recorded to", err)
    local text = assert(H.read(tape))
    assert.is_true(#text > 1000 and #text <= 60000, #text .. " bytes")
    assert.equals("\n", text:sub(-1))
    for line in text:gmatch("[^\n]+") do assert.is_table(cjson.decode(line)) end
    -- the tape loads without a dropped line
    local st2, so2, err2 = H.specula({ "cassette", "ls", dir })
    assert.equals(0, st2, err2)
    assert.not_matches("dropped", so2 .. err2)
    -- and a run stopped early wrote no record of a query whose exchanges are lost: with
    -- --out as a file, each record written has all its exchanges on tape
    local dir3 = tmp("cas")
    -- records to stdout through a pipe (the limit applies to the tape only)
    local stf = tmp("status")
    cmd = string.format("trap '' XFSZ; { BASE=%s prlimit --fsize=60000 %s run %s --input %s --record %s; echo $? >%s; } | cat >%s",
      H.quote(server.base), H.quote(H.bin), H.quote(agent), H.quote(inp), H.quote(dir3), H.quote(stf), H.quote(out))
    local _, _, err3 = H.sh("(" .. cmd .. ")")
    assert.equals("1", (H.read(stf) or ""):match("%d+"), err3)
    local recs = H.jsonl(H.read(out) or "")
    assert.is_true(#recs < 200, #recs .. " records")
    local answered = {}
    for _, e in ipairs(H.jsonl(H.read(dir3 .. "/cassette-0001.jsonl"))) do
      if e.kind == "http" and not e.start then answered[e.meta.query] = (answered[e.meta.query] or 0) + 1 end
    end
    for _, r in ipairs(recs) do
      assert.is_nil(r.error)
      assert.equals(2, answered[r.id], r.id)
    end
  end)
end)

describe("a tape whose fields have the wrong JSON types", function()
  local server, agent, dir, lines
  setup(function()
    server = H.server()
    agent = tmp("echo_agent.lua")
    local f = assert(io.open(agent, "w"))
    f:write(ECHO_AGENT)
    f:close()
    dir = tmp("cas")
    local st, _, err = H.specula({ "run", agent, "--input", input(3), "--record", dir, "--out", tmp("o.jsonl") },
      { BASE = server.base })
    assert.equals(0, st, err)
    lines = {}
    for l in H.read(dir .. "/cassette-0001.jsonl"):gmatch("[^\n]+") do lines[#lines + 1] = l end
  end)
  teardown(function() server.stop() end)

  -- a copy of the tape with fn applied to the first line of kind (answered)
  local function broken(kind, fn)
    local d = tmp("bad")
    os.execute("mkdir -p " .. H.quote(d))
    local out, at = {}, nil
    for i, l in ipairs(lines) do
      local v = cjson.decode(l)
      if not at and v.kind == kind and not v.start then
        fn(v)
        l = cjson.encode(v)
        at = i
      end
      out[#out + 1] = l
    end
    assert(at, "no " .. kind .. " line on the tape")
    local f = assert(io.open(d .. "/cassette-0001.jsonl", "w"))
    f:write(table.concat(out, "\n"), "\n")
    f:close()
    return d, at
  end

  local CASES = {
    { "http", function(v) v.res.status = tostring(v.res.status) end, 'field res.status is a string ("200"), expected a number' },
    { "http", function(v) v.res.body = 42 end, "field res.body is 42, expected a string" },
    { "http", function(v) v.ms = "12" end, 'field ms is a string ("12"), expected a number' },
    { "http", function(v) v.res.headers = { ["content-type"] = 7 } end, "field res.headers.content-type is a number" },
    { "http", function(v) v.res = nil end, "needs res or err" },
    { "http", function(v) v.meta.query = { 1 } end, "field meta.query is an array" },
    { "job", function(v) v.ms = "3" end, 'field ms is a string ("3"), expected a number' },
    { "obs", function(v) v.res = "x" end, 'field res is a string ("x"), expected an object' },
  }
  for _, c in ipairs(CASES) do
    it(c[1] .. " line: " .. c[3], function()
      local d, at = broken(c[1], c[2])
      local where = string.format("%s/cassette-0001.jsonl:%d: %s exchange: ", d, at, c[1])
      local st, out, err = H.specula({ "run", agent, "--input", input(3), "--replay-io", d, "--clock", "virtual" },
        { BASE = server.base })
      assert.equals(2, st, err)
      assert.equals("", out)
      assert.matches(where, err, 1, true)
      assert.matches(c[3], err, 1, true)
      -- every reader of tapes says the same
      local st2, _, err2 = H.specula({ "cassette", "show", d })
      assert.are_not.equal(0, st2)
      assert.matches(where, err2, 1, true)
    end)
  end

  it("a streamed answer whose chunk offset is not a number", function()
    local d = tmp("bad")
    os.execute("mkdir -p " .. H.quote(d))
    local f = assert(io.open(d .. "/cassette-0001.jsonl", "w"))
    f:write('{"specula_cassette":2,"clock":"real"}\n',
      '{"kind":"http","key":"GET http://x/\\n","n":1,"stream":true,"res":{"status":200,"headers":{}},',
      '"events":[[1.5,"a"],["2","b"]]}\n')
    f:close()
    local st, _, err = H.specula({ "cassette", "show", d })
    assert.are_not.equal(0, st)
    assert.matches(d .. "/cassette-0001.jsonl:2: http exchange: field events[1][0] is a string", err, 1, true)
  end)

  it("a time no recording holds (a job of 1e300 ms) is refused naming the tape's FILE:LINE, not cut to 1e12", function()
    local EX = H.root .. "/examples/cassette"
    local d = tmp("absurd")
    os.execute("mkdir -p " .. H.quote(d))
    local lines, at = {}, nil
    for l in H.read(EX .. "/tape/cassette-0001.jsonl"):gmatch("[^\n]+") do
      lines[#lines + 1] = l
      if not at and l:find('"kind":"job"', 1, true) then
        local n
        lines[#lines], n = l:gsub('"ms":[%d%.]+', '"ms":1e300', 1)
        assert.equals(1, n)
        at = #lines
      end
    end
    assert.truthy(at, "the example tape has a job line")
    local f = assert(io.open(d .. "/cassette-0001.jsonl", "w"))
    f:write(table.concat(lines, "\n"), "\n")
    f:close()
    local where = string.format("%s/cassette-0001.jsonl:%d: job exchange: field ms is 1e+300 ms", d, at)
    local st, _, err = H.specula({ "run", EX .. "/agent.lua", "--input", EX .. "/queries.jsonl", "--replay-io", d,
      "--clock", "virtual", "--out", tmp("absurd.jsonl") },
      { OPENAI_API_KEY = "any", SEARCH_KEY = "any", CAS_NODE = "/nonexistent/node", SPECULA_SOURCE_DIR = H.root })
    assert.equals(2, st, err)
    assert.matches(where, err, 1, true)
    for _, cmd in ipairs({ { "cassette", "show", d }, { "verifiers", d } }) do
      local st2, _, err2 = H.specula(cmd)
      assert.equals(1, st2, err2)
      assert.matches(where, err2, 1, true)
    end
    -- (1e12 ms itself is still a time: spec/unit/cassette_check_spec.lua,
    -- in-process, where the core library may be loaded)
  end)
end)

describe("--out -", function()
  it("writes the records to stdout (and only them), the summary to stderr, and creates no file '-'", function()
    local d = tmp("cwd")
    os.execute("mkdir -p " .. H.quote(d))
    local inp = input(4)
    for _, extra in ipairs({ {}, { "--compare", "sequential,spechop:k=2" } }) do
      local cmd = "cd " .. H.quote(d) .. " && " .. H.quote(H.bin) .. " run " .. H.quote(H.root .. "/examples/multihop_sim.lua")
        .. " --input " .. H.quote(inp) .. " --clock virtual --out -"
      for _, a in ipairs(extra) do cmd = cmd .. " " .. H.quote(a) end
      local st, out, err = H.sh(cmd)
      assert.equals(0, st, err)
      assert.is_nil(H.read(d .. "/-"))
      local n = 0
      for line in out:gmatch("[^\n]+") do
        if #extra == 0 or line:sub(1, 1) == "{" then
          local r = cjson.decode(line)
          assert.is_string(r.id)
          assert.is_table(r.stats)
          n = n + 1
        end
      end
      assert.equals(#extra > 0 and 8 or 4, n)
      if #extra == 0 then assert.matches("4 queries %(0 failed%)", err) end
    end
    local st, _, err = H.specula({ "run", H.root .. "/examples/multihop_sim.lua", "--query", "x", "--out", "-",
      "--retry-failed" })
    assert.equals(2, st)
    assert.matches("--retry-failed needs --out FILE", err, 1, true)
  end)
end)

describe("specula-testserver --help", function()
  it("documents every endpoint the server routes, and spec/README.md names each one", function()
    local st, out, err = H.sh(H.quote(H.server_bin) .. " --help")
    assert.equals(0, st, err)
    assert.matches("usage: specula-testserver", out, 1, true)
    -- the routes, as ts_dispatch() matches them
    local src = assert(H.read(H.root .. "/spec/support/testserver.c"))
    local body = src:match("static int ts_dispatch%(.-\n}\n")
    assert.is_string(body)
    local routes = {}
    for r in body:gmatch('ts_eq%(p, "(/[^"]*)"%)') do routes[#routes + 1] = r end
    for r in body:gmatch('ts_prefix%(p, "(/[^"]*)"') do routes[#routes + 1] = r:gsub("/$", "") end
    assert.is_true(#routes >= 15, #routes .. " routes")
    local readme = assert(H.read(H.root .. "/spec/README.md"))
    for _, r in ipairs(routes) do
      assert.matches("\n  " .. r, out, 1, true)
      assert.matches("`" .. r, readme, 1, true)
    end
    for _, flag in ipairs({ "--port N", "--host ADDR", "--files DIR" }) do assert.matches(flag, out, 1, true) end
  end)
end)

describe("messages that name the right thing", function()
  it("cassette show names the request of a call the recording cancelled (no 'nil nil')", function()
    local st, out, err = H.specula({ "cassette", "show", H.root .. "/examples/cassette/tape" })
    assert.equals(0, st, err)
    local cancelled = 0
    for line in out:gmatch("[^\n]+") do
      assert.not_matches("nil", line)
      if line:find("\tcancelled\t", 1, true) then
        cancelled = cancelled + 1
        -- the tape's cancelled calls are the MCP tool's speculator
        assert.matches('^spec  #%d+\tspeculator slow {"ms":600,"tag":"city %d:%d+"}\tcancelled\t%- ms\tquery c%d', line)
      end
    end
    assert.is_true(cancelled > 0)
  end)

  it("report --query ID on a --compare trace names the processes it holds for that id", function()
    local out, trace = tmp("cmp.jsonl"), tmp("cmp.json")
    local st, _, err = H.specula({ "run", H.root .. "/examples/multihop_sim.lua", "--input", input(8), "--clock",
      "virtual", "--compare", "sequential,spechop:k=2", "--out", out, "--trace", trace, "--quiet" })
    assert.equals(0, st, err)
    local st2, _, err2 = H.specula({ "report", out, "--trace", trace, "--query", "q7", "-o", tmp("r.html") })
    assert.equals(1, st2)
    assert.matches("--query 'q7': no such query in trace '" .. trace .. "'; this trace holds it once per "
      .. "configuration: give --query 'q7 (sequential)' or 'q7 (spechop:k=2)'", err2, 1, true)
    local st3, _, err3 = H.specula({ "report", out, "--trace", trace, "--query", "q7 (sequential)", "-o", tmp("r.html") })
    assert.equals(0, st3, err3)
    local st4, _, err4 = H.specula({ "report", out, "--trace", trace, "--query", "nope", "-o", tmp("r.html") })
    assert.equals(1, st4)
    assert.matches("no such query in trace '" .. trace .. "'\n", err4 .. "\n", 1, true)
  end)

  it("the SIGINT message says how to resume with --out, and that stdout cannot be resumed", function()
    local inp = input(40)
    for _, with_out in ipairs({ true, false }) do
      local out, errf = tmp("sig.jsonl"), tmp("sig.err")
      local args = H.quote(H.bin) .. " run " .. H.quote(H.root .. "/spec/functional/scripts/integrity.lua")
        .. " --input " .. H.quote(inp) .. " --concurrency 2"
      args = args .. (with_out and (" --out " .. H.quote(out) .. " >/dev/null") or (" >" .. H.quote(out)))
      local _, so = H.sh("INTEGRITY_TARGET_MS=40 " .. args .. " 2>" .. H.quote(errf) .. " & pid=$!; while [ ! -s "
        .. H.quote(out) .. " ]; do sleep 0.05; done; kill -INT $pid; wait $pid; echo $?")
      local err = H.read(errf) or ""
      assert.equals("130", so:match("%d+"), err)
      if with_out then
        assert.matches("(run the same command again to resume: the queries already in " .. out .. " are skipped)",
          err, 1, true)
      else
        assert.matches("(the records went to stdout, so nothing can be resumed: run with --out FILE, which a "
          .. "second run resumes)", err, 1, true)
      end
      assert.not_matches("with --out to resume", err, 1, true)
    end
  end)
end)

describe("a signal while a query waits in front of finished ones", function()
  it("writes the queries that finished behind it, and a resume runs only the one that did not", function()
    local inp, out, errf, mark = tmp("gap.jsonl"), tmp("gap-out.jsonl"), tmp("gap.err"), tmp("gap.mark")
    local f = assert(io.open(inp, "w"))
    f:write('{"id":"fast1","query":"a"}\n{"id":"slow","query":"b"}\n{"id":"fast2","query":"c"}\n'
      .. '{"id":"fast3","query":"d"}\n')
    f:close()
    local cmd = H.quote(H.bin) .. " run " .. H.quote(H.root .. "/spec/functional/scripts/interrupt_gap.lua")
      .. " --input " .. H.quote(inp) .. " --out " .. H.quote(out) .. " --quiet"
    -- the signal goes once the three quick queries have finished (slow waits 30 s)
    local _, so = H.sh("GAP_MARK=" .. H.quote(mark) .. " " .. cmd .. " 2>" .. H.quote(errf) .. " & pid=$!; "
      .. "while [ \"$(cat " .. H.quote(mark) .. " 2>/dev/null | wc -l)\" -lt 3 ]; do sleep 0.05; done; "
      .. "kill -INT $pid; wait $pid; echo $?")
    local err = H.read(errf) or ""
    assert.equals("130", so:match("%d+"), err)
    assert.matches("3 of 4 queries finished and written", err, 1, true)
    local function ids()
      local got = {}
      for line in (H.read(out) or ""):gmatch("[^\n]+") do got[#got + 1] = cjson.decode(line).id end
      return got
    end
    -- in input order, with the gap where the slow query was
    assert.are.same({ "fast1", "fast2", "fast3" }, ids())
    local st, _, err2 = H.sh("GAP_SLOW_MS=5 " .. cmd)
    assert.equals(0, st, err2)
    assert.are.same({ "fast1", "fast2", "fast3", "slow" }, ids())
  end)
end)

describe("a query slower than the hundreds started after it", function()
  -- the driver keeps the queries between the oldest not yet written and the
  -- next to start in rings that grow with that span (here ~300)
  local function gap_input(n)
    local inp = tmp("span.jsonl")
    local f = assert(io.open(inp, "w"))
    f:write('{"id":"fast1","query":"a"}\n{"id":"slow","query":"b"}\n')
    for i = 3, n do f:write(string.format('{"id":"fast%d","query":"q%d"}\n', i, i)) end
    f:close()
    local want = { "fast1" }
    for i = 3, n do want[#want + 1] = "fast" .. i end
    return inp, want
  end
  local function ids(path)
    local got = {}
    for line in (H.read(path) or ""):gmatch("[^\n]+") do got[#got + 1] = cjson.decode(line).id end
    return got
  end
  local script = H.quote(H.root .. "/spec/functional/scripts/interrupt_gap.lua")

  it("leaves every record in input order, and the trace too", function()
    local inp, want = gap_input(300)
    table.insert(want, 2, "slow")
    local out, trace = tmp("span-out.jsonl"), tmp("span-trace.json")
    os.remove(out)
    local st, _, err = H.sh("GAP_SLOW_MS=300 " .. H.quote(H.bin) .. " run " .. script .. " --input " .. H.quote(inp)
      .. " --out " .. H.quote(out) .. " --trace " .. H.quote(trace) .. " --concurrency 40 --quiet")
    assert.equals(0, st, err)
    assert.are.same(want, ids(out))
    -- the run kept its records for the trace (the path that returns them)
    local seen = {}
    for _, e in ipairs(cjson.decode(H.read(trace)).traceEvents) do
      if e.name == "process_name" then seen[e.pid] = e.args.name:match("^query (.*)$") end
    end
    assert.are.same(want, seen)
  end)

  it("on a signal writes the ones behind it in order, and a resume adds only it", function()
    local inp, want = gap_input(300)
    local out, errf, mark = tmp("span-int.jsonl"), tmp("span-int.err"), tmp("span-int.mark")
    os.remove(out)
    os.remove(mark)
    local cmd = H.quote(H.bin) .. " run " .. script .. " --input " .. H.quote(inp) .. " --out " .. H.quote(out)
      .. " --concurrency 40 --quiet"
    local _, so = H.sh("GAP_MARK=" .. H.quote(mark) .. " " .. cmd .. " 2>" .. H.quote(errf) .. " & pid=$!; "
      .. "while [ \"$(cat " .. H.quote(mark) .. " 2>/dev/null | wc -l)\" -lt 299 ]; do sleep 0.05; done; "
      .. "kill -INT $pid; wait $pid; echo $?")
    local err = H.read(errf) or ""
    assert.equals("130", so:match("%d+"), err)
    assert.matches("299 of 300 queries finished and written", err, 1, true)
    assert.are.same(want, ids(out))
    local st, _, err2 = H.sh("GAP_SLOW_MS=5 " .. cmd)
    assert.equals(0, st, err2)
    want[#want + 1] = "slow"
    assert.are.same(want, ids(out))
  end)
end)

describe("a query of no hop", function()
  it("writes its trajectory as an empty list, [] (it was {}), answered or failed at its first step", function()
    local agent = tmp("nohop.lua")
    local f = assert(io.open(agent, "w"))
    f:write([[
local specula = require "specula"
return specula.agent {
  init = function(q) return {} end,
  step = function(s, ctx)
    if ctx.id == "boom" then error("planned failure") end
    return { final = "at once" }
  end,
  update = function(s) return s end,
}
]])
    f:close()
    local inp = tmp("nohop.jsonl")
    f = assert(io.open(inp, "w"))
    f:write('{"id":"a","query":"q"}\n{"id":"boom","query":"q"}\n')
    f:close()
    local st, out = H.sh(H.quote(H.bin) .. " run " .. H.quote(agent) .. " --input " .. H.quote(inp) .. " --quiet")
    assert.equals(3, st)
    local n = 0
    for line in out:gmatch("[^\n]+") do
      n = n + 1
      assert.matches('"trajectory":[]', line, 1, true)
    end
    assert.equals(2, n)
  end)
end)

describe("a failure while a finished query's record is read", function()
  -- The step tables of some queries carry a metatable whose __index raises
  -- for "segment": nothing reads it until the record is built from the
  -- finished window (a step with a metatable is kept as a value, not
  -- encoded as it commits). That query's record is an error naming it; the
  -- queries around it, before and after, concurrent or not, are written
  -- whole, and the run goes on past several such failures.
  it("is that query's error record; every other record is written, in order", function()
    local agent = tmp("badrec.lua")
    H.write(agent, [[
local specula = require "specula"
local BAD = { __index = function(t, k) if k == "segment" then error("segment exploded: " .. t.q) end end }
return specula.agent {
  init = function(q) return { hop = 0, q = q } end,
  step = function(s)
    if s.hop >= 3 then return { final = "done " .. s.q } end
    local step = { action = { tool = "t", args = { i = s.hop } } }
    if s.q:match("^question [37]$") or s.q == "question 10" then
      step.q = s.q
      return setmetatable(step, BAD)
    end
    step.segment = "s" .. s.hop
    return step
  end,
  update = function(s) return { hop = s.hop + 1, q = s.q } end,
  tools = { t = { call = function(a) return "o" .. a.i end, speculate = function(a) return "o" .. a.i end } },
  policy = function() return "full" end,
}
]])
    local inp = input(12)
    for _, conc in ipairs({ "1", "4" }) do
      local st, out, err = H.sh(H.quote(H.bin) .. " run " .. H.quote(agent) .. " --input " .. H.quote(inp)
        .. " --clock virtual --k 2 --quiet --concurrency " .. conc)
      assert.equals(3, st, err)
      local recs = H.jsonl(out)
      assert.equals(12, #recs, out)
      for i, r in ipairs(recs) do
        assert.equals("q" .. i, r.id)
        if i == 3 or i == 7 or i == 10 then
          assert.is_nil(r.answer)
          assert.matches("segment exploded: question " .. i, r.error, 1, true)
        else
          assert.equals("done question " .. i, r.answer, r.error)
          assert.equals(3, #r.trajectory)
        end
      end
    end
  end)
end)

describe("tasks of one query that wait on each other", function()
  it("fail that query with a message naming the wait, on either clock; the others are written", function()
    local inp = tmp("dl.jsonl")
    local f = assert(io.open(inp, "w"))
    f:write('{"id":"good1","query":"a"}\n{"id":"bad","query":"b"}\n{"id":"good2","query":"c"}\n')
    f:close()
    for _, clock in ipairs({ "virtual", "real" }) do
      local out = tmp("dl-" .. clock .. ".jsonl")
      -- (timeout: the real clock waited for ever before)
      local st, _, err = H.sh("timeout 60 " .. H.quote(H.bin) .. " run "
        .. H.quote(H.root .. "/spec/functional/scripts/deadlock.lua") .. " --input " .. H.quote(inp)
        .. " --out " .. H.quote(out) .. " --clock " .. clock .. " --quiet")
      assert.equals(3, st, clock .. ": " .. err)   -- a query failed; not the process
      local recs = {}
      for line in (H.read(out) or ""):gmatch("[^\n]+") do
        local r = cjson.decode(line)
        recs[r.id] = r
      end
      assert.equals("answer good1", recs.good1.answer)
      assert.equals("answer good2", recs.good2.answer)
      assert.matches("deadlock.lua:16: task:wait: the task waited on can never finish: no timer, transfer or task "
        .. "was left to wake it", recs.bad.error, 1, true)
    end
  end)
end)

describe("an MCP server over stdio that dies while a child of its own holds its stdout", function()
  it("fails the call when the server exits (its status and last stderr lines), not when the child does", function()
    if not H.need_node(pending) then return end
    local server = H.root .. "/spec/support/mcp_testserver.js"
    local pidfile = tmp("orphan.pid")
    finally(function()
      local pid = (H.read(pidfile) or ""):match("%d+")
      if pid then os.execute("kill " .. pid .. " 2>/dev/null") end
    end)
    local st, out, err = H.run_lua([[
local specula = require "specula"
local c = assert(specula.mcp.connect{ command = { "node", ]] .. string.format("%q", server) .. [[ }, name = "dies" })
-- the orphan sleeps 30 s holding the pipes; the call would wait for its
-- 15 s timeout if only the pipes' end told that the server died
local r, err = c:call("crash", { orphan_s = 30, pidfile = ]] .. string.format("%q", pidfile) .. [[ },
  { timeout_ms = 15000 })
local again = assert(c:call("echo", { text = "restarted" }))
c:close()
print(specula.json.encode({ err = err, again = again.content[1].text, procs = specula.settle().procs }))
]])
    assert.equals(0, st, err)
    local r = H.last_json(out)
    assert.matches("mcp server 'dies'", r.err, 1, true)
    assert.matches("exited with status 3", r.err, 1, true)
    assert.matches("boom: crashing on purpose", r.err, 1, true)
    assert.not_matches("no response within", r.err, 1, true)
    assert.equals("echo: restarted", r.again)
    assert.equals(0, r.procs)
  end)
end)

describe("a second signal", function()
  it("kills and reaps the run's MCP server before the process ends (no orphan, no zombie)", function()
    if not H.need_node(pending) then return end
    local server = H.root .. "/spec/support/mcp_testserver.js"
    local pidfile, agent = tmp("server.pid"), tmp("mcp_slow.lua")
    local f = assert(io.open(agent, "w"))
    -- a server that ignores SIGTERM and the end of its stdin: only a
    -- kill ends it, so an orphan would stay
    f:write([[
local specula = require "specula"
local c = assert(specula.mcp.connect{ command = { "node", ]] .. string.format("%q", server) .. [[ }, name = "slow",
  env = { MCP_TS_STUBBORN = "1" } })
local pf = assert(io.open(]] .. string.format("%q", pidfile) .. [[, "w"))
pf:write(c.pid) pf:close()
return specula.agent {
  init = function(q) return { q = q } end,
  step = function(s) if s.done then return { final = s.done } end
    return { segment = "s", action = { tool = "slow", args = { ms = 30000, tag = s.q } } } end,
  update = function(s, step, obs) return { q = s.q, done = "x" } end,
  tools = specula.tools.mcp(c, { include = { "slow" } }),
}
]])
    f:close()
    local spid
    finally(function() if spid then os.execute("kill -9 " .. spid .. " 2>/dev/null") end end)
    local _, so = H.sh("(" .. H.quote(H.bin) .. " run " .. H.quote(agent) .. " --input " .. H.quote(input(3))
      .. " --quiet >/dev/null 2>&1 & pid=$!; while [ ! -s " .. H.quote(pidfile) .. " ]; do sleep 0.05; done; "
      .. "sleep 0.5; kill -TERM $pid; sleep 0.2; kill -TERM $pid; wait $pid; echo status $?; "
      .. "s=$(cat " .. H.quote(pidfile) .. "); if [ -e /proc/$s ]; then echo left $(awk '/^State/ {print $2}' /proc/$s/status); "
      .. "else echo gone; fi)")
    spid = (H.read(pidfile) or ""):match("%d+")
    assert.matches("status 143", so, 1, true)
    assert.matches("gone", so, 1, true)
  end)
end)

describe("a signal to a plain program that started an MCP server", function()
  it("kills and reaps the server before the process dies", function()
    if not H.need_node(pending) then return end
    local server = H.root .. "/spec/support/mcp_testserver.js"
    local pidfile, prog = tmp("server.pid"), tmp("plain_mcp.lua")
    local f = assert(io.open(prog, "w"))
    f:write([[
local specula = require "specula"
local c = assert(specula.mcp.connect{ command = { "node", ]] .. string.format("%q", server) .. [[ }, name = "s",
  env = { MCP_TS_STUBBORN = "1" } })
local pf = assert(io.open(]] .. string.format("%q", pidfile) .. [[, "w"))
pf:write(c.pid) pf:close()
specula.sleep(30000)
]])
    f:close()
    local spid
    finally(function() if spid then os.execute("kill -9 " .. spid .. " 2>/dev/null") end end)
    local _, so = H.sh("(" .. H.quote(H.bin) .. " run " .. H.quote(prog) .. " >/dev/null 2>&1 & pid=$!; while [ ! -s "
      .. H.quote(pidfile) .. " ]; do sleep 0.05; done; kill -TERM $pid; wait $pid; echo status $?; "
      .. "s=$(cat " .. H.quote(pidfile) .. "); if [ -e /proc/$s ]; then echo left; else echo gone; fi)")
    spid = (H.read(pidfile) or ""):match("%d+")
    assert.matches("status 143", so, 1, true)
    assert.matches("gone", so, 1, true)
  end)
end)

describe("under the virtual clock --concurrency changes no result", function()
  -- the records of `specula run SCRIPT --input IN --clock virtual ARGS --concurrency C`, as text
  local function records(script, inp, c, args)
    local out = tmp("conc.jsonl")
    local a = { "run", script, "--input", inp, "--clock", "virtual", "--concurrency", tostring(c), "--out", out }
    for _, x in ipairs(args or {}) do a[#a + 1] = x end
    local st, _, err = H.specula(a)
    assert.equals(0, st, err)
    local text = H.read(out)
    assert.equals(40, #H.jsonl(text))
    return text, err
  end

  local RATE_AGENT = [[
local specula = require "specula"
local a = specula.sim.multihop { hops = 4, p = 0.7, seg = { "lognormal", 10, 0.3 }, spec = { "lognormal", 5, 0.3 },
  target = { "lognormal", 60, 0.3 } }
a.policy = { classes = { limited = { decision = "full", rate = 20, burst = 1 } }, tools = { search = "limited" } }
return a
]]

  local cases = {
    { "a predictor that learns across queries (examples/paste_research.lua)", H.root .. "/examples/paste_research.lua",
      {}, "the agent's predictor learns across queries" },
    { "--k auto (live estimates over the run)", H.root .. "/examples/multihop_sim.lua", { "--k", "auto" },
      "--k auto estimates alpha and beta over the whole run" },
    { "a policy class with a rate (one bucket for the run)", "RATE", { "--k", "inf" },
      "the policy's class 'limited' has a rate" },
    { "a plain agent", H.root .. "/examples/multihop_sim.lua", { "--k", "3" }, nil },
  }
  for _, c in ipairs(cases) do
    it(c[1] .. ": the same records at 1, 7 and 40 queries in flight", function()
      local script = c[2]
      if script == "RATE" then
        script = tmp("rate_agent.lua")
        local f = assert(io.open(script, "w"))
        f:write(RATE_AGENT)
        f:close()
      end
      local inp = input(40)
      local one = records(script, inp, 1, c[3])
      for _, n in ipairs({ 7, 40 }) do
        local text, err = records(script, inp, n, c[3])
        assert.equals(one, text, "--concurrency " .. n)
        if c[4] then
          assert.matches("note: " .. c[4], err, 1, true)
          assert.matches("the queries run one at a time in input order (--concurrency changes no result)", err, 1, true)
        else
          assert.not_matches("note:", err, 1, true)
        end
      end
    end)
  end

  -- a process that runs many such runs (--compare, a script's folds) says it once
  it("says why the queries run one at a time once a process, not once a configuration", function()
    local out = tmp("note.jsonl")
    local st, _, err = H.specula({ "run", H.root .. "/examples/paste_research.lua", "--input", input(40), "--clock",
      "virtual", "--concurrency", "7", "--compare", "sequential,spechop:k=2,spechop:k=inf", "--out", out })
    assert.equals(0, st, err)
    local n = 0
    for _ in err:gmatch("the queries run one at a time in input order") do n = n + 1 end
    assert.equals(1, n, err)
  end)

  it("--compare: a configuration's results do not depend on the configurations before it", function()
    local inp = input(40)
    local both, alone = tmp("both.jsonl"), tmp("alone.jsonl")
    local agent = H.root .. "/examples/paste_research.lua"
    local st, _, err = H.specula({ "run", agent, "--input", inp, "--clock", "virtual", "--compare",
      "sequential,spechop:k=2", "--out", both, "--quiet" })
    assert.equals(0, st, err)
    st, _, err = H.specula({ "run", agent, "--input", inp, "--clock", "virtual", "--compare", "spechop:k=2",
      "--out", alone, "--quiet" })
    assert.equals(0, st, err)
    local from_both = {}
    for line in H.read(both):gmatch("[^\n]+") do
      if line:find('"config":"spechop:k=2"', 1, true) then from_both[#from_both + 1] = line end
    end
    assert.equals(40, #from_both)
    assert.equals(table.concat(from_both, "\n") .. "\n", H.read(alone))
  end)
end)

describe("a JSONL input read as the run goes", function()
  local AGENT = H.root .. "/examples/multihop_sim.lua"

  local function write(name, lines)
    local p = tmp(name)
    local f = assert(io.open(p, "w"))
    f:write(table.concat(lines, "\n"), "\n")
    f:close()
    return p
  end

  local function run(args)
    local out = tmp("out.jsonl")
    local a = { "run", AGENT, "--clock", "virtual", "--out", out }
    for _, x in ipairs(args) do a[#a + 1] = x end
    local st, _, err = H.specula(a)
    return st, H.read(out) or "", err, out
  end

  -- 12 queries among a blank line, a malformed line, a record without a
  -- query and a duplicate id
  local lines = {}
  for i = 1, 12 do
    lines[#lines + 1] = cjson.encode({ id = "s" .. i, query = "streamed question " .. i, answer = "a" .. i })
    if i == 3 then lines[#lines + 1] = "" end
    if i == 5 then lines[#lines + 1] = "{not json" end
    if i == 7 then lines[#lines + 1] = cjson.encode({ id = "noq" }) end
    if i == 9 then lines[#lines + 1] = cjson.encode({ id = "s2", query = "the same id again" }) end
  end

  it("warns as before the run (FILE:LINE, the first line of a duplicate id) and gives the records of the same input read whole", function()
    local jsonl = write("in.jsonl", lines)
    -- the same objects as one JSON array: read whole, as before
    local objs = {}
    for _, l in ipairs(lines) do
      local ok, v = pcall(cjson.decode, l)
      if ok and type(v) == "table" then objs[#objs + 1] = l end
    end
    local array = write("in.json", { "[" .. table.concat(objs, ",\n") .. "]" })
    for _, shard in ipairs({ {}, { "--shard", "1/3" } }) do
      local a = { "--input", jsonl }
      local b = { "--input", array }
      for _, x in ipairs(shard) do a[#a + 1] = x b[#b + 1] = x end
      local st, text, err = run(a)
      assert.equals(0, st, err)
      assert.matches(jsonl .. ":7: malformed JSON", err, 1, true)
      assert.matches(jsonl .. ":10: missing field 'query'; record skipped", err, 1, true)
      assert.matches(jsonl .. ":13: duplicate id 's2' (first at " .. jsonl .. ":2)", err, 1, true)
      local st2, text2, err2 = run(b)
      assert.equals(0, st2, err2)
      -- (each record's provenance names its input file: the two files differ)
      local function same_input(t) return (t:gsub('"input":%b{},', "")) end
      assert.is_true(same_input(text2) == same_input(text), "the streamed input's records differ from the whole one's")
      local recs = H.jsonl(text)
      assert.equals(#shard > 0 and 4 or 13, #recs)
      if #shard > 0 then
        for j, r in ipairs(recs) do
          assert.same({ index = 1, count = 3, of = 13, pos = 1 + 3 * (j - 1), seed = 0 }, r.shard)
        end
      end
    end
  end)

  it("resumes: the count of queries to run, and the records, are those of a run in one go", function()
    -- (no duplicate id here: how a resume treats one is not this spec's matter)
    local nodup = {}
    for _, l in ipairs(lines) do if not l:find("the same id again", 1, true) then nodup[#nodup + 1] = l end end
    local jsonl = write("in.jsonl", nodup)
    local st, whole, err = run({ "--input", jsonl })
    assert.equals(0, st, err)
    -- an --out holding the first 4 records
    local out = tmp("part.jsonl")
    local head = {}
    for line in whole:gmatch("[^\n]+") do if #head < 4 then head[#head + 1] = line end end
    local f = assert(io.open(out, "w"))
    f:write(table.concat(head, "\n"), "\n")
    f:close()
    local st2, _, err2 = H.specula({ "run", AGENT, "--clock", "virtual", "--input", jsonl, "--out", out })
    assert.equals(0, st2, err2)
    assert.matches("resuming: 4 results already in " .. out .. ", 8 queries to run", err2, 1, true)
    -- the same records; the resuming run's first record carries the whole
    -- provenance again
    local got, nwhole = H.whole_lines(H.read(out))
    assert.equals(2, nwhole)
    assert.same(H.whole_lines(whole), got, "the resumed file differs from the run in one go")
  end)

  it("detects a dataset format from every line (2WikiMultihopQA objects one per line)", function()
    local wl = {}
    for i = 1, 5 do
      wl[i] = cjson.encode({ _id = "w" .. i, question = "wiki question " .. i, answer = "x",
        supporting_facts = { { "A", 0 }, { "B", 1 } }, type = i == 5 and "compositional" or "comparison" })
    end
    local st, text, err = run({ "--input", write("wiki.jsonl", wl) })
    assert.equals(0, st, err)
    local recs = H.jsonl(text)
    assert.equals(5, #recs)
    assert.equals("w1", recs[1].id)
    assert.equals("wiki question 1", recs[1].query)
  end)

  it("stops with a message naming the file when the input changes under the run", function()
    local big = {}
    for i = 1, 2000 do big[i] = cjson.encode({ id = "g" .. i, query = "q " .. i }) end
    local p = write("big.jsonl", big)
    -- the run cuts its own input after its first query (through --set: a
    -- script that truncates the file in init)
    local agent = tmp("cutter.lua")
    local f = assert(io.open(agent, "w"))
    f:write([[
local specula = require "specula"
local a = specula.sim.multihop { hops = 2, p = 1, seg = 1, spec = 1, target = 1 }
local init = a.init
a.init = function(q, ctx)
  if ctx.id == "g1" then local h = io.open(ctx.set.path, "w") h:write(ctx.set.keep, "\n") h:close() end
  return init(q, ctx)
end
return a
]])
    f:close()
    local st, _, err = H.specula({ "run", agent, "--clock", "virtual", "--input", p, "--out", tmp("o.jsonl"),
      "--concurrency", "2", "--set", "path=" .. p, "--set", "keep=" .. big[1] })
    assert.equals(1, st, err)
    assert.matches("the --input file '" .. p .. "' changed while the run read it", err, 1, true)
  end)
end)
