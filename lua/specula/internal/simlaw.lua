-- specula.internal.simlaw: the building blocks of specula.sim below the agent —
-- keyed draws, latency laws, simulated tools and speculators. specula.tools
-- compiles a { sim = {...} } tool spec with these, and specula.sim (whose
-- multihop builds a whole agent, so sits above specula.agent) re-exports
-- them: they live here so that tools need not require sim, which requires
-- agent, which requires tools.
--
-- Every draw is keyed by (seed, query id, hop, kind, branch) through
-- sp_rand_keyed — never by a shared random sequence — so a sequential run
-- and a speculative run of the same query see the same latencies and the
-- same speculation outcomes on the true path.
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"
local C = core.C

local type, tostring, error, exp, log, sqrt, cos, pi, floor =
  type, tostring, error, math.exp, math.log, math.sqrt, math.cos, math.pi, math.floor

local M = {}

-- A uniform draw in [0, 1) for this query, hop and kind.
local function draw(ctx, kind, branch, hop)
  local id = tostring(ctx.id)
  return C.sp_rand_keyed(ctx.seed or 0, id, #id, hop or ctx.hop or 0, kind, branch or 0)
end
M.draw = draw

-- Latency laws: a table { "fixed", ms } / { "uniform", min, max } /
-- { "lognormal", mean, cv } or the named form { kind = ..., ... }, or a number (fixed).
local function law(spec, where)
  if type(spec) == "number" then
    if spec < 0 then error("specula.sim: " .. where .. ": latency must be >= 0", 3) end
    return function() return spec end
  end
  if type(spec) == "function" then return spec end
  if type(spec) ~= "table" then error("specula.sim: " .. where .. ": expected a latency law", 3) end
  local kind = spec.kind or spec[1]
  if kind == "fixed" then
    local ms = spec.ms or spec[2]
    if type(ms) ~= "number" or ms < 0 then error("specula.sim: " .. where .. ": fixed needs ms >= 0", 3) end
    return function() return ms end
  elseif kind == "uniform" then
    local lo, hi = spec.min or spec[2], spec.max or spec[3]
    if type(lo) ~= "number" or type(hi) ~= "number" or lo < 0 or hi < lo then
      error("specula.sim: " .. where .. ": uniform needs 0 <= min <= max", 3)
    end
    return function(u) return lo + (hi - lo) * u end
  elseif kind == "lognormal" then
    local mean, cv = spec.mean or spec[2], spec.cv or spec[3]
    if type(mean) ~= "number" or type(cv) ~= "number" or mean <= 0 or cv < 0 then
      error("specula.sim: " .. where .. ": lognormal needs mean > 0 and cv >= 0", 3)
    end
    local s2 = log(1 + cv * cv)
    local mu, sigma = log(mean) - s2 / 2, sqrt(s2)
    return function(u1, u2)
      -- Box-Muller from two keyed uniforms
      local z = sqrt(-2 * log(1 - u1)) * cos(2 * pi * u2)
      return exp(mu + sigma * z)
    end
  end
  error("specula.sim: " .. where .. ": unknown latency law '" .. tostring(kind) .. "'", 3)
end
M.law = law

-- Milliseconds for this (ctx, kind) under a law.
local function latency(f, ctx, kind, hop)
  return f(draw(ctx, kind, 0, hop), draw(ctx, kind, 1, hop))
end
M.latency = latency

-- Sleep for the keyed latency of (ctx, kind). Zero latency does not yield.
local function wait(f, ctx, kind, hop)
  local ms = f(draw(ctx, kind, 0, hop), draw(ctx, kind, 1, hop))
  if ms > 0 then sched.sleep(ms) end
  return ms
end
M.wait = wait

-- The simulated calls below draw their latency, compute their result and
-- only then wait, the result in hand: the draws are keyed, so the order
-- changes nothing, and the wait is the job's last act, so the engine can
-- deliver the result ms later without suspending the call
-- (sched.finish_after). While sleeps are watched (sched.on_sleep: a
-- cassette is open, and times the call around its sleeps) it sleeps instead.
local function pause(ms)
  if ms <= 0 then return end
  if sched.on_sleep then sched.sleep(ms) else sched.finish_after(ms) end
end
M.pause = pause

-- A short stable digest of a string (for simulated arguments/observations).
local function digest(s)
  local u = C.sp_rand_keyed(0, s, #s, 0, "digest", 0)
  return string.format("%08x", floor(u * 4294967296))
end
M.digest = digest

-- Building blocks for custom simulated flows.
function M.tool(opts)
  local f = law(opts.latency or 0, "tool latency")
  local result = opts.result or function(args) return "ok" end
  return function(args, ctx)
    wait(f, ctx, opts.kind or "target")
    return result(args, ctx)
  end
end

function M.speculator(opts)
  local f = law(opts.latency or 0, "speculator latency")
  local pp = opts.p or 0.5
  local truth = opts.truth or function(args) return "ok" end
  local wrong = opts.wrong or function(args) return "wrong" end
  return function(args, ctx)
    wait(f, ctx, opts.kind or "spec")
    if draw(ctx, "spec_ok") < pp then return truth(args, ctx) end
    return wrong(args, ctx)
  end
end

return M
