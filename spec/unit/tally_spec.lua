-- Unit tests for specula.run.tally: what `--compare` keeps of written records.
-- The table computed from the tally's slim records and agreement keys must
-- be the table computed from the full records.
local tally = require("specula.run.tally")
local compare = require("specula.run.compare")
local metrics = require("specula.metrics")

-- A configuration's records: stats with every number the table reads, a
-- few failed queries without stats, some without an answer, some with gold,
-- trajectories that differ from the baseline's on a fraction of queries.
local function records(rng, n, config, differ, ids)
  local out = {}
  for i = 1, n do
    local id = ids and ids[i] or ("q" .. i)
    local traj = {}
    for h = 1, 3 do
      local obs = "fact:" .. id .. "/" .. h
      if rng:next() < differ then obs = "guess:" .. h .. "/" .. rng:int(1000) end
      traj[h] = { segment = "hop " .. h, action = { tool = "search", args = { q = id .. h } }, observation = obs }
    end
    local r = { id = id, query = "question " .. id, config = config, trajectory = traj }
    if i % 7 ~= 0 then r.answer = "answer:" .. id end
    if i % 5 == 0 then r.gold = { "answer:" .. id } end
    if i % 11 == 0 then
      r.error = "query failed"
    else
      r.stats = { wall_ms = 100 + 900 * rng:next(), standard_ms = 1000 + 100 * rng:next(), wasted_calls = rng:int(9) - 1,
                  wasted_cost = 0.001 * rng:int(9), calls = { model = rng:int(20), target = rng:int(20),
                  speculator = rng:int(20), predicted = rng:int(3) - 1, warmup = 0 },
                  cancelled = { total = rng:int(9) - 1 }, hops = 3, rel_lat = 0.5 }
    end
    out[i] = r
  end
  return out
end

