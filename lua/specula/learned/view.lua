-- specula.learned.view: a view, the conversation as the model saw it at a
-- turn (its first n events): the sequence of events, the calls so far, the
-- last of each kind, and per view caches of channels' values.
local common = require "specula.learned.common"
local sources = require "specula.learned.sources"

local type, ipairs, tostring = type, ipairs, tostring
local sub = string.sub
local SEP, vkey = common.SEP, common.vkey
local outcome, event_sources = sources.outcome, sources.event_sources

local M = {}

local function new_view(events, n)
  local v = { events = events, n = n, chans = {}, used = {} }
  local calls, toks, last = {}, {}, {}
  for i = 1, n do
    local e = events[i]
    local k = e.kind
    if k == "user" then toks[#toks + 1] = "U"; last.user = i
    elseif k == "assistant" then toks[#toks + 1] = "A"; last.assistant = i
    elseif k == "call" then
      calls[#calls + 1] = i
      toks[#toks + 1] = "C" .. tostring(e.tool)
    elseif k == "result" then
      last.result = i
      -- a call's token carries its result's outcome
      if #toks > 0 and toks[#toks]:sub(1, 1) == "C" then toks[#toks] = toks[#toks] .. "/" .. outcome(e) end
    end
  end
  v.calls, v.toks, v.last = calls, toks, last
  return v
end

-- The last thing the model did (its text or a call): what came after it is
-- new to it.
local function last_act(view)
  local act = view.act
  if act then return act end
  act = 0
  for i = view.n, 1, -1 do
    local k = view.events[i].kind
    if k == "assistant" or k == "call" then act = i break end
  end
  view.act = act
  return act
end

-- A channel's distinct values at this view, newest event first, each with
-- the event it came from.
local function chan_values(view, key)
  local l = view.chans[key]
  if l then return l end
  l = {}
  local seen = {}
  local kind = sub(key, 1, 1)
  local want = kind == "U" and "user" or kind == "S" and "assistant" or kind == "A" and "call" or "result"
  local events = view.events
  for i = view.n, 1, -1 do
    local e = events[i]
    if e.kind == want then
      local vals = event_sources(e).ch[key]
      if vals then
        for _, x in ipairs(vals) do
          local vk = vkey(x)
          if vk and not seen[vk] then
            seen[vk] = true
            l[#l + 1] = { v = x, ev = i, k = vk }
          end
        end
      end
    end
  end
  view.chans[key] = l
  return l
end

-- Values of (tool, arg) in the calls so far: a "next unused" source skips them.
local function used_set(view, tool, arg)
  local key = tool .. SEP .. arg
  local s = view.used[key]
  if s then return s end
  s = {}
  local events = view.events
  for _, i in ipairs(view.calls) do
    local e = events[i]
    if e.tool == tool and type(e.args) == "table" then
      local x = e.args[arg]
      if x ~= nil then
        local vk = vkey(x)
        if vk then s[vk] = true end
      end
    end
  end
  view.used[key] = s
  return s
end

M.new_view, M.last_act, M.chan_values, M.used_set = new_view, last_act, chan_values, used_set

return M
