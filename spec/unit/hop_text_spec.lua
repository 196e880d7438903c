-- A committed hop's text written by compiled Lua (specula.run.records
-- fast_hop): for a hop of the common shape (action { tool, args } with at
-- most four string keys, scalar values) the very bytes the C encoder's
-- cenc_hop writes; for any other hop nil, so the encoder takes it.
local core = require "specula.internal.core"
local json = require "specula.json"
local records = require "specula.run.records"
local ffi = core.ffi
local C = core.C

local function c_text(seg, act, obs)
  local st, len = json.cenc_hop(seg, act, obs)
  if st == nil then return nil, len end
  return ffi.string(C.sp_jsonenc_text(st), len)
end

-- strings as agents give them: plain words, quotes, backslashes, control
-- bytes, UTF-8 (two to four bytes), bytes that are not UTF-8, empty
local STRS = { "s0", "", "a b", 'say "x"', "back\\slash", "line\nbreak\ttab\r", "\1\31\127", "caf\195\169",
  "\240\159\152\128 emoji", "\226\128\168 sep", "bad\255", "cut\195", "\237\160\128", "<<x>>", "zz", "Z", "a",
  "ab", "a\0b" }
local NUMS = { 0, -0, 1, -1, 7, 2 ^ 31, -2 ^ 31, 2 ^ 53, 2 ^ 53 + 2, 1e15, 1e16, 0.1, -2.5, 1 / 3, 1e300, 5e-324,
  1e-7, 0 / 0, math.huge, -math.huge }
local function scalar()
  local r = math.random()
  if r < 0.45 then return STRS[math.random(#STRS)] end
  if r < 0.8 then return NUMS[math.random(#NUMS)] end
  if r < 0.87 then return true end
  if r < 0.94 then return false end
  return json.null
end
-- a value of the args or the hop: mostly scalars, now and then a table
local function value(depth)
  local r = math.random()
  if depth < 2 and r < 0.08 then return { scalar(), scalar() } end
  if depth < 2 and r < 0.12 then return { k = scalar() } end
  if r < 0.14 then return json.array({}) end
  return scalar()
end
local KEYS = { "i", "q", "query", "path", "a", "b", "Z", "\195\169", "k k", 'q"', "x\n", "", "aa", "ab", "a\0" }
local function args()
  local r = math.random()
  if r < 0.05 then return json.object({}) end
  if r < 0.08 then return { 1, 2 } end
  local t = {}
  for _ = 1, math.random(0, 6) do t[KEYS[math.random(#KEYS)]] = value(1) end
  if math.random() < 0.04 then t[1] = "x" end
  return t
end
local function action()
  local r = math.random()
  if r < 0.05 then return nil end
  if r < 0.08 then return "not a table" end
  local a = { tool = STRS[math.random(#STRS)], args = args() }
  if r < 0.11 then a.id = "call_1" end
  if r < 0.13 then a.tool = nil end
  if r < 0.15 then a.args = "x" end
  if r < 0.17 then setmetatable(a, json.object_mt) end
  return a
end

describe("a hop's text written by compiled Lua", function()
  it("is cenc_hop's text, byte for byte, wherever it writes one; 20,000 random hops", function()
    math.randomseed(41)
    local fast, slow = 0, 0
    for n = 1, 20000 do
      local seg = math.random() < 0.1 and nil or value(0)
      local act, obs = action(), value(0)
      local got = records.fast_hop_text(seg, act, obs)
      local want = c_text(seg, act, obs)
      if got then
        fast = fast + 1
        assert.equals(want, got, "hop " .. n)
      else
        slow = slow + 1
      end
    end
    -- both ways taken, each thousands of times
    assert.is_true(fast > 3000 and slow > 3000, fast .. " written, " .. slow .. " left to the encoder")
  end)

  it("writes the common hops and leaves the rest to the encoder", function()
    local common = {
      { "s0", { tool = "t", args = { i = 0 } }, "o0" },
      { "thinking", { tool = "search", args = { q = "who", k = 3, exact = false, after = json.null } }, "res" },
      { nil, { tool = "t", args = {} }, json.null },
      { "caf\195\169 \"q\"\n", { tool = "t", args = { d = 4, c = 3, b = 2, a = 1 } }, 1.5 },
      { "s", nil, "o" },
      { nil, nil, nil },
    }
    for i, h in ipairs(common) do
      local got = records.fast_hop_text(h[1], h[2], h[3])
      assert.is_string(got, "hop " .. i)
      assert.equals(c_text(h[1], h[2], h[3]), got, "hop " .. i)
    end
    assert.equals('{"action":{"args":{"a":1,"b":2,"c":3,"d":4},"tool":"t"},"observation":1.5,"segment":"caf\195\169 \\"q\\"\\n"}',
      records.fast_hop_text(common[4][1], common[4][2], common[4][3]))
    local others = {
      { "s", { tool = "t", args = { a = 1, b = 2, c = 3, d = 4, e = 5 } }, "o" },   -- five keys
      { "s", { tool = "t", args = { a = { 1 } } }, "o" },                           -- a nested value
      { "s", { tool = "t", args = { 1, 2 } }, "o" },                                -- an array
      { "s", { tool = "t", args = json.object({}) }, "o" },                         -- a metatable
      { "s", { tool = "t", args = {}, id = "c1" }, "o" },                           -- a third key
      { "s", { tool = 7, args = {} }, "o" },
      { { "list" }, { tool = "t", args = {} }, "o" },
      { "s", { tool = "t", args = {} }, { result = "table" } },
      { "bad\255", { tool = "t", args = {} }, "o" },                                -- not UTF-8: the encoder says so
      { "s", { tool = "t", args = { x = 0 / 0 } }, "o" },                           -- not finite
    }
    for i, h in ipairs(others) do
      assert.is_nil(records.fast_hop_text(h[1], h[2], h[3]), "other " .. i)
    end
  end)

  it("writes long strings and many escapes whole (its buffer grows), and leaves a huge one to the encoder", function()
    local long = ("\"\1" .. ("x"):rep(997)):rep(40)
    local act = { tool = "t", args = { body = long, n = 1 } }
    local got = records.fast_hop_text(long, act, long)
    assert.equals(c_text(long, act, long), got)
    assert.equals("s", json.decode(records.fast_hop_text("s", act, "o")).segment)
    -- over 64 KB: the encoder's (no buffer of six times its size here)
    local huge = ("\1"):rep(65537)
    assert.is_nil(records.fast_hop_text("s", act, huge))
    assert.is_string(records.fast_hop_text("s", act, huge:sub(2)))
    assert.equals(c_text("s", act, huge:sub(2)), records.fast_hop_text("s", act, huge:sub(2)))
    assert.equals(c_text("s", act, "o"), records.fast_hop_text("s", act, "o"))
  end)
end)
