-- specula.llm.openai: a client for OpenAI-compatible chat endpoints (OpenAI,
-- vLLM, llama.cpp server, Ollama's /v1, LM Studio, most proxies).
--
--   local c = openai.new{
--     base_url = os.getenv("OPENAI_BASE_URL") or "https://api.openai.com/v1",
--     api_key  = os.getenv("OPENAI_API_KEY"),  -- default: the environment
--     model = "gpt-4o-mini", embedding_model = nil,
--     timeout_ms = 600000, connect_timeout_ms = 10000,
--     idle_timeout_ms = 120000 (streams; whole responses have none by default),
--     retry = { max_retries = 3, ... },        -- see specula.llm.retry (false: none)
--     headers = { ... },                       -- extra request headers
--     name = "openai",                         -- prefix of error messages
--     chat_url = nil, embeddings_url = nil,    -- full endpoint overrides
--     include_usage = true,                    -- send stream_options.include_usage
--   }
--
--   c:chat{ messages, tools, tool_choice, max_tokens, temperature, top_p, stop,
--           seed, model, stream, on_delta = fn(text), on_reasoning = fn(text),
--           on_tool_name = fn(name, id, index), extra = {...} }
--     -> { content, reasoning, tool_calls = { {id, name, arguments,
--          arguments_text, arguments_error, index}, ... }, finish_reason,
--          usage, model, id, raw }
--      | nil, err
--     stream defaults to true when a callback is given. Streamed tool calls
--     are assembled by index (an empty id counts as absent; a new id at an
--     index holding another id starts a new call); arguments may arrive
--     whole, in fragments or as a JSON object. on_tool_name fires once per
--     call, as soon as its name is known.
--   c:embed{ input = "text" | {"a", "b"}, model = ... } -> { vec1, vec2, ... } | nil, err
--   c:embedder() -> function(list) -> vectors | nil, err (for verify.cosine,
--     terminate.retriever)
--   openai.assistant_message(result), openai.tool_message(call, content):
--     history messages for the next turn.
--
-- Errors are "openai: <what> (POST <endpoint>, after N attempts)". The API
-- key and request headers never appear in them: every message is scrubbed.
local http = require "specula.http"
local sse = require "specula.sse"
local json = require "specula.json"
local retry = require "specula.llm.retry"
local common = require "specula.llm.common"

local type, tostring, tonumber, pairs, ipairs, error, pcall =
  type, tostring, tonumber, pairs, ipairs, error, pcall
local concat, sort = table.concat, table.sort
local find, lower = string.find, string.lower

-- what the shared constructor needs to know of this provider
local PROVIDER = { what = "specula.llm.openai.new", name = "openai",
  base_env = "OPENAI_BASE_URL", base_url = "https://api.openai.com/v1", key_env = "OPENAI_API_KEY" }
local nonempty = common.nonempty
local M = {}
local Client = common.class()

function M.new(options)
  local self, opts = common.new(Client, options, PROVIDER)
  local base = self.base_url
  self.embedding_model = opts.embedding_model
  self.idle_timeout_ms = opts.idle_timeout_ms  -- default: 120 s for streams, none otherwise
  self.max_body_bytes = opts.max_body_bytes
  self.chat_url = opts.chat_url or (base .. "/chat/completions")
  self.embeddings_url = opts.embeddings_url or (base .. "/embeddings")
  self.include_usage = opts.include_usage ~= false
  return self
end

function Client:_headers(stream)
  return common.headers(self, { ["Content-Type"] = "application/json",
                                Accept = stream and "text/event-stream" or "application/json" },
                        "Authorization", "Bearer ")
end

----------------------------------------------------------------------------
-- response assembly (shared by streamed and whole responses)
----------------------------------------------------------------------------

local function new_state(cb)
  return { content = {}, reasoning = {}, refusal = {}, calls = {}, by_index = {}, by_id = {},
           next_index = 0, cb = cb or {}, delivered = false }
end

-- One tool-call delta (or a whole tool call) into the state.
local function add_tool_delta(st, tc, pos)
  if type(tc) ~= "table" then return end
  local fn = tc["function"]
  if type(fn) ~= "table" then fn = tc end
  local id = nonempty(tc.id)
  local name = nonempty(fn.name)
  local idx = tonumber(tc.index)
  if idx == nil then
    if id and st.by_id[id] then idx = st.by_id[id].index
    elseif pos then idx = pos
    elseif id or name then idx = st.next_index
    else idx = st.last_index or 0 end
  end
  local call = st.by_index[idx]
  if call and ((id and call.id and call.id ~= id) or
               (name and call.name and call.name ~= name and not (id and id == call.id))) then
    call = nil  -- a new call reusing the index
  end
  if not call then
    call = { index = idx, parts = {}, len = 0 }
    st.calls[#st.calls + 1] = call
    st.by_index[idx] = call
    if idx >= st.next_index then st.next_index = idx + 1 end
  end
  st.last_index = idx
  if id and not call.id then call.id = id; st.by_id[id] = call end
  if name and not call.name then call.name = name end
  local args = fn.arguments
  if args == nil then args = fn.input end
  if type(args) == "string" then
    if args ~= "" then
      -- some servers repeat the complete text in a last chunk: skip the copy
      if not (call.len > 0 and #args == call.len and args == concat(call.parts)) then
        call.parts[#call.parts + 1] = args
        call.len = call.len + #args
      end
    end
  elseif type(args) == "table" then
    if call.len == 0 and not call.object then
      call.object = args
    else
      local s = json.encode(args) or ""
      call.parts[#call.parts + 1] = s
      call.len = call.len + #s
    end
  end
  if call.name and not call.announced then
    call.announced = true
    local f = st.cb.on_tool_name
    if f then
      st.delivered = true
      f(call.name, call.id, call.index)
    end
  end
end

local function text_of_content(c)
  if type(c) == "string" then return c end
  if type(c) == "table" then  -- a list of content parts
    local out = {}
    for _, p in ipairs(c) do
      if type(p) == "string" then out[#out + 1] = p
      elseif type(p) == "table" and type(p.text) == "string" then out[#out + 1] = p.text end
    end
    return concat(out)
  end
  return nil
end

local function add_delta(st, d)
  local cb = st.cb
  local c = text_of_content(d.content)
  if c and c ~= "" then
    st.content[#st.content + 1] = c
    if cb.on_delta then st.delivered = true; cb.on_delta(c) end
  end
  local r = d.reasoning_content
  if type(r) ~= "string" then r = d.reasoning end
  if type(r) == "string" and r ~= "" then
    st.reasoning[#st.reasoning + 1] = r
    if cb.on_reasoning then st.delivered = true; cb.on_reasoning(r) end
  end
  if type(d.refusal) == "string" and d.refusal ~= "" then st.refusal[#st.refusal + 1] = d.refusal end
  local tcs = d.tool_calls
  if type(tcs) == "table" then
    for i, tc in ipairs(tcs) do add_tool_delta(st, tc, st.whole and (i - 1) or nil) end
  end
  if type(d.function_call) == "table" then  -- the legacy single-call form
    add_tool_delta(st, { index = 0, ["function"] = d.function_call })
  end
end

local function add_chunk(st, obj)
  if type(obj.model) == "string" then st.model = obj.model end
  if type(obj.id) == "string" then st.id = obj.id end
  if type(obj.usage) == "table" then st.usage = obj.usage end
  local choices = obj.choices
  if type(choices) ~= "table" then return end
  for _, ch in ipairs(choices) do
    if type(ch) == "table" and (tonumber(ch.index) or 0) == 0 then
      local d = ch.delta
      if type(d) ~= "table" then d = ch.message end
      if type(d) == "table" then add_delta(st, d) end
      if type(ch.text) == "string" and ch.text ~= "" then add_delta(st, { content = ch.text }) end
      local fr = ch.finish_reason
      if type(fr) == "string" and fr ~= "" then st.finish = fr end
    end
  end
end

-- Decode final argument text: an object, a double-encoded object, or an error.
local function decode_args(text)
  if text:match("^%s*$") then return json.object({}), nil end
  local v, err = json.decode(text)
  if type(v) == "string" then
    local inner = json.decode(v)
    if type(inner) == "table" then return inner end
  end
  if type(v) == "table" then return v end
  return nil, err or ("arguments are JSON " .. type(v) .. ", not an object")
end

local function finish(st, raw)
  local calls = json.array({})
  for i, c in ipairs(st.calls) do
    local text, args, aerr
    if c.object then
      args = c.object
      text = json.encode(args) or ""
    else
      text = concat(c.parts)
      args, aerr = decode_args(text)
    end
    calls[i] = { id = c.id or ("call_" .. tostring(c.index)), name = c.name, arguments = args,
                 arguments_text = text, arguments_error = aerr, index = c.index,
                 id_generated = c.id == nil or nil }
  end
  local reasoning = concat(st.reasoning)
  local refusal = concat(st.refusal)
  return {
    content = concat(st.content),
    reasoning = reasoning ~= "" and reasoning or nil,
    refusal = refusal ~= "" and refusal or nil,
    tool_calls = calls,
    finish_reason = st.finish,
    usage = st.usage,
    model = st.model,
    id = st.id,
    raw = raw,
  }
end

local function bad(msg) return false, { msg = msg, retryable = false } end

-- A whole chat.completion body -> true, result | false, failure.
local function parse_completion(body, cb)
  local obj, err = json.decode(body)
  if obj == nil then
    return bad("malformed JSON in response: " .. tostring(err) .. "; body starts \"" ..
               retry.excerpt(body, "text/plain", 80) .. "\"")
  end
  if type(obj) ~= "table" then return bad("unexpected response: JSON " .. type(obj) .. ", not an object") end
  if obj.error ~= nil and obj.error ~= json.null then
    return bad("error in response: " .. retry.describe({ status = "200", body = body }):gsub("^200 ?:? ?", ""))
  end
  if type(obj.choices) ~= "table" or type(obj.choices[1]) ~= "table" then
    return bad("unexpected response: no choices in \"" .. retry.excerpt(body, "text/plain", 120) .. "\"")
  end
  local st = new_state(cb)
  st.whole = true
  add_chunk(st, obj)
  return true, finish(st, obj)
end

-- Read an SSE stream of chat.completion.chunk events.
local function parse_stream(res, cb)
  local reader = sse.reader(res)
  local st = new_state(cb)
  local raw = {}
  local done = false
  while true do
    local ev, err = reader:next()
    if not ev then
      if err and not done then
        reader:close()
        return false, { err = err, delivered = st.delivered }
      end
      break
    end
    local data = ev.data
    if done then
      -- [DONE] seen: drain the rest so the connection can be reused
    elseif data == "[DONE]" then
      done = true
    elseif data:find("%S") then
      local obj, jerr = json.decode(data)
      if type(obj) ~= "table" then
        reader:close()
        return bad("malformed JSON in stream chunk " .. (#raw + 1) .. ": " ..
                   tostring(jerr or ("JSON " .. type(obj) .. ", not an object")) ..
                   "; chunk starts \"" .. retry.excerpt(data, "text/plain", 80) .. "\"")
      end
      if (obj.error ~= nil and obj.error ~= json.null) or ev.event == "error" then
        reader:close()
        return bad("error in stream: " .. retry.describe({ status = "200", body = data }):gsub("^200 ?:? ?", ""))
      end
      raw[#raw + 1] = obj
      add_chunk(st, obj)
    end
  end
  reader:close()
  if not (done or st.finish or st.usage) then
    local what = "stream truncated: it ended without a finish_reason or [DONE] after " ..
                 #raw .. " chunks" .. (reader.truncated and " (the last event was cut off)" or "")
    return false, { msg = what, delivered = st.delivered, retryable = not st.delivered }
  end
  return true, finish(st, raw)
end

----------------------------------------------------------------------------
-- chat
----------------------------------------------------------------------------

-- Tools as OpenAI expects them; { name, description, parameters } is
-- accepted as a shorthand.
local function normalize_tools(tools)
  local out = json.array({})
  for i, t in ipairs(tools) do
    if type(t) ~= "table" then error("specula.llm.openai: tools[" .. i .. "] must be a table", 4) end
    if t.type == nil and t["function"] == nil and t.name then
      t = { type = "function", ["function"] = { name = t.name, description = t.description,
            parameters = t.parameters or t.input_schema or json.object({ type = "object", properties = json.object({}) }) } }
    end
    out[i] = t
  end
  return out
end
M.normalize_tools = normalize_tools

function Client:_post(url, body_tbl, stream, parse_whole, cb)
  local body, eerr = json.encode(body_tbl)
  if not body then
    return nil, common.message(self, "cannot encode the request: " .. tostring(eerr))
  end
  local hopts = {
    method = "POST", url = url, headers = self:_headers(stream), body = body,
    timeout_ms = self.timeout_ms, connect_timeout_ms = self.connect_timeout_ms,
    idle_timeout_ms = self.idle_timeout_ms or (stream and 120000 or nil),
    max_body_bytes = self.max_body_bytes, stream = stream,
  }
  local result, f, n, why = self.retry:run(function()
    local res, err = http.request(hopts)
    if not res then return false, { err = err } end
    if res.status < 200 or res.status >= 300 then
      local b = stream and common.error_body(res) or res.body
      return false, { status = res.status, headers = res.headers, body = b }
    end
    if stream then
      local ct = lower(res.headers["content-type"] or "")
      if find(ct, "json", 1, true) and not find(ct, "event-stream", 1, true) then
        -- the server ignored stream = true and sent one whole response
        local b, rerr = res:read_all()
        if not b then return false, { err = rerr } end
        return parse_whole(b, cb)
      end
      return parse_stream(res, cb)
    end
    return parse_whole(res.body, cb)
  end)
  if result then return result end
  return nil, common.fail(self, f, n, why, "POST", url)
end

local CHAT_FIELDS = { "tool_choice", "max_tokens", "max_completion_tokens", "temperature", "top_p",
                      "stop", "seed", "response_format", "parallel_tool_calls", "n", "user",
                      "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs" }

--- The request body chat() would send (and whether it streams).
function Client:chat_body(req)
  if type(req) ~= "table" then error("specula.llm.openai: chat expects a request table", 3) end
  local messages = req.messages
  if type(messages) ~= "table" or #messages == 0 then
    error("specula.llm.openai: chat needs a non-empty messages list", 3)
  end
  local stream = req.stream
  if stream == nil then stream = (req.on_delta or req.on_tool_name or req.on_reasoning) ~= nil end
  local body = { model = req.model or self.model, messages = messages }
  if type(req.tools) == "table" and #req.tools > 0 then body.tools = normalize_tools(req.tools) end
  for _, k in ipairs(CHAT_FIELDS) do
    if req[k] ~= nil then body[k] = req[k] end
  end
  if stream then
    body.stream = true
    if self.include_usage then body.stream_options = { include_usage = true } end
  end
  for _, extra in ipairs({ self.extra or false, req.extra or false }) do
    if extra then
      for k, v in pairs(extra) do body[k] = v end
    end
  end
  return body, stream and true or false
end

function Client:chat(req)
  local body, stream = self:chat_body(req)
  local cb = { on_delta = req.on_delta, on_reasoning = req.on_reasoning, on_tool_name = req.on_tool_name }
  return self:_post(req.url or self.chat_url, body, stream, parse_completion, cb)
end

----------------------------------------------------------------------------
-- embeddings
----------------------------------------------------------------------------

local function parse_embeddings(n_in)
  return function(body)
    local obj, err = json.decode(body)
    if obj == nil then
      return bad("malformed JSON in response: " .. tostring(err) .. "; body starts \"" ..
                 retry.excerpt(body, "text/plain", 80) .. "\"")
    end
    if type(obj) ~= "table" or type(obj.data) ~= "table" then
      return bad("unexpected embeddings response: no data list in \"" .. retry.excerpt(body, "text/plain", 120) .. "\"")
    end
    local items = {}
    for i, d in ipairs(obj.data) do
      if type(d) ~= "table" or type(d.embedding) ~= "table" then
        return bad("unexpected embeddings response: item " .. i .. " has no float vector")
      end
      items[i] = { index = tonumber(d.index) or (i - 1), vec = d.embedding, pos = i }
    end
    sort(items, function(a, b)
      if a.index ~= b.index then return a.index < b.index end
      return a.pos < b.pos
    end)
    if #items ~= n_in then
      return bad("embeddings response has " .. #items .. " vectors for " .. n_in .. " inputs")
    end
    local out = {}
    for i, it in ipairs(items) do
      for j = 1, #it.vec do
        if type(it.vec[j]) ~= "number" then
          return bad("unexpected embeddings response: vector " .. i .. " is not a list of numbers")
        end
      end
      out[i] = it.vec
    end
    return true, out
  end
end

function Client:embed(req)
  if type(req) == "string" then req = { input = req } end
  if type(req) ~= "table" then error("specula.llm.openai: embed expects { input = text | list }", 2) end
  local input = req.input
  if type(input) == "string" then input = { input } end
  if type(input) ~= "table" or #input == 0 then
    error("specula.llm.openai: embed needs input = a string or a non-empty list of strings", 2)
  end
  for i = 1, #input do
    if type(input[i]) ~= "string" then error("specula.llm.openai: embed input[" .. i .. "] is not a string", 2) end
  end
  local body = { model = req.model or self.embedding_model or self.model, input = json.array({ unpack(input) }) }
  if req.dimensions then body.dimensions = req.dimensions end
  if req.encoding_format then body.encoding_format = req.encoding_format end
  if type(req.extra) == "table" then for k, v in pairs(req.extra) do body[k] = v end end
  return self:_post(req.url or self.embeddings_url, body, false, parse_embeddings(#input))
end

function Client:embedder(opts)
  local model = opts and opts.model
  return function(list) return self:embed { input = list, model = model } end
end

----------------------------------------------------------------------------
-- history helpers
----------------------------------------------------------------------------

--- The assistant message that continues a conversation after `result`.
function M.assistant_message(result)
  local m = { role = "assistant", content = result.content ~= "" and result.content or json.null }
  if result.tool_calls and #result.tool_calls > 0 then
    local tcs = json.array({})
    for i, c in ipairs(result.tool_calls) do
      tcs[i] = { id = c.id, type = "function",
                 ["function"] = { name = c.name, arguments = c.arguments_text ~= "" and c.arguments_text or "{}" } }
    end
    m.tool_calls = tcs
  end
  return m
end

--- A tool result message answering `call` (a result.tool_calls entry or an id).
function M.tool_message(call, content)
  local id = type(call) == "table" and call.id or call
  if type(content) ~= "string" then content = json.encode(content) or tostring(content) end
  return { role = "tool", tool_call_id = id, content = content }
end

-- internal pieces, exposed for tests and other clients
M.Client = Client
-- for the fuzz harness (spec/fuzz/fuzz_llm.c): stream assembly alone
M._parse_stream = parse_stream

return M
