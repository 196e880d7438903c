-- specula.opts: the Lua side of the shared option domains (engine/sp_opt.c).
-- `specula theory`, `specula run`, --compare items, specula.run() and
-- specula.theory all check k, m, eps, seed, concurrency, p, alpha, beta and
-- nu through the same C function, so none accepts what another rejects.
local core = require "specula.core"
local ffi, C = core.ffi, core.C

local type, format, error = type, string.format, error

local M = {}

local out = ffi.new("double[1]")

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
