-- specula.internal.domains: the Lua side of the shared option domains (engine/sp_opt.c).
-- `specula theory`, `specula run`, --compare items, specula.run() and
-- specula.theory all check k, m, eps, seed, concurrency, p, alpha, beta and
-- nu through the same C function, so none accepts what another rejects.
-- The defaults of every option live in the same C file; DEFAULTS is their
-- Lua copy, which the commands' option tables (lua/specula/cmd/) show.
local core = require "specula.internal.core"
local ffi, C = core.ffi, core.C

local type, format, error, tostring = type, string.format, error, tostring

local M = {}

local out = ffi.new("double[1]")

-- DEFAULTS.k, .m, .eps, .nu, .seed, .concurrency, .max_hops, .ev_cost_ms,
-- .predict_top, .bootstrap_iterations, .bootstrap_seed, .bootstrap_level,
-- .kauto_min, .kauto_max, .kauto_default (engine/sp_opt.c, sp_opt_default).
local DEFAULTS = {}
do
  local i = 0
  while true do
    local name = C.sp_opt_default_at(i, out)
    if name == nil then break end
    DEFAULTS[ffi.string(name)] = out[0]
    i = i + 1
  end
end
M.DEFAULTS = DEFAULTS

-- Text of an option (as given on a command line) -> number, or nil and
-- "--NAME must be ..., got 'TEXT'". k: inf -> math.huge, auto -> 0.
function M.parse(name, text)
  local err, errlen = core.errbuf()
  if C.sp_opt_parse(name, tostring(text), out, err, errlen) ~= 0 then return nil, ffi.string(err) end
  return out[0]
end

-- A value given through the Lua API (a number, or its text): the number,
-- or an error "WHAT: NAME must be ..." raised `level` frames up.
function M.check(what, name, v, level)
  level = (level or 1) + 1
  local err, errlen = core.errbuf()
  local rc
  if type(v) == "string" then
    rc = C.sp_opt_parse(name, v, out, err, errlen)
    v = out[0]
  elseif type(v) == "number" then
    rc = C.sp_opt_check(name, v, err, errlen)
  else
    error(format("%s: %s must be a number, got %s", what, name, type(v)), level)
  end
  if rc ~= 0 then error(what .. ": " .. (ffi.string(err):gsub("^%-%-", "", 1)), level) end
  return v
end

return M
