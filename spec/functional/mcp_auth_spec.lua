-- OAuth for MCP servers (specula.mcp.connect{ url, auth = {...} }, specula.mcpauth)
-- against the test server in --oauth mode, which is its own authorization
-- server and checks what a real one checks: PKCE S256, the resource
-- indicator, registered redirect URIs, the client's authentication method,
-- JWT assertions, rotated refresh tokens. And the promise that no credential
-- reaches any output: a run with --record, --trace and --out whose files and
-- stderr are searched for every credential the server issued or saw.
local H = require "support.helpers"
local MH = require "support.mcp_helpers"
local cjson = require "cjson"

local last_json = H.last_json

local PRELUDE = [[
local specula = require "specula"
local json = specula.json
]]

local function run(code, env)
  local st, out, err = H.run_lua(PRELUDE .. code, {}, env)
  assert.are.equal(0, st, "exit status " .. st .. "\nstdout: " .. out .. "\nstderr: " .. err)
  return last_json(out), err
end

-- Run code against a server started with args; the server is stopped after.
local function with_server(args, code, env)
  local srv = MH.http_server(args)
  env = env or {}
  env.MCP_URL = srv.url
  env.MCP_BASE = srv.base
  local ok, r, err = pcall(run, "local URL, BASE = os.getenv('MCP_URL'), os.getenv('MCP_BASE')\n" .. code, env)
  srv.stop()
  assert(ok, r)
  return r, err
end

local LOG = [[
local function server_log(c) return assert(c:call("log")).structuredContent end
]]

