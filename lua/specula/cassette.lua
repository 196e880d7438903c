-- specula.cassette: record every exchange a run has with the outside world
-- (model calls and HTTP tools through specula.http, MCP requests, speculator
-- calls) once, then serve them again offline with their recorded latency and,
-- for streams, their recorded chunk timing.
--
-- A cassette is a directory of files cassette-NNNN.jsonl (one per recording
-- process, created exclusively, so shards may record into one directory).
-- Each line is one JSON object, written and flushed whole: a header line
-- { "specula_cassette": 3, ... } and then one exchange per line:
--   { kind = "http"|"mcp"|"spec", key, n, at, off, ms, req, res | err, events, meta }
-- key: the canonical request (no headers, secret query parameters removed,
-- JSON bodies in canonical form, then scrubbed); meta: which query, hop,
-- window thread (the tid traces show), job and path (below) asked; n: the
-- occurrence of the key within that (query, path, job), so repeated
-- identical requests get their own answers in order, whatever other queries
-- and threads do meanwhile; off: ms from the window's launch of that job to
-- the request.
-- Each window job that ends adds { kind = "job", key, n, code, first,
-- sleeps, ms, meta }: when its code began and when it first waited (an
-- exchange, a sleep, a task), when each of its sleeps was to end, and its time
-- from launch to result as the window saw it, so a replay reproduces the
-- engine time around the exchanges (queueing, parsing) as well as the
-- exchanges themselves. A process killed mid-write leaves at most one cut
-- last line, which the loader drops with a warning.
--
-- Format 3 names a job by what it works on rather than by the window
-- thread that ran it: meta.path digests the observations its state was
-- built from, so the same job of another schedule (another k, m, mode,
-- policy, verifier or predictor) finds its recording. Format 2 tapes are
-- matched by thread as they were recorded.
--
-- Format 4 adds, when a query ends, { kind = "commit", key, n, meta =
-- { query }, index, text, paths, calls, failed }: the paths of the states
-- its committed trajectory went through (hop 0 first, the final state
-- last) and the action taken at each, so a reader tells the calls the run
-- committed (a call made from a speculative state whose guess was later
-- accepted included) from those of discarded threads; and `obs` lines for
-- predicted calls too (one that served its step's target is committed).
local json = require "specula.json"
local sched = require "specula.internal.sched"
local core = require "specula.internal.core"
local ffi = core.ffi
local C = core.C

local type, tostring, pairs, ipairs, format, concat = type, tostring, pairs, ipairs, string.format, table.concat
local select, unpack, rawget, xpcall, tonumber = select, unpack, rawget, xpcall, tonumber
local co_running = coroutine.running

local M = {}
M.VERSION = 4
-- versions this specula reads (1: no job lines, n counted per request; 2:
-- occurrences counted per window thread; 3: no commit lines)
local READS = { [1] = true, [2] = true, [3] = true, [4] = true }
M.MISS = { error = true, live = true, skip = true }

-- The open cassette of this process (nil: none). Checked on every request.
M.state = nil

pcall(ffi.cdef, "int mkdir(const char *path, unsigned int mode);")
pcall(ffi.cdef, "char *strerror(int errnum);")

local secrets = require "specula.secrets"
local stream = require "specula.internal.stream"
local transport = require "specula.mcp.transport"
-- Everything on tape is scrubbed (specula.secrets): every declared secret
-- in every form, the request's own credential headers (extra), and what
-- looks like a credential.
local function scrub(s, extra) return secrets.scrub_message(s, extra) end


-- The window jobs running now, by job id: { born, thread, name, query,
-- ctx }. Weak values: a cancelled job's coroutine is dropped, and its
-- record with it.
local jobs = setmetatable({}, { __mode = "v" })
-- While recording: each final step (weak: it goes with its window) -> the
-- path of the state it was decided from, for the query's commit line.
local finals = setmetatable({}, { __mode = "k" })
local BORN, THREAD = ffi.new("double[1]"), ffi.new("int[1]")

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

-- Coroutines in one of the cassette's own waits (a replayed exchange, a
-- job held), which are not the job's: see on_wait and on_sleep (set below).
local quiet = setmetatable({}, { __mode = "k" })
local on_wait, on_sleep
-- how late the replay's waits wake, on average (see sleep_until)
local late = 0

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

-- ---- files -------------------------------------------------------------------------------

local function file_name(dir, i) return format("%s/cassette-%04d.jsonl", dir, i) end

