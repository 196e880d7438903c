-- Randomised lossless property: for >= 1,000 simulated queries with random
-- hop counts, p, latencies, k in {1,2,3,5,inf} and m in {1,3}, the committed
-- trajectory and the answer equal the sequential run's byte for byte.
local specula = require "specula"
local json = specula.json
local N = tonumber(arg[1] or "1000")
local SEED = tonumber(arg[2] or "7")

-- A small deterministic generator for the test's own choices.
local state = SEED * 2654435761 % 4294967296
local function rnd()
  state = (1103515245 * state + 12345) % 2147483648
  return state / 2147483648
end
local function pick(list) return list[1 + math.floor(rnd() * #list)] end

local KS = { 1, 2, 3, 5, "inf" }
local groups, per = {}, 20
local total = 0
while total < N do
  local lat = function(mean) return { "uniform", 0, mean } end
  local g = {
    p = rnd(), hops = { 1, 1 + math.floor(rnd() * 8) }, k = pick(KS), m = pick({ 1, 3 }),
    mode = pick({ "spechop", "spechop", "window" }),
    seg = lat(rnd() * 2), spec = lat(rnd() * 2), target = lat(rnd() * 3),
  }
  g.queries = {}
  for i = 1, per do g.queries[i] = { id = "g" .. #groups .. "q" .. i, query = "question " .. total + i } end
  groups[#groups + 1] = g
  total = total + per
end

local function canon(r) return json.canonical({ answer = r.answer, error = r.error, trajectory = r.trajectory }) end

local failures, checked, spec_hops = 0, 0, 0
local tasks = {}
for gi, g in ipairs(groups) do
  tasks[gi] = specula.spawn(function()
    local agent = specula.sim.multihop { p = g.p, hops = g.hops, m = 3, rank = { 0.5, 0.3, 0.2 },
      seg = g.seg, spec = g.spec, target = g.target }
    local seq = specula.run(agent, { queries = g.queries, mode = "sequential", concurrency = per })
    local spec = specula.run(agent, { queries = g.queries, mode = g.mode, k = g.k, m = g.m, concurrency = per })
    for i = 1, #seq do
      checked = checked + 1
      spec_hops = spec_hops + (spec[i].stats and spec[i].stats.commits or 0)
      local ca, cb = canon(seq[i]), canon(spec[i])
      if seq[i].error or ca ~= cb then
        failures = failures + 1
        if failures <= 5 then
          io.stderr:write(string.format("MISMATCH group %d (%s k=%s m=%d p=%.2f) query %s\n  seq:  %s\n  spec: %s\n",
            gi, g.mode, tostring(g.k), g.m, g.p, seq[i].id, ca, cb))
        end
      end
    end
  end)
end
local res, ok = specula.wait_all(tasks)
for _, r in ipairs(res) do if not r[1] then error(r[2], 0) end end
local c = specula.settle()
print(string.format("checked %d queries, %d mismatches, %d committed speculative hops, left tasks=%d timers=%d windows=%d values=%d",
  checked, failures, spec_hops, c.tasks, c.timers, c.windows, c.values))
