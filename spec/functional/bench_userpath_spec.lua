-- specula bench userpath: the user's path through the CLI beside
-- the asyncio reference; and the reference's --concurrency, --sequential
-- and --out, which that benchmark relies on. Only the shape and the
-- records are checked: speed figures are never asserted (shared hosts).
local H = require "support.helpers"

-- #slow: the bench starts `specula` by its own path, which under the valgrind
-- pass is valgrind's launcher, not the binary (a benchmark under valgrind
-- measures nothing); the main and sanitizer passes run it
describe("bench userpath #slow", function()
  it("prints a row per (k, concurrency, hops) with both processes' figures and the ratios", function()
    local st, out, err = H.specula({ "bench", "userpath", "--queries", "6", "--hops", "2",
      "--k", "inf,seq", "--concurrency", "3", "--runs", "1" })
    assert.equals(0, st, err)
    assert.matches("machine: ", out, 1, true)
    for _, k in ipairs({ "inf", "seq" }) do
      local row = out:match("\n(" .. k .. "%s+3%s+2 |[^\n]*)")
      assert.is_truthy(row, "no row for k = " .. k .. " in:\n" .. out)
      local nums = {}
      for x in row:gmatch("[%d.]+") do nums[#nums + 1] = tonumber(x) end
      -- conc, hops, then wall, cpu, peak MB of each process, then two ratios
      assert.equals(10, #nums, row)
      for i = 3, 10 do assert.is_true(nums[i] > 0, row) end
      assert.matches("x%s+[%d.]+x%s*$", row)
    end
  end)

  -- The reference is timed as a whole process: what `python3` names on PATH
  -- may be a version manager's shim (pyenv's starts a shell and pyenv, ~100
  -- ms a process), which would count in the reference's time and flatter
  -- every ratio. The bench asks `python3` once for its interpreter and
  -- times that: here a shim on PATH that notes each start runs once.
  it("times the reference's own interpreter, not a python3 shim on PATH", function()
    local p = io.popen([[python3 -c "import sys; print(sys.executable)"]])
    local real = p:read("*l")
    p:close()
    assert.is_truthy(real and real ~= "", "no python3")
    local dir = H.tmpdir() .. "/shim"
    os.execute("mkdir -p " .. H.quote(dir))
    local marker = dir .. "/starts"
    local f = assert(io.open(dir .. "/python3", "w"))
    f:write("#!/bin/sh\necho start >> " .. H.quote(marker) .. "\nexec " .. H.quote(real) .. ' "$@"\n')
    f:close()
    os.execute("chmod +x " .. H.quote(dir .. "/python3"))
    local st, out, err = H.specula({ "bench", "userpath", "--queries", "4", "--hops", "2",
      "--k", "inf", "--concurrency", "2", "--runs", "2", "--no-memory" }, { PATH = dir .. ":" .. os.getenv("PATH") })
    assert.equals(0, st, err .. out)
    assert.matches("reference: " .. real .. " (Python ", out, 1, true)
    assert.matches("\ninf%s+2%s+2 |", out)
    local starts = 0
    for _ in io.lines(marker) do starts = starts + 1 end
    assert.equals(1, starts, out)
  end)

  -- memory: per live trajectory from the rows of two concurrencies, per
  -- finished query from two more runs (Q and 5Q one-hop queries)
  it("prints memory per live trajectory and per finished query for both processes", function()
    local st, out, err = H.specula({ "bench", "userpath", "--queries", "4", "--hops", "2",
      "--k", "inf", "--concurrency", "1,3", "--runs", "1" })
    assert.equals(0, st, err)
    assert.matches("memory per live trajectory, KB: (peak at 3 in flight - peak at 1) / 2", out, 1, true)
    assert.matches("\n  k=inf%s+hops=2%s+specula %-?[%d.]+%s+asyncio %-?[%d.]+\n", out)
    assert.matches("memory per finished query, bytes: (peak with 20 queries - peak with 4) / 16, 1 hop, k=inf, 1 in flight",
      out, 1, true)
    assert.matches("\n  specula %-?%d+%s+asyncio %-?%d+\n", out)
    -- no more in flight than there are queries: 4 queries at a concurrency of 10 are 4 live
    local st3, out3, err3 = H.specula({ "bench", "userpath", "--queries", "4", "--hops", "2",
      "--k", "inf", "--concurrency", "1,10", "--runs", "1", "--no-ref", "--no-memory" })
    assert.equals(0, st3, err3)
    assert.matches("memory per live trajectory, KB: (peak at 4 in flight - peak at 1) / 3", out3, 1, true)
    local st2, out2 = H.specula({ "bench", "userpath", "--queries", "4", "--hops", "2",
      "--k", "inf", "--concurrency", "1", "--runs", "1", "--no-memory", "--no-ref" })
    assert.equals(0, st2, out2)
    assert.not_matches("memory per", out2, 1, true)
  end)

  -- the agent's other wait paths: each record is checked by the bench itself
  -- (an answer per query), so a row means every call waited and answered
  local function waits(kind)
    local st, out, err = H.specula({ "bench", "userpath", "--queries", "4", "--hops", "2",
      "--k", "inf", "--concurrency", "2", "--runs", "1", "--wait", kind, "--no-ref" })
    assert.equals(0, st, err)
    assert.matches("wait kind " .. kind, out, 1, true)
    assert.matches("\ninf%s+2%s+2 |", out)
  end
  it("runs the agent waiting on the loopback HTTP server", function() waits("http") end)
  it("runs the agent waiting on a stdio MCP server", function()
    if not H.need_node(pending) then return end
    waits("mcp")
  end)

  -- The benchmark agent, except that its step raises when cond (Lua, on N,
  -- the agent's hops per query) holds: the path of the agent file.
  local function failing_agent(cond)
    local src = H.read(H.root .. "/bench/userpath_agent.lua")
    src = src:gsub("step = function%(state, ctx%)\n", "step = function(state, ctx)\n"
      .. "    if " .. cond .. " then error(\"deliberate failure at \" .. N .. \" hops\") end\n", 1)
    assert.matches("deliberate failure", src, 1, true)
    local agent = H.tmpdir() .. "/agent.lua"
    local f = assert(io.open(agent, "w"))
    f:write(src)
    f:close()
    return agent
  end

  -- a configuration whose run fails is a FAILED row, never a figure (a
  -- failure must not pass for a fast run); the other rows still run, and
  -- the bench fails naming the configuration
  it("reports a failing configuration as FAILED and fails, the good rows measured", function()
    -- the benchmark agent, except that its step fails for queries of 3 hops or more
    local agent = failing_agent("N >= 3")
    local st, out, err = H.specula({ "bench", "userpath", "--queries", "4", "--hops", "2,3",
      "--k", "inf", "--concurrency", "2", "--runs", "1", "--agent", agent })
    assert.is_not.equals(0, st)
    local good = out:match("\n(inf%s+2%s+2 |[^\n]*)")
    local bad = out:match("\n(inf%s+2%s+3 |[^\n]*)")
    assert.is_truthy(good, out)
    assert.is_truthy(bad, out)
    assert.matches("x%s+[%d.]+x%s*$", good)
    -- the failed side: no time, no ratio
    assert.matches("^inf%s+2%s+3 |%s+FAILED%s+%-%s+%-%s+|", bad)
    assert.matches("|%s+%-%s+%-%s*$", bad)
    assert.matches("1 configuration(s) FAILED", out .. err, 1, true)
    assert.matches("k=inf conc=2 hops=3 specula: ", out .. err, 1, true)
  end)

  -- a memory run that fails is FAILED too, and fails the bench by name
  it("reports a failing memory run as FAILED, not as bytes", function()
    -- fails only for one-hop queries: the rows (2 hops) pass, the memory runs (1 hop) fail
    local agent = failing_agent("N == 1")
    local st, out, err = H.specula({ "bench", "userpath", "--queries", "4", "--hops", "2",
      "--k", "inf", "--concurrency", "2", "--runs", "1", "--agent", agent, "--no-ref" })
    assert.is_not.equals(0, st)
    assert.matches("\ninf%s+2%s+2 |%s+[%d.]+", out)
    assert.matches("\n  specula FAILED\n", out)
    assert.matches("memory k=inf conc=2 4 queries specula: ", out .. err, 1, true)
  end)

  -- --against: a second build in the same alternation, a row of its own
  it("runs another build with --against, a row marked against beside each row", function()
    local st, out, err = H.specula({ "bench", "userpath", "--queries", "4", "--hops", "2",
      "--k", "inf", "--concurrency", "2", "--runs", "1", "--against", H.bin, "--against-home", H.root })
    assert.equals(0, st, err)
    local rows = {}
    for row in out:gmatch("\n(inf%s+2%s+2 |[^\n]*)") do rows[#rows + 1] = row end
    assert.equals(2, #rows, out)
    assert.matches("x%s+[%d.]+x%s*$", rows[1])
    assert.matches("x%s+[%d.]+x%s+against$", rows[2])
    local st2, out2, err2 = H.specula({ "bench", "userpath", "--queries", "2", "--hops", "1", "--k", "inf",
      "--concurrency", "1", "--runs", "1", "--against", "/nonexistent/specula" })
    assert.is_not.equals(0, st2)
    assert.matches("--against: cannot read /nonexistent/specula", out2 .. err2, 1, true)
  end)

  -- --vm: each build's run of each row again under LuaJIT's sampler, the
  -- shares of its samples by VM state; a run that fails there is FAILED
  -- (never shares) and fails the bench by name
  it("prints with --vm where each build's samples fell, by VM state, and FAILED for a run that fails", function()
    -- (enough queries for the sampler to tick: 20 gave it no sample in one
    -- run of six, 600 four to seven samples)
    local st, out, err = H.specula({ "bench", "userpath", "--queries", "3000", "--hops", "2",
      "--k", "inf", "--concurrency", "2", "--runs", "1", "--no-ref", "--no-memory", "--vm",
      "--against", H.bin, "--against-home", H.root })
    assert.equals(0, st, err .. out)
    assert.matches("% of LuaJIT's samples by VM state (SPECULA_PROFILE=vi1", out, 1, true)
    assert.matches("\nk%s+conc%s+hops%s+build%s+compiled%s+interp%s+C%s+GC%s+JIT%s+cpu ms\n", out)
    for _, build in ipairs({ "specula", "against" }) do
      local row = out:match("\n(inf%s+2%s+2%s+" .. build .. "%s[^\n]*)")
      assert.is_truthy(row, build .. " in:\n" .. out)
      local pcts, sum = {}, 0
      for x in row:gmatch("(%d+)%%") do
        pcts[#pcts + 1] = tonumber(x)
        sum = sum + tonumber(x)
      end
      assert.equals(5, #pcts, row)
      -- (each share rounded by the sampler's report)
      assert.is_true(sum >= 95 and sum <= 105, row)
      assert.matches("%%%s+%d+$", row)
    end
    -- an agent that fails only under the sampler: the rows measured, the
    -- sampled runs FAILED
    local agent = failing_agent('os.getenv("SPECULA_PROFILE") ~= nil')
    local st2, out2, err2 = H.specula({ "bench", "userpath", "--queries", "4", "--hops", "2",
      "--k", "inf", "--concurrency", "2", "--runs", "1", "--no-ref", "--no-memory", "--vm", "--agent", agent })
    assert.is_not.equals(0, st2)
    assert.matches("\ninf%s+2%s+2 |%s+[%d.]+", out2)
    assert.matches("\ninf%s+2%s+2%s+specula%s+FAILED%s+FAILED%s+FAILED%s+FAILED%s+FAILED%s+%-\n", out2)
    assert.matches("vm k=inf conc=2 hops=2 specula: ", out2 .. err2, 1, true)
  end)

  -- a run that ends before the sampler's first tick measured nothing: "-"
  -- and "no samples", the bench still passes; a period it cannot use is
  -- refused by name
  it("says no samples, not FAILED, when a --vm run ends before the sampler ticks", function()
    local st, out, err = H.specula({ "bench", "userpath", "--queries", "4", "--hops", "1",
      "--k", "inf", "--concurrency", "2", "--runs", "1", "--no-ref", "--no-memory", "--vm",
      "--vm-interval", "100000" })
    assert.equals(0, st, err .. out)
    assert.matches("by VM state (SPECULA_PROFILE=vi100000, one run a row)", out, 1, true)
    assert.matches("\ninf%s+2%s+1%s+specula%s+%-%s+%-%s+%-%s+%-%s+%-%s+%d+  no samples\n", out)
    assert.matches("(no samples: the run ended before the sampler's first tick, 100000 ms of CPU", out, 1, true)
    assert.is_nil(out:find("FAILED", 1, true), out)
    local st2, out2, err2 = H.specula({ "bench", "userpath", "--queries", "2", "--hops", "1", "--vm",
      "--vm-interval", "0.5" })
    assert.is_not.equals(0, st2)
    assert.matches("--vm-interval needs a whole number of ms >= 1", out2 .. err2, 1, true)
  end)

  it("refuses a k it cannot run, naming the option", function()
    local st, out, err = H.specula({ "bench", "userpath", "--queries", "2", "--k", "0", "--runs", "1" })
    assert.is_not.equals(0, st)
    assert.matches("--k takes integers >= 1, inf or seq, got 0", out .. err, 1, true)
  end)
end)

describe("bench/ref/spechop_ref.py", function()
  local function ref(extra)
    local dir = H.tmpdir()
    local out = dir .. "/ref.jsonl"
    local st, so, se = H.sh("python3 " .. H.quote(H.root .. "/bench/ref/spechop_ref.py")
      .. " --queries 5 --hops 3 --json --out " .. H.quote(out) .. " " .. extra)
    return st, so, se, H.read(out)
  end

  it("writes one record per query to --out, sequential or speculative, at a bounded concurrency", function()
    for _, extra in ipairs({ "--k 1 --sequential --concurrency 2", "--k inf --concurrency 2", "--k 4" }) do
      local st, so, se, text = ref(extra)
      assert.equals(0, st, se)
      local res = H.json().decode(so:match("{.*}"))
      assert.equals(5, res.queries)
      local ids = {}
      for line in (text or ""):gmatch("[^\n]+") do
        local r = H.json().decode(line)
        assert.equals("done 3", r.answer, extra)
        assert.equals(3, r.hops)
        ids[#ids + 1] = r.id
      end
      table.sort(ids)
      assert.same({ "q0", "q1", "q2", "q3", "q4" }, ids, extra)
    end
  end)

  it("refuses a concurrency below 1", function()
    local st, _, se = ref("--k 2 --concurrency 0")
    assert.equals(2, st)
    assert.matches("--concurrency >= 1", se, 1, true)
  end)
end)
