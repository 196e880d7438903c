-- The virtual clock against the real one (docs/cli.md#clocks-and-schedules): the same keyed draws
-- run under both clocks must commit the same hops, verdicts, rollbacks and
-- answers; the virtual run's RelLat must equal the event-level model (the
-- replay simulation of its own stage records) within 0.001.
-- usage: specula run clock_compare.lua N OUT_DIR   -> one JSON line
local specula = require "specula"
local json = specula.json
local N, DIR = tonumber(arg[1] or "200"), arg[2] or "/tmp"

-- Stage times whose races are won by milliseconds, not microseconds
-- (speculator 1-2 ms, step 10-12 ms, target 40-41 ms: a speculator is never
-- within 8 ms of its target, nor a thread's promotion of its own target's
-- return), so a real-clock run's scheduling noise on a loaded machine
-- cannot flip a verdict.
local agent = specula.sim.multihop { hops = { 3, 7 }, p = 0.6, seg = { "uniform", 10, 12 },
  spec = { "uniform", 1, 2 }, target = { "uniform", 40, 41 } }
local qs = {}
for i = 1, N do qs[i] = { id = "c" .. i, query = "clock " .. i } end

local function summary(recs)
  local out = {}
  for i, r in ipairs(recs) do
    local verdicts = {}
    for j, h in ipairs(r.stages.hops) do verdicts[j] = h.spec .. ":" .. tostring(h.rank) end
    out[i] = json.canonical({ r.id, r.answer, r.trajectory, r.stats.commits, r.stats.rollbacks,
                              r.stats.hops, verdicts, r.error })
  end
  return out
end

local function write(path, recs)
  local f = assert(io.open(path, "w"))
  for _, r in ipairs(recs) do f:write(json.encode(r), "\n") end
  f:close()
end

local report = { queries = N, configs = {} }
for _, cfg in ipairs({ { k = 3, launch = "eager" }, { k = 2, launch = "slot" }, { k = "inf", launch = "eager" } }) do
  local opts = { queries = qs, k = cfg.k, spec_launch = cfg.launch, concurrency = 50 }
  local real_t0 = specula.real_now()
  local real = specula.run(agent, opts)
  local real_ms = specula.real_now() - real_t0
  opts.clock = "virtual"
  local virt_t0 = specula.real_now()
  local virt, vagg = specula.run(agent, opts)
  local virt_ms = specula.real_now() - virt_t0
  local a, b = summary(real), summary(virt)
  -- A shared VM can stall the process for tens of milliseconds (another
  -- tenant's burst), which flips a real-clock race the stage times above
  -- leave 8 ms of room for: the queries that differ are run again under
  -- the real clock, and only one that differs both times counts (a stall
  -- does not come back at the same query; a clock that disagrees does).
  local again
  for i = 1, N do
    if a[i] ~= b[i] then again = again or {} again[#again + 1] = i end
  end
  local diff, rerun = 0, again and #again or 0
  if again then
    local sub = {}
    for j, i in ipairs(again) do sub[j] = qs[i] end
    local ropts = { queries = sub, k = cfg.k, spec_launch = cfg.launch, concurrency = 50 }
    local a2 = summary(specula.run(agent, ropts))
    for j, i in ipairs(again) do
      if a2[j] ~= b[i] then
        diff = diff + 1
        report.example = report.example or { real = a[i], real_again = a2[j], virtual = b[i] }
      end
    end
  end
  local path = DIR .. "/clock_" .. cfg.k .. "_" .. cfg.launch .. ".jsonl"
  write(path, virt)
  report.configs[#report.configs + 1] = { k = cfg.k, launch = cfg.launch, differ = diff, rerun = rerun,
    rel_lat = vagg.rel_lat, file = path, real_ms = real_ms, virt_ms = virt_ms,
    virtual_wall_ms = vagg.wall_ms, commits = vagg.commits, rollbacks = vagg.rollbacks,
    clock_after = specula.clock() }
end
print(json.encode(report))
