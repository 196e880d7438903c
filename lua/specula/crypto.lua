-- specula.crypto: SHA-256, HMAC, random bytes and JWS signatures from the
-- engine (engine/sp_crypto.c, OpenSSL's libcrypto), plus the encodings that
-- go with them (hex, Base64, Base64url). Nothing here is a hand-written
-- primitive: the Lua side only moves bytes.
--
--   crypto.sha256(s)            -> 32 raw bytes
--   crypto.sha256_hex(s)        -> 64 lowercase hex digits
--   crypto.sha256_file(path)    -> hex digest, or nil, "EIO: path: reason"
--   crypto.hasher()             -> h; h:add(s) ...; h:hex() / h:raw()
--   crypto.hmac_sha256(key, s)  -> 32 raw bytes
--   crypto.random(n)            -> n random bytes, or nil, err
--   crypto.sign(alg, pem, s)    -> signature bytes, or nil, err  (RS256, ES256)
--   crypto.verify(alg, pem, s, sig) -> true/false, or nil, err
--   crypto.keygen(alg)          -> PEM private key, or nil, err
--   crypto.pubkey(pem)          -> PEM public key, or nil, err
--   crypto.hex(s), crypto.b64(s), crypto.b64url(s), crypto.unb64(s)
local core = require "specula.core"

local ffi = core.ffi
local C = core.C
local byte, char, format, concat = string.byte, string.char, string.format, table.concat
local ffi_string, ffi_new = ffi.string, ffi.new

local M = {}

local out32 = ffi_new("unsigned char[32]")

local function hex(s)
  return (s:gsub(".", function(c) return format("%02x", byte(c)) end))
end
M.hex = hex

function M.unhex(s)
  if type(s) ~= "string" or #s % 2 ~= 0 or s:find("[^%x]") then return nil end
  return (s:gsub("%x%x", function(h) return char(tonumber(h, 16)) end))
end

function M.sha256(s)
  assert(type(s) == "string", "crypto.sha256: string expected")
  C.sp_crypto_sha256(s, #s, out32)
  return ffi_string(out32, 32)
end

function M.sha256_hex(s)
  return hex(M.sha256(s))
end

-- An incremental digest: add pieces, read the hex (or raw) digest once.
local Hasher = {}
Hasher.__index = Hasher

function M.hasher()
  local h = C.sp_crypto_sha256_new()
  if h == nil then error("crypto.hasher: out of memory", 2) end
  return setmetatable({ h = ffi.gc(h, C.sp_crypto_sha256_free) }, Hasher)
end

function Hasher:add(s)
  assert(self.h, "crypto.hasher: already finished")
  s = tostring(s)
  C.sp_crypto_sha256_add(self.h, s, #s)
  return self
end

function Hasher:raw()
  assert(self.h, "crypto.hasher: already finished")
  local h = ffi.gc(self.h, nil)
  self.h = nil
  C.sp_crypto_sha256_finish(h, out32)
  return ffi_string(out32, 32)
end

function Hasher:hex()
  return hex(self:raw())
end

function M.sha256_file(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, "EIO: " .. tostring(err) end
  local h = M.hasher()
  while true do
    local chunk = f:read(65536)
    if not chunk then break end
    h:add(chunk)
  end
  f:close()
  return h:hex()
end

function M.hmac_sha256(key, s)
  assert(type(key) == "string" and type(s) == "string", "crypto.hmac_sha256: strings expected")
  C.sp_crypto_hmac_sha256(key, #key, s, #s, out32)
  return ffi_string(out32, 32)
end

function M.random(n)
  assert(type(n) == "number" and n >= 0, "crypto.random: a byte count expected")
  if n == 0 then return "" end
  local buf = ffi_new("unsigned char[?]", n)
  local err, errlen = core.errbuf()
  if C.sp_crypto_random(buf, n, err, errlen) ~= 0 then
    return nil, "ECRYPTO: " .. ffi_string(err)
  end
  return ffi_string(buf, n)
end

local function check_alg(alg)
  if alg ~= "RS256" and alg ~= "ES256" then
    return nil, "ECRYPTO: unsupported signature algorithm " .. tostring(alg) .. " (RS256 and ES256 are)"
  end
  return true
end

function M.sign(alg, pem, s)
  local ok, e = check_alg(alg)
  if not ok then return nil, e end
  assert(type(pem) == "string" and type(s) == "string", "crypto.sign: PEM key and data expected")
  local out = ffi_new("unsigned char[1024]")
  local err, errlen = core.errbuf()
  local n = C.sp_crypto_sign(alg, pem, #pem, s, #s, out, 1024, err, errlen)
  if n < 0 then return nil, "ECRYPTO: " .. ffi_string(err) end
  return ffi_string(out, n)
end

function M.verify(alg, pem, s, sig)
  local ok, e = check_alg(alg)
  if not ok then return nil, e end
  assert(type(pem) == "string" and type(s) == "string" and type(sig) == "string",
    "crypto.verify: PEM key, data and signature expected")
  local err, errlen = core.errbuf()
  local r = C.sp_crypto_verify(alg, pem, #pem, s, #s, sig, #sig, err, errlen)
  if r < 0 then return nil, "ECRYPTO: " .. ffi_string(err) end
  return r == 1
end

local function pem_call(fn, ...)
  local cap = 16384
  local out = ffi_new("char[?]", cap)
  local err, errlen = core.errbuf()
  local args = { ... }
  args[#args + 1] = out
  args[#args + 1] = cap
  args[#args + 1] = err
  args[#args + 1] = errlen
  local n = fn(unpack(args))
  if n < 0 then return nil, "ECRYPTO: " .. ffi_string(err) end
  return ffi_string(out, n)
end

function M.keygen(alg)
  local ok, e = check_alg(alg)
  if not ok then return nil, e end
  return pem_call(C.sp_crypto_keygen, alg)
end

function M.pubkey(pem)
  assert(type(pem) == "string", "crypto.pubkey: PEM key expected")
  return pem_call(C.sp_crypto_pubkey, pem, #pem)
end

-- ---- Base64 (RFC 4648 §4 and §5) -----------------------------------------
local STD = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
local ENC = { [STD] = {}, [URL] = {} }
for alphabet, t in pairs(ENC) do
  for i = 1, 64 do t[i - 1] = alphabet:sub(i, i) end
end
local DEC = {}
for i = 1, 64 do
  DEC[byte(STD, i)] = i - 1
  DEC[byte(URL, i)] = i - 1
end

local function b64(s, alphabet, pad)
  local t, out = ENC[alphabet], {}
  local n = #s
  for i = 1, n - 2, 3 do
    local a, b, c = byte(s, i, i + 2)
    local v = a * 65536 + b * 256 + c
    out[#out + 1] = t[math.floor(v / 262144)] .. t[math.floor(v / 4096) % 64]
      .. t[math.floor(v / 64) % 64] .. t[v % 64]
  end
  local rest = n % 3
  if rest == 1 then
    local v = byte(s, n) * 65536
    out[#out + 1] = t[math.floor(v / 262144)] .. t[math.floor(v / 4096) % 64] .. (pad and "==" or "")
  elseif rest == 2 then
    local a, b = byte(s, n - 1, n)
    local v = a * 65536 + b * 256
    out[#out + 1] = t[math.floor(v / 262144)] .. t[math.floor(v / 4096) % 64]
      .. t[math.floor(v / 64) % 64] .. (pad and "=" or "")
  end
  return concat(out)
end

function M.b64(s) return b64(s, STD, true) end
function M.b64url(s) return b64(s, URL, false) end

-- Decodes either alphabet, padded or not; nil for anything else.
function M.unb64(s)
  if type(s) ~= "string" then return nil end
  s = s:gsub("=+$", "")
  if #s % 4 == 1 then return nil end
  local out, acc, bits = {}, 0, 0
  for i = 1, #s do
    local v = DEC[byte(s, i)]
    if not v then return nil end
    acc = acc * 64 + v
    bits = bits + 6
    if bits >= 8 then
      bits = bits - 8
      local d = 2 ^ bits
      out[#out + 1] = char(math.floor(acc / d))
      acc = acc % d
    end
  end
  return concat(out)
end

return M
