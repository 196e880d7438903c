-- specula.cassette.jobs: the window jobs through the cassette. The agent's
-- adapter (specula.internal.protocol) is wrapped so that each job is named by what it
-- works on (its kind, hop or call, and the path of its state), its
-- requests know it, and its length goes on tape, or is reproduced from it.
local json = require "specula.json"
local sched = require "specula.internal.sched"
local core = require "specula.internal.core"
local session = require "specula.cassette.session"
local match = require "specula.cassette.match"
local clock = require "specula.cassette.clock"
local C = core.C

local type, tostring, pairs, ipairs, format, concat = type, tostring, pairs, ipairs, string.format, table.concat
local select, unpack, rawget, xpcall, tonumber = select, unpack, rawget, xpcall, tonumber
local co_running = coroutine.running

local M = {}

local jobs, finals, BORN, THREAD = session.jobs, session.finals, session.BORN, session.THREAD
local scopes, take, sleep_until = session.scopes, match.take, clock.sleep_until

local function canon(v)
  local ok, c = pcall(json.canonical, v)
  return ok and c or tostring(v)
end

local function ctx_action(ctx)
  local a = type(ctx) == "table" and ctx.action
  if type(a) ~= "table" then return "?" end
  return tostring(a.tool) .. " " .. canon(a.args)
end
local function ctx_hop(ctx) return type(ctx) == "table" and tonumber(ctx.hop) or nil end

-- Per adapter function: its arguments -> hop, what the job is for (a tool
-- call by its tool and arguments; a step by its hop), known when it starts.
local function on_node(_, ctx) return ctx_hop(ctx), ctx_action(ctx) end
local JOBS = {
  start = function() return 0, "hop 0" end,
  advance = function(_, _, _, _, _, _, hop) return hop, "hop " .. tostring(hop) end,
  call = on_node, warmup = on_node, speculate = on_node, verify = on_node,
  pfcall = function(_, tool, args, hop) return hop, tostring(tool) .. " " .. canon(args) end,
}
local JOB_NAMES = { "start", "advance", "call", "warmup", "speculate", "verify", "pfcall" }

