-- specula.report.page: the HTML of `specula report`: the summary and
-- paired-difference tables, the methods note, and the page around the
-- figures (inline CSS and SVG; no scripts, no network references).

local pstats = require "specula.stats"
local svg = require "specula.report.svg"
local common = require "specula.report.common"

local format = string.format
local concat = table.concat
local type, tostring, ipairs = type, tostring, ipairs
local esc = svg.escape
local N, fnum, fms, CI = common.N, common.fnum, common.fms, common.CI

local M = {}

----------------------------------------------------------------------------
-- 1. summary table
----------------------------------------------------------------------------

local function td(key, value, text, cls)
  local dv = ""
  if value ~= nil then
    dv = type(value) == "number" and format("%.17g", value) or tostring(value)
  end
  return format('<td class="%s" data-key="%s" data-value="%s">%s</td>', cls or "num", key, esc(dv), esc(text))
end

-- A table row's closing tag, the row joined into the table's lines h.
local function end_row(h, row)
  row[#row + 1] = "</tr>"
  h[#h + 1] = concat(row)
end

-- The table's closing tags and its HTML.
local function end_table(h)
  h[#h + 1] = "</tbody></table></div>"
  return concat(h, "\n")
end

local function summary_table(configs)
  local h = {}
  h[#h + 1] = '<div class="table-wrap"><table class="summary" id="summary-table">'
  h[#h + 1] = "<caption>Per configuration. Every figure but Queries, OK and Failed is over the queries that "
    .. "succeeded (a failed query is not a data point; <span class=\"flag\">!</span> marks a configuration with "
    .. "failures). Wall times in ms; RelLat = Σ wall / Σ standard with its bootstrap " .. CI .. " CI; "
    .. "p̂, α̂, β̂ pooled over the configuration's hops; RelLat* (Corollary 1) at those values.</caption>"
  h[#h + 1] = "<thead><tr>"
    .. '<th scope="col" class="txt">Configuration</th><th scope="col">Queries</th><th scope="col">OK</th>'
    .. '<th scope="col">Failed</th>'
    .. '<th scope="col">Mean wall (ms)</th><th scope="col">p50</th><th scope="col">p95</th><th scope="col">p99</th>'
    .. '<th scope="col">RelLat</th><th scope="col">' .. CI .. ' CI</th>'
    .. '<th scope="col">p̂</th><th scope="col">α̂</th><th scope="col">β̂</th><th scope="col">RelLat*</th>'
    .. '<th scope="col">Commits</th><th scope="col">Rollbacks</th>'
    .. '<th scope="col" title="model / target / speculator calls per query">Calls per query<br>(M · T · S)</th>'
    .. "</tr></thead><tbody>"
  for _, g in ipairs(configs) do
    local s = g.stats
    local row = {}
    row[#row + 1] = format('<tr class="config%s" data-config="%s">', s.failed > 0 and " failing" or "", esc(g.label))
    row[#row + 1] = format('<th scope="row" class="txt" data-key="config"><span class="swatch" style="background:%s"></span>%s%s</th>',
      g.color, (esc(g.label):gsub("[:,=]", "%0<wbr>")), s.failed > 0 and format(' <span class="flag" title="%d of %d queries failed">!</span>',
        s.failed, s.queries) or "")
    row[#row + 1] = td("queries", s.queries, tostring(s.queries))
    row[#row + 1] = td("ok", s.ok, tostring(s.ok))
    row[#row + 1] = td("failed", s.failed, tostring(s.failed), s.failed > 0 and "num bad" or "num")
    row[#row + 1] = td("mean_wall", s.mean_wall, fnum(s.mean_wall, 1))
    row[#row + 1] = td("p50_wall", s.p50, fnum(s.p50, 1))
    row[#row + 1] = td("p95_wall", s.p95, fnum(s.p95, 1))
    row[#row + 1] = td("p99_wall", s.p99, fnum(s.p99, 1))
    row[#row + 1] = td("rel_lat", s.rel_lat, fnum(s.rel_lat, 3), "num strong")
    -- an end that is unbounded (resamples without a standard time): inf
    local function e17(v) return v and format("%.17g", v) or "inf" end
    local function e3(v) return v and format("%.3f", v) or "inf" end
    local has_ci = s.ci_lo or s.ci_unbounded
    row[#row + 1] = td("rel_lat_ci", has_ci and (e17(s.ci_lo) .. "," .. e17(s.ci_hi)),
      has_ci and format("[%s, %s]", e3(s.ci_lo), e3(s.ci_hi)) or "–", "num ci")
    row[#row + 1] = td("p_hat", s.p_hat, fnum(s.p_hat, 3))
    row[#row + 1] = td("alpha_hat", s.alpha_hat, fnum(s.alpha_hat, 3))
    row[#row + 1] = td("beta_hat", s.beta_hat, fnum(s.beta_hat, 3))
    row[#row + 1] = td("rel_lat_star", s.rel_lat_star, fnum(s.rel_lat_star, 3))
    row[#row + 1] = td("commits", s.commits, s.commits and tostring(s.commits) or "–")
    row[#row + 1] = td("rollbacks", s.rollbacks, s.rollbacks and tostring(s.rollbacks) or "–")
    row[#row + 1] = td("calls_per_query", s.model_pq and format("%.17g,%.17g,%.17g", s.model_pq, s.target_pq, s.spec_pq),
      s.model_pq and format("%.1f · %.1f · %.1f", s.model_pq, s.target_pq, s.spec_pq) or "–")
    end_row(h, row)
  end
  h[#h + 1] = "</tbody></table></div>"
  -- a configuration with failures says so in words under the table
  local notes = {}
  for _, g in ipairs(configs) do
    local s = g.stats
    if s.failed > 0 and s.ok == 0 then
      notes[#notes + 1] = format('<li data-config="%s"><span class="flag">!</span> <strong>%s</strong>: all %d '
        .. "queries failed; its row has no data.</li>", esc(g.label), esc(g.label), s.queries)
    elseif s.failed > 0 then
      notes[#notes + 1] = format('<li data-config="%s"><span class="flag">!</span> <strong>%s</strong>: %d of %d '
        .. "queries failed; its row is over the %d that succeeded.</li>", esc(g.label), esc(g.label), s.failed,
        s.queries, s.ok)
    end
  end
  -- and one whose predictor raised: its row is not the predictor's result alone
  for _, g in ipairs(configs) do
    local off = g.stats.predictor_off
    if off then
      notes[#notes + 1] = format('<li data-config="%s" class="predictor-off"><span class="flag">!</span> <strong>%s</strong>: '
        .. "its predictor raised and was off for all or part of %d of %d queries "
        .. "(<code>stats.prefetch.predictor_off</code>): the row is not the predictor's alone.</li>",
        esc(g.label), esc(g.label), off, g.stats.ok)
    end
  end
  if #notes > 0 then h[#h + 1] = '<ul class="failures" id="failures">' .. concat(notes) .. "</ul>" end
  return concat(h, "\n")
end

-- Paired differences of every configuration against the first row's
-- (specula.stats.paired_records: per query, matched by id).
local function paired_table(configs, o)
  if #configs < 2 then return "" end
  local base = configs[1]
  local h = {}
  h[#h + 1] = '<div class="table-wrap"><table class="summary" id="paired-table">'
  h[#h + 1] = "<caption>Paired differences against <strong>" .. esc(base.label) .. "</strong>, query by query "
    .. "(this configuration minus the baseline; queries matched by id; a query that failed in either is left out, "
    .. format("and with fewer than %d%% of the queries left the configuration is not comparable). ",
      math.floor(100 * pstats.MIN_PAIRED_SHARE + 0.5))
    .. "Mean and median with a paired bootstrap "
    .. format("%s CI (%d resamples of queries, seed %s); ratio = Σ this / Σ baseline with its paired CI; ", CI, o.iterations,
      tostring(o.seed))
    .. "sign p = exact two-sided binomial test on the signs of the nonzero differences; calls = model + target + "
    .. "speculator + predicted + warm-up.</caption>"
  h[#h + 1] = '<thead><tr><th scope="col" class="txt">Configuration</th><th scope="col" class="txt">Measure</th>'
    .. '<th scope="col">Pairs</th><th scope="col">Mean Δ</th><th scope="col">' .. CI .. ' CI</th><th scope="col">Median Δ</th>'
    .. '<th scope="col">' .. CI .. ' CI</th><th scope="col">Ratio</th><th scope="col">' .. CI .. ' CI</th>'
    .. '<th scope="col">+ / − / =</th><th scope="col">Sign p</th></tr></thead><tbody>'
  local function ci(lo, hi, d)
    if not (N(lo) and N(hi)) then return nil, "–" end
    return format("%.17g,%.17g", lo, hi), format("[%s, %s]", fnum(lo, d), fnum(hi, d))
  end
  local dropped = {}
  for i = 2, #configs do
    local g = configs[i]
    local p = pstats.paired_records(g.recs, base.recs, { iterations = o.iterations, seed = o.seed })
    if p.comparable and p.failed > 0 then
      dropped[#dropped + 1] = format('<li data-config="%s"><strong>%s</strong>: %d of %d queries left out of the '
        .. "pairs (failed here or in the baseline).</li>", esc(g.label), esc(g.label), p.failed, p.matched)
    end
    if not p.comparable then
      h[#h + 1] = format('<tr class="paired not-comparable" data-config="%s"><th scope="row" class="txt">%s</th>'
        .. '<td class="txt">–</td>%s<td class="txt bad" colspan="8">not comparable: %d of %d queries succeeded in '
        .. "both (fewer than %d%%)</td></tr>", esc(g.label), esc(g.label), td("n", p.n, tostring(p.n)), p.n,
        p.matched, math.floor(100 * pstats.MIN_PAIRED_SHARE + 0.5))
    end
    for _, m in ipairs(p.comparable and pstats.MEASURES or {}) do
      local r = p[m.key]
      local d = m.digits
      local row = {}
      row[#row + 1] = format('<tr class="paired" data-config="%s" data-measure="%s">', esc(g.label), m.key)
      row[#row + 1] = format('<th scope="row" class="txt">%s</th><td class="txt">%s</td>', esc(g.label), m.key)
      row[#row + 1] = td("n", r.n, tostring(r.n))
      row[#row + 1] = td("mean", r.mean, fnum(r.mean, d))
      local v, t = ci(r.mean_lo, r.mean_hi, d)
      row[#row + 1] = td("mean_ci", v, t, "num ci")
      row[#row + 1] = td("median", r.median, fnum(r.median, d))
      v, t = ci(r.median_lo, r.median_hi, d)
      row[#row + 1] = td("median_ci", v, t, "num ci")
      row[#row + 1] = td("ratio", r.ratio, fnum(r.ratio, 3))
      v, t = ci(r.ratio_lo, r.ratio_hi, 3)
      row[#row + 1] = td("ratio_ci", v, t, "num ci")
      row[#row + 1] = td("signs", format("%d,%d,%d", r.pos, r.neg, r.zero), format("%d / %d / %d", r.pos, r.neg, r.zero))
      row[#row + 1] = td("sign_p", r.sign_p, format("%.3g", r.sign_p))
      end_row(h, row)
    end
  end
  local html = end_table(h)
  if #dropped > 0 then html = html .. '\n<ul class="failures" id="paired-dropped">' .. concat(dropped) .. "</ul>" end
  return html
end

-- The verifier lab on a cassette (`--cassette`): one row per verifier, the
-- numbers of `specula verifiers` (res: specula.lab.verifiers.analyse_pairs).
local function verifiers_table(res)
  local h = {}
  local labelled = res.labelled
  h[#h + 1] = '<div class="table-wrap"><table class="summary" id="verifiers-table">'
  h[#h + 1] = format("<caption>%d (candidate, observation) pairs from <code>%s</code>; α = %.3f, β = %s, k = ∞. "
    .. "False accepts: accepted but not <code>exact</code>. RelLat: the theory at p (Corollary 1); replay: the "
    .. "recorded stages of %d quer%s re-scheduled with the verifier's verdicts. Answers unknown: queries where a "
    .. "wrong guess would be committed (the tape never saw what follows it).</caption>",
    #res.pairs, esc(res.source), res.alpha, res.beta and format("%.3f", res.beta) or "–", res.replayed_queries,
    res.replayed_queries == 1 and "y" or "ies")
  h[#h + 1] = '<thead><tr><th scope="col" class="txt">Verifier</th><th scope="col">Accepted</th><th scope="col">p</th>'
    .. '<th scope="col">False accepts</th><th scope="col">RelLat (theory)</th><th scope="col">RelLat (replay)</th>'
    .. '<th scope="col">Answers unknown</th><th scope="col">Errors</th>'
    .. (labelled and '<th scope="col">Label FA</th><th scope="col">Label FR</th><th scope="col">Unlabelled</th>' or "")
    .. "</tr></thead><tbody>"
  for _, r in ipairs(res.rows) do
    local row = {}
    row[#row + 1] = format('<tr class="verifier" data-verifier="%s">', esc(r.verifier))
    row[#row + 1] = format('<th scope="row" class="txt" data-key="verifier">%s</th>', esc(r.verifier))
    row[#row + 1] = td("accepted", r.accepted, tostring(r.accepted))
    row[#row + 1] = td("p", r.p, fnum(r.p, 3))
    row[#row + 1] = td("false_accepts", r.false_accepts, tostring(r.false_accepts), r.false_accepts > 0 and "num bad" or "num")
    row[#row + 1] = td("rel_lat", r.rel_lat, fnum(r.rel_lat, 3))
    row[#row + 1] = td("replay_rel_lat", r.replay_rel_lat, fnum(r.replay_rel_lat, 3), "num strong")
    row[#row + 1] = td("answers_unknown", r.answers.unknown, format("%d of %d", r.answers.unknown, r.answers.queries))
    row[#row + 1] = td("errors", r.errors, tostring(r.errors))
    if r.labels then
      row[#row + 1] = td("label_fa", r.labels.false_accepts, tostring(r.labels.false_accepts))
      row[#row + 1] = td("label_fr", r.labels.false_rejects, tostring(r.labels.false_rejects))
      row[#row + 1] = td("unlabelled", r.labels.unlabelled, tostring(r.labels.unlabelled))
    end
    end_row(h, row)
  end
  return end_table(h)
end

----------------------------------------------------------------------------
-- the page
----------------------------------------------------------------------------

local CSS = [[
:root { --ink: #1d2433; --muted: #5b6475; --rule: #d9dee7; --band: #f6f8fb; --accent: #0072B2; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: #fff;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 28px 16px 60px; }
header { border-bottom: 3px solid var(--accent); margin-bottom: 18px; padding-bottom: 10px; }
h1 { font-size: 26px; margin: 0 0 4px; letter-spacing: -0.01em; }
h2 { font-size: 19px; margin: 34px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--rule); }
.meta, figcaption, .note { color: var(--muted); font-size: 13.5px; }
nav ol { margin: 6px 0 0; padding-left: 20px; columns: 2; font-size: 14px; }
nav a, .meta a { color: var(--accent); text-decoration: none; }
.table-wrap { overflow-x: auto; }
table.summary { border-collapse: collapse; width: 100%; font-size: 12px; font-variant-numeric: tabular-nums; }
table.summary caption { caption-side: bottom; text-align: left; color: var(--muted); padding-top: 6px; font-size: 12.5px; }
table.summary th, table.summary td { padding: 4px 5px; border-bottom: 1px solid var(--rule); white-space: nowrap; }
/* a long configuration name wraps: the table fits a 1280 px window */
table.summary tbody th.txt { white-space: normal; overflow-wrap: anywhere; min-width: 9em; max-width: 15em; }
table.summary thead th { background: var(--band); font-weight: 600; text-align: right; border-bottom: 2px solid #b9c1cf;
  white-space: normal; vertical-align: bottom; line-height: 1.25; }
table.summary tbody tr:nth-child(even) { background: #fbfcfd; }
table.summary .txt { text-align: left; }
table.summary td.num { text-align: right; }
table.summary td.strong { font-weight: 700; }
table.summary td.ci { color: var(--muted); }
table.summary td.bad { color: #C0002A; font-weight: 600; }
table.summary tr.failing th { color: #C0002A; }
.flag { color: #C0002A; font-weight: 700; }
ul.failures { margin: 6px 0 0; padding-left: 0; list-style: none; font-size: 13px; color: #7a0019; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 50%; margin-right: 7px; vertical-align: -1px; }
figure { margin: 10px 0 0; }
figure svg { width: 100%; height: auto; display: block; }
svg text { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; fill: #222; }
svg .tick-label { font-size: 11.5px; fill: #444; }
svg .axis-title { font-size: 12.5px; fill: #222; }
svg .panel-title { font-size: 14px; font-weight: 600; fill: #1d2433; }
svg .annot { font-size: 11.5px; }
svg .stat { font-variant-numeric: tabular-nums; }
svg .legend-label { font-size: 12px; fill: #333; }
svg .lane-label { font-size: 12px; fill: #333; font-weight: 600; }
svg .grid { stroke: #e8ebf0; stroke-width: 1; }
svg .axis-line, svg .tick { stroke: #333; stroke-width: 1; }
.warnings { background: #fff7e6; border: 1px solid #f1d9a6; padding: 8px 12px; border-radius: 4px; font-size: 13px; }
.warnings li { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; }
dl.methods dt { font-weight: 600; margin-top: 8px; }
dl.methods dd { margin: 2px 0 0 0; color: #333; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.92em; background: var(--band); padding: 0 3px; border-radius: 3px; }
]]

local function methods_note(pooled, iterations)
  return concat({
    '<dl class="methods">',
    "<dt>Standard latency</dt><dd>The latency of the same committed trajectory run without speculation: "
      .. "the hops back to back, <code>init + Σ (t_seg + t_target + t_update) + final segment</code>, "
      .. "from the stage times the loop measured (queueing included).</dd>",
    "<dt>RelLat</dt><dd>Relative latency of a configuration: <code>Σ wall / Σ standard</code> over its "
      .. "queries that succeeded (1 = no gain; lower is faster). A failed query is counted (Failed) and left out "
      .. "of every figure: its time is how long it took to fail. "
      .. format("The %s CI resamples queries with replacement (%d resamples, percentile method, fixed seed) ", CI, iterations)
      .. "and recomputes the ratio of sums.</dd>",
    "<dt>p̂, α̂, β̂</dt><dd>p̂ = accepted / (accepted + rejected + failed) over the committed hops whose "
      .. "speculation was judged or failed (a speculator that raised, timed out or returned nothing counts as a miss; "
      .. "late and unspeculated hops carry no evidence and are left out); α̂ = mean t_spec over hops whose speculator "
      .. "returned / mean t_target; β̂ = mean t_seg / mean t_target, each pooled over the hops of a configuration's "
      .. "queries that succeeded (the figure's theory lines "
      .. "pool all configurations" .. (pooled.p_hat and format(": p̂ = %.3f, α̂ = %.3f, β̂ = %.3f", pooled.p_hat,
        pooled.alpha_hat or 0, pooled.beta_hat or 0) or "") .. ").</dd>",
    "<dt>RelLat* and RelLat_k</dt><dd>RelLat* = 1 − p(1 − α)/(1 + β) is the unbounded-thread limit (Corollary 1); "
      .. "RelLat_k = (β + α + (1 − α)(1 − p)/(1 − p^k))/(1 + β) is the bounded-window prediction for k threads "
      .. "(Corollary 3).</dd>",
    "<dt>Stage latencies</dt><dd>t_seg: the model's segment before a tool call; t_target: the real tool call; "
      .. "t_spec: the speculator; t_verify: the verifier. One value per committed hop; μ is the mean and σ the "
      .. "sample standard deviation.</dd>",
    "</dl>" }, "\n")
end

-- The page around the figures (figs: k, stages, stages_summary, panels,
-- timeline, timeline_caption, queries, as the report's main makes them).
local function render(o, configs, records, warnings, pooled, figs)
  local title = o.title or "specula report"
  local nq = #records
  local files = {}
  for _, f in ipairs(o.files) do files[#files + 1] = "<code>" .. esc(f) .. "</code>" end
  local fig_k, fig_st, st_summary, panels = figs.k, figs.stages, figs.stages_summary, figs.panels
  local fig_tl, tl_caption, fig_q = figs.timeline, figs.timeline_caption, figs.queries
  local h = {}
  local function add(s) h[#h + 1] = s end
  add("<!DOCTYPE html>")
  add('<html lang="en"><head><meta charset="utf-8">')
  add('<meta name="viewport" content="width=device-width, initial-scale=1">')
  add("<title>" .. esc(title) .. "</title>")
  add("<style>" .. CSS .. "</style></head><body><main>")
  add("<header><h1>" .. esc(title) .. "</h1>")
  add(format('<p class="meta">%d queries in %d configuration%s, from %s.%s</p></header>', nq, #configs,
    #configs == 1 and "" or "s", concat(files, ", "),
    o.trace and (" Timeline from trace <code>" .. esc(o.trace) .. "</code>.") or ""))
  add('<nav aria-label="Contents"><ol><li><a href="#summary">Summary per configuration</a></li>'
    .. '<li><a href="#fig-k">RelLat against k</a></li><li><a href="#fig-stages">Stage latencies</a></li>'
    .. '<li><a href="#fig-timeline">Timeline of one query</a></li><li><a href="#fig-queries">Per-query RelLat</a></li>'
    .. (figs.verifiers and '<li><a href="#verifiers">Verifiers</a></li>' or "")
    .. '<li><a href="#methods">Methods</a></li></ol></nav>')
  add('<section id="summary"><h2>1. Summary per configuration</h2>')
  add(summary_table(configs))
  add(paired_table(configs, o))
  if #warnings > 0 then
    add(format('<details class="warnings"><summary>%d input line%s skipped</summary><ul>', #warnings,
      #warnings == 1 and "" or "s"))
    for i, w in ipairs(warnings) do
      if i > 50 then add(format("<li>… and %d more</li>", #warnings - 50)) break end
      add("<li>" .. esc(w) .. "</li>")
    end
    add("</ul></details>")
  end
  if o.provenance and #o.provenance > 0 then
    -- one line per distinct run the records came from (specula.provenance)
    add('<details class="warnings" id="provenance" open><summary>Provenance</summary><ul>')
    for _, l in ipairs(o.provenance) do add("<li><code>" .. esc(l) .. "</code></li>") end
    add("</ul></details>")
  end
  add("</section>")
  add('<section id="fig-k"><h2>2. Relative latency against k</h2><figure>')
  add(fig_k)
  local right_end = ""
  for _, g in ipairs(configs) do
    if g.kx == "inf" or g.kx == "auto" then right_end = " (∞ and auto at the right end)" end
  end
  add("<figcaption>Left: RelLat of each configuration (dots) with its bootstrap " .. CI .. " CI (whiskers), against the "
    .. "active-thread limit k" .. right_end .. ". The dashed line is the theoretical RelLat* "
    .. (pooled.rel_lat_star and format("= %.3f ", pooled.rel_lat_star) or "")
    .. "(Corollary 1) at the pooled p̂, α̂, β̂; the dotted curve is RelLat_k (Corollary 3); the grey line is "
    .. "the standard baseline (k = 1) at 1. Right: model, target and speculator calls per query — "
    .. "the compute paid for the latency.</figcaption></figure></section>")
  add('<section id="fig-stages"><h2>3. Stage latencies</h2><figure>')
  add(fig_st)
  local notes = {}
  for _, st in ipairs(panels) do
    local s = st_summary[st.key]
    if s then notes[#notes + 1] = format("%s μ = %s ms, σ = %s ms", st.name, fms(s.mean), fms(s.sd)) end
  end
  if #notes == 0 then notes[1] = "no data: no query that succeeded has stage times" end
  add(format("<figcaption>Distribution of each stage's latency per hop, pooled over all configurations, over the queries that succeeded (%s). "
    .. "The dashed line marks the mean.</figcaption></figure></section>", esc(concat(notes, "; "))))
  add('<section id="fig-timeline"><h2>4. Timeline of one query</h2><figure>')
  if fig_tl then add(fig_tl) end
  add("<figcaption>" .. esc(tl_caption) .. " One lane per window thread; the speculator runs in the upper half "
    .. "of a lane and the target call in the lower half, next to each other.</figcaption></figure></section>")
  add('<section id="fig-queries"><h2>5. Per-query relative latency</h2><figure>')
  add(fig_q)
  add("<figcaption>Each dot is one query's wall / standard latency; boxes span the interquartile range with the "
    .. "median as a bar, whiskers the 5th to 95th percentiles, the diamond the mean of the per-query ratios "
    .. "(the table's RelLat is the ratio of sums, which weighs long queries more).</figcaption></figure></section>")
  if figs.verifiers then
    add('<section id="verifiers"><h2>6. Verifiers</h2>')
    add(verifiers_table(figs.verifiers))
    add("</section>")
  end
  add('<section id="methods"><h2>Methods</h2>')
  add(methods_note(pooled, o.iterations))
  add("</section></main></body></html>")
  return concat(h, "\n") .. "\n"
end
M.render = render
M.CSS = CSS   -- the whatif page (specula.report.whatif) shares the look

return M
