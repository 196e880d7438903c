-- specula.run.opts: the command line of `specula run` (its usage text, its
-- options, the queries it names) and the names of the engine's run settings.
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"
local optslib = require "specula.internal.domains"
local argv = require "specula.internal.argv"
local C = core.C

local type, tostring, tonumber, ipairs, error, pcall, getmetatable = type, tostring, tonumber, ipairs, error, pcall,
  getmetatable

local M = {}

M.MODES = { sequential = C.SP_MODE_SEQUENTIAL, window = C.SP_MODE_WINDOW, spechop = C.SP_MODE_SPECHOP }
M.LAUNCH = { eager = C.SP_LAUNCH_EAGER, slot = C.SP_LAUNCH_SLOT }
M.MATCH = { exact = C.SP_MATCH_EXACT, name_only = C.SP_MATCH_NAME_ONLY, similar = C.SP_MATCH_SIMILAR }
M.TRIGGER = { start = C.SP_TRIGGER_START, tool_name = C.SP_TRIGGER_TOOL_NAME,
              both = C.SP_TRIGGER_START + C.SP_TRIGGER_TOOL_NAME }

M.SYNOPSIS = "SCRIPT.lua [--query TEXT | --input FILE] [options]"
M.ABOUT = [[
Runs the agent a script returns over queries (records, summary), or the
script itself when it returns nothing (a plain Lua program, its main chunk
inside the main task). Options may stand before or after the script; the
arguments after it reach the script too (`...`).]]
M.EPILOG = [[
--compare LIST: configurations separated by ',', each [MODE][:KEY=VALUE]... where MODE is
spechop, window or sequential (default: --mode) and KEY, for that configuration only, is
  mode=MODE  k=N|inf|auto  m=N  eps=E  spec_launch=eager|slot  predict=on|off
  match=exact|name_only|similar  trigger=start|tool_name|both  ev_cost_ms=MS
  policy=FILE  verifier=NAME|FILE  predictor=NAME|FILE|off  (as --verifier, --predictor)
  label=TEXT  the row's name in the table and the records' "config" (default: the item)
Every other option applies to every configuration. A value may hold ':' (verifier=jaccard:0.7)
but not ','. Example:
  --compare "sequential,spechop:k=inf:policy=forbid.lua,spechop:k=inf:policy=early.lua:label=early"
Every record carries its provenance (version, digests of the agent, its modules, the input and
the query, the whole configuration): whole in the first record of each run in the file, its query
and run's digest in the later ones; resuming --out checks it and refuses records of another run.]]

local function usage_error(msg) sched.usage_error("specula run: " .. msg) end
M.usage_error = usage_error

-- Shared numeric options (k, m, eps, seed, concurrency, ...): their domains
-- live in one C function (engine/sp_opt.c) that `specula theory` uses too.
local function parse_opt(name, text)
  local v, err = optslib.parse(name, text)
  if not v then usage_error(err) end
  return v
end
M.parse_opt = parse_opt

-- The window's encoding of k (sp_api.h): SP_K_UNBOUNDED, SP_K_AUTO, else
-- the count (or nil and the message).
local K_UNBOUNDED = tonumber(C.SP_K_UNBOUNDED)
local function k_of(v)
  local k, err = optslib.parse("k", v)
  if k == math.huge then return K_UNBOUNDED end
  return k, err
end

function M.parse_k(v)
  local k, err = k_of(v)
  if not k then usage_error(err) end
  return k
end

-- Converters for argv.parse: a shared option, a plain number >= lo.
local function opt(name) return function(v) return optslib.parse(name, v) end end
-- A finite number (NaN and infinity are refused: they reached the records'
-- provenance, which JSON cannot hold); whole: an integer.
local function num(flag, lo, whole)
  return function(raw)
    local v = tonumber(raw)
    if not v or v ~= v or v == math.huge or v == -math.huge or (lo and v < lo)
      or (whole and v ~= math.floor(v)) then
      return nil, flag .. " expects a " .. (whole and "whole " or "") .. "number" .. (lo and (" >= " .. lo) or "")
        .. ", got '" .. raw .. "'"
    end
    return v
  end
end
local one_of = argv.one_of

local D = optslib.DEFAULTS
local function set_kv(kv, o)
  local k, v = kv:match("^([^=]+)=(.*)$")
  if not k then return nil, "--set expects key=value, got '" .. kv .. "'" end
  o.set[k] = tonumber(v) or (v == "true" and true) or (v == "false" and false) or v
  return true
end
local function shard_of(s)
  if s == "auto" then return "auto" end   -- resolved from the scheduler's environment (specula.run.shard)
  local si, sn = s:match("^(%d+)/(%d+)$")
  si, sn = tonumber(si), tonumber(sn)
  if not si or sn < 1 or si >= sn then return nil, "--shard expects i/n with 0 <= i < n, or auto, got '" .. s .. "'" end
  return { si, sn }
end

-- The options of `specula run`, one entry each (specula.internal.argv): the parser,
-- the defaults and the usage text come from this list.
M.OPTIONS = {
  { "--query", key = "query", arg = "TEXT", help = "run one query" },
  { "--input", key = "input", arg = "FILE",
    help = 'JSONL {"id", "query", ...} per line (or a HotpotQA/2Wiki/MuSiQue file)' },
  { "--format", key = "format", arg = "NAME", shown = "auto",
    convert = one_of({ auto = true, jsonl = true, hotpotqa = true, ["2wiki"] = true, musique = true,
      conversations = true }, "--format must be auto, jsonl, hotpotqa, 2wiki, musique or conversations"),
    help = "input format: auto, jsonl, hotpotqa, 2wiki, musique, conversations" },
  { "--mode", key = "mode", arg = "MODE", default = "spechop",
    convert = one_of(M.MODES, "--mode must be spechop, window or sequential"),
    help = "spechop, window, sequential" },
  { "--k", key = "k", arg = "N|inf|auto", default = D.k, convert = k_of, help = "active threads" },
  { "--m", key = "m", arg = "N", default = D.m, convert = opt("m"), help = "candidates kept per speculator call" },
  { "--eps", key = "eps", arg = "E", default = D.eps, convert = opt("eps"), help = "starvation risk for --k auto" },
  { "--seed", key = "seed", arg = "N", default = D.seed, convert = opt("seed"),
    help = "seed of the simulated backend's keyed draws" },
  { "--concurrency", key = "concurrency", arg = "N", default = D.concurrency, convert = opt("concurrency"),
    help = "queries in flight at once" },
  { "--out", key = "out", arg = "FILE", shown = "stdout",
    help = "write results here (JSONL); ids already in FILE are skipped; - is stdout (--compare without --out keeps none)" },
  { "--trace", key = "trace", arg = "FILE", help = "Chrome trace-event JSON (Perfetto, chrome://tracing); - is stdout" },
  { "--set", arg = "key=value", convert = set_kv, default = nil, shown = "none",
    help = "a value for ctx.set (repeatable)" },
  { "--policy", key = "policy", arg = "FILE", shown = "the agent's",
    help = "eligibility policy (overrides the agent's)" },
  { "--verifier", key = "verifier", arg = "V", shown = "the agent's",
    help = "the verifier of every tool, over the agent's: exact, normalized, spechop,\n"
      .. "name_only, jaccard, jaccard:T, or a Lua file returning\nfunction(predicted, actual, ctx) -> ok, reason" },
  { "--predictor", key = "predictor", arg = "P", shown = "the agent's",
    help = "the action predictor, over the agent's: pattern, ngram, ngram:N, learned,\n"
      .. "learned:MODEL.json, off, or a Lua file returning a predictor (a function\nor a callable table)" },
  { "--max-hops", key = "max_hops", arg = "N", default = D.max_hops, convert = num("--max-hops", 1, true),
    help = "fail a trajectory longer than N hops" },
  { "--spec-timeout", key = "spec_timeout", arg = "MS", convert = num("--spec-timeout", 0),
    help = "a speculator slower than this counts as failed" },
  { "--query-timeout", key = "query_timeout", arg = "MS", convert = num("--query-timeout", 0),
    help = "a query with no answer MS after its start fails, its calls cancelled\n"
      .. "(on the run's clock; the error names the call it waited for)" },
  { "--clock", key = "clock", arg = "real|virtual", shown = "real",
    convert = one_of({ real = true, virtual = true }, "--clock must be real or virtual"),
    help = "virtual: time jumps to the next deadline when nothing can run, so a\n"
      .. "simulated run takes no real waiting; every reported time is virtual ms;\nreal I/O (HTTP, MCP) is an error" },
  { "--spec-launch", key = "spec_launch", arg = "WHEN", shown = "eager",
    convert = one_of(M.LAUNCH, "--spec-launch must be eager or slot"),
    help = "eager (a speculator starts with its target call, k bounds threads)\n"
      .. "or slot (it starts when a thread slot is free; Alg. 2 as written)" },
  { "--shard", key = "shard", arg = "i/n|auto", convert = shard_of,
    help = "run only queries whose index is i modulo n; auto: i and n from a Slurm\n"
      .. "job array or a Kubernetes Indexed Job (docs/experiments.md)" },
  { "--shard-count", key = "shard_count", arg = "N", help = "with --shard auto under Kubernetes: the Job's completions" },
  { "--compare", key = "compare", arg = "LIST", help = "run every query under each configuration of LIST (see below)" },
  { "--summary", key = "summary", arg = "FILE", help = "with --compare: also write the table as JSON; - is stdout" },
  { "--predict", key = "predict", arg = "on|off", shown = "on if there is a predictor",
    convert = one_of({ on = true, off = true }, "--predict must be on or off"),
    help = "action speculation with the predictor (--predictor's, else the agent's; on\nwithout one is an error)" },
  { "--match", key = "match", arg = "MODE", shown = "exact",
    convert = one_of(M.MATCH, "--match must be exact, name_only or similar"),
    help = "exact (lossless), name_only or similar (both lossy)" },
  { "--trigger", key = "trigger", arg = "WHEN", shown = "both",
    convert = one_of(M.TRIGGER, "--trigger must be start, tool_name or both"),
    help = "start, tool_name or both: when predictions fire" },
  { "--ev-cost-ms", key = "ev_cost_ms", arg = "MS", shown = D.ev_cost_ms, convert = num("--ev-cost-ms", 0),
    help = "latency one unit of tool cost is worth, for the EV gate" },
  { "--ev-latency-ms", key = "ev_latency_ms", arg = "MS", shown = "live", convert = num("--ev-latency-ms", 0),
    help = "fixed estimate of latency saved per hit" },
  { "--predict-top", key = "predict_top", arg = "N", shown = D.predict_top, convert = num("--predict-top", 1, true),
    help = "predictions considered per step" },
  { "--debug", key = "debug", flag = true, help = "check that update() never mutates its input" },
  { "--retry-failed", key = "retry_failed", flag = true,
    help = "when resuming --out, run again the queries whose records carry an error" },
  { "--keep-candidates", key = "keep_candidates", flag = true,
    help = "each record carries the (speculated candidate, observation) pairs the\n"
      .. "verifier judged (field \"candidates\", for `specula verifiers RESULTS`)" },
  { "--record", key = "record", arg = "DIR",
    help = "write every model, HTTP, MCP and speculator exchange to the cassette DIR" },
  { "--replay-io", key = "replay_io", arg = "DIR",
    help = "serve those exchanges from the cassette DIR with their recorded timing" },
  { "--miss", key = "miss", arg = "MODE", shown = "error", convert = function(v)
      return one_of(require("specula.cassette").MISS, "--miss must be error, live or skip")(v)
    end,
    help = "a request the cassette lacks: error, live (real clock only; with\n"
      .. "--record it is added) or skip (a failed speculation; never on the\ncommitted path)" },
  { "--progress", key = "progress", flag = true, shown = "on at a terminal", help = "force the progress line on" },
  { "--quiet", key = "quiet", flag = true, help = "silence the summary" },
}
local FLAGS = argv.compile({ options = M.OPTIONS })

-- What specula.internal.argv prints of `specula run` (its usage and the hint after a
-- mistake): the fields of the command's table, which specula.cmd.run takes
-- from here, so that this module need not require the command above it.
M.COMMAND = { name = "run", synopsis = M.SYNOPSIS, about = M.ABOUT, options = M.OPTIONS, epilog = M.EPILOG }

-- Why "predict on" cannot be honoured: for specula.run, and for the CLI and
-- --compare items, where --predictor (predictor=) supplies one.
M.NO_PREDICTOR = "the agent has no predictor (give it predict = specula.predict.pattern{...} or any "
  .. "function(history, ctx))"
M.NO_PREDICTOR_CLI = "the agent has no predictor: give one with --predictor P (pattern, ngram, learned or a Lua "
  .. "file; in a --compare item predictor=P), or give the agent predict = specula.predict.pattern{...} or any "
  .. "function(history, ctx)"
M.PREDICTOR_OFF = "--predictor off leaves no predictor to speculate with"

-- `--predict on` with no predictor to honour it (--predictor's, else the
-- agent's) is a usage error naming --predictor.
function M.check_predict(o, agent)
  if o.predict ~= "on" then return end
  if o.predictor == "off" then usage_error("--predict on: " .. M.PREDICTOR_OFF) end
  if o.predictor == nil and agent.predict == nil then usage_error("--predict on: " .. M.NO_PREDICTOR_CLI) end
end

-- The value of option --NAME checked as the command line checks it (for
-- --compare's per-configuration options); a usage error otherwise.
function M.parse_flag(name, raw, where)
  local spec = FLAGS["--" .. name]
  local convert = type(spec) == "table" and spec.convert
  if not convert then return raw end
  local v, err = convert(raw, {})
  if v == nil then usage_error((where and (where .. ": ") or "") .. err) end
  return v
end

-- ---- verifiers and predictors named on the command line ---------------------

local function file_kind(p) return C.sp_host_path_kind(p) end

-- A user's Lua file by path: as given, else beside the script.
local function find_file(path, script_dir)
  if file_kind(path) == 1 then return path end
  if script_dir and path:sub(1, 1) ~= "/" and file_kind(script_dir .. "/" .. path) == 1 then
    return script_dir .. "/" .. path
  end
  return nil
end

local function load_chunk(path, what)
  local chunk, err = loadfile(path)
  if not chunk then return nil, "cannot load " .. what .. " file '" .. path .. "': " .. tostring(err) end
  -- the file is the user's code: whatever it raises, the message names where
  local ok, v = require("specula.internal.sched").protect(false, chunk)
  if not ok then return nil, what .. " file '" .. path .. "' raised: " .. v end
  return v
end

M.VERIFIERS = "exact, normalized, spechop, name_only, jaccard, jaccard:T"
M.PREDICTORS = "pattern, ngram, ngram:N, learned, learned:MODEL.json, off"

--- A verifier by name or file: { value = fn, desc = its provenance } |
-- nil, err.
function M.load_verifier(spec, script_dir)
  local prov = require "specula.provenance"
  local verify = require "specula.verify"
  local builtin = { exact = verify.exact, normalized = verify.normalized, spechop = verify.spechop,
                    name_only = verify.name_only }
  local fn = builtin[spec]
  if spec == "jaccard" then fn = verify.jaccard(0.6) end
  local t = spec:match("^jaccard:(.+)$")
  if t then
    local v = tonumber(t)
    if not v or v < 0 or v > 1 then return nil, "jaccard threshold must be a number in [0, 1], got '" .. t .. "'" end
    fn = verify.jaccard(v)
  end
  if fn then return { value = fn, desc = prov.describe(fn), spec = spec } end
  local path = find_file(spec, script_dir)
  if not path then
    return nil, "unknown verifier '" .. spec .. "' (not one of " .. M.VERIFIERS .. ", nor a file)"
  end
  local v, err = load_chunk(path, "verifier")
  if v == nil and err then return nil, err end
  local mt = type(v) == "table" and getmetatable(v)
  if type(v) ~= "function" and not (mt and mt.__call) then
    return nil, "verifier file '" .. path .. "' must return a function(predicted, actual, ctx), got " .. type(v)
  end
  return { value = v, desc = prov.file(path), spec = spec }
end

--- A predictor by name or file: { value = predictor, desc = its
-- provenance } | "off" | nil, err.
function M.load_predictor(spec, script_dir)
  if spec == "off" then return "off" end
  local prov = require "specula.provenance"
  local predict = require "specula.predict"
  local p
  if spec == "pattern" then p = predict.pattern {}
  elseif spec == "ngram" then p = predict.ngram {}
  elseif spec == "learned" then p = predict.learned {}
  elseif spec:match("^learned:") then
    local path = find_file(spec:sub(9), script_dir)
    if not path then return nil, "learned: no model file '" .. spec:sub(9) .. "'" end
    local ok, v = pcall(predict.learned, { model = path })
    if not ok then return nil, (tostring(v):gsub("^specula.predict.learned: ", "")) end
    p = v
  else
    local n = spec:match("^ngram:(%d+)$")
    if n then
      if tonumber(n) < 2 then return nil, "ngram:N needs N >= 2" end
      p = predict.ngram { n = tonumber(n) }
    end
  end
  if p then return { value = p, desc = prov.describe(p), spec = spec } end
  local path = find_file(spec, script_dir)
  if not path then
    return nil, "unknown predictor '" .. spec .. "' (not one of " .. M.PREDICTORS .. ", nor a file)"
  end
  local v, err = load_chunk(path, "predictor")
  if v == nil and err then return nil, err end
  local mt = type(v) == "table" and getmetatable(v)
  if type(v) ~= "function" and not (mt and mt.__call) then
    return nil, "predictor file '" .. path .. "' must return a function(history, ctx) or a callable table, got "
      .. type(v)
  end
  return { value = v, desc = prov.file(path), spec = spec }
end

--- Load o.verifier and o.predictor when they are still names (the command
-- line's, or a --compare item's), or end with a usage error naming `where`;
-- check that a policy file given by name exists too.
function M.load_knobs(o, script, where)
  local dir = script and (script:match("^(.*)/[^/]*$") or ".")
  if type(o.verifier) == "string" then
    local v, err = M.load_verifier(o.verifier, dir)
    if not v then usage_error((where and (where .. ": ") or "--verifier: ") .. err) end
    o.verifier = v
  end
  if type(o.predictor) == "string" then
    local v, err = M.load_predictor(o.predictor, dir)
    if not v then usage_error((where and (where .. ": ") or "--predictor: ") .. err) end
    o.predictor = v
  end
  -- a --policy file that is not there is a usage mistake, as a --verifier
  -- or --predictor file that is not: exit 2 before anything runs (it ended
  -- the run with 1 once the agent was loaded)
  if type(o.policy) == "string" then
    local ok, perr = require("specula.policy").resolve(o.policy, dir)
    if not ok then usage_error((where and (where .. ": ") or "--policy: ") .. perr) end
  end
  return o
end

function M.parse_args(args)
  local o, err = argv.parse(args, FLAGS, { equals = true, into = {
    mode = "spechop", k = D.k, m = D.m, eps = D.eps, seed = D.seed, concurrency = D.concurrency, set = {},
    max_hops = D.max_hops } })
  if not o then usage_error(err) end
  -- options that only mean something with another: silently doing nothing
  -- would look like success
  if o.summary and not o.compare then usage_error("--summary goes with --compare (it writes the comparison table)") end
  -- `--out -` is stdout, as without --out (records only; the summary is on stderr)
  if o.out == "-" then
    -- asked for: a --compare run's records on stdout, before the table
    if o.compare then o.records_stdout = true end
    if o.retry_failed then usage_error("--retry-failed needs --out FILE: stdout (--out -) cannot be resumed") end
    o.out = nil
  end
  if o.retry_failed and not o.out then
    usage_error("--retry-failed goes with --out (the file whose failed records run again)")
  end
  -- `-` is stdout where stdout is free: not beside the records nor the table
  if o.trace == "-" and o.compare then
    usage_error("--trace -: stdout holds the comparison table; give --trace FILE")
  end
  if o.trace == "-" and not o.out then
    usage_error("--trace -: the records go to stdout; give --out FILE to have the trace there")
  end
  if o.summary == "-" then usage_error("--summary -: stdout holds the comparison table; give --summary FILE") end
  M.check_distinct(o)
  return o
end

-- A path as the file it names: its real path, or (not there yet) its
-- directory's real path and its name, so `x` and `./x` are one file.
local function file_key(p)
  local realpath = require("specula.provenance").realpath
  local r = realpath(p)
  if r ~= p or p:sub(1, 1) == "/" and C.sp_host_path_kind(p) ~= 0 then return r end
  local dir, base = p:match("^(.*)/([^/]*)$")
  if not dir then dir, base = ".", p end
  return realpath(dir == "" and "/" or dir) .. "/" .. base
end

-- --input, --out, --trace and --summary name different files: one written
-- over another destroyed it without a word (a trace or a summary replacing
-- the records, the records the input).
function M.check_distinct(o)
  local seen = {}
  for _, opt in ipairs({ { "--input", o.input }, { "--out", o.out }, { "--trace", o.trace }, { "--summary", o.summary } }) do
    local name, path = opt[1], opt[2]
    if type(path) == "string" and path ~= "-" then
      local key = file_key(path)
      if seen[key] then
        usage_error(string.format("%s and %s name the same file ('%s'): the one would be written over the other",
          seen[key], name, path))
      end
      seen[key] = name
    end
  end
end

-- The options of specula.run(agent, opts) as `specula run` has them (its
-- defaults, the shared domains checked), and opts.queries as query entries.
-- Errors are raised at specula.run's caller.
function M.from_api(opts)
  local o = { mode = opts.mode or "spechop", k = opts.k or D.k, m = opts.m or D.m, eps = opts.eps or D.eps,
              seed = opts.seed or D.seed, concurrency = opts.concurrency or D.concurrency, set = opts.set or {},
              max_hops = opts.max_hops or D.max_hops, policy = opts.policy, debug = opts.debug,
              spec_timeout = opts.spec_timeout, query_timeout = opts.query_timeout, trace = nil, start_jitter_ms = opts.start_jitter_ms,
              predict = opts.predict, match = opts.match, trigger = opts.trigger, ev_cost_ms = opts.ev_cost_ms,
              ev_latency_ms = opts.ev_latency_ms, predict_top = opts.predict_top, light = opts.light,
              spec_launch = opts.spec_launch, clock = opts.clock, keep_candidates = opts.keep_candidates }
  if o.keep_candidates ~= nil and type(o.keep_candidates) ~= "boolean" then
    error("specula.run: keep_candidates must be true or false", 3)
  end
  if o.spec_launch ~= nil and not M.LAUNCH[o.spec_launch] then
    error("specula.run: spec_launch must be eager or slot", 3)
  end
  for _, name in ipairs({ "spec_timeout", "query_timeout" }) do
    local v = o[name]
    if v ~= nil and (type(v) ~= "number" or v ~= v or v < 0 or v == math.huge) then
      error("specula.run: " .. name .. " must be a number of ms >= 0, got " .. tostring(v), 3)
    end
  end
  for _, name in ipairs({ "k", "m", "eps", "seed", "concurrency" }) do
    o[name] = optslib.check("specula.run", name, o[name], 3)
  end
  if o.k == math.huge then o.k = K_UNBOUNDED end
  if not M.MODES[o.mode] then error("specula.run: unknown mode '" .. tostring(o.mode) .. "'", 3) end
  local queries = {}
  for i, q in ipairs(opts.queries or {}) do
    if type(q) == "string" then q = { id = "q" .. i, query = q } end
    queries[i] = { id = q.id or ("q" .. i), query = q.query, record = q, gold = q.gold, max_hops = q.max_hops }
  end
  return o, queries
end

-- The queries of a command line (--query or --input, then --shard): a
-- source (specula.run.inputs: a JSONL input is read as the run needs it, not
-- held whole) and the input's warnings.
function M.load_queries(o)
  if o.query and o.input then usage_error("give --query or --input, not both") end
  if o.input then
    -- an input that cannot be read is a mistake in the command line (status 2)
    local f, err = io.open(o.input, "rb")
    if f and C.sp_host_path_kind(o.input) == 2 then f:close() f, err = nil, "Is a directory" end
    if not f then
      err = tostring(err)
      if err:sub(1, #o.input + 2) == o.input .. ": " then err = err:sub(#o.input + 3) end
      usage_error("cannot read --input file '" .. o.input .. "': " .. err)
    end
    f:close()
  elseif not o.query then
    usage_error("give --query TEXT or --input FILE")
  end
  if o.shard_count and o.shard ~= "auto" then usage_error("--shard-count goes with --shard auto") end
  if o.shard == "auto" then
    local si, sn = require("specula.run.shard").resolve_auto(os.getenv, o.shard_count)
    if not si then usage_error("--shard auto: " .. sn) end
    o.shard = { si, sn }
  end
  local src, err = require("specula.run.inputs").open(o)
  if not src then sched.plain_error("specula run: " .. tostring(err)) end
  return src, src.warnings
end

return M
