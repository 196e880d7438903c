-- specula.theory: the SpecHop latency theory (engine/sp_theory.c) for Lua
-- scripts, with the same argument domains as `specula theory`.
--   p      speculation success probability per hop, in [0, 1]
--   alpha  E[T_spec] / E[T_target], >= 0
--   beta   E[T_seg] / E[T_target], >= 0
--   k      threads: an integer >= 1, or "inf" / math.huge (unbounded)
--   nu     coefficient-of-variation bound, >= 0
--   eps    starvation target, in (0, 1)
local core = require "specula.internal.core"
local opts = require "specula.internal.domains"
local C = core.C

local check, huge = opts.check, math.huge

local M = {}

-- k as the C side wants it (unbounded: INFINITY); "auto" has no meaning here.
local function k_arg(what, k)
  local v = check(what, "k", k, 3)
  if v == 0 then error(what .. ": k must be an integer >= 1 or inf, got " .. tostring(k), 3) end
  return v
end

-- Corollary 1: oracle relative latency 1 - p(1 - alpha)/(1 + beta).
function M.rel_lat_star(p, alpha, beta)
  local w = "theory.rel_lat_star"
  return C.sp_theory_rel_lat_star(check(w, "p", p, 2), check(w, "alpha", alpha, 2), check(w, "beta", beta, 2))
end

-- Corollary 3: relative latency with a window of k threads.
function M.rel_lat_k(p, alpha, beta, k)
  local w = "theory.rel_lat_k"
  return C.sp_theory_rel_lat_k(check(w, "p", p, 2), check(w, "alpha", alpha, 2), check(w, "beta", beta, 2),
    k_arg(w, k))
end

-- Theorem 4: the deterministic thread count (1 + beta)/(alpha + beta)
-- (math.huge when alpha + beta = 0).
function M.k_det(alpha, beta)
  local w = "theory.k_det"
  return C.sp_theory_k_det(check(w, "alpha", alpha, 2), check(w, "beta", beta, 2))
end

-- Theorem 4: upper bound on the starvation probability with k threads.
function M.p_starve(k, alpha, beta, nu)
  local w = "theory.p_starve"
  return C.sp_theory_p_starve(k_arg(w, k), check(w, "alpha", alpha, 2), check(w, "beta", beta, 2),
    check(w, "nu", nu, 2))
end

-- Corollary 5: threads needed for P_starve <= eps (math.huge when
-- alpha + beta = 0: no finite window starves the model of work).
function M.k_eps(alpha, beta, nu, eps)
  local w = "theory.k_eps"
  local k = C.sp_theory_k_eps(check(w, "alpha", alpha, 2), check(w, "beta", beta, 2), check(w, "nu", nu, 2),
    check(w, "eps", eps, 2))
  if k < 0 then return huge end
  return k
end

return M