describe("MCP authorization: authorization code with PKCE", function()
  it("runs the script's authorize hook, registers dynamically, caches the token per server", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--oauth" }, LOG .. [[
local seen = {}
local function authorize(url, info)
  -- a stand-in for the user's browser: check the request, approve it
  seen.url_params = {}
  for k, v in url:gmatch("[?&]([^=&]+)=([^&]*)") do seen.url_params[k] = v end
  seen.info = { redirect_uri = info.redirect_uri, server = info.server, state_ok = seen.url_params.state == info.state,
                authorization_server = info.authorization_server }
  local res = assert(specula.http.request{ url = url })
  seen.status = res.status
  return res.headers["location"]
end
local opts = { url = URL, name = "oauth", auth = { authorize = authorize, client_name = "spec-client",
               redirect_uri = "http://127.0.0.1:9999/cb" } }
local c = assert(specula.mcp.connect(opts))
local e = assert(c:call("echo", { text = "hi" })).content[1].text
local info = c:auth_info()
-- a second client for the same server reuses the cached token
local c2 = assert(specula.mcp.connect(opts))
local e2 = assert(c2:call("echo", { text = "again" })).content[1].text
local log = server_log(c2)
c:close() c2:close()
print(json.encode({ e = e, e2 = e2, p = seen.url_params, info = seen.info, status = seen.status, ai = info, auth = log.auth,
  ai2 = c2:auth_info() }))
]])
    assert.are.equal("echo: hi", r.e)
    assert.are.equal("echo: again", r.e2)
    local p = r.p
    assert.are.equal("code", p.response_type)
    assert.are.equal("S256", p.code_challenge_method)
    assert.are.equal(43, #p.code_challenge)            -- Base64url of a SHA-256 digest
    assert.matches("^dyn%-", p.client_id)
    assert.are.equal("http%3A%2F%2F127.0.0.1%3A9999%2Fcb", p.redirect_uri)
    assert.matches("^http%%3A%%2F%%2F127%.0%.0%.1%%3A%d+%%2Fmcp$", p.resource)
    assert.is_nil(p.scope)                             -- nothing asked for: no scope
    assert.is_true(r.info.state_ok)
    assert.are.equal("http://127.0.0.1:9999/cb", r.info.redirect_uri)
    assert.matches("^http://127%.0%.0%.1:%d+/mcp$", r.info.server)
    assert.matches("^http://127%.0%.0%.1:%d+$", r.info.authorization_server)
    assert.are.equal(302, r.status)
    -- the server checked the verifier against the challenge and the resource
    assert.are.equal(1, r.auth.pkce_ok)
    assert.are.equal(1, r.auth.authorize)
    assert.are.equal(1, r.auth.registrations)
    assert.are.equal("spec-client", r.auth.client_name)
    assert.are.equal(1, r.auth.token.authorization_code)
    assert.are.equal(1, r.auth.methods.none)           -- registered as a public client
    assert.is_true(r.auth.resource_ok >= 1)
    assert.are.equal("dynamic registration", r.ai.client_source)
    assert.are.equal("none", r.ai.token_endpoint_auth_method)
    assert.are.equal("authorization_code", r.ai.grant)
    assert.are.equal(1, r.ai.authorizations)
    assert.are.equal(1, r.ai.registrations)
    assert.are.equal(0, r.ai2.authorizations)          -- the second client never authorized
    assert.is_true(r.ai2.has_token)
    assert.is_true(r.ai.expires_in_s > 3000)
  end)

  it("runs headless by default and asks for the challenge's scope, else every scope of the resource", function()
    if not H.need_node(pending) then return end
    local r1 = with_server({ "--oauth", "--challenge-scope", "mcp:read", "--scopes", "mcp:read mcp:write" }, LOG .. [[
local c = assert(specula.mcp.connect{ url = URL, auth = {} })
local log = server_log(c)
c:close()
print(json.encode({ scopes = log.auth.scopes, info = c:auth_info() }))
]])
    assert.are.same({ "mcp:read" }, r1.scopes)
    assert.are.equal("mcp:read", r1.info.scope)
    local r2 = with_server({ "--oauth", "--scopes", "mcp:read mcp:write" }, LOG .. [[
local c = assert(specula.mcp.connect{ url = URL, auth = true })
local log = server_log(c)
c:close()
print(json.encode({ scopes = log.auth.scopes }))
]])
    assert.are.same({ "mcp:read mcp:write" }, r2.scopes)
    local r3 = with_server({ "--oauth", "--scopes", "mcp:read mcp:write" }, LOG .. [[
local c = assert(specula.mcp.connect{ url = URL, auth = { scope = "mcp:write" } })
local log = server_log(c)
c:close()
print(json.encode({ scopes = log.auth.scopes }))
]])
    assert.are.same({ "mcp:write" }, r3.scopes)
  end)

  it("drives a login page through the hook, and headless says it needs one", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--oauth", "--login" }, LOG .. [[
local c0, err0 = specula.mcp.connect{ url = URL, name = "headless", auth = { cache = false } }
-- the hook plays the user: the login page, a sign-in, the way back
local steps = {}
local function authorize(url)
  local res = assert(specula.http.request{ url = url })
  steps[#steps + 1] = res.status
  local login = res.headers["location"]
  res = assert(specula.http.request{ url = login })
  steps[#steps + 1] = res.status                      -- the form
  res = assert(specula.http.request{ url = login .. "&user=ada" })
  steps[#steps + 1] = res.status
  res = assert(specula.http.request{ url = res.headers["location"] })   -- back to /authorize, approved
  steps[#steps + 1] = res.status
  return res.headers["location"]
end
local c = assert(specula.mcp.connect{ url = URL, auth = { authorize = authorize, cache = false } })
local e = assert(c:call("echo", { text = "signed in" })).content[1].text
local log = server_log(c)
c:close()
print(json.encode({ err0 = err0, steps = steps, e = e, logins = log.auth.logins, pkce = log.auth.pkce_ok }))
]])
    assert.matches("^mcp server 'headless': authorization: no authorization code: the authorization endpoint "
      .. "redirected to http://127%.0%.0%.1:%d+/login, not to the redirect URI %(a login page%?%): it needs a user; "
      .. "give auth%.authorize", r.err0)
    assert.are.same({ 302, 200, 302, 302 }, r.steps)
    assert.are.equal("echo: signed in", r.e)
    assert.are.equal(2, r.logins)                       -- the form and the sign-in (headless stopped before)
    assert.are.equal(1, r.pkce)
  end)

  it("registers with the method the server supports and authenticates with it", function()
    if not H.need_node(pending) then return end
    for _, m in ipairs({ "client_secret_basic", "client_secret_post" }) do
      local r = with_server({ "--oauth", "--auth-methods", m }, LOG .. [[
local c = assert(specula.mcp.connect{ url = URL, auth = {} })
local log = server_log(c)
c:close()
print(json.encode({ methods = log.auth.methods, info = c:auth_info() }))
]])
      assert.are.equal(1, r.methods[m], m)
      assert.are.equal(m, r.info.token_endpoint_auth_method)
    end
  end)

  it("uses a pre-registered client when the server offers no registration", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--oauth", "--no-dcr", "--client", "pre-reg:s3cret-pre-registered",
                            "--auth-methods", "client_secret_basic" }, LOG .. [[
local c = assert(specula.mcp.connect{ url = URL, auth = { client_id = "pre-reg", client_secret = "s3cret-pre-registered" } })
local log = server_log(c)
c:close()
local none, nerr = specula.mcp.connect{ url = URL, auth = {} }
print(json.encode({ auth = log.auth, info = c:auth_info(), nerr = nerr }))
]])
    assert.are.equal(0, r.auth.registrations)
    assert.are.equal(1, r.auth.methods.client_secret_basic)
    assert.are.equal("pre-registered", r.info.client_source)
    assert.matches("offers no dynamic registration and no client ID metadata documents: give auth.client_id", r.nerr, 1, true)
  end)

  it("refreshes the token before it expires and when the server rejects it, one refresh for many callers", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--oauth", "--token-ttl", "2" }, LOG .. [[
local c = assert(specula.mcp.connect{ url = URL, auth = {} })
assert(c:call("echo", { text = "1" }))
local before = c:auth_info().refreshes
specula.sleep(2100)                                   -- past expires_in: refreshed first
assert(c:call("echo", { text = "2" }))
local after_expiry = c:auth_info().refreshes
assert(c:call("revoke"))                              -- the server forgets the token
local tasks = {}
for i = 1, 5 do tasks[i] = specula.spawn(function() return c:call("echo", { text = "p" .. i }) end) end
local texts = {}
for i, t in ipairs(tasks) do
  local ok, res = t:wait()
  texts[i] = ok and res and res.content[1].text or tostring(res)
end
local info = c:auth_info()
local log = server_log(c)
c:close()
print(json.encode({ before = before, after_expiry = after_expiry, texts = texts, info = info, auth = log.auth }))
]])
    assert.is_true(r.after_expiry > r.before)
    assert.are.same({ "echo: p1", "echo: p2", "echo: p3", "echo: p4", "echo: p5" }, r.texts)
    assert.are.equal(1, r.info.authorizations)
    -- the five calls the server rejected caused one refresh between them
    assert.are.equal(r.after_expiry + 1, r.info.refreshes)
    assert.are.equal(r.info.refreshes, r.auth.token.refresh_token)
    assert.are.equal(1, r.auth.token.authorization_code)
    assert.is_true(r.auth.rejected >= 1)
  end)

  it("keeps tokens in the script's store between clients, and refreshes a stored token", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--oauth" }, LOG .. [[
local saved, loads = {}, 0
local store = { load = function(key) loads = loads + 1 return saved[key] end,
                save = function(key, t) saved[key] = t end }
local c1 = assert(specula.mcp.connect{ url = URL, auth = { store = store, cache = false } })
assert(c1:call("echo", { text = "one" }))
c1:close()
local keys = 0
for k, t in pairs(saved) do keys = keys + 1 end
-- a new client with no cache of its own: the stored token, no new authorization
local c2 = assert(specula.mcp.connect{ url = URL, auth = { store = store, cache = false } })
assert(c2:call("revoke"))
local e = assert(c2:call("echo", { text = "two" })).content[1].text  -- refreshed from the stored refresh token
local log = server_log(c2)
local info = c2:auth_info()
c2:close()
-- a store that raises is reported, and the client authorizes as usual
local c3 = assert(specula.mcp.connect{ url = URL, auth = { cache = false,
  store = { load = function() error("disk on fire") end, save = function() end } } })
local info3 = c3:auth_info()
c3:close()
print(json.encode({ keys = keys, loads = loads, e = e, authorize = log.auth.authorize, info = info, info3 = info3 }))
]])
    assert.are.equal(1, r.keys)
    assert.are.equal(2, r.loads)
    assert.are.equal("echo: two", r.e)
    assert.are.equal(1, r.authorize)
    assert.are.equal(0, r.info.authorizations)
    assert.are.equal(1, r.info.refreshes)
    assert.matches("auth.store.load raised: .*disk on fire", r.info3.store_error)
    assert.are.equal(1, r.info3.authorizations)
  end)

  it("steps up to the scopes held plus the ones a 403 asks for, and gives up on a scope never granted", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--oauth", "--scopes", "mcp:read" }, LOG .. [[
local c = assert(specula.mcp.connect{ url = URL, auth = {} })
local a = assert(c:call("admin")).content[1].text
local log = server_log(c)
local info = c:auth_info()
c:close()
print(json.encode({ a = a, scopes = log.auth.scopes, info = info, forbidden = log.auth.forbidden }))
]])
    assert.are.equal("admin done", r.a)
    assert.are.same({ "mcp:read", "mcp:read mcp:admin" }, r.scopes)
    assert.are.equal(1, r.info.step_ups)
    assert.are.equal(2, r.info.authorizations)
    assert.are.equal("mcp:read mcp:admin", r.info.scope)
    assert.are.equal(1, r.forbidden)
    -- a script that pins the scope cannot get mcp:admin: bounded, then a clear error
    local r2 = with_server({ "--oauth" }, LOG .. [[
local c = assert(specula.mcp.connect{ url = URL, auth = { scope = "mcp:read" } })
local a, err = c:call("admin")
local log = server_log(c)
c:close()
print(json.encode({ a = a, err = err, info = c:auth_info(), authorize = log.auth.authorize }))
]])
    assert.is_nil(r2.a)
    assert.matches("still refuses %(403 insufficient_scope%)", r2.err)
    assert.is_true(r2.authorize <= 3)
  end)
