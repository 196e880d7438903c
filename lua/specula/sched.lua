-- specula.sched: tasks. Lua looks synchronous; an async call starts work in C,
-- then yields; C resumes the coroutine from a loop callback when it is done.
local core = require "specula.core"
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

-- key -> values C picks up from the loop (a window's agent adapter and
-- query context): Lua cannot hand C a Lua value through the FFI.
M.handoff = {}

local function pack(...) return { n = select("#", ...), ... } end

-- Errors keep their traceback; a "plain" error (usage mistakes reported by
-- the runtime itself) is shown without one.
local function on_error(e)
  if type(e) == "table" and e.plain then return e.message end
  return traceback(tostring(e), 2)
end
M.on_error = on_error

local function plain_error(message) error({ plain = true, message = message }, 0) end
M.plain_error = plain_error

local function set_error(t, msg)
  msg = tostring(msg)
  C.sp_task_set_error(t, msg, #msg)
end

-- The body of the worker coroutines C runs jobs on. A worker runs one job
-- and parks by yielding (ok, results...) — a yield whose first value is a
-- boolean ends the job (a wait for the loop yields nothing); C resumes it
-- with the next job's function and arguments, so the window does not
-- create a coroutine per call.
local function park(ok, ...)
  if not ok then return co_yield(false, tostring((...))) end
  return co_yield(true, ...)
end
local function worker(fn, ...)
  return worker(park(xpcall(fn, on_error, ...)))
end
M.worker_body = worker

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
function Task:wait()
  local me = current("task:wait")
  if me == self.ptr then error("task:wait: a task cannot wait for itself", 2) end
  while C.sp_task_state(self.ptr) < DONE do
    if C.sp_task_wait(me, self.ptr) == 0 then co_yield() end
    C.sp_task_unwait(me)
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
    co_yield()
    C.sp_task_unwait(me)
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

function M.sleep(ms)
  if type(ms) ~= "number" then error("specula.sleep: expected milliseconds, got " .. type(ms), 2) end
  local me = current("specula.sleep")
  local err, errlen = core.errbuf()
  if C.sp_sleep(me, ms, err, errlen) ~= 0 then error("specula.sleep: " .. ffi.string(err), 2) end
  co_yield()
end

function M.now() return C.sp_now_ms() end

return M
