-- A CLI run that writes each record and keeps none has the engine write a
-- record of the common shape whole from its finished window
-- (sp_record_line, specula.run.records direct_of/write_direct): no Lua
-- table, no encoder walk. The line must be the one the Lua record encodes
-- to, byte for byte, and whatever the engine cannot write (a string that is
-- not UTF-8, an answer that is not a string, gold answers, a shard) must
-- take the Lua record as before. Each run is compared with the same run
-- under --trace, which keeps every record as Lua values (the path records
-- were always built on); the agents report, in their answers, how many
-- records the engine had written so far, so a spec cannot pass on a path
-- that was never taken.
local H = require "support.helpers"

-- an agent of HOPS hops a query whose answer carries the count of records
-- written whole by the engine before it (--concurrency 1: the records
-- before it in input order), and odd text where the query asks for it
local AGENT = [[
  local specula = require "specula"
  local records = require "specula.run.records"
  local json = require "specula.json"
  local HOPS = tonumber(os.getenv("RL_HOPS") or "1")
  return specula.agent {
    name = "line",
    init = function(query) return { q = query, hop = 0 } end,
    step = function(state, ctx)
      if state.hop >= HOPS then
        local q = state.q
        -- (RL_NOCOUNT: 0, for a --compare table whose agreement reads answers)
        local n = os.getenv("RL_NOCOUNT") and 0 or records.direct_written()
        if q:find("table answer", 1, true) then return { final = { n = n, list = { "\u{e9}", 1.5, json.null } } } end
        local depth = tonumber(q:match("deep (%d+)"))
        if depth then
          local v = { n = n }
          for _ = 2, depth do v = { v } end
          return { final = v }
        end
        if q:find("function answer", 1, true) then return { final = print } end
        if q:find("bad utf8", 1, true) then return { final = "x\255y #" .. n .. "#" } end
        local ctl = q:match("control (%d+)")
        if ctl then return { final = ("\1"):rep(tonumber(ctl)) .. " #" .. n .. "#" } end
        if q:find("long answer", 1, true) then return { final = ("\u{e9}x"):rep(12000) .. " #" .. n .. "#" } end
        if q:find("secret", 1, true) then return { final = "key " .. os.getenv("RL_SECRET") .. " #" .. n .. "#" } end
        return { final = "caf\u{e9} \"quoted\"\\\n\t\u{1F600} #" .. n .. "#" }
      end
      return { segment = "s\"" .. state.hop, action = { tool = "t", args = { i = state.hop, s = "\u{e9}" } } }
    end,
    update = function(state, step, obs) return { q = state.q, hop = state.hop + 1 } end,
    tools = { t = { call = function(args) return "o" .. args.i end,
                    speculate = function(args) return args.i % 2 == 0 and "o" .. args.i or "wrong" end } },
    verify = function(pred, actual) return pred == actual, "eq" end,
    policy = function() return "full" end,
  }
]]

