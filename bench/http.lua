-- bench/http.lua — HTTP through the engine against the loopback test server:
-- keep-alive requests per second, 1,000 concurrent requests delayed 50 ms,
-- CPU per request, cancel-to-close latency; and the same over HTTP/2 (h2c,
-- prior knowledge) when Debian's nghttpd is installed.
--   specula bench http [--seconds S]
local specula = require "specula"
local json, http = specula.json, specula.http
local B = dofile(require("specula.internal.core").host.root .. "/bench/lib.lua")

local SECONDS = 2
for i = 1, #arg do
  if arg[i] == "--seconds" then
    -- (checked before the test server starts: a bad option left it running)
    SECONDS = tonumber(arg[i + 1])
    if not SECONDS or SECONDS ~= SECONDS or SECONDS <= 0 then
      error("bench http: --seconds takes a positive number, got " .. tostring(arg[i + 1]), 0)
    end
  end
end

local base, stop = B.server()
-- the test server stops however the measurements end
local ok_all, err_all = pcall(function()
http.configure{ max_host_connections = 2048, max_total_connections = 4096 }

local function rps(url, workers, seconds, opts)
  local n, t0 = 0, specula.now()
  local cpu0 = B.cpu_seconds()
  local ts = {}
  for w = 1, workers do
    ts[w] = specula.spawn(function()
      while specula.now() - t0 < seconds * 1000 do
        local r, err = http.request{ url = url, http2 = opts and opts.http2, cainfo = opts and opts.cainfo }
        if not r then error(err) end
        n = n + 1
      end
    end)
  end
  local res, ok = specula.wait_all(ts)
  if not ok then for _, r in ipairs(res) do if not r[1] then error(r[2]) end end end
  local dt = (specula.now() - t0) / 1000
  return n / dt, (B.cpu_seconds() - cpu0) / n * 1e6
end

local function concurrent(url, n, opts)
  local t0 = specula.now()
  local ts = {}
  for i = 1, n do
    ts[i] = specula.spawn(function()
      local r, err = http.request{ url = url, http2 = opts and opts.http2, cainfo = opts and opts.cainfo }
      if not r then error(err) end
    end)
  end
  local _, ok = specula.wait_all(ts)
  assert(ok, "some requests failed")
  return specula.now() - t0
end

local function stats() return json.decode(http.request{ url = base .. "/stats" }.body) end

local function cancel_to_close(iterations)
  local lat = {}
  for i = 1, iterations do
    local t = specula.spawn(function() return http.request{ url = base .. "/stall" } end)
    while stats().stall_open < 1 do specula.sleep(1) end
    local t0 = specula.now()
    t:cancel()
    while stats().stall_open > 0 do end
    lat[i] = specula.now() - t0
  end
  table.sort(lat)
  return lat[math.ceil(#lat / 2)], lat[math.ceil(#lat * 0.95)]
end

print("machine: " .. B.machine())
print(string.format("%-52s %s", "measure", "value"))
rps(base .. "/hello", 8, 0.3)  -- warm the connection pool
local r1, cpu1 = rps(base .. "/hello", 1, SECONDS)
print(string.format("%-52s %10.0f req/s", "keep-alive, 1 connection, sequential", r1))
local r64, cpu64 = rps(base .. "/hello", 64, SECONDS)
print(string.format("%-52s %10.0f req/s", "keep-alive, 64 concurrent workers", r64))
print(string.format("%-52s %10.1f us", "CPU per request (64 workers; client side)", cpu64))
local wall = concurrent(base .. "/delay/50", 1000)
print(string.format("%-52s %10.1f ms  (%.2fx the 50 ms delay)", "1,000 concurrent requests, 50 ms delay each", wall, wall / 50))
local p50, p95 = cancel_to_close(50)
print(string.format("%-52s %10.3f ms  (p95 %.3f ms)", "cancel() to the server seeing the close (p50)", p50, p95))

-- HTTP/2 over TLS (ALPN h2, multiplexed) against Debian's nghttpd, when
-- installed. (h2c with prior knowledge is not used: Debian's libcurl 7.88.1
-- fails multiplexed h2c streams with CURLE_HTTP2 — `curl -Z
-- --http2-prior-knowledge` against nghttpd shows the same.)
local ngh = io.popen("command -v nghttpd 2>/dev/null"):read("*l")
local ossl = io.popen("command -v openssl 2>/dev/null"):read("*l")
if ngh and ngh ~= "" and ossl and ossl ~= "" then
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p " .. dir .. " && printf hello > " .. dir .. "/hello && " .. ossl ..
    " req -x509 -newkey rsa:2048 -nodes -keyout " .. dir .. "/key.pem -out " .. dir ..
    "/cert.pem -days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1")
  local port = 20000 + math.floor(specula.now() % 10000)
  local p = io.popen(string.format("%s -d %s %d %s/key.pem %s/cert.pem >/dev/null 2>&1 & echo $!",
    ngh, dir, port, dir, dir))
  local pid = p:read("*l")
  p:close()
  specula.sleep(300)
  local url = string.format("https://127.0.0.1:%d/hello", port)
  local opts = { http2 = true, cainfo = dir .. "/cert.pem" }
  local ok, err = pcall(function()
    local r = assert(http.request{ url = url, http2 = true, cainfo = opts.cainfo })
    local h1 = rps(url, 64, SECONDS, opts)
    print(string.format("%-52s %10.0f req/s", "HTTP/2 over TLS (nghttpd), 64 concurrent workers", h1))
    local w2 = concurrent(url, 1000, opts)
    print(string.format("%-52s %10.1f ms", "HTTP/2: 1,000 concurrent requests, multiplexed", w2))
  end)
  if not ok then print("HTTP/2: failed: " .. tostring(err)) end
  os.execute("kill " .. pid .. " 2>/dev/null; rm -rf " .. dir)
else
  print("HTTP/2: skipped — needs nghttpd (Debian: nghttp2-server) and openssl for a test certificate")
end
end)
stop()
if not ok_all then error(err_all, 0) end