end)

describe("MCP authorization: client credentials", function()
  local keys = {}
  setup(function()
    -- keys from specula.crypto (OpenSSL), PEM files for the server
    local dir = H.tmpdir()
    local st, out, err = H.run_lua([[
local crypto = require "specula.crypto"
for _, alg in ipairs({ "ES256", "RS256" }) do
  local k = assert(crypto.keygen(alg))
  local f = assert(io.open(arg[1] .. "/" .. alg .. ".key", "w")) f:write(k) f:close()
  f = assert(io.open(arg[1] .. "/" .. alg .. ".pub", "w")) f:write(assert(crypto.pubkey(k))) f:close()
end
]], { dir })
    assert.are.equal(0, st, out .. err)
    for _, alg in ipairs({ "ES256", "RS256" }) do
      keys[alg] = { key = dir .. "/" .. alg .. ".key", pub = dir .. "/" .. alg .. ".pub" }
    end
  end)

  it("authenticates with a JWT assertion (ES256 and RS256), a secret (basic and post)", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--oauth", "--jwt-client", "jwt-es:" .. keys.ES256.pub, "--jwt-client", "jwt-rs:" .. keys.RS256.pub,
                            "--client", "cc-client:cc-secret-value" }, LOG .. [[
local function pem(p) local f = assert(io.open(p)) local s = f:read("*a") f:close() return s end
local out = {}
for _, alg in ipairs({ "ES256", "RS256" }) do
  local c = assert(specula.mcp.connect{ url = URL, auth = { grant = "client_credentials", client_id = alg == "ES256" and "jwt-es" or "jwt-rs",
    private_key = pem(os.getenv(alg .. "_KEY")), signing_alg = alg, scope = "mcp:read" } })
  out[alg] = { echo = assert(c:call("echo", { text = alg })).content[1].text, info = c:auth_info(), jwt = server_log(c).auth.jwt_alg }
  c:close()
end
for _, m in ipairs({ "client_secret_basic", "client_secret_post" }) do
  local c = assert(specula.mcp.connect{ url = URL, auth = { grant = "client_credentials", client_id = "cc-client",
    client_secret = "cc-secret-value", token_endpoint_auth_method = m, cache = false } })
  out[m] = { echo = assert(c:call("echo", { text = m })).content[1].text, info = c:auth_info() }
  c:close()
end
-- an assertion the script makes itself
local crypto = require "specula.crypto"
local seen
local c = assert(specula.mcp.connect{ url = URL, auth = { grant = "client_credentials", client_id = "jwt-es", cache = false,
  client_assertion = function(a)
    seen = a
    local function b64j(t) return crypto.b64url(json.encode(t)) end
    local now = os.time()
    local input = b64j({ alg = "ES256", typ = "JWT" }) .. "." .. b64j({ iss = a.client_id, sub = a.client_id, aud = a.audience,
      iat = now, exp = now + 60, jti = crypto.b64url(crypto.random(12)) })
    return input .. "." .. crypto.b64url(assert(crypto.sign("ES256", pem(os.getenv("ES256_KEY")), input)))
  end } })
out.own = { echo = assert(c:call("echo", { text = "own" })).content[1].text, seen = seen }
c:close()
-- a wrong key: refused by the server, a clear error
local bad = assert(require("specula.crypto").keygen("ES256"))
local c, err = specula.mcp.connect{ url = URL, auth = { grant = "client_credentials", client_id = "jwt-es", private_key = bad, cache = false } }
out.bad = err
local c2 = assert(specula.mcp.connect{ url = URL, auth = { cache = false } })
local log = server_log(c2)
c2:close()
out.auth = log.auth
print(json.encode(out))
]], { ES256_KEY = keys.ES256.key, RS256_KEY = keys.RS256.key })
    for _, alg in ipairs({ "ES256", "RS256" }) do
      assert.are.equal("echo: " .. alg, r[alg].echo)
      assert.are.equal("private_key_jwt", r[alg].info.token_endpoint_auth_method)
      assert.are.equal("client_credentials", r[alg].info.grant)
      assert.are.equal(alg, r[alg].jwt)
    end
    for _, m in ipairs({ "client_secret_basic", "client_secret_post" }) do
      assert.are.equal("echo: " .. m, r[m].echo)
      assert.are.equal(m, r[m].info.token_endpoint_auth_method)
    end
    assert.matches("client credentials token request at http://127%.0%.0%.1:%d+/token: HTTP 401: invalid_client", r.bad)
    assert.are.equal("echo: own", r.own.echo)
    assert.are.equal("jwt-es", r.own.seen.client_id)
    assert.matches("^http://127%.0%.0%.1:%d+$", r.own.seen.audience)
    assert.matches("/token$", r.own.seen.token_endpoint)
    assert.are.equal(6, r.auth.token.client_credentials)   -- five granted, the wrong key refused
    assert.are.equal(3, r.auth.methods.private_key_jwt)
    assert.are.same({ "mcp:read", "mcp:read" }, { r.auth.scopes[1], r.auth.scopes[2] })
  end)

  it("checks its options at connect", function()
    local r = run([[
local function e(o) local ok, err = pcall(specula.mcp.connect, o) return err end
print(json.encode({
  stdio = e({ command = { "true" }, auth = {} }),
  grant = e({ url = "http://127.0.0.1:1/mcp", auth = { grant = "password" } }),
  cc = e({ url = "http://127.0.0.1:1/mcp", auth = { grant = "client_credentials" } }),
  cc2 = e({ url = "http://127.0.0.1:1/mcp", auth = { grant = "client_credentials", client_id = "x" } }),
  unknown = e({ url = "http://127.0.0.1:1/mcp", auth = { clientid = "x" } }),
  method = e({ url = "http://127.0.0.1:1/mcp", auth = { token_endpoint_auth_method = "tls" } }),
  typ = e({ url = "http://127.0.0.1:1/mcp", auth = { authorize = "browser" } }),
  redirect = e({ url = "http://127.0.0.1:1/mcp", auth = { redirect_uri = "/cb" } }),
  jwtb = e({ url = "http://127.0.0.1:1/mcp", auth = { grant = "jwt_bearer" } }),
  ent = e({ url = "http://127.0.0.1:1/mcp", auth = { grant = "enterprise", client_id = "c", id_token = "idtoken-123" } }),
  app = e({ url = "http://127.0.0.1:1/mcp", auth = { application_type = "desktop" } }),
  dpop = e({ url = "http://127.0.0.1:1/mcp", auth = { dpop = "yes" } }),
}))
]])
    assert.matches("auth is for servers reached by url", r.stdio, 1, true)
    assert.matches("auth.grant must be authorization_code, client_credentials, jwt_bearer or enterprise", r.grant, 1, true)
    assert.matches("auth.grant = jwt_bearer needs auth.assertion", r.jwtb, 1, true)
    assert.matches("auth.grant = enterprise needs auth.idp_token_endpoint", r.ent, 1, true)
    assert.matches("auth.application_type must be native or web", r.app, 1, true)
    assert.matches("auth.dpop must be a boolean", r.dpop, 1, true)
    assert.matches("client_credentials needs auth.client_id", r.cc, 1, true)
    assert.matches("needs auth.client_secret, auth.private_key or auth.client_assertion", r.cc2, 1, true)
    assert.matches("auth.clientid is not an auth option", r.unknown, 1, true)
    assert.matches("token_endpoint_auth_method must be none, client_secret_basic", r.method, 1, true)
    assert.matches("auth.authorize must be a function", r.typ, 1, true)
    assert.matches("auth.redirect_uri must be an absolute URL", r.redirect, 1, true)
  end)
