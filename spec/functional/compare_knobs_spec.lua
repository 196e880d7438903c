-- Every knob is a column: --compare items take every experimental option
-- (policy, verifier, predictor, spec_launch, k, m, mode, match, trigger,
-- eps, ev_cost_ms, label), and `specula compare FILES...` makes one row per
-- distinct run (from the records' provenance), never folding two runs.
local H = require "support.helpers"
local cjson = require "cjson"
local EX = H.root .. "/examples/multihop_sim.lua"

local function queries(n)
  local t = {}
  for i = 1, n do t[i] = cjson.encode({ id = "c" .. i, query = "knob question " .. i }) end
  return table.concat(t, "\n") .. "\n"
end

-- a directory with two policies, an input, a verifier and a predictor file
local dir
local function setup_dir()
  if dir then return dir end
  dir = H.tmpdir() .. "/knobs"
  os.execute("mkdir -p " .. H.quote(dir))
  local function put(name, text)
    local f = assert(io.open(dir .. "/" .. name, "w"))
    f:write(text)
    f:close()
  end
  put("forbid.lua", 'return { search = "forbid" }\n')
  put("early.lua", 'return { search = "full" }\n')
  put("q.jsonl", queries(8))
  put("accept_all.lua", 'return function(p, a) return true, "accept: anything" end\n')
  put("nopred.lua", 'return function(history, ctx) return {} end\n')
  return dir
end

-- `specula run` from inside the directory (relative file names, as a user types them)
local function run_in(args)
  local parts = { "cd", H.quote(setup_dir()), "&&", H.quote(H.bin), "run", H.quote(EX) }
  for _, a in ipairs(args) do parts[#parts + 1] = H.quote(a) end
  return H.sh(table.concat(parts, " "))
end

local function recs_by_config(path)
  local by = {}
  for _, r in ipairs((H.records(H.read(path)))) do
    by[r.config] = by[r.config] or {}
    table.insert(by[r.config], r)
  end
  return by
end

describe("--compare items take every knob", function()
  it("policy=FILE: forbid.lua against early.lua, the example of docs/experiments.md", function()
    local out = setup_dir() .. "/pol.jsonl"
    os.remove(out)
    local st, tbl, err = run_in({ "--input", "q.jsonl", "--clock", "virtual", "--quiet", "--out", "pol.jsonl",
      "--compare", "spechop:k=inf:policy=forbid.lua,spechop:k=inf:policy=early.lua" })
    assert.equals(0, st, err)
    assert.matches("spechop:k=inf:policy=forbid.lua", tbl, 1, true)
    assert.matches("spechop:k=inf:policy=early.lua", tbl, 1, true)
    local by = recs_by_config(out)
    local forbid, early = by["spechop:k=inf:policy=forbid.lua"], by["spechop:k=inf:policy=early.lua"]
    assert.equals(8, #forbid)
    assert.equals(8, #early)
    local f_forbid, e_full = 0, 0
    for _, r in ipairs(forbid) do
      f_forbid = f_forbid + r.stats.gate.target.forbid
      assert.equals(0, r.stats.gate.target.full)
      assert.equals("forbid.lua", r.provenance.config.policy.file)
    end
    for _, r in ipairs(early) do
      e_full = e_full + r.stats.gate.target.full
      assert.equals("early.lua", r.provenance.config.policy.file)
    end
    assert.is_true(f_forbid > 0)
    assert.is_true(e_full > 0)
    assert.not_equals(forbid[1].provenance.run, early[1].provenance.run)
    -- lossless either way: the same answers
    for i = 1, 8 do assert.equals(forbid[i].answer, early[i].answer) end
  end)

  it("verifier=, predictor=, spec_launch=, m, mode=, match, trigger, eps, ev_cost_ms and label= each apply", function()
    local out = setup_dir() .. "/all.jsonl"
    os.remove(out)
    local list = table.concat({
      "mode=sequential:label=base",
      "spechop:k=2:verifier=accept_all.lua:label=lenient",
      "spechop:k=2:verifier=jaccard:0.7:label=jac",
      "spechop:k=2:spec_launch=slot:label=slot",
      "window:k=2:m=2:label=tree",
      "spechop:k=auto:eps=0.2:label=auto",
      "spechop:k=2:predictor=nopred.lua:match=name_only:trigger=start:ev_cost_ms=5:label=pred",
      "spechop:k=2:predictor=pattern:label=pattern",
    }, ",")
    local st, tbl, err = run_in({ "--input", "q.jsonl", "--clock", "virtual", "--quiet", "--out", "all.jsonl",
      "--compare", list })
    assert.equals(0, st, err)
    local by = recs_by_config(out)
    for _, name in ipairs({ "base", "lenient", "jac", "slot", "tree", "auto", "pred", "pattern" }) do
      assert.equals(8, by[name] and #by[name] or 0, name)
      assert.matches("\n" .. name .. " ", tbl, 1, true)
    end
    local function cfg(name) return by[name][1].provenance.config end
    assert.equals("sequential", cfg("base").mode)
    assert.same({ file = "accept_all.lua", sha256 = cfg("lenient").verifier.sha256 }, cfg("lenient").verifier)
    assert.same({ name = "jaccard", options = { threshold = 0.7 } }, cfg("jac").verifier)
    assert.equals("slot", cfg("slot").spec_launch)
    assert.equals("slot", by.slot[1].stats.spec_launch)
    assert.equals("window", cfg("tree").mode)
    assert.equals(2, cfg("tree").m)
    assert.equals(2, by.tree[1].stats.m)
    assert.equals("auto", cfg("auto").k)
    assert.equals(0.2, cfg("auto").eps)
    local p = cfg("pred")
    assert.equals("on", p.predict)
    assert.equals("nopred.lua", p.predictor.file)
    assert.equals("name_only", p.match)
    assert.equals("start", p.trigger)
    assert.equals(5, p.ev_cost_ms)
    assert.equals("name_only", by.pred[1].stats.prefetch.match)
    assert.equals("pattern", cfg("pattern").predictor.name)
    -- the lenient verifier accepts every guess: no rollback
    for _, r in ipairs(by.lenient) do assert.equals(0, r.stats.rollbacks) end
  end)

  it("a bad key, a missing file or an unknown name is a usage error naming the item", function()
    local st, _, err = run_in({ "--input", "q.jsonl", "--clock", "virtual", "--compare", "spechop:colour=red" })
    assert.equals(2, st)
    assert.matches("unknown key 'colour'", err, 1, true)
    assert.matches("policy, verifier, predictor, label", err, 1, true)
    st, _, err = run_in({ "--input", "q.jsonl", "--clock", "virtual", "--compare", "spechop:policy=nope.lua" })
    assert.equals(2, st)
    assert.matches("'spechop:policy=nope.lua'", err, 1, true)
    assert.matches("nope.lua", err, 1, true)
    st, _, err = run_in({ "--input", "q.jsonl", "--clock", "virtual", "--compare", "spechop:verifier=maybe" })
    assert.equals(2, st)
    assert.matches("unknown verifier 'maybe'", err, 1, true)
    st, _, err = run_in({ "--input", "q.jsonl", "--clock", "virtual", "--compare", "spechop:predictor=oracle" })
    assert.equals(2, st)
    assert.matches("unknown predictor 'oracle'", err, 1, true)
    st, _, err = run_in({ "--input", "q.jsonl", "--clock", "virtual", "--compare", "spechop:spec_launch=later" })
    assert.equals(2, st)
    assert.matches("--spec-launch must be eager or slot", err, 1, true)
    -- two items that are one configuration
    st, _, err = run_in({ "--input", "q.jsonl", "--clock", "virtual", "--compare", "spechop:k=2,spechop:k=2:label=x" })
    assert.equals(2, st)
    assert.matches("the same configuration", err, 1, true)
  end)

  it("run --help gives the grammar with every key", function()
    local st, out = H.specula({ "run", EX, "--help" })
    assert.equals(0, st)
    for _, key in ipairs({ "mode=", "k=", "m=", "eps=", "spec_launch=", "predict=", "match=", "trigger=",
                           "ev_cost_ms=", "policy=", "verifier=", "predictor=", "label=" }) do
      assert.matches(key, out, 1, true)
    end
    assert.matches("--verifier V", out, 1, true)
    assert.matches("--predictor P", out, 1, true)
  end)
end)

describe("specula compare on separate runs", function()
  local forbid, early
  setup(function()
    setup_dir()
    for _, name in ipairs({ "forbid", "early" }) do
      os.remove(dir .. "/" .. name .. ".jsonl")
      local st, _, err = run_in({ "--input", "q.jsonl", "--clock", "virtual", "--quiet", "--k", "inf", "--policy",
        name .. ".lua", "--out", name .. ".jsonl" })
      assert.equals(0, st, err)
    end
    forbid, early = dir .. "/forbid.jsonl", dir .. "/early.jsonl"
  end)

  it("makes one row per run and tells apart two runs that share a name", function()
    local st, tbl, err = H.specula({ "compare", forbid, early })
    assert.equals(0, st, err)
    assert.matches("\nspechop:k=inf %[policy forbid.lua %x+%] +8 ", tbl)
    assert.matches("\nspechop:k=inf %[policy early.lua %x+%] +8 ", tbl)
    assert.is_nil(tbl:find(" 16 ", 1, true))
    -- the paired block pairs the queries by id across the files
    assert.matches("paired differences against spechop:k=inf [policy forbid.lua", tbl, 1, true)
    assert.matches("wall_ms +8 ", tbl)
    -- one provenance line per run
    local n = 0
    for _ in tbl:gmatch("\n  run %x+") do n = n + 1 end
    assert.equals(2, n)
  end)

  it("--baseline names a row; the same file twice, or a copy, is an error", function()
    local name
    local _, tbl = H.specula({ "compare", forbid, early })
    name = tbl:match("\n(spechop:k=inf %[policy early.lua %x+%])")
    assert.is_string(name)
    local st, tbl2, err = H.specula({ "compare", forbid, early, "--baseline", name })
    assert.equals(0, st, err)
    assert.matches("paired differences against " .. name, tbl2, 1, true)
    st, _, err = H.specula({ "compare", forbid, forbid })
    assert.equals(2, st)
    assert.matches("the same file", err, 1, true)
    local copy = H.tmpfile("knobs_copy.jsonl", H.read(forbid))
    st, _, err = H.specula({ "compare", forbid, copy })
    assert.equals(2, st)
    assert.matches("the same file", err, 1, true)
  end)

  it("report keeps the two runs apart too, and lists both", function()
    local html = H.tmpfile("knobs_report.html")
    local st, _, err = H.specula({ "report", forbid, early, "-o", html })
    assert.equals(0, st, err)
    assert.matches("(16 queries, 2 configurations)", err, 1, true)
    local page = H.read(html)
    assert.matches("policy forbid.lua", page, 1, true)
    assert.matches("policy early.lua", page, 1, true)
  end)

  it("refuses one run's queries given twice in two files", function()
    -- each record with its whole provenance, so that any part of the file
    -- stands alone (docs/cli.md "provenance")
    local lines = H.whole_lines(H.read(forbid))
    local a = H.tmpfile("half_a.jsonl", table.concat(lines, "\n", 1, 5) .. "\n")
    local b = H.tmpfile("half_b.jsonl", table.concat(lines, "\n", 4, 8) .. "\n")
    local st, _, err = H.specula({ "compare", a, b })
    assert.equals(2, st)   -- no comparison: a usage error (docs/experiments.md)
    assert.matches("the same query 'c4' of the same run", err, 1, true)
    -- the two halves without overlap are one run: one row of 8
    local b2 = H.tmpfile("half_b2.jsonl", table.concat(lines, "\n", 6, 8) .. "\n")
    local st2, tbl, err2 = H.specula({ "compare", a, b2 })
    assert.equals(0, st2, err2)
    assert.matches("\nspechop:k=inf +8 ", tbl)
  end)

  it("lines up a label written in UTF-8 as one of ASCII, and cuts a long one on a character", function()
    local d = setup_dir()
    local long = string.rep("\195\169", 70)   -- 70 x "é": past the column's 60 characters
    local st, tbl, err = H.specula({ "run", EX, "--input", d .. "/q.jsonl", "--clock", "virtual", "--compare",
      "sequential,spechop:k=2:label=\195\169t\195\169-\195\177and\195\186,spechop:k=3:label=" .. long })
    assert.equals(0, st, err)
    -- the column after the name starts at the same character in every row
    local function col(line)
      local _, pad_end = line:find("^.-%s%s+")   -- the name and its padding
      local prefix = line:sub(1, pad_end)
      return #prefix - select(2, prefix:gsub("[\128-\191]", ""))
    end
    local starts = {}
    local main = tbl:match("^(.-)\n%(latencies") or tbl   -- the first table
    for line in main:gmatch("[^\n]+") do
      if line:match("^sequential ") or line:match("^\195\169t\195\169") or line:match("^%[1%] ") then
        starts[#starts + 1] = col(line)
      end
    end
    assert.equals(3, #starts, tbl)
    assert.equals(starts[1], starts[2], tbl)
    assert.equals(starts[1], starts[3], tbl)
    -- the long label is keyed and spelled out whole under the table, and no
    -- line holds a cut character
    assert.matches("[1] = " .. long .. "\n", tbl, 1, true)
    assert.is_true(H.utf8_valid(tbl), "a character cut in the table")
  end)
end)
