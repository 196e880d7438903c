-- The report's stage histograms, read back from the SVG they make: the
-- x-axis covers the data (not [0, max], where clustered stage times fill one
-- or two bars at the right edge), and the μ/σ/n labels never sit on the
-- mean line.
local figures = require "specula.report.figures"

-- Deterministic draws (a small LCG), so the spec never depends on luck.
local function rng(seed)
  local s = seed
  return function()
    s = (s * 1103515245 + 12345) % 2147483648
    return s / 2147483648
  end
end

-- Records whose hops carry stage times from gen(rand) -> { t_target =, t_seg = }.
local function records(n, gen)
  local r, recs = rng(7), {}
  for q = 1, n do
    local hops = {}
    for i = 1, 10 do hops[i] = gen(r) end
    recs[q] = { stages = { hops = hops } }
  end
  return recs
end

local function attr(tag, name)
  local v = tag:match(" " .. name:gsub("%-", "%%-") .. '="([^"]*)"')
  return tonumber(v) or v
end

-- The panels of the figure: name -> { bars = {{x, w}...}, mean_x, labels =
-- {{x, anchor, text}...}, L, R }.
local function panels(svgtext)
  local out, cur = {}, nil
  for line in svgtext:gmatch("[^\n]+") do
    local title = line:match('<text class="panel%-title"[^>]*>(%S+) —')
    if title then
      cur = { bars = {}, labels = {}, axes = 0 }
      out[title] = cur
    elseif cur then
      if line:find('<line class="axis-line"', 1, true) then
        cur.axes = cur.axes + 1
        if cur.axes == 2 then cur.L, cur.R = attr(line, "x1"), attr(line, "x2") end   -- the bottom axis
      elseif line:find('stroke-dasharray="5 4"', 1, true) then
        cur.mean_x = attr(line, "x1")
      elseif line:find('<rect', 1, true) and line:find('fill-opacity="0.85"', 1, true) then
        cur.bars[#cur.bars + 1] = { x = attr(line, "x"), w = attr(line, "width") }
      else
        local a, text = line:match('<text class="annot stat"(.-)>(.-)</text>')
        if a then
          cur.labels[#cur.labels + 1] = { x = attr(a, "x"), anchor = attr(a, "text-anchor"), text = text }
        end
      end
    end
  end
  return out
end

-- A label's horizontal extent, generously (7.5 px a character at 11.5 px).
local function extent(l)
  local chars = 0
  for _ in l.text:gmatch("[^\128-\191]") do chars = chars + 1 end
  local w = chars * 7.5
  if l.anchor == "end" then return l.x - w, l.x end
  if l.anchor == "middle" then return l.x - w / 2, l.x + w / 2 end
  return l.x, l.x + w
end

local function check_labels_clear(p, name)
  assert.is_number(p.mean_x, name .. ": no mean line")
  assert.is_true(#p.labels >= 3, name .. ": labels")
  for _, l in ipairs(p.labels) do
    local a, b = extent(l)
    assert.is_true(p.mean_x < a - 3 or p.mean_x > b + 3,
      string.format("%s: label '%s' spans %.1f..%.1f over the mean line at %.1f", name, l.text, a, b, p.mean_x))
    assert.is_true(a >= p.L - 1 and b <= p.R + 1, name .. ": label '" .. l.text .. "' leaves the plot")
  end
end

describe("stage histograms", function()
  it("cover the data's range: clustered stage times spread over the axis, not one or two bars at the right edge", function()
    -- a tool answering in 590-610 ms, a model in 40-60 ms
    local svgtext = figures.stages(records(40, function(r)
      return { t_target = 590 + 20 * r(), t_seg = 40 + 20 * r(), t_spec = 5 + r() }
    end))
    local ps = panels(svgtext)
    for _, name in ipairs({ "t_target", "t_seg", "t_spec" }) do
      local p = assert(ps[name], name)
      assert.is_true(#p.bars >= 8, name .. ": " .. #p.bars .. " bars")
      local lo, hi = math.huge, -math.huge
      for _, b in ipairs(p.bars) do lo, hi = math.min(lo, b.x), math.max(hi, b.x + b.w) end
      assert.is_true(hi - lo >= 0.6 * (p.R - p.L),
        string.format("%s: the bars span %.0f of %.0f px", name, hi - lo, p.R - p.L))
      check_labels_clear(p, name)
    end
  end)

  it("keep the μ/σ/n labels off the mean line, wherever the mean falls", function()
    local cases = {
      -- most hops fast, a long slow tail: the mean sits left
      right_tail = function(r) local v = r() return { t_target = v < 0.85 and 10 + 10 * r() or 100 + 400 * r() } end,
      -- most hops slow, a few fast: the mean sits right
      left_tail = function(r) local v = r() return { t_target = v < 0.15 and 5 + 20 * r() or 90 + 10 * r() } end,
      -- symmetric around the middle
      middle = function(r) return { t_target = 40 + 20 * (r() + r()) } end,
      -- all equal
      constant = function() return { t_target = 60 } end,
    }
    for name, gen in pairs(cases) do
      local p = panels(figures.stages(records(40, gen))).t_target
      assert.is_table(p, name)
      check_labels_clear(p, name)
    end
  end)

  it("start at 0 when the data comes near it, and never below 0 for times", function()
    local lo, hi = figures.histogram_domain({ 1, 5, 10, 50, 100 }, 33.2)
    assert.equals(0, lo)
    assert.is_true(hi >= 100)
    lo, hi = figures.histogram_domain({ 600, 600, 600 }, 600)
    assert.is_true(lo >= 0 and lo < 600 and hi > 600)
    lo = figures.histogram_domain({ 590, 595, 600, 605, 610 }, 600)
    assert.is_true(lo >= 500, "lo " .. lo)
  end)
end)

-- A ratio is not negative: a failed configuration's interval reaching 0 (or
-- the data near it) never pulls an axis below 0 (in-process here: a
-- functional spec loading the core crashed under ASan, where only the unit
-- suite has the runtime preloaded).
describe("the RelLat figures' axes", function()
  it("a RelLat axis never runs below 0, even for an interval that reaches 0", function()
    local s = { rel_lat = 2.55, ci_lo = 0, ci_hi = 5.899, rel_lats = { 0.01, 5.1 }, queries = 8, ok = 8, failed = 0,
                model_pq = 2, target_pq = 1, spec_pq = 1 }
    local configs = { { kx = 1, label = "a", color = "#000", stats = s } }
    for _, svg in ipairs({ figures.rel_lat_k(configs, {}), figures.rel_lat_dist(configs, {}) }) do
      local n = 0
      for v in svg:gmatch('class="tick%-label"[^>]*>([^<]*)<') do
        local x = tonumber(v)
        if x then
          n = n + 1
          assert.is_true(x >= 0, "a tick at " .. v)
        end
      end
      assert.is_true(n > 0)
    end
  end)
end)
