-- specula.secrets: the one registry of values that must never leave the
-- process, and the scrubber that specula.internal.output's writers (records,
-- traces, cassettes, summaries, reports, stdout, stderr) and the modules
-- that hold credentials (their error messages) call.
--
--   secrets.declare(value [, label]) -> true | false
--       a secret (API key, token, password): never written anywhere from
--       now on. Values shorter than 6 bytes are refused (false): they would
--       blank ordinary words. For "Bearer X" / "Basic X" it is X that is
--       hidden (the scheme's name stays) and, for Basic, the decoded
--       "user:password" and the password.
--   secrets.declare_env(name) -> true | false     the value of $name
--   secrets.declare_url(url)                      the userinfo of a URL and
--       the values of its secret-looking query parameters (not the URL: a
--       base URL stays readable in messages)
--   secrets.declare_headers(headers)              the values of credential
--       headers (names with auth, key, token, secret, password, cookie,
--       session, credential or signature)
--   secrets.header_values(headers) -> list        the same values, not declared
--   secrets.list() -> the declared values;  secrets.count() -> how many
--   secrets.scrub(s [, extra]) -> s with every declared secret (and every
--       string of the list extra) replaced by [redacted] wherever it shows in
--       any form a writer produces: raw; percent-encoded (either hex case,
--       "+" for a space); JSON-escaped (short escapes, \u for any character,
--       surrogate pairs); as HTML references; nested up to three layers
--       (JSON text inside a JSON string inside a percent-encoded URL);
--       inside Base64 (standard and URL-safe, padded or not, at each of the
--       three alignments, inside a longer run); as hex (either case); and
--       the head or tail of one that an excerpt cut ("abc..." / "...xyz",
--       or with the ellipsis "…" however escaped); and all of it for the
--       value's UTF-16 text (little- and big-endian) too.
--       With nothing declared and no extra it returns s at once.
--   secrets.scrub_message(s [, extra]) -> scrub, then also what looks like a
--       credential although nobody declared it (Bearer and Basic values,
--       sk-... keys, api-key headers, key=/token= parameters, URL userinfo)
--   secrets.scrub_json(text [, extra, how]) -> the JSON text scrubbed and
--       still valid JSON (how.message: scrub_message; how.canonical: the
--       fallback re-encodes canonically)
--   secrets.scrub_chunks(list [, extra]) -> the pieces of a stream
--       scrubbed as one text (a secret cut across two pieces goes whole),
--       cut again where they were cut
--
-- What the process writes goes through specula.internal.output, whose writers call
-- this scrubber; no other module needs it to protect what it writes.
--
-- Environment variables whose names look like credentials (KEY, TOKEN,
-- SECRET, PASSWORD, PASSWD, CREDENTIAL, or a part AUTH, PASS, COOKIE) are
-- declared when this module loads; the other sources (tools' {env.NAME}
-- templates and credential headers, the LLM clients' API keys, MCP server
-- environments, --secret-env NAME) declare theirs where they read them.
local ffi = require "ffi"
local bit = require "bit"

local type, tostring, tonumber, pairs, ipairs, select, error, setmetatable, getmetatable, pcall, next =
  type, tostring, tonumber, pairs, ipairs, select, error, setmetatable, getmetatable, pcall, next
local byte, char, find, sub, gsub, lower, format, rep, match =
  string.byte, string.char, string.find, string.sub, string.gsub, string.lower, string.format, string.rep,
  string.match
local concat, sort = table.concat, table.sort
local band, bor, lshift, rshift = bit.band, bit.bor, bit.lshift, bit.rshift
local floor, ceil = math.floor, math.ceil

local M = {}

local REDACTED = "[redacted]"
M.REDACTED = REDACTED
local MIN = 6
M.MIN_BYTES = MIN
-- the characters a text's bytes could stand for, through layers of escaping
local escapes = require "specula.internal.escapes"
local DEPTH, read, match_at, starter_positions, has_cut_mark, CUT_MARKS, CH =
  escapes.DEPTH, escapes.read, escapes.match_at, escapes.starter_positions, escapes.has_cut_mark,
  escapes.CUT_MARKS, escapes.CH

----------------------------------------------------------------------------
-- Base64, hex and percent-decoding: specula.crypto's and specula.url's
-- (libcrypto, libcurl), loaded at first use so that this module loads, and
-- scrubs what was declared, before the engine binding does
----------------------------------------------------------------------------

local crypto_mod, url_mod
local function crypto()
  crypto_mod = crypto_mod or require "specula.crypto"
  return crypto_mod
end

-- A Basic credential's bytes, nil for "" or anything not Base64 (either
-- alphabet, padded or not).
local function b64decode(s)
  if find(s, "^=*$") then return nil end
  return (crypto().unb64(s))
