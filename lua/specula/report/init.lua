-- specula.report: `specula report RESULTS.jsonl [MORE.jsonl ...] -o report.html`
--
-- Reads results files written by `specula run --out` (one JSON record per
-- query) and writes one self-contained HTML page (inline CSS and SVG, no
-- network references, no scripts) with:
--   1. a summary table per configuration (wall-time percentiles, RelLat with a
--      bootstrap 95% CI, p̂, α̂, β̂, RelLat*, commits, rollbacks, calls);
--   2. RelLat against k, with the theory's RelLat* (Corollary 1) and RelLat_k
--      (Corollary 3) at the pooled p̂, α̂, β̂, and the calls per query;
--   3. the distributions of the stage latencies t_seg, t_target, t_spec
--      (and t_verify when it is measured);
--   4. the timeline of one query's speculation window, from a Chrome trace
--      (--trace) or the record's stage times replayed as `specula replay` does;
--   5. the per-query RelLat distribution, and a methods note.
--
-- This module is the order of the work (its command line: specula.cmd.report). The
-- parts live in specula/report/: load (inputs, grouping), stats (the
-- numbers), figures and timeline (the SVG), page (tables and HTML), common
-- (what they share).

local common = require "specula.report.common"
local load, rstats = require "specula.report.load", require "specula.report.numbers"
local figures, timeline = require "specula.report.figures", require "specula.report.timeline"
local page = require "specula.report.page"
local output = require "specula.internal.output"   -- the page and stderr: scrubbed

local format = string.format
local type, tostring, ipairs = type, tostring, ipairs
local fail, open_reason, PALETTE = common.fail, common.open_reason, common.PALETTE

local M = {}

----------------------------------------------------------------------------
-- main
----------------------------------------------------------------------------

-- The page's parts, in the order it shows them.
local function render(o, configs, records, warnings, pooled)
  local figs = { k = figures.rel_lat_k(configs, pooled) }
  figs.stages, figs.stages_summary, figs.panels = figures.stages(records)
  figs.timeline, figs.timeline_caption = timeline.section(configs, records, o)
  figs.queries = figures.rel_lat_dist(configs, pooled)
  figs.verifiers = o.vlab
  return page.render(o, configs, records, warnings, pooled, figs)
end

-- The verifier lab's result on o.cassette, a cassette directory or a results
-- file written with --keep-candidates (specula.lab.verifiers.analyse_pairs),
-- or the command ends saying why.
local function verifier_lab(o)
  local vlab = require "specula.lab.verifiers"
  local src, err = vlab.load_source(o.cassette)
  if not src then fail(err) end
  local res, aerr = vlab.analyse_pairs(src, o.vs, { k = math.huge })
  if not res then fail(format("%s '%s': %s", src.cut and "results file" or "cassette", o.cassette, aerr)) end
  res.source = o.cassette
  return res
end

