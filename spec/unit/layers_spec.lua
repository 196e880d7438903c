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
  { name = "commands", "^specula%.cmd$", "^specula%.cmd%.",
    why = "the command line: parse, print usage, set the exit status" },
  { name = "report", "^specula%.report$", "^specula%.report%.",
    why = "`specula report`'s page, over the lab's judgments" },
  { name = "lab", "^specula%.lab$", "^specula%.lab%.",
    why = "offline studies of recorded runs (verifiers, predictors, whatif)" },
  { name = "facade", "^specula$", "^specula%.script$",
    why = "require \"specula\", what scripts use (specula.run is the runner's; specula.script.set_exit)" },
  { name = "run", "^specula%.run%.", "^specula%.gateway$", "^specula%.gateway%.",
    why = "running an agent over queries: options, records, resume, --compare; the gateway's sessions" },
  { name = "library", "^specula%.",
    why = "agents, tools, predictors, verifiers, I/O, cassettes, provenance" },
  { name = "base", "^specula%.internal%.core$", "^specula%.internal%.sched$", "^specula%.internal%.nojit$",
    "^specula%.internal%.argv$", "^specula%.internal%.domains$", "^specula%.internal%.stream$",
    "^specula%.internal%.tags$", "^specula%.internal%.lines$", "^specula%.json$", "^specula%.secrets$",
    "^specula%.internal%.output$", "^specula%.internal%.escapes$", "^specula%.crypto$",
    "^specula%.url$", "^specula%.text$",
    why = "the engine binding (core, sched), data primitives and the output layer: no agents, runs or records" },
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
    assert.is_truthy(g.edges["specula.cassette.mcp"]["specula.mcp.transport"])
  end)

  it("keeps specula.http apart from the cassette too: the run puts the cassette's wrapper in front of it", function()
    assert.is_nil(g.edges["specula.http"]["specula.cassette"], "specula.http requires specula.cassette at "
      .. mg.where(g, "specula.http", "specula.cassette"))
    local code = mg.strip_lua_comments(assert(H.read(g.nodes["specula.http"])))
    assert.is_nil(code:find("cassette", 1, true), "specula.http names the cassette")
    assert.is_truthy(g.edges["specula.run.cassette"]["specula.http"])
  end)
end)

describe("the pieces moved down to break the circles", function()
  it("are still reached by their old names, the very same values", function()
    assert.equals(require("specula.internal.simlaw").tool, require("specula.sim").tool)
    assert.equals(require("specula.internal.simlaw").law, require("specula.sim").law)
    assert.equals(require("specula.internal.tags").tag, require("specula.provenance").tag)
    assert.equals(require("specula.internal.stream").read_all, require("specula.http").Response.read_all)
    local merge, files = require("specula.cmd.merge"), require("specula.run.resultfiles")
    assert.equals(files.config_of, merge.config_of)
    assert.equals(files.read_records, merge.read_records)
    assert.equals(files.write_file, merge.write_file)
    assert.equals(require("specula.provenance").add_script_dir, require("specula.cmd.run").add_script_dir)
  end)

  it("leave `specula run --help` as the command's table prints it", function()
    local argv, cmdrun, runopts = require("specula.internal.argv"), require("specula.cmd.run"), require("specula.run.opts")
    assert.equals(argv.usage(cmdrun), argv.usage(runopts.COMMAND))
    assert.equals(argv.usage_hint(cmdrun), argv.usage_hint(runopts.COMMAND))
    assert.matches("^usage: specula run SCRIPT%.lua", argv.usage(cmdrun))
  end)
end)

