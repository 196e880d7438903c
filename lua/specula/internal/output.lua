-- specula.internal.output: the one way bytes leave the process. Records, traces,
-- tapes, summaries, report pages, merged and repaired results files, saved
-- predictor models, stdout and stderr are all written through a writer of
-- this module, and a writer scrubs what it writes with the run's secret set
-- (specula.secrets). No other module calls the scrubber to protect what it
-- writes, or replaces print or io.write (spec/unit/layers_spec.lua checks).
--
--   output.open(path, mode, kind) -> w | nil, err     io.open's arguments
--       and message; kind says how the bytes are scrubbed (below)
--   output.wrap(file, kind) -> w     a writer over an open file (io.stdout:
--       closing it only flushes)
--   output.stdout(...), output.stderr(...) -> file:write's results
--       text pieces, joined and scrubbed, on the standard streams
--   output.help(text) -> nil | err   help text on stdout, flushed: a
--       reader that closed early (EPIPE) is no error
--   output.clean(s [, kind [, extra]]) -> s as a writer of kind would write
--       it: for text that leaves by a road that is not a Lua write (the
--       engine prints a failed task's message, cuts a verifier's reason
--       before it writes it), is digested beside what is written
--       (provenance), or is looked up in what was written (a tape's keys)
--   output.guard_stdio()    a script's own print, io.write and writes to
--       io.stdout and io.stderr scrubbed too (the command line installs it)
--
-- Kinds:
--   "text"       every declared secret, in every form, becomes [redacted]
--   "message"    the same, and what looks like a credential although nobody
--                declared it (Bearer values, sk-... keys, key= parameters)
--   "json"       each line is one JSON text, scrubbed and still valid JSON
--   "canonical"  the same, a line re-encoded (when it must be) canonically
--   "json_message"  "json" with the "message" rules (cassette tapes)
--
-- A writer w:
--   w:write(...) -> w | nil, err     the pieces joined, scrubbed, written
--   w:line(text [, extra]) -> w | nil, err   text and "\n"; extra: more
--       strings to redact in this line only (a request's own credentials)
--   w:clean(s [, extra]) -> s scrubbed as this writer would: for bytes that
--       are re-encoded before they are written (hex hides them from the
--       line's scrub, and a redaction inside hex would break it)
--   w:pieces(list [, extra]) -> list, idx   the pieces of a stream
--       scrubbed as one text (a secret cut across two goes whole), cut
--       again where they were cut (secrets.scrub_chunks)
--   w:direct() -> the file while nothing would be scrubbed (no secret
--       known, a kind without the message rules), else nil: for writers in
--       C (the records' JSON encoder writes a line from its own buffer)
--   w:flush(), w:close(), w:seek(...), w.file, w.bytes (written through w)
--
-- With no secret known, "text", "json" and "canonical" writers pass the
-- bytes through untouched.
local ffi = require "ffi"
local secrets = require "specula.secrets"

local type, tostring, select, setmetatable, getmetatable, error =
  type, tostring, select, setmetatable, getmetatable, error
local concat = table.concat
local find, sub = string.find, string.sub

local scrub, scrub_message, scrub_json, scrub_chunks, count =
  secrets.scrub, secrets.scrub_message, secrets.scrub_json, secrets.scrub_chunks, secrets.count

local M = {}

-- The files' own write, taken before guard_stdio wraps the shared method.
local file_write = io.stdout.write
local raw_stdout, raw_stderr = io.stdout, io.stderr

local MESSAGE = { message = true }
local CANONICAL = { canonical = true }

-- how each kind scrubs one piece of text (a whole write, or one line)
local TEXT = {
  text = function(s, extra) return scrub(s, extra) end,
  message = function(s, extra) return scrub_message(s, extra) end,
}
local JSON = {
  json = false,
  canonical = CANONICAL,
  json_message = MESSAGE,
}
M.KINDS = { "text", "message", "json", "canonical", "json_message" }

local function check_kind(kind, where)
  if TEXT[kind] == nil and JSON[kind] == nil then
    error(where .. ": unknown kind '" .. tostring(kind) .. "' (text, message, json, canonical or json_message)", 3)
  end
end

-- Nothing to scrub for this kind: no secret known and no message rules.
local function passes(kind, extra)
  return count() == 0 and extra == nil and kind ~= "message" and kind ~= "json_message"
end

-- One JSON text per line: each line scrubbed on its own, so a redaction
-- never joins two lines and each stays valid JSON.
local function clean_json(s, how, extra)
  if not find(s, "\n", 1, true) then return scrub_json(s, extra, how or nil) end
  local out, from = {}, 1
  while from <= #s do
    local nl = find(s, "\n", from, true)
    local line = sub(s, from, (nl or #s + 1) - 1)
    out[#out + 1] = line == "" and "" or scrub_json(line, extra, how or nil)
    if not nl then break end
    out[#out + 1] = "\n"
    from = nl + 1
  end
  return concat(out)
end

local function clean(s, kind, extra)
  if passes(kind, extra) then return s end
  local f = TEXT[kind]
  if f then return f(s, extra) end
  return clean_json(s, JSON[kind], extra)
end

function M.clean(s, kind, extra)
  kind = kind or "text"
  check_kind(kind, "specula.internal.output.clean")
  if s == nil then return nil end
  if type(s) ~= "string" then s = tostring(s) end
  return clean(s, kind, extra)
end

local Writer = {}
Writer.__index = Writer

local function joined(...)
  local n = select("#", ...)
  if n == 1 then
    local s = ...
    return type(s) == "string" and s or tostring(s)
  end
  local parts = { ... }
  for i = 1, n do parts[i] = tostring(parts[i]) end
  return concat(parts, "", 1, n)
end

local function put(w, s)
  local ok, err = file_write(w.file, s)
  if not ok then return nil, err end
  w.bytes = w.bytes + #s
  return w
end

function Writer:write(...)
  if select("#", ...) == 0 then return self end
  return put(self, clean(joined(...), self.kind))
end

function Writer:line(text, extra)
  return put(self, clean(tostring(text), self.kind, extra) .. "\n")
end

function Writer:clean(s, extra)
  if s == nil then return nil end
  return clean(tostring(s), self.kind, extra)
end

function Writer:pieces(list, extra)
  -- the message rules need the whole text: scrub_chunks applies the
  -- declared secrets and extra, which is what a stream can be cut across
  return scrub_chunks(list, extra)
end

function Writer:direct()
  if passes(self.kind) then return self.file end
  return nil
end

function Writer:flush() return self.file:flush() end
function Writer:seek(...) return self.file:seek(...) end

function Writer:close()
  if self.std then
    local ok, err = self.file:flush()
    if not ok then return nil, err end
    return true
  end
  return self.file:close()
end

local function new(file, kind)
  return setmetatable({ file = file, kind = kind, bytes = 0, std = file == raw_stdout or file == raw_stderr },
    Writer)
end

function M.wrap(file, kind)
  kind = kind or "text"
  check_kind(kind, "specula.internal.output.wrap")
  if io.type(file) ~= "file" then error("specula.internal.output.wrap: expected an open file, got " .. type(file), 2) end
  return new(file, kind)
end

function M.open(path, mode, kind)
  check_kind(kind, "specula.internal.output.open")
  if type(path) ~= "string" then error("specula.internal.output.open: expected a path, got " .. type(path), 2) end
  local f, err = io.open(path, mode or "w")
  if not f then return nil, err end
  return new(f, kind)
end

-- stdout belongs to a protocol (the gateway's JSON-RPC over stdio): every
-- other text for it goes to stderr
local divert = false
function M.divert_stdout() divert = true end

-- text on the standard streams
local function std(file, ...)
  if divert and file == raw_stdout then file = raw_stderr end
  if count() == 0 then return file_write(file, ...) end
  return file_write(file, scrub(joined(...)))
end
function M.stdout(...) return std(raw_stdout, ...) end
function M.stderr(...) return std(raw_stderr, ...) end

-- Help text on stdout, flushed. A reader that stops early (`specula run
-- --help | head -1`) chose to: what it did not read is dropped and nil
-- returned, so the exit status stays 0 (records and other data to a closed
-- pipe still fail: the command line checks stdout at exit). Another failure
-- (a full disk) is returned as its message, stdout's error cleared for the
-- caller to report it once.
local EPIPE = 32   -- Linux
pcall(ffi.cdef, "extern void *stdout; void clearerr(void *f); void __fpurge(void *f);")
function M.help(text)
  local ok, err, code = std(raw_stdout, text)
  if ok then ok, err, code = raw_stdout:flush() end
  if ok then return nil end
  ffi.C.__fpurge(ffi.C.stdout)
  ffi.C.clearerr(ffi.C.stdout)
  if code ~= EPIPE then return err end
  return nil
end

-- print, io.write and writes to io.stdout and io.stderr scrubbed: an agent
-- script's own output leaves the process too (a script that prints a
-- response holding a key). Installed once by the command line; files a
-- script opens itself are its own business.
local guarded = false
function M.guard_stdio()
  if guarded then return end
  guarded = true
  local raw_tostring = tostring
  local out, err = raw_stdout, raw_stderr
  _G.print = function(...)
    local n = select("#", ...)
    local parts = { ... }
    for i = 1, n do parts[i] = raw_tostring(parts[i]) end
    local s = concat(parts, "\t", 1, n) .. "\n"
    file_write(divert and err or out, count() == 0 and s or scrub(s))
  end
  io.write = function(...) return std(io.output(), ...) end
  -- f:write on the standard streams (every file shares the method table)
  local methods = getmetatable(out).__index
  methods.write = function(f, ...)
    if divert and f == out then f = err end
    if count() == 0 or (f ~= out and f ~= err) then return file_write(f, ...) end
    return std(f, ...)
  end
end

return M
