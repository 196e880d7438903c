-- specula.convtraces.codex: one line of a Codex CLI rollout
-- (~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl) as timed events for
-- specula.convtraces.sessions. A line is {"timestamp": ISO, "type": T,
-- "payload": {...}} with T:
--   session_meta    the session's id, cwd, CLI version
--   turn_context    the turn's settings (approval_policy, sandbox_policy)
--   response_item   what the model saw or said: message {role, content},
--                   reasoning, function_call {name, arguments (a JSON
--                   string), call_id}, function_call_output {call_id,
--                   output}, custom_tool_call {name, input, call_id} and its
--                   custom_tool_call_output
--   event_msg       the CLI's events: user_message (the person's prompt),
--                   task_started / task_complete (a prompt's turn),
--                   exec_command_end {call_id, duration {secs, nanos}}: how
--                   long the command itself ran (see sessions.lua: approval)
-- The developer and environment messages at the start (response_item
-- messages with role user/developer) are context, not prompts: a prompt is
-- the user_message event.
local json = require "specula.json"
local stable_json = require("specula.convtraces.common").stable_json

local M = { name = "codex",
  expects = 'a Codex CLI rollout line: {"timestamp": ISO, "type": "session_meta"|"response_item"|"event_msg"|"turn_context", "payload": {...}}' }

local KNOWN = { session_meta = true, response_item = true, event_msg = true, turn_context = true, compacted = true }

function M.detect(v)
  return type(v) == "table" and type(v.type) == "string" and KNOWN[v.type] == true and type(v.payload) == "table"
end

local function text_of(content)
  if type(content) == "string" then return content end
  local out = {}
  if type(content) == "table" then
    for _, p in ipairs(content) do
      if type(p) == "table" and type(p.text) == "string" then out[#out + 1] = p.text end
    end
  end
  return table.concat(out, "\n")
end

function M.events(v, ev, iso)
  local t = v.timestamp ~= nil and iso(v.timestamp) or nil
  local p = v.payload
  if not t then return end
  if v.type == "session_meta" then
    ev({ kind = "meta", t = t, id = type(p.id) == "string" and p.id or nil })
  elseif v.type == "event_msg" then
    if p.type == "user_message" then
      ev({ kind = "prompt", t = t, text = type(p.message) == "string" and p.message or "" })
    elseif p.type == "task_complete" then
      ev({ kind = "end", t = t })
    elseif p.type == "exec_command_end" and type(p.duration) == "table" then
      local d = p.duration
      local ms = (tonumber(d.secs) or 0) * 1000 + (tonumber(d.nanos) or 0) / 1e6
      if not (ms >= 0 and ms < math.huge) then
        error("exec_command_end's duration " .. tostring(ms) .. " ms is not a number of milliseconds >= 0", 0)
      end
      ev({ kind = "exec", t = t, id = p.call_id, exec_ms = ms })
    end
  elseif v.type == "response_item" then
    local ty = p.type
    if ty == "function_call" or ty == "custom_tool_call" then
      local args = {}
      local raw = ty == "function_call" and p.arguments or p.input
      if type(raw) == "string" then
        local d = raw ~= "" and json.decode(raw) or {}
        args = type(d) == "table" and d or { input = raw }
      elseif type(raw) == "table" then
        args = raw
      end
      ev({ kind = "call", t = t, id = p.call_id, tool = type(p.name) == "string" and p.name or "?", args = args })
    elseif ty == "function_call_output" or ty == "custom_tool_call_output" then
      local out = p.output
      if type(out) == "table" then out = type(out.content) == "string" and out.content or stable_json(out) end
      ev({ kind = "result", t = t, id = p.call_id, content = out })
    elseif ty == "message" and p.role == "assistant" then
      local text = text_of(p.content)
      if text ~= "" then ev({ kind = "text", t = t, text = text }) end
    end
  end
end

return M
