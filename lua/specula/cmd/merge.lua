-- specula.cmd.merge: `specula merge SHARD.jsonl... -o ALL.jsonl [--input FILE]
-- [--summary S.json]` — the union of the results files of a sharded sweep.
--
-- It checks that the shards partition the input: every record agrees on the
-- shard count, the input's query count and the seed (the `shard` field each
-- record of `specula run --shard` carries, see specula.run.shard); no query id
-- appears twice for a configuration; none is missing; every configuration
-- was run with the same settings (stats.mode, k_config, m, spec_launch). With
-- --input the ids are also checked against the input's, position by
-- position (records without a shard field are then placed by id).
-- The union is written with each record's line unchanged (but for its
-- provenance: whole in the first record of each run, see
-- specula.provenance.restream), configurations in
-- the order of the sweep and queries in input order, so `specula compare`,
-- `report` and `replay` read it like a single machine's results file.
local json = require "specula.json"
local resultfiles = require "specula.run.resultfiles"
local sched = require "specula.internal.sched"
local stderr = require("specula.internal.output").stderr   -- what goes out is scrubbed

local format, concat, sort = string.format, table.concat, table.sort
local type, tostring, tonumber, ipairs, pairs = type, tostring, tonumber, ipairs, pairs

local M = {
  name = "merge",
  synopsis = "SHARD.jsonl [MORE.jsonl ...] -o ALL.jsonl [options]",
  summary = "check that shards partition the input and write their union",
  about = [[
Checks that the results files of `specula run --shard i/n` (or --shard auto)
partition the input and writes their union, in input order.]],
  positional = "files",
  options = {
    { "--out", "-o", key = "out", arg = "FILE", required = true,
      help = "the merged results file to write; - is stdout" },
    { "--input", key = "input", arg = "FILE", help = "the queries the shards were cut from: check the ids against it" },
    { "--format", key = "format", arg = "NAME", default = "auto",
      help = "format of --input: auto, jsonl, hotpotqa, 2wiki, musique, conversations" },
    { "--summary", key = "summary", arg = "FILE",
      help = "also write the comparison table of the union as JSON\n(as `specula compare ALL.jsonl --summary FILE`); - is stdout" },
  },
}

function M.check(o)
  if #o.files == 0 then return "no shard results file given" end
  if not o.out then return "-o ALL.jsonl is required" end
  if o.out == "-" and o.summary == "-" then return "-o - and --summary - cannot both be stdout" end
end

local function fail(msg) sched.plain_error("specula merge: " .. msg) end


-- The results files' reading and checked writing, and a record's
-- configuration name, live in specula.run.resultfiles (specula compare uses
-- them too); here as they always were.
M.write_file, M.config_of, M.read_records = resultfiles.write_file, resultfiles.config_of, resultfiles.read_records

local function where(e) return e.file .. ":" .. e.line end

-- The settings a configuration's records must share across shards.
local function settings(r)
  local st = type(r.stats) == "table" and r.stats or nil
  if not st then return nil end
  return json.canonical({ mode = st.mode, k_config = st.k_config, m = st.m, spec_launch = st.spec_launch })
end

