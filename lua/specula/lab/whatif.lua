-- specula.lab.whatif: what speculation would have saved on an agent's own timed
-- logs (`specula whatif`). The logs (specula.convtraces.sessions) become
-- timed conversations; each runs as a conversation agent
-- (specula.agents.conversation) on the virtual clock with the log's own
-- times, in time order, in each configuration:
--   recorded            the agent's time as the log counts it (no run)
--   sequential          the replay: every turn and call back to back
--   predictor           action speculation: the learned predictor (online
--                       over the sessions in time order, after --train)
--   spechop             SpecHop (k = 3) with a speculator giving the recorded
--                       result with probability SPEC_P after SPEC_MS
--   both                the two
--   perfect-predictor   the bounds: a predictor proposing the recorded call
--   perfect-speculator  (confidence 1), a speculator that is always right
--   perfect-both        at no cost, and both
-- The policy (policies/whatif.lua, or --policy) says which calls may run
-- before the model decided them; every call run early is classified by it
-- (early writes must stay 0).
local json = require "specula.json"
local output = require "specula.internal.output"
local sessions = require "specula.convtraces.sessions"

local type, ipairs, pairs, tostring, format, floor = type, ipairs, pairs, tostring, string.format, math.floor

local M = {}

M.SPEC_P, M.SPEC_MS, M.K = 0.6, 50, 3
M.COLLECT_MB = 1

M.CONFIGS = { "recorded", "sequential", "predictor", "spechop", "both",
              "perfect-predictor", "perfect-speculator", "perfect-both" }
local KNOWN = {}
for _, n in ipairs(M.CONFIGS) do KNOWN[n] = true end

