-- specula.datasets: turn multi-hop QA dataset files into query records.
--
--   datasets.load(path, opts)        -> records, warnings | nil, err
--   datasets.parse(text, opts)       -> records, warnings | nil, err
--   datasets.detect(objects)         -> format | nil, err
--   datasets.FORMATS                 -> { "musique", "2wiki", "hotpotqa", "jsonl", "conversations" }
--
-- A record is
--   { id =, query =, gold = { answer, alias, ... }, max_hops =, source = }
-- plus a few format-specific fields (type, level, answerable, decomposition)
-- and, for specula's own JSONL, every other field of the input object.
--
-- Formats (SpecHop section 4.1 gives the hop budgets):
--   "2wiki"    2WikiMultihopQA: _id, question, answer, supporting_facts
--              (list of [title, sentence index]); max_hops = number of
--              distinct titles in supporting_facts + 2.
--   "musique"  MuSiQue: id, question, answer, answer_aliases,
--              question_decomposition (list); max_hops = its length + 2.
--   "hotpotqa" HotpotQA: _id, question, answer, supporting_facts, type,
--              level; max_hops = distinct titles + 2.
--   "jsonl"    specula's own records: id, query; optional gold (string or
--              list), answer, answer_aliases / aliases, answers, max_hops.
--   "conversations" recorded agent conversations: id, messages (OpenAI chat
--              or Anthropic); the query is the first user message's text,
--              and the record keeps every field (specula.agents.conversation
--              replays them).
--
-- Files may be a JSON array of objects, a single JSON object, or JSONL (one
-- object per line; blank lines are skipped).
--
-- Format detection (opts.format = "auto", the default) looks at every object
-- in the file, in this order:
--   1. any object with question_decomposition              -> musique
--   2. any object with `evidences`, or whose `type` is one of
--      compositional / inference / bridge_comparison         -> 2wiki
--      (HotpotQA's types are bridge / comparison; "comparison" exists in
--      both datasets, so it decides nothing)
--   3. any object with `level`, or `type` == "bridge"          -> hotpotqa
--   4. objects with _id, question and supporting_facts but none of the
--      signals above                                          -> hotpotqa,
--      with a warning (both give the same records, only `source` differs)
--   5. any object with `query`                                -> jsonl
--   6. objects with a `messages` list (and no `query`)        -> conversations
-- Otherwise the load fails with the keys found and the formats tried.
--
-- Problems with single records never raise: a malformed JSONL line, a line
-- that is not an object, or a record missing a required field produces a
-- warning naming the file, the line (JSONL) or index (JSON array) and the
-- field, and that record is skipped. A file with lines and not one of them
-- JSON (a binary, a compressed file) is an error, not an empty input.

local type, tostring, pairs, ipairs, pcall, error, select, next, getmetatable =
  type, tostring, pairs, ipairs, pcall, error, select, next, getmetatable
local find, sub, format, byte = string.find, string.sub, string.format, string.byte
local concat, sort = table.concat, table.sort
local compressed_hint = require("specula.internal.lines").compressed_hint

local M = {}

M.FORMATS = { "musique", "2wiki", "hotpotqa", "jsonl", "conversations" }
local VALID_FORMAT = { auto = true, musique = true, ["2wiki"] = true,
                       hotpotqa = true, jsonl = true, conversations = true }

local json
local function decode(s)
  if not json then json = require("specula.json") end
  local ok, v, err = pcall(json.decode, s)
  if not ok then return nil, tostring(v) end
  if v == nil then return nil, tostring(err or "invalid JSON") end
  return v
end

local function is_null(v)
  return v == nil or (json ~= nil and v == json.null)
end

-- Decoded JSON: an array is a sequence, or an empty table carrying
-- json.array_mt; an object is any other table.
local function is_empty_array(v)
  return json ~= nil and getmetatable(v) == json.array_mt
end

local function is_object(v)
  if type(v) ~= "table" then return false end
  return v[1] == nil and not is_empty_array(v)
end

local function is_list(v)
  return type(v) == "table" and (v[1] ~= nil or next(v) == nil)
end

