-- LLM clients (specula.llm) through the real binary against recorded streams
-- served by the loopback test server. The fixtures below are written in the
-- exact wire formats of OpenAI chat.completion.chunk SSE and Anthropic
-- Messages SSE; the server replays them whole, split at a byte offset, or in
-- pieces of a few bytes.
local H = require "support.helpers"

local KEY = "sk-TESTSECRET-123"
local server, dir

-- OpenAI -------------------------------------------------------------------

local OA_TEXT = [==[
data: {"id":"chatcmpl-A1","object":"chat.completion.chunk","created":1726000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_a1","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-A1","object":"chat.completion.chunk","created":1726000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_a1","choices":[{"index":0,"delta":{"content":"Paris is"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-A1","object":"chat.completion.chunk","created":1726000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_a1","choices":[{"index":0,"delta":{"content":" the capital of Fran\u00e7e. \u2014 ok"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-A1","object":"chat.completion.chunk","created":1726000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_a1","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}

data: {"id":"chatcmpl-A1","object":"chat.completion.chunk","created":1726000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_a1","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21}}

data: [DONE]

]==]

-- Two parallel tool calls, fragments interleaved, "" ids on continuations.
local OA_TOOLS = [==[
data: {"id":"chatcmpl-B2","object":"chat.completion.chunk","created":1726000001,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_b2","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_w1","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-B2","object":"chat.completion.chunk","created":1726000001,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_b2","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"","function":{"arguments":"{\"ci"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-B2","object":"chat.completion.chunk","created":1726000001,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_b2","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"","function":{"arguments":"ty\": \"Par"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-B2","object":"chat.completion.chunk","created":1726000001,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_b2","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_t2","type":"function","function":{"name":"get_time","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-B2","object":"chat.completion.chunk","created":1726000001,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_b2","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"is\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-B2","object":"chat.completion.chunk","created":1726000001,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_b2","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"","function":{"arguments":"{\"tz\":"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-B2","object":"chat.completion.chunk","created":1726000001,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_b2","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":" \"CET\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-B2","object":"chat.completion.chunk","created":1726000001,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_b2","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}

data: {"id":"chatcmpl-B2","object":"chat.completion.chunk","created":1726000001,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_b2","choices":[],"usage":{"prompt_tokens":80,"completion_tokens":41,"total_tokens":121}}

data: [DONE]

]==]

-- Ollama-style: the whole call in one chunk, arguments as a JSON object.
local OA_OLLAMA = [==[
data: {"id":"chatcmpl-719","object":"chat.completion.chunk","created":1726000002,"model":"qwen3:8b","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":"","tool_calls":[{"id":"call_k2x9","index":0,"type":"function","function":{"name":"search","arguments":{"q":"speculative decoding","n":3}}}]},"finish_reason":null}]}

data: {"id":"chatcmpl-719","object":"chat.completion.chunk","created":1726000002,"model":"qwen3:8b","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":"tool_calls"}]}

data: [DONE]

]==]

-- No index, no type, whole argument string, no [DONE] (llama.cpp-like).
local OA_NOINDEX = [==[
data: {"choices":[{"delta":{"tool_calls":[{"id":"t0","function":{"name":"lookup","arguments":"{\"id\": 7}"}}]}}]}

data: {"choices":[{"delta":{"tool_calls":[{"id":"t1","function":{"name":"lookup","arguments":"{\"id\": 8}"}}]}}]}

data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}

]==]

-- A new id at an index that already holds a call starts a new call.
local OA_SAMEINDEX = [==[
data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":"}}]}}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.txt\"}"}}]}}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_2","type":"function","function":{"name":"read_file","arguments":"{\"path\": \"b.txt\"}"}}]}}]}

data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: [DONE]

]==]

-- reasoning_content (DeepSeek, vLLM) and reasoning (Ollama, OpenRouter).
local OA_REASONING = [==[
data: {"id":"r1","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"Two plus"},"logprobs":null,"finish_reason":null}]}

data: {"id":"r1","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":null,"reasoning_content":" two is four."},"logprobs":null,"finish_reason":null}]}

data: {"id":"r1","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"reasoning":" Check: 4."},"logprobs":null,"finish_reason":null}]}

data: {"id":"r1","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":"4","reasoning_content":null},"logprobs":null,"finish_reason":"stop"}]}

data: [DONE]

]==]

-- Unknown fields everywhere, comments, event names, ids.
local OA_UNKNOWN = [==[
: keep-alive

event: message
id: 1
data: {"id":"u1","object":"chat.completion.chunk","created":1,"model":"m","service_tier":"default","obfuscation":"k3Jd","x_vendor":{"shard":9},"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi","annotations":[],"audio":null},"logprobs":{"content":[{"token":"Hi","logprob":-0.1,"bytes":[72,105],"top_logprobs":[]}]},"finish_reason":null,"matched_stop":null}]}

data: {"id":"u1","choices":[{"index":0,"delta":{"content":" there","x_extra":[1,{"a":null}]},"finish_reason":null}],"type":"chunk","usage":null}

data: {"id":"u1","choices":[{"index":0,"delta":{},"finish_reason":"stop","stop_reason":null}]}

data: [DONE]

]==]

local OA_ERROR = [==[
data: {"id":"e1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Partial"},"finish_reason":null}]}

data: {"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}

]==]

local OA_TRUNCATED = [==[
data: {"id":"t1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Once upon"},"finish_reason":null}]}

data: {"id":"t1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" a time"},"finish_reason":null}]}

data: {"id":"t1","object":"chat.completion.chunk","created":1,"model":"m","choi]==]

local OA_BADCHUNK = [==[
data: {"id":"x1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]}

data: {"id":"x1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"broken"}

data: {"id":"x1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}

data: [DONE]

]==]

local OA_BADARGS = [==[
data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_bad","type":"function","function":{"name":"edit","arguments":"{\"path\": \"x\", \"text\": unquoted}"}}]}}]}

data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: [DONE]

]==]

local OA_WHOLE = [==[
{
  "id": "chatcmpl-W1",
  "object": "chat.completion",
  "created": 1726000003,
  "model": "gpt-4o-mini-2024-07-18",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": null,
        "tool_calls": [
          { "id": "call_s1", "type": "function", "function": { "name": "search", "arguments": "{\"q\":\"tides\",\"k\":2}" } },
          { "id": "call_s2", "type": "function", "function": { "name": "search", "arguments": "{\"q\":\"moon\"}" } }
        ],
        "refusal": null
      },
      "logprobs": null,
      "finish_reason": "tool_calls"
    }
  ],
  "usage": { "prompt_tokens": 50, "completion_tokens": 30, "total_tokens": 80 },
  "system_fingerprint": "fp_w1"
}
]==]

