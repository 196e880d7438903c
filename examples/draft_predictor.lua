-- examples/draft_predictor.lua — a draft model predicts the next tool call.
--
-- The research agent of examples/paste_research.lua, but the predictor is a
-- small, fast LLM (the speculative tool-calling post, Co-Sight style): it is
-- asked for the next call several times; calls that several samples agree on
-- get a high confidence, and the engine starts the likely ones early (within
-- the eligibility policy and the EV gate). Matching stays exact, so answers
-- are unchanged.
--
--   specula run examples/draft_predictor.lua --input queries.jsonl --mode sequential
--
-- Online: DRAFT_BASE_URL (an OpenAI-compatible endpoint serving the small
-- model, e.g. a local llama.cpp server at http://127.0.0.1:8080/v1),
-- DRAFT_API_KEY, DRAFT_MODEL. Offline (the default): a deterministic stand-in
-- "small model" that gets the next call right most of the time.
local specula = require "specula"
local sim, json = specula.sim, specula.json

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local agent = assert(loadfile(here .. "/paste_research.lua"))()

local client
if os.getenv("DRAFT_BASE_URL") then
  client = specula.llm.openai.new { base_url = os.getenv("DRAFT_BASE_URL"),
    api_key = os.getenv("DRAFT_API_KEY"), model = os.getenv("DRAFT_MODEL") }
else
  -- The stand-in reads the calls so far from the prompt and proposes the
  -- pipeline's next call; each sample is right with probability 0.8 (keyed by
  -- the prompt and the sample's index, so runs repeat).
  local ORDER = { web_search = "arxiv_search", arxiv_search = "fetch_url", fetch_url = "extract_text",
                  extract_text = "summarize", summarize = "synthesize" }
  -- samples are counted per prompt: a count over every call would make a
  -- prompt's draws depend on what other queries and threads asked first
  local samples = {}
  client = {
    chat = function(self, req)
      specula.sleep(8) -- a small model is fast, not free
      local prompt = req.messages[#req.messages].content
      local sample = (samples[prompt] or 0) + 1
      samples[prompt] = sample
      local last_tool, last_args = prompt:match("\n%d+%. (%S+) (%b{}) %-> [^\n]*\n\nNext call:")
      local r = sim.draw({ id = prompt, seed = 0 }, "draft", sample % 3)
      if not last_tool then
        return { content = json.encode({ tool = "web_search", args = { query = prompt:match("Task: ([^\n]*)") } }) }
      end
      local args = json.decode(last_args) or {}
      local nxt = ORDER[last_tool]
      if not nxt or r > 0.8 then return { content = "{\"tool\": \"fetch_url\", \"args\": {\"url\": \"?\"}}" } end
      local out = ({
        fetch_url = function() return nil end,   -- needs the id from the result: the model can't see it here
        extract_text = function() return { url = args.url } end,
        summarize = function() return { source_url = args.url } end,
      })[nxt]
      local a = out and out() or nil
      if not a then return { content = "I am not sure." } end
      return { content = json.encode({ tool = nxt, args = a }) }
    end,
  }
end

local names = {}
for name in pairs(agent.tools) do names[#names + 1] = name end
table.sort(names)   -- (pairs' order changes from run to run, and the prompt with it)
agent.predict = specula.predict.draft { client = client, tools = names, samples = 3, top = 2 }
return agent
