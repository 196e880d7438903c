-- specula.run.resultfiles: results files as `specula merge` and `specula
-- compare` read and write them — every record checked (an id, its
-- provenance), every write checked to the close — and the configuration a
-- record belongs to. Below both commands (specula.cmd.merge re-exports these)
-- so that specula.run.compare need not require a command.
local json = require "specula.json"
local sched = require "specula.internal.sched"
local output = require "specula.internal.output"
local lines_of = require("specula.internal.lines").lines   -- NUL-safe file:lines()
local compressed_hint = require("specula.internal.lines").compressed_hint

local type, tostring, ipairs, pcall, format = type, tostring, ipairs, pcall, string.format

local M = {}

--- Write text to path through a writer of kind (specula.internal.output: "json" for
-- records, "canonical" for a --summary), checking the open, the write and
-- the close (a full disk shows at the flush); raises an error naming the
-- file. `who` prefixes it.
function M.write_file(path, text, who, kind)
  if path == "-" then   -- stdout
    local w = output.wrap(io.stdout, kind)
    local ok, werr = w:write(text)
    if ok then ok, werr = w:flush() end
    if not ok then sched.plain_error(who .. ": writing stdout failed: " .. tostring(werr)) end
    return
  end
  local f, err = output.open(path, "w", kind)
  if not f then sched.plain_error(who .. ": cannot write '" .. path .. "': " .. tostring(err)) end
  local ok, werr = f:write(text)
  if ok then ok, werr = f:flush() end
  local cok, cerr = f:close()
  if not ok or not cok then
    sched.plain_error(who .. ": writing '" .. path .. "' failed: " .. tostring(werr or cerr))
  end
end

--- The configuration a record belongs to: its `config` (set by --compare),
-- else a name made from its stats ("sequential", "spechop:k=3", "window:k=inf:m=2").
function M.config_of(r)
  if type(r.config) == "string" then return r.config end
  local st = type(r.stats) == "table" and r.stats or nil
  if not st or type(st.mode) ~= "string" then return nil end
  if st.mode == "sequential" then return "sequential" end
  local name = st.mode .. ":k=" .. tostring(st.k_config or st.k)
  if st.m and st.m ~= 1 then name = name .. ":m=" .. tostring(st.m) end
  return name
end

--- Read results files: a list of { file =, line =, text =, rec = } (blank
-- lines skipped). A line that is not a record with an id is an error naming
-- FILE:LINE, with `who` as prefix.
function M.read_records(files, who)
  local out = {}
  for _, path in ipairs(files) do
    local f, err = io.open(path, "r")
    if not f then
      -- io.open's message starts with the path: name it once
      local why = tostring(err)
      if why:sub(1, #path + 2) == path .. ": " then why = why:sub(#path + 3) end
      sched.plain_error(who .. ": cannot open '" .. path .. "': " .. why)
    end
    local _, rerr = f:read(0)   -- a directory opens but cannot be read
    if rerr then
      f:close()
      sched.plain_error(who .. ": cannot read '" .. path .. "': " .. tostring(rerr))
    end
    local n = 0
    -- a record naming its run only takes the rest from the run's first
    -- record in the file (specula.provenance.reader)
    local rd = require("specula.provenance").reader()
    for text in lines_of(f) do
      n = n + 1
      if text:find("%S") then
        local ok, r = pcall(json.decode, text)
        -- a compressed results file is not a damaged one: repair would not help
        local packed = n == 1 and (not ok or type(r) ~= "table") and compressed_hint(path, text)
        if packed then
          f:close()
          sched.plain_error(format("%s: %s: %s", who, path, packed))
        end
        if not ok or type(r) ~= "table" then
          f:close()
          sched.plain_error(format("%s: %s:%d: not a JSON object: the file is damaged (a run cut off mid-write?). "
            .. "`specula repair %s` keeps its complete records and drops the rest; then resume the run with the "
            .. "same --out to run what is missing", who, path, n, path))
        end
        if r.id == nil or r.id == json.null then
          f:close()
          sched.plain_error(format("%s: %s:%d: the record has no id", who, path, n))
        end
        -- the check every reader of records makes (specula.provenance)
        local okp, perr = rd:expand(r, path, n)
        if not okp then
          f:close()
          sched.plain_error(who .. ": " .. perr)
        end
        out[#out + 1] = { file = path, line = n, text = text, rec = r, short = perr }
      end
    end
    f:close()
  end
  return out
end

return M
