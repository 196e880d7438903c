-- Specs for lua/specula/json.lua. The agreement tests against the C
-- canonicalizer need SPECULA_CORE_LIB (set by CTest); they are pending without.
local json = require("specula.json")

local null = json.null

-- Deep equality that also compares metatables (so [] vs {} matters) and
-- treats -0 and 0 as equal.
local function same(a, b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  if getmetatable(a) ~= getmetatable(b) then return false end
  for k, v in pairs(a) do
    if not same(v, b[k]) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end
-- The LuaJIT snapshot Debian ships miscompiles pairs()/next() loops (LuaJIT
-- issue #827; json.lua works around it the same way): keep helpers that walk
-- tables out of the JIT so they cannot report false failures.
jit.off(same)

-- Decodes x through both paths: cjson for x itself (when x has no "[]"), the
-- pure-Lua decoder when x sits inside an array that also holds an empty one.
local function both(x)
  local a, aerr = json.decode(x)
  local w, werr = json.decode("[" .. x .. ",[]]")
  return a, aerr, w and w[1], werr
end

describe("specula.json", function()
  describe("array/object rule", function()
    it("encodes sequences as arrays and other tables as objects", function()
      assert.equal("[1,2,3]", json.encode({ 1, 2, 3 }))
      assert.equal("{}", json.encode({}))
      assert.equal("[]", json.encode(json.array()))
      assert.equal("[]", json.encode(json.array({})))
      assert.equal("{}", json.encode(json.object()))
      assert.equal('{"1":"a","2":"b"}', json.canonical(json.object({ "a", "b" })))
      assert.equal('{"1":1,"3":3}', json.canonical({ [1] = 1, [3] = 3 }))
      assert.equal('{"1":1,"x":2}', json.canonical({ 1, x = 2 }))
      assert.equal('{"-1":1,"0":0}', json.canonical({ [0] = 0, [-1] = 1 }))
      assert.equal('{"10":1,"2":2,"x":3}', json.canonical({ [10] = 1, [2] = 2, x = 3 }))
      assert.equal("[1,null,3]", json.encode(json.array({ 1, nil, 3 })))
      assert.equal("[null,null,3]", json.encode(json.array({ [3] = 3 })))
    end)

    it("returns the table it marks", function()
      local t = { 1 }
      assert.equal(t, json.array(t))
      assert.equal(json.array_mt, getmetatable(t))
      local o = {}
      assert.equal(o, json.object(o))
      assert.equal(json.object_mt, getmetatable(o))
    end)

    it("decodes [] with array_mt and everything else as plain tables", function()
      local v = json.decode('{"a":[],"b":{},"c":[1,[]],"d":null}')
      assert.equal(json.array_mt, getmetatable(v.a))
      assert.is_nil(getmetatable(v.b))
      assert.is_nil(getmetatable(v.c))
      assert.equal(json.array_mt, getmetatable(v.c[2]))
      assert.is_nil(getmetatable(v))
      assert.equal(null, v.d)
      local plain = json.decode('[{},[1]]')
      assert.is_nil(getmetatable(plain[1]))
      assert.is_nil(getmetatable(plain[2]))
    end)

    it("encode(decode(x)) is stable", function()
      for _, x in ipairs({
        "[]", "{}", "[[]]", "[{}]", '{"a":[]}', '{"a":{}}', "[[],{},[[]],[{}]]",
        '{"1":1,"2":2}', '[null,1,null]', '{"a":null}', '[true,false]', '"x"', "0", "null",
        '{"e":{},"k":[1,2,{"x":[]}]}', '[1.5,-2,1e+21,0.1]',
      }) do
        local v = assert(json.decode(x))
        local e = assert(json.encode(v))
        assert.equal(x, json.canonical(v), x)
        -- encode's member order follows the table, so compare canonically
        local again = assert(json.encode(assert(json.decode(e))))
        assert.equal(x, json.canonical(assert(json.decode(again))), x)
      end
    end)

    it("rejects keys that are not strings or integers, and colliding keys", function()
      assert.has_error(function() json.canonical({ [1.5] = 1 }) end,
        "JSON: cannot encode a key of type non-integer number")
      assert.has_error(function() json.canonical({ [true] = 1 }) end, "JSON: cannot encode a key of type boolean")
      assert.has_error(function() json.canonical({ [{}] = 1 }) end, "JSON: cannot encode a key of type table")
      assert.has_error(function() json.canonical({ [2 ^ 53] = 1, x = 1 }) end)
      assert.has_error(function() json.canonical({ [1] = 1, ["1"] = 2 }) end,
        'JSON: integer key 1 and string key "1" collide')
      assert.has_error(function() json.canonical(json.array({ 1, x = 2 })) end,
        "JSON: array has a key that is not a positive integer")
    end)
  end)

  describe("null", function()
    it("is cjson's null and round-trips", function()
      assert.equal(require("cjson").null, null)
      assert.equal(null, json.decode("null"))
      assert.equal("null", json.encode(null))
      assert.equal("[null]", json.encode({ null }))
      assert.equal("null", json.encode(nil))
      assert.equal('{"a":null}', json.canonical({ a = null }))
    end)
  end)

  describe("decode", function()
    it("decodes values", function()
      local v = json.decode(' {"s":"h\\u00e9\\ud83d\\ude00\\n","n":-1.25e2,"t":true,"f":false,"a":[1,"2"]} ')
      assert.equal("h\195\169\240\159\152\128\n", v.s)
      assert.equal(-125, v.n)
      assert.is_true(v.t)
      assert.is_false(v.f)
      assert.same({ 1, "2" }, v.a)
      assert.equal(2, json.decode('{"a":1,"a":2}').a)
    end)

    it("returns errors as values and never raises", function()
      for _, x in ipairs({
        "", " ", "[", "]", "{", "[1,]", '{"a":1,}', '{"a" 1}', "[1 2]", "01", "-", "+1", ".5", "1e",
        "NaN", "Infinity", "-Infinity", "0x10", "nul", "truex", "'a'", '"abc', '"\\x"', '"\\u12"',
        '"\\ud800"', '"\\udc00"', '"\\ud800\\u0041"', "[1]]", "1 2", "/*c*/1", "\v1",
        string.rep("[", 300) .. string.rep("]", 300),
      }) do
        local a, aerr, w, werr = both(x)
        assert.is_nil(a, x)
        assert.is_truthy(tostring(aerr):match("^JSON: .* at character %d+$"), x)
        assert.is_nil(w, x)
        assert.is_truthy(tostring(werr):match("^JSON: .* at character %d+$"), x)
      end
      local v, err = json.decode(nil)
      assert.is_nil(v)
      assert.equal("JSON: cannot decode a nil", err)
      v, err = json.decode({})
      assert.is_nil(v)
      assert.equal("JSON: cannot decode a table", err)
    end)

    it("says where the pure-Lua decoder failed", function()
      assert.same({ nil, "JSON: expected ',' or ']' at character 5" }, { json.decode("[[] 1]") })
      assert.same({ nil, "JSON: expected ':' at character 10" }, { json.decode('[[],{"a" 1}]') })
      assert.same({ nil, "JSON: expected a value at character 5" }, { json.decode("[[],]") })
      assert.same({ nil, "JSON: unexpected end of input at character 4" }, { json.decode("[[]") })
      assert.same({ nil, "JSON: unexpected data after the value at character 3" }, { json.decode("[]x") })
      assert.same({ nil, "JSON: invalid escape at character 6" }, { json.decode('[[],"\\q"]') })
      assert.same({ nil, "JSON: lone surrogate in unicode escape at character 6" },
        { json.decode('[[],"\\udc00"]') })
      assert.same({ nil, "JSON: unterminated string at character 5" }, { json.decode('[[],"ab') })
      assert.same({ nil, "JSON: invalid number (leading zero) at character 5" }, { json.decode("[[],01]") })
      assert.same({ nil, "JSON: nesting deeper than 256 at character 257" },
        { json.decode(string.rep("[", 257) .. string.rep("]", 257)) })
    end)

    it("rejects invalid UTF-8 with its byte offset (JSON text is UTF-8)", function()
      assert.same({ nil, "JSON: invalid UTF-8 at byte 1" }, { json.decode('"\255 bytes"') })
      assert.same({ nil, "JSON: invalid UTF-8 at byte 4" }, { json.decode('["ok\192\128"]') })
      assert.equal("\195\169", json.decode('"\195\169"'))
    end)

    -- bad_utf8 is C's (sp_json_utf8_bad, eight ASCII bytes at a time), or a
    -- Lua loop where the engine's library is not loaded (the encoder's
    -- fuzzer); both follow the parser's rules, checked here against a
    -- byte-by-byte reading of them on edge sequences and random bytes at
    -- every offset and start
    it("finds the first invalid UTF-8 byte as the rules say, from any offset", function()
      local function ref(s, from)
        local i, n = from or 0, #s
        while i < n do
          local c = s:byte(i + 1)
          if c < 0x80 then i = i + 1
          else
            if c < 0xC2 or c > 0xF4 then return i end
            local len, lo, hi = 2, 0x80, 0xBF
            if c >= 0xF0 then len, lo, hi = 4, c == 0xF0 and 0x90 or 0x80, c == 0xF4 and 0x8F or 0xBF
            elseif c >= 0xE0 then len, lo, hi = 3, c == 0xE0 and 0xA0 or 0x80, c == 0xED and 0x9F or 0xBF end
            if i + len > n then return i end
            local c1 = s:byte(i + 2)
            if c1 < lo or c1 > hi then return i end
            for k = 3, len do
              local ck = s:byte(i + k)
              if ck < 0x80 or ck > 0xBF then return i end
            end
            i = i + len
          end
        end
        return nil
      end
      local fixed = { "", "plain ascii text, longer than eight", "\195\169", "\224\160\128", "\224\159\191",
                      "\237\159\191", "\237\160\128", "\240\144\128\128", "\240\143\191\191",
                      "\244\143\191\191", "\244\144\128\128", "\192\128", "\193\191", "\245\128\128\128",
                      "abcdefg\226\130", "abcdefgh\255", "12345678abcdefgh\194", "\128", "x\226\130\172y" }
      for _, s in ipairs(fixed) do
        for from = 0, #s do
          assert.are.equal(ref(s, from), json.bad_utf8(s, from), string.format("%q from %d", s, from))
          assert.are.equal(ref(s, from), json.bad_utf8_lua(s, from), string.format("lua %q from %d", s, from))
        end
      end
      math.randomseed(7)
      local bytes = { 0x41, 0x7F, 0x80, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF, 0x9F, 0xA0, 0x8F, 0x90 }
      for _ = 1, 20000 do
        local t = {}
        for k = 1, math.random(0, 24) do
          t[k] = string.char(math.random() < 0.5 and 0x61 or bytes[math.random(#bytes)])
        end
        local s = table.concat(t)
        local from = math.random(0, #s)
        assert.are.equal(ref(s, from), json.bad_utf8(s, from), string.format("%q from %d", s, from))
        assert.are.equal(ref(s, from), json.bad_utf8_lua(s, from), string.format("lua %q from %d", s, from))
      end
    end)

    it("gives identical values on the cjson and pure-Lua paths", function()
      for _, x in ipairs({
        "0", "-0", "1", "-1.5", "1e3", "1E-3", "123456789012345678", "1e400", "true", "false", "null",
        '""', '"plain"', '"\\"\\\\\\/\\b\\f\\n\\r\\t"', '"\\u0000\\u001f\\u00e9\\u20ac\\uD834\\uDD1E"',
        '"raw \t tab"', "1.", "-.5", "1.e2",
        '{"a":{"b":[1,{"c":null}]},"d":"e","d":"f"}', "[1,[2,[3,{}]],{}]", " [ 1 , 2 ] ",
        string.rep("[", 255) .. string.rep("]", 255),
      }) do
        local a, aerr, w, werr = both(x)
        assert.is_nil(aerr, x)
        assert.is_nil(werr, x)
        assert.is_true(same(a, w), x)
      end
    end)
  end)

  describe("encode", function()
    it("keeps full number precision", function()
      assert.equal("0.30000000000000004", json.encode(0.1 + 0.2))
      assert.equal("9007199254740994", json.encode(2 ^ 53 + 2))
      for _, x in ipairs({ 1e15 + 0.3, 1 / 3, 2 / 3 * 1e-300, 123456789.123456789 }) do
        assert.equal(x, tonumber(json.encode(x)))
      end
      assert.equal("[1,0.1,1e-07]", json.encode({ 1, 0.1, 1e-7 }))
    end)

    it("returns errors as values", function()
      local t = {}
      t[1] = t
      for _, v in ipairs({ print, 0 / 0, math.huge, -math.huge, t, { "\255" }, coroutine.create(print) }) do
        local s, err = json.encode(v)
        assert.is_nil(s)
        assert.matches("^JSON: ", err)
      end
    end)
  end)

  describe("canonical", function()
    it("sorts keys bytewise at every level", function()
      assert.equal('{"":0,"B":6,"a":2,"ab":3,"b":{"x":1,"y":2},"z":5,"\195\169":4}',
        json.canonical({ b = { y = 2, x = 1 }, a = 2, [""] = 0, ab = 3, ["\195\169"] = 4, z = 5, B = 6 }))
      local big, want = {}, {}
      for i = 1, 40 do
        big["k" .. i] = i
        want[#want + 1] = "k" .. i
      end
      table.sort(want)
      local parts = {}
      for i, k in ipairs(want) do parts[i] = '"' .. k .. '":' .. k:sub(2) end
      assert.equal("{" .. table.concat(parts, ",") .. "}", json.canonical(big))
      assert.equal('{"\\u0000a":2,"\\u0000b":1}', json.canonical({ ["\0b"] = 1, ["\0a"] = 2 }))
    end)

    it("formats numbers", function()
      local cases = {
        { 1, "1" }, { 1.0, "1" }, { -0.0, "0" }, { 0, "0" }, { -7, "-7" }, { 1e21, "1e+21" }, { 0.1, "0.1" },
        { 1e-7, "1e-07" }, { 123456789012345678, "1.2345678901234568e+17" }, { 2 ^ 53, "9007199254740992" },
        { 2 ^ 53 - 1, "9007199254740991" }, { -(2 ^ 53 - 1), "-9007199254740991" }, { 2 ^ 54, "18014398509481984" },
        { 1e14, "100000000000000" }, { 1e14 - 1, "99999999999999" }, { -1e14, "-100000000000000" },
        { 1e16, "1e+16" }, { 0.1 + 0.2, "0.30000000000000004" }, { 1 / 3, "0.3333333333333333" },
        { 5e-324, "4.94065645841247e-324" }, { 1.7976931348623157e308, "1.7976931348623157e+308" },
        { 100.5, "100.5" }, { -1.5e-10, "-1.5e-10" }, { 0.0001, "0.0001" }, { 0.000001, "1e-06" },
        -- exact decimal ties: C's printf rounds them to even, LuaJIT's %g does not
        { 1e15 + 0.25, "1000000000000000.2" }, { 1e15 + 0.75, "1000000000000000.8" },
        { 2 ^ 51 + 0.5, "2251799813685248.5" }, { -(1e15 + 0.25), "-1000000000000000.2" },
      }
      for _, c in ipairs(cases) do
        assert.equal(c[2], json.canonical(c[1]), c[2])
        assert.equal("[" .. c[2] .. "]", json.canonical({ c[1] }), c[2])
      end
    end)

    it("escapes strings minimally", function()
      assert.equal('"\\u0001\\u001f\\b\\f\\n\\r\\t\\"\\\\/\127\195\169\226\128\168"',
        json.canonical("\1\31\b\f\n\r\t\"\\/\127\195\169\226\128\168"))
      assert.equal('"\\u0000\\u000b\\u001b"', json.canonical("\0\11\27"))
      assert.equal('{"a\\"b":"</script>"}', json.canonical({ ['a"b'] = "</script>" }))
      assert.equal('"\240\159\152\128\244\143\191\191"', json.canonical("\240\159\152\128\244\143\191\191"))
    end)

    it("raises clear errors for values it cannot encode", function()
      local cyc = {}
      cyc.self = { cyc }
      local deep = {}
      for _ = 1, 300 do deep = { deep } end
      local ok256 = {}
      for _ = 1, 255 do ok256 = { ok256 } end
      assert.equal(string.rep("[", 255) .. "{}" .. string.rep("]", 255), json.canonical(ok256))
      assert.has_error(function() json.canonical(print) end, "JSON: cannot encode a function")
      assert.has_error(function() json.canonical(io.stdout) end, "JSON: cannot encode a userdata")
      assert.has_error(function() json.canonical({ x = 0 / 0 }) end, "JSON: cannot encode NaN or infinity")
      assert.has_error(function() json.canonical({ math.huge }) end, "JSON: cannot encode NaN or infinity")
      assert.has_error(function() json.canonical(cyc) end, "JSON: cannot encode a table that contains itself")
      assert.has_error(function() json.canonical(deep) end, "JSON: nesting deeper than 256")
      assert.has_error(function() json.canonical({ k = "a\255" }) end, "JSON: invalid UTF-8 in string at byte 1")
      assert.has_error(function() json.canonical({ ["\192\128"] = 1 }) end,
        "JSON: invalid UTF-8 in string at byte 0")
      for _, bad in ipairs({ "\237\160\128", "\244\144\128\128", "\224\159\191", "\240\143\191\191", "\226\130",
                             "\128", "\248\136\128\128\128" }) do
        assert.has_error(function() json.canonical(bad) end)
      end
    end)
  end)

  ---------------------------------------------------------------------------
  -- Agreement with the C canonicalizer (engine/sp_json.c)

  local lib_path = os.getenv("SPECULA_CORE_LIB")
  local c_canonical
  if lib_path and lib_path ~= "" then
    local ffi = require("ffi")
    -- other specs may have declared these already
    pcall(ffi.cdef, "typedef struct sp_buf { char *data; size_t len; size_t cap; } sp_buf;")
    pcall(ffi.cdef, [[
      void sp_buf_init(sp_buf *b);
      void sp_buf_free(sp_buf *b);
      int sp_json_canonical(const char *text, size_t len, sp_buf *out, char *err, size_t errlen);
    ]])
    local lib = ffi.load(lib_path)
    c_canonical = function(text)
      local buf = ffi.new("sp_buf[1]")
      local err = ffi.new("char[256]")
      lib.sp_buf_init(buf)
      local rc = lib.sp_json_canonical(text, #text, buf, err, 256)
      local out = rc == 0 and ffi.string(buf[0].data, buf[0].len) or nil
      lib.sp_buf_free(buf)
      if rc ~= 0 then return nil, ffi.string(err) end
      return out
    end
  end

  local function agreement(name, fn)
    if c_canonical then it(name, fn) else pending(name .. " (SPECULA_CORE_LIB not set)") end
  end

  local pieces = {
    "a", "b", "key", "Z", " ", "0", "/", "\"", "\\", "\0", "\1", "\8", "\9", "\10", "\12", "\13", "\27", "\31",
    "\127", "\195\169", "\230\151\165", "\240\159\152\128", "\226\128\168", "\239\191\191", "\244\143\191\191",
    "\\u0041", "</", "x\"y",
  }
  local specials = {
    0, -0.0, 1, -1, 0.1, 0.5, 1 / 3, 1e-7, 1e21, 1e22, 2 ^ 53, 2 ^ 53 - 1, -(2 ^ 53), 2 ^ 53 + 2, 2 ^ 63, 1e14,
    1e14 - 1, 123456789012345678, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 0.30000000000000004,
    100.25, -1e-300, 4.35, 1e15 + 0.3,
  }

  local function rstring(r)
    local n, parts = r(0, 6), {}
    for i = 1, n do parts[i] = pieces[r(1, #pieces)] end
    return table.concat(parts)
  end

  local function rnumber(r)
    local k = r(1, 6)
    if k == 1 then return specials[r(1, #specials)] end
    if k == 2 then return r(-1000, 1000) end
    if k == 3 then return r(-2 ^ 31, 2 ^ 31) * 2 ^ r(0, 30) end
    if k == 4 then return (math.random() - 0.5) * 10 ^ r(-30, 30) end
    if k == 5 then return r(-100000, 100000) / 10 ^ r(1, 6) end
    return math.random() * 2 ^ r(-1074, 1023)
  end

  local function rvalue(r, depth)
    local k = r(1, depth > 3 and 6 or 11)
    if k == 1 then return rstring(r) end
    if k == 2 or k == 3 then return rnumber(r) end
    if k == 4 then return r(0, 1) == 1 end
    if k == 5 then return null end
    if k == 6 then return r(0, 1) == 1 and json.array() or {} end
    if k == 7 or k == 8 then -- sequence, sometimes marked
      local t = {}
      for i = 1, r(1, 5) do t[i] = rvalue(r, depth + 1) end
      if r(0, 3) == 0 then json.array(t) end
      if r(0, 7) == 0 then json.object(t) end
      return t
    end
    local t = {}
    for _ = 1, r(1, 6) do
      if r(0, 5) == 0 then t[r(-5, 20)] = rvalue(r, depth + 1)
      else t[rstring(r)] = rvalue(r, depth + 1) end
    end
    -- integer keys may collide with their string spelling: keep the integer
    -- (collect first: assigning to absent keys while iterating is undefined)
    local ints = {}
    for k2 in pairs(t) do
      if type(k2) == "number" then ints[#ints + 1] = tostring(k2) end
    end
    for _, k2 in ipairs(ints) do t[k2] = nil end
    return t
  end

  jit.off(rvalue)

  agreement("canonical equals sp_json_canonical(encode(v)) on fixed values", function()
    local fixed = {
      { b = 1, a = { 1, 2, json.array() }, c = json.object(), d = {}, e = null },
      { [10] = "x", [2] = "y", z = { 0.1, -0.0, 1e21, 1e-7, 123456789012345678, 2 ^ 53 } },
      { ["\0"] = "\0\1\31\127", ["\226\128\168"] = "\240\159\152\128", ["a\"b"] = "\\/" },
      json.object({ 1, 2, 3 }), json.array({ [3] = true }), "top", 42, 0.1, true, false, null,
    }
    for _, v in ipairs(fixed) do
      local lua = json.canonical(v)
      assert.equal(lua, c_canonical(assert(json.encode(v))))
      assert.equal(lua, c_canonical(lua))
    end
    assert.is_nil(c_canonical("[1,]"))
    assert.equal("JSON: expected a value at byte 3", select(2, c_canonical("[1,]")))
  end)

  agreement("canonical equals sp_json_canonical(encode(v)) on random values", function()
    local seed = tonumber(os.getenv("SPECULA_JSON_SEED") or "") or 20240611
    math.randomseed(seed)
    local r = math.random
    for i = 1, 4000 do
      local v = rvalue(r, 0)
      local enc = assert(json.encode(v))
      local lua = json.canonical(v)
      local c, err = c_canonical(enc)
      if lua ~= c then
        error(("seed %d, case %d:\nencode: %s\nlua:    %s\nC:      %s"):format(seed, i, enc, lua, tostring(c or err)))
      end
      -- the canonical text is a fixed point, and decoding keeps it
      assert.equal(lua, c_canonical(lua))
      local d1, e1 = json.decode(enc)
      assert(d1 ~= nil, ("case %d: decode(%s): %s"):format(i, enc, tostring(e1)))
      assert.equal(lua, json.canonical(d1))
      local d2, e2 = json.decode(lua)
      assert(d2 ~= nil, ("case %d: decode(%s): %s"):format(i, lua, tostring(e2)))
      assert.equal(lua, json.canonical(d2))
    end
  end)

  ---------------------------------------------------------------------------
  -- The C table encoder (engine/sp_jsonenc.c) against its Lua reference

  -- the reference encoder in Lua (spec/support/json_ref.lua)
  local ref = require "support.json_ref"
  local c_encoder = it

  -- Both encoders on v: the same text, or the same error.
  local function same_output(v, what)
    local ok_l, lua = pcall(ref.canonical, v)
    local ok_c, c = pcall(json.canonical, v)
    if ok_l ~= ok_c or lua ~= c then
      error(("%s: canonical differs\nlua: %s\nC:   %s"):format(what, tostring(lua), tostring(c)), 2)
    end
    local el, el_err = ref.encode(v)
    local ec, ec_err = json.encode(v)
    if el ~= ec or el_err ~= ec_err then
      error(("%s: encode differs\nlua: %s\nC:   %s"):format(what, tostring(el or el_err), tostring(ec or ec_err)), 2)
    end
  end

  -- Values with the failures mixed in: NaN and infinities, functions,
  -- invalid UTF-8 in strings and keys, odd keys, marked arrays with holes or
  -- string keys, integer keys that collide with their spelling.
  local odd = {
    function() return 0 / 0 end, function() return math.huge end, function() return -math.huge end,
    function() return print end, function() return "ok\255" end, function() return { ["\192\128"] = 1 } end,
    function() return { [1.5] = 1 } end, function() return { [true] = 1 } end, function() return { [{}] = 1 } end,
    function() return { [2 ^ 60] = 1, a = 1 } end, function() return { [-3] = "m", [0] = "z" } end,
    function() return json.array({ 1, nil, 3, x = 1 }) end, function() return json.array({ [4] = 4 }) end,
    function() return { [7] = 1, ["7"] = 2 } end, function() return json.object({}) end,
    function() return setmetatable({ 1, 2 }, { __index = function() return 1 end }) end,
    function() return require("ffi").new("int", 1) end,
  }

  local function rmixed(r, depth)
    local k = r(1, depth > 3 and 5 or 9)
    if k == 1 then return odd[r(1, #odd)]() end
    if k <= 3 then return rvalue(r, depth) end
    if k == 4 then return rnumber(r) end
    if k == 5 then return r(0, 1) == 1 and json.array() or {} end
    local t = r(0, 1) == 1 and {} or json.array()
    for i = 1, r(0, 6) do
      if getmetatable(t) == json.array_mt or r(0, 2) == 0 then t[i] = rmixed(r, depth + 1)
      else t[rstring(r)] = rmixed(r, depth + 1) end
    end
    return t
  end
  jit.off(rmixed)

  c_encoder("gives the Lua reference's text and errors on random nested values", function()
    local seed = tonumber(os.getenv("SPECULA_JSON_SEED") or "") or 20261123
    math.randomseed(seed)
    local r = math.random
    for i = 1, 6000 do
      local v = i % 2 == 0 and rvalue(r, 0) or rmixed(r, 0)
      same_output(v, ("seed %d, case %d"):format(seed, i))
    end
  end)

  c_encoder("gives the Lua reference's text and errors on records, cycles and deep values", function()
    local cyc = {}
    cyc.self = { cyc }
    local deep, ok256 = {}, {}
    for _ = 1, 300 do deep = { deep } end
    for _ = 1, 255 do ok256 = { ok256 } end
    local big = {}
    for i = 1, 5000 do big["k" .. i] = { i, i / 7, "v" .. i } end
    -- deep and wide at once: the C side keeps values on the Lua stack
    local wide = {}
    for _ = 1, 200 do
      local t = { inner = wide }
      for i = 1, 130 do t["k" .. i] = i end
      wide = t
    end
    local record = {
      id = "s1", query = "sweep question 1", config = "spechop:k=3", gold = {},
      stats = { hops = 12, wall_ms = 856.57, rel_lat = 0.8123, p_hat = json.null, k = "inf",
                gate = { target = { full = 3, warmup = 0, forbid = 0 } } },
      stages = { hops = { { hop = 0, spec = "none", t_seg = 3.8961, t_target = 62.2018 } }, init = 0 },
      trajectory = { { action = { tool = "search", args = { q = "s1/0/sweep question 1" } },
                       observation = "fact:a39b8a1c", segment = "hop 0" } },
    }
    for i, v in ipairs({ cyc, deep, ok256, big, wide, record, "top", 42, 0.1, true, false, null, json.array() }) do
      same_output(v, "value " .. i)
    end
    same_output(nil, "nil")
    -- the same encoder is called again after a failure and after a big value
    assert.equal('{"a":1}', json.canonical({ a = 1 }))
  end)

  it("copies json.raw text verbatim, in both encoders", function()
    local v = { z = 1, stages = json.raw('{"hops":[{"hop":0}],"init":0}'), a = { json.raw("[1,2]") } }
    local want = '{"a":[[1,2]],"stages":{"hops":[{"hop":0}],"init":0},"z":1}'
    assert.equal(want, ref.canonical(v))
    assert.equal(want, json.canonical(v))
    -- encode sorts keys as canonical does: the same text from both
    local e = ref.encode(v)
    assert.equal(e, (json.encode(v)))
    assert.equal(want, e)
    assert.is_truthy(e:find('"stages":{"hops":[{"hop":0}],"init":0}', 1, true))
    assert.is_truthy(e:find('"a":[[1,2]]', 1, true))
    assert.is_nil(json.find_bad(v))
  end)

  it("writes a json.raw value of several pieces as their concatenation, in both encoders", function()
    local v = { p = json.raw('{"a":1,"q":"', "0f1e", '","z":2}'), b = true }
    local want = '{"b":true,"p":{"a":1,"q":"0f1e","z":2}}'
    assert.equal(want, ref.canonical(v))
    assert.equal(want, json.canonical(v))
    -- a raw value without text is an error in both
    local ok1, e1 = pcall(ref.canonical, { x = json.raw() })
    local ok2, e2 = pcall(json.canonical, { x = json.raw() })
    assert.is_false(ok1)
    assert.is_false(ok2)
    assert.matches("raw JSON value without its text", e1, 1, true)
    assert.matches("raw JSON value without its text", e2, 1, true)
  end)

  c_encoder("write_line writes the canonical text and a newline to a file, or says why not", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "wb"))
    assert.is_true(json.write_line(f, { b = 2, a = json.raw('{"x":1}') }))
    local wok, bytes = json.write_line(f, { "two" })
    assert.is_true(wok)
    assert.equals(#'["two"]' + 1, bytes)
    -- a value that cannot be encoded: nothing written, json.lua's message
    local ok, err = json.write_line(f, { bad = 0 / 0 })
    assert.is_nil(ok)
    assert.equal(select(2, ref.encode({ bad = 0 / 0 })), err)
    f:close()
    assert.equal('{"a":{"x":1},"b":2}\n["two"]\n', assert(io.open(path, "rb")):read("*a"))
    os.remove(path)
    -- the io library's error texts for a full device and a closed file
    local full = io.open("/dev/full", "wb")
    if full then
      local fok, ferr = json.write_line(full, { a = 1 })
      assert.is_false(fok)
      assert.equal("No space left on device", ferr)
      full:close()
    end
    local cok, cerr = json.write_line(f, { a = 1 })
    assert.is_false(cok)
    assert.equal("attempt to use a closed file", cerr)
  end)

  c_encoder("write_line, batched, leaves lines in the buffer and never writes part of one", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "wb"))
    assert(f:setvbuf("full", 4096))   -- glibc: a buffer of the file's block size, 4 KB here
    local line = { x = string.rep("y", 991) }   -- 999 bytes and a newline
    local sizes = {}
    for i = 1, 9 do
      assert.is_true(json.write_line(f, line, false, true))
      sizes[i] = assert(io.open(path, "rb")):seek("end")
    end
    -- nothing is written while lines fit; the fifth would not: the four
    -- before it are written whole, not the buffer's first 4,096 bytes
    assert.same({ 0, 0, 0, 0, 4000, 4000, 4000, 4000, 8000 }, sizes)
    assert(f:flush())
    assert.equals(9000, assert(io.open(path, "rb")):seek("end"))
    -- a line longer than the buffer: what is buffered goes first, whole
    assert.is_true(json.write_line(f, line, false, true))
    assert.is_true(json.write_line(f, { x = string.rep("z", 9000) }, false, true))
    assert.equals(10000 + #'{"x":"' + 1, (assert(io.open(path, "rb")):read("*a"):find("z", 1, true)))
    f:close()
    local n = 0
    for l in io.lines(path) do
      n = n + 1
      assert.is_table(require("cjson").decode(l))
    end
    assert.equals(11, n)
    os.remove(path)
  end)

  c_encoder("write_line picks the agreement text json.canonical({ answer, trajectory }) gives", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "wb"))
    local traj = { { segment = "hop 0", action = { tool = "search", args = { q = "é\"\n", z = { 1.5, -0, 1e300 } } },
                     observation = json.null }, { segment = "", action = { tool = "t", args = {} }, observation = "x" } }
    local cases = {
      { answer = "answer:1", trajectory = traj, stats = { a = 1 }, trajectoryx = 1, answerz = 2 },
      { answer = false, trajectory = {}, id = "q" },
      { answer = json.null, trajectory = { { observation = { answer = 1, trajectory = 2 } } } },
      { answer = { final = "nested", trajectory = "not this one" }, trajectory = traj },
      { answer = 12.25, trajectory = json.raw('[{"a":1}]') },
    }
    local want = {}
    for i, rec in ipairs(cases) do
      local ok, bytes, text = json.write_line(f, rec, true)
      assert.is_true(ok)
      assert.equals(#json.canonical(rec) + 1, bytes)
      assert.equals(json.canonical({ rec.answer, rec.trajectory }), text, "case " .. i)
      want[#want + 1] = json.canonical(rec)
    end
    -- either part absent: nil (the caller encodes the pair itself)
    assert.is_nil(select(3, json.write_line(f, { trajectory = traj }, true)))
    assert.is_nil(select(3, json.write_line(f, { answer = "a" }, true)))
    assert.is_nil(select(3, json.write_line(f, { answer = "a", trajectory = traj })))
    f:close()
    local lines = {}
    for line in io.lines(path) do lines[#lines + 1] = line end
    assert.same(want, { unpack(lines, 1, #cases) })
    os.remove(path)
  end)

  -- cenc_buf: the text left in the encoder's buffer, read from C (a committed
  -- hop goes from there into its window's trajectory text, no Lua string)
  c_encoder("cenc_buf leaves canonical's text in the encoder's buffer, read through sp_jsonenc_text", function()
    -- (the library json.lua loaded its encoder from: SPECULA_CORE_LIB)
    local ffi = require "ffi"
    pcall(ffi.cdef, "const char *sp_jsonenc_text(const void *state);")
    local C = ffi.load(assert(os.getenv("SPECULA_CORE_LIB"), "SPECULA_CORE_LIB"))
    local function text_of(v)
      local st, len = json.cenc_buf(v, true)
      if st == nil then return nil, len end
      local p = C.sp_jsonenc_text(st)
      assert.is_false(p == nil)
      return ffi.string(p, len)
    end
    local big = string.rep("x", 3 * 1024 * 1024)   -- past the buffer the encoder keeps (1 MB)
    local values = {
      { segment = "s0", action = { tool = "t", args = { i = 0 } }, observation = "o0" },
      { observation = json.null, action = { args = { q = "é\"\n\0", z = { 1.5, -0, 1e300 } } } },
      json.array({}), { "a", { b = true } }, "plain", 12.25, big, { big = big }, { after = "a big one" },
    }
    for i, v in ipairs(values) do
      assert.equals(json.canonical(v), text_of(v), "value " .. i)
    end
    -- what it cannot encode: nil and json.encode's own message
    for _, bad in ipairs({ { x = 0 / 0 }, { f = print }, { [1.5] = 1 } }) do
      local t, err = text_of(bad)
      assert.is_nil(t)
      assert.equals(select(2, json.encode(bad)), err)
      assert.matches("^JSON: ", err)
    end
    -- the text is the encoder's last: the plain encoder's next call replaces it
    local st, len = json.cenc_buf({ a = 1 }, true)
    assert.equals('{"a":1}', ffi.string(C.sp_jsonenc_text(st), len))
    json.encode({ b = 22 })
    assert.equals('{"b":22}', ffi.string(C.sp_jsonenc_text(st), 8))
    -- anything but an encoder's state: NULL, never another object's bytes
    assert.is_true(C.sp_jsonenc_text(nil) == nil)
    assert.is_true(C.sp_jsonenc_text(io.stdout) == nil)
    assert.is_true(C.sp_jsonenc_text(ffi.new("char[64]")) == nil)
  end)

  -- cenc_hop: a committed hop's text without its table
  c_encoder("cenc_hop(segment, action, observation) leaves what cenc_buf leaves for the hop's table", function()
    local ffi = require "ffi"
    pcall(ffi.cdef, "const char *sp_jsonenc_text(const void *state);")
    local C = ffi.load(assert(os.getenv("SPECULA_CORE_LIB"), "SPECULA_CORE_LIB"))
    local function hop_text(seg, act, obs)
      local st, len = json.cenc_hop(seg, act, obs)
      if st == nil then return nil, len end
      return ffi.string(C.sp_jsonenc_text(st), len)
    end
    -- tables nested to the limit under hop, action and args
    local deep = {}
    for _ = 2, json.MAX_DEPTH - 3 do deep = { deep } end
    local hops = {
      { "s0", { tool = "t", args = { i = 0 } }, "o0" },
      { nil, { tool = "t", args = {} }, json.null },              -- no segment: no key
      { "s", nil, { list = { 1, 2, json.null }, e = json.object({}) } },
      { "é\"\n", { tool = "t", args = { z = { 1.5, -0, 1e300 } } }, json.array({}) },
      { "s", { tool = "t" }, nil },                                -- all three may be absent
      { nil, nil, nil },
      { "s", { tool = "t", args = { d = deep } }, "o" },           -- at the table's depth limit
    }
    for i, h in ipairs(hops) do
      local seg, act, obs = h[1], h[2], h[3]
      local want = json.cenc_buf({ segment = seg, action = act, observation = obs }, true)
      want = want and ffi.string(C.sp_jsonenc_text(want), select(2, json.cenc_buf({ segment = seg, action = act,
        observation = obs }, true)))
      assert.is_string(want, "hop " .. i)
      assert.equals(want, hop_text(seg, act, obs), "hop " .. i)
    end
    -- one level deeper than a table allows, a function, bytes that are not
    -- UTF-8: nil and the message the table would give
    for i, h in ipairs({ { "s", { tool = "t", args = { d = { deep } } }, "o" }, { "s", { f = print }, "o" },
                         { "s\255", {}, "o" }, { "s", {}, 0 / 0 } }) do
      local t, err = hop_text(h[1], h[2], h[3])
      assert.is_nil(t, "bad hop " .. i)
      assert.equals(select(2, json.encode({ segment = h[1], action = h[2], observation = h[3] })), err)
    end
  end)
end)

describe("specula.json without its C encoder", function()
  it("refuses to load and says where the encoder comes from", function()
    local H = require "support.helpers"
    local cmd = "cd " .. H.quote(H.root) .. " && SPECULA_CORE_LIB=/nonexistent/libspecula_core.so luajit -e "
      .. H.quote('package.path = "./lua/?.lua;" .. package.path; require "specula.json"') .. " 2>&1"
    local p = io.popen(cmd)
    local out = p:read("*a")
    p:close()
    assert.matches("specula.json: cannot load the C encoder (engine/sp_jsonenc.c)", out, 1, true)
    assert.matches("SPECULA_CORE_LIB", out, 1, true)
  end)
end)