local function sorted_keys(obj)
  local keys = {}
  for k in pairs(obj) do keys[#keys + 1] = tostring(k) end
  sort(keys)
  return keys
end

----------------------------------------------------------------------------
-- splitting a file into objects
----------------------------------------------------------------------------

-- Returns a list of { value =, where = "name:LINE" | "name[INDEX]" } and
-- the warnings, or nil, err when the text is neither JSONL nor JSON.
local function objects_of(s, name, warnings)
  if sub(s, 1, 3) == "\239\187\191" then s = sub(s, 4) end  -- UTF-8 BOM
  local first = find(s, "%S")
  if not first then
    warnings[#warnings + 1] = name .. ": file is empty"
    return {}
  end
  local items = {}
  local function whole()
    local v, err = decode(s)
    if v == nil then return nil, err end
    if is_object(v) then
      items[1] = { value = v, where = name .. "[1]" }
    elseif is_list(v) then
      for i = 1, #v do items[i] = { value = v[i], where = name .. "[" .. i .. "]" } end
    else
      return nil, "top-level JSON value is a " .. type(v) .. ", not an array or object"
    end
    return items
  end

  if byte(s, first) == 91 then          -- '[': a JSON array
    local ok, err = whole()
    if not ok then return nil, name .. ": invalid JSON array: " .. err end
    return items
  end

  -- JSONL, unless the first line alone is not JSON but the whole text is
  -- (a pretty-printed single object).
  local line_start = first
  local line_end = find(s, "\n", first, true) or #s + 1
  if not decode(sub(s, line_start, line_end - 1)) and whole() then
    return items
  end
  items = {}
  local lineno, pos, len = 0, 1, #s
  while pos <= len do
    local nl = find(s, "\n", pos, true) or len + 1
    lineno = lineno + 1
    local line = sub(s, pos, nl - 1)
    pos = nl + 1
    if find(line, "%S") then
      local v, err = decode(line)
      local where = name .. ":" .. lineno
      if v == nil then
        warnings[#warnings + 1] = where .. ": malformed JSON (" .. err .. "); line skipped"
      else
        items[#items + 1] = { value = v, where = where }
      end
    end
  end
  return items
end

----------------------------------------------------------------------------
-- detection
----------------------------------------------------------------------------

local WIKI2_TYPES = { compositional = true, inference = true, bridge_comparison = true }

-- An incremental detector: d:add(object) for each object, in any order,
-- then d:result() -> format, note | nil, err (as detect). A streamed input
-- is detected this way without keeping its objects.
local Detector = {}
Detector.__index = Detector

function M.detector()
  return setmetatable({ musique = false, wiki2 = false, hotpot = false, multi = false, query = false }, Detector)
end

function Detector:add(o)
  if not is_object(o) then return end
  self.first_keys = self.first_keys or sorted_keys(o)
  if o.question_decomposition ~= nil then self.musique = true end
  if o.evidences ~= nil or WIKI2_TYPES[o.type] then self.wiki2 = true end
  if o.level ~= nil or o.type == "bridge" then self.hotpot = true end
  if o._id ~= nil and o.question ~= nil and o.supporting_facts ~= nil then self.multi = true end
  if o.query ~= nil then self.query = true end
  if type(o.messages) == "table" then self.messages = true end
end

-- The top-level keys that Detector:add and the jsonl checker read, in the
-- order of a line summary's types (sp_json_line: the engine reads a line
-- without making a Lua value; specula.run.inputs' first pass). A summary's
-- types are sp_json_line.type: -1 absent, 0 null, 3 number, 4 string, 5
-- array, 6 object (1, 2: false, true).
M.SUMMARY_KEYS = { "id", "query", "type", "question_decomposition", "evidences", "level", "_id", "question",
                   "supporting_facts", "messages" }
local T_NUMBER, T_STRING, T_ARRAY, T_OBJECT = 3, 4, 5, 6

-- Detector:add for an object known by its summary's types t (0-based, in
-- SUMMARY_KEYS order); false, nothing done, when the object itself is
-- needed: the first object (its keys go into the message when nothing is
-- detected), or a string "type" (its value decides).
function Detector:add_types(t)
  if self.first_keys == nil or t[2] == T_STRING then return false end
  if t[3] >= 0 then self.musique = true end
  if t[4] >= 0 then self.wiki2 = true end
  if t[5] >= 0 then self.hotpot = true end
  if t[6] >= 0 and t[7] >= 0 and t[8] >= 0 then self.multi = true end
  if t[1] >= 0 then self.query = true end
  if t[9] == T_ARRAY or t[9] == T_OBJECT then self.messages = true end
  return true
end

function Detector:result()
  if self.musique then return "musique" end
  if self.wiki2 then return "2wiki" end
  if self.hotpot then return "hotpotqa" end
  if self.multi then
    return "hotpotqa", "format is ambiguous between hotpotqa and 2wiki " ..
           "(no evidences, level or distinctive type); read as hotpotqa " ..
           "(pass format = \"2wiki\" to override)"
  end
  if self.query then return "jsonl" end
  if self.messages then return "conversations" end
  local keys = self.first_keys and concat(self.first_keys, ", ") or "(no JSON objects)"
  return nil, "unrecognised record shape (keys found: " .. keys ..
              "); tried formats: musique (question_decomposition), " ..
              "2wiki (_id, question, supporting_facts, evidences), " ..
              "hotpotqa (_id, question, supporting_facts, level), jsonl (id, query), conversations (id, messages)"
end

--- Detect the format of a list of decoded objects (see the header).
-- Returns format, note (a warning text or nil); or nil, err.
function M.detect(objects)
  if type(objects) ~= "table" then
    error("specula.datasets.detect: expected a list of objects", 2)
  end
  local d = M.detector()
  for _, o in ipairs(objects) do d:add(o) end
  return d:result()
end

----------------------------------------------------------------------------
-- record builders
----------------------------------------------------------------------------

local function text_field(v)
  if type(v) == "string" then return v end
  if type(v) == "number" then return tostring(v) end
  return nil
end

local function id_field(v)
  if type(v) == "string" or type(v) == "number" then return v end
  return nil
end

-- gold list: answer first, then aliases, without duplicates or empties
-- (no closure per call: creating one is not compiled, and every input
-- line's record is built through here)
local function gold_add(out, seen, v)
  v = text_field(v)
  if v and v ~= "" and not seen[v] then seen[v] = true; out[#out + 1] = v end
end
local function gold_list(answer, ...)
  local out, seen = {}, {}
  gold_add(out, seen, answer)
  for i = 1, select("#", ...) do
    local extra = select(i, ...)
    if type(extra) == "table" then
      for _, a in ipairs(extra) do gold_add(out, seen, a) end
    elseif extra ~= nil then
      gold_add(out, seen, extra)
    end
  end
  return out
end

-- Number of distinct titles in supporting_facts ([title, idx] pairs, or
-- objects with a title). Returns count, or nil and a problem description.
local function distinct_titles(sf)
  if not is_list(sf) then return nil, "supporting_facts is not a list" end
  local seen, n = {}, 0
  for i = 1, #sf do
    local f = sf[i]
    local title
    if type(f) == "table" then title = f[1] or f.title end
    if type(title) ~= "string" then
      return nil, "supporting_facts[" .. i .. "] has no title"
    end
    if not seen[title] then seen[title] = true; n = n + 1 end
  end
  return n
end

local function missing(where, field)
  return where .. ": missing field '" .. field .. "'; record skipped"
end

local function wiki_like(source)
  return function(o, where)
    local id = id_field(o._id)
    if id == nil then id = id_field(o.id) end
    if id == nil then return nil, missing(where, "_id") end
    local q = text_field(o.question)
    if not q then return nil, missing(where, "question") end
    if is_null(o.answer) or text_field(o.answer) == nil then
      return nil, missing(where, "answer")
    end
    if is_null(o.supporting_facts) then return nil, missing(where, "supporting_facts") end
    local n, err = distinct_titles(o.supporting_facts)
    if not n then return nil, where .. ": " .. err .. "; record skipped" end
    local rec = { id = id, query = q, gold = gold_list(o.answer, o.answer_aliases),
                  max_hops = n + 2, source = source }
    if type(o.type) == "string" then rec.type = o.type end
    if type(o.level) == "string" then rec.level = o.level end
    return rec
  end
end

local BUILD = {}
BUILD["2wiki"] = wiki_like("2wiki")
BUILD.hotpotqa = wiki_like("hotpotqa")

function BUILD.musique(o, where)
  local id = id_field(o.id)
  if id == nil then return nil, missing(where, "id") end
  local q = text_field(o.question)
  if not q then return nil, missing(where, "question") end
  if is_null(o.answer) or text_field(o.answer) == nil then
    return nil, missing(where, "answer")
  end
  local qd = o.question_decomposition
  if is_null(qd) then return nil, missing(where, "question_decomposition") end
  if not is_list(qd) then
    return nil, where .. ": question_decomposition is not a list; record skipped"
  end
  local decomposition = {}
  for i = 1, #qd do
    local step = qd[i]
    if type(step) == "table" and type(step.question) == "string" then
      decomposition[#decomposition + 1] = step.question
    end
  end
  local rec = { id = id, query = q, gold = gold_list(o.answer, o.answer_aliases),
                max_hops = #qd + 2, source = "musique", decomposition = decomposition }
  if type(o.answerable) == "boolean" then rec.answerable = o.answerable end
  return rec
end

local OWN_RESERVED = { id = true, query = true, gold = true, max_hops = true, source = true }

function BUILD.jsonl(o, where)
  local id = id_field(o.id)
  if id == nil then return nil, missing(where, "id") end
  local q = text_field(o.query)
  if not q then return nil, missing(where, "query") end
  local rec = { id = id, query = q, source = "jsonl" }
  local g = o.gold
  if type(g) == "string" or type(g) == "number" then
    rec.gold = gold_list(g)
  elseif type(g) == "table" then
    rec.gold = gold_list(nil, g)
  else
    rec.gold = gold_list(o.answer, o.answer_aliases, o.aliases, o.answers)
  end
  if type(o.max_hops) == "number" then rec.max_hops = o.max_hops end
  for k, v in pairs(o) do
    if not OWN_RESERVED[k] and not is_null(v) then rec[k] = v end
  end
  return rec
end

-- BUILD.jsonl of an object whose only members are a string id and a
-- string query (specula.run.inputs reads such a line without a decoder):
-- what BUILD.jsonl makes of it, field for field (no gold: an empty list).
function M.build_idq(id, query)
  return { id = id, query = query, source = "jsonl", gold = {} }
end

-- A recorded conversation: the query is the first user message's text.
local function first_user_text(msgs)
  for _, m in ipairs(msgs) do
    if type(m) == "table" and m.role == "user" then
      local c = m.content
      if type(c) == "string" and c ~= "" then return c end
      if type(c) == "table" then
        for _, b in ipairs(c) do
          if type(b) == "table" and b.type == "text" and type(b.text) == "string" and b.text ~= "" then return b.text end
        end
      end
    end
  end
  return nil
end

BUILD.conversations = function(o, where)
  local id = id_field(o.id)
  if id == nil then return nil, missing(where, "id") end
  if type(o.messages) ~= "table" then return nil, missing(where, "messages") end
  local rec = { id = id, query = first_user_text(o.messages) or "", source = "conversations" }
  for k, v in pairs(o) do
    if not OWN_RESERVED[k] and not is_null(v) then rec[k] = v end
  end
  return rec
end

----------------------------------------------------------------------------
-- entry points
----------------------------------------------------------------------------

--- The record builder of a format: build(object, where) -> record | nil,
-- warning (the object must be a JSON object: see M.is_object).
function M.builder(fmt) return BUILD[fmt] end

-- The id of the record build(o) would make, or nil when it would make none:
-- what a first pass over a file needs, without building (the run builds the
-- record when it takes the query). Specula's own JSONL fails to build
-- exactly when its id or its query is missing (BUILD.jsonl); other formats
-- are built and dropped.
local CHECK = {}
function CHECK.jsonl(o)
  local id = id_field(o.id)
  if id == nil or text_field(o.query) == nil then return nil end
  return id
end
-- CHECK.jsonl for a summarised object (types t, as Detector:add_types):
-- true when it makes a record whose id is a string (the summary's
-- fingerprint is that id's); false when the object itself is needed (a
-- number id, whose key is its Lua text; no record, whose warning says why).
function M.check_types(t)
  local q = t[1]
  return t[0] == T_STRING and (q == T_STRING or q == T_NUMBER)
end

function M.checker(fmt)
  local check = CHECK[fmt]
  if check then return check end
  local build = BUILD[fmt]
  return function(o)
    local rec = build(o, "")
    return rec and rec.id
  end
end
M.is_object = is_object
M.decode = decode
M.objects_of = objects_of

local function check_opts(fname, opts)
  if opts ~= nil and type(opts) ~= "table" then
    error("specula.datasets." .. fname .. ": options must be a table", 3)
  end
  opts = opts or {}
  local fmt = opts.format or "auto"
  if not VALID_FORMAT[fmt] then
    error("specula.datasets." .. fname .. ": unknown format '" .. tostring(fmt) ..
          "' (expected auto, hotpotqa, 2wiki, musique, jsonl or conversations)", 3)
  end
  if opts.limit ~= nil and (type(opts.limit) ~= "number" or opts.limit < 0) then
    error("specula.datasets." .. fname .. ": limit must be a non-negative number", 3)
  end
  return opts, fmt
end

local function parse(s, name, opts, fmt)
  local warnings = {}
  local items, err = objects_of(s, name, warnings)
  if not items then return nil, "specula.datasets: " .. err end
  if fmt == "auto" then
    local objs = {}
    for i = 1, #items do objs[i] = items[i].value end
    local note
    fmt, note = M.detect(objs)
    if not fmt then
      if #items == 0 then
        -- lines, and none of them JSON: not an input with no queries
        local malformed = 0
        for _, w in ipairs(warnings) do
          if find(w, ": malformed JSON (", 1, true) then malformed = malformed + 1 end
        end
        if malformed > 0 then
          return nil, "specula.datasets: " .. name .. ": " .. (compressed_hint(name, s) or format(
            "no line of it is JSON (%d skipped; the first: %s)", malformed, warnings[1]))
        end
        return {}, warnings
      end
      return nil, "specula.datasets: " .. name .. ": " .. note
    end
    if note then warnings[#warnings + 1] = name .. ": " .. note end
  end
  local build = BUILD[fmt]
  local records, seen = {}, {}
  local limit = opts.limit
  for i = 1, #items do
    if limit and #records >= limit then break end
    local it = items[i]
    if not is_object(it.value) then
      warnings[#warnings + 1] = it.where .. ": not a JSON object; record skipped"
    else
      local rec, problem = build(it.value, it.where)
      if rec then
        local key = type(rec.id) .. ":" .. tostring(rec.id)
        if seen[key] then
          warnings[#warnings + 1] = it.where .. ": duplicate id '" .. tostring(rec.id) ..
                                    "' (first at " .. seen[key] .. ")"
        else
          seen[key] = it.where
        end
        records[#records + 1] = rec
      else
        warnings[#warnings + 1] = problem
      end
    end
  end
  return records, warnings
end

--- Parse dataset text. opts: format ("auto" | "hotpotqa" | "2wiki" |
-- "musique" | "jsonl"), name (used in warnings, default "<string>"), limit
-- (maximum number of records).
function M.parse(s, opts)
  if type(s) ~= "string" then
    error("specula.datasets.parse: text must be a string", 2)
  end
  local fmt
  opts, fmt = check_opts("parse", opts)
  return parse(s, opts.name or "<string>", opts, fmt)
end

--- Load a dataset file. Returns records, warnings; or nil, err when the file
-- cannot be read, is not JSON/JSONL, or has an unrecognised shape.
function M.load(path, opts)
  if type(path) ~= "string" then
    error("specula.datasets.load: path must be a string", 2)
  end
  local fmt
  opts, fmt = check_opts("load", opts)
  local f, err = io.open(path, "rb")
  if not f then return nil, "specula.datasets: cannot open '" .. path .. "': " .. tostring(err) end
  local s = f:read("*a")
  f:close()
  if not s then return nil, "specula.datasets: cannot read '" .. path .. "'" end
  return parse(s, path, opts, fmt)
end

return M
