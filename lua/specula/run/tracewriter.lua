-- specula.run.tracewriter: the --trace file of `specula run`, Chrome trace-event
-- JSON (Perfetto, chrome://tracing): the events of each window as it
-- finishes, and at the end one file with the queries' stage times that
-- `specula report --trace` draws.
local core = require "specula.internal.core"
local ffi, C = core.ffi, core.C
local json = require "specula.json"
local records = require "specula.run.records"
local round = require("specula.run.aggregate").round
local D = require("specula.internal.domains").DEFAULTS

local tostring, ipairs = tostring, ipairs

local utf8_clean = json.utf8_clean

local M = {}

local tev = ffi.new("sp_tev")

-- Chrome trace events of one window, appended to a list of JSON strings.
-- One process per query ("query ID", or "query ID (CONFIG)" when a
-- --compare run traces several configurations).
function M.events(w, pid, q, out, config)
  local t0 = C.sp_window_t0_us(w)
  local pname = "query " .. tostring(q.id)
  if config then pname = pname .. " (" .. config .. ")" end
  out[#out + 1] = json.encode({ name = "process_name", ph = "M", pid = pid, tid = 0, args = { name = pname } })
  local seen = {}
  for i = 0, C.sp_window_ntev(w) - 1 do
    C.sp_window_tev(w, i, tev)
    local name = ffi.string(tev.name)
    local tid = tev.tid
    if not seen[tid] then
      seen[tid] = true
      out[#out + 1] = json.encode({ name = "thread_name", ph = "M", pid = pid, tid = tid,
                                    args = { name = "T" .. tid } })
      out[#out + 1] = json.encode({ name = "thread_sort_index", ph = "M", pid = pid, tid = tid,
                                    args = { sort_index = tid } })
    end
    local e = { name = name, cat = name, ph = string.char(tev.ph), pid = pid, tid = tid,
                ts = round(t0 + tev.ts_us, 3), args = { hop = tev.hop } }
    if e.ph == "X" then e.dur = round(tev.dur_us, 3) else e.s = "t" end
    local detail = utf8_clean(ffi.string(tev.detail))
    if detail ~= "" then e.args.detail = detail end
    if name == "verify" then e.args.accepted = tev.flag == 1 end
    if name == "target" then e.args.speculative = tev.flag == 1 end
    out[#out + 1] = json.encode(e)
  end
end

-- A record's entry in the file's "queries" list (its stage times, which
-- `specula report --trace` draws), as JSON text; nil without stage times.
-- config: the --compare configuration it ran under.
function M.entry(r, o, config)
  if type(r.stages) ~= "table" or getmetatable(r.stages) == json.raw_mt or type(r.stats) ~= "table" then
    return nil
  end
  return json.encode({ id = r.id, config = config, mode = o.mode,
    k = o.k < 0 and "inf" or (o.k == 0 and "auto" or o.k), m = o.m or D.m, spec_launch = r.stats.spec_launch,
    hops = r.stages.hops, final_seg = r.stages.final_seg, init = r.stages.init,
    wall_ms = r.stats.wall_ms, standard_ms = r.stats.standard_ms,
    -- a failed query's stage times stop where it failed: replay leaves it out
    failed = r.error ~= nil or nil })
end

-- Write the trace file f (a "json" writer opened at `path` before the run,
-- so a path that cannot be written fails early): the events gathered in `events`, the
-- queries' entries (M.entry) and the provenance.run digests of the runs it
-- holds (one per --compare configuration), which `specula report --trace`
-- checks against the records it is given.
function M.write(f, path, events, entries, runs)
  -- each event and entry is one JSON object, scrubbed on its own by the
  -- file's writer (f:clean), so the file stays valid JSON
  local ev, en = {}, {}
  for i = 1, #events do ev[i] = f:clean(events[i]) end
  for i = 1, #entries do en[i] = f:clean(entries[i]) end
  events, entries = ev, en
  local parts = { '{"displayTimeUnit":"ms","traceEvents":[\n', table.concat(events, ",\n"),
                  '\n],"specula":{"version":1,"runs":', json.encode(json.array(runs or {})), ',"queries":[\n',
                  table.concat(entries, ",\n"), "\n]}}\n" }
  records.write_whole(f, path, "--trace file", parts)
end

return M
