-- specula.run.inputs: the queries of `specula run`, read as the run needs them.
--
-- A JSONL --input (a regular file, one object a line) is never held in
-- memory: a first pass reads it line by line for what needs the whole
-- input before the run starts (the format, when detected; the warnings:
-- malformed lines, records without an id or a query, duplicate ids with
-- the line of their first occurrence; the number of queries, which a shard
-- needs for its positions and its records' `shard.of`, and the progress
-- line for its total), keeping only a fingerprint per id. The run then
-- reads the file again, a query at a time, as slots free up: peak memory
-- no longer grows with the input's size. Inputs that are not line-shaped
-- (a JSON array or a single object, HotpotQA-style files) or that cannot be
-- read twice (a pipe) are read whole, as before.
--
--   local src = inputs.open(o)      -- o: the run options (query, input, format, shard, seed)
--   src.total                       -- queries in the whole input
--   src.n                           -- queries of this process (its shard)
--   src.warnings                    -- the input's warnings, in line order
--   src:count(skip)                 -- of src.n, those whose id is not in skip (resume)
--   src:stream(skip, keep)          -- { n =, next = fn } for runner.run_all
--
-- Each query is { id, query, record, gold, max_hops, index, shard }: index
-- is its position among this process's queries (1-based), shard the
-- record field of a sharded run.
local core = require "specula.internal.core"
local datasets = require "specula.datasets"
local lines_of = require("specula.internal.lines").lines   -- NUL-safe file:lines()
local ffi = core.ffi
local C = core.C

local type, tostring, format, next, ipairs, find, byte, sub = type, tostring, string.format, next, ipairs, string.find,
  string.byte, string.sub

local M = {}

-- ---- duplicate ids ----------------------------------------------------------------------
-- A set of 64-bit fingerprints (sp_json_fingerprint of the id with its type
-- in front: 1 and "1" are different ids, as in specula.datasets): open
-- addressing in two C arrays sized once for the file's line count, 8 bytes
-- a slot at most 70 % full. A fingerprint seen again is checked against the
-- ids themselves afterwards (survey), so it never reports a duplicate that
-- is not one; a fingerprint is no digest (FNV-1a: it was SHA-256, the
-- largest cost of a line after its decoding).

local fingerprint = C.sp_json_fingerprint
local FP = ffi.new("uint32_t[2]")

local IdSet = {}
IdSet.__index = IdSet

local function idset(lines)
  local cap = math.max(16, math.ceil(lines / 0.7))
  return setmetatable({ cap = cap, a = ffi.new("uint32_t[?]", cap), b = ffi.new("uint32_t[?]", cap) }, IdSet)
end

