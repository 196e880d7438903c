-- specula.report.whatif: the page of `specula report` for summaries written
-- by `specula whatif --summary` (told by their content: one JSON object with
-- configs, tools, sequential_ms and bound_ms). It draws where the agent's
-- wait goes: per configuration the model's time, the tool time still waited
-- and the part speculation hid of the replay (stacked bars, the bounds among
-- them), the share of the possible saving reached, and the per-tool table.
-- Sessions that could not be read are counted apart, never drawn.

local json = require "specula.json"
local svg = require "specula.report.svg"
local common = require "specula.report.common"

local format, concat, max = string.format, table.concat, math.max
local type, ipairs, tostring = type, ipairs, tostring
local N, T, S, esc = common.N, common.T, common.S, svg.escape

local M = {}

local COLORS = { model = "#0072B2", tool = "#D55E00", hidden = "#C9D3E0" }

-- The decoded summary when text is a whatif summary, else nil (and a reason
-- when it looks like one but is not well formed).
function M.parse(text)
  local ok, v = pcall(json.decode, text)
  if not ok or type(v) ~= "table" or not T(v.configs) or not T(v.tools) or v.sequential_ms == nil then
    return nil
  end
  -- null: no session replayed there (every one failed): no time, not 0
  local function num_or_null(x) return N(x) ~= nil or x == json.null end
  if not num_or_null(v.sequential_ms) or not num_or_null(v.bound_ms) or not N(v.sessions) then
    return nil, "sequential_ms, bound_ms (numbers or null) and sessions (a number) are needed"
  end
  v.sequential_ms, v.bound_ms = N(v.sequential_ms), N(v.bound_ms)
  for i, c in ipairs(v.configs) do
    if type(c) ~= "table" or not S(c.name) or not num_or_null(c.agent_ms) then
      return nil, format("configs[%d] needs a name and agent_ms (a number, or null)", i)
    end
    if c.agent_ms == json.null then
      c.agent_ms, c.none = nil, true
      c.model_ms, c.tool_ms = nil, nil
    else
      -- a summary from before the split: the model's part unknown, all of it the wait
      c.model_ms, c.tool_ms = N(c.model_ms) or 0, N(c.tool_ms) or (N(c.model_ms) and 0 or c.agent_ms)
    end
    c.hidden_ms = N(c.hidden_ms) or 0
  end
  for i, r in ipairs(v.tools) do
    if type(r) ~= "table" or not S(r.tool) or not N(r.calls) or not N(r.time_ms) then
      return nil, format("tools[%d] needs tool, calls and time_ms", i)
    end
  end
  v.failed = T(v.failed) or {}
  return v
end

local function secs(ms) return ms and format("%.1f", ms / 1000) or "–" end
-- no "-0.00" for a rounding's sign
local function fnum(x, d) return (common.fnum(x, d):gsub("^%-(0%.0*)$", "%1")) end

-- "MODEL", "TOOLS", "TOTAL" in tenths of a second that add up as printed:
-- the tools' part is the rounded total less the rounded model time (each
-- rounded on its own, 6.54 + 0.54 printed "6.5 + 0.5 = 7.1").
local function sum_parts(model_ms, agent_ms)
  local m10 = math.floor(model_ms / 100 + 0.5)
  local a10 = math.floor(agent_ms / 100 + 0.5)
  local t10 = math.max(0, a10 - m10)
  return format("%.1f", m10 / 10), format("%.1f", t10 / 10), format("%.1f", (m10 + t10) / 10)
end

