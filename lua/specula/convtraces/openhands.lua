-- specula.convtraces.openhands: an OpenHands event stream, one event a
-- line (the events of a conversation, as its event store or a trajectory
-- export holds them: `jq -c '.[]' trajectory.json` gives the lines), as
-- timed events for specula.convtraces.sessions. An event is
--   an action       {id, timestamp, source: "user"|"agent", action, args,
--                   message, tool_call_metadata: {function_name,
--                   tool_call_id, total_calls_in_response}}
--   an observation  {id, timestamp, source, observation, cause (the id of
--                   the action it answers), content, extras}
-- The person's message is a user "message" action; the agent's calls are
-- its other actions (run, read, edit, browse, ... by their function name);
-- "message" and "finish" actions of the agent are its text. Confirmation
-- mode's agent_state_changed observations (awaiting_user_confirmation, then
-- user_confirmed or running) time the person's approval of a pending call.
local M = { name = "openhands",
  expects = 'an OpenHands event line: {"id": N, "timestamp": ISO, "source": "user"|"agent"|"environment", '
    .. '"action": A, "args": {...}} or {"observation": O, "cause": N, ...}' }

function M.detect(v)
  return type(v) == "table" and v.id ~= nil and type(v.timestamp) == "string" and type(v.source) == "string"
    and (type(v.action) == "string" or type(v.observation) == "string")
end

local TEXT = { message = true, finish = true }
local NOT_CALLS = { system = true, recall = true, change_agent_state = true, null = true }

function M.events(v, ev, iso, st)
  local t = iso(v.timestamp)
  if not t then return end
  st.calls = st.calls or {}
  local args = type(v.args) == "table" and v.args or {}
  if type(v.action) == "string" then
    if v.source == "user" and v.action == "message" then
      ev({ kind = "prompt", t = t, text = type(args.content) == "string" and args.content or tostring(v.message or "") })
    elseif v.source == "agent" and TEXT[v.action] then
      local text = args.content or args.final_thought or args.thought or v.message
      ev({ kind = "text", t = t, text = type(text) == "string" and text or "" })
    elseif v.source == "agent" and not NOT_CALLS[v.action] then
      local meta = type(v.tool_call_metadata) == "table" and v.tool_call_metadata or {}
      local id = tostring(v.id)
      st.calls[id] = true
      ev({ kind = "call", t = t, id = id,
           tool = type(meta.function_name) == "string" and meta.function_name or v.action, args = args })
    end
  elseif type(v.observation) == "string" then
    local extras = type(v.extras) == "table" and v.extras or {}
    if v.observation == "agent_state_changed" then
      local state = extras.agent_state
      if state == "awaiting_user_confirmation" then
        st.awaiting = t
      elseif st.awaiting and (state == "user_confirmed" or state == "running" or state == "user_rejected") then
        ev({ kind = "approval", t = t, ms = t - st.awaiting })
        st.awaiting = nil
      end
    elseif v.cause ~= nil and st.calls[tostring(v.cause)] then
      ev({ kind = "result", t = t, id = tostring(v.cause), content = v.content })
    end
  end
end

return M
