-- specula.gateway.command: `specula gateway CONFIG.lua` (the option table
-- is specula.cmd.gateway's): one client over this process's stdio, or with
-- --listen each client of a Streamable HTTP endpoint; each session's
-- record appended to --out when it ends.
local json = require "specula.json"
local sched = require "specula.internal.sched"
local output = require "specula.internal.output"
local gateway = require "specula.gateway"

local M = {}

-- SIGINT/SIGTERM: the first is ours, and the way a listener ends (exit 0)
local function C_trap(core)
  if core.ctx == nil then return end
  core.C.sp_host_trap_signals(core.ctx)
  core.C.sp_host_signal_is_end(core.ctx)
end
local function C_signal(core) return core.ctx ~= nil and core.C.sp_host_signal(core.ctx) or 0 end

-- The record of an ended session, one line of --out.
local function write_record(path, rec)
  local w, err = output.open(path, "a", "json")
  if not w then
    output.stderr("specula gateway: cannot write --out ", path, ": ", tostring(err), "\n")
    return false
  end
  local text, eerr = json.encode(rec)
  if not text then
    output.stderr("specula gateway: cannot encode the session record: ", tostring(eerr), "\n")
    w:close()
    return false
  end
  local ok, werr = w:line(text)
  -- the line is on disk only once the file is closed (a full disk says so then)
  local cok, cerr = w:close()
  if ok and not cok then ok, werr = nil, cerr end
  if not ok then output.stderr("specula gateway: cannot write --out ", path, ": ", tostring(werr), "\n") end
  return ok ~= nil
end

-- --listen HOST:PORT ("[::1]:PORT" for IPv6): host, port | nil, nil, why.
-- A host other than loopback only with --allow-remote.
function M.parse_listen(v, allow_remote)
  local host, port = v:match("^%[([^%]]+)%]:(%d+)$")
  if not host then host, port = v:match("^([^:]+):(%d+)$") end
  port = tonumber(port)
  if not host or not port or port > 65535 then
    return nil, nil, "--listen: expected HOST:PORT (e.g. 127.0.0.1:8080, [::1]:0), got '" .. v .. "'"
  end
  if not allow_remote and not require("specula.mcp.serve_http").is_loopback(host) then
    return nil, nil, "--listen " .. v .. ": " .. host .. " is not a loopback address; other hosts could reach "
      .. "your servers without authentication: add --allow-remote to mean it"
  end
  return host, port
end

-- The gateway session of a stateless (2026-07-28) POST: the client's
-- name and version from the first message's _meta clientInfo (nil when it
-- names none: serve_http gives such requests one session of their own, and
-- such notifications to every session).
function M.stateless_key(list)
  for _, m in ipairs(list) do
    local p = type(m) == "table" and m.params
    local meta = type(p) == "table" and p._meta
    local info = type(meta) == "table" and meta["io.modelcontextprotocol/clientInfo"]
    if type(info) == "table" then
      return tostring(info.name) .. "\0" .. tostring(info.version)
    end
  end
  return nil
end

-- An HTTP session with no stream open and no request for this long ends
-- (a client that went away without DELETE).
M.IDLE_MS = 30 * 60 * 1000

-- --listen: Streamable HTTP, a gateway session per client, until SIGINT
-- or SIGTERM; then the listener closes, every session ends (its calls
-- cancelled, its servers stopped, its record written) and this returns.
local function listen(o, gw, on_end)
  local core = require "specula.internal.core"
  local host, port = M.parse_listen(o.listen, o.allow_remote)
  local live = {}
  local L, err = require("specula.mcp.serve_http").listen {
    host = host, port = port, allow_remote = o.allow_remote, session_timeout_ms = M.IDLE_MS,
    -- 2026-07-28: stateless POSTs of one client (its clientInfo, the only
    -- name the revision gives it) share one gateway session
    stateless = true, stateless_key = M.stateless_key,
    warn = function(msg) output.stderr("specula gateway: warning: ", msg, "\n") end,
    on_session = function(t)
      local s, serr = gateway.serve_session(gw, t, { spans = o.record ~= nil, on_end = function(sess)
        live[sess] = nil
        on_end(sess)
      end })
      if not s then error(serr, 0) end
      live[s] = true
    end,
  }
  if not L then sched.plain_error("specula gateway: --listen " .. o.listen .. ": " .. tostring(err), 1) end
  -- the first signal is ours (a second one ends the process at once)
  C_trap(core)
  output.stderr("specula gateway: listening on ", L:url(), "\n")
  -- the signal watch wakes no task: look every 100 ms
  while C_signal(core) == 0 do sched.sleep(100) end
  output.stderr("specula gateway: signal ", tostring(C_signal(core)), ": closing\n")
  L:close()
  for s in pairs(live) do s:wait() end
end

function M.main(o)
  -- stdout is the protocol's from here on: a config that prints goes to stderr
  output.divert_stdout()
  local gw = gateway.load(o.configs[1])
  -- a mistake in the predictor or the policy shows now, not at the first call
  gw:new_predictor()
  -- and an --out that cannot be written, not when the first session ends
  -- (its record lost after the whole session)
  if o.out then
    local w, err = output.open(o.out, "a", "json")
    local ok, cerr = w and w:close()
    if not ok then
      sched.plain_error("specula gateway: cannot write --out " .. o.out .. ": " .. tostring(err or cerr), 1)
    end
  end
  -- --record: every round trip with the servers goes on tape (the MCP
  -- clients' transports behind the cassette's wrapper), prefetches too
  if o.record then
    local ok, err = require("specula.run.cassette").open { record = o.record }
    if not ok then sched.plain_error("specula gateway: --record " .. o.record .. ": " .. tostring(err), 1) end
  end
  local wrote = true
  local function on_end(sess)
    local ok = true
    if o.out then ok = write_record(o.out, sess.rec.final or sess:stats()) end
    if o.record then
      local path = o.record .. "/gateway-session-" .. sess.rec.id .. ".otlp.jsonl"
      ok = write_record(path, sess.rec:otlp()) and ok
    end
    wrote = wrote and ok
  end
  if o.listen then
    listen(o, gw, on_end)
  else
    local core = require "specula.internal.core"
    local t = require("specula.mcp.serve_stdio").new {}
    local s, err = gateway.serve_session(gw, t, { spans = o.record ~= nil, on_end = on_end })
    if not s then sched.plain_error("specula gateway: " .. tostring(err), 1) end
    -- SIGINT or SIGTERM ends the session as the end of stdin does (a client
    -- may send SIGTERM as it closes stdin): its calls are cancelled, its
    -- servers stopped and its record written; a second signal ends the
    -- process at once. The signal watch wakes no task: look every 100 ms.
    C_trap(core)
    local done = false
    require("specula.mcp.transport").spawn_root(function()
      while not done and C_signal(core) == 0 do sched.sleep(100) end
      if not done then s:_end("signal " .. tostring(C_signal(core))) end
    end)
    s:wait()
    done = true
  end
  if o.record then
    local st = require("specula.cassette").close()
    if st and st.failed then
      sched.plain_error("specula gateway: --record: cannot write " .. st.failed.what .. ": " .. st.failed.err, 1)
    end
  end
  return wrote and 0 or 1
end

return M
