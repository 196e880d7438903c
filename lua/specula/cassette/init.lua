-- specula.cassette: record every exchange a run has with the outside world
-- (model calls and HTTP tools through specula.http, MCP requests, speculator
-- calls) once, then serve them again offline with their recorded latency and,
-- for streams, their recorded chunk timing (docs/cassettes.md).
--
-- This is the package's public surface: opening and closing the cassette
-- of this process, what a run asks of it, and the wrappers it offers to
-- the seams of the layers it serves. The cassette calls none of them: the
-- run plugs it in (specula.run.cassette: M.plug) and the wrappers are
-- installed while a cassette is open. The parts:
--   tape     the format (file names, lines, versions), loading a tape
--   check    the check of one line's fields and types
--   session  the open cassette, the window jobs running now, a request's meta
--   writer   the record file: scrubbed lines, job lines, commit lines
--   match    request keys, and which recorded entry answers a request
--   nearest  the nearest recorded request, for a miss's message
--   miss     what a miss does (--miss)
--   clock    recorded waits and sleeps, replayed at their recorded times
--   http     the wrapper of specula.http's transfers
--   mcp      the MCP transport wrapper
--   calls    observations and speculator calls
--   jobs     the window jobs: named by path, timed, replayed to length
local sched = require "specula.internal.sched"
local output = require "specula.internal.output"
local tape = require "specula.cassette.tape"
local check = require "specula.cassette.check"
local session = require "specula.cassette.session"
local writer = require "specula.cassette.writer"
local match = require "specula.cassette.match"
local nearest = require "specula.cassette.nearest"
local clock = require "specula.cassette.clock"
local http = require "specula.cassette.http"
local mcp = require "specula.cassette.mcp"
local calls = require "specula.cassette.calls"
local jobs = require "specula.cassette.jobs"

local type, tostring, ipairs, format, concat, tonumber = type, tostring, ipairs, string.format, table.concat, tonumber

local M = {}
M.VERSION = tape.VERSION
M.MISS = { error = true, live = true, skip = true }

-- M.state (the open cassette of this process, nil: none) and M.on_fail
-- (told when a write to the record file failed) live in
-- specula.cassette.session, where every part reads them.
local SHARED = { state = true, on_fail = true }
setmetatable(M, {
  __index = function(_, k) if SHARED[k] then return session[k] end end,
  __newindex = function(t, k, v)
    if SHARED[k] then session[k] = v else rawset(t, k, v) end
  end,
})

-- Reading a tape (the labs, `specula cassette`).
M.check_line, M.load, M.entries = check.check_line, tape.load, tape.entries
M.clean_url, M.nearest = match.clean_url, nearest.nearest
M.NEVER_MS = clock.NEVER_MS
M.bind, M.flush_timings, M.write_failed = session.bind, writer.flush_timings, writer.write_failed

-- The wrappers, for the seams they fit:
-- specula.http.set_wrapper: every HTTP transfer while a cassette is open
M.http = http.http
-- specula.mcp.set_wrapper: every MCP client's transport (passes through
-- while no cassette is open); offline: a replay that needs no server
M.mcp_transport, M.offline = mcp.mcp_transport, mcp.offline
-- specula.internal.protocol.set_wrapper: the adapter's window jobs and the agent's calls
M.observe, M.speculator, M.wrap_adapter = calls.observe, calls.speculator, jobs.wrap_adapter
M.agent_wrapper = { bind = session.bind, observe = calls.observe, speculator = calls.speculator,
                    adapter = jobs.wrap_adapter }

