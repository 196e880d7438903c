-- The expected-value gate of action speculation (engine/sp_actspec.c):
-- fire when confidence x E[saved] > (1 - confidence) x cost x ev_cost_ms,
-- E[saved] = min(the tool's mean latency, the mean model step).
local core = require "specula.internal.core"
local C, ffi = core.C, core.ffi

describe("the EV gate", function()
  local function gate(ev_cost_ms, ev_latency_ms)
    return ffi.gc(C.sp_prefetch_new(0, 3, ev_cost_ms, ev_latency_ms or 0, 3), C.sp_prefetch_free)
  end

  it("is open with no data at all, then weighs the tool's latency against the model's step", function()
    local pf = gate(1)
    assert.equals(1, C.sp_prefetch_ev(pf, 0, 0.01, 100))   -- the first observations come from somewhere
    C.sp_prefetch_observe(pf, -1, -1, 100)                  -- a model step of 100 ms
    C.sp_prefetch_observe(pf, 0, 5, -1)                     -- tool 0 takes 5 ms
    -- 0.1 x 5 > 0.9 x 2? no; 0.9 x 5 > 0.1 x 2: yes
    assert.equals(0, C.sp_prefetch_ev(pf, 0, 0.1, 2))
    assert.equals(1, C.sp_prefetch_ev(pf, 0, 0.9, 2))
    C.sp_prefetch_observe(pf, 1, 600, -1)                   -- tool 1 takes 600 ms: saves at most the step's 100
    assert.equals(1, C.sp_prefetch_ev(pf, 1, 0.1, 2))       -- 0.1 x 100 > 0.9 x 2
  end)

  it("takes a tool it has not seen at the mean latency of those it has: an unlikely guess of it stays back", function()
    local pf = gate(1)
    C.sp_prefetch_observe(pf, -1, -1, 1000)
    C.sp_prefetch_observe(pf, 0, 10, -1)
    C.sp_prefetch_observe(pf, 0, 30, -1)
    -- tool 7 never ran: taken at 20 ms. 0.01 x 20 > 0.99 x 1? no (it was open: fired at any odds)
    assert.equals(0, C.sp_prefetch_ev(pf, 7, 0.01, 1))
    assert.equals(1, C.sp_prefetch_ev(pf, 7, 0.5, 1))
    -- a fixed estimate overrides what was seen: 0.01 x 400 > 0.99 x 1, not > 0.99 x 10
    local fixed = gate(1, 400)
    assert.equals(1, C.sp_prefetch_ev(fixed, 7, 0.01, 1))
    assert.equals(0, C.sp_prefetch_ev(fixed, 7, 0.01, 10))
  end)
end)
