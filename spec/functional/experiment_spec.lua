-- Policy experiments: batch runs, resume, shards, paired comparison, datasets.
local H = require "support.helpers"
local cjson = require "cjson"
local EX = H.root .. "/examples/multihop_sim.lua"

local function queries(n, prefix, extra)
  local t = {}
  for i = 1, n do
    local r = { id = (prefix or "q") .. i, query = "experiment question " .. i }
    for k, v in pairs(extra or {}) do r[k] = v end
    t[i] = cjson.encode(r)
  end
  return table.concat(t, "\n") .. "\n"
end

-- the fields that do not depend on wall-clock time
local function stable(recs)
  local out = {}
  for i, r in ipairs(recs) do
    out[i] = cjson.encode({ r.id, r.query, r.answer, r.error or false, r.trajectory, r.stats.hops, r.stats.commits })
  end
  return out
end

describe("experiments", function()
  it("a resumed run produces the same results file as an uninterrupted one #timing", function()
    local q = H.tmpfile("resume.jsonl", queries(24))
    local full = H.tmpfile("full.jsonl")
    local st, _, err = H.specula({ "run", EX, "--input", q, "--out", full, "--concurrency", "6", "--quiet" })
    assert.equals(0, st, err)
    -- interrupt a second run mid-way with SIGKILL, then resume it
    local part = H.tmpfile("part.jsonl")
    os.execute("(" .. H.quote(H.bin) .. " run " .. H.quote(EX) .. " --input " .. H.quote(q) .. " --out "
      .. H.quote(part) .. " --concurrency 6 --quiet >/dev/null 2>&1 & pid=$!; sleep 0.9; kill -9 $pid) 2>/dev/null")
    local before = #H.jsonl(H.read(part) or "")
    assert.is_true(before > 0 and before < 24, "the kill should land mid-run (had " .. before .. " lines)")
    local st2, _, err2 = H.specula({ "run", EX, "--input", q, "--out", part, "--concurrency", "6" })
    assert.equals(0, st2, err2)
    assert.matches("resuming: %d+ results already in", err2)
    assert.same(stable(H.jsonl(H.read(full))), stable(H.jsonl(H.read(part))))
  end)

  it("shards partition the queries: 0/3, 1/3 and 2/3 together are the whole set, none repeated", function()
    local q = H.tmpfile("shard.jsonl", queries(20))
    local seen, total = {}, 0
    for i = 0, 2 do
      local out = H.tmpfile("shard" .. i .. ".jsonl")
      local st, _, err = H.specula({ "run", EX, "--input", q, "--out", out, "--shard", i .. "/3", "--quiet" })
      assert.equals(0, st, err)
      for _, r in ipairs(H.jsonl(H.read(out))) do
        assert.is_nil(seen[r.id], "repeated " .. r.id)
        seen[r.id] = true
        total = total + 1
      end
    end
    assert.equals(20, total)
    for i = 1, 20 do assert.is_true(seen["q" .. i]) end
    local st, _, err = H.specula({ "run", EX, "--input", q, "--shard", "3/3" })
    assert.equals(2, st)
    assert.matches("--shard expects i/n", err, 1, true)
  end)

  it("the paired table agrees with the per-query records", function()
    local q = H.tmpfile("cmp.jsonl", queries(16, "c", { answer = "answer:zzz" }))
    local out, sum = H.tmpfile("cmp_out.jsonl"), H.tmpfile("sum.json")
    local st, table_out, err = H.specula({ "run", EX, "--input", q, "--compare",
      "sequential,spechop:k=2,spechop:k=inf", "--out", out, "--summary", sum, "--concurrency", "16" })
    assert.equals(0, st, err)
    assert.matches("RelLat %[95%% CI%]", table_out)
    local rows = cjson.decode(H.read(sum))
    local by = {}
    for _, r in ipairs(H.jsonl(H.read(out))) do
      by[r.config] = by[r.config] or {}
      table.insert(by[r.config], r)
    end
    local seq_by_id = {}
    for _, r in ipairs(by.sequential) do seq_by_id[r.id] = r end
    for _, row in ipairs(rows) do
      local recs = by[row.config]
      assert.equals(16, #recs)
      assert.equals(row.queries, #recs)
      local w, s, walls, model, agree = 0, 0, {}, 0, 0
      for _, r in ipairs(recs) do
        w, s = w + r.stats.wall_ms, s + r.stats.standard_ms
        walls[#walls + 1] = r.stats.wall_ms
        model = model + r.stats.calls.model
        local b = seq_by_id[r.id]
        if cjson.encode({ b.answer, b.trajectory }) == cjson.encode({ r.answer, r.trajectory }) then agree = agree + 1 end
      end
      table.sort(walls)
      assert.is_true(math.abs(row.rel_lat - w / s) < 1e-9)
      assert.is_true(row.rel_lat_lo <= row.rel_lat and row.rel_lat <= row.rel_lat_hi)
      assert.is_true(math.abs(row.mean - w / #recs) < 1e-9)
      assert.is_true(math.abs(row.p50 - (walls[8] + walls[9]) / 2) < 1e-9)
      assert.is_true(math.abs(row.model_per_q - model / #recs) < 1e-9)
      assert.is_true(math.abs(row.agreement - agree / #recs) < 1e-9)
      assert.equals(0, row.em)   -- the gold answer never matches the simulated one
    end
    assert.equals(1, rows[3].agreement)  -- lossless: every query agrees with sequential
    assert.is_true(rows[3].rel_lat < rows[1].rel_lat)
  end)

  it("writes a query's gold answers as a list, and no gold key for a query without any", function()
    -- (an input without gold gave "gold":{}, an object: jq '.gold[0]' failed on it)
    local inp = H.tmpfile("gold.jsonl", table.concat({
      cjson.encode({ id = "none", query = "no gold here" }),
      cjson.encode({ id = "one", query = "Q", gold = "4" }),
      cjson.encode({ id = "list", query = "Q", answer = "x", answer_aliases = { "y", "x" } }),
      cjson.encode({ id = "empty", query = "Q", gold = {} }),
    }, "\n") .. "\n")
    local agent = H.tmpfile("gold_agent.lua", [[
      local specula = require "specula"
      return specula.agent {
        init = function(q) return { q = q } end,
        step = function(s, ctx)
          if ctx.id == "list" then error("this query fails") end
          return { final = "done" }
        end,
        update = function(s) return s end,
      }
    ]])
    local out = H.tmpfile()
    local st, _, err = H.specula({ "run", agent, "--input", inp, "--out", out, "--quiet" })
    assert.equals(3, st, err)   -- one query failed
    local text = H.read(out)
    local by = {}
    for _, r in ipairs(H.jsonl(text)) do by[r.id] = r end
    assert.is_nil(by.none.gold)
    assert.is_nil(by.empty.gold)
    assert.same({ "4" }, by.one.gold)
    assert.same({ "x", "y" }, by.list.gold)   -- a failed query keeps its gold
    assert.is_truthy(by.list.error)
    assert.is_nil(text:find('"gold":{}', 1, true))
    assert.is_truthy(text:find('"gold":["4"]', 1, true))
  end)

  it("reads HotpotQA, 2WikiMultihopQA and MuSiQue files with gold answers and hop budgets", function()
    local two = H.tmpfile("2wiki.json", cjson.encode({
      { _id = "w1", type = "compositional", question = "Who is the father of the director of X?",
        supporting_facts = { { "X", 0 }, { "Director", 1 }, { "Director", 2 } }, evidences = {}, context = {}, answer = "Paul" },
      { _id = "w2", type = "comparison", question = "Which came first?",
        supporting_facts = { { "A", 0 }, { "B", 0 } }, evidences = {}, context = {}, answer = "A" } }))
    local mus = H.tmpfile("musique.jsonl", cjson.encode({ id = "m1", question = "Q?", answer = "Ans", answer_aliases = { "Answer" },
      question_decomposition = { {}, {}, {} }, paragraphs = {}, answerable = true }) .. "\n{ not json\n"
      .. cjson.encode({ id = "m2", question = "Missing answer" }) .. "\n")
    local hot = H.tmpfile("hotpot.json", cjson.encode({
      { _id = "h1", question = "Which?", answer = "yes", supporting_facts = { { "A", 0 }, { "B", 1 } },
        context = {}, type = "bridge", level = "hard" } }))
    for _, case in ipairs({ { two, 2, "w1", 4 }, { mus, 1, "m1", 5 }, { hot, 1, "h1", 4 } }) do
      local out = H.tmpfile()
      local st, _, err = H.specula({ "run", EX, "--input", case[1], "--out", out, "--quiet" })
      assert.equals(0, st, err)
      local recs = H.jsonl(H.read(out))
      assert.equals(case[2], #recs)
      assert.equals(case[3], recs[1].id)
      assert.is_truthy(recs[1].gold)
      if case[1] == mus then
        assert.matches("musique.jsonl:2", err, 1, true)          -- the malformed line, named and skipped
        assert.matches("answer", err, 1, true)                   -- the missing field, named
      end
    end
    -- hop budgets reach the agent as ctx.max_hops
    local code = [[
      local specula = require "specula"
      local recs = specula.datasets.load(arg[1])
      print(recs[1].max_hops, recs[2].max_hops)
    ]]
    local st, out = H.run_lua(code, { two })
    assert.equals(0, st)
    assert.matches("4\t4", out, 1, true)
  end)

  it("reports an unknown dataset shape clearly", function()
    local weird = H.tmpfile("weird.json", cjson.encode({ { foo = 1, bar = 2 } }))
    local st, _, err = H.specula({ "run", EX, "--input", weird })
    assert.not_equals(0, st)
    assert.matches("weird.json", err, 1, true)
    assert.matches("foo", err, 1, true)
  end)

  it("shows a progress line when asked and stays quiet otherwise", function()
    local q = H.tmpfile("prog.jsonl", queries(6))
    local out = H.tmpfile()
    local st, _, err = H.specula({ "run", EX, "--input", q, "--out", out, "--progress" })
    assert.equals(0, st, err)
    assert.matches("6/6 .* q/s .*ETA .*RelLat", err)
    local out2 = H.tmpfile()
    local st2, _, err2 = H.specula({ "run", EX, "--input", q, "--out", out2 })
    assert.equals(0, st2)
    assert.not_matches("q/s", err2, 1, true)   -- stderr is not a TTY here
  end)
end)
