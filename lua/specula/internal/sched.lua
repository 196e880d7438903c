-- specula.internal.sched: tasks. Lua looks synchronous; an async call starts work in C,
-- then yields; C resumes the coroutine from a loop callback when it is done.
local core = require "specula.internal.core"
local ffi = core.ffi
local C = core.C
local ctx = core.ctx

local co_create, co_yield, co_running = coroutine.create, coroutine.yield, coroutine.running
local select, unpack, type, tostring, setmetatable, error = select, unpack, type, tostring, setmetatable, error
local traceback = debug.traceback

local DONE, FAILED, CANCELLED = C.SP_TASK_DONE, C.SP_TASK_FAILED, C.SP_TASK_CANCELLED

local M = {}

-- id -> coroutine: the table C anchors in the registry and resumes from.
local CO = {}
M.co_table = CO

-- The value store (engine/sp_vals.c): slot -> a Lua value the engine holds.
-- C counts the references and clears released slots from the loop.
local VALS = {}
M.vals = VALS

local function pack(...) return { n = select("#", ...), ... } end

local ENGINE_SRC = "/lua/specula/"

-- Any error object as a string, without ever raising: a table whose
-- __tostring raises (or returns no string) would otherwise turn the error
-- into "error in error handling" and lose where it came from.
local function errstr(e)
  if type(e) == "string" then return e end
  local ok, s = pcall(tostring, e)
  if ok and type(s) == "string" then return s end
  return "a " .. type(e) .. " error object (its __tostring failed)"
end
M.errstr = errstr

-- FILE:LINE of the innermost frame of the user's code (not the engine's,
-- not C) from level on, or nil. Called in an error handler, it names the
-- place that raised.
local function where(level)
  for l = level + 1, level + 40 do
    local info = debug.getinfo(l, "Sl")
    if not info then return nil end
    if info.what ~= "C" and info.currentline and info.currentline > 0
       and not info.source:find(ENGINE_SRC, 1, true) then
      return info.short_src .. ":" .. info.currentline
    end
  end
end
M.where = where

-- The message of an error: a string as raised; any other object (nil, a
-- number, a table) prefixed with the place that raised it, so the message
-- alone still says where. level: the handler's caller's level.
local function message(e, level)
  if type(e) == "string" then return e end
  local loc = where(level + 1)
  local s = e == nil and "nil (error raised without a message)" or errstr(e)
  if type(e) == "number" and loc and s:find(loc, 1, true) == 1 then return s end
  return loc and (loc .. ": " .. s) or s
end

-- Errors keep their traceback; a "plain" error (usage mistakes reported by
-- the runtime itself) is shown without one. Never raises (a handler that
-- raises ends as "error in error handling"). up: frames between it and
-- the error (a handler that calls it: 1).
local function on_error(e, up)
  if type(e) == "table" and rawget(e, "plain") then return errstr(rawget(e, "message")) end
  local level = 2 + (tonumber(up) or 0)
  -- (not `return traceback(...)`: that tail call dropped this frame from
  -- the count, and every traceback began one frame too deep, without the
  -- function that raised)
  local tb = traceback(message(e, level), level)
  return tb
end
M.on_error = on_error

-- A plain error may carry the exit status it means (2: a usage mistake);
-- the command dispatcher (specula.cmd) sets it, nothing else does. Without
-- one, a failed command exits 1.
local function plain_error(message, status) error({ plain = true, message = message, status = status }, 0) end
-- A usage mistake found below the commands (a bad `specula run` option in
-- specula.run.opts): status 2, and the dispatcher adds the command's usage
-- hint; the module that found it prints nothing.
local function usage_error(message) error({ plain = true, message = message, status = 2, usage = true }, 0) end