local OA_BADJSON = [==[{"id":"chatcmpl-M1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}]]==]

-- Some gateways answer 200 with an error object.
local OA_ERROR200 = [==[{"error":{"message":"Provider returned error","code":502,"metadata":{"provider_name":"x"}}}]==]

local EMB = [==[
{"object":"list","data":[{"object":"embedding","index":2,"embedding":[0.0,0.0,1.0]},{"object":"embedding","index":0,"embedding":[1.0,0.0,0.0]},{"object":"embedding","index":1,"embedding":[0.6,0.8,0.0]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":6,"total_tokens":6}}
]==]

local EMB2 = [==[
{"object":"list","data":[{"object":"embedding","index":1,"embedding":[0.8,0.6]},{"object":"embedding","index":0,"embedding":[1.0,0.0]}],"model":"e","usage":{"prompt_tokens":2,"total_tokens":2}}
]==]

-- Anthropic -----------------------------------------------------------------

local AN_TOOL = [==[
event: message_start
data: {"type":"message_start","message":{"id":"msg_01Wx","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":310,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The user wants the weather."}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Let me check"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":" the weather."}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01T1x","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"location\": \"San Fra"}}

event: future_event_type
data: {"type":"future_event_type","detail":{"x":1}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"citations_delta","citation":{"cited_text":"x"}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"ncisco, CA\", \"unit\": \"celsius\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

]==]

local AN_MAXTOK = [==[
event: message_start
data: {"type":"message_start","message":{"id":"msg_02","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":20,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_02","name":"write_file","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"notes.txt\", \"content\": \"lorem ip"}}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":16}}

event: message_stop
data: {"type":"message_stop"}

]==]

local AN_ERROR = [==[
event: message_start
data: {"type":"message_start","message":{"id":"msg_03","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}

event: error
data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}

]==]

local AN_TEXT = [==[
event: message_start
data: {"type":"message_start","message":{"id":"msg_04","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":40,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"yes"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}

event: message_stop
data: {"type":"message_stop"}

]==]

-- Server-side and MCP tool calls stream their input as input_json_delta
-- too (web search, then an MCP tool, then a local tool, then a block type
-- this client does not know).
local AN_SERVER = [==[
event: message_start
data: {"type":"message_start","message":{"id":"msg_06","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_01","name":"web_search","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"query\": \"tides"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":" Brest\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_01","content":[{"type":"web_search_result","title":"Tides in Brest","url":"https://tides.example/brest"}]}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"mcp_tool_use","id":"mcptoolu_01","name":"lookup","server_name":"harbour","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"port\": \"Brest\", \"days\": 2}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: content_block_start
data: {"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_07","name":"calc","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"expr\": \"6*7\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":3}

event: content_block_start
data: {"type":"content_block_start","index":4,"content_block":{"type":"future_tool_use","id":"ftu_1","name":"later","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":4,"delta":{"type":"input_json_delta","partial_json":"{\"n\": 1}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":4}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":60}}

event: message_stop
data: {"type":"message_stop"}

]==]

-- A whole Message (a gateway that does not stream).
local AN_WHOLE = [==[{"id":"msg_05","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"Sure."},{"type":"tool_use","id":"toolu_9","name":"calc","input":{"expr":"2+2"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":12}}]==]

local FIXTURES = {
  ["oa_text.sse"] = OA_TEXT, ["oa_tools.sse"] = OA_TOOLS, ["oa_ollama.sse"] = OA_OLLAMA,
  ["oa_noindex.sse"] = OA_NOINDEX, ["oa_sameindex.sse"] = OA_SAMEINDEX,
  ["oa_reasoning.sse"] = OA_REASONING, ["oa_unknown.sse"] = OA_UNKNOWN, ["oa_error.sse"] = OA_ERROR,
  ["oa_truncated.sse"] = OA_TRUNCATED, ["oa_badchunk.sse"] = OA_BADCHUNK, ["oa_badargs.sse"] = OA_BADARGS,
  ["oa_whole.json"] = OA_WHOLE, ["oa_error200.json"] = OA_ERROR200, ["oa_badjson.json"] = OA_BADJSON, ["emb.json"] = EMB, ["emb2.json"] = EMB2,
  ["an_tool.sse"] = AN_TOOL, ["an_maxtok.sse"] = AN_MAXTOK, ["an_error.sse"] = AN_ERROR,
  ["an_text.sse"] = AN_TEXT, ["an_whole.json"] = AN_WHOLE, ["an_server.sse"] = AN_SERVER,
}

local PRELUDE = [[
local specula = require "specula"
local json, llm = specula.json, specula.llm
local BASE, DIR, KEY = %q, %q, %q
local MSG = { { role = "user", content = "hi" } }
-- a /file URL replaying a fixture (q: extra query, e.g. "&split=10")
local function file(name, q, ctype)
  -- the server reads the first of repeated parameters: q's pause wins
  return BASE .. "/file?path=" .. name .. (q or "") .. "&pause=0" .. (ctype and ("&ctype=" .. ctype) or "")
end
local function oa(url, o)
  o = o or {}
  o.api_key = o.api_key or KEY
  o.model = o.model or "gpt-test"
  o.chat_url = url
  o.retry = o.retry or { base_ms = 1, max_retries = 0 }
  return llm.openai.new(o)
end
local function an(url, o)
  o = o or {}
  o.api_key = o.api_key or KEY
  o.model = o.model or "claude-test"
  o.messages_url = url
  o.retry = o.retry or { base_ms = 1, max_retries = 0 }
  return llm.anthropic.new(o)
end
local function requests()
  return json.decode(specula.http.request{ url = BASE .. "/stats" }.body).requests
end
local function enc(v) return json.canonical(v) end
]]

-- Run a script in the binary; it must succeed, and the key must not appear
-- anywhere in its output.
local function run(code, env)
  local st, out, err = H.run_lua(PRELUDE:format(server.base, dir, KEY) .. code, nil, env)
  assert.equals(0, st, "script failed:\n" .. err .. out)
  assert.is_nil(out:find(KEY, 1, true), "the API key leaked to stdout:\n" .. out)
  assert.is_nil(err:find(KEY, 1, true), "the API key leaked to stderr:\n" .. err)
  return out, err
end

local function line(out, tag)
  return out:match("\n" .. tag .. "\t([^\n]*)") or out:match("^" .. tag .. "\t([^\n]*)")
end

describe("specula.llm", function()
  setup(function()
    dir = H.tmpdir() .. "/llm_fixtures"
    os.execute("mkdir -p " .. H.quote(dir))
    for name, content in pairs(FIXTURES) do
      local f = assert(io.open(dir .. "/" .. name, "wb"))
      f:write(content)
      f:close()
    end
    server = H.server { files = dir }
  end)
  teardown(function() server.stop() end)

  describe("openai", function()
    it("streams text, usage and finish_reason; sends stream_options and the bearer key", function()
      local out = run([[
        local deltas = {}
        local c = oa(file("oa_text.sse"))
        local r = assert(c:chat { messages = MSG, on_delta = function(t) deltas[#deltas + 1] = t end })
        print("content", r.content)
        print("deltas", table.concat(deltas, "|"))
        print("finish", r.finish_reason, r.usage.total_tokens, r.model, #r.tool_calls)
        local body, stream = c:chat_body { messages = MSG, stream = true, max_tokens = 5, extra = { seed = 7 } }
        print("body", stream, enc(body))
        local h = c:_headers(true)
        print("auth", h.Authorization == "Bearer " .. KEY, h.Accept)
        local plain = c:chat_body { messages = MSG }
        print("plain", plain.stream, plain.stream_options)
      ]])
      assert.equals("Paris is the capital of Françe. — ok", line(out, "content"))
      assert.equals("Paris is| the capital of Françe. — ok", line(out, "deltas"))
      assert.equals("stop\t21\tgpt-4o-mini-2024-07-18\t0", line(out, "finish"))
      assert.equals('true\t{"max_tokens":5,"messages":[{"content":"hi","role":"user"}],"model":"gpt-test","seed":7,'
        .. '"stream":true,"stream_options":{"include_usage":true}}', line(out, "body"))
      assert.equals("true\ttext/event-stream", line(out, "auth"))
      assert.equals("nil\tnil", line(out, "plain"))
    end)

    it("assembles the same tool calls when the stream is split at every byte offset", function()
      local out = run([[
        local data = assert(io.open(DIR .. "/oa_tools.sse", "rb")):read("*a")
        local function once(q)
          local names = {}
          local r, e = oa(file("oa_tools.sse", q)):chat { messages = MSG,
            on_tool_name = function(n, id, i) names[#names + 1] = n .. "/" .. tostring(id) .. "/" .. i end }
          if not r then return "ERR " .. e end
          return enc { r.content, r.finish_reason, r.usage, r.tool_calls, names }
        end
        local ref = once("")
        local bad = 0
        for i = 0, #data do
          if once("&split=" .. i) ~= ref then bad = bad + 1; print("mismatch", i) end
        end
        print("ref", ref)
        print("offsets", #data + 1, bad)
        print("bytewise", once("&chunk=1") == ref, once("&chunk=7") == ref)
      ]])
      local cj = H.json()
      local ref = cj.decode(line(out, "ref"))
      assert.equals("", ref[1])
      assert.equals("tool_calls", ref[2])
      assert.equals(121, ref[3].total_tokens)
      local calls = ref[4]
      assert.equals(2, #calls)
      assert.same({ "call_w1", "get_weather", "{\"city\": \"Paris\"}", 0 },
                  { calls[1].id, calls[1].name, calls[1].arguments_text, calls[1].index })
      assert.equals("Paris", calls[1].arguments.city)
      assert.same({ "call_t2", "get_time", "CET", 1 }, { calls[2].id, calls[2].name, calls[2].arguments.tz, calls[2].index })
      assert.same({ "get_weather/call_w1/0", "get_time/call_t2/1" }, ref[5])
      local n, bad = line(out, "offsets"):match("(%d+)\t(%d+)")
      assert.is_true(tonumber(n) > 1000)
      assert.equals("0", bad)
      assert.equals("true\ttrue", line(out, "bytewise"))
    end)

    it("fires on_tool_name as soon as the name arrives, before the stream ends", function()
      local out = run([[
        local t0 = specula.now()
        local at
        local r = assert(oa(file("oa_tools.sse", "&chunk=200&pause=40")):chat { messages = MSG,
          on_tool_name = function(n) at = at or (specula.now() - t0) end })
        print("early", at < specula.now() - t0 - 300)
      ]])
      assert.equals("true", line(out, "early"))
    end)

    it("accepts whole calls, object arguments, missing indexes and reused indexes", function()
      local out = run([[
        local r = assert(oa(file("oa_ollama.sse")):chat { messages = MSG, stream = true })
        local c = r.tool_calls[1]
        print("ollama", #r.tool_calls, c.id, c.name, c.arguments.q, c.arguments.n, json.decode(c.arguments_text).n, r.finish_reason)
        r = assert(oa(file("oa_noindex.sse")):chat { messages = MSG, stream = true })
        print("noindex", #r.tool_calls, r.tool_calls[1].id, r.tool_calls[1].arguments.id,
              r.tool_calls[2].id, r.tool_calls[2].arguments.id)
        local names = {}
        r = assert(oa(file("oa_sameindex.sse")):chat { messages = MSG,
          on_tool_name = function(n, id) names[#names + 1] = id end })
        print("same", #r.tool_calls, r.tool_calls[1].arguments.path, r.tool_calls[2].arguments.path,
              table.concat(names, ","))
        r = assert(oa(file("oa_badargs.sse")):chat { messages = MSG, stream = true })
        c = r.tool_calls[1]
        print("badargs", c.name, c.arguments, c.arguments_text, c.arguments_error ~= nil)
      ]])
      assert.equals("1\tcall_k2x9\tsearch\tspeculative decoding\t3\t3\ttool_calls", line(out, "ollama"))
      assert.equals("2\tt0\t7\tt1\t8", line(out, "noindex"))
      assert.equals("2\ta.txt\tb.txt\tcall_1,call_2", line(out, "same"))
      assert.equals('edit\tnil\t{"path": "x", "text": unquoted}\ttrue', line(out, "badargs"))
    end)

    it("keeps reasoning_content and reasoning deltas and ignores unknown fields", function()
      local out = run([[
        local th = {}
        local r = assert(oa(file("oa_reasoning.sse")):chat { messages = MSG,
          on_reasoning = function(t) th[#th + 1] = t end })
        print("reasoning", r.reasoning, r.content, #th)
        r = assert(oa(file("oa_unknown.sse")):chat { messages = MSG, stream = true })
        print("unknown", r.content, r.finish_reason)
      ]])
      assert.equals("Two plus two is four. Check: 4.\t4\t3", line(out, "reasoning"))
      assert.equals("Hi there\tstop", line(out, "unknown"))
    end)

    it("reads whole (non-streamed) responses, including one sent for a stream request", function()
      local out = run([[
        local r = assert(oa(file("oa_whole.json", nil, "application/json")):chat { messages = MSG })
        print("whole", r.content, #r.tool_calls, r.tool_calls[1].arguments.q, r.tool_calls[1].arguments.k,
              r.tool_calls[2].id, r.finish_reason, r.usage.total_tokens)
        local names = {}
        r = assert(oa(file("oa_whole.json", nil, "application/json")):chat { messages = MSG,
          on_tool_name = function(n, id, i) names[#names + 1] = id .. "@" .. i end })
        print("asstream", #r.tool_calls, table.concat(names, ","))
        local m = llm.openai.assistant_message(r)
        print("history", enc(m.tool_calls[1]), enc(llm.openai.tool_message(r.tool_calls[1], { ok = true })))
      ]])
      assert.equals("\t2\ttides\t2\tcall_s2\ttool_calls\t80", line(out, "whole"))
      assert.equals("2\tcall_s1@0,call_s2@1", line(out, "asstream"))
      assert.equals('{"function":{"arguments":"{\\"q\\":\\"tides\\",\\"k\\":2}","name":"search"},"id":"call_s1","type":"function"}\t'
        .. '{"content":"{\\"ok\\":true}","role":"tool","tool_call_id":"call_s1"}', line(out, "history"))
    end)

    it("turns broken responses into errors naming the endpoint and the problem", function()
      local out = run([[
        local function show(tag, r, e) print(tag, r and "result" or e) end
        show("errorevent", oa(file("oa_error.sse")):chat { messages = MSG, on_delta = function() end })
        show("truncated", oa(file("oa_truncated.sse")):chat { messages = MSG, on_delta = function() end })
        show("truncated_retried", oa(file("oa_truncated.sse"), { retry = { base_ms = 1, max_retries = 1 } })
          :chat { messages = MSG, stream = true })
        show("badchunk", oa(file("oa_badchunk.sse")):chat { messages = MSG, stream = true })
        show("badjson", oa(file("oa_badjson.json", nil, "application/json")):chat { messages = MSG })
        show("error200", oa(file("oa_error200.json", nil, "application/json")):chat { messages = MSG })
        show("reset", oa(BASE .. "/reset?after=300", { retry = { base_ms = 1, max_retries = 1 } })
          :chat { messages = MSG, stream = true })
        show("refused", oa("http://127.0.0.1:1/v1/chat/completions?key=" .. KEY,
          { retry = { base_ms = 1, max_retries = 2 } }):chat { messages = MSG })
        show("notfound", oa(BASE .. "/nowhere"):chat { messages = MSG })
        local c = specula.settle()
        print("left", c.transfers, c.timers)
      ]])
      local ep = server.base .. "/file"
      assert.equals("openai: error in stream: server_error: The server had an error while processing your request. "
        .. "Sorry about that! (POST " .. ep .. ")", line(out, "errorevent"))
      assert.matches("^openai: stream truncated: it ended without a finish_reason or %[DONE%] after 2 chunks "
        .. "%(the last event was cut off%) %(POST " .. ep:gsub("%p", "%%%0") .. "%)$", line(out, "truncated"))
      assert.matches("openai: stream truncated: .*after 2 attempts%)$", line(out, "truncated_retried"))
      assert.matches("^openai: malformed JSON in stream chunk 2: JSON: .*; chunk starts \"{\"id\":\"x1\".* %(POST "
        .. ep:gsub("%p", "%%%0") .. "%)$", line(out, "badchunk"))
      assert.matches("^openai: malformed JSON in response: JSON: .* %(POST " .. ep:gsub("%p", "%%%0") .. "%)$",
        line(out, "badjson"))
      assert.equals("openai: error in response: Provider returned error (POST " .. server.base .. "/file)",
                    line(out, "error200"))
      assert.matches("^openai: ECONNRESET: POST " .. server.base:gsub("%p", "%%%0") .. "/reset: .*%(after 2 attempts%)$",
        line(out, "reset"))
      assert.matches("^openai: ECONNREFUSED: POST http://127%.0%.0%.1:1/v1/chat/completions: .*%(after 3 attempts%)$",
        line(out, "refused"))
      assert.matches("^openai: 404: non%-JSON error body: \"not found\" %(POST " .. server.base:gsub("%p", "%%%0")
        .. "/nowhere, after 1 attempt%)$", line(out, "notfound"))
      assert.equals("0\t0", line(out, "left"))
    end)

    it("reports provider errors, non-JSON bodies and proxy HTML pages without leaking the key", function()
      local out = run([[
        local function q(s) return (s:gsub("[^%w]", function(c) return string.format("%%%02X", c:byte()) end)) end
        local function show(tag, r, e) print(tag, r and "result" or e) end
        local quota = '{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}'
        show("rate", oa(BASE .. "/status/429?retry_after_ms=5&body=" .. q('{"error":{"message":"Rate limit reached for gpt-test","type":"requests","param":null,"code":"rate_limit_exceeded"}}'),
          { retry = { base_ms = 1, max_retries = 2 } }):chat { messages = MSG })
        local r0 = requests()
        show("quota", oa(BASE .. "/status/429?retry_after=0&body=" .. q(quota), { retry = { max_retries = 3 } }):chat { messages = MSG })
        print("quota_requests", requests() - r0 - 1)  -- requests made in between
        show("plain", oa(BASE .. "/status/500?ctype=text/plain&body=" .. q("upstream exploded\n  at line 3")):chat { messages = MSG })
        show("html", oa(BASE .. "/status/502?ctype=text/html&body=" .. q("<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.25.3</center>\r\n</body>\r\n</html>\r\n"))
          :chat { messages = MSG })
        show("echoedkey", oa(BASE .. "/status/401?body=" .. q('{"error":{"message":"Incorrect API key provided: ' .. KEY .. '. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}'))
          :chat { messages = MSG })
        show("echoedheader", oa(BASE .. "/status/400?ctype=text/plain&body=" .. q("bad header Authorization: Bearer " .. KEY))
          :chat { messages = MSG })
        -- the environment key, through specula.llm.client
        show("envclient", llm.client { provider = "openai", chat_url = BASE .. "/status/403?body=" .. q("denied for " .. os.getenv("OPENAI_API_KEY")),
          retry = false }:chat { messages = MSG })
        local c = llm.client("openai:gpt-x")
        print("client", tostring(c):match("^openai client") ~= nil, c.model, c.endpoint)
        local o = llm.client("ollama:qwen3:8b")
        print("preset", o.model, o.chat_url, o:_headers().Authorization)
        print("anthropic_env", llm.client("anthropic").messages_url)
        print("dump", enc { c.name, c.base_url, c.model, c.chat_url })
      ]], { OPENAI_API_KEY = KEY, OPENAI_BASE_URL = server.base .. "/v1/", ANTHROPIC_BASE_URL = "" })
      local base = server.base:gsub("%p", "%%%0")
      assert.matches("^openai: 429 rate_limit_exceeded: Rate limit reached for gpt%-test %(POST "
        .. base .. "/status/429, after 3 attempts%)$", line(out, "rate"))
      assert.matches("^openai: 429 insufficient_quota: You exceeded your current quota, please check your plan and "
        .. "billing details%. %(POST " .. base .. "/status/429, after 1 attempt%); not retried: quota or billing error$",
        line(out, "quota"))
      assert.equals("1", line(out, "quota_requests"))
      assert.equals("openai: 500: non-JSON error body: \"upstream exploded at line 3\" (POST " .. server.base
        .. "/status/500, after 1 attempt)", line(out, "plain"))
      local html = line(out, "html")
      assert.equals("openai: 502: HTML error page: \"502 Bad Gateway - 502 Bad Gateway nginx/1.25.3\" (POST "
        .. server.base .. "/status/502, after 1 attempt)", html)
      assert.matches("^openai: 401 invalid_api_key: Incorrect API key provided: %[redacted%]%. ",
        line(out, "echoedkey"))
      assert.matches("Authorization: Bearer %[redacted%]", line(out, "echoedheader"))
      assert.matches("^openai: 403: non%-JSON error body: \"denied for %[redacted%]\"", line(out, "envclient"))
      assert.equals("true\tgpt-x\t" .. server.base .. "/v1", line(out, "client"))
      assert.equals("qwen3:8b\thttp://localhost:11434/v1/chat/completions\tnil", line(out, "preset"))
      assert.equals("https://api.anthropic.com/v1/messages", line(out, "anthropic_env"))
      assert.not_matches("TESTSECRET", line(out, "dump"))
    end)

    it("embeds a batch and returns the vectors in input order", function()
      local out = run([[
        local c = llm.openai.new { api_key = KEY, model = "text-embedding-3-small",
          embeddings_url = file("emb.json", nil, "application/json") }
        local v = assert(c:embed { input = { "a", "b", "c" } })
        print("vectors", enc(v))
        local one, err = c:embed { input = "a" }
        print("count", one, err)
        -- the embedder works with the retriever terminator and the cosine verifier
        local t = specula.terminate.retriever { embedder = c:embedder(), tau = 0.85 }
        print("retriever", t:check("q", { "earlier" }, "new"))
        local c2 = llm.openai.new { api_key = KEY, embeddings_url = file("emb2.json", nil, "application/json") }
        print("cosine", specula.verify.cosine(c2:embedder(), 0.75)("x", "y"))
        print("cosine_hi", specula.verify.cosine(c2:embedder(), 0.9)("x", "y"))
      ]])
      assert.equals("[[1,0,0],[0.6,0.8,0],[0,0,1]]", line(out, "vectors"))
      assert.matches("^nil\topenai: embeddings response has 3 vectors for 1 inputs %(POST ", line(out, "count"))
      -- new=[1,0,0], question=[0.6,0.8,0] (0.6), earlier=[0,0,1] (0)
      assert.equals("false\tcontinue: max cosine 0.60 < 0.85 (main question)\t0.6", line(out, "retriever"))
      assert.equals("true\taccept: cosine 0.80 >= 0.75", line(out, "cosine"))
      assert.equals("false\treject: cosine 0.80 < 0.90", line(out, "cosine_hi"))
    end)
  end)

  describe("retry", function()
    it("honours retry-after on a 429, then succeeds (/flaky), and bounds the wait #timing", function()
      local out = run([[
        local retry = llm.retry
        local t0 = specula.now()
        local res, f, n = retry.request({ url = BASE .. "/flaky/ra1/1/429?retry_after=1" }, { base_ms = 1 })
        local dt = specula.now() - t0
        print("flaky", res.status, json.decode(res.body).attempt, n, dt >= 950, dt < 2500)
        -- retry-after-ms wins over retry-after
        t0 = specula.now()
        res, f, n = retry.request({ url = BASE .. "/flaky/ra2/2/503?retry_after=30&retry_after_ms=120" }, {})
        dt = specula.now() - t0
        print("ms", res.status, n, dt >= 230, dt < 1500)
        -- a longer wait than max_wait_ms gives up at once
        t0 = specula.now()
        res, f, n, why = retry.request({ url = BASE .. "/status/429?retry_after=120" }, {})
        print("toolong", res, f.status, n, why, specula.now() - t0 < 500)
        -- an HTTP date in the past: retry at once
        t0 = specula.now()
        res, f, n = retry.request({ url = BASE .. "/flaky/ra3/1/503?retry_after=Sun,%2006%20Nov%201994%2008:49:37%20GMT" }, {})
        print("date", res.status, n, specula.now() - t0 < 500)
      ]])
      assert.equals("200\t2\t2\ttrue\ttrue", line(out, "flaky"))
      assert.equals("200\t3\ttrue\ttrue", line(out, "ms"))
      assert.equals("nil\t429\t1\tserver asked to wait 120 s, more than max_wait_ms 60000\ttrue", line(out, "toolong"))
      assert.equals("200\t2\ttrue", line(out, "date"))
    end)

    it("follows x-should-retry and never retries quota or spend-limit errors", function()
      local out = run([[
        local retry = llm.retry
        local function count(url, opts)
          local r0 = requests()
          local res, f, n, why = retry.request({ url = BASE .. url }, opts or { base_ms = 1, max_retries = 3 })
          print(url:match("^/(%w+)"), requests() - r0 - 1, n, why or "-")
        end
        count("/status/503?should_retry=false")
        count("/status/400?should_retry=true")
        count("/status/400")
        count("/status/409")
        count("/status/408")
        count("/status/429?body=" .. ("Your spend limit has been reached"):gsub(" ", "%%20"))
        count("/status/402?should_retry=true&body=billing%20hard%20limit")
      ]])
      local lines = {}
      for l in out:gmatch("status\t([^\n]*)") do lines[#lines + 1] = l end
      assert.equals("1\t1\tnot retried: x-should-retry: false", lines[1])
      assert.equals("4\t4\t-", lines[2])
      assert.equals("1\t1\t-", lines[3])
      assert.equals("4\t4\t-", lines[4])
      assert.equals("4\t4\t-", lines[5])
      assert.equals("1\t1\tnot retried: quota or billing error", lines[6])
      assert.equals("1\t1\tnot retried: quota or billing error", lines[7])
    end)

    it("waits with bounded, jittered exponential backoff and parses HTTP dates", function()
      local out = run([[
        local retry = llm.retry
        local p = retry.new { base_ms = 500, cap_ms = 8000 }
        local ok = true
        for n = 1, 8 do
          local hi = math.min(8000, 500 * 2 ^ (n - 1))
          for _ = 1, 200 do
            local w = p:backoff(n)
            if w < 0 or w > hi then ok = false end
          end
        end
        print("bounded", ok)
        local fixed = retry.new { base_ms = 100, cap_ms = 1000, jitter = false }
        print("nojitter", fixed:backoff(1), fixed:backoff(3), fixed:backoff(10))
        print("date", retry.parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
              retry.parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), retry.parse_http_date("Sun Nov  6 08:49:37 1994"),
              retry.parse_http_date("yesterday"))
        print("wait", retry.server_wait({ ["retry-after"] = "Thu, 01 Jan 1970 00:01:40 GMT" }, 90),
              retry.server_wait({ ["retry-after"] = "2" }), retry.server_wait({ ["retry-after-ms"] = "250", ["retry-after"] = "9" }))
        print("decide", p:decide({ status = 400, headers = {} }, 1), p:decide({ err = "ECANCELED: GET x: y" }, 1),
              p:decide({ err = "ECONNRESET: GET x: y", delivered = true }, 1))
        print("exhausted", p:decide({ status = 500, headers = {} }, 4))
        local secrets = require "specula.secrets"
        print("scrub", secrets.scrub_message("Bearer abc.def-123 sk-proj-ABCDEFGHIJKL x-api-key: zz99zz99 https://u:pw@h/x?api_key=s3cr3t&a=1 mysecretvalue", { "mysecretvalue" }))
        print("endpoint", retry.endpoint("https://user:pass@api.example.com/v1/chat?key=1#frag"))
        local sec = secrets.header_values({ ["Proxy-Authorization"] = "Basic cHg6cHc=", ["X-Goog-Api-Key"] = "g-123456",
          ["x-auth-token"] = "tok-98765", ["Content-Type"] = "application/json", Cookie = "sid=abcdef" })
        table.sort(sec)
        print("secrets", table.concat(sec, " "), #secrets.header_values({ Accept = "x" }))
        -- both clients declare their credential headers to specula.secrets
        local ca = an(BASE .. "/x", { headers = { ["Proxy-Authorization"] = "Basic cHg6cHc=" } })
        local co = oa(BASE .. "/x", { headers = { ["Proxy-Authorization"] = "Basic cHg6cHc=" } })
        print("clients", secrets.scrub("via Basic cHg6cHc= proxy"), secrets.scrub_message("via Basic cHg6cHc= proxy", co._secrets))
      ]])
      assert.equals("true", line(out, "bounded"))
      assert.equals("100\t400\t1000", line(out, "nojitter"))
      assert.equals("784111777\t784111777\t784111777\tnil", line(out, "date"))
      assert.equals("10000\t2000\t250", line(out, "wait"))
      assert.equals("nil\tnil\tnil\tpart of the stream was already delivered", line(out, "decide"))
      assert.equals("nil", line(out, "exhausted"))
      assert.equals("Bearer [redacted] [redacted] x-api-key: [redacted] https://h/x?api_key=[redacted]&a=1 [redacted]",
                    line(out, "scrub"))
      assert.equals("https://api.example.com/v1/chat", line(out, "endpoint"))
      assert.equals("Basic cHg6cHc= g-123456 sid=abcdef tok-98765\t0", line(out, "secrets"))
      assert.equals("via Basic [redacted] proxy\tvia Basic [redacted] proxy", line(out, "clients"))
    end)

    it("cancelling a task stops its retry wait at once #timing", function()
      local out = run([[
        local c = oa(BASE .. "/status/429?retry_after=30", { retry = { max_retries = 3 } })
        local t = specula.spawn(function() return c:chat { messages = MSG } end)
        specula.sleep(150)
        local t0 = specula.now()
        t:cancel()
        print("state", t:state(), specula.now() - t0 < 50)
        local left = specula.settle()
        print("left", left.timers, left.transfers)
      ]])
      assert.equals("cancelled\ttrue", line(out, "state"))
      assert.equals("0\t0", line(out, "left"))
    end)
  end)

  describe("faults", function()
    it("a stream cut off mid-body fails the same way whenever the cut is noticed: retried until an event was delivered", function()
      -- Every cut point of two recorded streams, each served three ways:
      -- headers, body part and close at once; the body 20 ms after the
      -- headers; the body in 7-byte pieces. The outcome must follow from
      -- the bytes alone: before the first delta event is complete the
      -- request is retried, after it the error says part was delivered,
      -- once [DONE] is in (OpenAI) the result stands.
      local out = run([[
        local function ends(data, marker)
          local at = assert(data:find(marker, 1, true))
          return data:find("\n\n", at, true) + 1         -- the byte that completes the event
        end
        local cases = {
          { name = "oa_text.sse", first = '"content":"Paris is"', done = "data: [DONE]",
            call = function(url, cb) return oa(url, { retry = { base_ms = 0, max_retries = 1 } }):chat { messages = MSG, on_delta = cb } end },
          { name = "an_text.sse", first = '"text":"yes"',
            call = function(url, cb) return an(url, { retry = { base_ms = 0, max_retries = 1 } }):messages { messages = MSG, on_delta = cb } end },
        }
        local ways = { "&pause=0", "&split=0&pause=20", "&chunk=7&pause=0" }
        local runs, wrong = 0, 0
        for _, c in ipairs(cases) do
          local data = assert(io.open(DIR .. "/" .. c.name, "rb")):read("*a")
          local first, done = ends(data, c.first), c.done and ends(data, c.done)
          local cuts = {}
          for n = 0, #data, 11 do cuts[#cuts + 1] = n end
          for _, n in ipairs({ first - 1, first, done and done - 1, done, #data }) do cuts[#cuts + 1] = n end
          for _, n in ipairs(cuts) do
            local want = (done and n >= done) and "ok" or (n >= first and "delivered") or "retried"
            for _, way in ipairs(ways) do
              local deltas = 0
              local r, e = c.call(BASE .. "/file?path=" .. c.name .. "&cut=" .. n .. way, function() deltas = deltas + 1 end)
              local got
              if r then got = "ok"
              elseif e:find("part of the stream was already delivered", 1, true) and e:find("after 1 attempt)", 1, true)
                and deltas >= 1 then got = "delivered"
              elseif e:find("after 2 attempts)", 1, true) and not e:find("delivered", 1, true) and deltas == 0 then got = "retried"
              else got = "other: " .. e end
              runs = runs + 1
              if got ~= want then
                wrong = wrong + 1
                print("wrong", c.name, n, way, want, got, deltas)
              end
            end
          end
        end
        print("runs", runs, wrong)
      ]])
      local runs, wrong = line(out, "runs"):match("(%d+)\t(%d+)")
      assert.is_true(tonumber(runs) > 300, out)
      assert.equals("0", wrong, out)
    end)

    it("refuses client headers and keys that would break the header block, and scrubs encoded keys", function()
      local out = run([[
        local function make(f, o) local ok, e = pcall(f, o) return ok and "made" or ("ERR " .. e:gsub("^[^:]*:%d+: ", "")) end
        print("oa_nul", make(llm.openai.new, { api_key = "k", headers = { ["X-Org"] = "org\0id", ["X-After"] = "1" } }))
        print("oa_key", make(llm.openai.new, { api_key = "sk-abc\r\nX-Evil: 1" }))
        print("an_lf", make(llm.anthropic.new, { api_key = "k", headers = { ["anthropic-beta"] = "a\nb" } }))
        print("an_version", make(llm.anthropic.new, { api_key = "k", version = "2023-06-01\0" }))
        print("an_name", make(llm.anthropic.new, { api_key = "k", headers = { ["bad name"] = "v" } }))
        -- a gateway that quotes the key JSON-escaped in its error
        local SK = "sk-live/AB+cd:ef"
        local function q(x) return (x:gsub("[^%w]", function(ch) return string.format("%%%02X", ch:byte()) end)) end
        local url = BASE .. "/status/401?body=" .. q('{"error":{"message":"Incorrect API key provided: sk-live\\/AB+cd:ef","type":"invalid_request_error"}}')
        local _, e1 = oa(url, { api_key = SK }):chat { messages = MSG }
        local _, e2 = an(url, { api_key = SK }):messages { messages = MSG }
        print("oa_err", e1)
        print("an_err", e2)
      ]])
      assert.equals("ERR specula.llm.openai.new: the value of header 'X-Org' contains a NUL byte", line(out, "oa_nul"))
      assert.equals("ERR specula.llm.openai.new: api_key contains a control character (NUL, CR, LF, ...)", line(out, "oa_key"))
      assert.equals("ERR specula.llm.anthropic.new: the value of header 'anthropic-beta' contains a line break (CR or LF)",
                    line(out, "an_lf"))
      assert.equals("ERR specula.llm.anthropic.new: the value of header 'anthropic-version' contains a NUL byte",
                    line(out, "an_version"))
      assert.equals("ERR specula.llm.anthropic.new: header name 'bad name' is not a valid HTTP header name", line(out, "an_name"))
      for _, tag in ipairs({ "oa_err", "an_err" }) do
        local l = line(out, tag)
        assert.truthy(l:find("401 invalid_request_error: Incorrect API key provided: [redacted]", 1, true), l)
        assert.is_nil(l:find("AB+cd", 1, true), l)
        assert.is_nil(l:find("sk-live", 1, true), l)
      end
    end)
  end)

  describe("anthropic", function()
    it("assembles text, thinking and tool_use, firing on_tool_name before the input completes", function()
      local out = run([[
        local order = {}
        local function rec(tag) return function(a, b, c) order[#order + 1] = tag .. ":" .. tostring(a) end end
        local c = an(file("an_tool.sse"), { beta = { "interleaved-thinking-2025-05-14", "fine-grained-tool-streaming-2025-05-14" } })
        local r = assert(c:messages { messages = MSG, max_tokens = 200,
          on_delta = rec("text"), on_thinking = rec("thinking"),
          on_tool_name = function(name, id, index) order[#order + 1] = "name:" .. name .. "/" .. id .. "/" .. index end,
          on_tool_input = rec("input"),
          on_tool_call = function(call) order[#order + 1] = "call:" .. call.name .. "/" .. call.input.location end })
        print("order", table.concat(order, "|"))
        print("content", r.content, r.thinking, r.stop_reason, r.usage.input_tokens, r.usage.output_tokens, r.model)
        local t = r.tool_calls[1]
        print("tool", #r.tool_calls, t.id, t.name, t.index, t.input.location, t.input.unit, t.input_text, t.incomplete)
        print("blocks", #r.blocks, r.blocks[1].type, r.blocks[1].signature, r.blocks[2].text, r.blocks[3].type)
        local h = c:_headers()
        print("headers", h["x-api-key"] == KEY, h["anthropic-version"], h["anthropic-beta"], h["content-type"])
        print("body", enc(c:messages_body { messages = MSG, system = "be brief", tools = {
          { type = "function", ["function"] = { name = "f", description = "d", parameters = { type = "object" } } } } }))
      ]])
      assert.equals("thinking:The user wants the weather.|text:Let me check|text: the weather.|"
        .. "name:get_weather/toolu_01T1x/2|input:{\"location\": \"San Fra|input:ncisco, CA\", \"unit\": \"celsius\"}|"
        .. "call:get_weather/San Francisco, CA", line(out, "order"))
      assert.equals("Let me check the weather.\tThe user wants the weather.\ttool_use\t310\t89\tclaude-sonnet-4-5-20250929",
                    line(out, "content"))
      assert.equals('1\ttoolu_01T1x\tget_weather\t2\tSan Francisco, CA\tcelsius\t{"location": "San Francisco, CA", '
        .. '"unit": "celsius"}\tnil', line(out, "tool"))
      assert.equals("3\tthinking\tEqQBCgIYAhIM1gbcDa9GJwZA\tLet me check the weather.\ttool_use", line(out, "blocks"))
      assert.equals("true\t2023-06-01\tinterleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14\tapplication/json",
                    line(out, "headers"))
      assert.equals('{"max_tokens":1024,"messages":[{"content":"hi","role":"user"}],"model":"claude-test","stream":true,'
        .. '"system":"be brief","tools":[{"description":"d","input_schema":{"type":"object"},"name":"f"}]}', line(out, "body"))
    end)

    it("assembles the streamed input of server_tool_use, mcp_tool_use and any block with input_json_delta", function()
      local out = run([[
        local calls = {}
        local r = assert(an(file("an_server.sse")):messages { messages = MSG,
          on_tool_call = function(c) calls[#calls + 1] = c.name end })
        local b = r.blocks
        print("server", b[1].type, b[1].id, b[1].name, enc(b[1].input), enc(b[1].raw.input), b[1].raw.id)
        print("result", b[2].type, b[2].raw.content[1].title)
        print("mcp", b[3].type, enc(b[3].input), enc(b[3].raw.input), b[3].raw.server_name)
        print("future", b[5].type, enc(b[5].input), enc(b[5].raw.input))
        print("calls", #r.tool_calls, r.tool_calls[1].name, enc(r.tool_calls[1].input), table.concat(calls, ","))
        print("raw", enc(r.raw.content[1].raw.input))
      ]])
      assert.equals('server_tool_use\tsrvtoolu_01\tweb_search\t{"query":"tides Brest"}\t{"query":"tides Brest"}\tsrvtoolu_01',
                    line(out, "server"))
      assert.equals("web_search_tool_result\tTides in Brest", line(out, "result"))
      assert.equals('mcp_tool_use\t{"days":2,"port":"Brest"}\t{"days":2,"port":"Brest"}\tharbour', line(out, "mcp"))
      assert.equals('future_tool_use\t{"n":1}\t{"n":1}', line(out, "future"))
      -- only the local tool is the caller's to run
      assert.equals('1\tcalc\t{"expr":"6*7"}\tcalc', line(out, "calls"))
      assert.equals('{"query":"tides Brest"}', line(out, "raw"))
    end)

    it("gives the same result when the stream is split at every byte offset", function()
      local out = run([[
        local data = assert(io.open(DIR .. "/an_tool.sse", "rb")):read("*a")
        local function once(q)
          local names = {}
          local r, e = an(file("an_tool.sse", q)):messages { messages = MSG,
            on_tool_name = function(n, id, i) names[#names + 1] = n .. id .. i end }
          if not r then return "ERR " .. e end
          return enc { r.content, r.thinking, r.blocks, r.tool_calls, r.stop_reason, r.usage, names }
        end
        local ref = once("")
        local bad = 0
        for i = 0, #data do
          if once("&split=" .. i) ~= ref then bad = bad + 1; print("mismatch", i) end
        end
        print("offsets", #data + 1, bad, ref:find("San Francisco", 1, true) ~= nil)
        print("bytewise", once("&chunk=1") == ref)
      ]])
      local n, bad, ok = line(out, "offsets"):match("(%d+)\t(%d+)\t(%a+)")
      assert.is_true(tonumber(n) > 2000)
      assert.equals("0", bad)
      assert.equals("true", ok)
      assert.equals("true", line(out, "bytewise"))
    end)

    it("reports a tool_use block cut off by max_tokens, a mid-stream error and HTTP errors", function()
      local out = run([[
        local names = {}
        local r = assert(an(file("an_maxtok.sse")):messages { messages = MSG,
          on_tool_name = function(n) names[#names + 1] = n end })
        local t = r.tool_calls[1]
        print("maxtok", r.stop_reason, t.name, t.incomplete, t.input, t.input_text, names[1], r.usage.output_tokens)
        local r2, e = an(file("an_error.sse")):messages { messages = MSG, on_delta = function() end }
        print("error", r2, e)
        local function q(s) return (s:gsub("[^%w]", function(c) return string.format("%%%02X", c:byte()) end)) end
        r2, e = an(BASE .. "/status/529?retry_after_ms=5&body=" .. q('{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'),
          { retry = { base_ms = 1, max_retries = 1 } }):messages { messages = MSG }
        print("overloaded", e)
        local r0 = requests()
        r2, e = an(BASE .. "/status/400?body=" .. q('{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}'),
          { retry = { max_retries = 3 } }):messages { messages = MSG }
        print("credit", e, requests() - r0 - 1)
        r2, e = an("http://127.0.0.1:1", { retry = { base_ms = 1, max_retries = 1 } }):messages { messages = MSG }
        print("refused", e)
        r2, e = an(file("an_tool.sse", "&chunk=900")):messages { messages = MSG }
        print("ok", r2 and r2.tool_calls[1].name, e)
      ]])
      assert.equals('max_tokens\twrite_file\ttrue\tnil\t{"path": "notes.txt", "content": "lorem ip\twrite_file\t16',
                    line(out, "maxtok"))
      assert.equals("nil\tanthropic: error in stream: overloaded_error: Overloaded (POST " .. server.base .. "/file)",
                    line(out, "error"))
      assert.equals("anthropic: 529 overloaded_error: Overloaded (POST " .. server.base .. "/status/529, after 2 attempts)",
                    line(out, "overloaded"))
      assert.matches("^anthropic: 400 invalid_request_error: Your credit balance is too low .*after 1 attempt%); not retried",
                     line(out, "credit"))
      assert.matches("\t1$", line(out, "credit"))
      assert.matches("^anthropic: ECONNREFUSED: POST http://127%.0%.0%.1:1: .*%(after 2 attempts%)$", line(out, "refused"))
      assert.equals("get_weather\tnil", line(out, "ok"))
    end)

    it("serves as a judge through chat{} with OpenAI-style messages", function()
      local out = run([[
        local c = an(file("an_text.sse"))
        local judge = specula.verify.llm_judge(c)
        print("judge", judge("Paris", "paris, France", { question = "capital?" }))
        local req = llm.anthropic.from_openai { messages = { { role = "system", content = "S1" },
          { role = "user", content = "U" }, { role = "system", content = "S2" } }, max_tokens = 3, stop = "X" }
        print("converted", enc { req.system, req.messages, req.stop_sequences })
        local r = assert(c:chat { messages = { { role = "system", content = "judge" }, { role = "user", content = "ok?" } } })
        print("chat", r.content, r.stop_reason)
        local names = {}
        r = assert(an(file("an_whole.json", nil, "application/json")):messages { messages = MSG,
          on_tool_name = function(n, id, i) names[#names + 1] = n .. "/" .. id .. "/" .. i end })
        print("whole", r.content, r.tool_calls[1].input.expr, r.stop_reason, r.usage.output_tokens, names[1])
      ]])
      assert.equals("true\taccept: judge said yes", line(out, "judge"))
      assert.equals('["S1\\n\\nS2",[{"content":"U","role":"user"}],["X"]]', line(out, "converted"))
      assert.equals("yes\tend_turn", line(out, "chat"))
      assert.equals("Sure.\t2+2\ttool_use\t12\tcalc/toolu_9/1", line(out, "whole"))
    end)
  end)

  it("keeps the key out of the trace and results of the offline example", function()
    local trace = H.tmpfile("mh_trace.json")
    local st, out, err = H.specula({ "run", H.root .. "/examples/multihop_qa.lua", "--query",
      "In which country was the director of The Glass Orchard born?", "--set", "offline=1", "--k", "3",
      "--trace", trace }, { OPENAI_API_KEY = KEY, ANTHROPIC_API_KEY = KEY })
    assert.equals(0, st, err)
    local t = H.read(trace)
    assert.is_truthy(t and #t > 100, "no trace written")
    assert.is_nil(t:find(KEY, 1, true))
    assert.is_nil(out:find(KEY, 1, true))
    assert.is_nil(err:find(KEY, 1, true))
    assert.equals("Estria", H.json().decode(out).answer)
  end)
end)
