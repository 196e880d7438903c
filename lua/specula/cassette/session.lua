-- specula.cassette.session: the open cassette of this process and the
-- window jobs running now: which query, hop, thread, job and path a
-- request is made for (its meta), and where its occurrences are counted
-- (its scope). Every part of the cassette reads the open cassette here.
local core = require "specula.internal.core"
local ffi = core.ffi
local C = core.C

local type, tostring, tonumber = type, tostring, tonumber
local co_running = coroutine.running

local M = {}

-- The open cassette of this process (nil: none). Checked on every request.
M.state = nil
-- Told when a write to the record file failed (set by the runner: see
-- specula.cassette.writer's write_failed).
M.on_fail = nil

-- The window jobs running now, by job id: { born, thread, name, query,
-- ctx }. Weak values: a cancelled job's coroutine is dropped, and its
-- record with it.
local jobs = setmetatable({}, { __mode = "v" })
-- While recording: each final step (weak: it goes with its window) -> the
-- path of the state it was decided from, for the query's commit line.
local finals = setmetatable({}, { __mode = "k" })
M.finals = finals
local BORN, THREAD = ffi.new("double[1]"), ffi.new("int[1]")
M.BORN, M.THREAD, M.jobs = BORN, THREAD, jobs

-- The window job the running task works for (the job itself or a task its
-- code spawned), or nil.
local function current_job()
  if core.ctx == nil then return nil end
  local t = C.sp_task_current(core.ctx)
  if t == nil then return nil end
  local id = C.sp_task_job(t, BORN, THREAD)
  if id == 0 then return nil end
  local J = jobs[id]
  -- ids are reused: a task spawned by a job that has ended is no longer its
  if J and J.born == BORN[0] then return J end
  return nil
end
M.current_job = current_job

-- The query context of the job running in each coroutine (weak: worker
-- coroutines come and go), so a request knows which query and hop asked;
-- also kept on the job, for the tasks its code spawns.
local bound = setmetatable({}, { __mode = "k" })
function M.bind(ctx)
  local co = co_running()
  if co then bound[co] = ctx end
  local J = current_job()
  if J then J.ctx = ctx end
end

local function meta_now(J)
  local m = {}
  local co = co_running()
  local ctx = co and bound[co] or (J and J.ctx)
  if ctx then
    local id = ctx.id
    if id ~= nil then m.query = id end
    if type(ctx.hop) == "number" then m.hop = ctx.hop end
    m.speculative = ctx.speculative and true or false
    -- a request made while the step decides (a model call) or by the tool call
    m.phase = ctx.action and "tool" or "step"
    if ctx.predicted then m.predicted = true end
  end
  if J then
    if m.query == nil then m.query = J.query end
    m.thread = J.thread
    m.job = J.name
    m.path = J.path
  end
  if core.ctx ~= nil then
    local t = C.sp_task_current(core.ctx)
    if t ~= nil then m.task = tonumber(C.sp_task_id(t)) end
  end
  return m
end

-- Where an occurrence is counted: per (query, job) when a query asked,
-- else per run; a job is named by its path (format 3: what its state was
-- built from, the same in any schedule) or, on a format-2 tape or with
-- bypath false, by its window thread. qscope: the query alone, where a
-- request finds the query's other answers to it.
local function scopes(meta, bypath)
  local q = meta and meta.query
  if q == nil then return "", "" end
  local qs = "q=" .. tostring(q)
  if meta.path ~= nil and bypath ~= false then
    return qs .. " p=" .. tostring(meta.path) .. " j=" .. tostring(meta.job or ""), qs
  end
  return qs .. " t=" .. tostring(meta.thread or "") .. " j=" .. tostring(meta.job or ""), qs
end
M.meta_now, M.scopes = meta_now, scopes

return M
