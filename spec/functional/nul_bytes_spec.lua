-- A NUL byte in a user's file (a log cut by a crash, a binary paste) is bad
-- input like any other: the line that holds it is named FILE:LINE and
-- skipped, and the lines after it keep their own numbers. Before, LuaJIT's
-- file:lines() dropped a line starting with NUL without a word and glued
-- the rest of a line holding one onto the next line.
local H = require "support.helpers"

local EX = H.root .. "/examples/multihop_sim.lua"

describe("a NUL byte in a file the user gives", function()
  it("specula run --input: the query's line is named and skipped, the others run", function()
    local q = H.tmpfile("nul_q.jsonl", '{"id":"a","query":"x"}\n\0{"id":"b","query":"y"}\n'
      .. '{"id":"c","query":"z"}\n')
    local out = H.tmpfile("nul_out.jsonl")
    os.remove(out)
    local st, _, err = H.specula({ "run", EX, "--input", q, "--clock", "virtual", "--out", out, "--quiet" })
    assert.equals(0, st, err)
    assert.matches(q .. ":2: malformed JSON", err, 1, true)
    local ids = {}
    for _, r in ipairs(H.jsonl(H.read(out))) do ids[#ids + 1] = r.id end
    assert.are.same({ "a", "c" }, ids)
  end)

  it("specula whatif: the log line is named at its own number, and so is a later bad line", function()
    local src = assert(io.open(H.root .. "/spec/fixtures/sessions/claude_code.jsonl", "rb"))
    local lines = {}
    for l in src:read("*a"):gmatch("[^\n]+") do lines[#lines + 1] = l end
    src:close()
    assert.is_true(#lines >= 4)
    -- line 2 holds a NUL; line 4 is cut short
    table.insert(lines, 2, '{"type":"user","note":"a\0b"}')
    table.insert(lines, 4, '{"type":')
    local log = H.tmpfile("nul_log.jsonl", table.concat(lines, "\n") .. "\n")
    local st, out, err = H.specula({ "whatif", log })
    assert.equals(0, st, err)
    assert.matches(log .. ":2: not JSON (a NUL byte at column 25)", err, 1, true)
    assert.matches(log .. ":4: not JSON", err, 1, true)
    assert.matches("tool calls", out, 1, true)
  end)

  it("specula report: a results line with a NUL is named, the records around it are read", function()
    local q = H.tmpfile("nul_rq.jsonl", '{"id":"a","query":"x"}\n{"id":"b","query":"y"}\n')
    local out = H.tmpfile("nul_rout.jsonl")
    os.remove(out)
    assert.equals(0, (H.specula({ "run", EX, "--input", q, "--clock", "virtual", "--out", out, "--quiet" })))
    local text = H.read(out)
    local first, rest = text:match("^([^\n]*\n)(.*)$")
    local bad = H.tmpfile("nul_rbad.jsonl", first .. "\0junk\n" .. rest)
    local html = H.tmpfile("nul_report.html")
    local st, _, err = H.specula({ "report", bad, "-o", html })
    assert.matches(bad .. ":2:", err, 1, true)
    assert.equals(0, st, err)
    assert.matches('data-config', H.read(html), 1, true)
  end)
end)
