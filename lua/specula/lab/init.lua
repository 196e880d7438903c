-- specula.lab: the shared preamble of the offline labs (`specula cassette`,
-- `specula verifiers`, `specula predictors`): how they report a failure,
-- read a cassette, and load a user's Lua file (a verifier, a predictor).
-- The labs themselves: specula.lab.verifiers, specula.lab.predictors.
local core = require "specula.internal.core"
local cassette = require "specula.cassette"
local C = core.C

local tostring, ipairs = tostring, ipairs

local M = {}

-- fail(msg): "PROG: msg" on stderr; it returns the exit status, 1, so a
-- main() ends with `return fail(...)`. (Usage mistakes: specula.cmd.)
function M.failer(prog)
  return function(msg)
    require("specula.internal.output").stderr(prog, ": ", msg, "\n")
    return 1
  end
end

-- A cassette directory's records and files (specula.cassette.load), its
-- warnings written to stderr; nil and the reason when it cannot be read.
function M.cassette(dir)
  local recs, files, warnings = cassette.load(dir)
  if not recs then return nil, files end
  for _, w in ipairs(warnings) do require("specula.internal.output").stderr("specula: warning: cassette ", w, "\n") end
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
