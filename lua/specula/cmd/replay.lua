-- specula replay: a recorded run's stage times re-scheduled on the window at
-- other k values. C loads the file, replays and prints (sp_replay_print).
local core = require "specula.internal.core"
local argv = require "specula.internal.argv"
local lines_of = require("specula.internal.lines").lines   -- NUL-safe file:lines()
local ffi, C = core.ffi, core.C

local LAUNCH = { eager = C.SP_REPLAY_EAGER, slot = C.SP_REPLAY_SLOT }

local MAX_K = 1000000   -- the largest finite k on the command line

-- "1,2,inf" -> a list of k values (SP_K_UNBOUNDED for inf), duplicates
-- dropped; nil and the message otherwise.
local function klist(s)
  local bad = "--k takes up to " .. tonumber(C.SP_REPLAY_MAX_KS) .. " comma-separated values, each an integer in "
    .. "[1, " .. MAX_K .. "] or inf; got '" .. s .. "'"
  local list, seen = {}, {}
  if s == "" or s:sub(-1) == "," then return nil, bad end
  for tok in (s .. ","):gmatch("([^,]*),") do
    local k
    if tok == "inf" or tok == "infinity" then
      k = tonumber(C.SP_K_UNBOUNDED)
    else
      k = tok:match("^%s*[+-]?%d+$") and tonumber(tok)
      if not k or k < 1 or k > MAX_K then return nil, bad end
    end
    if not seen[k] then
      if #list >= tonumber(C.SP_REPLAY_MAX_KS) then return nil, bad end
      seen[k] = true
      list[#list + 1] = k
    end
  end
  return list
end

local M = {
  name = "replay",
  synopsis = "FILE [--k 1,2,3,inf] [--mode spechop|window|sequential] [--spec-launch eager|slot] [--config NAME] [--json]",
  summary = "re-schedule recorded stage times (no real waiting)",
  short_usage = true,   -- a mistake prints the synopsis line only
  about = "FILE is a trace (specula run --trace) or a results file (specula run --out).",
  options = {
    { "--k", key = "k", arg = "LIST", convert = klist, shown = "1,2,3,4,8,inf plus the recorded k",
      help = "comma-separated thread counts, integers >= 1 or inf" },
    { "--mode", key = "mode", arg = "M", shown = "as recorded, else spechop",
      convert = argv.one_of({ spechop = true, window = true, sequential = true },
        "--mode must be spechop, window or sequential", true),
      help = "spechop (continuous), window (bounded) or sequential" },
    { "--spec-launch", key = "launch", arg = "eager|slot", default = C.SP_REPLAY_LAUNCH_RECORDED,
      shown = "as recorded; files without the field were recorded with slot",
      convert = argv.one_of(LAUNCH, "--spec-launch must be eager or slot", true),
      help = "when a thread's speculator starts" },
    { "--config", key = "config", arg = "NAME", shown = "the only one",
      help = "the configuration to replay from the records of a --compare run\n(required when the file holds several)" },
    { "--json", key = "json", flag = true, help = "one JSON object per k" },
  },
}

function M.check(o)
  if #o.args > 1 then return "one FILE only (got '" .. o.args[1] .. "' and '" .. o.args[2] .. "')" end
  if #o.args == 0 then return "missing FILE (a trace or a results JSONL file)" end
end

-- A results file is read by C; its records' provenance is checked here
-- first, with the check every reader of records makes (specula.provenance):
-- "FILE:LINE: why" for an edited one, nil otherwise. A trace (one JSON
-- document, not records) has none to check.
local function edited_record(path)
  local f = io.open(path, "rb")
  if not f then return nil end   -- C says why it cannot be read
  local json, prov = require "specula.json", require "specula.provenance"
  local rd = prov.reader()   -- a short provenance needs its run's whole one above it
  local ln = 0
  for line in lines_of(f) do
    ln = ln + 1
    if line:find('"provenance"', 1, true) then
      local ok, r = pcall(json.decode, line)
      if ok and type(r) == "table" then
        local good, why = rd:expand(r, path, ln)
        if not good then
          f:close()
          return why
        end
      end
    end
  end
  f:close()
  return nil
end

function M.main(o)
  local edited = edited_record(o.args[1])
  if edited then
    require("specula.internal.output").stderr("specula replay: ", edited, "\n")
    return 1
  end
  local a = ffi.new("sp_replay_args")
  local ks = o.k and ffi.new("int[?]", #o.k, o.k)
  a.file, a.mode, a.config = o.args[1], o.mode, o.config
  a.ks, a.nk = ks, o.k and #o.k or 0
  a.launch = LAUNCH[o.launch] or o.launch   -- a name, or the default: as recorded
  a.json = o.json and 1 or 0
  io.stdout:flush()
  local rc = C.sp_replay_print(a)
  local _ = ks   -- alive until the call returns
  return rc
end

return M