describe("specula.run.tally", function()
  it("gives the same --compare table as the full records, agreement included", function()
    local rng = metrics.prng(7)
    local configs = { { name = "spechop:k=2", mode = "spechop" }, { name = "sequential", mode = "sequential" },
                      { name = "spechop:k=inf", mode = "spechop" } }
    -- the baseline has an id twice: agreement pairs with the last one
    local ids = {}
    for i = 1, 60 do ids[i] = "q" .. i end
    ids[60] = "q3"
    local full = { records(rng, 60, configs[1].name, 0.3), records(rng, 60, configs[2].name, 0, ids),
                   records(rng, 60, configs[3].name, 0.5) }
    full[2][60].trajectory[1].observation = "not the first q3's"
    full[1][3].trajectory, full[1][3].answer = full[2][60].trajectory, full[2][60].answer
    local want = compare.rows(configs, full)
    assert.is_true(want[1].agreement < 1 and want[3].agreement < want[1].agreement)

    local tallies, slim = {}, {}
    for ci, recs in ipairs(full) do
      local t = tally.new(#recs + 2)   -- two positions never filled
      for i, r in ipairs(recs) do t:add(i, r, compare.agree_text(r)) end
      tallies[ci], slim[ci] = t, t:records()
      assert.equals(#recs, #slim[ci])
    end
    local got = compare.rows(configs, slim, false, tally.agree_keys(tallies, 2, slim))
    assert.same(want, got)
    assert.equals(compare.table_text(configs, want), compare.table_text(configs, got))
  end)

  it("keeps what the table reads and nothing it does not", function()
    local t = tally.new(3)
    t:add(1, { id = 1, config = "c", answer = "a", gold = { "a" },
               stats = { wall_ms = 5, standard_ms = 10, wasted_calls = 1, wasted_cost = 0.5,
                         calls = { model = 2, target = 1, speculator = 1, predicted = 0, warmup = 0 },
                         cancelled = { total = 3 }, gate = { x = 1 } }, trajectory = { 1, 2 } })
    t:add(3, { id = "x", error = "boom" })
    local r = t:records()
    assert.equals(2, #r)
    assert.same({ id = 1, config = "c", answer = "a", gold = { "a" },
                  stats = { wall_ms = 5, standard_ms = 10, wasted_calls = 1, wasted_cost = 0.5,
                            calls = { model = 2, target = 1, speculator = 1, predicted = 0, warmup = 0 },
                            cancelled = { total = 3 } } }, r[1])
    assert.same({ id = "x", error = "boom" }, r[2])
    -- a number the record lacks stays absent (not 0)
    local t2 = tally.new(1)
    t2:add(1, { id = 2, stats = { wall_ms = 1, calls = "?" } })
    assert.same({ id = 2, stats = { wall_ms = 1, calls = {}, cancelled = {} } }, t2:records()[1])
    assert.has_error(function() t2:add(2, { id = 3 }) end, "specula.run.tally: position out of range")
  end)

  it("keys agree exactly when the agreement texts are equal", function()
    local texts = { "[1]", "[1]", "[2]", "", "", "[1] " }
    local base, other = tally.new(#texts), tally.new(#texts)
    local recs_b, recs_o = {}, {}
    for i, s in ipairs(texts) do
      recs_b[i] = { id = i }
      recs_o[i] = { id = i }
      base:add(i, recs_b[i], "[1]")
      other:add(i, recs_o[i], s)
    end
    local all = { base:records(), other:records() }
    local keys = tally.agree_keys({ base, other }, 1, all)
    for i, s in ipairs(texts) do
      assert.equals(s == "[1]", keys[all[1][i]] == keys[all[2][i]], "text " .. i)
    end
  end)

  it("keeps a text equal to the shared baseline's once, and keys it as before", function()
    -- the baseline's texts, and two configurations: one that agrees at
    -- every position but one (a text of equal length), one that shares and
    -- differs by length and by a missing text
    local btexts = { "[1,\"a\"]", "[2,\"b\"]", "[3,\"c\"]", "[4,\"d\"]" }
    local others = { { "[1,\"a\"]", "[2,\"b\"]", "[3,\"x\"]", "[4,\"d\"]" },
                     { "[1,\"a\"]", "[2,\"bb\"]", nil, "[4,\"d\"]" } }
    local function build(share)
      local base = tally.new(#btexts)
      local recs = { {} }
      for i, s in ipairs(btexts) do recs[1][i] = { id = i }; base:add(i, recs[1][i], s) end
      local ts = { base }
      for ci, list in ipairs(others) do
        local t = tally.new(#btexts)
        if share then t:share(base) end
        recs[ci + 1] = {}
        for i = 1, #btexts do recs[ci + 1][i] = { id = i }; t:add(i, recs[ci + 1][i], list[i]) end
        ts[ci + 1] = t
      end
      local all = {}
      for ci, t in ipairs(ts) do all[ci] = t:records() end
      local keys = tally.agree_keys(ts, 1, all)
      local same = {}
      for ci = 1, #ts do
        same[ci] = {}
        for i = 1, #btexts do same[ci][i] = keys[all[ci][i]] ~= nil and keys[all[ci][i]] == keys[all[1][i]] end
      end
      return ts, same
    end
    local plain, want = build(false)
    local shared, got = build(true)
    assert.same(want, got)
    assert.same({ true, true, false, true }, got[2])
    assert.same({ true, false, false, true }, got[3])
    -- only the texts that differ from the baseline's were copied
    assert.equals(plain[1].text_len, shared[1].text_len)
    assert.equals(#"[3,\"x\"]", shared[2].text_len)
    assert.equals(#"[2,\"bb\"]", shared[3].text_len)
    -- the baseline is fixed once shared
    assert.has_error(function() shared[1]:add(1, { id = 1 }, "[0]") end,
      "specula.run.tally: a shared tally takes no more records")
  end)

  it("keeps the same numbers of a record whose stats are engine-written text as of its table", function()
    local records = require "specula.run.records"
    local json = require "specula.json"
    local ffi = require "ffi"
    math.randomseed(33)
    local n = 300
    local from_table, from_text = tally.new(n), tally.new(n)
    for i = 1, n do
      local st = ffi.new("sp_window_stats")
      st.wall_ms, st.standard_ms = math.random() * 10 ^ math.random(0, 5), math.random() * 10 ^ math.random(0, 5)
      st.wasted_calls, st.wasted_cost = math.random(0, 9), math.random() * math.random(0, 3)
      for _, f in ipairs({ "model_calls", "target_calls", "spec_calls", "predicted_calls", "warmup_calls",
                           "cancelled_model", "cancelled_target", "cancelled_spec" }) do
        st[f] = math.random(0, 50)
      end
      local rc = { k_cfg = 3, mode = "spechop", m = 1, launch = "eager",
                   match = i % 3 == 0 and "exact" or nil, pfoff = i % 2 == 0 }
      local text = assert(records.stats_text(st, 5, rc))
      from_table:add(i, { id = i, answer = "a", stats = records.stats_table(st, 5, rc) })
      from_text:add(i, { id = i, answer = "a", stats = json.raw(text),
        _agg = { st = ffi.new("sp_window_stats", st), pfoff = rc.match and rc.pfoff or nil } })
    end
    local a, b = from_table:records(), from_text:records()
    assert.equals(n, #b)
    for i = 1, n do assert.same(a[i], b[i], "record " .. i) end
    -- the predictor-off mark is carried for the queries that predict
    assert.is_true(b[6].stats.prefetch.predictor_off)
    assert.is_nil(b[4].stats.prefetch)
  end)
end)
