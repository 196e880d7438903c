-- A child process run from inside a `specula run` script without blocking
-- the loop (the engine's sp_proc, as specula.mcp.stdio uses it): the
-- script's own servers keep serving while the child talks to them.
--   local child = require "child"   (spec/support on package.path)
--   local out, status, stderr = child.run({ "python3", "x.py" }, env)
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"
local ffi, C = core.ffi, core.C

local M = {}

local lenp = ffi.new("size_t[1]")
local statusp, sigp = ffi.new("long[1]"), ffi.new("int[1]")
local prefixp = ffi.new("const char *[1]")

-- argv: the command; env: a list of "NAME=value" or nil (inherit). In a
-- task. -> stdout (lines joined by "\n"), exit status, stderr's tail
function M.run(argv, env)
  local args = ffi.new("const char *[?]", #argv + 1)
  for i, a in ipairs(argv) do args[i - 1] = a end
  local o = ffi.new("sp_proc_opts")
  o.file, o.args = argv[1], args
  local envc
  if env then
    envc = ffi.new("const char *[?]", #env + 1)
    for i, s in ipairs(env) do envc[i - 1] = s end
    o.env = envc
  end
  local err, errlen = core.errbuf()
  local p = C.sp_proc_spawn(core.ctx, o, err, errlen)
  if p == nil then return nil, -1, ffi.string(err) end
  p = ffi.gc(p, function(q) C.sp_proc_close(q, 1000) end)
  local me = sched.current("child.run")
  local lines = {}
  while true do
    local s = C.sp_proc_line(p, lenp)
    if s ~= nil then
      local n = tonumber(lenp[0])
      lines[#lines + 1] = ffi.string(s, n)
      C.sp_proc_consume(p, n)
    elseif C.sp_proc_oversized(p, prefixp, lenp) > 0 then
      lines[#lines + 1] = "(oversized line dropped)"
    elseif C.sp_proc_finished(p) == 1 then
      break
    elseif C.sp_proc_wait(p, me) == 0 then
      sched.yield()
    end
  end
  C.sp_proc_exit(p, statusp, sigp)
  local status = sigp[0] ~= 0 and 128 + tonumber(sigp[0]) or tonumber(statusp[0])
  local stderr = ffi.string(C.sp_proc_stderr(p, lenp), lenp[0])
  ffi.gc(p, nil)
  C.sp_proc_close(p, 1000)
  return table.concat(lines, "\n"), status, stderr
end

return M
