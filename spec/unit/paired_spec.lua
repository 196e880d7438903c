-- Unit tests for specula.stats: the paired statistics of --compare.
local stats = require("specula.stats")
local metrics = require("specula.metrics")

local function near(expected, actual, tol, what)
  assert.is_true(math.abs(expected - actual) <= (tol or 1e-12),
    string.format("%sexpected %.15g, got %.15g", what and (what .. ": ") or "", expected, actual))
end

-- Normal(mu, sigma) draws from the seeded xorshift generator (Box-Muller).
local function normals(seed, n, mu, sigma)
  local rng, out = metrics.prng(seed), {}
  while #out < n do
    local u1, u2 = rng:next(), rng:next()
    if u1 > 0 then
      local r = math.sqrt(-2 * math.log(u1))
      out[#out + 1] = mu + sigma * r * math.cos(2 * math.pi * u2)
      if #out < n then out[#out + 1] = mu + sigma * r * math.sin(2 * math.pi * u2) end
    end
  end
  return out
end

-- base values and other = base + d, so the paired differences are exactly d
-- (up to rounding) while the two columns themselves vary a lot
local function pairs_from(diffs, seed)
  local rng, base, other = metrics.prng(seed), {}, {}
  for i, d in ipairs(diffs) do
    base[i] = 50 + 100 * rng:next()
    other[i] = base[i] + d
  end
  return base, other
end

describe("specula.stats sign test", function()
  it("gives the exact two-sided binomial p-values computed by hand", function()
    -- 9 of 10 positive: 2 (C(10,0) + C(10,1)) / 2^10 = 22/1024
    near(0.021484375, stats.binom_two_sided(9, 10))
    near(0.021484375, stats.binom_two_sided(1, 10))
    near(2 / 1024, stats.binom_two_sided(10, 10))
    near(1, stats.binom_two_sided(5, 10))
    -- 3 of 12: 2 (1 + 12 + 66 + 220) / 4096
    near(598 / 4096, stats.binom_two_sided(3, 12))
    near(1, stats.binom_two_sided(0, 0))
    near(0.5, stats.binom_two_sided(0, 2))   -- 2 (1/4) = 0.5
  end)

  it("stays exact in log space for large n (checked against exact rational arithmetic)", function()
    near(0.02253662756750957, stats.binom_two_sided(560, 1200), 1e-12)
    near(0.02253662756750957, stats.binom_two_sided(640, 1200), 1e-12)
    near(1, stats.binom_two_sided(1000, 2000))
  end)

  it("drops zero differences and counts the signs", function()
    local d = { 1, 2, 3, 0.5, 7, 1, 1, 1, 4, -2, 0, 0 }
    local p, pos, neg, zero = stats.sign_test(d)
    assert.same({ 9, 1, 2 }, { pos, neg, zero })
    near(0.021484375, p)
    assert.has_error(function() stats.sign_test({ 1, "x" }) end,
      "specula.stats.sign_test: element 2 is not a number")
  end)
end)

describe("specula.stats.paired", function()
  it("the 95% CI of the mean difference covers mu and has the width 2 x 1.96 sigma / sqrt(n)", function()
    local n, mu, sigma = 400, 2, 1
    local d = normals(7, n, mu, sigma)
    local base, other = pairs_from(d, 11)
    local r = stats.paired(base, other, { iterations = 2000, seed = 3 })
    assert.equals(n, r.n)
    near(metrics.mean(d), r.mean, 1e-9, "mean of the differences")
    near(stats.median(d), r.median, 1e-9, "median of the differences")
    assert.is_true(r.mean_lo < mu and mu < r.mean_hi, ("CI [%g, %g] misses %g"):format(r.mean_lo, r.mean_hi, mu))
    local expected = 2 * 1.96 * sigma / math.sqrt(n)          -- 0.196
    local width = r.mean_hi - r.mean_lo
    assert.is_true(math.abs(width - expected) < 0.15 * expected,
      ("width %.4f, expected %.4f within 15%%"):format(width, expected))
    -- the interval sits around the estimate, not around zero
    assert.is_true(r.mean_lo > 1.8 and r.mean_hi < 2.2)
    -- the median's interval covers the centre too (wider: about 1.25 x for a normal)
    assert.is_true(r.median_lo < mu and mu < r.median_hi)
    -- every difference is positive far more often than not: tiny sign-test p
    assert.is_true(r.pos > 380 and r.sign_p < 1e-60)
  end)

  it("covers mu in about 95% of repeated experiments #slow", function()
    local covered, widths, reps, n = 0, 0, 40, 400
    for rep = 1, reps do
      local d = normals(100 + rep, n, 2, 1)
      local base, other = pairs_from(d, 200 + rep)
      local r = stats.paired(base, other, { iterations = 500, seed = rep })
      if r.mean_lo <= 2 and 2 <= r.mean_hi then covered = covered + 1 end
      widths = widths + (r.mean_hi - r.mean_lo)
    end
    -- 95% coverage: 40 trials give 38 on average; 33 or fewer has p < 0.01
    assert.is_true(covered >= 34, "covered " .. covered .. " of " .. reps)
    near(0.196, widths / reps, 0.02, "mean CI width")
  end)

  it("gives the ratio of sums with a paired interval, none when the baseline sums to zero", function()
    local base, other = {}, {}
    for i = 1, 60 do base[i] = 100 + i; other[i] = 0.8 * base[i] + (i % 3) end
    local sb, so = 0, 0
    for i = 1, 60 do sb, so = sb + base[i], so + other[i] end
    local r = stats.paired(base, other)
    near(so / sb, r.ratio, 1e-12)
    assert.is_true(r.ratio_lo < r.ratio and r.ratio < r.ratio_hi)
    -- pairing: other tracks base closely, so the ratio's CI is far narrower
    -- than resampling the two columns independently would give
    assert.is_true(r.ratio_hi - r.ratio_lo < 0.01)
    local z = stats.paired({ 0, 0, 0 }, { 1, 0, 2 })
    assert.is_nil(z.ratio)
    near(1, z.mean, 1e-12)
  end)

  it("is deterministic for a seed and changes with it", function()
    local d = normals(5, 50, 0, 3)
    local base, other = pairs_from(d, 6)
    local a = stats.paired(base, other, { seed = 9 })
    local b = stats.paired(base, other, { seed = 9 })
    local c = stats.paired(base, other, { seed = 10 })
    assert.same(a, b)
    assert.is_true(a.mean_lo ~= c.mean_lo or a.mean_hi ~= c.mean_hi)
    assert.has_error(function() stats.paired({ 1, 2 }, { 1 }) end,
      "specula.stats.paired: the lists differ in length (2 and 1)")
  end)

  local c_loop = stats._boot_c and it or pending
  -- a small LCG of its own (independent of the generator under test)
  local function lcg(x)
    return function() x = (x * 1103515245 + 12345) % 2147483648; return x / 2147483648 end
  end

  c_loop("gives the RelLat interval of metrics.bootstrap_ci, resampled in C", function()
    local u = lcg(777)
    for case = 1, 30 do
      local n = case <= 2 and case or 1 + math.floor(u() * 400)
      local num, den, pairs_ = {}, {}, {}
      for i = 1, n do
        num[i] = u() * 900
        den[i] = (case % 4 == 0 and u() < 0.5) and 0 or 300 + u() * 900   -- some all-zero resamples
        if case == 8 then den[i] = 0 end
        pairs_[i] = { num[i], den[i] }
      end
      local opts = { iterations = 300, seed = case, level = case % 2 == 0 and 0.9 or 0.95 }
      local lo, hi, est = stats.ratio_ci(num, den, opts)
      -- a resample without a standard time (Σ den = 0) is +inf, not 0: the
      -- fastest possible for a ratio that does not exist
      local rel = function(sample)
        local w, s = 0, 0
        for _, p in ipairs(sample) do w, s = w + p[1], s + p[2] end
        if s > 0 then return w / s end
        return w == 0 and 1 or math.huge
      end
      local lo2, hi2, est2 = metrics.bootstrap_ci(pairs_, rel, opts)
      assert.same({ lo2, hi2, est2 }, { lo, hi, est })
      assert.same({ lo2, hi2, est2 }, { stats.ratio_ci(num, den, opts, true) })
    end
    assert.has_error(function() stats.ratio_ci({ 1 }, { 1, 2 }) end,
      "specula.stats.ratio_ci: expected two non-empty lists of the same length")
  end)

  c_loop("draws the same resamples in C (engine/sp_bootstrap.c) as in Lua", function()
    -- ties, zero baselines, odd and even n, n = 1, seeds 0..
    local u = lcg(12345)
    for case = 1, 40 do
      local n = case <= 3 and case or 1 + math.floor(u() * 300)
      local base, other, diffs = {}, {}, {}
      for i = 1, n do
        base[i] = case % 5 == 0 and 0 or math.floor(u() * 20) / 4
        other[i] = case % 7 == 0 and base[i] or math.floor(u() * 20) / 4
        diffs[i] = other[i] - base[i]
      end
      local bo = { iterations = 200, seed = case - 1, level = 0.95 }
      local m1, d1, r1 = stats._paired_bootstrap(base, other, diffs, bo)
      local m2, d2, r2 = stats._paired_bootstrap(base, other, diffs, bo, true)
      assert.same(m2, m1)
      assert.same(d2, d1)
      assert.same(r2, r1)
    end
  end)
end)

describe("specula.stats.paired_records with failed queries", function()
  local function rec(id, wall, err)
    return { id = id, error = err, stats = { wall_ms = wall, standard_ms = wall, wasted_cost = 0,
      calls = { model = 1, target = 1, speculator = 0 } } }
  end
  local function run(n, failing, wall)
    local t = {}
    for i = 1, n do t[i] = rec("q" .. i, wall + i, failing[i] and "boom" or nil) end
    return t
  end

  it("pairs only queries that succeeded in both, and counts the others", function()
    local base = run(10, { [10] = true }, 100)
    local other = run(10, { [1] = true }, 50)
    local p = stats.paired_records(other, base)
    assert.equals(10, p.matched)
    assert.equals(2, p.failed)
    assert.equals(8, p.n)
    assert.is_true(p.comparable)
    assert.equals(8, p.wall_ms.n)
    -- the failed queries' times are not in the sums: (Σ 52..59) / (Σ 102..109)
    near(444 / 844, p.wall_ms.ratio, 1e-12, "ratio")
  end)

  it("is not comparable below MIN_PAIRED_SHARE of the queries, and gives no measures then", function()
    assert.equals(0.8, stats.MIN_PAIRED_SHARE)
    local base = run(10, {}, 100)
    local p = stats.paired_records(run(10, { true, true, true }, 50), base)
    assert.equals(7, p.n)
    assert.is_false(p.comparable)
    assert.is_nil(p.wall_ms)
    assert.is_nil(p.calls)
    -- exactly 80 %: comparable
    assert.is_true(stats.paired_records(run(10, { true, true }, 50), base).comparable)
  end)
end)

describe("specula.stats.paired_records: one pass of draws for the measures", function()
  -- records whose three measures all vary (so each has its own ranks)
  local function recs(n, seed, scale, drop_cost)
    local rng, t = metrics.prng(seed), {}
    for i = 1, n do
      local calls = { model = 1 + math.floor(20 * rng:next()), target = 2, speculator = math.floor(9 * rng:next()) }
      t[i] = { id = string.format("q%03d", i), stats = { wall_ms = scale * (100 + 400 * rng:next()),
        wasted_cost = math.floor(1e4 * rng:next()) / 1e6, calls = calls } }
      if drop_cost and i % 3 == 0 then t[i].stats.wasted_cost = nil end
    end
    return t
  end
  local opts = { iterations = 300, seed = 7 }

  it("sp_boot_paired_multi gives each measure exactly sp_boot_paired's figures", function()
    local core = require("specula.internal.core")
    local ffi, C = core.ffi, core.C
    local dbl, int = ffi.typeof("double[?]"), ffi.typeof("int[?]")
    local m, n, iters, state = 3, 41, 57, metrics.prng(11).state
    local rng = metrics.prng(5)
    local d, b, o, rk, so = dbl(m * n), dbl(m * n), dbl(m * n), int(m * n), dbl(m * n)
    for q = 0, m - 1 do
      -- any permutation serves as ranks here: the kernels only count by rank
      local perm = {}
      for i = 1, n do perm[i] = i end
      for i = n, 2, -1 do local j = rng:int(i); perm[i], perm[j] = perm[j], perm[i] end
      for i = 0, n - 1 do
        local k = q * n + i
        b[k] = 10 * rng:next(); o[k] = 10 * rng:next(); d[k] = o[k] - b[k]
        rk[k] = perm[i + 1]; so[k] = rng:next()
      end
      if q == 2 then for i = 0, n - 1 do b[q * n + i] = 0 end end -- zero baseline sums: 1 / inf ratios
    end
    local mo, me, ra = dbl(m * iters), dbl(m * iters), dbl(m * iters)
    C.sp_boot_paired_multi(m, n, iters, state, d, b, o, rk, so, 21, 0, int(n), int(m * n), mo, me, ra)
    for q = 0, m - 1 do
      local m1, m2, m3 = dbl(iters), dbl(iters), dbl(iters)
      C.sp_boot_paired(n, iters, state, d + q * n, b + q * n, o + q * n, rk + q * n, so + q * n, 21, 0,
        int(n), m1, m2, m3)
      for it = 0, iters - 1 do
        local k = q * iters + it
        assert.is_true(mo[k] == m1[it] and me[k] == m2[it] and ra[k] == m3[it],
          string.format("measure %d, resample %d", q + 1, it + 1))
      end
    end
  end)

  local function same(a, b, path)
    if type(a) ~= "table" then
      assert.is_true(a == b or (a ~= a and b ~= b), path .. ": " .. tostring(a) .. " vs " .. tostring(b))
      return
    end
    for k, v in pairs(a) do same(v, b[k], path .. "." .. tostring(k)) end
    for k in pairs(b) do assert.is_not_nil(a[k], path .. "." .. tostring(k) .. " only in the other") end
  end

  it("gives every measure the figures of its own stats.paired (shared pass and fallback)", function()
    assert.is_true(stats._boot_c)
    for _, drop in ipairs({ false, true }) do -- true: wasted_cost pairs fewer queries, no shared pass
      local base, other = recs(60, 3, 1, false), recs(60, 4, 0.7, drop)
      local shared = stats.paired_records(other, base, opts)
      stats._no_multi = true
      local ok, separate = pcall(stats.paired_records, other, base, opts)
      stats._no_multi = nil
      assert.is_true(ok, tostring(separate))
      same(shared, separate, "paired_records")
      for _, m in ipairs(stats.MEASURES) do assert.is_table(shared[m.key]) end
      if drop then assert.is_true(shared.wasted_cost.n < shared.wall_ms.n) end
      assert.is_true(shared.wall_ms.mean_lo < shared.wall_ms.mean_hi)
    end
  end)
end)
