-- specula.gateway.command: `specula gateway CONFIG.lua` (the option table
-- is specula.cmd.gateway's): one client over this process's stdio, its
-- record appended to --out when it ends.
local json = require "specula.json"
local sched = require "specula.internal.sched"
local output = require "specula.internal.output"
local gateway = require "specula.gateway"

local M = {}

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
  w:close()
  if not ok then output.stderr("specula gateway: cannot write --out ", path, ": ", tostring(werr), "\n") end
  return ok ~= nil
end

function M.main(o)
  -- stdout is the protocol's from here on: a config that prints goes to stderr
  output.divert_stdout()
  local gw = gateway.load(o.configs[1])
  -- a mistake in the predictor or the policy shows now, not at the first call
  gw:new_predictor()
  -- --record: every round trip with the servers goes on tape (the MCP
  -- clients' transports behind the cassette's wrapper), prefetches too
  if o.record then
    local ok, err = require("specula.run.cassette").open { record = o.record }
    if not ok then sched.plain_error("specula gateway: --record " .. o.record .. ": " .. tostring(err), 1) end
  end
  local t = require("specula.mcp.serve_stdio").new {}
  local wrote = true
  local s, err = gateway.serve_session(gw, t, { spans = o.record ~= nil, on_end = function(sess)
    if o.out then wrote = write_record(o.out, sess.rec.final or sess:stats()) end
    if o.record then
      local path = o.record .. "/gateway-session-" .. sess.rec.id .. ".otlp.jsonl"
      wrote = write_record(path, sess.rec:otlp()) and wrote
    end
  end })
  if not s then sched.plain_error("specula gateway: " .. tostring(err), 1) end
  s:wait()
  if o.record then
    local st = require("specula.cassette").close()
    if st and st.failed then
      sched.plain_error("specula gateway: --record: cannot write " .. st.failed.what .. ": " .. st.failed.err, 1)
    end
  end
  return wrote and 0 or 1
end

return M
