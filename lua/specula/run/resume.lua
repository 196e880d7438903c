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
               max_hops = "--max-hops", spec_timeout = "--spec-timeout" }

-- The keys a --compare item sets for itself (specula.run.compare.KEYS).
local ITEM_KEY = { mode = true, k = true, m = true, eps = true, spec_launch = true, predict = true, match = true,
                   trigger = true, ev_cost_ms = true }

local function text_of(v)
  if type(v) ~= "string" then return prov.show(v) end
  local t = v
  if #t > 60 then t = json.utf8_cut(t, 57) .. "..." end
  return '"' .. t .. '"'
end

-- The text of the --out file to resume (nil when there is none yet), cut
-- after its last complete line, and whether it was cut (the file is then
-- rewritten).
local function read_text(path, what)
  local kind = C.sp_host_path_kind(path)
  if kind == 2 then records.write_failed(what, "Is a directory") end
  if kind ~= 1 then return nil end
  local f, err = io.open(path, "rb")
  if not f then records.write_failed(what, tostring(err)) end
  local text, rerr = f:read("*a")
  f:close()
  if not text then records.write_failed(what, "cannot read it to resume: " .. tostring(rerr)) end
  local rewrite = false
  if #text > 0 and text:sub(-1) ~= "\n" then
    text = text:match("^(.*\n)") or ""
    rewrite = true
    stderr("specula: resuming: dropped an incomplete last line of " .. path .. "\n")
  end
  return text, rewrite
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
local function check_record(r, path, ln, opts, rd)
  local where = format("%s:%d", path, ln)
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

