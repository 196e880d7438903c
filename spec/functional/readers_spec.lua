-- Every command that reads records checks their provenance with one check
-- (specula.provenance.check_record): a record whose provenance was edited
-- by hand is refused by each of them with the same FILE:LINE message,
-- never accepted by one and refused by another.
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
  local refusal

  setup(function()
    local st, _, err = run(good)
    assert.equals(0, st, err)
    -- line 2's provenance says seed 7; its run digest was made for seed 0
    local lines = {}
    for l in H.read(good):gmatch("[^\n]+") do lines[#lines + 1] = l end
    local n
    lines[2], n = lines[2]:gsub('"seed":0,"set"', '"seed":7,"set"', 1)
    assert.equals(1, n)
    H.tmpfile("readers_edited.jsonl", table.concat(lines, "\n") .. "\n")
    refusal = edited .. ":2: provenance.run is "
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
    assert.matches(copy .. ":2: provenance.run is ", err, 1, true)
    assert.equals(2, st, err)
    assert.equals(before, H.read(copy))
    for who, m in pairs(msgs) do assert.equals(msgs.compare, m, who) end
  end)
end)
