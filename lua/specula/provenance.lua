-- specula.provenance: where a record came from, written with the records of
-- `specula run` and checked by every reader (resume, merge, compare, report).
--
-- In a records file (or stdout) the first record of each run this process
-- writes carries the whole object below; the run's later records carry
-- {"query":Q,"run":R} only, and every reader takes the rest from the latest
-- whole provenance of that run above the record in the same file (M.reader),
-- refusing a record whose run has none there. The whole object is then
-- written once per run and file, not once per record.
--
-- A record's whole "provenance" object (keys sorted like the rest of the line):
--   version  the specula that wrote it
--   agent    { script = file name, sha256 = its digest, modules = { name = digest } }:
--            the modules beside the script that it loaded (`require "helper"`)
--            and the files it ran with dofile ("dofile:PATH")
--   input    { file = name (null for --query), format, sha256 }: the input
--            file's bytes, or the --query text's record
--   config   every option that changes what a run does: mode, k, m,
--            spec_launch, clock, seed, eps, match, trigger, ev_cost_ms,
--            ev_latency_ms, predict, predict_top, max_hops, spec_timeout,
--            query_timeout (only when set),
--            keep_candidates, set (the --set values), replay_io (the
--            cassette's digest and --miss), and the policy, verifier and
--            predictor in use (a built-in one by name and options, a file by
--            its digest, a function by where it is defined and that file's digest)
--   query    SHA-256 of the query as read from the input: the canonical JSON
--            of its record (every field of its input line)
--   run      SHA-256 of the canonical JSON of { version, agent, config }: two
--            records come from the same run exactly when it is equal (the
--            input is not in it: a resumed run may read a grown input file;
--            every record's query digest ties it to its query)
--
-- Digests are SHA-256 from OpenSSL's libcrypto (specula.crypto). The part of
-- the text that is the same for every record of a run is encoded once
-- (M.build) and each record's line splices its query digest into it (M.text),
-- so a record costs one string concatenation.
local json = require "specula.json"
local cenc_buf = json.cenc_buf
local enc_text = require("specula.internal.core").C.sp_jsonenc_text

local type, tostring, pairs, ipairs, next, getmetatable, setmetatable, pcall =
  type, tostring, pairs, ipairs, next, getmetatable, setmetatable, pcall
local format, sub, concat, sort = string.format, string.sub, table.concat, table.sort

local M = {}

local crypto_mod
local function crypto()
  crypto_mod = crypto_mod or require("specula.crypto")
  return crypto_mod
end

-- SHA-256 of a string as 64 hex digits
local function sha256_hex(s)
  return crypto().sha256_hex(s)
end
M.sha256_hex = sha256_hex

local file_digests = {}
-- SHA-256 of a file's bytes (cached per path for the life of the process:
-- a run's files do not change under it), or nil, err
local function file_digest(path)
  local d = file_digests[path]
  if d then return d end
  local err
  d, err = crypto().sha256_file(path)
  if not d then return nil, err end
  file_digests[path] = d
  return d
end
M.file_digest = file_digest

local function basename(path) return (tostring(path):match("([^/]+)/*$")) or tostring(path) end
M.basename = basename

-- ---- describing what a run uses --------------------------------------------

-- Built-in verifiers and predictors tag themselves (verify.jaccard(0.6),
-- predict.pattern{...}) through specula.internal.tags: value -> { name, options }.
local tags = require("specula.internal.tags").of

--- Tag a built-in value with its name and options (specula.internal.tags.tag).
M.tag = require("specula.internal.tags").tag

-- Where a Lua function is defined, as "file.lua:LINE", and that file's
-- digest (nil for a function not loaded from a file).
local function fn_where(fn)
  local ok, info = pcall(debug.getinfo, fn, "S")
  if not ok or type(info) ~= "table" then return "function", nil end
  local src = info.source or ""
  if info.what == "C" then return "C function", nil end
  if src:sub(1, 1) == "@" then
    local path = src:sub(2)
    return format("%s:%d", basename(path), info.linedefined or 0), (file_digest(path))
  end
  return format("(chunk):%d", info.linedefined or 0), sha256_hex(src)
end

local describe
-- A data picture of any Lua value, for a digest: functions by where they
-- are defined, tables walked (cycles and depth cut), other values by type.
local function picture(v, depth, seen)
  local t = type(v)
  if t == "string" or t == "boolean" then return v end
  if t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return tostring(v) end
    return v
  end
  if t == "function" then return describe(v) end
  if t ~= "table" then return "<" .. t .. ">" end
  if v == json.null then return v end
  if tags[v] then return describe(v) end
  if seen[v] then return "<cycle>" end
  if depth > 12 then return "<deep>" end
  seen[v] = true
  local out, n, keys = {}, 0, {}
  for k in pairs(v) do n = n + 1 keys[n] = k end
  local is_array = n > 0
  for i = 1, n do if v[i] == nil then is_array = false break end end
  if is_array and n == #v then
    for i = 1, n do out[i] = picture(v[i], depth + 1, seen) end
    out = json.array(out)
  else
    for _, k in ipairs(keys) do out[tostring(k)] = picture(v[k], depth + 1, seen) end
  end
  seen[v] = nil
  return out
end

--- The description of a verifier, predictor or policy value: a tagged
-- built-in as its name (and { name, options } when it has options), a Lua
-- function as { ["function"] = "file.lua:LINE", sha256 = that file's
-- digest }, a callable table by its __call, anything else by its picture.
describe = function(v)
  if v == nil then return json.null end
  local tag = tags[v]
  if tag then
    if tag.options == nil or next(tag.options) == nil then return tag.name end
    return { name = tag.name, options = picture(tag.options, 0, {}) }
  end
  if type(v) == "function" then
    local where, digest = fn_where(v)
    return { ["function"] = where, sha256 = digest or json.null }
  end
  if type(v) == "table" then
    local mt = getmetatable(v)
    if type(mt) == "table" and type(mt.__call) == "function" and not tags[mt.__call] then
      local where, digest = fn_where(mt.__call)
      return { callable = where, sha256 = digest or json.null }
    end
  end
  return picture(v, 0, {})
end
M.describe = describe

--- A file a user named (--policy, verifier=FILE, predictor=FILE):
-- { file = name, sha256 = digest }.
function M.file(path)
  return { file = basename(path), sha256 = file_digest(path) or json.null }
end

--- The policy of a run (specula.policy.build's object): a file by its
-- digest, anything else by the digest of what it resolved to.
function M.policy(pol)
  if pol.file then return M.file(pol.file) end
  local ok, text = pcall(json.canonical, picture(pol.spec, 0, {}))
  return { name = pol.name, sha256 = ok and sha256_hex(text) or json.null }
end

-- ---- the agent's script and its modules ------------------------------------

local ffi = require("ffi")
pcall(ffi.cdef, "char *realpath(const char *path, char *resolved); void free(void *p);")
local function realpath(p)
  local ok, r = pcall(ffi.C.realpath, p, nil)
  if not ok or r == nil then return p end
  local s = ffi.string(r)
  ffi.C.free(r)
  return s
end
-- (the file a path names, as an absolute path without links; the path as
-- given when there is none)
M.realpath = realpath

-- The script's directory search entry (cli.add_script_dir), the modules
-- found there (name -> file), whether the agent's provenance is fixed.
local track = { entry = nil, dir = nil, loaded = {}, order = {}, frozen = false, warned = {} }

-- Called for every module `require` loads from a Lua file: if it is the
-- file beside the script, note it (after the run's provenance was fixed, a
-- warning: its digest is not in the records).
local function note_module(name)
  if not track.entry then return end
  local found = package.searchpath(name, package.path)
  local here = found and package.searchpath(name, track.entry)
  if not here or realpath(found) ~= realpath(here) then return end
  if track.loaded[name] then return end
  track.loaded[name] = found
  track.order[#track.order + 1] = name
  if track.frozen and not track.warned[name] then
    track.warned[name] = true
    require("specula.internal.output").stderr(format("specula: warning: module '%s' beside the script was loaded "
      .. "after the run started: its digest is not in the records' provenance (require it at the top of the "
      .. "script)\n", name))
  end
end

-- Called for every file `dofile` runs: a script that includes a file that
-- way depends on it as on a module. Named "dofile:PATH", PATH as the script
-- gave it (relative to the script's directory when it lies there).
local function note_dofile(path)
  if type(path) ~= "string" then return end
  local dir = track.dir
  local shown = path
  if dir and sub(path, 1, #dir + 1) == dir .. "/" then shown = sub(path, #dir + 2) end
  local name = "dofile:" .. shown
  if track.loaded[name] then return end
  track.loaded[name] = path
  track.order[#track.order + 1] = name
  if track.frozen and not track.warned[name] then
    track.warned[name] = true
    require("specula.internal.output").stderr(format("specula: warning: '%s' was run by dofile after the run started: "
      .. "its digest is not in the records' provenance (run it at the top of the script)\n", path))
  end
end

--- Follow the modules a script loads from its directory `dir` (entry:
-- its package.path entries) and the files it runs with dofile. The Lua file
-- searcher and dofile are wrapped once.
function M.track_dir(dir, entry, script)
  track.dir, track.entry = dir, entry
  track.script = script or track.script
  if track.wrapped then return end
  track.wrapped = true
  local raw_dofile = dofile
  _G.dofile = function(path)
    note_dofile(path)
    return raw_dofile(path)
  end
  local loaders = package.loaders or package.searchers
  local lua_searcher = loaders[2]
  loaders[2] = function(name, ...)
    local r = lua_searcher(name, ...)
    if type(r) == "function" then note_module(name) end
    return r
  end
end

-- An agent may be split into modules beside it: `require "helpers"` finds
-- DIR/helpers.lua from any working directory. Searched last, so no file
-- beside a script can stand in for specula's or the system's modules; a
-- directory whose name holds package.path's ';' or '?' is not added, nor
-- one already there. (Here, below the commands that run scripts —
-- specula.cmd.run, specula.lab.verifiers, specula.script — since the entry
-- and the following of its modules go together.)
function M.add_script_dir(script)
  local dir = script:match("^(.*)/[^/]*$") or "."
  if dir == "" then dir = "/" end
  if dir:find("[;?]") then return end
  local entry = dir .. "/?.lua;" .. dir .. "/?/init.lua"
  -- the modules found there go into the records' provenance
  M.track_dir(dir, entry, script)
  if (";" .. package.path .. ";"):find(";" .. entry .. ";", 1, true) then return end
  package.path = package.path .. ";" .. entry
end

--- The agent part: { script = name, sha256, modules = { name = digest } }
-- (script: by default the one `specula run` started). Fixes the list of
-- modules (one loaded later is warned about), unless keep_open (specula.run
-- called from a program: it may load more and run again).
function M.agent(script, keep_open)
  if not keep_open then track.frozen = true end
  script = script or track.script
  if script == nil then
    -- specula.run from a script specula did not start (plain luajit)
    return { script = json.null, sha256 = json.null, modules = json.object({}) }
  end
  local mods = {}
  for _, name in ipairs(track.order) do
    mods[name] = file_digest(track.loaded[name]) or json.null
  end
  return { script = basename(script), sha256 = file_digest(script) or json.null, modules = json.object(mods) }
end

-- ---- the configuration --------------------------------------------------------

local function or_null(v) if v == nil then return json.null end return v end

--- The digest of a cassette directory (its cassette-NNNN.jsonl files, in
-- order, each by name and digest), leaving out `skip` (the file this run
-- records into).
function M.cassette(dir, skip)
  local C = require("specula.internal.core").C
  local h = crypto().hasher()
  local i = 1
  while true do
    local path = format("%s/cassette-%04d.jsonl", dir, i)
    if C.sp_host_path_kind(path) ~= 1 then break end
    if path ~= skip then
      h:add(format("cassette-%04d.jsonl ", i)):add(crypto().sha256_file(path) or "?"):add("\n")
    end
    i = i + 1
  end
  return h:hex()
end

-- A picture with every string as an output writes it (a --set value may
-- hold a declared secret: the records must not), before it is digested, so
-- the text and its digest agree.
local function scrubbed(v)
  local clean = require("specula.internal.output").clean
  local function walk(x)
    if type(x) == "string" then return clean(x) end
    if type(x) == "table" and x ~= json.null then
      for k, y in pairs(x) do x[k] = walk(y) end
    end
    return x
  end
  return walk(v)
end

--- The configuration of a run (specula.run.runner's make_run): every option
-- that changes what it does, each as it applies (defaults filled in; k and m
-- as the mode uses them, as the records' stats say). st: the state of the
-- open cassette (the runner's to hand over), or nil: a replay names its tape.
function M.config(agent, o, run, D, clock, st)
  local seq = o.mode == "sequential"
  local k = seq and 1 or o.k
  if k == -1 or k == math.huge then k = "inf" elseif k == 0 then k = "auto" end
  local verifier
  if type(o.verifier) == "table" then
    verifier = o.verifier.desc
  else
    verifier = describe(agent.verify or require("specula.internal.exact"))
    local own, any = {}, false
    for name, t in pairs(type(agent.tools) == "table" and agent.tools or {}) do
      if type(t) == "table" and t.verify ~= nil then own[tostring(name)] = describe(t.verify) any = true end
    end
    if any then verifier = { default = verifier, tools = own } end
  end
  local predictor = "off"
  if run.pf then
    predictor = type(o.predictor) == "table" and o.predictor.desc or describe(agent.predict)
  end
  local match = o.match or agent.match or "exact"
  if type(match) == "table" then match = { similar = describe(match.similar) } end
  local replay = json.null
  if st and st.replay then
    replay = { sha256 = M.cassette(st.replay, st.path), miss = st.miss }
  end
  return {
    mode = o.mode, k = k, m = seq and 1 or (o.m or D.m),
    spec_launch = o.mode == "spechop" and (o.spec_launch or "eager") or "slot",
    clock = o.clock or clock, seed = o.seed or D.seed, eps = o.eps or D.eps,
    predict = run.pf and "on" or "off", predictor = predictor,
    match = match, trigger = o.trigger or "both", ev_cost_ms = o.ev_cost_ms or D.ev_cost_ms,
    ev_latency_ms = or_null(o.ev_latency_ms), predict_top = o.predict_top or D.predict_top,
    max_hops = o.max_hops or D.max_hops, spec_timeout = or_null(o.spec_timeout),
    -- (only when set: files written before the option existed still resume)
    query_timeout = (o.query_timeout or 0) > 0 and o.query_timeout or nil,
    keep_candidates = o.keep_candidates and true or false,
    set = json.object(scrubbed(picture(o.set or {}, 0, {}))),
    policy = M.policy(run.policy), verifier = verifier, replay_io = replay,
  }
end

-- ---- the input and its queries ----------------------------------------------

--- The input part: { file, format, sha256 } of --input FILE (its bytes), or
-- of a --query (its one record; src: specula.run.inputs' source).
function M.input(o, src)
  if o.input then
    return { file = basename(o.input), format = o.format or "auto", sha256 = file_digest(o.input) or json.null }
  end
  local q = src and src.list and src.list[1]
  return { file = json.null, format = "query", sha256 = q and M.query(q) or sha256_hex("") }
end

--- The digest of a query as read: the canonical JSON of its record, kept
-- in q.digest (computed once, before the agent sees the record).
function M.query(q)
  local d = q.digest
  if d then return d end
  local rec = q.record
  if rec == nil then rec = { id = q.id, query = q.query } end
  -- (the encoder returns a failure, where json.canonical raises it: a
  -- protected call here ended the compiled trace of every query's set-up,
  -- which cannot return into a pcall frame below where it started; and
  -- the text is digested where the encoder left it, no Lua string of it
  -- made, hashed and collected for each query)
  local st, len = cenc_buf(rec, true)
  if st then
    d = crypto().sha256_hex_at(enc_text(st), len)
  else
    -- a record that is not JSON data (a --query that is not UTF-8): its bytes
    d = sha256_hex("\0" .. tostring(q.id) .. "\0" .. tostring(q.query))
  end
  q.digest = d
  return d
end

-- ---- one run's provenance -----------------------------------------------------

-- The fields a run's digest covers: not the input (one run may span inputs:
-- a resumed run whose input file grew; each record's query digest ties it
-- to its query, and merge compares the input digests).
local FIELDS = { "version", "agent", "config" }
M.FIELDS = FIELDS

--- The provenance of one run (configuration): `t` its table without query
-- and run, `run` its digest, `pre`/`post` the canonical text around the
-- query digest (M.raw).
function M.build(version, agent, input, config)
  local t = { version = version, agent = agent, input = input, config = config }
  local body = json.canonical({ version = version, agent = agent, config = config })
  local run = sha256_hex(body)
  -- keys sorted: agent, config, input, query, run, version
  local pre = format('{"agent":%s,"config":%s,"input":%s,"query":"', json.canonical(agent), json.canonical(config),
    json.canonical(input))
  local post = format('","run":"%s","version":%s}', run, json.canonical(version))
  t.run = run
  return { t = t, run = run, pre = pre, post = post, body = body }
end

--- The record's provenance (a json.raw value: encoded verbatim).
local raw_mt = json.raw_mt
function M.raw(built, qdigest)
  return setmetatable({ built.pre, qdigest, built.post }, raw_mt)
end

--- A later record's provenance in the same stream: its query and its run's
-- digest only, {"query":Q,"run":R} (a json.raw value). Readers take the
-- rest from the run's full provenance above it (M.reader).
local function short_post(built)
  local post = built.short_post
  if not post then
    post = format('","run":"%s"}', built.run)
    built.short_post = post
  end
  return post
end
M.short_post = short_post   -- (the text after the query digest)
function M.raw_short(built, qdigest)
  return setmetatable({ '{"query":"', qdigest, short_post(built) }, raw_mt)
end

-- ---- reading it back --------------------------------------------------------

local function show(v)
  if v == nil then return "absent" end
  local ok, s = pcall(json.canonical, v)
  if not ok then s = tostring(v) end
  if #s > 80 then s = s:sub(1, 77) .. "..." end
  return s
end
M.show = show

-- The first path where a and b differ (walking keys in `order`, then the
-- rest sorted), with both values; nil when equal.
local ORDER = {
  [""] = { "version", "agent", "input", "config" },
  config = { "mode", "k", "m", "spec_launch", "clock", "seed", "eps", "predict", "predictor", "match", "trigger",
             "ev_cost_ms", "ev_latency_ms", "predict_top", "policy", "verifier", "max_hops", "spec_timeout", "query_timeout", "set",
             "keep_candidates", "replay_io" },
  agent = { "sha256", "modules", "script" },
  input = { "sha256", "format", "file" },
}
local function diff(a, b, path, top)
  if type(a) ~= "table" or type(b) ~= "table" or a == json.null or b == json.null then
    if a == b then return nil end
    if type(a) == "table" and type(b) == "table" then return nil end
    return path, a, b
  end
  local keys, seen = {}, {}
  for _, k in ipairs(ORDER[top or path] or {}) do
    if not seen[k] then seen[k] = true keys[#keys + 1] = k end
  end
  local rest = {}
  for k in pairs(a) do if not seen[k] then seen[k] = true rest[#rest + 1] = tostring(k) end end
  for k in pairs(b) do if not seen[k] then seen[k] = true rest[#rest + 1] = tostring(k) end end
  sort(rest)
  for _, k in ipairs(rest) do keys[#keys + 1] = k end
  for _, k in ipairs(keys) do
    local p = path == "" and k or (path .. "." .. k)
    local x, y = a[k], b[k]
    if x == nil and type(k) == "string" and tonumber(k) then x = a[tonumber(k)] end
    if y == nil and type(k) == "string" and tonumber(k) then y = b[tonumber(k)] end
    if x == nil or y == nil then
      if x ~= y then return p, x, y end
    else
      local dp, dx, dy = diff(x, y, p)
      if dp then return dp, dx, dy end
    end
  end
  return nil
end

--- The first field where two provenances differ among `fields` (default:
-- those of the run digest): "provenance.config.k", value in a, value in b;
-- nil when equal.
function M.diff(a, b, fields)
  local ta, tb = {}, {}
  for _, k in ipairs(fields or FIELDS) do ta[k], tb[k] = a[k], b[k] end
  local p, x, y = diff(ta, tb, "", "")
  if not p then return nil end
  return "provenance." .. p, x, y
end

local checked = {}
--- Whether a provenance read from a file is whole and its run digest is the
-- digest of its fields; nil and why otherwise.
function M.check(p)
  if type(p) ~= "table" then return nil, "provenance is not an object" end
  for _, k in ipairs({ "version", "agent", "input", "config", "query" }) do
    if p[k] == nil then return nil, "provenance has no " .. k end
  end
  if type(p.run) ~= "string" then return nil, "provenance has no run digest" end
  local ok, body = pcall(json.canonical, { version = p.version, agent = p.agent, config = p.config })
  if not ok then return nil, "provenance cannot be read: " .. tostring(body) end
  local want = checked[body]
  if not want then
    want = sha256_hex(body)
    checked[body] = want
  end
  if want ~= p.run then
    return nil, format("provenance.run is %s but its fields digest to %s (the record was edited)", p.run:sub(1, 12),
      want:sub(1, 12))
  end
  return true
end

--- The one check every command that reads records makes of a record read
-- from FILE at LINE (report, compare, merge, resume, the labs): true when it
-- carries no provenance (an older specula wrote it) or a whole one; nil and
-- "FILE:LINE: why" when its provenance was edited (or is not an object).
-- One function so that no reader accepts what another refuses.
function M.check_record(rec, file, line)
  if type(rec) ~= "table" then return true end
  local p = rec.provenance
  if p == nil then return true end
  local ok, why = M.check(p)
  if ok then return true end
  return nil, format("%s:%s: %s", tostring(file), tostring(line), why)
end

local function short(d) return type(d) == "string" and d:sub(1, 12) or "?" end

-- ---- a records file, read in order -------------------------------------------
--
-- In a records stream the first record of each run carries its whole
-- provenance; the later ones carry {"query":Q,"run":R} (M.raw_short). A
-- reader expands such a record from the latest whole provenance of the same
-- run above it in the same file, so what comes after reading sees every
-- record's whole provenance, as before.

local FULL_KEYS = { "version", "agent", "input", "config" }

-- A SHA-256 digest as specula writes it: 64 lowercase hex digits.
local function is_digest(v) return type(v) == "string" and #v == 64 and not v:find("[^0-9a-f]") end
M.is_digest = is_digest

-- Whether p (a provenance object) names its run only: none of the parts a
-- whole one has.
local function names_run_only(p)
  for _, k in ipairs(FULL_KEYS) do if p[k] ~= nil then return false end end
  return true
end

local reader_mt = {}
reader_mt.__index = reader_mt

--- The reader of one records file: reader:expand(rec, file, line) in file
-- order, for every record read (M.reader() again for the next file).
function M.reader()
  return setmetatable({ full = {}, bad = {} }, reader_mt)
end

--- Check the provenance of a record read from FILE at LINE and give a
-- short one its run's whole provenance (rec.provenance replaced by a new
-- table sharing the version, agent, input and config of the whole one):
-- true, or nil and "FILE:LINE: why". A record without provenance (an older
-- specula wrote it) is true; a whole one is checked as M.check_record does
-- (the same words) and becomes its run's provenance for the records below.
-- Returns true, short (whether it was short) on success.
function reader_mt:expand(rec, file, line)
  if type(rec) ~= "table" then return true end
  local p = rec.provenance
  if p == nil then return true end
  if type(p) ~= "table" or p == json.null or not names_run_only(p) then
    local ok, why = M.check_record(rec, file, line)
    if not ok then
      if type(p) == "table" and type(p.run) == "string" then self.bad[p.run] = format("%s:%s", tostring(file), tostring(line)) end
      return nil, why
    end
    self.full[p.run] = p
    return true, false
  end
  local where = format("%s:%s", tostring(file), tostring(line))
  for k in pairs(p) do
    if k ~= "query" and k ~= "run" then
      return nil, format("%s: provenance has '%s' beside its query and run: a record's provenance is whole "
        .. "(version, agent, input, config, query, run) or names its run (query and run only)", where,
        json.utf8_clean(tostring(k)))
    end
  end
  if p.run == nil then return nil, where .. ": provenance has no run digest" end
  if p.query == nil then return nil, where .. ": provenance has no query" end
  if not is_digest(p.run) then
    return nil, format("%s: provenance.run is not a SHA-256 digest (64 hex digits): %s", where, show(p.run))
  end
  if not is_digest(p.query) then
    return nil, format("%s: provenance.query is not a SHA-256 digest (64 hex digits): %s", where, show(p.query))
  end
  local f = self.full[p.run]
  if not f then
    local bad = self.bad[p.run]
    if bad then
      return nil, format("%s: provenance.run %s: the run's full provenance, at %s, was refused (see there)", where,
        short(p.run), bad)
    end
    return nil, format("%s: provenance.run %s: the run's full provenance is not in this file above this record "
      .. "(the first record of each run carries it: was the file cut or filtered? keep each run's first record)",
      where, short(p.run))
  end
  rec.provenance = { version = f.version, agent = f.agent, input = f.input, config = f.config, query = p.query,
                     run = p.run }
  return true, true
end

-- The position of the quote closing the JSON string that opens at s.
local find, byte = string.find, string.byte
local function string_end(text, s)
  local j = s + 1
  while true do
    local q = find(text, '["\\]', j)
    if not q then return nil end
    if byte(text, q) == 92 then j = q + 2 else return q end
  end
end

--- The top-level member `name` of a record's JSON line when its value is
-- an object: the positions of its first and last bytes, or nil. Strings are
-- skipped whole and only keys of the outer object count, so a nested
-- object or a string holding the same text is never taken.
local function member(text, name)
  local depth, i = 0, 1
  while true do
    local s, _, c = find(text, '([{}%[%]"])', i)
    if not s then return nil end
    if c == '"' then
      local e = string_end(text, s)
      if not e then return nil end
      if depth == 1 and sub(text, s + 1, e - 1) == name then
        local _, ce = find(text, "^%s*:%s*", e + 1)
        if ce then
          -- the key: its value runs to the brace that closes it
          if byte(text, ce + 1) ~= 123 then return nil end
          local d, j = 0, ce + 1
          repeat
            local t, _, tc = find(text, '([{}%[%]"])', j)
            if not t then return nil end
            if tc == '"' then
              local q = string_end(text, t)
              if not q then return nil end
              j = q + 1
            else
              d = d + ((tc == "{" or tc == "[") and 1 or -1)
              j = t + 1
            end
          until d == 0
          return ce + 1, j - 1
        end
      end
      i = e + 1
    else
      depth = depth + ((c == "{" or c == "[") and 1 or -1)
      i = s + 1
    end
  end
end
M.member = member

--- Lines written again (merge, repair, a resume that drops lines), in
-- their new order, so that the file follows the rule: a run's first record
-- carries its whole provenance, and so does the next one whose input
-- differs from the last whole one written; the others name their run only
-- (with `keep`, a whole one stays whole: repair and resume change only what
-- they must). Returns line(text, rec, short) -> the text to write: rec as a
-- reader expanded it, short whether its line names its run only.
function M.restream(keep)
  local last = {}   -- run -> the canonical input of its last whole provenance written
  return function(text, rec, short_line)
    local p = type(rec) == "table" and rec.provenance or nil
    if type(p) ~= "table" or type(p.run) ~= "string" or p.input == nil then return text end
    local input = json.canonical(p.input)
    local splice
    if last[p.run] ~= input then
      last[p.run] = input
      if not short_line then return text end
      splice = json.canonical({ version = p.version, agent = p.agent, input = p.input, config = p.config,
                                query = p.query, run = p.run })
    else
      if short_line or keep then return text end
      splice = format('{"query":"%s","run":"%s"}', tostring(p.query), p.run)
    end
    local a, b = member(text, "provenance")
    if not a then return text end
    return sub(text, 1, a - 1) .. splice .. sub(text, b + 1)
  end
end

local function what_of(v)
  if v == nil or v == json.null then return "none" end
  if type(v) == "string" then return v end
  if type(v) ~= "table" then return tostring(v) end
  if v.file then return v.file .. " " .. short(v.sha256) end
  if v.name and v.options then
    local ok, s = pcall(json.canonical, v.options)
    return v.name .. (ok and s or "")
  end
  if v.name then return v.name .. " " .. short(v.sha256) end
  if v["function"] then return "function " .. v["function"] .. " " .. short(v.sha256) end
  if v.callable then return "callable " .. v.callable .. " " .. short(v.sha256) end
  if v.default then
    local parts = { "default " .. what_of(v.default) }
    local names = {}
    for k in pairs(v.tools or {}) do names[#names + 1] = k end
    sort(names)
    for _, k in ipairs(names) do parts[#parts + 1] = k .. " " .. what_of(v.tools[k]) end
    return concat(parts, ", ")
  end
  return show(v)
end

--- One line naming a run: its digest, then what it ran.
function M.line(p)
  local a, i, c = p.agent or {}, p.input or {}, p.config or {}
  local nmod = 0
  for _ in pairs(type(a.modules) == "table" and a.modules or {}) do nmod = nmod + 1 end
  local parts = {
    format("run %s", short(p.run)),
    format("specula %s", tostring(p.version)),
    format("agent %s %s%s", tostring(a.script), short(a.sha256),
      nmod > 0 and format(" (+%d module%s)", nmod, nmod == 1 and "" or "s") or ""),
    format("input %s %s", i.file ~= nil and i.file ~= json.null and tostring(i.file) or "--query", short(i.sha256)),
  }
  local cfg = {}
  for _, k in ipairs({ "mode", "k", "m", "spec_launch", "clock", "seed", "predict" }) do
    if c[k] ~= nil then cfg[#cfg + 1] = k .. "=" .. tostring(c[k]) end
  end
  if c.predict == "on" then
    cfg[#cfg + 1] = "match=" .. tostring(c.match)
    cfg[#cfg + 1] = "trigger=" .. tostring(c.trigger)
  end
  if type(c.set) == "table" and next(c.set) then cfg[#cfg + 1] = "set=" .. show(c.set) end
  -- (a timeout decides which queries fail: said when set)
  if type(c.query_timeout) == "number" then cfg[#cfg + 1] = "query_timeout=" .. c.query_timeout end
  parts[#parts + 1] = concat(cfg, " ")
  parts[#parts + 1] = "policy " .. what_of(c.policy)
  parts[#parts + 1] = "verifier " .. what_of(c.verifier)
  parts[#parts + 1] = "predictor " .. what_of(c.predictor)
  return concat(parts, ", ")
end

-- A short text of the field `path` (M.diff's) of p: "policy forbid.lua
-- 1a2b3c4d5e6f", "seed=5", "agent agent.lua 3c4d...".
local function field_tag(p, path)
  local section, key, sub = path:match("^provenance%.([%w_]+)%.?([^%.]*)%.?([^%.]*)")
  if section == "version" then return "specula " .. tostring(p.version) end
  if section == "agent" then
    local a = p.agent or {}
    if key == "modules" and sub ~= "" then
      return "module " .. sub .. " " .. short(type(a.modules) == "table" and a.modules[sub] or nil)
    end
    return "agent " .. tostring(a.script) .. " " .. short(a.sha256)
  end
  if section == "input" then
    local i = p.input or {}
    return "input " .. (i.file ~= json.null and tostring(i.file) or "--query") .. " " .. short(i.sha256)
  end
  local c = p.config or {}
  local v = c[key]
  if type(v) == "table" and v ~= json.null then return key .. " " .. what_of(v) end
  return key .. "=" .. show(v)
end

--- Labels that tell apart runs sharing one name: for each of the n
-- provenances of the list (nil: records without one), the first field where it differs
-- from another of the list; the run digest when that is not enough.
function M.distinguish(provs, n)
  n = n or #provs
  local tags = {}
  for i = 1, n do
    local p = provs[i]
    if not p then
      tags[i] = "no provenance"
    else
      for j = 1, n do
        local q = provs[j]
        if j ~= i and q then
          local path = M.diff(p, q)
          if path then tags[i] = field_tag(p, path) break end
        end
      end
      tags[i] = tags[i] or ("run " .. short(p.run))
    end
  end
  local seen = {}
  for i = 1, n do seen[tags[i]] = (seen[tags[i]] or 0) + 1 end
  for i = 1, n do
    if seen[tags[i]] > 1 and provs[i] then tags[i] = tags[i] .. ", run " .. short(provs[i].run) end
  end
  return tags
end

--- The distinct runs of a list of records, in the order they first appear:
-- { { run = digest, prov = provenance, name = configuration, n = records,
-- files = { path = true } } }, and how many records carry none.
function M.runs(records, name_of, file_of)
  local list, at, none = {}, {}, 0
  for _, r in ipairs(records) do
    local p = type(r) == "table" and r.provenance
    if type(p) == "table" and type(p.run) == "string" then
      local e = at[p.run]
      if not e then
        e = { run = p.run, prov = p, name = name_of and name_of(r) or nil, n = 0, files = {} }
        at[p.run] = e
        list[#list + 1] = e
      end
      e.n = e.n + 1
      local f = file_of and file_of(r)
      if f then e.files[f] = true end
    else
      none = none + 1
    end
  end
  return list, none
end

--- The lines of `specula compare` and `report` for those runs.
function M.lines(runs, none)
  local out = {}
  if #runs > 0 then
    out[#out + 1] = format("runs (from the records' provenance; %d distinct):", #runs)
    for _, e in ipairs(runs) do
      local l = M.line(e.prov)
      out[#out + 1] = "  " .. l:gsub("^(run %x+), ", "%1 (" .. tostring(e.name or "?"):gsub("%%", "%%%%") .. "): ", 1)
    end
  end
  if none > 0 then
    out[#out + 1] = format("(%d record%s without provenance: written by an older specula; where %s from is unknown)",
      none, none == 1 and "" or "s", none == 1 and "it came" or "they came")
  end
  return out
end

return M
