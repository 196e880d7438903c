-- Helpers of the MCP specs: the Node test server (spec/support/mcp_testserver.js)
-- in its HTTP flavour, and a scan of output files for credentials in every
-- encoding a writer could produce.
local H = require "support.helpers"

local M = {}
M.SERVER = H.root .. "/spec/support/mcp_testserver.js"

-- Start the HTTP test server with extra arguments; returns { url, base,
-- port, stop }. stop() ends it.
function M.http_server(args)
  local parts = {}
  for _, a in ipairs(args or {}) do parts[#parts + 1] = H.quote(a) end
  local p = assert(io.popen("node " .. H.quote(M.SERVER) .. " --http " .. table.concat(parts, " ")
    .. " 2>/dev/null & echo BGPID $!", "r"))
  local pid = tonumber(p:read("*l"):match("BGPID (%d+)"))
  local line = p:read("*l")
  local port = tonumber(line and line:match("PORT (%d+)"))
  assert(port, "the MCP test server did not start")
  local base = "http://127.0.0.1:" .. port
  return { url = base .. "/mcp", base = base, port = port, pid = pid,
           stop = function() os.execute("kill " .. pid .. " 2>/dev/null"); p:close() end }
end

-- The credentials of a --token-log file: a list of distinct values.
function M.logged_secrets(path)
  local out, seen = {}, {}
  for line in (H.read(path) or ""):gmatch("[^\n]+") do
    local v = line:match('"value":"([^"]*)"')
    if v and #v >= 8 and not seen[v] then
      seen[v] = true
      out[#out + 1] = v
    end
  end
  return out
end

-- Base64 of s, by coreutils' base64.
local function b64(s)
  local path = H.tmpfile(nil, s)
  local p = assert(io.popen("base64 -w0 " .. H.quote(path)))
  local out = p:read("*a")
  p:close()
  os.remove(path)
  return out
end
M.b64 = b64

-- Every form of v a writer could produce: raw, percent-encoded, JSON
-- \u-escaped, hex, and Base64/Base64url at each of the three alignments
-- (a secret inside a longer encoded string).
function M.forms(v)
  local f = { raw = v }
  f.percent = v:gsub("[^%w%-%._~]", function(c) return string.format("%%%02X", c:byte()) end)
  f.json_u = v:gsub(".", function(c) return string.format("\\u%04x", c:byte()) end)
  f.hex = v:gsub(".", function(c) return string.format("%02x", c:byte()) end)
  for k = 0, 2 do
    local enc = b64(("\0"):rep(k) .. v):gsub("=+$", "")
    -- drop the characters that mix in the neighbours' bits
    local inner = enc:sub(k == 0 and 1 or k + 2, -3)
    f["b64_" .. k] = inner
    f["b64url_" .. k] = inner:gsub("%+", "-"):gsub("/", "_")
  end
  return f
end

-- Where any secret shows up in text: a list of "form of secret#i".
function M.find_secrets(text, list)
  local hits = {}
  for i, v in ipairs(list) do
    for name, form in pairs(M.forms(v)) do
      if #form >= 8 and text:find(form, 1, true) then hits[#hits + 1] = name .. " of secret #" .. i end
    end
  end
  return hits
end

return M
