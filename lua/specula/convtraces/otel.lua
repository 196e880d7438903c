-- specula.convtraces.otel: OpenTelemetry GenAI spans in the OTLP JSON
-- encoding (what the collector's file exporter writes: one
-- ExportTraceServiceRequest a line, {"resourceSpans": [{"scopeSpans":
-- [{"spans": [...]}]}]}), as timed events for
-- specula.convtraces.sessions. The GenAI semantic conventions name the
-- spans by gen_ai.operation.name:
--   invoke_agent   an agent's run (gen_ai.conversation.id): the prompt at
--                  its start (gen_ai.input.messages' last user text, if kept)
--   chat           a model call: the model's turn, from its start to its end
--   execute_tool   a tool call (gen_ai.tool.name, gen_ai.tool.call.id,
--                  gen_ai.tool.call.arguments, gen_ai.tool.call.result):
--                  from its start to its end
-- One session a conversation id (else a trace). Spans come in the order
-- they ended, so each session's spans are kept (their times, the tool's
-- name, id and arguments; a result and a prompt as the builder keeps a
-- text: cut, or a digest) and put in time order at the end of the file.
local json = require "specula.json"
local format = string.format

local M = { name = "otel",
  expects = 'an OTLP JSON trace export line: {"resourceSpans": [{"scopeSpans": [{"spans": [...]}]}]} with gen_ai.* attributes' }

function M.detect(v)
  return type(v) == "table" and type(v.resourceSpans) == "table"
end

local function value(v)
  if type(v) ~= "table" then return nil end
  if v.stringValue ~= nil then return v.stringValue end
  if v.intValue ~= nil then return tonumber(v.intValue) end
  if v.doubleValue ~= nil then return tonumber(v.doubleValue) end
  if v.boolValue ~= nil then return v.boolValue end
  if type(v.arrayValue) == "table" then
    local out = {}
    for i, x in ipairs(v.arrayValue.values or {}) do out[i] = value(x) end
    return out
  end
  return nil
end

local function attrs(list)
  local a = {}
  for _, kv in ipairs(type(list) == "table" and list or {}) do
    if type(kv) == "table" and type(kv.key) == "string" then a[kv.key] = value(kv.value) end
  end
  return a
end

local function ns_ms(x)
  local n = tonumber(x)
  return n and n >= 0 and n < math.huge and n / 1e6 or nil
end

-- The last user text of gen_ai.input.messages (a JSON string), if kept.
local function prompt_text(a)
  local m = a["gen_ai.input.messages"]
  if type(m) == "string" then m = json.decode(m) end
  if type(m) ~= "table" then return "" end
  for i = #m, 1, -1 do
    local msg = m[i]
    if type(msg) == "table" and msg.role == "user" then
      for _, p in ipairs(type(msg.parts) == "table" and msg.parts or {}) do
        if type(p) == "table" and type(p.content) == "string" then return p.content end
      end
      if type(msg.content) == "string" then return msg.content end
    end
  end
  return ""
end

-- What a span keeps of its attributes until the end of the file: what
-- finish reads, the texts as the builder keeps them (st.text).
local function kept_attrs(a, op, st)
  local text = st.text or function(t) return t end
  local k = { ["gen_ai.conversation.id"] = a["gen_ai.conversation.id"], ["gen_ai.tool.name"] = a["gen_ai.tool.name"],
              ["gen_ai.tool.call.id"] = a["gen_ai.tool.call.id"],
              ["gen_ai.tool.call.arguments"] = a["gen_ai.tool.call.arguments"] }
  local r = a["gen_ai.tool.call.result"]
  if r ~= nil then k["gen_ai.tool.call.result"] = text(type(r) == "string" and r or (json.encode(r) or "")) end
  if op == "invoke_agent" then k.prompt = text(prompt_text(a)) end
  return k
end

