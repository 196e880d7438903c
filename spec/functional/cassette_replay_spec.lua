-- A cassette replays the experiment, not only the run. One agent
-- (scripts/timed_agent.lua) spends its time in specula.sleep, over HTTP
-- (the test server's /hold), over MCP (the MCP test server's slow tool), in
-- a mix of the three, or computing (CPU), recorded at k = inf against the
-- live servers:
--  * a replay of the same configuration gives the recorded RelLat within
--    0.002 and every stage's mean within 2 %: the agent's own time is
--    never added on top of the recorded job time;
--  * a replay under another k, mode, m, spec-launch, policy or predictor is
--    served every request the recording answered and equals a live run of
--    that configuration within 0.02 RelLat, with the same answers, also
--    when several threads of a hop ask the very same request;
--  * a request the recording never answered is a miss at once (error,
--    skip, live), counted as one, never a wait.
local H = require "support.helpers"
local cjson = require "cjson"

local AGENT = H.root .. "/spec/functional/scripts/timed_agent.lua"
local TIMINGS = { "sleep", "http", "mcp", "mix", "cpu" }
-- the agents whose tools wait on an MCP server (the Node.js test server)
local ON_MCP = { mcp = true, mix = true }

local server, input
local counter = 0

local function env(timing, extra)
  local e = { CAS_BASE = server.base, CAS_TIMING = timing }
  for k, v in pairs(extra or {}) do e[k] = v end
  return e
end

-- A run that outlives this is a replay waiting for an answer that never
-- comes (a call the recording cancelled used to wait 10,000,000 ms).
local HANG_S = 600

