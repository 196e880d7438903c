-- Fault injection with speculation on: each query's target tool hits one
-- fault mode of the test server (others hit a healthy endpoint). Prints one
-- JSON summary: per-query answer or error, and what was left open.
local specula = require "specula"
local json, sim = specula.json, specula.sim
local BASE = arg[1]

local MODES = {
  ok1 = "/echo?a=1", ok2 = "/echo?a=2", ok3 = "/echo?a=3",
  reset = "/reset?after=10",
  stall = "/stall",
  drip = "/drip?bytes=50&interval=100",
  r429 = "/flaky/{id}/1/429?retry_after=1",
  burst503 = "/flaky/{id}/2/503",
  err500 = "/status/500",
  truncated = "/truncated",
  utf8 = "/invalid_utf8",
  big = "/big/3000000",
}

-- one HTTP tool per endpoint (JSON results, bounded time and size, retries)
local SEED = os.time()
local function http_tool(path)
  return specula.tools.http {
    url = BASE .. path, result = "json",
    timeout_ms = 1500, idle_timeout_ms = 300, max_body_bytes = 2000000,
    retry = { max_retries = 3, base_ms = 20, cap_ms = 100 },
  }
end
local healthy = http_tool("/echo")
local faulty = {}
for id, path in pairs(MODES) do faulty[id] = http_tool((path:gsub("{id}", id .. SEED))) end

local agent = specula.agent {
  policy = { fetch = "full" },
  tools = { fetch = {
    call = function(args, ctx)
      -- the fault hits the second hop; other hops see a healthy server
      local tool = (args.hop == 1) and faulty[ctx.id] or healthy
      local r = tool.call({}, ctx)
      return r.method or r
    end,
    speculate = function(args, ctx)
      specula.sleep(1)
      return sim.draw(ctx, "ok") < 0.5 and "guess" or "other"
    end,
    verify = function(p, a) return false, "never equal" end,
  } },
  init = function(q) return { hop = 0 } end,
  step = function(s) specula.sleep(2) if s.hop >= 3 then return { final = "done " .. s.hop } end
    return { action = { tool = "fetch", args = { hop = s.hop } } } end,
  update = function(s, step, obs) return { hop = s.hop + 1 } end,
}
local qs = {}
for id in pairs(MODES) do qs[#qs + 1] = { id = id, query = id } end
table.sort(qs, function(a, b) return a.id < b.id end)
local recs, agg = specula.run(agent, { queries = qs, k = 3, concurrency = #qs })
local out = { answers = {}, errors = {} }
-- arg[2]: a file for the raw error messages ("id\0message\0" each), so the
-- spec checks their bytes as they are, not after a JSON round trip
local raw = arg[2] and assert(io.open(arg[2], "wb"))
for _, r in ipairs(recs) do
  if r.error then out.errors[r.id] = r.error else out.answers[r.id] = r.answer end
  if raw and r.error then raw:write(r.id, "\0", tostring(r.error), "\0") end
end
if raw then raw:close() end
local c = specula.settle()
out.left = { transfers = c.transfers, timers = c.timers, tasks = c.tasks, windows = c.windows, requests = c.requests,
             values = c.values }
out.cancelled = agg.cancelled
print(json.encode(out))