-- The stacked bars: one row a configuration, model | tool waited | hidden.
local function stacked(s, id)
  local rows = s.configs
  local left, right, top, row_h = 150, 290, 34, 30
  local w, h = 1000, top + #rows * row_h + 56
  local total = 1
  for _, c in ipairs(rows) do
    if not c.none then total = max(total, c.model_ms + c.tool_ms + c.hidden_ms, c.agent_ms) end
  end
  local x = svg.linear(0, total / 1000, left, w - right)   -- seconds, from 0
  local c = svg.canvas(w, h, { id = id, title = "Where the agent's wait goes, per configuration" })
  c:legend(left, 16, { { label = "model (s)", color = COLORS.model }, { label = "+ tools waited (s)", color = COLORS.tool },
    { label = "hidden by speculation (of the replay)", color = COLORS.hidden } })
  for i, r in ipairs(rows) do
    local y = top + (i - 1) * row_h
    c:open("g", { class = "wait-bar", data_config = r.name, data_agent_ms = r.agent_ms, data_model_ms = r.model_ms,
      data_tool_ms = r.tool_ms, data_hidden_ms = r.hidden_ms })
    c:text(left - 8, y + 19, r.name, { text_anchor = "end", class = "tick-label" })
    local x0, acc = left, 0
    -- no session replayed: no bar (a bar of 0 s would read as all of it saved)
    local parts = r.none and {} or { { "model", r.model_ms }, { "tool", r.tool_ms }, { "hidden", r.hidden_ms } }
    for _, part in ipairs(parts) do
      acc = acc + part[2]
      local x1 = x(acc / 1000)
      if part[2] > 0 then
        c:rect(x0, y + 5, x1 - x0, row_h - 10, { fill = COLORS[part[1]], class = "part-" .. part[1],
          tip = format("%s: %s %s s", r.name, part[1], secs(part[2])) })
      end
      x0 = x1
    end
    local label = "no session replayed (every one failed)"
    if not r.none then
      local m, t, a = sum_parts(r.model_ms, r.agent_ms)
      label = format("%s + %s = %s s%s", m, t, a, r.hidden_ms > 0 and format("; hid %s s", secs(r.hidden_ms)) or "")
    end
    c:text(x0 + 6, y + 19, label, { class = "tick-label bar-label" })
    c:close()
  end
  local base = top + #rows * row_h
  -- the bound: the agent's time with a perfect predictor and speculator
  if s.bound_ms and s.bound_ms > 0 then
    c:line(x(s.bound_ms / 1000), top, x(s.bound_ms / 1000), base, { stroke = "#333", stroke_dasharray = "4 3",
      tip = "the bound (perfect-both): " .. secs(s.bound_ms) .. " s" })
  end
  c:axis_bottom(x, base + 4, { label = "agent time (s)" })
  return c:render()
end

