-- Records written to a regular --out file go out in batches: each line into
-- a large buffer the engine writes at the end of every drain of its ready
-- queue (before the loop waits) and every 100 ms while the CPU stays busy,
-- not a write(2) a line. What a user relies on is unchanged: a finished
-- query's line is in the file while the run waits on others; a killed run
-- leaves whole lines (a torn last one at most) that a resume completes;
-- pipes and stdout still get every line at once. (Write failures are
-- integrity_spec's: a file cut back to its last complete line.)
local H = require "support.helpers"
local cjson = require "cjson"

-- q "slow<n>" waits n ms in its tool call; any other query 1 ms
local AGENT = [[
local specula = require "specula"
return specula.agent {
  name = "batch",
  init = function(q, ctx) return { q = q, hop = 0 } end,
  step = function(s, ctx)
    if s.hop >= 1 then return { final = "done " .. s.q } end
    return { segment = "s", action = { tool = "t", args = { q = s.q } } }
  end,
  update = function(s, step, obs, ctx) return { q = s.q, hop = s.hop + 1 } end,
  tools = { t = { call = function(args, ctx)
    specula.sleep(tonumber(args.q:match("^slow(%d+)")) or 1)
    return "o"
  end } },
}
]]

local function input(ids)
  local t = {}
  for i, id in ipairs(ids) do t[i] = cjson.encode({ id = id, query = id }) end
  return H.tmpfile(nil, table.concat(t, "\n") .. "\n")
end

-- The agent (AGENT, or the text given), n queries named prefix1..prefixN,
-- their input file and an --out path not there yet.
local function setup(n, prefix, name, agent_text)
  local ids = {}
  for i = 1, n do ids[i] = prefix .. i end
  local out = H.tmpfile(name)
  os.remove(out)
  return H.tmpfile("batch_agent.lua", agent_text or AGENT), ids, input(ids), out
end

-- Start `specula run` in the background; returns its pid.
local function start(args)
  local parts = { H.quote(H.bin) }
  for _, a in ipairs(args) do parts[#parts + 1] = H.quote(a) end
  local pidf = H.tmpfile()
  os.execute(table.concat(parts, " ") .. " >/dev/null 2>&1 & echo $! >" .. H.quote(pidf))
  return tonumber(H.read(pidf):match("%d+"))
end

local function alive(pid) return os.execute("kill -0 " .. pid .. " 2>/dev/null") == 0 end

-- Wait (up to s seconds) until path has at least n whole lines.
local function wait_lines(path, n, s)
  for _ = 1, s * 20 do
    local text = H.read(path) or ""
    local _, count = text:gsub("\n", "")
    if count >= n then return text end
    os.execute("sleep 0.05")
  end
  return H.read(path) or ""
end

describe("records of a regular --out file", function()
  it("reach the file while the run still waits on a slow query", function()
    local agent = H.tmpfile("batch_agent.lua", AGENT)
    local out = H.tmpfile("batch_wait.jsonl")
    os.remove(out)
    local pid = start({ "run", agent, "--input", input({ "fast1", "fast2", "slow30000" }), "--out", out,
                        "--concurrency", "3", "--quiet" })
    local text = wait_lines(out, 2, 20)
    local still = alive(pid)
    os.execute("kill -9 " .. pid .. " 2>/dev/null")
    local recs = H.jsonl(text)
    assert.equals(2, #recs, text)
    assert.is_true(still, "the run ended before its slow query")
    local ids = { recs[1].id, recs[2].id }
    table.sort(ids)
    assert.same({ "fast1", "fast2" }, ids)
    assert.equals("done fast1", recs[1].id == "fast1" and recs[1].answer or recs[2].answer)
  end)

  it("reach the file within a fraction of a second while the agent keeps the CPU busy, never waiting", function()
    -- each tool call computes ~10 ms and returns: no query ever waits, and
    -- with 64 in flight the engine's ready queue never runs dry (~5 s)
    local busy = AGENT:gsub("specula%.sleep%(tonumber%(args%.q:match%(\"%^slow%(%%d%+%)\"%)%) or 1%)",
      "local t0 = os.clock() while os.clock() - t0 < 0.01 do end")
    assert.is_truthy(busy:find("os.clock", 1, true))
    local agent = H.tmpfile("batch_busy.lua", busy)
    local ids = {}
    for i = 1, 500 do ids[i] = "b" .. i end
    local out = H.tmpfile("batch_busy.jsonl")
    os.remove(out)
    local pid = start({ "run", agent, "--input", input(ids), "--out", out, "--concurrency", "64", "--quiet" })
    local text = wait_lines(out, 1, 20)
    local still = alive(pid)
    os.execute("kill -9 " .. pid .. " 2>/dev/null")
    local recs = H.jsonl(text:match("^(.*\n)") or "")
    assert.is_true(#recs >= 1, "no line yet")
    assert.is_true(still, "the first lines came only at the end")
    -- (not only when the 256 KB buffer filled: ~200 of these lines)
    assert.is_true(#recs < 100, "the first lines came " .. #recs .. " at once")
  end)

  it("killed mid-run with SIGKILL: whole lines (at most a torn last one), and a resume completes the set", function()
    -- the virtual clock: CPU-bound, so lines go out in large batches. Each
    -- tool call also spins 0.4 ms of CPU, so the run lasts about 2 s on any
    -- machine and the kill lands mid-run (without it 20,000 queries took
    -- 0.19 s on a fresh CI machine: all done before the poll that saw the
    -- first line could kill the run)
    local spin = AGENT:gsub("specula%.sleep%(", "local t0 = os.clock() while os.clock() - t0 < 0.0004 do end specula.sleep(", 1)
    assert.is_truthy(spin:find("os.clock", 1, true))
    local agent, ids, q, out = setup(5000, "q", "batch_kill.jsonl", spin)
    local pid = start({ "run", agent, "--input", q, "--out", out, "--clock", "virtual", "--concurrency", "64",
                        "--quiet" })
    wait_lines(out, 1, 20)
    os.execute("kill -9 " .. pid .. " 2>/dev/null")
    os.execute("sleep 0.2")
    local text = H.read(out) or ""
    local whole = text:match("^(.*\n)") or ""
    local recs = H.jsonl(whole)   -- every whole line parses
    assert.is_true(#recs >= 1 and #recs < #ids, #recs .. " whole lines")
    local st, _, err = H.specula({ "run", agent, "--input", q, "--out", out, "--clock", "virtual",
                                   "--concurrency", "64" })
    assert.equals(0, st, err)
    assert.matches("resuming: %d+ results already in", err)
    local seen, n = {}, 0
    for _, r in ipairs(H.jsonl(H.read(out))) do
      assert.is_nil(seen[r.id], "twice: " .. tostring(r.id))
      assert.is_nil(r.error, r.error)
      seen[r.id] = true
      n = n + 1
    end
    assert.equals(#ids, n)
  end)

  it("a run writes the same records with and without batching (a pipe gets a line at a time)", function()
    local agent, _, q, out = setup(300, "p", "batch_file.jsonl")
    local st, _, err = H.specula({ "run", agent, "--input", q, "--out", out, "--clock", "virtual", "--quiet" })
    assert.equals(0, st, err)
    -- --out - is stdout, a pipe here: written and flushed a line at a time
    local st2, piped, err2 = H.specula({ "run", agent, "--input", q, "--out", "-", "--clock", "virtual",
                                         "--quiet" })
    assert.equals(0, st2, err2)
    local a, b = H.jsonl(H.read(out)), H.jsonl(piped)
    assert.equals(300, #a)
    assert.equals(300, #b)
    for i = 1, 300 do
      assert.equals(a[i].id, b[i].id)
      assert.equals(a[i].answer, b[i].answer)
      assert.same(a[i].trajectory, b[i].trajectory)
      assert.same(a[i].stages, b[i].stages)
    end
  end)
end)