-- o: the options of `specula report` (specula.cmd.report).
-- The whatif summaries among the files (specula.report.whatif): all of
-- them, or none (the page is one or the other); the command ends saying
-- which file is which when they are mixed.
local function whatif_summaries(o)
  local W = require "specula.report.whatif"
  local list, other = {}, nil
  for _, path in ipairs(o.files) do
    local f = io.open(path, "r")
    local text
    if f then
      local head = f:read(1)
      text = head == "{" and (head .. (f:read("*a") or "")) or nil
      f:close()
    end
    local s, why = nil, nil
    -- a results file is JSON lines: one record holding a stats object is not a summary
    if text and not text:find("\n%s*{") then s, why = W.parse(text) end
    if why then fail(format("'%s': a whatif summary, but %s", path, why)) end
    if s then list[#list + 1] = { path = path, summary = s } else other = other or path end
  end
  if #list == 0 then return nil end
  if other then fail(format("'%s' is a whatif summary but '%s' is not: give them to separate reports", list[1].path, other)) end
  return list
end

-- write html to o.out (- is stdout), or the command ends saying why
local function write_page(o, html)
  local f, err
  if o.out == "-" then f = output.wrap(io.stdout, "text")
  else f, err = output.open(o.out, "w", "text") end
  if not f then fail("cannot write '" .. o.out .. "': " .. open_reason(o.out, err)) end
  local ok, werr = f:write(html)
  if ok then ok, werr = f:flush() end
  local cok, cerr = f:close()
  if ok and not cok then ok, werr = false, cerr end
  if not ok then fail("cannot write '" .. o.out .. "': " .. tostring(werr)) end
end

function M.main(o)
  local wl = whatif_summaries(o)
  if wl then
    write_page(o, require("specula.report.whatif").render(o, wl))
    local nf = 0
    for _, e in ipairs(wl) do nf = nf + #e.summary.failed end
    if nf > 0 then
      output.stderr(format("specula report: %d session%s failed or unreadable; the page counts them apart\n",
        nf, nf == 1 and "" or "s"))
    end
    output.stderr(format("specula report: wrote %s (%d whatif summar%s)\n", o.out, #wl, #wl == 1 and "y" or "ies"))
    return
  end
  if o.cassette then o.vlab = verifier_lab(o) end
  local records, warnings, seq = {}, {}, 0
  for _, path in ipairs(o.files) do
    local recs
    recs, seq = load.file(path, seq, warnings)
    for _, r in ipairs(recs) do records[#records + 1] = r end
  end
  local configs = load.group(records, o)
  for i, g in ipairs(configs) do
    g.color = PALETTE[(i - 1) % #PALETTE + 1]
    g.stats = rstats.summarize(g, o)
  end
  -- where the records came from: one line per distinct run
  local prov = require "specula.provenance"
  local runs, none = prov.runs(records, function(r) return r.config or (type(r.stats) == "table" and r.stats.mode) end)
  for _, g in ipairs(configs) do
    for _, e in ipairs(runs) do
      if g.prov and g.prov.run == e.run then e.name = g.label end
    end
  end
  o.provenance = prov.lines(runs, none)
  for _, l in ipairs(o.provenance) do output.stderr("specula report: " .. l .. "\n") end
  -- the page quotes ids, configurations and warnings from the files: its
  -- writer lets no secret known to this process out (HTML-escaped or not)
  local html = render(o, configs, records, warnings, rstats.pooled(records))
  local f, err
  if o.out == "-" then f = output.wrap(io.stdout, "text")   -- -o -: the page on stdout
  else f, err = output.open(o.out, "w", "text") end
  if not f then fail("cannot write '" .. o.out .. "': " .. open_reason(o.out, err)) end
  -- a full disk shows at the write, the flush or the close: check all three
  local ok, werr = f:write(html)
  if ok then ok, werr = f:flush() end
  local cok, cerr = f:close()
  if ok and not cok then ok, werr = false, cerr end
  if not ok then
    local C = require("specula.internal.core").C
    local note = ""
    if o.out ~= "-" and C.sp_host_path_kind(o.out) == 1 and os.remove(o.out) then note = " (the incomplete file was removed)" end
    fail("cannot write '" .. o.out .. "': " .. tostring(werr) .. note)
  end
  -- failed queries: the page counts them and leaves them out of its figures; say so here too
  local nfailed, parts = 0, {}
  for _, g in ipairs(configs) do
    if g.stats.failed > 0 then
      nfailed = nfailed + g.stats.failed
      parts[#parts + 1] = format("%s: %d of %d", g.label, g.stats.failed, g.stats.queries)
    end
  end
  if nfailed > 0 then
    output.stderr(format("specula report: %d quer%s failed (%s); the page counts only the queries that succeeded\n",
      nfailed, nfailed == 1 and "y" or "ies", table.concat(parts, "; ")))
  end
  output.stderr(format("specula report: wrote %s (%d queries, %d configuration%s%s)\n", o.out, #records, #configs,
    #configs == 1 and "" or "s", #warnings > 0 and format(", %d lines skipped", #warnings) or ""))
end

return M
