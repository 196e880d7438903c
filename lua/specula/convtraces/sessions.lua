-- specula.convtraces.sessions: an agent's own timed session logs (Claude
-- Code transcripts, Codex CLI rollouts, OpenTelemetry GenAI spans,
-- OpenHands event streams) as timed conversations, for `specula whatif`. A
-- file's format is told by its content (the first line a reader
-- recognises), and it is read line by line; a file is one session but for
-- OTel exports (one a conversation or trace) and the conversations format
-- (one a line, its times assumed: convtraces/conversations.lua).
--
-- Each reader (convtraces/<format>.lua) turns a line into events:
--   prompt {t, text}             the person's message: the agent's time starts
--   text {t, text}               the model's text
--   call {t, id, tool, args}     a tool call the model decided
--   result {t, id, content}      its result
--   exec {id, exec_ms}           how long the call itself ran (Codex)
--   approval {t, ms}             a person's approval of the latest call still
--                                waiting took ms (OpenHands confirmation mode)
--   end {t, active_ms}           a prompt's turn ended (Claude Code: the
--                                time it counts as active)
-- and this module makes times of them:
--   model turn   from what the model waited for (the prompt, or the last
--                result of the calls before) to the first call it decided
--                (or its text, for a turn without calls)
--   tool call    from the call to its result; calls of one turn run in
--                parallel: the turn's tool phase lasts until its last result
--   user time    from the agent's last event of a prompt to the next prompt:
--                not the agent's
--   approval     a person's wait inside a call's recorded time, not the
--                agent's: approval events (OpenHands) where the log has them;
--                Claude Code's turn_duration (active time) against
--                the turn's wall time says how much (given to the longest
--                calls first); Codex's exec_command_end duration against the
--                call's recorded time (beyond APPROVAL_GAP_MS); without
--                either, a call's time beyond `approval_cap_ms` (default
--                CAP_MS)
-- A call without a result is "untimed": it is assumed to take no time.
--
-- A session: { id, format, path, msgs (OpenAI chat messages; each assistant
-- message carries specula_times = { model_ms, tool_ms, call_ms, offset_ms },
-- its calls in the order of their results: per call, tool_ms what it adds
-- to the turn's tool phase when the calls run back to back (their sum is
-- the phase), call_ms its own time (call to result, the person's wait
-- out) and offset_ms how long after the turn's first call it was decided
-- (the phase is the longest offset + own time: a parallel replay),
-- calls = { {tool, args, recorded_ms,
-- wait_ms, tool_ms, untimed} }, recorded_ms (the agent's time as the log
-- counts it), model_ms, tool_ms (tool phases), user_ms, approval_ms,
-- prompts, turns, untimed, n_calls }. With keep_text = false (digests) msgs
-- is the same conversation as specula.convtraces.turns' columns and the
-- calls are columns too (call_cols = { tool, args (canonical JSON),
-- recorded_ms (false: untimed), wait_ms, tool_ms }, calls nil): a call
-- costs a few numbers and strings (M.each_call reads either form).
local json = require "specula.json"
local content_text = require("specula.convtraces.common").content_text
local lines_of = require("specula.convtraces.common").lines   -- NUL-safe, a read error returned
local compressed_hint = require("specula.internal.lines").compressed_hint

local type, ipairs, pairs, tostring, format, floor = type, ipairs, pairs, tostring, string.format, math.floor
local turnslib

local M = {}

M.CAP_MS = 600000
M.APPROVAL_GAP_MS = 2000

M.READERS = { require "specula.convtraces.claude_code", require "specula.convtraces.codex",
               require "specula.convtraces.otel", require "specula.convtraces.openhands",
               require "specula.convtraces.conversations" }

-- Milliseconds since the epoch of an ISO 8601 time (UTC, Z or +hh:mm).
local function days_from_civil(y, m, d)
  y = m <= 2 and y - 1 or y
  local era = floor(y / 400)
  local yoe = y - era * 400
  local doy = floor((153 * (m + (m > 2 and -3 or 9)) + 2) / 5) + d - 1
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end
function M.iso_ms(s)
  local y, mo, d, h, mi, sec, rest = s:match("^(%d%d%d%d)%-(%d%d)%-(%d%d)[T ](%d%d):(%d%d):(%d%d%.?%d*)(.*)$")
  if not y then return nil end
  local ms = ((days_from_civil(tonumber(y), tonumber(mo), tonumber(d)) * 24 + tonumber(h)) * 60 + tonumber(mi)) * 60000
    + tonumber(sec) * 1000
  local sign, oh, om = rest:match("^([+-])(%d%d):?(%d%d)$")
  if sign then
    local off = (tonumber(oh) * 60 + tonumber(om)) * 60000
    ms = sign == "+" and ms - off or ms + off
  elseif rest ~= "Z" and rest ~= "" then
    return nil
  end
  return ms
