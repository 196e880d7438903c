-- Unit tests for specula.datasets: tiny files in every format, written to
-- temporary files.
local datasets = require("specula.datasets")

local created = {}
local function write(content)
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(content)
  f:close()
  created[#created + 1] = path
  return path
end

local function lines(...)
  return table.concat({ ... }, "\n") .. "\n"
end

local function find_warning(warnings, ...)
  for _, w in ipairs(warnings) do
    local all = true
    for _, needle in ipairs({ ... }) do
      if not w:find(needle, 1, true) then all = false; break end
    end
    if all then return w end
  end
  return nil
end

local function assert_warning(warnings, ...)
  local w = find_warning(warnings, ...)
  assert.is_truthy(w, "no warning with " .. table.concat({ ... }, " & ") ..
                   " among:\n" .. table.concat(warnings, "\n"))
end

describe("specula.datasets.load", function()
  after_each(function()
    for _, p in ipairs(created) do os.remove(p) end
    created = {}
  end)

  it("reads 2WikiMultihopQA (JSON array) with max_hops = distinct titles + 2", function()
    local path = write([==[
[
 {"_id": "a1", "type": "compositional",
  "question": "Who is the mother of the director of film Polish-Russian War?",
  "context": [["Polish-Russian War", ["It is a film."]]],
  "supporting_facts": [["Polish-Russian War", 1], ["Xawery Żuławski", 2], ["Xawery Żuławski", 0]],
  "evidences": [["Polish-Russian War", "director", "Xawery Żuławski"]],
  "answer": "Małgorzata Braunek"},
 {"_id": "a2", "type": "comparison", "question": "Which film came out first?",
  "supporting_facts": [["A", 0], ["B", 0], ["C", 3]], "evidences": [], "answer": "A"},
 {"_id": "a3", "type": "comparison", "question": "Q3?", "supporting_facts": [["A", 0]]},
 {"_id": "a4", "type": "inference", "question": "Q4?", "answer": "x",
  "supporting_facts": [["A", 0], [5, 1]]}
]
]==])
    local recs, warnings = datasets.load(path)
    assert.are.equal(2, #recs)
    assert.are.same({
      id = "a1", query = "Who is the mother of the director of film Polish-Russian War?",
      gold = { "Małgorzata Braunek" }, max_hops = 4, source = "2wiki", type = "compositional",
    }, recs[1])
    assert.are.equal(5, recs[2].max_hops)
    assert.are.equal("2wiki", recs[2].source)
    assert_warning(warnings, path .. "[3]", "missing field 'answer'", "skipped")
    assert_warning(warnings, path .. "[4]", "supporting_facts[2] has no title")
    assert.are.equal(2, #warnings)
  end)

  it("reads MuSiQue (JSONL) with aliases, and skips malformed lines", function()
    local path = write(lines(
      '{"id": "2hop__1", "paragraphs": [], "question": "Who founded the label of Velvet Goldmine?", ' ..
        '"question_decomposition": [{"id": 1, "question": "label of Velvet Goldmine", "answer": "A", ' ..
        '"paragraph_support_idx": 0}, {"id": 2, "question": "who founded #1", "answer": "B", ' ..
        '"paragraph_support_idx": 1}], "answer": "Ans", "answer_aliases": ["Alias A", "Ans"], ' ..
        '"answerable": true}',
      '{"id": "broken", "question": ',
      '',
      '{"id": "3hop__2", "question": "Q3?", "question_decomposition": [{}, {}, {}], ' ..
        '"answer": "B", "answer_aliases": []}',
      '{"id": "4hop__3", "question": "Q4?", "answer": "C", "question_decomposition": null}',
      '{"id": "2hop__4", "answer": "D", "question_decomposition": [{}, {}]}'
    ))
    local recs, warnings = datasets.load(path, { format = "auto" })
    assert.are.equal(2, #recs)
    assert.are.equal("2hop__1", recs[1].id)
    assert.are.same({ "Ans", "Alias A" }, recs[1].gold)
    assert.are.equal(4, recs[1].max_hops)
    assert.are.equal("musique", recs[1].source)
    assert.are.same({ "label of Velvet Goldmine", "who founded #1" }, recs[1].decomposition)
    assert.is_true(recs[1].answerable)
    assert.are.equal(5, recs[2].max_hops)
    assert.are.same({ "B" }, recs[2].gold)
    assert_warning(warnings, path .. ":2:", "malformed JSON")
    assert_warning(warnings, path .. ":5:", "missing field 'question_decomposition'")
    assert_warning(warnings, path .. ":6:", "missing field 'question'")
    assert.are.equal(3, #warnings)
  end)

  it("reads HotpotQA and tells it from 2Wiki by level/type", function()
    local path = write([==[
[{"_id": "h1", "answer": "yes", "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
  "supporting_facts": [["Scott Derrickson", 0], ["Ed Wood", 0]],
  "context": [["Scott Derrickson", ["Scott Derrickson is an American director."]]],
  "type": "comparison", "level": "hard"},
 {"_id": "h2", "answer": "Chief of Protocol", "question": "What government position was held by the woman?",
  "supporting_facts": [["Kiss and Tell", 0], ["Shirley Temple", 0], ["Shirley Temple", 1]],
  "type": "bridge", "level": "medium"}]
]==])
    local recs, warnings = datasets.load(path)
    assert.are.same({}, warnings)
    assert.are.equal(2, #recs)
    assert.are.same({ id = "h1", query = "Were Scott Derrickson and Ed Wood of the same nationality?",
                      gold = { "yes" }, max_hops = 4, source = "hotpotqa",
                      type = "comparison", level = "hard" }, recs[1])
    assert.are.equal(4, recs[2].max_hops)
  end)

  it("warns when hotpotqa and 2wiki cannot be told apart, and honours an explicit format", function()
    local path = write('[{"_id": "z", "type": "comparison", "question": "Q?", "answer": "A",' ..
                       ' "supporting_facts": [["A", 0], ["B", 1]]}]')
    local recs, warnings = datasets.load(path)
    assert.are.equal("hotpotqa", recs[1].source)
    assert_warning(warnings, "ambiguous between hotpotqa and 2wiki")
    recs, warnings = datasets.load(path, { format = "2wiki" })
    assert.are.equal("2wiki", recs[1].source)
    assert.are.equal(4, recs[1].max_hops)
    assert.are.same({}, warnings)
  end)

  it("reads specula's own JSONL and keeps extra fields", function()
    local path = write(lines(
      '{"id": 1, "query": "What is 2+2?", "gold": "4", "max_hops": 3, "topic": "math"}',
      '',
      '{"id": "b", "query": "Capital of France?", "answer": "Paris", "aliases": ["Paris, France"]}',
      '{"query": "no id here"}',
      '[1, 2]',
      '{"id": "c", "query": "Q", "gold": ["x", "y", "x"]}',
      '{"id": "b", "query": "again"}'
    ))
    local recs, warnings = datasets.load(path)
    assert.are.equal(4, #recs)
    assert.are.same({ id = 1, query = "What is 2+2?", gold = { "4" }, max_hops = 3,
                      source = "jsonl", topic = "math" }, recs[1])
    assert.are.same({ "Paris", "Paris, France" }, recs[2].gold)
    assert.is_nil(recs[2].max_hops)
    assert.are.same({ "x", "y" }, recs[3].gold)
    assert_warning(warnings, path .. ":4:", "missing field 'id'")
    assert_warning(warnings, path .. ":5:", "not a JSON object")
    assert_warning(warnings, path .. ":7:", "duplicate id 'b'", path .. ":3")
    assert.are.equal(3, #warnings)
  end)

  it("reads a pretty-printed single object", function()
    local path = write('{\n  "id": "one",\n  "query": "Who?"\n}\n')
    local recs, warnings = datasets.load(path)
    assert.are.equal(1, #recs)
    assert.are.equal("one", recs[1].id)
    assert.are.same({}, warnings)
  end)

  it("fails on an unknown shape, naming the keys and the formats tried", function()
    local path = write('{"foo": 1, "bar": 2}\n{"foo": 3}\n')
    local recs, err = datasets.load(path)
    assert.is_nil(recs)
    assert.is_truthy(err:find("keys found: bar, foo", 1, true), err)
    for _, fmt in ipairs({ "musique", "2wiki", "hotpotqa", "jsonl" }) do
      assert.is_truthy(err:find(fmt, 1, true), err)
    end
    assert.is_truthy(err:find(path, 1, true), err)
  end)

  it("reports an explicit format's missing fields as warnings", function()
    local path = write('{"foo": 1}\n')
    local recs, warnings = datasets.load(path, { format = "musique" })
    assert.are.same({}, recs)
    assert_warning(warnings, path .. ":1:", "missing field 'id'")
  end)

  it("returns errors as values for unreadable or invalid files", function()
    local recs, err = datasets.load("/nonexistent/dir/x.jsonl")
    assert.is_nil(recs)
    assert.is_truthy(err:find("cannot open '/nonexistent/dir/x.jsonl'", 1, true), err)
    recs, err = datasets.load(write('[{"_id": "a",'))
    assert.is_nil(recs)
    assert.is_truthy(err:find("invalid JSON array", 1, true), err)
    local warnings
    recs, warnings = datasets.load(write("  \n"))
    assert.are.same({}, recs)
    assert_warning(warnings, "file is empty")
  end)

  it("honours limit and validates options", function()
    local path = write(lines('{"id": 1, "query": "a"}', '{"id": 2, "query": "b"}', '{"id": 3, "query": "c"}'))
    local recs = datasets.load(path, { limit = 2 })
    assert.are.equal(2, #recs)
    local ok, err = pcall(datasets.load, path, { format = "csv" })
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find("unknown format 'csv'", 1, true), err)
  end)
end)

describe("specula.datasets.parse and detect", function()
  it("parses text with a name used in warnings", function()
    local recs, warnings = datasets.parse('{"id": "x", "query": "q"}\nnot json\n', { name = "mem" })
    assert.are.equal(1, #recs)
    assert_warning(warnings, "mem:2:", "malformed JSON")
  end)

  -- a binary or compressed file read as lines is no input with no queries
  -- (a run of it did nothing and exited 0): an error, and for a compressed
  -- one the command that opens it; an empty text still is an empty input
  it("refuses text with lines and no JSON line, naming the first; a compressed file by its compression", function()
    local recs, err = datasets.parse("hello\nworld\n", { name = "mem" })
    assert.is_nil(recs)
    assert.matches("^specula%.datasets: mem: no line of it is JSON %(2 skipped; the first: mem:1: malformed JSON", err)
    local gz, gerr = datasets.parse("\31\139\8\0\1\2\255\n\254", { name = "q.jsonl.gz" })
    assert.is_nil(gz)
    assert.equals("specula.datasets: q.jsonl.gz: gzip-compressed: decompress it first: gzip -dc q.jsonl.gz > q.jsonl", gerr)
    local _, zerr = datasets.parse("\40\181\47\253\0\9", { name = "dump.zst" })
    assert.matches("zstd-compressed: decompress it first: zstd -dc dump.zst > dump.jsonl", zerr, 1, true)
    local empty, w = datasets.parse("\n  \n", { name = "mem" })
    assert.are.same({}, empty)
    assert_warning(w, "file is empty")
  end)

  it("detects formats from decoded objects", function()
    assert.are.equal("musique", (datasets.detect({ { id = "1", question_decomposition = {} } })))
    assert.are.equal("2wiki", (datasets.detect({ { _id = "1", type = "bridge_comparison" } })))
    assert.are.equal("hotpotqa", (datasets.detect({ { _id = "1", level = "easy" } })))
    assert.are.equal("jsonl", (datasets.detect({ { id = 1, query = "q" } })))
    local fmt, err = datasets.detect({ { x = 1 } })
    assert.is_nil(fmt)
    assert.is_truthy(err:find("keys found: x", 1, true))
  end)
end)

-- The first pass over an input (specula.run.inputs' survey) takes each
-- record's id from datasets.checker(fmt) without building the record: for
-- every format it must say nil exactly where build fails, and the id build
-- would give where it succeeds (a checker that drifts from its builder
-- would count, or skip, a record the run then treats the other way).
describe("specula.datasets.checker", function()
  local ds = require "specula.datasets"
  local null = require("specula.json").null
  local objects = {
    { id = "a", query = "q" }, { id = 7, query = "q" }, { id = 7.5, query = 3 }, { query = "q" },
    { id = "a" }, { id = "a", query = {} }, { id = {}, query = "q" }, { id = true, query = "q" },
    { id = null, query = "q" }, { id = "a", query = null }, { id = "a", query = "" },
    { id = "a", query = "q", gold = "g", extra = 1 },
    { _id = "h", question = "Q?", answer = "A", supporting_facts = { { "T", 0 } }, level = "easy" },
    { _id = "h", question = "Q?", supporting_facts = { { "T", 0 } } },
    { id = "m", question = "Q?", answer = "A", question_decomposition = { { question = "a" } } },
    { id = "m", question = "Q?", answer = "A" },
    { id = "c", messages = { { role = "user", content = "hi" } } }, { id = "c", messages = "x" },
  }
  for _, fmt in ipairs(ds.FORMATS) do
    it("agrees with build for " .. fmt, function()
      local check, build = ds.checker(fmt), ds.builder(fmt)
      for i, o in ipairs(objects) do
        local rec = build(o, "f:" .. i)
        assert.are.equal(rec and rec.id, check(o), fmt .. " object " .. i)
      end
    end)
  end
end)

-- The survey's set of id fingerprints (open addressing, at most 70 % full):
-- every key is new once and known after, through the collisions a full set
-- makes its probe walk past.
describe("specula.run.inputs idset", function()
  it("says each of 10,000 keys is new the first time and known the second", function()
    local set = require("specula.run.inputs").idset(10000)
    for i = 1, 10000 do assert.is_false(set:add("string:q" .. i), i) end
    for i = 1, 10000 do assert.is_true(set:add("string:q" .. i), i) end
    assert.is_false(set:add("number:1"))
    assert.is_true(set:add("number:1"))
  end)
end)