-- The records of agent over the input lines with and without --trace, the
-- two runs' statuses and stderr.
local function both(tag, lines, extra, env)
  local dir = H.tmpdir()
  local input = H.tmpfile("rl_" .. tag .. ".jsonl", table.concat(lines, "\n") .. "\n")
  local agent = H.tmpfile("rl_agent.lua", AGENT)
  local res = {}
  for _, side in ipairs({ "engine", "lua" }) do
    local out = dir .. "/rl_" .. tag .. "_" .. side .. ".jsonl"
    os.remove(out)
    local argv = { "run", agent, "--input", input, "--clock", "virtual", "--out", out, "--quiet" }
    for _, x in ipairs(extra or {}) do argv[#argv + 1] = x end
    if side == "lua" then
      argv[#argv + 1] = "--trace"
      argv[#argv + 1] = dir .. "/rl_" .. tag .. "_trace.json"
    end
    local st, stdout, err = H.specula(argv, env)
    -- (the counts the answers carry differ by design: left out)
    local raw = H.read(out) or ""
    local text = raw:gsub("#%d+#", "#N#"):gsub('"n":%d+', '"n":N')
    res[side] = { status = st, err = err, text = text, raw = raw, out = stdout }
  end
  return res.engine, res.lua
end

-- the count an answer reports (the records the engine wrote before it)
local function count_in(line)
  local r = H.json().decode(line)
  local a = r.answer
  while type(a) == "table" and a.n == nil and a[1] ~= nil do a = a[1] end
  if type(a) == "table" then return a.n end
  return tonumber(tostring(a):match("#(%d+)#$"))
end

local function lines_of(text)
  local t = {}
  for l in text:gmatch("[^\n]+") do t[#t + 1] = l end
  return t
end

describe("a record the engine writes whole from its window", function()
  for _, c in ipairs({ { hops = "0", extra = { "--k", "2" } }, { hops = "1", extra = { "--k", "inf" } },
                       { hops = "40", extra = { "--k", "3" } }, { hops = "5", extra = { "--mode", "sequential" } } }) do
    it("is the Lua record's line, byte for byte (" .. c.hops .. " hops, " .. table.concat(c.extra, " ") .. ")",
      function()
        local lines = {}
        for i = 1, 12 do
          -- ids as strings with escapes and as numbers; queries with escapes
          local id = i % 3 == 0 and tostring(i) or string.format('"q\\"%d\\u00e9"', i)
          lines[i] = string.format('{"id":%s,"query":"question \\\\ %d \\u00e9\\t"}', id, i)
        end
        local extra = { "--concurrency", "1", "--max-hops", "60" }
        for _, x in ipairs(c.extra) do extra[#extra + 1] = x end
        local e, l = both("shape" .. c.hops, lines, extra, { RL_HOPS = c.hops })
        assert.equals(0, e.status, e.err)
        assert.equals(0, l.status, l.err)
        assert.equals(l.text, e.text)
        local got = lines_of(e.text)
        assert.equals(12, #got)
        -- the first record carries the whole provenance, the later ones its
        -- query and run only
        assert.is_truthy(got[1]:find('"provenance":{"agent":', 1, true))
        assert.is_truthy(got[2]:find('"provenance":{"query":"', 1, true))
        -- the engine wrote every record before the last one (and with
        -- --trace none)
        assert.equals(11, count_in(lines_of(e.raw)[12]))
        assert.equals(0, count_in(lines_of(l.raw)[12]))
      end)
  end

  it("is the same when it outgrows the line buffer at each of its pieces", function()
    -- The buffer is 16 KB at first and the engine checks for room three
    -- times: for the head and the trajectory (at their longest), then for
    -- the stages, then for the stats; each case below runs out at one of
    -- them and has the engine say how much it needs before anything goes
    -- out. 40 hops: room for the head and the trajectory but not for the
    -- stages' bound; then a 24 KB answer: not for the head; 2,400 control
    -- characters (six bytes each escaped) and no hop: room for the stages
    -- but not for the stats (by a margin of ~100 characters either way:
    -- the first record's provenance is in the head).
    for _, c in ipairs({ { hops = "40", qs = { "plain", "long answer", "plain" } },
                         { hops = "0", qs = { "control 2400", "plain", "plain" } } }) do
      local lines = {}
      for i, q in ipairs(c.qs) do lines[i] = string.format('{"id":"q%d","query":"%s"}', i, q) end
      local e, l = both("grow" .. c.hops, lines, { "--concurrency", "1", "--max-hops", "60" }, { RL_HOPS = c.hops })
      assert.equals(0, e.status, e.err)
      assert.equals(l.text, e.text)
      local raw = lines_of(e.raw)
      assert.equals(3, #raw)
      assert.equals(2, count_in(raw[3]))
    end
  end)

  it("is the same at 64 queries in flight, records in input order", function()
    local lines = {}
    for i = 1, 200 do lines[i] = string.format('{"id":"q%d","query":"question %d"}', i, i) end
    local e, l = both("conc", lines, { "--concurrency", "64", "--k", "inf" }, { RL_HOPS = "3" })
    assert.equals(0, e.status, e.err)
    assert.equals(l.text, e.text)
    assert.equals(200, #lines_of(e.text))
    -- (the count each answer saw depends on which records were written by
    -- then; that some were is enough)
    local most = 0
    for _, line in ipairs(lines_of(e.raw)) do most = math.max(most, count_in(line)) end
    assert.is_true(most > 0)
  end)

  it("writes gold answers and answers that are not strings as the Lua record does, and leaves it the rest",
    function()
    -- gold and a table answer: written by the engine; bytes that are not
    -- UTF-8, a function, an answer nested too deep for the record (256
    -- levels inside it: 255 fit): the Lua record's error record
    local lines = {
      '{"id":"a","query":"plain"}',
      '{"id":"b","query":"plain","answer":"gold one","aliases":["g\\u00e9","\\"x\\""]}',
      '{"id":"c","query":"table answer"}',
      '{"id":"d","query":"bad utf8"}',
      '{"id":"f","query":"function answer"}',
      '{"id":"g","query":"deep 255"}',
      '{"id":"h","query":"deep 256"}',
      '{"id":"e","query":"plain"}',
    }
    local e, l = both("odd", lines, { "--concurrency", "1", "--k", "2" }, { RL_HOPS = "2" })
    assert.equals(l.status, e.status)
    assert.equals(l.text, e.text)
    local got = lines_of(e.text)
    assert.equals(8, #got)
    local r = {}
    for i, line in ipairs(lines_of(e.raw)) do r[i] = H.json().decode(line) end
    assert.equals("gold one", r[2].gold[1])
    assert.equals(3, #r[2].gold)
    assert.equals("number", type(r[3].answer.n))
    for _, k in ipairs({ 4, 5, 7 }) do
      assert.is_truthy(r[k].error and r[k].error:find("cannot be written as JSON", 1, true), got[k])
    end
    assert.is_nil(r[6].error)
    -- the engine wrote a, b, c and g: e saw four
    local raw = lines_of(e.raw)
    assert.equals(0, count_in(raw[1]))
    assert.equals(4, count_in(raw[8]))
    -- and counted as failed in the run's figures, the others as data: the
    -- run's summary on stderr, as the Lua records' run says it
    local agent = H.tmpfile("rl_agent.lua", AGENT)
    local said = {}
    for _, trace in ipairs({ false, true }) do
      local out = H.tmpfile("rl_odd_again.jsonl")
      os.remove(out)
      local argv = { "run", agent, "--input", H.tmpfile("rl_odd.jsonl"), "--clock", "virtual", "--out", out,
                     "--concurrency", "1", "--k", "2" }
      if trace then
        argv[#argv + 1] = "--trace"
        argv[#argv + 1] = H.tmpfile("rl_odd_trace.json")
      end
      local st, _, err = H.specula(argv, { RL_HOPS = "2" })
      assert.equals(e.status, st, err)
      said[#said + 1] = err:match("specula: (%d+ queries %(%d+ failed%), %d+ hops[^\n]*)")
    end
    assert.equals("8 queries (3 failed), 10 hops", said[1] and said[1]:match("^[^;]*"))
    assert.equals(said[2], said[1])
  end)

  it("is the same in a --compare run, tagged with its configuration, and the table agrees", function()
    local lines = {}
    for i = 1, 30 do lines[i] = string.format('{"id":"q%d","query":"question %d"}', i, i) end
    lines[31] = '{"id":"g","query":"plain","answer":"gold"}'
    lines[32] = '{"id":"t","query":"table answer"}'
    local cmp = { "--compare", "sequential,spechop:k=2,spechop:k=inf", "--concurrency", "4" }
    -- answers without counts: the agreement table is the Lua records' one
    local e, l = both("cmp", lines, cmp, { RL_HOPS = "3", RL_NOCOUNT = "1" })
    assert.equals(0, e.status, e.err)
    assert.equals(l.text, e.text)
    assert.equals(3 * 32, #lines_of(e.text))
    assert.is_truthy(e.text:find('"config":"spechop:k=2"', 1, true))
    assert.is_truthy(e.out:find("agree", 1, true) or e.out:find("sequential", 1, true), e.out)
    assert.equals(l.out, e.out)
    -- a resumed comparison reads the first records back from --out (their
    -- agreement text encoded from the record read) and pairs them with
    -- records the engine writes: the same table as the whole run's
    local agent = H.tmpfile("rl_agent.lua", AGENT)
    local input = H.tmpfile("rl_cmp.jsonl")
    local part = H.tmpfile("rl_cmp_part.jsonl")
    local f = assert(io.open(part, "w"))
    f:write(table.concat(lines_of(e.raw), "\n", 1, 12), "\n")
    f:close()
    local argv = { "run", agent, "--input", input, "--clock", "virtual", "--out", part, "--quiet" }
    for _, x in ipairs(cmp) do argv[#argv + 1] = x end
    local st, out, err = H.specula(argv, { RL_HOPS = "3", RL_NOCOUNT = "1" })
    assert.equals(0, st, err)
    -- (the resuming process's first record carries the whole provenance again)
    assert.equals(3 * 32, #lines_of(H.read(part)))
    local function agreement(t) return t:match("\nspechop:k=2 [^\n]-(%d+%.%d%%)") end
    assert.equals("100.0%", agreement(e.out))
    assert.equals(agreement(e.out), agreement(out))
    -- and with counts: the engine wrote them (the last query of the last
    -- configuration saw the records before it)
    e = both("cmp2", lines, cmp, { RL_HOPS = "3" })
    assert.equals(0, e.status, e.err)
    local most = 0
    for _, line in ipairs(lines_of(e.raw)) do most = math.max(most, count_in(line) or 0) end
    assert.is_true(most >= 60, "records the engine wrote before the last: " .. most)
  end)

  it("carries its shard as the Lua record does (--shard, alone and with --compare)", function()
    local lines = {}
    for i = 1, 20 do lines[i] = string.format('{"id":"q%d","query":"question %d"}', i, i) end
    for _, c in ipairs({ { cmp = false, args = { "--shard", "1/3", "--seed", "7", "--concurrency", "1" } },
                         { cmp = true, args = { "--shard", "2/3", "--compare", "sequential,spechop:k=2",
                                                "--concurrency", "3" } } }) do
      local e, l = both("shard", lines, c.args, { RL_HOPS = "2", RL_NOCOUNT = c.cmp and "1" or nil })
      assert.equals(0, e.status, e.err)
      assert.equals(l.text, e.text)
      local got = lines_of(e.raw)
      assert.equals(c.cmp and 12 or 7, #got)
      local r = H.json().decode(got[#got])
      assert.equals(3, r.shard.count)
      assert.equals(20, r.shard.of)
      if not c.cmp then
        assert.equals(7, r.shard.seed)
        assert.equals(6, count_in(got[7]))
      end
    end
  end)

  it("is scrubbed of a secret the run knows, as the Lua record is", function()
    local secret = "sk-linetest-0123456789abcdef"
    local lines = { '{"id":"a","query":"secret"}', '{"id":"b","query":"secret"}' }
    local e, l = both("secret", lines, { "--concurrency", "1", "--secret-env", "RL_SECRET" },
                      { RL_HOPS = "1", RL_SECRET = secret })
    assert.equals(0, e.status, e.err)
    assert.equals(l.text, e.text)
    assert.is_falsy(e.text:find(secret, 1, true))
    assert.is_truthy(e.text:find('"answer":"key ', 1, true))
  end)

  it("goes to stdout the same way", function()
    local agent = H.tmpfile("rl_agent.lua", AGENT)
    local input = H.tmpfile("rl_stdout.jsonl", '{"id":"a","query":"plain"}\n{"id":"b","query":"plain"}\n')
    local st, out, err = H.specula({ "run", agent, "--input", input, "--clock", "virtual", "--out", "-", "--quiet",
                                     "--concurrency", "1" }, { RL_HOPS = "2" })
    assert.equals(0, st, err)
    local got = lines_of(out)
    assert.equals(2, #got)
    assert.equals(1, count_in(got[2]))
    local file = H.tmpfile("rl_stdout_out.jsonl")
    os.remove(file)
    st, _, err = H.specula({ "run", agent, "--input", input, "--clock", "virtual", "--out", file, "--quiet",
                             "--concurrency", "1" }, { RL_HOPS = "2" })
    assert.equals(0, st, err)
    assert.equals(H.read(file), out)
  end)

  it("is resumed from like any record: a run cut short and resumed writes the same file", function()
    local lines = {}
    for i = 1, 30 do lines[i] = string.format('{"id":"q%d","query":"question %d"}', i, i) end
    local input = H.tmpfile("rl_resume.jsonl", table.concat(lines, "\n") .. "\n")
    local agent = H.tmpfile("rl_agent.lua", AGENT)
    local whole, part = H.tmpfile("rl_whole.jsonl"), H.tmpfile("rl_part.jsonl")
    os.remove(whole)
    os.remove(part)
    local base = { "run", agent, "--input", input, "--clock", "virtual", "--quiet", "--concurrency", "1" }
    local function run(out)
      local argv = { unpack(base) }
      argv[#argv + 1] = "--out"
      argv[#argv + 1] = out
      return H.specula(argv, { RL_HOPS = "2" })
    end
    local st, _, err = run(whole)
    assert.equals(0, st, err)
    -- the first 10 lines of the whole run, then a resume
    local t = lines_of(H.read(whole))
    local f = assert(io.open(part, "w"))
    f:write(table.concat(t, "\n", 1, 10), "\n")
    f:close()
    st, _, err = run(part)
    assert.equals(0, st, err)
    local p = lines_of(H.read(part))
    assert.equals(30, #p)
    -- records 11-30 come from the resuming process (its first record whole
    -- again): same answers, same trajectories
    for i = 1, 30 do
      local a, b = H.json().decode(t[i]), H.json().decode(p[i])
      assert.equals(a.id, b.id)
      assert.same(a.trajectory, b.trajectory)
      assert.same(a.stages, b.stages)
    end
  end)
end)
