-- specula.internal.lines: file:lines() without its NUL blind spot (LuaJIT
-- reads a line with fgets and strlen: a NUL byte cut the line there and
-- glued the next one on). Every reader of a user's file goes through it.
local H = require "support.helpers"
local lines_of = require("specula.internal.lines").lines

local function read_with(content, how)
  local path = H.tmpfile("lines_case.txt", content)
  local f = assert(io.open(path, "rb"))
  local out = {}
  for l in (how == "lua" and f:lines() or lines_of(f)) do out[#out + 1] = l end
  f:close()
  return out
end

describe("specula.internal.lines", function()
  local long = string.rep("x", 4096 * 40 + 17)   -- spans many chunks
  local cases = {
    { "empty file", "" },
    { "one line", "a\n" },
    { "no final newline", "a\nb" },
    { "blank lines kept", "a\n\n\nb\n" },
    { "CR kept as file:lines() keeps it", "a\r\nb\r\n" },
    { "a line longer than a chunk", "s\n" .. long .. "\ne\n" },
    { "a newline exactly at a chunk's end", string.rep("y", 4095) .. "\nz\n" },
    { "only newlines", "\n\n" },
  }
  for _, c in ipairs(cases) do
    it("gives what file:lines() gives: " .. c[1], function()
      assert.are.same(read_with(c[2], "lua"), read_with(c[2], "ours"))
    end)
  end

  it("keeps a line with NUL bytes whole, and the lines after it in place", function()
    local got = read_with('{"a":1}\n\0{"b":2}\nx\0y\n{"c":3}\n', "ours")
    assert.are.same({ '{"a":1}', '\0{"b":2}', "x\0y", '{"c":3}' }, got)
    -- what it replaces lost the NUL line and glued "x" onto the next one
    local lua = read_with('{"a":1}\n\0{"b":2}\nx\0y\n{"c":3}\n', "lua")
    assert.are_not.same(got, lua)
  end)

  it("raises a read error as file:lines() does", function()
    local f = assert(io.open(H.tmpdir(), "rb"))   -- a directory: read fails (EISDIR)
    local ok, err = pcall(function() for _ in lines_of(f) do end end)
    f:close()
    assert.is_false(ok)
    assert.matches("directory", tostring(err))
  end)
end)