-- An error in a window job (the agent's code, a tool, a speculator): its
-- message and the frames of the agent's own files. The engine's frames
-- (lua/specula/, C) say nothing to the user and would fill every query's
-- error record; a tool error raised inside the engine is its message alone.
-- The traceback's frames in the user's own files from level on (none of
-- the engine's, no C, no tail calls), as lines.
local function user_frames(level)
  local keep = {}
  for line in traceback("", level + 1):gmatch("[^\n]+") do
    if line:find("^%s") and not line:find(ENGINE_SRC, 1, true) and not line:find("[C]", 1, true)
       and not line:find("(tail call)", 1, true) then
      keep[#keep + 1] = line
    end
  end
  return keep
end

local function job_error(e)
  if type(e) == "table" and rawget(e, "plain") then return errstr(rawget(e, "message")) end
  local msg = message(e, 2)
  local keep = user_frames(2)
  if #keep == 0 then return msg end
  return msg .. "\nstack traceback:\n" .. table.concat(keep, "\n")
end
M.job_error = job_error

-- An error that ends a command (the handler's caller is up frames above
-- the error): raised in the user's script (its main chunk, or what it
-- called), its message and the script's frames, as a job's error is; one
-- with no frame of the user's (the engine's own failure) keeps the whole
-- traceback, which is what a bug report needs.
function M.command_error(e, up)
  if type(e) == "table" and rawget(e, "plain") then return errstr(rawget(e, "message")) end
  local level = 2 + (tonumber(up) or 0)
  local keep = user_frames(level)
  if #keep == 0 then
    -- (not `return traceback(...)`: a tail call would drop this frame from
    -- the count, and the traceback would start one frame too deep)
    local whole = traceback(message(e, level), level)
    return whole
  end
  return message(e, level) .. "\nstack traceback:\n" .. table.concat(keep, "\n")
end
M.plain_error = plain_error
M.usage_error = usage_error

-- A call into the user's code (a predictor's method, a policy's decide, a
-- hook) that must not end more than what it belongs to: true and its
-- results, or false and the message naming the script and line (the
-- user's frames of the traceback with it when trace is true).
local function first_line(m) return (m:match("^[^\n]*")) end
function M.protect(trace, fn, ...)
  local r = pack(xpcall(fn, job_error, ...))
  if not r[1] and not trace then r[2] = first_line(r[2]) end
  return unpack(r, 1, r.n)
end

local function set_error(t, msg)
  -- a failed task's message may reach stderr (the main task's, printed by
  -- the host) or a record: it leaves as any output would write it
  msg = require("specula.internal.output").clean(tostring(msg))
  C.sp_task_set_error(t, msg, #msg)
end

-- The job dispatcher. Window calls (update + step, tool, speculator,
-- verifier) are jobs: C queues them, and this loop takes them one after
-- another in a single coroutine, calls the job's function (one per kind,
-- lua/specula/internal/protocol.lua) and hands the results back with sp_job_finish,
-- which runs the window's reaction in C. No coroutine switch per call, so
-- the JIT can compile the loop with the agent's functions in it. A call
-- that waits on the loop (HTTP, sleep) yields this coroutine: C then keeps
-- it for that job and starts another dispatcher for the rest; when the job
-- is done there, this loop goes on taking jobs until none is left, then
-- parks (yields) until C needs it.
-- The job is taken by copying its call into the dispatcher's own struct
-- and ended as the running task: a task pointer in Lua would be one more
-- boxed object per job, and per wait (where the trace is left).
local job_take, job_finish = C.sp_job_take, C.sp_job_finish
-- One result struct: a job's function fills it (by name) just before it
-- returns, and sp_job_finish copies what the window keeps.
local RES = ffi.new("sp_jobres")
local MAXDEAD = 256
local DEAD = ffi.new("int[?]", MAXDEAD)