-- The share of the possible saving (replay minus perfect-both) each
-- configuration reaches; the axis starts at 0, a negative share is drawn as
-- none and printed as it is.
local function shares(s, id)
  local rows = {}
  for _, r in ipairs(s.configs) do if r.name ~= "recorded" then rows[#rows + 1] = r end end
  local left, top, row_h = 150, 10, 24
  local w, h = 1000, top + #rows * row_h + 50
  local hi = 1
  for _, r in ipairs(rows) do if N(r.share) then hi = max(hi, r.share) end end
  local x = svg.linear(0, hi, left, w - 250)
  local c = svg.canvas(w, h, { id = id, title = "Share of the possible saving reached" })
  for i, r in ipairs(rows) do
    local y = top + (i - 1) * row_h
    local v = N(r.share)
    c:text(left - 8, y + 16, r.name, { text_anchor = "end", class = "tick-label" })
    if v and v > 0 then c:rect(left, y + 4, x(v) - left, row_h - 8, { fill = "#009E73", data_config = r.name }) end
    c:text(x(v and v > 0 and v or 0) + 6, y + 16, v and format("%.2f", v) or "–", { class = "tick-label" })
  end
  c:axis_bottom(x, top + #rows * row_h + 4, { label = "share of (replay − perfect-both) saved" })
  return c:render()
end

local function tools_table(s)
  local h = { '<div class="table-wrap"><table class="summary" id="whatif-tools"><thead><tr>'
    .. '<th class="txt">tool</th><th>calls</th><th>untimed</th><th>time (s)</th><th>share of the tool wait</th>'
    .. '<th>hit rate</th><th>hidden (s)</th></tr></thead><tbody>' }
  for _, r in ipairs(s.tools) do
    h[#h + 1] = format('<tr data-tool="%s"><th class="txt">%s</th><td class="num">%d</td><td class="num">%d</td>'
      .. '<td class="num">%s</td><td class="num">%s</td><td class="num">%s</td><td class="num">%s</td></tr>',
      esc(r.tool), esc(r.tool), r.calls, N(r.untimed) or 0, secs(r.time_ms), fnum(r.share, 2),
      fnum(r.hit_rate, 2), secs(N(r.hidden_ms)))
  end
  h[#h + 1] = "</tbody><caption>Per tool: the calls' own time and its share of all tool time; the predictor's hit "
    .. "rate and the most its hits could hide (– when the predictor was not run).</caption></table></div>"
  return concat(h)
end

local function configs_table(s)
  local h = { '<div class="table-wrap"><table class="summary" id="whatif-configs"><thead><tr>'
    .. '<th class="txt">configuration</th><th>agent (s)</th><th>model (s)</th><th>tools (s)</th><th>hidden (s)</th>'
    .. '<th>RelLat</th><th>share</th><th>sessions</th><th>failed</th></tr></thead><tbody>' }
  for _, r in ipairs(s.configs) do
    h[#h + 1] = format('<tr><th class="txt">%s</th><td class="num">%s</td><td class="num">%s</td><td class="num">%s</td>'
      .. '<td class="num">%s</td><td class="num">%s</td><td class="num">%s</td><td class="num">%s</td>'
      .. '<td class="num%s">%s</td></tr>', esc(r.name), secs(r.agent_ms), secs(r.model_ms), secs(r.tool_ms),
      secs(r.hidden_ms), fnum(r.rel_lat, 3), fnum(r.share, 2), tostring(N(r.sessions) or "–"),
      (N(r.failed) or 0) > 0 and " bad" or "", tostring(N(r.failed) or 0))
  end
  h[#h + 1] = "</tbody></table></div>"
  return concat(h)
end

-- One section per summary (path, s).
local function section(i, path, s)
  local h = {}
  local function add(x) h[#h + 1] = x end
  add(format('<section id="whatif-%d"><h2>%s</h2>', i, esc(path)))
  -- the replays that failed, per configuration (in no figure of their row)
  local rf = {}
  for _, c in ipairs(s.configs) do
    if (N(c.failed) or 0) > 0 then
      rf[#rf + 1] = format("%s %d of %d", esc(c.name), c.failed, c.failed + (N(c.sessions) or 0))
    end
  end
  add(format('<p class="meta" id="whatif-%d-count">%d session%s read; <span class="%s">%d log%s unreadable, '
    .. "counted apart (not in the figures)</span>%s%s. Replay %s s, bound (perfect-both) %s s.</p>", i, s.sessions,
    s.sessions == 1 and "" or "s",
    #s.failed > 0 and "flag" or "", #s.failed, #s.failed == 1 and "" or "s",
    #rf > 0 and ('; <span class="flag">replays failed (in no figure of their row): ' .. concat(rf, ", ") .. "</span>")
    or "", (N(s.assumed) or 0) > 0 and format("; times assumed for %d", s.assumed)
    or "", secs(s.sequential_ms), secs(s.bound_ms)))
  if #s.failed > 0 then
    add('<ul class="failures">')
    for _, e in ipairs(s.failed) do add("<li>" .. esc(e) .. "</li>") end
    add("</ul>")
  end
  add("<figure>" .. stacked(s, "whatif-" .. i .. "-wait") .. "<figcaption>Each bar: the agent's time in that "
    .. "configuration, the model's turns and the rest, the tool time still waited (with a speculator's own time); the light part is what speculation hid of "
    .. "the sequential replay. The dashed line is the bound (perfect-both).</figcaption></figure>")
  add("<figure>" .. shares(s, "whatif-" .. i .. "-share") .. "</figure>")
  add(configs_table(s))
  add("<p></p>")
  add(tools_table(s))
  add("</section>")
  return concat(h, "\n")
end

-- The page of the summaries: list of { path =, summary = }.
function M.render(o, list)
  local title = o.title or "specula whatif: where the wait goes"
  local h = { "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">', "<title>" .. esc(title) .. "</title>",
    "<style>" .. require("specula.report.page").CSS .. "</style></head><body><main>",
    "<header><h1>" .. esc(title) .. "</h1>",
    format('<p class="meta">%d summar%s of <code>specula whatif --summary</code>.</p></header>', #list,
      #list == 1 and "y" or "ies") }
  for i, e in ipairs(list) do h[#h + 1] = section(i, e.path, e.summary) end
  h[#h + 1] = "</main></body></html>"
  return concat(h, "\n") .. "\n"
end

return M
