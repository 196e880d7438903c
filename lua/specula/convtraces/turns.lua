-- specula.convtraces.turns: a timed conversation as columns, what
-- specula.convtraces.sessions makes of a log when it keeps digests (not
-- texts). A log of many calls (a 1 GB transcript is thousands) then keeps,
-- per call, a few numbers and strings in flat arrays, not the message
-- tables of the conversations format: the replay's memory stays flat in the
-- log's size. specula.agents.conversation takes it as a query's `messages`
-- and builds each step from it when it needs it, the same step its reading
-- of the equivalent messages gives (the messages a timed log's reader would
-- have made: an assistant turn with specula_times, its calls' results
-- after it, the person's prompts).
local json = require "specula.json"

local type, ipairs, canonical = type, ipairs, json.canonical

local M = {}

-- A call's arguments as the replay reads them (what agents.conversation
-- does with a message's tool_call arguments): a table; a JSON text
-- decoded, else { _text = it }; anything else {}.
function M.norm_args(args)
  if type(args) == "string" then
    local v = args ~= "" and json.decode(args) or {}
    return type(v) == "table" and v or { _text = args }
  elseif type(args) ~= "table" then
    return {}
  end
  return args
end

-- An empty conversation. T.columns marks it (a query's messages are either
-- a list of messages or this).
function M.new()
  return { columns = true, n = 0, widest = 0, tools = {},
           -- per turn (an assistant message): its text, model time, first
           -- call and number of calls (those with a tool name), the
           -- person's words after it (before the next turn)
           text = {}, model = {}, first = {}, ncalls = {}, said = {},
           -- per call: tool, arguments (canonical JSON), result, and the
           -- timed log's times (the step's share, its own, its offset)
           nc = 0, tool = {}, key = {}, obs = {}, tms = {}, own = {}, off = {} }
end

-- The person's message (a prompt): what follows the latest turn.
function M.user(T, text)
  if T.n > 0 then
    local prev = T.said[T.n]
    T.said[T.n] = prev and (prev .. "\n" .. text) or text
  end
end

-- An assistant turn: its text, the model's time to its decision, and its
-- calls in order, each { id, tool, args, obs, tms, own, off } (key: the
-- canonical JSON of norm_args(args), when known already; obs: the
-- result given right after it; a call answered by id takes the result of
-- the first call of the turn with that id, as the messages' reading does).
function M.turn(T, text, model_ms, calls)
  local n = T.n + 1
  T.n = n
  T.text[n], T.model[n], T.first[n] = text, model_ms, T.nc + 1
  if calls and #calls > T.widest then T.widest = #calls end
  local made, first_obs = 0, {}
  for _, c in ipairs(calls or {}) do
    if first_obs[c.id] == nil then first_obs[c.id] = c.obs or "" end
  end
  for _, c in ipairs(calls or {}) do
    local name = c.tool
    if type(name) == "string" and name ~= "" then
      made = made + 1
      local j = T.nc + 1
      T.nc = j
      if not T.tools[name] then T.tools[name] = true; T.tools[#T.tools + 1] = name end
      T.tool[j], T.key[j], T.obs[j] = name, c.key or canonical(M.norm_args(c.args)), first_obs[c.id]
      T.tms[j], T.own[j], T.off[j] = c.tms or false, c.own or false, c.off or false
    end
  end
  T.ncalls[n] = made
end

-- The steps of T for an agent: step i is (turn, call) in two arrays (call 0:
-- the turn as one step: a text turn, or a group; -1: the empty final answer
-- a conversation ending on calls gets). group: a turn of several calls is
-- one step (agents.conversation's parallel).
function M.index(T, group)
  local st_turn, st_call = {}, {}
  local n = 0
  for ti = 1, T.n do
    local made = T.ncalls[ti]
    if made == 0 or (group and made > 1) then
      n = n + 1
      st_turn[n], st_call[n] = ti, 0
    else
      for j = T.first[ti], T.first[ti] + made - 1 do
        n = n + 1
        st_turn[n], st_call[n] = ti, j
      end
    end
  end
  -- the last step is a final answer: a text turn that is the last turn
  if n == 0 or not (st_call[n] == 0 and T.ncalls[st_turn[n]] == 0 and st_turn[n] == T.n) then
    n = n + 1
    st_turn[n], st_call[n] = T.n, -1
  end
  return { n = n, turn = st_turn, call = st_call }
end

-- Step i as agents.conversation's steps are: { tool, key, obs, model_ms,
-- name_ms, tool_ms, call_ms, offset_ms } for a call, with members for a
-- group, { tool = reply_tool, reply = true, ... } for a text turn the
-- conversation goes on after, { final, model_ms } for the answer. A new
-- table each time (nothing per step is kept).
function M.step(T, ix, i, reply_tool, group_tool)
  if i < 1 or i > ix.n then return nil end
  local ti, j = ix.turn[i], ix.call[i]
  if j == -1 then return { final = "", model_ms = 0 } end
  local model = T.model[ti]
  if j > 0 then
    return { tool = T.tool[j], key = T.key[j], obs = T.obs[j], model_ms = j == T.first[ti] and model or 0,
             name_ms = j == T.first[ti] and model or 0, tool_ms = T.tms[j] or nil, call_ms = T.own[j] or nil,
             offset_ms = T.off[j] or 0 }
  end
  local made = T.ncalls[ti]
  if made == 0 then
    if ti == T.n then return { final = T.text[ti], model_ms = model } end
    local args = { text = T.text[ti] }
    return { tool = reply_tool, key = canonical(args), obs = T.said[ti] or "", model_ms = model, name_ms = model,
             reply = true }
  end
  -- the turn's calls, one step: they run side by side
  local members, list, obs, longest, timed = {}, {}, {}, 0, true
  for k = T.first[ti], T.first[ti] + made - 1 do
    local own, off = T.own[k] or nil, T.off[k] or 0
    members[#members + 1] = { tool = T.tool[k], key = T.key[k], obs = T.obs[k], tool_ms = own,
                              offset_ms = own and off or 0 }
    list[#list + 1] = { tool = T.tool[k], args = json.decode(T.key[k]) }
    obs[#obs + 1] = T.obs[k]
    if own then longest = math.max(longest, off + own) else timed = false end
  end
  local args = { calls = json.array(list) }
  return { tool = group_tool, key = canonical(args), obs = json.encode(json.array(obs)), model_ms = model,
           name_ms = model, members = members, tool_ms = timed and longest or nil }
end

-- The latest result of call (name, key) at a step up to i (a step's own,
-- or a member of its group), or nil: read from the columns, no step made.
function M.find(T, ix, i, name, key, reply_tool)
  for s = math.min(i, ix.n), 1, -1 do
    local ti, j = ix.turn[s], ix.call[s]
    if j > 0 then
      if T.tool[j] == name and T.key[j] == key then return T.obs[j] end
    elseif j == 0 then
      local made = T.ncalls[ti]
      if made == 0 then
        if name == reply_tool and ti < T.n and canonical({ text = T.text[ti] }) == key then return T.said[ti] or "" end
      else
        for k = T.first[ti], T.first[ti] + made - 1 do
          if T.tool[k] == name and T.key[k] == key then return T.obs[k] end
        end
      end
    end
  end
  return nil
end

return M
