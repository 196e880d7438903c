-- specula.agents: ready-made agents.
--
--   agents.conversation{ file =, latency =, speculate =, reply_tool =, predict =, policy =, parallel = }
--
-- A trace-driven agent: it replays recorded conversations (OpenAI chat or
-- Anthropic messages, one a line, as specula.convtraces reads them). Its
-- model turns are the recorded assistant turns and its tools return the
-- recorded results, so action speculation (a predictor firing the next call
-- while the "model" thinks) and SpecHop (threads running ahead on guessed
-- results) run over real behaviour, under the virtual clock, with a latency
-- model:
--
--   model turn   base_ms + per_token_ms x output tokens (+ per_input_token_ms x
--                context tokens), tokens = characters / chars_per_token; the
--                output is the turn's text, tool name and arguments. A streamed
--                tool name is announced (ctx.on_tool_name) after the text and
--                base time, as a streaming API would.
--   tool call    latency.tools[name] or latency.tools.default_ms: a number
--                (ms) or a law of specula.sim ({ "lognormal", mean, cv }, ...),
--                drawn per query and hop, so every configuration sees the
--                same times.
--   timed logs   an assistant message with specula_times = { model_ms,
--                tool_ms = { per call } } (what specula.convtraces.sessions
--                makes of an agent's own logs) takes those times instead: the
--                turn's model time, and each recorded call its own (a call
--                that differs from the recording: the tool's law above)
--   parallel     with parallel = true, a turn of several calls is one step
--                of the group tool GROUP_TOOL: the calls side by side, each
--                from its decision (specula_times' offset_ms and call_ms),
--                the step until the last ends; the engine runs one action a
--                step, so a call of the group a prediction started early
--                counts as running since then (agent.members_used)
--   user answer  a text turn followed by more of the conversation is the
--                action `reply_tool` (default "reply", args { text }): it
--                sends the text and observes the user's next message(s),
--                after latency.user_ms (default 0: the user's time is not the
--                agent's). The last text turn is the final answer.
--
-- A call at hop h returns the result recorded for that hop when (tool,
-- args) match the recording (so a promoted prediction is the recorded
-- result: the run stays lossless); any other call (a wrong prediction)
-- gets the latest earlier result of the same call, else a text saying the
-- recording has none. Every call made early (from an unverified state, or
-- predicted) is counted per tool in agent.early (the policy must keep
-- writes out of it).
--
-- opts.on_early(name, args, ctx), when given, sees each such call (what
-- was run early, per call: `specula whatif` classifies it).
--
-- opts.collect_mb, when given: a full collection each time the Lua heap
-- has grown by this many MB since the last one, checked at each step. A
-- replay's garbage is then bounded whatever its length; the collector's
-- own pacing lets it grow with what stays live (by as much, 4 to 16 MB), so
-- a peak would depend on the log's size (`specula whatif` gives 4).
--
-- Queries: `specula run ... --input CONVERSATIONS.jsonl` (the records carry
-- their messages), or any input whose ids name conversations of `file`.
-- agent.context(state) gives the messages the model saw at the state's
-- turn: predictors read them (ctx.messages).
local json = require "specula.json"
local lines_of = require("specula.internal.lines").lines   -- NUL-safe file:lines()
local sched = require "specula.internal.sched"
local turnslib = require "specula.convtraces.turns"

local type, ipairs, pairs, tostring, tonumber, error, format, concat, ceil =
  type, ipairs, pairs, tostring, tonumber, error, string.format, table.concat, math.ceil

local M = {}

-- The group tool of opts.parallel: a turn's calls as one step.
M.GROUP_TOOL = "specula_parallel"

local DEFAULT_LATENCY = {
  model = { base_ms = 500, per_token_ms = 12, per_input_token_ms = 0, chars_per_token = 4 },
  tools = { default_ms = 300 },
  user_ms = 0,
}
M.DEFAULT_LATENCY = DEFAULT_LATENCY

local function text_of(c)
  if type(c) == "string" then return c end
  if type(c) == "table" then
    local parts = {}
    for _, p in ipairs(c) do
      if type(p) == "table" and type(p.text) == "string" then parts[#parts + 1] = p.text
      elseif type(p) == "string" then parts[#parts + 1] = p end
    end
    return concat(parts, "\n")
  end
  return ""
end

-- Anthropic messages as OpenAI chat messages (one reading below).
local function from_anthropic(msgs)
  local out = {}
  for _, m in ipairs(msgs) do
    if type(m) == "table" and type(m.content) == "table" then
      local texts, calls = {}, {}
      for _, b in ipairs(m.content) do
        if type(b) == "table" then
          if b.type == "text" and type(b.text) == "string" then texts[#texts + 1] = b.text
          elseif b.type == "tool_use" and m.role == "assistant" then
            calls[#calls + 1] = { id = b.id, ["function"] = { name = b.name, arguments = b.input } }
          elseif b.type == "tool_result" then
            out[#out + 1] = { role = "tool", tool_call_id = b.tool_use_id, content = text_of(b.content) }
          end
        end
      end
      if m.role == "assistant" then
        out[#out + 1] = { role = "assistant", content = concat(texts, "\n"), tool_calls = #calls > 0 and calls or nil }
      elseif #texts > 0 then
        out[#out + 1] = { role = m.role, content = concat(texts, "\n") }
      end
    elseif type(m) == "table" then
      out[#out + 1] = m
    end
  end
  return out
end

local function is_anthropic(msgs)
  for _, m in ipairs(msgs) do
    if type(m) == "table" and type(m.content) == "table" then
      for _, b in ipairs(m.content) do
        if type(b) == "table" and (b.type == "tool_use" or b.type == "tool_result") then return true end
      end
    end
  end
  return false
end

-- A conversation's messages as OpenAI chat messages (Anthropic's converted).
function M.openai_messages(msgs)
  if is_anthropic(msgs) then return from_anthropic(msgs) end
  return msgs
end

-- ---- the latency model ---------------------------------------------------------

local function check_latency(lat)
  lat = lat or {}
  if type(lat) ~= "table" then error("specula.agents.conversation: latency must be a table", 3) end
  local model = {}
  for k, v in pairs(DEFAULT_LATENCY.model) do model[k] = v end
  if lat.model ~= nil then
    if type(lat.model) ~= "table" then error("specula.agents.conversation: latency.model must be a table", 3) end
    for k, v in pairs(lat.model) do
      if DEFAULT_LATENCY.model[k] == nil then
        error("specula.agents.conversation: latency.model." .. tostring(k) .. " is not a setting (base_ms, "
          .. "per_token_ms, per_input_token_ms, chars_per_token)", 3)
      end
      if type(v) ~= "number" or v < 0 or v ~= v or v == math.huge then
        error("specula.agents.conversation: latency.model." .. k .. " must be a number >= 0", 3)
      end
      model[k] = v
    end
  end
  if model.chars_per_token <= 0 then
    error("specula.agents.conversation: latency.model.chars_per_token must be > 0", 3)
  end
  local sim = require "specula.sim"
  local tools = {}
  local tl = lat.tools or {}
  if type(tl) ~= "table" then error("specula.agents.conversation: latency.tools must be a table", 3) end
  for k, v in pairs(tl) do
    if type(k) ~= "string" then error("specula.agents.conversation: latency.tools keys must be tool names", 3) end
    local ok, f = pcall(sim.law, v, "latency.tools." .. k)
    if not ok then error("specula.agents.conversation: " .. tostring(f):gsub("^specula.sim: ", ""), 3) end
    tools[k] = f
  end
  if not tools.default_ms then tools.default_ms = sim.law(DEFAULT_LATENCY.tools.default_ms, "default_ms") end
  local user = lat.user_ms or DEFAULT_LATENCY.user_ms
  local okl, uf = pcall(sim.law, user, "latency.user_ms")
  if not okl then error("specula.agents.conversation: " .. tostring(uf):gsub("^specula.sim: ", ""), 3) end
  return { model = model, tools = tools, user = uf }
end

local function tokens(chars, m) return ceil(chars / m.chars_per_token) end

-- ---- a conversation as steps -----------------------------------------------------

-- The steps of one conversation: { tool, args, key, obs, model_ms, name_ms,
-- upto } (upto: the messages the model saw), the last one { final, ... }.
-- With group_tool, a turn of several calls is one step of that tool (args
-- { calls = [{tool, args}, ...] }, its observation the JSON list of their
-- results) with members = { {tool, key, obs, tool_ms, offset_ms} }: they
-- run in parallel, each offset_ms after the decision (a timed log's
-- call_ms and offset_ms), the step lasting until the last ends.
local function steps_of(msgs, lat, reply_tool, group_tool)
  if is_anthropic(msgs) then msgs = from_anthropic(msgs) end
  local m = lat.model
  local steps = {}
  local ctx_chars = 0
  local function results_after(i, id, j)
    -- the tool message answering call `id` (else the j-th tool message after i)
    local nth = 0
    for k = i + 1, #msgs do
      local r = msgs[k]
      if type(r) == "table" then
        if r.role == "assistant" then break end
        if r.role == "tool" or r.role == "function" then
          nth = nth + 1
          if (id ~= nil and r.tool_call_id == id) or (id == nil and nth == j) then return text_of(r.content) end
        end
      end
    end
    if id ~= nil then return results_after(i, nil, j) end
    return nil
  end
  local last_assistant = 0
  for i, msg in ipairs(msgs) do
    if type(msg) == "table" and msg.role == "assistant" then last_assistant = i end
  end
  for i, msg in ipairs(msgs) do
    if type(msg) == "table" then
      if msg.role == "assistant" then
        local text = text_of(msg.content)
        local calls = type(msg.tool_calls) == "table" and msg.tool_calls or {}
        local out_chars = #text
        for _, tc in ipairs(calls) do
          local fn = type(tc) == "table" and tc["function"] or {}
          local a = fn.arguments
          local atext = type(a) == "string" and a or (json.encode(a or {}) or "")
          out_chars = out_chars + #tostring(fn.name or "") + #atext
        end
        local model_ms = m.base_ms + m.per_token_ms * tokens(out_chars, m) + m.per_input_token_ms * tokens(ctx_chars, m)
        local name_ms = m.base_ms + m.per_token_ms * tokens(#text, m) + m.per_input_token_ms * tokens(ctx_chars, m)
        -- a timed log's own times (specula.convtraces.sessions) instead of
        -- the model: the turn's time to its decision, each call's time; the
        -- name is known only with the decision
        local times = type(msg.specula_times) == "table" and msg.specula_times or nil
        if times and type(times.model_ms) == "number" then model_ms, name_ms = times.model_ms, times.model_ms end
        local made = 0
        local first = #steps + 1
        for j, tc in ipairs(calls) do
          local fn = type(tc) == "table" and tc["function"]
          if type(fn) == "table" and type(fn.name) == "string" and fn.name ~= "" then
            local args = fn.arguments
            if type(args) == "string" then
              local v = args ~= "" and json.decode(args) or {}
              args = type(v) == "table" and v or { _text = args }
            elseif type(args) ~= "table" then
              args = {}
            end
            made = made + 1
            steps[#steps + 1] = { tool = fn.name, args = args, key = json.canonical(args),
                                  obs = results_after(i, type(tc.id) == "string" and tc.id or nil, j) or "",
                                  model_ms = made == 1 and model_ms or 0, name_ms = made == 1 and name_ms or 0,
                                  upto = i - 1,
                                  tool_ms = times and type(times.tool_ms) == "table" and tonumber(times.tool_ms[j]) or nil,
                                  call_ms = times and type(times.call_ms) == "table" and tonumber(times.call_ms[j]) or nil,
                                  offset_ms = times and type(times.offset_ms) == "table" and tonumber(times.offset_ms[j])
                                    or 0 }
          end
        end
        if group_tool and made > 1 then
          -- the turn's calls, one step: they run side by side
          local members, list, obs, longest, timed = {}, {}, {}, 0, true
          for k = first, #steps do
            local st = steps[k]
            members[#members + 1] = { tool = st.tool, key = st.key, obs = st.obs, tool_ms = st.call_ms,
                                      offset_ms = st.call_ms and st.offset_ms or 0 }
            list[#list + 1] = { tool = st.tool, args = st.args }
            obs[#obs + 1] = st.obs
            if st.call_ms then longest = math.max(longest, st.offset_ms + st.call_ms) else timed = false end
          end
          for k = #steps, first, -1 do steps[k] = nil end
          local args = { calls = json.array(list) }
          steps[first] = { tool = group_tool, args = args, key = json.canonical(args), obs = json.encode(json.array(obs)),
                           model_ms = model_ms, name_ms = name_ms, upto = i - 1, members = members,
                           tool_ms = timed and longest or nil }
        end
        if made == 0 then
          if i < last_assistant then
            -- a text turn the conversation goes on after: the user answers
            local said = {}
            for k = i + 1, #msgs do
              local r = msgs[k]
              if type(r) == "table" then
                if r.role == "assistant" then break end
                if r.role == "user" then said[#said + 1] = text_of(r.content) end
              end
            end
            local args = { text = text }
            steps[#steps + 1] = { tool = reply_tool, args = args, key = json.canonical(args), obs = concat(said, "\n"),
                                  model_ms = model_ms, name_ms = name_ms, upto = i - 1, reply = true }
          else
            steps[#steps + 1] = { final = text, model_ms = model_ms, upto = i - 1 }
          end
        end
      end
      local c = msg.content
      ctx_chars = ctx_chars + (type(c) == "string" and #c or #text_of(c))
    end
  end
  if not steps[#steps] or steps[#steps].final == nil then
    steps[#steps + 1] = { final = "", model_ms = 0, upto = #msgs }
  end
  return { msgs = msgs, steps = steps }
end

-- ---- the agent ---------------------------------------------------------------------

-- The agent replays recorded conversations. Its state (R): opts, lat (the
-- latency), reply_tool, group_tool (opts.parallel), spec (opts.speculate)
-- and spec_law, by_id (`file`'s conversations by id), convs (parsed
-- conversations by messages table), by_key (by query id), early (calls run
-- early, by tool), tools.

local sim

-- The options but latency, file and speculate (their errors name the
-- caller of M.conversation: level 3).
local function check_opts(opts)
  local reply_tool = opts.reply_tool or "reply"
  if type(reply_tool) ~= "string" or reply_tool == "" then
    error("specula.agents.conversation: reply_tool must be a tool name", 3)
  end
  if opts.parallel ~= nil and type(opts.parallel) ~= "boolean" then
    error("specula.agents.conversation: parallel must be a boolean", 3)
  end
  if opts.collect_mb ~= nil and (type(opts.collect_mb) ~= "number" or not (opts.collect_mb > 0)) then
    error("specula.agents.conversation: collect_mb must be a number > 0", 3)
  end
  return reply_tool
end

-- `file`'s conversations by id (a line's id, else FILE:LINE).
local function load_file(file)
  local by_id = {}
  if file == nil then return by_id end
  if type(file) ~= "string" then error("specula.agents.conversation: file must be a path", 3) end
  local f, err = io.open(file, "r")
  if not f then error("specula.agents.conversation: cannot read " .. tostring(err), 3) end
  local ln = 0
  for line in lines_of(f) do
    ln = ln + 1
    if line:find("%S") then
      local v = json.decode(line)
      local msgs = type(v) == "table" and (type(v.messages) == "table" and v.messages or (v[1] ~= nil and v)) or nil
      if msgs then
        local id = type(v.id) == "string" and v.id or type(v.id) == "number" and tostring(v.id)
          or (file .. ":" .. ln)
        by_id[id] = msgs
      end
    end
  end
  f:close()
  return by_id
end

local function check_speculate(spec)
  if spec ~= nil and spec ~= "cache" and type(spec) ~= "table" then
    error("specula.agents.conversation: speculate must be \"cache\" or { p =, ms = }", 3)
  end
  if type(spec) == "table" and (type(spec.p) ~= "number" or spec.p < 0 or spec.p > 1) then
    error("specula.agents.conversation: speculate.p must be in [0, 1]", 3)
  end
end

-- The conversation of a query, parsed once per query id (the input
-- record's messages, else `file`'s).
local function conv_of(R, ctx)
  local rec = ctx.record
  local msgs = type(rec) == "table" and type(rec.messages) == "table" and rec.messages or R.by_id[tostring(ctx.id)]
  if not msgs then
    error(format("conversation agent: no recorded conversation for query '%s' (give --input a conversations file, "
      .. "or file = a file holding this id)", tostring(ctx.id)), 0)
  end
  local c = R.convs[msgs]
  if not c then
    if msgs.columns then
      -- a timed log kept as columns (specula.convtraces.turns): its
      -- steps are made one at a time, when asked for
      c = { T = msgs, ix = turnslib.index(msgs, R.group_tool ~= nil) }
    else
      c = steps_of(msgs, R.lat, R.reply_tool, R.group_tool)
    end
    c.early, c.used = {}, {}
    R.convs[msgs] = c
    R.by_key[tostring(ctx.id)] = c
  end
  return c
end

local function law_of(R, name) return R.lat.tools[name] or R.lat.tools.default_ms end

-- step i (1 first) of a conversation
local function step_at(R, c, i)
  if c.T then return turnslib.step(c.T, c.ix, i, R.reply_tool, R.group_tool) end
  return c.steps[i]
end

-- the recorded member (name, key) of a group step, if it is one, and its
-- place in the group
local function member_of(st, name, key)
  for j, m in ipairs(st and st.members or {}) do
    if m.tool == name and m.key == key then return m, j end
  end
  return nil
end

-- the result of (name, key) at hop: the recorded one, else the latest
-- earlier result of the same call
local function result_of(R, c, hop, name, key)
  local st = step_at(R, c, hop + 1)
  if st and st.tool == name and st.key == key then return st.obs end
  local m = member_of(st, name, key)
  if m then return m.obs end
  if c.T and name ~= R.group_tool then
    local obs = turnslib.find(c.T, c.ix, hop, name, key, R.reply_tool)
    if obs then return obs end
  else
    for i = hop, 1, -1 do
      local s = step_at(R, c, i)
      if s.tool == name and s.key == key then return s.obs end
      m = member_of(s, name, key)
      if m then return m.obs end
    end
  end
  return "(no recorded result for " .. name .. " with these arguments)"
end

local function count_early(R, name, args, ctx)
  R.early[name] = (R.early[name] or 0) + 1
  if R.opts.on_early then R.opts.on_early(name, args, ctx) end
end

-- The call of tool name: the recorded call takes its recorded time, a
-- member of the hop's group a prediction started its own, any other call
-- its tool's law (the reply tool: the user's).
local function tool_call(R, name)
  local law = law_of(R, name)
  return function(args, ctx)
    if ctx.speculative or ctx.predicted then count_early(R, name, args, ctx) end
    local c = conv_of(R, ctx)
    local hop = ctx.hop or 0
    local key = json.canonical(args)
    local st = step_at(R, c, hop + 1)
    local m, mj
    if ctx.predicted then m, mj = member_of(st, name, key) end
    if name == R.reply_tool then sim.wait(R.lat.user, ctx, "user", hop)
    elseif st and st.tool_ms and st.tool == name and st.key == key then
      if st.tool_ms > 0 then sched.sleep(st.tool_ms) end   -- the recorded call: its recorded time
    elseif m and m.tool_ms then
      -- a member of the hop's group started before the model decided it:
      -- the group call counts it as running since (the latest start at a
      -- hop is its committed thread's: a discarded one's comes before)
      local starts = c.early[hop] or {}
      c.early[hop] = starts
      starts[mj] = sched.now()
      if m.tool_ms > 0 then sched.sleep(m.tool_ms) end
    else sim.wait(law, ctx, "tool:" .. name, hop) end
    return result_of(R, c, hop, name, key)
  end
end

-- The group tool: the calls of one turn side by side. A recorded member
-- takes its recorded time from the decision (its offset, then its own
-- time); one a prediction started already runs since then (the engine
-- runs one action a step: it ended that prediction when the step decided
-- the group, which matches none; its time is what a promotion would have
-- kept); any other call its tool's law. Every member run early is seen
-- by on_early, member by member.
local function group_call(R, args, ctx)
  local c = conv_of(R, ctx)
  local hop = ctx.hop or 0
  local st = step_at(R, c, hop + 1)
  local recorded = st and st.members and st.tool == R.group_tool and st.key == json.canonical(args)
  local calls = type(args.calls) == "table" and args.calls or {}
  local now, starts = sched.now(), c.early[hop] or {}
  local longest, used, saved, tasks, obs = 0, 0, 0, {}, {}
  for j, call in ipairs(calls) do
    local name = type(call) == "table" and type(call.tool) == "string" and call.tool or "?"
    local margs = type(call) == "table" and type(call.args) == "table" and call.args or {}
    if ctx.speculative then count_early(R, name, margs, ctx) end
    local m = recorded and st.members[j]
    if m and m.tool_ms then
      local wait, t0 = m.offset_ms + m.tool_ms, starts[j]
      if t0 then
        wait = math.max(m.offset_ms, t0 + m.tool_ms - now)
        used, saved = used + 1, saved + math.min(now - t0, m.tool_ms)
      end
      if wait > longest then longest = wait end
      obs[j] = m.obs
    else
      tasks[#tasks + 1] = sched.spawn(sim.wait, law_of(R, name), ctx, "tool:" .. name .. ":" .. j, hop)
      obs[j] = result_of(R, c, hop, name, json.canonical(margs))
    end
  end
  -- the latest run of a hop is its committed thread's
  c.used[hop] = { n = used, saved_ms = saved }
  if longest > 0 then sched.sleep(longest) end
  if #tasks > 0 then sched.wait_all(tasks) end
  return json.encode(json.array(obs))
end

-- The speculator of tool name (opts.speculate): "cache", the result of the
-- same call earlier in the conversation; { p, ms }, the recorded result
-- with probability p after ms.
local function speculator(R, name)
  local spec = R.spec
  return function(args, ctx)
    local c = conv_of(R, ctx)
    local hop = ctx.hop or 0
    local st = step_at(R, c, hop + 1)
    local key = json.canonical(args)
    if spec == "cache" then
      -- a cache: the result of the same call earlier in the conversation
      for i = hop, 1, -1 do
        local s = step_at(R, c, i)
        if s.tool == name and s.key == key then return s.obs end
      end
      return nil
    end
    sim.wait(R.spec_law, ctx, "spec:" .. name, hop)
    if st and st.tool == name and st.key == key then
      -- a group's list is right when each of its results is, each
      -- guessed with probability p
      local right = true
      for j, x in ipairs(st.members or { st }) do
        local label = st.members and ("spec_ok:" .. x.tool .. ":" .. j) or ("spec_ok:" .. name)
        if sim.draw(ctx, label, 0, hop) >= spec.p then right = false end
      end
      if right then return st.obs end
    end
    return "(a wrong guess)"
  end
end

-- Tools: every tool the conversations call (from `file`, and as the
-- records bring new ones), and the reply tool.
local function add_tool(R, name)
  local tools = R.tools
  if tools[name] then return end
  local t = { call = name == R.group_tool and function(args, ctx) return group_call(R, args, ctx) end
                     or tool_call(R, name) }
  if name ~= R.reply_tool and R.spec ~= nil then t.speculate = speculator(R, name) end
  tools[name] = t
end

local function make_tools(R)
  R.tools = {}
  add_tool(R, R.reply_tool)
  if R.group_tool then add_tool(R, R.group_tool) end
  for _, msgs in pairs(R.by_id) do
    for _, s in ipairs(steps_of(msgs, R.lat, R.reply_tool, R.group_tool).steps) do
      if s.tool then add_tool(R, s.tool) end
      for _, m in ipairs(s.members or {}) do add_tool(R, m.tool) end
    end
  end
  for _, name in ipairs(R.opts.tools or {}) do add_tool(R, name) end
end

-- agent.init: the query's conversation, whose tools must all be known.
local function init(R, ctx)
  local c = conv_of(R, ctx)
  local tools, reply_tool, group_tool = R.tools, R.reply_tool, R.group_tool
  -- the tools of a conversation that came with its record
  local function known(name)
    if name and not tools[name] then
      error(format("conversation agent: query '%s' calls '%s', a tool this agent was not built with (give its "
        .. "conversations as file =, or list it in tools = {...})", tostring(ctx.id), name), 0)
    end
  end
  if c.T then
    for j = 1, c.T.nc do known(c.T.tool[j]) end
    -- a text turn the conversation goes on after is the reply tool's
    for ti = 1, c.T.n - 1 do if c.T.ncalls[ti] == 0 then known(reply_tool) end end
    if group_tool then
      for ti = 1, c.T.n do if c.T.ncalls[ti] > 1 then known(group_tool) end end
    end
  else
    for _, s in ipairs(c.steps) do
      for _, x in ipairs(s.members or { s }) do known(x.tool) end
    end
  end
  return { id = tostring(ctx.id), i = 1 }
end

-- agent.step: the recorded step at state.i, in its recorded time.
local function step(R, state, ctx)
  if R.collect_kb and collectgarbage("count") > R.collected_kb + R.collect_kb then
    collectgarbage()
    R.collected_kb = collectgarbage("count")
  end
  local c = conv_of(R, ctx)
  local st = step_at(R, c, state.i)
  -- this thread's predictions of the hop's group come after: the starts
  -- of one that went before it (a discarded thread's) are not its own
  if st.members then c.early[state.i - 1] = nil end
  if st.final ~= nil then
    if st.model_ms > 0 then sched.sleep(st.model_ms) end
    return { final = st.final }
  end
  -- the name streams after the text, then the arguments
  if st.model_ms > 0 then
    local first = math.min(st.name_ms, st.model_ms)
    if first > 0 then sched.sleep(first) end
    if not st.reply and ctx.on_tool_name then
      -- a group's calls are named one by one, as a stream names them
      for _, x in ipairs(st.members or { st }) do ctx.on_tool_name(x.tool) end
    end
    if st.model_ms > first then sched.sleep(st.model_ms - first) end
  end
  return { segment = "", action = { tool = st.tool, args = json.decode(st.key) } }
end

-- agent.context: the messages before the step at state.i.
local function context(R, state)
  local c = R.by_key[state.id]
  -- (a timed log kept as columns keeps no messages)
  if not c or c.T then return nil end
  local st = c.steps[state.i]
  local n = st and st.upto or #c.msgs
  local out = {}
  for i = 1, n do out[i] = c.msgs[i] end
  return out
end

-- agent.recorded(id, hop): the recorded step the query takes at hop (0
-- first) as { tool, args } (nil at its final answer, or before the query
-- started): what a perfect predictor proposes (the bound rows of
-- `specula whatif` and examples/real_traces)
-- (a group step's also carries calls = { its members, the same way })
local function recorded(R, id, hop)
  local c = R.by_key[tostring(id)]
  local st = c and step_at(R, c, (hop or 0) + 1)
  if not st or not st.tool then return nil end
  local calls
  if st.members then
    calls = {}
    for i, m in ipairs(st.members) do
      calls[i] = { tool = m.tool, args = json.decode(m.key), tool_ms = m.tool_ms, model_ms = st.model_ms }
    end
  end
  return { tool = st.tool, args = json.decode(st.key), tool_ms = st.tool_ms, model_ms = st.model_ms, calls = calls }
end

-- agent.members_used(id): the members of the query's groups that ran
-- from a prediction started before the model decided them (committed
-- path), and the time those starts saved
local function members_used(R, id)
  local c = R.by_key[tostring(id)]
  local n, saved = 0, 0
  for _, u in pairs(c and c.used or {}) do n, saved = n + u.n, saved + u.saved_ms end
  return n, saved
end

function M.conversation(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("specula.agents.conversation: expected a table of options", 2) end
  local lat = check_latency(opts.latency)
  local reply_tool = check_opts(opts)
  sim = sim or require "specula.sim"
  local R = { opts = opts, lat = lat, reply_tool = reply_tool, group_tool = opts.parallel and M.GROUP_TOOL or nil,
              by_id = load_file(opts.file), spec = opts.speculate, early = {},
              convs = setmetatable({}, { __mode = "k" }), by_key = {} }
  check_speculate(R.spec)
  if type(R.spec) == "table" then R.spec_law = sim.law(R.spec.ms or 50, "speculate.ms") end
  make_tools(R)
  local agent = { name = "conversation", early = R.early, tools = R.tools }
  agent.init = function(query, ctx) return init(R, ctx) end
  R.collect_kb = opts.collect_mb and opts.collect_mb * 1024 or nil
  if R.collect_kb then
    -- from a collected heap: what came before the agent is not counted live
    collectgarbage()
    R.collected_kb = collectgarbage("count")
  end
  agent.step = function(state, ctx) return step(R, state, ctx) end
  agent.update = function(state, step_, obs, ctx)
    return { id = state.id, i = state.i + 1 }
  end
  agent.context = function(state) return context(R, state) end
  agent.recorded = function(id, hop) return recorded(R, id, hop) end
  agent.members_used = function(id) return members_used(R, id) end
  agent.verify = require("specula.verify").exact
  agent.predict = opts.predict
  agent.policy = opts.policy
  agent.match = opts.match
  return require("specula.internal.protocol").agent(agent)
end

return M
