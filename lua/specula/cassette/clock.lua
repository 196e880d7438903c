-- specula.cassette.clock: the cassette's hold on time. While recording it
-- notes when a window job first waits and when its sleeps were to end
-- (sched.on_wait, sched.on_sleep); while replaying, exchanges and sleeps
-- end when they ended in the recording, however late this run's clock
-- wakes up.
local sched = require "specula.internal.sched"
local core = require "specula.internal.core"
local session = require "specula.cassette.session"
local C = core.C

local type, tonumber = type, tonumber
local co_running = coroutine.running

local M = {}

local current_job = session.current_job

-- Coroutines in one of the cassette's own waits (a replayed exchange, a
-- job held), which are not the job's: see on_wait and on_sleep.
local quiet = setmetatable({}, { __mode = "k" })
-- how late the replay's waits wake, on average (see sleep_until)
local late = 0
-- A cassette that opens starts with no lateness.
function M.reset() late = 0 end

-- A speculator call the recording cancelled before it answered (its
-- target beat it, or its thread was discarded) and never answered
-- anywhere in the query stays unanswered in the replay: its target's
-- result makes it moot (a late guess, as recorded) or its thread goes,
-- whichever comes first; both always come. (A failed speculation instead
-- would turn a recorded "late" into an "error".)
M.NEVER_MS = 1e7
local function never()
  local co = co_running()
  quiet[co] = true
  sched.sleep(M.NEVER_MS)
  quiet[co] = nil
end
M.never = never

-- Below a nanosecond (the clock's grain) a wait is float noise: a yield for
-- it would let the loop run, out of the recorded order, what the job set off.
local GRAIN_MS = 1e-6
-- On the real clock a wait wakes late on a loaded machine, and the
-- recorded latencies hold the recording's own lateness already: a replay
-- that paid its own on top would run slow. The running mean of how late
-- the replay's waits woke (at most LATE_MAX ms; always 0 on the virtual
-- clock) is taken off its deadlines.
local LATE_MAX = 2
local function real_clock() return C.sp_clock_virtual(core.ctx) == 0 end
local function sleep_until(t)
  local now = sched.now()
  local real = real_clock()
  local d = t - now - (real and late or 0)
  if d > GRAIN_MS then
    local co = co_running()
    quiet[co] = true
    sched.sleep(d)
    quiet[co] = nil
    if real then
      local l = sched.now() - now - d
      if l > LATE_MAX then l = LATE_MAX elseif l < 0 then l = 0 end
      late = late + (l - late) / 16
    end
  end
end
M.sleep_until = sleep_until

-- While recording: when a window job first waits (a sleep, a wait on a
-- task; its exchanges note it themselves), for its job line's `first`.
function M.on_wait()
  local co = co_running()
  if co and quiet[co] then return end
  local J = current_job()
  if J and not J.first then J.first = sched.now() - J.born end
end

-- A sleep of a window job's own code (not of a task it spawned): while
-- recording, when it was to end (ms from the job's launch, the job line's
-- `sleeps`); while replaying, it ends when it was to end in the recording,
-- so a late wake-up of the replay's clock is not added to the recording's.
-- Returns the length to sleep.
function M.on_sleep(ms)
  local co = co_running()
  if co == nil or quiet[co] then return ms end
  local J = current_job()
  if not J or J.co ~= co then return ms end
  local now = sched.now()
  local k = (J.nsleep or 0) + 1
  J.nsleep = k
  local st = session.state
  if st and st.file then
    local l = J.sleeps
    if not l then l = {}; J.sleeps = l end
    l[k] = now + ms - J.born
  end
  local rec = J.rec
  local e = rec and type(rec.sleeps) == "table" and tonumber(rec.sleeps[k])
  if e then
    local d = J.born + e - now - (real_clock() and late or 0)
    return d > 0 and d or 0
  end
  return ms
end

-- A served exchange leaves when it left in the recording: off ms after its
-- job was launched (the engine's own time before the request: queueing
-- behind other jobs, building the request). Returns that time: its answer
-- is due its recorded latency later, however late this replay woke up.
local function depart(J, rec)
  if J and type(rec.off) == "number" then
    local t = J.born + rec.off
    sleep_until(t)
    return t
  end
  return sched.now()
end
M.depart = depart

return M
