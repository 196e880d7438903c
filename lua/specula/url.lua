-- specula.url: percent-encoding and URL parsing from the engine
-- (engine/sp_url.c, libcurl's curl_easy_escape, curl_easy_unescape and
-- curl_url API). Nothing here encodes or parses by hand.
--
--   url.escape(s [, keep])  -> every byte but A-Z a-z 0-9 - . _ ~ as %XX
--                              (uppercase), the bytes of keep left as they are
--   url.unescape(s)         -> %XX decoded (a stray "%" stays)
--   url.form_decode(s)      -> the same, "+" read as a space first
--   url.parse(u)            -> { scheme =, host =, port =, path =, query = },
--                              or nil, "EINVAL: url: ..."
local core = require "specula.internal.core"

local ffi = core.ffi
local C = core.C
local ffi_string, ffi_new = ffi.string, ffi.new
local type, error, tostring = type, error, tostring

local M = {}

-- Output buffer, reused while small enough to keep.
local BUF_KEEP = 65536
local buf, bufcap = ffi_new("char[?]", 1024), 1024
local function outbuf(need)
  if need <= bufcap then return buf end
  local b = ffi_new("char[?]", need)
  if need <= BUF_KEEP then buf, bufcap = b, need end
  return b
end

local function check(s, what, level)
  if type(s) ~= "string" then error("url." .. what .. ": string expected, got " .. type(s), level + 1) end
end

function M.escape(s, keep)
  check(s, "escape", 2)
  if keep ~= nil and type(keep) ~= "string" then error("url.escape: keep must be a string", 2) end
  if s == "" then return "" end
  local need = 3 * #s + 1
  local out = outbuf(need)
  local err, errlen = core.errbuf()
  local n = C.sp_url_escape(s, #s, keep, out, need, err, errlen)
  if n < 0 then error("url.escape: " .. ffi_string(err), 2) end
  return ffi_string(out, n)
end

local function unescape(s, form, what)
  check(s, what, 3)
  if s == "" then return "" end
  local need = #s + 1
  local out = outbuf(need)
  local err, errlen = core.errbuf()
  local n = C.sp_url_unescape(s, #s, form, out, need, err, errlen)
  if n < 0 then error("url." .. what .. ": " .. ffi_string(err), 3) end
  return ffi_string(out, n)
end

function M.unescape(s) return unescape(s, 0, "unescape") end
function M.form_decode(s) return unescape(s, 1, "form_decode") end

local NAMES = { "scheme", "host", "port", "path", "query" }
local parts = ffi_new("long[?]", 2 * #NAMES)

-- The parts of an absolute URL as libcurl reads it; port and query are nil
-- when absent, path at least "/".
function M.parse(u)
  if type(u) ~= "string" then return nil, "EINVAL: url: a string expected, got " .. type(u) end
  local need = #u * 3 + 64  -- what curl writes back is never much longer
  local out = outbuf(need)
  local err, errlen = core.errbuf()
  if C.sp_url_parse(u, #u, out, need, parts, err, errlen) ~= 0 then
    return nil, "EINVAL: " .. ffi_string(err)   -- not the URL: it may hold a credential
  end
  local t = {}
  for i, name in ipairs(NAMES) do
    local len = tonumber(parts[2 * i - 1])
    if len >= 0 then t[name] = ffi_string(out + parts[2 * i - 2], len) end
  end
  return t
end

return M
