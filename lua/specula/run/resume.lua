-- specula.run.resume: `specula run --out FILE` on a file that already holds
-- records. Every record must come from this run: its provenance (version,
-- agent, input, configuration; specula.provenance) equal to this run's (for
-- --compare, that of its configuration), from this shard, answering one of
-- this run's queries as this input reads it. Anything else is refused (exit
-- status 2) naming FILE:LINE, the first field that differs and what to do,
-- before a query runs or a byte of the file changes.
--
-- Records are matched to the input's queries by (id, query digest), one
-- record per occurrence: an input that repeats an id gets the same records
-- whether or not its run was interrupted. A line cut off by a kill (the
-- last, without its newline) is dropped; a bad line anywhere else is
-- refused with the command that repairs the file (`specula repair FILE`).
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"
local json = require "specula.json"
local records = require "specula.run.records"
local prov = require "specula.provenance"
local output = require "specula.internal.output"
local stderr = output.stderr   -- what goes out is scrubbed
local C = core.C

local type, tostring, ipairs, pairs, format, concat = type, tostring, ipairs, pairs, string.format, table.concat
local find, sub = string.find, string.sub

local M = {}


local function refuse(msg)
  sched.plain_error("specula run: " .. msg, 2)
end

local function shown(v)
  local s = prov.show(v)
  if type(v) == "table" and #s > 40 then s = s:sub(1, 37) .. "..." end
  return s
end

-- What to do about a record of another run, by the part that differs.
local HINT = {
  version = "results of two specula versions are not mixed: give a new --out file, or resume with the specula "
    .. "that wrote it",
  agent = "the agent script or a module beside it is not the one that wrote the file: give a new --out file, or "
    .. "resume with the script that wrote it",
  input = "give the input it was written from, or a new --out file",
  config = "resume with the options that wrote it, or give a new --out file",
}

-- The option of `specula run` behind a plain config field.
local FLAG = { mode = "--mode", k = "--k", m = "--m", spec_launch = "--spec-launch", clock = "--clock",
               seed = "--seed", eps = "--eps", predict = "--predict", match = "--match", trigger = "--trigger",
               ev_cost_ms = "--ev-cost-ms", ev_latency_ms = "--ev-latency-ms", predict_top = "--predict-top",
               max_hops = "--max-hops", spec_timeout = "--spec-timeout", query_timeout = "--query-timeout" }

-- The keys a --compare item sets for itself (specula.run.compare.KEYS).
local ITEM_KEY = { mode = true, k = true, m = true, eps = true, spec_launch = true, predict = true, match = true,
                   trigger = true, ev_cost_ms = true }

local function text_of(v)
  if type(v) ~= "string" then return prov.show(v) end
  local t = v
  if #t > 60 then t = json.utf8_cut(t, 57) .. "..." end
  return '"' .. t .. '"'
end

-- Hand each complete line of the --out file to fn(line, ln), reading it a
-- chunk at a time (the file is never held whole: a resume's memory grows
-- with what it keeps of each record, not with the file). Returns nil when
-- there is no file yet, else true and whether it ends in a line without its
-- newline (cut off by a kill: not handed to fn).
local CHUNK = 4 * 1024 * 1024
local function each_line(path, what, fn)
  local kind = C.sp_host_path_kind(path)
  if kind == 2 then records.write_failed(what, "Is a directory") end
  if kind ~= 1 then return nil end
  local f, err = io.open(path, "rb")
  if not f then records.write_failed(what, tostring(err)) end
  local rest, ln = "", 0
  while true do
    local chunk, rerr = f:read(CHUNK)
    if not chunk then
      if rerr then
        f:close()
        records.write_failed(what, "cannot read it to resume: " .. tostring(rerr))
      end
      break
    end
    local buf = rest ~= "" and (rest .. chunk) or chunk
    local pos = 1
    while true do
      local nl = find(buf, "\n", pos, true)
      if not nl then break end
      ln = ln + 1
      fn(sub(buf, pos, nl - 1), ln)
      pos = nl + 1
    end
    rest = sub(buf, pos)
  end
  f:close()
  return true, rest ~= ""
end

