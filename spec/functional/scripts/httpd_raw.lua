-- The engine's HTTP/1.1 server (sp_httpd, through serve_http.http_listen)
-- against raw sockets: spec/support/rawhttp.py sends well-formed, malformed,
-- oversized, chunked, pipelined and abandoned requests; every answer here
-- echoes what the server parsed. Prints one JSON line: the client's
-- findings and the server's own (requests seen gone, connections left).
--   specula run httpd_raw.lua
local specula = require "specula"
local json = specula.json
package.path = os.getenv("SPECULA_SOURCE_DIR") .. "/spec/support/?.lua;" .. package.path
local child = require "child"
local serve = require "specula.mcp.serve_http"

local seen = { gone = 0, dropped = 0, streams = 0 }
local srv
srv = assert(serve.http_listen {
  port = 0, max_body_bytes = 1024 * 1024, max_header_bytes = 8192, max_pending_bytes = 256 * 1024,
  idle_timeout_ms = 1500,
  handler = function(r)
    if r.path == "/stream" then
      seen.streams = seen.streams + 1
      assert(r:stream(200, { ["Content-Type"] = "text/plain" }))
      for i = 1, 3 do
        assert(r:write("part" .. i .. ";"))
        specula.sleep(10)
      end
      assert(r:write(""))   -- an empty write sends nothing (no early end)
      r:finish()
      assert(r:write("x") == nil)   -- after the end: refused
    elseif r.path == "/flood" then
      -- a client that reads nothing: dropped once 256 KiB wait for it
      assert(r:stream(200, { ["Content-Type"] = "text/plain" }))
      local chunk = ("x"):rep(65536)
      seen.flood_bytes = 0
      while not r:gone() and seen.flood_bytes < 256 * 1024 * 1024 do
        r:write(chunk)
        seen.flood_bytes = seen.flood_bytes + #chunk
        specula.sleep(1)
      end
      seen.flood_gone = r:gone()
    elseif r.path == "/hold" then
      -- the client goes away before any answer: the task learns it
      while not r:gone() do r:wait() end
      seen.gone = seen.gone + 1
    elseif r.path == "/seen" then
      r:respond(200, { ["Content-Type"] = "application/json" }, json.encode(seen))
    elseif r.path == "/raise" then
      error("the handler broke")
    elseif r.path == "/drop" then
      seen.dropped = seen.dropped + 1   -- returns without answering: 500
    elseif r.path == "/twice" then
      assert(r:respond(200, {}, "once"))
      local ok, err = r:respond(200, {}, "twice")
      assert(ok == nil and err:find("already sent"), tostring(err))
    elseif r.path == "/badheader" then
      local ok, err = r:respond(200, { ["Bad Name"] = "x" })
      r:respond(200, { ["Content-Type"] = "text/plain" }, tostring(ok) .. " " .. tostring(err))
    else
      r:respond(200, { ["Content-Type"] = "application/json", ["X-Conn"] = r.conn },
        json.encode({ method = r.method, target = r.target, path = r.path, query = r.query, headers = r.headers,
                      body = r.body, conn = r.conn }))
    end
  end,
})
local port = srv.port()
local out, status, err = child.run({ "python3", os.getenv("SPECULA_SOURCE_DIR") .. "/spec/support/rawhttp.py",
  tostring(port), os.getenv("RAW_CASES") or "all" })
-- every connection the client closed is closed here too
local t0 = specula.now()
while srv.conns() > 0 and specula.now() - t0 < 5000 do specula.sleep(10) end
local conns = srv.conns()
srv.close()
local res = json.decode(out:match("[^\n]*$") or "") or { raw = out }
print(json.encode({ client = res, status = status, stderr = err, port = port, conns_left = conns, seen = seen }))
