-- specula.convtraces: tool-call histories from JSONL files of conversations,
-- for `specula predictors`. One conversation a line, either
--   openai:    {"messages":[...]} or a bare array of chat messages; assistant
--              messages carry tool_calls[].function.{name, arguments} (the
--              arguments a JSON string), results are role "tool" messages
--              with tool_call_id (the legacy function_call/role "function"
--              pair is read too)
--   anthropic: {"messages":[...]} or a bare array of messages whose content
--              blocks are tool_use {id, name, input} and tool_result
--              {tool_use_id, content}
-- Each conversation is one trajectory { id, steps = { {tool, args,
-- observation} } (in the order the calls were made), events, turns, tools }
-- (events and turns: below); the count returned is of those with a call.
-- A line that cannot be used is skipped with a warning naming file:line; a
-- call whose arguments are not a JSON object keeps them as its text.
local json = require "specula.json"
local stable_json = require("specula.convtraces.common").stable_json
local content_text = require("specula.convtraces.common").content_text
local lines_of = require("specula.convtraces.common").lines   -- NUL-safe, a read error returned

local type, ipairs, tostring, format, concat = type, ipairs, tostring, string.format, table.concat

local M = {}

M.FORMATS = { openai = true, anthropic = true, results = true }

local function messages_of(v)
  if type(v) ~= "table" then return nil end
  if type(v.messages) == "table" then return v.messages end
  if v[1] ~= nil then return v end
  return nil
end

-- The format one decoded line shows, or nil when it shows none (a
-- conversation without tool calls says nothing).
local function line_format(v)
  if type(v) ~= "table" then return nil end
  if type(v.trajectory) == "table" then return "results" end
  local msgs = messages_of(v)
  if not msgs then return nil end
  for _, m in ipairs(msgs) do
    if type(m) == "table" then
      if m.tool_calls ~= nil or m.function_call ~= nil or m.role == "tool" or m.role == "function" then
        return "openai"
      end
      if type(m.content) == "table" then
        for _, b in ipairs(m.content) do
          if type(b) == "table" and (b.type == "tool_use" or b.type == "tool_result") then return "anthropic" end
        end
      end
    end
  end
  return nil
end


-- A name as a warning quotes it: cut, so a hostile one cannot flood stderr.
local function short(name)
  if #name <= 60 then return name end
  return json.utf8_cut(name, 60) .. "..."
end

-- A conversation as a predictor reads it (what the model saw): a list of
-- events, oldest first:
--   { kind = "system"|"user"|"assistant", text = "..." }
--   { kind = "call", tool = NAME, args = {...}, id = ID }
--   { kind = "result", tool = NAME, text = "...", call = index of its call event }
-- and its model turns: { at = N, step = i } where the first N events are what
-- the model saw when the turn began and `step` the index of the call the
-- turn made (nil: it answered in text). A turn's own text is not in the N
-- events (it comes with the call); a second call of the same message sees
-- the first.
local function new_conv()
  -- the count of events is kept in c.n, not read as #c.events: LuaJIT
  -- 2.1's compiled readers below were seen to get a stale length of a table
  -- this closure had just appended to
  local c = { steps = {}, events = {}, turns = {}, n = 0 }
  function c.event(e)
    local n = c.n + 1
    c.events[n] = e
    c.n = n
    return n
  end
  return c
end

