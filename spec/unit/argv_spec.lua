-- specula.internal.argv: the declarative `--flag value` loop of the subcommands.
local argv = require "specula.internal.argv"

local FLAGS = {
  ["-o"] = "out", ["--out"] = "out",
  ["--n"] = { "n", convert = function(v)
    local n = tonumber(v)
    if not n then return nil, "--n must be a number, got '" .. v .. "'" end
    return n
  end },
  ["--v"] = { "vs", list = true },
  ["--json"] = { "json", flag = true },
  ["--help"] = argv.HELP,
}

describe("specula.internal.argv", function()
  it("reads values, converted values, repeatable values and flags", function()
    local o = assert(argv.parse({ "-o", "x", "--n", "4", "--v", "a", "--v", "b", "--json" }, FLAGS))
    assert.same({ out = "x", n = 4, vs = { "a", "b" }, json = true }, o)
  end)

  it("reads --name=value only when asked to", function()
    local o = assert(argv.parse({ "--out=x", "--n=5", "--v=" }, FLAGS, { equals = true }))
    assert.same({ out = "x", n = 5, vs = { "" } }, o)
    local _, err = argv.parse({ "--out=x" }, FLAGS)
    assert.equals("unknown option '--out=x'", err)
    _, err = argv.parse({ "--json=1" }, FLAGS, { equals = true })
    assert.equals("--json takes no value, got '--json=1'", err)
    _, err = argv.parse({ "--nope=1" }, FLAGS, { equals = true })
    assert.equals("unknown option '--nope'", err)
  end)

  it("names the flag in its errors", function()
    local _, err = argv.parse({ "--out" }, FLAGS)
    assert.equals("--out needs a value", err)
    _, err = argv.parse({ "--n", "x" }, FLAGS)
    assert.equals("--n must be a number, got 'x'", err)
    _, err = argv.parse({ "--zz" }, FLAGS)
    assert.equals("unknown option '--zz'", err)
    _, err = argv.parse({ "file" }, FLAGS)
    assert.equals("unknown option 'file'", err)
  end)

  it("collects positional arguments by the option pattern", function()
    local o = assert(argv.parse({ "a", "-", "--json", "b" }, FLAGS, { positional = "files", option = "^%-." }))
    assert.same({ "a", "-", "b" }, o.files)
    local _, err = argv.parse({ "a", "-" }, FLAGS, { positional = "files" })
    assert.equals("unknown option '-'", err)
    o = assert(argv.parse({ "-x", "--json" }, FLAGS, { positional = "files", option = "^%-%-" }))
    assert.same({ "-x" }, o.files)
  end)

  it("fills `into`, and stops at a stop flag", function()
    local o = assert(argv.parse({ "--json" }, FLAGS, { into = { out = "d" } }))
    assert.same({ out = "d", json = true }, o)
    local stop = { ["--help"] = { "help", flag = true, stop = true } }
    o = assert(argv.parse({ "--help", "--zz" }, stop))
    assert.is_true(o.help)
  end)

  it("one_of accepts the keys of a set", function()
    local f = argv.one_of({ a = true }, "must be a")
    assert.equals("a", f("a"))
    assert.same({ nil, "must be a" }, { f("b") })
  end)

  describe("a command's option table", function()
    local function cmd()
      return {
        name = "demo", synopsis = "FILE [options]", about = "Does a demo.", positional = "files",
        options = {
          { "--out", "-o", key = "out", arg = "FILE", default = "out.txt", help = "where to write" },
          { "--n", key = "n", arg = "N", default = 3, convert = function(v)
              return tonumber(v) or nil, "--n must be a number"
            end, help = "how many\nof them" },
          { "--tag", key = "tags", arg = "T", list = true, default = {}, shown = "no tag", help = "a tag (repeatable)" },
          { "--p", key = "p", arg = "P", required = true, help = "a probability" },
          { "--json", key = "json", flag = true, help = "JSON out" },
        },
        epilog = "The end.",
      }
    end

    it("parses with defaults, options before and after positionals, --name=value and a lone '-'", function()
      local o = assert(argv.parse_command(cmd(), { "--n=5", "a", "-", "--tag", "x", "--tag", "y", "-o", "f" }))
      assert.equals(5, o.n)
      assert.equals("f", o.out)
      assert.same({ "x", "y" }, o.tags)
      assert.same({ "a", "-" }, o.files)
      o = assert(argv.parse_command(cmd(), {}))
      assert.equals(3, o.n)
      assert.equals("out.txt", o.out)
      assert.same({}, o.tags)
      assert.is_nil(o.json)
      local _, err = argv.parse_command(cmd(), { "--n", "x" })
      assert.equals("--n must be a number", err)
      _, err = argv.parse_command(cmd(), { "--frob" })
      assert.equals("unknown option '--frob'", err)
    end)

    it("gives each parse its own copy of a table default", function()
      local c = cmd()
      local a = assert(argv.parse_command(c, { "--tag", "x" }))
      local b = assert(argv.parse_command(c, {}))
      assert.same({ "x" }, a.tags)
      assert.same({}, b.tags)
      assert.same({}, c.options[3].default)
    end)

    it("answers --help and -h wherever they stand, the rest unread", function()
      for _, h in ipairs({ "--help", "-h" }) do
        local o = assert(argv.parse_command(cmd(), { "a", h, "--frob" }))
        assert.is_true(o.help)
      end
    end)

    it("writes the usage text from the table: every option with its default", function()
      local u = argv.usage(cmd())
      assert.matches("^usage: specula demo FILE %[options%]\n\nDoes a demo%.\n\noptions:\n", u)
      assert.matches("\n  %-o, %-%-out FILE +where to write %(default: out%.txt%)\n", u)
      assert.matches("\n  %-%-n N +how many\n +of them %(default: 3%)\n", u)
      assert.matches("\n  %-%-tag T +a tag %(repeatable%) %(default: no tag%)\n", u)
      assert.matches("\n  %-%-p P +a probability %(required%)\n", u)
      assert.matches("\n  %-%-json +JSON out %(default: off%)\n", u)
      assert.matches("\n  %-h, %-%-help +print this text and exit\n", u)
      assert.matches("\n  %-%-secret%-env NAME +.-%(default: none%)\n", u)
      assert.matches("\n\nThe end%.\n$", u)
    end)

    it("gives a usage mistake one line after the message: the synopsis and where the options are", function()
      assert.equals("usage: specula demo FILE [options]; `specula demo --help` lists every option\n",
        argv.usage_hint(cmd()))
    end)
  end)
end)
