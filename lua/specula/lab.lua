-- specula.lab: the shared preamble of the offline subcommands (`specula
-- cassette`, `specula verifiers`, `specula predictors`, `specula compare`):
-- how they report a usage mistake or a failure, read a cassette, and load a
-- user's Lua file (a verifier, a predictor).
local core = require "specula.core"
local cassette = require "specula.cassette"
local C = core.C

local tostring, ipairs, type, pcall, error = tostring, ipairs, type, pcall, error

local M = {}

-- usage(msg): "PROG: msg" and the usage text on stderr, exit status 2;
-- fail(msg): "PROG: msg" on stderr, exit status 1. Both return nothing, so a
-- main() ends with `return usage(...)`.
function M.command(prog, usage_text)
  local function usage(msg)
    C.sp_ctx_set_exit(core.ctx, 2)
    require("specula.secrets").stderr(prog, ": ", msg, "\n", usage_text)
  end
  local function fail(msg)
    C.sp_ctx_set_exit(core.ctx, 1)
    require("specula.secrets").stderr(prog, ": ", msg, "\n")
  end
  return usage, fail
end

-- Argument parsers that raise: usage_error(msg) stops parse(args) with a
-- usage mistake; parse_args(prog, usage_text, parse, args) returns parse's
-- options, or nil after "PROG: msg" and the usage text on stderr with exit
-- status 2 (any other error is raised again). `--help` (o.help) prints the
-- usage text on stdout and returns nil.
local USAGE = {}
function M.usage_error(msg) error({ [USAGE] = msg }, 0) end

function M.parse_args(prog, usage_text, parse, args)
  local ok, o = pcall(parse, args or {})
  if not ok then
    if type(o) == "table" and o[USAGE] then
      C.sp_ctx_set_exit(core.ctx, 2)
      require("specula.secrets").stderr(prog, ": ", o[USAGE], "\n", usage_text)
      return nil
    end
    error(o, 0)
  end
  if o.help then io.stdout:write(usage_text) return nil end
  return o
end

-- A cassette directory's records and files (specula.cassette.load), its
-- warnings written to stderr; nil and the reason when it cannot be read.
function M.cassette(dir)
  local recs, files, warnings = cassette.load(dir)
  if not recs then return nil, files end
  for _, w in ipairs(warnings) do require("specula.secrets").stderr("specula: warning: cassette ", w, "\n") end
  return recs, files
end

-- Each name of `names` through loader(name) -> value | nil, err: a list of
-- { name = name, value = value } in order, or nil and the first error.
function M.load_named(names, loader)
  local out = {}
  for _, n in ipairs(names) do
    local v, err = loader(n)
    if v == nil then return nil, err end
    out[#out + 1] = { name = n, value = v }
  end
  return out
end

-- The chunk of a user's Lua file `spec` (a `what`: "verifier", "predictor"),
-- or nil and a message: `unknown` when spec is not a regular file.
function M.lua_file(spec, what, unknown)
  if C.sp_host_path_kind(spec) ~= 1 then return nil, unknown end
  local chunk, err = loadfile(spec)
  if not chunk then return nil, "cannot load " .. what .. " file: " .. tostring(err) end
  return chunk
end

return M