-- Steps of one conversation; `warn(msg)` for what is odd in it. Returns
-- nil and the reason when the line is not a conversation at all.
local function openai_steps(msgs, warn)
  local conv = new_conv()
  local steps, by_id, pending = conv.steps, {}, {}
  -- the assistant message being read is a table handed to add(), not
  -- locals shared as upvalues (see new_conv)
  local function add(turn, name, raw, id)
    if type(name) ~= "string" or name == "" then
      warn("a tool call without a function name: skipped")
      return
    end
    local args = raw
    if raw == "" or raw == nil or raw == json.null then
      args = {}   -- a call without arguments
    elseif type(raw) == "string" then
      local v = json.decode(raw)
      if type(v) == "table" then args = v
      else warn(format("call '%s': arguments are not a JSON object: kept as text", short(name))) end
    elseif type(raw) ~= "table" then
      warn(format("call '%s': arguments are a %s, not a JSON string: kept as they are", short(name), type(raw)))
    end
    local s = { tool = name, args = args }
    steps[#steps + 1] = s
    if type(id) == "string" and id ~= "" then by_id[id] = s end
    pending[#pending + 1] = s
    -- the message's first call sees what the turn began with, a later one
    -- the calls before it too
    local at = turn.calls == 0 and turn.at or conv.n
    s.event = conv.event({ kind = "call", tool = name, args = args, id = type(id) == "string" and id or nil })
    conv.turns[#conv.turns + 1] = { at = at, step = #steps }
    turn.calls = turn.calls + 1
  end
  local function result(id, content)
    local s = type(id) == "string" and by_id[id]
    if not s then
      -- no usable id: the earliest call still without a result
      for _, p in ipairs(pending) do
        if p.observation == nil then s = p break end
      end
      if s then warn(format("a tool result %s: matched to the earliest unanswered call '%s'",
        id == nil and "without tool_call_id" or "with an unknown tool_call_id", short(s.tool)))
      else warn("a tool result with no call to answer: skipped") return end
    end
    s.observation = content_text(content)
    conv.event({ kind = "result", tool = s.tool, text = s.observation, call = s.event })
  end
  for _, m in ipairs(msgs) do
    if type(m) ~= "table" then
      warn("a message that is not an object: skipped")
    elseif m.role == "assistant" then
      local turn = { at = conv.n, calls = 0 }
      local text = content_text(m.content)
      if text ~= "" then conv.event({ kind = "assistant", text = text }) end
      if type(m.tool_calls) == "table" then
        for _, tc in ipairs(m.tool_calls) do
          local fn = type(tc) == "table" and tc["function"]
          if type(fn) ~= "table" then warn("a tool call without a function: skipped")
          else add(turn, fn.name, fn.arguments, tc.id) end
        end
      elseif m.tool_calls ~= nil and m.tool_calls ~= json.null then
        warn("tool_calls is not a list: skipped")
      end
      if type(m.function_call) == "table" then add(turn, m.function_call.name, m.function_call.arguments, nil) end
      if turn.calls == 0 and text ~= "" then conv.turns[#conv.turns + 1] = { at = turn.at } end
    elseif m.role == "tool" or m.role == "function" then
      result(m.tool_call_id, m.content)
    elseif m.role == "user" or m.role == "system" or m.role == "developer" then
      local text = content_text(m.content)
      if text ~= "" then conv.event({ kind = m.role == "user" and "user" or "system", text = text }) end
    end
  end
  return steps, conv
end

local function anthropic_steps(msgs, warn, system)
  local conv = new_conv()
  local steps, by_id, pending = conv.steps, {}, {}
  if system ~= nil then
    local text = content_text(system)
    if text ~= "" then conv.event({ kind = "system", text = text }) end
  end
  for _, m in ipairs(msgs) do
    if type(m) ~= "table" then
      warn("a message that is not an object: skipped")
    elseif type(m.content) == "table" then
      local turn_at, calls, texts = conv.n, 0, 0
      local assistant = m.role ~= "user"
      for _, b in ipairs(m.content) do
        if type(b) == "table" and b.type == "tool_use" and assistant then
          if type(b.name) ~= "string" or b.name == "" then
            warn("a tool_use block without a name: skipped")
          else
            local args = b.input
            if args == nil or args == json.null then args = {}
            elseif type(args) ~= "table" then
              warn(format("tool_use '%s': input is a %s, not an object: kept as it is", short(b.name), type(args)))
            end
            local s = { tool = b.name, args = args }
            steps[#steps + 1] = s
            pending[#pending + 1] = s
            if type(b.id) == "string" and b.id ~= "" then by_id[b.id] = s end
            local at = calls == 0 and turn_at or conv.n
            s.event = conv.event({ kind = "call", tool = b.name, args = args,
                                   id = type(b.id) == "string" and b.id or nil })
            conv.turns[#conv.turns + 1] = { at = at, step = #steps }
            calls = calls + 1
          end
        elseif type(b) == "table" and b.type == "tool_result" then
          local s = type(b.tool_use_id) == "string" and by_id[b.tool_use_id]
          if not s then
            for _, p in ipairs(pending) do
              if p.observation == nil then s = p break end
            end
            if s then warn(format("a tool_result %s: matched to the earliest unanswered call '%s'",
              b.tool_use_id == nil and "without tool_use_id" or "with an unknown tool_use_id", short(s.tool)))
            else warn("a tool_result with no call to answer: skipped") end
          end
          if s then
            s.observation = content_text(b.content)
            conv.event({ kind = "result", tool = s.tool, text = s.observation, call = s.event })
          end
        elseif type(b) == "table" and b.type == "text" and type(b.text) == "string" and b.text ~= "" then
          conv.event({ kind = assistant and "assistant" or "user", text = b.text })
          if assistant then texts = texts + 1 end
        end
      end
      if assistant and calls == 0 and texts > 0 then conv.turns[#conv.turns + 1] = { at = turn_at } end
    elseif type(m.content) == "string" and m.content ~= "" then
      local assistant = m.role == "assistant"
      if assistant then conv.turns[#conv.turns + 1] = { at = conv.n } end
      conv.event({ kind = assistant and "assistant" or (m.role == "system" and "system" or "user"), text = m.content })
    end
  end
  return steps, conv
end

-- The task a conversation starts with (what a draft model is told): its
-- first user message's text.
local function first_user(v)
  local msgs = messages_of(v)
  for _, m in ipairs(msgs or {}) do
    if type(m) == "table" and m.role == "user" then
      local t = content_text(m.content)
      if t ~= "" then return t end
    end
  end
  return nil
end

-- Committed tool calls of a specula results record.
local function results_steps(r)
  if r.error ~= nil then return {} end   -- a failed query: nothing committed to learn from
  if type(r.trajectory) ~= "table" then return nil end
  local hops = type(r.stages) == "table" and type(r.stages.hops) == "table" and r.stages.hops or {}
  local steps = {}
  for i, h in ipairs(r.trajectory) do
    if type(h) == "table" and type(h.action) == "table" and type(h.action.tool) == "string" then
      local s = { tool = h.action.tool, args = h.action.args, observation = h.observation }
      -- the recorded stage times: the model's step and the target call
      local st = hops[i]
      if type(st) == "table" and type(st.t_seg) == "number" and type(st.t_target) == "number"
          and st.t_seg >= 0 and st.t_target >= 0 then
        s.timing = { step_ms = st.t_seg, tool_ms = st.t_target, names = {} }
      end
      steps[#steps + 1] = s
    end
  end
  return steps
end

-- The events and turns of a history that kept only its calls (a results
-- record, a cassette, an agent without context()): the query as the user's
-- message, then each call and its result.
function M.synthesize(query, steps)
  local conv = new_conv()
  if type(query) == "string" and query ~= "" then conv.event({ kind = "user", text = query }) end
  for i, s in ipairs(steps) do
    conv.turns[#conv.turns + 1] = { at = conv.n, step = i }
    local c = conv.event({ kind = "call", tool = s.tool, args = s.args })
    if s.observation ~= nil then
      local obs = s.observation
      local text = type(obs) == "string" and obs or (stable_json(obs) or tostring(obs))
      conv.event({ kind = "result", tool = s.tool, text = text, value = type(obs) == "table" and obs or nil, call = c })
    end
  end
  return conv
end

-- A conversation's messages (OpenAI chat or Anthropic, told apart by what
-- they hold) as events (above), for a predictor in a run: what an agent's
-- context(state) returned.
function M.events(msgs, system)
  if type(msgs) ~= "table" then return nil, "expected a list of messages" end
  local fmt = line_format(msgs) or "openai"
  local _, conv = (fmt == "anthropic" and anthropic_steps or openai_steps)(msgs, function() end, system)
  return conv.events, conv.turns
end

-- One conversation of OpenAI chat messages (or Anthropic, told apart by
-- what they hold) as a trajectory a predictor trains on: { id, steps,
-- events, turns } (as read() makes them); nil when it has no model turn.
function M.conversation(id, msgs)
  if type(msgs) ~= "table" then return nil end
  local fmt = line_format(msgs) or "openai"
  local steps, conv = (fmt == "anthropic" and anthropic_steps or openai_steps)(msgs, function() end)
  if #conv.turns == 0 then return nil end
  return { id = id, steps = steps, events = conv.events, turns = conv.turns, query = first_user({ messages = msgs }) }
end

-- Declared tools of a conversation file or an agent, as { name = {
-- description =, schema = } }: OpenAI's { type = "function", function =
-- { name, description, parameters } }, Anthropic's { name, description,
-- input_schema } and MCP's { name, description, inputSchema }.
function M.tool_specs(list)
  if type(list) ~= "table" then return nil end
  local out, n = {}, 0
  for _, t in ipairs(list) do
    local d = type(t) == "table" and (type(t["function"]) == "table" and t["function"] or t)
    if d and type(d.name) == "string" then
      local schema = d.parameters or d.input_schema or d.inputSchema
      out[d.name] = { description = type(d.description) == "string" and d.description or nil,
                      schema = type(schema) == "table" and schema or nil }
      n = n + 1
    end
  end
  return n > 0 and out or nil
end

-- read(path, fmt, out, warn): appends the file's trajectories to `out`.
-- fmt: "openai", "anthropic", "results" or nil (each line's own, the first
-- line that shows one decides for the file). warn(msg) gets "path:line: ...".
-- Returns the number of trajectories added, or nil and an error (a file
-- that cannot be read, or holds no usable conversation).
function M.read(path, fmt, out, warn)
  local f, err = io.open(path, "r")
  if not f then return nil, format("cannot read %s", tostring(err)) end
  local ln, added, skipped = 0, 0, 0
  local rd = require("specula.provenance").reader()   -- results records: see specula.provenance.reader
  local each, read_err = lines_of(f)
  for line in each do
    ln = ln + 1
    if line:find("%S") then
      local function lwarn(msg) warn(format("%s:%d: %s", path, ln, msg)) end
      local v, derr = json.decode(line)
      if v == nil then
        skipped = skipped + 1
        lwarn("not JSON (" .. tostring(derr) .. "): skipped")
      else
        -- a results record: an edited provenance is refused, as by every
        -- reader of records (conversations carry none)
        if type(v) == "table" and v.provenance ~= nil then
          local okp, perr = rd:expand(v, path, ln)
          if not okp then
            f:close()
            return nil, perr
          end
        end
        local lf = line_format(v)
        if not fmt and lf then fmt = lf end
        local steps, conv
        if fmt == "results" then
          if type(v) == "table" then steps = results_steps(v) end
          if steps then conv = M.synthesize(type(v) == "table" and v.query or nil, steps) end
          if not steps then skipped = skipped + 1 lwarn("not a results record with a trajectory: skipped") end
        elseif fmt == "openai" or fmt == "anthropic" then
          local msgs = messages_of(v)
          if not msgs then
            skipped = skipped + 1
            lwarn("not a conversation (an object with messages, or a list of messages): skipped")
          else
            steps, conv = (fmt == "openai" and openai_steps or anthropic_steps)(msgs, lwarn, v.system)
          end
        elseif lf == nil then
          -- undecided yet: a conversation without tool calls adds nothing
          steps = messages_of(v) and {} or nil
          if not steps then skipped = skipped + 1 lwarn("not a conversation or a results record: skipped") end
        end
        -- a conversation without calls still has model turns (answers in
        -- text): a predictor is asked there too
        if steps and (#steps > 0 or (conv and #conv.turns > 0)) then
          local id = type(v) == "table" and (type(v.id) == "string" or type(v.id) == "number") and v.id
            or format("%s:%d", path, ln)
          out[#out + 1] = { id = id, steps = steps, query = first_user(v), events = conv.events, turns = conv.turns,
                            tools = type(v) == "table" and M.tool_specs(v.tools) or nil }
          if #steps > 0 then added = added + 1 end
        end
      end
    end
  end
  f:close()
  if read_err() then return nil, format("cannot read %s: %s", path, read_err()) end
  if added == 0 then
    return nil, format("%s: no usable conversation (%d lines, %d skipped; no tool call in the rest%s)", path, ln,
      skipped, fmt and ", read as " .. fmt or "")
  end
  return added
end

return M
