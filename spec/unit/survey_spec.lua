-- The first pass over a JSONL --input (specula.run.inputs): the lines the
-- engine summarises without a Lua value (sp_json_line_scan) must read as
-- Lua's decoder reads them, and the pass must count, warn and find
-- duplicate ids exactly as when every line was decoded.
local ffi = require("ffi")
local core = require("specula.internal.core")
local json = require("specula.json")
local datasets = require("specula.datasets")
local inputs = require("specula.run.inputs")
local C = core.C

local KEYS = datasets.SUMMARY_KEYS
local CKEYS = ffi.new("const char *[?]", #KEYS, KEYS)
local out = ffi.new("sp_json_line")
local fp = ffi.new("uint32_t[2]")

local function scan(line)
  return C.sp_json_line_scan(line, #line, CKEYS, #KEYS, out)
end

-- s with lo..hi random edits (a byte of chars replaced or inserted, or a
-- byte removed), from math.random's sequence
local function damage(s, chars, lo, hi)
  for _ = 1, math.random(lo, hi) do
    local at, op = math.random(1, #s), math.random(1, 3)
    local c = chars[math.random(#chars)]
    if op == 1 then s = s:sub(1, at - 1) .. c .. s:sub(at + 1)
    elseif op == 2 then s = s:sub(1, at - 1) .. c .. s:sub(at)
    else s = s:sub(1, at - 1) .. s:sub(at + 1) end
  end
  return s
end

-- How many of n damaged copies of seeds (taken in turn, from seed's random
-- sequence) check(line) returns 0 for.
local function damaged_zeros(n, seeds, chars, lo, hi, seed, check)
  math.randomseed(seed)
  local zeros = 0
  for i = 1, n do
    if check(damage(seeds[i % #seeds + 1], chars, lo, hi)) == 0 then zeros = zeros + 1 end
  end
  return zeros
end

-- the summary's type code of a decoded value
local function code(v)
  if v == nil then return -1 end
  if v == json.null then return 0 end
  if v == false then return 1 end
  if v == true then return 2 end
  if type(v) == "number" then return 3 end
  if type(v) == "string" then return 4 end
  if getmetatable(v) == json.array_mt or v[1] ~= nil then return 5 end
  return 6
end

-- What scan says of line against what the decoder makes of it; returns rc.
local function agrees(line)
  local rc = scan(line)
  local v = datasets.decode(line)
  local what = string.format("%q", line)
  if rc == 0 then
    assert.is_true(datasets.is_object(v), what .. ": summarised, but the decoder reads no object")
    for i, k in ipairs(KEYS) do
      assert.equals(code(v[k]), out.type[i - 1], what .. ": key " .. k)
    end
    if type(v.id) == "string" then
      local key = "string:" .. v.id
      C.sp_json_fingerprint(key, #key, fp)
      assert.is_true(fp[0] == out.fp[0] and fp[1] == out.fp[1], what .. ": the id's fingerprint")
    end
  elseif rc == 1 then
    assert.is_true(v ~= nil and not datasets.is_object(v), what .. ": said JSON but not an object")
  else
    assert.equals(-1, rc, what)
  end
  return rc
end

describe("sp_json_line_scan", function()
  it("summarises plain objects as the decoder reads them (types, the id's fingerprint, duplicate keys)", function()
    local plain = {
      '{"id": "q0", "query": "x0"}',
      '{"id":"q\\u0030","query":12.5,"gold":["a"]}\r',
      '{"id":"\\ud83d\\ude00 é","query":"x","type":"bridge","level":"hard","messages":[]}',
      '{"id":"a","id":"b","query":null,"query":"last wins"}',
      '{"_id":1,"question":"q","supporting_facts":[],"evidences":{},"question_decomposition":null}',
      '{"messages":{"role":"user"},"type":7,"level":true,"query":false}',
      '{}',
      '  {"id":"with blanks","query":"y"}  ',
      '{"id":"nul\\u0000inside","query":"x"}',
      '{"id":-0,"query":1e308}',
      '{"id":"","query":""}',
    }
    for _, line in ipairs(plain) do
      assert.equals(0, agrees(line), line)
    end
    assert.equals(1, agrees('[{"id":"q","query":"x"}]'))
    assert.equals(1, agrees('"text"'))
    assert.equals(1, agrees('[]'))
  end)

  it("hands the decoder every line it cannot vouch for", function()
    local deep = string.rep("[", 257) .. string.rep("]", 257)
    local bad = {
      '{not json', '{"id":"q","query":"x"} trailing', '{"id":"q",}', "{'id':'q'}", '{"id":"\\ud800","query":"x"}',
      '{"id":"\255","query":"x"}', '{"id":"a\0b","query":"x"}', '{"id":1e400,"query":"x"}', '{"a":NaN}',
      '{"a":01}', '{"a":' .. deep .. '}', '',
    }
    for _, line in ipairs(bad) do
      assert.equals(-1, scan(line), string.format("%q", line))
      agrees(line)
    end
    -- as deep as the decoder goes (256 levels): both read it; one more: neither
    local ok = '{"a":' .. string.rep("[", 255) .. string.rep("]", 255) .. '}'
    assert.equals(0, agrees(ok))
    local over = '{"a":' .. string.rep("[", 256) .. string.rep("]", 256) .. '}'
    assert.equals(-1, agrees(over))
    assert.is_nil(datasets.decode(over))
  end)

  it("agrees with the decoder on 5,000 damaged lines", function()
    local seeds = {
      '{"id":"q1","query":"what is \\"x\\"?","gold":["a","b"],"max_hops":3}',
      '{"id":"s\\u00e9","query":"x","messages":[{"role":"user","content":"hi"}],"type":"compositional"}',
      '{"_id":"h","question":"q","supporting_facts":[["t",0]],"level":"easy","query":1.5e-3}',
      -- the shape read in place (sp_json_line_idq)
      '{"id":"q7","query":"what is x? \195\169"}',
      '{ "query" : "y" , "id" : "s1" }',
    }
    local chars = { '"', "\\", "{", "}", "[", "]", ",", ":", "u", "0", "e", "-", ".", " ", "\255", "\0", "n", "t" }
    local summarised = damaged_zeros(5000, seeds, chars, 1, 3, 7, agrees)
    -- (the damage leaves some lines valid objects: the check saw both sides)
    assert.is_true(summarised > 100 and summarised < 3300, "summarised " .. summarised)
  end)

  it("counts in the first pass exactly the queries the run then reads, on a file of damaged lines", function()
    local seeds = { '{"id":"q%d","query":"what is \\"x\\"?","max_hops":3}', '{"id":"s%d","query":"\\u00e9 %d"}' }
    local chars = { '"', "\\", "{", "}", ":", ",", "u", "0", " ", "\255" }
    math.randomseed(11)
    local lines = {}
    for n = 1, 2000 do
      local s = string.format(seeds[n % 2 + 1], n, n)
      if n % 3 == 0 then
        local at = math.random(1, #s)
        s = s:sub(1, at - 1) .. chars[math.random(#chars)] .. s:sub(at + 1)
      end
      lines[n] = s
    end
    local path = os.tmpname()
    local f = assert(io.open(path, "wb"))
    f:write(table.concat(lines, "\n"), "\n")
    f:close()
    for _, fmt in ipairs({ "auto", "jsonl" }) do
      local src = assert(inputs.open({ input = path, format = fmt }))
      local read = 0
      src:each(function() read = read + 1 end)
      assert.equals(src.total, read, fmt)
      assert.is_true(read > 1000 and read < 2000, fmt .. ": " .. read)
    end
    os.remove(path)
  end)
end)

describe("specula.run.inputs' first pass", function()
  local created = {}
  local function write(lines)
    local path = os.tmpname()
    local f = assert(io.open(path, "wb"))
    f:write(table.concat(lines, "\n"), "\n")
    f:close()
    created[#created + 1] = path
    return path
  end
  teardown(function()
    for _, p in ipairs(created) do os.remove(p) end
  end)

  it("counts and warns the same whichever way each line is read, a duplicate id across both ways included", function()
    local path = write({
      '{"id":"a","query":"x"}',                     -- 1 summarised
      '{"id":"\\u0061","query":"again, escaped"}',  -- 2 summarised: 'a' again
      '{"id":"a","query":"x","type":"other"}',      -- 3 decoded (a string type decides detection): 'a' again
      '{"id":7,"query":"number id"}',               -- 4 decoded (a number id)
      '{"id":7,"query":"the same number"}',         -- 5 decoded: 7 again
      '{"id":"7","query":"a string, not 7"}',       -- 6 summarised
      '{"id":"b"}',                                 -- 7 no query: decoded for its message
      '{bad',                                       -- 8 malformed
      '["not","an","object"]',                      -- 9
      '{"id":"c","query":"x"}',                     -- 10
      '{"id":"c","query":"x"}',                     -- 11 'c' again, both summarised
    })
    for _, fmt in ipairs({ "auto", "jsonl" }) do
      local src = assert(inputs.open({ input = path, format = fmt }))
      assert.equals("jsonl", src.fmt)
      assert.equals(8, src.total, fmt)
      local w = table.concat(src.warnings, "\n")
      for _, want in ipairs({
        path .. ":2: duplicate id 'a' (first at " .. path .. ":1)",
        path .. ":3: duplicate id 'a' (first at " .. path .. ":1)",
        path .. ":5: duplicate id '7' (first at " .. path .. ":4)",
        path .. ":7: missing field 'query'",
        path .. ":8: malformed JSON",
        path .. ":9: not a JSON object",
        path .. ":11: duplicate id 'c' (first at " .. path .. ":10)",
      }) do
        assert.is_truthy(w:find(want, 1, true), fmt .. ": no warning " .. want .. " in:\n" .. w)
      end
      assert.equals(7, #src.warnings, w)
      assert.is_nil(w:find(":6:", 1, true), w)
    end
  end)

  it("still detects a format from a key any summarised line holds", function()
    local musique = write({
      '{"id":"a","query":"x"}',
      '{"id":"b","query":"y"}',
      '{"id":"c","query":"z","question_decomposition":[]}',
    })
    assert.equals("musique", assert(inputs.open({ input = musique })).fmt)
    local wiki = write({ '{"id":"a","query":"x"}', '{"id":"b","query":"y","evidences":[]}' })
    assert.equals("2wiki", assert(inputs.open({ input = wiki })).fmt)
    local hotpot = write({ '{"id":"a","query":"x"}', '{"id":"b","query":"y","level":"easy"}' })
    assert.equals("hotpotqa", assert(inputs.open({ input = hotpot })).fmt)
  end)
end)

-- The line read without a decoder (sp_json_line_idq), and the query the
-- run then takes from it (specula.run.inputs, datasets.build_idq).
describe("sp_json_line_idq", function()
  local IDQ = ffi.new("sp_json_idq")
  local BUILD = datasets.builder("jsonl")
  local function idq(line) return C.sp_json_line_idq(line, #line, IDQ) end
  local function spans(line)
    return line:sub(IDQ.id_at + 1, IDQ.id_at + IDQ.id_len), line:sub(IDQ.query_at + 1, IDQ.query_at + IDQ.query_len)
  end
  -- what idq says of line against the decoder: when it takes the line,
  -- the decoder reads an object of exactly these two strings, and the
  -- record (and its digest) is the one BUILD.jsonl makes; returns rc
  local function agrees(line)
    local rc = idq(line)
    local what = string.format("%q", line)
    if rc == 0 then
      local id, query = spans(line)
      local v = datasets.decode(line)
      assert.is_true(datasets.is_object(v), what)
      local n = 0
      for _ in pairs(v) do n = n + 1 end
      assert.equals(2, n, what .. ": more than id and query")
      assert.equals(v.id, id, what)
      assert.equals(v.query, query, what)
      local built, want = datasets.build_idq(id, query), BUILD(v, "x")
      assert.same(want, built, what)
      assert.equals(json.canonical(want), json.canonical(built), what)
      local digest = require("specula.provenance").query({ record = built })
      assert.equals(require("specula.provenance").query({ record = want }), digest, what)
      -- the reader's digest from the line's bytes (specula.run.inputs)
      assert.equals(digest, inputs.idq_digest(line, IDQ.id_at, IDQ.id_len, IDQ.query_at, IDQ.query_len), what)
    else
      assert.equals(1, rc, what)
    end
    return rc
  end

  -- the reader digests a line read in place from its bytes: the fixed
  -- pieces around them come from build_idq's record, and they must outlive
  -- every collection (they were once freed under the pointers to them)
  it("is digested from the line's bytes as provenance.query digests its record, after collections too", function()
    assert.is_function(inputs.idq_digest)
    local line = '{"query":"caf\195\169 / <x> \226\128\168","id":"q 7"}'
    assert.equals(0, idq(line))
    local want = require("specula.provenance").query({ record = datasets.build_idq("q 7",
      "caf\195\169 / <x> \226\128\168") })
    local filler = {}
    for i = 1, 3 do
      collectgarbage("collect")
      -- new strings, where freed ones were
      for j = 1, 64 do filler[j] = string.rep(string.char(64 + j % 26), 16 + j) .. i end
      assert.equals(want, inputs.idq_digest(line, IDQ.id_at, IDQ.id_len, IDQ.query_at, IDQ.query_len))
    end
  end)

  it("reads the plain line in either order, with JSON whitespace, UTF-8 and empty strings", function()
    for _, line in ipairs({
      '{"id":"q1","query":"what is x?"}',
      '{"query":"what is x?","id":"q1"}',
      ' \t{ "id" : "q1" ,\r\n "query" : "x" } \n',
      '{"id":"\195\169t\195\169 \240\159\152\128","query":"caf\195\169"}',
      '{"id":"","query":""}',
      "{\"id\":\"q'1\",\"query\":\"a/b {c} [d] : e , f\"}",
    }) do
      assert.equals(0, agrees(line), line)
    end
    idq('{"query":"QQ","id":"I"}')
    assert.same({ "I", "QQ" }, { spans('{"query":"QQ","id":"I"}') })
  end)

  it("leaves every other line to the decoder", function()
    for _, line in ipairs({
      '{"id":"q\\u0031","query":"x"}',           -- an escape: the text is not the value
      '{"id":"q1","query":"say \\"x\\""}',
      '{"id":"q1","query":"x","gold":["a"]}',     -- a third member
      '{"id":"q1"}', '{"query":"x"}', '{}',
      '{"id":"a","id":"b","query":"x"}',         -- a key twice (the decoders keep the last)
      '{"id":"q1","query":"x","query":"y"}',
      '{"id":7,"query":"x"}', '{"id":"q1","query":null}', '{"id":"q1","query":["x"]}',
      '{"id":"q\t1","query":"x"}',               -- a raw control byte
      '{"id":"q\0001","query":"x"}',
      '{"id":"\255","query":"x"}', '{"id":"\237\160\128","query":"x"}', '{"id":"\192\128","query":"x"}',
      '{"id":"q1","query":"x"} trailing', '{"id":"q1","query":"x"}}', '{"id":"q1","query":"x",}',
      '{"id":"q1" "query":"x"}', '{"id" "q1","query":"x"}', '{"id":"q1","query":"x"',
      '{"ID":"q1","query":"x"}', '{"id":"q1","Query":"x"}', '["q1","x"]', '"x"', '', '{', '{"id":"q1',
      '\f{"id":"q1","query":"x"}',              -- not JSON whitespace
    }) do
      assert.equals(1, agrees(line), string.format("%q", line))
    end
    assert.equals(-1, C.sp_json_line_idq(nil, 0, IDQ))
  end)

  it("agrees with the decoder and the record builder on 5,000 damaged lines", function()
    local seeds = { '{"id":"q1","query":"what is x? \195\169"}', '{ "query" : "y z" , "id" : "s-2" }' }
    local chars = { '"', "\\", "{", "}", ",", ":", " ", "\t", "\255", "\0", "\195", "\169", "a", "\n" }
    local taken = damaged_zeros(5000, seeds, chars, 0, 2, 13, agrees)
    assert.is_true(taken > 500 and taken < 4500, "taken " .. taken)
  end)

  it("gives the run the queries, records and digests the decoder gives, line for line", function()
    local lines, path = {}, os.tmpname()
    for n = 1, 300 do
      local shapes = {
        string.format('{"id":"q%d","query":"question %d"}', n, n),              -- read in place
        string.format('{"query":"q \195\169 %d", "id":"r%d"}', n, n),           -- in place
        string.format('{"id":"e%d","query":"esc \\u00e9 %d"}', n, n),           -- decoded
        string.format('{"id":"g%d","query":"x","gold":"a%d","topic":7}', n, n), -- decoded
      }
      lines[n] = shapes[n % #shapes + 1]
    end
    local f = assert(io.open(path, "wb"))
    f:write(table.concat(lines, "\n"), "\n")
    f:close()
    local src = assert(inputs.open({ input = path, format = "jsonl" }))
    local prov = require("specula.provenance")
    local n = 0
    src:each(function(q)
      n = n + 1
      local want = BUILD(datasets.decode(lines[n]), path)
      assert.same(want, q.record, lines[n])
      assert.equals(want.id, q.id)
      assert.equals(want.query, q.query)
      assert.equals(prov.query({ record = want }), prov.query(q), lines[n])
    end)
    assert.equals(300, n)
    os.remove(path)
  end)
end)
