-- specula.cmd: the command table. engine/sp_main.c hands every command line
-- here (only --version is answered in C); each command is one module of
-- lua/specula/cmd/ exporting its option table and main, and its usage text
-- is generated from that table (specula.internal.argv.usage). Adding a command is
-- one line below and one module.
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"
local argv = require "specula.internal.argv"
local output = require "specula.internal.output"
-- --secret-env NAME declares the value of $NAME (below)
local secrets = require "specula.secrets"
local C = core.C

local M = {}

-- In the order `specula --help` lists them.
M.COMMANDS = { "run", "theory", "replay", "compare", "merge", "repair", "report", "cassette", "verifiers",
               "predictors", "bench", "whatif", "gateway" }

local function module_of(name) return require("specula.cmd." .. name) end

-- The top-level usage: each command's synopsis and summary, from its module.
function M.usage()
  local out = { "usage: specula <command> [options]\n\ncommands:\n" }
  for _, name in ipairs(M.COMMANDS) do
    local cmd = module_of(name)
    out[#out + 1] = "  " .. name .. " " .. cmd.synopsis .. "\n"
    out[#out + 1] = "      " .. cmd.summary .. "\n"
  end
  out[#out + 1] = "  --version, --help\n\n"
    .. "Every command answers --help (its options, each with its default) and takes\n"
    .. "--secret-env NAME (repeatable): the value of $NAME never shows in any output\n"
    .. "(records, traces, cassettes, reports, messages).\n"
  return table.concat(out)
end

-- --secret-env NAME (any command, anywhere on the line, repeatable): the
-- value of $NAME is a secret (specula.secrets): no output of the process
-- shows it. Taken out of the arguments before the command sees them, with
-- --strict-secrets (a NAME that protects nothing is then an error).
-- Returns the other arguments, or nil and a message.
function M.secret_env(args)
  local out, i = {}, 1
  -- --strict-secrets (anywhere): a NAME that protects nothing is an error
  local strict = false
  for _, a in ipairs(args) do
    if a == "--strict-secrets" then strict = true end
  end
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
      local why
      if v == nil then
        -- nothing to protect: say so, or the user believes a value is hidden
        why = "--secret-env " .. name .. ": the variable is not set; no value is scrubbed for it"
      elseif not secrets.declare(v, "$" .. name) then
        why = "--secret-env " .. name .. ": the value is shorter than " .. secrets.MIN_BYTES
          .. " bytes and cannot be told from ordinary text; it is not scrubbed"
      end
      if why and strict then return nil, why .. " (--strict-secrets)" end
      if why then output.stderr("specula: warning: " .. why .. "\n") end
    elseif a ~= "--strict-secrets" then   -- that one was read above
      out[#out + 1] = a
    end
    i = i + 1
  end
  return out
end

-- A usage mistake: "specula NAME: msg" and one line, the synopsis and a
-- pointer to --help (or, for commands that say so, cmd.short_usage, the
-- synopsis line alone, as their C parsers printed it), on stderr; returns
-- the exit status, 2.
function M.usage_error(cmd, msg)
  local text = argv.usage_hint(cmd)
  if cmd.short_usage then text = argv.usage(cmd):match("^[^\n]*\n") end
  output.stderr("specula ", cmd.name, ": ", msg, "\n", text)
  return 2
end

-- The one place the exit status is set: from what a command returned (a
-- number), or from the status a plain error carries (sched.plain_error(msg,
-- status)), taken where it was raised; any other error keeps its traceback
-- and the process exits 1.
local function set_status(rc) if type(rc) == "number" then C.sp_ctx_set_exit(core.ctx, rc) end end
local function decider(cmd)
  return function(e)
    if type(e) == "table" and rawget(e, "plain") then
      set_status(rawget(e, "status"))
      if rawget(e, "usage") then   -- sched.usage_error: the hint is the command's to print
        return { plain = true, message = tostring(rawget(e, "message")) .. "\n" .. (argv.usage_hint(cmd):gsub("\n$", "")) }
      end
      return e
    end
    return { plain = true, message = sched.command_error(e, 1) }
  end
end

-- Print help text: the exit status (a reader that stops early is no
-- failure, output.help).
local function print_help(text)
  local err = output.help(text)
  if not err then return 0 end
  output.stderr("specula: cannot write to stdout: " .. err .. "\n")
  return 1
end

-- Parse a command's arguments by its table and run it: --help prints the
-- usage text; a mistake is a usage error; cmd.check(o) (optional) returns
-- a message for a combination the table cannot say. main(o) runs inside the
-- main task; a number it returns is the exit status, nil and a message a
-- usage mistake (so that run/ and lab/ return it and never print usage);
-- "help" as a third value asks for the usage text (`specula run AGENT
-- --help`: an option only the runner reads).
local function run_command(cmd, args)
  local o
  if cmd.parse then
    local err
    o, err = cmd.parse(args)
    if not o then return set_status(M.usage_error(cmd, err)) end
  else
    local err
    o, err = argv.parse_command(cmd, args)
    if not o then return set_status(M.usage_error(cmd, err)) end
  end
  if o.help then return set_status(print_help(argv.usage(cmd))) end
  if cmd.check then
    local msg = cmd.check(o)
    if msg then return set_status(M.usage_error(cmd, msg)) end
  end
  local ok, rc, umsg, help = xpcall(cmd.main, decider(cmd), o)
  if not ok then error(rc, 0) end
  if umsg ~= nil then return set_status(M.usage_error(cmd, umsg)) end
  if help == "help" then return set_status(print_help(argv.usage(cmd))) end
  set_status(rc)
end

function M.main(args)
  -- an agent script's own print and writes to stdout and stderr leave
  -- through the output layer too
  output.guard_stdio()
  local name = args[1]
  if name == nil then
    output.stderr(M.usage())
    return 2
  end
  if name == "--help" or name == "-h" or name == "help" then
    return print_help(M.usage())
  end
  local known = false
  for _, n in ipairs(M.COMMANDS) do known = known or n == name end
  if not known then
    output.stderr("specula: unknown command '" .. tostring(name) .. "'\n\n", M.usage())
    return 2
  end
  local rest = {}
  for i = 2, #args do rest[#rest + 1] = args[i] end
  local serr
  rest, serr = M.secret_env(rest)
  if not rest then
    output.stderr("specula: " .. serr .. "\n")
    return 2
  end
  local cmd = module_of(name)
  local t = sched.spawn(run_command, cmd, rest)
  C.sp_ctx_set_main(core.ctx, t.ptr)
  return -1
end

return M
