-- specula.report.svg: a small builder for inline SVG figures (used by specula.report).
--
--   svg.escape(s)                  -> s with & < > " ' escaped and control
--                                     characters (other than tab/newline) dropped
--   svg.num(x)                     -> compact coordinate ("12.5", "3", "-0.25")
--   svg.linear(d0, d1, r0, r1)     -> scale: scale(x) maps the domain onto the
--                                     range; scale:ticks(n), scale:invert(y)
--   svg.nice_ticks(lo, hi, n)      -> list of round tick values in [lo, hi], step
--   svg.tick_format(step)          -> function(v) -> label with enough decimals
--   svg.canvas(w, h, opts)         -> canvas (opts.title, opts.desc, opts.id,
--                                     opts.class); the methods below append
--                                     elements, canvas:render() returns the markup
--
-- Canvas methods (attrs is a table of SVG attributes; underscores in names
-- become hyphens, so stroke_width = 2 writes stroke-width="2"; attrs.tip
-- adds a <title> child, a tooltip that screen readers announce too):
--   rect(x, y, w, h, attrs)  line(x1, y1, x2, y2, attrs)  circle(cx, cy, r, attrs)
--   polyline(points, attrs)  path(d, attrs)  text(x, y, s, attrs)
--   open(tag, attrs) / close()  (groups)    raw(markup)  (trusted markup only)
--   axis_bottom(scale, y, opts) / axis_left(scale, x, opts): axis line, ticks,
--     labels and an axis title; opts.ticks (count), opts.values (explicit tick
--     values), opts.labels (value -> label table or function), opts.label
--     (title), opts.grid = {from, to} draws light grid lines across the plot.
--   legend(x, y, items, opts): items = { {label =, color =, kind = "rect" |
--     "line" | "dash" | "dot" | "marker", dash = dasharray for "line",
--     marker = fn(canvas, cx, cy, color)} },
--     laid out in a row that wraps at opts.wrap units (opts.vertical for a
--     column); returns the width and the height used.
--
-- Everything written through these methods is escaped; only raw() is not.

local format, floor, ceil, log10, abs, huge = string.format, math.floor, math.ceil, math.log10, math.abs, math.huge
local concat, sort = table.concat, table.sort
local type, tostring, tonumber, pairs, ipairs, setmetatable = type, tostring, tonumber, pairs, ipairs, setmetatable

local M = {}

local ESC = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }

--- Escape text for HTML/SVG text nodes and attribute values. Non-strings are
-- converted with tostring; nil gives "".
function M.escape(s)
  if s == nil then return "" end
  s = tostring(s)
  -- XML forbids most C0 controls even as character references: drop them.
  s = s:gsub("[%z\1-\8\11\12\14-\31\127]", "")
  return (s:gsub("[&<>\"']", ESC))
end
local escape = M.escape

--- A compact, finite number for coordinates and attribute values.
function M.num(x)
  if type(x) ~= "number" or x ~= x or x == huge or x == -huge then return "0" end
  local s = format("%.2f", x)
  s = s:gsub("0+$", ""):gsub("%.$", "")
  if s == "-0" then s = "0" end
  return s
end
local num = M.num

----------------------------------------------------------------------------
-- scales and ticks
----------------------------------------------------------------------------

