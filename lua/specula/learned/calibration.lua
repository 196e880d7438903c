-- specula.learned.calibration: the map from a call's score to its
-- probability of being exactly the next call: an isotonic fit on held-out
-- (score, hit) pairs, the most recent kept.
local ipairs = ipairs
local sort, floor, max = table.sort, math.floor, math.max

local M = {}

-- Isotonic regression (pool adjacent violators) of hit on score; the steps
-- are kept as block means at block mean scores and read by interpolation.
local function fit_isotonic(pairs_)
  local list = {}
  for i, p in ipairs(pairs_) do list[i] = p end
  sort(list, function(a, b) if a[1] ~= b[1] then return a[1] < b[1] end return a[2] < b[2] end)
  local blocks = {}
  for _, p in ipairs(list) do
    blocks[#blocks + 1] = { sx = p[1], sy = p[2], n = 1 }
    while #blocks > 1 do
      local b, a = blocks[#blocks], blocks[#blocks - 1]
      if a.sy / a.n >= b.sy / b.n then
        a.sx, a.sy, a.n = a.sx + b.sx, a.sy + b.sy, a.n + b.n
        blocks[#blocks] = nil
      else break end
    end
  end
  local xs, ys = {}, {}
  for i, b in ipairs(blocks) do
    xs[i] = b.sx / b.n
    -- shrunk toward the block's neighbourhood: a block of one is no certainty
    ys[i] = (b.sy + 0.5) / (b.n + 1)
  end
  -- shrinking can break monotonicity at small blocks: restore it
  for i = 2, #ys do if ys[i] < ys[i - 1] then ys[i] = ys[i - 1] end end
  return { x = xs, y = ys }
end

local function calibrate(cal, s)
  if not cal or #cal.x == 0 then return s end
  local xs, ys = cal.x, cal.y
  if s <= xs[1] then return ys[1] * (xs[1] > 0 and max(0, s) / xs[1] or 1) end
  if s >= xs[#xs] then return ys[#ys] end
  local lo, hi = 1, #xs
  while hi - lo > 1 do
    local mid = floor((lo + hi) / 2)
    if xs[mid] <= s then lo = mid else hi = mid end
  end
  local t = (s - xs[lo]) / (xs[hi] - xs[lo])
  return ys[lo] + t * (ys[hi] - ys[lo])
end

local function refit(self)
  local p = self.cal_pairs
  if #p > self.cal_keep then
    local keep = {}
    for i = #p - self.cal_keep + 1, #p do keep[#keep + 1] = p[i] end
    self.cal_pairs = keep
    p = keep
  end
  self.cal = #p > 0 and fit_isotonic(p) or nil
end

M.fit_isotonic, M.calibrate, M.refit = fit_isotonic, calibrate, refit

return M
