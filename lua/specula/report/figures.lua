-- specula.report.figures: the SVG figures of `specula report` other than
-- the timeline: RelLat against k with the theory lines and the calls per
-- query, the stage latency histograms, the per-query RelLat distribution, and
-- the markers they (and the timeline) draw.

local metrics = require "specula.metrics"
local svg = require "specula.report.svg"
local common = require "specula.report.common"
local rstats = require "specula.report.numbers"

local format, floor, ceil, max, min, sqrt, abs = string.format, math.floor, math.ceil, math.max, math.min, math.sqrt,
  math.abs
local sort = table.sort
local tostring, ipairs = tostring, ipairs
local num = svg.num
local N, T, fnum, fms, truncate, k_label = common.N, common.T, common.fnum, common.fms, common.truncate, common.k_label
local CI = common.CI
local KIND = common.KIND
local rel_lat_k, sd = rstats.rel_lat_k, rstats.sd

local M = {}

----------------------------------------------------------------------------
-- 2. RelLat against k
----------------------------------------------------------------------------

-- Markers get a white halo so they stay visible on top of spans.
local function marker_triangle(c, cx, cy, color, size)
  size = size or 6
  local d = format("M%s %sL%s %sL%s %sZ", num(cx), num(cy - size), num(cx + size), num(cy + size * 0.8),
    num(cx - size), num(cy + size * 0.8))
  c:path(d, { fill = "#fff", stroke = "#fff", stroke_width = 3.5, stroke_linejoin = "round" })
  c:path(d, { fill = color })
end

local function marker_cross(c, cx, cy, color, size)
  size = size or 5
  local d = format("M%s %sL%s %sM%s %sL%s %s", num(cx - size), num(cy - size), num(cx + size), num(cy + size),
    num(cx - size), num(cy + size), num(cx + size), num(cy - size))
  c:path(d, { stroke = "#fff", stroke_width = 5, stroke_linecap = "round", fill = "none" })
  c:path(d, { stroke = color, stroke_width = 2.6, stroke_linecap = "round", fill = "none" })
end

local function marker_ring(c, cx, cy, color, size)
  c:circle(cx, cy, size or 4, { fill = "#fff", stroke = color, stroke_width = 2 })
end

local function marker_square(c, cx, cy, color, size)
  size = size or 4
  c:rect(cx - size, cy - size, 2 * size, 2 * size, { fill = "#fff", stroke = color, stroke_width = 2 })
end

local function marker_diamond(c, cx, cy, color, size)
  size = size or 6
  local d = format("M%s %sL%s %sL%s %sL%s %sZ", num(cx), num(cy - size), num(cx + size), num(cy),
    num(cx), num(cy + size), num(cx - size), num(cy))
  c:path(d, { fill = "#fff", stroke = "#fff", stroke_width = 3, stroke_linejoin = "round" })
  c:path(d, { fill = color })
end

local MARKER = { commit = marker_triangle, rollback = marker_cross, cancel = marker_ring,
                 deferred = marker_square, answer = marker_diamond }

M.MARKER, M.marker_diamond = MARKER, marker_diamond

-- The x axis of RelLat against k, from L to R: finite k on a linear scale,
-- then inf and auto at the right end. Returns { x = the scale, pos = fn(kx),
-- fmax, gap, inf_x, auto_x, has_inf, has_auto }.
local function k_axis(configs, L, R)
  local fmax, has_inf, has_auto = 1, false, false
  for _, g in ipairs(configs) do
    if N(g.kx) then fmax = max(fmax, g.kx)
    elseif g.kx == "inf" then has_inf = true
    elseif g.kx == "auto" then has_auto = true end
  end
  local gap = max(1, fmax * 0.18)
  local inf_x = fmax + gap
  local auto_x = (has_inf and inf_x or fmax) + gap
  local xmax = has_auto and auto_x or (has_inf and inf_x or fmax)
  local x = svg.linear(1 - 0.35 * gap, xmax + 0.35 * gap, L, R)
  local function xpos(kx)
    if N(kx) then return x(kx) end
    if kx == "inf" then return x(inf_x) end
    if kx == "auto" then return x(auto_x) end
    return x(xmax)
  end
  return { x = x, pos = xpos, fmax = fmax, gap = gap, inf_x = inf_x, auto_x = auto_x, has_inf = has_inf,
           has_auto = has_auto }