end)

describe("MCP authorization: refusals", function()
  it("refuses a resource that is not this server, before any authorization request", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--oauth", "--prm-resource", "https://evil.example.com/mcp" }, [[
local c, err = specula.mcp.connect{ url = URL, auth = {} }
local log = specula.json.decode(assert(specula.http.request{ url = BASE .. "/.well-known/oauth-protected-resource/mcp" }).body)
print(json.encode({ c = c ~= nil, err = err }))
]])
    assert.is_false(r.c)
    assert.matches("names the resource https://evil.example.com/mcp, not this server", r.err, 1, true)
    assert.matches("refusing to authorize", r.err, 1, true)
  end)

  it("refuses without PKCE S256, on a denial, on a forged state, and says why", function()
    if not H.need_node(pending) then return end
    local r1 = with_server({ "--oauth", "--no-pkce" }, [[
local c, err = specula.mcp.connect{ url = URL, auth = {} }
print(json.encode({ err = err }))
]])
    assert.matches("does not list PKCE S256 in code_challenge_methods_supported", r1.err, 1, true)
    local r2 = with_server({ "--oauth", "--deny" }, [[
local c, err = specula.mcp.connect{ url = URL, name = "denied", auth = {} }
print(json.encode({ err = err }))
]])
    assert.matches("^mcp server 'denied': authorization: the authorization server refused: access_denied: the user said no", r2.err)
    local r3 = with_server({ "--oauth" }, [[
local c, err = specula.mcp.connect{ url = URL, auth = { authorize = function(url)
  local loc = assert(specula.http.request{ url = url }).headers["location"]
  return (loc:gsub("state=[^&]+", "state=forged"))
end } }
local c4, err4 = specula.mcp.connect{ url = URL, auth = { cache = false, authorize = function() error("no browser here") end } }
local c5, err5 = specula.mcp.connect{ url = URL, auth = { cache = false, authorize = function() return nil, "the user went away" end } }
print(json.encode({ err = err, err4 = err4, err5 = err5 }))
]])
    assert.matches("state does not match", r3.err, 1, true)
    assert.matches("auth.authorize raised: .*no browser here", r3.err4)
    assert.matches("no authorization code: the user went away", r3.err5, 1, true)
  end)

  it("ends with a clear error when the authorization server is unreachable or answers garbage", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--oauth" }, [[
local c, err = specula.mcp.connect{ url = URL, name = "far", auth = { authorization_server = "http://127.0.0.1:1/as" } }
print(json.encode({ err = err }))
]])
    assert.matches("^mcp server 'far': authorization: authorization server metadata: ECONNREFUSED: GET "
      .. "http://127%.0%.0%.1:1/.-%.well%-known/", r.err)
    local r2 = with_server({ "--oauth", "--garbage-token" }, [[
local c, err = specula.mcp.connect{ url = URL, name = "garbage", auth = {} }
print(json.encode({ err = err }))
]])
    assert.matches("token request at http://127%.0%.0%.1:%d+/token: the response has no access_token", r2.err)
    -- a server that refuses the token it just issued: one authorization, then a clear error
    local r3 = with_server({ "--oauth", "--reject-tokens" }, [[
local asked = 0
local c, err = specula.mcp.connect{ url = URL, name = "broken", auth = { authorize = function(url)
  asked = asked + 1
  return assert(specula.http.request{ url = url }).headers["location"]
end } }
print(json.encode({ err = err, asked = asked }))
]])
    assert.are.equal(1, r3.asked)
    assert.matches("^mcp server 'broken': authorization: the server still answers 401 after authorizing", r3.err)
  end)

  it("says what to do when a server wants authorization and the client has none", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--oauth" }, [[
local c, err = specula.mcp.connect{ url = URL, name = "locked" }
print(json.encode({ err = err }))
]])
    assert.matches("mcp server 'locked': initialize: HTTP 401 (the server wants authorization: give auth = { ... }", r.err, 1, true)
  end)
