-- The one table of option defaults (engine/sp_opt.c): read through the FFI,
-- mirrored by specula.internal.domains.DEFAULTS, and printed by the usage texts.
local H = require "support.helpers"
local core = require "specula.internal.core"
local opts = require "specula.internal.domains"
local C = core.C

describe("option defaults", function()
  it("are read from C by name, and NaN for a name without one", function()
    assert.equals(3, C.sp_opt_default("k"))
    assert.equals(1, C.sp_opt_default("m"))
    assert.equals(0.05, C.sp_opt_default("eps"))
    assert.equals(16, C.sp_opt_default("concurrency"))
    assert.equals(64, C.sp_opt_default("max_hops"))
    assert.equals(1000, C.sp_opt_default("ev_cost_ms"))
    assert.equals(1000, C.sp_opt_default("bootstrap_iterations"))
    local none = C.sp_opt_default("no_such_option")
    assert.is_true(none ~= none)
    none = C.sp_opt_default(nil)
    assert.is_true(none ~= none)
  end)

  it("are all in opts.DEFAULTS, each equal to the C value", function()
    local n = 0
    for name, v in pairs(opts.DEFAULTS) do
      n = n + 1
      assert.equals(C.sp_opt_default(name), v, name)
    end
    local v = require("ffi").new("double[1]")
    local i = 0
    while C.sp_opt_default_at(i, v) ~= nil do i = i + 1 end
    assert.equals(i, n)
    assert.is_true(C.sp_opt_default_at(-1, v) == nil)
  end)

  it("lie inside each option's domain", function()
    for _, name in ipairs({ "k", "m", "eps", "seed", "concurrency", "nu" }) do
      assert.equals(opts.DEFAULTS[name], opts.check("spec", name, opts.DEFAULTS[name]))
    end
  end)

  it("are what `specula run --help` and `specula theory --help` print", function()
    local D = opts.DEFAULTS
    local status, out = H.sh(H.quote(H.bin) .. " run " .. H.quote(H.root .. "/examples/multihop_sim.lua") .. " --help")
    assert.equals(0, status)
    for _, line in ipairs({
      "active threads (default: " .. D.k .. ")",
      "candidates kept per speculator call (default: " .. D.m .. ")",
      "starvation risk for --k auto (default: " .. D.eps .. ")",
      "queries in flight at once (default: " .. D.concurrency .. ")",
      "fail a trajectory longer than N hops (default: " .. D.max_hops .. ")",
      "for the EV gate (default: " .. D.ev_cost_ms .. ")",
      "predictions considered per step (default: " .. D.predict_top .. ")",
    }) do
      assert.is_truthy(out:find(line, 1, true), "missing: " .. line)
    end
    assert.is_falsy(out:find("{", 1, true) and out:find("{[%w_]+}"), "an unfilled name in:\n" .. out)
    status, out = H.sh(H.quote(H.bin) .. " theory --help")
    assert.equals(0, status)
    assert.is_truthy(out:find("bound, V >= 0 (default: " .. D.nu .. ")", 1, true), out)
    assert.is_truthy(out:find("0 < E < 1 (default: " .. D.eps .. ")", 1, true), out)
  end)
end)
