-- HTTP through the real binary against the loopback test server.
local H = require "support.helpers"

local server

local function run(code)
  local st, out, err = H.run_lua("local specula = require 'specula'\nlocal http = specula.http\nlocal BASE = '"
    .. server.base .. "'\n" .. code)
  assert.equals(0, st, "script failed: " .. err .. out)
  return out, err
end

describe("specula.http", function()
  setup(function() server = H.server() end)
  teardown(function() server.stop() end)

  it("GETs and POSTs with headers and bodies", function()
    local out = run([[
      local r = assert(http.request{ url = BASE .. "/hello" })
      print(r.status, r.body, r.headers["content-length"])
      local e = assert(http.request{ method = "POST", url = BASE .. "/echo?x=1",
        headers = { ["X-Test"] = "yes", ["Content-Type"] = "application/json" }, body = '{"a":1}' })
      local j = specula.json.decode(e.body)
      print(j.method, j.headers["x-test"], j.body, j.query)
    ]])
    assert.matches("200\thello\t5", out, 1, true)
    assert.matches('POST\tyes\t{"a":1}\tx=1', out, 1, true)
  end)

  -- the engine reuses the easy handles of ended transfers: nothing of one
  -- request (headers, a body, a method, credentials in the URL, a timeout,
  -- verbose) may reach the next
  it("a request carries nothing of the requests before it", function()
    local out, err = run([[
      local function show(r) return r.status .. " " .. (r.body:gsub("\n", " ")) end
      for round = 1, 3 do
        local a = assert(http.request{ method = "PUT", url = BASE .. "/echo?first=1",
          headers = { ["X-Marker-Header"] = "left-behind", ["Content-Type"] = "text/plain" },
          body = "a body", timeout_ms = 5000 })
        local j = specula.json.decode(a.body)
        print("first", j.method, j.headers["x-marker-header"], j.body)
        local b = assert(http.request{ url = BASE .. "/echo" })
        local k = specula.json.decode(b.body)
        print("second", k.method, tostring(k.headers["x-marker-header"]), tostring(k.headers["content-type"]),
          "[" .. tostring(k.body) .. "]", tostring(k.headers["authorization"]))
        local c = assert(http.request{ url = BASE .. "/reflect?h=X-Marker-Header" })
        print("third", c.status)
        local u = BASE:gsub("^http://", "http://user:pw@")
        assert(http.request{ url = u .. "/hello" })
        local d = assert(http.request{ url = BASE .. "/echo" })
        print("after auth", tostring(specula.json.decode(d.body).headers["authorization"]))
      end
      -- a transfer cut off mid-way, then a whole one on its handle
      local t = specula.spawn(function() return http.request{ url = BASE .. "/hold" } end)
      specula.sleep(50)
      t:cancel()
      local e = assert(http.request{ url = BASE .. "/hello" })
      print("after cancel", e.status, e.body)
    ]])
    local n = 0
    for _ in out:gmatch("first\tPUT\tleft%-behind\ta body") do n = n + 1 end
    assert.equals(3, n, out)
    n = 0
    for _ in out:gmatch("second\tGET\tnil\tnil\t%[%]\tnil") do n = n + 1 end
    assert.equals(3, n, out)
    n = 0
    for _ in out:gmatch("third\t400") do n = n + 1 end
    assert.equals(3, n, out)
    n = 0
    for _ in out:gmatch("after auth\tnil") do n = n + 1 end
    assert.equals(3, n, out)
    assert.matches("after cancel\t200\thello", out, 1, true)
    assert.not_matches("left-behind", err, 1, true)
  end)

  it("verbose prints the exchange on stderr with credentials redacted", function()
    local secret = "sk-VerboseSecret-7f3a9"
    local out, err = run([[
      local r = assert(http.request{ url = BASE .. "/echo?q=cats&api_key=]] .. secret .. [[&n=2", verbose = true,
        headers = { Authorization = "Bearer ]] .. secret .. [[", ["x-api-key"] = "]] .. secret .. [[",
                    ["X-Plain"] = "visible" } })
      print(r.status, specula.json.decode(r.body).headers["x-api-key"] == "]] .. secret .. [[")
    ]])
    assert.matches("200	true", out, 1, true)           -- the server still got the real key
    assert.matches("> GET /echo?q=cats&api_key=[redacted]&n=2 HTTP/1.1", err, 1, true)
    assert.matches("> Authorization: [redacted]", err, 1, true)
    assert.matches("> x-api-key: [redacted]", err, 1, true)
    assert.matches("> X-Plain: visible", err, 1, true)
    assert.matches("< HTTP/1.1 200", err, 1, true)
    assert.is_nil(err:find("VerboseSecret", 1, true))
    assert.is_nil(out:find("VerboseSecret", 1, true))
  end)

  it("verbose hides every declared secret, wherever it sits: a plain header, the path, a streamed response", function()
    local secret = "declared-Secret-0042"
    local out, err = run([[
      specula.secrets.declare("]] .. secret .. [[")
      local r = assert(http.request{ url = BASE .. "/echo/]] .. secret .. [[?q=]] .. secret .. [[", verbose = true,
        headers = { ["X-Note"] = "]] .. secret .. [[", ["X-Plain"] = "visible" } })
      local s = assert(http.request{ url = BASE .. "/echo?v=]] .. secret .. [[", verbose = true, stream = true })
      s:read_all()
      print(r.status, s.status)
    ]])
    assert.matches("200\t200", out, 1, true)
    assert.matches("> GET /echo/[redacted]?q=[redacted] HTTP/1.1", err, 1, true)
    assert.matches("> X-Note: [redacted]", err, 1, true)
    assert.matches("> X-Plain: visible", err, 1, true)
    assert.matches("> GET /echo?v=[redacted] HTTP/1.1", err, 1, true)
    assert.is_nil(err:find(secret, 1, true), err)
  end)

  it("returns error statuses as responses, not errors", function()
    local out = run([[
      local r = assert(http.request{ url = BASE .. "/status/429?retry_after=2" })
      print(r.status, r.headers["retry-after"])
      r = assert(http.request{ url = BASE .. "/status/500" })
      print(r.status)
    ]])
    assert.matches("429\t2", out, 1, true)
    assert.matches("500", out, 1, true)
  end)

  it("turns network failures into nil, err with a code and the endpoint", function()
    local out = run([[
      local function show(tag, r, e) print(tag, r, e) end
      show("refused", http.request{ url = "http://127.0.0.1:1/x?api_key=SECRET" })
      show("timeout", http.request{ url = BASE .. "/delay/2000", timeout_ms = 100 })
      show("idle", http.request{ url = BASE .. "/stall", idle_timeout_ms = 100 })
      show("reset", http.request{ url = BASE .. "/reset?after=10" })
      show("badchunk", http.request{ url = BASE .. "/badchunk" })
      show("truncated", http.request{ url = BASE .. "/truncated" })
      show("toolarge", http.request{ url = BASE .. "/big/100000", max_body_bytes = 1000 })
      show("toolarge_chunked", http.request{ url = BASE .. "/big/100000?chunked=1", max_body_bytes = 1000 })
      show("dns", http.request{ url = "http://no-such-host.invalid/", timeout_ms = 5000 })
      show("badurl", http.request{ url = "ftp://example.com/" })
      local c = specula.settle()
      print("left", c.transfers, c.requests, c.timers)
    ]])
    assert.matches("refused\tnil\tECONNREFUSED: GET http://127.0.0.1:1/x:", out, 1, true)
    assert.not_matches("SECRET", out, 1, true)
    assert.matches("timeout\tnil\tETIMEDOUT: GET " .. server.base .. "/delay/2000", out, 1, true)
    assert.matches("idle\tnil\tEIDLE: ", out, 1, true)
    assert.matches("reset\tnil\tECONNRESET: ", out, 1, true)
    assert.matches("badchunk\tnil\tEPROTO: ", out, 1, true)
    assert.matches("truncated\tnil\tETRUNCATED: ", out, 1, true)
    assert.matches("toolarge\tnil\tEBODYTOOLARGE: .*max_body_bytes %(1000%)", out)
    assert.matches("toolarge_chunked\tnil\tEBODYTOOLARGE: ", out, 1, true)
    assert.matches("dns\tnil\tE[A-Z]+: GET http://no%-such%-host%.invalid/", out)
    assert.matches("badurl\tnil\tEINVAL: ", out, 1, true)
    assert.matches("left\t0\t0\t0", out, 1, true)
  end)

  it("streams body chunks in order and parses SSE #timing", function()
    local out = run([[
      local r = assert(http.request{ url = BASE .. "/sse?n=4&interval=15&data=tick", stream = true })
      print(r.status, r.headers["content-type"])
      local t0, times = specula.now(), {}
      for ev in specula.sse.events(r) do
        times[#times + 1] = specula.now() - t0
        print("ev", ev.event, ev.data)
      end
      print("spread", times[4] - times[1] >= 30)
      local d = assert(http.request{ url = BASE .. "/drip?bytes=5&interval=20", stream = true })
      local chunks = {}
      for c in d:chunks() do chunks[#chunks + 1] = c end
      print("drip", #chunks >= 2, table.concat(chunks))
    ]])
    assert.matches("200\ttext/event-stream", out, 1, true)
    assert.matches("ev\tmessage\ttick 0\nev\tmessage\ttick 1\nev\tmessage\ttick 2\nev\tmessage\ttick 3", out, 1, true)
    assert.matches("spread\ttrue", out, 1, true)
    assert.matches("drip\ttrue\txxxxx", out, 1, true)
  end)

  it("reports a reset in the middle of a stream to the reader", function()
    local out = run([[
      -- The reset may land before or after the headers were read.
      local r, err = http.request{ url = BASE .. "/reset?after=100", stream = true }
      local got = 0
      while r do
        local c, e = r:read()
        if not c then err = e break end
        got = got + #c
      end
      print("read", got, err)
    ]])
    assert.matches("read\t%d+\tECONNRESET: ", out)
  end)

  it("cancelling a task mid-transfer closes the connection at once #timing", function()
    local out = run([[
      local function stats() return specula.json.decode(http.request{ url = BASE .. "/stats" }.body) end
      local t = specula.spawn(function() return http.request{ url = BASE .. "/stall" } end)
      for _ = 1, 100 do if stats().stall_open == 1 then break end specula.sleep(2) end
      print("open", stats().stall_open, specula.counts().transfers)
      local t0 = specula.now()
      t:cancel()
      print("transfers", specula.counts().transfers)
      local closed
      for _ = 1, 200 do
        if stats().stall_open == 0 then closed = specula.now() - t0 break end
        specula.sleep(1)
      end
      print("closed", closed ~= nil and closed < 1000)
    ]])
    assert.matches("open\t1\t1", out, 1, true)
    assert.matches("transfers\t0", out, 1, true)
    assert.matches("closed\ttrue", out, 1, true)
  end)

  it("runs a thousand concurrent requests and reuses connections #slow", function()
    local out = run([[
      local ts = {}
      local t0 = specula.now()
      for i = 1, 1000 do
        ts[i] = specula.spawn(function() local r, e = http.request{ url = BASE .. "/delay/50" } return r and r.body or e end)
      end
      local res, ok = specula.wait_all(ts)
      local good = 0
      for i = 1, #res do if res[i][2] == "ok" then good = good + 1 end end
      print("good", good)
      local s0 = specula.json.decode(http.request{ url = BASE .. "/stats" }.body).accepted
      for i = 1, 50 do assert(http.request{ url = BASE .. "/hello" }) end
      local s1 = specula.json.decode(http.request{ url = BASE .. "/stats" }.body).accepted
      print("new connections for 51 sequential requests", s1 - s0)
    ]])
    assert.matches("good\t1000", out, 1, true)
    local n = tonumber(out:match("sequential requests\t(%d+)"))
    assert.is_true(n <= 1, "keep-alive should reuse the connection, opened " .. tostring(n))
  end)

  -- Debian's libcurl walks a multi handle's connections and queue for every
  -- transfer; the driver spreads a load over lanes (multi handles) of 64
  -- connections per host, at most 16 lanes: the cost per request stays
  -- flat (bench userpath --wait http) and the connections stay bounded
  local LANES = [[
      local function accepted() return specula.json.decode(http.request{ url = BASE .. "/stats" }.body).accepted end
      local function burst(n, path)
        local ts = {}
        for i = 1, n do
          ts[i] = specula.spawn(function() local r, e = http.request{ url = BASE .. path } return r and r.body or e end)
        end
        local res, good = specula.wait_all(ts), 0
        for i = 1, #res do if res[i][2] == "ok" then good = good + 1 end end
        return good
      end
      local a0 = accepted()
      print("small", burst(16, "/delay/20"), specula.counts().http_lanes)
      local a1 = accepted()
      print("large", burst(N, "/delay/200"), specula.counts().http_lanes)
      local a2 = accepted()
      print("connections", a1 - a0, a2 - a1)
      local b0 = accepted()
      for i = 1, 50 do assert(http.request{ url = BASE .. "/hello" }) end
      print("sequential", accepted() - b0)
      local c = specula.settle()
      print("left", c.transfers, c.polls, c.requests)
  ]]
  local function lanes(n, want_lanes, max_conns)
    local out = run("local N = " .. n .. "\n" .. LANES)
    -- 16 at once fit one lane
    assert.matches("small\t16\t1\n", out, 1, true)
    assert.matches("large\t" .. n .. "\t" .. want_lanes .. "\n", out, 1, true)
    local small, large = out:match("connections\t(%d+)\t(%d+)")
    assert.is_true(tonumber(small) <= 17, out)
    assert.is_true(tonumber(large) <= max_conns and tonumber(large) >= 64, out)
    -- lane 0 is first with room: sequential requests reuse its connection
    assert.is_true(tonumber(out:match("sequential\t(%d+)")) <= 1, out)
    assert.matches("left\t0\t0\t0", out, 1, true)
  end

  it("spreads 300 concurrent requests over lanes of 64 connections and reuses them", function()
    lanes(300, 5, 300)
  end)

  -- past 16 lanes a transfer waits in the least busy lane's queue, for one
  -- of its connections: no more than one multi handle of 1,024 per host had
  it("keeps 2,000 concurrent requests to 16 lanes and 1,024 connections #slow", function()
    lanes(2000, 16, 1024)
  end)

  -- a configured limit is split over lanes of about 64 connections, so the
  -- lanes' limits sum to it
  local function limited(limit, n)
    local out = run(string.format([[
      specula.http.configure{ max_host_connections = %d }
      local a0 = specula.json.decode(http.request{ url = BASE .. "/stats" }.body).accepted
      local ts = {}
      for i = 1, %d do
        ts[i] = specula.spawn(function() local r, e = http.request{ url = BASE .. "/delay/20" } return r and r.body or e end)
      end
      local res, good = specula.wait_all(ts), 0
      for i = 1, #res do if res[i][2] == "ok" then good = good + 1 end end
      local a1 = specula.json.decode(http.request{ url = BASE .. "/stats" }.body).accepted
      print("limited", good, a1 - a0, specula.counts().http_lanes)
    ]], limit, n))
    local good, conns, lanes = out:match("limited\t(%d+)\t(%d+)\t(%d+)")
    assert.equals(tostring(n), good)
    return tonumber(conns), tonumber(lanes)
  end

  it("keeps a configured connection limit, split over lanes of about 64", function()
    -- the /stats connection of before is one of the three
    local conns, lanes = limited(3, 200)
    assert.is_true(conns <= 3, conns)
    assert.equals(1, lanes)
    conns, lanes = limited(200, 500)
    assert.is_true(conns <= 200 and conns >= 150, conns)
    assert.equals(4, lanes)
  end)

  it("refuses a connection limit that is not a whole number, and keeps the lanes for an empty configure", function()
    local out = run([[
      for _, o in ipairs{ { max_host_connections = "8" }, { max_total_connections = -1 },
                          { max_host_connections = 2.5 }, { max_hosts = 4 } } do
        local ok, err = pcall(http.configure, o)
        print("bad", ok, err)
      end
      http.configure{}
      local ts = {}
      for i = 1, 100 do ts[i] = specula.spawn(function() return http.request{ url = BASE .. "/delay/50" } end) end
      specula.wait_all(ts)
      print("lanes", specula.counts().http_lanes)
    ]])
    assert.matches("bad\tfalse\t[^\n]*max_host_connections must be a whole number >= 0 %(0: no limit%), got string", out)
    assert.matches("bad\tfalse\t[^\n]*max_total_connections must be a whole number >= 0 %(0: no limit%), got %-1", out)
    assert.matches("bad\tfalse\t[^\n]*got 2.5", out)
    assert.matches("bad\tfalse\t[^\n]*unknown option 'max_hosts'", out)
    assert.matches("lanes\t2", out)
  end)

  it("hands out the body of a stream that fails after its headers, whenever the failure is seen", function()
    -- /truncated sends headers, 40 of 100 bytes and its FIN at once, so the
    -- failure is usually known before the caller asks for the response;
    -- /file?cut= with split=0&pause=20 sends the same bytes 20 ms later.
    local dir = H.tmpdir() .. "/http_cut"
    os.execute("mkdir -p " .. H.quote(dir))
    local f = assert(io.open(dir .. "/body.txt", "wb"))
    f:write(("0123456789"):rep(10))
    f:close()
    local files = H.server { files = dir }
    local ok, out = pcall(run, ([[
      local FILES = %q
      local function once(url)
        local r, err = http.request{ url = url, stream = true }
        if not r then return "nil " .. tostring(err):match("^(E%%u+)") end
        local got = 0
        while true do
          local c, e = r:read()
          if not c then return r.status .. " " .. got .. " " .. tostring(e and e:match("^(E%%u+)")) end
          got = got + #c
        end
      end
      local seen = {}
      for _, url in ipairs({ BASE .. "/truncated", FILES .. "/file?path=body.txt&cut=40&pause=0",
                             FILES .. "/file?path=body.txt&cut=40&split=0&pause=20",
                             FILES .. "/file?path=body.txt&cut=0&pause=0" }) do
        local outcomes = {}
        for i = 1, 15 do outcomes[once(url)] = true end
        local list = {}
        for k in pairs(outcomes) do list[#list + 1] = k end
        table.sort(list)
        print("outcome", table.concat(list, " | "))
      end
      -- a whole (non-stream) request still fails as a whole
      local r, e = http.request{ url = BASE .. "/truncated" }
      print("whole", r, e:match("^(E%%u+)"))
    ]]):format(files.base))
    files.stop()
    assert(ok, out)
    local lines = {}
    for l in out:gmatch("outcome\t([^\n]*)") do lines[#lines + 1] = l end
    assert.same({ "200 40 ETRUNCATED", "200 40 ETRUNCATED", "200 40 ETRUNCATED", "200 0 ETRUNCATED" }, lines)
    assert.matches("whole\tnil\tETRUNCATED", out, 1, true)
  end)

  it("refuses header names and values that would break the header block, naming the header", function()
    local out = run([[
      local function try(h)
        local ok, r, e = pcall(http.request, { url = BASE .. "/echo", headers = h })
        if not ok then return "ERR " .. tostring(r):gsub("^[^:]*:%d+: ", "") end
        local j = specula.json.decode(r.body)
        return "sent " .. tostring(j.headers["x-a"]) .. " auth=" .. tostring(j.headers.authorization ~= nil)
      end
      print("ok", try({ ["X-A"] = "tab\there", Authorization = "Bearer k" }))
      print("nul", try({ ["X-A"] = "cut\0here", Authorization = "Bearer k" }))
      print("cr", try({ ["X-A"] = "a\rb" }))
      print("ctl", try({ ["X-A"] = "a\1b" }))
      print("list_crlf", try({ "X-A: 1\r\nX-Injected: 2" }))
      print("list_nocolon", try({ "just text" }))
      print("name", try({ ["X A"] = "v" }))
      print("name_nul", try({ ["X-A\0"] = "v" }))
      -- the C glue checks the block it is given as well
      local core = require "specula.internal.core"
      local ffi, C = core.ffi, core.C
      local function start(block)
        local o = ffi.new("sp_http_opts")
        o.method, o.url, o.headers = "GET", BASE .. "/echo", block
        local err, n = core.errbuf()
        local r = C.sp_http_start(core.ctx, nil, o, err, n)
        if r == nil then return ffi.string(err) end
        C.sp_http_free(r)
        return "started"
      end
      print("c_ok", start("X-A: 1\nAuthorization: Bearer k"))
      print("c_cr", start("X-A: 1\rX-Injected: 2"))
      print("c_ctl", start("X-A: a\27b"))
      print("c_noname", start(": v"))
      print("c_nocolon", start("X-A: 1\nBearer sk-not-a-header"))
    ]])
    assert.matches("ok\tsent tab\there auth=true", out, 1, true)
    assert.matches("nul\tERR specula.http.request: the value of header 'X-A' contains a NUL byte", out, 1, true)
    assert.matches("cr\tERR specula.http.request: the value of header 'X-A' contains a line break (CR or LF)", out, 1, true)
    assert.matches("ctl\tERR specula.http.request: the value of header 'X-A' contains a control character", out, 1, true)
    assert.matches("list_crlf\tERR specula.http.request: the value of header 'X-A' contains a line break (CR or LF)", out, 1, true)
    assert.matches('list_nocolon\tERR specula.http.request: headers[1] must be "Name: value"', out, 1, true)
    assert.matches("name\tERR specula.http.request: header name 'X A' is not a valid HTTP header name", out, 1, true)
    assert.matches("name_nul\tERR specula.http.request: header name 'X-A\\0' is not a valid HTTP header name", out, 1, true)
    assert.matches("c_ok\tstarted", out, 1, true)
    assert.matches("c_cr\tEINVAL: http.request: the value of header 'X-A' contains a line break (CR)", out, 1, true)
    assert.matches("c_ctl\tEINVAL: http.request: the value of header 'X-A' contains a control character", out, 1, true)
    assert.matches('c_noname\tEINVAL: http.request: header line 1 is not "Name: value" with a token name', out, 1, true)
    assert.is_nil(out:find("sk-not", 1, true))
    assert.matches('c_nocolon\tEINVAL: http.request: header line 2 is not "Name: value" with a token name', out, 1, true)
  end)

  it("sends the path as written with path_as_is, and keeps a password out of error messages", function()
    local out = run([[
      local j = specula.json.decode(http.request{ url = BASE .. "/echo/a/../b/./c", path_as_is = true }.body)
      local d = specula.json.decode(http.request{ url = BASE .. "/echo/a/../b/./c" }.body)
      print("paths", j.path, d.path)
      local r, e = http.request{ url = "http://user:p@ss-word@127.0.0.1:1/x" }
      print("userinfo", e)
    ]])
    assert.matches("paths\t/echo/a/../b/./c\t/echo/b/c", out, 1, true)
    assert.matches("userinfo\tE%u+: GET http://127%.0%.0%.1:1/x: ", out)
    assert.not_matches("ss%-word", out)
  end)

  it("carries requests through a wrapper put in front of it, and live again once it is taken away", function()
    local out = run([[
      local seen = {}
      local prev = http.set_wrapper(function(opts, method, go)
        seen[#seen + 1] = method
        if opts.url:find("/hello", 1, true) then return { status = 299, headers = {}, body = "wrapped" } end
        return go(setmetatable({ __live = true }, { __index = opts }))
      end)
      local a = assert(http.request{ url = BASE .. "/hello" })
      local b = assert(http.request{ method = "POST", url = BASE .. "/echo", body = "x" })
      local back = http.set_wrapper(prev)
      local c = assert(http.request{ url = BASE .. "/hello" })
      print(a.status, a.body, b.status, specula.json.decode(b.body).body, c.status, c.body,
        table.concat(seen, ","), tostring(prev), type(back))
      print(pcall(http.set_wrapper, 5))
    ]])
    assert.matches("299\twrapped\t200\tx\t200\thello\tGET,POST\tnil\tfunction", out, 1, true)
    assert.matches("false\t[^\n]*specula.http.set_wrapper: expected a function or nil", out)
  end)

  it("validates its options", function()
    local out = run([[
      print(pcall(http.request, "http://x"))
      print(pcall(http.request, { url = BASE, timeout_ms = -1 }))
      print(pcall(http.request, { url = BASE, headers = { ["X-Bad"] = "a\r\nInjected: 1" } }))
      print(pcall(http.request, { url = BASE, body = {} }))
    ]])
    assert.matches("expected a table of options", out, 1, true)
    assert.matches("timeout_ms must be a non%-negative number", out)
    assert.matches("contains a line break", out, 1, true)
    assert.matches("body must be a string", out, 1, true)
  end)
end)
