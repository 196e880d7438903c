-- specula.internal.sched's error handlers never raise, and name where the error was
-- raised whatever the error object is (nil, a number, a table, a table
-- whose __tostring raises or returns no string).
local sched = require "specula.internal.sched"

-- raise v from a function of this file, at a known line
local function raiser(v) return function() error(v) end end
local LINE = debug.getinfo(raiser(nil), "S").linedefined
local HERE = "errors_spec.lua:" .. LINE .. ": "

local BAD = setmetatable({}, { __tostring = function() error("__tostring raised") end })
local NOSTR = setmetatable({}, { __tostring = function() return nil end })

describe("error handlers", function()
  local cases = {
    { "nil", nil, "nil" }, { "a table", { 1 }, "table: " }, { "a table whose __tostring raises", BAD,
      "a table error object (its __tostring failed)" },
    { "a table whose __tostring returns nil", NOSTR, "a table error object (its __tostring failed)" },
  }
  for _, c in ipairs(cases) do
    it("name the script and line of " .. c[1], function()
      for _, h in ipairs({ sched.on_error, sched.job_error }) do
        local ok, msg = xpcall(raiser(c[2]), h)
        assert.is_false(ok)
        assert.is_string(msg)
        local first = msg:match("^[^\n]*")
        assert.matches(HERE, first, 1, true)
        assert.matches(c[3], first, 1, true)
        assert.not_matches("error in error handling", msg)
      end
    end)
  end

  it("keep a string error as raised", function()
    local ok, msg = xpcall(function() error("plainly wrong", 0) end, sched.job_error)
    assert.is_false(ok)
    assert.equals("plainly wrong", msg:match("^[^\n]*"))
  end)

  it("protect: true and the results, or false and the message's first line", function()
    assert.same({ true, 1, nil, 3 }, { sched.protect(false, function() return 1, nil, 3 end) })
    local ok, msg = sched.protect(false, raiser(BAD))
    assert.is_false(ok)
    assert.equals(HERE .. "a table error object (its __tostring failed)", msg:sub(-#HERE - 44))
    assert.is_nil(msg:find("\n"))
  end)

  it("errstr never raises", function()
    assert.equals("x", sched.errstr("x"))
    assert.equals("nil", sched.errstr(nil))
    assert.equals("a table error object (its __tostring failed)", sched.errstr(BAD))
  end)
end)
