-- docs/ against the binary: every command `specula --help` lists is in the
-- command list of docs/cli.md; every option a command's --help lists is
-- named on the page that documents that command; and every option the
-- docs name is one that a command, a benchmark, an example script or the
-- outside tool a page shows (cmake, sbatch, squeue) takes. (Links,
-- citations and paths are checked in spec/unit/docs_spec.lua.)
local H = require "support.helpers"

local function read_doc(name)
  return assert(H.read(H.root .. "/docs/" .. name), "no docs/" .. name)
end

-- The --options of a text, as a set.
local function options(text)
  local set = {}
  for o in (" " .. text):gmatch("[^%w%-](%-%-%a[%w%-]*)") do set[o] = true end
  return set
end

-- Each command, how to ask it for its usage, and the page that documents it.
local COMMANDS = {
  { "run", { "run", H.root .. "/examples/multihop_sim.lua", "--help" }, "cli.md" },
  { "theory", { "theory", "--help" }, "cli.md" },
  { "replay", { "replay", "--help" }, "cli.md" },
  { "compare", { "compare", "--help" }, "experiments.md" },
  { "merge", { "merge", "--help" }, "experiments.md" },
  { "repair", { "repair", "--help" }, "experiments.md" },
  { "report", { "report", "--help" }, "experiments.md" },
  { "cassette", { "cassette", "--help" }, "cassettes.md" },
  { "verifiers", { "verifiers", "--help" }, "cassettes.md" },
  { "predictors", { "predictors", "--help" }, "cassettes.md" },
  { "whatif", { "whatif", "--help" }, "whatif.md" },
  { "gateway", { "gateway", "--help" }, "gateway.md" },
}

local helps = {}
local function help(c)
  if not helps[c[1]] then
    local st, out, err = H.specula(c[2])
    assert.equals(0, st, c[1] .. " --help: " .. err)
    assert.matches("usage: specula " .. c[1], out, 1, true)
    helps[c[1]] = out
  end
  return helps[c[1]]
end

describe("docs/ and the binary", function()
  it("list every command the binary lists", function()
    local st, out, err = H.specula({ "--help" })
    assert.equals(0, st, err)
    local cli = read_doc("cli.md")
    local block = assert(cli:match("\n## Commands\n+```\n(.-)\n```"), "docs/cli.md has no command list")
    local n = 0
    for cmd in ("\n" .. out:match("\ncommands:\n(.-)\n\n")):gmatch("\n  (%l+) ") do
      n = n + 1
      assert.matches("specula " .. cmd .. " ", block, 1, true)
    end
    assert.equals(#COMMANDS + 1, n)   -- and bench
    assert.matches("specula bench ", block, 1, true)
  end)

  for _, c in ipairs(COMMANDS) do
    it("name every option of `specula " .. c[1] .. " --help` in docs/" .. c[3], function()
      local page = options(read_doc(c[3]))
      local missing = {}
      for o in pairs(options(help(c))) do
        -- --help, --secret-env and --strict-secrets: every command takes them (docs/cli.md says so once)
        if not page[o] and o ~= "--help" and o ~= "--secret-env" and o ~= "--strict-secrets" then
          missing[#missing + 1] = o
        end
      end
      table.sort(missing)
      assert.same({}, missing)
    end)
  end

  -- every input format the reader knows (specula.datasets.FORMATS), in the
  -- docs' and the help's --format lists of run and merge
  it("list every input format under --format", function()
    local formats = { "auto" }
    for f in H.read(H.root .. "/lua/specula/datasets.lua"):match("\nM%.FORMATS = (%b{})"):gmatch('"(%w+)"') do
      formats[#formats + 1] = f
    end
    assert.is_true(#formats >= 6, "no FORMATS in lua/specula/datasets.lua")
    local row = assert(read_doc("cli.md"):match("\n| `%-%-format NAME` | ([^\n]*)"), "no --format row in docs/cli.md")
    for _, c in ipairs({ COMMANDS[1], COMMANDS[5] }) do
      local line = assert(help(c):match("\n  %-%-format [^\n]*"), c[1] .. " --help has no --format")
      for _, f in ipairs(formats) do
        assert.matches("[ :,]" .. f .. "[,) ]", line, nil, false, c[1] .. " --help --format omits " .. f)
        assert.matches("`" .. f .. "`", row, 1, true, "docs/cli.md's --format omits " .. f)
      end
    end
  end)

  it("name no option that nothing takes", function()
    local known = { ["--help"] = true, ["--version"] = true, ["--secret-env"] = true,
                    -- the outside tools the pages show: cmake --install, sbatch, squeue
                    ["--install"] = true, ["--array"] = true, ["--dependency"] = true, ["--me"] = true,
                    -- git's and rg's, in whatif.md's shell rules
                    ["--ext-diff"] = true, ["--output"] = true, ["--pre"] = true }
    for _, c in ipairs(COMMANDS) do
      for o in pairs(options(help(c))) do known[o] = true end
    end
    -- the benchmarks' own options (specula bench NAME --option ...)
    local p = assert(io.popen("cat " .. H.quote(H.root) .. "/bench/*.lua"))
    local bench = p:read("*a")
    p:close()
    for o in bench:gmatch('arg%[i%] == "(%-%-[%w%-]+)"') do known[o] = true end
    assert.is_true(known["--seconds"] and known["--queries"], "the benchmarks' options were not found")
    -- the example scripts' own options (specula run examples/X/run.lua --option ...)
    p = assert(io.popen("find " .. H.quote(H.root .. "/examples") .. " -name '*.lua' -exec cat {} +"))
    local examples = p:read("*a")
    p:close()
    for o in examples:gmatch('arg%[i%] == "(%-%-[%w%-]+)"') do known[o] = true end
    assert.is_true(known["--read-cost"], "the examples' options were not found")
    local unknown = {}
    local pages = { "cli.md", "agents.md", "experiments.md", "cassettes.md", "mcp.md", "architecture.md",
                    "whatif.md" }
    for _, page in ipairs(pages) do
      for o in pairs(options(read_doc(page))) do
        if not known[o] then unknown[#unknown + 1] = page .. ": " .. o end
      end
    end
    table.sort(unknown)
    assert.same({}, unknown)
  end)

  it("give the defaults `specula run --help` gives", function()
    local cli = read_doc("cli.md")
    local out = help(COMMANDS[1])
    -- "--k N|inf|auto  active threads (default: 3)" against the table's row
    local checked = 0
    for flag, default in out:gmatch("\n  (%-%-[%w%-]+)[^\n]-%(default: (%d[%d.]*)%)") do
      local row = cli:match("\n| `" .. flag:gsub("%-", "%%-") .. "[ `][^\n]*")
      assert.is_not_nil(row, "docs/cli.md has no row for " .. flag)
      assert.matches("| " .. default:gsub("%.", "%%.") .. " |$", row)
      checked = checked + 1
    end
    assert.is_true(checked >= 6, checked .. " defaults checked")
  end)
end)
