-- examples/real_traces/run.lua — action speculation and SpecHop on real
-- agent conversations, in the engine, under the virtual clock.
--
--   specula run examples/real_traces/run.lua [--folds N] [--limit N] [--read-cost X] [--json FILE]
--
-- The conversations ($REAL_TRACES, default the development set in
-- examples/real_traces/data) are split into N groups of tasks (default 5; the trials
-- of one task stay together). For each group, a learned predictor
-- (specula.predict.learned) is trained on the other groups and the group's
-- conversations run through the conversation agent (agent.lua,
-- traces_setup.lua) in four configurations, each with a fresh copy of that
-- predictor, which goes on learning online after each conversation:
--   sequential           one call after another, nothing early
--   action speculation   the predictor's guesses fire while the model thinks
--   SpecHop (k=3)        threads run ahead on guessed results (a simulated
--                        speculator: the recorded result with p = 0.6, 50 ms)
--   both
-- and the bounds: a perfect predictor (the recorded call, confidence 1), a
-- perfect speculator (always right, at no cost) and both perfect.
-- It prints, per configuration: wall time, RelLat (the engine's: wall over
-- the same hops back to back) and wall against sequential, predicted calls
-- fired and promoted (hits), wasted speculative calls and their cost, calls
-- run early per kind (reads; writes must be 0) and how many conversations
-- kept the sequential run's answer and trajectory.
local specula = require "specula"
local json = specula.json
local setup = require "traces_setup"
local learned = require "specula.learned"
local convtraces = require "specula.convtraces"

local FOLDS, LIMIT, JSON_OUT = 5, nil, nil
for i = 1, #arg do
  if arg[i] == "--folds" then FOLDS = tonumber(arg[i + 1]) end
  if arg[i] == "--limit" then LIMIT = tonumber(arg[i + 1]) end
  if arg[i] == "--json" then JSON_OUT = arg[i + 1] end
  if arg[i] == "--read-cost" then setup.READ_COST = assert(tonumber(arg[i + 1]), "--read-cost needs a number") end
end

local path = setup.traces
local recs = assert(specula.datasets.load(path, { format = "conversations" }))
local convs = {}
assert(convtraces.read(path, nil, convs, function() end))
local conv_by_id = {}
for _, c in ipairs(convs) do conv_by_id[c.id] = c end
local function group(id) return (tostring(id):gsub("[-_.]trial[-_]?%d+$", "")) end
local folds = learned.group_folds(recs, FOLDS, group)

local CONFIGS = {
  { name = "sequential", opts = { mode = "sequential", predict = "off" } },
  { name = "action speculation", opts = { mode = "sequential" } },
  { name = "SpecHop (k=3)", opts = { mode = "spechop", k = 3, predict = "off" } },
  { name = "both (k=3)", opts = { mode = "spechop", k = 3 } },
  -- the bounds: a predictor that proposes the recorded call (confidence 1),
  -- a speculator always right at no cost, both
  { name = "perfect predictor", opts = { mode = "sequential" }, oracle = true },
  { name = "perfect spec. (k=3)", opts = { mode = "spechop", k = 3, predict = "off" }, spec = { p = 1, ms = 0 } },
  { name = "both perfect (k=3)", opts = { mode = "spechop", k = 3 }, oracle = true, spec = { p = 1, ms = 0 } },
}
local totals = {}
for i, c in ipairs(CONFIGS) do
  totals[i] = { wall = 0, standard = 0, fired = 0, promoted = 0, wasted = 0, wasted_cost = 0, saved_ms = 0,
                early_reads = 0, early_writes = 0, queries = 0, same = 0, failed = 0 }