-- Refuse a record of another run (p.run differs from this run's): name the
-- first field that differs, and the flag and value that wrote the file
-- when it is a plain option.
local function refuse_other_run(where, r, mine)
  local field, there, here = prov.diff(r.provenance, mine.t)
  field = field or "provenance.run"
  local part = field:match("^provenance%.([%w_]+)") or "config"
  local hint = HINT[part] or HINT.config
  local key = field:match("^provenance%.config%.([%w_]+)$")
  local flag = key and FLAG[key]
  if flag and (type(there) == "string" or type(there) == "number") then
    if r.config ~= nil and ITEM_KEY[key] then
      hint = format("give configuration '%s' %s=%s in --compare (as the file was written), or a new --out file",
        tostring(r.config), key, tostring(there))
    else
      hint = format("resume with %s %s (as the file was written), or give a new --out file", flag,
        tostring(there))
    end
  end
  refuse(format("%s: the record was written by another run: %s is %s there, %s here; %s", where, field,
    shown(there), shown(here), hint))
end

-- Check one record on its own: whole, with provenance, from this run and
-- this shard (else refused). Returns this run's provenance for it.
-- Whether some line of the file at path is a JSON object with an id (a
-- results file damaged at its start has them below).
local function any_record(path)
  local f = io.open(path, "rb")
  if not f then return false end
  for line in f:lines() do
    if find(line, "^%s*{") then
      local ok, r = pcall(json.decode, line)
      if ok and type(r) == "table" and r.id ~= nil and r.id ~= json.null then
        f:close()
        return true
      end
    end
  end
  f:close()
  return false
end

local function check_record(r, path, ln, opts, rd, first)
  local where = format("%s:%d", path, ln)
  if first and (type(r) ~= "table" or r.id == nil or r.id == json.null) and not any_record(path) then
    -- not one record in it: not a results file (the Lua script, a JSON
    -- array, a binary file given as --out), which repair would empty
    refuse(format("%s: not a results file (its first line is %s, not a record): this run would add its "
      .. "records to it. Give --out a new file (or the results file of this command)", where,
      r == nil and "not JSON" or (type(r) ~= "table" or r[1] ~= nil) and "not a JSON object"
        or "a JSON object without an id"))
  end
  if type(r) ~= "table" or r.id == nil or r.id == json.null then
    refuse(format("%s: not a complete record (%s): the file was damaged in the middle, so it is not "
      .. "resumed. Repair it with `specula repair %s` (it keeps the complete records and drops the rest), "
      .. "then run this command again to run what is missing", where,
      type(r) ~= "table" and "not a JSON object" or "no id", path))
  end
  if r.provenance == nil then
    refuse(format("%s: the record carries no provenance: it was written by an older specula (or another "
      .. "program), so this run cannot tell whether it came from the same agent, input and options. Give a "
      .. "new --out file, or finish this one with the specula that wrote it", where))
  end
  -- whole, or a short one expanded from its run's whole one above it
  local ok, why = rd:expand(r, path, ln)
  if not ok then refuse(format("%s; give a new --out file", why)) end
  local mine, merr = opts.prov_of(r)
  if not mine then refuse(format("%s: %s", where, merr)) end
  if r.provenance.run ~= mine.run then refuse_other_run(where, r, mine) end
  -- the same run: the shard must be this run's
  local rs, shard = r.shard, opts.shard
  if shard then
    if type(rs) ~= "table" or rs.index ~= shard[1] or rs.count ~= shard[2] then
      refuse(format("%s: the record is from %s, this run is shard %d/%d: give each shard its own --out file",
        where, type(rs) == "table" and format("shard %s/%s", tostring(rs.index), tostring(rs.count))
        or "a run without --shard", shard[1], shard[2]))
    end
  elseif rs ~= nil then
    refuse(format("%s: the record is from shard %s/%s of a sharded run, this run is not sharded: give it a new "
      .. "--out file, or resume it with the same --shard", where,
      type(rs) == "table" and tostring(rs.index) or "?", type(rs) == "table" and tostring(rs.count) or "?"))
  end
  return mine
end

-- 1. every record on its own: the entries E in file order, the ids
-- wanted, need[cfg][id "\0" digest] = the entry still to take (its number,
-- or a queue { at, n1, n2, ... } when the file holds the key more than
-- once; failed ones to run again are not queued) and this run's provenance
-- of the input. E keeps one array per field (line, key, configuration, and
-- the rare ones sparse), not a table or the line per record: the records of
-- a complete file are skipped in a few hundred bytes each. Returns E,
-- want_id, need, mine_input and whether the file ends in a cut-off line.
local function read_entries(path, what, opts)
  local E = { n = 0, ln = {}, key = {}, cfg = {}, index = {}, learnt = {}, failed = {}, scrub = {}, rec = {},
              ip = {} }
  local want_id, need = {}, {}
  local mine_input
  local rd = prov.reader()
  local keep = opts.keep
  local found, cut = each_line(path, what, function(line, ln)
    if not find(line, "%S") then return end
    local r = json.decode(line)
    local mine = check_record(r, path, ln, opts, rd, E.n == 0)
    mine_input = mine.t.input
    local p = r.provenance
    local id = tostring(r.id)
    local cfg = r.config or true
    -- "error": null is no error (compare and the report read it so)
    local errored = r.error ~= nil and r.error ~= json.null
    local failed = opts.retry_failed and errored
    local i = E.n + 1
    E.n = i
    local key = id .. "\0" .. tostring(p.query)
    E.ln[i], E.key[i], E.cfg[i] = ln, key, cfg
    E.learnt[i] = not errored and type(r.trajectory) == "table"
    if failed then E.failed[i] = true end
    -- a secret this run knows, absent when the record was written
    if not failed and output.clean(line, "canonical") ~= line then E.scrub[i] = true end
    if r.config ~= nil then E.rec[i] = keep and keep(r) or r end
    -- the input it was written from, when not this run's (said if refused)
    local ip = type(p.input) == "table" and p.input or {}
    if ip.sha256 ~= mine_input.sha256 then E.ip[i] = ip end
    want_id[id] = true
    if not failed then
      local byk = need[cfg]
      if not byk then byk = {} need[cfg] = byk end
      local qu = byk[key]
      if qu == nil then byk[key] = i
      elseif type(qu) == "number" then byk[key] = { at = 1, qu, i }
      else qu[#qu + 1] = i end
    end
  end)
  if cut then stderr("specula: resuming: dropped an incomplete last line of " .. path .. "\n") end
  return found and E, want_id, need, mine_input, cut
end

-- 2. one pass over this run's queries: each takes the first record of
-- its (id, digest) not yet taken, per configuration (into done). Only
-- queries whose id the file holds are digested. Returns what the pass saw:
-- seen.id[id] (true), seen.key[key] (its occurrences).
local function take_records(src, want_id, need, done, E)
  local seen = { id = {}, key = {} }
  local index, rec = E.index, E.rec
  src:each(function(q)
    local id = tostring(q.id)
    if not want_id[id] then return end
    seen.id[id] = true
    local key = id .. "\0" .. prov.query(q)
    seen.key[key] = (seen.key[key] or 0) + 1
    for cfg, byk in pairs(need) do
      local qu = byk[key]
      local i
      if type(qu) == "number" then
        i = qu
        byk[key] = false   -- taken
      elseif qu and qu.at <= #qu then
        i = qu[qu.at]
        qu.at = qu.at + 1
      end
      if i then
        index[i] = q.index
        local d = done[cfg]
        if not d then d = {} done[cfg] = d end
        d[q.index] = rec[i] or true
      end
    end
  end)
  return seen
end

-- The query text and digest of id as this input reads it (its first
-- occurrence), and the record at line ln of path, for a refusal's message.
local function input_query(src, id)
  local text, digest
  src:each(function(q)
    if digest == nil and tostring(q.id) == id then text, digest = q.query or false, prov.query(q) end
  end)
  return text, digest
end
local function record_at(path, what, ln)
  local rec
  each_line(path, what, function(line, n) if n == ln then rec = json.decode(line) end end)
  return type(rec) == "table" and rec or {}
end

-- 3. a record no query took: of another input, an edited one, or one
-- too many for its query. Refused, naming which.
local function refuse_untaken(path, what, E, seen, mine_input, shard, src)
  for i = 1, E.n do
    local key = E.key[i]
    if not E.index[i] and (not E.failed[i] or not seen.key[key]) then
      local id = sub(key, 1, #key - 65)
      local where = format("%s:%d", path, E.ln[i])
      local from = ""
      local ip = E.ip[i]
      if mine_input and ip then
        from = format("; provenance.input.sha256 is %s there (%s), %s here (%s): the file was written from "
          .. "another input", shown(ip.sha256), ip.file ~= json.null and tostring(ip.file) or "--query",
          shown(mine_input.sha256), mine_input.file ~= json.null and tostring(mine_input.file) or "--query")
      end
      if seen.id[id] == nil then
        refuse(format("%s: the record answers query '%s', which is not among this run's queries%s%s; %s", where,
          id, shard and format(" (shard %d/%d)", shard[1], shard[2]) or "", from, HINT.input))
      end
      if not seen.key[key] then
        local here, here_d = input_query(src, id)
        here = here or nil
        local there = record_at(path, what, E.ln[i]).query
        if there == here then
          -- the same text: the digest covers the input line's other fields
          local there_d = key:match("%z(.*)$")
          refuse(format("%s: provenance.query differs: the record answers query '%s' with the same text, %s, but "
            .. "the other fields of its input record differ (provenance.query, the digest of the whole record, is "
            .. "%s there, %s here)%s; %s", where, id, text_of(here), tostring(there_d):sub(1, 12),
            tostring(here_d):sub(1, 12), from, HINT.input))
        end
        refuse(format("%s: provenance.query differs: the record answers query '%s' as %s, this input reads it as "
          .. "%s%s; %s", where, id, text_of(there), text_of(here), from, HINT.input))
      end
      local lines = {}
      for j = 1, E.n do
        if E.key[j] == key and E.cfg[j] == E.cfg[i] and E.index[j] then lines[#lines + 1] = E.ln[j] end
      end
      local k = seen.key[key] or 0
      refuse(format("%s: query '%s' already has %d record%s in this file (line %s) and the input holds it %d "
        .. "time%s: the file holds records of another input or run; give a new --out file", where, id, #lines,
        #lines == 1 and "" or "s", concat(lines, ", "), k, k == 1 and "" or "s"))
    end
  end
end

-- 4. what is kept (failed records to run again dropped; a secret this run
-- knows, say a new --secret-env, that the run which wrote a record did
-- not, scrubbed in the rewrite) and the positions each configuration
-- learnt from. Returns n kept, learnt, dropped, scrubbed, and drop[ln] for
-- the lines the rewrite leaves out.
local function keep_lines(E)
  local n, learnt, dropped, scrubbed, drop = 0, {}, 0, 0, {}
  for i = 1, E.n do
    if E.failed[i] then
      dropped = dropped + 1
      drop[E.ln[i]] = true
    else
      n = n + 1
      if E.scrub[i] then scrubbed = scrubbed + 1 end
      if E.learnt[i] then
        local cfg = E.cfg[i]
        local l = learnt[cfg]
        if not l then l = {} learnt[cfg] = l end
        l[#l + 1] = E.index[i]
      end
    end
  end
  return n, learnt, dropped, scrubbed, drop
end

-- 5. the file written again (a new file renamed over the old one: a crash
-- here loses nothing), line by line as it is read once more: blank lines,
-- a cut-off end and the dropped records left out, secrets scrubbed. A
-- dropped record may be the one that carried its run's whole provenance:
-- the next kept record of that run carries it then (specula.provenance.restream).
local function rewrite_file(path, what, drop)
  local tmp = path .. ".specula-tmp"
  local w = records.open_output(tmp, "wb", "--out file", "canonical")
  local rd, restream = prov.reader(), prov.restream(true)
  local function failed(err)
    w:close()
    os.remove(tmp)
    records.write_failed(what, err)
  end
  each_line(path, what, function(line, ln)
    if not find(line, "%S") then return end
    local r = json.decode(line)
    local _, short = rd:expand(r, path, ln)   -- checked in the first pass
    if drop[ln] then return end
    line = restream(line, r, short)
    local ok, err = w:write(output.clean(line, "canonical"), "\n")
    if not ok then failed(err) end
  end)
  records.write_whole(w, tmp, "--out file", {})
  local okr, rerr = os.rename(tmp, path)
  if not okr then os.remove(tmp) records.write_failed(what, rerr) end
end

--- Check the records of `path` against this run and return what is done.
-- opts: retry_failed; src (specula.run.inputs' source: its queries are read
-- once more, one at a time, to match the records); prov_of(r) -> this
-- run's provenance for the record (M.build's table) or nil and why
-- (--compare: by r.config); shard ({ i, n } or nil); keep(r) -> what a
-- --compare record keeps for its table (default: the record).
-- Returns done, n, dropped, learnt: done[config or true][q.index] = that
-- (a --compare run) or true; n records kept; dropped failed records removed
-- (retry_failed); learnt[config or true] the input positions of the kept
-- records a learning predictor learnt from (no error, a trajectory). Memory
-- grows with the number of records (a few hundred bytes each, and what
-- keep keeps), not with the file's bytes or the input.
function M.read(path, opts)
  local done = {}
  local what = format("--out file '%s'", path)
  local E, want_id, need, mine_input, rewrite = read_entries(path, what, opts)
  if not E then return done, 0, 0 end
  if E.n > 0 then
    local seen = take_records(opts.src, want_id, need, done, E)
    refuse_untaken(path, what, E, seen, mine_input, opts.shard, opts.src)
  end
  local n, learnt, dropped, scrubbed, drop = keep_lines(E)
  E, want_id, need = nil, nil, nil
  if dropped > 0 or scrubbed > 0 then rewrite = true end
  if rewrite then rewrite_file(path, what, drop) end
  if dropped > 0 then
    stderr(format("specula: resuming: removed %d failed record%s from %s to run again\n",
      dropped, dropped == 1 and "" or "s", path))
  end
  if scrubbed > 0 then
    stderr(format("specula: resuming: %d record%s in %s held a secret this run knows: scrubbed\n", scrubbed,
      scrubbed == 1 and "" or "s", path))
  end
  return done, n, dropped, learnt
end

return M
