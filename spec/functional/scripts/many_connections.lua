-- 5,000 queries whose target calls run at once, each on its own connection.
local specula = require "specula"
local json = specula.json
local BASE, N = arg[1], tonumber(arg[2] or "5000")
specula.http.configure{ max_host_connections = N + 100, max_total_connections = N + 100 }
local agent = specula.agent {
  policy = { get = "full" },
  tools = { get = { call = function(args, ctx)
    local r, err = specula.http.request{ url = BASE .. "/delay/300", timeout_ms = 30000 }
    if not r then error(err, 0) end
    return r.body
  end } },
  init = function() return { hop = 0 } end,
  step = function(s) if s.hop >= 1 then return { final = "ok" } end
    return { action = { tool = "get", args = {} } } end,
  update = function(s, step, obs) return { hop = 1, obs = obs } end,
}
local qs = {}
for i = 1, N do qs[i] = "c" .. i end
local t0 = specula.now()
local recs, agg = specula.run(agent, { queries = qs, mode = "sequential", concurrency = N, light = true })
local wall = specula.now() - t0
local stats = json.decode(specula.http.request{ url = BASE .. "/stats" }.body)
local c = specula.settle()
print(json.encode({ failed = agg.failed, wall_ms = wall, peak_open = stats.accepted,
  left = { transfers = c.transfers, timers = c.timers, tasks = c.tasks, polls = c.polls } }))
