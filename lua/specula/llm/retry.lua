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
-- Helpers for messages (secrets are specula.secrets' business):
--   retry.endpoint(url)            url without userinfo, query or fragment
--   retry.excerpt(body, ctype, n)  short printable excerpt of an error body
--                                  (HTML reduced to its title and text)
--   retry.describe(failure)        "429 code_or_type: message" | transport error text
--   retry.parse_http_date(s)       IMF-fixdate -> epoch seconds | nil
--   retry.server_wait(headers, now_s) -> ms | nil
--   retry.is_quota(text)           does an error text speak of quota/billing?
local sched = require "specula.internal.sched"

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

return M
