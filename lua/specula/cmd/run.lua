-- specula run: an agent over queries, or a plain Lua program. Its options
-- (specula.run.opts.OPTIONS) may stand before the script as after it; every
-- argument after the script also reaches the script itself (`...`, arg).
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"
local argv = require "specula.internal.argv"
local C = core.C
local format = string.format

local runopts = require "specula.run.opts"

local M = {
  name = runopts.COMMAND.name,
  synopsis = runopts.SYNOPSIS,
  summary = "run an agent over queries, or a plain Lua program",
  about = runopts.ABOUT,
  options = runopts.OPTIONS,
  epilog = runopts.EPILOG,
}

-- A script is a readable file (a directory opens for reading too).
local function file_exists(path)
  if require("specula.internal.core").C.sp_host_path_kind(path) == 2 then return false end
  local f = io.open(path, "r")
  if f then f:close() return true end
  return false
end

local function is_agent(v)
  return type(v) == "table" and (v.__specula_agent or (type(v.step) == "function" and type(v.init) == "function"))
end

-- An agent's directory on package.path, its modules followed into the
-- records' provenance (specula.provenance.add_script_dir; `specula
-- verifiers --agent` adds it too).
M.add_script_dir = require("specula.provenance").add_script_dir

-- Run a script: its main chunk runs inside the main task, so it may call
-- async functions at top level. If it returns an agent, run the agent.
-- Whether args name a cassette option (--record, --replay-io, --miss; as
-- NAME VALUE or NAME=VALUE): what specula.cassette.from_args reads.
local CASSETTE_FLAG = { ["--record"] = true, ["--replay-io"] = true, ["--miss"] = true }
local function wants_cassette(args)
  for i = 1, #args do
    local a = tostring(args[i])
    if CASSETTE_FLAG[a:match("^(%-%-%a[%w%-]*)=") or a] then return true end
  end
  return false
end

local function run_script(script, args)
  if not file_exists(script) then
    -- a wrong path is a usage mistake, as a missing --input file is: exit 2
    -- and the command's usage line
    sched.usage_error("specula run: cannot open script '" .. script .. "': no such file, not readable or a directory")
  end
  local chunk, err = loadfile(script)
  if not chunk then sched.plain_error("cannot load script: " .. tostring(err)) end
  M.add_script_dir(script)
  -- --record / --replay-io open before the main chunk runs: it may connect
  -- to an MCP server at top level. (The cassette's modules, with the HTTP
  -- and MCP clients they plug into, load only when one of its options is
  -- given: parsing them was a fifth of a run's start.)
  if wants_cassette(args) then
    local okc, cerr, why = require("specula.run.cassette").from_args(args)
    if not okc then sched.plain_error("specula run: " .. tostring(cerr), why == "write" and 1 or 2) end
  end
  _G.arg = { [0] = script }
  for i = 1, #args do _G.arg[i] = args[i] end
  local result = chunk(unpack(args))
  if is_agent(result) then
    local runner = require "specula.run.runner"
    return runner.main(result, args, script,
      function(...) return require("specula.run.compare").main(...) end)
  end
  -- a plain program that recorded: a tape that lost exchanges is a failure
  local cassette = package.loaded["specula.cassette"]
  local cf = cassette and cassette.failed()
  if cf then sched.plain_error("specula run: cannot write " .. cf.what .. ": " .. cf.err, 1) end
  if result ~= nil then
    -- anything else is a mistake that would otherwise pass silently
    local what = type(result)
    if what == "table" then
      what = "a table that is not an agent (it has no step and init functions: build it with specula.agent{...})"
    elseif what == "string" or what == "number" or what == "boolean" then
      local shown = tostring(result)
      if #shown > 60 then shown = require("specula.json").utf8_cut(shown, 60) .. "..." end
      shown = require("specula.json").utf8_clean(shown)
      if what == "string" then shown = '"' .. shown .. '"' end
      what = format("a %s (%s), not an agent", what, shown)
    else
      what = "a " .. what .. ", not an agent"
    end
    sched.plain_error(format("script '%s' returned %s; return an agent (specula.agent{...}) or nothing",
      script, what))
  end
end

-- The options before the script (their values too: the table says which
-- take one), the script, and the arguments after it; nil and a message on
-- a mistake. `--help` before the script stops there.
function M.parse(args)
  local flags = argv.compile(M)
  local pre, i = {}, 1
  while i <= #args do
    local a = args[i]
    if not a:find("^%-.") then break end
    local name, inline = a:match("^(%-%-%a[%w%-]*)=(.*)$")
    local d = flags[name or a]
    if d == nil then return nil, "unknown option '" .. a .. "'" end
    if d.stop then return { help = true } end
    pre[#pre + 1] = a
    if not d.flag and not inline then
      if args[i + 1] == nil then return nil, a .. " needs a value" end
      pre[#pre + 1] = args[i + 1]
      i = i + 1
    end
    i = i + 1
  end
  local script = args[i]
  if script == nil then return nil, "no script given (specula run SCRIPT.lua [options])" end
  local rest = {}
  for j = 1, #pre do rest[#rest + 1] = pre[j] end
  for j = i + 1, #args do rest[#rest + 1] = args[j] end
  return { script = script, args = rest }
end

function M.main(o) return run_script(o.script, o.args) end

return M