end)

describe("MCP authorization: the authorization server's identity (RFC 9207, RFC 8414 §3.3)", function()
  it("accepts the advertised iss, refuses a wrong, normalized or missing one before the token request", function()
    if not H.need_node(pending) then return end
    local CODE = LOG .. [[
local c, err = specula.mcp.connect{ url = URL, auth = { cache = false } }
local auth = c and server_log(c).auth
if c then c:close() end
if not c then
  -- the server's log, read with a client that authorizes nothing
  local probe = assert(specula.http.request{ url = BASE .. "/.well-known/oauth-authorization-server" })
  print(json.encode({ err = err, meta = json.decode(probe.body) }))
else
  print(json.encode({ ok = true, token = auth.token, app = auth.application_type }))
end
]]
    local ok = with_server({ "--oauth", "--iss", "correct" }, CODE)
    assert.is_true(ok.ok)
    assert.are.equal(1, ok.token.authorization_code)
    assert.are.equal("native", ok.app)              -- the redirect comes back to this machine
    local unadv = with_server({ "--oauth", "--iss", "correct", "--iss-unadvertised" }, CODE)
    assert.is_true(unadv.ok)
    local plain = with_server({ "--oauth", "--iss", "omit", "--iss-unadvertised" }, CODE)
    assert.is_true(plain.ok)                        -- neither advertised nor sent: as before RFC 9207
    local cases = {
      { { "--iss", "wrong" }, "names the issuer https://evil.example, not http://127.0.0.1:%d+ %(iss, RFC 9207%)" },
      { { "--iss", "slash" }, "names the issuer http://127.0.0.1:%d+/, not http://127.0.0.1:%d+ %(iss" },
      { { "--iss", "wrong", "--iss-unadvertised" }, "names the issuer https://evil.example" },
      { { "--iss", "omit" }, "says it sends iss %(authorization_response_iss_parameter_supported%) but its response "
        .. "has none" },
    }
    for _, case in ipairs(cases) do
      local args = { "--oauth", "--token-log", H.tmpdir() .. "/iss.jsonl" }
      for _, a in ipairs(case[1]) do args[#args + 1] = a end
      os.remove(H.tmpdir() .. "/iss.jsonl")
      local r = with_server(args, CODE)
      assert.matches("authorization: the authorization " .. (case[1][2] == "omit" and "server " or "response ")
        .. case[2], r.err)
      -- the code never went to the token endpoint
      local log = H.read(H.tmpdir() .. "/iss.jsonl") or ""
      assert.is_nil(log:find('"seen_code"', 1, true), table.concat(case[1], " "))
    end
  end)

  it("refuses metadata whose issuer is not the authorization server's, before registering", function()
    if not H.need_node(pending) then return end
    local tlog = H.tmpdir() .. "/issuer.jsonl"
    os.remove(tlog)
    -- registering would give this client a secret, which the token log would show
    local r = with_server({ "--oauth", "--metadata-issuer", "https://attacker.example", "--auth-methods",
                            "client_secret_basic", "--token-log", tlog }, [[
local c, err = specula.mcp.connect{ url = URL, auth = { cache = false } }
print(json.encode({ err = err }))
]])
    assert.matches("the authorization server metadata at http://127%.0%.0%.1:%d+/%.well%-known/oauth%-authorization%-server "
      .. "names the issuer https://attacker%.example, not http://127%.0%.0%.1:%d+: refusing to use it", r.err)
    assert.are.equal("", H.read(tlog) or "")           -- no registration, no code, no token
  end)

  it("registers as a web application for a redirect to a web site", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--oauth" }, LOG .. [[
local c = assert(specula.mcp.connect{ url = URL, auth = { redirect_uri = "https://app.example/callback", cache = false } })
local a = server_log(c).auth
c:close()
print(json.encode({ app = a.application_type }))
]])
    assert.are.equal("web", r.app)
  end)
end)

