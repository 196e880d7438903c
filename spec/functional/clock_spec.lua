-- The eager schedule, the virtual clock and exact replay (docs/architecture.md#the-clocks, docs/cli.md#clocks-and-schedules).
local H = require "support.helpers"
local cjson = require "cjson"
local SCRIPTS = H.root .. "/spec/functional/scripts/"

local last_json = H.last_json

local function replay(file, args)
  local argv = { "replay", file, "--json" }
  for _, a in ipairs(args or {}) do argv[#argv + 1] = a end
  local st, out, err = H.specula(argv)
  local rows = {}
  for l in out:gmatch("[^\n]+") do rows[#rows + 1] = cjson.decode(l) end
  return st, rows, err
end

describe("the virtual clock", function()
  it("commits what the real clock commits (200 queries x 3 configurations) and equals the event model #timing", function()
    local dir = H.tmpdir()
    local st, out, err = H.specula({ "run", SCRIPTS .. "clock_compare.lua", "200", dir })
    assert.equals(0, st, err)
    local r = last_json(out)
    assert.equals(3, #r.configs)
    for _, c in ipairs(r.configs) do
      local what = c.launch .. " k=" .. tostring(c.k)
      assert.equals(0, c.differ, what .. ": hops, verdicts, rollbacks or answers differ: "
        .. cjson.encode(r.example or {}))
      assert.equals("real", c.clock_after, "specula.run must give the caller's clock back")
      assert.is_true(c.commits > 100 and c.rollbacks > 50, what)
      -- the event-level model of the same draws: the replay of the run's own records
      local rst, rows = replay(c.file, { "--k", tostring(c.k) })
      assert.equals(0, rst)
      assert.is_true(math.abs(rows[1].rel_lat - c.rel_lat) <= 0.001,
        string.format("%s: virtual %.5f, event model %.5f", what, c.rel_lat, rows[1].rel_lat))
      assert.equals(c.launch, rows[1].spec_launch)
      -- simulated time is not waited for
      assert.is_true(c.virt_ms < c.virtual_wall_ms / 50, what .. ": virtual run took " .. c.virt_ms .. " ms")
    end
  end)

  it("reports virtual milliseconds in records and traces, and runs with --input/--concurrency/--trace", function()
    local q = H.tmpfile("vq.jsonl", '{"id":"a","query":"x"}\n{"id":"b","query":"y"}\n')
    local out, trace = H.tmpfile("v.jsonl"), H.tmpfile("v.json")
    local st, _, err = H.specula({ "run", H.root .. "/examples/multihop_sim.lua", "--input", q, "--clock", "virtual",
      "--out", out, "--trace", trace, "--concurrency", "2", "--k", "3", "--quiet" })
    assert.equals(0, st, err)
    local recs = H.jsonl(H.read(out))
    assert.equals(2, #recs)
    for _, r in ipairs(recs) do
      -- hops of ~100 ms simulated: the wall time is the simulated one
      assert.is_true(r.stats.wall_ms > 100, "wall_ms " .. r.stats.wall_ms)
      assert.equals("eager", r.stats.spec_launch)
      assert.equals(1, r.stats.m)
    end
    local tr = cjson.decode(H.read(trace))
    assert.is_true(#tr.traceEvents > 10)
    local rst, rows = replay(trace, { "--k", "3" })
    assert.equals(0, rst)
    local sum_w, sum_s = 0, 0
    for _, r in ipairs(recs) do sum_w, sum_s = sum_w + r.stats.wall_ms, sum_s + r.stats.standard_ms end
    assert.is_true(math.abs(rows[1].rel_lat - sum_w / sum_s) <= 0.001)
  end)

  it("refuses real I/O with an error that names the call", function()
    local server = H.server()
    local script = H.tmpfile("vio.lua", [[
      local specula = require "specula"
      return specula.agent {
        init = function(q) return { n = 0 } end,
        step = function(s) if s.n > 0 then return { final = "x" } end
          return { action = { tool = "get", args = {} } } end,
        update = function(s) return { n = s.n + 1 } end,
        tools = { get = function() local r, e = specula.http.request { url = "]] .. server.base .. [[/text?key=SECRET1" }
          if not r then error(e, 0) end return r.body end },
      }
    ]])
    local st, out, err = H.specula({ "run", script, "--query", "q", "--clock", "virtual" })
    server.stop()
    assert.equals(3, st, err)
    local r = cjson.decode(out:match("{.*}"))
    assert.matches("real I/O under the virtual clock: GET http://127%.0%.0%.1:%d+/text", r.error)
    assert.is_nil(r.error:find("SECRET1", 1, true), "the query string (a key may be there) is left out")
  end)
end)

describe("specula theory's event model", function()
  it("follows the launch choice: eager beats slot at small k, k = 1 is sequential", function()
    local function ev(args)
      local argv = { "theory", "--p", "0.68", "--alpha", "0.19", "--beta", "0.10", "--json" }
      for _, a in ipairs(args) do argv[#argv + 1] = a end
      local st, out, err = H.specula(argv)
      assert.equals(0, st, err)
      return cjson.decode(out)
    end
    local e2, s2 = ev({ "--k", "2" }), ev({ "--k", "2", "--spec-launch", "slot" })
    assert.equals("eager", e2.spec_launch)
    assert.equals("slot", s2.spec_launch)
    assert.is_true(e2.rel_lat_event < s2.rel_lat_event - 0.01, e2.rel_lat_event .. " vs " .. s2.rel_lat_event)
    assert.equals(1, ev({ "--k", "1" }).rel_lat_event)
    -- unbounded k approaches the oracle bound (Cor. 1) from above
    local inf = ev({ "--k", "inf" })
    assert.is_true(inf.rel_lat_event >= inf.rel_lat_star and inf.rel_lat_event < inf.rel_lat_star + 0.06)
    local st, _, err = H.specula({ "theory", "--p", "0.5", "--alpha", "0.2", "--beta", "0.1", "--spec-launch", "soon" })
    assert.equals(2, st)
    assert.matches("--spec-launch must be eager or slot", err, 1, true)
  end)
end)

describe("one estimator", function()
  it("gives the same p_hat, alpha_hat, beta_hat in the run, the report's reader and replay", function()
    local dir = H.tmpdir()
    local script = H.tmpfile("est.lua", [[
      local specula = require "specula"
      local json = specula.json
      local agent = specula.sim.multihop { hops = 8, p = 0.6, seg = 5, spec = { "uniform", 5, 15 },
        target = { "uniform", 20, 60 } }
      -- a speculator that fails on some hops: failures count against p
      local S = agent.tools.search.speculate
      agent.tools.search.speculate = function(args, ctx)
        if specula.sim.draw(ctx, "boom") < 0.2 then error("speculator down") end
        return S(args, ctx)
      end
      local qs = {}
      for i = 1, 60 do qs[i] = "est " .. i end
      local recs, agg = specula.run(agent, { queries = qs, k = 3, clock = "virtual" })
      local path = arg[1] .. "/est.jsonl"
      local f = assert(io.open(path, "w"))
      local errors = 0
      for _, r in ipairs(recs) do f:write(json.encode(r), "\n"); errors = errors + r.stats.verify.errors end
      f:close()
      local p, a, b = specula.estimate.of_records(recs)
      print(json.encode({ run = { agg.p_hat, agg.alpha_hat, agg.beta_hat }, reader = { p, a, b },
                          errors = errors, file = path }))
    ]])
    local st, out, err = H.specula({ "run", script, dir })
    assert.equals(0, st, err)
    local r = last_json(out)
    assert.is_true(r.errors > 10, "the speculator must fail sometimes")
    local rst, rows = replay(r.file, { "--k", "3" })
    assert.equals(0, rst)
    local rep = { rows[1].p_hat, rows[1].alpha_hat, rows[1].beta_hat }
    for i = 1, 3 do
      assert.near(r.run[i], r.reader[i], 1e-6)
      assert.near(r.run[i], rep[i], 1e-6)
    end
  end)
end)

describe("replay", function()
  it("replays an m = 3 results file as m = 3, equal to the live run (both launch modes)", function()
    local dir = H.tmpdir()
    local script = H.tmpfile("m3.lua", [[
      local specula = require "specula"
      local json = specula.json
      local agent = specula.sim.multihop { hops = 12, m = 3, rank = { 0.5, 0.3, 0.2 }, p = 0.8,
        seg = { "lognormal", 6, 0.3 }, spec = { "lognormal", 12, 0.3 }, target = { "lognormal", 60, 0.3 } }
      local qs = {}
      for i = 1, 40 do qs[i] = "m3 query " .. i end
      local out = {}
      for _, l in ipairs({ "eager", "slot" }) do
        local recs, agg = specula.run(agent, { queries = qs, k = 3, m = 3, spec_launch = l, clock = "virtual" })
        local path = arg[1] .. "/m3_" .. l .. ".jsonl"
        local f = assert(io.open(path, "w"))
        for _, r in ipairs(recs) do f:write(json.encode(r), "\n") end
        f:close()
        out[l] = { rel_lat = agg.rel_lat, file = path }
      end
      print(json.encode(out))
    ]])
    local st, out, err = H.specula({ "run", script, dir })
    assert.equals(0, st, err)
    local live = last_json(out)
    for _, l in ipairs({ "eager", "slot" }) do
      local rst, rows = replay(live[l].file, { "--k", "3" })
      assert.equals(0, rst)
      assert.is_true(math.abs(rows[1].rel_lat - live[l].rel_lat) <= 0.001,
        string.format("%s: live %.4f, replay %.4f", l, live[l].rel_lat, rows[1].rel_lat))
      -- and as m = 1 it would be slower: the m actually mattered
    end
    assert.is_true(live.eager.rel_lat < live.slot.rel_lat, "eager must beat slot at k = 3")
  end)

  it("refuses to re-speculate a recording that has no speculator stages", function()
    local out = H.tmpfile("seq.jsonl")
    local st, _, err = H.specula({ "run", H.root .. "/examples/multihop_sim.lua", "--query", "q", "--mode",
      "sequential", "--clock", "virtual", "--out", out, "--quiet" })
    assert.equals(0, st, err)
    local rst, _, rerr = H.specula({ "replay", out, "--k", "3" })
    assert.equals(2, rst)
    assert.matches("has no speculator stages", rerr)
    -- k = 1 (the recorded schedule) still replays
    local ok = H.specula({ "replay", out, "--k", "1" })
    assert.equals(0, ok)
  end)

  it("replays one configuration of a --compare run at a time, equal to that configuration's own run", function()
    local q = H.tmpfile("cfg_q.jsonl", '{"id":"a","query":"q1"}\n{"id":"b","query":"q2"}\n{"id":"c","query":"q3"}\n')
    local both, single = H.tmpfile("cfg_both.jsonl"), H.tmpfile("cfg_single.jsonl")
    os.remove(both)
    os.remove(single)
    local st, _, err = H.specula({ "run", H.root .. "/examples/multihop_sim.lua", "--input", q, "--clock", "virtual",
      "--compare", "sequential,spechop:k=2", "--out", both, "--quiet" })
    assert.equals(0, st, err)
    st, _, err = H.specula({ "run", H.root .. "/examples/multihop_sim.lua", "--input", q, "--clock", "virtual",
      "--k", "2", "--out", single, "--quiet" })
    assert.equals(0, st, err)
    -- mixed: refused, naming the configurations
    local rst, _, rerr = H.specula({ "replay", both })
    assert.equals(2, rst)
    assert.matches("holds the records of 2 configurations (sequential, spechop:k=2): replay one at a time "
      .. "with --config NAME", rerr, 1, true)
    local nst, _, nerr = H.specula({ "replay", both, "--config", "spechop:k=3" })
    assert.equals(2, nst)
    assert.matches("no record of configuration 'spechop:k=3' (it holds: sequential, spechop:k=2)", nerr, 1, true)
    -- one configuration: the same table as the run that had it alone
    local cst, crows, cerr = replay(both, { "--config", "spechop:k=2", "--k", "1,2,inf" })
    assert.equals(0, cst, cerr)
    local sst, srows = replay(single, { "--k", "1,2,inf" })
    assert.equals(0, sst)
    assert.same(srows, crows)
    assert.equals(3, crows[1].queries)
    local qst, _, qerr = H.specula({ "replay", both, "--config", "sequential", "--k", "1" })
    assert.equals(0, qst, qerr)
  end)

  it("leaves failed queries out (results and trace), says so, and fails when nothing else is left", function()
    -- "bad" fails at its second hop under spechop only: its stage times stop there
    local agent = H.tmpfile("failing.lua", [[
      local specula = require "specula"
      return specula.agent {
        init = function() return { hop = 0 } end,
        step = function(s, ctx)
          specula.sleep(10)
          if ctx.id == "bad" and ctx.mode == "spechop" and s.hop == 1 then error("planned failure") end
          if s.hop >= 3 then return { final = "A" } end
          return { segment = "s", action = { tool = "t", args = { h = s.hop } } }
        end,
        update = function(s) return { hop = s.hop + 1 } end,
        tools = { t = { call = function(a) specula.sleep(100) return "o" .. a.h end,
                        speculate = function(a) specula.sleep(1) return "o" .. a.h end } },
        policy = { t = "full" },
      }
    ]])
    local q3 = H.tmpfile("fq3.jsonl", '{"id":"a","query":"q1"}\n{"id":"bad","query":"q2"}\n{"id":"c","query":"q3"}\n')
    local q2 = H.tmpfile("fq2.jsonl", '{"id":"a","query":"q1"}\n{"id":"c","query":"q3"}\n')
    local out3, trace3, out2 = H.tmpfile("f3.jsonl"), H.tmpfile("f3.trace.json"), H.tmpfile("f2.jsonl")
    os.remove(out3)
    os.remove(out2)
    local st, _, err = H.specula({ "run", agent, "--input", q3, "--clock", "virtual", "--compare",
      "sequential,spechop:k=2", "--out", out3, "--trace", trace3, "--quiet" })
    assert.equals(3, st, err)   -- a query failed
    st, _, err = H.specula({ "run", agent, "--input", q2, "--clock", "virtual", "--k", "2", "--out", out2, "--quiet" })
    assert.equals(0, st, err)
    local want_st, want = replay(out2, { "--k", "1,2" })
    assert.equals(0, want_st)
    for _, file in ipairs({ out3, trace3 }) do
      local rst, rows, rerr = replay(file, { "--config", "spechop:k=2", "--k", "1,2" })
      assert.equals(0, rst, rerr)
      assert.same(want, rows)   -- the two that answered, as if run alone
      assert.equals(2, rows[1].queries)
      assert.matches("1 failed query left out (the first: 'bad'): a failed query is no data point", rerr, 1, true)
      -- the baseline, where nothing failed, warns of nothing
      local bst, _, berr = replay(file, { "--config", "sequential", "--k", "1" })
      assert.equals(0, bst, berr)
      assert.not_matches("failed", berr, 1, true)
    end
    -- every query of the configuration failed: nothing to replay
    local q1 = H.tmpfile("fq1.jsonl", '{"id":"bad","query":"q2"}\n')
    local out1 = H.tmpfile("f1.jsonl")
    os.remove(out1)
    st, _, err = H.specula({ "run", agent, "--input", q1, "--clock", "virtual", "--compare",
      "sequential,spechop:k=2", "--out", out1, "--quiet" })
    assert.equals(3, st, err)
    local ast, _, aerr = H.specula({ "replay", out1, "--config", "spechop:k=2", "--k", "2" })
    assert.equals(1, ast, aerr)
    assert.matches("every query of configuration 'spechop:k=2' failed (1; the first: 'bad'): a failed query is no "
      .. "data point, so there is nothing to replay", aerr, 1, true)
  end)

  it("replays a --k auto run at the k values asked for (no one recorded k to reproduce)", function()
    local out = H.tmpfile("kauto.jsonl")
    local st, _, err = H.specula({ "run", H.root .. "/examples/multihop_sim.lua", "--input",
      H.tmpfile("kauto_q.jsonl", '{"id":"a","query":"q1"}\n{"id":"b","query":"q2"}\n{"id":"c","query":"q3"}\n'),
      "--k", "auto", "--clock", "virtual", "--out", out, "--quiet" })
    assert.equals(0, st, err)
    local rst, rows, rerr = replay(out, { "--k", "1,3,inf" })
    assert.equals(0, rst, rerr)
    assert.equals(3, #rows)
    assert.equals(1, rows[1].rel_lat)                         -- k = 1 is the standard schedule
    assert.is_true(rows[2].rel_lat < 1 and rows[3].rel_lat <= rows[2].rel_lat)
    for _, r in ipairs(rows) do assert.equals(3, r.queries) end
  end)
end)

describe("records written by the CLI", function()
  it("carry the stage times the API builds as tables, byte for byte (engine-written stages, C-written lines)", function()
    local dir = H.tmpdir()
    -- m = 3 (ranks, candidate counts), a speculator that fails with a
    -- message (reasons), sometimes with a byte that is not UTF-8 (the Lua
    -- path cleans those)
    local agent = H.tmpfile("stages_agent.lua", [[
      local specula = require "specula"
      local agent = specula.sim.multihop { hops = 6, p = 0.6, m = 3, rank = { 0.6, 0.3, 0.1 }, seg = 5,
        spec = { "uniform", 5, 15 }, target = { "uniform", 20, 60 } }
      local S = agent.tools.search.speculate
      agent.tools.search.speculate = function(args, ctx)
        local u = specula.sim.draw(ctx, "boom")
        if u < 0.1 then error("speculator down \255 here") end
        if u < 0.25 then error("speculator down") end
        return S(args, ctx)
      end
      return agent
    ]])
    local lines = {}
    for i = 1, 40 do lines[i] = string.format('{"id":"q%d","query":"stage question %d"}', i, i) end
    local input = H.tmpfile("stages_q.jsonl", table.concat(lines, "\n") .. "\n")
    local out = dir .. "/cli.jsonl"
    local st, _, err = H.specula({ "run", agent, "--input", input, "--clock", "virtual", "--mode", "spechop",
      "--k", "3", "--m", "3", "--out", out, "--quiet" })
    assert.equals(0, st, err)
    local script = H.tmpfile("stages_api.lua", [[
      local specula = require "specula"
      local json = require "specula.json"
      local agent = dofile(arg[1])
      local qs = {}
      for i = 1, 40 do qs[i] = { id = "q" .. i, query = "stage question " .. i } end
      local recs = specula.run(agent, { queries = qs, mode = "spechop", k = 3, m = 3, clock = "virtual" })
      for _, r in ipairs(recs) do
        assert(type(r.stages.hops) == "table", "the API keeps its stage tables")
        assert(r.provenance.input.format == "api", "the API's records say where they came from")
        r.provenance = nil   -- its input is the queries as given, not the file: compared without it
        io.write(json.canonical(r), "\n")
      end
    ]])
    local ast, aout, aerr = H.specula({ "run", script, agent })
    assert.equals(0, ast, aerr)
    local cli = H.read(out)
    assert.equals(40, select(2, cli:gsub("\n", "")))
    -- line by line: a failure names the first record that differs
    local api_lines = {}
    for l in aout:gmatch("[^\n]+") do api_lines[#api_lines + 1] = l end
    local i = 0
    for l in cli:gmatch("[^\n]+") do
      i = i + 1
      l = l:gsub('"provenance":%b{},', "", 1)   -- where the record came from (the API's differs in its input)
      if l ~= api_lines[i] then
        local at = 1
        while l:sub(at, at) == (api_lines[i] or ""):sub(at, at) do at = at + 1 end
        error(string.format("record %d differs at byte %d:\nCLI %s\nAPI %s", i, at, l:sub(math.max(1, at - 60), at + 60),
          (api_lines[i] or ""):sub(math.max(1, at - 60), at + 60)))
      end
    end
    assert.equals(#api_lines, i)
    -- the run went through every field the engine writes
    for _, f in ipairs({ '"rank":', '"ncands":', '"reason":"speculator failed', '"t_spec":',
                         "speculator down \239\191\189 here" }) do
      assert.is_truthy(cli:find(f, 1, true), f)
    end
  end)
end)

describe("start_jitter_ms", function()
  it("starts each query after a keyed share of it: the same delays for a seed, no result changed", function()
    -- under the virtual clock a start is an instant: each query's window
    -- starts at (run start + its delay), delays in [0, jitter), keyed by
    -- seed and id; the query's own record does not move (times here are
    -- from the earliest start)
    local script = H.tmpfile("jitter.lua", [[
      local specula = require "specula"
      local json = specula.json
      local agent = specula.agent {
        init = function(q, ctx) return { t0 = specula.now() } end,
        step = function(s, ctx)
          specula.sleep(10)
          return { final = ctx.id .. " " .. s.t0 }
        end,
        update = function(s) return s end,
      }
      local qs = {}
      for i = 1, 30 do qs[i] = { id = "q" .. i, query = "jitter " .. i } end
      local function starts(opts)
        opts.queries, opts.clock, opts.concurrency = qs, "virtual", 30
        local recs = specula.run(agent, opts)
        local out, first = {}, math.huge
        for i, r in ipairs(recs) do
          assert(r.error == nil, r.error)
          local id, t = r.answer:match("^(%S+) (%S+)$")
          assert(id == r.id)
          out[i] = tonumber(t)
          first = math.min(first, out[i])
          assert(r.stats.wall_ms == 10, "the query's own time moved: " .. tostring(r.stats.wall_ms))
        end
        -- (the virtual clock's origin is its own: starts from the earliest)
        for i = 1, #out do out[i] = out[i] - first end
        return out
      end
      print(json.encode({ none = starts({}), a = starts({ start_jitter_ms = 500, seed = 7 }),
        again = starts({ start_jitter_ms = 500, seed = 7 }), other = starts({ start_jitter_ms = 500, seed = 8 }) }))
    ]])
    local st, out, err = H.specula({ "run", script })
    assert.equals(0, st, err)
    local r = last_json(out)
    for i = 1, 30 do assert.equals(0, r.none[i]) end
    local spread, differ = {}, 0
    for i = 1, 30 do
      local d = r.a[i]
      assert.is_true(d >= 0 and d < 500, "delay " .. d)
      spread[math.floor(d / 100)] = true
      assert.equals(d, r.again[i], "the same seed and id: the same delay")
      if r.other[i] ~= d then differ = differ + 1 end
    end
    -- spread over the range, and another seed draws other delays
    local buckets = 0
    for _ in pairs(spread) do buckets = buckets + 1 end
    assert.is_true(buckets >= 4, "delays spread over [0, 500): " .. buckets .. " of 5 buckets")
    assert.is_true(differ >= 25, differ .. " of 30 delays differ with another seed")
  end)
end)
