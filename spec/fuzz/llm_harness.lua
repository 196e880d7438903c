-- The Lua side of spec/fuzz/fuzz_llm.c: feed arbitrary bytes as a streamed
-- response to both LLM clients' stream assembly (SSE parsing, tool-call
-- assembly by index, partial JSON, errors). They must return ok, result or
-- false, failure — never raise.
local openai = require "specula.llm.openai"
local anthropic = require "specula.llm.anthropic"

local function response(data)
  -- split where the first byte says, so events straddle chunk boundaries
  local cut = 1 + ((data:byte(1) or 0) % (#data + 1))
  local chunks = { data:sub(1, cut), data:sub(cut + 1) }
  local i = 0
  return { read = function() i = i + 1 return chunks[i] end, close = function() end }
end

local calls = 0
local cb = { on_delta = function() end, on_tool_name = function() calls = calls + 1 end,
             on_reasoning = function() end, on_tool_input = function() end, on_tool_call = function() end,
             on_thinking = function() end }

return function(data)
  for _, client in ipairs({ openai, anthropic }) do
    local ok, a, b = pcall(client._parse_stream, response(data), cb)
    if not ok then error("stream assembly raised: " .. tostring(a), 0) end
    if a == true and type(b) ~= "table" then error("ok without a result", 0) end
    if a == false and type(b) ~= "table" then error("failure without a description", 0) end
  end
end
