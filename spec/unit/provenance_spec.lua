-- specula.provenance: the digests and descriptions a record's provenance is
-- made of, the spliced text, and how readers compare two of them.
local prov = require "specula.provenance"
local json = require "specula.json"
local verify = require "specula.verify"
local predict = require "specula.predict"

local function sample(k)
  return prov.build("1.2.3",
    { script = "agent.lua", sha256 = ("a"):rep(64), modules = json.object({ helper = ("b"):rep(64) }) },
    { file = "q.jsonl", format = "auto", sha256 = ("c"):rep(64) },
    { mode = "spechop", k = k or 3, m = 1, seed = 0, set = json.object({}), policy = { file = "p.lua", sha256 = "d" },
      verifier = "exact", predictor = "off", spec_timeout = json.null })
end

describe("provenance", function()
  it("hashes with libcrypto's SHA-256 (FIPS 180-2 vector)", function()
    assert.equals("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", prov.sha256_hex("abc"))
  end)

  it("splices a record's query digest into text equal to the canonical JSON of the whole object", function()
    local b = sample()
    local q = ("e"):rep(64)
    local text = json.canonical({ p = prov.raw(b, q) })
    local whole = {}
    for k, v in pairs(b.t) do whole[k] = v end
    whole.query = q
    assert.equals(json.canonical({ p = whole }), text)
    -- the run digest covers version, agent and config, not the input or the query
    assert.equals(prov.sha256_hex(json.canonical({ version = "1.2.3", agent = b.t.agent, config = b.t.config })), b.run)
    local other_input = prov.build("1.2.3", b.t.agent, { file = "r.jsonl", format = "auto", sha256 = ("f"):rep(64) },
      b.t.config)
    assert.equals(b.run, other_input.run)
    assert.not_equals(b.run, sample(2).run)
  end)

  it("checks that a provenance read back is whole and that its run digest is its fields'", function()
    local b = sample()
    local p = json.decode(json.canonical(prov.raw(b, ("e"):rep(64))))
    assert.is_true(prov.check(p))
    p.config.k = 4   -- edited by hand, run digest left
    local ok, why = prov.check(p)
    assert.is_nil(ok)
    assert.matches("was edited", why, 1, true)
    local p2 = json.decode(json.canonical(prov.raw(b, ("e"):rep(64))))
    p2.query = nil
    assert.is_nil((prov.check(p2)))
    assert.is_nil((prov.check("x")))
  end)

  it("names the first differing field, in a fixed order, with both values", function()
    local a, b = sample(3).t, sample(2).t
    assert.same({ "provenance.config.k", 3, 2 }, { prov.diff(a, b) })
    local c = sample(3).t
    c.config = {}
    for k, v in pairs(a.config) do c.config[k] = v end
    c.config.mode, c.config.seed = "window", 9
    assert.equals("provenance.config.mode", (prov.diff(a, c)))   -- mode before seed
    local d = sample(3).t
    d.agent = { script = "agent.lua", sha256 = ("a"):rep(64), modules = { helper = ("9"):rep(64) } }
    assert.equals("provenance.agent.modules.helper", (prov.diff(a, d)))
    d.config = c.config
    assert.equals("provenance.agent.modules.helper", (prov.diff(a, d)))   -- agent before config
    assert.is_nil(prov.diff(a, sample(3).t))
    -- the input only when asked for
    local e = sample(3).t
    e.input = { file = "q.jsonl", format = "auto", sha256 = ("0"):rep(64) }
    assert.is_nil(prov.diff(a, e))
    assert.equals("provenance.input.sha256", (prov.diff(a, e, { "version", "agent", "input" })))
    -- a key present on one side only
    local f = sample(3).t
    f.config = { mode = "spechop", k = 3, m = 1, seed = 0, set = { x = 1 }, policy = a.config.policy,
                 verifier = "exact", predictor = "off", spec_timeout = json.null }
    assert.same({ "provenance.config.set.x", nil, 1 }, { prov.diff(a, f) })
  end)

  it("describes built-in verifiers and predictors by name and options, functions by where they are defined", function()
    assert.equals("exact", prov.describe(verify.exact))
    assert.equals("spechop", prov.describe(verify.spechop))
    assert.same({ name = "jaccard", options = { threshold = 0.7 } }, prov.describe(verify.jaccard(0.7)))
    local any = prov.describe(verify.any { verify.exact, verify.jaccard(0.5) })
    assert.equals("any", any.name)
    assert.same({ "exact", { name = "jaccard", options = { threshold = 0.5 } } }, any.options.verifiers)
    local p = prov.describe(predict.pattern { top = 2 })
    assert.equals("pattern", p.name)
    assert.equals(2, p.options.top)
    assert.equals(2, p.options.n)
    assert.equals(4, prov.describe(predict.ngram { n = 4 }).options.n)
    local fn = function() end
    local d = prov.describe(fn)
    assert.matches("^provenance_spec%.lua:%d+$", d["function"])
    assert.equals(prov.file_digest(debug.getinfo(1, "S").source:sub(2)), d.sha256)
    -- a data table: its picture (functions by where, no cycles)
    local t = { a = 1, f = fn }
    t.self = t
    local pic = prov.describe(t)
    assert.equals(1, pic.a)
    assert.equals("<cycle>", pic.self)
    assert.matches("provenance_spec%.lua", pic.f["function"])
  end)

  it("a predictor restored from a file says what it starts from", function()
    local p = predict.pattern {}
    local before = json.canonical(prov.describe(p))
    p:restore({ counts = { ["1#^"] = { ["search|{}"] = 3 } }, observed = 3 })
    local after = prov.describe(p)
    assert.not_equals(before, json.canonical(after))
    assert.matches("^%x+$", after.options.restored)
  end)

  it("a query's digest is the SHA-256 of its record's canonical JSON, or of its bytes when that is not JSON", function()
    local q = { id = "q1", query = "who?", record = { id = "q1", query = "who?", extra = { 1, 2 } } }
    assert.equals(prov.sha256_hex(json.canonical(q.record)), prov.query(q))
    assert.equals(prov.query(q), q.digest)
    local bad = { id = "q2", query = "caf\233" }
    assert.matches("^%x+$", prov.query(bad))
    assert.equals(64, #bad.digest)
  end)

  it("tells apart runs that share a name by the first field where they differ", function()
    local a, b = sample(3).t, sample(3).t
    a.config = {}
    b.config = {}
    for k, v in pairs(sample(3).t.config) do a.config[k], b.config[k] = v, v end
    a.config.policy = { file = "forbid.lua", sha256 = ("1"):rep(64) }
    b.config.policy = { file = "early.lua", sha256 = ("2"):rep(64) }
    a.run, b.run = ("3"):rep(64), ("4"):rep(64)
    assert.same({ "policy forbid.lua 111111111111", "policy early.lua 222222222222", "no provenance" },
      prov.distinguish({ a, b, nil }, 3))
    local c = sample(3).t
    c.config = a.config
    c.run = ("5"):rep(64)
    c.config = {}
    for k, v in pairs(a.config) do c.config[k] = v end
    c.config.seed = 9
    local tags = prov.distinguish({ a, c })
    assert.equals("seed=0", tags[1])
    assert.equals("seed=9", tags[2])
  end)

  it("prints one line per run", function()
    local b = sample()
    local lines = prov.lines({ { prov = b.t, name = "spechop:k=3" } }, 2)
    assert.equals(3, #lines)
    assert.matches("^  run " .. b.run:sub(1, 12) .. " %(spechop:k=3%): specula 1%.2%.3, agent agent%.lua aaaaaaaaaaaa %(%+1 module%)",
      lines[2])
    assert.matches("policy p.lua", lines[2], 1, true)
    assert.matches("2 records without provenance", lines[3], 1, true)
  end)
end)

describe("provenance in a records file", function()
  local function line(rec) return json.canonical(rec) end

  it("a later record names its run only; a reader gives it the run's whole provenance from above", function()
    local b = sample()
    local q1, q2 = ("1"):rep(64), ("2"):rep(64)
    local l1 = line({ id = "a", provenance = prov.raw(b, q1) })
    local l2 = line({ id = "b", provenance = prov.raw_short(b, q2) })
    assert.equals(string.format('{"id":"b","provenance":{"query":"%s","run":"%s"}}', q2, b.run), l2)
    local rd = prov.reader()
    local r1, r2 = json.decode(l1), json.decode(l2)
    assert.same({ true, false }, { rd:expand(r1, "f", 1) })
    assert.same({ true, true }, { rd:expand(r2, "f", 2) })
    assert.equals(q2, r2.provenance.query)
    assert.same(r1.provenance.config, r2.provenance.config)
    assert.equals(r1.provenance.input, r2.provenance.input)
    assert.is_true(prov.check(r2.provenance))
    -- another reader (another file) has no whole one of that run
    local ok, why = prov.reader():expand(json.decode(l2), "g", 7)
    assert.is_nil(ok)
    assert.matches("^g:7: provenance.run " .. b.run:sub(1, 12) .. ": the run's full provenance is not in this file", why)
    -- a whole one that was edited: its run's later records say where
    local bad = json.decode(l1)
    bad.provenance.config.k = 9
    local rd2 = prov.reader()
    assert.is_nil((rd2:expand(bad, "h", 1)))
    ok, why = rd2:expand(json.decode(l2), "h", 2)
    assert.is_nil(ok)
    assert.matches("full provenance, at h:1, was refused", why, 1, true)
    -- records without provenance, or not objects, are not its business
    assert.is_true((rd:expand({ id = "x" }, "f", 3)))
    assert.is_true((rd:expand("text", "f", 4)))
  end)

  it("finds the record's own provenance member, not a nested one nor text inside a string", function()
    local p = '{"query":"' .. ("1"):rep(64) .. '","run":"' .. ("2"):rep(64) .. '"}'
    local text = '{"answer":"\\"provenance\\":{\\"x\\":1}","gold":{"provenance":{"a":[1,{"b":"}"}]}},"id":"q",'
      .. '"provenance":' .. p .. ',"stats":{"k":"{"}}'
    local a, b = prov.member(text, "provenance")
    assert.equals(p, text:sub(a, b))
    assert.is_nil(prov.member('{"id":"q","provenance":"text"}', "provenance"))
    assert.is_nil(prov.member('{"id":"q"}', "provenance"))
  end)

  it("restream: whole in a run's first line and where its input changes, short elsewhere", function()
    local b = sample()
    local function rec(q, input)
      local t = { version = b.t.version, agent = b.t.agent, config = b.t.config, input = input or b.t.input,
                  run = b.run, query = q }
      return { provenance = t }
    end
    local q = ("3"):rep(64)
    local whole = line({ id = "a", provenance = prov.raw(b, q) })
    local short = line({ id = "a", provenance = prov.raw_short(b, q) })
    local other_in = { file = "q.jsonl", format = "auto", sha256 = ("f"):rep(64) }
    local w = prov.restream()
    assert.equals(whole, w(short, rec(q), true))       -- first of its run: made whole
    assert.equals(short, w(whole, rec(q), false))      -- later: made short
    assert.equals(short, w(short, rec(q), true))
    local changed = w(short, rec(q, other_in), true)   -- another input: whole again
    assert.equals(other_in.sha256, json.decode(changed).provenance.input.sha256)
    assert.is_true(prov.check(json.decode(changed).provenance))
    -- keep: a whole line stays whole
    local k = prov.restream(true)
    assert.equals(whole, k(whole, rec(q), false))
    assert.equals(whole, k(whole, rec(q), false))
    -- no provenance: unchanged
    assert.equals('{"id":"x"}', w('{"id":"x"}', { id = "x" }, false))
  end)
end)
