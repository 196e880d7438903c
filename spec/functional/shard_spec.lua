-- A sweep cut into shards by a scheduler (--shard auto), merged back with
-- `specula merge`, gives the same comparison as one machine's run.
local H = require "support.helpers"
local cjson = require "cjson"
local EX = H.root .. "/examples/multihop_sim.lua"
local CMP = "sequential,spechop:k=2,spechop:k=inf"

local function queries(n)
  local t = {}
  for i = 1, n do t[i] = cjson.encode({ id = "s" .. i, query = "sharded question " .. i }) end
  return table.concat(t, "\n") .. "\n"
end

-- `specula run --compare` under the virtual clock; returns status, table, stderr
local function run_compare(q, out, summary, env, extra)
  local args = { "run", EX, "--input", q, "--clock", "virtual", "--compare", CMP, "--out", out, "--quiet" }
  if summary then args[#args + 1] = "--summary" args[#args + 1] = summary end
  for _, a in ipairs(extra or {}) do args[#args + 1] = a end
  return H.specula(args, env)
end

-- one scheduler's environment for each of 4 shards
local SCHEDULERS = {
  slurm = function(i)   -- sbatch --array=1-4
    return { SLURM_ARRAY_TASK_ID = tostring(i + 1), SLURM_ARRAY_TASK_MIN = "1", SLURM_ARRAY_TASK_MAX = "4",
             SLURM_ARRAY_TASK_COUNT = "4" }, {}
  end,
  kubernetes = function(i)   -- Indexed Job, completions: 4 (count by env for two, by flag for two)
    if i % 2 == 0 then return { JOB_COMPLETION_INDEX = tostring(i), SPECULA_SHARD_COUNT = "4" }, {} end
    return { JOB_COMPLETION_INDEX = tostring(i) }, { "--shard-count", "4" }
  end,
}

describe("sharded sweeps", function()
  local q, single, single_sum, single_table

  setup(function()
    q = H.tmpfile("sweep_q.jsonl", queries(26))
    single, single_sum = H.tmpfile("single.jsonl"), H.tmpfile("single_sum.json")
    local st, out, err = run_compare(q, single, single_sum)
    assert.equals(0, st, err)
    single_table = out
  end)

  for name, env_of in pairs(SCHEDULERS) do
    it("4 shards under " .. name .. " merge into the single machine's table, byte for byte", function()
      local files = {}
      for i = 0, 3 do
        files[i + 1] = H.tmpfile(name .. "_shard" .. i .. ".jsonl")
        local env, extra = env_of(i)
        table.insert(extra, 1, "--shard")
        table.insert(extra, 2, "auto")
        local st, _, err = run_compare(q, files[i + 1], nil, env, extra)
        assert.equals(0, st, err)
        -- each record names its shard, the input's size, its position and the seed
        for _, r in ipairs(H.jsonl(H.read(files[i + 1]))) do
          assert.same({ i, 4, 26, 0 }, { r.shard.index, r.shard.count, r.shard.of, r.shard.seed })
          assert.equals(i, r.shard.pos % 4)
          assert.equals("s" .. (r.shard.pos + 1), r.id)
        end
      end
      local merged, msum = H.tmpfile(name .. "_all.jsonl"), H.tmpfile(name .. "_sum.json")
      -- shard files in any order
      local st, _, err = H.specula({ "merge", files[3], files[1], files[4], files[2], "-o", merged, "--summary", msum })
      assert.equals(0, st, err)
      assert.matches("78 records, 3 configurations x 26 queries, from 4 files (4 shards)", err, 1, true)
      local recs = H.jsonl(H.read(merged))
      assert.equals(78, #recs)
      -- configurations in the sweep's order, queries in input order
      for i, r in ipairs(recs) do
        local c = math.floor((i - 1) / 26) + 1
        assert.equals(({ "sequential", "spechop:k=2", "spechop:k=inf" })[c], r.config)
        assert.equals("s" .. ((i - 1) % 26 + 1), r.id)
      end
      local st2, merged_table, err2 = H.specula({ "compare", merged })
      assert.equals(0, st2, err2)
      local st3, single_again = H.specula({ "compare", single })
      assert.equals(0, st3)
      assert.equals(single_table, merged_table)
      assert.equals(single_table, single_again)
      assert.equals(H.read(single_sum), H.read(msum))
      -- the report's paired table is the same too
      local rm, rs = H.tmpfile(name .. "_m.html"), H.tmpfile(name .. "_s.html")
      assert.equals(0, (H.specula({ "report", merged, "-o", rm })))
      assert.equals(0, (H.specula({ "report", single, "-o", rs })))
      local function paired(path) return H.read(path):match('<table class="summary" id="paired%-table">.-</table>') end
      assert.is_truthy(paired(rm))
      assert.equals(paired(rs), paired(rm))
      -- and replay reads the merged file, one configuration at a time, as the single machine's
      local st4, r4, err4 = H.specula({ "replay", merged, "--config", "spechop:k=2", "--k", "1,2", "--json" })
      assert.equals(0, st4, err4)
      local st5, r5, err5 = H.specula({ "replay", single, "--config", "spechop:k=2", "--k", "1,2", "--json" })
      assert.equals(0, st5, err5)
      assert.equals(r5, r4)
      assert.equals(2, select(2, r4:gsub("\n", "")))
    end)
  end

  it("the Slurm example scripts run the array and the merge", function()
    local dir = H.tmpdir() .. "/slurm_sweep"
    local env = { SPECULA = H.bin, AGENT = EX, INPUT = q, SWEEP_DIR = dir, CONFIGS = CMP }
    for i = 0, 3 do
      local e = { SLURM_ARRAY_TASK_ID = tostring(i), SLURM_ARRAY_TASK_MIN = "0", SLURM_ARRAY_TASK_MAX = "3",
                  SLURM_ARRAY_TASK_COUNT = "4" }
      for k, v in pairs(env) do e[k] = v end
      local parts = {}
      for k, v in pairs(e) do parts[#parts + 1] = k .. "=" .. H.quote(v) end
      local st, _, err = H.sh(table.concat(parts, " ") .. " bash " .. H.quote(H.root .. "/examples/cluster/sweep.slurm"))
      assert.equals(0, st, err)
    end
    local parts = {}
    for k, v in pairs(env) do parts[#parts + 1] = k .. "=" .. H.quote(v) end
    local st, table_out, err = H.sh(table.concat(parts, " ") .. " bash " .. H.quote(H.root .. "/examples/cluster/merge.slurm"))
    assert.equals(0, st, err)
    assert.equals(single_table, table_out)
    assert.equals(H.read(single_sum), H.read(dir .. "/summary.json"))
    assert.is_truthy(H.read(dir .. "/report.html"))
  end)

  it("says when a shard's results cannot equal one machine's: state the queries share (a learning predictor)",
    function()
    local paste = H.root .. "/examples/paste_research.lua"
    for _, extra in ipairs({ {}, { "--compare", "sequential,spechop:k=2" } }) do
      local args = { "run", paste, "--input", q, "--clock", "virtual", "--shard", "1/3" }
      for _, a in ipairs(extra) do args[#args + 1] = a end
      local st, _, err = H.specula(args)
      assert.equals(0, st, err)
      assert.matches("specula: note: the agent's predictor learns across queries, and a shard runs one query in 3: "
        .. "its results (times, not answers) differ from those of one machine running the whole input", err, 1, true)
    end
    -- an agent whose queries share nothing: no note
    local st, _, err = H.specula({ "run", EX, "--input", q, "--clock", "virtual", "--shard", "1/3" })
    assert.equals(0, st, err)
    assert.not_matches("note:", err, 1, true)
  end)

  it("refuses shards that do not partition the input, naming what is wrong", function()
    local f = {}
    for i = 0, 3 do
      f[i] = H.tmpfile("p_shard" .. i .. ".jsonl")
      local st, _, err = H.specula({ "run", EX, "--input", q, "--clock", "virtual", "--shard", i .. "/4",
        "--out", f[i], "--quiet" })
      assert.equals(0, st, err)
    end
    local out = H.tmpfile("p_all.jsonl")
    -- a shard missing: its queries are named with their shard
    local st, _, err = H.specula({ "merge", f[0], f[1], f[3], "-o", out })
    assert.equals(1, st)
    assert.matches("configuration 'spechop:k=3' lacks 6 of 26 queries: position 2 (shard 2/4)", err, 1, true)
    -- with the input, the missing queries' ids are known
    st, _, err = H.specula({ "merge", f[0], f[1], f[3], "-o", out, "--input", q })
    assert.equals(1, st)
    assert.matches("lacks 6 of 26 queries: 's3' (position 2, shard 2/4)", err, 1, true)
    -- a shard given twice
    st, _, err = H.specula({ "merge", f[0], f[1], f[2], f[3], f[1], "-o", out })
    assert.equals(1, st)
    assert.matches("query 's2' appears twice for configuration 'spechop:k=3': " .. f[1] .. ":1 and " .. f[1] .. ":1", err, 1, true)
    -- a shard run with another seed
    local other = H.tmpfile("p_seed.jsonl")
    assert.equals(0, (H.specula({ "run", EX, "--input", q, "--clock", "virtual", "--shard", "2/4", "--seed", "7",
      "--out", other, "--quiet" })))
    st, _, err = H.specula({ "merge", f[0], f[1], other, f[3], "-o", out })
    assert.equals(1, st)
    assert.matches("disagree on the seed (0 and 7)", err, 1, true)
    -- a shard cut from another input
    local q2 = H.tmpfile("sweep_q2.jsonl", queries(30))
    local wrong = H.tmpfile("p_wrong.jsonl")
    assert.equals(0, (H.specula({ "run", EX, "--input", q2, "--clock", "virtual", "--shard", "2/4", "--out", wrong,
      "--quiet" })))
    st, _, err = H.specula({ "merge", f[0], f[1], wrong, f[3], "-o", out })
    assert.equals(1, st)
    assert.matches("disagree on the input's query count (26 and 30)", err, 1, true)
    -- a configuration run with other settings in one shard
    local k5 = H.tmpfile("p_k5.jsonl")
    assert.equals(0, (H.specula({ "run", EX, "--input", q, "--clock", "virtual", "--shard", "2/4", "--k", "3",
      "--spec-launch", "slot", "--out", k5, "--quiet" })))
    st, _, err = H.specula({ "merge", f[0], f[1], k5, f[3], "-o", out })
    assert.equals(1, st)
    assert.matches("configuration 'spechop:k=3' ran with different settings", err, 1, true)
    -- a failed write is an error naming the file
    st, _, err = H.specula({ "merge", f[0], f[1], f[2], f[3], "-o", "/dev/full" })
    assert.is_true(st ~= 0)
    assert.matches("writing '/dev/full' failed", err, 1, true)
    st, _, err = H.specula({ "merge", f[0], f[1], f[2], f[3], "-o", out, "--summary", H.tmpdir() .. "/no/such/dir/s.json" })
    assert.is_true(st ~= 0)
    assert.matches("cannot write '" .. H.tmpdir() .. "/no/such/dir/s.json'", err, 1, true)
    -- the complete set merges; an unsharded file needs --input
    st, _, err = H.specula({ "merge", f[0], f[1], f[2], f[3], "-o", out, "--input", q })
    assert.equals(0, st, err)
    assert.equals(26, #H.jsonl(H.read(out)))
    local plain = H.tmpfile("p_plain.jsonl")
    assert.equals(0, (H.specula({ "run", EX, "--input", q, "--clock", "virtual", "--out", plain, "--quiet" })))
    st, _, err = H.specula({ "merge", plain, "-o", out })
    assert.equals(1, st)
    assert.matches("has no shard field", err, 1, true)
    st, _, err = H.specula({ "merge", plain, "-o", out, "--input", q })
    assert.equals(0, st, err)
    -- a cut-off line is named, not skipped
    local cut = H.tmpfile("p_cut.jsonl", H.read(f[2]) .. '{"id":"s99","stats":')
    st, _, err = H.specula({ "merge", f[0], f[1], cut, f[3], "-o", out })
    assert.equals(1, st)
    assert.matches(cut .. ":7: not a JSON object", err, 1, true)
  end)

  it("--shard auto without an index or a count is a usage error naming what is missing", function()
    local base = { "run", EX, "--input", q, "--clock", "virtual", "--shard", "auto" }
    local cases = {
      -- said once: "--shard auto: no scheduler index", not "--shard auto: --shard auto found ..."
      { {}, "specula run: --shard auto: no scheduler index: neither SLURM_ARRAY_TASK_ID (Slurm job array) nor "
        .. "JOB_COMPLETION_INDEX" },
      { { JOB_COMPLETION_INDEX = "1" }, "JOB_COMPLETION_INDEX is set but the shard count is missing: give --shard-count N or set SPECULA_SHARD_COUNT" },
      { { SLURM_ARRAY_TASK_ID = "2" }, "SLURM_ARRAY_TASK_ID is set but neither SLURM_ARRAY_TASK_COUNT nor SLURM_ARRAY_TASK_MIN/MAX" },
      { { JOB_COMPLETION_INDEX = "4", SPECULA_SHARD_COUNT = "4" }, "JOB_COMPLETION_INDEX 4 is outside 0..3" },
      { { SLURM_ARRAY_TASK_ID = "5", SLURM_ARRAY_TASK_MIN = "0", SLURM_ARRAY_TASK_MAX = "9", SLURM_ARRAY_TASK_COUNT = "3" },
        "SLURM_ARRAY_TASK_COUNT is 3 but MIN..MAX spans 10 tasks" },
    }
    -- the spec's own environment must not leak a scheduler's variables in
    local clear = { SLURM_ARRAY_TASK_ID = "", JOB_COMPLETION_INDEX = "", SLURM_ARRAY_TASK_MIN = "",
                    SLURM_ARRAY_TASK_MAX = "", SLURM_ARRAY_TASK_COUNT = "", SPECULA_SHARD_COUNT = "" }
    for _, c in ipairs(cases) do
      local env = {}
      for k, v in pairs(clear) do env[k] = v end
      for k, v in pairs(c[1]) do env[k] = v end
      local st, _, err = H.specula(base, env)
      assert.equals(2, st, err)
      assert.matches(c[2], err, 1, true)
    end
    local senv = { SLURM_ARRAY_TASK_ID = "1", SLURM_ARRAY_TASK_MIN = "0", SLURM_ARRAY_TASK_MAX = "3" }
    local st, _, err = H.specula({ "run", EX, "--input", q, "--shard", "auto", "--shard-count", "5" }, senv)
    assert.equals(2, st)
    assert.matches("--shard-count 5 disagrees with the Slurm array's 4 tasks", err, 1, true)
    st, _, err = H.specula({ "run", EX, "--input", q, "--shard-count", "4" })
    assert.equals(2, st)
    assert.matches("--shard-count goes with --shard auto", err, 1, true)
  end)
end)
