-- specula run conversation_agent.lua DIR: the trace-driven agent
-- (specula.agents.conversation) on recorded conversations of a made-up
-- parcel desk (reads: track_parcel, depot_hours; writes: reroute, and the
-- reply to the customer), under the virtual clock, in four configurations.
-- Prints one JSON object with what the spec checks.
local specula = require "specula"
local json = specula.json
local dir = assert(arg[1], "usage: conversation_agent.lua DIR")

-- ---- the recordings ---------------------------------------------------------
local seed = 11
local function r(n)
  seed = (seed * 1103515245 + 12345) % 2147483648
  return seed % n + 1
end
local function call(id, name, args)
  return { role = "assistant", content = "", tool_calls = { { id = id, type = "function",
    ["function"] = { name = name, arguments = json.encode(args) } } } }
end
local function result(id, v) return { role = "tool", tool_call_id = id, content = json.encode(v) } end

local function desk(i)
  local code = string.format("PX%05d", r(99999))
  local depot = ({ "Lyon-2", "Gent-7", "Turku-1" })[r(3)]
  local other = ({ "Oslo-4", "Porto-9" })[r(2)]
  local m = {
    { role = "system", content = "You help customers with parcels." },
    { role = "user", content = "Where is parcel " .. code .. "? I will not be home." },
    call("t", "track_parcel", { code = code }),
    result("t", { code = code, depot = depot, eta = "2024-06-0" .. r(9) }),
    call("d", "depot_hours", { depot = depot }),
    result("d", { depot = depot, opens = "08:00" }),
    { role = "assistant", content = "Your parcel is at " .. depot .. ". Shall I send it to " .. other .. " instead?" },
    { role = "user", content = "Yes please, reroute it to " .. other .. "." },
    call("x", "reroute", { code = code, depot = other }),
    result("x", "rerouted"),
    { role = "assistant", content = "Done: parcel " .. code .. " goes to " .. other .. "." },
  }
  return { id = "desk" .. i, messages = m }
end

local function write(path, from, n)
  local f = assert(io.open(path, "w"))
  local out = {}
  for i = from, from + n - 1 do
    local c = desk(i)
    out[#out + 1] = c
    f:write(json.encode(c), "\n")
  end
  f:close()
  return out
end
local train_path, test_path = dir .. "/desk-train.jsonl", dir .. "/desk-test.jsonl"
write(train_path, 1, 30)
local test = write(test_path, 100, 12)

-- ---- the latency model, computed here on its own ----------------------------------
local LAT = { model = { base_ms = 100, per_token_ms = 10, chars_per_token = 4 },
              tools = { default_ms = 200, track_parcel = 300, depot_hours = 150 }, user_ms = 40 }
local function model_ms(m)
  local chars = #(m.content or "")
  for _, tc in ipairs(m.tool_calls or {}) do chars = chars + #tc["function"].name + #tc["function"].arguments end
  return LAT.model.base_ms + LAT.model.per_token_ms * math.ceil(chars / LAT.model.chars_per_token)
end
-- a sequential run takes every model turn and every call back to back (the
-- reply's time is the user's)
local function expected_ms(c)
  local ms = 0
  local assistants = {}
  for i, m in ipairs(c.messages) do if m.role == "assistant" then assistants[#assistants + 1] = i end end
  for k, i in ipairs(assistants) do
    local m = c.messages[i]
    ms = ms + model_ms(m)
    if m.tool_calls then ms = ms + (LAT.tools[m.tool_calls[1]["function"].name] or LAT.tools.default_ms)
    elseif k < #assistants then ms = ms + LAT.user_ms end
  end
  return ms
end

-- ---- predictors ----------------------------------------------------------------------
-- The oracle proposes the recorded next call (writes too) with 0.9 and a
-- wrong one with 0.1, and keeps what it was shown.
local recorded = {}
for _, c in ipairs(test) do recorded[c.id] = c end
local shown = {}
local function oracle(history, ctx)
  local c = recorded[ctx.id]
  local calls = {}
  for _, m in ipairs(c.messages) do
    if m.role == "assistant" then calls[#calls + 1] = m end
  end
  local m = calls[ctx.hop + 1]
  local msgs = ctx.messages
  shown[#shown + 1] = { id = ctx.id, hop = ctx.hop, n = #msgs, last = msgs[#msgs] and msgs[#msgs].kind,
                        tools = ctx.tools and ctx.tools.track_parcel ~= nil }
  if not m or not m.tool_calls then
    return { { tool = "track_parcel", args = { code = "nothing" }, confidence = 0.2 } }
  end
  local fn = m.tool_calls[1]["function"]
  return { { tool = fn.name, args = json.decode(fn.arguments), confidence = 0.9 },
           { tool = fn.name, args = { code = "wrong" }, confidence = 0.1 } }
end

local policy = { track_parcel = "full", depot_hours = "full", reroute = "forbid", reply = "forbid" }

local function run(name, opts, predict)
  local agent = specula.agents.conversation { file = test_path, latency = LAT, predict = predict, policy = policy,
    speculate = { p = 0.7, ms = 20 } }
  opts.queries = {}
  for i, c in ipairs(test) do opts.queries[i] = { id = c.id, query = c.messages[2].content } end
  opts.clock = "virtual"
  local recs, agg = specula.run(agent, opts)
  local out = { name = name, wall = 0, standard = 0, traj = {}, failed = 0, early = agent.early,
                prefetch = agg.prefetch, wasted = agg.wasted_calls, gate = {} }
  for i, rec in ipairs(recs) do
    if rec.error then out.failed = out.failed + 1; out.error = rec.error
    else
      out.wall, out.standard = out.wall + rec.stats.wall_ms, out.standard + rec.stats.standard_ms
      out.traj[i] = json.canonical({ rec.answer, rec.trajectory })
    end
  end
  for tool, t in pairs(agg.policy_counts.tools) do
    local full = 0
    for trig, d in pairs(t.triggers or {}) do
      if trig ~= "target" then full = full + (d.full or 0) end
    end
    local forbid = 0
    for _, d in pairs(t.triggers or {}) do forbid = forbid + (d.forbid or 0) end
    out.gate[tool] = { early_full = full, forbid = forbid }
  end
  return out
end

local seq = run("sequential", { mode = "sequential", predict = "off" })
local act = run("action", { mode = "sequential" }, oracle)
local hop = run("spechop", { mode = "spechop", k = 3, predict = "off" })
local both = run("both", { mode = "spechop", k = 3 }, oracle)
-- the learned predictor, trained on other conversations of the desk
local P = specula.predict.learned { train = { train_path } }
local lrn = run("learned", { mode = "sequential" }, P)

local expected = 0
for _, c in ipairs(test) do expected = expected + expected_ms(c) end

local function same(a)
  local n = 0
  for i = 1, #test do if a.traj[i] and a.traj[i] == seq.traj[i] then n = n + 1 end end
  return n
end
local res = { queries = #test, expected_ms = expected, learned_online = P.provenance.online.conversations,
              shown = shown, configs = {} }
for _, c in ipairs({ seq, act, hop, both, lrn }) do
  res.configs[c.name] = { wall = c.wall, standard = c.standard, same = same(c), failed = c.failed, error = c.error,
    early = c.early, promoted = c.prefetch and c.prefetch.promoted or 0, fired = c.prefetch and c.prefetch.fired or 0,
    wasted = c.wasted, gate = c.gate }
end
print(json.encode(res))
