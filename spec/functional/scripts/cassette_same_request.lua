-- Every thread of every query asks GET /stats, whose answer (the server's
-- request count) differs each time: two sibling threads per query
-- (candidates "wrong" and "held" for a pick) at the same instant, the
-- queries in the order their first call ends (a hold of 60, 35 and 10 ms
-- for q1, q2 and q3). Each thread prints what it saw: SAW query guess count.
-- CAS_BASE: the test server. See cassette_spec.lua.
local specula = require "specula"
local BASE = os.getenv("CAS_BASE")
local HOLD = { q1 = 60, q2 = 35, q3 = 10 }
local tools = {
  wait = specula.tools.http { url = BASE .. "/hold?ms={ms}", result = function(res) return res.body end, retry = false },
  pick = specula.tools.http { url = BASE .. "/hold?ms={ms}&pick=1", result = function(res) return res.body end,
    retry = false },
  -- each thread says what it saw: its state's guess and the count
  count = function(_, ctx)
    local res = assert(specula.http.request { url = BASE .. "/stats" })
    local n = tostring(specula.json.decode(res.body).requests)
    io.stderr:write("SAW ", ctx.id, " ", ctx.state.seen, " ", n, "\n")
    return n
  end,
}
tools.pick.speculate = function()
  return specula.candidates { { value = "wrong", confidence = 0.6 }, { value = "held", confidence = 0.4 } }
end
return specula.agent {
  tools = tools,
  policy = { wait = "full", pick = "full", count = "full" },
  init = function(q) return { q = q, hop = 0 } end,
  step = function(s)
    if s.hop == 0 then return { action = { tool = "wait", args = { ms = HOLD[s.q] } } } end
    if s.hop == 1 then return { action = { tool = "pick", args = { ms = 30 } } } end
    if s.hop == 2 then return { action = { tool = "count", args = {} } } end
    return { final = s.seen .. " " .. s.count }
  end,
  update = function(s, _, obs)
    if s.hop == 0 then return { q = s.q, hop = 1 } end
    if s.hop == 1 then return { q = s.q, hop = 2, seen = obs } end
    return { q = s.q, hop = 3, seen = s.seen, count = obs }
  end,
}
