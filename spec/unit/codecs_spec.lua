-- The codecs specula takes from libraries: hex and Base64 from libcrypto
-- (specula.crypto), percent-encoding and URL parsing from libcurl
-- (specula.url). Known vectors, edge cases (empty, binary, invalid input as
-- an error value), and a comparison with the hand-written codecs they
-- replaced (kept here only as the reference): the same bytes out for the
-- same bytes in, so no caller sees a change.
local crypto = require "specula.crypto"
local url = require "specula.url"

local byte, char, format = string.byte, string.char, string.format

-- Deterministic bytes (an LCG), so a failure always reproduces.
local function bytes(seed, n)
  local s, t = seed, {}
  for i = 1, n do
    s = (s * 1103515245 + 12345) % 2147483648
    t[i] = char(math.floor(s / 65536) % 256)
  end
  return table.concat(t)
end

-- ---- the hand-written codecs as they were (the reference) ----------------
local ref = {}
function ref.hex(s) return (s:gsub(".", function(c) return format("%02x", byte(c)) end)) end
function ref.pct(s, extra)
  return (s:gsub("[^%w%-%._~" .. (extra or "") .. "]", function(c) return format("%%%02X", c:byte()) end))
end
function ref.form_decode(s)
  return (s:gsub("+", " "):gsub("%%(%x%x)", function(h) return char(tonumber(h, 16)) end))
