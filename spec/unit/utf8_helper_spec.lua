-- The strict UTF-8 check the functional specs rely on (spec/support/helpers.lua).
local H = require "support.helpers"

describe("H.utf8_valid", function()
  local good = {
    "", "plain ASCII", "\0nul inside", "caf\xC3\xA9", "\xE2\x82\xAC", "\xED\x9F\xBF",  -- U+D7FF
    "\xEE\x80\x80", "\xEF\xBF\xBF", "\xF0\x90\x80\x80", "\xF4\x8F\xBF\xBF",           -- U+10FFFF
    "\xC2\x80", "\xDF\xBF", "mixed \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80 end",
  }
  for i, s in ipairs(good) do
    it("accepts valid text " .. i, function()
      local ok, why = H.utf8_valid(s)
      assert.is_true(ok, why)
    end)
  end

  local bad = {
    { "\x80", "stray continuation" }, { "a\xBFb", "stray continuation" },
    { "\xC0\xAF", "overlong lead" }, { "\xC1\xBF", "overlong lead" },
    { "\xE0\x80\xAF", "overlong form" }, { "\xE0\x9F\xBF", "overlong form" },
    { "\xF0\x80\x80\xAF", "overlong form" }, { "\xF0\x8F\xBF\xBF", "overlong form" },
    { "\xED\xA0\x80", "surrogate" }, { "\xED\xBF\xBF", "surrogate" },
    { "\xF4\x90\x80\x80", "above U+10FFFF" }, { "\xF5\x80\x80\x80", "no code point" },
    { "\xFF", "no code point" }, { "\xFE", "no code point" },
    { "ok\xC3", "cut off" }, { "\xE2\x82", "cut off" }, { "\xF0\x9F\x98", "cut off" },
    { "\xC3\x28", "bad continuation" }, { "\xE2\x28\xA1", "bad continuation" },
    { "\xE2\x82\x28", "bad continuation" }, { "\xF0\x9F\x98\x28", "bad continuation" },
  }
  for i, c in ipairs(bad) do
    it("rejects " .. c[2] .. " (" .. i .. ")", function()
      local ok, why = H.utf8_valid(c[1])
      assert.is_false(ok)
      assert.matches(c[2], why, 1, true)
      assert.matches("^byte %d+: ", why)
    end)
  end

  it("names the offending byte", function()
    local _, why = H.utf8_valid("abc\xED\xA0\x80")
    assert.matches("^byte 4: UTF%-16 surrogate", why)
  end)

  it("rejects a non-string", function()
    assert.is_false((H.utf8_valid(nil)))
    assert.is_false((H.utf8_valid(12)))
  end)
end)
