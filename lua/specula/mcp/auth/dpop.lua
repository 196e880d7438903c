-- specula.mcp.auth.dpop: proof of possession (RFC 9449): the key, its
-- public JWK and the proofs. Methods of the Auth object; the key declared.
local json = require "specula.json"
local crypto = require "specula.crypto"
local secrets = require "specula.secrets"

local type, tostring, tonumber, pairs, ipairs, setmetatable, error =
  type, tostring, tonumber, pairs, ipairs, setmetatable, error
local format, concat, lower = string.format, table.concat, string.lower
local U = require "specula.mcp.auth.urls"
local parse_url, form, urlenc, has = U.parse_url, U.form, U.urlenc, U.has

local M = {}
-- the methods init.lua puts on the Auth object
local Auth = {}
M.methods = Auth

local declare = secrets.declared   -- declares a credential and returns it

-- The public JWK of a P-256 key from its SubjectPublicKeyInfo PEM (what
-- crypto.pubkey gives): the DER is a fixed 26-byte prefix and the
-- uncompressed point 04 || X || Y.
local function ec_public_jwk(pub_pem)
  local body = pub_pem:gsub("%-%-%-%-%-[^%-]+%-%-%-%-%-", ""):gsub("%s", "")
  local der = crypto.unb64(body)
  if not der or #der ~= 91 or der:byte(27) ~= 4 then return nil end
  return json.object({ kty = "EC", crv = "P-256", x = crypto.b64url(der:sub(28, 59)), y = crypto.b64url(der:sub(60, 91)) })
end
M.ec_public_jwk = ec_public_jwk

-- Does this client bind its tokens to a DPoP key at this authorization
-- server? auth.dpop = true: always; false: never; unset: when the server
-- lists ES256 in dpop_signing_alg_values_supported.
function Auth:_use_dpop(meta)
  if self.o.dpop ~= nil then return self.o.dpop end
  return has(meta and meta.dpop_signing_alg_values_supported, "ES256")
end

-- The DPoP key of this server's tokens (made once, kept with them: a
-- refresh token bound to it needs the same key): { pem, jwk } | nil, err.
function Auth:_dpop_key()
  local e = self.entry
  if e.dpop_key then return e.dpop_key end
  local pem, err = crypto.keygen("ES256")
  if not pem then return nil, self:_err("making the DPoP key: " .. tostring(err)) end
  declare(pem)
  local pub, perr = crypto.pubkey(pem)
  local jwk = pub and ec_public_jwk(pub)
  if not jwk then return nil, self:_err("the DPoP public key: " .. tostring(perr or "not a P-256 key")) end
  e.dpop_key = { pem = pem, jwk = jwk }
  return e.dpop_key
end

-- A DPoP proof for one request (a new jti each time): htm the method, htu
-- the URL without query and fragment, ath the hash of the access token
-- sent with it, nonce the server's when it gave one.
function Auth:_dpop_proof(method, url, access_token, nonce)
  local key, kerr = self:_dpop_key()
  if not key then return nil, kerr end
  local header = crypto.b64url(json.encode(json.object({ typ = "dpop+jwt", alg = "ES256", jwk = key.jwk })))
  local claims = json.object({ jti = crypto.b64url(assert(crypto.random(16))), htm = method,
                               htu = (url:gsub("[?#].*$", "")), iat = os.time(), nonce = nonce })
  if access_token then claims.ath = crypto.b64url(crypto.sha256(access_token)) end
  local input = header .. "." .. crypto.b64url(json.encode(claims))
  local sig, err = crypto.sign("ES256", key.pem, input)
  if not sig then return nil, self:_err("signing a DPoP proof: " .. tostring(err)) end
  return input .. "." .. crypto.b64url(sig)
end

-- POST a form to a token endpoint: the decoded answer | nil, err, status.

return M
