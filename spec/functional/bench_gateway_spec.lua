-- specula bench gateway: a scripted MCP client against the upstream fixture
-- (bench/gateway_upstream.lua) directly and through `specula gateway`. Only
-- the table's shape and the counts are checked, never a speed figure
-- (shared hosts): the rows, the prefetch hits of the function predictor
-- (every read after the first), no write reaching the upstream before the
-- client sent it, and a session that cannot run reported as FAILED with no
-- figure and a failing status.
local H = require "support.helpers"

-- #slow: the bench starts `specula` by its own path (under the valgrind pass,
-- valgrind's launcher); about 5 s of sessions at these tiny times
describe("bench gateway #slow", function()
  it("prints direct and gateway walls, the ratio, hits and waste per predictor, and the unpredicted calls' latencies", function()
    local st, out, err = H.specula({ "bench", "gateway", "--quick", "--think-ms", "20", "--read-ms", "15",
      "--write-ms", "0", "--calls", "8", "--miss-calls", "10", "--predictor", "function,learned" })
    assert.equals(0, st, err .. out)
    assert.matches("machine: ", out, 1, true)
    for _, p in ipairs({ "function", "learned" }) do
      local row = out:match("\n(1%s+" .. p .. "%s[^\n]*)")
      assert.is_truthy(row, "no row for " .. p .. " in:\n" .. out)
      -- direct s, gateway s, ratio, hits/reads, launched, waste, refused, early
      local d, g, ratio, hits, reads, launched, waste, refused, early =
        row:match("^1%s+%a+%s+([%d.]+)%s+([%d.]+)%s+([%d.]+)%s+(%d+)/(%d+)%s+(%d+)%s+(%d+)%s+(%d+)%s+(%d+)%s*$")
      assert.is_truthy(d, row)
      assert.is_true(tonumber(d) > 0 and tonumber(g) > 0, row)
      -- the ratio of the unrounded walls
      assert.is_true(math.abs(tonumber(ratio) - tonumber(g) / tonumber(d)) < 0.01, row)
      assert.are.equal("7", reads, row)   -- 8 calls, one of them the write
      assert.are.equal("0", early, row)   -- no write ran before the client sent it
      assert.is_true(tonumber(launched) >= tonumber(hits), row)
      assert.is_true(tonumber(waste) >= 0, row)
      if p == "function" then
        -- every read after the first was proposed and served from its prefetch
        assert.are.equal("6", hits, row)
        assert.is_true(tonumber(refused) >= 1, row)   -- the proposed write, refused
      else
        assert.is_true(tonumber(hits) >= 1, row)      -- the learned predictor picks it up
      end
      assert.matches("median ratio, " .. p .. " predictor: [%d.]+ %(target: <= 0.80", out)
    end
    for _, path in ipairs({ "direct", "gateway, relay %(predict off%)", "gateway, predictor always wrong" }) do
      local row = out:match("\n(" .. path .. "%s+10%s[^\n]*)")
      assert.is_truthy(row, "no row for " .. path .. " in:\n" .. out)
      local nums = {}
      for x in row:gmatch("%-?[%d.]+") do nums[#nums + 1] = tonumber(x) end
      assert.is_true(#nums >= 3, row)
      assert.is_true(nums[2] >= 0 and nums[3] >= nums[2], row)   -- p50 <= p99
    end
    assert.matches("predictor always wrong: 0 hits, 10 wasted prefetches", out, 1, true)
    assert.matches("added p50 to a call the gateway did not predict: %-?[%d.]+ ms %(target: <= 1 ms", out)
    assert.falsy(out:find("FAILED", 1, true), out)
  end)

  it("reports sessions whose upstream cannot start as FAILED, with no figure, and fails", function()
    local st, out, err = H.specula({ "bench", "gateway", "--quick", "--think-ms", "1", "--read-ms", "1",
      "--calls", "3", "--miss-calls", "2", "--upstream", "/nonexistent/mcp-server" })
    assert.are_not.equal(0, st)
    local all = out .. err
    assert.matches("bench gateway: %d+ session%(s%) failed", all)
    local n = 0
    for _ in out:gmatch("\n1%s+%a+%s+FAILED: ") do n = n + 1 end
    -- the direct session and the two gateway ones, then the three unpredicted paths
    assert.are.equal(6, n, out)
    assert.falsy(out:find("median ratio", 1, true), out)
    assert.falsy(out:find("added p50 to a call", 1, true), out)
    assert.falsy(out:find("\n1%s+function%s+[%d.]"), out)
    assert.falsy(out:find("\ndirect%s+%d"), out)
  end)

  it("refuses an option it does not know, naming it", function()
    local st, out, err = H.specula({ "bench", "gateway", "--thinkms", "5" })
    assert.are_not.equal(0, st)
    assert.matches("bench gateway: unknown option --thinkms", out .. err, 1, true)
  end)
end)
