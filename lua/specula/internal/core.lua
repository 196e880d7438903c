-- specula.internal.core: the FFI binding of engine/sp_api.h, the C/Lua boundary.
-- Inside the specula binary the symbols come from the executable (ffi.C);
-- elsewhere (the unit specs under plain luajit) from libspecula_core.so.
local ffi = require "ffi"

local M = {}

local host = package.loaded["specula.host"]

ffi.cdef [[ const char *sp_api_cdef(void); ]]

local lib
if host and host.embedded then
  lib = ffi.C
else
  local path = os.getenv("SPECULA_CORE_LIB")
  local ok, l = pcall(ffi.load, path or "specula_core")
  if not ok then
    error("specula.internal.core: cannot load the core library ("
      .. tostring(path or "libspecula_core.so")
      .. "); set SPECULA_CORE_LIB to build/libspecula_core.so: " .. tostring(l), 2)
  end
  lib = l
end

ffi.cdef(ffi.string(lib.sp_api_cdef()))

M.C = lib
M.ffi = ffi
-- The engine context; nil outside the specula binary (pure functions only).
M.ctx = host and host.ctx and ffi.cast("sp_ctx *", host.ctx) or nil
M.host = host

-- Speculation outcomes (SP_SPEC_*): code -> name, and name -> code, from the
-- engine's one table (sp_spec_name), so records, replay and Lua agree.
local SPEC_NAMES, SPEC_CODES = {}, {}
for i = 0, tonumber(lib.SP_SPEC_N) - 1 do
  local name = ffi.string(lib.sp_spec_name(i))
  SPEC_NAMES[i] = name
  SPEC_CODES[name] = i
end
M.SPEC_NAMES = SPEC_NAMES
M.SPEC_CODES = SPEC_CODES

-- A reusable error buffer for FFI calls that report errors (never shared
-- across a yield: callers copy the message out at once).
local ERRLEN = 512
local errbuf = ffi.new("char[?]", ERRLEN)
function M.errbuf()
  errbuf[0] = 0
  return errbuf, ERRLEN
end

function M.require_ctx(what)
  if M.ctx == nil then
    error(what .. ": needs the specula runtime (run this under `specula run`)", 3)
  end
  return M.ctx
end

return M
