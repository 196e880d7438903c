-- specula.argv: the declarative `--flag value` loop of the subcommands.
local argv = require "specula.argv"

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

describe("specula.argv", function()
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

  it("starts at `first`, fills `into`, and stops at a stop flag", function()
    local o = assert(argv.parse({ "cmd", "dir", "--json" }, FLAGS, { first = 3, into = { out = "d" } }))
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
end)
