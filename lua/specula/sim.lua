-- specula.sim: a simulated backend. Model steps, target tools and speculators
-- with latency laws and a speculation success probability p.
--
-- Every draw is keyed by (seed, query id, hop, kind, branch) through
-- sp_rand_keyed — never by a shared random sequence — so a sequential run
-- and a speculative run of the same query see the same latencies and the
-- same speculation outcomes on the true path.
local core = require "specula.core"
local sched = require "specula.sched"
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
-- (sched.finish_after). A call recorded to a cassette sleeps instead: the
-- cassette times the call around it.
local cassette
local function pause(ms)
  if ms <= 0 then return end
  cassette = cassette or require "specula.cassette"
  if cassette.state then sched.sleep(ms) else sched.finish_after(ms) end
end

-- A short stable digest of a string (for simulated arguments/observations).
local function digest(s)
  local u = C.sp_rand_keyed(0, s, #s, 0, "digest", 0)
  return string.format("%08x", floor(u * 4294967296))
end
M.digest = digest

-- Hop count of a query: a number, { min, max } (keyed per query) or a function(ctx).
local function hops_of(spec, ctx)
  if type(spec) == "number" then return spec end
  if type(spec) == "function" then return spec(ctx) end
  local lo, hi = spec[1], spec[2]
  return lo + floor(draw(ctx, "hops", 0, 0) * (hi - lo + 1))
end

-- A complete simulated multi-hop agent (for examples, tests and benches).
-- opts: hops (number | {min,max} | fn), p (speculation success per hop),
--   m (candidates per speculator call), rank (probabilities of the true
--   value's rank among the candidates when one matches, default {1}),
--   seg, spec, target, update (latency laws, ms), cost (per target call),
--   policy (default: search is full), verify (default exact), name.
function M.multihop(opts)
  opts = opts or {}
  local p = opts.p or 0.5
  if type(p) ~= "number" or p < 0 or p > 1 then error("specula.sim.multihop: p must be in [0, 1]", 2) end
  local m = opts.m or 1
  if type(m) ~= "number" or m < 1 or m ~= floor(m) then error("specula.sim.multihop: m must be an integer >= 1", 2) end
  local rank = opts.rank or { 1 }
  local seg = law(opts.seg or 0, "seg")
  local spec = law(opts.spec or 0, "spec")
  local target = law(opts.target or 0, "target")
  local hops = opts.hops or 3
  local agent = require("specula.agent")

  -- which rank (0-based) the true value takes, keyed
  local cum, acc = {}, 0
  for i = 1, #rank do acc = acc + rank[i]; cum[i] = acc end
  local function true_rank(ctx)
    local u = draw(ctx, "rank") * acc
    for i = 1, #cum do if u < cum[i] then return i - 1 end end
    return #cum - 1
  end

  local function truth(args) return "fact:" .. digest(args.q) end

  local tools = {
    search = {
      cost = opts.cost or 0.001,
      class = "read",
      call = function(args, ctx)
        local ms = latency(target, ctx, "target")
        local v = truth(args)
        pause(ms)
        return v
      end,
      speculate = function(args, ctx)
        local ms = latency(spec, ctx, "spec")
        local hit = draw(ctx, "spec_ok") < p
        local v
        if m == 1 then
          v = hit and truth(args) or "guess:" .. digest(args.q .. "/wrong")
        else
          local r = hit and true_rank(ctx) or -1
          local list = {}
          for i = 0, m - 1 do
            local c = (i == r) and truth(args) or ("guess:" .. digest(args.q .. "/wrong" .. i))
            list[i + 1] = { value = c, confidence = (m - i) / (m * (m + 1) / 2) }
          end
          v = agent.candidates(list)
        end
        pause(ms)
        return v
      end,
    },
  }
  return agent.agent {
    name = opts.name or "sim-multihop",
    tools = tools,
    verify = opts.verify,
    policy = opts.policy or { search = "full" },
    init = function(query, ctx)
      return { q = query, hop = 0, n = hops_of(hops, ctx), notes = {} }
    end,
    step = function(state, ctx)
      local ms = latency(seg, ctx, "seg")
      local s
      if state.hop >= state.n then
        s = { final = "answer:" .. digest(table.concat(state.notes, "|")) }
      else
        local prev = state.notes[#state.notes] or state.q
        s = { segment = "hop " .. state.hop,
              action = { tool = "search", args = { q = tostring(ctx.id) .. "/" .. state.hop .. "/" .. prev } } }
      end
      pause(ms)
      return s
    end,
    update = function(state, step, obs, ctx)
      local notes = {}
      for i = 1, #state.notes do notes[i] = state.notes[i] end
      notes[#notes + 1] = obs
      return { q = state.q, hop = state.hop + 1, n = state.n, notes = notes }
    end,
  }
end

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