-- ---- checking a tape line -------------------------------------------------------------------
-- A tape is read back by code that trusts its types (a status compared
-- with numbers, a latency added to a clock): a line whose fields have the
-- wrong JSON types (an edited tape, another tool's file) is refused when
-- the tape is loaded, naming FILE:LINE and the field, never as an error
-- deep in the replay.

local JNULL = json.null
local function jtype(v)
  if v == nil then return "nil" end
  if v == JNULL then return "null" end
  local t = type(v)
  if t == "table" then
    if getmetatable(v) == json.array_mt or v[1] ~= nil then return "array" end
    return "object"
  end
  return t
end

-- allowed JSON types -> what the message says is expected
local NUM, STR, BOOL, OBJ, ARR = { number = true }, { string = true }, { boolean = true }, { object = true },
  { array = true }
local function opt(t)
  local c = { ["nil"] = true }
  for k in pairs(t) do c[k] = true end
  return c
end
local O_NUM, O_STR, O_BOOL, O_OBJ, O_ARR = opt(NUM), opt(STR), opt(BOOL), opt(OBJ), opt(ARR)
local O_ID = opt({ string = true, number = true })
local WANT = { number = "a number", string = "a string", boolean = "true or false", object = "an object",
               array = "an array" }

local function shown(v)
  local ok, s = pcall(json.encode, v)
  s = ok and s or tostring(v)
  if #s > 40 then s = s:sub(1, 40) .. "..." end
  return s
end

-- nil, or why field `path` (value v) does not have one of the types allowed
local function bad(v, path, allowed)
  local t = jtype(v)
  if allowed[t] then return nil end
  local want = {}
  for _, k in ipairs({ "number", "string", "boolean", "object", "array" }) do
    if allowed[k] then want[#want + 1] = WANT[k] end
  end
  if t == "nil" then return format("field %s is missing (expected %s)", path, concat(want, " or ")) end
  return format("field %s is %s %s, expected %s", path, (t == "array" or t == "object") and "an" or "a", t
    .. " (" .. shown(v) .. ")", concat(want, " or "))
end

-- Bytes as a tape carries them: a string, or { hex = "..." }.
local function bad_bytes(v, path)
  if v == nil or type(v) == "string" then return nil end
  if jtype(v) == "object" and type(v.hex) == "string" and #v.hex % 2 == 0 and not v.hex:find("%X") then
    return nil
  end
  return format("field %s is %s, expected a string or {\"hex\": \"...\"}", path, shown(v))
end

local COMMON = { { "n", NUM }, { "at", O_NUM }, { "off", O_NUM }, { "ms", O_NUM }, { "first", O_NUM }, { "code", O_NUM },
                 { "end_ms", O_NUM }, { "start", O_BOOL }, { "err", O_STR }, { "stream", O_BOOL },
                 { "failed", O_BOOL }, { "closed", O_BOOL }, { "meta", O_OBJ }, { "req", O_OBJ } }
local META = { { "query", O_ID }, { "hop", O_NUM }, { "thread", O_NUM }, { "job", O_STR }, { "task", O_NUM },
               { "speculative", O_BOOL }, { "predicted", O_BOOL }, { "phase", O_STR } }

-- The times a line carries (ms): beyond 1e12 ms (31 years) a time is no
-- recording's (an edited or damaged tape); the clock would cut it to 1e12
-- ms without a word, so the line is refused instead.
local MAX_MS = 1e12
local TIMES = { "at", "off", "ms", "first", "code", "end_ms" }
local function bad_time(t, path)
  if type(t) ~= "number" then return nil end
  if t ~= t or t > MAX_MS or t < -MAX_MS then
    local text = format("%.15g", t)
    if tonumber(text) ~= t then text = format("%.17g", t) end
    return format("field %s is %s ms, not a time a recording holds (at most 1e12 ms): the tape was edited or "
      .. "damaged", path, t ~= t and "NaN" or text)
  end
  return nil
end

-- nil, or why an exchange line cannot be used.
local function check_line(v)
  local e
  for _, f in ipairs(COMMON) do
    e = bad(v[f[1]], f[1], f[2])
    if e then return e end
  end
  for _, k in ipairs(TIMES) do
    e = bad_time(v[k], k)
    if e then return e end
  end
  if v.n < 1 or v.n ~= math.floor(v.n) then return "field n is " .. shown(v.n) .. ", expected a count from 1" end
  if v.meta then
    for _, f in ipairs(META) do
      e = bad(v.meta[f[1]], "meta." .. f[1], f[2])
      if e then return e end
    end
  end
  local kind = v.kind
  if kind == "job" then return bad(v.ms, "ms", NUM) end
  if kind == "commit" then
    e = bad(v.paths, "paths", O_ARR) or bad(v.calls, "calls", O_ARR) or bad(v.index, "index", O_NUM)
      or bad(v.text, "text", O_STR)
    if e then return e end
    for i, p in ipairs(v.paths or {}) do
      e = bad(p, format("paths[%d]", i - 1), STR)
      if e then return e end
    end
    for i, c in ipairs(v.calls or {}) do
      local p = format("calls[%d]", i - 1)
      e = bad(c, p, OBJ) or bad(c.tool, p .. ".tool", STR)
      if e then return e end
    end
    return nil
  end
  if v.start or (kind ~= "http" and kind ~= "mcp" and kind ~= "spec" and kind ~= "obs") then return nil end
  local res = v.res
  if kind == "http" then
    if res == nil and v.err == nil then return "an answered http exchange needs res or err" end
    if res ~= nil then
      e = bad(res, "res", OBJ) or bad(res.status, "res.status", NUM) or bad(res.headers, "res.headers", O_OBJ)
        or bad_bytes(res.body, "res.body") or bad(res.ms, "res.ms", O_NUM) or bad_time(res.ms, "res.ms")
      if e then return e end
      for k, h in pairs(res.headers or {}) do
        if type(h) ~= "string" then return bad(h, "res.headers." .. tostring(k), STR) end
      end
    end
    e = bad(v.events, "events", O_ARR)
    if e then return e end
    for i, ev in ipairs(v.events or {}) do
      local p = format("events[%d]", i - 1)
      e = bad(ev, p, ARR) or bad(ev[1], p .. "[0]", NUM) or bad_time(ev[1], p .. "[0]") or bad_bytes(ev[2], p .. "[1]")
      if e then return e end
    end
  elseif kind == "mcp" then
    if res == nil and v.err == nil then return "an answered mcp exchange needs res or err" end
    return bad(res, "res", O_OBJ)
  elseif kind == "spec" then
    if res == nil and v.err == nil then return "an answered speculator call needs res or err" end
    e = bad(res, "res", O_OBJ)
    if e or res == nil then return e end
    e = bad(res.cands, "res.cands", O_ARR)
    if e then return e end
    for i, c in ipairs(res.cands or {}) do
      local p = format("res.cands[%d]", i - 1)
      e = bad(c, p, OBJ) or bad(c.confidence, p .. ".confidence", O_NUM)
      if e then return e end
    end
  elseif kind == "obs" then
    return bad(res, "res", OBJ)
  end
  return nil
end
M.check_line = check_line

-- All exchange lines of a cassette directory, in file order. Returns
-- records, files, warnings | nil, err. A line that does not parse is an
-- error naming file and line, except the last line of a file that does not
-- end in a newline (a recording cut off mid-write): that one is dropped.
function M.load(dir)
  if type(dir) ~= "string" or dir == "" then return nil, "cassette: expected a directory" end
  local kind = C.sp_host_path_kind(dir)
  if kind == 0 then return nil, format("cassette '%s': no such directory", dir) end
  if kind ~= 2 then return nil, format("cassette '%s': not a directory", dir) end
  local recs, files, warnings = {}, {}, {}
  local i = 1
  while C.sp_host_path_kind(file_name(dir, i)) == 1 do
    local path = file_name(dir, i)
    local f, err = io.open(path, "rb")
    if not f then return nil, "cassette: cannot read " .. tostring(err) end
    local text = f:read("*a")
    f:close()
    local info = { path = path, records = 0, dropped = 0 }
    files[#files + 1] = info
    local ln, pos, n = 0, 1, #text
    while pos <= n do
      local nl = text:find("\n", pos, true)
      local line = text:sub(pos, (nl or (n + 1)) - 1)
      ln = ln + 1
      pos = (nl or n) + 1
      if line ~= "" then
        local v = json.decode(line)
        if type(v) ~= "table" then
          if not nl then
            info.dropped = info.dropped + 1
            warnings[#warnings + 1] = format("%s:%d: dropped a cut-off last record (the recording was interrupted)",
              path, ln)
          else
            return nil, format("cassette %s:%d: not a JSON object", path, ln)
          end
        elseif v.specula_cassette then
          if not READS[v.specula_cassette] then
            return nil, format("cassette %s:%d: format version %s, this specula reads 1 to %d", path, ln,
              tostring(v.specula_cassette), M.VERSION)
          end
          info.header = v
        elseif type(v.kind) ~= "string" or type(v.key) ~= "string" or type(v.n) ~= "number" then
          return nil, format("cassette %s:%d: an exchange needs kind, key and n", path, ln)
        else
          local why = check_line(v)
          if why then return nil, format("cassette %s:%d: %s exchange: %s", path, ln, v.kind, why) end
          v.file, v.line = path, ln
          v.scope, v.qscope = scopes(v.meta)
          recs[#recs + 1] = v
          info.records = info.records + 1
        end
      end
    end
    i = i + 1
  end
  if #files == 0 then return nil, format("cassette '%s': no cassette-NNNN.jsonl files", dir) end
  return recs, files, warnings
end

-- The entries of loaded records: one per (kind, scope, key, n), its answer
-- when the tape has one, else its start line alone (a call cancelled
-- before it answered), in the order they were asked.
function M.entries(recs)
  local out, at = {}, {}
  for _, r in ipairs(recs) do
    local id = r.kind .. "\0" .. r.scope .. "\0" .. r.key .. "\0" .. tostring(r.n)
    local i = at[id]
    if i == nil then
      out[#out + 1] = r
      at[id] = #out
    elseif out[i].start and not r.start then
      out[i] = r
    end
  end
  return out
end

local function mkdir(dir)
  if C.sp_host_path_kind(dir) == 2 then return true end
  if ffi.C.mkdir(dir, tonumber("755", 8)) ~= 0 and C.sp_host_path_kind(dir) ~= 2 then
    local why = ffi.C.strerror(ffi.errno())
    return nil, format("cannot create the cassette directory '%s': %s", dir, why ~= nil and ffi.string(why) or "?")
  end
  return true
end

-- Open the cassette for this process. o: { record = DIR, replay = DIR,
-- miss = "error"|"live"|"skip" }. Returns true | nil, err.
function M.open(o)
  if M.state then return true end
  local miss = o.miss or "error"
  if not M.MISS[miss] then return nil, "--miss must be error, live or skip" end
  local st = { miss = miss, counts = {}, served = 0, missed = 0, missed_committed = 0, live = 0, recorded = 0,
               held = 0, again = 0, missed_cancelled = 0, pending_misses = {}, miss_list = {},
               t0 = sched.now(), bypath = true, trees = {} }
  if o.replay then
    local recs, files, warnings = M.load(o.replay)
    if not recs then return nil, files end
    -- a tape written before format 3 names jobs by window thread only
    st.bypath = false
    for _, f in ipairs(files) do
      if f.header and (tonumber(f.header.specula_cassette) or 0) >= 3 then st.bypath = true end
    end
    for _, w in ipairs(warnings) do secrets.stderr("specula: warning: cassette ", w, "\n") end
    -- exact: scope + key -> { [n] = entry }; loose: query + key -> entries
    -- in the order they were asked; keys: every key on the tape
    local exact, loose, keys = {}, {}, {}
    st.entries = M.entries(recs)
    for _, r in ipairs(st.entries) do
      local e = r.scope .. "\n" .. r.key
      local x = exact[e]
      if not x then x = {}; exact[e] = x end
      x[r.n] = r
      local l = r.qscope .. "\n" .. r.key
      local list = loose[l]
      if not list then list = {}; loose[l] = list end
      list[#list + 1] = r
      keys[r.key] = true
    end
    st.exact, st.loose, st.keys = exact, loose, keys
    st.replay = o.replay
  end
  if o.record then
    local ok, err = mkdir(o.record)
    if not ok then return nil, err end
    local f, ferr
    for i = 1, 9999 do
      f, ferr = io.open(file_name(o.record, i), "wx")
      if f then st.path = file_name(o.record, i) break end
      if C.sp_host_path_kind(file_name(o.record, i)) == 0 then break end
    end
    if not f then return nil, format("cannot create a file in the cassette directory '%s': %s", o.record, tostring(ferr)) end
    st.file = f
    st.record = o.record
    sched.on_wait = on_wait
    st.size = 0
    local header = json.encode({ specula_cassette = M.VERSION, created = os.date("!%Y-%m-%dT%H:%M:%SZ"),
                                 clock = sched.clock() })
    local ok, werr = f:write(header, "\n")
    if ok then ok, werr = f:flush() end
    if not ok then
      f:close()
      os.remove(st.path)
      return nil, format("cannot write --record file '%s': %s", st.path, tostring(werr)), "write"
    end
    st.size = #header + 1
  end
  sched.on_sleep = on_sleep
  late = 0
  M.state = st
  -- every HTTP request goes through the cassette from now on (M.http)
  require("specula.http").set_wrapper(M.http)
  return true
end

-- Close the record file; returns the counters (served, missed, live,
-- recorded) and, when a write failed, st.failed = { what =, err = }.
function M.close()
  local st = M.state
  if not st then return nil end
  if st.file then
    M.flush_timings()
  end
  if st.file then
    local ok, err = st.file:close()
    st.file = nil
    if not ok then M.write_failed(st, err) end
  end
  sched.on_wait, sched.on_sleep = false, false
  require("specula.http").set_wrapper(nil)
  M.state = nil
  return st
end

-- A write to the record file failed (a full disk, a file size limit): the
-- tape is cut back to its last complete line and closed, nothing more is
-- recorded, and the run is told to stop (M.on_fail, set by the runner):
-- a tape that silently lacks exchanges would fail its replay far from here.
pcall(ffi.cdef, "int truncate(const char *path, int64_t length);")
function M.write_failed(st, err)
  if st.failed then return end
  st.failed = { what = format("--record file '%s'", st.path), err = tostring(err) }
  local f = st.file
  st.file = nil
  if f then pcall(f.close, f) end
  if st.size then ffi.C.truncate(st.path, st.size) end
  -- (the run ends with status 1 when it closes the cassette: see failed())
  if M.on_fail then M.on_fail(st.failed) end
end

-- The failed write of the open cassette, if any: { what =, err = }.
function M.failed()
  return M.state and M.state.failed
end

local write_commit   -- (below, after write)

-- A query ended (err: its record's error, if any; final: its final step;
-- index: its place in the input; text: the query). While recording, its
-- commit line goes on tape. A miss made on a thread
-- that was speculative when it asked and whose error ended the query (the
-- thread was promoted: a lossy verifier committed its guess) was on the
-- committed path after all.
function M.query_done(id, err, final, index, text)
  local st = M.state
  if not st then return end
  if st.file then write_commit(st, id, err, final, index, text) end
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
  local st = M.state
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
  return scrub("specula: cassette: " .. concat(parts, "; "))
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

-- ---- writing ------------------------------------------------------------------------------

local utf8_clean = json.utf8_clean
-- specula.crypto's hex (libcrypto); a tape's { hex = } passed bad_bytes
-- when it was read, so unhex does not fail on it
local function hex(s) return require("specula.crypto").hex(s) end
local function unhex(s) return (require("specula.crypto").unhex(s)) end

-- A byte string as JSON can carry it: itself when it is valid UTF-8, else
-- { hex = ... } (a stream chunk may end inside a character). Bytes that
-- go to hex are scrubbed first (the line's scrub then sees only hex).
local function bytes_out(s, extra)
  if s == nil or utf8_clean(s) == s then return s end
  return { hex = hex(secrets.scrub(s, extra)) }
end
local function bytes_in(v)
  if type(v) == "table" and type(v.hex) == "string" then return unhex(v.hex) end
  return v
end

local warned_encode = false
local MESSAGE = { message = true }
-- extra: the request's credential header values; timing: a job line (not
-- an exchange: not counted as recorded)
local function write(rec, extra, timing)
  local st = M.state
  if not st or not st.file then return end
  -- job lines wait for the next line: their write then falls inside a
  -- job whose time is measured, not after the one they time
  if st.later and not timing then M.flush_timings() end
  -- one scrub of the encoded line; when that breaks the JSON (a match
  -- that began inside an escape), every string is scrubbed on its own
  local line, err = json.encode(rec)
  if line then line = secrets.scrub_json(line, extra, MESSAGE) end
  if not line then
    if not warned_encode then
      warned_encode = true
      secrets.stderr("specula: warning: cassette: an exchange could not be recorded (", tostring(err), ")\n")
    end
    return
  end
  -- one write and a flush per exchange: a kill leaves at most one cut line
  local ok, werr = st.file:write(line, "\n")
  if ok then ok, werr = st.file:flush() end
  if not ok then return M.write_failed(st, werr) end
  st.size = st.size + #line + 1
  if not rec.start and not timing then st.recorded = st.recorded + 1 end
end

-- The commit line of a query that ended (see the head of this file):
-- the committed states' paths, root first, from the final state up
-- through the parents the step jobs noted (note_state), and the action
-- taken at each. A query that failed committed nothing (as its record
-- says); one whose final state is not known (a cycle of plain-value
-- states) gets no paths, and a reader falls back on the calls made from
-- verified states.
function write_commit(st, id, err, final, index, text)
  local q = tostring(id)
  local tree = st.trees[q]
  st.trees[q] = nil
  -- (counted as occurrences are: a --compare run commits a query per configuration)
  local ck = "COMMIT\n" .. q
  st.counts[ck] = (st.counts[ck] or 0) + 1
  local rec = { kind = "commit", key = "COMMIT " .. q, n = st.counts[ck],
                at = sched.now() - st.t0, meta = { query = id }, index = tonumber(index),
                text = type(text) == "string" and text or nil }
  local p = final ~= nil and finals[final] or nil
  if err ~= nil then
    rec.failed = true
  elseif p and tree then
    local chain, seen = {}, {}
    while p and not seen[p] and tree[p] do
      seen[p] = true
      chain[#chain + 1] = p
      p = tree[p].parent
    end
    if p == nil then
      local paths, calls = {}, {}
      for i = #chain, 1, -1 do paths[#paths + 1] = chain[i] end
      for i = 1, #paths - 1 do
        local node = tree[paths[i]]
        calls[i] = { tool = tostring(node.tool), args = node.args }
      end
      rec.paths, rec.calls = json.array(paths), json.array(calls)
    end
  end
  write(rec, nil, true)
end

-- Write the job lines waiting for the next line.
function M.flush_timings()
  local st = M.state
  local later = st and st.later
  if not later then return end
  st.later = nil
  for i = 1, #later do write(later[i], nil, true) end
end

-- ---- keys --------------------------------------------------------------------------------

local function secret_param(name)
  name = name:lower()
  return name:find("key", 1, true) or name:find("token", 1, true) or name:find("secret", 1, true)
    or name:find("sig", 1, true) or name:find("auth", 1, true) or name:find("password", 1, true)
end

-- The URL without secret-looking query parameters (api_key=, token=, ...).
function M.clean_url(url)
  local base, q = url:match("^([^?#]*)%?([^#]*)")
  if not base then return (url:gsub("#.*$", "")) end
  local kept = {}
  for part in q:gmatch("[^&]+") do
    local name = part:match("^([^=]*)")
    if not secret_param(name) then kept[#kept + 1] = part end
  end
  if #kept == 0 then return base end
  return base .. "?" .. concat(kept, "&")
end

-- A request body in canonical form: canonical JSON when it is JSON.
local function canon_body(body)
  if body == nil or body == "" then return "" end
  local first = body:match("^%s*(.)")
  if first == "{" or first == "[" then
    local v = json.decode(body)
    if v ~= nil then
      local ok, c = pcall(json.canonical, v)
      if ok then return c end
    end
  end
  return body
end

local function occurrence(st, key)
  local n = (st.counts[key] or 0) + 1
  st.counts[key] = n
  return n
end

-- The next occurrence n of key asked in scope (see scopes) and, when
-- replaying, the entry that answers it:
--  1. that occurrence in the same scope (the same job of the same path, or
--     of the same thread on a format-2 tape), when the recording answered it;
--  2. else an answer to the same request in the same query not served yet,
--     in the order they were asked (the replay's schedule differs from the
--     recording's: another k, m, mode, policy, verifier or predictor);
--  3. else one served already (this schedule asks more often than the
--     recording did; the world answers the same request the same way);
--  4. else the recording's unanswered start of it (its call was cancelled
--     first: a discarded thread, a speculator its target beat), or nil.
-- Job lines (jobs = true) take only step 1 on a format-3 tape: a job's
-- length is that job's, not another path's.
-- Returns entry | nil, n, how many entries of it the query has, and
-- "again" when the entry was served before.
local function take(st, scope, qscope, key, extra, jobs)
  local n = occurrence(st, scope .. "\n" .. key)
  if not st.replay then return nil, n, 0 end
  -- a key that held a secret was stored scrubbed (scrubbing every key up
  -- front would cost the recording run time on the loop)
  if not st.keys[key] then
    local sk = scrub(key, extra)
    if st.keys[sk] then key = sk end
  end
  local x = st.exact[scope .. "\n" .. key]
  local e = x and x[n]
  if e and not e.start then
    local again = e.used and "again" or nil
    e.used = true
    return e, n, 1, again
  end
  if jobs and st.bypath then return nil, n, 0 end
  local list = st.loose[qscope .. "\n" .. key]
  if not list then return e, n, e and 1 or 0 end
  local served
  for i = 1, #list do
    local r = list[i]
    if not r.start then
      if not r.used then
        r.used = true
        return r, n, #list
      end
      served = served or r
    end
  end
  if served then return served, n, #list, "again" end
  return e or list[1], n, #list
end

-- The kind of a key, from its head ("MCP ...", "SPEC ...", "OBS ...",
-- "JOB ...", else an HTTP method and URL).
local function key_kind(key)
  local w = key:match("^(%u+) ")
  if w == "MCP" then return "mcp" elseif w == "SPEC" then return "spec" elseif w == "OBS" then return "obs"
  elseif w == "JOB" then return "job" elseif w == "COMMIT" then return "commit" end
  return "http"
end

-- The first place two decoded JSON values differ: a dotted path ("" for
-- the whole value), or nil when they are equal; and how many leaves differ
-- at the top level (to rank candidates).
local function first_diff(a, b, path)
  if type(a) == "table" and type(b) == "table" then
    local ks, seen = {}, {}
    for k in pairs(a) do if not seen[k] then seen[k] = true; ks[#ks + 1] = k end end
    for k in pairs(b) do if not seen[k] then seen[k] = true; ks[#ks + 1] = k end end
    table.sort(ks, function(x, y) return tostring(x) < tostring(y) end)
    local first, count = nil, 0
    for _, k in ipairs(ks) do
      local p = path == "" and tostring(k) or (path .. "." .. tostring(k))
      local d = first_diff(a[k], b[k], p)
      if d then first = first or d; count = count + 1 end
    end
    return first, count
  end
  if a == b then return nil, 0 end
  return path == "" and "(the whole body)" or path, 1
end

local function brief(v)
  local s = v == nil and "(absent)" or (type(v) == "table" and json.encode(v) or tostring(v))
  if #s > 60 then s = s:sub(1, 57) .. "..." end
  return s
end

-- A request the tape does not hold at all: the nearest one of its kind
-- on the tape (the same head first, then the fewest differing fields) and
-- where it differs, or nil when the tape has none of that kind.
local function nearest(st, key)
  local kind = key_kind(key)
  local head, body = key:match("^([^\n]*)\n?(.*)$")
  local asked = json.decode(body)
  local best, bscore, bpath, bwas, bnow
  for k in pairs(st.keys or {}) do
    if key_kind(k) == kind and k ~= key then
      local h, b = k:match("^([^\n]*)\n?(.*)$")
      -- bodies are decoded only under the same head (a tape's model calls
      -- are long; another head ranks after every same-head one anyway)
      local rec = h == head and json.decode(b) or nil
      local path, count
      if asked ~= nil and rec ~= nil then path, count = first_diff(rec, asked, "")
      elseif b ~= body then path, count = "(the whole body)", 1 end
      local score = (h == head and 0 or 1000) + (count or 0)
      if not best or score < bscore or (score == bscore and k < best) then
        best, bscore, bpath = k, score, path
        if h ~= head then bpath = nil end
        local function at(v)
          if not bpath or bpath == "(the whole body)" then return v end
          for part in bpath:gmatch("[^.]+") do
            if type(v) ~= "table" then return nil end
            v = v[part] ~= nil and v[part] or v[tonumber(part) or part]
          end
          return v
        end
        bwas, bnow = at(rec ~= nil and rec or b), at(asked ~= nil and asked or body)
      end
    end
  end
  if not best then return nil end
  local bh = best:match("^[^\n]*")
  if bh ~= head then return format("the nearest recorded %s request: %s (another request)", kind, bh) end
  if not bpath then return format("the nearest recorded %s request: %s", kind, bh) end
  return format("the nearest recorded %s request: %s, which differs at %s: recorded %s, asked %s", kind, bh,
    bpath, brief(bwas), brief(bnow))
end
M.nearest = nearest

-- What a miss does. Returns "live" to make the real call, or nil, err.
-- cancelled: the recording asked it (held times in this query) and never
-- got an answer.
local function on_miss(st, kind, what, n, held, meta, cancelled, key)
  -- what names the request (a URL, a speculator's arguments): it goes to
  -- errors and to the end-of-run summary on stderr
  what = scrub(what)
  st.missed = st.missed + 1
  -- a miss on a discarded speculative thread does not change the result;
  -- one on the committed path does
  local committed = kind ~= "spec" and not meta.speculative
  if committed then st.missed_committed = st.missed_committed + 1 end
  local detail
  if cancelled then
    st.missed_cancelled = st.missed_cancelled + 1
    detail = format("ECASSETTE: %s: not in the cassette %s (the recording asked it %d time%s in this query and "
      .. "cancelled it before any answer)", what, st.replay, held, held == 1 and "" or "s")
  else
    detail = format("ECASSETTE: %s: not in the cassette %s (occurrence %d of this request; it holds %d)",
      what, st.replay, n, held)
    -- a request the tape never saw: what it did see, and how it differs
    local near = held == 0 and key and nearest(st, key)
    if near then detail = detail .. "; " .. scrub(near) end
  end
  if #st.miss_list < 20 then st.miss_list[#st.miss_list + 1] = what end
  -- a miss on a thread that is speculative now counts as committed if its
  -- error becomes the query's (its thread was promoted): see query_done
  if kind ~= "spec" and meta.query ~= nil and st.miss ~= "live" then
    local q = tostring(meta.query)
    local l = st.pending_misses[q]
    if not l then l = { committed = {} }; st.pending_misses[q] = l end
    if committed then l.committed[detail] = true else l[#l + 1] = detail end
  end
  if st.miss == "live" then
    st.live = st.live + 1
    return "live"
  end
  if st.miss == "skip" then
    if kind == "spec" or meta.speculative then
      return nil, detail .. "; skipped (--miss skip): a failed speculation"
    end
    return nil, detail .. "; --miss skip does not apply to a call on the committed path"
  end
  return nil, detail
end

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

-- Served: count it (again: an answer served before, asked once more).
local function count_served(st, again)
  st.served = st.served + 1
  if again then st.again = st.again + 1 end
end

-- The start of an exchange, written before the call is made.
local function write_start(kind, key, n, meta, extra)
  local st = M.state
  if st.file then
    write({ kind = kind, key = key, n = n, start = true, at = sched.now() - st.t0, meta = meta }, extra)
  end
end

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

-- While recording: when a window job first waits (a sleep, a wait on a
-- task; its exchanges note it themselves), for its job line's `first`.
function on_wait()
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
function on_sleep(ms)
  local co = co_running()
  if co == nil or quiet[co] then return ms end
  local J = current_job()
  if not J or J.co ~= co then return ms end
  local now = sched.now()
  local k = (J.nsleep or 0) + 1
  J.nsleep = k
  local st = M.state
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

-- ---- http ---------------------------------------------------------------------------------

local Replayed = {}
Replayed.__index = function(t, k)
  local v = Replayed[k]
  if v ~= nil then return v end
  return stream[k]   -- chunks(), read_all() work on read()
end

-- Next chunk at its recorded offset from the request's start.
function Replayed:read()
  local evs = self._ev
  local i = self._i + 1
  local e = evs and evs[i]
  if e == nil then
    if self._done then return nil, self.err end
    self._done = true
    if self._rec.end_ms then sleep_until(self._t0 + self._rec.end_ms) end
    if self._rec.err then self.err = self._rec.err return nil, self.err end
    return nil
  end
  self._i = i
  sleep_until(self._t0 + e[1])
  return bytes_in(e[2])
end

function Replayed:close() self._done = true; self._ev = nil end

local function serve_http(st, rec, t0)
  if rec.stream then
    if rec.res == nil then
      sleep_until(t0 + (rec.ms or 0))
      return nil, rec.err
    end
    sleep_until(t0 + (rec.res.ms or 0))
    return setmetatable({ status = rec.res.status, headers = rec.res.headers or {}, _ev = rec.events or {},
                          _i = 0, _t0 = t0, _rec = rec }, Replayed)
  end
  sleep_until(t0 + (rec.ms or 0))
  if rec.err then return nil, rec.err end
  local r = rec.res
  return { status = r.status, headers = r.headers or {}, body = bytes_in(r.body) or "" }
end

local KEEP_HEADER_SKIP = { ["set-cookie"] = true, authorization = true, cookie = true }
local function kept_headers(h)
  local out = {}
  for k, v in pairs(h or {}) do
    if not KEEP_HEADER_SKIP[k] and not k:find("token", 1, true) and not k:find("key", 1, true) then out[k] = v end
  end
  return json.object(out)
end

-- A streamed response that records its chunks as the caller reads them;
-- the exchange is written when the stream ends, fails or is closed.
local Recording = {}
Recording.__index = function(t, k)
  local v = Recording[k]
  if v ~= nil then return v end
  return stream[k]
end

function Recording:read()
  local s, err = self._inner:read()
  if s then
    local ev = self._rec.events
    ev[#ev + 1] = { sched.now() - self._t0, s }
    return s
  end
  self:_finish(err)
  return nil, err
end

function Recording:_finish(err)
  if self._written then return end
  self._written = true
  local rec = self._rec
  rec.end_ms = sched.now() - self._t0
  rec.ms = rec.end_ms
  if err then rec.err = err end
  -- the chunks are scrubbed as one text (a secret cut across two chunks
  -- goes whole), then cut again where they arrived
  local ev = rec.events
  local texts = {}
  for i = 1, #ev do texts[i] = ev[i][2] end
  local clean, idx = secrets.scrub_chunks(texts, self._secrets)
  local out = json.array({})
  for i = 1, #clean do
    out[i] = { ev[idx and idx[i] or i][1], bytes_out(clean[i], self._secrets) }
  end
  rec.events = out
  write(rec, self._secrets)
end

function Recording:close()
  if not self._written then self._rec.closed = true self:_finish(nil) end
  self._inner:close()
end

-- specula.http.request through the cassette: the wrapper specula.http
-- calls while a cassette is open (M.open installs it). live: the request
-- function, which with __live set makes the transfer.
function M.http(opts, method, live)
  local st = M.state
  local url = M.clean_url(opts.url)
  local body = canon_body(opts.body)
  local extra = secrets.header_values(opts.headers)
  local key = method:upper() .. " " .. url .. "\n" .. body
  local J = current_job()
  local meta = meta_now(J)
  local scope, qscope = scopes(meta, st.bypath)
  local rec, n, held, again = take(st, scope, qscope, key, extra)
  if st.replay then
    if rec and rec.kind == "http" and not rec.start then
      count_served(st, again)
      return serve_http(st, rec, depart(J, rec))
    end
    local what = method:upper() .. " " .. scrub(url, extra)
    local go, err = on_miss(st, "http", what, n, held, meta, rec ~= nil, key)
    if not go then return nil, err end
  end
  local lopts = setmetatable({}, { __index = opts })
  lopts.__live = true
  write_start("http", key, n, meta, extra)
  local t0 = sched.now()
  if J and not J.first then J.first = t0 - J.born end
  local r, err = live(lopts)
  if not st.file then return r, err end
  rec = { kind = "http", key = key, n = n, at = t0 - st.t0, off = J and t0 - J.born, meta = meta,
          req = { method = method:upper(), url = url, body = body } }
  if opts.stream then
    rec.stream = true
    if r == nil then
      rec.ms, rec.err = sched.now() - t0, err
      write(rec, extra)
      return r, err
    end
    rec.res = { status = r.status, headers = kept_headers(r.headers), ms = sched.now() - t0 }
    rec.events = json.array({})
    return setmetatable({ status = r.status, headers = r.headers, _inner = r, _rec = rec, _t0 = t0,
                          _secrets = extra }, Recording), nil
  end
  rec.ms = sched.now() - t0
  if r == nil then rec.err = err
  else rec.res = { status = r.status, headers = kept_headers(r.headers), body = bytes_out(r.body, extra) } end
  write(rec, extra)
  return r, err
end

-- ---- mcp ----------------------------------------------------------------------------------

local function strip_meta(params)
  if type(params) ~= "table" or params._meta == nil then return params end
  local c = {}
  for k, v in pairs(params) do if k ~= "_meta" then c[k] = v end end
  return setmetatable(c, getmetatable(params))
end

-- Whether an MCP client may skip starting its server: every request is to
-- be served from the cassette (no live fallback).
function M.offline()
  local st = M.state
  return st ~= nil and st.replay ~= nil and st.miss ~= "live"
end

-- The MCP transport wrapper (the interface: specula.mcp.transport), which
-- specula.mcp puts around every live transport: while a cassette is open
-- it takes each whole round trip (a request to the answer the session
-- returns, an error included), records it around the live one or serves it
-- from the tape; with none open it passes through. Everything else is the
-- live transport's. offline: the replay needs no server (no live fallback),
-- so the session starts none.
local McpTape = {}

function M.mcp_transport(inner, server, headers)
  return transport.wrap(McpTape, { inner = inner, server = server, headers = headers,
                                   offline = M.offline() or nil })
end

function McpTape:roundtrip(x, go)
  local st = M.state
  if not st then return go() end
  local method, params = x.method, x.params
  local extra = secrets.header_values(self.headers)
  local kp = strip_meta(params) or json.object()
  if method == "initialize" and type(kp) == "table" then
    -- the client's own name and version are not part of what was asked
    kp = { protocolVersion = kp.protocolVersion, capabilities = kp.capabilities }
  end
  local ok, pc = pcall(json.canonical, kp)
  if not ok then pc = tostring(params) end
  local key = "MCP " .. tostring(self.server) .. " " .. method .. "\n" .. pc
  local J = current_job()
  local meta = meta_now(J)
  local scope, qscope = scopes(meta, st.bypath)
  local rec, n, held, again = take(st, scope, qscope, key, extra)
  local what = format("MCP %s %s", tostring(self.server), tostring(x.what or method))
  if st.replay then
    if rec and rec.kind == "mcp" and not rec.start then
      count_served(st, again)
      sleep_until(depart(J, rec) + (rec.ms or 0))
      if rec.err then return nil, rec.err end
      return rec.res
    end
    if method == "server/discover" and rec == nil and held == 0 then
      -- a tape from a session (before 2026-07-28, or a session server):
      -- answered as such a server answers the probe, so the client starts
      -- the session the tape holds; no miss
      return nil, what .. ": not in the cassette (it holds a session's initialize)"
    end
    local go_live, err = on_miss(st, "mcp", what, n, held, meta, rec ~= nil, key)
    if not go_live then return nil, err end
    if self.offline then return nil, what .. ": the server was not started (replaying offline)" end
  end
  write_start("mcp", key, n, meta, extra)
  local t0 = sched.now()
  if J and not J.first then J.first = t0 - J.born end
  local r, err = go()
  if st.file then
    write({ kind = "mcp", key = key, n = n, at = t0 - st.t0, off = J and t0 - J.born, ms = sched.now() - t0, meta = meta,
            req = { server = self.server, method = method, params = strip_meta(params) },
            res = r, err = (r == nil) and err or nil }, extra)
  end
  return r, err
end

-- ---- observations ------------------------------------------------------------------------

-- A target call's observation, recorded (never served: the call's own
-- requests are) so the verifier lab can pair it with the speculators'
-- candidates. Errors propagate untouched and are not recorded.
local function observed(st, tool, args, t0, meta, J, ...)
  if st.file then
    local ok, ac = pcall(json.canonical, args)
    write({ kind = "obs", key = "OBS " .. tostring(tool) .. "\n" .. (ok and ac or tostring(args)), n = 1,
            at = t0 - st.t0, off = J and t0 - J.born, ms = sched.now() - t0, meta = meta,
            req = { tool = tool, args = args },
            res = { value = (...) == nil and json.null or (...) } })
  end
  return ...
end

function M.observe(tool, args, call, ctx)
  local st = M.state
  if not st.file then return call(args, ctx) end
  local J = current_job()
  return observed(st, tool, args, sched.now(), meta_now(J), J, call(args, ctx))
end

-- ---- speculators --------------------------------------------------------------------------

-- A speculator S for tool through the cassette. is_cands(r): r is a
-- candidate list; cands(list): make one.
function M.speculator(S, tool, is_cands, cands)
  return function(args, ctx)
    local st = M.state
    local ok, ac = pcall(json.canonical, args)
    if not ok then ac = tostring(args) end
    local key = "SPEC " .. tostring(tool) .. "\n" .. ac
    local J = current_job()
    local meta = meta_now(J)
    local scope, qscope = scopes(meta, st.bypath)
    local rec, n, held, again = take(st, scope, qscope, key)
    if st.replay then
      if rec and rec.kind == "spec" and rec.start and st.miss ~= "live" then
        st.held = st.held + 1
        never()
        error("speculator cancelled in the recording", 0)
      end
      if rec and rec.kind == "spec" and not rec.start then
        count_served(st, again)
        sleep_until(depart(J, rec) + (rec.ms or 0))
        if rec.err then error(rec.err, 0) end
        local r = rec.res or {}
        if r.cands then
          local l = {}
          for i, c in ipairs(r.cands) do l[i] = { value = c.value, confidence = c.confidence } end
          return cands(l)
        end
        if r.value == json.null then return nil end
        return r.value
      end
      local go, err = on_miss(st, "spec", "speculator of '" .. tostring(tool) .. "' " .. ac, n, held, meta,
        rec ~= nil, key)
      if not go then error(err, 0) end
    end
    write_start("spec", key, n, meta)
    local t0 = sched.now()
    if J and not J.first then J.first = t0 - J.born end
    local res = { pcall(S, args, ctx) }
    if st.file then
      rec = { kind = "spec", key = key, n = n, at = t0 - st.t0, off = J and t0 - J.born, ms = sched.now() - t0,
              meta = meta, req = { tool = tool, args = args } }
      if not res[1] then rec.err = tostring(res[2])
      elseif is_cands(res[2]) then
        local l = {}
        for i, c in ipairs(res[2]) do l[i] = { value = c.value, confidence = c.confidence } end
        rec.res = { cands = json.array(l) }
      else
        rec.res = { value = res[2] == nil and json.null or res[2] }
      end
      write(rec)
    end
    if not res[1] then error(res[2], 0) end
    return res[2]
  end
end

-- ---- window jobs -------------------------------------------------------------------------

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
    local st = M.state
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

-- The agent adapter (specula.agent.adapter) with each window job timed:
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
