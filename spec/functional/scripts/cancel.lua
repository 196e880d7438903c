-- Rollbacks cancel discarded work on the wire: speculative threads' target
-- calls hit /stall (they never finish); the speculator is always wrong, so
-- every one of them is discarded and must be closed at once.
local specula = require "specula"
local json = specula.json
local BASE = arg[1]

local function stats() return json.decode(specula.http.request{ url = BASE .. "/stats" }.body) end

local agent = specula.agent {
  policy = { fetch = "full" },
  init = function(q) return { q = q, hop = 0 } end,
  step = function(s) specula.sleep(1) if s.hop >= 5 then return { final = "done" } end
    return { action = { tool = "fetch", args = { hop = s.hop } } } end,
  update = function(s, step, obs) return { q = s.q, hop = s.hop + 1, last = obs } end,
  tools = { fetch = {
    call = function(args, ctx)
      local path = ctx.speculative and "/stall" or "/delay/15"
      local r, err = specula.http.request{ url = BASE .. path }
      if not r then error(err) end
      return r.body .. args.hop
    end,
    speculate = function(args) specula.sleep(1) return "wrong guess" end,
  } },
}

local max_stall, max_transfers, samples = 0, 0, 0
local done = false
local sampler = specula.spawn(function()
  while not done do
    local s = stats()
    if s.stall_open > max_stall then max_stall = s.stall_open end
    local c = specula.counts()
    if c.transfers > max_transfers then max_transfers = c.transfers end
    samples = samples + 1
    specula.sleep(3)
  end
end)
local qs = {}
for i = 1, 20 do qs[i] = "c" .. i end
local recs, agg = specula.run(agent, { queries = qs, k = 4, concurrency = 20 })
done = true
sampler:wait()
specula.sleep(20)
local s = stats()
local c = specula.settle()
print(json.encode({ failed = agg.failed, rollbacks = agg.rollbacks, cancelled = agg.cancelled,
  stall_open_after = s.stall_open, max_stall_during = max_stall, max_transfers = max_transfers,
  transfers_after = c.transfers, timers_after = c.timers, tasks_after = c.tasks, samples = samples,
  speculative_launches = agg.speculative_launches }))
