-- specula.mcp.serve_stdio: the server side of the stdio transport
-- (specula.mcp.transport describes the interface): this process's own stdin
-- carries the client's messages, one JSON-RPC message per line, and its
-- stdout our answers (engine/sp_stdio.c). Nothing else may write to stdout
-- from then on: open() diverts every other text to stderr
-- (specula.internal.output.divert_stdout).
--
-- peer:receive(msg, "stdin", line) gets each message with its text; the end
-- of stdin is peer:lost(why), and so is the end of stdout (the client no
-- longer reads: a write fails with EPIPE). t:send(msg) writes one line; t:send_text(s)
-- writes a line already encoded (a relayed answer, byte for byte). There is
-- one stdin per process: one such transport, opened once.
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"
local json = require "specula.json"
local output = require "specula.internal.output"
local transport = require "specula.mcp.transport"
local ffi, C = core.ffi, core.C

local format, tostring, tonumber = string.format, tostring, tonumber
local co_yield = sched.yield
local excerpt, spawn_root = transport.excerpt, transport.spawn_root

local M = {}

local lenp = ffi.new("size_t[1]")
local prefixp = ffi.new("const char *[1]")

local Serve = { kind = "stdio", server_side = true, restartable = false, answers_inline = false,
                send_waits = false, roundtrip = transport.roundtrip }
Serve.__index = Serve

-- o: { max_message_bytes } (default 16 MiB).
function M.new(o)
  o = o or {}
  if type(o) ~= "table" then error("specula.mcp.serve_stdio.new: options must be a table", 2) end
  local max = o.max_message_bytes or 16 * 1024 * 1024
  if type(max) ~= "number" or max < 1 then error("specula.mcp.serve_stdio.new: max_message_bytes must be >= 1", 2) end
  return setmetatable({ max_message_bytes = max, starts = 0, where = "the client (stdio)" }, Serve)
end

function Serve:_read_loop(s, peer)
  local me = sched.current("stdio server reader")
  local st = peer.st or {}
  while true do
    -- stdout broke (a write failed after it was queued): no answer can
    -- reach the client, the session is over as at the end of stdin
    local oe = C.sp_stdio_out_error(s)
    if oe[0] ~= 0 then
      if not self.out_lost then
        self.out_lost = true
        self.lost = true
        peer:lost("stdout closed (" .. ffi.string(oe) .. ")")
      end
      return
    end
    local p = C.sp_stdio_line(s, lenp)
    if p ~= nil then
      local n = tonumber(lenp[0])
      local line = ffi.string(p, n)
      C.sp_stdio_consume(s, n)
      if line:find("%S") then
        local msg, derr = json.decode(line)
        if msg == nil then
          st.malformed = (st.malformed or 0) + 1
          peer:malformed(format("%s: malformed JSON on stdin (%s): %s", self.where, tostring(derr), excerpt(line)))
        else
          peer:receive(msg, "stdin", line)
        end
      end
    else
      local nover = C.sp_stdio_oversized(s, prefixp, lenp)
      if nover > 0 then
        st.oversized = (st.oversized or 0) + nover
        local pre = ffi.string(prefixp[0], lenp[0])
        local why = format("message larger than max_message_bytes (%d) dropped", self.max_message_bytes)
        peer:warn(self.where .. ": " .. why)
        -- answer the request it carried, if its id is in the first bytes
        local id = tonumber(pre:match('"id"%s*:%s*(%-?%d+)')) or pre:match('"id"%s*:%s*"([^"\\]*)"')
        if id ~= nil and peer.fail then peer:fail(id, "request " .. why) end
      elseif C.sp_stdio_eof(s) == 1 then
        break
      elseif C.sp_stdio_wait(s, me) == 0 then
        co_yield()
      end
    end
  end
  local e = ffi.string(C.sp_stdio_error(s))
  self.lost = true
  peer:lost(e ~= "" and ("stdin: " .. e) or "stdin closed")
end

function Serve:open(peer)
  if self.s then return nil, "EBUSY: the stdio server transport is already open" end
  local err, errlen = core.errbuf()
  local s = C.sp_stdio_open(core.ctx, self.max_message_bytes, err, errlen)
  if s == nil then return nil, ffi.string(err) end
  output.divert_stdout()
  self.s = s
  self.starts = 1
  self.peer = peer
  self.reader = spawn_root(function() self:_read_loop(s, peer) end)
  if not self.reader then return nil, "ECANCELED: the engine is shutting down" end
  return true
end

-- One line, already JSON (no newline inside: JSON text escapes them).
function Serve:send_text(text)
  if self.s == nil then return nil, "EPIPE: the stdio server transport is not open" end
  if text:find("\n", 1, true) then return nil, "EINVAL: a message must be one line" end
  local err, errlen = core.errbuf()
  if C.sp_stdio_write(self.s, text .. "\n", #text + 1, err, errlen) ~= 0 then
    local e = ffi.string(err)
    -- the client closed its end of our stdout: no answer can reach it, the
    -- session is over as at the end of stdin (before, it went on running
    -- the client's calls, their answers lost without a word)
    if e:find("^EPIPE") and self.peer and not self.out_lost then
      self.out_lost = true
      local peer = self.peer
      spawn_root(function() peer:lost("stdout closed (" .. e .. ")") end)
    end
    return nil, e
  end
  return true
end

function Serve:send(msg)
  local text, eerr = json.encode(msg)
  if not text then return nil, eerr end
  return self:send_text(text)
end

-- A request of ours to the client (sampling, elicitation, roots): written;
-- the answer comes through peer:receive like every message.
function Serve:request(x)
  local ok, err = self:send_text(x.text)
  if not ok then return nil, self.where .. ": " .. tostring(x.what) .. ": " .. err end
  return true
end

function Serve:set_version() end
function Serve:ready() end

-- Bytes written but not yet taken by the client.
function Serve:unwritten() return self.s and tonumber(C.sp_stdio_unwritten(self.s)) or 0 end

-- Stop reading (what is queued on stdout is still written, at exit too).
function Serve:close()
  if self.reader and not self.reader:done() and not self.lost then C.sp_task_cancel(self.reader.ptr) end
  if self.s ~= nil then C.sp_stdio_stop(self.s) end
end
Serve.abort = Serve.close

return M
