-- Specs for specula.cassette's nearest recorded request: what a replay miss
-- names when the tape never saw the request.
local cassette = require("specula.cassette")

local function st(keys)
  local t = {}
  for _, k in ipairs(keys) do t[k] = true end
  return { keys = t }
end

describe("cassette.nearest", function()
  it("names the recorded call of the same tool and the first argument that differs", function()
    local s = st({
      'MCP fs tools/call\n{"arguments":{"path":"/d","pattern":"q3_1.txt"},"name":"search_files"}',
      'MCP fs tools/call\n{"arguments":{"path":"/e","pattern":"q9_1.txt"},"name":"search_files"}',
      'MCP fs tools/list\n{}',
      'SPEC search_files\n{"path":"/d","pattern":"q4_1.txt"}',
    })
    local m = cassette.nearest(s, 'MCP fs tools/call\n{"arguments":{"path":"/d","pattern":"q4_1.txt"},"name":"search_files"}')
    assert.are.equal("the nearest recorded mcp request: MCP fs tools/call, which differs at arguments.pattern: "
      .. "recorded q3_1.txt, asked q4_1.txt", m)
  end)

  it("says when only another request of the kind was recorded, and nil when none was", function()
    local s = st({ "GET http://h/a?x=1\n", 'SPEC lookup\n{"city":"Paris"}' })
    assert.are.equal("the nearest recorded http request: GET http://h/a?x=1 (another request)",
      cassette.nearest(s, "GET http://h/b\n"))
    assert.is_nil(cassette.nearest(s, 'MCP fs tools/call\n{"name":"x"}'))
    assert.are.equal('the nearest recorded spec request: SPEC lookup, which differs at city: recorded Paris, asked Rome',
      cassette.nearest(s, 'SPEC lookup\n{"city":"Rome"}'))
  end)

  it("names an argument the recording had and the request lacks, and shortens long values", function()
    local long = string.rep("x", 100)
    local s = st({ 'SPEC t\n{"a":1,"b":"' .. long .. '"}' })
    local m = cassette.nearest(s, 'SPEC t\n{"a":1}')
    assert.matches("differs at b: recorded x+%.%.%., asked %(absent%)$", m)
    assert.is_true(#m < 160)
  end)
end)
