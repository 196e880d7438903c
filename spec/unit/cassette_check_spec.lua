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

-- A commit line (format 4): what a query committed, read by the labs.
describe("cassette.check_line on commit lines", function()
  local json = require "specula.json"
  local function commit(t)
    local c = { kind = "commit", key = "COMMIT q1", n = 1, meta = { query = "q1" }, index = 1 }
    for k, v in pairs(t) do c[k] = v end
    return c
  end

  it("takes the paths and calls of a query, an empty list of calls, and a failed query", function()
    assert.is_nil(cassette.check_line(commit({ paths = { "0", "ab12" }, calls = { { tool = "search", args = {} } } })))
    assert.is_nil(cassette.check_line(commit({ paths = { "0" }, calls = json.array() })))
    assert.is_nil(cassette.check_line(commit({ failed = true })))
  end)

  it("refuses a path that is not a string and a call without a tool, naming the field", function()
    assert.matches("field paths%[1%] is a number", cassette.check_line(commit({ paths = { "0", 7 } })))
    assert.matches("field calls%[0%]%.tool is missing", cassette.check_line(commit({ paths = { "0", "a" },
      calls = { { args = {} } } })))
    assert.matches("field index is a string", cassette.check_line(commit({ index = "1" })))
  end)
end)
