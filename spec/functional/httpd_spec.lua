-- The engine's HTTP/1.1 server (engine/sp_httpd.c), driven by raw sockets
-- (spec/support/rawhttp.py) against spec/functional/scripts/httpd_raw.lua,
-- whose handler echoes what was parsed. One run of the script serves every
-- case; each `it` checks one group of its findings.
local H = require "support.helpers"

local result
local function run()
  if result then return result end
  local st, out, err = H.specula({ "run", H.root .. "/spec/functional/scripts/httpd_raw.lua" },
    { SPECULA_SOURCE_DIR = H.root })
  assert(st == 0, "exit status " .. st .. "\nstdout: " .. out .. "\nstderr: " .. err)
  result = H.last_json(out)
  result.stderr_all = err
  assert(result.status == 0, "the raw client failed: " .. tostring(result.stderr))
  return result
end

describe("the HTTP/1.1 server (sp_httpd)", function()
  it("parses a request: method, target, query, headers by lowercase name, Content-Length body", function()
    local c = run().client
    local b = c.get.body
    assert.are.equal(200, c.get.status)
    assert.are.equal("GET", b.method)
    assert.are.equal("/hello?x=1", b.target)
    assert.are.equal("/hello", b.path)
    assert.are.equal("x=1", b.query)
    assert.are.equal("A b", b.headers["x-mixed-case"])
    assert.are.equal("hello world", c.post_length.resp.body.body)
    assert.are.equal("11", c.post_length.resp.body.headers["content-length"])
    -- bare LF line ends and a leading empty line are read as well
    assert.are.equal("/lf", c.bare_lf.resp.body.path)
  end)

  it("reassembles a chunked body sent in pieces (extensions and trailers skipped)", function()
    local r = run().client.post_chunked.resp
    assert.are.equal(200, r.status)
    assert.are.equal("hello world", r.body.body)
  end)

  it("keeps the connection for the next request, and answers pipelined ones in order, intact", function()
    local c = run().client
    local a, b = c.keepalive[1], c.keepalive[2]
    assert.are.equal(a.body.conn, b.body.conn)
    assert.are.equal("ok", b.body.body)
    local p = c.pipelined
    assert.are.same({ "/one", "/two", "/three" }, { p[1].body.path, p[2].body.path, p[3].body.path })
    assert.are.same({ "abc", "", "xyz" }, { p[1].body.body, p[2].body.body, p[3].body.body })
    assert.are.equal(p[1].body.conn, p[3].body.conn)
  end)

  it("parses requests cut at any byte (every byte apart, and random cuts) the same", function()
    local sp = run().client.splits
    assert.are.equal(16, sp.n)
    assert.are.same({ { { "/one", "ab\r\nc" }, { "/two", "xyz0123456789" }, { "/three", "" } } }, sp.distinct)
  end)

  it("answers a malformed request 400 (505, 501 where they apply) and closes the connection", function()
    local m = run().client.malformed
    local want = { garbage = 400, no_host = 400, space_in_target = 400, bad_header = 400, space_before_colon = 400,
                   obs_fold = 400, ctl_in_value = 400, cl_and_te = 400, two_lengths = 400, bad_length = 400,
                   bad_chunk = 400, chunk_no_crlf = 400, gzip = 501, http2 = 505, lone_cr = 400 }
    for name, status in pairs(want) do
      assert.is_truthy(m[name] and m[name].resp, name .. ": no response")
      assert.are.equal(status, m[name].resp.status, name)
      assert.are.equal("close", m[name].resp.headers.connection, name)
      assert.is_true(m[name].closed, name .. ": the connection stayed open")
    end
  end)

  it("refuses an oversized head (431) and body (413), by Content-Length or chunks, and closes", function()
    local l = run().client.limits
    assert.is_nil(l.error, l.error)
    for name, status in pairs({ head = 431, head_unterminated = 431, many_headers = 431, body = 413, chunked_body = 413,
                                body_sent = 413 }) do
      assert.is_truthy(l[name].resp, name .. ": no response (reset under it?)")
      assert.are.equal(status, l[name].resp.status, name)
      assert.is_true(l[name].closed, name)
    end
  end)

  it("closes after the response to HTTP/1.0 and to Connection: close; sends 100 Continue when asked", function()
    local c = run().client
    assert.are.equal(200, c.http10.resp.status)
    assert.is_true(c.http10.closed)
    assert.are.equal("close", c.conn_close.resp.headers.connection)
    assert.is_true(c.conn_close.closed)
    assert.are.equal(100, c.expect_continue.interim)
    assert.are.equal("data", c.expect_continue.resp.body.body)
  end)

  it("streams a response in chunks, and refuses misuse (a second answer, a bad header) with a message", function()
    local c = run().client
    assert.are.equal("chunked", c.stream.resp.headers["transfer-encoding"])
    assert.are.equal("part1;part2;part3;", c.stream.resp.body)
    local d = c.drop_and_misuse
    assert.are.equal(500, d.drop.resp.status)           -- the handler returned without answering
    assert.is_true(d.drop.closed)
    assert.are.equal(500, d.raise.resp.status)          -- the handler raised: 500, and a warning
    assert.matches("specula: warning: HTTP handler failed: .*the handler broke", run().stderr_all)
    assert.are.equal("once", d.twice.resp.body)
    assert.matches("EINVAL: response header line 'Bad Name: x'", d.badheader.resp.body)
  end)

  it("tells the task serving a request that its client went away", function()
    local r = run()
    assert.are.equal(1, r.client.disconnect.body.gone)
    assert.are.equal(1, r.seen.gone)
  end)

  it("drops a client that leaves more than max_pending_bytes unread, and tells its task", function()
    local f = run().client.flood.body
    assert.is_true(f.flood_gone)
    assert.is_true(f.flood_bytes < 256 * 1024 * 1024, "never dropped: " .. f.flood_bytes)
  end)

  it("drains a refused body after its 413, and cuts off a client that sends on past the linger time", function()
    local g = run().client.linger
    assert.are.equal(413, g.status)
    assert.is_true(g.drained > 0, "nothing was drained after the 413")
    assert.is_true(g.cut, "the server read for " .. tostring(g.after) .. " s and never closed")
  end)

  it("closes a connection with no request in service that sends nothing for idle_timeout_ms", function()
    local i = run().client.idle
    assert.are.equal(200, i.first)
    assert.is_true(i.silent)      -- connected, never sent
    assert.is_true(i.slow)        -- a head that never ends
    assert.is_true(i.used)        -- a keep-alive after its request
    assert.are.equal(200, i.busy) -- requests in time keep it open
  end)

  it("serves many clients at once, each on its own keep-alive connection, and closes them all", function()
    local r = run()
    local conns = {}
    for i, got in ipairs(r.client.many) do
      assert.are.equal("table", type(got), tostring(got))
      for k, x in ipairs(got) do
        assert.are.equal(200, x[1])
        assert.are.equal((i - 1) .. "-" .. (k - 1), x[2])
        assert.are.equal(got[1][3], x[3])
      end
      assert.is_nil(conns[got[1][3]], "two clients on one connection")
      conns[got[1][3]] = true
    end
    assert.are.equal(24, #r.client.many)
    assert.are.equal(0, r.conns_left)
    assert.is_nil(r.stderr_all:find("still open at exit", 1, true), r.stderr_all)
  end)

  it("closes the listener, its connections and a stream in flight at exit when the script did not", function()
    local st, out, err = H.run_lua([[
local specula = require "specula"
local serve = require "specula.mcp.serve_http"
local srv = assert(serve.http_listen { port = 0, handler = function(r)
  assert(r:stream(200, { ["Content-Type"] = "text/plain" }))
  while not r:gone() do r:write("tick;"); specula.sleep(20) end
end })
local got = ""
specula.spawn(function()
  local res = assert(specula.http.request { url = "http://127.0.0.1:" .. srv.port() .. "/", stream = true })
  while true do
    local chunk = res:read()
    if not chunk then break end
    got = got .. chunk
  end
end)
while #got < 10 do specula.sleep(10) end
print(string.format('{"conns":%d,"got":%q}', srv.conns(), got:sub(1, 10)))
-- no close: the script ends with the listener, a connection and its stream open
]])
    assert.are.equal(0, st, "stdout: " .. out .. "\nstderr: " .. err)
    local r = H.last_json(out)
    assert.are.equal(1, r.conns)
    assert.are.equal("tick;tick;", r.got)
    assert.is_nil(err:find("still open at exit", 1, true), err)
  end)
end)