-- specula run AGENT over the input with args; returns status, records by
-- id, stderr, the run's RelLat and mean stage times
local function run(timing, args, extra_env)
  counter = counter + 1
  local out = H.tmpdir() .. "/replay" .. counter .. ".jsonl"
  local parts = {}
  for k, v in pairs(env(timing, extra_env)) do parts[#parts + 1] = k .. "=" .. H.quote(v) end
  parts[#parts + 1] = "timeout " .. HANG_S
  if H.wrap and H.wrap ~= "" then parts[#parts + 1] = H.wrap end
  for _, x in ipairs({ H.bin, "run", AGENT, "--input", input, "--out", out }) do parts[#parts + 1] = H.quote(x) end
  for _, x in ipairs(args) do parts[#parts + 1] = H.quote(x) end
  local st, so, se = H.sh(table.concat(parts, " "))
  assert(st ~= 124, "the run did not end in " .. HANG_S .. " s: " .. table.concat(args, " "))
  local by, wall, std = {}, 0, 0
  local sum, n = { t_seg = 0, t_target = 0, t_spec = 0 }, { t_seg = 0, t_target = 0, t_spec = 0 }
  for _, r in ipairs(H.jsonl(H.read(out) or "")) do
    by[r.id] = r
    if r.stats then
      wall, std = wall + r.stats.wall_ms, std + r.stats.standard_ms
      for _, h in ipairs(r.stages.hops) do
        for k in pairs(sum) do
          if type(h[k]) == "number" and h[k] >= 0 then sum[k], n[k] = sum[k] + h[k], n[k] + 1 end
        end
      end
    end
  end
  local means = {}
  for k in pairs(sum) do means[k] = n[k] > 0 and sum[k] / n[k] or nil end
  return st, by, se .. so, std > 0 and wall / std or nil, means
end

local function same_answers(a, b, what)
  local n = 0
  for id, ra in pairs(a) do
    n = n + 1
    assert.is_not_nil(b[id], what .. ": " .. id .. " missing")
    assert.is_nil(b[id].error, what .. ": " .. tostring(b[id].error))
    assert.are.equal(ra.answer, b[id].answer, what .. " " .. id)
    assert.are.equal(cjson.encode(ra.trajectory), cjson.encode(b[id].trajectory), what .. " " .. id)
  end
  assert.are.equal(8, n)
end

-- the end-of-run line: served, not in it, on the committed path
local function counts(err)
  local served, missed, committed = err:match("cassette: (%d+) served from .-, (%d+) not in it %((%d+) on the committed")
  assert.is_not_nil(served, err)
  return tonumber(served), tonumber(missed), tonumber(committed)
end

describe("a replayed cassette", function()
  local tapes = {}
  -- the recording of (timing, variant), made by the first case that needs it
  local function tape(timing, extra_env)
    local name = timing .. cjson.encode(extra_env or {})
    local t = tapes[name]
    if not t then
      counter = counter + 1
      t = { dir = H.tmpdir() .. "/replay-tape" .. counter }
      local st, by, err, rel, means = run(timing, { "--k", "inf", "--record", t.dir }, extra_env)
      assert.are.equal(0, st, err)
      t.rec, t.rel, t.means = by, rel, means
      tapes[name] = t
    end
    return t
  end

  setup(function()
    server = H.server {}
    local lines = {}
    for i = 1, 8 do lines[i] = cjson.encode({ id = "q" .. i, query = "question " .. i }) end
    input = H.tmpfile("replay-in.jsonl", table.concat(lines, "\n") .. "\n")
  end)
  teardown(function() if server then server.stop() end end)

  -- tol: { rel, [stage] = share } bounds, by default 0.002 and 2 %
  local function close_to_recording(t, rel, means, what, tol)
    tol = tol or {}
    assert.is_true(math.abs(rel - t.rel) <= (tol.rel or 0.002), string.format("%s: recorded RelLat %.4f, replayed %.4f",
      what, t.rel, rel))
    for k, m in pairs(t.means) do
      assert.is_true(math.abs(means[k] - m) <= (tol[k] or 0.02) * m,
        string.format("%s: mean %s %.3f ms recorded, %.3f replayed", what, k, m, means[k]))
    end
  end

  -- On the real clock a replay pays the machine's own lateness (timers,
  -- scheduling) once more on top of the recording's: the real-clock cases
  -- use stages three times as long (24-48 ms model steps, 120-240 ms
  -- tools), so a millisecond of it stays well inside the bounds.
  local SLOW = { CAS_SCALE = "3" }

  for _, timing in ipairs(TIMINGS) do
    it("of the same configuration gives the recorded RelLat and stage means under the virtual clock: "
      .. timing .. "-timed agent", function()
      if ON_MCP[timing] and not H.need_node(pending) then return end
      local t = tape(timing)
      local st, by, err, rel, means = run(timing, { "--k", "inf", "--replay-io", t.dir, "--clock", "virtual" },
        { CAS_NODE = "/nonexistent/node" })
      assert.are.equal(0, st, err)
      close_to_recording(t, rel, means, timing)
      same_answers(t.rec, by, timing)
      for id, r in pairs(t.rec) do
        assert.are.equal(H.verdicts(r), H.verdicts(by[id]))
      end
      local _, _, committed = counts(err)
      assert.are.equal(0, committed)
    end)

    it("of the same configuration gives the recorded RelLat and stage means on the real clock #timing: "
      .. timing .. "-timed agent", function()
      if ON_MCP[timing] and not H.need_node(pending) then return end
      -- a computing model holds the loop: at k = inf the replay's sleeps
      -- that end during another thread's computation are late once more
      -- (the recording's lateness is in its times already); the case below
      -- checks it where no thread waits on another's computation
      if timing == "cpu" then return end
      local t = tape(timing, SLOW)
      -- a real-clock replay cannot undo a stall the machine adds: the best
      -- of three, each with the recorded answers
      local seen = {}
      for _ = 1, 3 do
        local st, by, err, rel, means = run(timing, { "--k", "inf", "--replay-io", t.dir },
          { CAS_NODE = "/nonexistent/node", CAS_SCALE = SLOW.CAS_SCALE })
        assert.are.equal(0, st, err)
        same_answers(t.rec, by, timing)
        local ok = pcall(close_to_recording, t, rel, means, timing)
        if ok then return end
        seen[#seen + 1] = string.format("%.4f (t_seg %.2f, t_target %.2f)", rel, means.t_seg, means.t_target)
      end
      error(string.format("%s: recorded RelLat %.4f (t_seg %.2f, t_target %.2f), replayed %s", timing, t.rel,
        t.means.t_seg, t.means.t_target, table.concat(seen, ", ")))
    end)
  end

  -- a simulated run recorded and replayed: specula run examples/multihop_sim.lua --query
  -- "question 1" --k inf --record C, then --replay-io C
  local sim_tape
  local function sim(args)
    counter = counter + 1
    local out = H.tmpdir() .. "/sim" .. counter .. ".jsonl"
    local a = { "run", H.root .. "/examples/multihop_sim.lua", "--query", "question 1", "--k", "inf", "--out", out }
    for _, x in ipairs(args) do a[#a + 1] = x end
    local st, so, se = H.specula(a)
    assert.are.equal(0, st, se .. so)
    return H.jsonl(H.read(out))[1]
  end
  local function sim_recording()
    if not sim_tape then
      counter = counter + 1
      sim_tape = { dir = H.tmpdir() .. "/sim-tape" .. counter }
      sim_tape.rec = sim({ "--record", sim_tape.dir })
    end
    return sim_tape
  end
  -- each stage's mean over the query's hops, and its wall time, within tol
  local function sim_close(rec, got, tol, what)
    local function means(r)
      local seg, tgt = 0, 0
      for _, h in ipairs(r.stages.hops) do seg, tgt = seg + h.t_seg, tgt + h.t_target end
      return seg / #r.stages.hops, tgt / #r.stages.hops
    end
    local rs, rt = means(rec)
    local gs, gt = means(got)
    assert.is_true(math.abs(gs - rs) <= tol * rs, string.format("%s: mean t_seg %.2f recorded, %.2f replayed", what, rs, gs))
    assert.is_true(math.abs(gt - rt) <= tol * rt,
      string.format("%s: mean t_target %.2f recorded, %.2f replayed", what, rt, gt))
    assert.is_true(math.abs(got.stats.wall_ms - rec.stats.wall_ms) <= tol * rec.stats.wall_ms,
      string.format("%s: wall %.1f recorded, %.1f replayed", what, rec.stats.wall_ms, got.stats.wall_ms))
    assert.are.equal(rec.answer, got.answer)
  end

  it("of the simulated example keeps its step and target times (the sleeps are not counted twice)", function()
    local t = sim_recording()
    -- the recording ran on the real clock and carries the machine's own
    -- overhead (2 % under valgrind); sleeps counted twice would double the
    -- times, so 10 % still tells them apart
    sim_close(t.rec, sim({ "--replay-io", t.dir, "--clock", "virtual" }), 0.10, "virtual clock")
  end)

  it("of the simulated example keeps its step and target times on the real clock #timing", function()
    local t = sim_recording()
    local ok, err
    for _ = 1, 3 do
      ok, err = pcall(sim_close, t.rec, sim({ "--replay-io", t.dir }), 0.02, "real clock")
      if ok then return end
    end
    error(err)
  end)

  it("of a computing (CPU) agent on the real clock spends the computation once, in its place #timing", function()
    -- sequential: one thread, so no computation waits on another's
    counter = counter + 1
    local dir = H.tmpdir() .. "/replay-cpu" .. counter
    local st, rec, err, _, means = run("cpu", { "--mode", "sequential", "--record", dir }, SLOW)
    assert.are.equal(0, st, err)
    local seen = {}
    for _ = 1, 3 do
      local st2, got, err2, _, gmeans = run("cpu", { "--mode", "sequential", "--replay-io", dir },
        { CAS_NODE = "/nonexistent/node", CAS_SCALE = SLOW.CAS_SCALE })
      assert.are.equal(0, st2, err2)
      same_answers(rec, got, "cpu")
      local wall, gwall = 0, 0
      for id, r in pairs(rec) do wall, gwall = wall + r.stats.wall_ms, gwall + got[id].stats.wall_ms end
      -- a replay that ran the computation after the recorded step time
      -- made the model's steps 50 % longer and the queries 21 %; in its
      -- place, a computation that takes longer than it did (the machine's
      -- load) still lengthens its step, never shortens it: measured +4 to
      -- +13 % and +5 to +8 % on a loaded machine
      if math.abs(gmeans.t_seg - means.t_seg) <= 0.25 * means.t_seg and math.abs(gwall - wall) <= 0.12 * wall then
        return
      end
      seen[#seen + 1] = string.format("t_seg %.2f, wall %.0f", gmeans.t_seg, gwall)
      if #seen == 1 then
        local f = H.read(dir .. "/cassette-0001.jsonl") or ""
        assert.matches('"code":', f, 1, true)   -- the job lines say when the code began
      end
    end
    error(string.format("cpu: recorded t_seg %.2f, wall %.0f; replayed %s", means.t_seg,
      (function() local w = 0 for _, r in pairs(rec) do w = w + r.stats.wall_ms end return w end)(),
      table.concat(seen, "; ")))
  end)

  -- blind: both threads of a hop ask the model the very same request
  local function variant(timing) return timing == "http" and { CAS_BLIND = "1" } or nil end
  local function replay_env(timing)
    local extra = { CAS_NODE = "/nonexistent/node" }
    for key, v in pairs(variant(timing) or {}) do extra[key] = v end
    return extra
  end

  for _, timing in ipairs(TIMINGS) do
    it("of a k = inf recording at k = 1, 2 and inf serves what the live runs at those k get: "
      .. timing .. "-timed agent", function()
      if ON_MCP[timing] and not H.need_node(pending) then return end
      local t = tape(timing, variant(timing))
      for _, k in ipairs({ "1", "2", "inf" }) do
        local st, live, err = run(timing, { "--k", k }, variant(timing))
        assert.are.equal(0, st, err)
        local st2, got, err2 = run(timing, { "--k", k, "--replay-io", t.dir, "--clock", "virtual" },
          replay_env(timing))
        assert.are.equal(0, st2, err2)
        same_answers(live, got, timing .. " k=" .. k)
        local _, _, committed = counts(err2)
        assert.are.equal(0, committed, err2)
        -- no call waited for an answer that never comes (10,000,000 ms)
        for id, r in pairs(got) do
          assert.is_true(r.stats.wall_ms < 60000, id .. ": " .. r.stats.wall_ms)
        end
      end
    end)

    it("of a k = inf recording at k = 1, 2 and inf is within 0.02 RelLat of live runs at those k #timing: "
      .. timing .. "-timed agent", function()
      if ON_MCP[timing] and not H.need_node(pending) then return end
      local slow = { CAS_SCALE = SLOW.CAS_SCALE }
      for key, v in pairs(variant(timing) or {}) do slow[key] = v end
      local t = tape(timing, slow)
      for _, k in ipairs({ "1", "2", "inf" }) do
        local renv = replay_env(timing)
        renv.CAS_SCALE = SLOW.CAS_SCALE
        local st2, _, err2, rel = run(timing, { "--k", k, "--replay-io", t.dir, "--clock", "virtual" }, renv)
        assert.are.equal(0, st2, err2)
        -- a live run on a loaded machine can stall: the closest of three
        local seen = {}
        for _ = 1, 3 do
          local st, _, err, rel_live = run(timing, { "--k", k }, slow)
          assert.are.equal(0, st, err)
          seen[#seen + 1] = string.format("%.4f", rel_live)
          if math.abs(rel - rel_live) <= 0.02 then break end
          assert.is_true(#seen < 3, string.format("%s k=%s: replayed RelLat %.4f, live %s", timing, k, rel,
            table.concat(seen, ", ")))
        end
      end
    end)
  end

  it("under another mode, m, spec-launch, policy or predictor serves every request the recording answered",
    function()
    local forbid = H.tmpfile("replay-forbid.lua", 'return { search = "forbid" }')
    -- recorded with action speculation: the tool calls are predicted calls
    local t = tape("http", { CAS_PREDICT = "1" })
    local shapes = {
      { "--mode", "sequential" },
      { "--mode", "window", "--k", "2" },
      { "--k", "2", "--spec-launch", "slot" },
      { "--k", "inf", "--m", "2" },
      { "--k", "inf", "--policy", forbid },
      { "--k", "inf", "--predict", "off" },
      { "--k", "2", env = { CAS_PREDICT = "0" } },   -- an agent without a predictor
    }
    for _, shape in ipairs(shapes) do
      local what = table.concat(shape, " ")
      local extra = { CAS_NODE = "/nonexistent/node", CAS_PREDICT = "1" }
      for k, v in pairs(shape.env or {}) do extra[k] = v end
      local st, got, err = run("http", { "--replay-io", t.dir, "--clock", "virtual", unpack(shape) }, extra)
      assert.are.equal(0, st, what .. ": " .. err)
      same_answers(t.rec, got, what)
      local _, _, committed = counts(err)
      assert.are.equal(0, committed, what .. ": " .. err)
    end
  end)

  it("gives the verifier lab the model's time from the job lines, and its --agent replay every query at another k",
    function()
    -- the sleep-timed agent makes no model call over the wire: the steps'
    -- time is on the tape only as job lines
    local t = tape("sleep")
    local seg, tgt, n = 0, 0, 0
    for _, r in pairs(t.rec) do
      for _, h in ipairs(r.stages.hops) do seg, tgt, n = seg + h.t_seg, tgt + h.t_target, n + 1 end
    end
    local beta = seg / tgt
    local st, out, err = H.specula({ "verifiers", t.dir, "--verifier", "exact", "--json" })
    assert.are.equal(0, st, err)
    local r = cjson.decode(out)
    -- the run's estimate from its stage times; the lab's from the job lines
    -- (a job's length, not the window's view of it: a hair shorter)
    assert.is_true(math.abs(r.beta - beta) <= 0.02 * beta, string.format("lab beta %s, run %.4f", tostring(r.beta),
      beta))
    -- --agent replays at the lab's k, here not the recorded one
    for _, k in ipairs({ "1", "2", "inf" }) do
      st, out, err = H.specula({ "verifiers", t.dir, "--verifier", "exact", "--k", k, "--agent", AGENT, "--input", input,
        "--json" }, env("sleep", { CAS_NODE = "/nonexistent/node" }))
      assert.are.equal(0, st, err)
      assert.are.same({ same = 8, changed = 0, not_replayable = 0 },
        cjson.decode(out).verifiers[1].answer_change.replayed, "k " .. k)
    end
  end)

  it("fails a request the recording never answered at once, counts it, and never waits: error, skip, live",
    function()
    local t = tape("http")
    -- a verifier that accepts every guess commits wrong observations: the
    -- next calls on those paths were cancelled in the recording (their
    -- thread was discarded) or never made
    local lossy = { CAS_NODE = "/nonexistent/node", CAS_VERIFY = "any" }
    for _, clock in ipairs({ "virtual", "real" }) do
      local st, got, err = run("http", { "--k", "inf", "--replay-io", t.dir, "--clock", clock }, lossy)
      assert.are.equal(3, st, err)
      local failed, cancelled = 0, false
      for _, r in pairs(got) do
        if r.error then
          failed = failed + 1
          cancelled = cancelled or r.error:find("cancelled it before any answer", 1, true) ~= nil
          assert.matches("ECASSETTE: GET http://127%.0%.0%.1:%d+/hold%?ms=%d+&tag=.-: not in the cassette", r.error)
          -- the recording cancelled that request before its answer, or (on a
          -- slow machine: valgrind) discarded the thread before it asked
          assert.is_truthy(r.error:find("cancelled it before any answer", 1, true)
            or r.error:find("it holds 0)", 1, true), r.error)
          -- at once: no call waited out the 10,000,000 ms of a call that never answers
          assert.is_true(r.stats.wall_ms < 60000, r.stats.wall_ms)
        end
      end
      assert.is_true(failed >= 1)
      local _, missed, committed = counts(err)
      -- each failed query asked one request on its committed path that the
      -- tape lacks; the rest are misses on threads the replay discards
      assert.are.equal(failed, committed)
      assert.is_true(missed >= committed)
      if cancelled then assert.matches("cancelled in the recording before an answer", err) end
    end
    local st, got, err = run("http", { "--k", "inf", "--replay-io", t.dir, "--clock", "virtual", "--miss", "skip" },
      lossy)
    assert.are.equal(3, st, err)
    for _, r in pairs(got) do
      -- asked on the committed path, or on a thread verified after its
      -- step failed for the miss (the step's error is then the query's)
      if r.error then
        assert.matches("not in the cassette", r.error)
        assert.is_truthy(r.error:find("--miss skip does not apply to a call on the committed path", 1, true)
          or r.error:find("skipped (--miss skip)", 1, true), r.error)
      end
    end
    -- live: the missing calls are made (real clock, the server is up); the
    -- answers are those of a live run with the same verifier
    local st2, live, err2 = run("http", { "--k", "inf" }, { CAS_VERIFY = "any" })
    assert.are.equal(0, st2, err2)
    local st3, mixed, err3 = run("http", { "--k", "inf", "--replay-io", t.dir, "--miss", "live" },
      { CAS_VERIFY = "any" })
    assert.are.equal(0, st3, err3)
    same_answers(live, mixed, "--miss live")
    local made = tonumber(err3:match("(%d+) made live"))
    local _, missed = counts(err3)
    assert.is_true(missed >= 1, err3)
    assert.are.equal(missed, made)
  end)
end)
