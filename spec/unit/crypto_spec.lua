-- specula.crypto: libcrypto's SHA-256, HMAC, random bytes and JWS
-- signatures through the FFI, checked against published test vectors.
local crypto = require "specula.crypto"

describe("crypto", function()
  it("SHA-256 gives FIPS 180-2's vectors, whole and in pieces", function()
    assert.equal("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
      crypto.sha256_hex("abc"))
    assert.equal("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      crypto.sha256_hex(""))
    local msg = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
    local want = "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
    assert.equal(want, crypto.sha256_hex(msg))
    local h = crypto.hasher()
    for i = 1, #msg, 5 do h:add(msg:sub(i, i + 4)) end
    assert.equal(want, h:hex())
    assert.has_error(function() h:add("x") end)
  end)

  it("the reused digester (sha256_hex, sha256_into) gives the one-shot digest, input after input", function()
    local ffi = require "ffi"
    local out = ffi.new("unsigned char[32]")
    -- many inputs through the one digester: each reset, none carried over
    for i = 0, 300 do
      local s = ("q%d"):rep(i % 17) .. ("\0"):rep(i % 3) .. tostring(i)
      local raw = crypto.sha256(s)
      assert.equal(crypto.hex(raw), crypto.sha256_hex(s), "input " .. i)
      crypto.sha256_into(s, out)
      assert.equal(raw, ffi.string(out, 32), "input " .. i)
      -- the same bytes at a C pointer (a buffer no Lua string copies)
      local buf = ffi.new("char[?]", #s + 1, s)
      assert.equal(crypto.hex(raw), crypto.sha256_hex_at(buf, #s), "input " .. i)
    end
    crypto.sha256_into("abc", out)
    assert.equal("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", crypto.hex(ffi.string(out, 32)))
  end)

  it("SHA-256 of pieces at C pointers is the digest of their concatenation", function()
    local ffi = require "ffi"
    local parts, lens = ffi.new("const char *[4]"), ffi.new("size_t[4]")
    local keep = { "a", "", "bc", "dbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq" }
    for i = 1, 4 do parts[i - 1], lens[i - 1] = keep[i], #keep[i] end
    assert.equal(crypto.sha256_hex(table.concat(keep)), crypto.sha256_hex_parts(parts, lens, 4))
    assert.equal("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", crypto.sha256_hex_parts(parts, lens, 3))
    -- no pieces: the empty text's digest
    assert.equal("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", crypto.sha256_hex_parts(parts, lens, 0))
    -- a part that is no text cannot be digested: the C call says so
    local core = require "specula.internal.core"
    parts[1], lens[1] = nil, 3
    local d = ffi.gc(core.C.sp_crypto_digester_new(), core.C.sp_crypto_digester_free)
    assert.equal(-1, core.C.sp_crypto_digester_hex_parts(d, parts, lens, 2, ffi.new("char[65]")))
  end)

  it("hashes a file, and names a file it cannot read", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "wb")); f:write(("x"):rep(200000)); f:close()
    assert.equal(crypto.sha256_hex(("x"):rep(200000)), crypto.sha256_file(path))
    os.remove(path)
    local d, err = crypto.sha256_file(path)
    assert.is_nil(d)
    assert.matches("^EIO: ", err)
  end)

  it("HMAC-SHA-256 gives RFC 4231's test case 2", function()
    assert.equal("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
      crypto.hex(crypto.hmac_sha256("Jefe", "what do ya want for nothing?")))
  end)

  it("random bytes differ between calls", function()
    local a, b = crypto.random(32), crypto.random(32)
    assert.equal(32, #a)
    assert.not_equal(a, b)
    assert.equal("", crypto.random(0))
  end)

  it("Base64 and Base64url follow RFC 4648's vectors", function()
    local vec = { [""] = "", f = "Zg==", fo = "Zm8=", foo = "Zm9v", foob = "Zm9vYg==",
                  fooba = "Zm9vYmE=", foobar = "Zm9vYmFy" }
    for plain, enc in pairs(vec) do
      assert.equal(enc, crypto.b64(plain))
      assert.equal(enc:gsub("=", ""), crypto.b64url(plain))
      assert.equal(plain, crypto.unb64(enc))
    end
    assert.equal("-_8", crypto.b64url("\251\255"))
    assert.equal("\251\255", crypto.unb64("-_8"))
    assert.is_nil(crypto.unb64("a$bc"))
  end)

  for _, alg in ipairs({ "RS256", "ES256" }) do
    it(alg .. " signatures verify with the public key and fail when tampered", function()
      local pem = assert(crypto.keygen(alg))
      assert.matches("BEGIN PRIVATE KEY", pem)
      local pub = assert(crypto.pubkey(pem))
      assert.matches("BEGIN PUBLIC KEY", pub)
      local sig = assert(crypto.sign(alg, pem, "header.payload"))
      assert.equal(alg == "ES256" and 64 or 256, #sig)
      assert.is_true(crypto.verify(alg, pub, "header.payload", sig))
      assert.is_false(crypto.verify(alg, pub, "header.payloaD", sig))
      local bad = string.char((sig:byte(1) + 1) % 256) .. sig:sub(2)
      assert.is_false(crypto.verify(alg, pub, "header.payload", bad))
    end)
  end

  it("refuses a key of the wrong kind or algorithm, without key bytes in the message", function()
    local rsa = assert(crypto.keygen("RS256"))
    local sig, err = crypto.sign("ES256", rsa, "x")
    assert.is_nil(sig)
    assert.matches("not an EC key", err)
    sig, err = crypto.sign("HS999", rsa, "x")
    assert.is_nil(sig)
    assert.matches("unsupported", err)
    sig, err = crypto.sign("RS256", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "x")
    assert.is_nil(sig)
    assert.matches("not a PEM private key", err)
    assert.not_matches("AAAA", err)
  end)
end)
