-- specula.llm.retry.scrub: a secret is redacted in every form it takes in a
-- URL, a header or a body, not only as its raw bytes.
local retry = require "specula.llm.retry"

local SECRET = "123456:ABC/x+y"   -- a bot token: ":" "/" "+" all get encoded

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local function b64(s, url)
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
  return r
end

local function pct(s, fmt, plus)
  return (s:gsub("[^%w%-%._~]", function(c)
    if plus and c == " " then return "+" end
    return string.format(fmt, c:byte())
  end))
end

-- No trace of the secret: none of its 4-byte pieces, raw or encoded.
local function assert_clean(msg, secret)
  assert.is_truthy(msg:find("[redacted]", 1, true), "nothing redacted in: " .. msg)
  for i = 1, #secret - 3 do
    local piece = secret:sub(i, i + 3)
    assert.is_nil(msg:find(piece, 1, true), "'" .. piece .. "' left in: " .. msg)
  end
end

describe("retry.scrub", function()
  it("redacts a secret percent-encoded with either hex case, mixed, or with + for space", function()
    for _, form in ipairs({
      pct(SECRET, "%%%02X"), pct(SECRET, "%%%02x"),
      "123456%3aABC%2Fx%2by",                       -- mixed case
      "123456:ABC%2Fx%2By",                          -- ":" left alone by some encoders
    }) do
      local msg = retry.scrub("HTTP 404 from GET https://api.example/bot" .. form .. "/sendMessage", { SECRET })
      assert.equals("HTTP 404 from GET https://api.example/bot[redacted]/sendMessage", msg)
    end
    local spaced = "open sesame now"
    assert.equals("q=[redacted]&x=1", retry.scrub("q=" .. pct(spaced, "%%%02X", true) .. "&x=1", { spaced }))
    assert.equals("q=[redacted]&x=1", retry.scrub("q=" .. pct(spaced, "%%%02x") .. "&x=1", { spaced }))
    -- ordinary text stays as it is
    local text = "HTTP 500 from POST https://api.example/v1/chat (after 2 attempts): 50% of 100+1 \\/ done"
    assert.equals(text, retry.scrub(text, { SECRET, "hunter2-pass" }))
  end)

  it("redacts a secret JSON-escaped: \\/, \\u escapes (surrogate pairs too) and short escapes", function()
    assert.equals('{"token":"[redacted]"}', retry.scrub('{"token":"123456:ABC\\/x+y"}', { SECRET }))
    assert.equals('{"token":"[redacted]"}',
      retry.scrub('{"token":"\\u0031\\u0032\\u0033456\\u003aABC\\/x\\u002By"}', { SECRET }))
    assert.equals('{"k":"[redacted]"}', retry.scrub('{"k":"p\\u00e4ss\\"w\\\\rd\\ud83d\\ude00"}', { 'päss"w\\rd😀' }))
    assert.equals("<p>[redacted]</p>", retry.scrub("<p>123456&#58;ABC&#x2F;x&#43;y</p>", { SECRET }))
    assert.equals("<p>[redacted]</p>", retry.scrub("<p>a&amp;b&lt;cdef</p>", { "a&b<cdef" }))
  end)

  it("redacts a secret inside Base64 at every alignment (Basic user:secret), standard and URL-safe", function()
    for _, user in ipairs({ "u", "bo", "ann", "alice" }) do
      for _, url in ipairs({ false, true }) do
        local enc = b64(user .. ":" .. SECRET, url)
        local msg = retry.scrub('{"headers":{"Authorization":"Basic ' .. enc .. '"}}', { SECRET })
        assert.equals('{"headers":{"Authorization":"Basic [redacted]"}}', msg)
        -- not only after the word Basic
        assert.equals("creds=[redacted];", retry.scrub("creds=" .. enc .. ";", { SECRET }))
      end
    end
  end)

  it("hides the credential of a Bearer or Basic header value and the decoded password", function()
    local secrets = retry.secrets(nil, { Authorization = "Bearer tok-" .. SECRET })
    assert_clean(retry.scrub("upstream said: bad token tok-123456%3AABC%2Fx%2By", secrets), SECRET)
    local basic = retry.secrets(nil, { ["Proxy-Authorization"] = "Basic " .. b64("proxyuser:hunter2-pass") })
    assert.equals("login as [redacted] failed; password [redacted]",
      retry.scrub("login as proxyuser:hunter2-pass failed; password hunter2%2Dpass", basic))
    -- a Basic credential that was never registered still goes
    assert.equals("sent Basic [redacted] upstream",
      retry.scrub("sent Basic " .. b64("someone:letmein") .. " upstream", {}))
    assert.equals("Basic auth failed", retry.scrub("Basic auth failed", {}))
  end)

  it("redacts the head of a secret that an excerpt cut off", function()
    for n = 24, 36 do   -- every cut inside the secret (at bytes 21..34)
      local ex = retry.excerpt('{"error":"bad token ' .. SECRET .. ' given"}', "text/plain", n)
      assert.is_truthy(ex:find("...", 1, true))
      assert_clean(retry.scrub("HTTP 401: " .. ex, { SECRET }), SECRET)
    end
    local cut = retry.excerpt('{"t":"' .. pct(SECRET, "%%%02X") .. '"}', "text/plain", 16)
    assert_clean(retry.scrub(cut, { SECRET }), SECRET)
  end)

  it("drops userinfo up to the last @ (a raw @ in the password)", function()
    assert.equals("https://api.example/v1", retry.endpoint("https://user:p@ss@api.example/v1?key=1"))
    assert.equals("GET https://api.example/v1 failed", retry.scrub("GET https://user:p@ss@api.example/v1 failed", {}))
  end)
end)
