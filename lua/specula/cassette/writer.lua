-- specula.cassette.writer: the record file. Every line is encoded,
-- scrubbed (its writer is specula.internal.output's) and written whole with a flush, so a kill
-- leaves at most one cut line; a failed write cuts the tape back to its
-- last complete line and stops the recording.
local json = require "specula.json"
local sched = require "specula.internal.sched"
local core = require "specula.internal.core"
local output = require "specula.internal.output"
local session = require "specula.cassette.session"
local tape = require "specula.cassette.tape"
local ffi = core.ffi
local C = core.C

local type, tostring, tonumber, format = type, tostring, tonumber, string.format

local M = {}

pcall(ffi.cdef, "int mkdir(const char *path, unsigned int mode);")
pcall(ffi.cdef, "char *strerror(int errnum);")

local function mkdir(dir)
  if C.sp_host_path_kind(dir) == 2 then return true end
  if ffi.C.mkdir(dir, tonumber("755", 8)) ~= 0 and C.sp_host_path_kind(dir) ~= 2 then
    local why = ffi.C.strerror(ffi.errno())
    return nil, format("cannot create the cassette directory '%s': %s", dir, why ~= nil and ffi.string(why) or "?")
  end
  return true
end

-- Open the cassette for this process. o: { record = DIR, replay = DIR,

-- While recording into dir: the next free cassette-NNNN.jsonl there,
-- created exclusively (shards may record into one directory). Sets
-- st.file, st.path, st.record. Returns true | nil, err.
function M.create(st, dir)
  local ok, err = mkdir(dir)
  if not ok then return nil, err end
  local f, ferr
  for i = 1, 9999 do
    f, ferr = output.open(tape.file_name(dir, i), "wx", "json_message")
    if f then st.path = tape.file_name(dir, i) break end
    if C.sp_host_path_kind(tape.file_name(dir, i)) == 0 then break end
  end
  if not f then return nil, format("cannot create a file in the cassette directory '%s': %s", dir, tostring(ferr)) end
  st.file = f
  st.record = dir
  return true
end

-- The header line of a new record file. Returns true | nil, err, "write"
-- (the file is closed and removed).
function M.header(st)
  local f = st.file
  st.size = 0
  local header = json.encode({ specula_cassette = tape.VERSION, created = os.date("!%Y-%m-%dT%H:%M:%SZ"),
                               clock = sched.clock() })
  local ok, werr = f:line(header)
  if ok then ok, werr = f:flush() end
  if not ok then
    f:close()
    os.remove(st.path)
    return nil, format("cannot write --record file '%s': %s", st.path, tostring(werr)), "write"
  end
  st.size = f.bytes
  return true
end

-- A write to the record file failed (a full disk, a file size limit): the
-- tape is cut back to its last complete line and closed, nothing more is
-- recorded, and the run is told to stop (session.on_fail, set by the runner):
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
  if session.on_fail then session.on_fail(st.failed) end
end

local warned_encode = false
-- extra: the request's credential header values; timing: a job line (not
-- an exchange: not counted as recorded)
local function write(rec, extra, timing)
  local st = session.state
  if not st or not st.file then return end
  -- job lines wait for the next line: their write then falls inside a
  -- job whose time is measured, not after the one they time
  if st.later and not timing then M.flush_timings() end
  local line, err = json.encode(rec)
  if not line then
    if not warned_encode then
      warned_encode = true
      output.stderr("specula: warning: cassette: an exchange could not be recorded (", tostring(err), ")\n")
    end
    return
  end
  -- one write and a flush per exchange: a kill leaves at most one cut
  -- line. The writer scrubs the encoded line once (when that would break
  -- the JSON, a match begun inside an escape, every string on its own).
  local ok, werr = st.file:line(line, extra)
  if ok then ok, werr = st.file:flush() end
  if not ok then return M.write_failed(st, werr) end
  st.size = st.file.bytes
  if not rec.start and not timing then st.recorded = st.recorded + 1 end
end

-- The commit line of a query that ended (see specula.cassette.tape):
-- the committed states' paths, root first, from the final state up
-- through the parents the step jobs noted (note_state), and the action
-- taken at each. A query that failed committed nothing (as its record
-- says); one whose final state is not known (a cycle of plain-value
-- states) gets no paths, and a reader falls back on the calls made from
-- verified states.
function M.write_commit(st, id, err, final, index, text)
  local q = tostring(id)
  local tree = st.trees[q]
  st.trees[q] = nil
  -- (counted as occurrences are: a --compare run commits a query per configuration)
  local ck = "COMMIT\n" .. q
  st.counts[ck] = (st.counts[ck] or 0) + 1
  local rec = { kind = "commit", key = "COMMIT " .. q, n = st.counts[ck],
                at = sched.now() - st.t0, meta = { query = id }, index = tonumber(index),
                text = type(text) == "string" and text or nil }
  local p = final ~= nil and session.finals[final] or nil
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
  local st = session.state
  local later = st and st.later
  if not later then return end
  st.later = nil
  for i = 1, #later do write(later[i], nil, true) end
end

-- The start of an exchange, written before the call is made.
local function write_start(kind, key, n, meta, extra)
  local st = session.state
  if st.file then
    write({ kind = kind, key = key, n = n, start = true, at = sched.now() - st.t0, meta = meta }, extra)
  end
end

M.write, M.write_start = write, write_start

return M
