-- A multi-hop agent whose time is spent where CAS_TIMING says: "sleep" (the
-- model step, the tool and the speculator wait in specula.sleep, as a local
-- model stub or the simulated examples do), "http" (each waits on the test
-- server's /hold), "mcp" (each waits on the MCP test server's slow tool over
-- stdio), "mix" (the model a sleep then an HTTP call, the tool a sleep,
-- the speculator over MCP) or "cpu" (the model computes for its time, holding
-- the CPU; the tool and the speculator sleep). Answers come from the arguments alone, so every
-- timing gives the same trajectories; the latencies (keyed per query and hop,
-- as specula.sim draws them) and the speculator's hits too.
-- CAS_BASE: the test server; CAS_NODE: node (a replay that cannot start the
-- MCP server must not need it); CAS_BLIND=1: the model's request leaves out
-- the last observation, so the threads of a hop (on a guess, on the real
-- result) ask the very same request; CAS_PREDICT=1: a predictor; CAS_VERIFY=
-- any: a verifier that accepts every guess; CAS_SCALE: every latency times
-- this (default 1). See cassette_replay_spec.lua.
local specula = require "specula"
local sim = specula.sim

local TIMING = os.getenv("CAS_TIMING") or "sleep"
local BASE = os.getenv("CAS_BASE") or "http://127.0.0.1:1"
local P = tonumber(os.getenv("CAS_P") or "") or 0.5
local BLIND = os.getenv("CAS_BLIND") == "1"
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."

local mcp
if TIMING == "mcp" or TIMING == "mix" then
  mcp = assert(specula.mcp.connect { command = { os.getenv("CAS_NODE") or "node",
    here .. "/../../support/mcp_testserver.js" }, name = "ts" })
end

-- ms for this query, hop and kind: uniform in [lo, hi] times CAS_SCALE, keyed
local SCALE = tonumber(os.getenv("CAS_SCALE") or "") or 1
local function ms_of(ctx, kind, lo, hi, hop)
  return math.floor(SCALE * (lo + (hi - lo) * sim.draw(ctx, kind, 0, hop)) + 0.5)
end

local function http_wait(ms, tag)
  local r, err = specula.http.request { url = BASE .. "/hold?ms=" .. ms .. "&tag=" .. specula.tools.urlencode(tag) }
  assert(r, err)
  assert(r.status == 200, "hold: HTTP " .. tostring(r.status))
end

local function mcp_wait(ms, tag)
  local r, err = mcp:call("slow", { ms = ms, tag = tag })
  assert(r, err)
end

-- where each stage spends its time
local WAIT = {
  sleep = { model = specula.sleep, tool = specula.sleep, spec = specula.sleep },
  http = { model = http_wait, tool = http_wait, spec = http_wait },
  mcp = { model = mcp_wait, tool = mcp_wait, spec = mcp_wait },
  mix = { model = function(ms, tag) specula.sleep(ms - math.floor(ms / 2)) http_wait(math.floor(ms / 2), tag) end,
          tool = function(ms) specula.sleep(ms) end, spec = mcp_wait },
  -- the model computes in the process (a local model): it holds the CPU,
  -- and the loop, for its time; the tool and the speculator are remote
  cpu = { model = function(ms) local t = os.clock() + ms / 1000 while os.clock() < t do end end,
          tool = function(ms) specula.sleep(ms) end, spec = function(ms) specula.sleep(ms) end },
}
local W = assert(WAIT[TIMING], "CAS_TIMING must be sleep, http, mcp, mix or cpu")
if TIMING == "sleep" then
  for k, f in pairs(W) do W[k] = function(ms) f(ms) end end
end

local function truth(q) return "fact:" .. sim.digest(q) end

-- CAS_PREDICT=1: a predictor that foresees each call (its arguments follow
-- from the history), so the tool runs early under the policy's "full"
local function predict(history, ctx)
  local last = #history > 0 and history[#history].observation or ctx.query
  return { { tool = "search", args = { q = tostring(ctx.id) .. "/" .. #history .. "/" .. last }, confidence = 0.9 } }
end
-- CAS_VERIFY=any: a verifier that accepts every guess (lossy: wrong
-- observations are committed)
local verify = os.getenv("CAS_VERIFY") == "any" and function() return true, "anything goes" end or nil

return specula.agent {
  name = "timed-" .. TIMING,
  tools = {
    search = {
      call = function(args, ctx)
        W.tool(ms_of(ctx, "target", 40, 80), "T " .. args.q)
        return truth(args.q)
      end,
      speculate = function(args, ctx)
        local hit = sim.draw(ctx, "spec_ok") < P
        W.spec(ms_of(ctx, "spec", 6, 12), "S " .. args.q)
        return hit and truth(args.q) or ("guess:" .. sim.digest(args.q .. "/wrong"))
      end,
    },
  },
  policy = { search = "full" },
  predict = os.getenv("CAS_PREDICT") == "1" and predict or nil,
  verify = verify,
  init = function(q, ctx) return { q = q, hop = 0, n = 3 + math.floor(sim.draw(ctx, "hops", 0, 0) * 3), notes = {} } end,
  step = function(s, ctx)
    local last = s.notes[#s.notes] or s.q
    W.model(ms_of(ctx, "seg", 8, 16, s.hop), "M " .. tostring(ctx.id) .. "/" .. s.hop .. (BLIND and "" or "/" .. last))
    if s.hop >= s.n then return { final = "answer:" .. sim.digest(table.concat(s.notes, "|")) } end
    return { segment = "hop " .. s.hop, action = { tool = "search", args = { q = tostring(ctx.id) .. "/" .. s.hop .. "/" .. last } } }
  end,
  update = function(s, _, obs)
    local notes = { unpack(s.notes) }
    notes[#notes + 1] = obs
    return { q = s.q, hop = s.hop + 1, n = s.n, notes = notes }
  end,
}