-- True when the fingerprint (x, y) was in the set (it is in it now).
function IdSet:add_fp(x, y)
  if x == 0 and y == 0 then x = 1 end   -- (0, 0) marks an empty slot
  local cap, a, b = self.cap, self.a, self.b
  local i = x % cap
  -- (the probe loop is entered only past an occupied slot, which a set at
  -- most 70 % full mostly is not: a loop entered on every line keeps the
  -- survey's line path out of compiled code)
  local ai, bi = a[i], b[i]
  while not ((ai == 0 and bi == 0) or (ai == x and bi == y)) do
    i = i + 1
    if i == cap then i = 0 end
    ai, bi = a[i], b[i]
  end
  if ai == x and bi == y then return true end
  a[i], b[i] = x, y
  return false
end

-- True when key's fingerprint was in the set (key is in it now).
function IdSet:add(key)
  fingerprint(key, #key, FP)
  return self:add_fp(FP[0], FP[1])
end
M.idset = idset

-- ---- reading a JSONL file line by line --------------------------------------------------

-- Each line of the file: f(text, lineno) for every line that is not blank.
local function each_line(path, f)
  local h, err = io.open(path, "rb")
  if not h then return nil, err end
  local ln = 0
  for line in lines_of(h) do
    ln = ln + 1
    if ln == 1 and line:sub(1, 3) == "\239\187\191" then line = line:sub(4) end   -- UTF-8 BOM
    -- (a line that starts with "{", as nearly all do, is not blank: no pattern)
    if (byte(line, 1) == 123 or find(line, "%S")) and f(line, ln) == false then break end
  end
  h:close()
  return true
end

-- Whether the file is line-shaped JSON: its first non-blank line is one
-- JSON value and the file does not start with '[' (an array is read whole,
-- as is a pretty-printed object whose first line alone is not JSON).
local function jsonl_shaped(path)
  local ok, verdict = nil, false
  each_line(path, function(line)
    local first = line:match("^%s*(.)")
    verdict = first ~= "[" and datasets.decode(line) ~= nil
    ok = true
    return false
  end)
  return ok and verdict
end

-- Lines in the file (newlines, plus a last line without one): sizes the
-- survey's id set.
local function count_lines(path)
  local h = io.open(path, "rb")
  if not h then return 0 end
  local n, last = 0, ""
  while true do
    local block = h:read(65536)
    if not block then break end
    -- (a plain find a newline: gsub tried its pattern at every byte)
    local at = find(block, "\n", 1, true)
    while at do
      n = n + 1
      at = find(block, "\n", at + 1, true)
    end
    last = block
  end
  h:close()
  if last ~= "" and last:sub(-1) ~= "\n" then n = n + 1 end
  return n
end

-- The first pass with format fmt: warnings, the number of records, and
-- duplicate ids; each object also goes to detector d when given. Returns
-- count, warnings.
local scan_line = C.sp_json_line_scan
local line_idq = C.sp_json_line_idq
local IDQ = ffi.new("sp_json_idq")
local SUMMARY_KEYS = datasets.SUMMARY_KEYS
local SUMMARY_CKEYS = ffi.new("const char *[?]", #SUMMARY_KEYS, SUMMARY_KEYS)
local SUMMARY = ffi.new("sp_json_line")
local SUMMARY_TYPES = SUMMARY.type

local function survey(path, fmt, d)
  local build, check, is_object, decode = datasets.builder(fmt), datasets.checker(fmt), datasets.is_object,
    datasets.decode
  local check_types = datasets.check_types
  local warnings, count, ids = {}, 0, idset(count_lines(path))
  local dups = {}   -- key -> true for ids whose fingerprint came again
  local function dup(id, ln)
    local key = type(id) .. ":" .. tostring(id)
    -- the line of its first occurrence is looked up below
    dups[key] = true
    warnings[#warnings + 1] = { key = key, id = id, where = path .. ":" .. ln, ln = ln }
  end
  -- Specula's own JSONL: a line the engine summarises (one strict JSON
  -- object whose id is a string and whose query is text) is counted, its
  -- id fingerprinted and the detector told what it holds, without a Lua
  -- value; any other line is decoded, as every line was.
  local summarise = fmt == "jsonl"
  local nkeys = #SUMMARY_KEYS
  -- (a line's "PATH:LINE" is made only for a warning: most lines have none)
  each_line(path, function(line, ln)
    if summarise and scan_line(line, #line, SUMMARY_CKEYS, nkeys, SUMMARY) == 0 and check_types(SUMMARY_TYPES)
        and (not d or d:add_types(SUMMARY_TYPES)) then
      count = count + 1
      -- a fingerprint seen before: the id itself, from the line
      if ids:add_fp(SUMMARY.fp[0], SUMMARY.fp[1]) then dup(decode(line).id, ln) end
      return
    end
    local v, err = decode(line)
    if d and v ~= nil then d:add(v) end
    if v == nil then
      warnings[#warnings + 1] = path .. ":" .. ln .. ": malformed JSON (" .. tostring(err) .. "); line skipped"
    elseif not is_object(v) then
      warnings[#warnings + 1] = path .. ":" .. ln .. ": not a JSON object; record skipped"
    else
      local id = check(v)
      if id ~= nil then
        count = count + 1
        if ids:add(type(id) .. ":" .. tostring(id)) then dup(id, ln) end
      else
        -- (built for its message, which names what the record lacks)
        local _, problem = build(v, path .. ":" .. ln)
        warnings[#warnings + 1] = problem
      end
    end
  end)
  if next(dups) ~= nil then
    -- where each repeated id first appeared (exactly: the ids themselves)
    local first = {}
    each_line(path, function(line, ln)
      local v = decode(line)
      if v == nil or not is_object(v) then return end
      local rec = build(v, path .. ":" .. ln)
      if not rec then return end
      local key = type(rec.id) .. ":" .. tostring(rec.id)
      if dups[key] and not first[key] then first[key] = ln end
    end)
    local kept = {}
    for _, w in ipairs(warnings) do
      if type(w) ~= "table" then kept[#kept + 1] = w
      elseif first[w.key] and first[w.key] < w.ln then
        kept[#kept + 1] = w.where .. ": duplicate id '" .. tostring(w.id) .. "' (first at " .. path .. ":"
          .. first[w.key] .. ")"
      end
    end
    warnings = kept
  end
  return count, warnings
end

-- ---- sources ----------------------------------------------------------------------------

local Source = {}
Source.__index = Source

-- The shard field of the query at 0-based position p, or nil when p is not
-- this process's.
local function shard_of(self, p)
  local sh = self.shard
  if not sh then return true end
  if p % sh[2] ~= sh[1] then return nil end
  return { index = sh[1], count = sh[2], of = self.total, pos = p, seed = self.seed or 0 }
end

-- digest: the record's provenance digest when the reader made it (an
-- input line read in place), else provenance.query makes it
local function entry(r, index, shard, digest)
  return { id = r.id, query = r.query, record = r.record or r, gold = r.gold, max_hops = r.max_hops,
           index = index, shard = shard ~= true and shard or nil, digest = digest }
end

-- The provenance digest of the record a line read in place gives
-- (datasets.build_idq), from the line's bytes: its canonical text is fixed
-- pieces around the id's and the query's bytes, which need no escaping
-- (sp_json_line_idq takes only printable, valid UTF-8 without escapes).
-- The pieces come from encoding build_idq's own record once, so a field
-- added there moves them too; when they cannot be found that way,
-- provenance.query encodes each record as before (nil here). That encoding
-- was ~750 instructions a query, 1 % of a one-hop query at 16 in flight
-- (bench/README.md, the user's path, stop 57).
local idq_digest
do
  local ok, text = pcall(require("specula.json").canonical, datasets.build_idq("@ID@", "@Q@"))
  local a, b = ok and find(text, "@ID@", 1, true), ok and find(text, "@Q@", 1, true)
  if a and b and a < b and not find(text, "@ID@", a + 1, true) and not find(text, "@Q@", b + 1, true) then
    local pre, mid, post = sub(text, 1, a - 1), sub(text, a + 4, b - 1), sub(text, b + 3)
    local sha256_hex_parts = require("specula.crypto").sha256_hex_parts
    local PARTS, LENS = ffi.new("const char *[5]"), ffi.new("size_t[5]")
    PARTS[0], LENS[0] = pre, #pre
    PARTS[2], LENS[2] = mid, #mid
    PARTS[4], LENS[4] = post, #post
    local cast, charp = ffi.cast, ffi.typeof("const char *")
    -- (PARTS points into pre, mid and post: kept with the module)
    M.idq_pieces = { pre, mid, post }
    idq_digest = function(line, ia, il, qa, ql)
      local p = cast(charp, line)
      PARTS[1], LENS[1] = p + ia, il
      PARTS[3], LENS[3] = p + qa, ql
      return sha256_hex_parts(PARTS, LENS, 5)
    end
  end
end
M.idq_digest = idq_digest   -- (for the spec that checks it against provenance.query)

local plain_error = function(...) return require("specula.internal.sched").plain_error(...) end

-- This process's queries in input order, one a call, nil after the last:
-- the file is read as they are asked for (the run pulls its next query
-- straight from the reader: a coroutine between them cost a resume, a
-- yield and a task check a query, 2.6 % of a one-hop run's instructions).
function Source:reader()
  if self.list then
    local list, p, index = self.list, 0, 0
    return function()
      while p < #list do
        p = p + 1
        local sh = shard_of(self, p - 1)
        if sh then
          index = index + 1
          return entry(list[p], index, sh)
        end
      end
      return nil
    end
  end
  local build, is_object, decode = datasets.builder(self.fmt), datasets.is_object, datasets.decode
  -- specula's own JSONL: a line that is only {"id": "...", "query": "..."}
  -- (escape-free strings) is taken from its text, as the decoder and
  -- datasets' builder would read it (datasets.build_idq); any other goes
  -- through them
  local idq = self.fmt == "jsonl" and line_idq or nil
  local build_idq = datasets.build_idq
  local path, p, index = self.path, 0, 0
  local h, err = io.open(path, "rb")
  if not h then
    plain_error(format("specula run: cannot read the --input file '%s' again: %s", path, tostring(err)))
  end
  local next_line, ln = lines_of(h), 0
  return function()
    while h do
      local line = next_line()
      if line == nil then
        h:close()
        h = nil
        return nil
      end
      ln = ln + 1
      if ln == 1 and line:sub(1, 3) == "\239\187\191" then line = line:sub(4) end   -- UTF-8 BOM
      -- (the survey said why a line gives no query: no "PATH:LINE" made here)
      local rec, digest
      if idq and idq(line, #line, IDQ) == 0 then
        local ia, qa, il, ql = IDQ.id_at, IDQ.query_at, IDQ.id_len, IDQ.query_len
        rec = build_idq(sub(line, ia + 1, ia + il), sub(line, qa + 1, qa + ql))
        if idq_digest then digest = idq_digest(line, ia, il, qa, ql) end
      else
        local v = (byte(line, 1) == 123 or find(line, "%S")) and decode(line) or nil
        rec = v ~= nil and is_object(v) and build(v, path) or nil
      end
      if rec then
        if p >= self.total then
          plain_error(format("specula run: the --input file '%s' changed while the run read it (it has more "
            .. "queries than the %d it had at the start)", path, self.total))
        end
        local sh = shard_of(self, p)
        p = p + 1
        if sh then
          index = index + 1
          return entry(rec, index, sh, digest)
        end
      end
    end
    return nil
  end
end

-- Every query of this process, in input order: f(q) for each; f returning
-- false stops.
function Source:each(f)
  for q in self:reader() do
    if f(q) == false then return end
  end
end

-- Of this process's queries, those drop(q) keeps (nil: all of them).
function Source:count(drop)
  if not drop then return self.n end
  local n = 0
  self:each(function(q) if not drop(q) then n = n + 1 end end)
  return n
end

-- A stream for runner.run_all: { n, next() -> q | nil }, reading the input
-- as the run asks for queries. drop(q) -> true leaves a query out (resume:
-- its record is in --out), and then on_drop(q) is called as the stream
-- passes it.
function Source:stream(drop, on_drop)
  local n = self:count(drop)
  local read = self:reader()
  local ended = false
  local function pull()
    while true do
      local q = read()
      if q == nil then
        ended = true
        return nil
      end
      if not (drop and drop(q)) then return q end
      if on_drop then on_drop(q) end
    end
  end
  local given = 0
  return { n = n, next = function()
    if given >= n then return nil end
    local q = pull()
    if q == nil then
      plain_error(format("specula run: the --input file '%s' changed while the run read it (it ended after %d "
        .. "of its %d queries)", tostring(self.path), given, n))
    end
    given = given + 1
    return q
  end, finish = function()
    -- the queries after the last one run (dropped ones still reach on_drop)
    if on_drop then while not ended do pull() end end
  end }
end

-- The queries of a command line: --query, or --input (streamed when it is
-- a JSONL regular file), then --shard (o.shard = { i, n } resolved).
-- Returns a source; raises the same errors as before (unreadable input,
-- unrecognised format).
function M.open(o)
  local self = setmetatable({ shard = o.shard, seed = o.seed }, Source)
  if o.query then
    self.list = { { id = "q1", query = o.query, record = { id = "q1", query = o.query } } }
    self.warnings = {}
  else
    local path, fmt = o.input, o.format or "auto"
    if C.sp_host_path_kind(path) == 1 and jsonl_shaped(path) then
      local count, warnings
      if fmt == "auto" then
        -- detection needs every object; the survey as specula's own JSONL
        -- goes with it (the common case), again for another format
        local d = datasets.detector()
        count, warnings = survey(path, "jsonl", d)
        local detected, note = d:result()
        if not detected then
          if count == 0 and #warnings == 0 then
            self.fmt, self.path, self.total, self.warnings = "jsonl", path, 0, {}
          else
            return nil, "specula.datasets: " .. path .. ": " .. note
          end
        else
          if detected ~= "jsonl" then count, warnings = survey(path, detected) end
          if note then table.insert(warnings, 1, path .. ": " .. note) end
          fmt = detected
        end
      else
        count, warnings = survey(path, fmt)
      end
      self.fmt, self.path = self.fmt or fmt, path
      self.total = self.total or count
      self.warnings = self.warnings or warnings
      -- the survey's id set is garbage now: free it before the run grows
      collectgarbage()
    else
      local recs, w = datasets.load(path, { format = fmt })
      if not recs then return nil, w end
      self.list, self.warnings, self.path = recs, w or {}, path
    end
  end
  if self.list then self.total = #self.list end
  if self.shard then
    local i, n = self.shard[1], self.shard[2]
    self.n = self.total > i and math.floor((self.total - 1 - i) / n) + 1 or 0
  else
    self.n = self.total
  end
  return self
end

return M
