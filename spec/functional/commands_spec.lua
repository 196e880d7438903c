-- The command table (lua/specula/cmd/): every command answers --help with
-- each option of its own table and that option's default; options may come
-- before the script; "-" as an output file is stdout, or a usage error where
-- stdout is taken; theory and replay, whose command lines moved from C to
-- Lua, still say the same on a mistake.
local H = require "support.helpers"
local cjson = require "cjson"

local SIM = H.root .. "/examples/multihop_sim.lua"

-- Every command's option table as the binary holds it: name, and per option
-- its spellings and the default its usage text must show. Read from the
-- tables themselves, so an option added later is covered too.
local function tables()
  local st, out, err = H.run_lua([[
    local argv = require "specula.internal.argv"
    local cmd = require "specula.cmd"
    local json = require "specula.json"
    local all = {}
    for _, name in ipairs(cmd.COMMANDS) do
      local m = require("specula.cmd." .. name)
      local opts = {}
      for _, list in ipairs({ m.options or {}, argv.GLOBAL }) do
        for _, d in ipairs(list) do
          local names = {}
          for _, n in ipairs(d) do names[#names + 1] = n end
          opts[#opts + 1] = { names = names, spelling = argv.spelling(d),
            default = d.stop and "" or d.required and "(required)"
              or ("(default: " .. argv.shown_default(d) .. ")") }
        end
      end
      all[#all + 1] = { name = name, options = opts }
    end
    io.stdout:write(json.encode(all))
  ]])
  assert.equals(0, st, err)
  return cjson.decode(out)
end

describe("every command", function()
  local all = tables()

  it("is in the table, thirteen of them, each listed by specula --help", function()
    assert.equals(13, #all)
    local st, out = H.specula({ "--help" })
    assert.equals(0, st)
    for _, c in ipairs(all) do assert.matches("\n  " .. c.name .. " ", out, 1, true) end
  end)

  it("answers --help and -h on stdout with exit 0, listing each option with its default", function()
    for _, c in ipairs(all) do
      for _, flag in ipairs({ "--help", "-h" }) do
        local st, out, err = H.specula({ c.name, flag })
        assert.equals(0, st, c.name .. " " .. flag .. ": " .. err)
        assert.equals("", err, c.name)
        assert.matches("^usage: specula " .. c.name, out)
        for _, o in ipairs(c.options) do
          -- the spelling, then its default on the same entry (before the next option)
          local at = out:find("\n  " .. o.spelling, 1, true)
          assert.is_truthy(at, c.name .. " --help lacks " .. o.spelling .. ":\n" .. out)
          local entry = out:sub(at + 1):match("^(.-)\n  %-") or out:sub(at + 1)
          assert.is_truthy(entry:find(o.default, 1, true),
            c.name .. " --help: " .. o.spelling .. " without " .. o.default .. ":\n" .. entry)
        end
      end
    end
  end)

  it("answers --help before its positional arguments without touching them", function()
    -- run: no script is opened; bench: no benchmark starts
    local st, out, err = H.specula({ "run", "--help", "/nonexistent/agent.lua" })
    assert.equals(0, st, err)
    assert.matches("^usage: specula run", out)
    st, out = H.specula({ "bench", "--help" })
    assert.equals(0, st)
    assert.is_nil(out:find("=====", 1, true))
    st, out = H.specula({ "replay", "--help", "/nonexistent/trace.json" })
    assert.equals(0, st)
    assert.matches("^usage: specula replay", out)
  end)

  -- the message, then one line (not the whole usage text, 70 lines for
  -- run, which scrolled the message away): theory and replay their synopsis
  -- line (it names every option), the others theirs and a pointer to --help
  it("rejects an unknown option with its message, one usage line and status 2", function()
    for _, c in ipairs(all) do
      if c.name ~= "bench" then   -- bench hands options to the benchmarks
        local st, _, err = H.specula({ c.name, "--no-such-option" })
        assert.equals(2, st, c.name)
        local msg, usage = err:match("^(specula " .. c.name .. ": [^\n]*)\n(usage: specula " .. c.name .. "[^\n]*)\n$")
        assert.is_not_nil(msg, c.name .. ": not a message and one usage line:\n" .. err)
        assert.equals("specula " .. c.name .. ": unknown option '--no-such-option'", msg)
        if c.name ~= "theory" and c.name ~= "replay" then
          local tail = "; `specula " .. c.name .. " --help` lists every option"
          assert.equals(tail, usage:sub(-#tail))
        end
      end
    end
    -- run's checks after the parse say it the same way
    local st, _, err = H.specula({ "run", H.root .. "/examples/multihop_sim.lua", "--k", "0" })
    assert.equals(2, st)
    assert.matches("^specula run: %-%-k must be [^\n]*\nusage: specula run [^\n]*`specula run %-%-help` lists every option\n$",
      err)
  end)

  it("takes --secret-env, theory and replay too", function()
    local st, out, err = H.specula({ "theory", "--secret-env", "SPECULA_CMD_SECRET", "--p", "0.5", "--alpha", "0.2",
      "--beta", "0.15", "--json" }, { SPECULA_CMD_SECRET = "a-secret-value-of-some-length-0123456789" })
    assert.equals(0, st, err)
    assert.equals(0.5, cjson.decode(out).p)
  end)
end)

describe("specula run", function()
  it("takes its options before the script as after it", function()
    local after, before = H.tmpfile("opts_after.jsonl"), H.tmpfile("opts_before.jsonl")
    local st, _, err = H.specula({ "run", SIM, "--query", "q one", "--k", "inf", "--clock", "virtual", "--seed", "7",
      "--out", after })
    assert.equals(0, st, err)
    st, _, err = H.specula({ "run", "--k", "inf", "--clock=virtual", "--seed", "7", SIM, "--query", "q one",
      "--out", before })
    assert.equals(0, st, err)
    local a, b = H.jsonl(H.read(after))[1], H.jsonl(H.read(before))[1]
    assert.equals(a.answer, b.answer)
    assert.equals(a.wall_ms, b.wall_ms)
    assert.equals("inf", tostring(b.stats.k_config))
    assert.same(a.provenance, b.provenance)
  end)

  it("says what is wrong with options before the script", function()
    local st, _, err = H.specula({ "run", "--k" })
    assert.equals(2, st)
    assert.matches("^specula run: %-%-k needs a value", err)
    st, _, err = H.specula({ "run", "--frob", SIM })
    assert.equals(2, st)
    assert.matches("^specula run: unknown option '%-%-frob'", err)
    st, _, err = H.specula({ "run", "--k", "foo", SIM, "--query", "x" })
    assert.equals(2, st)
    assert.matches("^specula run: %-%-k must be", err)
    st, _, err = H.specula({ "run", "--k", "3" })
    assert.equals(2, st)
    assert.matches("^specula run: no script given", err)
  end)

  it("hands a plain program the arguments after its script", function()
    local st, out = H.run_lua("print(select('#', ...), ...)\n", { "x", "--y" })
    assert.equals(0, st)
    assert.matches("2\tx\t--y", out, 1, true)
  end)
end)

describe("'-' as an output file", function()
  local dir = H.tmpdir() .. "/dash_out"
  assert(os.execute("mkdir -p " .. H.quote(dir)))
  local function in_dir(args)
    local parts = { "cd", H.quote(dir), "&&", H.quote(H.bin) }
    for _, a in ipairs(args) do parts[#parts + 1] = H.quote(a) end
    return H.sh(table.concat(parts, " "))
  end
  local function no_dash_file()
    assert.is_nil(io.open(dir .. "/-", "r"), "a file named '-' was created")
  end
  local results = dir .. "/r.jsonl"
  local st0, _, err0 = in_dir({ "run", SIM, "--query", "q one", "--clock", "virtual", "--shard", "0/1",
    "--out", results })
  assert.equals(0, st0, err0)

  it("run --trace - writes the trace on stdout when the records go to a file", function()
    local st, out, err = in_dir({ "run", SIM, "--query", "q one", "--clock", "virtual", "--out", dir .. "/t.jsonl",
      "--trace", "-" })
    assert.equals(0, st, err)
    local trace = cjson.decode(out)
    assert.is_table(trace.traceEvents)
    assert.is_table(trace.specula)
    no_dash_file()
  end)

  it("run --trace - beside records on stdout, and --summary -, are usage errors", function()
    local st, _, err = in_dir({ "run", SIM, "--query", "q", "--clock", "virtual", "--trace", "-" })
    assert.equals(2, st)
    assert.matches("^specula run: %-%-trace %-: the records go to stdout", err)
    st, _, err = in_dir({ "run", SIM, "--query", "q", "--clock", "virtual", "--compare", "sequential,spechop",
      "--out", dir .. "/c.jsonl", "--summary", "-" })
    assert.equals(2, st)
    assert.matches("^specula run: %-%-summary %-: stdout holds the comparison table", err)
    no_dash_file()
  end)

  it("report -o - writes the page on stdout (options before the file too)", function()
    local st, out, err = in_dir({ "report", "-o", "-", "--title=Dash report", results })
    assert.equals(0, st, err)
    assert.matches("^<!DOCTYPE html>", out)
    assert.matches("Dash report", out, 1, true)
    assert.matches("</html>%s*$", out)
    no_dash_file()
  end)

  it("merge -o - writes the union on stdout; --summary - beside it is a usage error", function()
    local st, out, err = in_dir({ "merge", results, "-o", "-" })
    assert.equals(0, st, err)
    assert.equals(H.read(results), out)
    st, out, err = in_dir({ "merge", results, "-o", dir .. "/all.jsonl", "--summary", "-" })
    assert.equals(0, st, err)
    assert.is_table(cjson.decode(out))
    st, _, err = in_dir({ "merge", results, "-o", "-", "--summary", "-" })
    assert.equals(2, st)
    assert.matches("^specula merge: %-o %- and %-%-summary %- cannot both be stdout", err)
    no_dash_file()
  end)

  it("compare --summary - and repair -o - are usage errors (stdout is taken, or a file is replaced)", function()
    local st, _, err = in_dir({ "compare", results, "--summary", "-" })
    assert.equals(2, st)
    assert.matches("^specula compare: %-%-summary %-: stdout holds the table", err)
    st, _, err = in_dir({ "repair", results, "-o", "-" })
    assert.equals(2, st)
    assert.matches("^specula repair: %-o %-: repair writes a file", err)
    no_dash_file()
  end)
end)

-- What the C parsers of theory and replay printed (status, first stderr
-- line), kept now that Lua reads their command lines.
describe("theory and replay on a mistake", function()
  local USAGE_T = "usage: specula theory --p P --alpha A --beta B [--k K|inf|auto] [--nu V] [--eps E] "
    .. "[--spec-launch eager|slot] [--json]\n"
  local USAGE_R = "usage: specula replay FILE [--k 1,2,3,inf] [--mode spechop|window|sequential] "
    .. "[--spec-launch eager|slot] [--config NAME] [--json]\n"
  local PQ = { "--p", "0.5", "--alpha", "0.2", "--beta", "0.1" }
  local function with(extra)
    local a = { "theory" }
    for _, x in ipairs(PQ) do a[#a + 1] = x end
    for _, x in ipairs(extra) do a[#a + 1] = x end
    return a
  end
  local KMSG = "--k takes up to 64 comma-separated values, each an integer in [1, 1000000] or inf; got '"

  it("theory says what it said", function()
    for _, c in ipairs({
      { { "theory", "--p", "abc" }, "--p must be in [0, 1], got 'abc'" },
      { { "theory", "--alpha", "0.2", "--beta", "0.1" }, "missing --p (speculation success probability)" },
      { { "theory", "--p", "0.5", "--beta", "0.1" }, "missing --alpha (E[T_spec]/E[T_target])" },
      { { "theory", "--p", "0.5", "--alpha", "0.2" }, "missing --beta (E[T_seg]/E[T_target])" },
      { { "theory", "--p", "0.5", "--alpha", "0", "--beta", "0" }, "--alpha + --beta must be > 0" },
      { with({ "--k", "0" }), "--k must be an integer in [1, 2147483647], inf or auto, got '0'" },
      { with({ "--nu", "-1" }), "--nu must be a number >= 0, got '-1'" },
      { with({ "--eps", "2" }), "--eps must be in (0, 1), got '2'" },
      { with({ "--spec-launch", "never" }), "--spec-launch must be eager or slot" },
      { with({ "--frob", "1" }), "unknown option '--frob'" },
      { with({ "stray" }), "unexpected argument 'stray'" },
      { { "theory", "--p" }, "--p needs a value" },
    }) do
      local st, out, err = H.specula(c[1])
      assert.equals(2, st, table.concat(c[1], " "))
      assert.equals("", out)
      assert.equals("specula theory: " .. c[2] .. "\n" .. USAGE_T, err)
    end
  end)

  it("replay says what it said", function()
    local trace = H.tmpfile("cmd_trace.json")
    local st0, _, err0 = H.specula({ "run", SIM, "--query", "q", "--clock", "virtual", "--trace", trace, "--out",
      H.tmpfile("cmd_trace.jsonl") })
    assert.equals(0, st0, err0)
    for _, c in ipairs({
      { { "replay" }, "missing FILE (a trace or a results JSONL file)" },
      { { "replay", trace, "--k", "0" }, KMSG .. "0'" },
      { { "replay", trace, "--k", "1,,2" }, KMSG .. "1,,2'" },
      { { "replay", trace, "--k", "1,2," }, KMSG .. "1,2,'" },
      { { "replay", trace, "--k", "2000000" }, KMSG .. "2000000'" },
      { { "replay", trace, "--k" }, "--k needs a value" },
      { { "replay", trace, "--mode", "turbo" }, "--mode must be spechop, window or sequential, got 'turbo'" },
      { { "replay", trace, "--spec-launch", "never" }, "--spec-launch must be eager or slot, got 'never'" },
      { { "replay", trace, "--frob" }, "unknown option '--frob'" },
      { { "replay", trace, "other.json" }, "one FILE only (got '" .. trace .. "' and 'other.json')" },
    }) do
      local st, out, err = H.specula(c[1])
      assert.equals(2, st, table.concat(c[1], " "))
      assert.equals("", out)
      assert.equals("specula replay: " .. c[2] .. "\n" .. USAGE_R, err)
    end
    -- a file that cannot be read: the message alone, no usage line; a
    -- failure (1), not a usage error (docs/cli.md)
    local st, _, err = H.specula({ "replay", "/nonexistent/x.json" })
    assert.equals(1, st)
    assert.equals("specula replay: /nonexistent/x.json: cannot open: No such file or directory\n", err)
    -- options before the file, --name=value
    local st1, out1 = H.specula({ "replay", "--k=1,inf", "--mode=window", "--json", trace })
    local st2, out2 = H.specula({ "replay", trace, "--k", "1,inf", "--mode", "window", "--json" })
    assert.equals(0, st1)
    assert.equals(0, st2)
    assert.equals(out2, out1)
    assert.equals(2, #H.jsonl(out1))
  end)
end)