-- The engine's floors (docs/architecture.md, Layers): a file includes
-- files of its own floor and of the floors below, never one above, and
-- (a .c and its .h one unit) no two units include each other, directly or
-- round a longer circle. The context used to be the hub of one big circle
-- (sp_ctx.c freed every subsystem while their headers needed its type);
-- each owner now registers its shutdown with the context (sp_ctx_own), so
-- sp_ctx includes nothing above it.
local C_FLOORS = {
  { name = "base", "sp_api", "sp_buf", "sp_timer", "sp_rand", "sp_opt", "sp_json", "sp_jsonenc", "sp_sse",
    "sp_url", "sp_curl", "sp_crypto", "sp_est", "sp_theory", "sp_stats", "sp_bootstrap", "sp_stages", "sp_policy",
    "sp_actspec", "sp_record" },
  { name = "context", "sp_ctx" },
  { name = "runtime", "sp_vals", "sp_sched", "sp_signal", "sp_outfile" },
  { name = "io", "sp_http", "sp_proc", "sp_httpd", "sp_stdio" },
  { name = "window", "sp_window", "sp_window_int", "sp_window_actspec", "sp_wgroup" },
  { name = "engine", "sp_engine" },
  { name = "replay", "sp_winplay", "sp_replay", "sp_synth", "sp_cmd_replay", "sp_cmd_theory" },
  { name = "host", "sp_host", "sp_luacache", "sp_main" },
}

