-- specula.cli: subcommands implemented in Lua. main() only sets up the main
-- task; the C host runs the loop until that task ends.
local core = require "specula.core"
local sched = require "specula.sched"
local C = core.C
local format = string.format

local M = {}

local function file_exists(path)
  local f = io.open(path, "r")
  if f then f:close() return true end
  return false
end

local function is_agent(v)
  return type(v) == "table" and (v.__specula_agent or (type(v.step) == "function" and type(v.init) == "function"))
end

-- An agent may be split into modules beside it: `require "helpers"` finds
-- DIR/helpers.lua from any working directory. Searched last, so no file
-- beside a script can stand in for specula's or the system's modules; a
-- directory whose name holds package.path's ';' or '?' is not added, nor
-- one already there.
function M.add_script_dir(script)
  local dir = script:match("^(.*)/[^/]*$") or "."
  if dir == "" then dir = "/" end
  if dir:find("[;?]") then return end
  local entry = dir .. "/?.lua;" .. dir .. "/?/init.lua"
  -- the modules found there go into the records' provenance
  require("specula.provenance").track_dir(dir, entry)
  if (";" .. package.path .. ";"):find(";" .. entry .. ";", 1, true) then return end
  package.path = package.path .. ";" .. entry
end

-- Run a script: its main chunk runs inside the main task, so it may call
-- async functions at top level. If it returns an agent, run the agent.
local function run_script(script, args)
  if not file_exists(script) then
    sched.plain_error("cannot open script '" .. script .. "': no such file or not readable")
  end
  local chunk, err = loadfile(script)
  if not chunk then sched.plain_error("cannot load script: " .. tostring(err)) end
  M.add_script_dir(script)
  -- --record / --replay-io open before the main chunk runs: it may connect
  -- to an MCP server at top level
  local okc, cerr, why = require("specula.cassette").from_args(args)
  if not okc then
    C.sp_ctx_set_exit(core.ctx, why == "write" and 1 or 2)
    sched.plain_error("specula run: " .. tostring(cerr))
  end
  _G.arg = { [0] = script }
  for i = 1, #args do _G.arg[i] = args[i] end
  local result = chunk(unpack(args))
  if is_agent(result) then
    local runner = require "specula.runner"
    return runner.main(result, args, script)
  end
  -- a plain program that recorded: a tape that lost exchanges is a failure
  local cf = require("specula.cassette").failed()
  if cf then
    C.sp_ctx_set_exit(core.ctx, 1)
    sched.plain_error("specula run: cannot write " .. cf.what .. ": " .. cf.err)
  end
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

local function spawn_main(fn, ...)
  local t = sched.spawn(fn, ...)
  C.sp_ctx_set_main(core.ctx, t.ptr)
  return -1
end

-- --secret-env NAME (any command, anywhere on the line, repeatable): the
-- value of $NAME is a secret (specula.secrets): no output of the process
-- shows it. Taken out of the arguments before the command sees them.
-- Returns the other arguments, or nil and a message.
function M.secret_env(args)
  local out, i = {}, 1
  while i <= #args do
    local a = args[i]
    local name = a:match("^%-%-secret%-env=(.*)$")
    if a == "--secret-env" then
      name = args[i + 1]
      i = i + 1
      if name == nil then return nil, "--secret-env needs the name of an environment variable" end
    end
    if name then
      if not name:match("^[%a_][%w_]*$") then
        return nil, "--secret-env: '" .. name .. "' is not the name of an environment variable"
      end
      local v = os.getenv(name)
      if v ~= nil and not require("specula.secrets").declare(v, "$" .. name) then
        io.stderr:write("specula: warning: --secret-env " .. name .. ": the value is shorter than "
          .. require("specula.secrets").MIN_BYTES .. " bytes and cannot be told from ordinary text; it is not scrubbed\n")
      end
    else
      out[#out + 1] = a
    end
    i = i + 1
  end
  return out
end

function M.main(argv)
  require("specula.secrets").guard_stdio()
  local cmd = argv[1]
  local rest = {}
  for i = 2, #argv do rest[#rest + 1] = argv[i] end
  local serr
  rest, serr = M.secret_env(rest)
  if not rest then
    io.stderr:write("specula: " .. serr .. "\n")
    return 2
  end
  if cmd == "run" then
    local script = table.remove(rest, 1)
    if not script then
      io.stderr:write("usage: specula run SCRIPT.lua [ARGS...]\n")
      return 2
    end
    return spawn_main(run_script, script, rest)
  elseif cmd == "report" then
    return spawn_main(function() return require("specula.report").main(rest) end)
  elseif cmd == "compare" then
    return spawn_main(function() return require("specula.compare").cli_main(rest) end)
  elseif cmd == "merge" then
    return spawn_main(function() return require("specula.merge").main(rest) end)
  elseif cmd == "repair" then
    return spawn_main(function() return require("specula.repair").main(rest) end)
  elseif cmd == "predictors" then
    return spawn_main(function() return require("specula.predictorlab").main(rest) end)
  elseif cmd == "verifiers" then
    return spawn_main(function() return require("specula.verifierlab").main(rest) end)
  elseif cmd == "cassette" then
    return spawn_main(function() return require("specula.cassettecli").main(rest) end)
  elseif cmd == "bench" then
    return spawn_main(function() return require("specula.benchcli").main(rest) end)
  end
  require("specula.secrets").stderr("specula: unknown command '" .. tostring(cmd) .. "'\n")
  return 2
end

-- Set the process exit status (used when the main task succeeds).
function M.set_exit(code) C.sp_ctx_set_exit(core.ctx, code) end

return M
