-- The speculation window through the real binary on the simulated backend.
local H = require "support.helpers"
local cjson = require "cjson"

local SCRIPTS = H.root .. "/spec/functional/scripts/"

local function lines_json(out)
  local r = {}
  for line in out:gmatch("[^\n]+") do
    if line:sub(1, 1) == "{" then r[#r + 1] = cjson.decode(line) end
  end
  return r
end

describe("speculation window", function()
  it("is lossless: 1,000 random queries match the sequential run byte for byte #slow", function()
    local st, out, err = H.specula({ "run", SCRIPTS .. "lossless.lua", "1000", "11" })
    assert.equals(0, st, err)
    local checked, bad, committed = out:match("checked (%d+) queries, (%d+) mismatches, (%d+) committed")
    assert.is_true(tonumber(checked) >= 1000)
    assert.equals(0, tonumber(bad), err)
    assert.is_true(tonumber(committed) > 100, "the property must exercise committed speculation")
    -- nothing left behind: tasks (the main one), timers, windows, and the
    -- Lua values the engine held for them (value-store slots)
    assert.matches("left tasks=1 timers=0 windows=0 values=0", out, 1, true)
  end)

  describe("matches the theory (alpha 0.2, beta 0.15, N 30, 200 queries) #timing", function()
    local function star(p) return 1 - p * 0.8 / 1.15 end
    for _, p in ipairs({ 0.3, 0.7 }) do
      it("p = " .. p, function()
        local st, out, err = H.specula({ "run", SCRIPTS .. "theory.lua", tostring(p), "1", "1", "2", "inf" })
        assert.equals(0, st, err)
        local r = lines_json(out)
        local k1, k2, kinf = r[1], r[2], r[3]
        assert.equals(0, k1.failed + k2.failed + kinf.failed)
        assert.is_true(math.abs(k1.rel_lat - 1) <= 0.01, "k=1 RelLat " .. k1.rel_lat)
        -- k = inf reaches RelLat* (at the measured p, alpha, beta; the nominal value is printed too)
        local gap = math.abs(kinf.rel_lat - kinf.rel_lat_star_measured)
        assert.is_true(gap <= 0.03, string.format("k=inf RelLat %.4f vs RelLat* %.4f (nominal %.4f)",
          kinf.rel_lat, kinf.rel_lat_star_measured, star(p)))
        assert.is_true(math.abs(kinf.p_hat - p) < 0.05)
        -- k = 2 strictly in between
        assert.is_true(k2.rel_lat < k1.rel_lat - 0.005 and k2.rel_lat > kinf.rel_lat + 0.005,
          string.format("k=2 %.4f not between %.4f and %.4f", k2.rel_lat, k1.rel_lat, kinf.rel_lat))
      end)
    end
    it("m = 3 candidates beat the single-chain bound RelLat*(p_top1)", function()
      -- p_any = 0.7, the true value is top-1 half the time: p_top1 = 0.35
      local st, out, err = H.specula({ "run", SCRIPTS .. "theory.lua", "0.7", "3", "inf" })
      assert.equals(0, st, err)
      local r = lines_json(out)[1]
      local bound = 1 - 0.35 * (1 - r.alpha_hat) / (1 + r.beta_hat)
      assert.is_true(r.rel_lat < bound - 0.02, string.format("m=3 RelLat %.4f vs RelLat*(p_top1) %.4f", r.rel_lat, bound))
    end)
  end)

  it("replays a recorded run at its own k within 0.02 #timing", function()
    local q = H.tmpfile("q.jsonl", (function()
      local t = {}
      for i = 1, 40 do t[i] = cjson.encode({ id = "r" .. i, query = "replay " .. i }) end
      return table.concat(t, "\n") .. "\n"
    end)())
    local trace = H.tmpfile("trace.json")
    local out_path = H.tmpfile("res.jsonl")
    local st, _, err = H.specula({ "run", H.root .. "/examples/multihop_sim.lua", "--input", q, "--k", "3",
      "--trace", trace, "--out", out_path, "--concurrency", "40" })
    assert.equals(0, st, err)
    local recs = H.jsonl(H.read(out_path))
    local wall, std = 0, 0
    for _, r in ipairs(recs) do wall, std = wall + r.stats.wall_ms, std + r.stats.standard_ms end
    local measured = wall / std
    local st2, out2, err2 = H.specula({ "replay", trace, "--k", "1,3,inf", "--json" })
    assert.equals(0, st2, err2)
    local rows = lines_json(out2)
    local at = {}
    for _, r in ipairs(rows) do at[tostring(r.k)] = r.rel_lat end
    assert.is_true(math.abs(at["1"] - 1) < 1e-9)
    assert.is_true(math.abs(at["3"] - measured) <= 0.02, string.format("replay %.4f vs measured %.4f", at["3"], measured))
    assert.is_true(at["inf"] <= at["3"] + 1e-9)
    -- the results file is a replay input too
    local st3, out3 = H.specula({ "replay", out_path, "--k", "3", "--json" })
    assert.equals(0, st3)
    assert.is_true(math.abs(lines_json(out3)[1].rel_lat - at["3"]) < 1e-6)
  end)

  it("writes a Chrome trace that trace viewers accept", function()
    local trace = H.tmpfile("t2.json")
    local st, _, err = H.specula({ "run", H.root .. "/examples/multihop_sim.lua", "--query", "q", "--k", "3", "--trace", trace })
    assert.equals(0, st, err)
    local t = cjson.decode(H.read(trace))
    assert.is_table(t.traceEvents)
    local names, phs = {}, {}
    for _, e in ipairs(t.traceEvents) do
      assert.is_string(e.name)
      assert.is_true(e.ph == "X" or e.ph == "i" or e.ph == "M", "bad ph " .. tostring(e.ph))
      assert.is_number(e.pid)
      assert.is_number(e.tid)
      if e.ph ~= "M" then assert.is_number(e.ts) end
      if e.ph == "X" then assert.is_true(type(e.dur) == "number" and e.dur >= 0) end
      if e.ph == "i" then assert.is_true(e.s == "t" or e.s == "p" or e.s == "g") end
      names[e.name] = true
    end
    for _, n in ipairs({ "model", "spec", "target", "verify", "thread_name", "process_name" }) do
      assert.is_true(names[n], "no " .. n .. " events")
    end
    assert.equals(1, t.specula.version)
    assert.is_true(#t.specula.queries[1].hops >= 3)
  end)

  it("cancels discarded work on the wire at every rollback", function()
    local server = H.server()
    local st, out, err = H.specula({ "run", SCRIPTS .. "cancel.lua", server.base })
    server.stop()
    assert.equals(0, st, err)
    local r = lines_json(out)[1]
    assert.equals(0, r.failed)
    assert.is_true(r.rollbacks >= 20 and r.speculative_launches >= 20)
    assert.is_true(r.cancelled >= 20)
    assert.equals(0, r.stall_open_after)
    assert.equals(0, r.transfers_after)
    assert.equals(0, r.timers_after)
    -- never more stalled speculative transfers than live speculative threads (20 queries x 3)
    assert.is_true(r.max_stall_during <= 60, "stalled transfers piled up: " .. r.max_stall_during)
  end)

  it("never launches a forbidden tool from an unverified state", function()
    local st, out, err = H.specula({ "run", SCRIPTS .. "eligibility.lua" })
    assert.equals(0, st, err)
    local r = lines_json(out)[1]
    assert.equals(r.total, r.same)
    assert.equals(0, r.tool_saw_speculative)
    assert.equals(0, r.core_send_full)
    assert.is_true(r.core_send_forbid > 0)
    assert.is_true(r.core_search_full > 0)
    assert.equals(r.send_calls_seq, r.send_calls_spec)
    assert.is_true(r.commits > 0)
  end)

  it("a call for an unverified state sees ctx.speculative, one on the true path does not", function()
    local st, out, err = H.specula({ "run", SCRIPTS .. "specflag.lua" })
    assert.equals(0, st, err)
    local r = lines_json(out)[1]
    assert.equals(r.total, r.same)
    -- sequentially: 5 steps and 4 calls a query, none speculative
    assert.same({ step_spec = 0, step_true_path = 100, call_spec = 0, call_true_path = 80 }, r.seq)
    -- at k = inf every guess is wrong: the true path is the sequential one,
    -- and the threads started from the guesses are all speculative
    assert.equals(100, r.spec.step_true_path)
    assert.equals(80, r.spec.call_true_path)
    assert.is_true(r.spec.step_spec > 0)
    assert.is_true(r.spec.call_spec > 0)
  end)

  -- a step ctx holds four fields of its own and reads the query's and the
  -- run's through its metatable (a query in flight holds one a live thread)
  it("every call of a query reads the same ctx fields, speculative or on the true path", function()
    local input = H.tmpfile("ctxfields_q.jsonl", '{"id":"a","query":"qa","max_hops":9,"extra":1}\n'
      .. '{"id":"b","query":"qb"}\n{"id":"c","query":"qc","max_hops":8}\n')
    for _, mode in ipairs({ { "--k", "inf" }, { "--k", "2" }, { "--mode", "sequential" } }) do
      local out = H.tmpfile("ctxfields.jsonl")
      os.remove(out)
      local st, _, err = H.specula({ "run", SCRIPTS .. "ctxfields.lua", "--input", input, "--out", out, mode[1],
        mode[2], "--set", "x=1", "--seed", "7", "--clock", "virtual", "--quiet" })
      assert.equals(0, st, err)
      local recs = {}
      for line in io.lines(out) do recs[#recs + 1] = cjson.decode(line) end
      assert.equals(3, #recs)
      local spec = mode[2] ~= "sequential"
      for _, r in ipairs(recs) do
        assert.is_nil(r.error, mode[2] .. ": " .. tostring(r.error))
        -- the speculator is wrong on odd hops: threads ran ahead on guesses
        -- and rolled back, and the answer is the sequential one
        assert.equals(r.query .. " r5 spec=" .. tostring(spec) .. " true=true", r.answer)
        if spec then assert.is_true(r.stats.rollbacks > 0) end
      end
    end
  end)

  -- the window keeps a hop's reason in one text per query, a run of the
  -- same reason stored once: every hop must still read back its own
  it("each hop's record keeps its own verifier reason (repeated, none, non-ASCII, long, not UTF-8)", function()
    local qs, expect = { "a", "bb", "ccc", "bad" }, {}
    local lines = {}
    for _, q in ipairs(qs) do lines[#lines + 1] = cjson.encode({ id = q, query = q }) end
    local out = H.tmpfile("reasons.jsonl")
    os.remove(out)
    local st, _, err = H.specula({ "run", SCRIPTS .. "reasons.lua", "--input", H.tmpfile("reasons_q.jsonl",
      table.concat(lines, "\n") .. "\n"), "--out", out, "--k", "2", "--clock", "virtual", "--quiet" })
    assert.equals(0, st, err)
    local recs = {}
    for _, r in ipairs(H.jsonl(H.read(out))) do recs[r.id] = r end
    for _, q in ipairs(qs) do
      local hops = recs[q].stages.hops
      assert.equals(14, #hops, q)
      for i, h in ipairs(hops) do
        local hop = i - 1
        local ok = (hop + #q) % 3 ~= 0
        local want
        if not ok then want = "mismatch at hop " .. hop .. ": " .. string.rep("ü", hop)
        elseif q == "bad" and hop == 5 then want = "bad \239\191\189 byte"   -- cleaned to U+FFFD
        elseif hop % 4 == 1 then want = "accepted"
        elseif hop % 4 == 2 then want = "equal é " .. string.rep("x", 40 * hop)
        else want = "eq" end
        assert.equals(ok and "accepted" or "rejected", h.spec, q .. " hop " .. hop)
        assert.equals(want, h.reason, q .. " hop " .. hop)
      end
    end
  end)

  describe("bad input ends the query with a clear message", function()
    local q = function()
      return H.tmpfile("bad.jsonl", '{"id":"good","query":"a"}\n{"id":"bad","query":"b"}\n{"id":"good2","query":"c"}\n')
    end
    local function run_case(name, extra)
      local out = H.tmpfile(name .. ".jsonl")
      local args = { "run", SCRIPTS .. "agents.lua", "--set", "case=" .. name, "--input", q(), "--out", out, "--k", "3", "--quiet" }
      for _, a in ipairs(extra or {}) do args[#args + 1] = a end
      local st, _, err = H.specula(args)
      local recs = {}
      for _, r in ipairs(H.jsonl(H.read(out) or "")) do recs[r.id] = r end
      return st, recs, err
    end

    it("a malformed step names the script and line; other queries finish", function()
      local st, r = run_case("malformed")
      assert.equals(3, st)
      assert.matches("step %(.-agents.lua:%d+%) returned no action and no final", r.bad.error)
      assert.not_matches("stack traceback", r.bad.error)
      assert.is_nil(r.good.error)
      assert.is_string(r.good2.answer)
    end)

    it("an update that mutates its input is caught in --debug", function()
      local st, r = run_case("mutate", { "--debug" })
      assert.equals(3, st)
      assert.matches("update %(.-agents.lua:%d+%) mutated its input state", r.good.error)
    end)

    it("a raising verifier counts as a failed speculation", function()
      local st, r = run_case("verifier_error")
      assert.equals(0, st)
      assert.is_string(r.good.answer)
      assert.equals(0, r.good.stats.commits)
      assert.matches("verifier error: .*verifier exploded", r.good.stages.hops[1].reason)
    end)

    -- before, a verifier that raised on every hop was silent: speculation
    -- that never paid, with nothing on stderr to say why
    it("a raising verifier is said once on stderr, naming its script and line; every query keeps its record", function()
      os.remove(H.tmpfile("verifier_error.jsonl"))   -- the case above wrote it: a second run would resume
      local st, r, err = run_case("verifier_error")
      assert.equals(0, st, err)
      local n = 0
      for _ in err:gmatch("specula: warning: the verifier raised: [^\n]-agents%.lua:%d+: verifier exploded; each hop it "
        .. "raised on counts as a rejection") do n = n + 1 end
      assert.equals(1, n, err)
      assert.is_string(r.good.answer)
      assert.is_string(r.good2.answer)
      assert.is_true(r.good.stats.rollbacks > 0)
    end)

    it("a raising speculator counts as a failed speculation", function()
      local st, r = run_case("spec_error")
      assert.equals(0, st)
      assert.is_string(r.good.answer)
      assert.equals("error", r.good.stages.hops[1].spec)
      -- the reason keeps the speculator's own message
      assert.matches("^speculator failed: .*speculator exploded", r.good.stages.hops[1].reason)
    end)

    it("a speculator slower than --spec-timeout counts as failed", function()
      local st, r = run_case("spec_slow", { "--spec-timeout", "3" })
      assert.equals(0, st)
      assert.is_string(r.good.answer)
      assert.equals("error", r.good.stages.hops[1].spec)
      assert.matches("speculator failed: speculator timed out after 3 ms", r.good.stages.hops[1].reason)
    end)

    it("counts every discarded speculative call as wasted, with or without a declared cost", function()
      -- p = 0: every guess is wrong, so every speculative target call is thrown away
      local st, r = run_case("wasted_nocost", { "--k", "inf" })
      assert.equals(0, st)
      local s = r.good.stats
      assert.is_true(s.speculative_launches > 0)
      assert.is_true(s.wasted_calls > 0, "wasted " .. s.wasted_calls .. " of " .. s.speculative_launches)
      assert.equals(0, s.wasted_cost)
      assert.is_true(s.wasted_calls <= s.speculative_launches)
    end)

    it("a raising tool ends that query with its message", function()
      local st, r = run_case("tool_error")
      assert.equals(3, st)
      assert.matches("agents.lua:%d+: search backend is down", r.bad.error)
      assert.is_string(r.good.answer)
    end)

    it("an unknown tool is reported with the known ones", function()
      local st, r = run_case("unknown_tool")
      assert.equals(3, st)
      assert.matches("chose unknown tool 'nope' %(known: search%)", r.bad.error)
    end)
  end)

  it("chooses k from the live estimates with --k auto #timing", function()
    local out = H.tmpfile("auto.jsonl")
    local q = H.tmpfile("qa.jsonl", (function()
      local t = {}
      for i = 1, 30 do t[i] = cjson.encode({ id = "a" .. i, query = "auto " .. i }) end
      return table.concat(t, "\n") .. "\n"
    end)())
    local st, _, err = H.specula({ "run", H.root .. "/examples/multihop_sim.lua", "--input", q, "--k", "auto", "--out", out, "--concurrency", "30" })
    assert.equals(0, st, err)
    local ks = {}
    for _, r in ipairs(H.jsonl(H.read(out))) do ks[#ks + 1] = r.stats.k end
    -- alpha ~0.16, beta ~0.15, nu ~0.4 => Cor. 5 gives about 6
    local last = ks[#ks]
    assert.is_number(last)
    assert.is_true(last >= 4 and last <= 9, "k auto chose " .. tostring(last))
  end)
end)
