-- Fault injection through the test server, with speculation on.
local H = require "support.helpers"
local cjson = require "cjson"
local SCRIPTS = H.root .. "/spec/functional/scripts/"

local last_json = H.last_json

describe("fault injection", function()
  local server
  setup(function() server = H.server() end)
  teardown(function() server.stop() end)

  it("ends each affected query with a clear error or recovers, and leaves nothing open", function()
    local rawpath = H.tmpfile("fault_errors.bin")
    local st, out, err = H.specula({ "run", SCRIPTS .. "faults.lua", server.base, rawpath })
    assert.equals(0, st, err)
    -- no error message carries invalid bytes (the /utf8 fault sends invalid
    -- UTF-8: none of it may leak into a message), checked on the bytes the
    -- run produced, before any JSON round trip
    local raw = assert(H.read(rawpath))
    local n, raw_msgs = 0, {}
    for id, msg in raw:gmatch("(%Z+)%z(%Z*)%z") do
      n = n + 1
      raw_msgs[id] = msg
      local ok, why = H.utf8_valid(msg)
      assert.is_true(ok, id .. ": " .. tostring(why))
      -- the message names the tool on its first line; what follows is the
      -- agent's own frames only, never the engine's
      assert.matches("^tools%.http 'http': [^\n]+", msg)
      assert.is_nil(msg:find("/lua/specula/", 1, true), id .. ": " .. msg)
      assert.is_nil(msg:find("[C]", 1, true), id .. ": " .. msg)
      assert.matches("faults%.lua:%d+", msg:match("stack traceback:(.*)$") or "faults.lua:0")
    end
    assert.equals(7, n)
    local r = last_json(out)
    local e = r.errors
    -- documented outcomes, mode by mode
    assert.matches("ECONNRESET: GET .*/reset", e.reset)                       -- reset mid-stream
    assert.matches("EIDLE: GET .*/stall: no data received for 300 ms", e.stall) -- stall after headers
    assert.matches("ETIMEDOUT: GET .*/drip", e.drip)                          -- slow drip hits the overall timeout
    assert.matches("HTTP 500 from GET .*/status/500 %(after 4 attempts%)", e.err500) -- persistent 500: retried, then an error
    assert.matches("ETRUNCATED: GET .*/truncated", e.truncated)               -- truncated JSON
    assert.matches("not JSON: JSON: invalid UTF%-8 at byte %d+", e.utf8)      -- invalid UTF-8
    assert.matches("EBODYTOOLARGE: GET .*/big/.*max_body_bytes", e.big)        -- body over max_body_bytes
    -- 429 with retry-after and a burst of 503s recover by retrying
    assert.equals("done 3", r.answers.r429)
    assert.equals("done 3", r.answers.burst503)
    -- the other queries of the same run finish correctly
    for _, id in ipairs({ "ok1", "ok2", "ok3" }) do assert.equals("done 3", r.answers[id]) end
    -- no transfer, timer, window or task (beyond the main one) left open
    assert.same({ transfers = 0, timers = 0, tasks = 1, windows = 0, requests = 0, values = 0 }, r.left)
    -- the messages, as the run produced them, are the ones in the summary
    assert.same(raw_msgs, e)
  end)


  it("exits 3 when some queries failed and writes every record", function()
    local q = H.tmpfile("faultq.jsonl", cjson.encode({ id = "good", query = "a" }) .. "\n"
      .. cjson.encode({ id = "bad", query = "b" }) .. "\n")
    local code = [[
      local specula = require "specula"
      local BASE = ]] .. string.format("%q", server.base) .. [[
      return specula.agent {
        policy = { get = "full" },
        tools = { get = specula.tools.http { url = BASE .. "/status/503", result = "text",
                                             retry = { max_retries = 1, base_ms = 5 } } },
        init = function(q, ctx) return { id = ctx.id, hop = 0 } end,
        step = function(s) if s.hop >= 1 or s.id == "good" then return { final = "fine" } end
          return { action = { tool = "get", args = {} } } end,
        update = function(s) return { id = s.id, hop = 1 } end,
      }
    ]]
    local agent = H.tmpfile("fault_agent.lua", code)
    local out = H.tmpfile("fault_out.jsonl")
    local st, _, err = H.specula({ "run", agent, "--input", q, "--out", out, "--k", "3" })
    assert.equals(3, st, err)
    local recs = H.jsonl(H.read(out))
    assert.equals(2, #recs)
    assert.equals("fine", recs[1].answer)
    assert.matches("HTTP 503", recs[2].error)
  end)

  -- not #timing: a wall-time ceiling is a benchmark's figure, not a test's
  -- (bench/); this case checks that none fails and nothing is left open,
  -- and runs under the sanitizers with the rest
  it("holds 5,000 concurrent connections #slow", function()
    local st, out, err = H.specula({ "run", SCRIPTS .. "many_connections.lua", server.base, "5000" })
    assert.equals(0, st, err)
    local r = last_json(out)
    assert.equals(0, r.failed)
    assert.is_true(r.peak_open >= 5000)
    assert.same({ transfers = 0, timers = 0, tasks = 1, polls = 0 }, { transfers = r.left.transfers,
      timers = r.left.timers, tasks = r.left.tasks, polls = r.left.polls })
  end)
end)