-- Report a job's end; clear the value slots it released (C reuses them).
-- The result slots and strings are cleared for the next job: C has taken
-- what it keeps, and a job fills only the fields of its kind. keep: the
-- Lua string RES points into, referenced until C has read it.
-- Windows that encode their trajectory as hops commit (specula.run.records)
-- queue after a commit: on_commits encodes what they queued right after the
-- job, so a query in flight holds text, not its hops' Lua values.
local ENCP = ctx ~= nil and C.sp_window_enc_pending(ctx) or nil
M.on_commits = false
local function done(ok, keep)
  local n = job_finish(ctx, ok, RES, DEAD, MAXDEAD)
  RES.state, RES.step, RES.actx, RES.value = 0, 0, 0, 0
  RES.tool, RES.key, RES.reason, RES.error = nil, nil, nil, nil
  for i = 0, n - 1 do VALS[DEAD[i]] = nil end
  if ENCP and ENCP[0] ~= 0 and M.on_commits then M.on_commits() end
  return keep
end

local function fail(e)
  local msg = tostring(e)
  RES.error, RES.error_len = msg, #msg
  done(0, msg)
end

-- An idle dispatcher parks here, in a frame of 32 slots (the locals):
-- LuaJIT's collector halves a coroutine's stack when under a quarter of it
-- is in use, and an idle dispatcher uses 17 slots of the 126-150 its jobs
-- grew it to, so every collector cycle shrank the idle ones and their next
-- job grew them again (a reallocation and copy each: 8,450 in 6,000 one-hop
-- queries at 2,000 in flight, one per coroutine now). Stacks up to about
-- 200 slots are kept; a deeper agent's still shrink, as memory asks.
local function park()
  local _1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16
  local _17, _18, _19, _20, _21, _22, _23, _24, _25, _26, _27, _28, _29, _30, _31, _32
  co_yield()
  return _1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16,
    _17, _18, _19, _20, _21, _22, _23, _24, _25, _26, _27, _28, _29, _30, _31, _32
end

-- The loop runs inside one protected call rather than one per job. A job
-- that waited resumes in the interpreter (a trace cannot cross the yield),
-- and a trace that starts on that return path (put_step, done) ran into
-- the per-job xpcall frame and was dropped ("NYI: return to lower frame");
-- now it returns through Lua frames into this loop and links to its trace.
-- An error unwinds the loop: the job it ran (box.busy) fails and the loop
-- starts again. box.call: this dispatcher's copy of its job's call (a
-- dispatcher runs one job at a time, and keeps it while the job waits).
local function loop(box)
  local c = box.call
  while true do
    if job_take(ctx, c) == 0 then
      park()
    else
      box.busy = true
      local r = VALS[c.fn](c, RES)
      box.busy = false
      done(1, r)
    end
  end
end

-- Called (when set) with a failed job's call struct and its message, before
-- the job fails (specula.internal.protocol: a raising verifier is said once).
M.on_job_fail = false

-- (the type once: ffi.new with a type name parses it at each call, ~1,100
-- instructions, and thousands of dispatchers start when thousands of
-- queries wait at once)
local JOBCALL = ffi.typeof("sp_jobcall")
local function dispatcher()
  local box = { busy = false, call = JOBCALL() }
  while true do
    local _, e = xpcall(loop, job_error, box)
    -- an error outside a job (done: the window's reaction, the hop
    -- encoding) stops this dispatcher, as it always did (C fails the job);
    -- one inside fails the job, which is still the running task (C sets it
    -- for the job and back after every resume inside it)
    if not box.busy then error(e, 0) end
    box.busy = false
    if M.on_job_fail then M.on_job_fail(box.call, e) end
    fail(e)
  end
end
M.worker_body = dispatcher

-- The running task, or an error when called outside one (a plain
-- coroutine cannot wait on the loop: its yield would go to its resumer).
-- C keeps CO[id] = the coroutine it is resuming for task id.
local function current(what)
  local t = ctx ~= nil and C.sp_task_current(ctx) or nil
  local co = co_running()
  if t == nil or (CO[co] ~= true and CO[C.sp_task_id(t)] ~= co) then
    error((what or "specula") .. ": must be called from a specula task "
      .. "(a plain coroutine cannot wait on the loop)", 3)
  end
  return t
end
M.current = current

function M.in_task()
  local t = ctx ~= nil and C.sp_task_current(ctx) or nil
  if t == nil then return false end
  local co = co_running()
  return CO[co] == true or CO[C.sp_task_id(t)] == co