-- The path of a state: a digest of the observations it was built from, in
-- order (the query's initial state is "0"), so a job finds its recording
-- whichever thread of whichever schedule runs it. Table states carry it
-- here (weak keys: it goes with the state); a plain value is its own.
local paths = setmetatable({}, { __mode = "k" })
local crypto
local function digest(s)
  crypto = crypto or require "specula.crypto"
  return crypto.sha256_hex(s):sub(1, 16)
end
-- A value as text that is the same in every run: canonical JSON, or for
-- what JSON cannot hold (a function, a cycle) its data with the rest named
-- by type, never by address.
local function stable(v, depth, seen)
  local t = type(v)
  if t == "string" then return format("%q", v) end
  if t == "number" or t == "boolean" or v == nil then return tostring(v) end
  if t ~= "table" or depth > 32 or seen[v] then return "<" .. t .. ">" end
  seen[v] = true
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = stable(k, depth + 1, seen) .. "=" .. stable(v[k], depth + 1, seen) end
  seen[v] = nil
  return "{" .. concat(parts, ",") .. "}"
end
local function path_text(v)
  local ok, c = pcall(json.canonical, v)
  if ok then return c end
  return stable(v, 0, {})
end

local function state_path(s)
  if type(s) == "table" then return paths[s] or "?" end
  if s == nil then return "?" end
  return "v" .. digest(path_text(s))
end
-- Per adapter function: the path of the state its job works from (advance:
-- the state it makes, from its parent's and the observation it takes).
local function node_path(_, ctx) return state_path(type(ctx) == "table" and ctx.state or nil) end
local PATHS = {
  start = function() return "0" end,
  advance = function(_, state, _, obs, cands, idx)
    if cands ~= nil then
      if idx == 0 then obs = cands else obs = cands[idx] end
    end
    return digest(state_path(state) .. "\n" .. path_text(obs))
  end,
  call = node_path, warmup = node_path, speculate = node_path, verify = node_path,
  pfcall = function() return "predicted" end,
}

local function pack(...) return { n = select("#", ...), ... } end

-- A window job's time is the engine's as much as the exchanges': a job
-- waits in the queue behind others, builds its requests, parses what
-- comes back. The tape holds, per job, its length from launch to result
-- (ms), when its code began (code: after the job's wait in the queue) and
-- when it first waited (first: its first exchange, sleep or wait on a
-- task; none if it never waited). A replay on the real clock starts the
-- job's code when it began, so time the code spends computing (CPU) is
-- spent again in its place, not after the recorded time; on the virtual
-- clock (computing takes no time) when it first waited, or at its end if it
-- never waited (code_start); from there its own
-- sleeps end when they ended (sleeps: when each was to end), its exchanges
-- leave at their recorded offsets from the job's launch and answer their
-- recorded latency later, and its result is held until the recorded length
-- has passed. So the time the agent spends itself is inside the recorded
-- length, never added to it. (A tape without code, written before it was
-- kept, starts the code at first, or at the end for a job that never
-- waited.)
-- When a replayed job's code starts (ms from its launch). On the real clock
-- when it began in the recording: the code computes again, so a
-- computation before its first wait must take its place, not come after
-- it. On the virtual clock computing takes no time: the code starts when it
-- first waited (what it set off just before happens then), and a job that
-- never waited runs at its end (measured closer to the recording, under
-- valgrind's slow code too, than starting it when it began). A tape
-- without code: the same on both clocks.
local function code_start(rec)
  local code = rec.code
  if type(code) == "number" and sched.clock() ~= "virtual" then return code end
  if type(rec.first) == "number" then return rec.first end
  return rec.ms
end

-- While recording: a step job made state (from parent, for an advance)
-- and decided step s there; the query's tree keeps, per state path, its
-- parent's path and the action taken, and a final step its state's path.
local function note_state(st, query, state, advance, parent, s)
  local q = tostring(query)
  local tree = st.trees[q]
  if not tree then tree = {}; st.trees[q] = tree end
  local p = state_path(state)
  local a = type(s) == "table" and type(s.action) == "table" and s.action or nil
  tree[p] = { parent = advance and state_path(parent) or nil, tool = a and a.tool, args = a and a.args }
  if type(s) == "table" and s.final ~= nil then finals[s] = p end
end

local function wrap_job(name, f, how, pathf)
  return function(...)
    local st = session.state
    local t = st and core.ctx ~= nil and C.sp_task_current(core.ctx) or nil
    local id = t ~= nil and C.sp_task_job(t, BORN, THREAD) or 0
    if id == 0 then return f(...) end
    local qmt = ...
    local qctx = type(qmt) == "table" and rawget(qmt, "__index")
    local J = { born = BORN[0], thread = THREAD[0], name = name,
                query = type(qctx) == "table" and qctx.id or nil, co = co_running() }
    -- (a recording keeps paths for its commit lines even while it
    -- replays a tape that has none)
    if st.bypath or st.file then J.path = pathf(...) end
    jobs[id] = J
    local hop, what = how(...)
    local meta = { query = J.query, hop = hop, thread = J.thread, job = name, path = J.path }
    local scope, qscope = scopes(meta, st.bypath)
    local key = "JOB " .. name .. "\n" .. what
    local rec, n = take(st, scope, qscope, key, nil, true)
    if rec and type(rec.ms) == "number" then
      J.rec = rec
      sleep_until(J.born + code_start(rec))
    else
      rec = nil
    end
    J.code = sched.now() - J.born
    local r = pack(xpcall(f, sched.job_error, ...))
    if rec then sleep_until(J.born + rec.ms) end
    -- the state a step job made carries its path to the jobs that work on it
    if J.path and r[1] and (name == "start" or name == "advance") and type(r[2]) == "table" then
      paths[r[2]] = J.path
    end
    if st.file and J.path and r[1] and J.query ~= nil and (name == "start" or name == "advance") then
      note_state(st, J.query, r[2], name == "advance", (select(2, ...)), r[6])
    end
    if st.file then
      -- written with the next line: writing it now would add to the job
      -- after its time was taken
      local later = st.later
      if not later then later = {}; st.later = later end
      later[#later + 1] = { kind = "job", key = key, n = n, at = J.born - st.t0,
                            ms = sched.now() - J.born, code = J.code, first = J.first, failed = not r[1] or nil,
                            meta = meta,
                            sleeps = J.sleeps and json.array(J.sleeps) or nil }
    end
    if not r[1] then error(r[2], 0) end
    return unpack(r, 2, r.n)
  end
end

-- The agent adapter (specula.internal.protocol.adapter) with each window job timed:
-- its launch time and thread known to the requests it makes, its length
-- recorded, or reproduced on replay.
function M.wrap_adapter(A)
  local W = setmetatable({}, { __index = A })
  for _, name in ipairs(JOB_NAMES) do
    if A[name] then W[name] = wrap_job(name, A[name], JOBS[name], PATHS[name]) end
  end
  return W
end

return M
