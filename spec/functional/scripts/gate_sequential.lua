-- The reported bypass: a policy written as a Lua function forbids
-- send_email; a predictor predicts send_email with confidence 0.99 and the
-- step's stream names it. In --mode sequential with prediction on, it used to
-- run early thousands of times. Prints one JSON line of counts.
local specula = require "specula"
local json = specula.json

local email_early, lookup_early = 0, 0
local function turns(n) for _ = 1, n do specula.sleep(0) end end

local agent = specula.agent {
  policy = function(tool, args, ctx)
    if tool == "send_email" then return "forbid" end
    if args.bad then error("cannot judge this lookup", 0) end
    return "full"
  end,
  tools = {
    lookup = function(args, ctx)
      if ctx.predicted then lookup_early = lookup_early + 1 end
      turns(3)
      return "page " .. args.q
    end,
    send_email = function(args, ctx)
      if ctx.predicted or ctx.speculative then email_early = email_early + 1 end
      turns(2)
      return "sent"
    end,
  },
  predict = function(history, ctx)
    local h = #history
    return { { tool = "send_email", args = { to = "ceo", n = h }, confidence = 0.99 },
             { tool = "lookup", args = { q = ctx.query .. "/" .. h }, confidence = 0.99 },
             { tool = "lookup", args = { q = ctx.query .. "/" .. h, bad = true }, confidence = 0.99 } }
  end,
  init = function(q) return { q = q, h = 0 } end,
  step = function(s, ctx)
    ctx.on_tool_name("send_email")
    ctx.on_tool_name("lookup")
    turns(4)
    if s.h == 3 then return { action = { tool = "send_email", args = { to = "ceo", n = s.h } } } end
    if s.h > 3 then return { final = "done " .. s.q } end
    return { action = { tool = "lookup", args = { q = s.q .. "/" .. s.h } } }
  end,
  update = function(s, step, obs) return { q = s.q, h = s.h + 1 } end,
}

local qs = {}
for i = 1, 200 do qs[i] = "q" .. i end
local aggregate = require "specula.run.aggregate"
local out = { email_early = 0, lookup_early = 0, forbid_predicted_start = 0, forbid_predicted_name = 0,
              query_errors = 0, script_errors = 0, gate = { predicted_start = { forbid = 0 } } }
local summary = {}
for _, trigger in ipairs({ "start", "tool_name" }) do
  local res, agg = specula.run(agent, { queries = qs, mode = "sequential", trigger = trigger, concurrency = 50 })
  for _, r in ipairs(res) do
    if r.error then out.query_errors = out.query_errors + 1 end
    out.gate.predicted_start.forbid = out.gate.predicted_start.forbid + r.stats.gate.predicted_start.forbid
  end
  local c = agg.policy_counts.tools.send_email.triggers
  out.forbid_predicted_start = out.forbid_predicted_start + c.predicted_start.forbid
  out.forbid_predicted_name = out.forbid_predicted_name + c.predicted_name.forbid
  out.script_errors = out.script_errors + agg.policy_counts.script_errors
  summary[#summary + 1] = table.concat(aggregate.decision_lines(agg.policy_counts), "\n")
end
out.email_early, out.lookup_early = email_early, lookup_early
out.summary = table.concat(summary, "\n")
print(json.encode(out))
