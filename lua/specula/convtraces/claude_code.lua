-- specula.convtraces.claude_code: one line of a Claude Code session
-- transcript (~/.claude/projects/<project>/<session>.jsonl) as timed events
-- for specula.convtraces.sessions. A line is a JSON object with `type`
-- (user, assistant, system, progress, attachment, summary, ...), an ISO
-- `timestamp`, `isSidechain` and a `message` in the Anthropic shape:
--   assistant: content blocks text / thinking / tool_use {id, name, input}
--              (one block a line; the blocks of one reply share message.id)
--   user:      a string or text blocks (the person's prompt), or tool_result
--              {tool_use_id, content} blocks (a tool's answer)
--   system:    subtype "turn_duration" with durationMs: the time Claude Code
--              itself counts for the prompt's turn, which leaves out waits for
--              the person to approve a tool call (see sessions.lua)
-- Sidechain lines in a main transcript (a subagent's own conversation,
-- inside the Task call that ran it) and meta lines are left out: their time
-- is inside that call. A subagent's own file (all sidechain) is read as a
-- session of its own.
local M = { name = "claude-code",
  expects = 'a Claude Code transcript line: {"type": "user"|"assistant"|..., "timestamp": ISO, "message": {...}}' }

local KNOWN = { user = true, assistant = true, system = true, progress = true, attachment = true, summary = true,
  ["file-history-snapshot"] = true, ["permission-mode"] = true, ["ai-title"] = true, ["last-prompt"] = true,
  ["queue-operation"] = true }

function M.detect(v)
  return type(v) == "table" and type(v.type) == "string" and KNOWN[v.type] == true
    and (type(v.sessionId) == "string" or type(v.uuid) == "string" or v.type == "summary"
         or v.type == "file-history-snapshot" or v.type == "permission-mode")
end

-- Calls ev(e) for each event of the line (t: ms since the epoch, from iso).
function M.events(v, ev, iso, st)
  if v.isMeta == true then return end
  -- a subagent's own file (<session>/subagents/agent-*.jsonl) is sidechain
  -- throughout: its first message says which lines are the session's
  if (v.type == "user" or v.type == "assistant") and st.sidechain == nil then st.sidechain = v.isSidechain == true end
  if (v.isSidechain == true) ~= (st.sidechain == true) then return end
  local t = v.timestamp ~= nil and iso(v.timestamp) or nil
  local m = v.message
  -- a message without its time cannot be placed: said (its call was lost
  -- without a word, its result then paired with nothing)
  if t == nil and (v.type == "user" or v.type == "assistant") and type(m) == "table" then
    error(string.format("a%s %s line without its timestamp", v.type == "assistant" and "n" or "", v.type), 0)
  end
  if v.type == "system" and v.subtype == "turn_duration" and v.durationMs ~= nil then
    local d = v.durationMs
    -- (1e400 decodes to infinity: no time, nor is a negative one)
    if type(d) ~= "number" or not (d >= 0 and d < math.huge) then
      error("turn_duration's durationMs " .. tostring(d) .. " is not a number of milliseconds >= 0", 0)
    end
    ev({ kind = "end", t = t, active_ms = d })
  elseif v.type == "assistant" and type(m) == "table" and type(m.content) == "table" and t then
    for _, b in ipairs(m.content) do
      if type(b) == "table" and b.type == "tool_use" and type(b.name) == "string" then
        ev({ kind = "call", t = t, id = b.id, tool = b.name, args = type(b.input) == "table" and b.input or {},
             turn = m.id })
      elseif type(b) == "table" and b.type == "text" and type(b.text) == "string" and b.text ~= "" then
        ev({ kind = "text", t = t, text = b.text, turn = m.id })
      end
    end
  elseif v.type == "user" and type(m) == "table" and t then
    local c = m.content
    if type(c) == "string" then
      ev({ kind = "prompt", t = t, text = c })
    elseif type(c) == "table" then
      local texts = {}
      for _, b in ipairs(c) do
        if type(b) == "table" and b.type == "tool_result" then
          ev({ kind = "result", t = t, id = b.tool_use_id, content = b.content, is_error = b.is_error == true })
        elseif type(b) == "table" and b.type == "text" and type(b.text) == "string" then
          texts[#texts + 1] = b.text
        end
      end
      if #texts > 0 then ev({ kind = "prompt", t = t, text = table.concat(texts, "\n") }) end
    end
  end
end

return M