--- Round tick values covering [lo, hi] with about n intervals.
function M.nice_ticks(lo, hi, n)
  n = n or 5
  if lo == nil or hi == nil or lo ~= lo or hi ~= hi then return {}, 1 end
  if hi < lo then lo, hi = hi, lo end
  if hi == lo then
    local pad = lo == 0 and 1 or abs(lo) * 0.1
    lo, hi = lo - pad, hi + pad
  end
  local raw = (hi - lo) / n
  local step = 10 ^ floor(log10(raw))
  local r = raw / step
  if r >= 7.5 then step = step * 10
  elseif r >= 3.5 then step = step * 5
  elseif r >= 1.5 then step = step * 2 end
  local out = {}
  local first = ceil(lo / step - 1e-9)
  local last = floor(hi / step + 1e-9)
  for i = first, last do
    local v = tonumber(format("%.12g", i * step))   -- 3 * 0.2 is 0.6, not 0.6000000000000001
    if abs(v) < step * 1e-9 then v = 0 end
    out[#out + 1] = v
  end
  return out, step
end

--- Extend [lo, hi] outwards to whole multiples of a nice step.
function M.nice_domain(lo, hi, n)
  local _, step = M.nice_ticks(lo, hi, n)
  local a, b = floor(lo / step + 1e-9) * step, ceil(hi / step - 1e-9) * step
  if a == b then b = a + step end
  return a, b
end

--- Label formatter with as many decimals as the step needs.
function M.tick_format(step)
  local d = 0
  if step and step > 0 and step < 1 then d = ceil(-log10(step) - 1e-9) end
  if d > 6 then d = 6 end
  return function(v) return format("%." .. d .. "f", v) end
end

local Scale = {}
Scale.__index = Scale
Scale.__call = function(s, x) return s.r0 + (x - s.d0) * s.f end

--- A linear scale from the domain [d0, d1] onto the range [r0, r1].
function M.linear(d0, d1, r0, r1)
  local span = d1 - d0
  local f = span ~= 0 and (r1 - r0) / span or 0
  return setmetatable({ d0 = d0, d1 = d1, r0 = r0, r1 = r1, f = f }, Scale)
end

function Scale:ticks(n)
  return M.nice_ticks(self.d0, self.d1, n)
end

function Scale:invert(y)
  if self.f == 0 then return self.d0 end
  return self.d0 + (y - self.r0) / self.f
end

--- Clamp a value into the scale's domain.
function Scale:clamp(x)
  local lo, hi = self.d0, self.d1
  if lo > hi then lo, hi = hi, lo end
  if x < lo then return lo elseif x > hi then return hi end
  return x
end

----------------------------------------------------------------------------
-- the canvas
----------------------------------------------------------------------------

local Canvas = {}
Canvas.__index = Canvas

local function attr_string(attrs)
  if not attrs then return "" end
  local keys = {}
  for k in pairs(attrs) do
    if k ~= "tip" then keys[#keys + 1] = k end
  end
  sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local v = attrs[k]
    if v ~= nil and v ~= false then
      local name = k:gsub("_", "-")
      if type(v) == "number" then v = num(v) end
      parts[#parts + 1] = " " .. name .. '="' .. escape(v) .. '"'
    end
  end
  return concat(parts)
end

--- A new canvas of w x h user units. It scales to its container's width.
function M.canvas(w, h, opts)
  opts = opts or {}
  local c = setmetatable({ w = w, h = h, out = {}, stack = {}, opts = opts }, Canvas)
  return c
end

function Canvas:push(s) self.out[#self.out + 1] = s end

function Canvas:element(tag, attrs)
  local tip = attrs and attrs.tip
  if tip ~= nil then
    self:push("<" .. tag .. attr_string(attrs) .. "><title>" .. escape(tip) .. "</title></" .. tag .. ">")
  else
    self:push("<" .. tag .. attr_string(attrs) .. "/>")
  end
end

local function merge(base, attrs)
  if attrs then for k, v in pairs(attrs) do base[k] = v end end
  return base
end

function Canvas:rect(x, y, w, h, attrs)
  if w < 0 then x, w = x + w, -w end
  if h < 0 then y, h = y + h, -h end
  self:element("rect", merge({ x = x, y = y, width = w, height = h }, attrs))
end

function Canvas:line(x1, y1, x2, y2, attrs)
  self:element("line", merge({ x1 = x1, y1 = y1, x2 = x2, y2 = y2, stroke = "#333" }, attrs))
end

function Canvas:circle(cx, cy, r, attrs)
  self:element("circle", merge({ cx = cx, cy = cy, r = r }, attrs))
end

function Canvas:polyline(points, attrs)
  local p = {}
  for i, pt in ipairs(points) do p[i] = num(pt[1]) .. "," .. num(pt[2]) end
  self:element("polyline", merge({ points = concat(p, " "), fill = "none", stroke = "#333" }, attrs))
end

function Canvas:path(d, attrs)
  self:element("path", merge({ d = d }, attrs))
end

function Canvas:text(x, y, s, attrs)
  local a = merge({ x = x, y = y }, attrs)
  local tip = a.tip
  a.tip = nil
  local inner = escape(s)
  if tip ~= nil then inner = "<title>" .. escape(tip) .. "</title>" .. inner end
  self:push("<text" .. attr_string(a) .. ">" .. inner .. "</text>")
end

function Canvas:open(tag, attrs)
  local tip = attrs and attrs.tip
  self:push("<" .. tag .. attr_string(attrs) .. ">")
  if tip ~= nil then self:push("<title>" .. escape(tip) .. "</title>") end
  self.stack[#self.stack + 1] = tag
end

function Canvas:close()
  local tag = self.stack[#self.stack]
  if not tag then error("specula.report.svg: close() without open()", 2) end
  self.stack[#self.stack] = nil
  self:push("</" .. tag .. ">")
end

--- Append trusted markup as is.
function Canvas:raw(s) self:push(s) end

local function label_of(opts, v, fmt)
  local l = opts.labels
  if type(l) == "table" then
    local s = l[v]
    if s ~= nil then return s end
  elseif type(l) == "function" then
    return l(v)
  end
  return fmt(v)
end

--- Bottom axis at pixel row y.
function Canvas:axis_bottom(scale, y, opts)
  opts = opts or {}
  local values, step = opts.values, nil
  if not values then values, step = scale:ticks(opts.ticks or 6) end
  local fmt = M.tick_format(step or opts.step)
  local x0, x1 = scale.r0, scale.r1
  self:open("g", { class = "axis" })
  if opts.grid then
    for _, v in ipairs(values) do
      local x = scale(v)
      self:line(x, opts.grid[1], x, opts.grid[2], { class = "grid" })
    end
  end
  self:line(x0, y, x1, y, { class = "axis-line" })
  for _, v in ipairs(values) do
    local x = scale(v)
    self:line(x, y, x, y + 5, { class = "tick" })
    self:text(x, y + 18, label_of(opts, v, fmt), { class = "tick-label", text_anchor = "middle" })
  end
  if opts.label then
    self:text((x0 + x1) / 2, y + 38, opts.label, { class = "axis-title", text_anchor = "middle" })
  end
  self:close()
end

--- Left axis at pixel column x.
function Canvas:axis_left(scale, x, opts)
  opts = opts or {}
  local values, step = opts.values, nil
  if not values then values, step = scale:ticks(opts.ticks or 5) end
  local fmt = M.tick_format(step or opts.step)
  local y0, y1 = scale.r0, scale.r1
  self:open("g", { class = "axis" })
  if opts.grid then
    for _, v in ipairs(values) do
      local y = scale(v)
      self:line(opts.grid[1], y, opts.grid[2], y, { class = "grid" })
    end
  end
  self:line(x, y0, x, y1, { class = "axis-line" })
  for _, v in ipairs(values) do
    local y = scale(v)
    self:line(x - 5, y, x, y, { class = "tick" })
    self:text(x - 8, y + 4, label_of(opts, v, fmt), { class = "tick-label", text_anchor = "end" })
  end
  if opts.label then
    local cy = (y0 + y1) / 2
    local lx = x - (opts.label_offset or 48)
    self:text(lx, cy, opts.label, { class = "axis-title", text_anchor = "middle",
      transform = "rotate(-90 " .. num(lx) .. " " .. num(cy) .. ")" })
  end
  self:close()
end

--- A legend; returns the width and height it used.
function Canvas:legend(x, y, items, opts)
  opts = opts or {}
  local cx, cy = x, y
  local char_w = opts.char_width or 6.6
  local row_h = opts.row or 18
  local widest = 0
  self:open("g", { class = "legend" })
  for _, it in ipairs(items) do
    local color = it.color or "#333"
    local kind = it.kind or "rect"
    local wdt = 20 + #tostring(it.label) * char_w + 18
    if not opts.vertical and opts.wrap and cx > x and cx + wdt - 18 > x + opts.wrap then
      cx, cy = x, cy + row_h
    end
    if kind == "rect" then
      self:rect(cx, cy - 9, 14, 10, { fill = color, stroke = it.stroke, opacity = it.opacity })
    elseif kind == "line" then
      self:line(cx, cy - 4, cx + 14, cy - 4, { stroke = color, stroke_width = 2, stroke_dasharray = it.dash })
    elseif kind == "dash" then
      self:line(cx, cy - 4, cx + 16, cy - 4, { stroke = color, stroke_width = 2, stroke_dasharray = "5 3" })
    elseif kind == "dot" then
      self:circle(cx + 7, cy - 4, 4.5, { fill = color })
    elseif kind == "marker" and it.marker then
      it.marker(self, cx + 7, cy - 4, color)
    end
    self:text(cx + 20, cy, it.label, { class = "legend-label" })
    if opts.vertical then
      widest = math.max(widest, wdt)
      cy = cy + row_h
    else
      cx = cx + wdt
      widest = math.max(widest, cx - x)
    end
  end
  self:close()
  if opts.vertical then return widest, cy - y end
  return widest, cy - y + row_h
end

function Canvas:render()
  while #self.stack > 0 do self:close() end
  local o = self.opts
  -- no xmlns: the markup is meant for inline use in HTML, where the parser
  -- puts <svg> in the SVG namespace by itself
  local head = format('<svg viewBox="0 0 %s %s" width="%s" height="%s" role="img"%s%s%s>',
    num(self.w), num(self.h), num(self.w), num(self.h),
    o.id and (' id="' .. escape(o.id) .. '"') or "",
    o.class and (' class="' .. escape(o.class) .. '"') or "",
    o.title and (' aria-labelledby="' .. escape((o.id or "svg") .. "-title") .. '"') or "")
  local parts = { head }
  if o.title then
    parts[#parts + 1] = '<title id="' .. escape((o.id or "svg") .. "-title") .. '">' .. escape(o.title) .. "</title>"
  end
  if o.desc then parts[#parts + 1] = "<desc>" .. escape(o.desc) .. "</desc>" end
  parts[#parts + 1] = concat(self.out, "\n")
  parts[#parts + 1] = "</svg>"
  return concat(parts, "\n")
end

return M
