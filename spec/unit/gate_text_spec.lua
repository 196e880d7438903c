-- The gate counts of a written record as JSON text (specula.run.aggregate
-- gate_text, what a record written and dropped carries as json.raw): the
-- same bytes as the canonical encoding of the table gate_stats builds.
local core = require "specula.internal.core"
local json = require "specula.json"
local agg = require "specula.run.aggregate"
local policy = require "specula.policy"

describe("specula.run.aggregate.gate_text", function()
  it("is the canonical JSON of gate_stats, for any counts", function()
    assert.is_function(agg.gate_text)
    local st = core.ffi.new("sp_window_stats")
    math.randomseed(33)
    for case = 1, 300 do
      for _, tr in ipairs(policy.TRIGGERS) do
        local row = st.gate[tonumber(tr[2])]
        for j = 0, 2 do row[j] = case == 1 and 0 or math.random(0, case < 150 and 9 or 2000000000) end
      end
      assert.equals(json.canonical(agg.gate_stats(st)), agg.gate_text(st), "case " .. case)
    end
  end)
end)
