-- specula.cmd.repair: `specula repair RESULTS.jsonl [-o OUT.jsonl]` — keep the
-- complete records of a damaged results file and drop the rest, so a resume
-- (`specula run ... --out FILE`) can run what is missing. A record is a line
-- that is a JSON object with an id; every other line (cut off, not JSON,
-- blank, without an id) is dropped and named. The file is rewritten as a new
-- file renamed over the old one (a crash leaves one or the other whole).
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"
local json = require "specula.json"
local output = require "specula.internal.output"
local compressed_hint = require("specula.internal.lines").compressed_hint
local stderr = output.stderr   -- what goes out is scrubbed
local C = core.C

local format, concat, tostring, type = string.format, table.concat, tostring, type

local M = {
  name = "repair",
  synopsis = "RESULTS.jsonl [-o OUT.jsonl]",
  summary = "keep a damaged results file's complete records, drop the rest",
  about = [[
Keeps the complete records of a results file written by `specula run --out`
(each line that is a JSON object with an id, unchanged and in order) and
drops the rest: a line cut off or damaged, one that is not JSON or has no
id, blank lines. Each dropped line is named (FILE:LINE: why). The file is
replaced (a new file renamed over it) unless -o names another; then
`specula run ... --out RESULTS.jsonl` resumes it and runs what is missing.
Records of another run are not its business: resume refuses those. A
dropped line that carried its run's whole provenance hands it to the run's
first kept record when it can be read; when it cannot, the records that
name that run only are refused and nothing is written.]],
  positional = "files",
  options = {
    { "--out", "-o", key = "out", arg = "FILE", shown = "RESULTS.jsonl itself",
      help = "write the kept records here instead of replacing RESULTS.jsonl" },
  },
}

function M.check(o)
  if #o.files == 0 then return "no results file given" end
  if #o.files > 1 then return "one results file at a time (got " .. #o.files .. ")" end
  if o.out == "-" then return "-o -: repair writes a file (RESULTS.jsonl replaced, or -o OUT.jsonl)" end
end

local function fail(msg) sched.plain_error("specula repair: " .. msg, 1) end

--- The complete records of `text`, the dropped lines ({ line =, why = })
-- and the number of blank lines (removed too). With `path`, a complete
-- record whose provenance was edited stops it: nil and "FILE:LINE: why"
-- (the check every reader of records makes; repair mends cut lines, it
-- does not pass on edited ones). So does a kept record that names its run
-- only when no whole provenance of that run is above it (the line that
-- carried it is unreadable: the record could not be tied to its run). When
-- the line that carried it is dropped but could be read (a JSON object
-- without an id), the first kept record of that run carries it instead.
function M.split(text, path)
  local keep, dropped, blank, ln, pos, n = {}, {}, 0, 0, 1, #text
  local prov = require "specula.provenance"
  local rd, restream = prov.reader(), prov.restream(true)
  while pos <= n do
    local nl = text:find("\n", pos, true)
    local line = text:sub(pos, (nl or (n + 1)) - 1)
    ln = ln + 1
    pos = (nl or n) + 1
    local why
    if not line:find("%S") then
      why = false   -- removed, not worth a line
    else
      local ok, r = pcall(json.decode, line)
      if not ok or r == nil then why = nl and "not JSON" or "cut off (the last line, without its newline)"
      elseif type(r) ~= "table" or r[1] ~= nil then why = "not a JSON object"
      elseif r.id == nil or r.id == json.null then
        why = "no id"
        -- dropped, but a whole provenance on it still ties the records below
        if path then rd:expand(r, path, ln) end
      elseif path then
        local okp, short = rd:expand(r, path, ln)
        if not okp then return nil, short end
        line = restream(line, r, short)
      end
    end
    if why then dropped[#dropped + 1] = { line = ln, why = why }
    elseif why == nil then keep[#keep + 1] = line
    else blank = blank + 1 end
  end
  return keep, dropped, blank
end

function M.main(o)
  local path = o.files[1]
  local kind = C.sp_host_path_kind(path)
  if kind == 0 then fail(format("'%s': no such file", path)) end
  if kind ~= 1 then fail(format("'%s' is not a regular file", path)) end
  local f, err = io.open(path, "rb")
  if not f then fail(format("cannot read '%s': %s", path, tostring(err))) end
  local text = f:read("*a")
  f:close()
  if not text then fail(format("cannot read '%s'", path)) end
  local packed = compressed_hint(path, text)
  if packed then fail(format("%s: not a results file (%s): left unchanged", path, packed)) end
  local keep, dropped, blank = M.split(text, path)
  if not keep then fail(dropped) end
  -- not one record, and more wrong with it than a last line cut off: not a
  -- results file (a script, a JSON array, a binary file), left as it is
  if #keep == 0 then
    for _, d in ipairs(dropped) do
      if d.why ~= "cut off (the last line, without its newline)" then
        fail(format("%s: not a results file (no line of it is a record; line %d: %s): left unchanged", path,
          d.line, d.why))
      end
    end
  end
  local dest = o.out or path
  if #dropped == 0 and blank == 0 and dest == path then
    stderr(format("specula repair: %s: %d records, nothing to repair\n", path, #keep))
    return
  end
  -- a new file renamed over the old one, every step checked
  local tmp = dest .. ".specula-tmp"
  -- the kept records, one JSON line each, through a writer that scrubs them
  local w, werr = output.open(tmp, "wb", "json")
  if not w then fail(format("cannot write '%s': %s", tmp, tostring(werr))) end
  local ok, rerr = w:write(#keep > 0 and (concat(keep, "\n") .. "\n") or "")
  if ok then ok, rerr = w:flush() end
  local cok, cerr = w:close()
  if ok and not cok then ok, rerr = false, cerr end
  if ok then ok, rerr = os.rename(tmp, dest) end
  if not ok then
    os.remove(tmp)
    fail(format("cannot write '%s': %s (%s is unchanged)", dest, tostring(rerr), path))
  end
  for i, d in ipairs(dropped) do
    if i > 20 then
      stderr(format("specula repair: ... and %d more lines\n", #dropped - 20))
      break
    end
    stderr(format("specula repair: %s:%d: %s; dropped\n", path, d.line, d.why))
  end
  stderr(format("specula repair: %s: kept %d record%s, dropped %d line%s%s%s\n", dest, #keep,
    #keep == 1 and "" or "s", #dropped, #dropped == 1 and "" or "s",
    blank > 0 and format(" and %d blank line%s", blank, blank == 1 and "" or "s") or "",
    dest ~= path and (" (from " .. path .. ")") or ""))
end

return M
