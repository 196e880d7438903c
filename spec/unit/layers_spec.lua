-- The floors of the code, kept: no two Lua modules require each other
-- (directly or round a longer circle), no module requires one of a higher
-- floor, and no engine header includes itself round a circle. The graphs
-- come from every `require` in lua/ — at the top of a file and inside
-- functions alike — and every #include "..." in engine/ (spec/support/
-- modgraph.lua, also a script: `luajit spec/support/modgraph.lua` prints
-- them). docs/architecture.md ("Layers") draws the same table.
local H = require "support.helpers"
local mg = require "support.modgraph"

-- Top to bottom: a module may require modules of its own floor (no circle
-- among them) and of the floors below, never above. Each module is on
-- exactly one floor: base's, named one by one, else the first whose pattern
-- matches its name (the library's is the catch-all of specula.*).
local LAYERS = {
  { name = "commands", "^specula%.cmd$", "^specula%.cmd%.", "^specula%.cli$",
    why = "the command line: parse, print usage, set the exit status" },
  { name = "report", "^specula%.report$", "^specula%.report%.",
    why = "`specula report`'s page, over the lab's judgments" },
  { name = "lab", "^specula%.lab$", "^specula%.lab%.", "^specula%.whatif$",
    why = "offline studies of recorded runs (verifiers, predictors, whatif)" },
  { name = "facade", "^specula$",
    why = "require \"specula\", what scripts use (specula.run is the runner's)" },
  { name = "run", "^specula%.run%.",
    why = "running an agent over queries: options, records, resume, --compare" },
  { name = "library", "^specula%.",
    why = "agents, tools, predictors, verifiers, I/O, cassettes, provenance" },
  { name = "base", "^specula%.core$", "^specula%.sched$", "^specula%.nojit$", "^specula%.json$",
    "^specula%.secrets$", "^specula%.argv$", "^specula%.crypto$", "^specula%.opts$", "^specula%.text$",
    "^specula%.stream$", "^specula%.tags$",
    why = "the engine binding (core, sched) and data primitives: no agents, runs or records" },
}

-- The floor of a module: base's names are matched before the catch-all of
-- the library, the rest in order.
local function floor_of(name)
  local base = LAYERS[#LAYERS]
  for _, pat in ipairs(base) do if name:match(pat) then return #LAYERS, base.name end end
  for i = 1, #LAYERS - 1 do
    for _, pat in ipairs(LAYERS[i]) do
      if name:match(pat) then return i, LAYERS[i].name end
    end
  end
end

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  os.execute("mkdir -p " .. H.quote(d .. "/lua/x"))
  return d
end

describe("the module graph reader (spec/support/modgraph.lua)", function()
  it("reads every form of require, at the top and inside functions, and skips comments and strings' text", function()
    local src = table.concat({
      'local a = require "m.a"',
      "local function f()",
      "  local b = require('m.b')",
      '  local c = require ( "m.c" )',
      '  local ok, d = pcall(require, "m.d")',
      "end",
      '-- require "m.not1"',
      '--[[ require("m.not2") ]]',
      'local s = [[ require "m.not3" ]]',
      'local e = require("m.e." .. name)',
    }, "\n")
    local got = {}
    for _, r in ipairs(mg.lua_requires(src)) do got[#got + 1] = (r.name or r.prefix) .. "@" .. r.line end
    assert.same({ "m.a@1", "m.b@3", "m.c@4", "m.d@5", "m.e.@10" }, got)
  end)

  it("finds a circle made by a require inside a function and names it with FILE:LINE", function()
    local d = tmpdir()
    write(d .. "/lua/x/init.lua", 'local y = require "x.y"\nreturn {}\n')
    write(d .. "/lua/x/y.lua", 'local M = {}\nfunction M.f()\n  return require("x.z")\nend\nreturn M\n')
    write(d .. "/lua/x/z.lua", "return { g = function() return require 'x' end }\n")
    write(d .. "/lua/x/w.lua", 'return require "x.y"\n')
    local g = mg.lua_graph(d .. "/lua")
    local cs = mg.circles(g)
    assert.equals(1, #cs)
    assert.same({ "x", "x.y", "x.z" }, cs[1])
    local text = mg.describe(g, cs[1])
    assert.matches("x %-> x%.y %-> x%.z %-> x", text)
    assert.matches("lua/x/y%.lua:3", text)
    assert.matches("lua/x/z%.lua:1", text)
    -- a computed name reaches every module under its prefix
    write(d .. "/lua/x/init.lua", 'return function(n) return require("x." .. n) end\n')
    write(d .. "/lua/x/z.lua", "return {}\n")
    g = mg.lua_graph(d .. "/lua")
    assert.equals(3, mg.count(g.edges["x"]))
    assert.same({}, mg.circles(g))
    os.execute("rm -rf " .. H.quote(d))
  end)

  it("counts a .c and its .h as one module of the include graph", function()
    local d = tmpdir()
    os.execute("mkdir -p " .. H.quote(d .. "/engine"))
    write(d .. "/engine/a.h", "#include <stdio.h>\n")
    write(d .. "/engine/a.c", '#include "a.h"\n#include "b.h"\n')
    write(d .. "/engine/b.h", "int b(void);\n")
    write(d .. "/engine/b.c", '#include "b.h"\n  #include "a.h"\n')
    local g = mg.c_graph(d .. "/engine")
    local cs = mg.circles(g)
    assert.same({ { "a", "b" } }, cs)
    assert.matches("engine/b%.c:2", mg.describe(g, cs[1]))
    assert.same({}, mg.circles(mg.c_graph(d .. "/engine", true)))
    os.execute("rm -rf " .. H.quote(d))
  end)
end)

describe("the Lua modules", function()
  local g = mg.lua_graph(H.root .. "/lua")

  it("are read whole: the tree holds its modules and their requires", function()
    assert.is_true(mg.count(g.nodes) >= 60, "found only " .. mg.count(g.nodes) .. " modules")
    assert.is_true(g.inner >= 100, "found only " .. g.inner .. " requires inside functions")
    assert.is_truthy(g.edges["specula.cmd.run"]["specula.run.runner"])
  end)

  it("require one another without a circle", function()
    local msgs = {}
    for _, comp in ipairs(mg.circles(g)) do msgs[#msgs + 1] = mg.describe(g, comp) end
    assert.equals("", table.concat(msgs, "\n"), #msgs .. " circle(s):\n" .. table.concat(msgs, "\n"))
  end)

  it("each stand on one floor of the table", function()
    local lost = {}
    for _, name in ipairs(mg.sorted_keys(g.nodes)) do
      if not floor_of(name) then lost[#lost + 1] = name end
    end
    assert.same({}, lost)
  end)

  it("never require a module of a higher floor", function()
    local bad = {}
    for _, from in ipairs(mg.sorted_keys(g.edges)) do
      local fl, fname = floor_of(from)
      for _, to in ipairs(mg.sorted_keys(g.edges[from])) do
        local tl, tname = floor_of(to)
        if tl < fl then
          bad[#bad + 1] = string.format("%s (%s) requires %s (%s) at %s", from, fname, to, tname,
            mg.where(g, from, to))
        end
      end
    end
    assert.equals("", table.concat(bad, "\n"), #bad .. " upward require(s):\n" .. table.concat(bad, "\n"))
  end)
end)

describe("the transport seams of MCP and HTTP (docs/architecture.md)", function()
  local g = mg.lua_graph(H.root .. "/lua")
  local SESSION = { "specula.mcp.client", "specula.mcp.transport", "specula.mcp.stdio", "specula.mcp.http" }

  it("keeps the session and its transports apart from the cassette", function()
    for _, m in ipairs(SESSION) do
      assert.is_truthy(g.nodes[m], m .. " is not in the tree")
      assert.is_nil(g.edges[m]["specula.cassette"], m .. " requires specula.cassette at "
        .. mg.where(g, m, "specula.cassette"))
    end
    -- the session does not even name it: a recorder is one more wrapper
    local code = mg.strip_lua_comments(assert(H.read(g.nodes["specula.mcp.client"])))
    assert.is_nil(code:find("cassette", 1, true), "specula.mcp.client names the cassette")
  end)

  it("lets specula.mcp choose the transport: the session requires none of them", function()
    for _, t in ipairs({ "specula.mcp", "specula.mcp.stdio", "specula.mcp.http" }) do
      assert.is_nil(g.edges["specula.mcp.client"][t], "specula.mcp.client requires " .. t)
    end
    assert.is_truthy(g.edges["specula.mcp"]["specula.mcp.stdio"])
    assert.is_truthy(g.edges["specula.mcp"]["specula.mcp.http"])
    assert.is_truthy(g.edges["specula.cassette"]["specula.mcp.transport"])
  end)

  it("keeps specula.http apart from the cassette too: the cassette puts its wrapper in front of it", function()
    assert.is_nil(g.edges["specula.http"]["specula.cassette"], "specula.http requires specula.cassette at "
      .. mg.where(g, "specula.http", "specula.cassette"))
    local code = mg.strip_lua_comments(assert(H.read(g.nodes["specula.http"])))
    assert.is_nil(code:find("cassette", 1, true), "specula.http names the cassette")
    assert.is_truthy(g.edges["specula.cassette"]["specula.http"])
  end)
end)

describe("the pieces moved down to break the circles", function()
  it("are still reached by their old names, the very same values", function()
    assert.equals(require("specula.simlaw").tool, require("specula.sim").tool)
    assert.equals(require("specula.simlaw").law, require("specula.sim").law)
    assert.equals(require("specula.tags").tag, require("specula.provenance").tag)
    assert.equals(require("specula.stream").read_all, require("specula.http").Response.read_all)
    local merge, files = require("specula.cmd.merge"), require("specula.run.resultfiles")
    assert.equals(files.config_of, merge.config_of)
    assert.equals(files.read_records, merge.read_records)
    assert.equals(files.write_file, merge.write_file)
    assert.equals(require("specula.provenance").add_script_dir, require("specula.cmd.run").add_script_dir)
  end)

  it("leave `specula run --help` as the command's table prints it", function()
    local argv, cmdrun, runopts = require("specula.argv"), require("specula.cmd.run"), require("specula.run.opts")
    assert.equals(argv.usage(cmdrun), runopts.usage_text)
    assert.equals(argv.usage_hint(cmdrun), argv.usage_hint(runopts.COMMAND))
    assert.matches("^usage: specula run SCRIPT%.lua", runopts.usage_text)
  end)
end)

-- The engine's file-level circles (a .c and its .h one unit) not yet
-- broken: the context is the hub (sp_ctx.c creates and frees every
-- subsystem, whose headers need sp_ctx.h's type; sp_proc starts sp_host's
-- signal watch, whose handler reaps sp_proc's children), and sp_replay.c's
-- replays run on sp_playback, whose header includes sp_replay.h. They may
-- shrink; none may grow or appear.
local KNOWN_C_CIRCLES = {
  { "sp_ctx", "sp_host", "sp_http", "sp_proc", "sp_sched", "sp_vals", "sp_window", "sp_window_int" },
  { "sp_playback", "sp_replay" },
}

describe("the engine's C files", function()
  it("have no file-level circle beyond the known ones (docs/architecture.md, Layers)", function()
    local g = mg.c_graph(H.root .. "/engine")
    local bad = {}
    for _, comp in ipairs(mg.circles(g)) do
      local inside = false
      for _, known in ipairs(KNOWN_C_CIRCLES) do
        local set = {}
        for _, m in ipairs(known) do set[m] = true end
        local all = true
        for _, m in ipairs(comp) do all = all and set[m] == true end
        inside = inside or all
      end
      if not inside then bad[#bad + 1] = mg.describe(g, comp) end
    end
    assert.equals("", table.concat(bad, "\n"), #bad .. " new circle(s):\n" .. table.concat(bad, "\n"))
  end)

  it("include their headers without a circle among the headers", function()
    local g = mg.c_graph(H.root .. "/engine", true)
    assert.is_true(mg.count(g.nodes) >= 20, "found only " .. mg.count(g.nodes) .. " headers")
    local msgs = {}
    for _, comp in ipairs(mg.circles(g)) do msgs[#msgs + 1] = mg.describe(g, comp) end
    assert.equals("", table.concat(msgs, "\n"), #msgs .. " circle(s):\n" .. table.concat(msgs, "\n"))
  end)
end)

