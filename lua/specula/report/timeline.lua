-- specula.report.timeline: figure 4 of `specula report`, the timeline of
-- one query's speculation window. From a Chrome trace (--trace) it draws the
-- recorded events; without one it draws the record's stage times replayed on
-- the window as `specula replay` runs it (sp_replay_timeline), the same code
-- that computes the replayed latency, so the two cannot disagree.

local ffi = require "ffi"
local json, svg = require "specula.json", require "specula.report.svg"
local core = require "specula.internal.core"
local common, load = require "specula.report.common", require "specula.report.load"
local figures = require "specula.report.figures"
local rstats = require "specula.report.numbers"

local C = core.C
local format, max, min, huge = string.format, math.max, math.min, math.huge
local sort = table.sort
local tostring, tonumber, pairs, ipairs = tostring, tonumber, pairs, ipairs
local N, S, T = common.N, common.S, common.T
local fail, fms, plural, truncate, k_label = common.fail, common.fms, common.plural, common.truncate, common.k_label
local KIND, MARK, MARKER = common.KIND, common.MARK, figures.MARKER

local M = {}

local SPAN_KIND = { [C.SP_REPLAY_TL_MODEL] = "model", [C.SP_REPLAY_TL_TARGET] = "target",
                   [C.SP_REPLAY_TL_SPEC] = "spec", [C.SP_REPLAY_TL_VERIFY] = "verify" }
local MARK_KIND = { [C.SP_REPLAY_TL_COMMIT] = "commit", [C.SP_REPLAY_TL_ROLLBACK] = "rollback",
                    [C.SP_REPLAY_TL_CANCEL] = "cancel", [C.SP_REPLAY_TL_ANSWER] = "answer" }
local REPLAY_MODE = { spechop = true, window = true, sequential = true }

-- The schedule a record is replayed under: its mode (other modes replay as
-- spechop, as `specula replay` does) and its k. replay reads k from
-- stats.k_config; an auto run's (or an older record's) is the k it used.
local function replay_settings(rec)
  local st = rec.stats
  local mode = S(rec.mode) or S(st.mode)
  if not REPLAY_MODE[mode] then mode = "spechop" end
  local kc = st.k_config
  if not (N(kc) or kc == "inf") then kc = st.k end
  return mode, kc
end

