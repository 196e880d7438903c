-- Unit tests for specula.metrics.
local metrics = require("specula.metrics")

local function assert_error(fn, needle)
  local ok, err = pcall(fn)
  assert.is_false(ok, "expected an error")
  err = tostring(err)
  assert.is_truthy(err:find(needle, 1, true), "error was: " .. err)
  assert.is_truthy(err:find("metrics_spec.lua:%d+: "), "error not reported at the caller: " .. err)
end

local function near(expected, actual, tol)
  assert.is_true(math.abs(expected - actual) <= (tol or 1e-9),
    string.format("expected %.12g, got %.12g", expected, actual))
end

describe("specula.metrics.em", function()
  local cases = {
    { "The Beatles", "beatles", 1 },
    { "beatles!", "The Beatles", 1 },
    { "Cage Of Gold", "cage of gold.", 1 },
    { "Cage of Gold (film)", "Cage Of Gold", 0 },
    { "1925", { "1926", "1925" }, 1 },
    { "Paris", { "London", "Rome" }, 0 },
    { "  an  apple ", "apple", 1 },
    { "", "x", 0 },
    { nil, { "x" }, 0 },
  }
  for i, c in ipairs(cases) do
    it("case " .. i, function()
      assert.are.equal(c[3], metrics.em(c[1], c[2]))
    end)
  end

  it("accepts a record's gold list", function()
    assert.are.equal(1, metrics.em("NYC", { gold = { "New York City", "NYC" } }))
  end)

  it("rejects bad gold", function()
    assert_error(function() metrics.em("x", {}) end, "specula.metrics.em: empty list of gold answers")
    assert_error(function() metrics.em("x", { {} }) end, "gold answer 1 is not a string")
    assert_error(function() metrics.em("x", true) end, "gold must be a string or a list of strings")
  end)
end)

describe("specula.metrics.f1", function()
  it("computes SQuAD token F1", function()
    assert.are.equal(1, metrics.f1("The Beatles", "beatles"))
    assert.are.equal(0, metrics.f1("Rolling Stones", "beatles"))
    -- pred {paul, wendkos, director} vs gold {paul, wendkos}: P = 2/3, R = 1
    near(0.8, metrics.f1("Paul Wendkos, director", "Paul Wendkos"))
    -- multiset overlap: pred "a a b" (articles removed: "b")... use real words
    -- pred {new, new, york}, gold {new, york}: same = 2, P = 2/3, R = 1
    near(0.8, metrics.f1("new new york", "New York"))
  end)

  it("takes the max over golds", function()
    near(1, metrics.f1("NYC", { "New York City", "NYC" }))
    near(2 / 3 * 2 / (2 / 3 + 1) * 1, metrics.f1("New York City", { "New York", "Boston" }))
  end)

  it("follows the SQuAD 2.0 rule for empty answers", function()
    assert.are.equal(1, metrics.f1("the", "a"))    -- both normalise to ""
    assert.are.equal(0, metrics.f1("", "Paris"))
    assert.are.equal(0, metrics.f1("Paris", "the"))
  end)
end)

describe("specula.metrics summary statistics", function()
  it("mean", function()
    assert.are.equal(2.5, metrics.mean({ 1, 2, 3, 4 }))
    assert.is_nil(metrics.mean({}))
    assert_error(function() metrics.mean({ 1, "2" }) end, "specula.metrics.mean: element 2 is not a number")
  end)

  it("percentile interpolates linearly between ranks", function()
    local xs = { 40, 10, 30, 20 }                       -- sorted: 10 20 30 40
    assert.are.equal(10, metrics.percentile(xs, 0))
    assert.are.equal(40, metrics.percentile(xs, 100))
    assert.are.equal(25, metrics.percentile(xs, 50))     -- rank 2.5
    near(19, metrics.percentile(xs, 30))                 -- rank 1.9: 10 + 0.9 * 10
    near(37.3, metrics.percentile(xs, 91))               -- rank 3.73
    assert.are.same({ 40, 10, 30, 20 }, xs)              -- input untouched
    assert.are.equal(7, metrics.percentile({ 7 }, 95))
    assert_error(function() metrics.percentile({}, 50) end, "specula.metrics.percentile: empty list")
    assert_error(function() metrics.percentile({ 1 }, 101) end, "q must be a number in [0,100]")
  end)
end)

describe("specula.metrics.prng", function()
  it("is deterministic per seed and independent of math.random", function()
    local a, b, c = metrics.prng(42), metrics.prng(42), metrics.prng(43)
    local sa, sc = {}, {}
    for i = 1, 20 do
      math.randomseed(i)                                   -- must not matter
      local x = a:next()
      assert.are.equal(x, b:next())
      assert.is_true(x >= 0 and x < 1)
      sa[i], sc[i] = x, c:next()
    end
    assert.are_not.same(sa, sc)
  end)

  it("draws integers uniformly enough in [1, n]", function()
    local r = metrics.prng(7)
    local counts = { 0, 0, 0, 0 }
    for _ = 1, 4000 do
      local k = r:int(4)
      assert.is_true(k >= 1 and k <= 4)
      counts[k] = counts[k] + 1
    end
    for k = 1, 4 do assert.is_true(counts[k] > 850 and counts[k] < 1150, tostring(counts[k])) end
  end)
end)

describe("specula.metrics.bootstrap_ci", function()
  local data = {}
  for i = 1, 200 do data[i] = (i % 10) / 10 end           -- mean 0.45

  it("brackets the mean and is reproducible for a seed", function()
    local lo, hi, est = metrics.bootstrap_ci(data, nil, { seed = 1 })
    near(0.45, est)
    assert.is_true(lo < 0.45 and 0.45 < hi, lo .. " " .. hi)
    assert.is_true(hi - lo < 0.15 and hi - lo > 0.02)
    local lo2, hi2 = metrics.bootstrap_ci(data, nil, { seed = 1 })
    assert.are.equal(lo, lo2)
    assert.are.equal(hi, hi2)
    local lo3, hi3 = metrics.bootstrap_ci(data, nil, { seed = 2 })
    assert.is_true(lo3 ~= lo or hi3 ~= hi)
  end)

  it("narrows with a lower level and supports paired data", function()
    local lo95, hi95 = metrics.bootstrap_ci(data, nil, { seed = 3, iterations = 500 })
    local lo50, hi50 = metrics.bootstrap_ci(data, nil, { seed = 3, iterations = 500, level = 0.5 })
    assert.is_true(hi50 - lo50 < hi95 - lo95)

    -- paired: b is always a + 0.1, so every resample's mean difference is 0.1
    local pairs_ = {}
    for i = 1, 50 do pairs_[i] = { i / 50, i / 50 + 0.1 } end
    local lo, hi, est = metrics.bootstrap_ci(pairs_, function(sample)
      local s = 0
      for _, p in ipairs(sample) do s = s + (p[2] - p[1]) end
      return s / #sample
    end, { seed = 9, iterations = 200 })
    near(0.1, est, 1e-12); near(0.1, lo, 1e-12); near(0.1, hi, 1e-12)
  end)

  it("validates its input", function()
    assert_error(function() metrics.bootstrap_ci({}) end, "data must be a non-empty list")
    assert_error(function() metrics.bootstrap_ci({ 1 }, nil, { iterations = 0 }) end,
      "iterations must be a positive integer")
    assert_error(function() metrics.bootstrap_ci({ 1 }, function() return "x" end) end,
      "fn returned string, not a number")
  end)
end)
