-- specula.secrets: the registry and the scrubber every output boundary
-- calls. A secret is redacted in every form a writer produces (raw,
-- percent, JSON and \u escapes, nested escapes, HTML references, Base64 at
-- every alignment, hex, cut by an excerpt, split across stream chunks),
-- and nothing else is touched.
local secrets = require "specula.secrets"
local scrub, msg = secrets.scrub, secrets.scrub_message

local SECRET = "123456:ABC/x+y"   -- a bot token: ":" "/" "+" all get encoded

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local function b64(s, url, nopad)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local k = c and 4 or (b and 3 or 2)
    for j = 1, 4 do
      local v = math.floor(n / 2 ^ (24 - 6 * j)) % 64
      out[#out + 1] = j <= k and B64:sub(v + 1, v + 1) or "="
    end
  end
  local r = table.concat(out)
  if url then r = r:gsub("%+", "-"):gsub("/", "_") end
  if nopad then r = r:gsub("=+$", "") end
  return r
end

local function pct(s, fmt, plus)
  return (s:gsub("[^%w%-%._~]", function(c)
    if plus and c == " " then return "+" end
    return string.format(fmt, c:byte())
  end))
end

-- JSON string body of s (no quotes) with every character as \uXXXX
local function json_u(s)
  local out, i = {}, 1
  while i <= #s do
    local c = s:byte(i)
    local n = c < 0x80 and 1 or (c < 0xE0 and 2 or (c < 0xF0 and 3 or 4))
    local cp = c
    if n > 1 then
      cp = c % (2 ^ (7 - n))
      for j = 1, n - 1 do cp = cp * 64 + s:byte(i + j) % 64 end
    end
    if cp >= 0x10000 then
      local v = cp - 0x10000
      out[#out + 1] = string.format("\\u%04X\\u%04x", 0xD800 + math.floor(v / 1024), 0xDC00 + v % 1024)
    else
      out[#out + 1] = string.format("\\u%04x", cp)
    end
    i = i + n
  end
  return table.concat(out)
end

local function hex(s, fmt) return (s:gsub(".", function(c) return string.format(fmt or "%02x", c:byte()) end)) end

-- No trace of the secret: none of its 4-byte pieces, raw or encoded.
local function assert_clean(m, secret)
  assert.is_truthy(m:find("[redacted]", 1, true), "nothing redacted in: " .. m)
  for i = 1, #secret - 3 do
    local piece = secret:sub(i, i + 3)
    assert.is_nil(m:find(piece, 1, true), "'" .. piece .. "' left in: " .. m)
  end
end

describe("secrets.declared", function()
  it("declares a credential and hands it back; anything else comes back undeclared", function()
    local n = secrets.count()
    local v = "tok-declared-where-obtained-0001"
    assert.equals(v, secrets.declared(v))
    assert.equals(n + 1, secrets.count())
    assert.equals("[redacted]", scrub(v))
    assert.is_nil(secrets.declared(nil))
    assert.equals(42, secrets.declared(42))
    assert.equals(n + 1, secrets.count())
  end)
end)

describe("secrets.scrub", function()
  it("redacts a secret percent-encoded with either hex case, mixed, or with + for space", function()
    for _, form in ipairs({
      pct(SECRET, "%%%02X"), pct(SECRET, "%%%02x"),
      "123456%3aABC%2Fx%2by",                       -- mixed case
      "123456:ABC%2Fx%2By",                          -- ":" left alone by some encoders
    }) do
      local m = scrub("HTTP 404 from GET https://api.example/bot" .. form .. "/sendMessage", { SECRET })
      assert.equals("HTTP 404 from GET https://api.example/bot[redacted]/sendMessage", m)
    end
    local spaced = "open sesame now"
    assert.equals("q=[redacted]&x=1", scrub("q=" .. pct(spaced, "%%%02X", true) .. "&x=1", { spaced }))
    assert.equals("q=[redacted]&x=1", scrub("q=" .. pct(spaced, "%%%02x") .. "&x=1", { spaced }))
    -- ordinary text stays as it is
    local text = "HTTP 500 from POST https://api.example/v1/chat (after 2 attempts): 50% of 100+1 \\/ done"
    assert.equals(text, scrub(text, { SECRET, "hunter2-pass" }))
  end)

  it("redacts a secret JSON-escaped: \\/, \\u for any character (surrogate pairs too) and short escapes", function()
    assert.equals('{"token":"[redacted]"}', scrub('{"token":"123456:ABC\\/x+y"}', { SECRET }))
    assert.equals('{"token":"[redacted]"}', scrub('{"token":"' .. json_u(SECRET) .. '"}', { SECRET }))
    local odd = 'päss"w\\rd😀'
    assert.equals('{"k":"[redacted]"}', scrub('{"k":"p\\u00e4ss\\"w\\\\rd\\ud83d\\ude00"}', { odd }))
    assert.equals('{"k":"[redacted]"}', scrub('{"k":"' .. json_u(odd) .. '"}', { odd }))
    assert.equals('{"k":"[redacted]"}', scrub('{"k":"P\\u00C4SSWORT"}', { "PÄSSWORT" }))
  end)

  it("looks through nested escaping: JSON text in a JSON string, percent inside JSON", function()
    local odd = 'päss"w\\rd-42'
    -- {"t":"<json text {"k":"p\u00e4ss\"w\\rd-42"}>"} as a record line holds it
    local inner = '{"k":"p\\u00e4ss\\"w\\\\rd-42"}'
    local line = '{"t":"' .. inner:gsub('[\\"]', "\\%0") .. '"}'
    assert.is_nil(line:find(odd, 1, true))
    local out = scrub(line, { odd })
    assert.equals('{"t":"{\\"k\\":\\"[redacted]\\"}"}', out)
    -- three layers: a percent-encoded value in a URL in JSON text in a JSON string
    local url = "https://h/x?q=" .. pct(odd, "%%%02X")
    local l3 = '{"v":"' .. ('{"url":"' .. url .. '"}'):gsub('"', '\\"') .. '"}'
    assert.equals('{"v":"{\\"url\\":\\"https://h/x?q=[redacted]\\"}"}', scrub(l3, { odd }))
  end)

  it("redacts HTML references: decimal, hex, named, zero-padded", function()
    assert.equals("<p>[redacted]</p>", scrub("<p>123456&#58;ABC&#x2F;x&#43;y</p>", { SECRET }))
    assert.equals("<p>[redacted]</p>", scrub("<p>a&amp;b&lt;cdef</p>", { "a&b<cdef" }))
    assert.equals("<p>[redacted]</p>", scrub("<p>it&#039;s-&quot;me&quot;</p>", { "it's-\"me\"" }))
    assert.equals("<p>[redacted]</p>", scrub("<p>&#112;&#xE4;ss-w&#246;rd</p>", { "päss-wörd" }))
  end)

  it("redacts a secret inside Base64 at every alignment, standard and URL-safe, padded or not", function()
    for _, user in ipairs({ "u", "bo", "ann", "alice" }) do
      for _, url in ipairs({ false, true }) do
        for _, nopad in ipairs({ false, true }) do
          local enc = b64(user .. ":" .. SECRET .. "!", url, nopad)
          assert.equals('{"headers":{"Authorization":"Basic [redacted]"}}',
            scrub('{"headers":{"Authorization":"Basic ' .. enc .. '"}}', { SECRET }))
          assert.equals("creds=[redacted];", scrub("creds=" .. enc .. ";", { SECRET }))
          -- inside a longer run (a Base64 body)
          local long = b64(string.rep("lorem ipsum ", 5) .. user .. SECRET .. string.rep(" dolor", 7), url, nopad)
          assert.equals("body [redacted] end", scrub("body " .. long .. " end", { SECRET }))
        end
      end
    end
  end)

  it("redacts hex in either case and inside a longer hex dump", function()
    for _, fmt in ipairs({ "%02x", "%02X" }) do
      assert.equals("bytes [redacted]", scrub("bytes " .. hex(SECRET, fmt), { SECRET }))
      assert.equals('{"hex":"ff00[redacted]0a"}', scrub('{"hex":"ff00' .. hex(SECRET, fmt) .. '0a"}', { SECRET }))
    end
    local mixed = hex(SECRET):gsub("a", "A")
    assert.equals("x [redacted] y", scrub("x " .. mixed .. " y", { SECRET }))
  end)

  it("redacts a secret whose bytes are not UTF-8: raw, percent, hex, Base64", function()
    local bin = "k\255\254ey-\128\1z"
    assert.equals("a [redacted] b", scrub("a " .. bin .. " b", { bin }))
    assert.equals("a [redacted] b", scrub("a " .. pct(bin, "%%%02X") .. " b", { bin }))
    assert.equals("a [redacted] b", scrub("a " .. hex(bin) .. " b", { bin }))
    assert.equals("a [redacted] b", scrub("a " .. b64("xy" .. bin) .. " b", { bin }))
  end)

  it("hides the credential of a Bearer or Basic value and the decoded password", function()
    local hv = secrets.header_values({ Authorization = "Bearer tok-" .. SECRET, Accept = "application/json" })
    assert.same({ "Bearer tok-" .. SECRET }, hv)
    assert_clean(msg("upstream said: bad token tok-123456%3AABC%2Fx%2By", hv), SECRET)
    local basic = secrets.header_values({ ["Proxy-Authorization"] = "Basic " .. b64("proxyuser:hunter2-pass") })
    assert.equals("login as [redacted] failed; password [redacted]",
      msg("login as proxyuser:hunter2-pass failed; password hunter2%2Dpass", basic))
    -- a Basic credential that was never registered still goes (message mode)
    assert.equals("sent Basic [redacted] upstream", msg("sent Basic " .. b64("someone:letmein") .. " upstream", {}))
    assert.equals("Basic auth failed", msg("Basic auth failed", {}))
  end)

  it("redacts the head or the tail of a secret that an excerpt cut off", function()
    local retry = require "specula.llm.retry"
    for n = 24, 36 do   -- every cut inside the secret (at bytes 21..34)
      local ex = retry.excerpt('{"error":"bad token ' .. SECRET .. ' given"}', "text/plain", n)
      assert.is_truthy(ex:find("...", 1, true))
      assert_clean(scrub("HTTP 401: " .. ex, { SECRET }), SECRET)
    end
    local cut = retry.excerpt('{"t":"' .. pct(SECRET, "%%%02X") .. '"}', "text/plain", 16)
    assert_clean(scrub(cut, { SECRET }), SECRET)
    for k = 4, #SECRET - 4 do
      assert_clean(scrub("last stderr: ..." .. SECRET:sub(k) .. " | bye", { SECRET }), SECRET)
    end
  end)

  it("redacts the head or tail of a secret cut with an ellipsis, whatever its spelling", function()
    local common = require "specula.report.common"
    for n = 8, #SECRET + 4 do   -- the report's captions: n bytes and "…"
      local cap = common.truncate("run " .. SECRET, n)
      if cap:find("\226\128\166", 1, true) and n - 1 - 4 >= 4 then
        assert_clean(scrub(cap, { SECRET }), SECRET)
      end
    end
    for _, mark in ipairs({ "\226\128\166", "&hellip;", "&#8230;", "&#x2026;", "\\u2026" }) do
      for k = 4, #SECRET - 1 do
        local head = scrub("cut " .. SECRET:sub(1, k) .. mark .. " rest", { SECRET })
        assert.equals("cut [redacted]" .. mark .. " rest", head)
      end
      for k = 4, #SECRET - 4 do
        assert_clean(scrub("tail " .. mark .. SECRET:sub(k) .. " rest", { SECRET }), SECRET)
      end
    end
    -- a mark after ordinary text is left alone
    assert.equals("and so on\226\128\166", scrub("and so on\226\128\166", { SECRET }))
  end)

  it("redacts a secret's UTF-16 text (LE and BE), raw, \\u-escaped, in Base64 and as hex", function()
    local K = "h\195\169llo-w\195\182rld-\240\159\148\145-key"   -- 2-, 3- and 4-byte sequences
    -- by hand: the code points, then their UTF-16 units
    local cps = { 0x68, 0xE9, 0x6C, 0x6C, 0x6F, 0x2D, 0x77, 0xF6, 0x72, 0x6C, 0x64, 0x2D, 0x1F511, 0x2D, 0x6B, 0x65,
                  0x79 }
    local function u16(big)
      local t = {}
      local function unit(u)
        local hi, lo = math.floor(u / 256), u % 256
        t[#t + 1] = big and string.char(hi, lo) or string.char(lo, hi)
      end
      for _, cp in ipairs(cps) do
        if cp >= 0x10000 then
          unit(0xD800 + math.floor((cp - 0x10000) / 1024))
          unit(0xDC00 + (cp - 0x10000) % 1024)
        else unit(cp) end
      end
      return table.concat(t)
    end
    for _, big in ipairs({ false, true }) do
      local u = u16(big)
      assert.equals(u, secrets.utf16(K, big))
      local hex = u:gsub(".", function(c) return string.format("%02X", c:byte()) end)
      local esc = u:gsub(".", function(c) return string.format("\\u%04x", c:byte()) end)
      for _, text in ipairs({ "raw " .. u .. " end", "hex " .. hex .. " end", "hex " .. hex:lower() .. " end",
                              "b64 " .. b64(u) .. " end", "b64 " .. b64("x" .. u, true, true) .. " end",
                              "json " .. esc .. " end" }) do
        local out = scrub(text, { K })
        assert.is_truthy(out:find("[redacted]", 1, true), text)
        assert.is_nil(out:find(u:sub(1, 8), 1, true), out)
      end
    end
  end)

  it("finds a secret cut across stream chunks at every point, and keeps the chunks' order and times", function()
    local body = 'data: {"t":"' .. SECRET .. '"}\n\ndata: [DONE]\n\n'
    local at = body:find(SECRET, 1, true)
    for cut = at, at + #SECRET - 1 do
      local list = { body:sub(1, cut), body:sub(cut + 1, cut + 5), body:sub(cut + 6) }
      local out, idx = secrets.scrub_chunks(list, { SECRET })
      local joined = table.concat(out)
      assert.equals('data: {"t":"[redacted]"}\n\ndata: [DONE]\n\n', joined)
      for i, c in ipairs(out) do
        assert.is_nil(c:find(SECRET:sub(1, 4), 1, true))
        assert.is_true(#c > 0)
        assert.is_number(idx[i])
        if i > 1 then assert.is_true(idx[i] > idx[i - 1]) end
      end
    end
    -- nothing to redact: the very same list
    local l = { "a", "b" }
    assert.equals(l, secrets.scrub_chunks(l, { SECRET }))
  end)

  it("keeps JSON valid: a match that starts inside an escape is checked string by string", function()
    local json = require "specula.json"
    -- "u00e4bcdef" is in the text but not in the string it encodes
    local t = '{"a":"\\u00e4bcdef"}'
    assert.equals(t, secrets.scrub_json(t, { "u00e4bcdef" }))
    -- a real one inside the same line goes
    local t2 = '{"a":"\\u00e4bcdef","b":"u00e4bcdef"}'
    local out = secrets.scrub_json(t2, { "u00e4bcdef" })
    assert.same({ a = "äbcdef", b = "[redacted]" }, json.decode(out))
  end)

  it("does not over-reach: short values, unrelated text, a URL host", function()
    assert.equals("abc12 and abc12", scrub("abc12 and abc12", { "abc12" }))
    local text = "GET http://127.0.0.1:8080/search?q=paris failed: ECONNREFUSED \\u0041 %41 &amp; QUJD 414243"
    assert.equals(text, scrub(text, { "s3cr3t-value", "another-one" }))
    assert.equals("https://api.example/v1", require("specula.llm.retry").endpoint("https://user:p@ss@api.example/v1?key=1"))
    assert.equals("GET https://api.example/v1 failed", msg("GET https://user:p@ss@api.example/v1 failed", {}))
  end)
end)

describe("secrets registry", function()
  it("declares values of 6 bytes or more, with what derives from them", function()
    assert.is_false(secrets.declare("short"))
    assert.is_false(secrets.declare(nil))
    assert.has_error(function() secrets.declare("long-enough", 3) end)
    local n = secrets.count()
    assert.is_true(secrets.declare("Basic " .. b64("registry-user:registry-pass-77")))
    assert.is_true(secrets.declare("Basic " .. b64("registry-user:registry-pass-77")))   -- once
    assert.equals(n + 1, secrets.count())
    local m = scrub("user registry-user:registry-pass-77, pass registry-pass-77, raw " .. b64("registry-user:registry-pass-77"))
    assert.equals("user [redacted], pass [redacted], raw [redacted]", m)
    local list = secrets.list()
    assert.equals("Basic " .. b64("registry-user:registry-pass-77"), list[#list])
  end)

  it("declare_url hides userinfo and secret parameters, not the host", function()
    secrets.declare_url("https://svc-user:url-pass-123@api.example.org/v1?q=paris&api_key=url-key-456")
    assert.equals("host api.example.org, q=paris, [redacted], [redacted]",
      scrub("host api.example.org, q=paris, url-pass-123, url-key-456"))
  end)

  it("tells credential environment names and headers from others", function()
    for _, n in ipairs({ "OPENAI_API_KEY", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "PGPASSWORD", "HTTP_AUTH",
                         "BASIC_PASS", "MY_CREDENTIALS" }) do
      assert.is_truthy(secrets.env_is_secret(n), n)
    end
    for _, n in ipairs({ "PATH", "HOME", "SSH_AUTH_SOCK", "OPENAI_BASE_URL", "GIT_AUTHOR_NAME", "SSH_KEY_PATH", "LANG" }) do
      assert.is_falsy(secrets.env_is_secret(n), n)
    end
    assert.same({ "t-123456" }, secrets.header_values({ ["X-Auth-Token"] = "t-123456", ["X-Query"] = "paris" }))
    assert.same({ "sid=abcdef" }, secrets.header_values({ Cookie = "sid=abcdef" }))
  end)
end)
