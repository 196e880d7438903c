-- `specula report`: results files of real runs (the simulated example) into
-- one self-contained HTML page; the numbers, the input errors, and the page
-- as a headless Chromium renders it.
local H = require "support.helpers"
local cjson = require "cjson"

local EXAMPLE = H.root .. "/examples/multihop_sim.lua"

local function count(s, pattern)
  local n = 0
  for _ in s:gmatch(pattern) do n = n + 1 end
  return n
end

local function unescape(s)
  return (s:gsub("&lt;", "<"):gsub("&gt;", ">"):gsub("&quot;", '"'):gsub("&#39;", "'"):gsub("&amp;", "&"))
end

-- Results at k = 1, 2, 3, inf and sequential (plus a trace at k = 3), made
-- once for the whole file.
local fx, fx_err
local function fixture()
  if fx then return fx end
  if fx_err then error(fx_err, 2) end
  local q = {}
  for i = 1, 24 do
    q[i] = cjson.encode({ id = "q" .. i, query = "report <" .. i .. "> & \"quoted\" 'x'" })
  end
  local queries = H.tmpfile("report_queries.jsonl", table.concat(q, "\n") .. "\n")
  local runs = {
    { "k1", { "--k", "1" }, "k=1" },
    { "k2", { "--k", "2" }, "k=2" },
    { "k3", { "--k", "3" }, "k=3" },
    { "kinf", { "--k", "inf" }, "k=inf" },
    { "seq", { "--mode", "sequential" }, "sequential" },
  }
  local f = { files = {}, label = {}, order = {} }
  for _, run in ipairs(runs) do
    local out = H.tmpfile("report_" .. run[1] .. ".jsonl")
    os.remove(out) -- --out appends (resume); start from an empty file
    local args = { "run", EXAMPLE, "--input", queries, "--out", out, "--concurrency", "24", "--quiet" }
    for _, a in ipairs(run[2]) do args[#args + 1] = a end
    if run[1] == "k3" then
      f.trace = H.tmpfile("report_k3.trace.json")
      args[#args + 1] = "--trace"
      args[#args + 1] = f.trace
    end
    local st, _, err = H.specula(args)
    if st ~= 0 then
      local first = (H.read(out) or ""):match("[^\n]*")
      fx_err = string.format("specula run %s failed with status %d: %s %s", run[1], st, err, first:sub(1, 400))
      error(fx_err, 2)
    end
    f.files[run[1]] = out
    f.label[run[1]] = run[3]
    f.order[#f.order + 1] = run[1]
  end
  fx = f
  return f
end

local function records(path)
  return H.jsonl(H.read(path))
end

-- numpy's default (linear) percentile, written out independently here
local function percentile(xs, q)
  local s = {}
  for i, v in ipairs(xs) do s[i] = v end
  table.sort(s)
  local pos = q / 100 * (#s - 1) + 1
  local lo = math.floor(pos)
  if lo >= #s then return s[#s] end
  return s[lo] + (s[lo + 1] - s[lo]) * (pos - lo)
end

-- What the summary table must say about a list of records.
local function expected(recs)
  local e = { queries = #recs, failed = 0, wall = 0, std = 0, commits = 0, rollbacks = 0, acc = 0, rej = 0 }
  local walls = {}
  for i, r in ipairs(recs) do
    if r.error ~= nil then e.failed = e.failed + 1 end
    walls[i] = r.stats.wall_ms
    e.wall, e.std = e.wall + r.stats.wall_ms, e.std + r.stats.standard_ms
    e.commits, e.rollbacks = e.commits + r.stats.commits, e.rollbacks + r.stats.rollbacks
    e.acc, e.rej = e.acc + r.stats.verify.accepted, e.rej + r.stats.verify.rejected
  end
  e.rel_lat = e.wall / e.std
  e.mean_wall = e.wall / #recs
  e.p50, e.p95 = percentile(walls, 50), percentile(walls, 95)
  e.p_hat = (e.acc + e.rej) > 0 and e.acc / (e.acc + e.rej) or nil
  return e
end

-- The summary table: config label -> key -> { value =, text = }, and the
-- labels in row order.
local function table_rows(html)
  local rows, order = {}, {}
  for cfg, body in html:gmatch('<tr class="config" data%-config="([^"]*)">(.-)</tr>') do
    local cells = {}
    for key, val, text in body:gmatch('data%-key="([^"]+)" data%-value="([^"]*)">([^<]*)</td>') do
      cells[key] = { value = unescape(val), text = unescape(text) }
    end
    cfg = unescape(cfg)
    rows[cfg] = cells
    order[#order + 1] = cfg
  end
  return rows, order
end

local function close(a, b, tol)
  return math.abs(a - b) <= (tol or 1e-9) * math.max(1, math.abs(b))
end

local function check_row(row, e, label)
  assert.is_not_nil(row, "no summary row for " .. label)
  assert.equals(e.queries, tonumber(row.queries.value), label .. " queries")
  assert.equals(tostring(e.queries), row.queries.text)
  assert.equals(e.failed, tonumber(row.failed.value), label .. " failed")
  assert.is_true(close(tonumber(row.rel_lat.value), e.rel_lat),
    string.format("%s RelLat %s vs Σwall/Σstandard %.12g", label, row.rel_lat.value, e.rel_lat))
  assert.equals(string.format("%.3f", e.rel_lat), row.rel_lat.text, label .. " RelLat as shown")
  assert.is_true(close(tonumber(row.mean_wall.value), e.mean_wall), label .. " mean wall")
  assert.equals(string.format("%.1f", e.mean_wall), row.mean_wall.text, label .. " mean wall as shown")
  assert.is_true(close(tonumber(row.p50_wall.value), e.p50), label .. " p50")
  assert.is_true(close(tonumber(row.p95_wall.value), e.p95), label .. " p95")
  assert.equals(e.commits, tonumber(row.commits.value), label .. " commits")
  assert.equals(e.rollbacks, tonumber(row.rollbacks.value), label .. " rollbacks")
  if e.p_hat then
    assert.is_true(close(tonumber(row.p_hat.value), e.p_hat), label .. " p̂")
  else
    assert.equals("–", row.p_hat.text, label .. " p̂ is not defined without speculation")
  end
  local lo, hi = row.rel_lat_ci.value:match("^([^,]+),([^,]+)$")
  lo, hi = tonumber(lo), tonumber(hi)
  assert.is_true(lo ~= nil and lo <= e.rel_lat + 1e-12 and e.rel_lat <= hi + 1e-12,
    label .. " the CI contains the estimate: " .. row.rel_lat_ci.value)
end

-- Nothing in the page may load anything: no scripts, stylesheets, images,
-- frames, fonts or imports, and every reference is a fragment of the page.
local function assert_self_contained(html)
  for _, tag in ipairs({ "<script", "<link", "<img", "<iframe", "<object", "<embed", "@import", "@font-face" }) do
    assert.is_nil(html:lower():find(tag, 1, true), "found " .. tag)
  end
  for attr, v in html:gmatch("[%s\"']([%w:]*href)%s*=%s*[\"']([^\"']*)[\"']") do
    assert.equals("#", v:sub(1, 1), attr .. "=" .. v)
  end
  for v in html:gmatch("[%s\"']src%s*=%s*[\"']([^\"']*)[\"']") do
    assert.equals("#", v:sub(1, 1), "src=" .. v)
  end
  for v in html:gmatch("url%(([^)]*)%)") do
    assert.equals("#", v:gsub("^[\"'%s]+", ""):sub(1, 1), "url(" .. v .. ")")
  end
  -- the queries and paths in this spec carry no URL, so none may appear
  assert.is_nil(html:find("https?://"), "network reference in the page")
end

local function report(args)
  local a = { "report" }
  for _, x in ipairs(args) do a[#a + 1] = x end
  return H.specula(a)
end

describe("specula.report.svg", function()
  local svg = require "specula.report.svg"

  it("escapes text and attributes, and drops control characters", function()
    assert.equals("a &lt;b&gt; &amp; &quot;c&quot; &#39;d&#39;", svg.escape("a <b> & \"c\" 'd'"))
    assert.equals("ab\tc", svg.escape("a\1b\tc\27"))
    assert.equals("", svg.escape(nil))
    local c = svg.canvas(100, 50, { id = "t", title = "<T&>" })
    c:text(1, 2, "x<y", { tip = "a&b", text_anchor = "end" })
    c:rect(10, 10, -5, 4, { fill = "#fff" })
    local out = c:render()
    assert.matches('<title id="t-title">&lt;T&amp;&gt;</title>', out, 1, true)
    assert.matches('<text text-anchor="end" x="1" y="2"><title>a&amp;b</title>x&lt;y</text>', out, 1, true)
    assert.matches('<rect fill="#fff" height="4" width="5" x="5" y="10"/>', out, 1, true)
  end)

  it("makes round ticks and linear scales", function()
    assert.same({ 0, 0.2, 0.4, 0.6, 0.8, 1 }, svg.nice_ticks(0, 1, 5))
    assert.same({ 0, 50, 100, 150 }, svg.nice_ticks(0, 170, 4))
    local lo, hi = svg.nice_domain(0.63, 1.02, 6)
    assert.is_true(math.abs(lo - 0.6) < 1e-12 and math.abs(hi - 1.05) < 1e-12)
    local x = svg.linear(0, 10, 100, 200)
    assert.equals(150, x(5))
    assert.equals(5, x:invert(150))
    assert.equals("12.5", svg.num(12.5))
    assert.equals("3", svg.num(3.0001))
    assert.equals("0", svg.num(0 / 0))
  end)
end)

describe("specula report", function()
  it("writes one self-contained page whose summary matches the JSONL", function()
    local f = fixture()
    local out = H.tmpfile("report_all.html")
    local args = {}
    for _, name in ipairs(f.order) do args[#args + 1] = f.files[name] end
    args[#args + 1] = "-o"
    args[#args + 1] = out
    local st, _, err = report(args)
    assert.equals(0, st, err)
    local html = H.read(out)
    assert.is_not_nil(html, "no report written")
    assert.matches("^<!DOCTYPE html>", html)
    -- one inline SVG per figure, each with an accessible title
    assert.equals(4, count(html, "<svg[%s>]"))
    for body in html:gmatch("<svg.-</svg>") do assert.matches("<title", body, 1, true) end
    for _, id in ipairs({ "summary", "fig-k", "fig-stages", "fig-timeline", "fig-queries", "methods" }) do
      assert.matches('<section id="' .. id .. '">', html, 1, true)
    end
    assert_self_contained(html)
    -- every configuration's numbers, recomputed here from its JSONL
    local rows, order = table_rows(html)
    assert.equals(#f.order, #order)
    for _, name in ipairs(f.order) do
      check_row(rows[f.label[name]], expected(records(f.files[name])), f.label[name])
    end
    -- rows go by k: the sequential run and k = 1 first, k = inf last
    assert.same({ "sequential", "k=1", "k=2", "k=3", "k=inf" }, order)
    -- speculation helps: RelLat < 1 at k = inf, 1 without speculation
    assert.is_true(tonumber(rows["k=inf"].rel_lat.value) < 0.95)
    assert.is_true(math.abs(tonumber(rows["sequential"].rel_lat.value) - 1) < 0.01)
    -- figure 2 draws RelLat* as a dashed line and places inf at the right end
    local fig2 = html:match('<svg[^>]*id="fig%-k%-svg".-</svg>')
    assert.matches("RelLat* = ", fig2, 1, true)
    assert.matches('stroke-dasharray="7 5"', fig2, 1, true)
    assert.matches(">∞</text>", fig2, 1, true)
    -- figure 5 annotates mean and σ per stage
    local fig5 = html:match('<svg[^>]*id="fig%-stages%-svg".-</svg>')
    for _, stage in ipairs({ "t_seg", "t_target", "t_spec" }) do assert.matches(stage, fig5, 1, true) end
    assert.is_true(count(fig5, "μ = ") >= 3 and count(fig5, "σ = ") >= 3)
    -- the timeline is reconstructed without a trace, and says so; the query
    -- text it quotes is escaped
    assert.matches("reconstructed, not measured", html, 1, true)
    -- the replay of the stage times re-creates the measured wall time closely
    assert.matches("replayed by the simulation of `specula replay`", html, 1, true)
    local rw, mw = html:match("replayed wall ([%d%.]+) ms against ([%d%.]+) ms measured")
    assert.is_not_nil(rw, "no replayed wall time in the caption")
    assert.is_true(math.abs(tonumber(rw) / tonumber(mw) - 1) <= 0.02, "replayed " .. rw .. " vs measured " .. mw)
    assert.matches("report &lt;%d+&gt; &amp; &quot;quoted&quot; &#39;x&#39;", html)
    assert.is_nil(html:find("report <%d+> &"), "unescaped query text")
  end)

  it("groups records by their config string (as --compare writes them)", function()
    local f = fixture()
    local lines = {}
    local by = { sequential = {}, ["window:k=2"] = {}, ["spechop:k=3"] = {}, ["spechop:k=inf"] = {} }
    for _, pair in ipairs({ { "k1", "sequential" }, { "k3", "spechop:k=3" }, { "kinf", "spechop:k=inf" },
                            { "k2", "window:k=2" } }) do
      for line in H.read(f.files[pair[1]]):gmatch("[^\n]+") do
        lines[#lines + 1] = '{"config":"' .. pair[2] .. '",' .. line:sub(2)
        table.insert(by[pair[2]], cjson.decode(line))
      end
    end
    local cmp = H.tmpfile("report_compare.jsonl", table.concat(lines, "\n") .. "\n")
    local out = H.tmpfile("report_compare.html")
    local st, _, err = report({ cmp, "-o", out })
    assert.equals(0, st, err)
    local html = H.read(out)
    local rows, order = table_rows(html)
    assert.same({ "sequential", "window:k=2", "spechop:k=3", "spechop:k=inf" }, order)
    for label, recs in pairs(by) do check_row(rows[label], expected(recs), label) end
    assert.equals(4, count(html, "<svg[%s>]"))
  end)

  it("draws every figure when all records share one k, and --group file splits by file", function()
    local f = fixture()
    local out = H.tmpfile("report_one.html")
    local st, _, err = report({ f.files.k3, "-o", out })
    assert.equals(0, st, err)
    local html = H.read(out)
    assert.equals(4, count(html, "<svg[%s>]"))
    local rows, order = table_rows(html)
    assert.same({ "k=3" }, order)
    check_row(rows["k=3"], expected(records(f.files.k3)), "k=3")
    -- two files at different k, one row each under their file names
    out = H.tmpfile("report_files.html")
    st, _, err = report({ f.files.k2, f.files.kinf, "--group", "file", "-o", out })
    assert.equals(0, st, err)
    rows, order = table_rows(H.read(out))
    assert.same({ f.files.k2, f.files.kinf }, order)
    check_row(rows[f.files.kinf], expected(records(f.files.kinf)), "kinf by file")
  end)

  it("draws the timeline from a trace's events and honours --query", function()
    local f = fixture()
    local out = H.tmpfile("report_trace.html")
    local st, _, err = report({ f.files.k3, "--trace", f.trace, "--query", "q7", "-o", out })
    assert.equals(0, st, err)
    local html = H.read(out)
    assert.matches("Query q7 “report &lt;7&gt;", html, 1, true)
    assert.matches("recorded in trace", html, 1, true)
    assert.is_nil(html:find("reconstructed, not measured", 1, true))
    local tl = html:match('<svg[^>]*id="fig%-timeline%-svg".-</svg>')
    -- one lane label per thread of q7 in the trace
    local trace = cjson.decode(H.read(f.trace))
    local pid
    for _, e in ipairs(trace.traceEvents) do
      if e.ph == "M" and e.name == "process_name" and e.args.name == "query q7" then pid = e.pid end
    end
    local tids = {}
    for _, e in ipairs(trace.traceEvents) do
      if e.pid == pid and (e.ph == "X" or e.ph == "i") then tids[e.tid] = true end
    end
    for tid in pairs(tids) do assert.matches(">T" .. tid .. "</text>", tl, 1, true) end
    -- an unknown query is an error, not an empty figure
    st, _, err = report({ f.files.k3, "--trace", f.trace, "--query", "nope", "-o", H.tmpfile("report_x.html") })
    assert.not_equals(0, st)
    assert.matches("--query 'nope'", err, 1, true)
  end)

  it("reports a malformed line with file:line and skips it", function()
    local f = fixture()
    local good = {}
    for line in H.read(f.files.k3):gmatch("[^\n]+") do good[#good + 1] = line end
    local content = table.concat({ good[1], good[2], "{not json", "", '{"id":"x"}', good[3] }, "\n") .. "\n"
    local bad = H.tmpfile("report_bad<&>.jsonl", content)
    local out = H.tmpfile("report_bad.html")
    local st, _, err = report({ bad, "-o", out })
    assert.equals(0, st, err)
    assert.matches("report_bad<&>.jsonl:3: invalid JSON", err, 1, true)
    assert.matches("report_bad<&>.jsonl:5: ", err, 1, true)
    assert.is_nil(err:find("jsonl:4:", 1, true), "a blank line is not an error")
    assert.is_nil(err:find("traceback", 1, true))
    local html = H.read(out)
    local rows = table_rows(html)
    assert.equals(3, tonumber(rows["k=3"].queries.value))
    -- the page lists the skipped lines, escaped
    assert.matches("report_bad&lt;&amp;&gt;.jsonl:3:", html, 1, true)
    assert.matches("2 input lines skipped", html, 1, true)
  end)

  it("fails clearly on a missing or empty file and on bad usage", function()
    local st, _, err = report({ "/nonexistent/results.jsonl", "-o", H.tmpfile("report_x.html") })
    assert.not_equals(0, st)
    assert.matches("cannot open results file '/nonexistent/results.jsonl': No such file", err, 1, true)
    assert.is_nil(err:find("traceback", 1, true))
    local empty = H.tmpfile("report_empty.jsonl", "\n\n")
    st, _, err = report({ empty, "-o", H.tmpfile("report_x.html") })
    assert.not_equals(0, st)
    assert.matches("is empty", err, 1, true)
    local junk = H.tmpfile("report_junk.jsonl", "hello\n[1]\n")
    st, _, err = report({ junk, "-o", H.tmpfile("report_x.html") })
    assert.not_equals(0, st)
    assert.matches("no valid records", err, 1, true)
    assert.matches("report_junk.jsonl:1:", err, 1, true)
    st, _, err = report({})
    assert.equals(2, st)
    assert.matches("no results file given", err, 1, true)
    st, _, err = report({ empty, "--frobnicate" })
    assert.equals(2, st)
    assert.matches("unknown option '--frobnicate'", err, 1, true)
    local st2, _, err2 = report({ fixture().files.k3, "--trace", empty, "-o", H.tmpfile("report_x.html") })
    assert.not_equals(0, st2)
    assert.matches("trace '" .. empty .. "' is empty", err2, 1, true)
  end)

  ---------------------------------------------------------------------------
  -- the page in a real browser
  ---------------------------------------------------------------------------

  -- PNG width, height and the total size of its compressed image data.
  local function png_info(path)
    local s = H.read(path)
    if not s or s:sub(1, 8) ~= "\137PNG\r\n\26\n" then return nil end
    local function u32(i)
      local a, b, c, d = s:byte(i, i + 3)
      return ((a * 256 + b) * 256 + c) * 256 + d
    end
    local i, w, h, idat = 9, nil, nil, 0
    while i + 8 <= #s do
      local len, kind = u32(i), s:sub(i + 4, i + 7)
      if kind == "IHDR" then w, h = u32(i + 8), u32(i + 12) end
      if kind == "IDAT" then idat = idat + len end
      i = i + 12 + len
    end
    return { width = w, height = h, idat = idat }
  end

  local chromium_missing = require("support.deps").chromium()
  local has_chromium = not chromium_missing
  local has_timeout = H.sh("command -v timeout") == 0

  -- Run headless Chromium on a local file with a fresh profile, no network
  -- services and the page's console on stderr.
  local function chromium(html_path, mode_args)
    local profile = H.tmpdir() .. "/chromium-profile-" .. tostring(os.time()) .. "-" .. tostring(math.random(1e9))
    local parts = { has_timeout and "timeout 120" or "", "chromium", "--headless", "--no-sandbox", "--disable-gpu",
      "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update",
      "--disable-sync", "--user-data-dir=" .. H.quote(profile), "--enable-logging=stderr", "--v=0" }
    for _, a in ipairs(mode_args) do parts[#parts + 1] = a end
    parts[#parts + 1] = H.quote("file://" .. html_path)
    local st, out, err = H.sh(table.concat(parts, " "))
    os.execute("rm -rf " .. H.quote(profile))
    return st, out, err
  end

  local function console_lines(err)
    local lines = {}
    for line in err:gmatch("[^\n]+") do
      if line:find(":CONSOLE", 1, true) or line:find("Uncaught", 1, true) then lines[#lines + 1] = line end
    end
    return lines
  end

  if has_chromium then
    it("renders in headless Chromium: a non-blank page and no console errors", function()
      local f = fixture()
      local out = H.tmpfile("report_browser.html")
      local st, _, err = report({ f.files.k1, f.files.k3, f.files.kinf, f.files.seq, "--trace", f.trace, "-o", out })
      assert.equals(0, st, err)
      -- the console check works: a page that throws is caught
      local throws = H.tmpfile("report_throws.html", "<!DOCTYPE html><p>x</p><script>throw new Error('boom-from-page')</script>")
      local _, _, terr = chromium(throws, { "--dump-dom" })
      assert.matches("Uncaught Error: boom-from-page", terr, 1, true)
      -- the report: the DOM has the four figures and nothing reaches the console
      local st2, dom, derr = chromium(out, { "--dump-dom" })
      assert.equals(0, st2, derr)
      assert.equals(4, count(dom, "<svg[%s>]"))
      assert.matches("Summary per configuration", dom, 1, true)
      assert.same({}, console_lines(derr))
      -- the screenshot is the requested size and far from uniform: its
      -- compressed data is well above that of a blank page of the same size
      local blank = H.tmpfile("report_blank.html", "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>b</title></head><body></body></html>")
      local shot, blank_shot = H.tmpfile("report_report.png"), H.tmpfile("report_blank.png")
      local st3, _, serr = chromium(out, { "--screenshot=" .. H.quote(shot), "--window-size=1280,2400" })
      assert.equals(0, st3, serr)
      assert.same({}, console_lines(serr))
      chromium(blank, { "--screenshot=" .. H.quote(blank_shot), "--window-size=1280,2400" })
      local p, b = png_info(shot), png_info(blank_shot)
      assert.is_not_nil(p, "no PNG written")
      assert.is_not_nil(b, "no PNG of the blank page")
      assert.equals(1280, p.width)
      assert.equals(2400, p.height)
      assert.is_true(p.idat > 5 * b.idat and p.idat > 50000,
        string.format("screenshot looks blank: %d bytes of image data, blank page %d", p.idat, b.idat))
    end)
  else
    pending("renders in headless Chromium (" .. chromium_missing .. ")")
  end
end)
