-- A bad value ends one query, never the run; nothing written is silently
-- lost: unencodable records, checked writes, signals, resume of failures.
-- Everything runs the real binary as a user does.
local H = require "support.helpers"
local cjson = require "cjson"

local AGENT = H.root .. "/spec/functional/scripts/integrity.lua"

local function jsonl(ids, extra)
  local t = {}
  for i, id in ipairs(ids) do
    local r = { id = id, query = "integrity question " .. i }
    for k, v in pairs(extra or {}) do r[k] = v end
    t[i] = cjson.encode(r)
  end
  return table.concat(t, "\n") .. "\n"
end

local function numbered(n, prefix)
  local ids = {}
  for i = 1, n do ids[i] = (prefix or "q") .. i end
  return ids
end

-- Strict UTF-8 (no overlongs, surrogates, code points above U+10FFFF,
-- truncated sequences), written here independently of specula.json.
local function valid_utf8(s)
  local i, n = 1, #s
  while i <= n do
    local c = s:byte(i)
    local len, lo, hi
    if c < 0x80 then len = 1
    elseif c >= 0xC2 and c <= 0xDF then len, lo, hi = 2, 0x80, 0xBF
    elseif c >= 0xE0 and c <= 0xEF then
      len, lo, hi = 3, (c == 0xE0 and 0xA0 or 0x80), (c == 0xED and 0x9F or 0xBF)
    elseif c >= 0xF0 and c <= 0xF4 then
      len, lo, hi = 4, (c == 0xF0 and 0x90 or 0x80), (c == 0xF4 and 0x8F or 0xBF)
    else return false end
    if len > 1 then
      if i + len - 1 > n then return false end
      local c1 = s:byte(i + 1)
      if c1 < lo or c1 > hi then return false end
      for k = 2, len - 1 do
        local ck = s:byte(i + k)
        if ck < 0x80 or ck > 0xBF then return false end
      end
    end
    i = i + len
  end
  return true
end

local function by_id(recs)
  local t, count = {}, {}
  for _, r in ipairs(recs) do
    local key = (r.config and (r.config .. "/") or "") .. tostring(r.id)
    t[key] = r
    count[key] = (count[key] or 0) + 1
  end
  return t, count
end

