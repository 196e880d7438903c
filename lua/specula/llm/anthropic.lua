-- specula.llm.anthropic: a streamed client for the Anthropic Messages API.
--
--   local c = anthropic.new{
--     base_url = os.getenv("ANTHROPIC_BASE_URL") or "https://api.anthropic.com",
--     api_key  = os.getenv("ANTHROPIC_API_KEY"),  -- default: the environment
--     model = "claude-...", version = "2023-06-01", max_tokens = 1024,
--     beta = { "..." },                         -- anthropic-beta values
--     timeout_ms, connect_timeout_ms, idle_timeout_ms, retry = {...}, headers = {...},
--     name = "anthropic", messages_url = nil,   -- full endpoint override
--   }
--
--   c:messages{ messages, system, tools, tool_choice, max_tokens, temperature,
--               top_p, top_k, stop_sequences, thinking, model, metadata, extra,
--               on_delta = fn(text), on_thinking = fn(text),
--               on_tool_name = fn(name, id, index),     -- at content_block_start
--               on_tool_input = fn(partial_json, index),
--               on_tool_call = fn(call) }               -- at content_block_stop
--     -> { content = text, thinking = text|nil, blocks = {...},
--          tool_calls = { {id, name, input, input_text, index, incomplete,
--          input_error}, ... }, stop_reason, stop_sequence, usage, model, id, raw }
--      | nil, err
--   c:chat{ messages = OpenAI-style list (system messages allowed), max_tokens,
--           temperature, model, tools, ... } -> the same result (content =
--     the text): lets an Anthropic model serve as a judge or speculator.
--
-- on_tool_name fires as soon as a tool_use block starts, before its input
-- has streamed: the early "tool name known" event action speculation uses.
-- Tool input arrives as input_json_delta fragments and is decoded only when
-- its block stops. A tool_use block cut off by max_tokens is reported with
-- incomplete = true and the input text so far. server_tool_use and
-- mcp_tool_use blocks (run by the provider, so not in tool_calls) get their
-- streamed input assembled the same way, in blocks[i].input and .raw.
local http = require "specula.http"
local sse = require "specula.sse"
local json = require "specula.json"
local retry = require "specula.llm.retry"
local common = require "specula.llm.common"

local type, tostring, tonumber, pairs, ipairs, error =
  type, tostring, tonumber, pairs, ipairs, error
local concat = table.concat
local find, lower = string.find, string.lower

-- what the shared constructor needs to know of this provider
local PROVIDER = { what = "specula.llm.anthropic.new", name = "anthropic",
  base_env = "ANTHROPIC_BASE_URL", base_url = "https://api.anthropic.com", key_env = "ANTHROPIC_API_KEY" }
local nonempty = common.nonempty
local M = {}
local Client = common.class()

function M.new(options)
  local self, opts = common.new(Client, options, PROVIDER)
  local base = self.base_url
  local beta = opts.beta
  if type(beta) == "string" then beta = { beta } end
  self.version = opts.version or "2023-06-01"
  self.max_tokens = opts.max_tokens or 1024
  self.beta = beta
  self.idle_timeout_ms = opts.idle_timeout_ms or 120000
  self.messages_url = opts.messages_url or (base:match("/v1$") and (base .. "/messages") or (base .. "/v1/messages"))
  local hp = retry.header_problem(self:_headers())  -- version and beta values too
  if hp then error("specula.llm.anthropic.new: " .. hp, 2) end
  return self
end

function Client:_headers()
  local h = { ["content-type"] = "application/json", accept = "text/event-stream",
              ["anthropic-version"] = self.version }
  if self.beta and #self.beta > 0 then h["anthropic-beta"] = concat(self.beta, ",") end
  return common.headers(self, h, "x-api-key")
end

----------------------------------------------------------------------------
-- stream assembly
----------------------------------------------------------------------------

local function bad(msg) return false, { msg = msg, retryable = false } end

local function merge_usage(st, u)
  if type(u) ~= "table" then return end
  st.usage = st.usage or {}
  for k, v in pairs(u) do
    if v ~= json.null then st.usage[k] = v end  -- message_delta usage is cumulative: latest wins
  end