-- Keeps the line's GenAI spans in st (per session); sessions.lua calls
-- M.finish at the end of the file.
function M.events(v, _, _, st)
  st.spans = st.spans or {}
  for _, rs in ipairs(v.resourceSpans) do
    for _, ss in ipairs(type(rs) == "table" and type(rs.scopeSpans) == "table" and rs.scopeSpans or {}) do
      for _, sp in ipairs(type(ss) == "table" and type(ss.spans) == "table" and ss.spans or {}) do
        local a = attrs(sp.attributes)
        local op = a["gen_ai.operation.name"]
        local t0, t1 = ns_ms(sp.startTimeUnixNano), ns_ms(sp.endTimeUnixNano)
        local genai = op == "chat" or op == "execute_tool" or op == "invoke_agent" or op == "text_completion"
          or op == "generate_content"
        -- a GenAI span without its times: said (st.warn: FILE:LINE), not
        -- dropped without a word
        if genai and st.warn and not (t0 and t1 and t1 >= t0) then
          st.warn(format("span '%s': %s", tostring(sp.name or op), (t0 and t1)
            and "it ends before it starts (endTimeUnixNano < startTimeUnixNano)"
            or "startTimeUnixNano and endTimeUnixNano must be nanoseconds since the epoch"))
        elseif genai then
          -- a span exported twice (a collector's retry, two exports of one
          -- trace in one file) is one span: kept once, counted and said once
          local sid = type(sp.spanId) == "string" and sp.spanId ~= "" and (tostring(sp.traceId) .. "/" .. sp.spanId)
          st.span_ids = st.span_ids or {}
          if sid and st.span_ids[sid] then
            st.dup_spans = (st.dup_spans or 0) + 1
            if st.dup_spans == 1 and st.warn then
              st.warn(format("span '%s' (spanId %s) is in this file already (a retried export?); the later "
                .. "copies", tostring(sp.name or op), sp.spanId))
            end
          else
            if sid then st.span_ids[sid] = true end
            local key = a["gen_ai.conversation.id"] or sp.traceId or ""
            st.spans[#st.spans + 1] = { key = tostring(key), op = op, t0 = t0, t1 = t1, a = kept_attrs(a, op, st),
                                        trace = sp.traceId }
          end
        end
      end
    end
  end
end

-- ev_for(key) -> the event function of session `key`. A conversation id
-- shared by traces joins them; spans of a trace without one take the
-- conversation id its other spans carry.
function M.finish(st, ev_for)
  local spans = st.spans or {}
  local conv_of_trace = {}
  for _, s in ipairs(spans) do
    if s.a["gen_ai.conversation.id"] and s.trace then conv_of_trace[s.trace] = tostring(s.a["gen_ai.conversation.id"]) end
  end
  for _, s in ipairs(spans) do
    if not s.a["gen_ai.conversation.id"] and s.trace and conv_of_trace[s.trace] then s.key = conv_of_trace[s.trace] end
  end
  table.sort(spans, function(x, y)
    if x.t0 ~= y.t0 then return x.t0 < y.t0 end
    return x.op == "invoke_agent" and y.op ~= "invoke_agent"
  end)
  -- a session's events, in time order: results at their end times
  local by_key, order = {}, {}
  for _, s in ipairs(spans) do
    local list = by_key[s.key]
    if not list then list = {}; by_key[s.key] = list; order[#order + 1] = s.key end
    local a = s.a
    if s.op == "invoke_agent" then
      list[#list + 1] = { kind = "prompt", t = s.t0, text = a.prompt or "" }
    elseif s.op == "execute_tool" then
      local args = a["gen_ai.tool.call.arguments"]
      if type(args) == "string" then args = json.decode(args) or { input = args } end
      local id = a["gen_ai.tool.call.id"] or ("span" .. #list)
      list[#list + 1] = { kind = "call", t = s.t0, id = tostring(id), tool = tostring(a["gen_ai.tool.name"] or "?"),
                          args = type(args) == "table" and args or {} }
      list[#list + 1] = { kind = "result", t = s.t1, id = tostring(id), content = a["gen_ai.tool.call.result"] or "" }
    else
      -- a model call that made no call before the next one: its text, at its end
      list[#list + 1] = { kind = "model", t = s.t1, t0 = s.t0 }
    end
  end
  for _, key in ipairs(order) do
    local list = by_key[key]
    for i, e in ipairs(list) do e.seq = i end
    table.sort(list, function(x, y)
      if x.t ~= y.t then return x.t < y.t end
      return x.seq < y.seq
    end)
    local ev = ev_for(key)
    ev({ kind = "meta", id = key, t = list[1] and list[1].t })
    -- without an agent span, the agent's time starts with its first model call
    if list[1] and list[1].kind ~= "prompt" then
      local t0 = list[1].t0 or list[1].t
      ev({ kind = "prompt", t = math.min(t0, list[1].t), text = "" })
    end
    for i, e in ipairs(list) do
      if e.kind == "model" then
        -- a model call followed by a tool call decided it; else it answered
        local nxt = list[i + 1]
        if not (nxt and nxt.kind == "call") then ev({ kind = "text", t = e.t, text = "" }) end
      else
        ev(e)
      end
    end
  end
end

return M
