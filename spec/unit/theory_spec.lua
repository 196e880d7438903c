-- specula.theory: the latency theory from Lua, through require "specula".
local specula = require "specula"
local theory = specula.theory

local function near(expected, actual, tol)
  assert.is_true(math.abs(expected - actual) <= (tol or 1e-9),
    string.format("expected %.12g, got %.12g", expected, actual))
end

local function assert_error(fn, needle)
  local ok, err = pcall(fn)
  assert.is_false(ok, "expected an error")
  err = tostring(err)
  assert.is_truthy(err:find(needle, 1, true), "error was: " .. err)
  assert.is_truthy(err:find("theory_spec.lua:%d+: "), "error not reported at the caller: " .. err)
end

describe("specula.theory", function()
  it("is the module require 'specula.theory' gives", function()
    assert.equals(require("specula.theory"), theory)
  end)

  it("reproduces the paper's first worked example: alpha 0.2, beta 0.15", function()
    near(1.15 / 0.35, theory.k_det(0.2, 0.15))
    near(3.28, theory.k_det(0.2, 0.15), 0.01)
    assert.equals(6, theory.k_eps(0.2, 0.15, 0.4, 0.05))
    -- k*_eps is the first k whose starvation bound is under eps
    assert.is_true(theory.p_starve(6, 0.2, 0.15, 0.4) <= 0.05)
    assert.is_true(theory.p_starve(5, 0.2, 0.15, 0.4) > 0.05)
  end)

  it("reproduces the paper's second worked example: alpha 0.3, beta 0.75", function()
    near(1.75 / 1.05, theory.k_det(0.3, 0.75))
    near(1.67, theory.k_det(0.3, 0.75), 0.01)
    assert.equals(3, theory.k_eps(0.3, 0.75, 0.4, 0.05))
    assert.is_true(theory.p_starve(3, 0.3, 0.75, 0.4) <= 0.05)
    assert.is_true(theory.p_starve(2, 0.3, 0.75, 0.4) > 0.05)
  end)

  it("gives RelLat* and RelLat_k by Corollaries 1 and 3", function()
    near(1 - 0.5 * 0.7 / 1.75, theory.rel_lat_star(0.5, 0.3, 0.75))
    near(1 - 0.5 * 0.8 / 1.15, theory.rel_lat_star(0.5, 0.2, 0.15))
    -- k = 3, p = 0.5: mu_3 = (1 - 0.125) / 0.5 = 1.75
    near((0.35 + 0.8 / 1.75) / 1.15, theory.rel_lat_k(0.5, 0.2, 0.15, 3))
    near(1, theory.rel_lat_k(0.5, 0.2, 0.15, 1))            -- one thread: no speedup
    near(theory.rel_lat_star(0.5, 0.2, 0.15), theory.rel_lat_k(0.5, 0.2, 0.15, "inf"))
    near(theory.rel_lat_star(0.5, 0.2, 0.15), theory.rel_lat_k(0.5, 0.2, 0.15, math.huge))
  end)

  it("puts the starvation bound at one half at k = k_det", function()
    near(3, theory.k_det(0.25, 0.125))
    near(0.5, theory.p_starve(3, 0.25, 0.125, 0.4))
    assert.equals(0, theory.p_starve("inf", 0.2, 0.15, 0.4))
  end)

  it("reports an unbounded window as math.huge", function()
    assert.equals(math.huge, theory.k_det(0, 0))
    assert.equals(math.huge, theory.k_eps(0, 0, 0.4, 0.05))
  end)

  it("rejects arguments outside the theory's domain, naming them, at the caller", function()
    assert_error(function() theory.k_eps(0.2, 0.15, 0.4, 2) end, "theory.k_eps: eps must be in (0, 1), got 2")
    assert_error(function() theory.k_eps(0.2, 0.15, -1, 0.05) end, "theory.k_eps: nu must be a number >= 0")
    assert_error(function() theory.rel_lat_star(1.5, 0.2, 0.15) end, "theory.rel_lat_star: p must be in [0, 1]")
    assert_error(function() theory.rel_lat_k(0.5, 0.2, 0.15, 0) end, "theory.rel_lat_k: k must be an integer >= 1 or inf, got 0")
    assert_error(function() theory.rel_lat_k(0.5, 0.2, 0.15, "auto") end, "k must be an integer >= 1 or inf, got auto")
    assert_error(function() theory.rel_lat_k(0.5, 0.2, 0.15, -1) end, "theory.rel_lat_k: k must be an integer in [1,")
    assert_error(function() theory.p_starve(2.5, 0.2, 0.15, 0.4) end, "theory.p_starve: k must be an integer")
    assert_error(function() theory.k_det(-0.1, 0.15) end, "theory.k_det: alpha must be a number >= 0")
    assert_error(function() theory.k_det(0.2, "x") end, "theory.k_det: beta must be")
    assert_error(function() theory.k_det(0.2) end, "theory.k_det: beta must be a number, got nil")
  end)
end)