end

local function block_at(st, index)
  local b = st.by_index[index]
  if not b then
    b = { type = "unknown", index = index, parts = {} }
    st.by_index[index] = b
    st.blocks[#st.blocks + 1] = b
  end
  return b
end

local function decode_input(text)
  if text:match("^%s*$") then return json.object({}) end
  local v, err = json.decode(text)
  if type(v) == "table" then return v end
  return nil, err or ("input is JSON " .. type(v) .. ", not an object")
end

-- Block types whose input streams as input_json_delta (any other block that
-- receives such deltas is assembled the same way).
local INPUT_BLOCKS = { tool_use = true, server_tool_use = true, mcp_tool_use = true }
local function has_input(b) return INPUT_BLOCKS[b.type] or b.json_input end

local function finish_tool(b)
  if b.finished then return end
  b.finished = true
  b.input_text = concat(b.parts)
  if b.input_text == "" and type(b.start_input) == "table" and next(b.start_input) ~= nil then
    b.input = b.start_input
    b.input_text = json.encode(b.start_input) or ""
  else
    b.input, b.input_error = decode_input(b.input_text)
  end
end

-- One decoded event; returns nil to go on, or false, failure to stop.
local function on_event(st, t, ev, cb)
  if t == "message_start" then
    local m = ev.message
    if type(m) == "table" then
      st.message = m
      if type(m.model) == "string" then st.model = m.model end
      if type(m.id) == "string" then st.id = m.id end
      merge_usage(st, m.usage)
    end
  elseif t == "content_block_start" then
    local idx = tonumber(ev.index) or #st.blocks
    local cbk = type(ev.content_block) == "table" and ev.content_block or {}
    local b = block_at(st, idx)
    b.type = tostring(cbk.type or "unknown")
    b.raw = cbk
    if b.type == "text" then
      if type(cbk.text) == "string" and cbk.text ~= "" then
        b.parts[#b.parts + 1] = cbk.text
        st.text[#st.text + 1] = cbk.text
        if cb.on_delta then st.delivered = true; cb.on_delta(cbk.text) end
      end
    elseif b.type == "thinking" then
      if type(cbk.thinking) == "string" and cbk.thinking ~= "" then b.parts[#b.parts + 1] = cbk.thinking end
    elseif INPUT_BLOCKS[b.type] then
      b.id, b.name, b.start_input = nonempty(cbk.id), nonempty(cbk.name), cbk.input
    end
    if b.type == "tool_use" then
      st.tools[#st.tools + 1] = b
      if cb.on_tool_name and b.name then
        st.delivered = true
        cb.on_tool_name(b.name, b.id, idx)
      end
    end
  elseif t == "content_block_delta" then
    local idx = tonumber(ev.index) or (#st.blocks - 1)
    local d = type(ev.delta) == "table" and ev.delta or {}
    local b = block_at(st, idx)
    local dt = d.type
    if dt == "text_delta" and type(d.text) == "string" then
      b.parts[#b.parts + 1] = d.text
      st.text[#st.text + 1] = d.text
      if b.type == "unknown" then b.type = "text" end
      if cb.on_delta and d.text ~= "" then st.delivered = true; cb.on_delta(d.text) end
    elseif dt == "input_json_delta" then
      local pj = d.partial_json
      if type(pj) == "string" and pj ~= "" then
        b.json_input = true
        b.parts[#b.parts + 1] = pj
        if cb.on_tool_input then st.delivered = true; cb.on_tool_input(pj, idx) end
      end
    elseif dt == "thinking_delta" and type(d.thinking) == "string" then
      b.parts[#b.parts + 1] = d.thinking
      st.thinking[#st.thinking + 1] = d.thinking
      if cb.on_thinking and d.thinking ~= "" then st.delivered = true; cb.on_thinking(d.thinking) end
    elseif dt == "signature_delta" and type(d.signature) == "string" then
      b.signature = (b.signature or "") .. d.signature
    end
    -- citations_delta and unknown delta types are ignored
  elseif t == "content_block_stop" then
    local idx = tonumber(ev.index) or (#st.blocks - 1)
    local b = block_at(st, idx)
    b.stopped = true
    if has_input(b) then finish_tool(b) end
    if b.type == "tool_use" then
      if cb.on_tool_call and b.input then
        st.delivered = true
        cb.on_tool_call({ id = b.id, name = b.name, input = b.input, input_text = b.input_text, index = idx })
      end
    end
  elseif t == "message_delta" then
    local d = type(ev.delta) == "table" and ev.delta or {}
    if type(d.stop_reason) == "string" then st.stop_reason = d.stop_reason end
    if type(d.stop_sequence) == "string" then st.stop_sequence = d.stop_sequence end
    merge_usage(st, ev.usage)
  elseif t == "message_stop" then
    st.stopped = true
  elseif t == "error" then
    local e = type(ev.error) == "table" and ev.error or {}
    return bad("error in stream: " .. tostring(e.type or "error") .. ": " ..
               retry.excerpt(tostring(e.message or ""), "text/plain", 300))
  end
  -- ping and unknown event types: nothing to do
  return nil
end

local function result_of(st)
  local blocks, calls = json.array({}), json.array({})
  for i, b in ipairs(st.blocks) do
    local out = { type = b.type, index = b.index }
    if b.type == "text" then
      out.text = concat(b.parts)
    elseif b.type == "thinking" then
      out.thinking = concat(b.parts)
      out.signature = b.signature
    elseif b.type == "tool_use" then
      if not b.finished then finish_tool(b) end
      local incomplete = (not b.stopped) or (st.stop_reason == "max_tokens" and b.input == nil)
      out.id, out.name, out.input, out.input_text = b.id, b.name, b.input, b.input_text
      out.incomplete = incomplete or nil
      calls[#calls + 1] = { id = b.id, name = b.name, input = b.input, input_text = b.input_text,
                            input_error = b.input_error, index = b.index, incomplete = incomplete or nil }
    elseif has_input(b) then
      -- server and MCP tool calls: the assembled input, not the {} of the
      -- block's start event
      if not b.finished then finish_tool(b) end
      local raw = {}
      for k, v in pairs(b.raw or {}) do raw[k] = v end
      raw.input = b.input or raw.input
      out.id, out.name, out.input, out.input_text = b.id, b.name, b.input, b.input_text
      out.input_error = b.input_error
      out.incomplete = (not b.stopped) or nil
      out.raw = raw
    else
      out.raw = b.raw
    end
    blocks[i] = out
  end
  local thinking = concat(st.thinking)
  local raw = st.message or {}
  raw.content = blocks
  raw.stop_reason = st.stop_reason
  raw.usage = st.usage
  return {
    content = concat(st.text),
    thinking = thinking ~= "" and thinking or nil,
    blocks = blocks,
    tool_calls = calls,
    stop_reason = st.stop_reason,
    stop_sequence = st.stop_sequence,
    usage = st.usage,
    model = st.model,
    id = st.id,
    raw = raw,
  }
end

local function new_state()
  return { blocks = {}, by_index = {}, tools = {}, text = {}, thinking = {}, delivered = false }
end

local function parse_stream(res, cb)
  local reader = sse.reader(res)
  local st = new_state()
  local n = 0
  while true do
    local ev, err = reader:next()
    if not ev then
      if err then
        reader:close()
        return false, { err = err, delivered = st.delivered }
      end
      break
    end
    if ev.data:find("%S") then
      n = n + 1
      local obj, jerr = json.decode(ev.data)
      if type(obj) ~= "table" then
        reader:close()
        return bad("malformed JSON in stream event " .. n .. " (" .. (ev.event ~= "" and ev.event or "message") ..
                   "): " .. tostring(jerr or ("JSON " .. type(obj) .. ", not an object")) ..
                   "; data starts \"" .. retry.excerpt(ev.data, "text/plain", 80) .. "\"")
      end
      local t = obj.type
      if type(t) ~= "string" then t = ev.event end
      local ok, f = on_event(st, t, obj, cb)
      if ok == false then
        reader:close()
        return false, f
      end
    end
  end
  reader:close()
  if not (st.stopped or st.stop_reason) then
    return false, { msg = "stream truncated: it ended without message_stop after " .. n .. " events" ..
                    (reader.truncated and " (the last event was cut off)" or ""),
                    delivered = st.delivered, retryable = not st.delivered }
  end
  return true, result_of(st)
end

-- A whole (non-streamed) Message object.
local function parse_message(body, cb)
  local obj, err = json.decode(body)
  if obj == nil then
    return bad("malformed JSON in response: " .. tostring(err) .. "; body starts \"" ..
               retry.excerpt(body, "text/plain", 80) .. "\"")
  end
  if type(obj) ~= "table" then return bad("unexpected response: JSON " .. type(obj)) end
  if obj.type == "error" or (type(obj.error) == "table") then
    return bad("error in response: " .. retry.describe({ status = "200", body = body }):gsub("^200 ?:? ?", ""))
  end
  if type(obj.content) ~= "table" then
    return bad("unexpected response: no content in \"" .. retry.excerpt(body, "text/plain", 120) .. "\"")
  end
  local st = new_state()
  on_event(st, "message_start", { message = obj }, cb)
  for i, blk in ipairs(obj.content) do
    if type(blk) == "table" then
      local input = blk.input
      local start = {}
      for k, v in pairs(blk) do start[k] = v end
      if INPUT_BLOCKS[start.type] then start.input = json.object({}) end
      if start.type == "text" then start.text = "" end
      on_event(st, "content_block_start", { index = i - 1, content_block = start }, cb)
      if blk.type == "text" then
        on_event(st, "content_block_delta", { index = i - 1, delta = { type = "text_delta", text = blk.text } }, cb)
      elseif blk.type == "thinking" then
        on_event(st, "content_block_delta", { index = i - 1, delta = { type = "thinking_delta", thinking = blk.thinking } }, cb)
      elseif INPUT_BLOCKS[blk.type] then
        local text = type(input) == "table" and (json.encode(input) or "{}") or tostring(input or "")
        on_event(st, "content_block_delta", { index = i - 1, delta = { type = "input_json_delta", partial_json = text } }, cb)
      end
      on_event(st, "content_block_stop", { index = i - 1 }, cb)
    end
  end
  on_event(st, "message_delta", { delta = { stop_reason = obj.stop_reason, stop_sequence = obj.stop_sequence } }, cb)
  st.stopped = true
  return true, result_of(st)
end

----------------------------------------------------------------------------
-- requests
----------------------------------------------------------------------------

local function normalize_tools(tools)
  local out = json.array({})
  for i, t in ipairs(tools) do
    if type(t) ~= "table" then error("specula.llm.anthropic: tools[" .. i .. "] must be a table", 4) end
    local fn = t["function"]
    if t.type == "function" and type(fn) == "table" then  -- OpenAI shape
      t = { name = fn.name, description = fn.description,
            input_schema = fn.parameters or json.object({ type = "object", properties = json.object({}) }) }
    elseif t.parameters and not t.input_schema then
      t = { name = t.name, description = t.description, input_schema = t.parameters }
    end
    out[i] = t
  end
  return out
end

local FIELDS = { "tool_choice", "temperature", "top_p", "top_k", "stop_sequences", "thinking",
                 "metadata", "service_tier" }

--- The request body messages() would send.
function Client:messages_body(req)
  if type(req) ~= "table" then error("specula.llm.anthropic: messages expects a request table", 3) end
  if type(req.messages) ~= "table" or #req.messages == 0 then
    error("specula.llm.anthropic: messages needs a non-empty messages list", 3)
  end
  local body = { model = req.model or self.model, max_tokens = req.max_tokens or self.max_tokens,
                 messages = req.messages, stream = true }
  if req.system ~= nil and req.system ~= "" then body.system = req.system end
  if type(req.tools) == "table" and #req.tools > 0 then body.tools = normalize_tools(req.tools) end
  for _, k in ipairs(FIELDS) do
    if req[k] ~= nil then body[k] = req[k] end
  end
  for _, extra in ipairs({ self.extra or false, req.extra or false }) do
    if extra then for k, v in pairs(extra) do body[k] = v end end
  end
  return body
end

function Client:messages(req)
  local body = self:messages_body(req)
  local text, eerr = json.encode(body)
  if not text then
    return nil, common.message(self, "cannot encode the request: " .. tostring(eerr))
  end
  local url = req.url or self.messages_url
  local cb = { on_delta = req.on_delta, on_thinking = req.on_thinking, on_tool_name = req.on_tool_name,
               on_tool_input = req.on_tool_input, on_tool_call = req.on_tool_call }
  local hopts = {
    method = "POST", url = url, headers = self:_headers(), body = text, stream = true,
    timeout_ms = self.timeout_ms, connect_timeout_ms = self.connect_timeout_ms,
    idle_timeout_ms = self.idle_timeout_ms,
  }
  local result, f, n, why = self.retry:run(function()
    local res, err = http.request(hopts)
    if not res then return false, { err = err } end
    if res.status < 200 or res.status >= 300 then
      return false, { status = res.status, headers = res.headers, body = common.error_body(res) }
    end
    local ct = lower(res.headers["content-type"] or "")
    if find(ct, "json", 1, true) and not find(ct, "event-stream", 1, true) then
      local b, rerr = res:read_all()
      if not b then return false, { err = rerr } end
      return parse_message(b, cb)
    end
    return parse_stream(res, cb)
  end)
  if result then return result end
  return nil, common.fail(self, f, n, why, "POST", url)
end

local function text_content(c)
  if type(c) == "string" then return c end
  if type(c) == "table" then
    local out = {}
    for _, p in ipairs(c) do
      if type(p) == "table" and type(p.text) == "string" then out[#out + 1] = p.text end
    end
    return concat(out)
  end
  return ""
end

--- OpenAI-style request -> Messages request (system messages become
-- `system`, tool results become tool_result blocks).
function M.from_openai(req)
  local system, msgs = {}, {}
  for _, m in ipairs(req.messages or {}) do
    if m.role == "system" or m.role == "developer" then
      system[#system + 1] = text_content(m.content)
    elseif m.role == "tool" then
      msgs[#msgs + 1] = { role = "user", content = json.array({
        { type = "tool_result", tool_use_id = m.tool_call_id, content = text_content(m.content) } }) }
    elseif m.role == "assistant" and type(m.tool_calls) == "table" and #m.tool_calls > 0 then
      local blocks = json.array({})
      local t = text_content(m.content)
      if t ~= "" then blocks[#blocks + 1] = { type = "text", text = t } end
      for _, tc in ipairs(m.tool_calls) do
        local fn = tc["function"] or {}
        local input = type(fn.arguments) == "table" and fn.arguments or json.decode(fn.arguments or "{}")
        blocks[#blocks + 1] = { type = "tool_use", id = tc.id, name = fn.name,
                                input = type(input) == "table" and input or json.object({}) }
      end
      msgs[#msgs + 1] = { role = "assistant", content = blocks }
    else
      msgs[#msgs + 1] = { role = m.role, content = m.content }
    end
  end
  local out = {}
  for k, v in pairs(req) do out[k] = v end
  out.messages = msgs
  if #system > 0 then out.system = concat(system, "\n\n") end
  if req.stop and not req.stop_sequences then
    out.stop_sequences = type(req.stop) == "string" and { req.stop } or req.stop
    out.stop = nil
  end
  return out
end

function Client:chat(req)
  if type(req) ~= "table" then error("specula.llm.anthropic: chat expects a request table", 2) end
  return self:messages(M.from_openai(req))
end

M.normalize_tools = normalize_tools
M.Client = Client
-- for the fuzz harness (spec/fuzz/fuzz_llm.c): stream assembly alone
M._parse_stream = parse_stream

return M
