-- Every command that reads records checks their provenance with one check
-- (specula.provenance.reader): a record whose provenance was edited by hand
-- is refused by each of them with the same FILE:LINE message, never
-- accepted by one and refused by another; so is a record that names its
-- run only when the run's whole provenance (its first record) is not above
-- it in the file.
local H = require "support.helpers"

local EX = H.root .. "/examples/multihop_sim.lua"

describe("every reader of records", function()
  local q = H.tmpfile("readers_q.jsonl", '{"id":"q1","query":"first question"}\n'
    .. '{"id":"q2","query":"second question"}\n{"id":"q3","query":"third question"}\n')
  local function run(out)
    return H.specula({ "run", EX, "--clock", "virtual", "--quiet", "--input", q, "--out", out, "--keep-candidates" })
  end
  local good = H.tmpfile("readers_good.jsonl")
  os.remove(good)
  local edited = H.tmpfile("readers_edited.jsonl")
  local headless = H.tmpfile("readers_headless.jsonl")
  local old = H.tmpfile("readers_old.jsonl")
  local refusal

  setup(function()
    local st, _, err = run(good)
    assert.equals(0, st, err)
    -- line 1 (the run's whole provenance) says seed 7; its run digest was
    -- made for seed 0
    local lines = {}
    for l in H.read(good):gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.matches('"provenance":{"agent":', lines[1], 1, true)
    assert.matches('"provenance":{"query":"%x+","run":"%x+"}', lines[2])
    local n
    lines[1], n = lines[1]:gsub('"seed":0,"set"', '"seed":7,"set"', 1)
    assert.equals(1, n)
    H.tmpfile("readers_edited.jsonl", table.concat(lines, "\n") .. "\n")
    refusal = edited .. ":1: provenance.run is "
    -- the file without its first line (as `grep -v q1` would leave it)
    H.tmpfile("readers_headless.jsonl", H.read(good):gsub("^[^\n]*\n", ""))
    -- as a specula before the whole provenance was written once per run
    -- wrote it: every record whole
    H.tmpfile("readers_old.jsonl", table.concat(H.whole_lines(H.read(good)), "\n") .. "\n")
  end)

  local function refused(who, st, err, status)
    assert.equals(status or 1, st, err)
    assert.matches(refusal, err, 1, true)
    assert.matches("(the record was edited)", err, 1, true)
    -- the same message, whoever reads the file
    local msg = err:match("(" .. refusal:gsub("%p", "%%%0") .. "[^\n]*)")
    assert.truthy(msg, who)
    return msg:gsub("; give a new %-%-out file$", "")
  end

  it("the unedited file is read by every reader (the control)", function()
    assert.equals(0, (H.specula({ "report", good, "-o", H.tmpfile("readers_ok.html") })))
    assert.equals(0, (H.specula({ "compare", good })))
    assert.equals(0, (H.specula({ "merge", good, "--input", q, "-o", H.tmpfile("readers_ok_m.jsonl") })))
    assert.equals(0, (H.specula({ "verifiers", good })))
    assert.equals(0, (H.specula({ "predictors", good, "--format", "results" })))
    assert.equals(0, (H.specula({ "replay", good, "--k", "1,3" })))
    assert.equals(0, (H.specula({ "repair", good, "-o", H.tmpfile("readers_ok_r.jsonl") })))
  end)

  it("a file whose every record carries its whole provenance (an older specula's) is read by every reader", function()
    assert.equals(0, (H.specula({ "report", old, "-o", H.tmpfile("readers_old.html") })))
    assert.equals(0, (H.specula({ "compare", old })))
    assert.equals(0, (H.specula({ "merge", old, "--input", q, "-o", H.tmpfile("readers_old_m.jsonl") })))
    assert.equals(0, (H.specula({ "verifiers", old })))
    assert.equals(0, (H.specula({ "predictors", old, "--format", "results" })))
    assert.equals(0, (H.specula({ "replay", old, "--k", "1,3" })))
    local copy = H.tmpfile("readers_old_r.jsonl", H.read(old))
    local st, _, err = H.specula({ "repair", copy })
    assert.equals(0, st, err)
    assert.equals(H.read(old), H.read(copy))
    -- resumed: nothing to run, the file as it was
    st, _, err = run(copy)
    assert.equals(0, st, err)
    assert.equals(H.read(old), H.read(copy))
  end)

  it("a record whose run's whole provenance is not above it is refused by every reader alike", function()
    local want = headless .. ":1: provenance.run "
    local msgs = {}
    local function no_head(who, st, _, err, status)
      assert.equals(status or 1, st, err)
      local msg = err:match("(" .. want:gsub("%p", "%%%0") .. "[^\n]*)")
      assert.truthy(msg, who .. ": " .. err)
      assert.matches("the run's full provenance is not in this file above this record", msg, 1, true)
      msgs[who] = msg:gsub("; give a new %-%-out file$", "")
    end
    no_head("report", H.specula({ "report", headless, "-o", H.tmpfile("readers_h.html") }))
    no_head("compare", H.specula({ "compare", headless }))
    no_head("merge", H.specula({ "merge", headless, "--input", q, "-o", H.tmpfile("readers_h_m.jsonl") }))
    no_head("verifiers", H.specula({ "verifiers", headless }))
    no_head("predictors", H.specula({ "predictors", headless, "--format", "results" }))
    no_head("replay", H.specula({ "replay", headless, "--k", "1,3" }))
    local fixed = H.tmpfile("readers_h_fixed.jsonl")
    os.remove(fixed)
    no_head("repair", H.specula({ "repair", headless, "-o", fixed }))
    assert.is_nil(H.read(fixed))
    local before = H.read(headless)
    local st, out, err = run(headless)
    no_head("resume", st, out, err, 2)
    assert.equals(before, H.read(headless))
    for who, m in pairs(msgs) do assert.equals(msgs.compare, m, who) end
  end)

  it("a record naming its run only is refused when its run, keys or digests were edited", function()
    local lines = {}
    for l in H.read(good):gmatch("[^\n]+") do lines[#lines + 1] = l end
    local function with(i, from, to)
      local t = { table.unpack(lines) }
      local n
      t[i], n = t[i]:gsub(from, to, 1)
      assert.equals(1, n)
      return H.tmpfile(nil, table.concat(t, "\n") .. "\n")
    end
    local cases = {
      -- another run's digest: that run has no whole provenance in the file
      { with(2, '"run":"%x', '"run":"0'), ":2: provenance.run 0" },
      { with(3, '"run":"(%x+)"}', '"run":"%1","seed":7}'), ":3: provenance has 'seed' beside its query and run" },
      { with(2, '"run":"%x+"}', '"run":"abc"}'), ":2: provenance.run is not a SHA-256 digest" },
      { with(2, '"query":"%x+",', ''), ":2: provenance has no query" },
    }
    for _, c in ipairs(cases) do
      local path, want = c[1], c[2]
      local st, _, err = H.specula({ "compare", path })
      assert.equals(1, st, err)
      assert.matches(path .. want, err, 1, true)
      st, _, err = H.specula({ "report", path, "-o", H.tmpfile("readers_e.html") })
      assert.equals(1, st, err)
      assert.matches(path .. want, err, 1, true)
      st, _, err = run(path)
      assert.equals(2, st, err)
      assert.matches(path .. want, err, 1, true)
    end
  end)

  it("report, compare, merge, resume, replay, repair and the labs refuse the edited record naming FILE:LINE alike", function()
    local msgs = {}
    local st, _, err = H.specula({ "report", edited, "-o", H.tmpfile("readers_r.html") })
    msgs.report = refused("report", st, err)
    st, _, err = H.specula({ "report", good, "--cassette", edited, "-o", H.tmpfile("readers_r2.html") })
    msgs.report_cassette = refused("report --cassette", st, err)
    st, _, err = H.specula({ "compare", edited })
    msgs.compare = refused("compare", st, err)
    st, _, err = H.specula({ "merge", edited, "--input", q, "-o", H.tmpfile("readers_m.jsonl") })
    msgs.merge = refused("merge", st, err)
    st, _, err = H.specula({ "verifiers", edited })
    msgs.verifiers = refused("verifiers", st, err)
    st, _, err = H.specula({ "predictors", edited, "--format", "results" })
    msgs.predictors = refused("predictors", st, err)
    st, _, err = H.specula({ "predictors", edited })
    msgs.predictors_auto = refused("predictors (format found)", st, err)
    st, _, err = H.specula({ "replay", edited, "--k", "1,3" })
    msgs.replay = refused("replay", st, err)
    local fixed = H.tmpfile("readers_repaired.jsonl")
    os.remove(fixed)
    st, _, err = H.specula({ "repair", edited, "-o", fixed })
    msgs.repair = refused("repair", st, err)
    assert.is_nil(H.read(fixed))
    -- resuming is refused as records of another run are (status 2)
    local copy = H.tmpfile("readers_resume.jsonl", H.read(edited))
    local before = H.read(copy)
    st, _, err = run(copy)
    assert.matches(copy .. ":1: provenance.run is ", err, 1, true)
    assert.equals(2, st, err)
    assert.equals(before, H.read(copy))
    for who, m in pairs(msgs) do assert.equals(msgs.compare, m, who) end
  end)
end)
