-- specula.sse: Server-Sent Events over a streamed response, parsed in C.
local core = require "specula.internal.core"
local ffi = core.ffi
local C = core.C

local M = {}

local Reader = {}
Reader.__index = Reader

-- A reader over a streamed response (anything with :read() -> chunk|nil,err).
function M.reader(res, opts)
  if type(res) ~= "table" or type(res.read) ~= "function" then
    error("specula.sse.reader: expected a streamed response", 2)
  end
  local max = opts and opts.max_event_bytes or 0
  local p = C.sp_sse_new(max)
  if p == nil then error("specula.sse.reader: out of memory", 2) end
  return setmetatable({ res = res, p = ffi.gc(p, C.sp_sse_free), ev = ffi.new("sp_sse_event") }, Reader)
end

-- Next event { event =, data =, id =, retry = } | nil (end of stream) | nil, err.
-- After the end, reader.truncated says whether an unterminated event was dropped.
function Reader:next()
  local p, ev = self.p, self.ev
  if p == nil then return nil, self.err end
  while true do
    if C.sp_sse_next(p, ev) == 1 then
      return { event = ffi.string(ev.event, ev.event_len), data = ffi.string(ev.data, ev.data_len),
               id = ffi.string(ev.id, ev.id_len), retry = ev.retry >= 0 and tonumber(ev.retry) or nil }
    end
    if self.eof then return nil end
    local chunk, err = self.res:read()
    if chunk then
      if C.sp_sse_feed(p, chunk, #chunk) ~= 0 then
        self.err = "EPROTO: SSE: " .. ffi.string(C.sp_sse_error(p))
        self:close()
        return nil, self.err
      end
    elseif err then
      self.err = err
      self:close()
      return nil, err
    else
      self.eof = true
      self.truncated = C.sp_sse_finish(p) == 1
    end
  end
end

function Reader:close()
  if self.res and self.res.close then self.res:close() end
  local p = self.p
  if p ~= nil then
    self.p = nil
    ffi.gc(p, nil)
    C.sp_sse_free(p)
  end
end

-- for ev in specula.sse.events(res) do ... end — raises on a transport or
-- parse error (use M.reader for errors as values).
function M.events(res, opts)
  local r = M.reader(res, opts)
  return function()
    local ev, err = r:next()
    if ev == nil and err then error(err, 2) end
    return ev
  end
end

return M
