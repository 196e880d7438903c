-- specula theory: the latency theory at given p, alpha, beta (SpecHop
-- Cor. 1, 3, Thm. 4, Cor. 5) beside the window's event-level RelLat on
-- synthetic draws. The values' domains are the shared ones (engine/sp_opt.c,
-- as `specula run` checks k, eps); C computes and prints (sp_theory_print).
local core = require "specula.internal.core"
local optslib = require "specula.internal.domains"
local argv = require "specula.internal.argv"
local ffi, C = core.ffi, core.C
local D = optslib.DEFAULTS

local function shared(name) return function(v) return optslib.parse(name, v) end end
local LAUNCH = { eager = C.SP_REPLAY_EAGER, slot = C.SP_REPLAY_SLOT }

local M = {
  name = "theory",
  synopsis = "--p P --alpha A --beta B [--k K|inf|auto] [--nu V] [--eps E] [--spec-launch eager|slot] [--json]",
  summary = "latency theory (SpecHop Cor. 1, 3, Thm. 4, Cor. 5)",
  short_usage = true,   -- a mistake prints the synopsis line only
  options = {
    { "--p", key = "p", arg = "P", required = true, convert = shared("p"),
      help = "speculation success probability, 0 <= P <= 1" },
    { "--alpha", key = "alpha", arg = "A", required = true, convert = shared("alpha"),
      help = "E[T_spec]/E[T_target], A >= 0" },
    { "--beta", key = "beta", arg = "B", required = true, convert = shared("beta"),
      help = "E[T_seg]/E[T_target], B >= 0 (A + B > 0)" },
    { "--k", key = "k", arg = "K", shown = "k*_eps", convert = shared("k"),
      help = "threads for rel_lat_k and p_starve: integer >= 1, inf, or\nauto (k*_eps)" },
    { "--nu", key = "nu", arg = "V", default = D.nu, convert = shared("nu"),
      help = "coefficient of variation bound, V >= 0" },
    { "--eps", key = "eps", arg = "E", default = D.eps, convert = shared("eps"), help = "starvation target, 0 < E < 1" },
    { "--spec-launch", key = "launch", arg = "eager|slot", default = "eager", shown = "eager, as specula run",
      convert = argv.one_of(LAUNCH, "--spec-launch must be eager or slot"), help = "the schedule of the event model row" },
    { "--json", key = "json", flag = true, help = "print one JSON object" },
  },
}

function M.check(o)
  if #o.args > 0 then return "unexpected argument '" .. o.args[1] .. "'" end
  if o.p == nil then return "missing --p (speculation success probability)" end
  if o.alpha == nil then return "missing --alpha (E[T_spec]/E[T_target])" end
  if o.beta == nil then return "missing --beta (E[T_seg]/E[T_target])" end
  if o.alpha + o.beta <= 0 then return "--alpha + --beta must be > 0" end
end

function M.main(o)
  local a = ffi.new("sp_theory_args")
  a.p, a.alpha, a.beta, a.nu, a.eps = o.p, o.alpha, o.beta, o.nu, o.eps
  -- k 0 is auto: k*_eps, as without --k
  a.k, a.have_k = o.k or 0, (o.k and o.k ~= 0) and 1 or 0
  a.json, a.launch = o.json and 1 or 0, LAUNCH[o.launch]
  io.stdout:flush()
  return C.sp_theory_print(a)
end

return M
