-- A unit spec: it loads the report's timeline module (and so the core library)
-- into the busted process, which the sanitizer build can only do in the unit
-- suite (the sanitizer runtime preloaded); it also runs the binary.
-- The report's timeline is the replay simulation's (sp_replay_timeline): for
-- a record made by hand, with accepted and rejected hops, under eager and
-- slot launch at k = 1, 2 and inf, the drawn timeline ends at the latency
-- `specula replay` gives the same record, and its commits and rollbacks are
-- the record's verdicts.
local H = require "support.helpers"
local cjson = require "cjson"
local timeline = require "specula.report.timeline"

-- Every guess is back long before its target result, so every verdict is
-- reached once a second thread exists.
local VERDICTS = { "accepted", "rejected", "accepted", "accepted", "rejected" }
local ACCEPTED, REJECTED = 3, 2

local function record(k, launch)
  local hops = {}
  for i, v in ipairs(VERDICTS) do
    hops[i] = { hop = i - 1, t_seg = 10 + i, t_spec = 4 + i % 3, t_target = 90 + 7 * i, t_update = 0.5,
                t_verify = 0.25, spec = v, ncands = 1, rank = v == "accepted" and 0 or nil }
  end
  local judged = k ~= 1
  return {
    id = "hand-" .. tostring(k) .. "-" .. launch, query = "a hand-made record",
    stages = { hops = hops, final_seg = 12, init = 0.5 },
    stats = { wall_ms = 400, standard_ms = 600, hops = #hops, k = k, k_config = k, m = 1, mode = "spechop",
              spec_launch = launch, commits = judged and ACCEPTED or 0, rollbacks = judged and REJECTED or 0,
              verify = { accepted = ACCEPTED, rejected = REJECTED, late = 0, errors = 0 },
              calls = { model = 6, target = 5, speculator = judged and 5 or 0 } },
  }
end

-- The latency `specula replay` gives the record at its k and launch.
local function replay_wall(path, k, launch)
  local st, out, err = H.specula({ "replay", path, "--k", tostring(k), "--spec-launch", launch, "--json" })
  assert.equals(0, st, err)
  local row = H.last_json(out)
  assert.equals(tostring(k), tostring(row.k))
  return row.wall_ms
end

describe("specula report: the timeline from the replay", function()
  for _, launch in ipairs({ "eager", "slot" }) do
    for _, k in ipairs({ 1, 2, "inf" }) do
      it(string.format("ends at the replayed latency, with the record's verdicts (%s, k = %s)", launch, k), function()
        local rec = record(k, launch)
        local path = H.tmpfile(string.format("timeline_%s_%s.jsonl", launch, k), cjson.encode(rec) .. "\n")
        local wall = replay_wall(path, k, launch)

        local tl, why = timeline.replayed(rec)
        assert.is_not_nil(tl, why)
        assert.equals(launch, tl.launch)
        assert.equals(tostring(k), tostring(tl.k))
        local tend = 0
        for _, s in ipairs(tl.spans) do
          assert.is_true(s.t1 > s.t0, "a span ends after it starts")
          tend = math.max(tend, s.t1)
        end
        local commits, rollbacks, answers, seen = {}, {}, 0, {}
        for _, m in ipairs(tl.marks) do
          tend = math.max(tend, m.t)
          if m.kind == "answer" then answers = answers + 1 end
          if m.kind == "commit" or m.kind == "rollback" then
            assert.is_nil(seen[m.hop], "one verdict per hop")
            seen[m.hop] = true
            local list = m.kind == "commit" and commits or rollbacks
            list[#list + 1] = VERDICTS[m.hop + 1]
          end
        end
        -- `specula replay --json` prints 10 significant digits
        assert.is_true(math.abs(tend - wall) <= 1e-8 * wall,
          string.format("timeline ends at %.10g, replay %.10g", tend, wall))
        assert.equals(tend, tl.wall)
        assert.equals(1, answers)
        if k == 1 then
          assert.same({}, commits)
          assert.same({}, rollbacks)
          assert.equals(1, #tl.lanes)
        else
          assert.same({ "accepted", "accepted", "accepted" }, commits)
          assert.same({ "rejected", "rejected" }, rollbacks)
          assert.is_true(#tl.lanes > 1)
        end

        -- the page draws that timeline and says so
        local out = H.tmpfile(string.format("timeline_%s_%s.html", launch, k))
        local st, _, err = H.specula({ "report", path, "-o", out })
        assert.equals(0, st, err)
        local html = H.read(out)
        local rw = tonumber(html:match("replayed wall ([%d%.]+) ms against"))
        assert.is_not_nil(rw, "no replayed wall in the caption")
        assert.is_true(math.abs(rw - wall) <= 0.5, "caption " .. rw .. " vs replay " .. wall)
        local svg = html:match('<svg[^>]*id="fig%-timeline%-svg".-</svg>')
        local _, nc = svg:gsub("<title>commit %(hop", "")
        local _, nr = svg:gsub("<title>rollback %(hop", "")
        assert.equals(#commits, nc)
        assert.equals(#rollbacks, nr)
        assert.equals(#tl.lanes, select(2, svg:gsub('class="lane%-label"', "")))
      end)
    end
  end

  it("names why a record's stage times cannot be replayed", function()
    local rec = record(2, "eager")
    rec.stages.hops[2].t_target = -1
    local tl, why = timeline.replayed(rec)
    assert.is_nil(tl)
    assert.matches("t_target", why, 1, true)
  end)
end)
