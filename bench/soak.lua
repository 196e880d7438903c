-- bench/soak.lua — a compressed soak: continuous queries for at least two
-- minutes with frequent rollbacks and cancellations (speculative targets
-- over HTTP that are discarded on the wire, predictions orphaned every
-- step), sampling RSS and open file descriptors every few seconds. Fails
-- (non-zero exit) if either keeps growing.
--   specula bench soak [--seconds 150] [--every 5]
local specula = require "specula"
local json, sim = specula.json, specula.sim
local B = dofile(require("specula.internal.core").host.root .. "/bench/lib.lua")

local SECONDS, EVERY = 150, 5
-- (checked before the test server starts: a bad option left it running)
local function positive(name, v)
  local n = tonumber(v)
  if not n or n ~= n or n <= 0 then error("bench soak: " .. name .. " takes a positive number, got " .. tostring(v), 0) end
  return n
end
for i = 1, #arg do
  if arg[i] == "--seconds" then SECONDS = positive("--seconds", arg[i + 1]) end
  if arg[i] == "--every" then EVERY = positive("--every", arg[i + 1]) end
end

local base, stop_server = B.server()
local agent = specula.agent {
  policy = { fetch = "full" },
  tools = { fetch = {
    cost = 0.001,
    call = function(args, ctx)
      -- the true path answers in 10 ms; wrong guesses' threads hang until cancelled
      local path = ctx.speculative and "/delay/200" or "/delay/10"
      local r, err = specula.http.request{ url = base .. path, timeout_ms = 5000 }
      if not r then error(err, 0) end
      return "r" .. args.i .. ":" .. tostring(args.from)
    end,
    speculate = function(args, ctx)
      specula.sleep(2)
      if sim.draw(ctx, "ok") < 0.5 then return "r" .. args.i .. ":" .. tostring(args.from) end
      return "wrong"
    end,
  } },
  predict = function(history)
    local i = #history
    return { { tool = "fetch", args = { i = i, from = "guess" }, confidence = 0.6 },
             { tool = "fetch", args = { i = i, from = history[i] and history[i].observation or "none" }, confidence = 0.3 } }
  end,
  init = function(q) return { i = 0, last = "none" } end,
  step = function(s, ctx) specula.sleep(3)
    if s.i >= 6 then return { final = s.last } end
    return { action = { tool = "fetch", args = { i = s.i, from = s.last } } } end,
  update = function(s, step, obs) return { i = s.i + 1, last = obs } end,
}

local samples = {}
local t0 = specula.now()
local done, rollbacks, cancelled, failed, batch = 0, 0, 0, 0, 0
local function sample()
  local c = specula.counts()
  samples[#samples + 1] = { t = (specula.now() - t0) / 1000, rss = B.rss_bytes(), fds = B.open_fds(),
                            tasks = c.tasks, transfers = c.transfers, lua = collectgarbage("count") * 1024 }
  local s = samples[#samples]
  print(string.format("t=%6.1fs  rss %7.1f MB  fds %4d  lua %6.1f MB  tasks %5d  transfers %4d  queries %d",
    s.t, s.rss / 1048576, s.fds, s.lua / 1048576, s.tasks, s.transfers, done))
  io.stdout:flush()
end
-- samples are taken between batches, when nothing is in flight: what is
-- still open then is what a leak would leave behind
local next_sample = EVERY * 1000
local first_error
-- the test server stops however the runs end
local ok_runs, err_runs = pcall(function()
sample()
while specula.now() - t0 < SECONDS * 1000 do
  batch = batch + 1
  local qs = {}
  for i = 1, 200 do qs[i] = "b" .. batch .. "q" .. i end
  local recs, agg = specula.run(agent, { queries = qs, k = 4, concurrency = 100, light = true, seed = batch })
  done = done + #recs
  rollbacks = rollbacks + agg.rollbacks
  cancelled = cancelled + agg.cancelled
  failed = failed + agg.failed
  for _, r in ipairs(recs) do if r.error and not first_error then first_error = r.error end end
  if specula.now() - t0 >= next_sample then
    specula.sleep(5)
    sample()
    next_sample = next_sample + EVERY * 1000
  end
end
end)
stop_server()
if not ok_runs then error(err_runs, 0) end
if first_error then print("first error: " .. first_error) end

-- slope of a least-squares line through the second half (after warm-up)
local function slope(key)
  local h = math.floor(#samples / 2)
  local n, sx, sy, sxx, sxy = 0, 0, 0, 0, 0
  for i = h + 1, #samples do
    local x, y = samples[i].t, samples[i][key]
    n, sx, sy, sxx, sxy = n + 1, sx + x, sy + y, sxx + x * x, sxy + x * y
  end
  if n < 2 then return 0 end
  return (n * sxy - sx * sy) / (n * sxx - sx * sx)
end
local rss_slope = slope("rss") * 60 / 1048576        -- MB per minute
local fd_slope = slope("fds") * 60                   -- descriptors per minute
print(string.format("\n%d queries in %.0f s (%d failed), %d rollbacks, %d calls cancelled on the wire",
  done, (specula.now() - t0) / 1000, failed, rollbacks, cancelled))
print(string.format("second-half slopes: RSS %+.2f MB/min, open fds %+.2f /min", rss_slope, fd_slope))
-- descriptors: idle keep-alive connections come and go, so the test is a
-- bounded band rather than a slope
local h = math.floor(#samples / 2)
local lo, hi = math.huge, 0
for i = h + 1, #samples do
  lo, hi = math.min(lo, samples[i].fds), math.max(hi, samples[i].fds)
end
print(string.format("open fds in the second half: %d..%d", lo, hi))
local ok = rss_slope < 2.0 and hi - lo <= 12 and hi <= samples[2].fds + 12 and failed == 0
print(ok and "soak: flat" or "soak: GROWING (or failures)")
if not ok then error("soak failed: RSS or descriptors keep growing", 0) end