describe("MCP authorization: offline_access (SEP-2207)", function()
  it("asks for offline_access where the authorization server offers it, and only there", function()
    if not H.need_node(pending) then return end
    local CODE = LOG .. [[
local c = assert(specula.mcp.connect{ url = URL, auth = { cache = false, offline_access = os.getenv("NO_OFFLINE") == nil } })
local a = server_log(c).auth
c:close()
print(json.encode({ scopes = a.scopes, info = c:auth_info() }))
]]
    local on = with_server({ "--oauth", "--scopes", "mcp:read", "--as-scopes", "mcp:read offline_access" }, CODE)
    assert.are.same({ "mcp:read offline_access" }, on.scopes)
    assert.is_true(on.info.has_refresh_token)
    local off = with_server({ "--oauth", "--scopes", "mcp:read" }, CODE)
    assert.are.same({ "mcp:read" }, off.scopes)
    local optout = with_server({ "--oauth", "--scopes", "mcp:read", "--as-scopes", "mcp:read offline_access" }, CODE,
      { NO_OFFLINE = "1" })
    assert.are.same({ "mcp:read" }, optout.scopes)
  end)
end)

describe("MCP authorization: a resource that moves to another authorization server (SEP-2352)", function()
  it("reads the resource metadata again and registers anew with the new server", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--oauth" }, LOG .. [[
local c = assert(specula.mcp.connect{ url = URL, auth = { cache = false } })
assert(c:call("echo", { text = "before" }))
local first = c:auth_info()
local moved = assert(specula.http.request{ method = "POST", url = BASE .. "/admin/move-as", body = "" })
local e = assert(c:call("echo", { text = "after" })).content[1].text
local a = server_log(c).auth
local info = c:auth_info()
c:close()
print(json.encode({ e = e, first = first, info = info, at = a.registered_at, base = BASE }))
]])
    assert.are.equal("echo: after", r.e)
    assert.are.equal(r.base, r.first.authorization_server)
    assert.are.equal(r.base .. "/as2", r.info.authorization_server)
    assert.are.same({ r.base, r.base .. "/as2" }, r.at)
    assert.are_not.equal(r.first.client_id, r.info.client_id)
    assert.are.equal(2, r.info.registrations)
    assert.are.equal(2, r.info.authorizations)
  end)
end)

describe("MCP authorization: JWT bearer grants (RFC 7523)", function()
  it("presents a workload's JWT as the grant, without a client, and does not retry a refused one", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--oauth", "--assertion", "workload-jwt-0123456789" }, LOG .. [[
local AUD
local c = assert(specula.mcp.connect{ url = URL, auth = { grant = "jwt_bearer", cache = false,
  assertion = function(info) AUD = info.authorization_server return "workload-jwt-0123456789" end } })
local e = assert(c:call("echo", { text = "wif" })).content[1].text
local a = server_log(c).auth
local info = c:auth_info()
c:close()
local bad, berr = specula.mcp.connect{ url = URL, name = "bad", auth = { grant = "jwt_bearer", assertion = "forged-jwt-987654",
  cache = false } }
local a2 = server_log(assert(specula.mcp.connect{ url = URL, auth = { grant = "jwt_bearer", cache = false,
  assertion = "workload-jwt-0123456789" } })).auth
print(json.encode({ e = e, auth = a, info = info, berr = berr, aud = AUD, base = BASE, after = a2.token }))
]])
    assert.are.equal("echo: wif", r.e)
    assert.are.equal(1, r.auth.token["urn:ietf:params:oauth:grant-type:jwt-bearer"])
    assert.are.equal(0, r.auth.registrations)
    assert.are.equal("(workload)", r.auth.jwt_bearer_client)
    assert.are.equal(r.base, r.aud)                  -- the function is told the audience
    assert.are.equal("jwt_bearer", r.info.grant)
    assert.matches("mcp server 'bad': authorization: JWT bearer token request at http://127%.0%.0%.1:%d+/token: "
      .. "HTTP 400: invalid_grant: unknown assertion", r.berr)
    assert.is_nil(r.berr:find("forged-jwt-987654", 1, true))
    -- the refused one was tried once: two good grants and one bad in all
    assert.are.equal(3, r.after["urn:ietf:params:oauth:grant-type:jwt-bearer"])
  end)

  it("exchanges the enterprise ID token for an ID-JAG and presents it with the client's secret", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--oauth", "--client", "ent-client:ent-secret-0123456789", "--auth-methods",
                            "client_secret_basic", "--idp-id-token", "idp-id-token-0123456789" }, LOG .. [[
local c = assert(specula.mcp.connect{ url = URL, auth = { grant = "enterprise", client_id = "ent-client",
  client_secret = "ent-secret-0123456789", id_token = "idp-id-token-0123456789", idp_client_id = "idp-app",
  idp_token_endpoint = BASE .. "/idp/token", cache = false } })
local e = assert(c:call("echo", { text = "ema" })).content[1].text
local a = server_log(c).auth
c:close()
local bad, berr = specula.mcp.connect{ url = URL, name = "bad", auth = { grant = "enterprise", client_id = "ent-client",
  client_secret = "ent-secret-0123456789", id_token = "stale-id-token-987654", idp_token_endpoint = BASE .. "/idp/token",
  cache = false } }
print(json.encode({ e = e, auth = a, berr = berr, url = URL, base = BASE }))
]])
    assert.are.equal("echo: ema", r.e)
    assert.are.same({ grant_type = "urn:ietf:params:oauth:grant-type:token-exchange",
      subject_token_type = "urn:ietf:params:oauth:token-type:id_token",
      requested_token_type = "urn:ietf:params:oauth:token-type:id-jag", audience = r.base, resource = r.url,
      client_id = "idp-app" }, r.auth.idp_request)
    assert.are.equal(1, r.auth.token["urn:ietf:params:oauth:grant-type:jwt-bearer"])
    assert.are.equal(1, r.auth.methods.client_secret_basic)
    assert.are.equal("ent-client", r.auth.jwt_bearer_client)
    assert.matches("mcp server 'bad': authorization: token exchange at the identity provider at "
      .. "http://127%.0%.0%.1:%d+/idp/token: HTTP 400: invalid_grant: unknown ID token", r.berr)
    assert.is_nil(r.berr:find("stale-id-token-987654", 1, true))
  end)
end)

