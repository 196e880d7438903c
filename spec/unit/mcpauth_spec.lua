-- The pure parts of specula.mcp.auth (challenge parsing, resource matching,
-- metadata URLs) and of specula.mcp's answer to an elicitation (SEP-1034
-- defaults), on the inputs real servers send.
local A = require "specula.mcp.auth"
local mcp = require "specula.mcp"
local json = require "specula.json"

describe("WWW-Authenticate", function()
  it("reads the Bearer challenge's parameters as servers write them", function()
    -- the TypeScript SDK's bearer middleware, and the conformance suite's step-up answers
    local p = A.parse_challenge('Bearer error="invalid_token", error_description="Missing Authorization header", '
      .. 'resource_metadata="http://localhost:3000/.well-known/oauth-protected-resource/mcp"')
    assert.are.same({ error = "invalid_token", error_description = "Missing Authorization header",
      resource_metadata = "http://localhost:3000/.well-known/oauth-protected-resource/mcp" }, p)
    p = A.parse_challenge('Bearer error="insufficient_scope", scope="mcp:basic mcp:write", '
      .. 'resource_metadata="http://h/x", error_description="Scope upgrade will never succeed"')
    assert.are.equal("mcp:basic mcp:write", p.scope)
    assert.are.equal("insufficient_scope", p.error)
    -- several challenges in one header, a token68, escapes, bare tokens, any case
    p = A.parse_challenge('Negotiate abcDEF==, Basic realm="a, b", BEARER realm="r\\"q", scope=read, error=x')
    assert.are.same({ realm = 'r"q', scope = "read", error = "x" }, p)
    p = A.parse_challenge('Bearer realm="x", Basic realm="y"')
    assert.are.same({ realm = "x" }, p)
    assert.are.same({}, A.parse_challenge("Bearer"))
    assert.is_nil(A.parse_challenge('Basic realm="only"'))
    assert.is_nil(A.parse_challenge(nil))
    assert.is_nil(A.parse_challenge(""))
    assert.are.same({ scope = "a" }, A.parse_challenge(', ,Bearer  scope = "a" ,'))
  end)

  it("reads a DPoP challenge when asked for that scheme (RFC 9449 §7.1)", function()
    local h = 'DPoP error="use_dpop_nonce", error_description="Resource server requires nonce in DPoP proof", '
      .. 'algs="ES256"'
    assert.is_nil(A.parse_challenge(h))
    assert.are.same({ error = "use_dpop_nonce", error_description = "Resource server requires nonce in DPoP proof",
      algs = "ES256" }, A.parse_challenge(h, "dpop"))
    local both = 'Bearer realm="r", DPoP resource_metadata="http://h/prm"'
    assert.are.same({ realm = "r" }, A.parse_challenge(both))
    assert.are.same({ resource_metadata = "http://h/prm" }, A.parse_challenge(both, "dpop"))
  end)
end)

describe("client registration", function()
  it("registers a loopback or custom-scheme redirect as native, a web site's as web", function()
    assert.are.equal("native", A.application_type("http://127.0.0.1:33418/callback"))
    assert.are.equal("native", A.application_type("http://localhost:3000/callback"))
    assert.are.equal("native", A.application_type("http://[::1]:8080/cb"))
    assert.are.equal("native", A.application_type("com.example.app:/oauth2redirect"))
    assert.are.equal("web", A.application_type("https://app.example.com/callback"))
    assert.are.equal("web", A.application_type("http://localhost.example.com/cb"))
  end)
end)

