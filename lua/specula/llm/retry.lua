-- specula.llm.retry: the retry policy shared by the LLM clients and the HTTP
-- tools, plus the helpers they use to turn failures into safe messages.
--
--   retry.new(opts) -> policy
--     opts (all optional):
--       max_retries = 3        retries after the first attempt (0 = never retry)
--       base_ms     = 500      backoff base: attempt n waits up to base*2^(n-1)
--       cap_ms      = 8000     backoff ceiling
--       max_wait_ms = 60000    longest server-requested wait honoured; a longer
--                              retry-after gives up at once with a clear error
--       jitter      = true     full jitter (uniform in [0, backoff]); false waits
--                              the whole backoff
--       statuses    = {...}    extra statuses to retry (besides 408/409/429/>=500)
--       errors      = {...}    transport error codes to retry (default
--                              ECONNREFUSED ECONNRESET ETIMEDOUT EIDLE ETRUNCATED)
--       random      = fn()     uniform [0,1) source for the jitter
--     A policy may also be given as `false` (no retries) or an existing policy.
--
--   policy:decide(failure, attempt) -> wait_ms | nil, why
--     failure = { status =, headers =, body =, err =, delivered =, retryable = }
--       err        a transport error "ECODE: METHOD url: detail"
--       delivered  true when part of a streamed response already reached the
--                  caller (such a failure is never retried)
--       retryable  false forbids a retry; true allows one for any status
--   policy:run(attempt_fn) -> result, nil, attempts | nil, failure, attempts, why
--     attempt_fn(n) returns true, result or false, failure. Every wait is a
--     specula.sleep, so cancelling the task cancels the wait.
--   retry.request(http_opts, policy_or_opts)
--       -> res, nil, attempts | nil, failure, attempts, why
--     specula.http.request with retries (not for streams). A non-2xx
--     response that is not retried comes back as a failure.
--
-- Rules, in order: a failure marked retryable = false, or one that hands part
-- of a stream to the caller, is final; an error body that talks about quota,
-- spend limits or billing is final (retrying cannot help); an
-- `x-should-retry: true|false` header decides; otherwise 408, 409, 429 and
-- >= 500 are retried, and so are the connection-level errors above. The wait
-- is `retry-after-ms` (milliseconds), else `retry-after` (seconds or an HTTP
-- date), else exponential backoff with full jitter.
--
-- Helpers for messages (used by every client so keys never leak):
--   retry.endpoint(url)            url without userinfo, query or fragment
--   retry.scrub(s, secrets)        secrets and bearer/api-key lookalikes -> [redacted]
--   retry.secrets(key, headers)    the list scrub needs: the key plus the values
--                                  of credential-like headers
--   retry.excerpt(body, ctype, n)  short printable excerpt of an error body
--                                  (HTML reduced to its title and text)
--   retry.describe(failure)        "429 code_or_type: message" | transport error text
--   retry.parse_http_date(s)       IMF-fixdate -> epoch seconds | nil
--   retry.server_wait(headers, now_s) -> ms | nil
--   retry.is_quota(text)           does an error text speak of quota/billing?
local sched = require "specula.sched"

local type, tostring, tonumber, pairs, ipairs, setmetatable, getmetatable, error =
  type, tostring, tonumber, pairs, ipairs, setmetatable, getmetatable, error
local floor, min, random = math.floor, math.min, math.random
local format, lower, find, sub, gsub = string.format, string.lower, string.find, string.sub, string.gsub

local byte = string.byte
local M = {}

----------------------------------------------------------------------------
-- messages
----------------------------------------------------------------------------

--- The URL without userinfo, query string or fragment (safe to show).
function M.endpoint(url)
  url = tostring(url or "")
  url = url:gsub("[?#].*$", "")
  -- up to the last "@" of the authority: a password may hold a raw "@"
  url = url:gsub("^(%a[%w+.-]*://)[^/]*@", "%1")
  return url
end

local REDACTED = "[redacted]"