describe("MCP authorization: DPoP (RFC 9449)", function()
  it("binds the token to a key, presents it with the DPoP scheme and a fresh proof per request", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--oauth", "--dpop", "--token-ttl", "2" }, LOG .. [[
local c = assert(specula.mcp.connect{ url = URL, auth = { cache = false } })
for i = 1, 3 do assert(c:call("echo", { text = "d" .. i })) end
specula.sleep(2100)                                  -- expired: a refresh, with a proof of the same key
local e = assert(c:call("echo", { text = "after refresh" })).content[1].text
local a = server_log(c).auth
local info = c:auth_info()
c:close()
print(json.encode({ e = e, dpop = a.dpop, token = a.token, info = info }))
]])
    assert.are.equal("echo: after refresh", r.e)
    assert.is_true(r.info.dpop)
    assert.are.same({}, r.dpop.bad)                   -- every proof verified: key, htm, htu, ath, a new jti
    assert.are.equal(1, r.token.refresh_token)
    -- two token requests, and the requests to /mcp that carried the token
    assert.is_true(r.dpop.proofs >= 2 + 6, tostring(r.dpop.proofs))
    assert.are.equal(1, r.info.refreshes)
  end)

  it("sends the nonce the authorization server and the resource server ask for", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--oauth", "--dpop-nonce" }, LOG .. [[
local c = assert(specula.mcp.connect{ url = URL, auth = { cache = false } })
local e = assert(c:call("echo", { text = "nonce" })).content[1].text
local a = server_log(c).auth
c:close()
print(json.encode({ e = e, dpop = a.dpop, token = a.token }))
]])
    assert.are.equal("echo: nonce", r.e)
    assert.are.equal(1, r.dpop.as_nonce)              -- asked once, then the nonce was sent
    assert.are.equal(1, r.dpop.rs_nonce)
    assert.are.same({}, r.dpop.bad)
    assert.are.equal(2, r.token.authorization_code)   -- the refused request and its retry with the nonce
  end)

  it("proves a key with auth.dpop = true but takes a Bearer answer as Bearer; never with auth.dpop = false", function()
    if not H.need_node(pending) then return end
    local r = with_server({ "--oauth" }, LOG .. [[
local c = assert(specula.mcp.connect{ url = URL, auth = { cache = false, dpop = true } })
assert(c:call("echo", { text = "bearer" }))
local info = c:auth_info()
c:close()
print(json.encode({ info = info }))
]])
    assert.is_false(r.info.dpop)
    assert.are.equal(1, r.info.authorizations)
    local r2 = with_server({ "--oauth", "--dpop" }, LOG .. [[
local c, err = specula.mcp.connect{ url = URL, auth = { cache = false, dpop = false } }
print(json.encode({ err = err }))
]])
    assert.matches("invalid_dpop_proof: no DPoP proof", r2.err, 1, true)
  end)
end)

