-- The one gate, as a property (docs/architecture.md#the-one-gate). For every policy form (per-tool
-- table, class table, class table + decide, function, path) × trigger
-- (predictions fired at step start, predictions fired on a streamed tool
-- name; target calls and warm-ups of speculative threads happen in every
-- speculative mode) × mode (sequential, window, spechop) × k {2, inf} ×
-- m {1, 3}, over N randomised queries each:
--   * an adversarial predictor proposes the forbidden and mutating calls with
--     confidence 0.99 at every step (plus the right call, so promotions happen);
--   * a lying "stream" names those tools while the step thinks;
--   * the tools count their own executions by (query, tool, exact args).
-- A call whose decision is not `full` must run exactly as often, with exactly
-- the same args, as in `--mode sequential --predict off`; a warm-up hook may
-- run only where the decision is `warmup`; answers equal the sequential run.
--
-- usage: specula run gate_property.lua N [FORM] [TRIGGER]  -> one JSON line
local specula = require "specula"
local json, sim = specula.json, specula.sim

local N = tonumber(arg[1] or "1000")
local ONLY_FORM, ONLY_TRIGGER = arg[2], arg[3]
local HERE = debug.getinfo(1, "S").source:sub(2):match("^(.*)/[^/]*$") or "."

-- ---- the world -------------------------------------------------------------

local runs, warmups = {}, {}   -- key "qid|tool|args" -> executions / warm-ups
local function bump(t, k) t[k] = (t[k] or 0) + 1 end
local function key(ctx, tool, args) return tostring(ctx.id) .. "|" .. tool .. "|" .. json.canonical(args) end

local TOOLS = { "search", "fetch", "send_email", "transfer", "wipe" }