end

-- Each text kept (a result, a prompt, the model's text) is cut to this many
-- bytes: what a predictor reads of it; memory grows with the calls of a log,
-- not with the bytes of their results. With opts.keep_text = false a text
-- is kept as its digest (DIGEST_HEX hex digits of its SHA-256): what a
-- replay compares (a speculator's guess against the recorded result) without
-- what a predictor reads; a call then keeps its times, tool, arguments and
-- digests only.
M.MAX_TEXT = 4096
M.DIGEST_HEX = 16
M.GC_BYTES = 8 * 1048576

local function cut(text, max)
  if #text <= max then return text end
  return json.utf8_cut(text, max)
end

local sha256_hex
local function digest(text)
  sha256_hex = sha256_hex or require("specula.crypto").sha256_hex
  return "sha256:" .. sha256_hex(text):sub(1, M.DIGEST_HEX)
end


-- The builder: events in, a session out (see above). A prompt's calls and
-- turns are kept as columns until it closes (a log may be one prompt of
-- thousands of calls); a closed prompt goes to the sink: messages and call
-- tables (texts kept), or specula.convtraces.turns' columns (digests).
-- Its state (st): s (the session), sink, kept (a text as it is kept), cap,
-- P (the open prompt), turn (its latest turn, an index), since (what the
-- model waits from), last_agent, by_id (call id -> index in P), closed (ids
-- of the calls of closed prompts: a late result is theirs).

-- The sink keeping texts: messages and call tables.
local function text_sink(s)
  local sink = {}
  s.msgs, s.calls = {}, {}
  function sink.user(text) s.msgs[#s.msgs + 1] = { role = "user", content = text } end
  function sink.call(tool, args, rec, wait, tool_ms)
    s.calls[#s.calls + 1] = { tool = tool, args = args, recorded_ms = rec or nil, wait_ms = wait, tool_ms = tool_ms,
                              untimed = not rec or nil }
  end
  function sink.text_turn(text, ms)
    s.msgs[#s.msgs + 1] = { role = "assistant", content = text, specula_times = { model_ms = ms, tool_ms = {} } }
  end
  function sink.call_turn(text, model, list)
    local msgs = s.msgs
    local tc, tms, own, off = {}, {}, {}, {}
    for i, c in ipairs(list) do
      tms[i], own[i], off[i] = c.tms, c.own, c.off
      tc[i] = { id = c.id, type = "function", ["function"] = { name = c.tool, arguments = c.args } }
    end
    msgs[#msgs + 1] = { role = "assistant", content = text, tool_calls = tc,
                        specula_times = { model_ms = model, tool_ms = tms, call_ms = own, offset_ms = off } }
    for _, c in ipairs(list) do msgs[#msgs + 1] = { role = "tool", tool_call_id = c.id, content = c.obs or "" } end
  end
  return sink
end

-- The sink keeping digests: specula.convtraces.turns' columns.
local function digest_sink(s)
  local sink = {}
  turnslib = turnslib or require "specula.convtraces.turns"
  local T = turnslib.new()
  -- the calls: { tool, args (canonical JSON), recorded_ms, wait_ms,
  -- tool_ms } columns (recorded_ms false: untimed)
  local C = { tool = {}, args = {}, recorded_ms = {}, wait_ms = {}, tool_ms = {} }
  s.msgs, s.call_cols = T, C
  function sink.user(text) turnslib.user(T, text) end
  function sink.call(tool, args, rec, wait, tool_ms)
    local j = s.n_calls   -- counted already
    C.tool[j], C.args[j], C.recorded_ms[j], C.wait_ms[j], C.tool_ms[j] = tool, args, rec, wait, tool_ms
  end
  -- a call's arguments, kept from the call on as two strings (interned:
  -- equal arguments, one string): the record's canonical JSON of them,
  -- and the replay's (turns.norm_args'), not as a table a call
  function sink.args(args) return json.canonical(args), json.canonical(turnslib.norm_args(args)) end
  function sink.text_turn(text, ms) turnslib.turn(T, text, ms, nil) end
  function sink.call_turn(text, model, list) turnslib.turn(T, text, model, list) end
  return sink
end

local function open_prompt(st, t, text)
  local s = st.s
  s.t0 = s.t0 or t
  -- calls: id, tool, args (with digests: canonical JSON, and key: the
  -- replay's), t_call, t_result, obs, appr (approval ms),
  -- exec (exec ms), turn; turns: since, t_first, text_t, text (its texts
  -- joined), first (call), n (calls)
  st.P = { t0 = t, last_t = t, n = 0, id = {}, tool = {}, args = {}, key = {}, t_call = {}, t_result = {}, obs = {},
           appr = {}, exec = {}, nt = 0, since = {}, t_first = {}, text_t = {}, text = {}, first = {}, nc = {} }
  st.since, st.turn = t, nil
  s.prompts = s.prompts + 1
  if text then st.sink.user(st.kept(text)) end
end

local function new_turn(st)
  local P = st.P
  local ti = P.nt + 1
  P.nt = ti
  P.since[ti], P.t_first[ti], P.text_t[ti], P.text[ti], P.first[ti], P.nc[ti] = st.since, false, false, false, P.n + 1, 0
  st.turn = ti
end

-- a turn is over once one of its calls has its result
local function turn_answered(st)
  local P, turn = st.P, st.turn
  for j = P.first[turn], P.first[turn] + P.nc[turn] - 1 do if P.t_result[j] then return true end end
  return false
end

-- The recorded time of each call of closed prompt p (false: no result) and
-- the person's wait inside it.
local function person_waits(p, cap)
  local n = p.n
  local t_call, t_result = p.t_call, p.t_result
  local rec, wait = {}, {}
  for j = 1, n do
    rec[j] = t_result[j] and math.max(0, t_result[j] - t_call[j]) or false
    wait[j] = 0
  end
  if p.active_ms then
    local w = (p.end_t or p.last_t) - p.t0 - p.active_ms
    if w > 0 then
      local order = {}
      for j = 1, n do if rec[j] then order[#order + 1] = j end end
      table.sort(order, function(a, b) return rec[a] > rec[b] end)
      for _, j in ipairs(order) do
        if w <= 0 then break end
        wait[j] = math.min(w, rec[j])
        w = w - wait[j]
      end
    end
  else
    for j = 1, n do
      local r = rec[j]
      if r then
        if p.appr[j] then
          wait[j] = math.min(r, p.appr[j])
        elseif p.exec[j] then
          local extra = r - p.exec[j]
          if extra > M.APPROVAL_GAP_MS then wait[j] = extra end
        elseif r > cap then
          wait[j] = r - cap
        end
      end
    end
  end
  return rec, wait
end

-- The turns of closed prompt p with their times, to the sink (a turn's
-- calls in scratch tables the sink reads and lets go: a prompt of
-- thousands of turns leaves no table a turn).
local function emit_turns(st, p, tool_ms)
  local s, sink = st.s, st.sink
  local t_call = p.t_call
  local t_eff, order, list = {}, {}, {}
  for ti = 1, p.nt do
    s.turns = s.turns + 1
    local text = p.text[ti] or ""
    local since_t = p.since[ti]
    if p.nc[ti] == 0 then
      local ms = math.max(0, (p.text_t[ti] or since_t) - since_t)
      s.model_ms = s.model_ms + ms
      sink.text_turn(text, ms)
    else
      local t_first = p.t_first[ti]
      local model = math.max(0, t_first - since_t)
      local nc = p.nc[ti]
      for i = 1, nc do
        local j = p.first[ti] + i - 1
        t_eff[j] = t_call[j] + tool_ms[j]
        order[i] = j
      end
      for i = #order, nc + 1, -1 do order[i] = nil end
      for i = #list, nc + 1, -1 do list[i] = nil end
      if nc > 1 then table.sort(order, function(a, b) return t_eff[a] < t_eff[b] end) end
      local prev = t_first
      for i, j in ipairs(order) do
        local inc = math.max(0, t_eff[j] - prev)
        prev = math.max(prev, t_eff[j])
        s.tool_ms = s.tool_ms + inc
        local c = list[i] or {}
        list[i] = c
        c.id, c.tool, c.args, c.key, c.obs, c.tms = p.id[j], p.tool[j], p.args[j], p.key[j], p.obs[j] or nil, inc
        c.own, c.off = tool_ms[j], math.max(0, t_call[j] - t_first)
      end
      s.model_ms = s.model_ms + model
      sink.call_turn(text, model, list)
    end
  end
end

local function close_prompt(st)
  if not st.P then return end
  local p, s = st.P, st.s
  st.P = nil
  if p.active_bad then p.active_ms = nil end
  local n = p.n
  local t_call, t_result = p.t_call, p.t_result
  -- the person's waits inside calls
  local rec, wait = person_waits(p, st.cap)
  local tool_ms = {}
  local wall = p.last_t - p.t0
  for j = 1, n do
    tool_ms[j] = rec[j] and rec[j] - wait[j] or 0
    if not rec[j] then s.untimed = s.untimed + 1 end
    s.n_calls = s.n_calls + 1
    st.sink.call(p.tool[j], p.args[j], rec[j], wait[j], tool_ms[j])
  end
  -- a late result of one of these calls is theirs, not the next prompt's
  for id in pairs(st.by_id) do st.closed[id] = true end
  st.by_id = {}
  -- what the person's waits took from the prompt's wall time: what they
  -- shortened each turn's tool phase by (a wait beside a longer parallel
  -- call took nothing)
  local waits = 0
  for ti = 1, p.nt do
    local raw, eff = p.t_first[ti] or 0, p.t_first[ti] or 0
    for j = p.first[ti], p.first[ti] + p.nc[ti] - 1 do
      if t_result[j] and t_result[j] > raw then raw = t_result[j] end
      if t_call[j] + tool_ms[j] > eff then eff = t_call[j] + tool_ms[j] end
    end
    waits = waits + math.max(0, raw - eff)
  end
  s.approval_ms = s.approval_ms + (p.active_ms and math.max(0, (p.end_t or p.last_t) - p.t0 - p.active_ms) or waits)
  -- the log's own count of the agent's time: Claude Code's active time,
  -- else the prompt's wall time without the person's waits
  s.recorded_ms = s.recorded_ms + (p.active_ms or (wall - waits))
  emit_turns(st, p, tool_ms)
  st.last_agent = p.last_t
end

-- The model's text or a tool call it decided.
-- A call's arguments as the sink keeps them (digests: two canonical JSON
-- texts), checked before the call changes any state: arguments JSON
-- cannot carry (a number as 1e400 decodes to infinity) raise, and the
-- reader's line is skipped with a warning (before, the replay of the
-- session failed in every configuration but the recorded one).
local function call_args(st, e)
  local ok, a, k
  if st.sink.args then ok, a, k = pcall(st.sink.args, e.args)
  else ok, a = pcall(json.canonical, e.args) end
  if not ok then
    error(format("call '%s': its arguments hold what JSON cannot carry (%s)", tostring(e.tool),
      tostring(a):gsub("^JSON: ", "")), 0)
  end
  if st.sink.args then return a, k end
  return e.args
end

-- A result or call that pairs with nothing, counted per kind (said once a
-- session: say_odd).
local function odd(st, what, id)
  local o = st.odd[what]
  if not o then
    o = { n = 0, line = st.line(), id = id }
    st.odd[what] = o
  end
  o.n = o.n + 1
end

local function on_text_or_call(st, e, t)
  local s = st.s
  local args, key
  if e.kind == "call" then args, key = call_args(st, e) end
  if not st.P then open_prompt(st, t, nil) end   -- a resumed session: the first event starts it
  local P = st.P
  -- text after calls is a later reply; a call after answered calls too
  if not st.turn or (P.nc[st.turn] > 0 and (e.kind == "text" or turn_answered(st))) then new_turn(st) end
  local turn = st.turn
  if e.kind == "text" then
    local k = st.kept(e.text)
    P.text[turn] = P.text[turn] and (P.text[turn] .. "\n" .. k) or k
    if P.nc[turn] == 0 then P.text_t[turn] = t end
  else
    if P.nc[turn] == 0 then P.t_first[turn] = t end
    local j = P.n + 1
    P.n = j
    P.nc[turn] = P.nc[turn] + 1
    local id = type(e.id) == "string" and e.id or ("call" .. (s.n_calls + j))
    P.id[j], P.tool[j], P.t_call[j] = id, e.tool, t
    P.args[j], P.key[j] = args, key
    P.t_result[j], P.obs[j], P.appr[j], P.exec[j] = false, false, false, false
    local prev = st.by_id[id]
    if prev and not P.t_result[prev] then
      odd(st, "shared", id)   -- two calls waiting under one id: the earlier keeps it
    else
      st.by_id[id] = j
    end
    -- the model waits from its decision at least (a call without a
    -- result ends nothing later)
    if t > st.since then st.since = t end
  end
  if t > P.last_t then P.last_t = t end
end

-- A result pairs with its call by id: the earliest unanswered call of the
-- open prompt with that id (an id two calls share pairs their results in
-- order). A result without an id takes the first unanswered call. One
-- whose id no call of the log made, or whose call has its result already,
-- pairs with nothing: counted (st.odd), and said once a session.
local function on_result(st, e, t)
  local P = st.P
  local id = type(e.id) == "string" and e.id or nil
  local j
  if id then
    j = st.by_id[id]
    if j and P.t_result[j] then
      -- a later call with the same id, still waiting?
      j = nil
      for x = 1, P.n do
        if P.id[x] == id and not P.t_result[x] then j = x break end
      end
      if not j then odd(st, "again", id) return end
    elseif not j then
      if not st.closed[id] then odd(st, "unknown", id) end
      return
    end
  elseif P then
    for x = 1, P.n do if not P.t_result[x] then j = x break end end
  end
  if j and not P.t_result[j] then
    P.t_result[j] = t
    P.obs[j] = st.kept(content_text(e.content))
    if t > st.since then st.since = t end
    if t > P.last_t then P.last_t = t end
  end
end

-- What st.odd counted, said once a session (warn: read_all's).
local ODD = {
  unknown = "%d tool result%s name%s a call no earlier line made (the first at line %d, id '%s'): paired with no call",
  again = "%d tool result%s came for a call that had its result already (the first at line %d, id '%s'): the first result kept",
  shared = "%d call%s reused the id of a call still waiting (the first at line %d, id '%s'): results pair in order",
  active = "%d turn_duration%s longer than %s turn's own time (the first at line %d: %s): %s turn's wall time counted "
    .. "instead",
}
local function say_odd(st, warn, path)
  for _, what in ipairs({ "unknown", "again", "shared", "active" }) do
    local o = st.odd[what]
    if o then
      local shown = #o.id > 40 and (json.utf8_cut(o.id, 40) .. "...") or o.id
      local msg
      if what == "unknown" then
        msg = format(ODD.unknown, o.n, o.n == 1 and "" or "s", o.n == 1 and "s" or "", o.line, shown)
      elseif what == "active" then
        msg = format(ODD.active, o.n, o.n == 1 and "" or "s", o.n == 1 and "its" or "their", o.line, shown,
          o.n == 1 and "the" or "each")
      else
        msg = format(ODD[what], o.n, o.n == 1 and "" or "s", o.line, shown)
      end
      warn(format("%s: %s", path, msg))
    end
  end
end

local function builder(path, fmt, opts, line, warn)
  local max_text = opts.max_text or M.MAX_TEXT
  local keep_text = opts.keep_text ~= false
  local s = { path = path, format = fmt, recorded_ms = 0, model_ms = 0, tool_ms = 0,
              user_ms = 0, approval_ms = 0, prompts = 0, turns = 0, untimed = 0, n_calls = 0 }
  local st = { s = s, cap = opts.approval_cap_ms or M.CAP_MS, by_id = {}, closed = {}, odd = {},
                line = line or function() return 0 end }
  function st.kept(text)
    if keep_text then return cut(text, max_text) end
    return digest(text)
  end
  -- the sink: what a closed prompt becomes
  st.sink = keep_text and text_sink(s) or digest_sink(s)

  local b = {}
  function b.event(e)
    local t = e.t
    if e.kind == "meta" then
      s.id = s.id or e.id
      s.t0 = s.t0 or t
    elseif e.kind == "prompt" then
      close_prompt(st)
      if st.last_agent and t > st.last_agent then s.user_ms = s.user_ms + (t - st.last_agent) end
      open_prompt(st, t, e.text)
    elseif e.kind == "text" or e.kind == "call" then
      on_text_or_call(st, e, t)
    elseif e.kind == "result" then
      on_result(st, e, t)
    elseif e.kind == "approval" then
      -- a person's approval, timed by the log: the latest call still waiting
      local P = st.P
      if P then
        for j = P.n, 1, -1 do
          if not P.t_result[j] then P.appr[j] = (P.appr[j] or 0) + e.ms break end
        end
      end
    elseif e.kind == "exec" then
      local j = type(e.id) == "string" and st.by_id[e.id]
      if j then st.P.exec[j] = e.exec_ms end
    elseif e.kind == "end" then
      local P = st.P
      if P then
        P.end_t = t
        if e.active_ms then
          P.active_ms = (P.active_ms or 0) + e.active_ms
          -- active time is part of the turn's wall time: more than it (past
          -- a second's slack) is no time this log can have; the turn is
          -- counted by its wall time instead, and that is said
          if t and P.t0 and P.active_ms > 1.02 * (t - P.t0) + 1000 then
            odd(st, "active", format("%.0f ms against %.0f", P.active_ms, t - P.t0))
            P.active_bad = true
          end
        end
      end
    end
  end
  function b.finish()
    close_prompt(st)
    if warn then say_odd(st, warn, path) end
    return s
  end
  return b
end

local function expected()
  local out = {}
  for _, r in ipairs(M.READERS) do out[#out + 1] = r.name .. ": " .. r.expects end
  return table.concat(out, "; ")
end

-- The reader of a decoded line, or nil.
function M.detect(v)
  for _, r in ipairs(M.READERS) do
    if r.detect(v) then return r end
  end
  return nil
end

-- read_all(path, opts, warn): the sessions of one log file (one, but for
-- formats that hold several: OTel spans), or nil and
-- "EFORMAT: path:line: ..." naming what each reader expected. opts:
-- approval_cap_ms, keep_text (default true; false: digests). warn(msg)
-- gets "path:line: ..." for lines skipped.

-- What a line the file's reader could not take says: a reader's own error
-- as it is; a slip inside a reader (a field of another type, missing) is
-- no news to the user in a specula source path and line: what the line
-- should have been instead.
local function line_error(e, reader)
  local msg = tostring(e)
  if msg:find("^[^\n]-%.lua:%d+: ") then return "not " .. reader.expects end
  return msg
end

function M.read_all(path, opts, warn)
  opts = opts or {}
  warn = warn or function() end
  local f, err = io.open(path, "r")
  if not f then return nil, "EIO: cannot read " .. tostring(err) end
  local reader
  -- the reader's own, for the file; text(s): a text as the builder keeps
  -- it (a reader that holds lines until the end of the file: OTel)
  local keep_text, max_text = opts.keep_text ~= false, opts.max_text or M.MAX_TEXT
  local ln = 0
  local state = { text = function(t)
    if keep_text then return cut(t, max_text) end
    return digest(t)
  end, warn = function(msg) warn(format("%s:%d: %s: skipped", path, ln, msg)) end }
  local builders, order, whole = {}, {}, {}
  local function ev_for(key)
    local b = builders[key]
    if not b then
      b = builder(path, reader.name, opts, function() return ln end, warn)
      builders[key] = b
      order[#order + 1] = key
    end
    return b.event
  end
  -- a reader's time: a line whose time is there but no ISO 8601 time
  -- (epoch milliseconds, a locale's format) is skipped with a warning that
  -- says so, not without a word (a log of such lines held "no session")
  local function iso(x)
    local t = type(x) == "string" and M.iso_ms(x)
    if t then return t end
    -- none at all: the reader's slip, a line not of its shape (line_error)
    if x == nil then error("no time", 2) end
    local shown = type(x) == "string" and ("'" .. (#x > 40 and json.utf8_cut(x, 40) .. "..." or x) .. "'") or tostring(x)
    error(format("the time %s is not an ISO 8601 time (YYYY-MM-DDThh:mm:ss[.sss], then Z, +hh:mm or nothing for UTC)",
      shown), 0)
  end
  local since_gc = 0
  local each, read_err = lines_of(f)
  for line in each do
    ln = ln + 1
    -- a long line and what it decodes to are garbage once read: collect
    -- as the bytes go by (every GC_BYTES), or the collector's pacing lets
    -- that garbage grow with what is kept, and the peak with the log
    since_gc = since_gc + #line
    if since_gc > M.GC_BYTES then
      since_gc = 0
      collectgarbage()
    end
    if line:find("%S") then
      local v, derr = json.decode(line)
      -- the decoder stops at a NUL byte ("unexpected end of string"): say what it met
      local nul = v == nil and line:find("\0", 1, true)
      if nul then derr = format("a NUL byte at column %d", nul) end
      -- a compressed log (a gzip, zstd, xz or bzip2 stream): say so, with what to do
      if v == nil and ln == 1 then derr = compressed_hint(path, line) or derr end
      if v == nil then
        if not reader then
          f:close()
          return nil, format("EFORMAT: %s:%d: not JSON (%s); expected one JSON object a line, %s", path, ln,
            tostring(derr), expected())
        end
        warn(format("%s:%d: not JSON (%s): skipped", path, ln, tostring(derr)))
      else
        if not reader then
          reader = M.detect(v)
          if not reader then
            f:close()
            return nil, format("EFORMAT: %s:%d: no reader knows this line; expected %s", path, ln, expected())
          end
        end
        if type(v) == "table" and reader.session then
          -- a format of whole sessions, one a line
          local ok, sess = pcall(reader.session, v, path, ln)
          if ok and sess then whole[#whole + 1] = sess
          else warn(format("%s:%d: %s: skipped", path, ln, ok and "not " .. reader.expects or line_error(sess, reader))) end
        elseif type(v) == "table" and reader.detect and not reader.detect(v) then
          -- a line of another shape (another agent's log appended, a
          -- stray object): said, not read as nothing without a word
          warn(format("%s:%d: not %s: skipped", path, ln, reader.expects))
        elseif type(v) == "table" then
          local ok, e = pcall(reader.events, v, ev_for(""), iso, state)
          if not ok then warn(format("%s:%d: %s: skipped", path, ln, line_error(e, reader))) end
        end
      end
    end
  end
  f:close()
  if read_err() then return nil, format("EIO: cannot read %s: %s", path, read_err()) end
  if not reader then return nil, format("EFORMAT: %s: empty; expected %s", path, expected()) end
  if reader.finish then
    local ok, e = pcall(reader.finish, state, ev_for)
    if not ok then return nil, format("EFORMAT: %s: %s", path, tostring(e)) end
  end
  local out = whole
  local base = path:match("([^/]+)%.jsonl?$") or path
  for _, key in ipairs(order) do
    local s = builders[key].finish()
    -- a format that keeps sessions apart names them; one that did not see
    -- any event leaves an empty session out
    if s.prompts > 0 or (s.n_calls or #s.calls) > 0 then
      s.id = s.id or (key ~= "" and key) or base
      out[#out + 1] = s
    end
  end
  if #out == 0 then return nil, format("EFORMAT: %s: read as %s, but it holds no session (no prompt, no call)", path,
    reader.name) end
  return out
end

-- The calls of a session one by one: i, { tool, args, recorded_ms,
-- wait_ms, tool_ms, untimed } (a new table each, from call_cols: args is
-- then args_json, the canonical JSON of the arguments).
function M.each_call(s)
  local cols = s.call_cols
  if not cols then return ipairs(s.calls) end
  local n = s.n_calls
  return function(_, i)
    i = i + 1
    if i > n then return nil end
    local rec = cols.recorded_ms[i]
    return i, { tool = cols.tool[i], args_json = cols.args[i], recorded_ms = rec or nil, wait_ms = cols.wait_ms[i],
                tool_ms = cols.tool_ms[i], untimed = not rec or nil }
  end, s, 0
end

-- The number of calls of a session.
function M.n_calls(s) return s.call_cols and s.n_calls or #s.calls end

-- read(path, opts, warn): the first session of one log file (read_all).
function M.read(path, opts, warn)
  local list, err = M.read_all(path, opts, warn)
  if not list then return nil, err end
  return list[1]
end

return M
