-- specula.cassette.http: the cassette's wrapper of specula.http's
-- transfers (specula.http.set_wrapper): it records each request and its
-- answer, a stream chunk by chunk with its timing, or serves them from the
-- tape at their recorded times.
local json = require "specula.json"
local sched = require "specula.internal.sched"
local stream = require "specula.internal.stream"
local tape = require "specula.cassette.tape"
local session = require "specula.cassette.session"
local match = require "specula.cassette.match"
local miss = require "specula.cassette.miss"
local clock = require "specula.cassette.clock"
local writer = require "specula.cassette.writer"

local pairs, setmetatable = pairs, setmetatable

local M = {}

local current_job, meta_now, scopes = session.current_job, session.meta_now, session.scopes
local scrub, take, count_served, canon_body = match.scrub, match.take, match.count_served, match.canon_body
local on_miss, sleep_until, depart = miss.on_miss, clock.sleep_until, clock.depart
local write, write_start = writer.write, writer.write_start
local bytes_in, bytes_out = tape.bytes_in, tape.bytes_out

local Replayed = {}
Replayed.__index = function(t, k)
  local v = Replayed[k]
  if v ~= nil then return v end
  return stream[k]   -- chunks(), read_all() work on read()
end

-- Next chunk at its recorded offset from the request's start.
function Replayed:read()
  local evs = self._ev
  local i = self._i + 1
  local e = evs and evs[i]
  if e == nil then
    if self._done then return nil, self.err end
    self._done = true
    if self._rec.end_ms then sleep_until(self._t0 + self._rec.end_ms) end
    if self._rec.err then self.err = self._rec.err return nil, self.err end
    return nil
  end
  self._i = i
  sleep_until(self._t0 + e[1])
  return bytes_in(e[2])
end

function Replayed:close() self._done = true; self._ev = nil end

local function serve_http(st, rec, t0)
  if rec.stream then
    if rec.res == nil then
      sleep_until(t0 + (rec.ms or 0))
      return nil, rec.err
    end
    sleep_until(t0 + (rec.res.ms or 0))
    return setmetatable({ status = rec.res.status, headers = rec.res.headers or {}, _ev = rec.events or {},
                          _i = 0, _t0 = t0, _rec = rec }, Replayed)
  end
  sleep_until(t0 + (rec.ms or 0))
  if rec.err then return nil, rec.err end
  local r = rec.res
  return { status = r.status, headers = r.headers or {}, body = bytes_in(r.body) or "" }
end

local KEEP_HEADER_SKIP = { ["set-cookie"] = true, authorization = true, cookie = true }
local function kept_headers(h)
  local out = {}
  for k, v in pairs(h or {}) do
    if not KEEP_HEADER_SKIP[k] and not k:find("token", 1, true) and not k:find("key", 1, true) then out[k] = v end
  end
  return json.object(out)
end

-- A streamed response that records its chunks as the caller reads them;
-- the exchange is written when the stream ends, fails or is closed.
local Recording = {}
Recording.__index = function(t, k)
  local v = Recording[k]
  if v ~= nil then return v end
  return stream[k]
end

function Recording:read()
  local s, err = self._inner:read()
  if s then
    local ev = self._rec.events
    ev[#ev + 1] = { sched.now() - self._t0, s }
    return s
  end
  self:_finish(err)
  return nil, err
end

function Recording:_finish(err)
  if self._written then return end
  self._written = true
  local rec = self._rec
  rec.end_ms = sched.now() - self._t0
  rec.ms = rec.end_ms
  if err then rec.err = err end
  -- the chunks are scrubbed as one text (a secret cut across two chunks
  -- goes whole), then cut again where they arrived
  local ev = rec.events
  local texts = {}
  for i = 1, #ev do texts[i] = ev[i][2] end
  local st = session.state
  if not st or not st.file then return end
  local clean, idx = st.file:pieces(texts)
  local out = json.array({})
  for i = 1, #clean do
    out[i] = { ev[idx and idx[i] or i][1], bytes_out(clean[i]) }
  end
  rec.events = out
  write(rec)
end

function Recording:close()
  if not self._written then self._rec.closed = true self:_finish(nil) end
  self._inner:close()
end

-- specula.http.request through the cassette: the wrapper specula.http
-- calls while a cassette is open (plugged in when it opens). live: the request
-- function, which with __live set makes the transfer.
function M.http(opts, method, live)
  local st = session.state
  local url = match.clean_url(opts.url)
  local body = canon_body(opts.body)
  local key = method:upper() .. " " .. url .. "\n" .. body
  local J = current_job()
  local meta = meta_now(J)
  local scope, qscope = scopes(meta, st.bypath)
  local rec, n, held, again = take(st, scope, qscope, key)
  if st.replay then
    if rec and rec.kind == "http" and not rec.start then
      count_served(st, again)
      return serve_http(st, rec, depart(J, rec))
    end
    local what = method:upper() .. " " .. scrub(url)
    local go, err = on_miss(st, "http", what, n, held, meta, rec ~= nil, key)
    if not go then return nil, err end
  end
  local lopts = setmetatable({}, { __index = opts })
  lopts.__live = true
  write_start("http", key, n, meta)
  local t0 = sched.now()
  if J and not J.first then J.first = t0 - J.born end
  local r, err = live(lopts)
  if not st.file then return r, err end
  rec = { kind = "http", key = key, n = n, at = t0 - st.t0, off = J and t0 - J.born, meta = meta,
          req = { method = method:upper(), url = url, body = body } }
  if opts.stream then
    rec.stream = true
    if r == nil then
      rec.ms, rec.err = sched.now() - t0, err
      write(rec)
      return r, err
    end
    rec.res = { status = r.status, headers = kept_headers(r.headers), ms = sched.now() - t0 }
    rec.events = json.array({})
    return setmetatable({ status = r.status, headers = r.headers, _inner = r, _rec = rec, _t0 = t0 }, Recording), nil
  end
  rec.ms = sched.now() - t0
  if r == nil then rec.err = err
  else rec.res = { status = r.status, headers = kept_headers(r.headers), body = bytes_out(r.body) } end
  write(rec)
  return r, err
end

return M
