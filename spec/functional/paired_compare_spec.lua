-- `specula run --compare` and `specula compare`: the paired differences of
-- every configuration against the baseline, recomputed from the records.
local H = require "support.helpers"
local cjson = require "cjson"
local EX = H.root .. "/examples/multihop_sim.lua"

local function queries(n)
  local t = {}
  for i = 1, n do t[i] = cjson.encode({ id = "p" .. i, query = "paired question " .. i }) end
  return table.concat(t, "\n") .. "\n"
end

local function near(a, b, what)
  assert.is_true(math.abs(a - b) <= 1e-9 * math.max(1, math.abs(a)), ("%s: %.12g vs %.12g"):format(what, a, b))
end

local function median(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  local n = #s
  if n % 2 == 1 then return s[(n + 1) / 2] end
  return (s[n / 2] + s[n / 2 + 1]) / 2
end

-- exact two-sided binomial p from the counts, by rational sums of C(n, j)
local function sign_p(pos, neg)
  local n, m = pos + neg, math.min(pos, neg)
  if n == 0 then return 1 end
  local c, sum = 1, 1
  for j = 1, m do c = c * (n - j + 1) / j; sum = sum + c end
  return math.min(1, 2 * sum / 2 ^ n)
end

local function calls(s)
  local c = s.calls
  return c.model + c.target + c.speculator + c.predicted + c.warmup
end

describe("paired differences in --compare", function()
  it("the table and --summary carry them, and they match a recomputation from the records", function()
    local q = H.tmpfile("pq.jsonl", queries(30))
    local out, sum = H.tmpfile("pq_out.jsonl"), H.tmpfile("pq_sum.json")
    -- the baseline is the first configuration, here a speculative one
    local st, tbl, err = H.specula({ "run", EX, "--input", q, "--clock", "virtual", "--compare",
      "spechop:k=2,sequential,spechop:k=inf", "--out", out, "--summary", sum })
    assert.equals(0, st, err)
    assert.matches("paired differences against spechop:k=2", tbl, 1, true)
    for _, l in ipairs({ "sequential             wall_ms", "spechop:k=inf          wall_ms" }) do
      assert.matches(l, tbl, 1, true)
    end
    assert.matches("mean Δ [95% CI]", tbl, 1, true)
    assert.matches("sign p", tbl, 1, true)
    local rows = cjson.decode(H.read(sum))
    assert.is_nil(rows[1].paired)                      -- the baseline is not paired with itself
    local by = {}
    for _, r in ipairs(H.jsonl(H.read(out))) do
      by[r.config] = by[r.config] or {}
      by[r.config][r.id] = r
    end
    local base = by["spechop:k=2"]
    for ri = 2, 3 do
      local row = rows[ri]
      local p = row.paired
      assert.equals("spechop:k=2", p.baseline)
      assert.equals(30, p.n)
      local measures = {
        wall_ms = function(s) return s.wall_ms end,
        wasted_cost = function(s) return s.wasted_cost end,
        calls = calls,
      }
      for key, get in pairs(measures) do
        local r = p[key]
        local d, sb, so, pos, neg, zero = {}, 0, 0, 0, 0, 0
        for id, rec in pairs(by[row.config]) do
          local x, y = get(base[id].stats), get(rec.stats)
          d[#d + 1] = y - x
          sb, so = sb + x, so + y
          if y > x then pos = pos + 1 elseif y < x then neg = neg + 1 else zero = zero + 1 end
        end
        local mean = 0
        for _, v in ipairs(d) do mean = mean + v end
        mean = mean / #d
        near(mean, r.mean, row.config .. " " .. key .. " mean")
        near(median(d), r.median, row.config .. " " .. key .. " median")
        assert.same({ pos, neg, zero }, { r.pos, r.neg, r.zero })
        near(sign_p(pos, neg), r.sign_p, row.config .. " " .. key .. " sign p")
        assert.is_true(r.mean_lo <= r.mean and r.mean <= r.mean_hi, key .. " mean outside its CI")
        assert.is_true(r.median_lo <= r.median_hi)
        if sb > 0 then
          near(so / sb, r.ratio, row.config .. " " .. key .. " ratio")
          assert.is_true(r.ratio_lo <= r.ratio and r.ratio <= r.ratio_hi)
        else
          assert.is_nil(r.ratio)
        end
      end
    end
    -- sequential is never faster than k=2 on a query (same draws), slower on most
    assert.equals(0, rows[2].paired.wall_ms.neg)
    assert.is_true(rows[2].paired.wall_ms.pos > 20)
    assert.is_true(rows[2].paired.wall_ms.ratio > 1 and rows[3].paired.wall_ms.ratio <= 1)
    -- the table shows the summary's numbers
    local w = rows[2].paired.wall_ms
    assert.matches(("%.1f [%.1f, %.1f]"):format(w.mean, w.mean_lo, w.mean_hi), tbl, 1, true)
    assert.matches(("%.3f [%.3f, %.3f]"):format(w.ratio, w.ratio_lo, w.ratio_hi), tbl, 1, true)
    -- `specula compare` prints the same table from the records, deterministically
    local st2, again, err2 = H.specula({ "compare", out })
    assert.equals(0, st2, err2)
    assert.equals(tbl, again)
    -- another baseline: the pairs turn around
    local sum2 = H.tmpfile("pq_sum2.json")
    local st3, t3, err3 = H.specula({ "compare", out, "--baseline", "sequential", "--summary", sum2 })
    assert.equals(0, st3, err3)
    assert.matches("paired differences against sequential", t3, 1, true)
    local rows2 = cjson.decode(H.read(sum2))
    assert.equals("sequential", rows2[1].config)
    near(-rows[2].paired.wall_ms.mean, rows2[2].paired.wall_ms.mean, "reversed mean")
    local st4, _, err4 = H.specula({ "compare", out, "--baseline", "nope" })
    assert.equals(2, st4)
    assert.matches("--baseline 'nope' is not a configuration of these files (spechop:k=2, sequential, spechop:k=inf)", err4, 1, true)
  end)
  -- an agent whose times come from the input record (s: model ms, t: tool
  -- ms, hops), so the pairs are known before the run
  local TIMED = [[
    local specula = require "specula"
    return specula.agent {
      init = function() return { hop = 0 } end,
      step = function(s, ctx)
        specula.sleep(ctx.record.s)
        if s.hop >= ctx.record.hops then return { final = "A" } end
        return { segment = "s", action = { tool = "t", args = { h = s.hop } } }
      end,
      update = function(s) return { hop = s.hop + 1 } end,
      tools = { t = { call = function(a, ctx) specula.sleep(ctx.record.t) return "o" .. a.h end,
                      speculate = function(a) specula.sleep(1) return "o" .. a.h end } },
      policy = { t = "full" },
    }
  ]]

  it("pairs a repeated id by occurrence: the first with the first, the second with the second", function()
    local agent = H.tmpfile("dup_timed.lua", TIMED)
    local q = H.tmpfile("dup_q.jsonl", '{"id":"a","query":"qa","s":10,"t":100,"hops":2}\n'
      .. '{"id":"a","query":"qa2","s":10,"t":300,"hops":3}\n{"id":"b","query":"qb","s":10,"t":50,"hops":1}\n')
    local out, sum = H.tmpfile("dup_out.jsonl"), H.tmpfile("dup_sum.json")
    os.remove(out)
    local st, tbl, err = H.specula({ "run", agent, "--input", q, "--clock", "virtual", "--compare",
      "sequential,spechop:k=2", "--out", out, "--summary", sum })
    assert.equals(0, st, err)
    -- the records in file order: each configuration's i-th record of an id
    local seq, spec = {}, {}
    for _, r in ipairs(H.jsonl(H.read(out))) do
      local t = r.config == "sequential" and seq or spec
      t[#t + 1] = r
    end
    assert.equals(3, #seq)
    local d, sb, so = {}, 0, 0
    for i = 1, 3 do
      assert.equals(seq[i].id, spec[i].id)
      d[i] = spec[i].stats.wall_ms - seq[i].stats.wall_ms
      sb, so = sb + seq[i].stats.wall_ms, so + spec[i].stats.wall_ms
    end
    local rows = cjson.decode(H.read(sum))
    local w = rows[2].paired.wall_ms
    near((d[1] + d[2] + d[3]) / 3, w.mean, "mean")
    near(median(d), w.median, "median")
    near(so / sb, w.ratio, "ratio")
    -- against sequential the paired ratio is the row's RelLat, and sequential agrees with itself
    near(rows[2].rel_lat, w.ratio, "ratio = RelLat")
    assert.equals(1, rows[1].agreement)
    assert.equals(1, rows[2].agreement)
    -- specula compare reads the file to the same table
    local st2, again = H.specula({ "compare", out })
    assert.equals(0, st2)
    assert.equals(tbl, again)
  end)

  it("specula compare does not pair records of one id that ask different questions (runs of two inputs)", function()
    local agent = H.tmpfile("two_timed.lua", TIMED)
    local qa = H.tmpfile("two_a.jsonl", '{"id":"x","query":"one","s":10,"t":100,"hops":1}\n'
      .. '{"id":"y","query":"two","s":10,"t":100,"hops":1}\n')
    local qb = H.tmpfile("two_b.jsonl", '{"id":"x","query":"other","s":10,"t":400,"hops":4}\n'
      .. '{"id":"y","query":"two","s":10,"t":100,"hops":1}\n')
    local a, b = H.tmpfile("two_a_out.jsonl"), H.tmpfile("two_b_out.jsonl")
    os.remove(a)
    os.remove(b)
    assert.equals(0, (H.specula({ "run", agent, "--input", qa, "--mode", "sequential", "--clock", "virtual", "--out", a,
      "--quiet" })))
    assert.equals(0, (H.specula({ "run", agent, "--input", qb, "--k", "2", "--clock", "virtual", "--out", b,
      "--quiet" })))
    local sum = H.tmpfile("two_sum.json")
    local st, tbl, err = H.specula({ "compare", a, b, "--summary", sum })
    assert.equals(0, st, err)
    assert.matches("1 query share an id but ask another question (provenance.query differs), so it is not paired",
      err, 1, true)
    assert.matches("(1 query share an id with sequential but ask another question", tbl, 1, true)
    local rows = cjson.decode(H.read(sum))
    -- only y pairs; its agreement too is over y alone
    assert.equals(1, rows[2].paired.n)
    assert.equals(1, rows[2].paired.other)
    assert.equals(1, rows[2].agreement)
  end)

  it("--trace under --compare: one file over every configuration, the records unchanged", function()
    local q = H.tmpfile("pq_trace_in.jsonl", queries(4))
    local function run(extra)
      local out = H.tmpfile("pq_trace_out.jsonl")
      os.remove(out)
      local args = { "run", EX, "--input", q, "--clock", "virtual", "--compare", "sequential,spechop:k=2",
                     "--out", out, "--quiet" }
      for _, a in ipairs(extra) do args[#args + 1] = a end
      local st, tbl, err = H.specula(args)
      assert.equals(0, st, err)
      return H.read(out), tbl
    end
    local trace = H.tmpfile("pq_trace.json")
    local recs, tbl = run({ "--trace", trace })
    local recs2, tbl2 = run({})
    assert.equals(recs2, recs)
    assert.equals(tbl2, tbl)
    local doc = cjson.decode(H.read(trace))
    local names, pids, spans = {}, {}, {}
    for _, e in ipairs(doc.traceEvents) do
      if e.name == "process_name" then
        names[#names + 1] = e.args.name
        assert.is_nil(pids[e.pid], "one process per query and configuration")
        pids[e.pid] = e.args.name
      elseif e.ph == "X" then
        spans[pids[e.pid]] = (spans[pids[e.pid]] or 0) + 1
      end
    end
    table.sort(names)
    local want = {}
    for _, c in ipairs({ "sequential", "spechop:k=2" }) do
      for i = 1, 4 do want[#want + 1] = "query p" .. i .. " (" .. c .. ")" end
    end
    table.sort(want)
    assert.same(want, names)
    for _, n in ipairs(want) do assert.is_true((spans[n] or 0) > 0, n) end
    -- the stage entries: one per record, with its configuration and mode
    assert.equals(8, #doc.specula.queries)
    local seen = {}
    for _, e in ipairs(doc.specula.queries) do
      seen[e.config .. "/" .. e.id] = e.mode
      assert.is_table(e.hops)
    end
    assert.equals("sequential", seen["sequential/p1"])
    assert.equals("spechop", seen["spechop:k=2/p4"])
    -- the report draws the timeline of one of them
    local html = H.tmpfile("pq_trace.html")
    local st, _, err = H.specula({ "report", H.tmpfile("pq_trace_recs.jsonl", recs), "--trace", trace,
                                   "--query", "p2 (spechop:k=2)", "-o", html })
    assert.equals(0, st, err)
    assert.matches("p2 %(spechop:k=2%)", H.read(html))
  end)
end)