-- What the query's h-th action is: a keyed draw, so every run agrees.
local function plan_action(ctx, h)
  local u = sim.draw(ctx, "plan", 0, h)
  local tool = TOOLS[1 + math.floor(u * #TOOLS)]
  local v = sim.draw(ctx, "args", 0, h)
  local args
  if tool == "search" then
    args = { q = tostring(ctx.id) .. "/" .. h, boom = v < 0.2 or nil }
  elseif tool == "fetch" then
    args = { url = "doc" .. h, private = v < 0.5 }
  elseif tool == "send_email" then
    args = { to = v < 0.5 and "team@corp" or "someone@else", body = "hop " .. h }
  elseif tool == "transfer" then
    args = { amount = math.floor(v * 1000) }
  else
    args = { path = "/tmp/x" .. h }
  end
  return { tool = tool, args = args }
end

-- Latency in loop turns, not milliseconds: the interleavings of a real run
-- (a speculator back before its target, a step still thinking when a
-- prediction returns) without a timer per call, so the sweep stays fast.
local sleep = specula.sleep
local function turns(ctx, kind, lo, hi)
  for _ = 1, lo + math.floor(sim.draw(ctx, kind) * (hi - lo + 1)) do sleep(0) end
end

local function observe(tool, args) return tool .. ":" .. sim.digest(json.canonical(args)) end

local function make_tools()
  local tools = {}
  for _, name in ipairs(TOOLS) do
    tools[name] = {
      cost = name == "search" and 0 or 0.001,
      call = function(args, ctx)
        bump(runs, key(ctx, name, args))
        turns(ctx, "t:" .. name, 2, 12)
        return observe(name, args)
      end,
      speculate = function(args, ctx)
        turns(ctx, "s:" .. name, 0, 5)
        local right = observe(name, args)
        if ctx.set.m == "3" then
          -- three candidates; the right one is among them half the time
          local ok = sim.draw(ctx, "ok") < 0.5
          return specula.candidates { { value = "g1", confidence = 0.5 },
                                      { value = ok and right or "g2", confidence = 0.3 },
                                      { value = "g3", confidence = 0.2 } }
        end
        if sim.draw(ctx, "ok") < 0.6 then return right end
        return "wrong guess"
      end,
      warmup = function(args, ctx) bump(warmups, key(ctx, name, args)) end,
    }
  end
  return tools
end

-- The adversary: every forbidden or mutating call, confident; and the right
-- next call, so that allowed predictions fire and get promoted.
local function adversary(history, ctx)
  local h = #history
  local out = {
    { tool = "send_email", args = { to = "someone@else", body = "hop " .. h }, confidence = 0.99 },
    { tool = "transfer", args = { amount = 999 }, confidence = 0.99 },
    { tool = "wipe", args = { path = "/tmp/x" .. h }, confidence = 0.99 },
    { tool = "fetch", args = { url = "doc" .. h, private = true }, confidence = 0.99 },
    { tool = "search", args = { q = tostring(ctx.id) .. "/" .. h, boom = true }, confidence = 0.99 },
  }
  local right = plan_action(ctx, h)
  out[#out + 1] = { tool = right.tool, args = right.args, confidence = 0.99 }
  return out
end

local function make_agent(policy)
  return specula.agent {
    tools = make_tools(),
    policy = policy,
    predict = adversary,
    init = function(q, ctx) return { h = 0, n = 2 + math.floor(sim.draw(ctx, "len") * 4), notes = {} } end,
    step = function(s, ctx)
      -- a lying stream: names every dangerous tool before deciding
      turns(ctx, "seg0", 0, 2)
      for _, name in ipairs({ "send_email", "transfer", "wipe", "fetch", "search" }) do
        ctx.on_tool_name(name)
      end
      turns(ctx, "seg1", 1, 4)
      if s.h >= s.n then return { final = table.concat(s.notes, ",") } end
      return { segment = "hop " .. s.h, action = plan_action(ctx, s.h) }
    end,
    update = function(s, step, obs)
      local notes = { unpack(s.notes) }
      notes[#notes + 1] = obs
      return { h = s.h + 1, n = s.n, notes = notes }
    end,
  }
end

-- ---- the policy forms, and what each decides -----------------------------

local TABLE = { search = "full", fetch = "full", send_email = "warmup", transfer = "forbid" }
local CLASSES = {
  classes = { read = "full", irreversible = "warmup", write = "forbid" },
  tools = { search = "read", fetch = "read", send_email = "irreversible", transfer = "write" },
}
local function lowering(tool, args)
  if tool == "search" and args.boom then error("decide: search with boom", 0) end
  if tool == "fetch" and args.private then return "forbid" end
  return "full"
end
local FORMS = {
  table = { policy = TABLE },
  classes = { policy = CLASSES },
  decide = { policy = { classes = CLASSES.classes, tools = CLASSES.tools, decide = lowering } },
  ["function"] = { policy = function(tool, args)
    if tool == "search" then
      if args.boom then error("policy function: boom", 0) end
      return "full"
    elseif tool == "fetch" then return args.private and "forbid" or "full"
    elseif tool == "send_email" then return "warmup"
    elseif tool == "transfer" then return "forbid"
    end
    return nil   -- wipe: not a decision, so forbid
  end },
  path = { policy = HERE .. "/gate_policy_file.lua" },
}
-- The decision each form gives a call (ignoring budgets, which only lower).
local DECIDES = {
  table = function(tool) return TABLE[tool] or "forbid" end,
  classes = function(tool)
    local c = CLASSES.tools[tool]
    return c and CLASSES.classes[c] or "forbid"
  end,
}
local function lowest(a, b)
  local r = { forbid = 0, warmup = 1, full = 2 }
  return r[a] <= r[b] and a or b
end
DECIDES.decide = function(tool, args)
  local ok, d = pcall(lowering, tool, args)
  return lowest(DECIDES.classes(tool), ok and d or "forbid")
end
DECIDES["function"] = function(tool, args)
  if tool == "search" then return args.boom and "forbid" or "full" end
  if tool == "fetch" then return args.private and "forbid" or "full" end
  if tool == "send_email" then return "warmup" end
  return "forbid"
end
DECIDES.path = dofile(HERE .. "/gate_policy_file.lua").expected

-- ---- the sweep --------------------------------------------------------------

local queries = {}
for i = 1, N do queries[i] = "q" .. i end

local function snapshot()
  local r, w = runs, warmups
  runs, warmups = {}, {}
  return r, w
end

-- the reference: sequential, no prediction: nothing runs early
local seq = specula.run(make_agent(TABLE), { queries = queries, mode = "sequential", predict = "off",
                                             concurrency = 250, set = { m = "1" } })
local base_runs = snapshot()

local configs = {}
local form_names = { "table", "classes", "decide", "function", "path" }
for _, form in ipairs(form_names) do
  for _, trigger in ipairs({ "start", "tool_name" }) do
    if (not ONLY_FORM or ONLY_FORM == form) and (not ONLY_TRIGGER or ONLY_TRIGGER == trigger) then
      configs[#configs + 1] = { form = form, trigger = trigger, mode = "sequential", k = 1, m = 1 }
      for _, mode in ipairs({ "window", "spechop" }) do
        for _, k in ipairs({ 2, "inf" }) do
          for _, m in ipairs({ 1, 3 }) do
            configs[#configs + 1] = { form = form, trigger = trigger, mode = mode, k = k, m = m }
          end
        end
      end
    end
  end
end

local function split(k)
  local qid, tool, args = k:match("^([^|]*)|([^|]*)|(.*)$")
  return qid, tool, json.decode(args)
end

local report = { configs = #configs, queries = N, violations = 0, warmup_violations = 0,
                 mismatches = 0, errors = 0, fired = 0, promoted = 0, early_full = 0,
                 by_form = {}, examples = {} }
for _, cfg in ipairs(configs) do
  local agent = make_agent(FORMS[cfg.form].policy)
  local decides = DECIDES[cfg.form]
  local res, agg = specula.run(agent, { queries = queries, mode = cfg.mode, k = cfg.k, m = cfg.m,
    trigger = cfg.trigger, predict_top = 8, ev_cost_ms = 0, concurrency = 250,
    set = { m = tostring(cfg.m) } })
  local r, w = snapshot()
  local label = cfg.form .. "/" .. cfg.trigger .. "/" .. cfg.mode .. "/k" .. cfg.k .. "/m" .. cfg.m
  -- executions of every call whose decision is not full: exactly the reference's
  local seen = {}
  for _, t in ipairs({ r, base_runs }) do
    for k in pairs(t) do
      if not seen[k] then
        seen[k] = true
        local _, tool, args = split(k)
        if decides(tool, args) ~= "full" and (r[k] or 0) ~= (base_runs[k] or 0) then
          report.violations = report.violations + 1
          if #report.examples < 5 then
            report.examples[#report.examples + 1] = label .. ": " .. k .. " ran " .. (r[k] or 0)
              .. "x, sequential " .. (base_runs[k] or 0) .. "x"
          end
        end
        if decides(tool, args) == "full" and (r[k] or 0) > (base_runs[k] or 0) then
          report.early_full = report.early_full + 1
        end
      end
    end
  end
  for k in pairs(w) do
    local _, tool, args = split(k)
    if decides(tool, args) ~= "warmup" then
      report.warmup_violations = report.warmup_violations + 1
      if #report.examples < 5 then report.examples[#report.examples + 1] = label .. ": warm-up of " .. k end
    end
  end
  for i = 1, N do
    if res[i].error then
      report.errors = report.errors + 1
      report.first_error = report.first_error or (label .. ": " .. res[i].error)
    end
    if json.canonical({ seq[i].answer, seq[i].trajectory }) ~= json.canonical({ res[i].answer, res[i].trajectory }) then
      report.mismatches = report.mismatches + 1
    end
  end
  if agg.prefetch then
    report.fired = report.fired + agg.prefetch.fired
    report.promoted = report.promoted + agg.prefetch.promoted
  end
  -- executions per tool for one configuration of each form (for the note)
  if cfg.mode == "spechop" and cfg.k == 2 and cfg.m == 1 and cfg.trigger == "start" then
    local per = {}
    for k, c in pairs(r) do
      local _, tool = split(k)
      per[tool] = (per[tool] or 0) + c
    end
    local base = {}
    for k, c in pairs(base_runs) do
      local _, tool = split(k)
      base[tool] = (base[tool] or 0) + c
    end
    local pc = agg.policy_counts
    local dec = {}
    for tool, c in pairs(pc.tools) do
      dec[tool] = { full = c.full, warmup = c.warmup, forbid = c.forbid, by_script = c.by_script }
    end
    dec["(unlisted)"] = { forbid = pc.unknown.forbid }
    report.by_form[cfg.form] = { config = label, executions = per, sequential = base, decisions = dec,
                                 script_errors = pc.script_errors }
  end
end
print(json.encode(report))
