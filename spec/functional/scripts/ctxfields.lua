-- Every call of a query reads the same ctx: its own fields are hop, state,
-- step and action, and the query's fields (id, query, record, max_hops,
-- index), the run's (set, seed, mode, on_tool_name) and speculative read
-- through its metatable, the same from a step, a tool call, a speculator and
-- a verifier, on a speculative thread or the true path. A wrong field
-- raises: the query's record then holds an error naming the call.
local specula = require "specula"

local OWN = { hop = true, state = true, step = true, action = true }
local seen = {}   -- query id -> { spec = calls on unverified states, true_path = the others }

local function check(ctx, where, decided)
  local r = ctx.record
  if type(r) ~= "table" or ctx.id ~= r.id or ctx.query ~= r.query or ctx.max_hops ~= r.max_hops then
    error(where .. ": the query's fields are wrong")
  end
  if type(ctx.set) ~= "table" or tostring(ctx.set.x) ~= "1" or ctx.seed ~= 7 or type(ctx.index) ~= "number"
     or (ctx.mode ~= "spechop" and ctx.mode ~= "sequential") then
    error(where .. ": the run's fields are wrong")
  end
  if type(ctx.hop) ~= "number" or type(ctx.speculative) ~= "boolean" or type(ctx.on_tool_name) ~= "function" then
    error(where .. ": hop, speculative or on_tool_name is wrong")
  end
  if ctx.mode == "sequential" and ctx.speculative then error(where .. ": speculative in sequential mode") end
  for k in pairs(ctx) do
    if not OWN[k] then error(where .. ": ctx has an own field " .. tostring(k)) end
  end
  if decided and (type(ctx.step) ~= "table" or ctx.action ~= ctx.step.action or ctx.state == nil) then
    error(where .. ": step, action or state is missing")
  end
  local s = seen[ctx.id] or { spec = 0, true_path = 0 }
  seen[ctx.id] = s
  if ctx.speculative then s.spec = s.spec + 1 else s.true_path = s.true_path + 1 end
end

return specula.agent {
  name = "ctxfields",
  policy = { search = "full" },
  init = function(q, ctx)
    check(ctx, "init")
    return { q = q, hop = 0 }
  end,
  step = function(s, ctx)
    check(ctx, "step")
    if ctx.state ~= s then error("step: ctx.state is not the state") end
    specula.sleep(1)
    if s.hop >= 6 then
      local c = seen[ctx.id]
      return { final = string.format("%s %s spec=%s true=%s", s.q, tostring(s.last), tostring(c.spec > 0),
        tostring(c.true_path > 0)) }
    end
    return { segment = "h" .. s.hop, action = { tool = "search", args = { q = s.q, hop = s.hop } } }
  end,
  update = function(s, step, obs, ctx)
    check(ctx, "update")
    return { q = s.q, hop = s.hop + 1, last = obs }
  end,
  tools = {
    search = {
      call = function(args, ctx)
        check(ctx, "call", true)
        specula.sleep(10)
        return "r" .. args.hop
      end,
      -- right on even hops, wrong on odd ones: threads run ahead, some roll back
      speculate = function(args, ctx)
        check(ctx, "speculate", true)
        specula.sleep(1)
        return args.hop % 2 == 0 and ("r" .. args.hop) or "wrong"
      end,
    },
  },
  verify = function(pred, actual, ctx)
    check(ctx, "verify", true)
    return pred == actual, "eq"
  end,
}