-- The seams the cassette is plugged into while it is open: set(impl) when
-- it opens (at once when it is open already), set(nil) when it closes.
-- The run plugs them (specula.run.cassette), so the cassette needs none
-- of the modules it serves. Plugging the same set again replaces its impl.
local sockets = {}
function M.plug(set, impl)
  if type(set) ~= "function" then error("cassette.plug: expected a setter function", 2) end
  local s
  for _, x in ipairs(sockets) do if x.set == set then s = x end end
  if not s then s = { set = set }; sockets[#sockets + 1] = s end
  s.impl = impl
  if session.state then set(impl) end
end

-- Open the cassette for this process. o: { record = DIR, replay = DIR,
-- miss = "error"|"live"|"skip" }. Returns true | nil, err.
function M.open(o)
  if session.state then return true end
  local miss = o.miss or "error"
  if not M.MISS[miss] then return nil, "--miss must be error, live or skip" end
  local st = { miss = miss, counts = {}, served = 0, missed = 0, missed_committed = 0, live = 0, recorded = 0,
               held = 0, again = 0, missed_cancelled = 0, pending_misses = {}, miss_list = {},
               t0 = sched.now(), bypath = true, trees = {} }
  if o.replay then
    local recs, files, warnings = tape.load(o.replay)
    if not recs then return nil, files end
    -- a tape written before format 3 names jobs by window thread only
    st.bypath = false
    for _, f in ipairs(files) do
      if f.header and (tonumber(f.header.specula_cassette) or 0) >= 3 then st.bypath = true end
    end
    for _, w in ipairs(warnings) do output.stderr("specula: warning: cassette ", w, "\n") end
    match.index(st, tape.entries(recs))
    st.replay = o.replay
  end
  if o.record then
    local ok, err = writer.create(st, o.record)
    if not ok then return nil, err end
    sched.on_wait = clock.on_wait
    local okh, herr, why = writer.header(st)
    if not okh then return nil, herr, why end
  end
  sched.on_sleep = clock.on_sleep
  clock.reset()
  session.state = st
  -- every HTTP request, MCP round trip and window job goes through the
  -- cassette from now on (the seams plugged: M.plug)
  for _, s in ipairs(sockets) do s.set(s.impl) end
  return true
end

-- Close the record file; returns the counters (served, missed, live,
-- recorded) and, when a write failed, st.failed = { what =, err = }.
function M.close()
  local st = session.state
  if not st then return nil end
  if st.file then
    writer.flush_timings()
  end
  if st.file then
    local ok, err = st.file:close()
    st.file = nil
    if not ok then writer.write_failed(st, err) end
  end
  sched.on_wait, sched.on_sleep = false, false
  for _, s in ipairs(sockets) do s.set(nil) end
  session.state = nil
  return st
end

-- The failed write of the open cassette, if any: { what =, err = }.
function M.failed()
  return session.state and session.state.failed
end

-- A query ended (err: its record's error, if any; final: its final step;
-- index: its place in the input; text: the query). While recording, its
-- commit line goes on tape. A miss made on a thread
-- that was speculative when it asked and whose error ended the query (the
-- thread was promoted: a lossy verifier committed its guess) was on the
-- committed path after all.
function M.query_done(id, err, final, index, text)
  local st = session.state
  if not st then return end
  if st.file then writer.write_commit(st, id, err, final, index, text) end
  if not st.replay then return end
  local q = tostring(id)
  local l = st.pending_misses[q]
  st.pending_misses[q] = nil
  if not l or type(err) ~= "string" then return end
  for _, d in ipairs(l) do
    -- (a failed call redone once its thread is verified was counted then)
    if not l.committed[d] and err:find(d, 1, true) then
      st.missed_committed = st.missed_committed + 1
      return
    end
  end
end

-- Start the occurrence counts over, so the next run of the same queries
-- (the next --compare config) is served the recording from its start. Only
-- for a pure replay: while recording, occurrences must stay distinct.
function M.rewind()
  local st = session.state
  if st and st.replay and not st.record then
    st.counts = {}
    st.pending_misses = {}
    for _, r in ipairs(st.entries) do r.used = nil end
  end
end

-- One line for the end of a run: what the cassette served and missed.
function M.summary(st)
  local parts = {}
  if st.replay then
    parts[#parts + 1] = format("%d served from %s%s, %d not in it (%d on the committed path%s; --miss %s)",
      st.served, st.replay, st.again > 0 and format(" (%d of them an answer served before)", st.again) or "",
      st.missed, st.missed_committed,
      st.missed_cancelled > 0 and format("; %d cancelled in the recording before an answer", st.missed_cancelled)
        or "", st.miss)
    if st.held > 0 then
      parts[#parts + 1] = format("%d speculator call%s the recording cancelled left unanswered until moot", st.held,
        st.held == 1 and "" or "s")
    end
    if st.live > 0 then parts[#parts + 1] = format("%d made live", st.live) end
  end
  if st.record then parts[#parts + 1] = format("%d recorded to %s", st.recorded, st.path) end
  if #st.miss_list > 0 then
    parts[#parts + 1] = "not in it: " .. concat(st.miss_list, ", ", 1, math.min(#st.miss_list, 5))
      .. (#st.miss_list > 5 and ", ..." or "")
  end
  return match.scrub("specula: cassette: " .. concat(parts, "; "))
end

-- Pre-scan of a script's arguments (the script's main chunk may connect
-- to an MCP server before the runner parses its options): opens the
-- cassette if --record or --replay-io is among them. Returns true | nil, err.
function M.from_args(args)
  local o = {}
  local FLAG = { ["--record"] = "record", ["--replay-io"] = "replay", ["--miss"] = "miss", ["--clock"] = "clock" }
  local i = 1
  while i <= #args do
    local a = tostring(args[i])
    local name, v = a:match("^(%-%-%a[%w%-]*)=(.*)$")
    if not name then
      name = a
      if FLAG[name] then v = args[i + 1]; i = i + 1 end
    end
    if FLAG[name] then
      if v == nil then return nil, name .. " needs a value" end
      o[FLAG[name]] = v
    end
    i = i + 1
  end
  o.virtual = o.clock == "virtual"
  if o.miss and not M.MISS[o.miss] then return nil, "--miss must be error, live or skip" end
  if not o.record and not o.replay then
    if o.miss then return nil, "--miss needs --replay-io DIR" end
    return true
  end
  if o.virtual and o.miss == "live" then return nil, "--miss live makes real calls: it needs the real clock" end
  if o.virtual and o.record and not o.replay then
    return nil, "--record needs real calls to record: run it on the real clock"
  end
  return M.open(o)
end

return M
