-- The coroutine scheduler through real scripts: sleep, spawn, wait, cancel.
local H = require "support.helpers"

local function ok_script(code)
  local st, out, err = H.run_lua("local specula = require 'specula'\n" .. code)
  assert.equals(0, st, "script failed: " .. err)
  return out, err
end

describe("scheduler", function()
  it("orders sleeps by deadline and measures monotonic time #timing", function()
    local out = ok_script([[
      local order = {}
      local ts = {}
      for _, ms in ipairs({ 30, 10, 20 }) do
        ts[#ts + 1] = specula.spawn(function() specula.sleep(ms); order[#order + 1] = ms end)
      end
      local t0 = specula.now()
      specula.wait_all(ts)
      local dt = specula.now() - t0
      assert(dt >= 29 and dt < 1000, "elapsed " .. dt)
      print(table.concat(order, ","))
    ]])
    assert.matches("10,20,30", out, 1, true)
  end)

  it("returns results through wait and errors with a traceback", function()
    local out = ok_script([[
      local t = specula.spawn(function(a, b) specula.sleep(1) return a + b, "x" end, 2, 3)
      print(t:wait())
      local bad = specula.spawn(function() specula.sleep(1); local z = nil; return z.field end)
      local ok, err = bad:wait()
      print(ok, err:match("attempt to index") ~= nil, err:match("stack traceback") ~= nil,
            err:match("%.lua:%d+") ~= nil)
    ]])
    assert.matches("true\t5\tx", out, 1, true)
    assert.matches("false\ttrue\ttrue\ttrue", out, 1, true)
  end)

  it("names the function that raised as the traceback's first frame", function()
    -- (the handler's tail call into debug.traceback started every task's
    -- traceback one frame too deep: the raising function was left out)
    local script = H.tmpfile("frames.lua", [[
local specula = require "specula"
local function innermost() local t = nil; local v = t.x; return v end
local function middle() local r = innermost(); return r end
local _, err = specula.spawn(function() local r = middle(); return r end):wait()
print(err)
local _, err2 = specula.spawn(function() local r = middle(); return r end):wait()
error("from the main chunk: " .. tostring(#err2 > 0))
]])
    local st, out, err = H.specula({ "run", script })
    assert.equals(1, st, err)
    local frames = {}
    for l in out:gmatch("\n\t([^\n]+)") do frames[#frames + 1] = l end
    assert.matches("frames.lua:2: in function 'innermost'", frames[1], 1, true)
    assert.matches("frames.lua:3: in function 'middle'", frames[2], 1, true)
    -- and a command's error: the main chunk's line, then nothing of the engine
    assert.matches("frames.lua:7: from the main chunk: true\nstack traceback:\n\t[^\n]*frames.lua:7: in ", err)
  end)

  it("wait_any returns the first finished task, wait_all all results", function()
    -- on the virtual clock: which sleep ends first does not depend on how
    -- fast the machine spawns the second task (it raced under valgrind)
    local out = ok_script([[
      assert(specula.set_clock("virtual"))
      local a = specula.spawn(function() specula.sleep(40) return "a" end)
      local b = specula.spawn(function() specula.sleep(5) return "b" end)
      local first, i = specula.wait_any({ a, b })
      print("first", i, select(2, first:wait()))
      local res, all = specula.wait_all({ a, b })
      print("all", all, res[1][2], res[2][2])
    ]])
    assert.matches("first\t2\tb", out, 1, true)
    assert.matches("all\ttrue\ta\tb", out, 1, true)
  end)

  it("cancel runs the cleanup of pending operations and of child tasks", function()
    local out = ok_script([[
      local inner
      local t = specula.spawn(function()
        inner = specula.spawn(function() specula.sleep(60000) end)
        specula.sleep(60000)
      end)
      specula.sleep(5)
      local c = specula.counts()
      print("before", c.timers)
      t:cancel()
      print("states", t:state(), inner:state())
      print("wait", t:wait())
      c = specula.settle()
      print("after", c.timers, c.tasks)
    ]])
    assert.matches("before\t2", out, 1, true)
    assert.matches("states\tcancelled\tcancelled", out, 1, true)
    assert.matches("wait\tfalse\tcancelled", out, 1, true)
    assert.matches("after\t0\t1", out, 1, true)
  end)

  it("refuses async calls from a plain coroutine with a clear error", function()
    local out = ok_script([[
      local co = coroutine.create(function() specula.sleep(1) end)
      local ok, err = coroutine.resume(co)
      print(ok, err:match("must be called from a specula task") ~= nil)
    ]])
    assert.matches("false\ttrue", out, 1, true)
  end)

  it("validates arguments", function()
    local out = ok_script([[
      print(pcall(specula.spawn, 42))
      print(pcall(specula.sleep, "soon"))
      print(pcall(specula.sleep, 0 / 0))
      print(pcall(specula.wait_all, {}))
    ]])
    assert.matches("expected a function, got number", out, 1, true)
    assert.matches("expected milliseconds, got string", out, 1, true)
    assert.matches("expected milliseconds, got nan", out, 1, true)
    assert.matches("non%-empty list of tasks", out)
  end)

  it("waits 10^12 ms for an infinite sleep (a wait until cancelled) and one turn for 0 or less", function()
    local out = ok_script([[
      assert(specula.set_clock("virtual"))
      local t0 = specula.now()
      specula.sleep(0)
      specula.sleep(-5)
      print("zero", specula.now() - t0)
      local t = specula.spawn(function() specula.sleep(math.huge) end)
      specula.sleep(1)
      print("running", t:state())
      t:cancel()
      print("cancelled", t:state())
      t0 = specula.now()
      specula.sleep(math.huge)
      print("slept", specula.now() - t0)
    ]])
    assert.matches("zero\t0\n", out, 1, true)
    assert.matches("running\trunning", out, 1, true)
    assert.matches("cancelled\tcancelled", out, 1, true)
    assert.matches("slept\t1000000000000\n", out, 1, true)
  end)

  it("holds 10,000 sleeping coroutines and leaves nothing open #slow", function()
    local out = ok_script([[
      local ts = {}
      for i = 1, 10000 do ts[i] = specula.spawn(function() specula.sleep(20) return i end) end
      local res, ok = specula.wait_all(ts)
      print(ok, res[10000][2])
      ts, res = nil, nil
      local c = specula.settle()
      print("left", c.tasks, c.timers, c.ready)
    ]])
    assert.matches("true\t10000", out, 1, true)
    assert.matches("left\t1\t0\t0", out, 1, true)
  end)
  -- Window calls run in the job dispatcher (sched.lua): one coroutine takes
  -- job after job; a call that waits keeps that coroutine and the others go on.
  it("runs window calls in the dispatcher: a waiting call holds only itself, errors stay per query", function()
    local out = ok_script([[
      local order = {}
      local agent = specula.agent {
        init = function(q) return { q = q, hop = 0 } end,
        step = function(s)
          if s.hop >= 3 then return { final = s.q .. " done" } end
          return { action = { tool = "t", args = { q = s.q, hop = s.hop } } }
        end,
        update = function(s, step, obs) return { q = s.q, hop = s.hop + 1 } end,
        tools = { t = {
          call = function(args, ctx)
            if args.q == "slow" then
              specula.sleep(30)                                -- waits on the loop
              order[#order + 1] = "slow woke"
            elseif args.q ~= "bad" and args.hop == 2 and not ctx.speculative then
              order[#order + 1] = "fast finished"
            end
            if args.q == "bad" and args.hop == 1 then error("tool broke") end
            return "o" .. args.hop
          end,
          speculate = function(args, ctx) return "o" .. args.hop end,
        } },
      }
      local qs = { "slow", "bad" }
      for i = 1, 20 do qs[#qs + 1] = "fast" .. i end
      local t0 = specula.now()
      local recs = specula.run(agent, { queries = qs, k = 3, concurrency = #qs })
      print("slow", recs[1].answer, recs[1].stats.wall_ms >= 29)
      print("bad", recs[2].error and recs[2].error:match("tool broke") ~= nil)
      local fast_ok = true
      for i = 3, #recs do fast_ok = fast_ok and recs[i].answer == recs[i].query .. " done" end
      -- the fast queries never waited for the slow one's calls: all of them
      -- reached their last hop before its first call came back
      local before = 0
      for _, e in ipairs(order) do
        if e == "slow woke" then break end
        before = before + 1
      end
      print("fast", fast_ok, before)
      local c = specula.settle()
      print("left", c.tasks, c.windows, c.values)
    ]])
    assert.matches("slow\tslow done\ttrue", out, 1, true)
    assert.matches("bad\ttrue", out, 1, true)
    assert.matches("fast\ttrue\t20", out, 1, true)
    assert.matches("left\t1\t0\t0", out, 1, true)
  end)

  it("finish_after: a window job returns at once and finishes later, exactly as if it slept", function()
    -- the same agent with sleep-then-return and with finish_after: same
    -- records (stage times, rollbacks, cancellations) on the virtual clock,
    -- and every deferred call that a rollback cancelled is released
    local out = ok_script([[
      local sched = require "specula.internal.sched"
      local json = require "specula.json"
      local function make(wait)
        return specula.agent {
          tools = { look = { class = "read",
            call = function(args, ctx)
              local v = "v" .. args.h
              wait(20 + (args.h * 7) % 11)
              return v
            end,
            speculate = function(args, ctx)
              local v = args.h % 3 == 0 and "wrong" or "v" .. args.h
              wait(3 + args.h % 4)
              return v
            end } },
          policy = { look = "full" },
          init = function(q) return { h = 0 } end,
          step = function(s)
            local r = s.h >= 6 and { final = "done" } or { action = { tool = "look", args = { h = s.h } } }
            wait(2)
            return r
          end,
          update = function(s, step, obs) return { h = s.h + 1 } end,
        }
      end
      local function sleep_then(ms) specula.sleep(ms) end
      local texts = {}
      for i, wait in ipairs({ sleep_then, sched.finish_after }) do
        local qs = {}
        for q = 1, 20 do qs[q] = { id = "q" .. q, query = "x" } end
        local recs = specula.run(make(wait), { queries = qs, mode = "spechop", k = 3, clock = "virtual",
                                               concurrency = 7 })
        for _, r in ipairs(recs) do r._agg = nil end
        texts[i] = json.canonical(recs)
      end
      print("same", texts[1] == texts[2], #texts[1] > 1000)
      print("cancelled", texts[2]:match('"cancelled":{[^}]*"total":[1-9]') ~= nil)
      -- outside a window job it is a sleep
      local t0 = specula.now()
      specula.spawn(function() sched.finish_after(15) end):wait()
      print("task", specula.now() - t0 >= 15)
      local c = specula.settle()
      print("left", c.timers, c.windows, c.values)
    ]])
    assert.matches("same\ttrue\ttrue", out, 1, true)
    assert.matches("cancelled\ttrue", out, 1, true)
    assert.matches("task\ttrue", out, 1, true)
    assert.matches("left\t0\t0\t0", out, 1, true)
  end)

  it("lets a small Lua heap grow by about 4 MB between collector cycles, not more", function()
    -- each MB the collector lets the heap grow is memory touched for the
    -- first time (page faults), so the floor on a small heap stays small;
    -- the scheduler sets the pause after each pass over the ready queue
    -- (about a megabyte of live tables: the heap is small, whatever a
    -- plain script's start loads)
    local out = ok_script([[
      local ballast = {}
      for i = 1, 16000 do ballast[i] = { i } end
      for _ = 1, 3 do specula.sleep(1) end
      local kb = collectgarbage("count")
      local pause = collectgarbage("setpause", 150)
      collectgarbage("setpause", pause)
      print("heap", kb > 500 and kb < 7000, kb)
      print(string.format("between cycles %.1f MB", (pause - 100) / 100 * kb / 1024))
      print("kept", #ballast)
    ]])
    assert.matches("heap\ttrue", out)
    local mb = tonumber(out:match("between cycles ([%d.]+) MB"))
    assert.is_true(mb ~= nil and mb > 3.5 and mb < 4.5, out)
  end)

  it("lets a mid-size Lua heap grow by twice its size between collector cycles, and a larger one (16-32 MB) by at most 16 MB", function()
    -- thousands of queries in flight keep a heap of several MB out of
    -- cache, and every cycle marks and sweeps all of it: half as many
    -- cycles there, with the cap that bounds a large batch's peak
    local out = ok_script([[
      local function between(n)
        local ballast = {}
        for i = 1, n do ballast[i] = { i, i } end
        for _ = 1, 3 do specula.sleep(1) end
        local kb = collectgarbage("count")
        local pause = collectgarbage("setpause", 150)
        collectgarbage("setpause", pause)
        return string.format("%.2f %.1f", (pause - 100) / 100, kb / 1024), #ballast
      end
      print("mid", (between(60000)))
      print("large", (between(190000)))
    ]])
    local ratio, mb = out:match("mid%s+([%d.]+) ([%d.]+)")
    ratio, mb = tonumber(ratio), tonumber(mb)
    assert.is_true(mb ~= nil and mb > 4.5 and mb < 8, out)
    assert.is_true(ratio > 1.9 and ratio < 2.1, out)
    local lratio, lmb = out:match("large%s+([%d.]+) ([%d.]+)")
    lratio, lmb = tonumber(lratio), tonumber(lmb)
    assert.is_true(lmb ~= nil and lmb > 16 and lmb < 32, out)
    assert.is_true(lratio * lmb < 16.5, out)
  end)

  it("compiles a waiting window job's return path: no trace is dropped at the job's protected call", function()
    -- a job that waited resumes in the interpreter; a trace started on its
    -- way back (put_step, done) used to return into a per-job xpcall frame,
    -- which LuaJIT cannot record ("NYI: return to lower frame"), so that
    -- path stayed interpreted. The dispatcher's loop now runs in one
    -- protected call, and such traces link back into the loop's.
    local a = H.tmpfile("retpath_agent.lua", [[
      local specula = require "specula"
      return specula.agent {
        init = function() return { hop = 0 } end,
        step = function(state)
          specula.sleep(0)
          if state.hop >= 20 then return { final = "done" } end
          return { action = { tool = "t", args = { i = state.hop } } }
        end,
        update = function(state) return { hop = state.hop + 1 } end,
        tools = { t = { call = function(args) specula.sleep(0) return "o" .. args.i end,
                        speculate = function(args) specula.sleep(0) return "o" .. args.i end } },
        policy = function() return "full" end,
      }
    ]])
    local lines = {}
    for i = 1, 200 do lines[i] = string.format('{"id":"q%d","query":"x"}', i) end
    local input = H.tmpfile("retpath_q.jsonl", table.concat(lines, "\n") .. "\n")
    local out, log = H.tmpfile("retpath.jsonl"), H.tmpfile("retpath_jit.txt")
    os.remove(out)
    os.remove(log)
    local st, _, err = H.specula({ "run", a, "--input", input, "--out", out, "--quiet", "--k", "inf",
                                   "--concurrency", "16", "--max-hops", "30" }, { SPECULA_JITV = log })
    assert.equals(0, st, err)
    local f = assert(io.open(log))
    local text = f:read("*a")
    f:close()
    assert.is_true(#text > 0, "no trace log")
    local dropped = {}
    for line in text:gmatch("[^\n]+") do
      if line:find("return to lower frame", 1, true) and (line:find("sched.lua", 1, true)
         or line:find("protocol.lua", 1, true)) then
        dropped[#dropped + 1] = line
      end
    end
    assert.are.same({}, dropped)
  end)
end)