describe("DPoP proofs (RFC 9449 §4)", function()
  local crypto = require "specula.crypto"

  local function part(jwt, i)
    local p = {}
    for x in jwt:gmatch("[^.]+") do p[#p + 1] = x end
    return i <= 2 and json.decode(crypto.unb64(p[i])) or p[i]
  end

  it("signs each proof with the key whose public half it carries, a new jti each time", function()
    local auth = A.new({ cache = false }, "http://h:1/mcp", function() end, "mcp server 'x'")
    local tok = "access-token-0123456789"
    local p1 = assert(auth:_dpop_proof("POST", "http://h:1/mcp?q=1#f", tok, "n-1"))
    local p2 = assert(auth:_dpop_proof("POST", "http://h:1/token", nil, nil))
    local h1, c1, c2 = part(p1, 1), part(p1, 2), part(p2, 2)
    assert.are.equal("dpop+jwt", h1.typ)
    assert.are.equal("ES256", h1.alg)
    assert.are.equal("EC", h1.jwk.kty)
    assert.are.equal("P-256", h1.jwk.crv)
    assert.are.equal(43, #h1.jwk.x)                    -- 32 bytes, Base64url
    assert.are.equal(43, #h1.jwk.y)
    assert.is_nil(h1.jwk.d)                            -- never the private part
    assert.are.same(h1.jwk, part(p2, 1).jwk)          -- one key for the tokens of a server
    assert.are.equal("POST", c1.htm)
    assert.are.equal("http://h:1/mcp", c1.htu)         -- no query, no fragment
    assert.are.equal("n-1", c1.nonce)
    assert.are.equal(crypto.b64url(crypto.sha256(tok)), c1.ath)
    assert.is_nil(c2.ath)
    assert.is_nil(c2.nonce)
    assert.are_not.equal(c1.jti, c2.jti)
    assert.is_true(math.abs(os.time() - c1.iat) <= 2)
    -- the signature verifies with the key's public half
    local key = auth.entry.dpop_key
    local pub = assert(crypto.pubkey(key.pem))
    local dot = p1:match("^.*()%.")
    assert.is_true(crypto.verify("ES256", pub, p1:sub(1, dot - 1), crypto.unb64(p1:sub(dot + 1))))
    -- the header carries the JWK of that very public key
    assert.are.same(h1.jwk, A.ec_public_jwk(pub))
    assert.is_true(require("specula.secrets").scrub(key.pem) ~= key.pem)   -- declared a secret
  end)

  it("makes a JWK of P-256 keys only", function()
    local rsa = assert(crypto.pubkey(assert(crypto.keygen("RS256"))))
    assert.is_nil(A.ec_public_jwk(rsa))
  end)
end)

describe("resource indicators", function()
  it("canonicalizes a server URL (RFC 8707 as MCP uses it)", function()
    assert.are.equal("https://mcp.example.com/mcp", A.canonical("HTTPS://MCP.Example.com:443/mcp/#frag"))
    assert.are.equal("http://h:8080/a/b?x=1", A.canonical("http://user:pw@H:8080/a/b?x=1"))
    assert.are.equal("http://h", A.canonical("http://h:80/"))
    assert.is_nil(A.canonical("/relative"))
  end)

  it("accepts a resource only on the same origin and a parent path", function()
    assert.is_true(A.covers("http://h:1/mcp", "http://h:1/mcp"))
    assert.is_true(A.covers("http://h:1", "http://h:1/mcp"))
    assert.is_true(A.covers("http://h:1/", "http://h:1/mcp"))
    assert.is_true(A.covers("http://H:1/mcp/", "http://h:1/mcp/sub"))
    assert.is_false(A.covers("https://evil.example.com/mcp", "http://localhost:5/mcp"))
    assert.is_false(A.covers("http://h:1/mcp", "http://h:2/mcp"))
    assert.is_false(A.covers("https://h/mcp", "http://h/mcp"))
    assert.is_false(A.covers("http://h:1/mc", "http://h:1/mcp"))   -- a prefix, not a parent
    assert.is_false(A.covers("http://h:1/mcp/other", "http://h:1/mcp"))
    assert.is_false(A.covers("not a url", "http://h:1/mcp"))
  end)

  it("asks for authorization server metadata in the MCP order", function()
    assert.are.same({ "http://a/.well-known/oauth-authorization-server",
                      "http://a/.well-known/openid-configuration" }, A.as_metadata_urls("http://a"))
    assert.are.same({ "http://a/.well-known/oauth-authorization-server/tenant1",
                      "http://a/.well-known/openid-configuration/tenant1",
                      "http://a/tenant1/.well-known/openid-configuration" }, A.as_metadata_urls("http://a/tenant1/"))
  end)

  it("reads a redirect's query", function()
    local q = A.query_params("code=a%2Bb&state=x+y&empty=&code=second")
    assert.are.same({ code = "a+b", state = "x y", empty = "" }, q)
  end)
end)

describe("elicitation answers (SEP-1034)", function()
  local schema = { type = "object", properties = {
    name = { type = "string", default = "John Doe" }, age = { type = "integer", default = 30 },
    score = { type = "number", default = 95.5 }, status = { type = "string", enum = { "a", "b" }, default = "a" },
    verified = { type = "boolean", default = false }, nick = { type = "string" }, gone = { type = "string", default = json.null } },
    required = { "name" } }

  it("fills every default the hook left out, keeps what it gave", function()
    local r = mcp.elicitation_result({ action = "accept", content = { age = 41, verified = true } }, { requestedSchema = schema })
    assert.are.same({ action = "accept", content = { name = "John Doe", age = 41, score = 95.5, status = "a", verified = true } }, r)
    assert.are.equal('{"action":"accept","content":{}}', json.canonical(mcp.elicitation_result({ action = "accept" }, {})))
    -- false is a value, not an absence
    r = mcp.elicitation_result({ action = "accept", content = { verified = false } }, { requestedSchema = schema })
    assert.is_false(r.content.verified)
  end)

  it("passes decline and cancel through and refuses what is not an answer", function()
    assert.are.same({ action = "decline" }, mcp.elicitation_result({ action = "decline", content = { x = 1 } }, {}))
    assert.are.same({ action = "cancel" }, mcp.elicitation_result({ action = "cancel" }, {}))
    local r, err = mcp.elicitation_result({ action = "maybe" }, {})
    assert.is_nil(r)
    assert.matches("action must be accept, decline or cancel", err)
    r, err = mcp.elicitation_result("yes", {})
    assert.matches("expected { action", err, 1, true)
    r, err = mcp.elicitation_result({ action = "accept", content = {} },
      { requestedSchema = { type = "object", properties = { email = { type = "string" } }, required = { "email" } } })
    assert.matches("lacks the required field 'email'", err, 1, true)
  end)
end)
