-- specula predictors CASSETTE_DIR|RESULTS.jsonl|CONVERSATIONS.jsonl... [--predictor P]... [--json]
-- Replays the committed tool-call histories of a run (or of conversations in
-- the OpenAI or Anthropic messages format) through each action predictor,
-- online (a predictor learns a query's trajectory only after it was asked
-- about every step of it, as in a run), and reports how often its first
-- guess, or one of its first three, was the action the model took; and,
-- where latencies were recorded, what the EV gate would have fired at each
-- trigger, what that wasted and what it saved.
local json = require "specula.json"
local predict = require "specula.predict"
local lab = require "specula.lab"
local opts = require "specula.internal.domains"
local sse = require "specula.sse"
local convtraces = require "specula.convtraces"
local output = require "specula.internal.output"
local core = require "specula.internal.core"
local C, ffi = core.C, core.ffi

local format = string.format

local M = {}

-- usage(msg): a usage mistake of `specula predictors`, returned from M.main as
-- nil, msg for specula.cmd to print with the command's synopsis (the
-- command line is specula.cmd.predictors's); fail(msg): the command fails
-- (status 1).
local function usage(msg) return nil, msg end
local fail = lab.failer("specula predictors")


-- Argument rules for the built-in predictors, which know no agent: the
-- previous call's arguments when it was the same tool, else an empty
-- table, so a guess still names its tool (counted by "tool top-1").
local function lab_rules()
  return setmetatable({}, { __index = function(_, key)
    local nxt = key:match("%->(.*)$") or key
    return function(prev)
      if prev and prev.tool == nxt and type(prev.args) == "table" then return prev.args end
      return {}
    end
  end })
end

local function load_predictor(spec)
  if spec == "learned" then return function() return predict.learned {} end end
  local model = spec:match("^learned:(.+)$")
  if model then
    local ok, err = pcall(predict.learned, { model = model })
    if not ok then return nil, tostring(err):gsub("^specula.predict.learned: ", "") end
    return function() return predict.learned { model = model } end
  end
  if spec == "pattern" then return function() return predict.pattern { top = 3, rules = lab_rules() } end end
  if spec == "ngram" then return function() return predict.ngram { top = 3, rules = lab_rules() } end end
  local n = spec:match("^ngram:(%d+)$")
  if n then
    n = tonumber(n)
    if n < 2 then return nil, "ngram:N needs N >= 2" end
    return function() return predict.ngram { n = n, top = 3, rules = lab_rules() } end
  end
  local chunk, err = lab.lua_file(spec, "predictor", format("unknown predictor '%s' (not learned, pattern, ngram, ngram:N, draft or a file)",
    spec))
  if not chunk then return nil, err end
  return function()
    local ok, p = pcall(chunk)
    if not ok then error(format("predictor file '%s' failed: %s", spec, tostring(p)), 0) end
    local callable = type(p) == "function" or (type(p) == "table" and getmetatable(p) and getmetatable(p).__call)
    if not callable then
      error(format("predictor file '%s' must return a function or a callable table, got %s", spec, type(p)), 0)
    end
    return p
  end
end

