-- A failed query is never a data point: one configuration of a
-- --compare run fails 6 of its 8 queries, and every surface — the table,
-- --summary, `specula compare` and `specula report` — counts them, takes its
-- figures over the queries that succeeded, pairs only queries that succeeded
-- in both, says "not comparable" when too few pairs remain, and exits 3
-- saying why.
local H = require "support.helpers"
local cjson = require "cjson"
local EX = H.root .. "/examples/multihop_sim.lua"

-- The simulated agent of these specs, whose search tool raises when FAILS
-- holds: a Lua expression over id (the query's id), n (how many times the
-- query has started: the configurations of --compare run one after another
-- in list order), c (its search calls so far, this one included) and
-- FAIL_IDS (the ids in $FAIL_IDS, comma-separated).
local function failing_agent(fails)
  return [[
local specula = require "specula"
local a = specula.sim.multihop { hops = 3, p = 0.6, seg = { "lognormal", 10, 0.3 },
  spec = { "lognormal", 5, 0.3 }, target = { "lognormal", 60, 0.4 } }
local FAIL_IDS = {}
for id in (os.getenv("FAIL_IDS") or ""):gmatch("[^,]+") do FAIL_IDS[id] = true end
local seen, calls = {}, {}
local init = a.init
a.init = function(q, ctx)
  seen[ctx.id] = (seen[ctx.id] or 0) + 1
  return init(q, ctx)
end
local call = a.tools.search.call
a.tools.search.call = function(args, ctx)
  calls[ctx.id] = (calls[ctx.id] or 0) + 1
  local id, n, c = ctx.id, seen[ctx.id], calls[ctx.id]
  if ]] .. fails .. [[ then error("search backend down for " .. id) end
  return call(args, ctx)
end
return a
]]
end

-- q1..q6 fail the second time they start: the second configuration (and
-- only it) fails those six.
local AGENT = failing_agent('n == 2 and id:match("^q[1-6]$")')

local function input(n)
  local t = {}
  for i = 1, n do t[i] = cjson.encode({ id = "q" .. i, query = "question " .. i }) end
  return H.tmpfile("fq_in.jsonl", table.concat(t, "\n") .. "\n")
end

local COMPARE = "sequential,spechop:k=inf:verifier=jaccard:0.5:label=broken,spechop:k=2"

-- One run for the file: its records, table, summary and stderr.
local fx
local function fixture()
  if fx then return fx end
  local agent = H.tmpfile("fq_agent.lua", AGENT)
  local out, sum = H.tmpfile("fq_out.jsonl"), H.tmpfile("fq_sum.json")
  os.remove(out)
  local st, tbl, err = H.specula({ "run", agent, "--input", input(8), "--clock", "virtual", "--compare", COMPARE,
    "--out", out, "--summary", sum })
  fx = { agent = agent, out = out, st = st, tbl = tbl, err = err, sum = cjson.decode(H.read(sum)),
         recs = H.jsonl(H.read(out)) }
  return fx
end

-- Σ wall / Σ standard and the walls of a configuration's records that succeeded.
local function ok_figures(recs, config)
  local w, s, n, failed = 0, 0, 0, 0
  for _, r in ipairs(recs) do
    if r.config == config then
      if r.error ~= nil then failed = failed + 1
      else w, s, n = w + r.stats.wall_ms, s + r.stats.standard_ms, n + 1 end
    end
  end
  return { rel_lat = w / s, mean = w / n, ok = n, failed = failed }
end

local function close(a, b) return math.abs(a - b) <= 1e-9 * math.max(1, math.abs(b)) end

-- The table's row of a configuration: n ok, failed, RelLat.
local function table_row(tbl, name)
  for l in tbl:gmatch("[^\n]+") do
    local nok, failed, rel = l:match("^" .. name:gsub("%p", "%%%0") .. "%s+(%d+)%s+(%d+!?)%s+[%d.]+%s+[%d.]+%s+"
      .. "[%d.]+%s+[%d.]+%s+(%d%.%d+) %[")
    if nok then return { ok = tonumber(nok), failed = failed, rel_lat = tonumber(rel) } end
  end
end