end

-- The theory curve RelLat_k over the finite range, at the pooled estimates.
local function theory_curve(pooled, fmax)
  local p, a, b = pooled.p_hat, pooled.alpha_hat, pooled.beta_hat
  local curve = {}
  if p and a and b then
    local steps = 80
    for i = 0, steps do
      local kk = 1 + (fmax - 1) * i / steps
      local v = rel_lat_k(p, a, b, kk)
      if v then curve[#curve + 1] = { kk, v } end
    end
  end
  return curve
end

-- The y scale of RelLat from B up to Tp: every point, interval, RelLat*
-- and the curve, and 1 (the baseline), padded.
local function rel_lat_axis(configs, star, curve, B, Tp)
  local lo, hi = 1, 1
  for _, g in ipairs(configs) do
    local s = g.stats
    for _, v in ipairs({ s.rel_lat, s.ci_lo, s.ci_hi }) do
      if N(v) then lo, hi = min(lo, v), max(hi, v) end
    end
  end
  if star then lo, hi = min(lo, star), max(hi, star) end
  for _, pt in ipairs(curve) do lo, hi = min(lo, pt[2]), max(hi, pt[2]) end
  local pad = max(0.02, (hi - lo) * 0.08)
  -- a ratio is never below 0: the axis does not run there
  local ylo, yhi = svg.nice_domain(max(0, lo - pad), hi + pad, 6)
  return svg.linear(ylo, yhi, B, Tp)
end

-- The ticks of the k axis: values and their labels.
local function k_ticks(k)
  local x, fmax = k.x, k.fmax
  local values, labels = {}, {}
  if fmax <= 12 then
    for kk = 1, fmax do values[#values + 1] = kk; labels[kk] = tostring(kk) end
  else
    local t = svg.nice_ticks(1, fmax, 6)
    if t[1] ~= 1 then values[1] = 1; labels[1] = "1" end
    for _, v in ipairs(t) do if v >= 1 then values[#values + 1] = v; labels[v] = k_label(v) end end
  end
  if k.has_inf then values[#values + 1] = k.inf_x; labels[k.inf_x] = "∞" end
  if k.has_auto then values[#values + 1] = k.auto_x; labels[k.auto_x] = "auto" end
  return values, labels
end

-- An axis break between the finite range and the ∞/auto slots.
local function draw_k_break(c, k, B)
  if k.has_inf or k.has_auto then
    local bx = k.x(k.fmax + k.gap / 2)
    c:rect(bx - 5, B - 4, 10, 8, { fill = "#fff" })
    c:line(bx - 6, B + 4, bx - 2, B - 4, { stroke = "#333" })
    c:line(bx + 2, B + 4, bx + 6, B - 4, { stroke = "#333" })
  end
end

-- Each configuration's RelLat with its interval; configurations sharing
-- an x are spread a little.
local function draw_k_points(c, configs, xpos, y)
  local at = {}
  for _, g in ipairs(configs) do
    local key = tostring(g.kx)
    at[key] = (at[key] or 0) + 1
  end
  local seen = {}
  for _, g in ipairs(configs) do
    local s = g.stats
    if N(s.rel_lat) then
      local key = tostring(g.kx)
      seen[key] = (seen[key] or 0) + 1
      local off = (seen[key] - (at[key] + 1) / 2) * 12
      local px = xpos(g.kx) + off
      local tip = format("%s: RelLat %.3f, %s CI [%s, %s], %d queries%s", g.label, s.rel_lat, CI,
        fnum(s.ci_lo), fnum(s.ci_hi), s.ok, s.failed > 0 and format(" (%d more failed)", s.failed) or "")
      c:open("g", { class = "point", tip = tip })
      if s.ci_lo then
        -- an unbounded upper end: the whisker runs to the top of the axis, without a cap
        local top = s.ci_hi and y(s.ci_hi) or y.r1
        c:line(px, y(s.ci_lo), px, top, { stroke = g.color, stroke_width = 1.6 })
        c:line(px - 4, y(s.ci_lo), px + 4, y(s.ci_lo), { stroke = g.color, stroke_width = 1.6 })
        if s.ci_hi then c:line(px - 4, top, px + 4, top, { stroke = g.color, stroke_width = 1.6 }) end
      end
      c:circle(px, y(s.rel_lat), 5, { fill = g.color, stroke = "#fff", stroke_width = 1.2 })
      c:close()
      if at[key] == 1 then
        c:text(px + 8, y(s.rel_lat) - 6, format("%.3f", s.rel_lat), { class = "annot", fill = g.color })
      end
      if s.failed > 0 then
        -- over the queries that succeeded only: the point says so
        c:text(px + 8, y(s.rel_lat) + 14, format("! %d of %d failed", s.failed, s.queries),
          { class = "annot", fill = "#C0002A" })
      end
    elseif s.ok == 0 and s.failed > 0 and xpos(g.kx) then
      -- every query failed: no point, and the figure says why (at RelLat 1)
      c:text(xpos(g.kx), y(1) + 16, format("! %s: no data (%d of %d failed)", truncate(g.label, 18), s.failed,
        s.queries), { class = "annot", text_anchor = "middle", fill = "#C0002A" })
    end
  end
end

-- The right panel: calls per query, grouped bars per configuration, from
-- L2 to R2 and B up to Tp2.
local function draw_calls_panel(c, configs, L2, R2, Tp2, B)
  local cmax = 0
  for _, g in ipairs(configs) do
    local s = g.stats
    cmax = max(cmax, s.model_pq or 0, s.target_pq or 0, s.spec_pq or 0)
  end
  local y2lo, y2hi = svg.nice_domain(0, max(cmax, 1) * 1.05, 5)
  local y2 = svg.linear(y2lo, y2hi, B, Tp2)
  c:text(L2, 24, "Calls per query", { class = "panel-title" })
  c:legend(L2, 44, { { label = "model", color = KIND.model }, { label = "target", color = KIND.target },
    { label = "speculator", color = KIND.spec } })
  c:axis_left(y2, L2, { ticks = 5, grid = { L2, R2 }, label = "calls per query", label_offset = 40 })
  c:line(L2, B, R2, B, { class = "axis-line" })
  local n = #configs
  local slot = (R2 - L2) / max(n, 1)
  local bw = min(16, slot / 4)
  local kinds = { { "model_pq", KIND.model, "model" }, { "target_pq", KIND.target, "target" },
                  { "spec_pq", KIND.spec, "speculator" } }
  -- labels that do not fit their slot are turned, and cut at 18 characters
  local rotate = false
  for _, g in ipairs(configs) do
    if #g.label * 6.8 > slot - 4 then rotate = true end
  end
  for i, g in ipairs(configs) do
    local s = g.stats
    local cx = L2 + slot * (i - 0.5)
    if s.model_pq then
      for j, kd in ipairs(kinds) do
        local v = s[kd[1]]
        local bx = cx + (j - 2) * bw - bw / 2
        c:rect(bx, y2(v), bw - 1, y2(0) - y2(v), { fill = kd[2],
          tip = format("%s: %.2f %s calls per query", g.label, v, kd[3]) })
      end
    else
      -- every query failed: no bars of 0
      c:text(cx, B - 6, "no data", { class = "annot", text_anchor = "middle", fill = "#C0002A",
        tip = format("%s: all %d queries failed", g.label, s.queries) })
    end
    if rotate then
      local ly = B + 14
      c:text(cx + 4, ly, truncate(g.label, 18), { class = "tick-label", text_anchor = "end", tip = g.label,
        transform = format("rotate(-35 %s %s)", num(cx + 4), num(ly)) })
    else
      c:text(cx, B + 18, g.label, { class = "tick-label", text_anchor = "middle", tip = g.label })
    end
  end
  if not rotate then
    c:text((L2 + R2) / 2, B + 38, "configuration", { class = "axis-title", text_anchor = "middle" })
  end
end

local function fig_rel_lat_k(configs, pooled)
  local W, H = 1100, 470
  local c = svg.canvas(W, H, { id = "fig-k-svg", title = "Relative latency against the thread limit k",
    desc = "RelLat of each configuration against k with bootstrap " .. CI .. " confidence intervals, the theoretical "
      .. "RelLat* as a dashed line, the k = 1 baseline at 1, and the calls per query of each configuration." })
  -- left panel geometry
  local L, R, Tp, B = 74, 650, 46, 360
  local k = k_axis(configs, L, R)
  local x = k.x
  local p, a, b = pooled.p_hat, pooled.alpha_hat, pooled.beta_hat
  local star = pooled.rel_lat_star
  local curve = theory_curve(pooled, k.fmax)
  local y = rel_lat_axis(configs, star, curve, B, Tp)
  c:text(L, 24, "RelLat against k", { class = "panel-title" })
  local values, labels = k_ticks(k)
  c:axis_left(y, L, { ticks = 6, grid = { L, R }, label = "RelLat (Σ wall / Σ standard)", label_offset = 52 })
  c:axis_bottom(x, B, { values = values, labels = labels, label = "k (active-thread limit)" })
  draw_k_break(c, k, B)
  -- baseline and theory
  c:line(L, y(1), R, y(1), { stroke = "#777", stroke_width = 1.5,
    tip = "standard (k = 1, no speculation): RelLat = 1" })
  c:text(R - 4, y(1) - 6, "standard (k = 1) = 1", { class = "annot", text_anchor = "end", fill = "#555" })
  if #curve > 1 then
    local pts = {}
    for i, pt in ipairs(curve) do pts[i] = { x(pt[1]), y(pt[2]) } end
    if k.has_inf and star then pts[#pts + 1] = { x(k.inf_x), y(star) } end
    c:polyline(pts, { stroke = "#666", stroke_width = 1.4, stroke_dasharray = "1.5 3.5",
      tip = "RelLat_k, Corollary 3 (bounded window), at the pooled estimates" })
  end
  if star then
    c:line(L, y(star), R, y(star), { stroke = "#222", stroke_width = 1.6, stroke_dasharray = "7 5",
      tip = format("RelLat* = %.3f (Corollary 1) at pooled p̂ = %.3f, α̂ = %.3f, β̂ = %.3f", star, p, a, b) })
    c:text(L + 6, y(star) + 15, format("RelLat* = %.3f (p̂ %.2f, α̂ %.2f, β̂ %.2f)", star, p, a, b),
      { class = "annot", fill = "#222" })
  end
  draw_k_points(c, configs, k.pos, y)
  -- legend under the left panel
  local items = {}
  for _, g in ipairs(configs) do items[#items + 1] = { label = truncate(g.label, 28), color = g.color, kind = "dot" } end
  items[#items + 1] = { label = "RelLat* (Cor. 1)", color = "#222", kind = "dash" }
  if #curve > 1 then items[#items + 1] = { label = "RelLat_k (Cor. 3)", color = "#666", kind = "line", dash = "1.5 3.5" } end
  c:legend(L, B + 58, items, { wrap = R - L })
  draw_calls_panel(c, configs, 740, 1080, Tp + 14, B)
  return c:render()
end
M.rel_lat_k = fig_rel_lat_k

----------------------------------------------------------------------------
-- 3. stage latency distributions
----------------------------------------------------------------------------

local STAGES = {
  { key = "t_seg", name = "t_seg", what = "model segment", color = KIND.model },
  { key = "t_target", name = "t_target", what = "target tool", color = KIND.target },
  { key = "t_spec", name = "t_spec", what = "speculator", color = KIND.spec },
  { key = "t_verify", name = "t_verify", what = "verifier", color = KIND.verify },
}

local function collect_stages(records)
  local data = {}
  for _, st in ipairs(STAGES) do data[st.key] = {} end
  for _, r in ipairs(records) do
    -- a failed query is not a data point, its hops before the failure neither
    local stages = not rstats.failed(r) and T(r.stages)
    for _, h in ipairs(stages and T(stages.hops) or {}) do
      if T(h) then
        for _, st in ipairs(STAGES) do
          local v = N(h[st.key])
          if v then local d = data[st.key]; d[#d + 1] = v end
        end
      end
    end
  end
  return data
end

-- A label's width in px at the figures' annotation size (11.5 px; digits
-- and letters average under 0.6 em), for placing text clear of marks.
local function text_width(s)
  local chars = 0
  for _ in s:gmatch("[^\128-\191]") do chars = chars + 1 end
  return chars * 7
end
M.text_width = text_width

-- The x domain of a stage histogram: the data's own range (0.5th to 99.5th
-- percentile, the mean inside), not [0, max]: stage times cluster (a tool
-- answering in 590-610 ms), and from 0 they would fill one or two bars at
-- the right edge. From 0 only when the data comes near it anyway.
local function histogram_domain(xs, mean)
  local lo = min(metrics.percentile(xs, 0.5), mean)
  local hi = max(metrics.percentile(xs, 99.5), mean)
  if hi - lo < 1e-9 then
    local pad = max(abs(hi) * 0.05, 0.5)
    lo, hi = lo - pad, hi + pad
  end
  if lo > 0 and lo < (hi - lo) * 0.25 then lo = 0 end
  local xlo, xhi = svg.nice_domain(lo, hi, 6)
  local smallest = xs[1]
  for i = 2, #xs do if xs[i] < smallest then smallest = xs[i] end end
  if xlo < 0 and smallest >= 0 then xlo = 0 end
  return xlo, xhi
end
M.histogram_domain = histogram_domain

local function histogram_panel(c, x0, y0, w, h, st, xs)
  local L, R, Tp, B = x0 + 56, x0 + w - 12, y0 + 40, y0 + h - 44
  c:text(x0 + 56, y0 + 18, format("%s — %s", st.name, st.what), { class = "panel-title" })
  local n = #xs
  if n == 0 then
    c:text((L + R) / 2, (Tp + B) / 2, "no measurements", { class = "annot", text_anchor = "middle" })
    return nil
  end
  local mean = metrics.mean(xs)
  local sigma = sd(xs, mean)
  local xlo, xhi = histogram_domain(xs, mean)
  local nb = max(10, min(40, ceil(sqrt(n))))
  local bw = (xhi - xlo) / nb
  local counts, over, under = {}, 0, 0
  for i = 1, nb do counts[i] = 0 end
  for _, v in ipairs(xs) do
    local i = floor((v - xlo) / bw) + 1
    if i < 1 then i = 1; if v < xlo then under = under + 1 end end
    if i > nb then i = nb; if v > xhi then over = over + 1 end end
    counts[i] = counts[i] + 1
  end
  local cmax = 0
  for i = 1, nb do cmax = max(cmax, counts[i]) end
  local x = svg.linear(xlo, xhi, L, R)
  local ylo, yhi = svg.nice_domain(0, cmax * 1.12, 4)
  local y = svg.linear(ylo, yhi, B, Tp)
  c:axis_left(y, L, { ticks = 4, grid = { L, R }, label = "hops", label_offset = 40 })
  c:axis_bottom(x, B, { ticks = 6, label = st.name .. " (ms)" })
  for i = 1, nb do
    if counts[i] > 0 then
      local a, b = xlo + (i - 1) * bw, xlo + i * bw
      c:rect(x(a) + 0.5, y(counts[i]), max(1, x(b) - x(a) - 1), y(0) - y(counts[i]),
        { fill = st.color, fill_opacity = 0.85,
          tip = format("%s–%s ms: %d hops", fms(a), fms(b), counts[i]) })
    end
  end
  local xm = x(mean)
  c:line(xm, Tp - 4, xm, B, { stroke = "#222", stroke_width = 1.4, stroke_dasharray = "5 4",
    tip = "mean " .. fms(mean) .. " ms" })
  local lines = { format("μ = %s ms", fms(mean)), format("σ = %s ms", fms(sigma)), format("n = %d", n) }
  if under > 0 then lines[#lines + 1] = format("%d below %s ms (first bin)", under, fms(xlo)) end
  if over > 0 then lines[#lines + 1] = format("%d above %s ms (last bin)", over, fms(xhi)) end
  -- the labels go on the side away from the mean line, on a backdrop that
  -- keeps them readable over the bars
  local wmax = 0
  for _, s2 in ipairs(lines) do wmax = max(wmax, text_width(s2)) end
  local left = xm >= (L + R) / 2
  local bx = left and (L + 4) or (R - 4 - wmax - 4)
  c:rect(bx, Tp - 6, wmax + 8, 15 * #lines + 4, { fill = "#fff", fill_opacity = 0.8, class = "stat-box" })
  for i, s2 in ipairs(lines) do
    c:text(left and (bx + 4) or (R - 4), Tp + 6 + 15 * (i - 1), s2,
      { class = "annot stat", text_anchor = left and "start" or "end" })
  end
  return { mean = mean, sd = sigma, n = n, lo = xlo, hi = xhi }
end

local function fig_stages(records)
  local data = collect_stages(records)
  local panels = {}
  for _, st in ipairs(STAGES) do
    local xs = data[st.key]
    local any = false
    for _, v in ipairs(xs) do if v > 0 then any = true break end end
    if st.key ~= "t_verify" or any then panels[#panels + 1] = st end
  end
  local cols = 2
  local pw, ph = 550, 270
  local rows = ceil(#panels / cols)
  local c = svg.canvas(pw * cols, ph * rows + 6, { id = "fig-stages-svg", title = "Distributions of stage latencies",
    desc = "Histograms of the per-hop stage latencies over all configurations, with mean and standard deviation." })
  local summary = {}
  for i, st in ipairs(panels) do
    local col, row = (i - 1) % cols, floor((i - 1) / cols)
    summary[st.key] = histogram_panel(c, col * pw, row * ph, pw, ph, st, data[st.key])
  end
  return c:render(), summary, panels
end
M.stages = fig_stages

----------------------------------------------------------------------------
-- 5. per-query RelLat
----------------------------------------------------------------------------

local function fig_rel_lat_dist(configs, pooled)
  local n = #configs
  local row_h = 46
  local L, R, Tp = 190, 1070, 40
  local B = Tp + n * row_h + 4
  local c = svg.canvas(1100, B + 70, { id = "fig-queries-svg", title = "Per-query relative latency",
    desc = "For each configuration, every query's RelLat as a dot, with the interquartile box, the median, "
      .. "the 5th to 95th percentile whiskers and the mean." })
  local lo, hi = 1, 1
  for _, g in ipairs(configs) do
    for _, v in ipairs(g.stats.rel_lats) do lo, hi = min(lo, v), max(hi, v) end
  end
  if pooled.rel_lat_star then lo = min(lo, pooled.rel_lat_star) end
  local pad = max(0.02, (hi - lo) * 0.04)
  local xlo, xhi = svg.nice_domain(max(0, lo - pad), hi + pad, 8)
  local x = svg.linear(xlo, xhi, L, R)
  c:axis_bottom(x, B, { ticks = 10, grid = { Tp - 8, B }, label = "RelLat of the query (wall / standard)" })
  c:line(x(1), Tp - 8, x(1), B, { stroke = "#777", stroke_width = 1.5, tip = "standard: RelLat = 1" })
  c:text(x(1) + 4, Tp - 12, "standard", { class = "annot", fill = "#555" })
  if pooled.rel_lat_star then
    local sx = x(pooled.rel_lat_star)
    c:line(sx, Tp - 8, sx, B, { stroke = "#222", stroke_width = 1.6, stroke_dasharray = "7 5",
      tip = format("RelLat* = %.3f at the pooled estimates", pooled.rel_lat_star) })
    c:text(sx - 4, Tp - 12, format("RelLat* %.3f", pooled.rel_lat_star), { class = "annot", text_anchor = "end" })
  end
  for i, g in ipairs(configs) do
    local cy = Tp + (i - 0.5) * row_h
    local xs = g.stats.rel_lats
    c:text(L - 12, cy + (g.stats.failed > 0 and -2 or 4), truncate(g.label, 26),
      { class = "lane-label", text_anchor = "end", tip = g.label })
    if g.stats.failed > 0 then
      c:text(L - 12, cy + 12, format("! %d of %d failed", g.stats.failed, g.stats.queries),
        { class = "annot", text_anchor = "end", fill = "#C0002A" })
    end
    if i > 1 then c:line(L, Tp + (i - 1) * row_h, R, Tp + (i - 1) * row_h, { stroke = "#eee" }) end
    -- queries that succeeded with a standard time of 0 (no hop) have no ratio: not dots, but counted
    local noratio = g.stats.ok - #xs
    if noratio > 0 then
      c:text(R, cy - 14, format("%d of %d without a ratio (standard time 0)", noratio, g.stats.ok),
        { class = "annot", text_anchor = "end", fill = "#8A6D00" })
    end
    if #xs > 0 then
      local q = function(p) return metrics.percentile(xs, p) end
      local p5, p25, p50, p75, p95 = q(5), q(25), q(50), q(75), q(95)
      local mean = metrics.mean(xs)
      c:open("g", { class = "box", tip = format("%s: %d queries; median %.3f, IQR [%.3f, %.3f], 5–95%% [%.3f, %.3f], mean %.3f",
        g.label, #xs, p50, p25, p75, p5, p95, mean) })
      c:line(x(p5), cy, x(p25), cy, { stroke = "#555" })
      c:line(x(p75), cy, x(p95), cy, { stroke = "#555" })
      c:line(x(p5), cy - 6, x(p5), cy + 6, { stroke = "#555" })
      c:line(x(p95), cy - 6, x(p95), cy + 6, { stroke = "#555" })
      c:rect(x(p25), cy - 12, max(1, x(p75) - x(p25)), 24, { fill = g.color, fill_opacity = 0.12, stroke = g.color })
      c:line(x(p50), cy - 12, x(p50), cy + 12, { stroke = g.color, stroke_width = 2.5 })
      c:close()
      -- every query as a dot, spread vertically by a fixed hash of its rank
      local sorted = {}
      for j, v in ipairs(xs) do sorted[j] = v end
      sort(sorted)
      -- (at most 1,000 dots per row: beyond that, 1,000 evenly spaced quantiles)
      local ndots = min(#sorted, 1000)
      for j = 1, ndots do
        local v = sorted[ndots == #sorted and j or (floor((j - 1) * (#sorted - 1) / (ndots - 1)) + 1)]
        local jit = ((j * 2654435761) % 1000) / 1000 - 0.5
        c:circle(x(v), cy + jit * 18, 2.2, { fill = g.color, fill_opacity = 0.55 })
      end
      marker_diamond(c, x(mean), cy, "#111", 5)
    end
  end
  c:legend(L, B + 58, {
    { label = "query", color = "#555", kind = "dot" },
    { label = "median and interquartile box", color = "#555", kind = "line" },
    { label = "mean", color = "#111", kind = "marker", marker = function(cv, cx, cy, col) marker_diamond(cv, cx, cy, col, 5) end },
    { label = "RelLat* (pooled)", color = "#222", kind = "dash" },
  })
  return c:render()
end
M.rel_lat_dist = fig_rel_lat_dist

return M
