-- A two-tool flow whose second tool (send) is forbid: it must never run from
-- an unverified state, counted by the core and by the tool itself.
local specula = require "specula"
local sim = specula.sim
local json = specula.json

local seen_speculative = 0
local send_calls = 0

local agent = specula.agent {
  name = "search-then-send",
  policy = { search = "full", send = "forbid" },
  init = function(q) return { q = q, hop = 0, notes = {} } end,
  step = function(s, ctx)
    specula.sleep(1)
    if s.hop >= 6 then return { final = table.concat(s.notes, "|") } end
    local tool = (s.hop % 2 == 0) and "search" or "send"
    return { segment = "h" .. s.hop, action = { tool = tool, args = { q = s.q .. "/" .. s.hop .. "/" .. (s.notes[#s.notes] or "") } } }
  end,
  update = function(s, step, obs)
    local notes = { unpack(s.notes) }
    notes[#notes + 1] = obs
    return { q = s.q, hop = s.hop + 1, notes = notes }
  end,
  tools = {
    search = {
      call = function(args) specula.sleep(10) return "r:" .. sim.digest(args.q) end,
      speculate = function(args) specula.sleep(1) return "r:" .. sim.digest(args.q) end,
    },
    send = {
      call = function(args, ctx)
        send_calls = send_calls + 1
        if ctx.speculative then seen_speculative = seen_speculative + 1 end
        specula.sleep(10)
        return "sent:" .. sim.digest(args.q)
      end,
      speculate = function(args) specula.sleep(1) return "sent:" .. sim.digest(args.q) end,
    },
  },
}

local qs = {}
for i = 1, 50 do qs[i] = "e" .. i end
local seq = specula.run(agent, { queries = qs, mode = "sequential" })
local seq_calls = send_calls
send_calls = 0
local spec, agg = specula.run(agent, { queries = qs, k = "inf" })
local same = 0
for i = 1, #qs do
  if json.canonical({ seq[i].answer, seq[i].trajectory }) == json.canonical({ spec[i].answer, spec[i].trajectory }) then
    same = same + 1
  end
end
local pc = agg.policy_counts
print(json.encode({ same = same, total = #qs, tool_saw_speculative = seen_speculative,
  send_calls_seq = seq_calls, send_calls_spec = send_calls,
  core_send_full = pc.tools.send.full, core_send_forbid = pc.tools.send.forbid,
  core_search_full = pc.tools.search.full, deferred = agg.deferred, commits = agg.commits }))
