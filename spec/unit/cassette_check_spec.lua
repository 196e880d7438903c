-- The tape reader's bounds on recorded times (docs/cassettes.md): the
-- largest time a clock keeps is a time; past it, the line is refused with
-- what is wrong (spec/functional/robust_spec.lua checks the FILE:LINE the
-- commands add).
local cassette = require "specula.cassette"

describe("cassette.check_line on recorded times", function()
  it("takes 1e12 ms, the largest time the clock keeps", function()
    assert.is_nil(cassette.check_line({ kind = "job", key = "k", n = 1, ms = 1e12 }))
  end)

  it("refuses a job of 1e300 ms, naming the field", function()
    local err = cassette.check_line({ kind = "job", key = "k", n = 1, ms = 1e300 })
    assert.is_string(err)
    assert.matches("ms", err, 1, true)
  end)
end)