-- The tool names a decoded stream event announces: OpenAI chat deltas
-- (choices[].delta.tool_calls[].function.name), OpenAI responses
-- (response.output_item.added of a function_call) and Anthropic messages
-- (content_block_start of a tool_use).
local function event_names(d, into)
  if type(d) ~= "table" then return end
  if type(d.choices) == "table" then
    for _, c in ipairs(d.choices) do
      local tcs = type(c) == "table" and type(c.delta) == "table" and c.delta.tool_calls
      if type(tcs) == "table" then
        for _, tc in ipairs(tcs) do
          local fn = type(tc) == "table" and tc["function"]
          if type(fn) == "table" and type(fn.name) == "string" and fn.name ~= "" then into[#into + 1] = fn.name end
        end
      end
    end
  end
  local b = d.content_block or d.item
  if type(b) == "table" and (b.type == "tool_use" or b.type == "function_call") and type(b.name) == "string" then
    into[#into + 1] = b.name
  end
end

-- When each tool name arrived in a recorded stream, from its job's launch:
-- the request's offset plus that of the chunk that completed the event.
local function stream_names(rec, out)
  local evs = rec.events
  if type(evs) ~= "table" or type(rec.off) ~= "number" then return end
  local i, at = 0, 0
  local src = { read = function()
    i = i + 1
    local e = evs[i]
    if type(e) ~= "table" or type(e[1]) ~= "number" or type(e[2]) ~= "string" then return nil end
    at = e[1]
    return e[2]
  end }
  local r = sse.reader(src)
  while true do
    local ev = r:next()
    if not ev then break end
    local d = ev.data ~= "" and ev.data ~= "[DONE]" and json.decode(ev.data)
    local names = {}
    event_names(d, names)
    for _, n in ipairs(names) do out[#out + 1] = { name = n, at = rec.off + at } end
  end
  r:close()
end

-- Committed trajectories of a cassette: per query, the target calls' `obs`
-- lines by hop; with job lines (format 2 on), each step's timing: the step
-- job's length (the model's time), the call's latency, and the streamed
-- tool names.
-- Which calls were committed: a format-4 file says it per query (its commit
-- line: the paths of the committed states and the action taken at each),
-- so a call made from a speculative state whose guess was accepted counts
-- and one of a discarded thread does not; a predicted call counts where it
-- served a committed step (no call of its own ran from that state). A query
-- that failed counts nothing, as its record does, and one without a commit
-- line (the recording stopped first) has no record to count either. An
-- older file does not say: only the calls made from verified states count
-- there (a committed call made from a speculative state is left out).
local function from_cassette(dir, out)
  local recs, files = lab.cassette(dir)
  if not recs then return nil, files end
  local v4 = {}
  for _, f in ipairs(files) do
    if f.header and (tonumber(f.header.specula_cassette) or 0) >= 4 then v4[f.path] = true end
  end
  local by, order, steps_ms, names, commits = {}, {}, {}, {}, {}
  local function skey(m) return tostring(m.query) .. "\0" .. tostring(m.thread) .. "\0" .. tostring(m.hop) end
  local function ckey(r) return r.file .. "\0" .. tostring(r.meta.query) end
  local forder = {}
  for i, f in ipairs(files) do forder[f.path] = i end
  -- the commit lines first (each follows its query's calls on tape)
  for _, r in ipairs(recs) do
    if r.kind == "commit" and type(r.meta) == "table" and r.meta.query ~= nil and v4[r.file] then
      local k = ckey(r)
      if not commits[k] then
        local c = { rec = r, at = {}, predicted = {} }
        for i, p in ipairs(r.paths or {}) do c.at[p] = i - 1 end
        commits[k] = c
      end
    end
  end
  local function step_of(r, m)
    return { tool = r.req.tool, args = r.req.args, observation = r.res and r.res.value, _key = skey(m), _ms = r.ms }
  end
  local function query_of(id, c, r)
    local q = by[id]
    if not q then
      q = { id = id, at = {}, forder = forder[r.file] or 0 }
      if c then q.text, q.index = c.rec.text, c.rec.index end
      by[id] = q
      order[#order + 1] = q
    end
    return q
  end
  for _, r in ipairs(recs) do
    local m = r.meta
    if type(m) == "table" and (m.job == "start" or m.job == "advance") and m.query ~= nil then
      if r.kind == "job" and type(r.ms) == "number" and not r.failed then steps_ms[skey(m)] = r.ms
      elseif r.kind == "http" and not r.start and r.events then
        local l = names[skey(m)]
        if not l then l = {}; names[skey(m)] = l end
        stream_names(r, l)
      end
    end
    if r.kind == "obs" and type(m) == "table" and m.query ~= nil and r.req then
      local c = v4[r.file] and commits[ckey(r)]
      if c and c.rec.paths then
        if m.predicted then
          c.predicted[#c.predicted + 1] = r
        else
          local hop = c.at[m.path]
          if hop ~= nil then
            local q = query_of(m.query, c, r)
            if q.at[hop] == nil then q.at[hop] = step_of(r, m) end
          end
        end
      elseif (not v4[r.file] or (c and not c.rec.failed)) and not m.speculative and type(m.hop) == "number" then
        local q = query_of(m.query, c, r)
        if q.at[m.hop] == nil then q.at[m.hop] = step_of(r, m) end
      end
    end
  end
  -- a committed step with no call from its state: its target was served by
  -- a predicted call of the same action at that hop
  for _, c in pairs(commits) do
    local calls = c.rec.calls
    if c.rec.paths and calls then
      for i, call in ipairs(calls) do
        local hop = i - 1
        local q = by[c.rec.meta.query]
        if not (q and q.at[hop] ~= nil) then
          local ok, want = pcall(json.canonical, call.args)
          for j, r in ipairs(c.predicted) do
            local ok2, got = pcall(json.canonical, r.req.args)
            if r.req.tool == call.tool and r.meta.hop == hop and ok and ok2 and got == want then
              q = query_of(c.rec.meta.query, c, r)
              q.at[hop] = step_of(r, r.meta)
              table.remove(c.predicted, j)
              break
            end
          end
        end
      end
    end
  end
  -- in input order where the tape says it (as the run wrote its records),
  -- else in tape order
  local pos = {}
  for i, q in ipairs(order) do pos[q] = i end
  for i, q in ipairs(order) do q.rank = q.index or i end
  table.sort(order, function(a, b)
    if a.forder ~= b.forder then return a.forder < b.forder end
    if a.rank ~= b.rank then return a.rank < b.rank end
    return pos[a] < pos[b]
  end)
  for _, q in ipairs(order) do
    local hops = {}
    for h in pairs(q.at) do hops[#hops + 1] = h end
    table.sort(hops)
    local steps = {}
    for i, h in ipairs(hops) do
      local s = q.at[h]
      local sm = steps_ms[s._key]
      if sm and type(s._ms) == "number" then
        local ns = names[s._key] or {}
        table.sort(ns, function(a, b) return a.at < b.at end)
        s.timing = { step_ms = sm, tool_ms = s._ms, names = ns }
      end
      s._key, s._ms = nil, nil
      steps[i] = s
    end
    if #steps > 0 then
      local conv = convtraces.synthesize(q.text, steps)
      out[#out + 1] = { id = q.id, steps = steps, events = conv.events, turns = conv.turns }
    end
  end
  return true
end

local function conf_num(c)
  local v = tonumber(c.confidence) or 0
  if v ~= v then return 0 end
  return v
end

local function same_action(p, a)
  if type(p) ~= "table" or p.tool ~= a.tool then return false end
  local ok1, x = pcall(json.canonical, p.args)
  local ok2, y = pcall(json.canonical, a.args)
  return ok1 and ok2 and x == y
end

-- What one trigger would have done at a step: fire each candidate the EV
-- gate lets through (engine/sp_actspec.c: conf x E[saved] > (1 - conf) x
-- cost x ev_cost_ms, E[saved] from the latencies seen so far); a hit saves
-- `saved` ms, a miss wastes its cost.
-- `fired` (optional) collects the candidates fired, and says whether the
-- step already had its hit (the "both" trigger fires in two rounds).
local function fire(acc, pf, cands, conf_of, step, idx, cost_of, saved, fired)
  local hit = fired and fired.hit or false
  for _, c in ipairs(cands) do
    local cost = cost_of(c.tool)
    if C.sp_prefetch_ev(pf, idx(c.tool), conf_of(c), cost) ~= 0 then
      acc.fired = acc.fired + 1
      if fired then fired[c] = true end
      if not hit and same_action(c, step) then
        hit = true
        acc.hits = acc.hits + 1
        acc.saved_ms = acc.saved_ms + saved
      else
        acc.wasted = acc.wasted + 1
        acc.wasted_cost = acc.wasted_cost + cost
      end
    end
  end
  if fired then fired.hit = hit end
end

-- A tool name streamed at `at` ms into the step: the candidates of that
-- name fire (those `fired` does not hold yet) at their odds given the name,
-- their confidence over that of every candidate of the name, or over the
-- predictor's tool_confidence when that is more (sp_win_act_kick).
local function fire_named(acc, pf, cands, n, step, idx, cost_of, tm, fired)
  local of, sum, tool = {}, 0, 0
  for _, c in ipairs(cands) do
    if c.tool == n.name then
      sum = sum + conf_num(c)
      -- the predictor's confidence in the tool itself, when it says more
      local t = tonumber(c.tool_confidence)
      if t and t == t and t <= 1 and t > tool then tool = t end
      if not (fired and fired[c]) then of[#of + 1] = c end
    end
  end
  if tool > sum then sum = tool end
  local left = math.max(0, tm.step_ms - n.at)
  fire(acc, pf, of, function(c) return sum > 0 and conf_num(c) / sum or conf_num(c) end, step, idx, cost_of,
    math.min(tm.tool_ms, left), fired)
end


-- The turns of a trajectory: a conversation's own (its text answers too),
-- else one per call, with the events a predictor reads (specula.convtraces).
local function conversation_of(t)
  if not t.events then
    local c = convtraces.synthesize(t.query, t.steps)
    t.events, t.turns = c.events, c.turns
  end
  return t
end

-- What a predictor learns from a whole trajectory: its calls (as before),
-- and its conversation.
local function learn_info(t)
  local actions = {}
  for i, s in ipairs(t.steps) do actions[i] = { tool = s.tool, args = s.args } end
  return actions, { id = t.id, query = t.query, trajectory = t.steps,
                    conversation = { id = t.id, events = t.events, turns = t.turns } }
end

-- Train a fresh predictor: train(convs, { group }) when it has one, else
-- each trajectory in turn through observe_trajectory.
local function train_predictor(P, trajs, group)
  if type(P) ~= "table" then return end
  for _, t in ipairs(trajs) do conversation_of(t) end
  if type(P.train) == "function" then
    local convs = {}
    for i, t in ipairs(trajs) do convs[i] = { id = t.id, events = t.events, turns = t.turns } end
    P:train(convs, { group = group })
  elseif type(P.observe_trajectory) == "function" then
    for _, t in ipairs(trajs) do P:observe_trajectory(learn_info(t)) end
  end
end

local BINS = 10

-- Counters of one evaluation, added up over folds.
local function new_result()
  return { steps = 0, top1 = 0, top3 = 0, tool_top1 = 0, turns = 0, timed_steps = 0, named_steps = 0,
           per_tool = {}, cal = {},
           start = { fired = 0, hits = 0, wasted = 0, wasted_cost = 0, saved_ms = 0 },
           tool_name = { fired = 0, hits = 0, wasted = 0, wasted_cost = 0, saved_ms = 0 },
           both = { fired = 0, hits = 0, wasted = 0, wasted_cost = 0, saved_ms = 0 } }
end

-- gate: { ev_cost_ms, ev_latency_ms, top, cost = { tool = x }, default_cost, group }
-- train: trajectories the predictor learns first. acc: a result to add to.
function M.evaluate(make, trajs, gate, train, acc)
  gate = gate or {}
  local D = opts.DEFAULTS
  local top = gate.top or D.predict_top
  local pf = ffi.gc(C.sp_prefetch_new(0, 3, gate.ev_cost_ms or D.ev_cost_ms, gate.ev_latency_ms or 0, top),
    C.sp_prefetch_free)
  local tools, ntools = {}, 0
  local function idx(name)
    local i = tools[name]
    if not i then i = ntools; tools[name] = i; ntools = ntools + 1 end
    return i
  end
  local costs, default_cost = gate.cost or {}, gate.default_cost or 0
  local function cost_of(name) return costs[name] or default_cost end
  local P = make()
  if train and #train > 0 then train_predictor(P, train, gate.group) end
  local r = acc or new_result()
  local start, by_name, both = r.start, r.tool_name, r.both
  for _, t in ipairs(trajs) do
    conversation_of(t)
    local done = 0
    for _, turn in ipairs(t.turns) do
      local s = turn.step and t.steps[turn.step]
      local upto = s and turn.step - 1 or done
      local hist = {}
      for i = 1, upto do hist[i] = t.steps[i] end
      local msgs = {}
      for i = 1, turn.at do msgs[i] = t.events[i] end
      r.turns = r.turns + 1
      local list = P(hist, { id = t.id, query = t.query or t.id, hop = #hist, messages = msgs, tools = t.tools }) or {}
      if type(list) ~= "table" then error("a predictor returned " .. type(list) .. ", not a list", 0) end
      -- calibration: the first `top` candidates that name a tool
      local cands = {}
      for _, c in ipairs(list) do
        if #cands >= top then break end
        if type(c) == "table" and type(c.tool) == "string" then cands[#cands + 1] = c end
      end
      local hit_given = false
      for _, c in ipairs(cands) do
        local conf = math.min(1, math.max(0, conf_num(c)))
        local hit = s ~= nil and not hit_given and same_action(c, s)
        if hit then hit_given = true end
        r.cal[#r.cal + 1] = { conf, hit and 1 or 0 }
      end
      if s then
        done = turn.step
        r.steps = r.steps + 1
        local pt = r.per_tool[s.tool]
        if not pt then pt = { steps = 0, top1 = 0, top3 = 0, tool_top1 = 0 }; r.per_tool[s.tool] = pt end
        pt.steps = pt.steps + 1
        for i = 1, math.min(3, #list) do
          if same_action(list[i], s) then
            if i == 1 then r.top1 = r.top1 + 1; pt.top1 = pt.top1 + 1 end
            r.top3 = r.top3 + 1
            pt.top3 = pt.top3 + 1
            break
          end
        end
        if type(list[1]) == "table" and list[1].tool == s.tool then
          r.tool_top1 = r.tool_top1 + 1
          pt.tool_top1 = pt.tool_top1 + 1
        end
        local tm = s.timing
        if tm then
          r.timed_steps = r.timed_steps + 1
          fire(start, pf, cands, conf_num, s, idx, cost_of, math.min(tm.tool_ms, tm.step_ms))
          -- tool_name: a streamed name fires the candidates of that name;
          -- both: what the gate kept back at the start gets that second chance
          local fired_both = {}
          fire(both, pf, cands, conf_num, s, idx, cost_of, math.min(tm.tool_ms, tm.step_ms), fired_both)
          local seen = {}
          if #tm.names > 0 then r.named_steps = r.named_steps + 1 end
          for _, n in ipairs(tm.names) do
            if not seen[n.name] then
              seen[n.name] = true
              fire_named(by_name, pf, cands, n, s, idx, cost_of, tm, nil)
              fire_named(both, pf, cands, n, s, idx, cost_of, tm, fired_both)
            end
          end
          -- what the gate learns after the step: its model time, the call's latency
          C.sp_prefetch_observe(pf, -1, -1, tm.step_ms)
          C.sp_prefetch_observe(pf, idx(s.tool), tm.tool_ms, -1)
        end
      end
    end
    if type(P) == "table" and P.observe_trajectory then P:observe_trajectory(learn_info(t)) end
  end
  return r, P
end

-- Rates, the calibration table and the EV figures of a result.
local function finish(r)
  local steps = r.steps
  r.top1_rate = steps > 0 and r.top1 / steps or 0
  r.top3_rate = steps > 0 and r.top3 / steps or 0
  r.tool_top1_rate = steps > 0 and r.tool_top1 / steps or 0
  for _, pt in pairs(r.per_tool) do
    pt.top1_rate, pt.top3_rate, pt.tool_top1_rate = pt.top1 / pt.steps, pt.top3 / pt.steps, pt.tool_top1 / pt.steps
  end
  local bins = {}
  for b = 1, BINS do bins[b] = { lo = (b - 1) / BINS, hi = b / BINS, n = 0, conf = 0, hits = 0 } end
  local brier = 0
  for _, p in ipairs(r.cal) do
    local b = bins[math.min(BINS, math.floor(p[1] * BINS) + 1)]
    b.n, b.conf, b.hits = b.n + 1, b.conf + p[1], b.hits + p[2]
    brier = brier + (p[1] - p[2]) ^ 2
  end
  local n, ece, out = #r.cal, 0, {}
  for _, b in ipairs(bins) do
    if b.n > 0 then
      local e = { lo = b.lo, hi = b.hi, candidates = b.n, confidence = b.conf / b.n, hit_rate = b.hits / b.n }
      ece = ece + b.n / n * math.abs(e.confidence - e.hit_rate)
      out[#out + 1] = e
    end
  end
  r.calibration = { candidates = n, brier = n > 0 and brier / n or nil, ece = n > 0 and ece or nil,
                    bins = json.array(out) }
  r.cal = nil
  if r.timed_steps == 0 then r.start, r.tool_name, r.both = nil, nil, nil
  elseif r.named_steps == 0 then r.tool_name, r.both = nil, nil end
  return r
end

-- The default group of a conversation id: the id without a trailing
-- "-trialN" (tau-bench's task ids: "task3-trial1" -> "task3").
local function group_fn(pat)
  pat = pat or "^(.-)[-_.]trial[-_]?%d+$"
  return function(id)
    id = tostring(id)
    return id:match(pat) or id
  end
end
M.group_fn = group_fn

-- Grouped folds over trajectories: { {test = {...}, train = {...}} }.
function M.folds(trajs, k, group)
  local idxs = require("specula.learned").group_folds(trajs, k, group)
  local out = {}
  for f = 1, k do
    local test, intest = {}, {}
    for _, i in ipairs(idxs[f]) do test[#test + 1] = trajs[i]; intest[i] = true end
    local train = {}
    for i, t in ipairs(trajs) do if not intest[i] then train[#train + 1] = t end end
    out[f] = { test = test, train = train }
  end
  return out
end

-- The draft predictor asks a model: none is on tape for the lab's prompts
-- (a draft prompt holds the step's history, which a replay of another
-- predictor never sent), so it needs a live OpenAI-compatible endpoint.
local function draft_maker(o, trajs, errors)
  local url = o.draft_url
  if not url then
    local base = os.getenv("DRAFT_BASE_URL")
    if base and base ~= "" then url = base:gsub("/+$", "") .. "/chat/completions" end
  end
  if not url then
    return nil, "draft: a draft predictor asks a model at every step, and none is available offline: a "
      .. "cassette holds the draft's answers only to the prompts its run sent, not to the lab's; give "
      .. "--draft-url URL (an OpenAI-compatible chat completions endpoint, e.g. a local llama.cpp "
      .. "server) or set DRAFT_BASE_URL (key: DRAFT_API_KEY, model: --draft-model or DRAFT_MODEL)"
  end
  local client = require("specula.llm.openai").new { chat_url = url, api_key = os.getenv("DRAFT_API_KEY") or "none",
    model = o.draft_model or os.getenv("DRAFT_MODEL") or "draft", retry = { max_retries = 0 } }
  local names, seen = {}, {}
  for _, t in ipairs(trajs) do
    for _, s in ipairs(t.steps) do
      if not seen[s.tool] then seen[s.tool] = true; names[#names + 1] = s.tool end
    end
  end
  table.sort(names)
  local function ask(messages)
    errors.asked = errors.asked + 1
    local r, err = client:chat { messages = messages, temperature = 0.7, max_tokens = 96 }
    if not r then errors.failed = errors.failed + 1; errors.last = tostring(err) end
    return r
  end
  return function() return predict.draft { client = ask, tools = names, samples = o.draft_samples or 3, top = 3 } end
end

local function num_opt(name, min)
  return function(text)
    local v = tonumber(text)
    if not v or v ~= v or v < min or v == math.huge then return nil, format("%s must be a number >= %g, got '%s'",
      name, min, text) end
    return v
  end
end

local function add_cost(text, o)
  local tool, v = text:match("^(.-)=([^=]*)$")
  local n = tonumber(v or text)
  if not n or n ~= n or n < 0 or n == math.huge then
    return nil, format("--cost must be TOOL=X or X (a number >= 0), got '%s'", text)
  end
  if tool and tool ~= "" then o.cost[tool] = n else o.default_cost = n end
  return o.cost
end

local function read_source(s, fmt, trajs)
  local kind = C.sp_host_path_kind(s)
  if kind == 0 or kind == nil then return nil, format("'%s': no such file or directory", s) end
  if fmt == "cassette" or (fmt == nil and kind == 2) then
    if kind ~= 2 then return nil, format("'%s': --format cassette needs a cassette directory", s) end
    return from_cassette(s, trajs)
  end
  if kind ~= 1 then return nil, format("'%s': --format %s needs a file", s, fmt) end
  local ok, err = convtraces.read(s, fmt, trajs, function(msg) output.stderr("specula: warning: ", msg, "\n") end)
  if not ok then return nil, err end
  return true
end

local function fmt_ms(v) return v and format("%.1f", v) or "-" end

local function write_tables(o, rows, ntraj, nsteps, nturns, how)
  local out = output.wrap(io.stdout, "text")
  out:write(format("%d committed tool calls in %d trajectories, %d model turns (%s)\n", nsteps, ntraj, nturns, how))
  out:write(format("%-20s %8s %8s %12s %8s %8s\n", "predictor", "top-1", "top-3", "tool top-1", "Brier", "ECE"))
  local function num(v) return v and format("%.4f", v) or "-" end
  for _, r in ipairs(rows) do
    out:write(format("%-20s %8.3f %8.3f %12.3f %8s %8s\n", r.predictor, r.top1_rate, r.top3_rate, r.tool_top1_rate,
      num(r.calibration.brier), num(r.calibration.ece)))
  end
  out:write("\ncalibration: first 3 candidates at every model turn, by confidence\n")
  out:write(format("%-20s %-11s %10s %11s %9s\n", "predictor", "confidence", "candidates", "mean conf", "hit rate"))
  for _, r in ipairs(rows) do
    for _, b in ipairs(r.calibration.bins) do
      out:write(format("%-20s [%.1f, %.1f%s %10d %11.3f %9.3f\n", r.predictor, b.lo, b.hi, b.hi >= 1 and "]" or ")",
        b.candidates, b.confidence, b.hit_rate))
    end
  end
  for _, r in ipairs(rows) do
    out:write(format("\nper tool (%s)\n", r.predictor))
    out:write(format("%-32s %7s %8s %8s %12s\n", "tool", "calls", "top-1", "top-3", "tool top-1"))
    local names = {}
    for name in pairs(r.per_tool) do names[#names + 1] = name end
    table.sort(names, function(a, b)
      local x, y = r.per_tool[a].steps, r.per_tool[b].steps
      if x ~= y then return x > y end
      return a < b
    end)
    for _, name in ipairs(names) do
      local pt = r.per_tool[name]
      local shown = #name <= 32 and name or (json.utf8_cut(name, 29) .. "...")
      out:write(format("%-32s %7d %8.3f %8.3f %12.3f\n", shown, pt.steps, pt.top1_rate, pt.top3_rate,
        pt.tool_top1_rate))
    end
  end
end

M.num_opt, M.add_cost = num_opt, add_cost

-- Each predictor maker evaluated over the trajectories (online, or fold by
-- fold: trained on the other folds and the --train ones). Returns the rows
-- and the learned predictor to save (when save_model), or nil, msg.
local function evaluate_all(makers, trajs, train, folds, gate, save_model)
  local rows, saved = {}, nil
  for _, m in ipairs(makers) do
    local ok, r, P
    if folds then
      r = new_result()
      for _, f in ipairs(folds) do
        local tr = {}
        for _, t in ipairs(f.train) do tr[#tr + 1] = t end
        for _, t in ipairs(train) do tr[#tr + 1] = t end
        ok, r, P = pcall(M.evaluate, m.make, f.test, gate, tr, r)
        if not ok then break end
      end
    else
      ok, r, P = pcall(M.evaluate, m.make, trajs, gate, train)
    end
    if not ok then return nil, m.name .. ": " .. tostring(r) end
    r = finish(r)
    r.predictor = m.name
    rows[#rows + 1] = r
    if save_model and not saved and type(P) == "table" and getmetatable(P) == getmetatable(predict.learned {}) then
      saved = P
    end
  end
  return rows, saved
end

-- The EV gate's table: fired, hits, wasted and saved per predictor and trigger.
local function write_gate_table(rows, gate, timed, nsteps, named)
  output.stdout(format("\nEV gate at ev_cost_ms %g over the %d of %d calls with recorded latencies "
    .. "(%d with a streamed tool name)\n", gate.ev_cost_ms, timed, nsteps, named))
  output.stdout(format("%-20s %-10s %7s %7s %7s %12s %10s\n", "predictor", "trigger", "fired", "hits", "wasted",
    "wasted cost", "saved ms"))
  for _, r in ipairs(rows) do
    for _, tr in ipairs({ { "start", r.start }, { "tool_name", r.tool_name }, { "both", r.both } }) do
      local a = tr[2]
      if a then
        output.stdout(format("%-20s %-10s %7d %7d %7d %12.3f %10s\n", r.predictor, tr[1], a.fired, a.hits, a.wasted,
          a.wasted_cost, fmt_ms(a.saved_ms)))
      else
        output.stdout(format("%-20s %-10s %7s %7s %7s %12s %10s\n", r.predictor, tr[1], "-", "-", "-", "-", "-"))
      end
    end
  end
end

-- o: the options of `specula predictors` (specula.cmd.predictors). Returns nil, msg
-- for a usage mistake (nothing printed), else nothing.
function M.main(o)
  local sources, names = o.sources, o.predictors
  if #names == 0 then names = { "learned", "pattern", "ngram" } end
  local trajs = {}
  for _, s in ipairs(sources) do
    local ok, err = read_source(s, o.format, trajs)
    if not ok then return fail(err) end
  end
  local train = {}
  for _, s in ipairs(o.train) do
    local ok, err = read_source(s, nil, train)
    if not ok then return fail("--train " .. err) end
  end
  local makers, draft_errors = {}, { asked = 0, failed = 0 }
  for _, n in ipairs(names) do
    local mk, err
    if n == "draft" then mk, err = draft_maker(o, trajs, draft_errors)
    else mk, err = load_predictor(n) end
    if not mk then return usage(err) end
    makers[#makers + 1] = { name = n, make = mk }
  end
  local nsteps, ntraj = 0, 0
  for _, t in ipairs(trajs) do
    nsteps = nsteps + #t.steps
    if #t.steps > 0 then ntraj = ntraj + 1 end
  end
  if nsteps == 0 then return fail("no committed tool call in " .. table.concat(sources, ", ")) end
  local group = group_fn(o.group_by)
  local gate = { ev_cost_ms = o.ev_cost_ms or opts.DEFAULTS.ev_cost_ms, ev_latency_ms = o.ev_latency_ms,
                 cost = o.cost, default_cost = o.default_cost, group = group }
  local folds
  if o.folds then
    local ngroups, seen = 0, {}
    for _, t in ipairs(trajs) do
      local g = group(t.id)
      if not seen[g] then seen[g] = true; ngroups = ngroups + 1 end
    end
    if ngroups < o.folds then
      return fail(format("--folds %d: the sources hold %d groups (tasks) only", o.folds, ngroups))
    end
    folds = M.folds(trajs, o.folds, group)
  end
  local rows, saved = evaluate_all(makers, trajs, train, folds, gate, o.save_model)
  if not rows then return fail(saved) end
  if draft_errors.failed > 0 then
    local msg = format("draft: %d of %d model requests failed (last: %s)", draft_errors.failed, draft_errors.asked,
      draft_errors.last)
    if draft_errors.failed == draft_errors.asked then return fail(msg) end
    output.stderr("specula: warning: ", msg, "\n")
  end
  if o.save_model then
    if not saved then return fail("--save-model: no learned predictor in this run") end
    local ok, err = saved:save(o.save_model)
    if not ok then return fail(err) end
  end
  local timed, named, nturns = rows[1].timed_steps, rows[1].named_steps, rows[1].turns
  local fold_info
  if folds then
    fold_info = {}
    for i, f in ipairs(folds) do
      local ids = {}
      for j, t in ipairs(f.test) do ids[j] = t.id end
      fold_info[i] = { test = json.array(ids), train_trajectories = #f.train + #train }
    end
  end
  if o.json then
    output.wrap(io.stdout, "json"):write(json.encode({ trajectories = ntraj, conversations = #trajs, steps = nsteps,
      turns = nturns, timed_steps = timed, named_steps = named, ev_cost_ms = gate.ev_cost_ms,
      train_trajectories = #train, folds = fold_info and json.array(fold_info) or nil,
      predictors = json.array(rows) }), "\n")
    return
  end
  local how
  if folds then
    how = format("grouped %d-fold cross-validation: each fold predicted online by a predictor trained on the "
      .. "other folds%s; no group on both sides", #folds, #train > 0 and format(" and %d --train trajectories", #train)
      or "")
  elseif #train > 0 then
    how = format("trained on %d --train trajectories, then online: each predictor learns a trajectory after "
      .. "predicting it", #train)
  else
    how = "online: each predictor learns a trajectory after predicting it"
  end
  write_tables(o, rows, ntraj, nsteps, nturns, how)
  if timed == 0 then
    output.stdout("\nfired, wasted and saved: unavailable (no recorded latencies in these sources: a cassette "
      .. "or a results file has them, conversations do not)\n")
    return
  end
  write_gate_table(rows, gate, timed, nsteps, named)
end

return M