-- 1. every record on its own: the entries in file order, the ids wanted,
-- need[cfg][id "\0" digest] = the queue of entries still to take (failed
-- ones to run again are not queued) and this run's provenance of the input.
local function read_entries(text, path, opts)
  local entries, want_id, need = {}, {}, {}
  local mine_input
  local ln = 0
  local rd = prov.reader()
  for line in text:gmatch("([^\n]*)\n") do
    ln = ln + 1
    if line:find("%S") then
      local r = json.decode(line)
      local short = type(r) == "table" and type(r.provenance) == "table" and r.provenance.version == nil
      local mine = check_record(r, path, ln, opts, rd)
      mine_input = mine.t.input
      local p = r.provenance
      local id = tostring(r.id)
      local cfg = r.config or true
      local ip = type(p.input) == "table" and p.input or {}
      local e = { ln = ln, line = line, short = short, prov = p, id = id, key = id .. "\0" .. tostring(p.query), cfg = cfg,
                  query = r.query, input = ip.sha256, input_file = ip.file,
                  rec = r.config ~= nil and r or nil, failed = opts.retry_failed and r.error ~= nil,
                  learnt = r.error == nil and type(r.trajectory) == "table" }
      entries[#entries + 1] = e
      want_id[id] = true
      if not e.failed then
        local byk = need[cfg]
        if not byk then byk = {} need[cfg] = byk end
        local qu = byk[e.key]
        if not qu then qu = { at = 1 } byk[e.key] = qu end
        qu[#qu + 1] = e
      end
    end
  end
  return entries, want_id, need, mine_input
end

-- 2. one pass over this run's queries: each takes the first record of
-- its (id, digest) not yet taken, per configuration (into done). Only
-- queries whose id the file holds are digested. Returns what the pass saw:
-- seen.id[id] (the query's text), seen.key[key], seen.count[key] (its
-- occurrences), seen.digest[id].
local function take_records(src, want_id, need, done)
  local seen = { id = {}, key = {}, count = {}, digest = {} }
  src:each(function(q)
    local id = tostring(q.id)
    if not want_id[id] then return end
    local digest = prov.query(q)
    if seen.id[id] == nil then seen.id[id], seen.digest[id] = q.query or false, digest end
    local key = id .. "\0" .. digest
    seen.key[key] = true
    seen.count[key] = (seen.count[key] or 0) + 1
    for cfg, byk in pairs(need) do
      local qu = byk[key]
      if qu and qu.at <= #qu then
        local e = qu[qu.at]
        qu.at = qu.at + 1
        e.index = q.index
        local d = done[cfg]
        if not d then d = {} done[cfg] = d end
        d[q.index] = e.rec or true
      end
    end
  end)
  return seen
end

-- 3. a record no query took: of another input, an edited one, or one
-- too many for its query. Refused, naming which.
local function refuse_untaken(path, entries, seen, mine_input, shard)
  for _, e in ipairs(entries) do
    if not e.index and (not e.failed or not seen.key[e.key]) then
      local where = format("%s:%d", path, e.ln)
      local from = ""
      if mine_input and e.input ~= mine_input.sha256 then
        from = format("; provenance.input.sha256 is %s there (%s), %s here (%s): the file was written from "
          .. "another input", shown(e.input), e.input_file ~= json.null and tostring(e.input_file) or "--query",
          shown(mine_input.sha256), mine_input.file ~= json.null and tostring(mine_input.file) or "--query")
      end
      if seen.id[e.id] == nil then
        refuse(format("%s: the record answers query '%s', which is not among this run's queries%s%s; %s", where,
          e.id, shard and format(" (shard %d/%d)", shard[1], shard[2]) or "", from, HINT.input))
      end
      if not seen.key[e.key] then
        local here = seen.id[e.id] or nil
        if e.query == here then
          -- the same text: the digest covers the input line's other fields
          local there_d = e.key:match("%z(.*)$")
          refuse(format("%s: provenance.query differs: the record answers query '%s' with the same text, %s, but "
            .. "the other fields of its input record differ (provenance.query, the digest of the whole record, is "
            .. "%s there, %s here)%s; %s", where, e.id, text_of(here), tostring(there_d):sub(1, 12),
            tostring(seen.digest[e.id]):sub(1, 12),
            from, HINT.input))
        end
        refuse(format("%s: provenance.query differs: the record answers query '%s' as %s, this input reads it as "
          .. "%s%s; %s", where, e.id, text_of(e.query), text_of(here), from, HINT.input))
      end
      local lines = {}
      for _, o in ipairs(entries) do
        if o.key == e.key and o.cfg == e.cfg and o.index then lines[#lines + 1] = o.ln end
      end
      local k = seen.count[e.key] or 0
      refuse(format("%s: query '%s' already has %d record%s in this file (line %s) and the input holds it %d "
        .. "time%s: the file holds records of another input or run; give a new --out file", where, e.id, #lines,
        #lines == 1 and "" or "s", concat(lines, ", "), k, k == 1 and "" or "s"))
    end
  end
end

-- 4. the lines kept (failed ones to run again dropped; a secret this run
-- knows, say a new --secret-env, that the run which wrote a record did
-- not, scrubbed now) and the positions each configuration learnt from.
-- Returns keep, learnt, dropped, scrubbed.
local function keep_lines(entries)
  local keep, learnt, dropped, scrubbed = {}, {}, 0, 0
  -- a dropped line may be the one that carried its run's whole
  -- provenance: the next kept record of that run carries it then
  local restream = prov.restream(true)
  for _, e in ipairs(entries) do
    if e.failed then
      dropped = dropped + 1
    else
      e.line = restream(e.line, { provenance = e.prov }, e.short)
      local clean = output.clean(e.line, "canonical")
      if clean ~= e.line then e.line, scrubbed = clean, scrubbed + 1 end
      keep[#keep + 1] = e.line
      if e.learnt then
        local l = learnt[e.cfg]
        if not l then l = {} learnt[e.cfg] = l end
        l[#l + 1] = e.index
      end
    end
  end
  return keep, learnt, dropped, scrubbed
end

--- Check the records of `path` against this run and return what is done.
-- opts: retry_failed; src (specula.run.inputs' source: its queries are read
-- once more, one at a time, to match the records); prov_of(r) -> this
-- run's provenance for the record (M.build's table) or nil and why
-- (--compare: by r.config); shard ({ i, n } or nil).
-- Returns done, n, dropped, learnt: done[config or true][q.index] = the
-- record (a --compare run, for its table) or true; n records kept; dropped
-- failed records removed (retry_failed); learnt[config or true] the input
-- positions of the kept records a learning predictor learnt from (no error,
-- a trajectory). Memory grows with the file, not with the
-- input.
function M.read(path, opts)
  local done = {}
  local what = format("--out file '%s'", path)
  local text, rewrite = read_text(path, what)
  if not text then return done, 0, 0 end
  local entries, want_id, need, mine_input = read_entries(text, path, opts)
  if #entries > 0 then
    local seen = take_records(opts.src, want_id, need, done)
    refuse_untaken(path, entries, seen, mine_input, opts.shard)
  end
  local keep, learnt, dropped, scrubbed = keep_lines(entries)
  local n = #keep
  if dropped > 0 or scrubbed > 0 then rewrite = true end
  if rewrite then
    -- a new file renamed over the old one: a crash here loses nothing
    local tmp = path .. ".specula-tmp"
    local w = records.open_output(tmp, "wb", "--out file", "canonical")
    keep[#keep + 1] = ""
    records.write_whole(w, tmp, "--out file", { #keep > 1 and concat(keep, "\n") or "" })
    local okr, rerr2 = os.rename(tmp, path)
    if not okr then os.remove(tmp) records.write_failed(what, rerr2) end
  end
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
