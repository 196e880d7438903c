-- specula bench inputs: reading a JSONL input in place and decoded. Only
-- the table's shape is checked (figures are never asserted: shared
-- hosts), and that a bad argument fails the bench with a message.
local H = require "support.helpers"

describe("bench inputs", function()
  it("prints a row per kind of line with both passes' figures, and their ratio", function()
    local st, out, err = H.specula({ "bench", "inputs", "--lines", "300", "--runs", "1" })
    assert.equals(0, st, err)
    assert.matches("300 lines a file", out, 1, true)
    for _, kind in ipairs({ "in place", "decoded" }) do
      local row = out:match("\n(" .. kind .. "%s+|[^\n]*)")
      assert.is_truthy(row, "no row " .. kind .. " in:\n" .. out)
      local nums = {}
      for x in row:gmatch("[%d.]+") do nums[#nums + 1] = tonumber(x) end
      assert.equals(3, #nums, row)
      for i = 1, 3 do assert.is_true(nums[i] >= 0, row) end
    end
    assert.matches("decoded / in place, both passes: [%d.]+x", out)
  end)

  it("refuses a line count below one, saying which option", function()
    local st, _, err = H.specula({ "bench", "inputs", "--lines", "0" })
    assert.is_true(st ~= 0)
    assert.matches("bench inputs: --lines and --runs need a number >= 1", err, 1, true)
  end)
end)
