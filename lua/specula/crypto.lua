-- specula.crypto: SHA-256, HMAC, random bytes and JWS signatures from the
-- engine (engine/sp_crypto.c, OpenSSL's libcrypto), plus the encodings that
-- go with them (hex, Base64, Base64url, also libcrypto's). Nothing here is
-- a hand-written primitive: the Lua side only moves bytes.
--
--   crypto.sha256(s)            -> 32 raw bytes
--   crypto.sha256_into(s, out)  -- the same into 32 bytes of cdata
--   crypto.sha256_hex(s)        -> 64 lowercase hex digits
--   crypto.sha256_hex_at(p, n)  -> the same of n bytes at a C pointer
--   crypto.sha256_file(path)    -> hex digest, or nil, "EIO: path: reason"
--   crypto.hasher()             -> h; h:add(s) ...; h:hex() / h:raw()
--   crypto.hmac_sha256(key, s)  -> 32 raw bytes
--   crypto.random(n)            -> n random bytes, or nil, err
--   crypto.sign(alg, pem, s)    -> signature bytes, or nil, err  (RS256, ES256)
--   crypto.verify(alg, pem, s, sig) -> true/false, or nil, err
--   crypto.keygen(alg)          -> PEM private key, or nil, err
--   crypto.pubkey(pem)          -> PEM public key, or nil, err
--   crypto.hex(s), crypto.b64(s), crypto.b64url(s)  -> text
--   crypto.unhex(s), crypto.unb64(s)  -> bytes, or nil, "EINVAL: ..."
local core = require "specula.internal.core"

local ffi = core.ffi
local C = core.C
local ffi_string, ffi_new = ffi.string, ffi.new

local M = {}

local out32 = ffi_new("unsigned char[32]")

-- Output buffer for the encoders, reused while small enough to keep.
local BUF_KEEP = 65536
local buf, bufcap = ffi_new("uint8_t[?]", 1024), 1024
local function outbuf(need)
  if need <= bufcap then return buf end
  local b = ffi_new("uint8_t[?]", need)
  if need <= BUF_KEEP then buf, bufcap = b, need end
  return b
end

-- Runs one of the engine's encoders over s: its output, or nil and
-- "EINVAL: <what>" for input it refuses.
local function codec(fn, s, need, ...)
  local out = outbuf(need)
  local err, errlen = core.errbuf()
  local n
  if select("#", ...) > 0 then
    n = fn(s, #s, ..., out, need, err, errlen)
  else
    n = fn(s, #s, out, need, err, errlen)
  end
  if n < 0 then return nil, "EINVAL: " .. ffi_string(err) end
  return ffi_string(out, n)
end

-- An encoder's output; it refuses only input past its size limits (GiBs).
-- need(n): the output buffer for n input bytes.
local function encoded(what, s, fn, need, ...)
  if type(s) ~= "string" then error("crypto." .. what .. ": string expected, got " .. type(s), 3) end
  local r, err = codec(fn, s, need(#s), ...)
  if not r then error("crypto." .. what .. ": " .. err, 3) end
  return r
end

local function hexlen(n) return 2 * n + 1 end  -- with the NUL

-- Lowercase hex of s.
local function hex(s)
  return encoded("hex", s, C.sp_crypto_hex_encode, hexlen)
end
M.hex = hex

-- The bytes of hex digits (either case, an even number); nil and
-- "EINVAL: hex: ..." for anything else.
function M.unhex(s)
  if type(s) ~= "string" then return nil, "EINVAL: hex: a string expected, got " .. type(s) end
  return codec(C.sp_crypto_hex_decode, s, math.floor(#s / 2) + 1)
end

function M.sha256(s)
  assert(type(s) == "string", "crypto.sha256: string expected")
  C.sp_crypto_sha256(s, #s, out32)
  return ffi_string(out32, 32)
end

-- The query digest of every record goes through here: one call into C,
-- on a digester whose algorithm libcrypto fetched once (sp_digester).
local out65 = ffi_new("char[65]")
local digester
local function get_digester()
  if digester == nil then
    local d = C.sp_crypto_digester_new()
    digester = d ~= nil and ffi.gc(d, C.sp_crypto_digester_free) or false
  end
  return digester
end
function M.sha256_hex(s)
  assert(type(s) == "string", "crypto.sha256: string expected")
  local d = digester or get_digester()
  if d and C.sp_crypto_digester_hex(d, s, #s, out65) == 0 then
    local h = ffi_string(out65, 64)
    return h
  end
  return hex(M.sha256(s))
end

-- The same of len bytes at a C pointer (an encoder's buffer, which no Lua
-- string copies: specula.provenance's query digest).
function M.sha256_hex_at(p, len)
  local d = digester or get_digester()
  if d and C.sp_crypto_digester_hex(d, p, len, out65) == 0 then
    local h = ffi_string(out65, 64)
    return h
  end
  return hex(M.sha256(ffi_string(p, len)))
end

-- The same of the concatenation of n pieces: parts (const char *[n]) and
-- lens (size_t[n]), cdata the caller fills (specula.run.inputs: a query
-- record's canonical text, from its input line's bytes, never made).
function M.sha256_hex_parts(parts, lens, n)
  local d = digester or get_digester()
  if d and C.sp_crypto_digester_hex_parts(d, parts, lens, n, out65) == 0 then
    local h = ffi_string(out65, 64)
    return h
  end
  local t = {}
  for i = 0, n - 1 do t[#t + 1] = ffi_string(parts[i], lens[i]) end
  return hex(M.sha256(table.concat(t)))
end

-- SHA-256 of s into out (32 bytes of cdata), for callers that digest many
-- short strings (specula.run.inputs: every input id).
function M.sha256_into(s, out)
  local d = digester or get_digester()
  if d and C.sp_crypto_digester_sum(d, s, #s, out) == 0 then return end
  C.sp_crypto_sha256(s, #s, out)
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

-- ---- Base64 (RFC 4648 §4 and §5), libcrypto's ----------------------------------
local function b64len(n) return math.ceil(n / 3) * 4 + 1 end  -- with the NUL

-- Standard alphabet, "=" padded.
function M.b64(s)
  return encoded("b64", s, C.sp_crypto_b64_encode, b64len, 0)
end

-- URL-safe alphabet, no padding (JWS, PKCE).
function M.b64url(s)
  return encoded("b64url", s, C.sp_crypto_b64_encode, b64len, 1)
end

-- Decodes either alphabet, padded or not; nil and "EINVAL: base64: ..."
-- for anything else.
function M.unb64(s)
  if type(s) ~= "string" then return nil, "EINVAL: base64: a string expected, got " .. type(s) end
  return codec(C.sp_crypto_b64_decode, s, math.ceil(#s / 4) * 3 + 1)
end

return M