describe("a failed query is never a data point", function()
  it("run --compare: the table counts n ok and failed, flags the configuration, and pairs only what both answered", function()
    local f = fixture()
    assert.equals(3, f.st, f.err)
    -- the records: the second configuration failed 6 queries, the others none
    local broken = ok_figures(f.recs, "broken")
    assert.equals(2, broken.ok)
    assert.equals(6, broken.failed)
    assert.equals(0, ok_figures(f.recs, "sequential").failed)
    assert.matches("configuration%s+n ok failed%s+mean", f.tbl)
    local row = table_row(f.tbl, "broken")
    assert.is_not_nil(row, f.tbl)
    assert.equals(2, row.ok)
    assert.equals("6!", row.failed)
    assert.equals(string.format("%.3f", broken.rel_lat), string.format("%.3f", row.rel_lat))
    local seq = table_row(f.tbl, "sequential")
    assert.same({ ok = 8, failed = "0", rel_lat = 1 }, seq)
    assert.matches("! broken: 6 of 8 queries failed; its row is over the 2 that succeeded", f.tbl, 1, true)
    -- the paired block: no numbers for broken, the full 8 pairs for k=2
    assert.matches("\nbroken%s+%-%s+2  not comparable: 2 of 8 queries succeeded in both %(fewer than 80%%%)", f.tbl)
    assert.is_nil(f.tbl:find("\nbroken%s+wall_ms"), "broken has paired numbers:\n" .. f.tbl)
    assert.matches("\nspechop:k=2%s+wall_ms%s+8%s", f.tbl)
    -- stderr says why the status is 3
    assert.matches("specula: exit 3: 6 queries failed (broken: 6 of 8); the table counts only the queries that "
      .. "succeeded", f.err, 1, true)
    assert.matches("specula: broken against sequential: not comparable: 2 of 8 queries succeeded in both", f.err, 1, true)
  end)

  it("--summary: ok, failed, figures over the queries that succeeded, paired n and comparable", function()
    local f = fixture()
    local by = {}
    for _, r in ipairs(f.sum) do by[r.config] = r end
    local b = by.broken
    assert.equals(8, b.queries)
    assert.equals(2, b.ok)
    assert.equals(6, b.failed)
    local e = ok_figures(f.recs, "broken")
    assert.is_true(close(b.rel_lat, e.rel_lat), b.rel_lat .. " vs " .. e.rel_lat)
    assert.is_true(close(b.mean, e.mean))
    assert.is_true(b.rel_lat_lo <= b.rel_lat and b.rel_lat <= b.rel_lat_hi)
    -- agreement with sequential too: over the 2 that answered (they agree), not 2 of 8
    assert.equals(1, b.agreement)
    assert.same({ baseline = "sequential", comparable = false, failed = 6, matched = 8, n = 2 }, b.paired)
    local k2 = by["spechop:k=2"].paired
    assert.is_true(k2.comparable)
    assert.equals(8, k2.n)
    assert.equals(8, k2.wall_ms.n)
  end)

  it("specula compare: the same table, exit 3 and why on stderr", function()
    local f = fixture()
    local sum = H.tmpfile("fq_csum.json")
    local st, tbl, err = H.specula({ "compare", f.out, "--summary", sum })
    assert.equals(3, st, err)
    assert.equals(f.tbl, tbl)
    assert.matches("specula compare: exit 3: 6 queries failed (broken: 6 of 8)", err, 1, true)
    assert.matches("specula compare: broken against sequential: not comparable: 2 of 8", err, 1, true)
    local rows = cjson.decode(H.read(sum))
    assert.equals(2, rows[2].ok)
    assert.equals(6, rows[2].failed)
    assert.is_false(rows[2].paired.comparable)
    -- with broken as the baseline, every other configuration is not comparable
    local st2, tbl2 = H.specula({ "compare", f.out, "--baseline", "broken" })
    assert.equals(3, st2)
    assert.matches("\nsequential%s+%-%s+2  not comparable", tbl2)
  end)

  it("specula report: OK and Failed, figures over the queries that succeeded, not comparable, axes from 0", function()
    local f = fixture()
    local html_path = H.tmpfile("fq_report.html")
    local st, _, err = H.specula({ "report", f.out, "-o", html_path })
    assert.equals(0, st, err)
    assert.matches("specula report: 6 queries failed (broken: 6 of 8); the page counts only the queries that "
      .. "succeeded", err, 1, true)
    local html = H.read(html_path)
    local body = html:match('<tr class="config failing" data%-config="broken">(.-)</tr>')
    assert.is_not_nil(body, "the broken row is not flagged")
    assert.matches('class="flag"', body, 1, true)
    local cell = {}
    for key, val in body:gmatch('data%-key="([^"]+)" data%-value="([^"]*)"') do cell[key] = val end
    assert.equals("8", cell.queries)
    assert.equals("2", cell.ok)
    assert.equals("6", cell.failed)
    local e = ok_figures(f.recs, "broken")
    assert.is_true(close(tonumber(cell.rel_lat), e.rel_lat), cell.rel_lat .. " vs " .. e.rel_lat)
    assert.is_true(close(tonumber(cell.mean_wall), e.mean))
    assert.matches("broken</strong>: 6 of 8 queries failed; its row is over the 2 that succeeded", html, 1, true)
    assert.matches('<tr class="paired not%-comparable" data%-config="broken">.-not comparable: 2 of 8 queries '
      .. "succeeded in both", html)
    assert.is_nil(html:find('<tr class="paired" data-config="broken"', 1, true))
    -- the RelLat axes start at 0 or above
    for _, id in ipairs({ "fig-k-svg", "fig-queries-svg" }) do
      local svg = html:match('<svg[^>]-id="' .. id:gsub("%-", "%%-") .. '".-</svg>')
      assert.is_not_nil(svg, id)
      for v in svg:gmatch('class="tick%-label"[^>]*>([^<]*)<') do
        local x = tonumber(v)
        if x then assert.is_true(x >= 0, id .. " has a tick at " .. v) end
      end
    end
    -- the methods note defines p̂ as docs/cli.md does
    local doc = H.read(H.root .. "/docs/cli.md")
    assert.matches("p̂ = accepted / (accepted + rejected + failed) over the committed hops whose", doc:gsub("\n", " "),
      1, true)
    assert.matches("p̂ = accepted / (accepted + rejected + failed) over the committed hops whose", html, 1, true)
  end)

  it("the report page fits a 1280 px window: no table is clipped", function()
    if H.sh("command -v chromium") ~= 0 then
      return pending("chromium is not installed (apt-get install chromium)")
    end
    local f = fixture()
    -- five configurations, one with a long name, as a sweep has
    local out = H.tmpfile("fq_wide.jsonl")
    os.remove(out)
    local st, _, err = H.specula({ "run", EX, "--input", input(8), "--clock", "virtual", "--out", out, "--compare",
      "sequential,spechop:k=2,spechop:k=3,spechop:k=inf:verifier=jaccard:0.5:spec_launch=slot,window:k=2" })
    assert.equals(0, st, err)
    local html_path = H.tmpfile("fq_wide.html")
    st, _, err = H.specula({ "report", out, f.out, "-o", html_path })
    assert.equals(0, st, err)
    -- a copy of the page with a script that writes what it measured into the DOM
    local probe = H.tmpfile("fq_probe.html", (H.read(html_path):gsub("</body>", "<script>"
      .. "var r = [];document.querySelectorAll('.table-wrap').forEach(function (w) {"
      .. "r.push(w.scrollWidth - w.clientWidth); });"
      .. "r.push(document.documentElement.scrollWidth - document.documentElement.clientWidth);"
      .. "var p = document.createElement('pre'); p.id = 'probe'; p.textContent = 'overflow:' + r.join(',');"
      .. "document.body.appendChild(p);</script></body>")))
    local profile = H.tmpdir() .. "/fq-chromium-" .. tostring(math.random(1e9))
    local cst, dom, cerr = H.sh("chromium --headless --no-sandbox --disable-gpu --disable-background-networking "
      .. "--disable-component-update --no-first-run --user-data-dir=" .. H.quote(profile)
      .. " --window-size=1280,2000 --dump-dom " .. H.quote("file://" .. probe))
    os.execute("rm -rf " .. H.quote(profile))
    assert.equals(0, cst, cerr)
    local list = dom:match('<pre id="probe">overflow:([^<]*)</pre>')
    assert.is_not_nil(list, "no measurement in the DOM")
    local n = 0
    for v in list:gmatch("%-?%d+") do
      n = n + 1
      assert.is_true(tonumber(v) <= 0, "overflow " .. list .. " (table-wraps, then the page)")
    end
    assert.is_true(n >= 3, "measured: " .. list)
  end)

  it("--compare without --out: stdout holds the table only, stderr says the records are not kept", function()
    local st, out, err = H.specula({ "run", EX, "--input", input(8), "--clock", "virtual", "--compare",
      "sequential,spechop:k=2" })
    assert.equals(0, st, err)
    assert.matches("^configuration", out)
    assert.is_nil(out:find("\n{", 1, true), "a record on stdout")
    assert.matches("the records are not kept", err, 1, true)
    -- --out - asks for them there: the records, then the table
    local st2, out2, err2 = H.specula({ "run", EX, "--input", input(2), "--clock", "virtual", "--compare",
      "sequential", "--out", "-" })
    assert.equals(0, st2, err2)
    assert.matches('^{"', out2)
    assert.matches("\nconfiguration%s+n ok", out2)
    -- without --compare, the records are on stdout as before
    local st3, out3 = H.specula({ "run", EX, "--input", input(2), "--clock", "virtual", "--quiet" })
    assert.equals(0, st3)
    assert.equals(2, #H.jsonl(out3))
  end)

  it("long --compare labels keep the columns aligned, with a key under the table", function()
    local long = string.rep("a-very-long-configuration-label-", 2) .. "end"
    local st, out, err = H.specula({ "run", EX, "--input", input(3), "--clock", "virtual", "--compare",
      "sequential,spechop:k=2:label=" .. long })
    assert.equals(0, st, err)
    local lines = {}
    for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
    -- the header and both rows: "RelLat" and the RelLat value start in one column
    local col = lines[1]:find("RelLat [", 1, true)
    assert.is_not_nil(col)
    local rows = 0
    for _, l in ipairs(lines) do
      local at = l:find("%d%.%d%d%d %[")
      if at and not l:find("^%(") and at < 120 then
        rows = rows + 1
        assert.equals(col, at, l)
      end
    end
    assert.equals(2, rows)
    assert.matches("\n[1] " .. long:sub(1, 56), out, 1, true)
    assert.matches("\n[1] = " .. long .. "\n", out, 1, true)
  end)
end)

-- A predictor that raises is switched off for the rest of the run: the
-- queries after it ran without action speculation. Before, their records
-- and the table said nothing of it, and the row read as the predictor's.
describe("specula merge with failed records", function()
  it("says how many of the records it wrote failed", function()
    local f = fixture()
    local out = H.tmpfile("fq_merged.jsonl")
    local st, _, err = H.specula({ "merge", f.out, "--input", input(8), "--out", out })
    assert.equals(0, st, err)
    assert.matches("wrote " .. out .. ": 24 records (6 failed), 3 configurations x 8 queries", err, 1, true)
    -- and nothing is said when none failed
    local q = H.tmpfile("fq_clean_in.jsonl", '{"id":"c1","query":"a"}\n{"id":"c2","query":"b"}\n{"id":"c3","query":"c"}\n')
    local clean = H.tmpfile("fq_clean.jsonl")
    st, _, err = H.specula({ "run", EX, "--input", q, "--clock", "virtual", "--out", clean, "--quiet" })
    assert.equals(0, st, err)
    st, _, err = H.specula({ "merge", clean, "--input", q, "--out", H.tmpfile("fq_merged2.jsonl") })
    assert.equals(0, st, err)
    assert.matches(": 3 records, 1 configuration x 3 queries", err, 1, true)
  end)
end)

describe("a predictor that raises on one query", function()
  it("keeps every record, marks the queries that ran without it, and the table says so", function()
    local agent = H.tmpfile("fq_pagent.lua", "local specula = require 'specula'\n"
      .. "return specula.sim.multihop { hops = 3, p = 0.6, seg = { 'lognormal', 10, 0.3 },\n"
      .. "  spec = { 'lognormal', 5, 0.3 }, target = { 'lognormal', 60, 0.4 } }\n")
    local pred = H.tmpfile("fq_pred.lua", "return function(history, ctx)\n"
      .. "  if ctx.id == 'q3' then error('predictor broke on q3') end\n"
      .. "  return { { tool = 'search', args = { q = 'x' }, confidence = 0.9 } }\nend\n")
    local out = H.tmpfile("fq_pout.jsonl")
    os.remove(out)
    local st, tbl, err = H.specula({ "run", agent, "--input", input(6), "--clock", "virtual", "--concurrency", "1",
      "--compare", "sequential,spechop:k=inf:predictor=" .. pred .. ":label=pred", "--out", out })
    assert.are.equal(0, st, err)
    assert.truthy(err:find("fq_pred.lua:2: predictor broke on q3", 1, true), err)
    local recs, off = H.jsonl(H.read(out)), {}
    assert.are.equal(12, #recs)
    for _, r in ipairs(recs) do
      assert.is_nil(r.error, r.id)
      if r.config == "pred" then off[r.id] = r.stats.prefetch.predictor_off == true end
    end
    assert.are.same({ q1 = false, q2 = false, q3 = true, q4 = true, q5 = true, q6 = true }, off)
    local note = "! pred: its predictor raised and was off for all or part of 4 of 6 queries"
    assert.truthy(tbl:find(note, 1, true), tbl)
    local cst, ctbl = H.specula({ "compare", out })
    assert.are.equal(0, cst)
    assert.truthy(ctbl:find(note, 1, true), ctbl)
    -- the summary and the HTML report say it too (they read the same records)
    local summary = H.tmpfile("fq_psummary.json")
    assert.are.equal(0, (H.specula({ "compare", out, "--summary", summary })))
    local rows = {}
    for _, r in ipairs(cjson.decode(H.read(summary))) do rows[r.config] = r end
    assert.are.equal(4, rows.pred.predictor_off)
    assert.is_nil(rows.sequential.predictor_off)
    local html = H.tmpfile("fq_preport.html")
    local rst, _, rerr = H.specula({ "report", out, "-o", html })
    assert.are.equal(0, rst, rerr)
    local page = H.read(html)
    assert.truthy(page:find('<li data-config="pred" class="predictor-off">', 1, true), "no predictor note in the report")
    assert.truthy(page:find("was off for all or part of 4 of 6 queries", 1, true))
    assert.falsy(page:find('data-config="sequential" class="predictor-off"', 1, true))
  end)
end)

-- The simulated agent whose search tool raises for the query ids in
-- FAIL_IDS (comma-separated), every time they run.
local FAIL_AGENT = failing_agent("FAIL_IDS[id]")

-- `specula run` without --compare: its records and the summary on stderr.
local function run_failing(ids, extra)
  local agent = H.tmpfile("fq_fagent.lua", FAIL_AGENT)
  local out = H.tmpfile("fq_fout.jsonl")
  os.remove(out)
  local args = { "run", agent, "--input", input(4), "--clock", "virtual", "--out", out }
  for _, a in ipairs(extra or {}) do args[#args + 1] = a end
  local st, _, err = H.specula(args, { FAIL_IDS = ids })
  return st, err, H.jsonl(H.read(out)), out
end

-- A results file of recs edited as another tool might: without provenance,
-- under the configuration name config, each record passed to edit first.
local function edited_file(name, recs, config, edit)
  local lines = {}
  for _, r in ipairs(recs) do
    r.provenance, r.config = nil, config
    if edit then edit(r) end
    lines[#lines + 1] = cjson.encode(r)
  end
  return H.tmpfile(name, table.concat(lines, "\n") .. "\n")
end

-- `specula report` of a results file: the page.
local function report_of(path, extra)
  local html_path = H.tmpfile("fq_page.html")
  local args = { "report", path, "-o", html_path }
  for _, a in ipairs(extra or {}) do args[#args + 1] = a end
  local st, _, err = H.specula(args)
  assert.equals(0, st, err)
  return H.read(html_path)
end

describe("the summary of `specula run` with failed queries", function()
  it("takes RelLat and Σwall over the queries that succeeded, and says how many failed", function()
    local st, err, recs = run_failing("q2,q3")
    assert.equals(3, st, err)
    local w, s, fw = 0, 0, 0
    for _, r in ipairs(recs) do
      if r.error ~= nil then fw = fw + r.stats.wall_ms
      else w, s = w + r.stats.wall_ms, s + r.stats.standard_ms end
    end
    assert.is_true(fw > 0, "the failed queries took no time: the case proves nothing")
    local rel, sw, ss = err:match("specula: 4 queries %(2 failed%), %d+ hops; RelLat ([%d.]+) %(Σwall ([%d.]+) ms "
      .. "/ Σstandard ([%d.]+) ms%)")
    assert.is_not_nil(rel, err)
    assert.equals(string.format("%.3f", w / s), rel)
    assert.equals(string.format("%.1f", w), sw)
    assert.equals(string.format("%.1f", s), ss)
    assert.matches("! 2 of 4 queries failed; every figure but the counts of queries is over the 2 that succeeded",
      err, 1, true)
    -- and why, from the first failed record (the summary alone said how many)
    local first
    for _, r in ipairs(recs) do if r.error ~= nil then first = first or r end end
    assert.equals("q2", first.id)
    assert.matches("\n  first failure: query 'q2': [^\n]*search backend down for q2 %(each failed record holds its own "
      .. "error%)\n", err)
    assert.truthy(first.error:find("search backend down for q2", 1, true), first.error)
  end)

  it("one query that succeeded: its figures alone", function()
    local st, err, recs = run_failing("q2,q3,q4")
    assert.equals(3, st, err)
    local ok
    for _, r in ipairs(recs) do if r.error == nil then assert.is_nil(ok); ok = r end end
    local rel, sw = err:match("specula: 4 queries %(3 failed%), %d+ hops; RelLat ([%d.]+) %(Σwall ([%d.]+) ms")
    assert.equals(string.format("%.3f", ok.stats.wall_ms / ok.stats.standard_ms), rel, err)
    assert.equals(string.format("%.1f", ok.stats.wall_ms), sw)
    -- the calls are the one query's
    local c = ok.stats.calls
    assert.matches(string.format("calls: model %d, target %d, speculator %d,", c.model, c.target, c.speculator), err,
      1, true)
  end)

  -- the error's first line only, a long one cut, and a secret in it never
  -- shown (a cut secret would not be recognised: scrubbed where the error
  -- is made, and again before the cut)
  it("the first failure's line: one line, at most 300 bytes, a secret in it scrubbed", function()
    local agent = H.tmpfile("fq_secret_agent.lua", [[
local specula = require "specula"
local a = specula.sim.multihop { hops = 2, p = 0.5, seg = { "fixed", 1 }, spec = { "fixed", 1 }, target = { "fixed", 2 } }
a.tools.search.call = function(args, ctx)
  error(string.rep("x", 280) .. " key=" .. os.getenv("FQ_KEY") .. " and more\nsecond line")
end
return a
]])
    local st, _, err = H.specula({ "run", agent, "--input", input(2), "--clock", "virtual", "--secret-env", "FQ_KEY" },
      { FQ_KEY = "sk-fq-0123456789abcdef0123" })
    assert.equals(3, st, err)
    local line = err:match("\n(  first failure: query 'q1': [^\n]*)\n")
    assert.is_truthy(line, err)
    assert.is_nil(err:find("sk-fq-", 1, true), err)
    assert.is_nil(err:find("second line", 1, true), err)
    assert.matches("%.%.%. %(each failed record holds its own error%)$", line)
  end)

  it("--progress: the running RelLat leaves the failed queries out and counts them", function()
    local st, err, recs = run_failing("q2,q3", { "--progress", "--concurrency", "1" })
    assert.equals(3, st, err)
    local w, s = 0, 0
    for _, r in ipairs(recs) do
      if r.error == nil then w, s = w + r.stats.wall_ms, s + r.stats.standard_ms end
    end
    local rel = err:match("4/4 [^\r\n]-RelLat ([%d.]+) %(2 failed, not in it%)")
    assert.is_not_nil(rel, err)
    assert.equals(string.format("%.3f", w / s), rel)
  end)

  it("every query failed: no data, not a row of zeros", function()
    local st, err = run_failing("q1,q2,q3,q4")
    assert.equals(3, st, err)
    assert.matches("specula: 4 queries (4 failed): no data, every query failed", err, 1, true)
    assert.matches("\n  first failure: query 'q1': [^\n]*search backend down for q1 %(each", err)
    assert.is_nil(err:find("stack traceback", 1, true), err)
    assert.is_nil(err:find("Σwall", 1, true), err)
    assert.is_nil(err:find("calls: model", 1, true), err)
  end)
end)

-- --compare where the second configuration fails every query and the third
-- all but q1: the agent's search tool raises on a query's second start, and
-- on its third unless it is q1 (the configurations run in list order).
local ALL_AGENT = failing_agent('n == 2 or (n == 3 and id ~= "q1")')

local afx
local function all_failed_fixture()
  if afx then return afx end
  local agent = H.tmpfile("fq_aagent.lua", ALL_AGENT)
  local out, sum = H.tmpfile("fq_aout.jsonl"), H.tmpfile("fq_asum.json")
  os.remove(out)
  local st, tbl, err = H.specula({ "run", agent, "--input", input(4), "--clock", "virtual", "--concurrency", "1",
    "--compare", "sequential,spechop:k=inf:label=allfail,spechop:k=2:label=one", "--out", out, "--summary", sum })
  afx = { out = out, st = st, tbl = tbl, err = err, sum = cjson.decode(H.read(sum)), recs = H.jsonl(H.read(out)) }
  return afx
end

-- The table's line of a configuration, split on blanks.
local function table_cells(tbl, name)
  for l in tbl:gmatch("[^\n]+") do
    if l:sub(1, #name + 1) == name .. " " then
      local t = {}
      for c in l:gmatch("%S+") do t[#t + 1] = c end
      return t
    end
  end
end

describe("a configuration whose queries all failed, and one with a single success", function()
  it("run --compare: the all-failed row has no figure, not zeros, and says so", function()
    local f = all_failed_fixture()
    assert.equals(3, f.st, f.err)
    local failed = {}
    for _, r in ipairs(f.recs) do if r.error ~= nil then failed[r.config] = (failed[r.config] or 0) + 1 end end
    assert.same({ allfail = 4, one = 3 }, failed)
    -- configuration, n ok, failed, then every figure "-"
    local c = table_cells(f.tbl, "allfail")
    assert.is_not_nil(c, f.tbl)
    assert.same({ "allfail", "0", "4!" }, { c[1], c[2], c[3] })
    for i = 4, #c do assert.equals("-", c[i], "column " .. i .. " of the all-failed row:\n" .. f.tbl) end
    assert.matches("! allfail: all 4 queries failed; its row has no data", f.tbl, 1, true)
    assert.matches("\nallfail%s+%-%s+0  not comparable: 0 of 4 queries succeeded in both", f.tbl)
    -- --summary: no figure either, the counts only
    local row = f.sum[2]
    assert.equals("allfail", row.config)
    for _, k in ipairs({ "mean", "p50", "rel_lat", "model_per_q", "target_per_q", "spec_per_q", "cancelled",
                         "wasted_calls", "wasted_cost", "agreement" }) do
      assert.is_nil(row[k], k .. " in the all-failed row")
    end
    assert.same({ 0, 4, 4 }, { row.ok, row.failed, row.queries })
    -- specula compare prints the same table
    local st, tbl = H.specula({ "compare", f.out })
    assert.equals(3, st)
    assert.equals(f.tbl, tbl)
  end)

  it("run --compare: the row of one success is that query's figures", function()
    local f = all_failed_fixture()
    local q1
    for _, r in ipairs(f.recs) do if r.config == "one" and r.error == nil then assert.is_nil(q1); q1 = r end end
    assert.equals("q1", q1.id)
    local row = f.sum[3]
    assert.equals("one", row.config)
    assert.same({ 1, 3 }, { row.ok, row.failed })
    assert.equals(q1.stats.wall_ms, row.mean)
    assert.is_true(close(row.rel_lat, q1.stats.wall_ms / q1.stats.standard_ms))
    assert.equals(q1.stats.calls.model, row.model_per_q)
    assert.equals(q1.stats.calls.target, row.target_per_q)
    assert.equals(q1.stats.cancelled.total, row.cancelled)
    assert.matches("! one: 3 of 4 queries failed; its row is over the 1 that succeeded", f.tbl, 1, true)
    -- one query is no interval: not one of width 0
    assert.is_nil(row.rel_lat_lo)
    assert.is_nil(row.rel_lat_hi)
    local c = table_cells(f.tbl, "one")
    assert.same({ string.format("%.3f", row.rel_lat), "[-,", "-]" }, { c[8], c[9], c[10] })
  end)

  it("one query in both: the paired differences have their estimates and no intervals", function()
    local out, sum = H.tmpfile("fq_one.jsonl"), H.tmpfile("fq_one_sum.json")
    os.remove(out)
    local st, tbl, err = H.specula({ "run", EX, "--input", input(1), "--clock", "virtual", "--compare",
      "sequential,spechop:k=2", "--out", out, "--summary", sum })
    assert.equals(0, st, err)
    local p = cjson.decode(H.read(sum))[2].paired
    assert.is_true(p.comparable)
    assert.equals(1, p.wall_ms.n)
    assert.is_number(p.wall_ms.mean)
    for _, k in ipairs({ "mean_lo", "mean_hi", "median_lo", "median_hi", "ratio_lo", "ratio_hi" }) do
      assert.is_nil(p.wall_ms[k], k)
    end
    assert.matches("\nspechop:k=2%s+wall_ms%s+1  %S+ %[%-, %-%]%s+%S+ %[%-, %-%]%s+[%d.]+ %[%-, %-%]", tbl)
    -- the report: the same
    local html = report_of(out)
    assert.matches('data%-measure="wall_ms">.-data%-key="mean_ci" data%-value="">–<', html)
    assert.matches('data%-key="rel_lat_ci" data%-value="">–<', html)
  end)

  it("specula report: the all-failed row and figures say no data, not 0 calls and 0 commits", function()
    local f = all_failed_fixture()
    local html_path = H.tmpfile("fq_areport.html")
    local st, _, err = H.specula({ "report", f.out, "-o", html_path })
    assert.equals(0, st, err)
    local html = H.read(html_path)
    local function cells(name)
      local body = html:match('<tr class="config[^"]*" data%-config="' .. name .. '">(.-)</tr>')
      assert.is_not_nil(body, name)
      local t = {}
      for key, val, text in body:gmatch('data%-key="([^"]+)" data%-value="([^"]*)">([^<]*)<') do
        t[key] = { value = val, text = text }
      end
      return t
    end
    local a = cells("allfail")
    assert.same({ "4", "0", "4" }, { a.queries.value, a.ok.value, a.failed.value })
    for _, k in ipairs({ "mean_wall", "rel_lat", "p_hat", "commits", "rollbacks", "calls_per_query" }) do
      assert.same({ value = "", text = "–" }, a[k], k)
    end
    assert.matches("<strong>allfail</strong>: all 4 queries failed; its row has no data.", html, 1, true)
    -- the RelLat-against-k figure and its calls panel: no point, no bars, a note
    local svg = html:match('<svg[^>]-id="fig%-k%-svg".-</svg>')
    assert.matches("! allfail: no data (4 of 4 failed)", svg, 1, true)
    assert.is_nil(svg:find("allfail: 0.00 model calls per query", 1, true), "bars of 0 for allfail")
    assert.matches("allfail: all 4 queries failed", svg, 1, true)
    -- the single success: its own calls
    local q1
    for _, r in ipairs(f.recs) do if r.config == "one" and r.error == nil then q1 = r end end
    local o = cells("one")
    local c = q1.stats.calls
    assert.equals(string.format("%.1f · %.1f · %.1f", c.model, c.target, c.speculator), o.calls_per_query.text)
    assert.equals(tostring(q1.stats.commits), o.commits.value)
  end)
end)

describe('"error": null in a results file', function()
  it("is no error: compare counts the query as answered, as the paired differences and the report do", function()
    local st, err, recs = run_failing("q2")
    assert.equals(3, st, err)
    -- the same records twice, without provenance (an edited file): once
    -- with "error": null on the queries that answered, once without the key
    local with_null, without = {}, {}
    for _, r in ipairs(recs) do
      r.provenance, r.config = nil, "c"
      without[#without + 1] = cjson.encode(r)
      if r.error == nil then r.error = cjson.null end
      with_null[#with_null + 1] = cjson.encode(r)
    end
    assert.matches('"error":null', with_null[1], 1, true)
    local a = H.tmpfile("fq_null.jsonl", table.concat(with_null, "\n") .. "\n")
    local b = H.tmpfile("fq_nokey.jsonl", table.concat(without, "\n") .. "\n")
    local sa, sb = H.tmpfile("fq_null_sum.json"), H.tmpfile("fq_nokey_sum.json")
    local st_a, tbl_a, err_a = H.specula({ "compare", a, "--summary", sa })
    local st_b, tbl_b = H.specula({ "compare", b, "--summary", sb })
    assert.equals(3, st_b)
    assert.equals(3, st_a, err_a)
    assert.equals(tbl_b, tbl_a)
    local ra, rb = cjson.decode(H.read(sa))[1], cjson.decode(H.read(sb))[1]
    assert.same({ 3, 1 }, { ra.ok, ra.failed })
    assert.same(rb, ra)
    assert.matches("specula compare: exit 3: 1 query failed (c: 1 of 4)", err_a, 1, true)
    -- the report reads the file the same way
    local html_path = H.tmpfile("fq_null.html")
    local rst, _, rerr = H.specula({ "report", a, "-o", html_path })
    assert.equals(0, rst, rerr)
    assert.matches('data%-key="ok" data%-value="3"', H.read(html_path))
  end)
end)

-- The agent whose search tool raises on its third call for the ids in
-- FAIL_IDS: those queries fail after two hops, with their stage times.
local MID_AGENT = failing_agent("FAIL_IDS[id] and c >= 3")

describe("the report's stage histograms and timeline with failed queries", function()
  it("pool the stage times of the queries that succeeded only", function()
    local agent = H.tmpfile("fq_magent.lua", MID_AGENT)
    local out = H.tmpfile("fq_mout.jsonl")
    os.remove(out)
    local st, _, err = H.specula({ "run", agent, "--input", input(4), "--clock", "virtual", "--mode", "sequential",
      "--out", out }, { FAIL_IDS = "q2,q3" })
    assert.equals(3, st, err)
    local ok_t, all_t = {}, {}
    for _, r in ipairs(H.jsonl(H.read(out))) do
      for _, h in ipairs(r.stages.hops) do
        all_t[#all_t + 1] = h.t_target
        if r.error == nil then ok_t[#ok_t + 1] = h.t_target end
      end
    end
    local function mean(xs) local s = 0 for _, x in ipairs(xs) do s = s + x end return s / #xs end
    assert.is_true(#all_t > #ok_t, "no failed query has stage times: the case proves nothing")
    local want, wrong = string.format("%.1f", mean(ok_t)), string.format("%.1f", mean(all_t))
    assert.are_not.equal(want, wrong)
    local html = report_of(out)
    local mu = html:match("t_target μ = ([%d.]+) ms")
    assert.equals(want, mu)
  end)

  it("the timeline's example is a query that succeeded (a failed one only by --query)", function()
    local out = H.tmpfile("fq_tout.jsonl")
    os.remove(out)
    local st, _, err = H.specula({ "run", EX, "--input", input(4), "--clock", "virtual", "--out", out })
    assert.equals(0, st, err)
    -- the query the timeline draws, marked failed in an edited copy
    local before = report_of(out)
    local id = before:match("Query (q%d) “")
    assert.is_not_nil(id)
    local lines = {}
    for _, r in ipairs(H.jsonl(H.read(out))) do
      r.provenance = nil
      if r.id == id then r.error = "marked failed" end
      lines[#lines + 1] = cjson.encode(r)
    end
    local edited = H.tmpfile("fq_tedited.jsonl", table.concat(lines, "\n") .. "\n")
    local after = report_of(edited)
    local drawn = after:match("Query (q%d) “")
    assert.is_not_nil(drawn)
    assert.are_not.equal(id, drawn)
    assert.equals(id, report_of(edited, { "--query", id }):match("Query (q%d) “"))
  end)

  it("every query failed: no histogram data and no timeline, said so", function()
    local st, err, _, out = run_failing("q1,q2,q3,q4")
    assert.equals(3, st, err)
    local html = report_of(out)
    assert.matches("over the queries that succeeded (no data: no query that succeeded has stage times)", html, 1, true)
    assert.matches("Every query with stage times failed, so no timeline is drawn", html, 1, true)
  end)
end)

-- q1 and q2 without a standard time (no hop: stats.rel_lat null)
local function no_std_q1_q2(r)
  if r.id == "q1" or r.id == "q2" then r.stats.standard_ms, r.stats.rel_lat = 0, cjson.null end
end

describe("queries whose standard latency is 0 (stats.rel_lat null)", function()
  it("a configuration with Σ standard = 0 has no RelLat in compare, as in the report, not 0.000", function()
    local st, err, recs = run_failing("")
    assert.equals(0, st, err)
    local path = edited_file("fq_nostd.jsonl", recs, "nostd", function(r)
      r.stats.standard_ms, r.stats.rel_lat = 0, cjson.null
    end)
    local sum = H.tmpfile("fq_nostd_sum.json")
    local cst, tbl, cerr = H.specula({ "compare", path, "--summary", sum })
    assert.equals(0, cst, cerr)
    local c = table_cells(tbl, "nostd")
    assert.is_not_nil(c, tbl)
    assert.equals("-", c[8], tbl)   -- the RelLat column, after n ok, failed and the four latencies
    local row = cjson.decode(H.read(sum))[1]
    assert.is_nil(row.rel_lat)
    assert.is_nil(row.rel_lat_lo)
    assert.equals(4, row.ok)
    local html = report_of(path)
    assert.matches('data%-key="rel_lat" data%-value="">–<', html)
  end)

  it("the report's per-query figure counts the queries that have no ratio, instead of dropping them unsaid", function()
    local st, err, recs = run_failing("")
    assert.equals(0, st, err)
    local html = report_of(edited_file("fq_half.jsonl", recs, "half", no_std_q1_q2))
    local svg = html:match('<svg[^>]-id="fig%-queries%-svg".-</svg>')
    assert.matches("2 of 4 without a ratio (standard time 0)", svg, 1, true)
    assert.matches("half: 2 queries; median", svg, 1, true)
  end)

  it("a resample of queries without a standard time is no RelLat of 0: the interval is [lo, inf], in compare and report", function()
    local st, err, recs = run_failing("")
    assert.equals(0, st, err)
    local path = edited_file("fq_half2.jsonl", recs, "half", no_std_q1_q2)
    local sum = H.tmpfile("fq_half2_sum.json")
    local cst, tbl, cerr = H.specula({ "compare", path, "--summary", sum })
    assert.equals(0, cst, cerr)
    local row = cjson.decode(H.read(sum))[1]
    -- 1 resample in 16 draws only q1 and q2: a ratio that does not exist, not 0
    assert.is_true(row.rel_lat_lo > 0, "lower end " .. tostring(row.rel_lat_lo))
    assert.is_nil(row.rel_lat_hi)
    local c = table_cells(tbl, "half")
    assert.same({ string.format("%.3f", row.rel_lat), string.format("[%.3f,", row.rel_lat_lo), "inf]" },
      { c[8], c[9], c[10] })
    local html = report_of(path)
    assert.equals(string.format("[%.3f, inf]", row.rel_lat_lo),
      html:match('data%-key="rel_lat_ci" data%-value="[^"]*">([^<]*)<'))
  end)
end)

describe("EM and F1 with failed queries", function()
  it("score the queries that succeeded only, not a failed record's answer", function()
    local st, err, recs = run_failing("q2")
    assert.equals(3, st, err)
    -- an edited file: the failed record carries an answer equal to its gold,
    -- the others a gold they miss
    local path = edited_file("fq_em.jsonl", recs, "c", function(r)
      if r.error ~= nil then r.answer, r.gold = "paris", { "paris" }
      else r.gold = { "no such answer" } end
    end)
    local sum = H.tmpfile("fq_em_sum.json")
    local cst, _, cerr = H.specula({ "compare", path, "--summary", sum })
    assert.equals(3, cst, cerr)
    local row = cjson.decode(H.read(sum))[1]
    assert.same({ 3, 1 }, { row.ok, row.failed })
    assert.equals(0, row.em)
    assert.equals(0, row.f1)
  end)
end)

describe("a failed record without stats (its query failed before its window ran)", function()
  it("is a failure the report counts in its configuration, not a line it skips", function()
    local st, err, recs = run_failing("q2,q3")
    assert.equals(3, st, err)
    local lines = {}
    for _, r in ipairs(recs) do
      if r.error ~= nil then r.stats, r.stages = nil, nil end
      lines[#lines + 1] = cjson.encode(r)
    end
    local path = H.tmpfile("fq_nostats.jsonl", table.concat(lines, "\n") .. "\n")
    local html_path = H.tmpfile("fq_nostats.html")
    local rst, _, rerr = H.specula({ "report", path, "-o", html_path })
    assert.equals(0, rst, rerr)
    assert.is_nil(rerr:find("line skipped", 1, true), rerr)
    assert.matches("specula report: 2 queries failed (k=3: 2 of 4)", rerr, 1, true)
    local html = H.read(html_path)
    local n = 0
    for _ in html:gmatch('<tr class="config[^"]*" data%-config=') do n = n + 1 end
    assert.equals(1, n)
    local body = html:match('<tr class="config failing" data%-config="k=3">(.-)</tr>')
    assert.is_not_nil(body)
    assert.matches('data%-key="queries" data%-value="4"', body)
    assert.matches('data%-key="failed" data%-value="2"', body)
    -- specula compare counts them the same
    local cst, _, cerr = H.specula({ "compare", path })
    assert.equals(3, cst)
    assert.matches("2 queries failed", cerr, 1, true)
  end)

  it("a failed record whose stats are not numbers is a failure too, not a line skipped", function()
    local st, err, recs = run_failing("q2")
    assert.equals(3, st, err)
    local lines = {}
    for _, r in ipairs(recs) do
      if r.error ~= nil then r.stats.wall_ms, r.stats.standard_ms = cjson.null, "n/a" end
      lines[#lines + 1] = cjson.encode(r)
    end
    local path = H.tmpfile("fq_badstats.jsonl", table.concat(lines, "\n") .. "\n")
    local html_path = H.tmpfile("fq_badstats.html")
    local rst, _, rerr = H.specula({ "report", path, "-o", html_path })
    assert.equals(0, rst, rerr)
    assert.is_nil(rerr:find("line skipped", 1, true), rerr)
    assert.matches("specula report: 1 query failed (k=3: 1 of 4)", rerr, 1, true)
  end)
end)

describe("specula.run's aggregate with failed queries", function()
  for _, light in ipairs({ false, true }) do
    it((light and "light" or "full") .. " records: the sums leave the failed queries out and count them", function()
      local st, out, err = H.run_lua([[
local specula = require "specula"
local json = specula.json
local a = specula.sim.multihop { hops = 3, p = 0.6, seg = { "lognormal", 10, 0.3 },
  spec = { "lognormal", 5, 0.3 }, target = { "lognormal", 60, 0.4 } }
local n = {}
local call = a.tools.search.call
a.tools.search.call = function(args, ctx)
  n[ctx.id] = (n[ctx.id] or 0) + 1
  if (ctx.id == "q2" or ctx.id == "q3") and n[ctx.id] >= 2 then error("down") end
  return call(args, ctx)
end
local recs, agg = specula.run(a, { queries = { { id = "q1", query = "a" }, { id = "q2", query = "b" },
  { id = "q3", query = "c" }, { id = "q4", query = "d" } }, clock = "virtual", light = ]] .. tostring(light) .. [[ })
local ok_wall, fail_wall = 0, 0
for _, r in ipairs(recs) do
  local w = r.wall_ms or r.stats.wall_ms
  if r.error then fail_wall = fail_wall + w else ok_wall = ok_wall + w end
end
print(json.encode({ queries = agg.queries, failed = agg.failed, wall_ms = agg.wall_ms, ok_wall = ok_wall,
  fail_wall = fail_wall }))
]])
      assert.equals(0, st, err)
      local r = H.last_json(out)
      assert.equals(4, r.queries)
      assert.equals(2, r.failed)
      assert.is_true(r.fail_wall > 0, "the failed queries took no time: the case proves nothing")
      assert.is_true(math.abs(r.wall_ms - r.ok_wall) < 0.01, r.wall_ms .. " vs " .. r.ok_wall)
    end)
  end
end)

describe("a comparable configuration with pairs left out", function()
  it("the paired table says how many queries a failure took out of the pairs, beside their numbers", function()
    local agent = H.tmpfile("fq_fagent.lua", FAIL_AGENT)
    local out, sum = H.tmpfile("fq_drop.jsonl"), H.tmpfile("fq_drop_sum.json")
    os.remove(out)
    local st, tbl, err = H.specula({ "run", agent, "--input", input(8), "--clock", "virtual", "--compare",
      "sequential,spechop:k=2", "--out", out, "--summary", sum }, { FAIL_IDS = "q2" })
    assert.equals(3, st, err)
    local p = cjson.decode(H.read(sum))[2].paired
    assert.same({ true, 1, 8, 7 }, { p.comparable, p.failed, p.matched, p.n })
    assert.matches("\nspechop:k=2%s+wall_ms%s+7%s", tbl)
    assert.matches("\n%s+%(1 of 8 queries left out: failed here or in sequential%)\n", tbl)
    local html = report_of(out)
    assert.matches('<ul class="failures" id="paired-dropped"><li data-config="spechop:k=2"><strong>spechop:k=2</strong>: '
      .. "1 of 8 queries left out of the pairs (failed here or in the baseline).</li></ul>", html, 1, true)
  end)
end)
