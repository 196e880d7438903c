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

  it("cancelling a task mid-transfer closes the connection at once", function()
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
