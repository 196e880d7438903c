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
-- This module is the command: its arguments and the order of the work. The
-- parts live in specula/report/: load (inputs, grouping), stats (the
-- numbers), figures and timeline (the SVG), page (tables and HTML), common
-- (what they share).

local common = require "specula.report.common"
local load, rstats = require "specula.report.load", require "specula.report.stats"
local figures, timeline = require "specula.report.figures", require "specula.report.timeline"
local page = require "specula.report.page"
local lab = require "specula.lab"

local format, floor = string.format, math.floor
local type, tostring, tonumber, ipairs = type, tostring, tonumber, ipairs
local fail, open_reason, PALETTE = common.fail, common.open_reason, common.PALETTE

local M = {}

-- {name}: that option's default (specula.opts.fill).
local usage_text = require("specula.opts").fill [[
usage: specula report RESULTS.jsonl [MORE.jsonl ...] [-o report.html] [options]

Writes one self-contained HTML report (inline CSS and SVG) of one or more
results files written by `specula run --out`.

options:
  -o, --out FILE        the HTML file to write (default: report.html)
  --trace FILE.json     a Chrome trace from `specula run --trace`: the timeline
                        figure then shows the recorded events of one query
  --query ID            the query shown in the timeline (default: the one with
                        the most commits + rollbacks)
  --group auto|file     auto (default): group records by their `config`, else
                        by mode and k; file: one configuration per input file
  --title TEXT          the report's title
  --cassette DIR        a cassette (`specula run --record DIR`, or a results file run with
                        --keep-candidates): adds a Verifiers section, the table of
                        `specula verifiers DIR`
  --verifier V          a verifier for that section (repeatable; default: exact,
                        normalized, spechop, jaccard), as `specula verifiers` takes it
  --bootstrap N         bootstrap resamples for the RelLat CI (default {bootstrap_iterations})
  --seed N              bootstrap seed (default {bootstrap_seed}, as in `specula run --compare`)
  -h, --help            this text
]]

-- Usage mistakes end the command with status 2 (see main).
local usage_error = lab.usage_error

----------------------------------------------------------------------------
-- arguments
----------------------------------------------------------------------------

local function parse_args(args)
  local argv = require "specula.argv"
  local D = require("specula.opts").DEFAULTS
  local o, err = argv.parse(args, {
    ["-o"] = "out", ["--out"] = "out", ["--trace"] = "trace", ["--query"] = "query", ["--title"] = "title",
    ["--cassette"] = "cassette", ["--verifier"] = { "verifiers", list = true },
    ["--group"] = { "group", convert = argv.one_of({ auto = true, file = true }, "--group must be auto or file") },
    ["--bootstrap"] = { "iterations", convert = function(v)
      v = tonumber(v)
      if not v or v < 1 or v ~= floor(v) then return nil, "--bootstrap must be a positive integer" end
      return v
    end },
    ["--seed"] = { "seed", convert = function(v)
      v = tonumber(v)
      if not v then return nil, "--seed must be a number" end
      return v
    end },
    ["-h"] = argv.HELP, ["--help"] = argv.HELP,
  }, { positional = "files", option = "^%-.", into = { out = "report.html", group = "auto",
       iterations = D.bootstrap_iterations, seed = D.bootstrap_seed } })
  if not o then usage_error(err) end
  if not o.help and #o.files == 0 then usage_error("no results file given") end
  if o.verifiers and not o.cassette then usage_error("--verifier needs --cassette DIR") end
  if o.cassette and not o.help then
    local vlab = require "specula.verifierlab"
    local err
    o.vs, err = vlab.load_verifiers(o.verifiers or vlab.DEFAULT)
    if not o.vs then usage_error(err) end
  end
  return o
end

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
-- file written with --keep-candidates (specula.verifierlab.analyse_pairs),
-- or the command ends saying why.
local function verifier_lab(o)
  local vlab = require "specula.verifierlab"
  local src, err = vlab.load_source(o.cassette)
  if not src then fail(err) end
  local res, aerr = vlab.analyse_pairs(src, o.vs, { k = math.huge })
  if not res then fail(format("%s '%s': %s", src.cut and "results file" or "cassette", o.cassette, aerr)) end
  res.source = o.cassette
  return res
end

function M.main(args)
  local o = lab.parse_args("specula report", usage_text, parse_args, args)
  if not o then return end
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
  local secrets = require "specula.secrets"
  local prov = require "specula.provenance"
  local runs, none = prov.runs(records, function(r) return r.config or (type(r.stats) == "table" and r.stats.mode) end)
  for _, g in ipairs(configs) do
    for _, e in ipairs(runs) do
      if g.prov and g.prov.run == e.run then e.name = g.label end
    end
  end
  o.provenance = prov.lines(runs, none)
  for _, l in ipairs(o.provenance) do secrets.stderr("specula report: " .. l .. "\n") end
  -- the page quotes ids, configurations and warnings from the files: no
  -- secret known to this process goes out in it (HTML-escaped or not)
  local html = secrets.scrub(render(o, configs, records, warnings, rstats.pooled(records)))
  local f, err = io.open(o.out, "w")
  if not f then fail("cannot write '" .. o.out .. "': " .. open_reason(o.out, err)) end
  -- a full disk shows at the write, the flush or the close: check all three
  local ok, werr = f:write(html)
  if ok then ok, werr = f:flush() end
  local cok, cerr = f:close()
  if ok and not cok then ok, werr = false, cerr end
  if not ok then
    local C = require("specula.core").C
    local note = ""
    if C.sp_host_path_kind(o.out) == 1 and os.remove(o.out) then note = " (the incomplete file was removed)" end
    fail("cannot write '" .. o.out .. "': " .. tostring(werr) .. note)
  end
  secrets.stderr(format("specula report: wrote %s (%d queries, %d configuration%s%s)\n", o.out, #records, #configs,
    #configs == 1 and "" or "s", #warnings > 0 and format(", %d lines skipped", #warnings) or ""))
end

return M