-- The provenance of the shards (specula.provenance): every record carries
-- one or none does; all share the version, agent and input (with --input,
-- that file's digest); every record of a configuration is of one run.
local function input_sha(p) return type(p.input) == "table" and p.input.sha256 or nil end

local function check_provenance(entries, input_digest, input_path)
  local prov = require "specula.provenance"
  local ref, ref_e, none_e = nil, nil, nil
  local runs = {}
  for _, e in ipairs(entries) do
    local p = e.rec.provenance
    if p == nil then
      none_e = none_e or e
      if ref then
        fail(format("%s carries provenance and %s does not (written by an older specula): these files are not "
          .. "from one sweep", where(ref_e), where(e)))
      end
    else
      if none_e then
        fail(format("%s carries no provenance (written by an older specula) and %s does: these files are not from "
          .. "one sweep", where(none_e), where(e)))
      end
      -- (checked as read: specula.run.resultfiles)
      if not ref then
        ref, ref_e = p, e
        if input_digest and input_sha(p) ~= input_digest then
          fail(format("%s was written from another input than --input %s: provenance.input.sha256 is %s there, %s "
            .. "for %s", where(e), input_path, prov.show(p.input.sha256), prov.show(input_digest), input_path))
        end
      elseif p.run ~= ref.run or input_sha(p) ~= input_sha(ref) then
        -- the parts every shard of a sweep shares, whatever its configuration
        local field, a, b = prov.diff(ref, p, { "version", "agent", "input" })
        if field then
          fail(format("%s and %s are not from the same sweep: %s is %s in the first, %s in the second", where(ref_e),
            where(e), field, prov.show(a), prov.show(b)))
        end
      end
      local name = M.config_of(e.rec) or "?"
      local r = runs[name]
      if not r then
        runs[name] = { p = p, e = e }
      elseif r.p.run ~= p.run then
        local field, a, b = prov.diff(r.p, p)
        fail(format("configuration '%s' ran differently in %s and %s: %s is %s in the first, %s in the second", name,
          where(r.e), where(e), field or "provenance.run", prov.show(a), prov.show(b)))
      end
    end
  end
  if none_e then
    stderr("specula merge: warning: the records carry no provenance (written by an older specula): "
      .. "that the shards ran the same agent on the same input cannot be checked\n")
  end
end

--- Check the shards and return the merged entries in output order, the
-- configuration names in order, and the shard count and query count.
-- input_digest: the SHA-256 of --input's bytes (checked against the
-- records' provenance).
function M.merge(entries, input, input_digest, input_path)
  local WHO = "specula merge"
  local ref, ref_e = nil, nil           -- the first shard field seen
  local pos_of_id
  if input then
    pos_of_id = {}
    for p, q in ipairs(input) do pos_of_id[tostring(q.id)] = p - 1 end
  end
  local cfgs, order = {}, {}
  for _, e in ipairs(entries) do
    local r = e.rec
    local sh = r.shard
    local pos
    if type(sh) == "table" then
      for _, k in ipairs({ "index", "count", "of", "pos" }) do
        if type(sh[k]) ~= "number" then fail(where(e) .. ": the shard field has no number '" .. k .. "'") end
      end
      if not ref then ref, ref_e = sh, e end
      for _, k in ipairs({ "count", "of", "seed" }) do
        if sh[k] ~= ref[k] then
          local what = k == "count" and "shard count" or (k == "of" and "input's query count" or "seed")
          fail(format("%s and %s disagree on the %s (%s and %s): these shards are not from the same sweep",
            where(ref_e), where(e), what, tostring(ref[k]), tostring(sh[k])))
        end
      end
      if sh.pos % sh.count ~= sh.index or sh.pos < 0 or sh.pos >= sh.of then
        fail(format("%s: query position %d does not belong to shard %d/%d", where(e), sh.pos, sh.index, sh.count))
      end
      pos = sh.pos
      if input then
        if sh.of ~= #input then
          fail(format("%s: the shard was cut from %d queries, --input has %d", where(e), sh.of, #input))
        end
        local want = input[pos + 1].id
        if tostring(want) ~= tostring(r.id) then
          fail(format("%s: query %d of the input is '%s', the record's id is '%s'", where(e), pos, tostring(want),
            tostring(r.id)))
        end
      end
    elseif input then
      pos = pos_of_id[tostring(r.id)]
      if not pos then fail(format("%s: id '%s' is not in --input", where(e), tostring(r.id))) end
    else
      fail(where(e) .. ": the record has no shard field (not written by `specula run --shard`); "
        .. "give --input FILE to check the union against the queries")
    end
    e.pos = pos
    e.shard_index = type(sh) == "table" and sh.index or nil
    local name = M.config_of(r)
    if not name then fail(where(e) .. ": the record has neither a config nor stats.mode: cannot tell its configuration") end
    local c = cfgs[name]
    if not c then
      c = { name = name, by_pos = {}, by_id = {}, n = 0 }
      cfgs[name] = c
      order[#order + 1] = c
    end
    local id = tostring(r.id)
    local prev = c.by_id[id] or c.by_pos[pos]
    if prev then
      fail(format("query '%s' appears twice for configuration '%s': %s and %s%s", id, name, where(prev), where(e),
        prev.file == e.file and prev.line == e.line and " (the same file given twice?)" or ""))
    end
    c.by_id[id], c.by_pos[pos] = e, e
    c.n = c.n + 1
    local s = settings(r)
    if s then
      if c.settings and c.settings ~= s then
        fail(format("configuration '%s' ran with different settings in %s and %s (%s vs %s)", name,
          where(c.settings_e), where(e), c.settings, s))
      end
      c.settings, c.settings_e = c.settings or s, c.settings_e or e
    end
    -- the sweep's order of configurations: as the lowest shard wrote them
    local rank = (e.shard_index or 0)
    if c.rank == nil or rank < c.rank then c.rank, c.first = rank, e end
  end
  -- the shards' structure holds: now that they ran the same thing
  check_provenance(entries, input_digest, input_path)
  local total = input and #input or (ref and ref.of) or 0
  local count = ref and ref.count or 1
  local ids = {}
  for _, c in ipairs(order) do
    for id, e in pairs(c.by_id) do ids[e.pos] = id end
  end
  for _, c in ipairs(order) do
    if c.n ~= total then
      local missing = {}
      for p = 0, total - 1 do
        if not c.by_pos[p] then
          local id = input and tostring(input[p + 1].id) or ids[p]
          if id then
            missing[#missing + 1] = format("'%s' (position %d, shard %d/%d)", id, p, p % count, count)
          else
            missing[#missing + 1] = format("position %d (shard %d/%d)", p, p % count, count)
          end
        end
      end
      local shown = {}
      for i = 1, math.min(5, #missing) do shown[i] = missing[i] end
      fail(format("configuration '%s' lacks %d of %d queries: %s%s — is a shard's file missing or incomplete?",
        c.name, #missing, total, concat(shown, ", "), #missing > 5 and ", …" or ""))
    end
  end
  -- configurations in the order the lowest shard wrote them
  local idx = {}
  for i, e in ipairs(entries) do idx[e] = i end
  sort(order, function(a, b)
    if a.rank ~= b.rank then return a.rank < b.rank end
    return idx[a.first] < idx[b.first]
  end)
  local out, names = {}, {}
  for ci, c in ipairs(order) do
    names[ci] = c.name
    for p = 0, total - 1 do out[#out + 1] = c.by_pos[p] end
  end
  return out, names, count, total
end

function M.main(o)
  local input
  if o.input then
    local datasets = require "specula.datasets"
    local recs, w = datasets.load(o.input, { format = o.format })
    if not recs then fail(tostring(w)) end
    input = recs
  end
  local entries = M.read_records(o.files, "specula merge")
  local digest = o.input and require("specula.provenance").file_digest(o.input)
  local merged, names, count, total = M.merge(entries, input, digest, o.input)
  -- in the new order, each run's first record carries its whole provenance
  -- (and the first after its input changes), the others name their run
  local lines, restream = {}, require("specula.provenance").restream()
  for i, e in ipairs(merged) do lines[i] = restream(e.text, e.rec, e.short) end
  -- each record a line of JSON, scrubbed by the writer
  M.write_file(o.out, #lines > 0 and (concat(lines, "\n") .. "\n") or "", "specula merge", "json")
  if o.summary then
    local compare = require "specula.run.compare"
    local recs = {}
    for i, e in ipairs(merged) do recs[i] = e.rec end
    local configs, all = compare.group(recs)
    M.write_file(o.summary, compare.summary_json(configs, compare.rows(configs, all)), "specula merge",
      "canonical")
  end
  -- the records that carry a failure, said beside the count: a merged
  -- file is no better for holding them
  local failed = 0
  for _, e in ipairs(merged) do
    if e.rec.error ~= nil and e.rec.error ~= json.null then failed = failed + 1 end
  end
  stderr(format("specula merge: wrote %s: %d records%s, %d configuration%s x %d queries, from %d file%s (%d shard%s)\n",
    o.out, #merged, failed > 0 and format(" (%d failed)", failed) or "", #names, #names == 1 and "" or "s", total,
    #o.files, #o.files == 1 and "" or "s", count, count == 1 and "" or "s"))
end

return M
