-- specula.estimate: the one estimator of p, alpha, beta (sp_est in
-- engine/sp_api.h, docs/cli.md#estimates), for records read back from files:
-- the report and --compare use it; the runner reads the window's own sp_est;
-- `specula replay` calls the same C functions.
local core = require "specula.internal.core"
local ffi, C = core.ffi, core.C

local type, ipairs = type, ipairs

local M = {}

-- hop record "spec" names -> SP_SPEC_* codes
local OUTCOME = core.SPEC_CODES

function M.new() return ffi.new("sp_est") end

local out = ffi.new("double[3]")
-- p_hat, alpha_hat, beta_hat; nil where undefined.
function M.get(e)
  C.sp_est_get(e, out, out + 1, out + 2)
  local p, a, b = out[0], out[1], out[2]
  return p == p and p or nil, a == a and a or nil, b == b and b or nil
end

local function num(x) return type(x) == "number" and x or nil end

-- Add the hops of result records (their stages.hops); malformed hops are
-- skipped, as the report skips them elsewhere.
function M.add_records(e, recs)
  for _, r in ipairs(recs) do
    local stages = type(r) == "table" and r.stages
    local hops = type(stages) == "table" and stages.hops
    if type(hops) == "table" then
      for _, h in ipairs(hops) do
        if type(h) == "table" then
          local seg, tgt = num(h.t_seg), num(h.t_target)
          if seg and tgt then
            C.sp_est_add(e, OUTCOME[h.spec] or 0, seg, num(h.t_spec) or -1, tgt)
          end
        end
      end
    end
  end
  return e
end

function M.of_records(recs) return M.get(M.add_records(M.new(), recs)) end

return M