-- "a,b" -> a list of configurations, or nil and a message.
function M.config_list(s)
  local out, seen = {}, {}
  for name in (s .. ","):gmatch("([^,]*),") do
    name = name:match("^%s*(.-)%s*$")
    if not KNOWN[name] then
      return nil, "--compare: unknown configuration '" .. name .. "' (" .. table.concat(M.CONFIGS, ", ") .. ")"
    end
    if not seen[name] then seen[name] = true; out[#out + 1] = name end
  end
  return out
end

-- The policy: a Lua file returning { read_only = function(tool, args) ->
-- boolean }. nil and a message when it is not one.
function M.load_policy(path)
  local p = path
  if not p then
    p = require("specula.policy").resolve("whatif.lua")
    if not p then return nil, "the default policy policies/whatif.lua is not installed" end
  end
  local chunk, err = loadfile(p)
  -- loadfile says "cannot open PATH" or "PATH:LINE: ..." itself
  if not chunk then return nil, "--policy: " .. tostring(err) end
  local ok, v = pcall(chunk)
  if not ok then return nil, "--policy: " .. p .. ": " .. tostring(v) end
  if type(v) ~= "table" or type(v.read_only) ~= "function" then
    return nil, "--policy: " .. p .. ": expected a table with read_only = function(tool, args) -> boolean"
  end
  return v
end

local function median(list)
  if #list == 0 then return nil end
  table.sort(list)
  local n = #list
  return n % 2 == 1 and list[(n + 1) / 2] or (list[n / 2] + list[n / 2 + 1]) / 2
end

-- The sessions of the logs, in time order; failures apart ({ path, error }).
function M.read_logs(paths, opts, warn)
  local list, failed = {}, {}
  -- a log named twice (overlapping globs) is read once: twice, its
  -- sessions would weigh double in every row
  local realpath, seen_path = require("specula.provenance").realpath, {}
  for _, p in ipairs(paths) do
    local rp = realpath(p)
    local first = seen_path[rp]
    seen_path[rp] = first or p
    if first then warn(format("%s: given twice (as %s): read once", p, first)) goto next_log end
    local got, err = sessions.read_all(p, opts, warn)
    if got then
      for _, s in ipairs(got) do list[#list + 1] = s end
    else
      failed[#failed + 1] = { path = p, error = err }
    end
    ::next_log::
  end
  table.sort(list, function(a, b) return (a.t0 or 0) < (b.t0 or 0) end)
  -- ids stay apart (two logs of one session id, say)
  local seen = {}
  for _, s in ipairs(list) do
    local id = tostring(s.id)
    if seen[id] then
      local n = 2
      while seen[id .. "#" .. n] do n = n + 1 end
      id = id .. "#" .. n
    end
    seen[id] = true
    s.id = id
  end
  return list, failed
end

-- A predictor that proposes the recorded call (the bound), as the agent
-- replays it (box.agent: the agent, set once built); for a turn of
-- parallel calls, each of them.
local function oracle(box)
  return function(_, ctx)
    local st = box.agent and box.agent.recorded(ctx.id, ctx.hop)
    if not st then return {} end
    local out = {}
    for i, c in ipairs(st.calls or { st }) do out[i] = { tool = c.tool, args = c.args, confidence = 1 } end
    return out
  end
end

-- The recorded call (tool, args) is at its hop (st: agent.recorded's): the
-- step's own, or a member of its group.
local function recorded_call(st, tool, args)
  if not st then return nil end
  local key = json.canonical(args)
  for _, c in ipairs(st.calls or { st }) do
    if c.tool == tool and json.canonical(c.args) == key then return c end
  end
  return nil
end

-- The learned predictor, trained on --train files (sessions logs or
-- conversations files).
local function learned(train, opts)
  local P = require("specula.predict").learned {}
  if #train > 0 then
    local convs = {}
    for _, f in ipairs(train) do
      -- every session of the file (a conversations or OTel file holds
      -- several; only the first was learnt from)
      local list = sessions.read_all(f, { approval_cap_ms = opts.approval_cap_ms, keep_text = true })
      if list and #list > 0 then
        for _, s in ipairs(list) do
          local c = require("specula.convtraces").conversation(s.id, s.msgs)
          if c then convs[#convs + 1] = c end
        end
      else
        local ok, err = require("specula.convtraces").read(f, nil, convs, function() end)
        if not ok then return nil, "--train: " .. tostring(err) end
      end
    end
    P:train(convs)
  end
  return P
end

-- A copy of a value's tables, all the way down (cycles kept as cycles; the
-- keys are the same values: an argument's keys are strings): for arguments
-- JSON cannot carry (policy_ro copies through the C codec).
local function deep_copy(v, seen)
  if type(v) ~= "table" then return v end
  seen = seen or {}
  local c = seen[v]
  if c then return c end
  c = {}
  seen[v] = c
  local keys = {}
  for k in next, v do keys[#keys + 1] = k end
  for i = 1, #keys do
    local k = keys[i]
    local x = rawget(v, k)
    if type(x) == "table" then x = deep_copy(x, seen) end
    rawset(c, k, x)
  end
  local mt = getmetatable(v)
  if mt ~= nil then setmetatable(c, mt) end
  return c
end

-- A session's early calls (run_config's on_early) into its row's totals.
local function add_early(t, e)
  if not e then return end
  t.early_reads, t.early_writes = t.early_reads + e.reads, t.early_writes + e.writes
  for tool, h in pairs(e.hits) do
    local th = t.tool_hits[tool] or { hits = 0, hidden = 0 }
    th.hits, th.hidden = th.hits + h.hits, th.hidden + h.hidden
    t.tool_hits[tool] = th
  end
end

-- Run every session in one configuration. Returns the totals.
local function run_config(name, list, ctx)
  local specula = require "specula"
  local t = { name = name, wall = 0, standard = 0, fired = 0, hit = 0, wasted = 0, early_reads = 0,
              early_writes = 0, failed = 0, sessions = 0, saved_ms = 0, by_session = {}, tool_hits = {} }
  local predict, speculate, mode = nil, nil, "sequential"
  local box = {}
  if name == "predictor" or name == "both" then
    local P, err = learned(ctx.train, ctx.read_opts)
    if not P then return nil, err end
    predict = P
  elseif name == "perfect-predictor" or name == "perfect-both" then
    predict = oracle(box)
  end
  if name == "spechop" or name == "both" then
    speculate, mode = { p = ctx.spec_p, ms = ctx.spec_ms }, "spechop"
  elseif name == "perfect-speculator" or name == "perfect-both" then
    speculate, mode = { p = 1, ms = 0 }, "spechop"
  end
  local policy = ctx.policy
  local group = specula.agents.GROUP_TOOL
  -- the policy is the user's code: it sees a copy of the arguments (one
  -- that changed the recorded call's table changed the replay itself and
  -- every row after it, without a failure)
  local function policy_ro(tool, args)
    -- a recorded call's arguments are JSON: copied through the C codec.
    -- (Copied by deep_copy in Lua, the policy now and then judged a
    -- read-only shell call a write when the machine was loaded: the golden
    -- figures of a real trace changed run to run, and not with the JIT off
    -- for deep_copy; a LuaJIT trace issue, not pinned down.)
    local ok, text = pcall(json.encode, args)
    local copy = ok and text and json.decode(text)
    if copy == nil then copy = deep_copy(args) end
    return policy.read_only(tool, copy)
  end
  local function read_only(tool, args)
    if tool ~= group then return policy_ro(tool, args) end
    -- a turn's calls as one step (from a state not yet verified): only
    -- when every one may run early; a prediction is judged call by call
    for _, c in ipairs(type(args.calls) == "table" and args.calls or {}) do
      if not policy_ro(c.tool, c.args or {}) then return false end
    end
    return true
  end
  local early = {}   -- session id -> { reads, writes, hits = { tool -> { hits, hidden } } }
  local agent = specula.agents.conversation {
    latency = ctx.latency, tools = ctx.tools, predict = predict, speculate = speculate, parallel = true,
    -- the replay's garbage bounded (a long session's peak stays flat);
    -- not for the learned predictor's rows: they keep their trajectories,
    -- and a full collection every MB of a growing heap costs time
    collect_mb = not (name == "predictor" or name == "both") and M.COLLECT_MB or nil,
    policy = { classes = { any = "full" }, tools = ctx.classes,
               decide = function(tool, args) return read_only(tool, args) and "full" or "forbid" end },
    -- counted per session: a session whose replay fails is no data point,
    -- and its early calls are added only for the sessions that succeed
    on_early = function(tool, args, c)
      local e = early[c.id]
      if not e then
        e = { reads = 0, writes = 0, hits = {} }
        early[c.id] = e
      end
      if read_only(tool, args) then e.reads = e.reads + 1
      else e.writes = e.writes + 1 end
      -- a predicted call equal to the recorded one at its hop: a hit
      local st = c.predicted and recorded_call(box.agent.recorded(c.id, c.hop), tool, args)
      if st then
        local h = e.hits[tool] or { hits = 0, hidden = 0 }
        h.hits = h.hits + 1
        h.hidden = h.hidden + math.min(st.tool_ms or 0, st.model_ms or 0)
        e.hits[tool] = h
      end
    end,
  }
  box.agent = agent
  local queries = {}
  for i, s in ipairs(list) do
    -- a session of any length replays whole: its steps (a turn each, or a
    -- call each) are fewer than its turns and calls with the final answer
    queries[i] = { id = s.id, query = s.query or "", messages = s.msgs,
                   max_hops = s.turns + sessions.n_calls(s) + 1 }
  end
  -- light: a record keeps its time, not its trajectory (the window lets a
  -- committed hop go), so a long session's replay holds no hop it passed
  -- (not with the learned predictor: it learns from the trajectories)
  local o = { queries = queries, clock = "virtual", concurrency = 1, mode = mode, k = M.K,
              light = not (name == "predictor" or name == "both"),
              predict = (not predict) and "off" or nil,
              -- the bound fires every call of a parallel turn, each certain:
              -- the gate's live estimate of a tool's saving (learnt from
              -- the steps of that tool alone, not from the groups it ran
              -- in) has nothing to weigh against it
              predict_top = predict and name:match("^perfect") and math.max(3, ctx.widest) or nil,
              ev_latency_ms = predict and name:match("^perfect") and 1 or nil }
  local records, agg = specula.run(agent, o)
  for _, r in ipairs(records) do
    if r.error then
      t.failed = t.failed + 1
      ctx.warn(format("%s: session %s failed: %s", name, tostring(r.id), tostring(r.error)))
    else
      t.sessions = t.sessions + 1
      local wall = r.wall_ms or r.stats.wall_ms
      t.wall = t.wall + wall
      t.by_session[tostring(r.id)] = wall
      add_early(t, early[r.id])
    end
  end
  -- no session replayed: no agent time (not 0 s, which reads as all of it saved)
  if t.sessions == 0 then t.wall = nil end
  t.standard = agg.standard_ms
  local pf = agg.prefetch
  if pf then t.fired, t.hit, t.saved_ms = pf.fired, pf.promoted, pf.saved_ms end
  t.wasted = agg.wasted_calls or 0
  -- calls of a parallel turn a prediction started: the engine saw them end
  -- unused (the step's action was the group), the group ran on them
  for _, r in ipairs(records) do
    local n, saved = 0, 0
    if not r.error then n, saved = agent.members_used(r.id) end
    t.hit, t.saved_ms, t.wasted = t.hit + n, t.saved_ms + saved, math.max(0, t.wasted - n)
  end
  return t
end

-- Each row of res against the replay (seq) and the bound (best) over the
-- sessions all three replayed: a session whose replay failed in a row is
-- left out of its comparisons, not taken for a saving (its time is not in
-- the row's sum). The replay must give the log's own count of a session
-- (within 2 %): when it does not, the log's times do not add up (a call
-- without its result, times out of order) and the session's rows are
-- suspect: said.
local function compare_rows(res, list, seq, best, warn)
  local seq_of, best_of = seq and seq.by_session or {}, best and best.by_session or {}
  for _, s in ipairs(list) do
    local x = seq_of[tostring(s.id)]
    if x and math.abs(x - s.recorded_ms) > 0.02 * s.recorded_ms + 1 then
      warn(format("session %s: the replay takes %s s where the log counts %s s (more than 2 %% apart: %d "
        .. "calls without a result, or times out of order?): its rows are suspect", tostring(s.id),
        format("%.1f", x / 1000), format("%.1f", s.recorded_ms / 1000), s.untimed))
    end
  end
  for _, t in ipairs(res.configs) do
    local a, b, c = 0, 0, 0
    for _, s in ipairs(list) do
      local id = tostring(s.id)
      local w, x, y = t.by_session[id], seq_of[id], best_of[id]
      if w and x and y then a, b, c = a + w, b + x, c + y end
    end
    t.rel_lat = b > 0 and a / b or nil
    t.share = b - c > 0 and (b - a) / (b - c) or nil
    t.hidden_ms = t.name ~= "recorded" and math.max(0, b - a) or 0
  end
end

-- The work of `specula whatif` (o: the parsed options). Returns the
-- result: { sessions, failed, configs = { totals }, tools = { rows } }.
function M.compute(o, warn)
  warn = warn or function(m) output.stderr("specula whatif: warning: ", m, "\n") end
  -- the texts of the logs (results, prompts, the model's) are kept only for
  -- what reads them: the learned predictor and --keep-content; else each is
  -- its digest (what the replay compares), so memory per call stays small
  local texts = o.keep_content or false
  for _, name in ipairs(o.compare or M.CONFIGS) do
    if name == "predictor" or name == "both" then texts = true end
  end
  local read_opts = { approval_cap_ms = o.approval_cap_ms, keep_text = texts }
  local list, failed = M.read_logs(o.logs, read_opts, warn)
  collectgarbage()   -- the reading's garbage, before the replays
  local policy, perr = M.load_policy(o.policy)
  if not policy then return nil, perr end
  -- the tools the sessions call (each in the policy's one class: its
  -- read_only decides per call)
  local group = require("specula.agents").GROUP_TOOL
  local by_id, tools, classes, per_tool, widest = {}, {}, { [group] = "any" }, {}, 0
  for _, s in ipairs(list) do
    by_id[s.id] = s
    if s.msgs.columns then
      -- (digests: the conversation as columns, specula.convtraces.turns)
      if s.msgs.widest > widest then widest = s.msgs.widest end
      for _, name in ipairs(s.msgs.tools) do
        if not classes[name] then classes[name] = "any"; tools[#tools + 1] = name end
      end
    else
      for _, m in ipairs(s.msgs) do
        if m.role == "assistant" and m.tool_calls and #m.tool_calls > widest then widest = #m.tool_calls end
        for _, tc in ipairs(m.role == "assistant" and m.tool_calls or {}) do
          local name = tc["function"].name
          if not classes[name] then classes[name] = "any"; tools[#tools + 1] = name end
        end
      end
    end
    for _, c in sessions.each_call(s) do
      local p = per_tool[c.tool] or { tool = c.tool, calls = 0, time = 0, times = {}, untimed = 0 }
      p.calls, p.time = p.calls + 1, p.time + c.tool_ms
      if c.untimed then p.untimed = p.untimed + 1 else p.times[#p.times + 1] = c.tool_ms end
      per_tool[c.tool] = p
    end
  end
  -- a call that differs from the recording takes its tool's median time
  local all, lat_tools = {}, {}
  for name, p in pairs(per_tool) do
    local m = median(p.times)
    if m then lat_tools[name] = m end
    for _, x in ipairs(p.times) do all[#all + 1] = x end
  end
  lat_tools.default_ms = median(all) or 0
  local ctx = { by_id = by_id, tools = tools, classes = classes, policy = policy, warn = warn, widest = widest,
                latency = { tools = lat_tools, user_ms = 0 }, train = o.train or {}, read_opts = read_opts,
                spec_p = o.spec_p or M.SPEC_P, spec_ms = o.spec_ms or M.SPEC_MS }
  local res = { sessions = #list, failed = failed, configs = {}, tools = {}, list = list }
  local recorded = 0
  for _, s in ipairs(list) do recorded = recorded + s.recorded_ms end
  local want = o.compare or M.CONFIGS
  local byname = {}
  for _, name in ipairs(want) do
    local t
    if name == "recorded" then
      t = { name = name, wall = recorded, sessions = #list, failed = 0, by_session = {} }
      for _, s in ipairs(list) do t.by_session[s.id] = s.recorded_ms end
    elseif #list > 0 then
      local err
      t, err = run_config(name, list, ctx)
      if not t then return nil, err end
    else
      t = { name = name, wall = 0, sessions = 0, failed = 0, by_session = {} }
    end
    res.configs[#res.configs + 1] = t
    byname[name] = t
  end
  -- the possible saving: sequential against both perfect (each computed
  -- when asked for or needed)
  local seq = byname.sequential or (#list > 0 and run_config("sequential", list, ctx)) or nil
  local best = byname["perfect-both"] or (#list > 0 and run_config("perfect-both", list, ctx)) or nil
  -- (nil when every session failed there: no time, not 0)
  res.sequential_ms = seq and seq.wall or nil
  res.best_ms = best and best.wall or nil
  compare_rows(res, list, seq, best, warn)
  -- per tool, with the predictor's hits
  local pred = byname.predictor
  local wait = 0
  for _, p in pairs(per_tool) do wait = wait + p.time end
  for name, p in pairs(per_tool) do
    local h = pred and pred.tool_hits[name]
    res.tools[#res.tools + 1] = { tool = name, calls = p.calls, untimed = p.untimed, time_ms = p.time,
      share = wait > 0 and p.time / wait or 0, hits = h and h.hits or 0,
      hit_rate = pred and (h and h.hits or 0) / p.calls or nil, hidden_ms = h and h.hidden or 0,
      read_only = nil }
  end
  table.sort(res.tools, function(a, b)
    if a.time_ms ~= b.time_ms then return a.time_ms > b.time_ms end
    return a.tool < b.tool
  end)
  return res
end

local function secs(ms) return ms and format("%.1f", ms / 1000) or "-" end
local function num(x, f)
  if not x then return "-" end
  local t = format(f or "%.3f", x)
  return (t:gsub("^%-(0%.0*)$", "%1"))   -- no "-0.00" for a rounding's sign
end

-- The tables as text.
function M.text(res)
  local out = {}
  local function p(...) out[#out + 1] = format(...) end
  local n_calls, untimed, user, appr, model, toolt, assumed = 0, 0, 0, 0, 0, 0, 0
  for _, s in ipairs(res.list) do
    if s.assumed then assumed = assumed + 1 end
    n_calls, untimed = n_calls + sessions.n_calls(s), untimed + s.untimed
    user, appr, model, toolt = user + s.user_ms, appr + s.approval_ms, model + s.model_ms, s.tool_ms + toolt
  end
  -- (the logs that could not be read: counted apart, never sessions)
  p("%d session%s (%d log%s unreadable), %d tool call%s (%d untimed); agent's time %s s: model %s s, tools %s s; "
    .. "left out: the person's %s s, approval waits %s s\n", res.sessions, res.sessions == 1 and "" or "s", #res.failed,
    #res.failed == 1 and "" or "s",
    n_calls, n_calls == 1 and "" or "s", untimed,
    secs(model + toolt), secs(model), secs(toolt), secs(user), secs(appr))
  if assumed > 0 then
    p("times assumed, not recorded, for %d sessions (the conversations format: docs/whatif.md)\n", assumed)
  end
  p("%-20s %10s %7s %7s %6s %5s %7s %7s %7s\n", "configuration", "agent (s)", "RelLat", "share", "fired", "hit",
    "wasted", "early R", "early W")
  for _, t in ipairs(res.configs) do
    local run = t.name ~= "recorded"
    p("%-20s %10s %7s %7s %6s %5s %7s %7s %7s\n", t.name, secs(t.wall), num(t.rel_lat), num(t.share, "%.2f"),
      run and tostring(t.fired or 0) or "-", run and tostring(t.hit or 0) or "-", run and tostring(t.wasted or 0) or "-",
      run and tostring(t.early_reads or 0) or "-", run and tostring(t.early_writes or 0) or "-")
  end
  for _, t in ipairs(res.configs) do
    if (t.failed or 0) > 0 then
      p("! %s: %d of %d sessions failed in its replay; its agent time is over the %d that succeeded, its RelLat "
        .. "and share over those the replay and the bound replayed too\n", t.name, t.failed, t.failed + t.sessions,
        t.sessions)
    end
  end
  p("%-24s %6s %9s %7s %8s %10s\n", "tool", "calls", "time (s)", "share", "hit rate", "hidden (s)")
  for _, r in ipairs(res.tools) do
    p("%-24s %6d %9s %7.2f %8s %10s\n", #r.tool > 24 and r.tool:sub(1, 21) .. "..." or r.tool, r.calls,
      secs(r.time_ms), r.share, num(r.hit_rate, "%.2f"), secs(r.hidden_ms))
  end
  for _, f in ipairs(res.failed) do p("failed: %s\n", f.error) end
  p("(RelLat: agent time over the sequential replay's; share: of the saving the bound (perfect-both)\n"
    .. " reaches; fired/hit: predicted calls started early / used; wasted: speculative calls thrown away;\n"
    .. " early R/W: calls run before the model decided them, read-only / not by the policy; hidden: the\n"
    .. " most the predictor's hits on the tool could hide, each up to its turn's model time)\n")
  return table.concat(out)
end

-- A record a session leaves in --out: digests and tool names, contents
-- only with keep_content.
function M.record(s, res, keep)
  local crypto = require "specula.crypto"
  local calls = {}
  for i, c in sessions.each_call(s) do
    local args = c.args_json or json.canonical(c.args)
    calls[i] = { tool = c.tool, args_sha256 = crypto.sha256_hex(args), args = keep and c.args or nil,
                 recorded_ms = c.recorded_ms or json.null, tool_ms = c.tool_ms, wait_ms = c.wait_ms,
                 untimed = c.untimed or nil }
  end
  local walls = {}
  for _, t in ipairs(res.configs) do walls[t.name] = t.by_session[s.id] or json.null end
  -- the digest of the log's bytes (it was the digest of its path): which
  -- file it was, without naming it
  local digest = require("specula.provenance").file_digest(s.path) or json.null
  return { id = s.id, format = s.format, assumed = s.assumed or nil, source_sha256 = digest, source = keep and s.path or nil,
           recorded_ms = s.recorded_ms, model_ms = s.model_ms, tool_ms = s.tool_ms, user_ms = s.user_ms,
           approval_ms = s.approval_ms, prompts = s.prompts, turns = s.turns, calls = json.array(calls),
           agent_ms = walls, messages = keep and s.msgs or nil }
end

function M.summary(res)
  local configs = {}
  local model_of = {}
  for _, s in ipairs(res.list) do model_of[tostring(s.id)] = s.model_ms or 0 end
  for i, t in ipairs(res.configs) do
    -- where the wait goes: the model's turns (speculation does not shorten
    -- them), the tool time still waited, and what speculation hid of the replay
    local model = 0
    for id in pairs(t.by_session) do model = model + (model_of[tostring(id)] or 0) end
    -- (a row whose every session failed has no time: null, not 0)
    local none = t.wall == nil
    configs[i] = { name = t.name, agent_ms = none and json.null or t.wall, model_ms = none and json.null or model,
                   tool_ms = none and json.null or math.max(0, t.wall - model),
                   hidden_ms = t.hidden_ms or 0,
                   rel_lat = t.rel_lat or json.null, share = t.share or json.null,
                   fired = t.fired, hit = t.hit, wasted = t.wasted, early_reads = t.early_reads,
                   early_writes = t.early_writes, sessions = t.sessions, failed = t.failed }
  end
  local tools = {}
  for i, r in ipairs(res.tools) do
    tools[i] = { tool = r.tool, calls = r.calls, untimed = r.untimed, time_ms = r.time_ms, share = r.share,
                 hit_rate = r.hit_rate or json.null, hidden_ms = r.hidden_ms }
  end
  local failed = {}
  for i, f in ipairs(res.failed) do failed[i] = f.error end
  local assumed = 0
  for _, s in ipairs(res.list) do if s.assumed then assumed = assumed + 1 end end
  return { sessions = res.sessions, assumed = assumed, failed = json.array(failed), sequential_ms = res.sequential_ms or json.null,
           bound_ms = res.best_ms or json.null, configs = json.array(configs), tools = json.array(tools) }
end

-- text written through a writer of kind (specula.internal.output: scrubbed)
local function write_file(path, text, kind)
  local f, err = output.open(path, "w", kind)
  if not f then return nil, "EIO: cannot write " .. tostring(err) end
  local ok, werr = f:write(text)
  local cok, cerr = f:close()
  if not ok or not cok then return nil, "EIO: " .. path .. ": " .. tostring(werr or cerr) end
  return true
end

-- An output that is a log (one of the LOG or --train files, or a file
-- holding an agent's log: `--out logs/*.jsonl` makes the shell give the
-- first log to --out) would be overwritten with the tables. The message,
-- or nil.
local function agent_log(path)
  -- only a regular file can hold a log to protect: a device or a pipe
  -- (--summary /dev/stdout | jq) was read here and blocked for ever
  local C = require("specula.internal.core").C
  if C.sp_host_path_kind(path) ~= 1 then return nil end
  local f = io.open(path, "r")
  local line = f and f:read("*l")
  if f then f:close() end
  if line and line:sub(1, 3) == "\239\187\191" then line = line:sub(4) end
  local v = line and json.decode(line)
  -- (a record of whatif's own --out is no log: a new run may replace it)
  local r = type(v) == "table" and v.agent_ms == nil and sessions.detect(v)
  return r and r.name or nil
end

function M.output_clash(o)
  local realpath = require("specula.provenance").realpath
  for _, opt in ipairs({ { "--out", o.out }, { "--summary", o.summary } }) do
    if opt[2] == "-" then
      return format("%s -: stdout holds the table; give %s FILE (/dev/stdout works too)", opt[1], opt[1])
    end
  end
  if o.out and o.summary and realpath(o.out) == realpath(o.summary) then
    return format("--out and --summary name the same file (%s): the summary would replace the records; give two "
      .. "files", o.out)
  end
  for _, opt in ipairs({ { "--out", o.out }, { "--summary", o.summary } }) do
    local target = opt[2] and realpath(opt[2])
    for _, list in ipairs(target and { o.logs, o.train or {} } or {}) do
      for _, p in ipairs(list) do
        if realpath(p) == target then
          return format("%s %s is also a log it reads (%s): writing it would overwrite that log; give another "
            .. "file", opt[1], opt[2], p)
        end
      end
    end
    local fmt = target and agent_log(opt[2])
    if fmt then
      return format("%s %s holds an agent's log (%s): writing it would overwrite that log; give another file "
        .. "(a glob right after %s gives it its first file)", opt[1], opt[2], fmt, opt[1])
    end
  end
  return nil
end

function M.main(o)
  local clash = M.output_clash(o)
  if clash then
    output.stderr("specula whatif: ", clash, "\n")
    return 2
  end
  local res, err = M.compute(o)
  if not res then
    output.stderr("specula whatif: ", tostring(err), "\n")
    return 1
  end
  output.wrap(io.stdout, "message"):write(M.text(res))
  if o.out then
    local lines = {}
    for i, s in ipairs(res.list) do lines[i] = json.encode(M.record(s, res, o.keep_content)) end
    local ok, werr = write_file(o.out, table.concat(lines, "\n") .. (#lines > 0 and "\n" or ""), "json")
    if not ok then output.stderr("specula whatif: --out: ", werr, "\n") return 1 end
  end
  if o.summary then
    local ok, werr = write_file(o.summary, json.encode(M.summary(res)) .. "\n", "json")
    if not ok then output.stderr("specula whatif: --summary: ", werr, "\n") return 1 end
  end
  if res.sessions == 0 then return 1 end
  -- a replay that failed is no data point: said, and the status a run
  -- with failed queries has
  local failed = {}
  for _, t in ipairs(res.configs) do
    if (t.failed or 0) > 0 then failed[#failed + 1] = format("%s: %d of %d", t.name, t.failed, t.failed + t.sessions) end
  end
  if #failed > 0 then
    output.stderr("specula whatif: exit 3: session replays failed (", table.concat(failed, ", "),
      "); each row counts only the sessions that succeeded\n")
    return 3
  end
  return 0
end

return M