-- An agent over the OAuth server, for the secrecy run: every query calls
-- tools through an authorized client; the query "revoke" makes the server
-- forget the token (a refresh follows); the query "badsecret" connects
-- with a wrong client secret, which the (careless) server echoes in its
-- error, and ends with that error.
local SECRECY_AGENT = [[
local specula = require "specula"
local URL = os.getenv("MCP_URL")
local client = assert(specula.mcp.connect{ url = URL, name = "locked", auth = { client_id = "conf-client",
  client_secret = "conf-secret-0123456789", token_endpoint_auth_method = "client_secret_post" } })
return specula.agent {
  name = "secrecy",
  tools = specula.tools.mcp(client, { include = { "echo", "revoke" } }),
  policy = specula.policy.mcp(client, { trust_annotations = true }),
  init = function(q) return { q = q, hop = 0, obs = {} } end,
  step = function(s)
    if s.q == "badsecret" then
      local c, err = specula.mcp.connect{ url = URL, name = "wrong", auth = { client_id = "conf-client",
        client_secret = "WRONG-secret-9876543210", cache = false } }
      error(err, 0)
    end
    if s.hop == 3 then return { final = table.concat(s.obs, "|") } end
    if s.q == "revoke" and s.hop == 1 then return { segment = "revoke", action = { tool = "revoke", args = {} } } end
    return { segment = "echo", action = { tool = "echo", args = { text = s.q .. s.hop } } }
  end,
  update = function(s, step, obs)
    local o = { unpack(s.obs) }
    o[#o + 1] = obs
    return { q = s.q, hop = s.hop + 1, obs = o }
  end,
}
]]

describe("MCP authorization: secrecy", function()
  it("keeps every credential out of --record, --trace, --out, stdout and stderr", function()
    if not H.need_node(pending) then return end
    local dir = H.tmpdir() .. "/secrecy"
    os.execute("rm -rf " .. H.quote(dir) .. " && mkdir -p " .. H.quote(dir))
    local tlog = dir .. "/issued.jsonl"
    local srv = MH.http_server({ "--oauth", "--leaky", "--token-ttl", "2", "--token-log", tlog,
                                 "--client", "conf-client:conf-secret-0123456789" })
    local agent = H.tmpfile("secrecy_agent.lua", SECRECY_AGENT)
    local input = H.tmpfile("secrecy_input.jsonl", '{"id":"q1","query":"plain"}\n{"id":"q2","query":"revoke"}\n'
      .. '{"id":"q3","query":"badsecret"}\n')
    local st, out, err = H.specula({ "run", agent, "--input", input, "--record", dir .. "/cassette",
      "--trace", dir .. "/trace.json", "--out", dir .. "/out.jsonl", "--k", "2" }, { MCP_URL = srv.url })
    srv.stop()
    assert.are.equal(3, st, out .. err)                 -- one query failed, on purpose
    -- every credential the server issued or was shown
    local list = MH.logged_secrets(tlog)
    list[#list + 1] = "conf-secret-0123456789"
    list[#list + 1] = "WRONG-secret-9876543210"
    local kinds = {}
    for line in H.read(tlog):gmatch("[^\n]+") do kinds[cjson.decode(line).kind] = true end
    for _, k in ipairs({ "access", "refresh", "seen_access", "seen_refresh_token", "seen_client_secret" }) do
      assert.is_true(kinds[k] == true, "the run never used a credential of kind " .. k)
    end
    assert.is_true(#list >= 6)
    -- the outputs are what they should be
    local records = {}
    for line in H.read(dir .. "/out.jsonl"):gmatch("[^\n]+") do
      local rec = cjson.decode(line)
      records[rec.id] = rec
    end
    assert.are.equal("echo: plain0|echo: plain1|echo: plain2", records.q1.answer)
    assert.are.equal("echo: revoke0|revoked|echo: revoke2", records.q2.answer)
    assert.matches("invalid_client", records.q3.error, 1, true)
    assert.matches("[redacted]", records.q3.error, 1, true)   -- the server's echo of the secret
    -- no credential anywhere, in any encoding
    local files = { dir .. "/trace.json", dir .. "/out.jsonl" }
    local p = assert(io.popen("ls " .. H.quote(dir .. "/cassette")))
    for f in p:lines() do files[#files + 1] = dir .. "/cassette/" .. f end
    p:close()
    assert.is_true(#files >= 3, "no cassette file")
    local texts = { stdout = out, stderr = err }
    for _, f in ipairs(files) do texts[f] = assert(H.read(f)) end
    assert.matches('"kind":"mcp"', texts[files[3]], 1, true)   -- the cassette recorded the exchanges
    for name, text in pairs(texts) do
      local hits = MH.find_secrets(text, list)
      assert.are.same({}, hits, name)
    end
  end)

  it("keeps DPoP keys, ID tokens, ID-JAGs and the client's secret out of every output too", function()
    if not H.need_node(pending) then return end
    local dir = H.tmpdir() .. "/secrecy-dpop"
    os.execute("rm -rf " .. H.quote(dir) .. " && mkdir -p " .. H.quote(dir))
    local tlog = dir .. "/issued.jsonl"
    local srv = MH.http_server({ "--oauth", "--leaky", "--dpop-nonce", "--token-log", tlog, "--auth-methods",
      "client_secret_basic", "--client", "ent-client:ent-secret-0123456789", "--idp-id-token", "idp-id-token-0123456789" })
    -- the agent of the first secrecy run, authorized the enterprise way with DPoP-bound tokens; it
    -- writes the DPoP key it holds to a side file, so that this spec knows what to look for
    local agent_src = SECRECY_AGENT:gsub('auth = { client_id = "conf%-client",\n  client_secret = "conf%-secret%-0123456789", '
      .. 'token_endpoint_auth_method = "client_secret_post" }', 'auth = { grant = "enterprise", client_id = "ent-client",\n'
      .. '  client_secret = "ent-secret-0123456789", id_token = "idp-id-token-0123456789", '
      .. 'idp_token_endpoint = URL:gsub("/mcp$", "/idp/token") }')
      :gsub('client_id = "conf%-client",\n        client_secret = "WRONG', 'client_id = "ent-client",\n        client_secret = "WRONG')
      :gsub('if s%.hop == 3 then', 'if s.hop == 3 then\n      for _, e in pairs(require("specula.mcp.auth")._cache) do\n'
        .. '        if e.dpop_key then local f = io.open(os.getenv("KEY_OUT"), "w") f:write(e.dpop_key.pem) f:close() end\n'
        .. '      end')
    assert.matches('grant = "enterprise"', agent_src, 1, true)
    assert.matches("KEY_OUT", agent_src, 1, true)
    local agent = H.tmpfile("secrecy_dpop_agent.lua", agent_src)
    local input = H.tmpfile("secrecy_dpop_input.jsonl", '{"id":"q1","query":"plain"}\n{"id":"q2","query":"revoke"}\n'
      .. '{"id":"q3","query":"badsecret"}\n')
    local st, out, err = H.specula({ "run", agent, "--input", input, "--record", dir .. "/cassette",
      "--trace", dir .. "/trace.json", "--out", dir .. "/out.jsonl", "--k", "2" },
      { MCP_URL = srv.url, KEY_OUT = dir .. "/dpop-key.pem" })
    srv.stop()
    assert.are.equal(3, st, out .. err)
    local records = {}
    for line in H.read(dir .. "/out.jsonl"):gmatch("[^\n]+") do
      local rec = cjson.decode(line)
      records[rec.id] = rec
    end
    assert.are.equal("echo: plain0|echo: plain1|echo: plain2", records.q1.answer)
    assert.are.equal("echo: revoke0|revoked|echo: revoke2", records.q2.answer)
    assert.matches("invalid_client", records.q3.error, 1, true)
    assert.matches("[redacted]", records.q3.error, 1, true)
    local list = MH.logged_secrets(tlog)
    local kinds = {}
    for line in H.read(tlog):gmatch("[^\n]+") do kinds[cjson.decode(line).kind] = true end
    for _, k in ipairs({ "access", "seen_access", "id_jag", "seen_assertion", "seen_subject_token" }) do
      assert.is_true(kinds[k] == true, "the run never used a credential of kind " .. k)
    end
    list[#list + 1] = "ent-secret-0123456789"
    list[#list + 1] = "WRONG-secret-9876543210"
    list[#list + 1] = "idp-id-token-0123456789"
    -- the private key: its PEM, and each line of its Base64 body
    local pem = assert(H.read(dir .. "/dpop-key.pem"), "the agent saw no DPoP key")
    assert.matches("PRIVATE KEY", pem, 1, true)
    list[#list + 1] = pem
    for line in pem:gmatch("[^\n]+") do
      if not line:find("-----", 1, true) and #line >= 16 then list[#list + 1] = line end
    end
    local files = { dir .. "/trace.json", dir .. "/out.jsonl" }
    local p = assert(io.popen("ls " .. H.quote(dir .. "/cassette")))
    for f in p:lines() do files[#files + 1] = dir .. "/cassette/" .. f end
    p:close()
    local texts = { stdout = out, stderr = err }
    for _, f in ipairs(files) do texts[f] = assert(H.read(f)) end
    for name, text in pairs(texts) do
      assert.are.same({}, MH.find_secrets(text, list), name)
      assert.is_nil(text:find("PRIVATE KEY", 1, true), name)
    end
  end)
end)