end

----------------------------------------------------------------------------
-- needles: what is searched for each secret
----------------------------------------------------------------------------

-- The secret itself, or for a value with an auth scheme ("Bearer X") the
-- credential X (the scheme's name is no secret, and every form of the
-- whole value holds X) and, for Basic, the decoded "user:pass" and the
-- password alone.
local function expand(k, into)
  local cred = match(k, "^%a[%w%-]*%s+(%S+)%s*$")
  if not cred or #cred < MIN then into[#into + 1] = k end
  if cred then
    into[#into + 1] = cred
    local dec = match(lower(k), "^basic%s") and b64decode(cred)
    if dec and not find(dec, "%c") then
      into[#into + 1] = dec
      local pass = match(dec, "^[^:]*:(.+)$")
      if pass then into[#into + 1] = pass end
    end
  end
  return into
end

local function needle(text, kind)
  return { text = text, kind = kind }
end

-- Base64 text that encodes k somewhere inside (e.g. "user:k" in a Basic
-- header): for each alphabet and each of the three alignments, the
-- characters that depend on k's bytes alone.
local function b64_cores(k, into)
  for _, encode in ipairs({ crypto().b64, crypto().b64url }) do
    for pre = 0, 2 do
      local enc = encode(rep("\0", pre) .. k .. "\0\0")
      local from = ceil(8 * pre / 6) + 1
      local to = floor((8 * (pre + #k)) / 6)
      local core = sub(enc, from, to)
      if #core >= MIN then into[#into + 1] = core end
    end
  end
end


-- The UTF-16 bytes (little- or big-endian) of UTF-8 text, or nil when it
-- is not valid UTF-8: a secret that a tool or a file re-encoded so.
local function utf16(s, big)
  local out, i, n = {}, 1, #s
  local function unit(u)
    local hi, lo = rshift(u, 8), band(u, 0xFF)
    out[#out + 1] = big and char(hi, lo) or char(lo, hi)
  end
  while i <= n do
    local c = byte(s, i)
    local cp, len
    if c < 0x80 then cp, len = c, 1
    elseif c >= 0xC2 and c < 0xE0 then cp, len = band(c, 0x1F), 2
    elseif c >= 0xE0 and c < 0xF0 then cp, len = band(c, 0x0F), 3
    elseif c >= 0xF0 and c < 0xF5 then cp, len = band(c, 0x07), 4
    else return nil end
    for q = i + 1, i + len - 1 do
      local d = byte(s, q)
      if not d or band(d, 0xC0) ~= 0x80 then return nil end
      cp = bor(lshift(cp, 6), band(d, 0x3F))
    end
    if cp >= 0x10000 then
      cp = cp - 0x10000
      unit(0xD800 + rshift(cp, 10))
      unit(0xDC00 + band(cp, 0x3FF))
    else
      unit(cp)
    end
    i = i + len
  end
  return concat(out)
end
M.utf16 = utf16

-- The needles of a list of values: each value's expansions raw (with every
-- form), inside Base64, and as hex; and the same of their UTF-16 text
-- (little- and big-endian).
local function compile(values)
  local list, seen = {}, {}
  local function add(text, kind)
    local key = kind .. "\0" .. text
    if #text >= MIN and not seen[key] then
      seen[key] = true
      list[#list + 1] = kind == "hex" and { text = text, kind = kind } or needle(text, kind)
    end
  end
  for _, v in ipairs(values) do
    local forms = expand(v, {})
    for q = 1, #forms do
      local f = forms[q]
      if #f >= MIN then
        for _, big in ipairs({ false, true }) do
          local u = utf16(f, big)
          if u then forms[#forms + 1] = u end
        end
      end
    end
    for _, e in ipairs(forms) do
      if #e >= MIN then
        add(e, "raw")
        local cores = {}
        b64_cores(e, cores)
        for _, c in ipairs(cores) do add(c, "b64") end
        add(crypto().hex(e), "hex")
      end
    end
  end
  return list
end

----------------------------------------------------------------------------
-- the registry
----------------------------------------------------------------------------

local declared, values = {}, {}
local compiled = nil   -- needles of `values` (nil: to build again)

function M.declare(value, label)
  if label ~= nil and type(label) ~= "string" then
    error("specula.secrets.declare: the label must be a string", 2)
  end
  if type(value) ~= "string" or #value < MIN then return false end
  if not declared[value] then
    declared[value] = label or true
    values[#values + 1] = value
    compiled = nil
  end
  return true
end

-- Declare value (as declare) and return it: for code that declares a
-- credential where it obtains it, `local token = secrets.declared(x.token)`.
function M.declared(value, label)
  M.declare(value, label)
  return value
end

function M.declare_env(name)
  if type(name) ~= "string" or name == "" then
    error("specula.secrets.declare_env: expected the name of an environment variable", 2)
  end
  return M.declare(os.getenv(name), "$" .. name)
end

function M.list()
  local out = {}
  for i = 1, #values do out[i] = values[i] end
  return out
end

function M.count() return #values end

-- Query parameter names whose values are credentials.
local function secret_param(name)
  name = lower(name)
  return find(name, "key", 1, true) or find(name, "token", 1, true) or find(name, "secret", 1, true)
    or find(name, "sig", 1, true) or find(name, "auth", 1, true) or find(name, "password", 1, true)
    or find(name, "session", 1, true)
end
M.secret_param = secret_param

local function unpct(s)
  url_mod = url_mod or require "specula.url"
  return url_mod.form_decode(s)
end

function M.declare_url(url)
  if type(url) ~= "string" then return end
  local userinfo = match(url, "^%a[%w+.-]*://([^/?#]*)@")
  if userinfo then
    M.declare(userinfo)
    M.declare(unpct(userinfo))
    local pass = match(userinfo, "^[^:]*:(.*)$")
    if pass then M.declare(pass) M.declare(unpct(pass)) end
  end
  local q = match(url, "%?([^#]*)")
  if q then
    for name, v in q:gmatch("([^&=]*)=([^&]*)") do
      if secret_param(name) then M.declare(v) M.declare(unpct(v)) end
    end
  end
end

-- Header names whose values are credentials.
local function secret_header(name)
  name = lower(tostring(name))
  return find(name, "auth", 1, true) or find(name, "cookie", 1, true) or find(name, "key", 1, true)
    or find(name, "token", 1, true) or find(name, "secret", 1, true) or find(name, "password", 1, true)
    or find(name, "session", 1, true) or find(name, "credential", 1, true) or find(name, "signature", 1, true)
end
M.secret_header = secret_header

function M.header_values(headers)
  local list = {}
  if type(headers) == "table" then
    for k, v in pairs(headers) do
      if type(k) == "string" and secret_header(k) and (type(v) == "string" or type(v) == "number") then
        list[#list + 1] = tostring(v)
      end
    end
  end
  return list
end

function M.declare_headers(headers)
  for _, v in ipairs(M.header_values(headers)) do M.declare(v) end
end

-- Does an environment variable's name say that it holds a credential?
local function env_is_secret(name)
  local u = name:upper()
  if find(u, "KEY", 1, true) or find(u, "TOKEN", 1, true) or find(u, "SECRET", 1, true)
    or find(u, "PASSWORD", 1, true) or find(u, "PASSWD", 1, true) or find(u, "CREDENTIAL", 1, true) then
    -- a path to a key file or an agent socket is no secret
    return not find(u, "_SOCK$") and not find(u, "_PATH$") and not find(u, "_DIR$") and not find(u, "_FILE$")
  end
  for part in u:gmatch("[^_%-%d]+") do
    if part == "AUTH" or part == "PASS" or part == "COOKIE" then return not find(u, "_SOCK$") end
  end
  return false
end
M.env_is_secret = env_is_secret

-- Values of environment variables whose names look like credentials; a
-- URL-valued one (FOO_AUTH_URL) gives only its userinfo and secret
-- parameters.
pcall(ffi.cdef, "extern char **environ;")
local function scan_env()
  local ok, env = pcall(function() return ffi.C.environ end)
  if not ok or env == nil then return end
  local i = 0
  while env[i] ~= nil do
    local s = ffi.string(env[i])
    local name, value = match(s, "^([^=]+)=(.*)$")
    if name and #value >= MIN and env_is_secret(name) then
      if find(value, "^%a[%w+.-]*://") then M.declare_url(value) else M.declare(value, "$" .. name) end
    end
    i = i + 1
  end
end
scan_env()

----------------------------------------------------------------------------
-- scrubbing
----------------------------------------------------------------------------

local extra_cache, extra_n = {}, 0
local function needles_of_extra(extra)
  if type(extra) == "string" then extra = { extra } end
  local out = {}
  for _, v in pairs(extra) do
    if type(v) == "string" and #v >= MIN and not declared[v] then
      local c = extra_cache[v]
      if not c then
        if extra_n > 512 then extra_cache, extra_n = {}, 0 end
        c = compile({ v })
        extra_cache[v] = c
        extra_n = extra_n + 1
      end
      for _, nd in ipairs(c) do out[#out + 1] = nd end
    end
  end
  return out
end

local B64CHAR = "[%w%+/_%-]"

-- Spans { from, to } (inclusive) of s to redact, merged and in order.

-- Spans { from, to } (inclusive) of s to redact, merged and in order.
local function find_spans(s, list)
  local spans = {}
  local spos = starter_positions(s)
  local starters = spos ~= nil
  local dots = has_cut_mark(s)
  escapes.begin()
  local ls, by_first
  for _, nd in ipairs(list) do
    local text, kind = nd.text, nd.kind
    local first = #spans + 1
    if kind == "hex" then
      ls = ls or lower(s)
      local init = 1
      while true do
        local i, j = find(ls, text, init, true)
        if not i then break end
        spans[#spans + 1] = { i, j }
        init = j + 1
      end
    elseif not starters and not dots then
      local init = 1
      while true do
        local i, j = find(s, text, init, true)
        if not i then break end
        spans[#spans + 1] = { i, j }
        init = j + 1
      end
    else
      local fb = byte(text, 1)
      local heads = dots and kind == "raw"
      local init = 1
      while true do
        local i = find(s, CH[fb], init, true)
        if not i then break end
        local e = match_at(s, i, text, 1, heads)
        if e and e > i then
          spans[#spans + 1] = { i, e - 1 }
          init = e
        else
          init = i + 1
        end
      end
      -- where an escape may stand for the first byte
      if starters then
        if not by_first then
          by_first = {}
          for q = 1, #spos do
            local pos = spos[q]
            local alts = read(s, pos, DEPTH)
            local got = {}
            for q = 1, #alts, 2 do
              local b = byte(alts[q])
              if not got[b] then
                got[b] = true
                local l = by_first[b]
                if not l then l = {}; by_first[b] = l end
                l[#l + 1] = pos
              end
            end
          end
        end
        local l = by_first[fb]
        if l then
          for q = 1, #l do
            local i = l[q]
            local e = match_at(s, i, text, 1, heads)
            if e and e > i then spans[#spans + 1] = { i, e - 1 } end
          end
        end
      end
      if heads then
        -- "...tail": the end of a secret whose head an excerpt cut off
        for q = 1, #CUT_MARKS do
          local mark = CUT_MARKS[q]
          local p = find(s, mark, 1, true)
          while p do
            local at = p + #mark
            for off = 2, #text - 3 do
              local e = match_at(s, at, text, off)
              if e then spans[#spans + 1] = { at, e - 1 } break end
            end
            p = find(s, mark, p + 1, true)
          end
        end
      end
    end
    if kind == "b64" then
      -- the whole Base64 run goes, padding included
      for k = first, #spans do
        local sp = spans[k]
        local i, j = sp[1], sp[2]
        while i > 1 and find(sub(s, i - 1, i - 1), B64CHAR) do i = i - 1 end
        while j < #s and find(sub(s, j + 1, j + 1), "[%w%+/_%-=]") do j = j + 1 end
        sp[1], sp[2] = i, j
      end
    end
  end
  escapes.finish()
  if #spans == 0 then return spans end
  sort(spans, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] > b[2]) end)
  local merged = { spans[1] }
  for k = 2, #spans do
    local last, sp = merged[#merged], spans[k]
    if sp[1] <= last[2] + 1 then
      if sp[2] > last[2] then last[2] = sp[2] end
    else
      merged[#merged + 1] = sp
    end
  end
  return merged
end

local function apply(s, spans)
  local out, last = {}, 1
  for _, sp in ipairs(spans) do
    out[#out + 1] = sub(s, last, sp[1] - 1)
    out[#out + 1] = REDACTED
    last = sp[2] + 1
  end
  out[#out + 1] = sub(s, last)
  return concat(out)
end

local function needles(extra)
  if compiled == nil then compiled = compile(values) end
  if extra == nil then return compiled end
  local more = needles_of_extra(extra)
  if #more == 0 then return compiled end
  local all = {}
  for i = 1, #compiled do all[i] = compiled[i] end
  for i = 1, #more do all[#all + 1] = more[i] end
  return all
end

local function spans_of(s, extra)
  local list = needles(extra)
  if #list == 0 then return nil end
  local spans = find_spans(s, list)
  if #spans == 0 then return nil end
  return spans
end

function M.scrub(s, extra)
  if s == nil then return nil end
  if type(s) ~= "string" then s = tostring(s) end
  if #values == 0 and (extra == nil or (type(extra) == "table" and next(extra) == nil)) then return s end
  if #s < MIN then return s end
  local spans = spans_of(s, extra)
  if not spans then return s end
  return apply(s, spans)
end
local scrub = M.scrub

--- scrub, then whatever looks like a credential although nobody declared
-- it: Bearer and Basic credentials, sk-... keys, api-key headers, key= and
-- token= query parameters, userinfo in URLs.
function M.scrub_message(s, extra)
  if s == nil then return nil end
  s = scrub(s, extra)
  s = gsub(s, "([Bb][Ee][Aa][Rr][Ee][Rr]%s+)[%w%-%._~%+/=]+", "%1" .. REDACTED)
  s = gsub(s, "([Bb][Aa][Ss][Ii][Cc]%s+)([%w%+/=]+)", function(pre, cred)
    local dec = b64decode(cred)
    if dec and find(dec, ":", 1, true) and not find(dec, "%c") then return pre .. REDACTED end
  end)
  s = gsub(s, "%f[%w]sk%-[%w%-_]+", function(m)
    if #m >= 12 then return REDACTED end
  end)
  s = gsub(s, "([Xx]%-[Aa][Pp][Ii]%-[Kk][Ee][Yy][\"']?%s*[:=]%s*[\"']?)[^%s\"',}]+", "%1" .. REDACTED)
  s = gsub(s, "([?&][%w_]*[Kk][Ee][Yy]=)[^&%s\"']+", "%1" .. REDACTED)
  s = gsub(s, "([?&][%w_]*[Tt][Oo][Kk][Ee][Nn]=)[^&%s\"']+", "%1" .. REDACTED)
  s = gsub(s, "(%a[%w+.-]*://)[^/%s?#\"]*@", "%1")
  return s
end
local scrub_message = M.scrub_message

local json -- lazily: specula.json (which must not load this module first)

-- A copy of v with every string (keys too) scrubbed; changed[1] counts
-- the strings that changed.
local function scrub_deep(v, f, extra, depth, changed)
  local t = type(v)
  if t == "string" then
    local c = f(v, extra)
    if c ~= v then changed[1] = changed[1] + 1 end
    return c
  end
  if t ~= "table" or v == json.null then return v end
  if depth > 300 then error("nested too deeply", 0) end
  local c = {}
  for k, x in pairs(v) do
    if type(k) == "string" then k = scrub_deep(k, f, extra, depth + 1, changed) end
    c[k] = scrub_deep(x, f, extra, depth + 1, changed)
  end
  return setmetatable(c, getmetatable(v))
end
require("specula.internal.nojit")(scrub_deep)   -- a pairs() walk: see specula/internal/nojit.lua

--- A JSON text scrubbed, still valid JSON. The text is scrubbed as it is
-- (one pass); when a redaction broke it (a match that began inside an
-- escape), every string of the decoded value is scrubbed on its own and
-- the value encoded again. how: { message = true } scrubs with
-- scrub_message; { canonical = true } re-encodes canonically.
function M.scrub_json(text, extra, how)
  if text == nil then return nil end
  local message = how and how.message
  if not message and #values == 0 and extra == nil then return text end
  local f = message and scrub_message or scrub
  local out = f(text, extra)
  if out == text then return text end
  json = json or require "specula.json"
  if json.decode(out) ~= nil then return out end
  local v = json.decode(text)
  if v == nil then return out end
  local changed = { 0 }
  local ok, clean = pcall(scrub_deep, v, f, extra, 0, changed)
  if not ok then return out end
  -- the match was no secret once the escapes are read (it began inside one)
  if changed[1] == 0 then return text end
  local enc = how and how.canonical and json.canonical or json.encode
  local ok2, line = pcall(enc, clean)
  if not ok2 or type(line) ~= "string" then return out end
  local again = f(line, extra)
  if again ~= line and json.decode(again) ~= nil then return again end
  return line
end

--- The pieces of a stream, scrubbed as one text: a secret cut across
-- pieces is redacted whole, in the piece where it started; each cut that
-- fell inside a redaction moves to its start. Pieces that come out empty
-- are dropped. Returns the new list and, when it changed, the index map
-- (new i -> old i), so each piece keeps its time.
function M.scrub_chunks(list, extra)
  local n = #list
  if n == 0 then return list end
  if #values == 0 and (extra == nil or (type(extra) == "table" and next(extra) == nil)) then return list end
  local joined = concat(list)
  local spans = spans_of(joined, extra)
  if not spans then return list end
  -- new offset of an old cut (bytes before it)
  local shift, k = 0, 1
  local cuts, at = {}, 0
  for i = 1, n do
    at = at + #list[i]
    -- skip spans that end at or before this cut
    while k <= #spans and spans[k][2] <= at do
      shift = shift + (spans[k][2] - spans[k][1] + 1) - #REDACTED
      k = k + 1
    end
    local sp = spans[k]
    if sp and sp[1] <= at then
      -- the cut is inside this span: it moves to the span's start
      cuts[i] = sp[1] - 1 - shift
    else
      cuts[i] = at - shift
    end
  end
  local text = apply(joined, spans)
  local out, idx, from = {}, {}, 0
  for i = 1, n do
    local to = i == n and #text or cuts[i]
    if to > from then
      out[#out + 1] = sub(text, from + 1, to)
      idx[#out] = i
      from = to
    end
  end
  return out, idx
end

return M
