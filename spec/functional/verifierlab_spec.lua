-- The verifier lab (`specula verifiers`) on the recorded tape of
-- examples/cassette: candidate ids and a labels file, false accepts and
-- rejects against labels, the replay-predicted RelLat checked against a
-- real replay of the same tape, the queries whose answers the tape cannot
-- vouch for, and the errors (labels file:line, results files, tapes
-- without job lines).
local H = require "support.helpers"
local cjson = require "cjson"

local EX = H.root .. "/examples/cassette"
local TAPE = EX .. "/tape"
local counter = 0

local function lab(args)
  local full = { "verifiers", TAPE }
  for _, a in ipairs(args) do full[#full + 1] = a end
  return H.specula(full)
end

-- examples/cassette/agent.lua replayed from the tape (virtual clock) into
-- outf, with extra options: exit status and stderr.
local AGENT_ENV = { OPENAI_API_KEY = "any", SEARCH_KEY = "any", CAS_NODE = "/nonexistent/node",
                    SPECULA_SOURCE_DIR = H.root }
local function replay_example(outf, ...)
  os.remove(outf)
  local args = { "run", EX .. "/agent.lua", "--input", EX .. "/queries.jsonl", "--replay-io", TAPE,
                 "--clock", "virtual", "--out", outf, ... }
  local st, _, err = H.specula(args, AGENT_ENV)
  return st, err
end

local function labels_file(lines)
  counter = counter + 1
  local text = {}
  for i, l in ipairs(lines) do text[i] = type(l) == "string" and l or cjson.encode(l) end
  return H.tmpfile("labels" .. counter .. ".jsonl", table.concat(text, "\n") .. "\n")
end

local function by_name(r)
  local t = {}
  for _, v in ipairs(r.verifiers) do t[v.verifier] = v end
  return t
end

describe("specula verifiers", function()
  local cands   -- the --pairs lines of the tape

  it("--pairs lists every candidate with an id stable across the tape's layout", function()
    local st, out, err = lab({ "--pairs" })
    assert.are.equal(0, st, err)
    cands = H.jsonl(out)
    local _, jout = lab({ "--json" })
    local r = cjson.decode(jout)
    assert.are.equal(r.candidates, #cands)
    local ids, exact = {}, 0
    for _, c in ipairs(cands) do
      assert.is_nil(ids[c.id], c.id)
      ids[c.id] = true
      -- QUERY/HOP/TOOL/RANK, from what the tape says asked
      assert.are.equal(c.query .. "/" .. c.hop .. "/" .. c.tool .. "/1", c.id)
      assert.are.equal(c.candidate == c.observation, c.exact)
      if c.exact then exact = exact + 1 end
    end
    assert.are.equal(by_name(r).exact.accepted, exact)
  end)

  it("--labels counts false accepts and false rejects against the labels, and says what is unlabelled", function()
    -- a human says: c1's wrong city is fine after all, the rest as exact
    local lines = {}
    for _, c in ipairs(cands) do
      lines[#lines + 1] = { id = c.id, equivalent = c.exact or c.id == "c1/0/lookup/1" }
    end
    local st, out, err = lab({ "--labels", labels_file(lines), "--json" })
    assert.are.equal(0, st, err)
    local v = by_name(cjson.decode(out))
    local wrong = 0
    for _, c in ipairs(cands) do if not c.exact then wrong = wrong + 1 end end
    assert.is_true(wrong >= 2)
    -- exact rejects the one labelled equivalent; spechop accepts every wrong
    -- guess, one of which the labels allow
    assert.are.same({ false_accepts = 0, false_rejects = 1, unlabelled = 0 }, v.exact.labels)
    assert.are.same({ false_accepts = wrong - 1, false_rejects = 0, unlabelled = 0 }, v.spechop.labels)
    assert.are.equal(wrong, v.spechop.false_accepts)
    -- the table shows the label columns only when labels are given
    local _, tbl = lab({ "--labels", labels_file(lines) })
    assert.matches("label FA", tbl)
    assert.matches("\nspechop%s+%d+%s+[%d.]+%s+" .. wrong .. "%s+[%d.]+%s+[%d.]+%s+%d+%s+0%s+" .. (wrong - 1)
      .. "%s+0%s+0\n", tbl)
    _, tbl = lab({})
    assert.is_nil(tbl:find("label FA", 1, true))
    -- partial labels: what they do not cover is counted, not guessed
    st, out = lab({ "--labels", labels_file({ lines[1] }), "--json" })
    assert.are.equal(0, st)
    v = by_name(cjson.decode(out))
    assert.are.equal(#cands - 1, v.spechop.labels.unlabelled + v.spechop.labels.false_accepts)
  end)

  it("rejects a malformed labels file naming file and line, and never crashes", function()
    local good = { id = cands[1].id, equivalent = true }
    local cases = {
      { { good, "not json" }, ":2: not a JSON object" },
      { { "", good, "[1, 2]" }, ":3: not a JSON object" },
      { { { equivalent = true } }, ":1: \"id\" must be a candidate id" },
      { { { id = cands[1].id, equivalent = "yes" } }, ":1: \"equivalent\" must be true or false" },
      { { { id = "nosuch/0/x/1", equivalent = true } }, ":1: unknown candidate id 'nosuch/0/x/1'" },
      { { good, good }, ":2: candidate '" .. cands[1].id .. "' is labelled twice %(first on line 1%)" },
    }
    for _, c in ipairs(cases) do
      local path = labels_file(c[1])
      local st, out, err = lab({ "--labels", path })
      assert.are.equal(1, st, err)
      assert.are.equal("", out)
      assert.matches(path:gsub("%p", "%%%0") .. c[2], err)
    end
    local st, _, err = lab({ "--labels", H.tmpdir() .. "/absent.jsonl" })
    assert.are.equal(1, st)
    assert.matches("not a readable file", err)
  end)

  it("predicts the RelLat a replay of the tape gives, for the recorded verdicts and at another k", function()
    local agent_env = { OPENAI_API_KEY = "any", SEARCH_KEY = "any", CAS_NODE = "/nonexistent/node",
                        SPECULA_SOURCE_DIR = H.root }
    for _, k in ipairs({ "inf", "1" }) do
      counter = counter + 1
      local outf = H.tmpdir() .. "/replayed" .. counter .. ".jsonl"
      local st, _, err = H.specula({ "run", EX .. "/agent.lua", "--input", EX .. "/queries.jsonl", "--replay-io", TAPE,
        "--clock", "virtual", "--k", k, "--out", outf }, agent_env)
      assert.are.equal(0, st, err)
      local wall, std = 0, 0
      for _, r in ipairs(H.jsonl(H.read(outf))) do
        wall, std = wall + r.stats.wall_ms, std + r.stats.standard_ms
      end
      -- the recording ran with `exact`: its verdicts are exact's
      local out
      st, out, err = lab({ "--verifier", "exact", "--k", k, "--json" })
      assert.are.equal(0, st, err)
      local r = cjson.decode(out)
      assert.are.equal(6, r.replayed_queries)
      assert.is_true(math.abs(r.verifiers[1].replay_rel_lat - wall / std) < 0.002,
        k .. ": " .. r.verifiers[1].replay_rel_lat .. " vs " .. wall / std)
    end
    -- accepting every guess can only help the schedule; rejecting every one
    -- cannot beat the verdicts that were right
    local none = H.tmpfile("reject_all.lua", "return function() return false end")
    local st, out, err = lab({ "--verifier", "exact", "--verifier", "spechop", "--verifier", none, "--json" })
    assert.are.equal(0, st, err)
    local v = cjson.decode(out).verifiers
    assert.is_true(v[2].replay_rel_lat <= v[1].replay_rel_lat)
    assert.is_true(v[3].replay_rel_lat >= v[1].replay_rel_lat)
    assert.are.equal(0, v[3].accepted)
  end)

  it("counts the queries whose answer a committed wrong guess leaves unknown", function()
    local st, out, err = lab({ "--json" })
    assert.are.equal(0, st, err)
    local v = by_name(cjson.decode(out))
    local wrong_q = {}
    for _, c in ipairs(cands) do if not c.exact then wrong_q[c.query] = true end end
    local n = 0
    for _ in pairs(wrong_q) do n = n + 1 end
    assert.is_true(n >= 1)
    assert.are.same({ queries = 6, unchanged = 6 - n, unknown = n, rate = cjson.null }, v.spechop.answer_change)
    assert.are.same({ queries = 6, unchanged = 6, unknown = 0, rate = 0 }, v.exact.answer_change)
  end)

  it("says why a results file or a tape without job lines gives no replay", function()
    local st, _, err = H.specula({ "verifiers", H.tmpfile("results.jsonl", '{"id":"q1"}\n') })
    assert.are.equal(1, st)
    assert.matches("results files hold no speculated candidates", err)
    assert.matches("record with %-%-keep%-candidates", err)
    -- the tape without its job lines (as a format-1 tape): theory, no replay
    local dir = H.tmpdir() .. "/nojobs"
    local rc = os.execute("mkdir -p " .. H.quote(dir))
    assert.is_true(rc == 0 or rc == true)
    local keep = {}
    for line in H.read(TAPE .. "/cassette-0001.jsonl"):gmatch("[^\n]+") do
      if not line:find('"kind":"job"', 1, true) then keep[#keep + 1] = line end
    end
    local f = assert(io.open(dir .. "/cassette-0001.jsonl", "w"))
    f:write(table.concat(keep, "\n"), "\n")
    f:close()
    local out
    st, out, err = H.specula({ "verifiers", dir, "--json" })
    assert.are.equal(0, st, err)
    local r = cjson.decode(out)
    assert.are.equal(cjson.null, r.verifiers[1].replay_rel_lat)
    assert.is_number(r.verifiers[1].rel_lat)
    assert.matches("no replay RelLat: the cassette has no job lines", err)
  end)

  it("specula report --cassette adds a Verifiers section with the same numbers and changes nothing else", function()
    local res = H.tmpdir() .. "/report_run.jsonl"
    local st, err = replay_example(res)
    assert.are.equal(0, st, err)
    local _
    local plain, with = H.tmpdir() .. "/plain.html", H.tmpdir() .. "/with.html"
    st, _, err = H.specula({ "report", res, "-o", plain })
    assert.are.equal(0, st, err)
    st, _, err = H.specula({ "report", res, "-o", with, "--cassette", TAPE, "--verifier", "exact", "--verifier", "spechop" })
    assert.are.equal(0, st, err)
    local a, b = H.read(plain), H.read(with)
    assert.is_nil(a:find("verifiers-table", 1, true))
    local _, lout = lab({ "--verifier", "exact", "--verifier", "spechop", "--json" })
    for _, v in ipairs(cjson.decode(lout).verifiers) do
      local row = b:match('<tr class="verifier" data%-verifier="' .. v.verifier .. '">(.-)</tr>')
      assert.is_not_nil(row, v.verifier)
      assert.matches('data%-key="accepted" data%-value="' .. v.accepted .. '"', row)
      assert.matches('data%-key="false_accepts" data%-value="' .. v.false_accepts .. '"', row)
      local replay = tonumber(row:match('data%-key="replay_rel_lat" data%-value="([^"]+)"'))
      assert.is_true(math.abs(replay - v.replay_rel_lat) < 1e-9)
      assert.matches('data%-key="answers_unknown" data%-value="' .. v.answer_change.unknown .. '"', row)
    end
    -- the rest of the page is the page without the flag
    local stripped = b:gsub('<li><a href="#verifiers">Verifiers</a></li>', "", 1)
    stripped = stripped:gsub('<section id="verifiers">.-</section>\n', "", 1)
    assert.are.equal(a, stripped)
    st, _, err = H.specula({ "report", res, "-o", with, "--verifier", "exact" })
    assert.are.equal(2, st)
    assert.matches("%-%-verifier needs %-%-cassette DIR", err)
    st, _, err = H.specula({ "report", res, "-o", with, "--cassette", res })
    assert.are.equal(1, st)
    assert.matches("results files hold no speculated candidates", err)
    assert.matches("record with %-%-keep%-candidates", err)
  end)

  it("--agent replays the tape with each verifier in every tool and compares the answers", function()
    local env = { OPENAI_API_KEY = "any", SEARCH_KEY = "any", CAS_NODE = "/nonexistent/node", SPECULA_SOURCE_DIR = H.root }
    local st, out, err = H.specula({ "verifiers", TAPE, "--verifier", "exact", "--verifier", "spechop", "--agent",
      EX .. "/agent.lua", "--input", EX .. "/queries.jsonl", "--json" }, env)
    assert.are.equal(0, st, err)
    local v = by_name(cjson.decode(out))
    -- exact is the recording's verifier: the replay is the recording
    assert.are.same({ same = 6, changed = 0, not_replayable = 0 }, v.exact.answer_change.replayed)
    -- spechop commits the wrong lookups; the agent then asks for calls the
    -- tape never saw (the next tag depends on the lookup): not replayable
    assert.are.same({ same = 0, changed = 0, not_replayable = 6 }, v.spechop.answer_change.replayed)
    st, out, err = H.specula({ "verifiers", TAPE, "--verifier", "spechop", "--agent", EX .. "/agent.lua", "--input",
      EX .. "/queries.jsonl" }, env)
    assert.are.equal(0, st, err)
    assert.matches("\nspechop%s+0%s+0%s+6\n", out)
    st, _, err = H.specula({ "verifiers", TAPE, "--agent", EX .. "/agent.lua" }, env)
    assert.are.equal(2, st)
    assert.matches("%-%-agent and %-%-input go together", err)
    st, _, err = H.specula({ "verifiers", TAPE, "--agent", EX .. "/README.md", "--input", EX .. "/queries.jsonl" }, env)
    assert.are.equal(1, st)
    assert.matches("cannot load %-%-agent script", err)
  end)

  describe("on a results file written with --keep-candidates", function()
    local function strip_candidates(recs)
      for _, r in ipairs(recs) do r.candidates = nil end
      return recs
    end

    it("judges the run's own pairs: exact gives the run's accepted count and p; records without the flag are as before",
      function()
      local q = H.tmpfile("kc_queries.jsonl", table.concat({
        '{"id":"a","query":"question a"}', '{"id":"b","query":"question b"}', '{"id":"c","query":"question c"}',
        '{"id":"d","query":"question d"}', '{"id":"e","query":"question e"}' }, "\n") .. "\n")
      local with, without = H.tmpdir() .. "/kc_with.jsonl", H.tmpdir() .. "/kc_without.jsonl"
      os.remove(with) os.remove(without)
      local base = { "run", H.root .. "/examples/multihop_sim.lua", "--input", q, "--clock", "virtual", "--quiet" }
      local a = { unpack(base) }
      a[#a + 1], a[#a + 2], a[#a + 3] = "--out", with, "--keep-candidates"
      local st, _, err = H.specula(a)
      assert.are.equal(0, st, err)
      local b = { unpack(base) }
      b[#b + 1], b[#b + 2] = "--out", without
      st, _, err = H.specula(b)
      assert.are.equal(0, st, err)
      local recs, plain = H.records(H.read(with)), H.records(H.read(without))
      -- without the flag no record carries the field; with it, the records
      -- are those plus the field (the run itself does not change)
      local acc, rej, entries = 0, 0, 0
      for i, r in ipairs(recs) do
        assert.is_nil(plain[i].candidates)
        assert.is_table(r.candidates, r.id)
        local judged = 0
        for _, e in ipairs(r.candidates) do
          assert.are.equal("search", e.tool)
          assert.is_number(e.hop)
          assert.are.equal(0, e.rank)
          assert.is_string(e.candidate)
          assert.is_string(e.observation)
          assert.are.equal(e.candidate == e.observation, e.accepted)   -- the run's verifier is exact
          assert.are.equal(r.stages.hops[e.hop + 1].spec, e.accepted and "accepted" or "rejected")
          judged = judged + 1
        end
        entries = entries + judged
        acc, rej = acc + r.stats.verify.accepted, rej + r.stats.verify.rejected
        assert.are.equal(r.stats.verify.accepted + r.stats.verify.rejected, judged)
      end
      assert.is_true(acc > 0 and rej > 0)
      -- the provenance says which run kept its candidates: the rest is equal
      local kept = strip_candidates(H.records(H.read(with)))
      for i, r in ipairs(kept) do
        assert.is_true(r.provenance.config.keep_candidates)
        assert.is_false(plain[i].provenance.config.keep_candidates)
        r.provenance, plain[i].provenance = nil, nil
      end
      assert.are.same(plain, kept)
      local out
      st, out, err = H.specula({ "verifiers", with, "--verifier", "exact", "--verifier", "spechop", "--json" })
      assert.are.equal(0, st, err)
      local r = cjson.decode(out)
      assert.are.equal(entries, r.pairs)
      assert.are.equal(0, r.cut)
      local v = by_name(r)
      assert.are.equal(acc, v.exact.accepted)
      assert.is_true(math.abs(v.exact.p - acc / (acc + rej)) < 1e-12)
      assert.are.equal(0, v.exact.false_accepts)
      -- the replay of the records' stages with their own verdicts is the run
      local wall, std = 0, 0
      for _, x in ipairs(recs) do wall, std = wall + x.stats.wall_ms, std + x.stats.standard_ms end
      st, out, err = H.specula({ "verifiers", with, "--verifier", "exact", "--k", "3", "--json" })
      assert.are.equal(0, st, err)
      r = cjson.decode(out)
      assert.are.equal(#recs, r.replayed_queries)
      assert.is_true(math.abs(r.verifiers[1].replay_rel_lat - wall / std) < 0.002,
        r.verifiers[1].replay_rel_lat .. " vs " .. wall / std)
      assert.is_number(r.verifiers[1].rel_lat)
      -- the table names the source and the flag's absence is refused
      st, out = H.specula({ "verifiers", with })
      assert.are.equal(0, st)
      assert.matches("pairs from " .. with:gsub("%p", "%%%0") .. " %(0 hops whose speculation was not judged, 0 cut", out)
      st, out, err = H.specula({ "verifiers", without })
      assert.are.equal(1, st)
      assert.are.equal("", out)
      assert.matches("record with %-%-keep%-candidates", err)
    end)

    it("gives the tape's pairs and verdicts for a replay of the cassette example", function()
      local res = H.tmpdir() .. "/kc_cassette.jsonl"
      local st, err = replay_example(res, "--keep-candidates")
      assert.are.equal(0, st, err)
      local _, tout = lab({ "--pairs" })
      local st2, rout, err2 = H.specula({ "verifiers", res, "--pairs" })
      assert.are.equal(0, st2, err2)
      -- the same candidates under the same ids (the tape lists them in tape
      -- order, a results file query by query)
      local function by_id(list)
        local t = {}
        for _, c in ipairs(list) do t[c.id] = c end
        return t
      end
      assert.are.equal(12, #H.jsonl(rout))
      assert.are.same(by_id(H.jsonl(tout)), by_id(H.jsonl(rout)))
      local _, tj = lab({ "--json" })
      local _, rj = H.specula({ "verifiers", res, "--json" })
      local t, r = by_name(cjson.decode(tj)), by_name(cjson.decode(rj))
      for name, v in pairs(t) do
        assert.are.equal(v.accepted, r[name].accepted, name)
        assert.are.equal(v.false_accepts, r[name].false_accepts, name)
        assert.are.same(v.answer_change, r[name].answer_change, name)
      end
      -- and `specula report --cassette` takes the file as the lab does
      local page = H.tmpdir() .. "/kc_report.html"
      local st3, _, err3 = H.specula({ "report", res, "-o", page, "--cassette", res, "--verifier", "exact" })
      assert.are.equal(0, st3, err3)
      local row = H.read(page):match('<tr class="verifier" data%-verifier="exact">(.-)</tr>')
      assert.matches('data%-key="accepted" data%-value="' .. t.exact.accepted .. '"', row)
    end)

    it("cuts values over 64 KB, skips and counts them, and keeps nothing once the query ends", function()
      local script = [[
        local specula = require "specula"
        local big = string.rep("x", 70000)
        local agent = specula.agent {
          init = function(q) return { n = 0 } end,
          step = function(s)
            if s.n >= 3 then return { final = "done" } end
            return { action = { tool = s.n == 0 and "big" or s.n == 1 and "small" or "first", args = { n = s.n } } }
          end,
          update = function(s) return { n = s.n + 1 } end,
          tools = {
            big = { call = function() specula.sleep(20) return big end, speculate = function() return big end },
            small = { call = function() specula.sleep(20) return "s" end,
                      speculate = function() return specula.candidates { { value = "t", confidence = 0.9 },
                                                                          { value = "s", confidence = 0.5 } } end },
            first = { call = function() specula.sleep(20) return "s" end,
                      speculate = function() return specula.candidates { { value = "s", confidence = 0.9 },
                                                                          { value = "u", confidence = 0.5 } } end },
          },
        }
        local before = specula.settle()
        local recs = specula.run(agent, { queries = { "a", "b" }, keep_candidates = true, m = 2, k = "inf",
                                          clock = "virtual" })
        local plain = specula.run(agent, { queries = { "a" }, clock = "virtual" })
        local after = specula.settle()
        print("values", before.values, after.values, "windows", after.windows)
        print("plain", tostring(plain[1].candidates))
        local ok = pcall(specula.run, agent, { queries = { "a" }, keep_candidates = "yes" })
        print("bad", tostring(ok))
        local f = assert(io.open(arg[1], "w"))
        for _, r in ipairs(recs) do f:write(specula.json.canonical(r), "\n") end
        f:close()
      ]]
      local outf = H.tmpdir() .. "/kc_cut.jsonl"
      local st, out, err = H.run_lua(script, { outf })
      assert.are.equal(0, st, err)
      local vb, va = out:match("values%s+(%d+)%s+(%d+)")
      assert.are.equal(vb, va)
      assert.matches("windows%s+0\n", out)
      assert.matches("plain%s+nil", out)
      assert.matches("bad%s+false", out)
      local recs = H.jsonl(H.read(outf))
      assert.are.equal(2, #recs)
      for _, r in ipairs(recs) do
        -- hop 0: one raw candidate, cut; hops 1 and 2: two candidates, rank order
        assert.are.equal(5, #r.candidates)
        local c0 = r.candidates[1]
        assert.are.equal(0, c0.hop)
        assert.is_true(c0.cut)
        assert.is_true(#c0.candidate <= 65536)
        assert.are.same({ 1, 0, '"t"', false }, { r.candidates[2].hop, r.candidates[2].rank, r.candidates[2].candidate,
          r.candidates[2].accepted })
        assert.are.same({ 1, 1, '"s"', true }, { r.candidates[3].hop, r.candidates[3].rank, r.candidates[3].candidate,
          r.candidates[3].accepted })
        assert.is_nil(r.candidates[2].cut)
        -- both ranks of hop 1 were judged; hop 2 accepted rank 0, so rank 1 never was
        assert.is_nil(r.candidates[2].judged)
        assert.is_nil(r.candidates[3].judged)
        assert.are.same({ 2, 0, '"s"', true }, { r.candidates[4].hop, r.candidates[4].rank, r.candidates[4].candidate,
          r.candidates[4].accepted })
        assert.is_nil(r.candidates[4].judged)
        assert.are.same({ 2, 1, '"u"', false, false }, { r.candidates[5].hop, r.candidates[5].rank,
          r.candidates[5].candidate, r.candidates[5].accepted, r.candidates[5].judged })
      end
      local st2, jout, err2 = H.specula({ "verifiers", outf, "--verifier", "exact", "--json" })
      assert.are.equal(0, st2, err2)
      local j = cjson.decode(jout)
      assert.are.equal(2, j.cut)
      assert.are.equal(4, j.pairs)         -- hops 1 and 2 of both queries
      assert.are.equal(8, j.candidates)    -- the unjudged rank included: the lab judges every candidate
      assert.are.equal(4, j.verifiers[1].accepted)
    end)
  end)
end)