end
local base = {}   -- sequential answers and trajectories by id
local model_file = os.tmpname()
local t0 = specula.real_now()
for f = 1, FOLDS do
  local test, intest = {}, {}
  for _, i in ipairs(folds[f]) do
    if not LIMIT or #test < LIMIT then test[#test + 1] = recs[i] end
    intest[recs[i].id] = true
  end
  local train = {}
  for _, c in ipairs(convs) do if not intest[c.id] then train[#train + 1] = c end end
  local P = specula.predict.learned {}
  P:train(train, { group = group })
  assert(P:save(model_file))
  for ci, c in ipairs(CONFIGS) do
    local box = {}
    local predict = c.oracle and function(_, ctx)
      local st = box.agent.recorded(ctx.id, ctx.hop)
      return st and { { tool = st.tool, args = st.args, confidence = 1 } } or {}
    end or specula.predict.learned { model = model_file }
    local agent = setup.make_agent { predict = predict, speculate = c.spec or { p = 0.6, ms = 50 } }
    box.agent = agent
    local o = {}
    for k, v in pairs(c.opts) do o[k] = v end
    o.queries, o.clock, o.concurrency = test, "virtual", 8
    local records, agg = specula.run(agent, o)
    local t = totals[ci]
    for _, r in ipairs(records) do
      t.queries = t.queries + 1
      if r.error then
        t.failed = t.failed + 1
        io.stderr:write("run.lua: ", c.name, ": ", tostring(r.id), ": ", tostring(r.error), "\n")
      else
        t.wall, t.standard = t.wall + r.stats.wall_ms, t.standard + r.stats.standard_ms
        local key = json.canonical({ r.answer, r.trajectory })
        if ci == 1 then base[r.id] = key end
        if base[r.id] == key then t.same = t.same + 1 end
      end
    end
    local pf = agg.prefetch
    if pf then
      t.fired, t.promoted, t.saved_ms = t.fired + pf.fired, t.promoted + pf.promoted, t.saved_ms + pf.saved_ms
    end
    t.wasted, t.wasted_cost = t.wasted + agg.wasted_calls, t.wasted_cost + agg.wasted_cost
    -- calls made early, by what the policy says of the tool
    for name, n in pairs(agent.early) do
      if setup.policy.annotations(name).readOnlyHint then t.early_reads = t.early_reads + n
      else t.early_writes = t.early_writes + n end
    end
  end
  io.stderr:write(string.format("run.lua: fold %d of %d done (%d conversations, %.0f s)\n", f, FOLDS, #test,
    (specula.real_now() - t0) / 1000))
end
os.remove(model_file)

print(string.format("%d conversations of %s, grouped %d-fold (a predictor trained on the other folds, then online); "
  .. "virtual clock; read cost %g", totals[1].queries, path:match("[^/]*$"), FOLDS, setup.READ_COST))
print(string.format("%-20s %10s %7s %8s %7s %9s %7s %9s %7s %7s %6s", "configuration", "wall (s)", "RelLat",
  "vs seq", "fired", "promoted", "wasted", "w. cost", "early R", "early W", "same"))
local seq_wall = totals[1].wall
for i, c in ipairs(CONFIGS) do
  local t = totals[i]
  print(string.format("%-20s %10.1f %7.3f %8.3f %7d %9d %7d %9.2f %7d %7d %3d/%d", c.name, t.wall / 1000,
    t.standard > 0 and t.wall / t.standard or 0, seq_wall > 0 and t.wall / seq_wall or 0, t.fired, t.promoted,
    t.wasted, t.wasted_cost, t.early_reads, t.early_writes, t.same, t.queries))
end
print("(fired/promoted: predicted calls started early / used by the model's decided call; wasted: every")
print(" discarded speculative call, both axes; early R / W: calls run from an unverified state or predicted, of")
print(" read-only / other tools; same: answer and trajectory identical to sequential)")
if JSON_OUT then
  local out = {}
  for i, c in ipairs(CONFIGS) do
    local t = totals[i]
    t.config = c.name
    t.rel_lat = t.standard > 0 and t.wall / t.standard or nil
    t.vs_sequential = seq_wall > 0 and t.wall / seq_wall or nil
    out[i] = t
  end
  local fh = assert(io.open(JSON_OUT, "w"))
  fh:write(json.encode({ traces = path, folds = FOLDS, latency = setup.LATENCY, read_cost = setup.READ_COST,
    configs = json.array(out) }), "\n")
  fh:close()
end
