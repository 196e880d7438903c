-- Safety of action speculation under adversarial predictors: over >= 1,000
-- randomised queries with mixed tool classes, no tool whose class forbids it
-- is ever launched speculatively (counted by the core and by the tools), and
-- with exact matching every result equals the sequential run's.
local specula = require "specula"
local json, sim = specula.json, specula.sim
local N = tonumber(arg[1] or "1000")

local state = 12345
local function rnd()
  state = (1103515245 * state + 12345) % 2147483648
  return state / 2147483648
end
local function pick(t) return t[1 + math.floor(rnd() * #t)] end

-- tool -> class; the classes decide
local CLASSES = { lookup = "read", fetch = "read", charge = "irreversible", insert = "reversible_write",
                  mystery = nil }
local POLICY = {
  classes = { read = "full", irreversible = "warmup", reversible_write = "forbid" },
  tools = { lookup = "read", fetch = "read", charge = "irreversible", insert = "reversible_write" },
}
local FORBIDDEN = { charge = true, insert = true, mystery = true }
local NAMES = { "lookup", "fetch", "charge", "insert", "mystery" }

local early = {}      -- tool -> speculative or predicted calls the tool itself saw
local real = 0
local function make_agent(plan, adversary, p)
  local tools = {}
  for _, name in ipairs(NAMES) do
    tools[name] = {
      cost = 0.001,
      call = function(args, ctx)
        if ctx.speculative or ctx.predicted then early[name] = (early[name] or 0) + 1 end
        real = real + 1
        sim.wait(sim.law({ "uniform", 0, 2 }), ctx, "t:" .. name)
        return name .. ":" .. sim.digest(json.canonical(args))
      end,
      speculate = function(args, ctx)
        sim.wait(sim.law({ "uniform", 0, 1 }), ctx, "s:" .. name)
        if sim.draw(ctx, "ok") < p then return name .. ":" .. sim.digest(json.canonical(args)) end
        return "guess"
      end,
      warmup = function() end,
    }
  end
  return specula.agent {
    policy = POLICY, tools = tools,
    predict = function(history, ctx)
      local out = {}
      if adversary == "forbidden" or adversary == "mixed" then
        for _, name in ipairs({ "charge", "insert", "mystery" }) do
          out[#out + 1] = { tool = name, args = { n = #history }, confidence = 1 }
        end
      end
      if adversary == "right" or adversary == "mixed" then
        local i = #history + 1
        local step = plan[i]
        if step then out[#out + 1] = { tool = step, args = { n = i - 1, q = ctx.query }, confidence = 1 } end
      end
      return out
    end,
    init = function(q) return { q = q, i = 0, notes = {} } end,
    step = function(s, ctx)
      sim.wait(sim.law({ "uniform", 0, 2 }), ctx, "seg")
      if s.i >= #plan then return { final = table.concat(s.notes, ",") } end
      return { action = { tool = plan[s.i + 1], args = { n = s.i, q = s.q } } }
    end,
    update = function(s, step, obs)
      local notes = { unpack(s.notes) }
      notes[#notes + 1] = obs
      return { q = s.q, i = s.i + 1, notes = notes }
    end,
  }
end

local groups, per, total = {}, 20, 0
while total < N do
  local plan = {}
  for i = 1, 1 + math.floor(rnd() * 6) do plan[i] = pick(NAMES) end
  groups[#groups + 1] = { plan = plan, adversary = pick({ "forbidden", "mixed", "right" }),
                          k = pick({ 1, 3, "inf" }), p = rnd() }
  total = total + per
end

local mismatches, checked, fired, promoted = 0, 0, 0, 0
local core_forbidden_full = 0
for gi, g in ipairs(groups) do
  local agent = make_agent(g.plan, g.adversary, g.p)
  local qs = {}
  for i = 1, per do qs[i] = "g" .. gi .. "/" .. i end
  local seq = specula.run(agent, { queries = qs, mode = "sequential", predict = "off" })
  local spec, agg = specula.run(agent, { queries = qs, k = g.k, concurrency = per })
  for i = 1, per do
    checked = checked + 1
    if json.canonical({ seq[i].answer, seq[i].trajectory, seq[i].error })
       ~= json.canonical({ spec[i].answer, spec[i].trajectory, spec[i].error }) then
      mismatches = mismatches + 1
    end
  end
  if agg.prefetch then fired, promoted = fired + agg.prefetch.fired, promoted + agg.prefetch.promoted end
  for name in pairs(FORBIDDEN) do
    local c = agg.policy_counts.tools[name]
    if c then core_forbidden_full = core_forbidden_full + c.full end
  end
end
local tool_forbidden = 0
for name in pairs(FORBIDDEN) do tool_forbidden = tool_forbidden + (early[name] or 0) end
print(json.encode({ checked = checked, mismatches = mismatches, fired = fired, promoted = promoted,
  core_forbidden_full = core_forbidden_full, tool_forbidden_early = tool_forbidden,
  read_early = (early.lookup or 0) + (early.fetch or 0) }))