-- Replays one record's stage times as `specula replay` does
-- (m, k and spec_launch from its stats, as replay takes them) and returns
-- its timeline { spans, marks, lanes, wall, mode, k, m, launch }, or nil and
-- why it cannot be replayed.
local function replayed(rec)
  if not (T(rec) and T(rec.stats) and T(rec.stages)) then return nil, "the record has no stats or no stages" end
  local mode, k = replay_settings(rec)
  local st = rec.stats
  -- only what the replay loader reads: the stages and the run's settings
  local text = json.encode({ id = rec.id, stages = rec.stages, k = rec.k, m = rec.m, spec_launch = rec.spec_launch,
    stats = { k_config = k, m = st.m, mode = st.mode, spec_launch = st.spec_launch } })
  local err, errlen = core.errbuf()
  local out = ffi.new("sp_replay_set *[1]")
  if C.sp_replay_load_buffer(text, #text, out, err, errlen) ~= 0 then return nil, ffi.string(err) end
  local set = ffi.gc(out[0], C.sp_replay_set_free)
  local q = C.sp_replay_set_query(set, 0)
  local info = ffi.new("sp_replay_tl_info")
  local nh = #(T(rec.stages.hops) or {})
  -- a first guess at the size; sp_replay_timeline says what it needs
  local cap_s, cap_m = 6 * nh + 8, 2 * nh + 4
  local spans, marks, rc
  for _ = 1, 2 do
    spans, marks = ffi.new("sp_replay_span[?]", cap_s), ffi.new("sp_replay_mark[?]", cap_m)
    rc = C.sp_replay_timeline(q, mode, C.SP_REPLAY_K_RECORDED, C.SP_REPLAY_LAUNCH_RECORDED, spans, cap_s, marks, cap_m,
      info, err, errlen)
    if rc == 0 or (info.n_spans <= cap_s and info.n_marks <= cap_m) then break end
    cap_s, cap_m = tonumber(info.n_spans), tonumber(info.n_marks)
  end
  if rc ~= 0 then
    local msg = ffi.string(err)
    C.sp_replay_set_free(ffi.gc(set, nil))
    return nil, msg
  end
  local tl = { spans = {}, marks = {}, lanes = {}, wall = tonumber(info.wall), mode = mode,
               k = info.k == C.SP_K_UNBOUNDED and "inf" or info.k, m = info.m,
               launch = info.launch == C.SP_REPLAY_EAGER and "eager" or "slot" }
  for i = 0, tonumber(info.n_spans) - 1 do
    local sp = spans[i]
    tl.spans[i + 1] = { tid = sp.lane + 1, kind = SPAN_KIND[sp.kind], t0 = sp.t0, t1 = sp.t1,
                        speculative = sp.speculative ~= 0, hop = sp.hop }
  end
  for i = 0, tonumber(info.n_marks) - 1 do
    local mk = marks[i]
    tl.marks[i + 1] = { tid = mk.lane + 1, kind = MARK_KIND[mk.kind], t = mk.t, hop = mk.hop }
  end
  for t = 1, info.lanes do tl.lanes[t] = { tid = t, name = "T" .. t } end
  C.sp_replay_set_free(ffi.gc(set, nil))
  return tl
end
M.replayed = replayed

local function normalise_trace_proc(p)
  local t0 = huge
  for _, s in ipairs(p.spans) do t0 = min(t0, s.t0) end
  for _, m in ipairs(p.marks) do t0 = min(t0, m.t) end
  if t0 == huge then t0 = 0 end
  local tids, seen = {}, {}
  local spans, marks, tend = {}, {}, 0
  for _, s in ipairs(p.spans) do
    spans[#spans + 1] = { tid = s.tid, kind = s.kind, t0 = s.t0 - t0, t1 = s.t1 - t0, speculative = s.speculative,
      hop = s.hop, detail = s.detail }
    tend = max(tend, s.t1 - t0)
    if not seen[s.tid] then seen[s.tid] = true; tids[#tids + 1] = s.tid end
  end
  for _, m in ipairs(p.marks) do
    marks[#marks + 1] = { tid = m.tid, kind = m.kind, t = m.t - t0, hop = m.hop, detail = m.detail }
    tend = max(tend, m.t - t0)
    if not seen[m.tid] then seen[m.tid] = true; tids[#tids + 1] = m.tid end
  end
  sort(tids)
  local lanes = {}
  for i, tid in ipairs(tids) do lanes[i] = { tid = tid, name = p.threads[tid] or ("T" .. tid) } end
  return { spans = spans, marks = marks, lanes = lanes, wall = tend }
end

local KIND_NAMES = { model = "model segment", spec = "speculator", target = "target tool", verify = "verify" }

local function fig_timeline(tl)
  local lanes = tl.lanes
  local lane_h, gap = 28, 8
  local L, R, Tp = 70, 1080, 72
  local H = Tp + #lanes * (lane_h + gap) + 60
  local c = svg.canvas(1100, H, { id = "fig-timeline-svg", title = "Timeline of one query's speculation window",
    desc = "One lane per window thread; spans for model segments, speculator, target and verify calls; "
      .. "markers for commits, rollbacks, cancellations and the answer." })
  local xhi = tl.wall > 0 and tl.wall or 1
  local x0, x1 = svg.nice_domain(0, xhi, 8)
  local x = svg.linear(x0, x1, L, R)
  local lane_y = {}
  for i, ln in ipairs(lanes) do lane_y[ln.tid] = Tp + (i - 1) * (lane_h + gap) end
  local B = Tp + #lanes * (lane_h + gap) - gap + 6
  -- legend
  local items = {
    { label = "model segment", color = KIND.model }, { label = "speculator", color = KIND.spec },
    { label = "target tool", color = KIND.target },
    { label = "target (from an unverified state)", color = KIND.target, kind = "marker",
      marker = function(cv, cx, cy) cv:rect(cx - 7, cy - 5, 14, 10, { fill = "url(#hatch-spec)", stroke = KIND.target }) end },
    { label = "verify", color = KIND.verify },
  }
  for _, kd in ipairs({ "commit", "rollback", "cancel", "deferred", "answer" }) do
    local fn = MARKER[kd]
    items[#items + 1] = { label = kd, color = MARK[kd], kind = "marker", marker = function(cv, cx, cy, col) fn(cv, cx, cy, col) end }
  end
  c:raw('<defs><pattern id="hatch-spec" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
    .. '<rect width="6" height="6" fill="' .. KIND.target .. '" fill-opacity="0.35"/>'
    .. '<line x1="0" y1="0" x2="0" y2="6" stroke="' .. KIND.target .. '" stroke-width="3"/></pattern></defs>')
  c:legend(L, 22, items, { wrap = R - L })
  c:axis_bottom(x, B, { ticks = 10, grid = { Tp - 6, B }, label = "time since the query started (ms)" })
  for _, ln in ipairs(lanes) do
    local ly = lane_y[ln.tid]
    c:rect(L, ly, R - L, lane_h, { fill = "#f4f6f8" })
    c:text(L - 10, ly + lane_h / 2 + 4, ln.name, { class = "lane-label", text_anchor = "end" })
  end
  -- spans: model full height, speculator in the upper half, target in the lower half
  local order = { model = 1, target = 2, spec = 3, verify = 4 }
  local spans = {}
  for i, s in ipairs(tl.spans) do spans[i] = s end
  sort(spans, function(a, b)
    local oa, ob = order[a.kind] or 0, order[b.kind] or 0
    if oa ~= ob then return oa < ob end
    return a.t0 < b.t0
  end)
  for _, s in ipairs(spans) do
    local ly = lane_y[s.tid]
    if ly then
      local xa, xb = x(s.t0), x(s.t1)
      local w = max(1.5, xb - xa)
      local yy, hh = ly + 2, lane_h - 4
      if s.kind == "spec" then yy, hh = ly + 2, lane_h / 2 - 3
      elseif s.kind == "target" then yy, hh = ly + lane_h / 2 + 1, lane_h / 2 - 3 end
      local fill = KIND[s.kind] or "#888"
      if s.kind == "target" and s.speculative then fill = "url(#hatch-spec)" end
      local tip = format("%s%s: %s–%s ms (%s ms)%s%s", KIND_NAMES[s.kind] or s.kind,
        s.hop and (" hop " .. s.hop) or "", fms(s.t0), fms(s.t1), fms(s.t1 - s.t0),
        s.speculative and ", from an unverified state" or "", s.detail and (" — " .. s.detail) or "")
      c:rect(xa, yy, w, hh, { fill = fill, stroke = s.kind == "target" and KIND.target or nil,
        stroke_width = s.kind == "target" and 0.8 or nil, tip = tip })
    end
  end
  for _, m in ipairs(tl.marks) do
    local ly = lane_y[m.tid]
    local fn = MARKER[m.kind]
    if ly and fn then
      local mx, my = x(m.t), ly + lane_h / 2
      local tip = format("%s%s at %s ms%s", m.kind, m.hop and (" (hop " .. m.hop .. ")") or "", fms(m.t),
        m.detail and (" — " .. m.detail) or "")
      c:open("g", { class = "mark", tip = tip })
      if m.kind == "commit" or m.kind == "rollback" then
        c:line(mx, ly - 3, mx, ly + lane_h + 3, { stroke = MARK[m.kind], stroke_width = 1.2 })
      end
      fn(c, mx, my, MARK[m.kind])
      c:close()
    end
  end
  return c:render()
end


-- Choose the query of the timeline and build it; returns markup and caption.
local function timeline_section(configs, records, o)
  local tl, caption
  if o.trace then
    local procs, truns = load.trace(o.trace)
    -- the trace must come from a run whose records are here: otherwise its
    -- timeline would stand beside another run's figures
    if truns and #truns > 0 then
      local mine, first = {}, nil
      for _, r in ipairs(records) do
        local p = type(r.provenance) == "table" and r.provenance.run
        if type(p) == "string" then mine[p] = true first = first or p end
      end
      local shared = false
      for _, d in ipairs(truns) do if mine[d] then shared = true end end
      if first and not shared then
        fail(string.format("trace '%s' was written by another run than the records: provenance.run %s there, %s "
          .. "in the records; give the trace the same `specula run` wrote with them", o.trace,
          tostring(truns[1]):sub(1, 12), first:sub(1, 12)))
      end
    end
    local chosen
    if o.query then
      for _, p in pairs(procs) do
        if p.id == o.query and (not chosen or p.pid < chosen.pid) then chosen = p end
      end
      if not chosen then
        -- a --compare trace names each process "ID (CONFIG)": say which exist
        local near = {}
        for _, p in pairs(procs) do
          local id = tostring(p.id)
          if id:sub(1, #o.query + 2) == o.query .. " (" then near[#near + 1] = "'" .. id .. "'" end
        end
        table.sort(near)
        fail("--query '" .. o.query .. "': no such query in trace '" .. o.trace .. "'"
          .. (#near > 0 and ("; this trace holds it once per configuration: give --query " .. table.concat(near, " or "))
            or ""))
      end
    else
      for _, p in pairs(procs) do
        if #p.spans > 0 and (not chosen or p.score > chosen.score or (p.score == chosen.score and p.pid < chosen.pid)) then
          chosen = p
        end
      end
      if not chosen then fail("trace '" .. o.trace .. "' has no spans") end
    end
    tl = normalise_trace_proc(chosen)
    local qid = tostring(chosen.id or chosen.pid)
    local text
    for _, r in ipairs(records) do
      if tostring(r.id) == qid and S(r.query) then text = r.query break end
    end
    local nc, nr = 0, 0
    for _, m in ipairs(tl.marks) do
      if m.kind == "commit" then nc = nc + 1 elseif m.kind == "rollback" then nr = nr + 1 end
    end
    caption = format("Query %s%s, recorded in trace %s: %s, %s, %s, %s ms from the first "
      .. "to the last event (measured events).", qid, text and (" “" .. truncate(text, 160) .. "”") or "", o.trace,
      plural(#tl.lanes, "thread"),
      plural(nc, "commit"), plural(nr, "rollback"), fms(tl.wall))
  else
    local best, bestg
    for _, g in ipairs(configs) do
      for _, r in ipairs(g.recs) do
        -- unless asked for by --query, a query that failed is not the example
        if (o.query and tostring(r.id) == o.query or not o.query and not rstats.failed(r)) and T(r.stages) then
          local score = (N(r.stats.commits) or 0) + (N(r.stats.rollbacks) or 0)
          if not best or score > best.score then best, bestg = { r = r, score = score }, g end
        end
      end
    end
    if not best then
      if o.query then fail("--query '" .. o.query .. "': no record with that id and stage times") end
      for _, r in ipairs(records) do
        if T(r.stages) then
          return nil, "Every query with stage times failed, so no timeline is drawn (--query ID draws a failed one)."
        end
      end
      return nil, "No record carries stage times, so no timeline can be drawn."
    end
    local r = best.r
    local why
    tl, why = replayed(r)
    local about = format("Query %s%s (configuration %s, %s:%d)", tostring(r.id),
      S(r.query) and (" “" .. truncate(r.query, 160) .. "”") or "", bestg.label, r._file, r._line)
    if not tl then
      return nil, about .. ": its stage times cannot be replayed (" .. why .. "), so no timeline is drawn."
    end
    local nc, nr = 0, 0
    for _, m in ipairs(tl.marks) do
      if m.kind == "commit" then nc = nc + 1 elseif m.kind == "rollback" then nr = nr + 1 end
    end
    local init = N(r.stages.init) or 0
    local late = init > 0 and format("; the replay starts at the first step, %s ms into the query", fms(init)) or ""
    caption = format("%s: reconstructed, not measured — the record's stage times replayed by the simulation "
      .. "of `specula replay` (%s, k = %s, m = %d, %s launch; %s, %s; replayed wall %s ms against %s ms measured%s). "
      .. "Wrong-path branches hold a thread until their verification and are drawn to the end of their first "
      .. "step. Pass --trace with the run's trace to draw the recorded events instead.",
      about, tl.mode, k_label(tl.k), tl.m, tl.launch, plural(nc, "commit"), plural(nr, "rollback"),
      fms(tl.wall), fms(r.stats.wall_ms), late)
  end
  return fig_timeline(tl), caption
end
M.section = timeline_section

return M