end
local STD = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local URLSAFE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
function ref.b64(s, alphabet, pad)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = byte(s, i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local k = c and 4 or (b and 3 or 2)
    for j = 1, 4 do
      local v = math.floor(n / 2 ^ (24 - 6 * j)) % 64 + 1
      if j <= k then out[#out + 1] = alphabet:sub(v, v) elseif pad then out[#out + 1] = "=" end
    end
  end
  return table.concat(out)
end

describe("hex (libcrypto)", function()
  it("encodes lowercase and decodes either case", function()
    assert.equal("", crypto.hex(""))
    assert.equal("00ff10abcdef", crypto.hex("\0\255\16\171\205\239"))
    assert.equal("\0\255\16\171\205\239", crypto.unhex("00FF10abCDef"))
    assert.equal("", crypto.unhex(""))
  end)

  it("gives the hand encoder's bytes for every byte value and random binary", function()
    local all = {}
    for i = 0, 255 do all[#all + 1] = char(i) end
    all = table.concat(all)
    assert.equal(ref.hex(all), crypto.hex(all))
    for seed = 1, 50 do
      local s = bytes(seed, seed * 7 % 97)
      assert.equal(ref.hex(s), crypto.hex(s))
      assert.equal(s, crypto.unhex(crypto.hex(s)))
    end
  end)

  it("returns nil and a message for input no encoder wrote", function()
    for _, bad in ipairs({ "abc", "zz", "0g", "00 11", "00\0" .. "0" }) do
      local v, err = crypto.unhex(bad)
      assert.is_nil(v, bad)
      assert.matches("^EINVAL: hex: ", err)
    end
    local v, err = crypto.unhex(42)
    assert.is_nil(v)
    assert.matches("string expected", err)
    assert.has_error(function() crypto.hex(nil) end, "crypto.hex: string expected, got nil")
  end)
end)

describe("Base64 (libcrypto)", function()
  it("follows RFC 4648's vectors in both alphabets", function()
    local vec = { { "", "" }, { "f", "Zg==" }, { "fo", "Zm8=" }, { "foo", "Zm9v" }, { "foob", "Zm9vYg==" },
                  { "fooba", "Zm9vYmE=" }, { "foobar", "Zm9vYmFy" } }
    for _, v in ipairs(vec) do
      assert.equal(v[2], crypto.b64(v[1]))
      assert.equal((v[2]:gsub("=", "")), crypto.b64url(v[1]))
      assert.equal(v[1], crypto.unb64(v[2]))
      assert.equal(v[1], crypto.unb64((v[2]:gsub("=", ""))))
    end
    assert.equal("+/8=", crypto.b64("\251\255"))
    assert.equal("-_8", crypto.b64url("\251\255"))
    assert.equal("\251\255", crypto.unb64("-_8"))
    assert.equal("\251\251\254\255", crypto.unb64("+/v+/w"))
    assert.equal("\251\251\254\255", crypto.unb64("+/v-_w"))  -- the alphabets mixed, as before
  end)

  it("gives the hand encoder's bytes on random binary, and decodes them back", function()
    for seed = 1, 80 do
      local s = bytes(seed, seed % 41)
      assert.equal(ref.b64(s, STD, true), crypto.b64(s))
      assert.equal(ref.b64(s, URLSAFE, false), crypto.b64url(s))
      assert.equal(s, crypto.unb64(crypto.b64(s)))
      assert.equal(s, crypto.unb64(crypto.b64url(s)))
    end
  end)

  it("returns nil and a message for input no encoder wrote", function()
    for _, bad in ipairs({ "a$bc", "Zg=g", "Z", "Zm9vY", "Zm 9v", "Zm9v\n", "\0\0\0\0" }) do
      local v, err = crypto.unb64(bad)
      assert.is_nil(v, bad)
      assert.matches("^EINVAL: base64: ", err)
    end
    assert.equal("", crypto.unb64("=="))  -- padding alone: no bytes
  end)
end)

describe("percent-encoding (libcurl)", function()
  it("escapes all but the unreserved characters, uppercase hex", function()
    assert.equal("", url.escape(""))
    assert.equal("AZaz09-._~", url.escape("AZaz09-._~"))
    assert.equal("a%20b%2Fc%3F%25%2B%00%FF", url.escape("a b/c?%+\0\255"))
    assert.equal("/tmp/a%20b/%C3%A9", url.escape("/tmp/a b/\195\169", "/"))
    assert.equal("a:b/c?d%20e", url.escape("a:b/c?d e", ":/?#[]@!$&'()*+,;=%"))
  end)

  it("gives the hand encoders' bytes for every byte value and random binary", function()
    local all = {}
    for i = 0, 255 do all[#all + 1] = char(i) end
    all = table.concat(all)
    assert.equal(ref.pct(all), url.escape(all))
    assert.equal(ref.pct(all, "/"), url.escape(all, "/"))
    assert.equal(ref.pct(all, ":/%?#%[%]@!%$&'%(%)%*%+,;=%%"), url.escape(all, ":/?#[]@!$&'()*+,;=%"))
    for seed = 1, 50 do
      local s = bytes(seed, seed * 3 % 67)
      assert.equal(ref.pct(s), url.escape(s))
      assert.equal(s, url.unescape(url.escape(s)))
    end
  end)

  it("decodes %XX of either case, leaves a stray % alone, and reads + as a space in forms", function()
    assert.equal("a b+c", url.unescape("a%20b+c"))
    assert.equal("a b+c", url.form_decode("a+b%2Bc"))
    assert.equal("\0\255\171", url.unescape("%00%ff%aB"))
    assert.equal("100% %z %4", url.unescape("100% %z %4"))
    assert.equal("", url.form_decode(""))
    for _, s in ipairs({ "x=1&y=%41+b", "%%41", "++%2B%2b", "%e2%82%ac", "%4", "%" }) do
      assert.equal(ref.form_decode(s), url.form_decode(s), s)
    end
  end)

  it("names a value of the wrong type", function()
    assert.has_error(function() url.escape(nil) end, "url.escape: string expected, got nil")
    assert.has_error(function() url.escape("x", 1) end, "url.escape: keep must be a string")
    assert.has_error(function() url.unescape({}) end, "url.unescape: string expected, got table")
  end)
end)

describe("URL parsing (libcurl's curl_url)", function()
  it("splits an absolute URL into its parts, userinfo and fragment left out", function()
    assert.same({ scheme = "https", host = "mcp.example.com", port = "8443", path = "/a/../b", query = "x=1&y" },
      url.parse("https://user:pw@mcp.example.com:8443/a/../b?x=1&y#frag"))
    assert.same({ scheme = "http", host = "h", path = "/" }, url.parse("http://h"))
    assert.same({ scheme = "custom", host = "h", path = "/p" }, url.parse("custom://h/p"))
    assert.same({ scheme = "http", host = "[::1]", port = "80", path = "/" }, url.parse("http://[::1]:80/"))
  end)

  it("returns nil and a message (never the URL) for text that is not an absolute URL", function()
    for _, bad in ipairs({ "", "/relative", "not a url", "http://", "http://h:99999/", "http://secret@\0x/" }) do
      local p, err = url.parse(bad)
      assert.is_nil(p, bad)
      assert.matches("^EINVAL: url: ", err)
      assert.not_matches("secret", err)
    end
    local p, err = url.parse(nil)
    assert.is_nil(p)
    assert.matches("string expected", err)
  end)
end)
