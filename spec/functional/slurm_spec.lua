-- The Slurm scripts of examples/cluster on a real single-node Slurm (Debian's
-- slurm-wlm and munge; .ci/slurm-up starts munged, slurmctld and slurmd, or
-- finds them running): a sweep submitted as users submit it
-- (examples/cluster/submit.sh: the array job, then the merge with
-- --dependency=afterok), every task checked, and the merged file's
-- `specula compare` table byte for byte the one a single machine prints.
-- Without Slurm this spec is pending, saying why; in CI (CI set) it fails.
local H = require "support.helpers"
local cjson = require "cjson"

local UP = H.root .. "/.ci/slurm-up"
local CONFIGS = "sequential,spechop:k=2,spechop:k=3,spechop:k=inf"
local QUERIES, TASKS = 40, 4
local WAIT_S = 150

local in_ci = H.in_ci

local function is_root()
  local _, uid = H.sh("id -u")
  return uid:match("^0%s*$") ~= nil
end

-- what is missing to run a cluster here, or nil (the CTest test deps/slurm
-- asks the same)
local missing = require("support.deps").slurm

local function sudo() return is_root() and "" or "sudo -n " end

describe("a sweep on a single-node Slurm cluster #slow", function()
  local why = missing()
  if why then
    local msg = why
    if in_ci() then
      it("runs examples/cluster on Slurm", function() error(msg) end)
    else
      pending(msg)
    end
    return
  end

  local conf, started

  setup(function()
    local st, out, err = H.sh(sudo() .. H.quote(UP))
    assert(st == 0, ".ci/slurm-up failed:\n" .. out .. err)
    conf = out:match("SLURM_CONF=(%S+)")
    assert(conf, "no SLURM_CONF line from .ci/slurm-up:\n" .. out .. err)
    started = err:find("started", 1, true) ~= nil
  end)

  teardown(function()
    -- only what this spec started: a cluster that was up stays up
    if started then H.sh(sudo() .. H.quote(UP) .. " stop") end
  end)

  -- a Slurm client command with the cluster's configuration
  local function slurm(cmd)
    return H.sh("export SLURM_CONF=" .. H.quote(conf) .. "; " .. cmd)
  end

  it("runs the array, merges after it, and prints the single machine's table byte for byte", function()
    local work = H.tmpdir() .. "/slurm-sweep"
    assert(os.execute("mkdir -p " .. H.quote(work)) == 0)
    local lines = {}
    for i = 1, QUERIES do
      lines[i] = cjson.encode({ id = "q" .. i, query = "question " .. i, answer = "unknown" })
    end
    local input = work .. "/queries.jsonl"
    local f = assert(io.open(input, "w"))
    f:write(table.concat(lines, "\n"), "\n")
    f:close()
    local sweep = work .. "/sweep"
    local agent = H.root .. "/examples/multihop_sim.lua"
    -- as a user submits it, from the directory the logs go to
    local env = table.concat({ "SPECULA=" .. H.quote(H.bin), "AGENT=" .. H.quote(agent), "INPUT=" .. H.quote(input),
      "SWEEP_DIR=" .. H.quote(sweep), "CONFIGS=" .. H.quote(CONFIGS), "CLOCK=virtual" }, " ")
    local st, out, err = slurm("cd " .. H.quote(work) .. " && " .. env .. " sh "
      .. H.quote(H.root .. "/examples/cluster/submit.sh"))
    assert.are.equal(0, st, out .. err)
    local array = out:match("submitted array job (%d+)")
    local merge = out:match("Submitted batch job (%d+)")
    assert.is_not_nil(array, out)
    assert.is_not_nil(merge, out)
    -- wait until neither is queued or running
    local t0 = os.time()
    while true do
      local _, q = slurm("squeue -h -o %i -j " .. array .. "," .. merge)
      if not q:find("%d") then break end
      assert(os.time() - t0 < WAIT_S, "the sweep did not finish in " .. WAIT_S .. " s:\n" .. q)
      os.execute("sleep 0.5")
    end
    -- every task of the array and the merge completed, the merge after them
    local _, shown = slurm("scontrol -o show job " .. array)
    local tasks, last_end = {}, ""
    for line in shown:gmatch("[^\n]+") do
      local id = line:match("ArrayTaskId=(%d+)")
      if id then
        assert.matches("JobState=COMPLETED", line)
        assert.matches("ExitCode=0:0", line)
        tasks[tonumber(id)] = true
        local e = line:match("EndTime=(%S+)")
        if e > last_end then last_end = e end
      end
    end
    for i = 0, TASKS - 1 do assert.is_true(tasks[i], "array task " .. i .. " did not run:\n" .. shown) end
    local _, mshown = slurm("scontrol -o show job " .. merge)
    assert.matches("JobState=COMPLETED", mshown)
    assert.matches("ExitCode=0:0", mshown)
    assert.matches("Dependency=", mshown)
    assert.is_true(mshown:match("StartTime=(%S+)") >= last_end, mshown)
    -- each task wrote its own shard: every configuration, its queries only
    local ids = {}
    for i = 0, TASKS - 1 do
      local recs = H.jsonl(assert(H.read(sweep .. "/shard-" .. i .. ".jsonl"), "no shard " .. i))
      assert.are.equal(4 * QUERIES / TASKS, #recs)
      for _, r in ipairs(recs) do
        assert.are.equal(i, r.shard.index)
        assert.are.equal(TASKS, r.shard.count)
        assert.is_nil(r.error)
        ids[r.id] = (ids[r.id] or 0) + 1
      end
    end
    for i = 1, QUERIES do assert.are.equal(4, ids["q" .. i]) end
    -- the table of one machine, and of the merged sweep
    local single_out = work .. "/single.jsonl"
    local st1, single = H.specula({ "run", agent, "--input", input, "--clock", "virtual", "--compare", CONFIGS,
      "--out", single_out })
    assert.are.equal(0, st1)
    local st2, merged, err2 = H.specula({ "compare", sweep .. "/all.jsonl" })
    assert.are.equal(0, st2, err2)
    assert.is_true(#single > 0)
    assert.are.equal(single, merged)
    -- the merge job printed and kept the same table
    assert.are.equal(single, H.read(sweep .. "/table.txt"))
    assert.is_not_nil(H.read(work .. "/specula-merge-" .. merge .. ".log"):find(single, 1, true))
    assert.is_string(H.read(sweep .. "/report.html"))
  end)
end)
