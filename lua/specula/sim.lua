-- specula.sim: a simulated backend. Model steps, target tools and speculators
-- with latency laws and a speculation success probability p.
--
-- Every draw is keyed by (seed, query id, hop, kind, branch) through
-- sp_rand_keyed — never by a shared random sequence — so a sequential run
-- and a speculative run of the same query see the same latencies and the
-- same speculation outcomes on the true path.
local base = require "specula.internal.simlaw"

local type, tostring, error, floor = type, tostring, error, math.floor

local M = {}

-- The building blocks (specula.internal.simlaw), here as they always were.
local draw, law, latency, wait, digest = base.draw, base.law, base.latency, base.wait, base.digest
M.draw, M.law, M.latency, M.wait, M.digest = draw, law, latency, wait, digest
M.tool, M.speculator = base.tool, base.speculator
local pause = base.pause

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
  local agent = require("specula.internal.protocol")

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
      -- the observations so far: the last, and all of them joined by "|"
      -- (what the answer digests), a flat state a hop instead of a list
      -- copied each hop
      return { q = query, hop = 0, n = hops_of(hops, ctx) }
    end,
    step = function(state, ctx)
      local ms = latency(seg, ctx, "seg")
      local s
      if state.hop >= state.n then
        s = { final = "answer:" .. digest(state.notes or "") }
      else
        local prev = state.last or state.q
        s = { segment = "hop " .. state.hop,
              action = { tool = "search", args = { q = tostring(ctx.id) .. "/" .. state.hop .. "/" .. prev } } }
      end
      pause(ms)
      return s
    end,
    update = function(state, step, obs, ctx)
      local notes = state.notes
      return { q = state.q, hop = state.hop + 1, n = state.n, last = obs,
               notes = notes and notes .. "|" .. obs or obs }
    end,
  }
end

return M