-- module -> floor index, and the modules of g on no floor.
local function c_floor_of(g)
  local at, missing = {}, {}
  for i, f in ipairs(C_FLOORS) do for _, m in ipairs(f) do at[m] = i end end
  for _, m in ipairs(mg.sorted_keys(g.nodes)) do
    if not at[m] then missing[#missing + 1] = m end
  end
  return at, missing
end

-- The includes of g that reach a higher floor, described.
local function c_upward(g)
  local at = c_floor_of(g)
  local bad = {}
  for _, from in ipairs(mg.sorted_keys(g.edges)) do
    for _, to in ipairs(mg.sorted_keys(g.edges[from])) do
      if at[from] and at[to] and at[to] > at[from] then
        bad[#bad + 1] = string.format("%s (%s) includes %s (%s) at %s", from, C_FLOORS[at[from]].name, to,
          C_FLOORS[at[to]].name, mg.where(g, from, to))
      end
    end
  end
  return bad
end

describe("the engine's C files", function()
  it("have no file-level circle at all (docs/architecture.md, Layers)", function()
    local g = mg.c_graph(H.root .. "/engine")
    local msgs = {}
    for _, comp in ipairs(mg.circles(g)) do msgs[#msgs + 1] = mg.describe(g, comp) end
    assert.equals("", table.concat(msgs, "\n"), #msgs .. " circle(s):\n" .. table.concat(msgs, "\n"))
  end)

  it("stand on a floor each, and include nothing from a floor above", function()
    local g = mg.c_graph(H.root .. "/engine")
    local _, missing = c_floor_of(g)
    assert.same({}, missing)
    local bad = c_upward(g)
    assert.equals("", table.concat(bad, "\n"), #bad .. " upward include(s):\n" .. table.concat(bad, "\n"))
  end)

  it("the rules find a circle through the context and an include from a floor above", function()
    local d = tmpdir()
    os.execute("mkdir -p " .. H.quote(d .. "/engine"))
    write(d .. "/engine/sp_ctx.h", '#include "sp_sched.h"\n')
    write(d .. "/engine/sp_sched.h", '#include "sp_ctx.h"\n')
    write(d .. "/engine/sp_buf.h", '#include "sp_window.h"\n')
    write(d .. "/engine/sp_window.h", "\n")
    local g = mg.c_graph(d .. "/engine")
    local circles = mg.circles(g)
    assert.equals(1, #circles)
    assert.same({ "sp_ctx", "sp_sched" }, circles[1])
    local bad = c_upward(g)
    assert.equals(2, #bad)
    assert.matches("sp_buf %(base%) includes sp_window %(window%) at .*sp_buf%.h:1", bad[1])
    assert.matches("sp_ctx %(context%) includes sp_sched %(runtime%)", bad[2])
    write(d .. "/engine/sp_ctx.h", "\n")
    write(d .. "/engine/sp_buf.h", "\n")
    g = mg.c_graph(d .. "/engine")
    assert.same({}, mg.circles(g))
    assert.same({}, c_upward(g))
    os.execute("rm -rf " .. H.quote(d))
  end)

  it("keep sp_host and sp_proc, sp_winplay and sp_replay apart", function()
    local g = mg.c_graph(H.root .. "/engine")
    for _, e in ipairs({ { "sp_host", "sp_proc" }, { "sp_proc", "sp_host" }, { "sp_winplay", "sp_replay" } }) do
      assert.is_nil(g.edges[e[1]][e[2]], e[1] .. " includes " .. e[2] .. " at " .. mg.where(g, e[1], e[2]))
    end
  end)

  it("leave the context ignorant of its owners: sp_ctx.c includes sp_ctx.h alone of the engine", function()
    local g = mg.c_graph(H.root .. "/engine")
    local to = mg.sorted_keys(g.edges.sp_ctx)
    assert.same({ "sp_api", "sp_timer" }, to)
  end)

  it("include their headers without a circle among the headers", function()
    local g = mg.c_graph(H.root .. "/engine", true)
    assert.is_true(mg.count(g.nodes) >= 20, "found only " .. mg.count(g.nodes) .. " headers")
    local msgs = {}
    for _, comp in ipairs(mg.circles(g)) do msgs[#msgs + 1] = mg.describe(g, comp) end
    assert.equals("", table.concat(msgs, "\n"), #msgs .. " circle(s):\n" .. table.concat(msgs, "\n"))
  end)
end)


-- The code lines (not comments) of the Lua files under lua/specula/DIR
-- that match(line) says true of, as FILE:LINE, and how many files were read.
local function code_lines(dir, match)
  local p = assert(io.popen("cd " .. H.root .. "/lua && find specula/" .. dir .. " -name '*.lua' | sort"))
  local found, n = {}, 0
  for file in p:lines() do
    n = n + 1
    local lineno = 0
    for line in io.lines(H.root .. "/lua/" .. file) do
      lineno = lineno + 1
      if not line:match("^%s*%-%-") and match(line, file) then found[#found + 1] = file .. ":" .. lineno end
    end
  end
  p:close()
  return found, n
end

-- The exit status is decided in one place: the command dispatcher sets it
-- from what a command returned or the status a plain error carries;
-- specula.script.set_exit is a plain program's own choice (a script API).
describe("the exit status", function()
  it("is set only by the command dispatcher (and a script's specula.script.set_exit)", function()
    local allowed = { ["specula/cmd/init.lua"] = true, ["specula/script.lua"] = true }
    local found, n = code_lines("", function(line, file)
      return line:find("sp_ctx_set_exit", 1, true) and not allowed[file]
    end)
    assert.is_true(n > 50, "read only " .. n .. " files")
    assert.same({}, found)
  end)
end)

describe("the floors below the commands", function()
  it("never print usage: run/, lab/ and report/ name no usage text or hint", function()
    local found = {}
    for _, dir in ipairs({ "run", "lab", "report" }) do
      local here, n = code_lines(dir, function(line)
        return line:find("usage_hint", 1, true) or line:find("argv.usage(", 1, true)
      end)
      assert.is_true(n > 0, "no Lua file under lua/specula/" .. dir)
      for _, f in ipairs(here) do found[#found + 1] = f end
    end
    assert.same({}, found)
  end)
end)

-- The cassette is a transport and clock implementation plugged in from the
-- top (docs/architecture.md, "The transport seam"): specula.run.cassette
-- puts its wrappers into the seams of HTTP, MCP and the agent's adapter,
-- and whoever opens a cassette opens it there. Nothing below the run
-- floor calls the cassette, and the cassette requires none of what it serves.
describe("the cassette, plugged in from the top", function()
  local g = mg.lua_graph(H.root .. "/lua")
  local function in_package(name) return name == "specula.cassette" or name:find("^specula%.cassette%.") ~= nil end
  local RUN = floor_of("specula.run.x")

  it("is a package: specula.cassette and its parts", function()
    assert.is_truthy(g.nodes["specula.cassette"])
    local parts = 0
    for name in pairs(g.nodes) do if in_package(name) and name ~= "specula.cassette" then parts = parts + 1 end end
    assert.is_true(parts >= 8, "found only " .. parts .. " parts")
  end)

  it("is neither required nor named by any module below the run floor but its own parts", function()
    local bad = {}
    for _, from in ipairs(mg.sorted_keys(g.nodes)) do
      if not in_package(from) and floor_of(from) > RUN then
        for to in pairs(g.edges[from] or {}) do
          if in_package(to) then bad[#bad + 1] = from .. " requires " .. to .. " at " .. mg.where(g, from, to) end
        end
        -- (package.loaded["specula.cassette"] too)
        local code = mg.strip_lua_comments(assert(H.read(g.nodes[from])))
        if code:find("specula.cassette", 1, true) then bad[#bad + 1] = from .. " names specula.cassette" end
      end
    end
    table.sort(bad)
    assert.equals("", table.concat(bad, "\n"), #bad .. " reach(es) into the cassette:\n" .. table.concat(bad, "\n"))
  end)

  it("requires only the base floor and the MCP transport interface: no client, agent, window or run", function()
    local BASE = #LAYERS
    local bad = {}
    for _, from in ipairs(mg.sorted_keys(g.nodes)) do
      if in_package(from) then
        for to in pairs(g.edges[from] or {}) do
          if not in_package(to) and floor_of(to) ~= BASE and to ~= "specula.mcp.transport" then
            bad[#bad + 1] = from .. " requires " .. to .. " at " .. mg.where(g, from, to)
          end
        end
      end
    end
    table.sort(bad)
    assert.equals("", table.concat(bad, "\n"), table.concat(bad, "\n"))
  end)

  it("is opened only through specula.run.cassette, which plugs the seams first", function()
    local found = code_lines("", function(line, file)
      if file:find("^specula/cassette/") or file == "specula/run/cassette.lua" then return false end
      return line:find("cassette%.open%(") or line:find("cassette%.from_args%(")
        or line:find('"specula%.cassette"%)%.open%(') or line:find('"specula%.cassette"%)%.from_args%(')
    end)
    assert.same({}, found)
    for _, seam in ipairs({ "specula.http", "specula.internal.protocol", "specula.mcp" }) do
      assert.is_truthy(g.edges["specula.run.cassette"][seam], "specula.run.cassette does not plug " .. seam)
    end
  end)
end)

-- Secrets as one boundary (docs/architecture.md, "The output layer"):
-- every output is written through specula.internal.output, whose writers scrub with
-- the run's secret set. No other module needs the scrubber to protect what
-- it writes, and none but the layer replaces print, io.write or the files'
-- write method (the layer does, once, for an agent script's own prints).
-- The modules that may still require specula.secrets, each for a reason:
-- they obtain or hold credentials, so they declare them, and the error
-- messages they make of text that may quote one are scrubbed where made.
local SECRETS_ALLOWED = {
  ["specula.internal.output"] = "the output layer: its writers scrub with the secret set",
  ["specula"] = "the scripts' API: specula.secrets.declare, and scrub for files a script opens itself",
  ["specula.cmd"] = "--secret-env NAME declares the value of $NAME",
  ["specula.http"] = "declares the credential headers and the URL userinfo of every request",
  ["specula.tools"] = "declares {env.NAME} values and credential headers; its errors quote a request",
  ["specula.llm.common"] = "declares an LLM client's API key; its errors quote the endpoint and the reply",
  ["specula.mcp"] = "declares an MCP server's credential headers and URL",
  ["specula.mcp.stdio"] = "declares the env given to a server; a dying server's stderr is quoted in errors",
  ["specula.mcp.auth"] = "holds the cached and stored OAuth tokens and declares them; its errors quote them",
  ["specula.mcp.auth.options"] = "declares the client secret, private key and assertions given in auth = { ... }",
  ["specula.mcp.auth.client"] = "declares a registered client's secret and the JWT assertions it signs",
  ["specula.mcp.auth.dpop"] = "declares the DPoP private key it makes",
  ["specula.mcp.auth.token"] = "declares the tokens the token endpoint returns",
  ["specula.mcp.auth.flows"] = "declares authorization codes, PKCE verifiers, assertions and ID tokens",
  ["specula.mcp.http"] = "sends the OAuth bearer; its errors quote the server's replies",
  ["specula.mcp.client"] = "its errors and warnings are made of a server's text, which may quote a credential",
  ["specula.mcp.hooks"] = "a failed hook's message, sent to the server and warned, may quote what the hook saw",
}
local OUTPUT_MODULE = "specula/internal/output.lua"

-- The module name of a file under lua/ ("specula/mcp/init.lua" -> "specula.mcp").
local function module_of(file)
  return (file:gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", "."))
end

describe("the output layer (specula.internal.output)", function()
  local g = mg.lua_graph(H.root .. "/lua")

  it("is the one module, with those that hold credentials, that requires specula.secrets", function()
    local bad = {}
    for _, from in ipairs(mg.sorted_keys(g.edges)) do
      for _, to in ipairs(mg.sorted_keys(g.edges[from])) do
        if (to == "specula.secrets" or to:match("^specula%.secrets%.")) and not from:match("^specula%.secrets")
          and not SECRETS_ALLOWED[from] then
          bad[#bad + 1] = from .. " requires " .. to .. " at " .. mg.where(g, from, to)
        end
      end
    end
    -- and by name in the code (a lazy table of names, pcall(require, name))
    local named = code_lines("", function(line, file)
      return (line:find('"specula.secrets', 1, true) or line:find("'specula.secrets", 1, true))
        and not file:match("^specula/secrets") and not SECRETS_ALLOWED[module_of(file)]
    end)
    for _, f in ipairs(named) do bad[#bad + 1] = "names specula.secrets at " .. f end
    assert.equals("", table.concat(bad, "\n"), #bad .. " module(s) use the scrubber themselves "
      .. "(write through specula.internal.output, or add the module to SECRETS_ALLOWED with its reason):\n"
      .. table.concat(bad, "\n"))
    assert.is_truthy(g.edges["specula.internal.output"]["specula.secrets"])
  end)

  it("lets the allowed modules declare and scrub, never write: no module calls secrets.stderr",
    function()
    local found = code_lines("", function(line, file)
      return line:find("secrets%a*[\"'%.%)]+stderr") and file ~= OUTPUT_MODULE
    end)
    assert.same({}, found)
  end)

  it("is the one module that replaces print, io.write or the files' write method", function()
    local found, n = code_lines("", function(line, file)
      if file == OUTPUT_MODULE then return false end
      return line:find("%f[%w_]print%s*=[^=]") or line:find("io%.write%s*=[^=]")
        or line:find("io%.std%a+%s*=[^=]") or line:find("%.write%s*=[^=]")
        or line:find("getmetatable%s*%(%s*io%.")
    end)
    assert.is_true(n > 50, "read only " .. n .. " files")
    assert.same({}, found)
  end)

  it("writes every output: no other module prints, writes stdout or stderr, or opens a file to write", function()
    local found = code_lines("", function(line, file)
      if file == OUTPUT_MODULE then return false end
      return line:find("io%.std%a+%s*:%s*write") or line:find("io%.write%s*%(")
        or line:find("%f[%w_.:]print%s*%(") or line:find("io%.output%s*%(%s*[^%s%)]")
        or line:find("io%.open%s*%b()") and (
          line:match("io%.open%s*%(.-,%s*[\"'][wa]") or line:match("io%.open%s*%([^,]*,%s*[%a_][%w_]*%s*%)"))
    end)
    assert.same({}, found)
  end)
end)
