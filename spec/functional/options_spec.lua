-- The numeric options that several entry points share mean the same thing
-- everywhere: `specula theory`, `specula run`, --compare items and the Lua
-- API accept and reject exactly the same values, with the same message.
local H = require "support.helpers"

-- An agent that answers at once: enough for `specula run` to get past its
-- options and finish.
local AGENT = [[
  local specula = require "specula"
  return specula.agent {
    init = function(q) return { q = q } end,
    step = function(s) return { final = "ok" } end,
    update = function(s) return s end,
  }
]]

local THEORY = { "theory", "--p", "0.5", "--alpha", "0.2", "--beta", "0.15" }

-- exit status and first line of stderr of `specula theory ... --name value`
local function theory(name, value)
  local args = {}
  for i, a in ipairs(THEORY) do args[i] = a end
  args[#args + 1], args[#args + 2] = "--" .. name, value
  local st, _, err = H.specula(args)
  return st, err:match("^[^\n]*")
end

local agent_path
local function run(args, input)
  agent_path = agent_path or H.tmpfile("opt_agent.lua", AGENT)
  local a = { "run", agent_path, "--quiet" }
  if not input then a[#a + 1], a[#a + 2] = "--query", "q" end
  for _, x in ipairs(args) do a[#a + 1] = x end
  local st, out, err = H.specula(a)
  return st, err:match("^[^\n]*"), out
end

-- the message proper, without the command's prefix
local function msg(line) return (line or ""):match("(%-%-%a+ must .*)$") end

describe("shared options", function()
  -- values of each option both commands take, and what they must do with them
  local cases = {
    eps = { ["2"] = false, ["1"] = false, ["0"] = false, ["-0.1"] = false, nan = false,
            abc = false, ["0x1"] = false, ["0.05"] = true, ["0.5"] = true, ["1e-3"] = true },
    k = { ["0"] = false, ["1.5"] = false, ["-1"] = false, ["2147483648"] = false, ["0x3"] = false,
          ["1e400"] = false, three = false, ["1"] = true, ["3"] = true, inf = true, infinity = true,
          auto = true },
  }
  for name, values in pairs(cases) do
    for value, good in pairs(values) do
      it(("--%s %s: theory and run agree (%s)"):format(name, value, good and "accepted" or "rejected"), function()
        local tst, terr = theory(name, value)
        local rst, rerr = run({ "--" .. name, value })
        if good then
          assert.equals(0, tst, terr)
          assert.equals(0, rst, rerr)
        else
          assert.equals(2, tst, "theory accepted --" .. name .. " " .. value)
          assert.equals(2, rst, "run accepted --" .. name .. " " .. value)
          -- the same words, naming the option and the value given
          assert.is_not_nil(msg(terr), terr)
          assert.equals(msg(terr), msg(rerr))
          assert.matches("--" .. name, terr, 1, true)
          assert.matches("'" .. value .. "'", terr, 1, true)
        end
      end)
    end
  end

  it("both take --name=value as well as --name value", function()
    local st, err = run({ "--eps=2" })
    assert.equals(2, st)
    assert.matches("--eps must be in (0, 1), got '2'", err, 1, true)
    local tst, _, terr = H.specula({ "theory", "--p=0.5", "--alpha=0.2", "--beta=0.15", "--eps=2" })
    assert.equals(2, tst)
    assert.matches("--eps must be in (0, 1), got '2'", terr, 1, true)
    st, err = run({ "--k=auto", "--eps=0.1", "--seed=3", "--set=x=1=2" })
    assert.equals(0, st, err)
    tst, _, terr = H.specula({ "theory", "--p=0.5", "--alpha=0.2", "--beta=0.15", "--k=auto", "--json" })
    assert.equals(0, tst, terr)
    -- a flag that takes no value says so
    st, err = run({ "--quiet=yes" })
    assert.equals(2, st)
    assert.matches("--quiet takes no value, got '--quiet=yes'", err, 1, true)
  end)

  it("run-only options reject what their meaning excludes", function()
    for _, c in ipairs({ { "--m", "0" }, { "--m", "1.5" }, { "--seed", "-1" }, { "--seed", "1.5" },
                         { "--seed", "1e300" }, { "--seed", "9007199254740993" }, -- 2^53 + 1: not exact in a double
                         { "--concurrency", "0" }, { "--concurrency", "2.5" },
                         { "--concurrency", "inf" } }) do
      local st, err = run(c)
      assert.equals(2, st, table.concat(c, " ") .. " was accepted")
      assert.matches(c[1] .. " must be an integer", err, 1, true)
      assert.matches("'" .. c[2] .. "'", err, 1, true)
    end
    local st, err = run({ "--m", "2", "--seed", "7", "--concurrency", "4", "--k", "auto", "--eps", "0.1" })
    assert.equals(0, st, err)
  end)

  it("numeric run options refuse NaN and infinity (and a fraction where a count is meant) with a usage error", function()
    for _, c in ipairs({ { "--max-hops", "inf", "a whole number >= 1" }, { "--max-hops", "nan", "a whole number >= 1" },
                         { "--max-hops", "2.5", "a whole number >= 1" }, { "--predict-top", "1.5", "a whole number >= 1" },
                         { "--spec-timeout", "inf", "a number >= 0" }, { "--spec-timeout", "nan", "a number >= 0" },
                         { "--ev-cost-ms", "inf", "a number >= 0" }, { "--ev-cost-ms", "-inf", "a number >= 0" },
                         { "--ev-latency-ms", "nan", "a number >= 0" } }) do
      local st, err = run({ c[1], c[2] })
      assert.equals(2, st, table.concat(c, " ") .. ": " .. tostring(err))
      assert.equals("specula run: " .. c[1] .. " expects " .. c[3] .. ", got '" .. c[2] .. "'", err)
    end
    -- a --compare item's value is checked as the option is
    local st, err = run({ "--compare", "sequential,spechop:ev_cost_ms=nan" })
    assert.equals(2, st, err)
    assert.matches("--ev-cost-ms expects a number >= 0, got 'nan'", err, 1, true)
    st, err = run({ "--max-hops", "5", "--spec-timeout", "1000", "--ev-cost-ms", "0", "--predict-top", "2" })
    assert.equals(0, st, err)
  end)

  it("--input, --out, --trace and --summary must name different files (a usage error, nothing written)", function()
    local dir = H.tmpdir()
    local inp = H.tmpfile("distinct_in.jsonl", '{"id":"a","query":"q"}\n')
    local f = dir .. "/distinct.jsonl"
    for _, c in ipairs({
      { { "--out", f, "--trace", f }, "--out and --trace" },
      { { "--out", f, "--trace", dir .. "/./distinct.jsonl" }, "--out and --trace" },
      { { "--out", inp }, "--input and --out" },
      { { "--compare", "sequential,spechop", "--out", f, "--summary", f }, "--out and --summary" },
      { { "--compare", "sequential,spechop", "--trace", f, "--summary", f }, "--trace and --summary" } }) do
      os.remove(f)
      local args = { "--input", inp }
      for _, a in ipairs(c[1]) do args[#args + 1] = a end
      local st, err = run(args, true)
      assert.equals(2, st, table.concat(c[1], " ") .. ": " .. tostring(err))
      assert.matches(c[2] .. " name the same file", err, 1, true)
      assert.is_nil(io.open(f, "r"), "a file was written")
    end
    assert.equals('{"id":"a","query":"q"}\n', H.read(inp))
  end)

  -- before, the --out file was created (empty) and left behind
  it("a --trace path that cannot be written ends the run before an --out file is left behind", function()
    local dir = H.tmpdir()
    local inp = H.tmpfile("badtrace_in.jsonl", '{"id":"a","query":"q"}\n')
    local out = dir .. "/badtrace_out.jsonl"
    os.remove(out)
    local st, err = run({ "--input", inp, "--out", out, "--trace", dir .. "/no/such/dir/t.json" }, true)
    assert.equals(1, st, err)
    assert.matches("cannot write --trace file", err, 1, true)
    assert.is_nil(io.open(out, "r"), "an empty --out was left behind")
    -- an --out that was there already stays as it was
    local f = assert(io.open(out, "w"))
    f:write("")
    f:close()
    st = run({ "--input", inp, "--out", out, "--trace", dir .. "/no/such/dir/t.json" }, true)
    assert.equals(1, st)
    assert.is_not_nil(io.open(out, "r"))
  end)

  it("theory-only options keep their domains (p in [0, 1], alpha, beta, nu >= 0)", function()
    for _, c in ipairs({ { "p", "1.5" }, { "p", "-0.1" }, { "p", "abc" }, { "alpha", "-1" }, { "beta", "inf" },
                         { "nu", "-0.5" }, { "nu", "nan" } }) do
      local st, err = theory(c[1], c[2])
      assert.equals(2, st, c[1] .. " " .. c[2] .. " was accepted")
      assert.matches("--" .. c[1] .. " must be", err, 1, true)
    end
  end)

  it("a policy file that cannot be used: its message, and no engine stack", function()
    -- one that is not there is a usage mistake (exit 2, as a --verifier or
    -- --predictor file that is not; it was 1), an absolute path looked for
    -- only where it says; one that is there but broken fails the run (1)
    local missing = H.tmpdir() .. "/no_such_policy.lua"
    local cases = {
      { missing, "specula run: --policy: policy file '" .. missing .. "' not found (looked in: " .. missing .. ")", 2 },
      { H.tmpfile("opt_pol_syntax.lua", "return {\n"), "specula: policy: cannot load ", 1 },
      { H.tmpfile("opt_pol_value.lua", 'return { search = "maybe" }\n'),
        "specula: policy: tool search: decision must be full, warmup or forbid, got maybe", 1 },
    }
    for _, c in ipairs(cases) do
      local st, _, err = H.specula({ "run", agent_path or H.tmpfile("opt_agent.lua", AGENT), "--query", "q",
                                     "--policy", c[1], "--quiet" })
      assert.equals(c[3], st, err)
      assert.matches("^" .. c[2]:gsub("%p", "%%%0"), err)
      assert.is_nil(err:find("stack traceback", 1, true), err)
      assert.is_nil(err:find("/lua/specula/", 1, true), err)
    end
  end)

  it("an option without what it needs (another option, a known value, a predictor) is a usage error", function()
    local input = H.tmpfile("opt_q2.jsonl", '{"id":"a","query":"q"}\n')
    for _, c in ipairs({ { { "--summary", H.tmpfile("opt_sum.json") }, "--summary goes with --compare" },
                         { { "--retry-failed" }, "--retry-failed goes with --out" },
                         { { "--format", "csv" }, "--format must be auto, jsonl, hotpotqa, 2wiki, musique or conversations" },
                         -- asked for by name, and the agent has no predictor to honour it
                         { { "--predict", "on" }, "--predict on: the agent has no predictor" },
                         { { "--compare", "sequential,spechop:predict=on" },
                           "--compare 'spechop:predict=on': predict=on, but the agent has no predictor" } }) do
      local args = { "--input", input }
      for _, a in ipairs(c[1]) do args[#args + 1] = a end
      local st, err = run(args, true)
      assert.equals(2, st, c[2] .. " was accepted")
      assert.matches(c[2], err, 1, true)
    end
  end)

  it("--predict on without a predictor names --predictor, which supplies one", function()
    local input = H.tmpfile("opt_q3.jsonl", '{"id":"a","query":"q"}\n')
    local st, err = run({ "--input", input, "--predict", "on" }, true)
    assert.equals(2, st, err)
    assert.equals("specula run: --predict on: the agent has no predictor: give one with --predictor P (pattern, "
      .. "ngram, learned or a Lua file; in a --compare item predictor=P), or give the agent predict = "
      .. "specula.predict.pattern{...} or any function(history, ctx)", err)
    st, err = run({ "--input", input, "--compare", "sequential,spechop:predict=on" }, true)
    assert.equals(2, st, err)
    assert.matches("--compare 'spechop:predict=on': predict=on, but the agent has no predictor: give one with "
      .. "--predictor P", err, 1, true)
    -- and it does: the run speculates with it
    local out
    st, err, out = run({ "--input", input, "--predict", "on", "--predictor", "pattern" }, true)
    assert.equals(0, st, err)
    assert.matches('"answer":"ok"', out, 1, true)
    -- --predictor off leaves none, whatever the agent has
    st, err = run({ "--input", input, "--predict", "on", "--predictor", "off" }, true)
    assert.equals(2, st, err)
    assert.equals("specula run: --predict on: --predictor off leaves no predictor to speculate with", err)
    st, err = run({ "--input", input, "--compare", "sequential,spechop:predict=on:predictor=off" }, true)
    assert.equals(2, st, err)
    assert.equals("specula run: --compare 'spechop:predict=on:predictor=off': predict=on, but predictor off leaves "
      .. "no predictor to speculate with", err)
  end)

  it("--compare items check k, m, eps, predict, match and trigger like the options do", function()
    local input = H.tmpfile("opt_q.jsonl", '{"id":"a","query":"q"}\n')
    for _, c in ipairs({ { "spechop:m=0", "--m must be an integer" }, { "spechop:eps=2", "--eps must be in (0, 1)" },
                         { "spechop:k=1.5", "--k must be an integer" }, { "spechop:m=abc", "--m must be" },
                         { "spechop:predict=maybe", "--compare 'spechop:predict=maybe': --predict must be on or off" },
                         { "spechop:match=fuzzy", "--match must be exact, name_only or similar" },
                         { "window:trigger=later", "--trigger must be start, tool_name or both" } }) do
      local st, err = run({ "--input", input, "--compare", "sequential," .. c[1] }, true)
      assert.equals(2, st, c[1] .. " was accepted")
      assert.matches(c[2], err, 1, true)
    end
  end)

  it("specula.run() applies the same domains to its options", function()
    local st, out, err = H.run_lua(AGENT:gsub("return specula.agent", "local agent = specula.agent", 1) .. [=[
      for _, c in ipairs({ { "eps", 2 }, { "eps", "0" }, { "k", 0.5 }, { "k", -1 }, { "k", "1.5" },
                           { "m", 0 }, { "seed", -3 }, { "concurrency", 1.5 }, { "k", {} } }) do
        local ok, e = pcall(specula.run, agent, { queries = { "q" }, [c[1]] = c[2] })
        print(c[1], tostring(c[2]), ok, e)
      end
      local recs = specula.run(agent, { queries = { "q" }, k = "inf", eps = 0.2, m = 2, seed = 9, concurrency = 1 })
      print("good", recs[1].answer)
      recs = specula.run(agent, { queries = { "q" }, k = math.huge })
      print("huge", recs[1].answer)
      print("predict_on", select(2, pcall(specula.run, agent, { queries = { "q" }, predict = "on" })))
    ]=])
    assert.equals(0, st, err)
    local n = 0
    for line in out:gmatch("[^\n]+") do
      local name, _, ok, e = line:match("^(%a+)\t([^\t]*)\t(%a+)\t(.*)$")
      if name then
        n = n + 1
        assert.equals("false", ok, line)
        assert.matches("specula.run: " .. name .. " must", e, 1, true)
      end
    end
    assert.equals(9, n)
    assert.matches("good\tok", out, 1, true)
    assert.matches("huge\tok", out, 1, true)
    assert.matches('predict_on\tspecula: predict = "on", but the agent has no predictor', out, 1, true)
  end)
end)

describe("--k's spelling of unbounded", function()
  local TAPE = H.root .. "/examples/cassette/tape"
  local function ks(v)
    local theory = { "theory", "--p", "0.5", "--alpha", "0.2", "--beta", "0.1", "--k", v, "--json" }
    local script = H.tmpfile("kspell_agent.lua", AGENT)
    return {
      theory = { theory },
      run = { { "run", script, "--query", "x", "--clock", "virtual", "--quiet", "--k", v } },
      compare_item = { { "run", script, "--query", "x", "--clock", "virtual", "--quiet", "--compare", "spechop:k=" .. v } },
      verifiers = { { "verifiers", TAPE, "--k", v, "--json" } },
      replay = { { "replay", "/nonexistent/trace.json", "--k", v } },
    }
  end

  it("is inf or infinity in every command (docs/cli.md): the same as inf", function()
    for _, v in ipairs({ "inf", "infinity" }) do
      for who, cmds in pairs(ks(v)) do
        local st, out, err = H.specula(cmds[1])
        if who == "replay" then
          -- past the option: the missing trace is what stops it
          assert.is_nil(err:find("--k", 1, true), who .. " " .. v .. ": " .. err)
        else
          assert.equals(0, st, who .. " " .. v .. ": " .. err)
        end
        if who == "theory" then assert.matches('"k":"inf"', out:gsub("%s", ""), 1, true) end
        if who == "verifiers" then assert.matches('"k":"inf"', out, 1, true) end
      end
    end
  end)

  it("refuses any other spelling with a usage error naming it", function()
    for _, v in ipairs({ "Inf", "INF", "Infinity", "1e999" }) do
      for who, cmds in pairs(ks(v)) do
        local st, _, err = H.specula(cmds[1])
        assert.equals(2, st, who .. " " .. v .. ": " .. err)
        assert.matches("'" .. v .. "'", err, 1, true)
      end
    end
  end)
end)
