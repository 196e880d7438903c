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
