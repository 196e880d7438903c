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
-- Each conversation with at least one tool call is one trajectory { id,
-- steps = { {tool, args, observation} } } in the order the calls were made.
-- A line that cannot be used is skipped with a warning naming file:line; a
-- call whose arguments are not a JSON object keeps them as its text.
local json = require "specula.json"

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

-- A tool result's content as text: a string, or the text parts of a list of
-- content parts/blocks joined; anything else as its JSON.
local function content_text(c)
  if type(c) == "string" then return c end
  if c == nil or c == json.null then return "" end
  if type(c) == "table" and c[1] ~= nil then
    local parts = {}
    for _, p in ipairs(c) do
      if type(p) == "table" and type(p.text) == "string" then parts[#parts + 1] = p.text
      elseif type(p) == "string" then parts[#parts + 1] = p end
    end
    if #parts > 0 then return concat(parts, "\n") end
  end
  return json.encode(c) or ""
end

-- A name as a warning quotes it: cut, so a hostile one cannot flood stderr.
local function short(name)
  if #name <= 60 then return name end
  return json.utf8_cut(name, 60) .. "..."
end

-- Steps of one conversation; `warn(msg)` for what is odd in it. Returns
-- nil and the reason when the line is not a conversation at all.
local function openai_steps(msgs, warn)
  local steps, by_id, pending = {}, {}, {}
  local function add(name, raw, id)
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
  end
  for _, m in ipairs(msgs) do
    if type(m) ~= "table" then
      warn("a message that is not an object: skipped")
    elseif m.role == "assistant" then
      if type(m.tool_calls) == "table" then
        for _, tc in ipairs(m.tool_calls) do
          local fn = type(tc) == "table" and tc["function"]
          if type(fn) ~= "table" then warn("a tool call without a function: skipped")
          else add(fn.name, fn.arguments, tc.id) end
        end
      elseif m.tool_calls ~= nil and m.tool_calls ~= json.null then
        warn("tool_calls is not a list: skipped")
      end
      if type(m.function_call) == "table" then add(m.function_call.name, m.function_call.arguments, nil) end
    elseif m.role == "tool" or m.role == "function" then
      result(m.tool_call_id, m.content)
    end
  end
  return steps
end

local function anthropic_steps(msgs, warn)
  local steps, by_id, pending = {}, {}, {}
  for _, m in ipairs(msgs) do
    if type(m) ~= "table" then
      warn("a message that is not an object: skipped")
    elseif type(m.content) == "table" then
      for _, b in ipairs(m.content) do
        if type(b) == "table" and b.type == "tool_use" and m.role ~= "user" then
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
          if s then s.observation = content_text(b.content) end
        end
      end
    end
  end
  return steps
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

-- read(path, fmt, out, warn): appends the file's trajectories to `out`.
-- fmt: "openai", "anthropic", "results" or nil (each line's own, the first
-- line that shows one decides for the file). warn(msg) gets "path:line: ...".
-- Returns the number of trajectories added, or nil and an error (a file
-- that cannot be read, or holds no usable conversation).
function M.read(path, fmt, out, warn)
  local f, err = io.open(path, "r")
  if not f then return nil, format("cannot read %s", tostring(err)) end
  local ln, added, skipped = 0, 0, 0
  for line in f:lines() do
    ln = ln + 1
    if line:find("%S") then
      local function lwarn(msg) warn(format("%s:%d: %s", path, ln, msg)) end
      local v, derr = json.decode(line)
      if v == nil then
        skipped = skipped + 1
        lwarn("not JSON (" .. tostring(derr) .. "): skipped")
      else
        local lf = line_format(v)
        if not fmt and lf then fmt = lf end
        local steps
        if fmt == "results" then
          if type(v) == "table" then steps = results_steps(v) end
          if not steps then skipped = skipped + 1 lwarn("not a results record with a trajectory: skipped") end
        elseif fmt == "openai" or fmt == "anthropic" then
          local msgs = messages_of(v)
          if not msgs then
            skipped = skipped + 1
            lwarn("not a conversation (an object with messages, or a list of messages): skipped")
          else
            steps = (fmt == "openai" and openai_steps or anthropic_steps)(msgs, lwarn)
          end
        elseif lf == nil then
          -- undecided yet: a conversation without tool calls adds nothing
          steps = messages_of(v) and {} or nil
          if not steps then skipped = skipped + 1 lwarn("not a conversation or a results record: skipped") end
        end
        if steps and #steps > 0 then
          local id = type(v) == "table" and (type(v.id) == "string" or type(v.id) == "number") and v.id
            or format("%s:%d", path, ln)
          out[#out + 1] = { id = id, steps = steps, query = first_user(v) }
          added = added + 1
        end
      end
    end
  end
  f:close()
  if added == 0 then
    return nil, format("%s: no usable conversation (%d lines, %d skipped; no tool call in the rest%s)", path, ln,
      skipped, fmt and ", read as " .. fmt or "")
  end
  return added
end

return M
