-- The development set of examples/real_traces ships with the repository
-- (data/, with its source and licence notice), and the examples and docs
-- point at that copy: every documented command runs from a clone.
local H = require "support.helpers"

local DATA = "examples/real_traces/data/"
local FILE = DATA .. "tau-airline-gpt4o-dev.jsonl"
local SOURCE = "examples/real_traces/data/SOURCE.md"

describe("examples/real_traces", function()
  it("ships the development set with its source and MIT licence notice", function()
    local text = assert(H.read(H.root .. "/" .. FILE), "no " .. FILE)
    local n = 0
    for l in text:gmatch("[^\n]+") do
      n = n + 1
      assert.matches('^{"id": ?"task%d+%-trial%d+"', l)
    end
    assert.equals(100, n)
    local lic = assert(H.read(H.root .. "/" .. DATA .. "LICENSE"), "no " .. DATA .. "LICENSE")
    assert.matches("MIT License", lic, 1, true)
    assert.matches("Copyright (c) 2024 Sierra", lic, 1, true)
    local src = assert(H.read(H.root .. "/" .. SOURCE), "no " .. SOURCE)
    assert.matches("sierra-research/tau-bench", src, 1, true)
    -- the digest the source notice gives is the file's
    local st, sum = H.sh("sha256sum " .. H.quote(H.root .. "/" .. FILE))
    assert.equals(0, st)
    assert.matches(sum:match("^(%x+)"), src, 1, true)
  end)

  it("finds it without $REAL_TRACES, from any working directory", function()
    local code = 'package.path = ' .. string.format("%q", H.root .. "/examples/real_traces/?.lua;")
      .. ' .. package.path\nlocal s = require "traces_setup"\nprint(s.traces)\nprint(#s.tool_names(s.traces))\n'
    local path = H.tmpfile("where.lua", code)
    local st, out, err = H.sh("cd " .. H.quote(H.tmpdir()) .. " && env -u REAL_TRACES " .. H.quote(H.bin)
      .. " run " .. H.quote(path))
    assert.equals(0, st, err)
    local where, tools = out:match("^(%S+)\n(%d+)\n")
    assert.is_not_nil(where, out)
    local real = io.popen("realpath " .. H.quote(where)):read("*l")
    assert.equals(io.popen("realpath " .. H.quote(H.root .. "/" .. FILE)):read("*l"), real)
    assert.equals("14", tools)
  end)

  it("no doc, example, script or spec points outside the repository for it", function()
    local st, out = H.sh("cd " .. H.quote(H.root) .. " && grep -rln 'shared/traces' README.md docs examples spec lua bench"
      .. " .ci CMakeLists.txt --exclude=real_traces_spec.lua")
    assert.equals(1, st, "still pointing at ../shared/traces: " .. out)
  end)
end)
