-- specula.convtraces.conversations: the conversations format of
-- specula.convtraces (one conversation a line: {"messages": [...]} or a bare
-- list of OpenAI chat or Anthropic messages) as sessions for
-- specula.convtraces.sessions. It carries no times: every time is assumed,
-- from the conversation agent's default latency model
-- (specula.agents.DEFAULT_LATENCY): a model turn 500 ms + 12 ms per output
-- token (4 characters a token: the turn's text, tool names and arguments),
-- a tool call 300 ms (the calls of one turn in parallel: the turn's tool
-- phase is 300 ms however many), the person's replies 0. Its recorded time
-- is the same sum: `recorded` and `sequential` agree by construction.
local json = require "specula.json"

local M = { name = "conversations",
  expects = 'a conversation: {"messages": [...]} or a list of chat messages (OpenAI or Anthropic) with tool calls' }

local function messages_of(v)
  if type(v) ~= "table" then return nil end
  if type(v.messages) == "table" then return v.messages end
  if v[1] ~= nil and type(v[1]) == "table" and v[1].role ~= nil then return v end
  return nil
end

function M.detect(v) return messages_of(v) ~= nil end

-- One line's session (nil when the line is not a conversation).
function M.session(v, path, ln)
  local msgs = messages_of(v)
  if not msgs then return nil end
  local agents = require "specula.agents"
  local lat = agents.DEFAULT_LATENCY
  local m = lat.model
  msgs = agents.openai_messages(msgs)
  local out, calls = {}, {}
  local s = { format = M.name, path = path, msgs = out, calls = calls, recorded_ms = 0, model_ms = 0, tool_ms = 0,
              user_ms = 0, approval_ms = 0, prompts = 0, turns = 0, untimed = 0, assumed = true,
              id = (type(v.id) == "string" or type(v.id) == "number") and tostring(v.id) or ((path:match("[^/]*$") or path) .. ":" .. ln) }
  for _, msg in ipairs(msgs) do
    if type(msg) == "table" then
      local c = {}
      for k, x in pairs(msg) do c[k] = x end
      if msg.role == "assistant" then
        s.turns = s.turns + 1
        local chars = type(msg.content) == "string" and #msg.content or 0
        local tms, own, off = {}, {}, {}
        local tcs = {}
        for _, tc in ipairs(type(msg.tool_calls) == "table" and msg.tool_calls or {}) do
          local fn = type(tc) == "table" and tc["function"] or {}
          -- a call without a name is no call (as convtraces.read skips it)
          if type(fn) ~= "table" or type(fn.name) ~= "string" or fn.name == "" then goto next end
          local j = #tcs + 1
          local args = fn.arguments
          if type(args) == "string" then
            local d = args ~= "" and json.decode(args) or {}
            args = type(d) == "table" and d or { _text = args }
          elseif type(args) ~= "table" then
            args = {}
          end
          chars = chars + #tostring(fn.name or "") + #(json.encode(args) or "")
          -- parallel: the first call makes the phase, the others add nothing
          tms[j], own[j], off[j] = j == 1 and lat.tools.default_ms or 0, lat.tools.default_ms, 0
          tcs[j] = { id = tc.id, type = "function", ["function"] = { name = fn.name, arguments = args } }
          calls[#calls + 1] = { tool = tostring(fn.name), args = args, recorded_ms = lat.tools.default_ms, wait_ms = 0,
                                tool_ms = lat.tools.default_ms }
          if j == 1 then s.tool_ms = s.tool_ms + lat.tools.default_ms end
          ::next::
        end
        local model = m.base_ms + m.per_token_ms * math.ceil(chars / m.chars_per_token)
        s.model_ms = s.model_ms + model
        c.tool_calls = #tcs > 0 and tcs or nil
        c.specula_times = { model_ms = model, tool_ms = tms, call_ms = own, offset_ms = off }
      elseif msg.role == "user" then
        s.prompts = s.prompts + 1
      end
      out[#out + 1] = c
    end
  end
  s.recorded_ms = s.model_ms + s.tool_ms
  return s
end

return M
