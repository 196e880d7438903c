-- Provenance: every record says where it came from (specula version, digests
-- of the agent script and the modules beside it, of the input and the query,
-- the run's whole configuration), and resume, merge, compare and report read
-- it: a file from another run is never mixed in silently. In a file, the
-- first record of each run carries the whole object, the later ones its
-- query and run only (docs/cli.md "provenance"): readers expand them.
local H = require "support.helpers"
local cjson = require "cjson"
local EX = H.root .. "/examples/multihop_sim.lua"

local function queries(n, prefix, text)
  local t = {}
  for i = 1, n do
    t[i] = cjson.encode({ id = (prefix or "q") .. i, query = (text or "provenance question ") .. i })
  end
  return table.concat(t, "\n") .. "\n"
end

-- SHA-256 of a file or a string by coreutils, independent of specula's own
local function sha256sum_file(path)
  local st, out = H.sh("sha256sum " .. H.quote(path))
  assert(st == 0, "sha256sum failed")
  return out:match("^(%x+)")
end
local function sha256sum(s)
  return sha256sum_file(H.tmpfile(nil, s))
end

-- a cassette's digest as the provenance defines it: SHA-256 over each
-- cassette-NNNN.jsonl in order, "NAME DIGEST\n"
local function prov_digest_of_cassette(dir)
  local text, i = "", 1
  while true do
    local name = string.format("cassette-%04d.jsonl", i)
    local path = dir .. "/" .. name
    if not H.read(path) then break end
    text = text .. name .. " " .. sha256sum_file(path) .. "\n"
    i = i + 1
  end
  return sha256sum(text)
end

-- run examples/multihop_sim.lua under the virtual clock
local function run(args, env)
  local a = { "run", EX, "--clock", "virtual", "--quiet" }
  for _, x in ipairs(args) do a[#a + 1] = x end
  return H.specula(a, env)
end

local function lines_of(path)
  local t = {}
  for l in (H.read(path) or ""):gmatch("[^\n]+") do t[#t + 1] = l end
  return t
end

-- the text of the "provenance" object inside a canonical record line
local function prov_text(line)
  local text = H.prov_span(line)
  assert(text, "no provenance in " .. line:sub(1, 200))
  return text
end

-- a tiny agent split in a script and a module beside it, in its own directory
local function agent_dir(name, helper_text, script_extra)
  local dir = H.tmpdir() .. "/" .. name
  os.execute("mkdir -p " .. H.quote(dir))
  local f = assert(io.open(dir .. "/helper.lua", "w"))
  f:write(helper_text or "return { hops = 2 }\n")
  f:close()
  f = assert(io.open(dir .. "/agent.lua", "w"))
  f:write([[
local specula = require "specula"
local helper = require "helper"
]] .. (script_extra or "") .. [[
return specula.sim.multihop { hops = helper.hops, p = 0.5, seg = 1, spec = 1, target = 3,
  policy = { search = "full" } }
]])
  f:close()
  return dir .. "/agent.lua", dir
end

describe("provenance in every record", function()
  it("carries the version, the digests of the script, its modules and the query, and the whole configuration",
    function()
    local script, dir = agent_dir("prov_a")
    local q = H.tmpfile("prov_in.jsonl", queries(3))
    local out = H.tmpfile("prov_out.jsonl")
    os.remove(out)
    local pol = H.tmpfile("prov_policy.lua", 'return { search = "full" }\n')
    local st, _, err = H.specula({ "run", script, "--input", q, "--out", out, "--clock", "virtual", "--k", "3",
      "--m", "2", "--seed", "7", "--set", "alpha=1", "--set", "name=x", "--policy", pol, "--max-hops", "40",
      "--quiet" })
    assert.equals(0, st, err)
    local _, ver = H.specula({ "--version" })
    local written = lines_of(out)
    assert.equals(3, #written)
    -- the first record carries the whole provenance, the others their
    -- query and run only
    local short1 = cjson.decode(written[2]).provenance
    assert.same({ "query", "run" }, (function() local k = {} for x in pairs(short1) do k[#k + 1] = x end
      table.sort(k) return k end)())
    assert.equals(cjson.decode(written[1]).provenance.run, short1.run)
    local lines, nwhole = H.whole_lines(H.read(out))
    assert.equals(1, nwhole)
    assert.is_nil(written[3]:find('"agent":', 1, true))
    local runs = {}
    for i, line in ipairs(lines) do
      local r = cjson.decode(line)
      local p = r.provenance
      assert.is_table(p, line)
      assert.equals(ver:match("^specula (%S+)"), p.version)
      assert.equals("agent.lua", p.agent.script)
      assert.equals(sha256sum_file(script), p.agent.sha256)
      assert.same({ helper = sha256sum_file(dir .. "/helper.lua") }, p.agent.modules)
      assert.equals("prov_in.jsonl", p.input.file)
      assert.equals(sha256sum_file(q), p.input.sha256)
      assert.matches("^%x+$", p.query)
      assert.equals(64, #p.query)
      local c = p.config
      assert.equals("spechop", c.mode)
      assert.equals(3, c.k)
      assert.equals(2, c.m)
      assert.equals("eager", c.spec_launch)
      assert.equals("virtual", c.clock)
      assert.equals(7, c.seed)
      assert.equals(40, c.max_hops)
      assert.same({ alpha = 1, name = "x" }, c.set)
      assert.equals("off", c.predict)
      assert.is_number(c.eps)
      assert.is_number(c.ev_cost_ms)
      assert.equals("exact", c.match)
      assert.equals("both", c.trigger)
      assert.same({ file = "prov_policy.lua", sha256 = sha256sum_file(pol) }, c.policy)
      assert.is_not_nil(c.verifier)
      assert.equals("off", c.predictor)
      -- `run` is the SHA-256 of the provenance without input, query and run
      -- (its canonical text, as written in the line)
      local text = prov_text(line)
      local rest = text:gsub('"input":%b{},', ""):gsub('"query":"%x+",', ""):gsub(',"run":"%x+"', "")
      assert.equals(sha256sum(rest), p.run)
      runs[i] = p.run
      assert.equals(runs[1], p.run)
    end
    -- each query its own digest
    local qd = {}
    for _, line in ipairs(lines) do qd[cjson.decode(line).provenance.query] = true end
    local n = 0
    for _ in pairs(qd) do n = n + 1 end
    assert.equals(3, n)
  end)

  it("another script, module, option or --set value is another run; the same ones are the same run", function()
    local q = H.tmpfile("prov_same_in.jsonl", queries(2))
    local function run_of(script, extra)
      local out = H.tmpfile(nil)
      os.remove(out)
      local args = { "run", script, "--input", q, "--out", out, "--clock", "virtual", "--quiet" }
      for _, x in ipairs(extra or {}) do args[#args + 1] = x end
      local st, _, err = H.specula(args)
      assert.equals(0, st, err)
      return cjson.decode(lines_of(out)[1]).provenance
    end
    local a1 = agent_dir("prov_same1")
    local a2 = agent_dir("prov_same2")               -- same bytes, another directory
    local b = agent_dir("prov_mod", "return { hops = 2 } -- changed\n")
    local c = agent_dir("prov_script", nil, "-- another line\n")
    local base = run_of(a1)
    assert.equals(base.run, run_of(a2).run)
    assert.equals(base.run, run_of(a1, { "--concurrency", "3" }).run)   -- concurrency is no knob
    assert.not_equals(base.run, run_of(b).run)
    assert.not_equals(base.run, run_of(c).run)
    assert.not_equals(base.run, run_of(a1, { "--k", "2" }).run)
    assert.not_equals(base.run, run_of(a1, { "--set", "x=1" }).run)
    assert.not_equals(base.run, run_of(a1, { "--seed", "3" }).run)
    assert.not_equals(base.run, run_of(a1, { "--spec-launch", "slot" }).run)
  end)

  it("--compare, --shard and --retry-failed records carry it too, one run per configuration", function()
    local q = H.tmpfile("prov_cmp_in.jsonl", queries(4))
    local out = H.tmpfile("prov_cmp.jsonl")
    os.remove(out)
    local st, _, err = run({ "--input", q, "--compare", "sequential,spechop:k=2", "--out", out, "--shard", "1/2" })
    assert.equals(0, st, err)
    local runs = {}
    local recs, nwhole = H.records(H.read(out))
    -- one whole provenance per configuration: its first record's
    assert.equals(2, nwhole)
    for i, line in ipairs(lines_of(out)) do
      local r = recs[i]
      assert.is_table(r.provenance)
      assert.equals(r.stats.mode, r.provenance.config.mode)
      assert.equals(runs[r.config] == nil, line:find('"provenance":{"agent":', 1, true) ~= nil)
      runs[r.config] = runs[r.config] or r.provenance.run
      assert.equals(runs[r.config], r.provenance.run)
    end
    assert.equals(2, recs[3].provenance.config.k)
    assert.not_equals(runs.sequential, runs["spechop:k=2"])
  end)
end)

describe("provenance of what a run reads", function()
  it("a module beside the script loaded only once the run started is named in a warning", function()
    local dir = H.tmpdir() .. "/prov_lazy"
    os.execute("mkdir -p " .. H.quote(dir))
    local f = assert(io.open(dir .. "/late.lua", "w"))
    f:write("return { n = 1 }\n")
    f:close()
    f = assert(io.open(dir .. "/agent.lua", "w"))
    f:write([[
local specula = require "specula"
local a = specula.sim.multihop { hops = 1, p = 1, seg = 1, spec = 1, target = 2 }
local init = a.init
a.init = function(q, ctx) require "late" return init(q, ctx) end
return a
]])
    f:close()
    local st, out, err = H.specula({ "run", dir .. "/agent.lua", "--query", "x", "--clock", "virtual", "--quiet" })
    assert.equals(0, st, err)
    assert.matches("module 'late' beside the script was loaded after the run started", err, 1, true)
    assert.same({}, cjson.decode(out).provenance.agent.modules)
  end)

  it("a declared secret given as a --set value is not in the records", function()
    local script = H.tmpfile("prov_secret.lua", [[
local specula = require "specula"
require("specula.secrets").declare("topsecret-4711")
return specula.sim.multihop { hops = 1, p = 1, seg = 1, spec = 1, target = 2 }
]])
    local st, out, err = H.specula({ "run", script, "--query", "x", "--set", "key=topsecret-4711", "--clock", "virtual",
      "--quiet" })
    assert.equals(0, st, err)
    assert.is_nil(out:find("topsecret", 1, true))
    local p = cjson.decode(out).provenance
    assert.equals("[redacted]", p.config.set.key)
  end)

  it("a replayed run names its cassette and --miss; a live run does not resume it", function()
    local q = H.tmpfile("prov_cas_in.jsonl", queries(2))
    local cas = H.tmpdir() .. "/prov_cas"
    os.execute("rm -rf " .. H.quote(cas))
    local rec = H.tmpfile("prov_cas_rec.jsonl")
    os.remove(rec)
    local st, _, err = H.specula({ "run", EX, "--input", q, "--record", cas, "--out", rec, "--quiet" })
    assert.equals(0, st, err)
    assert.equals(cjson.null, cjson.decode(lines_of(rec)[1]).provenance.config.replay_io)
    local rep = H.tmpfile("prov_cas_rep.jsonl")
    os.remove(rep)
    st, _, err = run({ "--input", q, "--replay-io", cas, "--miss", "skip", "--out", rep })
    assert.equals(0, st, err)
    local c = cjson.decode(lines_of(rep)[1]).provenance.config
    assert.equals("skip", c.replay_io.miss)
    -- the cassette's files by name and digest (specula.provenance.cassette)
    local want = prov_digest_of_cassette(cas)
    assert.equals(want, c.replay_io.sha256)
    -- the same replay resumes; a live run on its file is another run
    st, _, err = run({ "--input", q, "--replay-io", cas, "--miss", "skip", "--out", rep })
    assert.equals(0, st, err)
    st, _, err = run({ "--input", q, "--out", rep })
    assert.equals(2, st, err)
    assert.matches("provenance.config.replay_io", err, 1, true)
  end)
end)

describe("resume checks provenance", function()
  local q
  setup(function() q = H.tmpfile("res_in.jsonl", queries(6)) end)

  it("refuses an --out from another input (other ids): exit 2, FILE:LINE, what to do", function()
    local other = H.tmpfile("res_other_in.jsonl", queries(6, "x"))
    local out = H.tmpfile("res_other.jsonl")
    os.remove(out)
    assert.equals(0, (run({ "--input", other, "--out", out })))
    local before = H.read(out)
    local st, _, err = run({ "--input", q, "--out", out })
    assert.equals(2, st, err)
    assert.matches(out .. ":1:", err, 1, true)
    assert.matches("provenance.input.sha256", err, 1, true)
    assert.matches("new --out", err, 1, true)
    assert.equals(before, H.read(out))   -- nothing written
  end)

  it("refuses the same ids answering other questions", function()
    local other = H.tmpfile("res_q_in.jsonl", queries(6, "q", "another question "))
    local out = H.tmpfile("res_q.jsonl")
    os.remove(out)
    assert.equals(0, (run({ "--input", other, "--out", out })))
    local st, _, err = run({ "--input", q, "--out", out })
    assert.equals(2, st, err)
    assert.matches(out .. ":1:", err, 1, true)
    assert.matches("provenance.input", err, 1, true)
    assert.matches("another question 1", err, 1, true)
  end)

  it("refuses a record whose query differs from the input's, when the input file is the same", function()
    local out = H.tmpfile("res_edit.jsonl")
    os.remove(out)
    assert.equals(0, (run({ "--input", q, "--out", out })))
    local ls = lines_of(out)
    -- a record edited to answer another query (its digest no longer matches)
    local r = cjson.decode(ls[2])
    ls[2] = ls[2]:gsub(r.provenance.query, string.rep("0", 64))
    H.tmpfile("res_edit.jsonl", table.concat(ls, "\n") .. "\n")
    local st, _, err = run({ "--input", q, "--out", out })
    assert.equals(2, st, err)
    assert.matches(out .. ":2:", err, 1, true)
    assert.matches("provenance.query", err, 1, true)
  end)

  it("a query with the same text whose input record's other fields differ: the refusal says what differs", function()
    local inp = H.tmpfile("res_same_text_in.jsonl", '{"id":"q1","query":"question 1"}\n'
      .. '{"id":"q2","query":"question 2","topic":"a"}\n')
    local out = H.tmpfile("res_same_text.jsonl")
    os.remove(out)
    assert.equals(0, (run({ "--input", inp, "--out", out })))
    -- the same file, q2's other field changed (the text is not)
    H.tmpfile("res_same_text_in.jsonl", '{"id":"q1","query":"question 1"}\n'
      .. '{"id":"q2","query":"question 2","topic":"b"}\n')
    local st, _, err = run({ "--input", inp, "--out", out })
    assert.equals(2, st, err)
    assert.matches(out .. ":2: provenance.query differs", err, 1, true)
    assert.matches('with the same text, "question 2", but the other fields of its input record differ', err, 1, true)
    -- never the same text on both sides as if that were the difference
    assert.is_nil(err:find('as "question 2", this input reads it as "question 2"', 1, true), err)
    local r = cjson.decode(lines_of(out)[2])
    assert.matches(r.provenance.query:sub(1, 12) .. " there", err, 1, true)
  end)

  it("refuses a file written with --k 3 when resumed with --k 2, naming config.k", function()
    local out = H.tmpfile("res_k.jsonl")
    os.remove(out)
    assert.equals(0, (run({ "--input", q, "--out", out, "--k", "3" })))
    local st, _, err = run({ "--input", q, "--out", out, "--k", "2" })
    assert.equals(2, st, err)
    assert.matches(out .. ":1:", err, 1, true)
    assert.matches("provenance.config.k is 3 there, 2 here", err, 1, true)
    assert.matches("resume with --k 3", err, 1, true)
    local recs = H.jsonl(H.read(out))
    assert.equals(6, #recs)
    for _, r in ipairs(recs) do assert.equals(3, r.stats.k_config) end
  end)

  it("refuses a sequential file given to a --k inf run", function()
    local out = H.tmpfile("res_mode.jsonl")
    os.remove(out)
    assert.equals(0, (run({ "--input", q, "--out", out, "--mode", "sequential" })))
    local st, _, err = run({ "--input", q, "--out", out, "--k", "inf" })
    assert.equals(2, st, err)
    assert.is_nil(err:find("queries to run", 1, true))
    assert.matches("provenance.config.", err, 1, true)
    assert.matches('"sequential" there, "spechop" here', err, 1, true)
  end)

  it("refuses a file written by another agent script or with another module beside it", function()
    local a = agent_dir("res_agent_a")
    local b = agent_dir("res_agent_b", nil, "-- changed\n")
    local m = agent_dir("res_agent_m", "return { hops = 2 } -- changed\n")
    local out = H.tmpfile("res_agent.jsonl")
    os.remove(out)
    local base = { "--input", q, "--out", out, "--clock", "virtual", "--quiet" }
    local function with(script) local t = { "run", script } for _, x in ipairs(base) do t[#t + 1] = x end return t end
    assert.equals(0, (H.specula(with(a))))
    local st, _, err = H.specula(with(b))
    assert.equals(2, st, err)
    assert.matches("provenance.agent.sha256", err, 1, true)
    st, _, err = H.specula(with(m))
    assert.equals(2, st, err)
    assert.matches("provenance.agent.modules.helper", err, 1, true)
  end)

  it("a file the script runs with dofile is part of the agent: its digest is in the records, a change refused",
    function()
    local dir = H.tmpdir() .. "/res_dofile"
    os.execute("mkdir -p " .. H.quote(dir))
    local function write(path, text) local f = assert(io.open(path, "w")) f:write(text) f:close() end
    write(dir .. "/params.lua", "return { hops = 2 }\n")
    write(dir .. "/agent.lua", [[
local specula = require "specula"
local dir = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$")) or "."
local params = dofile(dir .. "/params.lua")
return specula.sim.multihop { hops = params.hops, p = 0.5, seg = 1, spec = 1, target = 3,
  policy = { search = "full" } }
]])
    local out = H.tmpfile("res_dofile.jsonl")
    os.remove(out)
    local args = { "run", dir .. "/agent.lua", "--input", q, "--out", out, "--clock", "virtual", "--quiet" }
    local st, _, err = H.specula(args)
    assert.equals(0, st, err)
    local p = cjson.decode(lines_of(out)[1]).provenance
    assert.same({ ["dofile:params.lua"] = sha256sum_file(dir .. "/params.lua") }, p.agent.modules)
    -- the included file changes: the file is another run's
    write(dir .. "/params.lua", "return { hops = 2 } -- changed\n")
    st, _, err = H.specula(args)
    assert.equals(2, st, err)
    assert.matches("provenance.agent.modules.dofile:params.lua", err, 1, true)
  end)

  it("specula.run called from a script gives its records the same provenance as the command line", function()
    local dir = H.tmpdir() .. "/prov_api"
    os.execute("mkdir -p " .. H.quote(dir))
    local function write(path, text) local f = assert(io.open(path, "w")) f:write(text) f:close() end
    write(dir .. "/later.lua", "return 1\n")
    write(dir .. "/prog.lua", [[
local specula = require "specula"
local a = specula.sim.multihop { hops = 2, p = 0.5, seg = 1, spec = 1, target = 3, policy = { search = "full" } }
local qs = { "q one", { id = "x", query = "q two" } }
local r2 = specula.run(a, { queries = qs, k = 2, clock = "virtual" })
require "later"   -- loaded after a run: a program may go on (no warning)
local r3 = specula.run(a, { queries = qs, k = 3, clock = "virtual" })
local p, p3 = r2[1].provenance, r3[1].provenance
print(p.agent.script, p.input.format, p.config.k, p3.config.k, #p.query, r2[2].provenance.query ~= p.query,
  p.run == r2[2].provenance.run, p.run ~= p3.run, p.version ~= nil, p3.agent.modules.later ~= nil)
]])
    local st, out, err = H.specula({ "run", dir .. "/prog.lua" })
    assert.equals(0, st, err)
    assert.equals("prog.lua\tapi\t2\t3\t64\ttrue\ttrue\ttrue\ttrue\ttrue\n", out)
    assert.not_matches("warning", err, 1, true)
  end)

  it("duplicate ids give the same records whether or not the run was interrupted", function()
    local ids = { "d1", "d2", "d3", "dup", "d4", "d5", "d6", "dup", "d7", "d8", "d9", "d10", "d11" }
    local t = {}
    for i, id in ipairs(ids) do t[i] = cjson.encode({ id = id, query = "dup question " .. id }) end
    local dq = H.tmpfile("dup_in.jsonl", table.concat(t, "\n") .. "\n")
    local full = H.tmpfile("dup_full.jsonl")
    os.remove(full)
    assert.equals(0, (run({ "--input", dq, "--out", full })))
    local all = lines_of(full)
    assert.equals(13, #all)
    -- as if killed after the first 5 records (the first "dup" among them)
    local part = H.tmpfile("dup_part.jsonl", table.concat(all, "\n", 1, 5) .. "\n")
    local st, _, err = run({ "--input", dq, "--out", part })
    assert.equals(0, st, err)
    -- the resumed file holds a second whole provenance (the resuming run's
    -- first record); read as readers read it, the records are the same
    local got, nwhole = H.whole_lines(H.read(part))
    assert.equals(13, #got)
    assert.equals(2, nwhole)
    assert.matches('"provenance":{"agent":', lines_of(part)[6], 1, true)
    all = H.whole_lines(H.read(full))
    table.sort(all)
    table.sort(got)
    assert.same(all, got)
  end)

  it("refuses a corrupt line in the middle, names FILE:LINE and the repair command; the repair keeps the rest",
    function()
    local full = H.tmpfile("cor_full.jsonl")
    os.remove(full)
    assert.equals(0, (run({ "--input", q, "--out", full })))
    local all = lines_of(full)
    local out = H.tmpfile("cor.jsonl", table.concat({ all[1], all[2], all[3]:sub(1, 40), all[4] }, "\n") .. "\n")
    local st, _, err = run({ "--input", q, "--out", out })
    assert.equals(2, st, err)
    assert.matches(out .. ":3:", err, 1, true)
    assert.matches("specula repair " .. out, err, 1, true)
    -- the command the message names
    local st2, _, err2 = H.specula({ "repair", out })
    assert.equals(0, st2, err2)
    assert.matches("kept 3 records, dropped 1 line", err2, 1, true)
    assert.same({ all[1], all[2], all[4] }, lines_of(out))
    -- then the resume completes it, as an uninterrupted run
    local st3, _, err3 = run({ "--input", q, "--out", out })
    assert.equals(0, st3, err3)
    local got = H.whole_lines(H.read(out))
    all = H.whole_lines(H.read(full))
    table.sort(got)
    table.sort(all)
    local function stable(ls)
      local o = {}
      for i, l in ipairs(ls) do
        local r = cjson.decode(l)
        o[i] = cjson.encode({ r.id, r.answer, r.trajectory, r.provenance })
      end
      table.sort(o)
      return o
    end
    assert.same(stable(all), stable(got))
  end)

  it("still drops a cut-off last line (a kill mid-write) and resumes", function()
    local full = H.tmpfile("cut_full.jsonl")
    os.remove(full)
    assert.equals(0, (run({ "--input", q, "--out", full })))
    local all = lines_of(full)
    local out = H.tmpfile("cut.jsonl", all[1] .. "\n" .. all[2] .. "\n" .. all[3]:sub(1, 50))
    local st, _, err = run({ "--input", q, "--out", out })
    assert.equals(0, st, err)
    assert.equals(6, #lines_of(out))
  end)

  it("refuses records without provenance (an older specula) with a message saying so", function()
    local full = H.tmpfile("old_full.jsonl")
    os.remove(full)
    assert.equals(0, (run({ "--input", q, "--out", full })))
    local ls = lines_of(full)
    local r = cjson.decode(ls[1])
    r.provenance = nil
    local out = H.tmpfile("old.jsonl", cjson.encode(r) .. "\n")
    local st, _, err = run({ "--input", q, "--out", out })
    assert.equals(2, st, err)
    assert.matches(out .. ":1:", err, 1, true)
    assert.matches("no provenance", err, 1, true)
    assert.matches("older specula", err, 1, true)
  end)

  it("--compare: refuses a configuration that ran with other options, or is not in the list", function()
    local out = H.tmpfile("res_cmp.jsonl")
    os.remove(out)
    assert.equals(0, (run({ "--input", q, "--out", out, "--compare", "sequential,spechop:k=2" })))
    -- the same list resumes (nothing to run) and prints the same table
    local st, _, err = run({ "--input", q, "--out", out, "--compare", "sequential,spechop:k=2" })
    assert.equals(0, st, err)
    -- another --seed: every configuration is another run
    st, _, err = run({ "--input", q, "--out", out, "--compare", "sequential,spechop:k=2", "--seed", "5" })
    assert.equals(2, st, err)
    assert.matches("provenance.config.seed is 0 there, 5 here", err, 1, true)
    -- a configuration of the file the list does not name
    st, _, err = run({ "--input", q, "--out", out, "--compare", "sequential" })
    assert.equals(2, st, err)
    assert.matches("'spechop:k=2'", err, 1, true)
    -- a plain run on a --compare file
    st, _, err = run({ "--input", q, "--out", out })
    assert.equals(2, st, err)
    assert.matches("--compare", err, 1, true)
  end)

  it("a shard resumed as another shard is refused", function()
    local out = H.tmpfile("res_shard.jsonl")
    os.remove(out)
    assert.equals(0, (run({ "--input", q, "--out", out, "--shard", "0/2" })))
    local st, _, err = run({ "--input", q, "--out", out, "--shard", "1/2" })
    assert.equals(2, st, err)
    assert.matches("shard", err, 1, true)
  end)
end)

describe("specula repair", function()
  it("--help says what it keeps and drops", function()
    local st, out = H.specula({ "repair", "--help" })
    assert.equals(0, st)
    assert.matches("usage: specula repair", out, 1, true)
    assert.matches("complete records", out, 1, true)
  end)

  it("leaves a sound file as it is, and reports a missing file", function()
    local f = H.tmpfile("rep_ok.jsonl", '{"id":"a","answer":1}\n{"id":"b","answer":2}\n')
    local st, _, err = H.specula({ "repair", f })
    assert.equals(0, st, err)
    assert.matches("nothing to repair", err, 1, true)
    assert.equals('{"id":"a","answer":1}\n{"id":"b","answer":2}\n', H.read(f))
    st, _, err = H.specula({ "repair", H.tmpdir() .. "/nope.jsonl" })
    assert.equals(1, st)
    assert.matches("nope.jsonl", err, 1, true)
  end)

  it("drops lines that are not complete records, blank lines and a cut-off end, naming each", function()
    local f = H.tmpfile("rep_bad.jsonl", '{"id":"a"}\n\n{"id":\n[1,2]\n{"no_id":1}\n{"id":"b"}\n{"id":"c"')
    local st, _, err = H.specula({ "repair", f })
    assert.equals(0, st, err)
    assert.matches("kept 2 records, dropped 4 lines", err, 1, true)
    assert.matches(f .. ":3", err, 1, true)
    assert.matches(f .. ":7", err, 1, true)
    assert.equals('{"id":"a"}\n{"id":"b"}\n', H.read(f))
  end)
end)

describe("a file that is no results file, given as --out or to repair", function()
  it("is refused by the run and left unchanged by repair (which emptied it), a damaged results file still repaired",
    function()
    local script = H.read(H.root .. "/examples/multihop_sim.lua")
    local q = H.tmpfile("nrf_in.jsonl", '{"id":"a","query":"q1"}\n')
    for _, c in ipairs({ { "victim.lua", script, "not JSON" },
                         { "array.jsonl", '[{"id":"a"}]\n[1,2]\n', "not a JSON object" },
                         { "binary.jsonl", "\0\1\2\255\n\3\4\n", "not JSON" },
                         { "noid.jsonl", '{"name":"x"}\n', "a JSON object without an id" } }) do
      local f = H.tmpfile("nrf_" .. c[1], c[2])
      local st, _, err = H.specula({ "run", H.root .. "/examples/multihop_sim.lua", "--input", q, "--out", f,
        "--clock", "virtual", "--quiet" })
      assert.equals(2, st, err)
      assert.matches(f .. ":1: not a results file (its first line is " .. c[3], err, 1, true)
      assert.not_matches("specula repair", err, 1, true)   -- no advice to empty it
      local rst, _, rerr = H.specula({ "repair", f })
      assert.equals(1, rst, rerr)
      assert.matches("specula repair: " .. f .. ": not a results file (no line of it is a record; line 1:", rerr, 1,
        true)
      assert.equals(c[2], H.read(f))
    end
    -- a results file whose first line is damaged still gets the repair advice
    local full = H.tmpfile("nrf_full.jsonl")
    os.remove(full)
    local q2 = H.tmpfile("nrf_in2.jsonl", '{"id":"a","query":"q1"}\n{"id":"b","query":"q2"}\n{"id":"c","query":"q3"}\n')
    local st = H.specula({ "run", H.root .. "/examples/multihop_sim.lua", "--input", q2, "--out", full, "--clock",
      "virtual", "--quiet" })
    assert.equals(0, st)
    local lines = {}
    for l in H.read(full):gmatch("[^\n]+") do lines[#lines + 1] = l end
    local damaged = H.tmpfile("nrf_damaged.jsonl", lines[1]:sub(1, 30) .. "\n" .. lines[2] .. "\n" .. lines[3] .. "\n")
    local rst, _, rerr = H.specula({ "run", H.root .. "/examples/multihop_sim.lua", "--input", q2, "--out", damaged,
      "--clock", "virtual", "--quiet" })
    assert.equals(2, rst)
    assert.matches("specula repair " .. damaged, rerr, 1, true)
  end)
end)

describe("merge checks provenance", function()
  local q
  setup(function() q = H.tmpfile("mrg_in.jsonl", queries(6)) end)

  local function shard(script, input, i, extra)
    local out = H.tmpfile(nil)
    os.remove(out)
    local args = { "run", script, "--input", input, "--out", out, "--shard", i .. "/2", "--clock", "virtual", "--quiet" }
    for _, x in ipairs(extra or {}) do args[#args + 1] = x end
    local st, _, err = H.specula(args)
    assert.equals(0, st, err)
    return out
  end

  it("refuses shards cut from different inputs, with or without --input, naming the two files", function()
    local other = H.tmpfile("mrg_other_in.jsonl", queries(6, "q", "other question "))
    local s0, s1 = shard(EX, q, 0), shard(EX, other, 1)
    local st, _, err = H.specula({ "merge", s0, s1, "-o", H.tmpfile("mrg1.jsonl") })
    assert.equals(1, st, err)
    assert.matches(s0, err, 1, true)
    assert.matches(s1, err, 1, true)
    assert.matches("provenance.input.sha256", err, 1, true)
    st, _, err = H.specula({ "merge", s0, s1, "-o", H.tmpfile("mrg2.jsonl"), "--input", q })
    assert.equals(1, st, err)
    assert.matches(s1, err, 1, true)
    -- the right shards merge, and --input must be the file they were cut from
    local s1b = shard(EX, q, 1)
    st, _, err = H.specula({ "merge", s0, s1b, "-o", H.tmpfile("mrg3.jsonl"), "--input", q })
    assert.equals(0, st, err)
    st, _, err = H.specula({ "merge", s0, s1b, "-o", H.tmpfile("mrg4.jsonl"), "--input", other })
    assert.equals(1, st, err)
    assert.matches("input", err, 1, true)
  end)

  it("refuses shards run by different agent scripts with the same options", function()
    local a = agent_dir("mrg_a")
    local b = agent_dir("mrg_b", nil, "-- another version\n")
    local s0, s1 = shard(a, q, 0), shard(b, q, 1)
    local st, _, err = H.specula({ "merge", s0, s1, "-o", H.tmpfile("mrg5.jsonl") })
    assert.equals(1, st, err)
    assert.matches(s0, err, 1, true)
    assert.matches(s1, err, 1, true)
    assert.matches("provenance.agent.sha256", err, 1, true)
  end)

  it("refuses shards of one configuration run with different options", function()
    local s0, s1 = shard(EX, q, 0, { "--seed", "1" }), shard(EX, q, 1, { "--seed", "1", "--spec-timeout", "50" })
    local st, _, err = H.specula({ "merge", s0, s1, "-o", H.tmpfile("mrg6.jsonl") })
    assert.equals(1, st, err)
    assert.matches("provenance.config.spec_timeout", err, 1, true)
  end)

  it("a corrupt line names the repair command", function()
    local s0 = shard(EX, q, 0)
    local ls = lines_of(s0)
    H.tmpfile(s0:match("[^/]+$"), ls[1] .. "\n{\"id\":\n" .. ls[2] .. "\n")
    local st, _, err = H.specula({ "merge", s0, shard(EX, q, 1), "-o", H.tmpfile("mrg7.jsonl") })
    assert.equals(1, st, err)
    assert.matches(s0 .. ":2", err, 1, true)
    assert.matches("specula repair " .. s0, err, 1, true)
  end)
end)

describe("compare and report show the provenance they read", function()
  it("records without provenance (an older specula) are read as before, and said to be", function()
    local q = H.tmpfile("old_show_in.jsonl", queries(3))
    local a = H.tmpfile("old_show.jsonl")
    os.remove(a)
    assert.equals(0, (run({ "--input", q, "--out", a })))
    local t = {}
    for i, l in ipairs(lines_of(a)) do
      local r = cjson.decode(l)
      r.provenance = nil
      t[i] = cjson.encode(r)
    end
    H.tmpfile("old_show.jsonl", table.concat(t, "\n") .. "\n")
    local st, out, err = H.specula({ "compare", a })
    assert.equals(0, st, err)
    assert.matches("\nspechop:k=3 +3 ", out)
    assert.matches("(3 records without provenance: written by an older specula", out, 1, true)
    st, _, err = H.specula({ "merge", a, "-o", H.tmpfile("old_merged.jsonl"), "--input", q })
    assert.equals(0, st, err)
    assert.matches("carry no provenance", err, 1, true)
  end)


  it("one line per distinct run", function()
    local q = H.tmpfile("show_in.jsonl", queries(4))
    local a, b = H.tmpfile("show_a.jsonl"), H.tmpfile("show_b.jsonl")
    os.remove(a)
    os.remove(b)
    assert.equals(0, (run({ "--input", q, "--out", a, "--compare", "sequential,spechop:k=2" })))
    assert.equals(0, (run({ "--input", q, "--out", b, "--k", "inf" })))
    local st, out, err = H.specula({ "compare", a, b })
    assert.equals(0, st, err)
    local ra = H.jsonl(H.read(a))
    local rb = H.jsonl(H.read(b))
    local n = 0
    for line in out:gmatch("[^\n]+") do
      if line:match("^  run %x+") then n = n + 1 end
    end
    assert.equals(3, n, out)
    assert.matches("run " .. ra[1].provenance.run:sub(1, 12), out, 1, true)
    assert.matches("run " .. rb[1].provenance.run:sub(1, 12), out, 1, true)
    assert.matches("agent multihop_sim.lua " .. rb[1].provenance.agent.sha256:sub(1, 12), out, 1, true)
    local html = H.tmpfile("show.html")
    st, _, err = H.specula({ "report", a, b, "-o", html })
    assert.equals(0, st, err)
    local page = H.read(html)
    assert.matches('id="provenance"', page, 1, true)
    assert.matches(rb[1].provenance.run:sub(1, 12), page, 1, true)
    assert.matches("run " .. ra[1].provenance.run:sub(1, 12), err, 1, true)
  end)

  it("report --trace refuses a trace written by another run than its records", function()
    local q = H.tmpfile("tr_in.jsonl", queries(3))
    local a, b = H.tmpfile("tr_a.jsonl"), H.tmpfile("tr_b.jsonl")
    local ta, tb = H.tmpfile("tr_a.json"), H.tmpfile("tr_b.json")
    os.remove(a)
    os.remove(b)
    assert.equals(0, (run({ "--input", q, "--out", a, "--trace", ta })))
    assert.equals(0, (run({ "--input", q, "--out", b, "--trace", tb, "--k", "2" })))
    local rb = H.jsonl(H.read(b))
    assert.same({ rb[1].provenance.run }, cjson.decode(H.read(tb)).specula.runs)
    local html = H.tmpfile("tr.html")
    local st, _, err = H.specula({ "report", b, "--trace", tb, "-o", html })
    assert.equals(0, st, err)
    st, _, err = H.specula({ "report", b, "--trace", ta, "-o", html })
    assert.equals(1, st, err)
    assert.matches("trace '" .. ta .. "' was written by another run than the records: provenance.run "
      .. H.jsonl(H.read(a))[1].provenance.run:sub(1, 12) .. " there, " .. rb[1].provenance.run:sub(1, 12)
      .. " in the records", err, 1, true)
    -- a --compare trace names every configuration's run; records of one of them go with it
    local c, tc = H.tmpfile("tr_c.jsonl"), H.tmpfile("tr_c.json")
    os.remove(c)
    assert.equals(0, (run({ "--input", q, "--out", c, "--trace", tc, "--compare", "sequential,spechop:k=2" })))
    assert.equals(2, #cjson.decode(H.read(tc)).specula.runs)
    st, _, err = H.specula({ "report", c, "--trace", tc, "-o", html })
    assert.equals(0, st, err)
  end)
end)

describe("a run's whole provenance is written once per file", function()
  local q
  setup(function() q = H.tmpfile("once_in.jsonl", queries(6)) end)

  local function whole_at(path)
    local at = {}
    for i, l in ipairs(lines_of(path)) do
      if l:find('"provenance":{"agent":', 1, true) then at[#at + 1] = i
      else assert.matches('"provenance":{"query":"%x+","run":"%x+"}', l) end
    end
    return at
  end

  it("in the first record of each run, to a file or to stdout; the rest name their run", function()
    local out = H.tmpfile("once.jsonl")
    os.remove(out)
    assert.equals(0, (run({ "--input", q, "--out", out, "--concurrency", "1" })))
    assert.same({ 1 }, whole_at(out))
    local st, text, err = run({ "--input", q, "--concurrency", "1" })
    assert.equals(0, st, err)
    assert.equals(H.read(out), text)
    -- one per configuration of --compare
    local cmp = H.tmpfile("once_cmp.jsonl")
    os.remove(cmp)
    assert.equals(0, (run({ "--input", q, "--out", cmp, "--compare", "sequential,spechop:k=2,spechop:k=3" })))
    assert.same({ 1, 7, 13 }, whole_at(cmp))
    local recs = H.records(H.read(cmp))
    assert.equals(18, #recs)
    for i, r in ipairs(recs) do assert.equals(recs[math.floor((i - 1) / 6) * 6 + 1].provenance.run, r.provenance.run) end
  end)

  it("a resume appends a whole one again (its input may have grown), and the file reads back", function()
    local small = H.tmpfile("once_grow_in.jsonl", queries(3))
    local out = H.tmpfile("once_grow.jsonl")
    os.remove(out)
    assert.equals(0, (run({ "--input", small, "--out", out })))
    -- the input grows: the resume is the same run, its input digest another
    H.tmpfile("once_grow_in.jsonl", queries(6))
    local st, _, err = run({ "--input", small, "--out", out })
    assert.equals(0, st, err)
    assert.same({ 1, 4 }, whole_at(out))
    local recs = H.records(H.read(out))
    assert.equals(recs[1].provenance.run, recs[6].provenance.run)
    assert.equals(sha256sum_file(small), recs[5].provenance.input.sha256)
    assert.not_equals(recs[1].provenance.input.sha256, recs[5].provenance.input.sha256)
    -- compare, report and a further resume read it
    assert.equals(0, (H.specula({ "compare", out })))
    assert.equals(0, (H.specula({ "report", out, "-o", H.tmpfile("once_grow.html") })))
    local before = H.read(out)
    st, _, err = run({ "--input", small, "--out", out })
    assert.equals(0, st, err)
    assert.equals(before, H.read(out))
  end)

  it("--retry-failed dropping the record that carried it moves it to the run's next kept record", function()
    local agent = H.root .. "/spec/functional/scripts/integrity.lua"
    local fq = H.tmpfile("once_retry_in.jsonl", '{"id":"fail_1","query":"x"}\n{"id":"a1","query":"y"}\n'
      .. '{"id":"a2","query":"z"}\n')
    local out = H.tmpfile("once_retry.jsonl")
    os.remove(out)
    local st, _, err = H.specula({ "run", agent, "--input", fq, "--out", out, "--quiet", "--concurrency", "1" },
      { INTEGRITY_FAIL = "1" })
    assert.equals(3, st, err)
    local ls = lines_of(out)
    assert.matches('"id":"fail_1"', ls[1], 1, true)
    assert.same({ 1 }, whole_at(out))
    st, _, err = H.specula({ "run", agent, "--input", fq, "--out", out, "--retry-failed", "--quiet" })
    assert.equals(0, st, err)
    ls = lines_of(out)
    assert.equals(3, #ls)
    -- a1 (now first) carries it; the rerun record is the new run's first
    assert.matches('"id":"a1"', ls[1], 1, true)
    assert.same({ 1, 3 }, whole_at(out))
    local recs = H.records(H.read(out))
    assert.is_nil(recs[3].error)
    assert.equals(0, (H.specula({ "compare", out })))
  end)

  it("merge writes it in the first record of each configuration of the union, which every reader reads", function()
    local s = {}
    for i = 0, 2 do
      s[i + 1] = H.tmpfile(nil)
      os.remove(s[i + 1])
      assert.equals(0, (run({ "--input", q, "--out", s[i + 1], "--shard", i .. "/3", "--compare",
        "sequential,spechop:k=2" })))
      assert.same({ 1, 3 }, whole_at(s[i + 1]))
    end
    local m = H.tmpfile("once_merged.jsonl")
    local st, _, err = H.specula({ "merge", s[1], s[2], s[3], "-o", m, "--input", q })
    assert.equals(0, st, err)
    assert.same({ 1, 7 }, whole_at(m))
    -- the same records as the shards', each with its whole provenance
    local union = {}
    for _, f in ipairs(s) do for _, l in ipairs(H.whole_lines(H.read(f))) do union[#union + 1] = l end end
    local got = H.whole_lines(H.read(m))
    table.sort(union)
    table.sort(got)
    assert.same(union, got)
    assert.equals(0, (H.specula({ "compare", m })))
    assert.equals(0, (H.specula({ "report", m, "-o", H.tmpfile("once_merged.html") })))
    local again = H.tmpfile("once_merged2.jsonl")
    st, _, err = H.specula({ "merge", m, "-o", again, "--input", q })
    assert.equals(0, st, err)
    assert.equals(H.read(m), H.read(again))
  end)

  it("repair: a dropped line that carried it hands it on when it could be read, else the records are refused",
    function()
    local full = H.tmpfile("once_rep_full.jsonl")
    os.remove(full)
    assert.equals(0, (run({ "--input", q, "--out", full })))
    local ls = lines_of(full)
    -- line 1 without its id: dropped, its provenance carried to line 2
    local r1 = ls[1]:gsub('"id":"q%d+",', "", 1)
    local f = H.tmpfile("once_rep.jsonl", table.concat({ r1, ls[2], ls[3], ls[4], ls[5], ls[6] }, "\n") .. "\n")
    local st, _, err = H.specula({ "repair", f })
    assert.equals(0, st, err)
    assert.matches("kept 5 records, dropped 1 line", err, 1, true)
    assert.same({ 1 }, whole_at(f))
    local want = H.whole_lines(H.read(full))
    table.remove(want, 1)
    assert.same(want, (H.whole_lines(H.read(f))))
    assert.equals(0, (H.specula({ "compare", f })))
    -- line 1 cut: the records of its run cannot be tied to it; nothing written
    local cut = H.tmpfile("once_rep_cut.jsonl", ls[1]:sub(1, 300) .. "\n" .. table.concat(ls, "\n", 2) .. "\n")
    local before = H.read(cut)
    st, _, err = H.specula({ "repair", cut })
    assert.equals(1, st, err)
    assert.matches(cut .. ":2: provenance.run ", err, 1, true)
    assert.matches("the run's full provenance is not in this file above this record", err, 1, true)
    assert.equals(before, H.read(cut))
  end)

  it("report skips a line that is no results record but still takes its run's whole provenance from it", function()
    local out = H.tmpfile("once_skip.jsonl")
    os.remove(out)
    assert.equals(0, (run({ "--input", q, "--out", out })))
    local ls = lines_of(out)
    ls[1] = ls[1]:gsub('"stats":%b{},', "", 1)
    H.tmpfile("once_skip.jsonl", table.concat(ls, "\n") .. "\n")
    local st, _, err = H.specula({ "report", out, "-o", H.tmpfile("once_skip.html") })
    assert.equals(0, st, err)
    assert.matches(out .. ":1: no stats object", err, 1, true)
    assert.matches("wrote .- %(5 queries, 1 configuration, 1 lines skipped%)", err)
  end)

  it("an edited whole provenance is refused as before; specula.run keeps every record's whole one", function()
    local out = H.tmpfile("once_edit.jsonl")
    os.remove(out)
    assert.equals(0, (run({ "--input", q, "--out", out })))
    local ls = lines_of(out)
    ls[1] = ls[1]:gsub('"seed":0,', '"seed":3,', 1)
    H.tmpfile("once_edit.jsonl", table.concat(ls, "\n") .. "\n")
    local st, _, err = run({ "--input", q, "--out", out })
    assert.equals(2, st, err)
    assert.matches(out .. ":1: provenance.run is %x+ but its fields digest to %x+ %(the record was edited%)", err)
    -- the records specula.run returns are in memory: each its whole table
    local prog = H.tmpfile("once_api.lua", [[
local specula = require "specula"
local a = specula.sim.multihop { hops = 2, p = 0.5, seg = 1, spec = 1, target = 3 }
local rs = specula.run(a, { queries = { "one", "two", "three" }, clock = "virtual" })
for _, r in ipairs(rs) do
  local p = r.provenance
  print(p.version ~= nil, p.agent ~= nil, p.input ~= nil, p.config ~= nil, p.run == rs[1].provenance.run)
end
]])
    local st2, text, err2 = H.specula({ "run", prog })
    assert.equals(0, st2, err2)
    assert.equals(("true\ttrue\ttrue\ttrue\ttrue\n"):rep(3), text)
  end)
end)
