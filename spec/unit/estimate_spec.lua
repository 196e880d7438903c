-- The one estimator of p, alpha, beta (sp_est, engine/sp_theory.c).
local estimate = require "specula.estimate"
local C = require("specula.internal.core").C

describe("the estimator", function()
  it("counts failed speculations in p's denominator and leaves late and unspeculated hops out", function()
    local e = estimate.new()
    C.sp_est_add(e, C.SP_SPEC_ACCEPTED, 2, 3, 10)
    C.sp_est_add(e, C.SP_SPEC_ACCEPTED, 2, 3, 10)
    C.sp_est_add(e, C.SP_SPEC_REJECTED, 2, 3, 10)
    C.sp_est_add(e, C.SP_SPEC_ERROR, 2, -1, 10)
    C.sp_est_add(e, C.SP_SPEC_LATE, 2, -1, 10)
    C.sp_est_add(e, C.SP_SPEC_NONE, 2, -1, 10)
    local p, a, b = estimate.get(e)
    assert.equals(0.5, p)           -- 2 / (2 + 1 + 1)
    assert.near(0.3, a, 1e-12)      -- mean t_spec of the 3 that returned / mean t_target
    assert.near(0.2, b, 1e-12)      -- over all 6 hops
  end)

  it("pools queries as ratios of sums and reads hop records back", function()
    local recs = {
      { stages = { hops = { { t_seg = 1, t_target = 10, t_spec = 2, spec = "accepted" },
                            { t_seg = 1, t_target = 30, spec = "late" } } } },
      { stages = { hops = { { t_seg = 3, t_target = 20, t_spec = 4, spec = "rejected" } } } },
      { error = "x" },   -- a failed query without stages is skipped
    }
    local p, a, b = estimate.of_records(recs)
    assert.equals(0.5, p)
    assert.near((6 / 2) / (60 / 3), a, 1e-12)
    assert.near((5 / 3) / (60 / 3), b, 1e-12)
  end)

  it("is undefined (nil) without evidence", function()
    local p, a, b = estimate.get(estimate.new())
    assert.is_nil(p)
    assert.is_nil(a)
    assert.is_nil(b)
  end)
end)
