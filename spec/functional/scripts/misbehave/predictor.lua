-- A learning predictor for spec/functional/misbehave_spec.lua; PRED_FAIL
-- (env) names the method that raises: observe (on the second trajectory),
-- predict (on its second call; number: returns 42 then; confidence: inf), state, restore. A restored state whose
-- count is not a number (well formed, but wrong) makes learning raise.
local fail = os.getenv("PRED_FAIL") or ""
local seen, calls = 0, 0
local P = {}
function P:observe_trajectory(actions)
  seen = seen + 1
  if fail == "observe" and seen == 2 then error({ "observe_trajectory broke on trajectory", seen }) end
end
function P.state()
  if fail == "state" then error("state() broke") end
  return { seen = seen }
end
function P.restore(_, st)
  if fail == "restore" then error("restore() broke") end
  seen = st.seen
  return true
end
return setmetatable(P, { __call = function()
  calls = calls + 1
  if fail == "predict" and calls == 2 then error(nil) end
  if fail == "number" and calls == 2 then return 42 elseif fail == "confidence" then return { { tool = "look", args = { n = 1 }, confidence = math.huge } } end
  return { { tool = "look", args = { n = 1 } } }
end })
