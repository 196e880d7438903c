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

  describe("quick start", function()
    local line = blocks(section("Quick start (fresh Debian 12)"), "sh")[1]

    -- Runs the line with apt-get and cmake replaced by loggers (the build is
    -- already there); with_sudo puts a sudo on PATH, else there is none, as
    -- on a fresh Debian logged in as root.
    local function quick_start(with_sudo)
      local d = checkout()
      local log = d .. "/calls.log"
      stub(d, "apt-get", log)
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

    it("works as root on a machine without sudo #slow", function()
      local st, out, err, calls = quick_start(false)
      assert.equals(0, st, err)
      assert.is_nil(calls:find("sudo", 1, true), calls)
      assert.matches("^apt%-get update\napt%-get install %-y build%-essential .*lua%-busted\n", calls)
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
      assert.matches("spechop k=3", out, 1, true)
    end)
  end)
end)
