-- Which calls see ctx.speculative: a speculator that is always wrong makes
-- every thread started from its guess an unverified one, so at k = inf the
-- steps and tool calls of those threads (and only they) must see it true;
-- sequentially none does.
local specula = require "specula"
local json = specula.json

local seen = { step = { [true] = 0, [false] = 0 }, call = { [true] = 0, [false] = 0 } }
local agent = specula.agent {
  name = "specflag",
  policy = { search = "full" },
  init = function(q) return { q = q, hop = 0 } end,
  step = function(s, ctx)
    seen.step[ctx.speculative == true] = seen.step[ctx.speculative == true] + 1
    specula.sleep(1)
    if s.hop >= 4 then return { final = s.q .. ":" .. tostring(s.last) } end
    return { segment = "h" .. s.hop, action = { tool = "search", args = { q = s.q, hop = s.hop } } }
  end,
  update = function(s, step, obs) return { q = s.q, hop = s.hop + 1, last = obs } end,
  tools = {
    search = {
      call = function(args, ctx)
        seen.call[ctx.speculative == true] = seen.call[ctx.speculative == true] + 1
        specula.sleep(10)
        return "r:" .. args.q .. "/" .. args.hop
      end,
      speculate = function(args) specula.sleep(1) return "wrong:" .. args.hop end,
    },
  },
}

local qs = {}
for i = 1, 20 do qs[i] = "s" .. i end
local function counts()
  local c = { step_spec = seen.step[true], step_true_path = seen.step[false],
              call_spec = seen.call[true], call_true_path = seen.call[false] }
  seen = { step = { [true] = 0, [false] = 0 }, call = { [true] = 0, [false] = 0 } }
  return c
end
local seq = specula.run(agent, { queries = qs, mode = "sequential" })
local cs = counts()
local spec = specula.run(agent, { queries = qs, k = "inf" })
local ck = counts()
local same = 0
for i = 1, #qs do if seq[i].answer == spec[i].answer then same = same + 1 end end
print(json.encode({ same = same, total = #qs, seq = cs, spec = ck }))