describe("a value that cannot be encoded", function()
  local BAD = {
    obs_utf8 = { "trajectory%[0%]%.observation", "invalid UTF%-8" },
    ans_surrogate = { ": answer: ", "invalid UTF%-8" },
    obs_nan = { "trajectory%[0%]%.observation", "NaN" },
    ans_inf = { ": answer: ", "infinity" },
    ans_deep = { ": answer%.x%.x", "nested deeper than 256" },
    ans_fn = { ": answer: ", "a function cannot be encoded" },
    obs_cycle = { "trajectory%[0%]%.observation%.self", "contains itself" },
  }
  local ids = { "ok1", "obs_utf8", "ans_surrogate", "obs_nan", "ans_inf", "ans_deep", "ans_fn", "obs_cycle", "ok2" }

  it("makes that query's record an error record naming id, field and reason; the run goes on and exits 3", function()
    local q = H.tmpfile("enc_in.jsonl", jsonl(ids))
    local out = H.tmpfile("enc_out.jsonl")
    local st, _, err = H.specula({ "run", AGENT, "--input", q, "--out", out, "--quiet" })
    assert.equals(3, st, err)
    local recs = H.jsonl(H.read(out))        -- every line parses
    assert.equals(#ids, #recs)
    local t = by_id(recs)
    for _, id in ipairs({ "ok1", "ok2" }) do
      assert.is_nil(t[id].error)
      assert.is_string(t[id].answer)
    end
    for id, want in pairs(BAD) do
      local e = t[id].error
      assert.is_string(e, id)
      assert.matches("query '" .. id .. "'", e, 1, true)
      assert.matches(want[1], e)
      assert.matches(want[2], e)
      assert.is_nil(t[id].answer)
      assert.is_nil(t[id].trajectory)
      assert.matches("query '" .. id .. "'", err, 1, true)   -- also said on stderr
    end
  end)

  it("a results file whose stats are not numbers: the comparison table says so and is still printed", function()
    local q = H.tmpfile("bad_stats_in.jsonl", jsonl(numbered(4)))
    local res = H.tmpfile("bad_stats.jsonl")
    os.remove(res)
    local st, clean, err = H.specula({ "run", AGENT, "--input", q, "--clock", "virtual", "--compare",
                                       "sequential,spechop", "--out", res, "--quiet" })
    assert.equals(0, st, err)
    local lines = {}
    for line in H.read(res):gmatch("[^\n]+") do lines[#lines + 1] = cjson.decode(line) end
    assert.equals(8, #lines)
    lines[1].stats.wall_ms = "slow"                 -- sequential q1
    lines[2].stats = "not an object"                -- sequential q2
    lines[6].stats.calls = { model = "?" }          -- spechop q2
    lines[7].stats.cancelled = false                -- spechop q3
    local text = {}
    for i, r in ipairs(lines) do text[i] = cjson.encode(r) end
    H.tmpfile("bad_stats.jsonl", table.concat(text, "\n") .. "\n")
    local st2, tbl, err2 = H.specula({ "compare", res })
    assert.equals(0, st2, err2)
    assert.matches("(sequential: 2 records with stats that are not numbers, left out of the columns they lack)",
      tbl, 1, true)
    assert.matches("(spechop: 2 records with stats that are not numbers, left out of the columns they lack)",
      tbl, 1, true)
    assert.matches("\nsequential +4 ", tbl)
    assert.is_nil(clean:find("not numbers", 1, true))
    -- resuming the run on that file: nothing left to run, the same table
    local st3, again, err3 = H.specula({ "run", AGENT, "--input", q, "--clock", "virtual", "--compare",
                                         "sequential,spechop", "--out", res, "--quiet" })
    assert.equals(0, st3, err3)
    assert.equals(tbl, again)
  end)

  it("counts the same in the run's summary whether the records are kept (--trace) or folded as written", function()
    -- without --trace a written record is dropped and only its counters
    -- stay: the summary must not change (failed queries, a planned error
    -- before the window ran, sums in input order)
    local list = { "fail_1" }
    for _, id in ipairs(ids) do list[#list + 1] = id end
    for i = 1, 30 do list[#list + 1] = "more" .. i end
    local q = H.tmpfile("enc_fold.jsonl", jsonl(list))
    local function summary(extra)
      local args = { "run", AGENT, "--input", q, "--clock", "virtual", "--set", "fail=1", "--mode", "spechop",
                     "--k", "2", "--out", H.tmpfile("enc_fold_out.jsonl", "") }
      for _, a in ipairs(extra) do args[#args + 1] = a end
      local st, _, err = H.specula(args)
      assert.equals(3, st, err)
      local lines = {}
      for line in err:gmatch("[^\n]+") do
        if not line:find("cannot be written", 1, true) then lines[#lines + 1] = line end
      end
      return table.concat(lines, "\n")
    end
    local folded = summary({})
    assert.matches("40 queries %(8 failed%)", folded)
    assert.equals(summary({ "--trace", H.tmpfile("enc_fold.trace.json") }), folded)
  end)

  it("is handled the same way on stdout and under --compare (both configurations, all queries)", function()
    local q = H.tmpfile("enc_cmp.jsonl", jsonl(ids))
    local st, out, err = H.specula({ "run", AGENT, "--input", q, "--quiet" })
    assert.equals(3, st, err)
    assert.equals(#ids, #H.jsonl(out))
    local res = H.tmpfile("enc_cmp_out.jsonl")
    local sum = H.tmpfile("enc_cmp_sum.json")
    st, out, err = H.specula({ "run", AGENT, "--input", q, "--compare", "sequential,spechop", "--out", res,
                               "--summary", sum, "--quiet" })
    assert.equals(3, st, err)
    local t, count = by_id(H.jsonl(H.read(res)))
    for _, cfg in ipairs({ "sequential", "spechop" }) do
      for _, id in ipairs(ids) do
        assert.equals(1, count[cfg .. "/" .. id], cfg .. "/" .. id)
        assert.equals(BAD[id] ~= nil, t[cfg .. "/" .. id].error ~= nil, cfg .. "/" .. id)
      end
    end
    local rows = cjson.decode(H.read(sum))
    assert.equals(2, #rows)
    assert.equals(7, rows[1].failed)
    -- `specula compare` on those records: the same table, and status 3 too
    local st2, again, err2 = H.specula({ "compare", res })
    assert.equals(3, st2, err2)
    assert.equals(out, again)
  end)

  it("a query text that is not UTF-8 still gives a valid record", function()
    local st, out, err = H.specula({ "run", AGENT, "--query", "caf\233 au lait" })
    assert.equals(3, st, err)
    local r = H.jsonl(out)[1]
    assert.matches("query: invalid UTF%-8", r.error)
    assert.is_true(valid_utf8(r.query))
  end)
end)

describe("messages", function()
  it("HTTP error excerpts stay valid UTF-8 whatever the body holds", function()
    local st, out, err = H.run_lua([[
      local retry = require "specula.llm.retry"
      local bodies = {
        "surrogate \237\160\128 end", "overlong \192\175 and \224\128\175", "above \244\144\128\128 max",
        "truncated \226\130", "lone \128 continuation", string.rep("\226\130\172", 100),
        string.rep("a", 79) .. "\240\159\152\128 tail", "<html><title>\237\191\191</title></html>",
      }
      for _, b in ipairs(bodies) do
        io.write(retry.excerpt(b, "text/plain", 80), "\n")
        io.write(retry.excerpt(b, "text/html", 80), "\n")
      end
    ]])
    assert.equals(0, st, err)
    local n = 0
    for line in out:gmatch("[^\n]+") do
      n = n + 1
      assert.is_true(valid_utf8(line), "not UTF-8: " .. line:gsub("[\128-\255]", function(c) return ("\\%d"):format(c:byte()) end))
    end
    assert.equals(16, n)
    assert.matches("\n" .. string.rep("a", 79) .. "%.%.%.\n", out)   -- cut before the emoji, not inside it
  end)

  it("a URL over libcurl's request-header limit says which limit, not 'Out of memory'", function()
    local srv = H.server()
    local st, out, err = H.run_lua(([[
      local specula = require "specula"
      local r, e = specula.http.request { url = "%s/echo?q=" .. string.rep("x", 5000000) }
      print(r, e)
    ]]):format(srv.base))
    srv.stop()
    assert.equals(0, st, err)
    assert.not_matches("Out of memory", out, 1, true)
    assert.matches("EREQTOOLARGE", out, 1, true)
    assert.matches("1 MB", out, 1, true)
  end)

  it("a directory or a queries file given as results: a message naming it, no engine stack", function()
    local dir = H.tmpdir()
    local qf = H.tmpfile("msg_queries.jsonl", jsonl(numbered(3)))
    local cases = {
      { { "compare", dir }, "specula compare: cannot read '" .. dir .. "': Is a directory" },
      { { "merge", dir, "-o", H.tmpfile("msg_m.jsonl") }, "specula merge: cannot read '" .. dir .. "': Is a directory" },
      { { "report", dir, "-o", H.tmpfile("msg_r.html") }, "specula report: cannot read results file '" .. dir
        .. "': Is a directory" },
      { { "compare", qf }, "specula compare: no results records in " .. qf .. " (is it a queries file?" },
    }
    for _, c in ipairs(cases) do
      local st, _, err = H.specula(c[1])
      assert.equals(1, st, err)
      assert.matches(c[2], err, 1, true)
      assert.is_nil(err:find("stack traceback", 1, true), err)
    end
  end)

  it("a missing --input file is a usage error (status 2) naming the path once, with run's usage line", function()
    local path = H.tmpdir() .. "/no_such_input.jsonl"
    local st, _, err = H.specula({ "run", AGENT, "--input", path })
    assert.equals(2, st, err)
    local _, n = err:gsub("no_such_input%.jsonl", "")
    assert.equals(1, n, err)
    -- as every other usage error of run says it: the message, then the synopsis
    local usage = "usage: specula run SCRIPT.lua [--query TEXT | --input FILE] [options]; `specula run --help` lists "
      .. "every option\n"
    assert.equals("specula run: cannot read --input file '" .. path .. "': No such file or directory\n" .. usage, err)
    st, _, err = H.specula({ "run", AGENT, "--input", H.tmpdir() })
    assert.equals(2, st, err)
    assert.equals("specula run: cannot read --input file '" .. H.tmpdir() .. "': Is a directory\n" .. usage, err)
  end)

  -- a gzip'd or binary --input ran no query and exited 0, its lines
  -- warned about one by one: now the input is refused, no record written
  it("a compressed or binary --input is refused (status 1), the compressed one with the command that opens it", function()
    local dir = H.tmpdir()
    local plain = dir .. "/q.jsonl"
    local f = assert(io.open(plain, "w"))
    f:write('{"id":"q1","query":"a"}\n{"id":"q2","query":"b"}\n')
    f:close()
    assert(os.execute("gzip -k " .. H.quote(plain)) == 0)
    local out = dir .. "/r.jsonl"
    local st, _, err = H.specula({ "run", AGENT, "--input", plain .. ".gz", "--out", out })
    assert.equals(1, st, err)
    assert.equals("specula run: specula.datasets: " .. plain .. ".gz: gzip-compressed: decompress it first: gzip -dc "
      .. plain .. ".gz > " .. plain .. "\n", err)
    local r = io.open(out)
    assert.is_true(r == nil or r:read("*a") == "")
    if r then r:close() end
    local bin = dir .. "/b.jsonl"
    f = assert(io.open(bin, "wb"))
    f:write("\0\1\2\255\n\254\253\n")
    f:close()
    st, _, err = H.specula({ "run", AGENT, "--input", bin })
    assert.equals(1, st, err)
    assert.matches("b.jsonl: no line of it is JSON (2 skipped; the first: " .. bin .. ":1: ", err, 1, true)
  end)

  -- a gzip'd results file read as damaged sent the user to `specula
  -- repair`, which then called it no results file
  it("a compressed results file given to compare, merge, repair or report is named as such (status 1)", function()
    local dir = H.tmpdir()
    local plain = dir .. "/r.jsonl"
    local st, _, err = H.specula({ "run", AGENT, "--query", "what", "--out", plain })
    assert.equals(0, st, err)
    assert(os.execute("gzip -k " .. H.quote(plain)) == 0)
    local gz = plain .. ".gz"
    local hint = gz .. ": gzip-compressed: decompress it first: gzip -dc " .. gz .. " > " .. plain
    for _, c in ipairs({ { { "compare", gz }, "specula compare: " .. hint },
                         { { "merge", gz, "-o", dir .. "/m.jsonl" }, "specula merge: " .. hint },
                         { { "report", gz }, "specula report: " .. hint },
                         { { "repair", gz }, "specula repair: " .. gz .. ": not a results file (gzip-compressed: "
                             .. "decompress it first: gzip -dc " .. gz .. " > " .. plain .. "): left unchanged" } }) do
      local st2, _, err2 = H.specula(c[1])
      assert.equals(1, st2, err2)
      assert.truthy(err2:find(c[2], 1, true), c[1][1] .. ": " .. err2)
      assert.is_nil(err2:find("damaged", 1, true), err2)
    end
  end)

  it("a missing results file given to compare, merge or repair is named once (status 1)", function()
    local path = H.tmpdir() .. "/no_such_results.jsonl"
    for _, args in ipairs({ { "compare", path }, { "merge", path, "-o", H.tmpfile("nsr_m.jsonl") },
                            { "repair", path } }) do
      local st, _, err = H.specula(args)
      assert.equals(1, st, err)
      local _, n = err:gsub("no_such_results%.jsonl", "")
      assert.equals(1, n, err)
      assert.matches("no such file", err:lower(), 1, true)
    end
  end)

  for _, case in ipairs({ { "return 42", "a number %(42%)" }, { "return 'hello'", "a string" },
                          { "return { name = 'x' }", "a table that is not an agent" } }) do
    it("a script returning something that is not an agent is an error (" .. case[1] .. ")", function()
      local path = H.tmpfile("notagent.lua", case[1] .. "\n")
      local st, out, err = H.specula({ "run", path, "--query", "q" })
      assert.equals(1, st, err)
      assert.equals("", out)
      assert.matches("notagent.lua", err, 1, true)
      assert.matches(case[2], err)
    end)
  end

  -- a definition's mistake is said at the script's line: `return
  -- specula.agent{...}` is a tail call, whose frame is gone, and the
  -- message named the engine's lua/specula/cmd/run.lua instead
  for _, case in ipairs({
    { "return specula.agent {\n  step = function() end,\n  update = function(s) return s end,\n}\n",
      "badagent.lua:3: specula.agent: agent.init is required" },
    { "local a = specula.agent {\n  init = function() return {} end,\n  step = 'oops',\n"
        .. "  update = function(s) return s end,\n}\nreturn a\n",
      "badagent.lua:2: specula.agent: agent.step must be a function, got string" },
    { "return specula.agent {\n  init = function() return {} end,\n  step = function() end,\n"
        .. "  update = function(s) return s end,\n  tools = { t = { call = function() end, cost = -1 } },\n}\n",
      "badagent.lua:3: specula.agent: tools.t.cost must be a non-negative number" },
  }) do
    it("a broken agent definition is said at the script's line: " .. case[2]:match("specula.agent: (.*)"), function()
      local path = H.tmpfile("badagent.lua", 'local specula = require "specula"\n' .. case[1])
      local st, out, err = H.specula({ "run", path, "--query", "q" })
      assert.equals(1, st, err)
      assert.equals("", out)
      local first = err:match("^[^\n]*")
      assert.matches(case[2], first, 1, true)
      assert.is_nil(first:find("lua/specula/", 1, true), first)
    end)
  end

  it("a caller that catches specula.agent's error still gets a string", function()
    local st, out, err = H.run_lua([[
local specula = require "specula"
local ok, e = pcall(specula.agent, { init = function() end, step = function() end, update = 5 })
print(ok, type(e), e)
]])
    assert.equals(0, st, err)
    assert.matches("false\tstring\t", out, 1, true)
    assert.matches("agent.update must be a function, got number", out, 1, true)
  end)

  it("an error in a script's main chunk shows the script's frames, not the engine's", function()
    local cases = {
      { "local function f() error('boom in main') end\nf()\n", "main.lua:1: boom in main",
        { "main.lua:1: in function 'f'", "main.lua:2: in " } },
      { "local t = setmetatable({}, { __index = function() error({ code = 7 }) end })\nlocal x = t.y\n",
        "main.lua:1: table: ", { "main.lua:1: in function '__index'", "main.lua:2: in " } },
      { "local specula = require 'specula'\n\nspecula.sleep('x')\n",
        "main.lua:3: specula.sleep: expected milliseconds, got string", { "main.lua:3: in " } },
    }
    for _, case in ipairs(cases) do
      local script = H.tmpfile("main.lua", case[1])
      local dir = script:match("^(.*)/")
      local st, _, err = H.specula({ "run", script })
      assert.equals(1, st, err)
      assert.matches("specula: " .. dir .. "/" .. case[2], err, 1, true)
      assert.matches("stack traceback:", err, 1, true)
      for _, frame in ipairs(case[3]) do assert.matches(frame, err, 1, true) end
      assert.is_nil(err:find("lua/specula/", 1, true), err)
      assert.is_nil(err:find("[C]", 1, true), err)
      assert.is_nil(err:find("xpcall", 1, true), err)
    end
  end)

  it("an error with no frame of the user's keeps the whole traceback (the engine's own failure)", function()
    -- frames in files named like the engine's, run in a coroutine of their
    -- own: nothing of the user's is on that stack
    local st, out, err = H.run_lua([[
local sched = require "specula.internal.sched"
local ENG = "@/x/lua/specula/"
local boom = load("return function() local t = nil; return t.field end", ENG .. "fake_engine.lua")()
local handler = load("local sched = ... return function(e) local m = sched.command_error(e, 1) return m end",
  ENG .. "fake_cmd.lua")(sched)
local body = load("local boom, handler = ... local ok, m = xpcall(boom, handler) return ok, m", ENG .. "fake_main.lua")
local co = coroutine.create(body)
local _, ok, msg = coroutine.resume(co, boom, handler)
print(ok, msg)
]])
    assert.equals(0, st, err)
    assert.matches("^false\t/x/lua/specula/fake_engine.lua:1: attempt to index", out)
    assert.matches("stack traceback:", out, 1, true)
    assert.matches("fake_engine.lua:1: in function", out, 1, true)
    assert.matches("fake_main.lua:1: in ", out, 1, true)
  end)
end)

describe("every write is checked", function()
  local q
  setup(function() q = H.tmpfile("w_in.jsonl", jsonl(numbered(6))) end)

  local function fails(args, what, reason, status)
    local st, _, err = H.sh("(" .. args .. ")")   -- the redirections inside apply
    assert.equals(status or 1, st, err)
    assert.matches(what, err, 1, true)
    assert.matches(reason, err, 1, true)
  end

  local function cmd(extra)
    local parts = { H.quote(H.bin), "run", H.quote(AGENT), "--input", H.quote(q), "--quiet" }
    for _, a in ipairs(extra) do parts[#parts + 1] = H.quote(a) end
    return table.concat(parts, " ")
  end

  it("stdout on a full device", function()
    fails(cmd({}) .. " >/dev/full", "stdout", "No space left on device")
  end)

  it("--out on a full device, and --out naming a directory", function()
    fails(cmd({ "--out", "/dev/full" }), "--out file '/dev/full'", "No space left on device")
    fails(cmd({ "--out", H.tmpdir() }), "--out file '" .. H.tmpdir() .. "'", "Is a directory")
  end)

  it("--out that stops growing mid-run is cut back to its last complete line, and a resume completes it", function()
    -- a file size limit (prlimit, util-linux; SIGXFSZ ignored, so the write
    -- fails with EFBIG) halfway through the third new record
    for _, extra in ipairs({ {}, { "--compare", "sequential,spechop" } }) do
      local out = H.tmpfile("w_limit.jsonl")
      os.remove(out)
      local two = H.tmpfile("w_two.jsonl", jsonl(numbered(2)))
      local st, _, err = H.specula({ "run", AGENT, "--input", two, "--out", out, "--quiet", unpack(extra) })
      assert.equals(0, st, err)
      local before = #H.read(out)
      local per = before / (#extra > 0 and 4 or 2)
      local limit = math.floor(before + 2.5 * per)
      fails("trap '' XFSZ; prlimit --fsize=" .. limit .. " " .. cmd({ "--out", out, unpack(extra) }),
        "--out file '" .. out .. "'", "File too large")
      local text = H.read(out)
      assert.is_true(#text > before + per / 2 and #text < limit, #text .. " bytes")
      assert.equals("\n", text:sub(-1))
      local n = 0
      for line in text:gmatch("[^\n]+") do
        n = n + 1
        assert.is_table(cjson.decode(line))
      end
      local st2, _, err2 = H.specula({ "run", AGENT, "--input", q, "--out", out, "--quiet", unpack(extra) })
      assert.equals(0, st2, err2)
      local recs = H.jsonl(H.read(out))
      local _, count = by_id(recs)
      assert.equals(#extra > 0 and 12 or 6, #recs)
      for key, c in pairs(count) do assert.equals(1, c, key) end
    end
  end)

  it("--trace on a full device, and --trace in a missing directory (before the run)", function()
    local out = H.tmpfile("w_trace_out.jsonl")
    fails(cmd({ "--out", out, "--trace", "/dev/full" }), "--trace file '/dev/full'", "No space left on device")
    os.remove(out)
    fails(cmd({ "--out", out, "--trace", H.tmpdir() .. "/nodir/t.json" }), "--trace file", "No such file or directory")
    assert.equals("", H.read(out) or "")   -- nothing ran
  end)

  it("--trace on a full device under --compare", function()
    fails(cmd({ "--compare", "sequential,spechop", "--trace", "/dev/full" }) .. " >/dev/null",
      "--trace file '/dev/full'", "No space left on device")
  end)

  it("--summary on a full device", function()
    fails(cmd({ "--compare", "sequential,spechop", "--summary", "/dev/full" }) .. " >/dev/null",
      "--summary file '/dev/full'", "No space left on device")
  end)

  it("the --compare table on a full stdout", function()
    local out = H.tmpfile("w_cmp_out.jsonl")
    fails(cmd({ "--compare", "sequential,spechop", "--out", out }) .. " >/dev/full", "stdout", "No space left on device")
  end)

  it("report -o on a full device", function()
    local res = H.tmpfile("w_rep.jsonl")
    local st, _, err = H.specula({ "run", AGENT, "--input", q, "--out", res, "--quiet" })
    assert.equals(0, st, err)
    fails(H.quote(H.bin) .. " report " .. H.quote(res) .. " -o /dev/full", "/dev/full", "No space left on device")
  end)

  it("a plain script printing to a full stdout", function()
    local path = H.tmpfile("printer.lua", "print('hello')\n")
    fails(H.quote(H.bin) .. " run " .. H.quote(path) .. " >/dev/full", "stdout", "No space left on device")
  end)

  it("a closed stdout pipe stops the run at once with status 1", function()
    local many = H.tmpfile("w_many.jsonl", jsonl(numbered(200)))
    local log = H.tmpfile("w_pipe.log")
    local stf = log .. ".status"
    local st = H.sh("(" .. H.quote(H.bin) .. " run " .. H.quote(AGENT)
      .. " --input " .. H.quote(many) .. " --concurrency 1 --set log=" .. H.quote(log)
      .. " 2>" .. H.quote(log .. ".err") .. "; echo $? >" .. H.quote(stf) .. ") | head -1 >/dev/null")
    local e = H.read(log .. ".err") or ""
    assert.equals(0, st)
    assert.equals("1", (H.read(stf) or ""):match("%d+"), e)
    assert.matches("cannot write stdout: Broken pipe", e, 1, true)
    local started = 0
    for _ in (H.read(log) or ""):gmatch("[^\n]+") do started = started + 1 end
    assert.is_true(started < 50, "the run went on after the pipe closed: " .. started .. " queries started")
  end)
end)

describe("a signal during a run", function()
  -- Start a run in the background, wait until its first result is in
  -- --out, then send the signal; returns the exit status and stderr.
  local function interrupt(args, out, sig)
    -- slower tools, so the signal lands while queries are still to run
    local parts = { "INTEGRITY_TARGET_MS=40", H.quote(H.bin) }
    for _, a in ipairs(args) do parts[#parts + 1] = H.quote(a) end
    local errf = H.tmpfile()
    local script = table.concat(parts, " ") .. " >/dev/null 2>" .. H.quote(errf) .. " & pid=$!; "
      .. "while [ ! -s " .. H.quote(out) .. " ]; do sleep 0.05; done; kill -" .. sig .. " $pid; wait $pid; echo $?"
    local _, so = H.sh(script)
    return tonumber(so:match("(%d+)")), H.read(errf) or ""
  end

  it("SIGINT: status 130, complete --out lines, a --trace that parses, and a resume finishes the set", function()
    local ids = numbered(40)
    local q = H.tmpfile("sig_in.jsonl", jsonl(ids))
    local out, trace = H.tmpfile("sig_out.jsonl"), H.tmpfile("sig_trace.json")
    local st, err = interrupt({ "run", AGENT, "--input", q, "--out", out, "--trace", trace, "--concurrency", "2" },
      out, "INT")
    assert.equals(130, st, err)
    local done = tonumber(err:match("specula: interrupted: (%d+) of 40 queries finished and written; the rest did "
      .. "not run %(run the same command again to resume: the queries already in .- are skipped%)"))
    assert.matches("already in " .. out .. " are skipped", err, 1, true)
    assert.is_number(done, err)
    local text = H.read(out)
    assert.equals("\n", text:sub(-1))
    local recs = H.jsonl(text)
    assert.is_true(#recs >= 1 and #recs < #ids, #recs .. " records")
    assert.equals(done, #recs)
    for _, r in ipairs(recs) do assert.is_nil(r.error, r.error) end   -- cancelled queries are not written
    local tr = cjson.decode(H.read(trace))
    assert.equals(#recs, #tr.specula.queries)
    assert.is_true(#tr.traceEvents > 0)
    local st2, _, err2 = H.specula({ "run", AGENT, "--input", q, "--out", out, "--quiet" })
    assert.equals(0, st2, err2)
    local t, count = by_id(H.jsonl(H.read(out)))
    for _, id in ipairs(ids) do assert.equals(1, count[id], id) assert.is_nil(t[id].error) end
  end)

  it("SIGTERM under --compare: status 143 and a --summary that parses", function()
    local q = H.tmpfile("sigc_in.jsonl", jsonl(numbered(40)))
    local out, sum = H.tmpfile("sigc_out.jsonl"), H.tmpfile("sigc_sum.json")
    local st, err = interrupt({ "run", AGENT, "--input", q, "--out", out, "--summary", sum, "--concurrency", "2",
                                "--compare", "sequential,spechop" }, out, "TERM")
    assert.equals(143, st, err)
    local rows = cjson.decode(H.read(sum))
    assert.is_true(#rows >= 1)
    local written = #H.jsonl(H.read(out))
    local counted = 0
    for _, r in ipairs(rows) do
      counted = counted + r.queries
      assert.is_nil(r.agreement)   -- agreement pairs whole configurations: not on a partial run
    end
    assert.equals(written, counted)
    assert.matches("specula: terminated: " .. written .. " of 80 queries finished and written", err, 1, true)
  end)
end)

describe("--retry-failed", function()
  -- a record written by another tool with "error": null did not fail:
  -- compare and the report read it so, and --retry-failed must too
  it("leaves a record whose error is null", function()
    local q = H.tmpfile("retry_null_in.jsonl", jsonl({ "n1", "n2" }))
    local out = H.tmpfile("retry_null_out.jsonl")
    local st, _, err = H.specula({ "run", AGENT, "--input", q, "--out", out, "--quiet" })
    assert.equals(0, st, err)
    local lines = {}
    for line in H.read(out):gmatch("[^\n]+") do lines[#lines + 1] = line end
    lines[2] = lines[2]:gsub("^{", '{"error":null,')
    H.tmpfile("retry_null_out.jsonl", table.concat(lines, "\n") .. "\n")
    st, _, err = H.specula({ "run", AGENT, "--input", q, "--out", out, "--retry-failed" })
    assert.equals(0, st, err)
    assert.matches("2 results already in", err, 1, true)
    assert.not_matches("removed", err, 1, true)
  end)

  it("runs again the queries whose records carry an error; the file ends with one record per id", function()
    local ids = { "a1", "fail_1", "a2", "fail_2", "a3" }
    local q = H.tmpfile("retry_in.jsonl", jsonl(ids))
    local out = H.tmpfile("retry_out.jsonl")
    -- failures from outside the run's configuration (a flaky service), so
    -- the retry is the same run (a --set value would make it another one)
    local st, _, err = H.specula({ "run", AGENT, "--input", q, "--out", out, "--quiet" }, { INTEGRITY_FAIL = "1" })
    assert.equals(3, st, err)
    local _, count = by_id(H.jsonl(H.read(out)))
    assert.equals(1, count.fail_1)
    -- a plain resume keeps the failures
    st, _, err = H.specula({ "run", AGENT, "--input", q, "--out", out })
    assert.equals(0, st, err)
    assert.matches("0 queries to run", err, 1, true)
    st, _, err = H.specula({ "run", AGENT, "--input", q, "--out", out, "--retry-failed" })
    assert.equals(0, st, err)
    assert.matches("removed 2 failed records", err, 1, true)
    local t
    t, count = by_id(H.jsonl(H.read(out)))
    for _, id in ipairs(ids) do
      assert.equals(1, count[id], id)
      assert.is_nil(t[id].error, id)
      assert.is_string(t[id].answer)
    end
  end)
end)
