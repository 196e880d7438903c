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

describe("specula.internal.lines.compressed", function()
  local L = require "specula.internal.lines"
  it("tells gzip, xz, zstd and bzip2 by their first bytes, and text that only looks alike from them", function()
    assert.equals("gzip", L.compressed("\31\139\8\0rest"))
    assert.equals("xz", L.compressed("\253\55\122\88\90\0rest"))
    assert.equals("zstd", L.compressed("\40\181\47\253rest"))
    assert.equals("bzip2", L.compressed("BZh91AY&SYrest"))
    -- text: a line that starts "BZh", one that starts "(" (a pattern's
    -- special character), xz's magic cut short, JSON
    for _, text in ipairs({ "BZhello", "(abc", "\253\55\122\88\90", '{"id":1}', "", "\31" }) do
      assert.is_nil(L.compressed(text), text)
    end
    assert.is_nil(L.compressed(nil))
    assert.equals("gzip-compressed: decompress it first: gzip -dc logs/a.jsonl.gz > logs/a.jsonl",
      L.compressed_hint("logs/a.jsonl.gz", "\31\139"))
    assert.equals("xz-compressed: decompress it first: xz -dc a.txz > a.jsonl", L.compressed_hint("a.txz", "\253\55\122\88\90\0"))
    assert.equals("zstd-compressed: decompress it first: zstd -dc dump > dump.jsonl", L.compressed_hint("dump", "\40\181\47\253"))
    assert.is_nil(L.compressed_hint("a.jsonl", "{}"))
    -- a path the shell would split or expand is quoted, so the command runs as shown
    assert.equals("gzip-compressed: decompress it first: gzip -dc 'my logs/it'\\''s.jsonl.gz' > 'my logs/it'\\''s.jsonl'",
      L.compressed_hint("my logs/it's.jsonl.gz", "\31\139"))
  end)
end)
