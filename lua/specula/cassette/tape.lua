-- specula.cassette.tape: the tape format, and reading a tape back.
--
-- A cassette is a directory of files cassette-NNNN.jsonl (one per recording
-- process, created exclusively, so shards may record into one directory).
-- Each line is one JSON object, written and flushed whole: a header line
-- { "specula_cassette": 3, ... } and then one exchange per line:
--   { kind = "http"|"mcp"|"spec", key, n, at, off, ms, req, res | err, events, meta }
-- key: the canonical request (no headers, secret query parameters removed,
-- JSON bodies in canonical form, then scrubbed); meta: which query, hop,
-- window thread (the tid traces show), job and path (below) asked; n: the
-- occurrence of the key within that (query, path, job), so repeated
-- identical requests get their own answers in order, whatever other queries
-- and threads do meanwhile; off: ms from the window's launch of that job to
-- the request.
-- Each window job that ends adds { kind = "job", key, n, code, first,
-- sleeps, ms, meta }: when its code began and when it first waited (an
-- exchange, a sleep, a task), when each of its sleeps was to end, and its time
-- from launch to result as the window saw it, so a replay reproduces the
-- engine time around the exchanges (queueing, parsing) as well as the
-- exchanges themselves. A process killed mid-write leaves at most one cut
-- last line, which the loader drops with a warning.
--
-- Format 3 names a job by what it works on rather than by the window
-- thread that ran it: meta.path digests the observations its state was
-- built from, so the same job of another schedule (another k, m, mode,
-- policy, verifier or predictor) finds its recording. Format 2 tapes are
-- matched by thread as they were recorded.
--
-- Format 4 adds, when a query ends, { kind = "commit", key, n, meta =
-- { query }, index, text, paths, calls, failed }: the paths of the states
-- its committed trajectory went through (hop 0 first, the final state
-- last) and the action taken at each, so a reader tells the calls the run
-- committed (a call made from a speculative state whose guess was later
-- accepted included) from those of discarded threads; and `obs` lines for
-- predicted calls too (one that served its step's target is committed).
local json = require "specula.json"
local core = require "specula.internal.core"
local output = require "specula.internal.output"
local check = require "specula.cassette.check"
local session = require "specula.cassette.session"
local C = core.C

local type, tostring, ipairs, format = type, tostring, ipairs, string.format

local M = {}
M.VERSION = 4
-- versions this specula reads (1: no job lines, n counted per request; 2:
-- occurrences counted per window thread; 3: no commit lines)
local READS = { [1] = true, [2] = true, [3] = true, [4] = true }

-- (a directory given as "dir/" names its files "dir/cassette-0001.jsonl")
local function file_name(dir, i) return format("%s/cassette-%04d.jsonl", (dir:gsub("(.)/+$", "%1")), i) end
M.file_name = file_name

local check_line, scopes = check.check_line, session.scopes

-- All exchange lines of a cassette directory, in file order. Returns
-- records, files, warnings | nil, err. A line that does not parse is an
-- error naming file and line, except the last line of a file that does not
-- end in a newline (a recording cut off mid-write): that one is dropped.
function M.load(dir)
  if type(dir) ~= "string" or dir == "" then return nil, "cassette: expected a directory" end
  local kind = C.sp_host_path_kind(dir)
  if kind == 0 then return nil, format("cassette '%s': no such directory", dir) end
  if kind ~= 2 then return nil, format("cassette '%s': not a directory", dir) end
  local recs, files, warnings = {}, {}, {}
  local i = 1
  while C.sp_host_path_kind(file_name(dir, i)) == 1 do
    local path = file_name(dir, i)
    local f, err = io.open(path, "rb")
    if not f then return nil, "cassette: cannot read " .. tostring(err) end
    local text = f:read("*a")
    f:close()
    local info = { path = path, records = 0, dropped = 0 }
    files[#files + 1] = info
    local ln, pos, n = 0, 1, #text
    while pos <= n do
      local nl = text:find("\n", pos, true)
      local line = text:sub(pos, (nl or (n + 1)) - 1)
      ln = ln + 1
      pos = (nl or n) + 1
      if line ~= "" then
        local v = json.decode(line)
        if type(v) ~= "table" then
          if not nl then
            info.dropped = info.dropped + 1
            warnings[#warnings + 1] = format("%s:%d: dropped a cut-off last record (the recording was interrupted)",
              path, ln)
          else
            return nil, format("cassette %s:%d: not a JSON object", path, ln)
          end
        elseif v.specula_cassette then
          if not READS[v.specula_cassette] then
            return nil, format("cassette %s:%d: format version %s, this specula reads 1 to %d", path, ln,
              tostring(v.specula_cassette), M.VERSION)
          end
          info.header = v
        elseif type(v.kind) ~= "string" or type(v.key) ~= "string" or type(v.n) ~= "number" then
          return nil, format("cassette %s:%d: an exchange needs kind, key and n", path, ln)
        else
          local why = check_line(v)
          if why then return nil, format("cassette %s:%d: %s exchange: %s", path, ln, v.kind, why) end
          v.file, v.line = path, ln
          v.scope, v.qscope = scopes(v.meta)
          recs[#recs + 1] = v
          info.records = info.records + 1
        end
      end
    end
    i = i + 1
  end
  if #files == 0 then return nil, format("cassette '%s': no cassette-NNNN.jsonl files", dir) end
  return recs, files, warnings
end

-- The entries of loaded records: one per (kind, scope, key, n), its answer
-- when the tape has one, else its start line alone (a call cancelled
-- before it answered), in the order they were asked.
function M.entries(recs)
  local out, at = {}, {}
  for _, r in ipairs(recs) do
    local id = r.kind .. "\0" .. r.scope .. "\0" .. r.key .. "\0" .. tostring(r.n)
    local i = at[id]
    if i == nil then
      out[#out + 1] = r
      at[id] = #out
    elseif out[i].start and not r.start then
      out[i] = r
    end
  end
  return out
end

-- ---- bytes --------------------------------------------------------------------------------

local utf8_clean = json.utf8_clean
-- specula.crypto's hex (libcrypto); a tape's { hex = } passed bad_bytes
-- when it was read, so unhex does not fail on it
local function hex(s) return require("specula.crypto").hex(s) end
local function unhex(s) return (require("specula.crypto").unhex(s)) end

-- A byte string as JSON can carry it: itself when it is valid UTF-8, else
-- { hex = ... } (a stream chunk may end inside a character). Bytes that
-- go to hex are scrubbed first (the line's scrub then sees only hex).
local function bytes_out(s, extra)
  if s == nil or utf8_clean(s) == s then return s end
  return { hex = hex(output.clean(s, "text", extra)) }
end
M.bytes_out = bytes_out
local function bytes_in(v)
  if type(v) == "table" and type(v.hex) == "string" then return unhex(v.hex) end
  return v
end
M.bytes_in = bytes_in

return M
