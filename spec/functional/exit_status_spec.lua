-- Every exit status docs/cli.md documents (its "Exit statuses" section and
-- the usage paragraph of "Commands"), for every command: one case that
-- produces it. `run`: 0 answered, 3 some queries failed, 1 a script error
-- or an output that cannot be written, 2 a usage error (each example the
-- docs give) or records of another run, 130/143 a signal. The other
-- commands: 0 done, 2 a usage error, 1 a failure (an unreadable file, a
-- failed write, a bad labels file); `compare` also 3 for records with
-- `error`, and 2 for a file given twice or one run's query in two files
-- (docs/experiments.md).
local H = require "support.helpers"

local EX = H.root .. "/examples/multihop_sim.lua"
local TAPE = H.root .. "/examples/cassette/tape"

-- An agent whose query "boom" fails: its record carries error.
local FAILING = [[
local specula = require "specula"
return specula.agent {
  init = function(q) return q end,
  step = function(s)
    if s == "boom" then error("this query fails") end
    return { final = "ok " .. s }
  end,
  update = function(s) return s end,
}
]]

-- An agent whose query says it started, then waits to be stopped.
local WAITING = [[
local specula = require "specula"
return specula.agent {
  init = function(q) return q end,
  step = function(s)
    local f = assert(io.open(os.getenv("READY_FILE"), "w"))
    f:write("ready\n")
    f:close()
    specula.sleep(30000)
    return { final = "late" }
  end,
  update = function(s) return s end,
}
]]

