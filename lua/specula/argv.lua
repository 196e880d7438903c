-- specula.argv: the `--flag value` loop of the subcommands, declared as a
-- table instead of written out again in each of them.
--
--   local o, err = argv.parse(args, {
--     ["-o"] = "out", ["--out"] = "out",             -- a value, stored as o.out
--     ["--seed"] = { "seed", convert = fn },          -- fn(text, o) -> value | nil, message
--     ["--verifier"] = { "verifiers", list = true },  -- repeatable: o.verifiers = { ... }
--     ["--json"] = { "json", flag = true },           -- no value: o.json = true
--     ["--help"] = { "help", flag = true, stop = true },  -- ends the parse at once
--   }, { positional = "files", option = "^%-", equals = true, first = 1, into = o })
--
-- On a mistake it returns nil and the message the command prints before its
-- usage text: "--x needs a value", "unknown option '--y'", the converter's own
-- message, or (with `equals`) "--z takes no value, got '--z=1'".
-- opts.positional: the list (in o) that arguments which are not options join;
--   without it such an argument is an unknown option.
-- opts.option: the pattern of what counts as an option (default "^%-").
-- opts.equals: --name=value is read as --name value.
-- opts.first: the index of the first argument to read (default 1).
-- opts.into: the table to fill, holding the defaults (default {}).
local type, tostring, error = type, tostring, error

local M = {}

-- A flag's description as a table: { key, convert =, list =, flag =, stop = }.
local function describe(d)
  if type(d) == "string" then return { d } end
  return d
end

function M.parse(args, flags, opts)
  opts = opts or {}
  if type(args) ~= "table" or type(flags) ~= "table" then
    error("specula.argv.parse: expected an argument list and a table of flags", 2)
  end
  local o = opts.into or {}
  local positional, option = opts.positional, opts.option or "^%-"
  if positional and o[positional] == nil then o[positional] = {} end
  local i = opts.first or 1
  while i <= #args do
    local a = tostring(args[i])
    local inline
    if opts.equals then
      local name, v = a:match("^(%-%-%a[%w%-]*)=(.*)$")
      if name then a, inline = name, v end
    end
    local d = flags[a]
    if d == nil then
      if positional and not a:find(option) then
        local list = o[positional]
        list[#list + 1] = a
      else
        return nil, "unknown option '" .. a .. "'"
      end
    else
      d = describe(d)
      local key = d[1]
      if d.flag then
        if inline then return nil, a .. " takes no value, got '" .. tostring(args[i]) .. "'" end
        if key then o[key] = true end
        if d.stop then return o end
      else
        local v = inline
        if v == nil then
          v = args[i + 1]
          if v == nil then return nil, a .. " needs a value" end
          i = i + 1
        end
        if d.convert then
          local cv, err = d.convert(v, o)
          if cv == nil then return nil, err end
          v = cv
        end
        if key and d.list then
          local list = o[key] or {}
          list[#list + 1] = v
          o[key] = list
        elseif key then
          o[key] = v
        end
      end
    end
    i = i + 1
  end
  return o
end

-- The usual --help / -h entry: a flag setting o.help.
M.HELP = { "help", flag = true }

-- A converter that accepts only the keys of `set`: the value, or nil and msg.
function M.one_of(set, msg)
  return function(v)
    if set[v] == nil then return nil, msg end
    return v
  end
end

return M
