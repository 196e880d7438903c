-- The trivial chain agent of the overhead benchmark (bench/ref/spechop_ref.py
-- runs the identical agent): zero latency, Lua step, update, tool,
-- speculator, verifier and policy function called on every hop.
local specula = require "specula"
local N = tonumber(os.getenv("BENCH_HOPS") or "") or 100

return specula.agent {
  name = "trivial",
  init = function(query, ctx) return { query = query, hop = 0 } end,
  step = function(state, ctx)
    if state.hop >= N then return { final = "done " .. state.hop } end
    return { segment = "s" .. state.hop, action = { tool = "t", args = { i = state.hop } } }
  end,
  update = function(state, step, obs, ctx)
    return { query = state.query, hop = state.hop + 1, last = obs }
  end,
  tools = {
    t = {
      call = function(args, ctx) return "o" .. args.i end,
      speculate = function(args, ctx) return "o" .. args.i end,
    },
  },
  verify = function(pred, actual, ctx) return pred == actual, "eq" end,
  policy = function(tool, args, ctx) return "full" end,
}