local function plain_replace(s, needle, by)
  if needle == "" then return s end
  local out, init = {}, 1
  while true do
    local i, j = find(s, needle, init, true)
    if not i then out[#out + 1] = sub(s, init); break end
    out[#out + 1] = sub(s, init, i - 1)
    out[#out + 1] = by
    init = j + 1
  end
  return table.concat(out)
end

-- Header names whose values are credentials.
local SECRET_HEADER = { authorization = true, cookie = true, ["proxy-authorization"] = true }
local function secret_header(name)
  name = lower(tostring(name))
  return SECRET_HEADER[name] or find(name, "key", 1, true) or find(name, "token", 1, true)
    or find(name, "secret", 1, true)
end

--- The strings a client must never print: its API key (when non-empty) and
-- the values of any header whose name looks like a credential.
function M.secrets(key, headers)
  local list = {}
  if type(key) == "string" and key ~= "" then list[1] = key end
  if type(headers) == "table" then
    for k, v in pairs(headers) do
      if type(k) == "string" and secret_header(k) then list[#list + 1] = tostring(v) end
    end
  end
  return list
end

----------------------------------------------------------------------------
-- secrets in every form they take on the wire
----------------------------------------------------------------------------

local bit = require "bit"
local band, bor, lshift, rshift = bit.band, bit.bor, bit.lshift, bit.rshift
local char = string.char

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

local function b64encode(s, alphabet)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = byte(s, i, i + 2)
    local n = bor(lshift(a, 16), lshift(b or 0, 8), c or 0)
    local k = c and 4 or (b and 3 or 2)
    for j = 1, 4 do
      out[#out + 1] = j <= k and sub(alphabet, band(rshift(n, 24 - 6 * j), 63) + 1,
                                     band(rshift(n, 24 - 6 * j), 63) + 1) or "="
    end
  end
  return table.concat(out)
end

local B64VAL = {}
for i = 1, 64 do
  B64VAL[byte(B64, i)] = i - 1
  B64VAL[byte(B64URL, i)] = i - 1
end

local function b64decode(s)
  s = gsub(s, "=+$", "")
  if s == "" or find(s, "[^%w%+/_%-]") or #s % 4 == 1 then return nil end
  local out, n, bits = {}, 0, 0
  for i = 1, #s do
    n = bor(lshift(n, 6), B64VAL[byte(s, i)])
    bits = bits + 6
    if bits >= 8 then
      bits = bits - 8
      out[#out + 1] = char(band(rshift(n, bits), 255))
      n = band(n, lshift(1, bits) - 1)
    end
  end
  return table.concat(out)
end
M._b64encode, M._b64decode = b64encode, b64decode

-- The secret itself plus what can be derived from it: the credential after
-- an auth scheme ("Bearer X" -> X) and, for Basic, the decoded "user:pass"
-- and the password alone.
local function expand(k, into)
  into[#into + 1] = k
  local cred = k:match("^%a[%w%-]*%s+(%S+)%s*$")
  if cred then
    into[#into + 1] = cred
    local dec = lower(k):match("^basic%s") and b64decode(cred)
    if dec and not find(dec, "%c") then
      into[#into + 1] = dec
      local pass = dec:match("^[^:]*:(.+)$")
      if pass then into[#into + 1] = pass end
    end
  end
  return into
end

-- Code points of s: a list of { first byte index, byte length, code point }
-- (invalid UTF-8 bytes stand alone with cp = nil).
local function codepoints(s)
  local out, i = {}, 1
  while i <= #s do
    local c = byte(s, i)
    local n, cp = 1, c < 0x80 and c or nil
    if c >= 0xC2 and c <= 0xF4 then
      local len = c < 0xE0 and 2 or (c < 0xF0 and 3 or 4)
      local v, ok = band(c, len == 2 and 0x1F or (len == 3 and 0x0F or 0x07)), i + len - 1 <= #s
      for k = 1, len - 1 do
        local ck = byte(s, i + k)
        if not ck or ck < 0x80 or ck > 0xBF then ok = false; break end
        v = bor(lshift(v, 6), band(ck, 0x3F))
      end
      if ok then n, cp = len, v end
    end
    out[#out + 1] = { i, n, cp }
    i = i + n
  end
  return out
end

local JSON_SHORT = { [8] = "\\b", [9] = "\\t", [10] = "\\n", [12] = "\\f", [13] = "\\r",
                     [34] = '\\"', [47] = "\\/", [92] = "\\\\" }
local HTML_NAMED = { [38] = { "&amp;" }, [60] = { "&lt;" }, [62] = { "&gt;" },
                     [34] = { "&quot;" }, [39] = { "&apos;", "&#39;" } }

-- Does s hold, at i, the JSON \u escape(s) of code point cp? -> end + 1
local function json_u(s, i, cp)
  local function hex4(at)
    local h = sub(s, at, at + 5)
    if sub(h, 1, 2) ~= "\\u" or not find(h, "^\\u%x%x%x%x$") then return nil end
    return tonumber(sub(h, 3), 16)
  end
  local v = hex4(i)
  if not v then return nil end
  if cp < 0x10000 then return v == cp and i + 6 or nil end
  local hi, lo = 0xD800 + rshift(cp - 0x10000, 10), 0xDC00 + band(cp - 0x10000, 0x3FF)
  if v == hi and hex4(i + 6) == lo then return i + 12 end
  return nil
end

-- Does s hold, at i, an HTML character reference to cp? -> end + 1
local function html_ref(s, i, cp)
  if byte(s, i) ~= 38 then return nil end
  local d, e = s:match("^&#(%d+);()", i)
  if d and tonumber(d) == cp then return e end
  local x, e2 = s:match("^&#[xX](%x+);()", i)
  if x and tonumber(x, 16) == cp then return e2 end
  for _, name in ipairs(HTML_NAMED[cp] or {}) do
    if lower(sub(s, i, i + #name - 1)) == name then return i + #name end
  end
  return nil
end

-- Where the secret k (bytes kb, code points cps) ends if it starts at i of s,
-- each character written raw, percent-encoded (either hex case, "+" for a
-- space), JSON-escaped or as an HTML reference. Backtracks, so a "%" or "\"
-- in the secret itself is found in any form.
local function match_at(s, i, k, cps, ci, bi)
  if ci > #cps then return i end
  local cpi = cps[ci]
  local first, len, cp = cpi[1], cpi[2], cpi[3]
  local nbi = bi or first
  if nbi == first + len then return match_at(s, i, k, cps, ci + 1, nil) end
  local b = byte(k, nbi)
  local c = byte(s, i)
  if not c then return nil end
  local r
  if c == b then
    r = match_at(s, i + 1, k, cps, ci, nbi + 1)
    if r then return r end
  end
  if c == 37 then -- %HH
    local h = sub(s, i + 1, i + 2)
    if find(h, "^%x%x$") and tonumber(h, 16) == b then
      r = match_at(s, i + 3, k, cps, ci, nbi + 1)
      if r then return r end
    end
  end
  if c == 43 and b == 32 then
    r = match_at(s, i + 1, k, cps, ci, nbi + 1)
    if r then return r end
  end
  if nbi == first and cp then
    local e
    if c == 92 then
      e = json_u(s, i, cp)
      if not e and JSON_SHORT[cp] and sub(s, i, i + 1) == JSON_SHORT[cp] then e = i + 2 end
    elseif c == 38 then
      e = html_ref(s, i, cp)
    end
    if e then
      r = match_at(s, e, k, cps, ci + 1, nil)
      if r then return r end
    end
  end
  return nil
end

local function redact_forms(s, k)
  local cps = codepoints(k)
  local fb = byte(k, 1)
  local starts = "[%%%+\\&" .. (find(char(fb), "%w") and char(fb) or ("%" .. char(fb))) .. "]"
  if fb >= 128 then starts = "[%%%+\\&" .. char(fb) .. "]" end
  local out, init, last = {}, 1, 1
  while true do
    local i = find(s, starts, init)
    if not i then break end
    local e = match_at(s, i, k, cps, 1, nil)
    if e then
      out[#out + 1] = sub(s, last, i - 1)
      out[#out + 1] = REDACTED
      last, init = e, e
    else
      init = i + 1
    end
  end
  if last == 1 then return s end
  out[#out + 1] = sub(s, last)
  return table.concat(out)
end

-- Base64 text that encodes k somewhere inside (e.g. "user:k" in a Basic
-- header): for each of the three alignments, the characters that depend on
-- k's bytes alone. A found run is redacted whole, padding included.
local function redact_base64(s, k)
  for _, alphabet in ipairs({ B64, B64URL }) do
    for pre = 0, 2 do
      local enc = b64encode(string.rep("\0", pre) .. k .. "\0\0", alphabet)
      local from = math.ceil(8 * pre / 6) + 1
      local to = floor((8 * (pre + #k)) / 6)
      local core = sub(enc, from, to)
      if #core >= 6 then
        local init = 1
        while true do
          local i, j = find(s, core, init, true)
          if not i then break end
          while i > 1 and find(sub(s, i - 1, i - 1), "[%w%+/_%-]") do i = i - 1 end
          while j < #s and find(sub(s, j + 1, j + 1), "[%w%+/_%-=]") do j = j + 1 end
          s = sub(s, 1, i - 1) .. REDACTED .. sub(s, j + 1)
          init = i + #REDACTED
        end
      end
    end
  end
  return s
end

--- The problem with a header set a client is configured with, or nil: a
-- name that is not an HTTP token, or a value with NUL, CR, LF or another
-- control byte (which would cut the header block short or start a new
-- header). Names the header, never shows the value.
function M.header_problem(headers)
  if type(headers) ~= "table" then return nil end
  for k, v in pairs(headers) do
    if type(k) ~= "string" or not find(k, "^[%w!#$%%&'*+%-.^_`|~]+$") then
      return "header name '" .. gsub(tostring(k), "%c", function(c) return "\\" .. byte(c) end)
        .. "' is not a valid HTTP header name"
    end
    if type(v) ~= "string" and type(v) ~= "number" then
      return "header '" .. k .. "' must be a string"
    end
    v = tostring(v)
    if find(v, "%z") then return "the value of header '" .. k .. "' contains a NUL byte" end
    if find(v, "[\r\n]") then return "the value of header '" .. k .. "' contains a line break (CR or LF)" end
    if find(v, "[\1-\8\11\12\14-\31\127]") then
      return "the value of header '" .. k .. "' contains a control character"
    end
  end
  return nil
end

--- Replace every secret (a string or a list of strings) and anything that
-- looks like a credential (Bearer and Basic credentials, sk-... keys,
-- api-key headers, key=... query parameters, userinfo in URLs) with
-- "[redacted]". A secret is found raw, percent-encoded (either hex case,
-- "+" for a space), JSON-escaped ("\/", "\u" with four hex digits), as HTML references, and
-- inside Base64 (a Basic "user:secret"), and its head when an excerpt cut
-- it ("...") ; "Bearer X" and "Basic X" values also hide X and, for Basic,
-- the decoded password.
function M.scrub(s, secrets)
  if s == nil then return nil end
  s = tostring(s)
  if type(secrets) == "string" then secrets = { secrets } end
  if type(secrets) == "table" then
    local list = {}
    for _, k in pairs(secrets) do
      if type(k) == "string" then expand(k, list) end
    end
    -- longest first, so a secret that contains another goes whole
    table.sort(list, function(a, b) return #a > #b end)
    for _, k in ipairs(list) do
      -- very short values would blank out ordinary words
      if #k >= 6 then
        s = plain_replace(s, k, REDACTED)
        s = redact_forms(s, k)
        s = redact_base64(s, k)
        -- an excerpt cut inside the secret ends in "...": its head goes too
        if find(s, "...", 1, true) then
          for n = #k - 1, 4, -1 do
            local head = sub(k, 1, n)
            if byte(head, n) < 0x80 then s = redact_forms(s, head .. "...") end
          end
        end
      end
    end
  end
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
  s = gsub(s, "(%a[%w+.-]*://)[^/%s?#]*@", "%1")
  return s
end

local ENTITIES = { amp = "&", lt = "<", gt = ">", quot = '"', apos = "'", nbsp = " ", ["#39"] = "'" }

--- A short, printable, single-line excerpt of a response body. HTML pages
-- (from proxies and load balancers) are reduced to their title and text.
function M.excerpt(body, ctype, n)
  n = n or 200
  body = tostring(body or "")
  local is_html = (ctype and find(lower(ctype), "html", 1, true)) or
                  find(lower(sub(body, 1, 512)), "<!doctype html", 1, true) or
                  find(lower(sub(body, 1, 512)), "<html", 1, true)
  if is_html then
    local lb = lower(body)
    local title
    local ti, tj = find(lb, "<title[^>]*>")
    if ti then
      local ci = find(lb, "</title>", tj + 1, true)
      if ci then title = sub(body, tj + 1, ci - 1) end
    end
    local text = gsub(body, "<[Ss][Cc][Rr][Ii][Pp][Tt].-</[Ss][Cc][Rr][Ii][Pp][Tt]>", " ")
    text = gsub(text, "<[Ss][Tt][Yy][Ll][Ee].-</[Ss][Tt][Yy][Ll][Ee]>", " ")
    text = gsub(text, "<[Tt][Ii][Tt][Ll][Ee].-</[Tt][Ii][Tt][Ll][Ee]>", " ")
    text = gsub(text, "<!%-%-.-%-%->", " ")
    text = gsub(text, "<[^>]*>", " ")
    body = title and (title .. " - " .. text) or text
    body = gsub(body, "&(#?%w+);", function(e) return ENTITIES[lower(e)] end)
  end
  body = gsub(body, "[%c]", " ")
  -- messages must stay valid UTF-8 whatever the server sent: invalid
  -- sequences (broken, overlong, surrogates, above U+10FFFF) become U+FFFD,
  -- and the cut never ends inside a sequence
  local utf8 = require "specula.json"
  body = utf8.utf8_clean(body)
  body = gsub(body, "%s+", " ")
  body = gsub(body, "^ ", "")
  body = gsub(body, " $", "")
  local cut, was_cut = utf8.utf8_cut(body, n)
  if was_cut then body = cut .. "..." end
  return body
end

local json -- lazily: specula.json

--- The provider's error object of a body, if it has one:
-- { type =, code =, message = } (OpenAI and Anthropic shapes).
function M.error_object(body)
  if type(body) ~= "string" or not find(body, "{", 1, true) then return nil end
  json = json or require "specula.json"
  local v = json.decode(body)
  if type(v) ~= "table" then return nil end
  local e = v.error
  if type(e) == "string" then return { message = e } end
  if type(e) ~= "table" then
    if type(v.message) == "string" and (v.type or v.code) then e = v else return nil end
  end
  local function s(x)
    if type(x) == "string" then return x end
    if type(x) == "number" then return tostring(x) end
    return nil
  end
  return { type = s(e.type), code = s(e.code), message = s(e.message) or s(e.detail), param = s(e.param) }
end

local QUOTA_WORDS = { "insufficient_quota", "quota", "spend limit", "spending limit", "billing",
                      "credit balance", "out of credits", "payment required" }

--- Does an error text say that retrying cannot help (quota, spend limit,
-- billing)? Case-insensitive.
function M.is_quota(text)
  if type(text) ~= "string" then return false end
  local l = lower(text)
  for _, w in ipairs(QUOTA_WORDS) do
    if find(l, w, 1, true) then return true end
  end
  return false
end

--- "429 rate_limit_exceeded: message" (the provider's error code when it is
-- a name, else its type) for an HTTP failure, the error text for a
-- transport failure.
function M.describe(f, n)
  if f.err then return tostring(f.err) end
  local status = tostring(f.status or "?")
  local eo = f.error_object
  if eo == nil then eo = M.error_object(f.body) or false; f.error_object = eo end
  if eo and (eo.message or eo.type or eo.code) then
    -- the code when it is a name ("rate_limit_exceeded"), else the type
    local label = eo.type
    if eo.code and not eo.code:match("^%d+$") then label = eo.code end
    local msg = eo.message and M.excerpt(eo.message, "text/plain", n or 300) or ""
    if label then return status .. " " .. label .. ": " .. msg end
    return status .. ": " .. msg
  end
  local ctype = f.headers and f.headers["content-type"]
  local body = f.body or ""
  if body == "" then return status .. ": empty error body" end
  local kind = (ctype and find(lower(ctype), "html", 1, true)) and "HTML error page" or "non-JSON error body"
  if find(lower(sub(body, 1, 512)), "<html", 1, true) then kind = "HTML error page" end
  return status .. ": " .. kind .. ": \"" .. M.excerpt(body, ctype, n or 160) .. "\""
end

----------------------------------------------------------------------------
-- Retry-After
----------------------------------------------------------------------------

local MONTHS = { jan = 1, feb = 2, mar = 3, apr = 4, may = 5, jun = 6,
                 jul = 7, aug = 8, sep = 9, oct = 10, nov = 11, dec = 12 }

-- Days since 1970-01-01 of a proleptic Gregorian date.
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

--- Epoch seconds of an HTTP date in IMF-fixdate form
-- ("Sun, 06 Nov 1994 08:49:37 GMT"); the obsolete RFC 850 and asctime
-- forms are read too. nil when it is not a date.
function M.parse_http_date(s)
  if type(s) ~= "string" then return nil end
  local d, mon, y, hh, mm, ss = s:match("^%s*%a+,%s+(%d%d?)%s+(%a%a%a)%s+(%d%d%d%d)%s+(%d%d):(%d%d):(%d%d)%s+GMT%s*$")
  if not d then  -- RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
    d, mon, y, hh, mm, ss = s:match("^%s*%a+,%s+(%d%d)%-(%a%a%a)%-(%d%d)%s+(%d%d):(%d%d):(%d%d)%s+GMT%s*$")
    if y then y = tonumber(y); y = y + (y < 70 and 2000 or 1900) end
  end
  if not d then  -- asctime: Sun Nov  6 08:49:37 1994
    mon, d, hh, mm, ss, y = s:match("^%s*%a+%s+(%a%a%a)%s+(%d%d?)%s+(%d%d):(%d%d):(%d%d)%s+(%d%d%d%d)%s*$")
  end
  if not d then return nil end
  local m = MONTHS[lower(mon)]
  d, y, hh, mm, ss = tonumber(d), tonumber(y), tonumber(hh), tonumber(mm), tonumber(ss)
  if not m or d < 1 or d > 31 or hh > 23 or mm > 59 or ss > 60 then return nil end
  return days_from_civil(y, m, d) * 86400 + hh * 3600 + mm * 60 + ss
end

--- The wait a response asks for, in ms: retry-after-ms, else retry-after
-- (delta seconds or an HTTP date, relative to now_s = os.time()). nil when
-- neither header is usable. Past dates give 0.
function M.server_wait(headers, now_s)
  if type(headers) ~= "table" then return nil end
  local v = tonumber(headers["retry-after-ms"])
  if v and v == v and v >= 0 and v < math.huge then return v end
  local ra = headers["retry-after"]
  if type(ra) ~= "string" then return nil end
  local secs = ra:match("^%s*(%d+%.?%d*)%s*$")
  if secs then return tonumber(secs) * 1000 end
  local t = M.parse_http_date(ra)
  if t then
    local delta = t - (now_s or os.time())
    return delta > 0 and delta * 1000 or 0
  end
  return nil
end

----------------------------------------------------------------------------
-- policy
----------------------------------------------------------------------------

local Policy = {}
Policy.__index = Policy

local DEFAULT_ERRORS = { ECONNREFUSED = true, ECONNRESET = true, ETIMEDOUT = true,
                         EIDLE = true, ETRUNCATED = true }

local function check_num(name, v, lo)
  if type(v) ~= "number" or v ~= v or v < (lo or 0) then
    error("specula.llm.retry: " .. name .. " must be a number >= " .. (lo or 0), 3)
  end
  return v
end

--- A retry policy (see the header for the options).
function M.new(opts)
  if getmetatable(opts) == Policy then return opts end
  if opts == false then opts = { max_retries = 0 } end
  if opts ~= nil and type(opts) ~= "table" then
    error("specula.llm.retry: options must be a table (or false)", 2)
  end
  opts = opts or {}
  local p = setmetatable({
    max_retries = check_num("max_retries", opts.max_retries or 3),
    base_ms = check_num("base_ms", opts.base_ms or 500),
    cap_ms = check_num("cap_ms", opts.cap_ms or 8000),
    max_wait_ms = check_num("max_wait_ms", opts.max_wait_ms or 60000),
    jitter = opts.jitter ~= false,
    random = opts.random or random,
    statuses = {}, errors = {},
  }, Policy)
  if p.max_retries ~= floor(p.max_retries) then
    error("specula.llm.retry: max_retries must be an integer", 2)
  end
  for _, s in ipairs(opts.statuses or {}) do p.statuses[s] = true end
  for code in pairs(DEFAULT_ERRORS) do p.errors[code] = true end
  if opts.errors then
    p.errors = {}
    for _, c in ipairs(opts.errors) do p.errors[c] = true end
  end
  return p
end

--- Is this status retried by default?
function M.retryable_status(status)
  return status == 408 or status == 409 or status == 429 or (type(status) == "number" and status >= 500)
end

local function err_code(err)
  return type(err) == "string" and err:match("^(E[%u%d_]+):") or nil
end
M.error_code = err_code

-- Backoff for the n-th retry (n >= 1).
function Policy:backoff(n)
  local b = min(self.cap_ms, self.base_ms * 2 ^ (n - 1))
  if self.jitter then b = b * self.random() end
  return b
end

--- Decide what to do after failed attempt number `attempt`: a wait in ms
-- before the next attempt, or nil and why not.
function Policy:decide(f, attempt)
  if f.retryable == false then return nil, f.why_final end
  if f.delivered then return nil, "part of the stream was already delivered" end
  local server_ms
  if f.err then
    local code = err_code(f.err)
    if not (code and self.errors[code]) then return nil end
  else
    local status, h = f.status, f.headers or {}
    local text = f.body
    if M.is_quota(text) then return nil, "not retried: quota or billing error" end
    local should = h["x-should-retry"]
    should = should and lower(should)
    if should == "false" then return nil, "not retried: x-should-retry: false" end
    if should ~= "true" and f.retryable ~= true and not (M.retryable_status(status) or self.statuses[status]) then
      return nil
    end
    server_ms = M.server_wait(h)
  end
  if attempt > self.max_retries then return nil end
  if server_ms then
    if server_ms > self.max_wait_ms then
      return nil, format("server asked to wait %.0f s, more than max_wait_ms %d",
                         server_ms / 1000, self.max_wait_ms)
    end
    return server_ms
  end
  return self:backoff(attempt)
end

--- Run attempt_fn(n) until it succeeds or the policy gives up.
function Policy:run(attempt_fn)
  local n = 0
  while true do
    n = n + 1
    local ok, a = attempt_fn(n)
    if ok then return a, nil, n end
    local wait, why = self:decide(a, n)
    if not wait then return nil, a, n, why end
    if wait > 0 then sched.sleep(wait) end
  end
end

local http -- lazily: specula.http

--- specula.http.request with retries; non-2xx responses that are not retried
-- (or still fail after the last retry) come back as a failure table.
function M.request(hopts, policy)
  policy = M.new(policy)
  http = http or require "specula.http"
  return policy:run(function()
    local res, err = http.request(hopts)
    if not res then return false, { err = err } end
    if res.status >= 200 and res.status < 300 then return true, res end
    return false, { status = res.status, headers = res.headers, body = res.body }
  end)
end

--- "after N attempt(s)" (for error messages).
function M.attempts_text(n)
  return "after " .. n .. (n == 1 and " attempt" or " attempts")
end

M.Policy = Policy
return M
