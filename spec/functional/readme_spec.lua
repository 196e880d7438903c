-- The README's quick start and short example work as written: the code and
-- command lines are taken from README.md itself and run the way a user runs
-- them (from a directory holding ./build/specula), against loopback only.
local H = require "support.helpers"

local README = assert(H.read(H.root .. "/README.md"), "no README.md")

-- The text of a "## Title" section, up to the next "## ".
local function section(title)
  local start = README:find("\n## " .. title .. "\n", 1, true)
  assert(start, "README has no section '" .. title .. "'")
  local stop = README:find("\n## ", start + 4, true) or #README + 1
  return README:sub(start, stop)
end

-- The fenced blocks of one language in a text, in order.
local function blocks(text, lang)
  local out = {}
  for body in text:gmatch("\n```" .. lang .. "\n(.-)\n```") do out[#out + 1] = body end
  return out
end

local function write(path, text, mode)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  if mode then assert(os.execute("chmod " .. mode .. " " .. H.quote(path)) == 0) end
end

-- A fresh directory laid out like a checkout after the build: ./build/specula
-- runs the built binary (under SPECULA_WRAP when the suite sets one) and
-- ./examples is the repository's.
local dirs = 0
local function checkout()
  dirs = dirs + 1
  local d = H.tmpdir() .. "/readme" .. dirs
  assert(os.execute("mkdir -p " .. H.quote(d .. "/build") .. " " .. H.quote(d .. "/stubs")) == 0)
  write(d .. "/build/specula", "#!/bin/sh\nexec " .. (H.wrap or "") .. " " .. H.quote(H.bin) .. ' "$@"\n', "755")
  assert(os.execute("ln -s " .. H.quote(H.root .. "/examples") .. " " .. H.quote(d .. "/examples")) == 0)
  return d
end

-- A command line that logs its name and arguments to LOG and succeeds.
local function stub(dir, name, log, extra)
  write(dir .. "/stubs/" .. name, "#!/bin/sh\necho \"" .. name .. " $*\" >> " .. H.quote(log) .. "\n"
    .. (extra or "") .. "exit 0\n", "755")
end

describe("README", function()
  local server
  setup(function() server = H.server() end)
  teardown(function() server.stop() end)

  describe("short example", function()
    local sec = section("A short example")
    local code = blocks(sec, "lua")[1]
    local cmd = blocks(sec, "sh")[1]

    it("is an agent file and a command line", function()
      assert.is_not_nil(code, "no ```lua block")
      assert.matches("^%-%- agent%.lua\n", code)
      assert.equals('./build/specula run agent.lua --query "who wrote it?" --k 3 --trace trace.json', cmd)
    end)

    it("runs as written against a search service, with the query encoded into the URL", function()
      local d = checkout()
      write(d .. "/agent.lua", code)
      -- the test server's /echo/... answers with the request it got
      local st, out, err = H.sh("cd " .. H.quote(d) .. " && SEARCH_URL=" .. H.quote(server.url("/echo/search"))
        .. " /bin/sh -c " .. H.quote(cmd))
      assert.equals(0, st, err)
      local rec = H.json().decode(out)
      assert.is_nil(rec.error, rec.error)
      assert.equals("string", type(rec.answer))
      assert.is_true(#rec.answer > 0, "empty answer")
      -- both hops reached the service, each with its whole query, encoded
      -- (a raw "?" or "#" would cut the query short or break the URL)
      assert.matches('"path":"/echo/search","query":"q=who%20wrote%20it%3F%20%230"', rec.answer, 1, true)
      assert.matches('"query":"q=who%20wrote%20it%3F%20%231"', rec.answer, 1, true)
      assert.equals(2, #rec.trajectory)
      local trace = H.json().decode((assert(H.read(d .. "/trace.json"), "no trace.json written")))
      assert.is_true(#trace.traceEvents > 0, "trace without events")
    end)

    it("fails clearly when the service answers with an error status", function()
      local d = checkout()
      write(d .. "/agent.lua", code)
      local st, out = H.sh("cd " .. H.quote(d) .. " && SEARCH_URL=" .. H.quote(server.url("/status/404"))
        .. " /bin/sh -c " .. H.quote(cmd))
      assert.equals(3, st)   -- README: 3 when some queries failed
      local rec = H.json().decode(out)
      assert.matches("search: HTTP 404", rec.error, 1, true)
    end)
  end)

  -- "Your first experiment": the section's one command runs examples/experiment/run.sh,
  -- which records the agent live (the loopback model, the MCP filesystem server
  -- from npm), compares seven configurations offline on the tape and writes the
  -- report. Without node or the npm package it is pending (an error in CI).
  describe("your first experiment", function()
    local sec = section("Your first experiment")
    local line = blocks(sec, "sh")[1]
    local RUN = H.root .. "/examples/experiment/run.sh"
    local CACHE = os.getenv("SPECULA_NPM_CACHE") or (os.getenv("HOME") .. "/.cache/specula-npm")
    local FS_JS = CACHE .. "/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
    local INSTALL = "npm install --prefix " .. CACHE .. " @modelcontextprotocol/server-filesystem@2026.8.31"
    -- the rows of the table in run.sh's order; all but the last use the exact verifier
    local CONFIGS = { "sequential", "seq predict", "k=2", "k=inf", "k=inf forbid", "k=inf predict", "k=inf spechop" }
    local LOSSY = { ["k=inf spechop"] = true }

    local function missing()
      if H.node_missing() then return H.node_missing() end
      if not H.read(FS_JS) then return FS_JS .. " is missing; install it with: " .. INSTALL end
    end
    local function guard()
      local why = missing()
      if not why then return true end
      return H.require_or_pend(pending, why)
    end

    -- One run of the section's command, shared by the checks below.
    local ran
    local function run()
      if ran then return ran end
      local d = checkout()
      local w = d .. "/first-experiment"
      local cmd = line:gsub("/tmp/first%-experiment", w)
      -- EXPERIMENT_PORT=0: the model takes a free port (run.sh passes it on)
      local st, out, err = H.sh("cd " .. H.quote(d) .. " && EXPERIMENT_PORT=0 SPECULA_NPM_CACHE=" .. H.quote(CACHE)
        .. " /bin/sh -c " .. H.quote(cmd))
      ran = { st = st, out = out, err = err, w = w }
      return ran
    end

    -- The first table of `text` that starts at `title` (a line): name -> its columns.
    local function rows_after(text, title)
      local at = assert(text:find(title, 1, true), "no '" .. title .. "' in:\n" .. text)
      local rows, order = {}, {}
      for l in text:sub(at):gmatch("[^\n]+") do
        if l:match("^%(") then break end
        local name, n, rel, lo, hi = l:match("^(.-)%s%s+(%d+)%s+%d+!?%s+[%d.]+%s+[%d.]+%s+[%d.]+%s+[%d.]+%s+(%d%.%d+) %[(%d%.%d+), (%d%.%d+)%]")
        if name then
          local em, f1, agree = l:match("%s(%S+)%s+(%S+)%s+(%S+)%%$")
          rows[name] = { n = tonumber(n), rel = tonumber(rel), lo = tonumber(lo), hi = tonumber(hi),
                         em = tonumber(em), agree = tonumber(agree) }
          order[#order + 1] = name
        end
      end
      return rows, order
    end

    it("is at most 60 lines: one command, the specula commands run.sh runs, an excerpt of its output", function()
      local n = select(2, sec:gsub("\n", "\n")) - 2
      assert.is_true(n <= 60, "the section has " .. n .. " lines")
      assert.equals("sh examples/experiment/run.sh /tmp/first-experiment", line)
      assert.matches("`/tmp/first-experiment/report.html`", sec, 1, true)
      -- every specula command the section shows is a line of run.sh, as written
      local script = assert(H.read(RUN), "no " .. RUN)
      local shown = 0
      for c in sec:gmatch("`(%./build/specula [^`]+)`") do
        shown = shown + 1
        assert.is_not_nil(script:find("\n" .. c .. "\n", 1, true), "run.sh has no line '" .. c .. "'")
      end
      assert.equals(4, shown)
      -- the excerpt has the rows the script prints, in its order
      local _, order = rows_after(sec, "configuration           n ok failed")
      assert.same(CONFIGS, order)
    end)

    it("runs as written: records live, then compares k, policy, predictor and verifier offline #slow", function()
      if not guard() then return end
      local r = run()
      assert.equals(0, r.st, r.out .. r.err)
      local rows, order = rows_after(r.out, "== 2. compare")
      assert.same(CONFIGS, order)
      for _, name in ipairs(CONFIGS) do
        local row = rows[name]
        assert.equals(6, row.n, name)
        assert.is_true(row.lo <= row.rel and row.rel <= row.hi, name .. ": RelLat outside its CI")
        if LOSSY[name] then
          -- it committed stale notes: answers that differ from sequential's
          assert.is_true(row.agree < 100 and row.em < 100, name .. " agrees " .. row.agree .. "%")
        else
          assert.equals(100, row.agree, name .. ": answers not identical to sequential's")
          assert.equals(100, row.em, name)
        end
      end
      assert.equals(1, rows.sequential.rel)
      -- the paired block, against sequential then against k=inf
      assert.matches("paired differences against sequential", r.out, 1, true)
      local paired = r.out:match("paired differences against k=inf .-\n(.-)\n%(")
      assert.is_not_nil(paired, "no paired block against k=inf:\n" .. r.out)
      for _, name in ipairs(CONFIGS) do
        if name ~= "k=inf" then
          assert.matches("\n" .. name:gsub("%p", "%%%0") .. "%s+wall_ms%s+6%s", "\n" .. paired)
        end
      end
      -- every request of the replays' committed paths was on the tape (a
      -- speculative thread may ask what the recording cancelled unanswered)
      local served, onpath = r.err:match("cassette: (%d+) served from [^\n]*, %d+ not in it %((%d+) on the committed path")
      assert.is_not_nil(served, r.err)
      assert.equals("0", onpath)
    end)

    it("never ran a write early: the gate's lines of both live runs, and the tape #slow", function()
      if not guard() then return end
      local r = run()
      assert.equals(0, r.st, r.err)
      local lives = 0
      for block in r.err:gmatch("early%-launch decisions by tool and trigger:\n(.-)\nspecula: cassette") do
        lives = lives + 1
        local write = block:match("write_file: ([^\n]*)")
        assert.is_not_nil(write, block)
        assert.matches("^target forbid %d+$", write)
        assert.matches("read_text_file: target full %d+", block)
      end
      assert.equals(2, lives)
      -- on tape, every call of write_file left from a verified state
      local writes = 0
      local p = assert(io.popen("cat " .. H.quote(r.w) .. "/tape/*.jsonl"))
      for l in p:lines() do
        if l:find('"start":true', 1, true) and l:find("MCP filesystem tools/call", 1, true)
           and l:find('\\"name\\":\\"write_file\\"', 1, true) then
          writes = writes + 1
          assert.equals(false, H.json().decode(l).meta.speculative, l)
        end
      end
      p:close()
      assert.is_true(writes >= 12, writes .. " writes on tape (6 per live run)")
      -- and the store holds the summaries the writes made
      for i = 1, 6 do
        assert.matches("^the ", H.read(r.w .. "/store/summary_case" .. i .. ".txt") or "", 1)
      end
    end)

    it("writes the report the section names: a whole HTML page with its figures #slow", function()
      if not guard() then return end
      local r = run()
      assert.equals(0, r.st, r.err)
      assert.matches("report: " .. r.w:gsub("%p", "%%%0") .. "/report.html", r.out)
      local html = H.read(r.w .. "/report.html")
      assert.is_not_nil(html, "no report.html")
      assert.matches("^<!DOCTYPE html>\n<html", html)
      assert.matches("</html>%s*$", html)
      local svgs = 0
      for body in html:gmatch("<svg.-</svg>") do
        svgs = svgs + 1
        assert.matches("<title", body, 1, true)
      end
      assert.equals(4, svgs)
      for _, id in ipairs({ "summary", "fig-k", "fig-stages", "fig-timeline", "fig-queries", "methods" }) do
        assert.matches('<section id="' .. id .. '">', html, 1, true)
      end
      -- the page's summary has the table's configurations and RelLats
      local rows = rows_after(r.out, "== 2. compare")
      local seen = 0
      for cfg, body in html:gmatch('<tr class="config" data%-config="([^"]*)">(.-)</tr>') do
        seen = seen + 1
        local row = rows[cfg]
        assert.is_not_nil(row, "the page has a row '" .. cfg .. "' the table has not")
        local rel = body:match('data%-key="rel_lat" data%-value="[^"]*">([^<]*)</td>')
        assert.equals(string.format("%.3f", row.rel), rel, cfg)
      end
      assert.equals(#CONFIGS, seen)
    end)
  end)

  describe("quick start", function()
    local line = blocks(section("Quick start (fresh Debian 12)"), "sh")[1]

    -- Runs the line with apt-get and cmake replaced by loggers (the build is
    -- already there); with_sudo puts a sudo on PATH, else there is none, as
    -- on a fresh Debian logged in as root.
    local function quick_start(with_sudo)
      local d = checkout()
      local log = d .. "/calls.log"
      stub(d, "apt-get", log)
      stub(d, "npm", log)
      stub(d, "cmake", log)
      if with_sudo then stub(d, "sudo", log, 'PATH="' .. d .. '/stubs" "$@" || exit 1\n') end
      local st, out, err = H.sh("cd " .. H.quote(d) .. " && PATH=" .. H.quote(d .. "/stubs")
        .. " /bin/sh -c " .. H.quote(line))
      return st, out, err, H.read(log) or ""
    end

    it("is one line that installs, builds and runs the offline example", function()
      assert.is_not_nil(line)
      assert.is_nil(line:find("\n"), "more than one line")
      assert.matches("./build/specula run examples/multihop_sim.lua$", line)
    end)

    -- What the test command needs is what CI installs (.ci/run): the same
    -- Debian packages for the build and the specs (CI adds its own tools:
    -- valgrind, clang, chromium, Slurm, ...), Node.js and npm for the MCP
    -- specs, and the same pinned npm packages.
    it("installs what the test command needs: CI's packages, Node.js, npm and the pinned npm packages", function()
      local ci = assert(H.read(H.root .. "/.ci/run"), "no .ci/run")
      local ci_pkgs = {}
      for p in assert(ci:match('PKGS="([^"]*)"'), "no PKGS in .ci/run"):gmatch("%S+") do ci_pkgs[p] = true end
      local apt = assert(line:match("apt%-get install %-y ([^&]+)&&"), "no apt-get install")
      local mine = {}
      for p in apt:gmatch("%S+") do
        mine[p] = true
        assert.is_true(ci_pkgs[p] or p == "nodejs" or p == "npm", p .. " is not a package .ci/run installs")
      end
      for _, p in ipairs({ "build-essential", "cmake", "pkg-config", "luajit", "libluajit-5.1-dev", "libuv1-dev",
                           "libcurl4-openssl-dev", "libssl-dev", "lua-cjson", "lua-busted", "nodejs", "npm" }) do
        assert.is_true(mine[p], "the quick start does not install " .. p)
      end
      -- the npm packages: .ci/run's list, with its versions, into the cache the specs read
      local function npm_pkgs(text)
        local list = {}
        for v in text:gmatch("(@modelcontextprotocol/[%w%-]+@[%w.%-]+)") do list[#list + 1] = v end
        table.sort(list)
        return list
      end
      -- .ci/run's npm command: from "npm install" to the first line without a trailing backslash
      local at = assert(ci:find("\nnpm install ", 1, true), "no npm install in .ci/run")
      local cmd = {}
      for l in ci:sub(at + 1):gmatch("[^\n]+") do
        cmd[#cmd + 1] = l
        if not l:match("\\%s*$") then break end
      end
      local ci_npm = npm_pkgs(table.concat(cmd, "\n"))
      assert.is_true(#ci_npm >= 4, #ci_npm .. " npm packages in .ci/run")
      local npm = assert(line:match("&& (npm install [^&]+)&&"), "the quick start runs no npm install")
      assert.same(ci_npm, npm_pkgs(npm))
      assert.matches("%-%-prefix ~/%.cache/specula%-npm ", npm)
    end)

    it("works as root on a machine without sudo #slow", function()
      local st, out, err, calls = quick_start(false)
      assert.equals(0, st, err)
      assert.is_nil(calls:find("sudo", 1, true), calls)
      assert.matches("^apt%-get update\napt%-get install %-y build%-essential .*lua%-busted nodejs npm\n", calls)
      -- npm as the user (no sudo), into the cache the specs read
      assert.matches("\nnpm install %-%-no%-audit %-%-no%-fund %-%-prefix " .. (os.getenv("HOME") or ""):gsub("%p", "%%%0")
        .. "/%.cache/specula%-npm @modelcontextprotocol/", calls)
      assert.matches("\ncmake %-S %. %-B build\ncmake %-%-build build %-j\n$", calls)
      -- the example's table: every configuration gives the sequential answers
      for _, cfg in ipairs({ "sequential", "spechop k=2", "spechop k=3", "spechop k=inf", "spechop k=auto" }) do
        local n, of = out:match("\n" .. cfg .. " [^\n]- (%d+)/(%d+)\n")
        assert.is_not_nil(n, "no row for " .. cfg .. " in:\n" .. out)
        assert.equals(of, n)
      end
    end)

    it("works as a user through sudo #slow", function()
      local st, out, err, calls = quick_start(true)
      assert.equals(0, st, err)
      assert.matches("^sudo apt%-get update\napt%-get update\nsudo apt%-get install %-y ", calls)
      assert.is_nil(calls:find("sudo npm", 1, true), calls)
      assert.matches("\nnpm install ", calls)
      assert.matches("spechop k=3", out, 1, true)
    end)
  end)
end)

describe("README's test command", function()
  -- CI must run exactly the command the README gives (one place to read
  -- what "the tests pass" means)
  it("is one ctest line that .ci/run runs verbatim, on every core", function()
    local readme = assert(H.read(H.root .. "/README.md"))
    local sec = assert(readme:match("Run all tests.-```sh\n(.-)\n```"), "no test command in README.md")
    assert.is_nil(sec:find("\n"), "more than one line: " .. sec)
    assert.matches("^ctest %-%-test%-dir build ", sec)
    assert.matches('-j"$(nproc)"', sec, 1, true)
    local ci = assert(H.read(H.root .. "/.ci/run"), "no .ci/run")
    local found
    for l in ci:gmatch("[^\n]+") do
      if l == sec or l:sub(1, #sec + 1) == sec .. " " then found = l end
    end
    assert.is_string(found, ".ci/run does not run the README's test command: " .. sec)
  end)
end)
