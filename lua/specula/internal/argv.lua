-- specula.internal.argv: the `--flag value` loop of the subcommands, declared as a
-- table instead of written out again in each of them.
--
--   local o, err = argv.parse(args, {
--     ["-o"] = "out", ["--out"] = "out",             -- a value, stored as o.out
--     ["--seed"] = { "seed", convert = fn },          -- fn(text, o) -> value | nil, message
--     ["--verifier"] = { "verifiers", list = true },  -- repeatable: o.verifiers = { ... }
--     ["--json"] = { "json", flag = true },           -- no value: o.json = true
--     ["--help"] = { "help", flag = true, stop = true },  -- ends the parse at once
--   }, { positional = "files", option = "^%-", equals = true, into = o })
--
-- On a mistake it returns nil and the message the command prints before its
-- usage text: "--x needs a value", "unknown option '--y'", the converter's own
-- message, or (with `equals`) "--z takes no value, got '--z=1'".
-- opts.positional: the list (in o) that arguments which are not options join;
--   without it such an argument is an unknown option.
-- opts.option: the pattern of what counts as an option (default "^%-").
-- opts.equals: --name=value is read as --name value.
-- opts.into: the table to fill, holding the defaults (default {}).
local type, tostring, error, ipairs, pairs = type, tostring, error, ipairs, pairs

local M = {}

-- A flag's description as a table: { key, convert =, list =, flag =, stop = }.
local function describe(d)
  if type(d) == "string" then return { d } end
  return d
end

function M.parse(args, flags, opts)
  opts = opts or {}
  if type(args) ~= "table" or type(flags) ~= "table" then
    error("specula.internal.argv.parse: expected an argument list and a table of flags", 2)
  end
  local o = opts.into or {}
  local positional, option = opts.positional, opts.option or "^%-"
  if positional and o[positional] == nil then o[positional] = {} end
  local i = 1
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

-- ---- a command's options as one table ------------------------------------
--
-- Every command (lua/specula/cmd/) declares its options once, as a list;
-- the flags argv.parse reads, the defaults and the usage text all come from
-- that list, so a new option is parsed and documented by one entry:
--
--   { "--out", "-o", key = "out", arg = "FILE", default = "report.html",
--     help = "the HTML file to write" }
--   { "--json", key = "json", flag = true, help = "one JSON object" }
--   { "--verifier", key = "verifiers", arg = "V", list = true, shown = "exact, spechop",
--     help = "a verifier (repeatable)" }
--
-- names: the option's spellings (the first is the one shown first);
-- key/flag/list/convert/stop: as in argv.parse; default: o[key] before the
-- parse; shown: the default as the usage text says it (else `default`, or
-- "off" for a flag, or "none"); required: the usage text says "(required)"
-- instead (the command's check() enforces it); help: one line or several.
-- A command: { name =, synopsis =, about =, options =, positional =, epilog = }.
-- Every command takes --help and -h (added here), --secret-env NAME and
-- --strict-secrets (taken out of the arguments before the command sees
-- them: specula.cmd).

M.GLOBAL = {
  { "--help", "-h", flag = true, key = "help", stop = true, help = "print this text and exit" },
  { "--secret-env", arg = "NAME", help = "the value of $NAME is a secret: no output of the process shows it\n"
    .. "(repeatable; every command takes it)" },
  { "--strict-secrets", flag = true, help = "a --secret-env NAME that is not set (or too short to scrub) is a\n"
    .. "usage error instead of a warning" },
}

local function each_option(cmd, fn)
  for _, d in ipairs(cmd.options or {}) do fn(d) end
  for _, d in ipairs(M.GLOBAL) do fn(d) end
end

-- The flags table and the defaults of a command's option list.
function M.compile(cmd)
  local flags, defaults = {}, {}
  each_option(cmd, function(d)
    local f = { d.key, convert = d.convert, list = d.list, flag = d.flag, stop = d.stop }
    for _, name in ipairs(d) do flags[name] = f end
    if d.key and d.default ~= nil then defaults[d.key] = d.default end
  end)
  return flags, defaults
end

local function shown_default(d)
  if d.shown ~= nil then return tostring(d.shown) end
  if d.default ~= nil then
    if type(d.default) == "number" then return string.format("%.14g", d.default) end
    if type(d.default) == "table" then return "none" end
    return tostring(d.default)
  end
  if d.flag then return "off" end
  return "none"
end
M.shown_default = shown_default

-- An option's spellings as the usage text shows them: "-o, --out FILE".
function M.spelling(d)
  local names = {}
  for _, n in ipairs(d) do
    if n:sub(1, 2) ~= "--" then table.insert(names, 1, n) else names[#names + 1] = n end
  end
  local s = table.concat(names, ", ")
  if d.arg then s = s .. " " .. d.arg end
  return s
end

local COL = 24
-- The usage text of a command, from its table: the synopsis, what it does,
-- then one entry per option with its default.
function M.usage(cmd)
  local out = { "usage: specula " .. cmd.name .. (cmd.synopsis and (" " .. cmd.synopsis) or "") .. "\n" }
  if cmd.about then out[#out + 1] = "\n" .. cmd.about:gsub("\n*$", "") .. "\n" end
  out[#out + 1] = "\noptions:\n"
  each_option(cmd, function(d)
    local head = "  " .. M.spelling(d)
    local lines = {}
    for line in ((d.help or "") .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
    local dflt = d.stop and "" or d.required and "(required)" or ("(default: " .. shown_default(d) .. ")")
    if lines[#lines] == "" then lines[#lines] = dflt
    elseif dflt ~= "" then lines[#lines] = lines[#lines] .. " " .. dflt end
    local first = 1
    if #head < COL then
      out[#out + 1] = head .. string.rep(" ", COL - #head) .. lines[1] .. "\n"
      first = 2
    else
      out[#out + 1] = head .. "\n"
    end
    for i = first, #lines do out[#out + 1] = string.rep(" ", COL) .. lines[i] .. "\n" end
  end)
  if cmd.epilog then out[#out + 1] = "\n" .. cmd.epilog:gsub("\n*$", "") .. "\n" end
  return table.concat(out)
end

-- What a usage mistake prints after its message: the synopsis and where the
-- options are, on one line, so the message stays in sight (the whole usage
-- text of `run` is 70 lines).
function M.usage_hint(cmd)
  return "usage: specula " .. cmd.name .. (cmd.synopsis and (" " .. cmd.synopsis) or "") .. "; `specula "
    .. cmd.name .. " --help` lists every option\n"
end

-- Parse a command's arguments by its table: o (the defaults filled in,
-- positional arguments in o[cmd.positional or "args"]), or nil and the
-- message. Options may stand before, between and after the positional
-- arguments; --name=value is --name value; a lone "-" is positional.
function M.parse_command(cmd, args)
  local flags, defaults = M.compile(cmd)
  local into = {}
  for k, v in pairs(defaults) do
    if type(v) == "table" then
      local c = {}
      for kk, vv in pairs(v) do c[kk] = vv end
      v = c
    end
    into[k] = v
  end
  return M.parse(args, flags, { positional = cmd.positional or "args", option = "^%-.", equals = true,
                                into = into })
end

-- A converter that accepts only the keys of `set`: the value, or nil and msg
-- (with `got`, msg .. ", got 'VALUE'").
function M.one_of(set, msg, got)
  return function(v)
    if set[v] == nil then return nil, got and (msg .. ", got '" .. tostring(v) .. "'") or msg end
    return v
  end
end

return M