end

-- Wait for the next wake-up of the running task.
M.yield = co_yield

-- coroutine.yield called by the user's code in a task (not in a coroutine
-- of its own) would hand control to the loop with nothing armed to resume
-- it: the task, and the run waiting on it, would never end. It fails
-- instead, naming the caller, and ends only that task's work (a query's
-- error record). The engine's own waits use sched.yield (the raw one);
-- yields in the user's own coroutines pass through unchanged.
coroutine.yield = function(...)
  if M.in_task() then
    error("coroutine.yield() called directly in a specula task: wait with specula.sleep, specula.http, "
      .. "task:wait or specula.wait_any/wait_all (a bare yield would leave the task waiting for nothing)", 2)
  end
  return co_yield(...)
end

-- Called (when set) as the running task is about to wait in sleep() or on
-- other tasks: a cassette being recorded notes when each window job first
-- waits (specula/cassette/clock.lua).
M.on_wait = false
-- Called (when set) with a sleep's length before it starts, returns the
-- length to sleep: a cassette notes when each sleep of a window job was to
-- end, and a replay ends it then (specula/cassette/clock.lua). A simulated
-- call sleeps rather than finishing later while it is set (specula.internal.simlaw).
M.on_sleep = false

local Task = {}
Task.__index = Task
M.Task = Task

function M.spawn(fn, ...)
  if type(fn) ~= "function" then
    error("specula.spawn: expected a function, got " .. type(fn), 2)
  end
  if ctx == nil then core.require_ctx("specula.spawn") end
  local parent = M.in_task() and C.sp_task_current(ctx) or nil
  local p = C.sp_task_new(ctx, parent)
  if p == nil then error("specula.spawn: the engine is shutting down", 2) end
  local self = setmetatable({ ptr = ffi.gc(p, C.sp_task_release), id = C.sp_task_id(p) }, Task)
  local n, args = select("#", ...), { ... }
  CO[self.id] = co_create(function()
    local r = pack(xpcall(fn, on_error, unpack(args, 1, n)))
    self.results = r
    if not r[1] then set_error(self.ptr, r[2]) end
  end)
  return self
end

function Task:state()
  local s = C.sp_task_state(self.ptr)
  if s == DONE then return "done" elseif s == FAILED then return "failed"
  elseif s == CANCELLED then return "cancelled" else return "running" end
end

function Task:done() return C.sp_task_state(self.ptr) >= DONE end

local function outcome(self)
  local s = C.sp_task_state(self.ptr)
  if s == DONE then
    local r = self.results
    if r then return true, unpack(r, 2, r.n) end
    return true
  elseif s == FAILED then
    local r = self.results
    if r and r[2] ~= nil then return false, r[2] end
    return false, ffi.string(C.sp_task_error(self.ptr))
  end
  return false, "cancelled"
end

-- Wait for the task: true, results... | false, error-with-traceback | false, "cancelled".
-- Said by a wait nothing was left to end (sp_sched_break_stall).
local STALL = ": the task waited on can never finish: no timer, transfer or task was left to wake it "
  .. "(tasks waiting on each other?)"

function Task:wait()
  local me = current("task:wait")
  if me == self.ptr then error("task:wait: a task cannot wait for itself", 2) end
  while C.sp_task_state(self.ptr) < DONE do
    if C.sp_task_wait(me, self.ptr) == 0 then
      if M.on_wait then M.on_wait() end
      co_yield()
    end
    C.sp_task_unwait(me)
    if C.sp_task_take_stall(me) ~= 0 then error("task:wait" .. STALL, 2) end
  end
  return outcome(self)
end
Task.result = outcome

-- Cancel the task and everything it started (children, sleeps, transfers).
function Task:cancel()
  C.sp_task_cancel(self.ptr)
  if M.in_task() and C.sp_task_current(ctx) == self.ptr then co_yield() end
end

