-- The valgrind pass's choice of cases (spec/support/setcover.lua, used by
-- .ci/vgset): every line the suite reaches is reached by the chosen cases,
-- cheap cases win over dear ones that add nothing, a file's setups count
-- once, and a case the others make redundant is dropped.
local cover = require "support.setcover"

local function set(...)
  local s = {}
  for _, k in ipairs({ ... }) do s[k] = true end
  return s
end
local function names(list)
  local out = {}
  for _, c in ipairs(list) do out[#out + 1] = c.file .. ":" .. c.name end
  return table.concat(out, " ")
end

describe("the valgrind set's cover", function()
  it("reaches every line with the cheap cases, not the dear one that reaches the same", function()
    local cases = {
      { file = "a", name = "dear", cost = 100, lines = set("x:1", "x:2", "x:3") },
      { file = "a", name = "one", cost = 1, lines = set("x:1", "x:2") },
      { file = "b", name = "two", cost = 1, lines = set("x:3") },
    }
    local chosen, n = cover.choose(cases, {})
    assert.are.equal(3, n)
    assert.are.equal("a:one b:two", names(chosen))
    local _, reached = cover.union(chosen, {})
    assert.are.equal(3, reached)
    assert.are.equal(2, cover.cost(chosen, {}))
  end)

  it("counts a file's setups once, in its lines and its cost", function()
    local setups = { a = { cost = 50, lines = set("s:1") }, b = { cost = 0, lines = {} } }
    local cases = {
      { file = "a", name = "p", cost = 1, lines = set("x:1") },
      { file = "a", name = "q", cost = 1, lines = set("x:2") },
      { file = "b", name = "r", cost = 10, lines = set("x:1", "x:2") },
    }
    -- the setup's line is reached only through file a: a case of a must run
    local chosen, n = cover.choose(cases, setups)
    assert.are.equal(3, n)
    local _, reached = cover.union(chosen, setups)
    assert.are.equal(3, reached)
    assert.are.equal(52, cover.cost({ cases[1], cases[2] }, setups))
    assert.are.equal(61, cover.cost({ cases[1], cases[3] }, setups))
    assert.are.equal("a:p b:r", names(chosen))   -- 51 + 10 is not cheaper than 52: the greedy's pick, still a cover
  end)

  it("drops a case the others make redundant", function()
    local cases = {
      { file = "a", name = "big", cost = 3, lines = set("x:1", "x:2", "x:3", "x:4") },
      { file = "a", name = "left", cost = 1, lines = set("x:1", "x:2") },
      { file = "a", name = "right", cost = 1, lines = set("x:3", "x:4") },
      { file = "a", name = "extra", cost = 1, lines = set("x:5") },
    }
    local chosen = cover.choose(cases, {})
    assert.are.equal("a:extra a:left a:right", names(chosen))
  end)

  it("chooses nothing when nothing is reached", function()
    local chosen, n = cover.choose({ { file = "a", name = "none", cost = 1, lines = {} } }, {})
    assert.are.equal(0, n)
    assert.are.same({}, chosen)
  end)
end)