local function lines(path)
  local t = {}
  for l in (H.read(path) or ""):gmatch("[^\n]+") do t[#t + 1] = l end
  return t
end

local function write(name, text) return H.tmpfile(name, text) end

describe("exit statuses as docs/cli.md documents them", function()
  local q, res, resfail, failing, q_other, res_other
  local NOWHERE = "/nonexistent/dir/"

  setup(function()
    q = write("es_q.jsonl", '{"id":"q1","query":"first"}\n{"id":"q2","query":"second"}\n{"id":"q3","query":"third"}\n')
    res = H.tmpfile("es_res.jsonl")
    os.remove(res)
    local st, _, err = H.specula({ "run", EX, "--clock", "virtual", "--quiet", "--input", q, "--out", res,
      "--keep-candidates" })
    assert.equals(0, st, err)
    -- the same configuration run on another input (the same run digest)
    q_other = write("es_q_other.jsonl", '{"id":"q1","query":"another first"}\n')
    res_other = H.tmpfile("es_res_other.jsonl")
    os.remove(res_other)
    st, _, err = H.specula({ "run", EX, "--clock", "virtual", "--quiet", "--input", q_other, "--out", res_other,
      "--keep-candidates" })
    assert.equals(0, st, err)
    failing = write("es_failing.lua", FAILING)
    resfail = H.tmpfile("es_resfail.jsonl")
    os.remove(resfail)
    st, _, err = H.specula({ "run", failing, "--clock", "virtual", "--quiet", "--input",
      write("es_qfail.jsonl", '{"id":"a","query":"fine"}\n{"id":"b","query":"boom"}\n'), "--out", resfail })
    assert.equals(3, st, err)
  end)

  -- each case: { what, status, args | function() -> status, stderr }
  local function check(cases)
    for _, c in ipairs(cases) do
      local st, err
      if type(c[3]) == "function" then
        st, err = c[3]()
      else
        local _
        st, _, err = H.specula(c[3])
      end
      assert.equals(c[2], st, c[1] .. ": " .. tostring(err))
    end
  end

  -- a command with its stdout on /dev/full: the write fails
  local function to_full(args)
    return function()
      local parts = { H.quote(H.bin) }
      for _, a in ipairs(args) do parts[#parts + 1] = H.quote(a) end
      local st, _, err = H.sh("(" .. table.concat(parts, " ") .. " >/dev/full)")
      return st, err
    end
  end

  -- a command with its stdout a pipe whose reader has already gone: a FIFO
  -- opened to read and write, opened again to write, the first closed
  -- before the command starts (every write fails with EPIPE)
  local function to_closed_pipe(args)
    return function()
      local fifo = H.tmpfile("es_fifo")
      local parts = {}
      if H.wrap and H.wrap ~= "" then parts[1] = H.wrap end
      parts[#parts + 1] = H.quote(H.bin)
      for _, a in ipairs(args) do parts[#parts + 1] = H.quote(a) end
      local st, _, err = H.sh("(rm -f " .. H.quote(fifo) .. " && mkfifo " .. H.quote(fifo) .. " && exec 3<>"
        .. H.quote(fifo) .. " 4>" .. H.quote(fifo) .. " 3<&- && " .. table.concat(parts, " ") .. " >&4 4>&-)")
      return st, err
    end
  end

  -- `specula run` of a program, stopped by signal sig once it started
  local function stopped(sig)
    return function()
      local ready = H.tmpfile("es_ready_" .. sig)
      os.remove(ready)
      local prog = write("es_wait.lua", WAITING)
      local _, so = H.sh("READY_FILE=" .. H.quote(ready) .. " " .. H.quote(H.bin) .. " run " .. H.quote(prog)
        .. " --query x --quiet >/dev/null 2>&1 & pid=$!; n=0; while [ ! -s " .. H.quote(ready) .. " ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); "
        .. "done; kill -" .. sig .. " $pid; wait $pid; echo status $?")
      return tonumber(so:match("status (%d+)")), so
    end
  end

  it("run: 0, 3, 1, 2 (each usage error the docs name, and another run's records), 130 and 143", function()
    local other = H.tmpfile("es_other_run.jsonl")
    os.remove(other)
    assert.equals(0, (H.specula({ "run", EX, "--clock", "virtual", "--quiet", "--input", q, "--out", other,
      "--k", "3" })))
    check({
      { "every query answered", 0, { "run", EX, "--clock", "virtual", "--quiet", "--query", "x" } },
      { "--help", 0, { "run", "--help" } },
      { "some queries failed", 3, { "run", failing, "--clock", "virtual", "--quiet", "--input",
        write("es_qf2.jsonl", '{"id":"a","query":"boom"}\n{"id":"b","query":"fine"}\n') } },
      { "a script error", 1, { "run", write("es_broken.lua", 'error("broken at load")\n'), "--query", "x" } },
      { "--out cannot be written", 1, { "run", EX, "--clock", "virtual", "--quiet", "--query", "x", "--out",
        NOWHERE .. "o.jsonl" } },
      { "stdout cannot be written", 1, to_full({ "run", EX, "--clock", "virtual", "--quiet", "--query", "x" }) },
      { "an unknown option", 2, { "run", EX, "--query", "x", "--frobnicate" } },
      { "a missing --input file", 2, { "run", EX, "--input", NOWHERE .. "q.jsonl" } },
      { "--summary without --compare", 2, { "run", EX, "--query", "x", "--summary", H.tmpfile("es_s.json") } },
      { "--retry-failed without --out", 2, { "run", EX, "--query", "x", "--retry-failed" } },
      { "--shard-count without --shard auto", 2, { "run", EX, "--query", "x", "--shard-count", "3" } },
      { "resuming records of another run", 2, { "run", EX, "--clock", "virtual", "--quiet", "--input", q, "--out",
        other, "--k", "2" } },
      { "Ctrl-C", 130, stopped("INT") },
      { "SIGTERM", 143, stopped("TERM") },
    })
  end)

  it("compare: 0, 3 for records with error, 2 (usage, a file twice, one run's query in two files), 1", function()
    -- overlapping pieces of one --out: its first record in both
    local piece1 = write("es_piece1.jsonl", lines(res)[1] .. "\n")
    local piece2 = write("es_piece2.jsonl", table.concat(lines(res), "\n") .. "\n")
    check({
      { "done", 0, { "compare", res } },
      { "records carry error", 3, { "compare", resfail } },
      { "an unknown option", 2, { "compare", res, "--frobnicate" } },
      { "--summary - beside the table", 2, { "compare", res, "--summary", "-" } },
      { "the same file twice", 2, { "compare", res, res } },
      { "overlapping pieces of one --out", 2, { "compare", piece1, piece2 } },
      { "one configuration on two inputs", 2, { "compare", res, res_other } },
      { "an unreadable file", 1, { "compare", NOWHERE .. "r.jsonl" } },
      { "--summary cannot be written", 1, { "compare", res, "--summary", NOWHERE .. "s.json" } },
    })
  end)

  it("merge, repair and report: 0, 2, 1", function()
    check({
      { "merge done", 0, { "merge", res, "--input", q, "-o", H.tmpfile("es_m.jsonl") } },
      { "merge without -o", 2, { "merge", res } },
      { "merge: an unknown option", 2, { "merge", res, "-o", H.tmpfile("es_m2.jsonl"), "--frobnicate" } },
      { "merge: an unreadable file", 1, { "merge", NOWHERE .. "r.jsonl", "-o", H.tmpfile("es_m3.jsonl") } },
      { "merge: a failed write", 1, { "merge", res, "--input", q, "-o", NOWHERE .. "m.jsonl" } },
      { "repair done", 0, { "repair", res, "-o", H.tmpfile("es_r.jsonl") } },
      { "repair -o -", 2, { "repair", res, "-o", "-" } },
      { "repair: an unreadable file", 1, { "repair", NOWHERE .. "r.jsonl" } },
      { "repair: a failed write", 1, { "repair", res, "-o", NOWHERE .. "r.jsonl" } },
      { "report done", 0, { "report", res, "-o", H.tmpfile("es_r.html") } },
      { "report: an unknown option", 2, { "report", res, "--frobnicate" } },
      { "report: an unreadable file", 1, { "report", NOWHERE .. "r.jsonl", "-o", H.tmpfile("es_r2.html") } },
      { "report: a failed write", 1, { "report", res, "-o", NOWHERE .. "r.html" } },
    })
  end)

  it("cassette, verifiers and predictors: 0, 2, 1 (a bad labels file too)", function()
    check({
      { "cassette ls", 0, { "cassette", "ls", TAPE } },
      { "cassette: an unknown subcommand", 2, { "cassette", "frobnicate", TAPE } },
      { "cassette: no such directory", 1, { "cassette", "ls", NOWHERE .. "tape" } },
      { "verifiers done", 0, { "verifiers", TAPE } },
      { "verifiers --k 0", 2, { "verifiers", TAPE, "--k", "0" } },
      { "verifiers: a bad labels file", 1, { "verifiers", TAPE, "--labels", write("es_labels.jsonl", "nope\n") } },
      { "verifiers: no such source", 1, { "verifiers", NOWHERE .. "tape" } },
      { "predictors done", 0, { "predictors", res, "--format", "results" } },
      { "predictors: an unknown option", 2, { "predictors", res, "--frobnicate" } },
      { "predictors: no such file", 1, { "predictors", NOWHERE .. "c.jsonl" } },
    })
  end)

  it("theory, replay and bench: 0, 2, 1", function()
    check({
      { "theory done", 0, { "theory", "--p", "0.5", "--alpha", "0.2", "--beta", "0.1" } },
      { "theory: a value out of range", 2, { "theory", "--p", "2", "--alpha", "0.2", "--beta", "0.1" } },
      { "theory: stdout cannot be written", 1, to_full({ "theory", "--p", "0.5", "--alpha", "0.2", "--beta", "0.1" }) },
      { "replay done", 0, { "replay", res, "--k", "1,3" } },
      { "replay: a bad --mode", 2, { "replay", res, "--mode", "turbo" } },
      { "replay: an unreadable file", 1, { "replay", NOWHERE .. "t.json" } },
      { "bench --help", 0, { "bench", "--help" } },
      { "bench: a name that is no benchmark", 2, { "bench", "no_such_benchmark" } },
      { "bench: a benchmark that fails", 1, { "bench", "soak", "--seconds", "not-a-number" } },
    })
    -- said before its test server starts (a bad option used to leave the
    -- server running after the command failed)
    local _, _, err = H.specula({ "bench", "soak", "--seconds", "not-a-number" })
    assert.truthy(err:find("bench soak: --seconds takes a positive number, got not-a-number", 1, true), err)
  end)

  it("whatif: 0, 2, 1, 3, and 2 for an --out over a log; gateway: 2 and 1", function()
    local FIX = H.root .. "/spec/fixtures/sessions"
    local log = write("es_log.jsonl", H.read(FIX .. "/claude_code.jsonl"))
    -- a policy file whose code breaks the replay (every session's last
    -- step raises): the policy itself gets copies and cannot
    local poison = write("es_poison.lua", [[
local specula = require "specula"
local conv = specula.agents.conversation
specula.agents.conversation = function(o)
  local a = conv(o)
  local step = a.step
  a.step = function(state, ctx)
    local r = step(state, ctx)
    if r and r.final ~= nil then error("planned failure at the end") end
    return r
  end
  return a
end
return { read_only = function(tool, args) return tool == 'Read' or tool == 'Grep' or tool == 'Glob' end }
]])
    local cfg = write("es_gw.lua", "local specula = require 'specula'\n"
      .. "return specula.gateway { servers = { a = { command = { 'true' } } } }\n")
    check({
      { "whatif done", 0, { "whatif", FIX .. "/codex.jsonl", "--compare", "recorded" } },
      { "whatif: an unknown option", 2, { "whatif", FIX .. "/codex.jsonl", "--frobnicate" } },
      { "whatif: --out over a log it reads", 2, { "whatif", FIX .. "/codex.jsonl", "--out", log } },
      { "whatif: no log could be read", 1, { "whatif", NOWHERE .. "x.jsonl" } },
      { "whatif: a session's replay failed", 3, { "whatif", FIX .. "/claude_code_parallel.jsonl",
        "--policy", poison } },
      { "gateway: an unknown option", 2, { "gateway", cfg, "--frobnicate" } },
      { "gateway: an --out it cannot open", 1, { "gateway", cfg, "--out", NOWHERE .. "g.jsonl" } },
    })
    assert.equals(H.read(FIX .. "/claude_code.jsonl"), H.read(log))
  end)

  it("help to a reader that stopped early is 0, with nothing on stderr; records to it are 1", function()
    local helps = { { "--help" }, { "help" }, { "run", "--help" }, { "run", EX, "--help" } }
    for _, name in ipairs({ "theory", "replay", "compare", "merge", "repair", "report", "cassette", "verifiers",
                            "predictors", "bench", "whatif", "gateway" }) do
      helps[#helps + 1] = { name, "--help" }
    end
    for _, args in ipairs(helps) do
      local st, err = to_closed_pipe(args)()
      assert.equals(0, st, table.concat(args, " ") .. ": " .. err)
      assert.equals("", err, table.concat(args, " "))
    end
    local st, err = to_closed_pipe({ "run", EX, "--clock", "virtual", "--quiet", "--query", "x" })()
    assert.equals(1, st, err)
    assert.matches("specula run: cannot write stdout: Broken pipe", err, 1, true)
    -- help to a full disk is still a failure
    st, err = to_full({ "run", "--help" })()
    assert.equals(1, st, err)
    assert.matches("specula: cannot write to stdout: No space left on device", err, 1, true)
  end)

  it("no command, an unknown one or a bad --secret-env is a usage error; --help and --version are 0", function()
    check({
      { "no command", 2, {} },
      { "an unknown command", 2, { "frobnicate" } },
      { "--help", 0, { "--help" } },
      { "--version", 0, { "--version" } },
      { "--secret-env without a NAME", 2, { "theory", "--p", "0.5", "--alpha", "0.2", "--beta", "0.1",
        "--secret-env" } },
      { "--strict-secrets with an unset --secret-env", 2, { "theory", "--p", "0.5", "--alpha", "0.2", "--beta",
        "0.1", "--strict-secrets", "--secret-env", "SPECULA_ES_SURELY_UNSET" } },
    })
  end)
end)