local function check_tasks(tasks, what)
  if type(tasks) ~= "table" or #tasks == 0 then
    error(what .. ": expected a non-empty list of tasks", 3)
  end
  for i = 1, #tasks do
    if getmetatable(tasks[i]) ~= Task then
      error(what .. ": element " .. i .. " is not a task", 3)
    end
  end
end

-- The first task to finish (lowest index among those already finished).
function M.wait_any(tasks)
  check_tasks(tasks, "specula.wait_any")
  local me = current("specula.wait_any")
  while true do
    for i = 1, #tasks do
      if C.sp_task_state(tasks[i].ptr) >= DONE then return tasks[i], i end
    end
    for i = 1, #tasks do C.sp_task_wait(me, tasks[i].ptr) end
    if M.on_wait then M.on_wait() end
    co_yield()
    C.sp_task_unwait(me)
    if C.sp_task_take_stall(me) ~= 0 then error("specula.wait_any" .. STALL, 2) end
  end
end

-- Wait for every task; returns a list of { ok, ... } and whether all succeeded.
function M.wait_all(tasks)
  check_tasks(tasks, "specula.wait_all")
  local out, all_ok = {}, true
  for i = 1, #tasks do
    local r = pack(tasks[i]:wait())
    out[i] = r
    if not r[1] then all_ok = false end
  end
  return out, all_ok
end

-- (as current(), without the task pointer: one boxed object less a wait)
local current_id, sleep_running = C.sp_task_current_id, C.sp_sleep_running
function M.sleep(ms)
  if type(ms) ~= "number" then error("specula.sleep: expected milliseconds, got " .. type(ms), 2) end
  -- NaN (a 0/0 in the caller's arithmetic) waited 0 without a word
  if ms ~= ms then error("specula.sleep: expected milliseconds, got nan", 2) end
  local id = ctx ~= nil and current_id(ctx) or 0
  local co = co_running()
  if id == 0 or (CO[co] ~= true and CO[id] ~= co) then current("specula.sleep") end
  if M.on_sleep then ms = M.on_sleep(ms) end
  local err, errlen = core.errbuf()
  if sleep_running(ctx, ms, err, errlen) ~= 0 then error("specula.sleep: " .. ffi.string(err), 2) end
  if M.on_wait then M.on_wait() end
  co_yield()
end

-- Sleep ms, then return: for code with nothing left to do but return. In
-- a window job (the agent's step, tool, speculator or verifier call) the
-- job returns at once and the engine delivers what it returned ms later,
-- the same timer a sleep would arm, without suspending the job's coroutine
-- (a suspended call costs a coroutine switch each way and runs its return
-- path in the interpreter). Elsewhere it is specula.sleep.
function M.finish_after(ms)
  if type(ms) ~= "number" then error("sched.finish_after: expected milliseconds, got " .. type(ms), 2) end
  if ms > 0 and ctx ~= nil then
    local t = C.sp_task_current(ctx)
    if t ~= nil and C.sp_job_defer(t, ms) == 0 then return end
  end
  return M.sleep(ms)
end

-- Milliseconds on the engine clock (virtual under --clock virtual).
function M.now() return C.sp_clock_ms(ctx) end
-- Real monotonic milliseconds, whatever the engine clock (for benchmarks).
function M.real_now() return C.sp_now_ms() end

-- Switch the engine clock: "real" or "virtual". Refused while timers or
-- transfers are pending (deadlines on one clock mean nothing on the other).
function M.set_clock(name)
  if name ~= "real" and name ~= "virtual" then
    return nil, "clock must be real or virtual, got " .. tostring(name)
  end
  if ctx == nil then return nil, "clock: needs the specula runtime" end
  local err, errlen = core.errbuf()
  if C.sp_clock_set_virtual(ctx, name == "virtual" and 1 or 0, err, errlen) ~= 0 then
    return nil, ffi.string(err)
  end
  return true
end
function M.clock() return (ctx ~= nil and C.sp_clock_virtual(ctx) ~= 0) and "virtual" or "real" end

return M
