-- examples/tsss.lua — TSSS ("Think Straight, Stop Smart") multi-hop RAG.
--
-- Template reasoning: every prompt is the TSSS document so far (appendix B,
-- specula.template.tsss) — "To answer the Main Question (...) I propose the
-- following additional question: Question: ... <contexts> Based on the
-- contexts, ..." — and each hop's prompt extends the previous one byte for
-- byte, so the provider's prompt cache (or the server's KV cache) covers all
-- but the new tokens. The model only writes the variable parts: the next
-- sub-query, the response from the retrieved contexts, the final answer.
--
-- Retriever-based terminator: before a new sub-query is searched, its
-- embedding is compared with the main question's and the earlier
-- sub-queries'; at cosine >= 0.85 the model stops asking and answers
-- (specula.terminate.retriever).
--
-- Each hop's action is a sub-query; the target tool T retrieves 3 passages
-- (SEARCH_URL) and the model writes the response; the observation is
-- { answer = response, contexts = passages }. The speculator S, a small
-- model, continues the same byte-stable prompt with an empty contexts slot
-- (so it shares the prompt cache) and the SpecHop verifier compares its
-- response with T's.
--
-- Offline (no network, no key, deterministic, a few seconds):
--   specula run examples/tsss.lua --query "In which country was the director of The Glass Orchard born?" --set offline=1 --k 3
--   specula run examples/tsss.lua                  # demo: sequential vs speculative
-- Online:
--   OPENAI_BASE_URL=http://localhost:8000/v1 SPECULA_MODEL=... SPECULA_SPEC_MODEL=... \
--   SPECULA_EMBED_MODEL=intfloat/e5-base-v2 SEARCH_URL='http://localhost:8888/search?format=json&q={q}' \
--   specula run examples/tsss.lua --input questions.jsonl --k 3 --out results.jsonl
--
-- Environment:
--   OPENAI_BASE_URL      OpenAI-compatible endpoint; when unset the offline backend is used
--   OPENAI_API_KEY       its API key (local servers need none)
--   SPECULA_MODEL        the generator
--   SPECULA_SPEC_MODEL   the speculator (default: SPECULA_MODEL)
--   SPECULA_EMBED_MODEL  the terminator's embedding model (POST /embeddings)
--   SEARCH_URL           retrieval URL with {q}; JSON results or plain text
-- Settings (--set key=value):
--   offline=1|0          force the offline backend on or off
--   max_hops=N           hop budget (default 4; a record's max_hops wins)
--   tau=T                terminator threshold (default 0.85)
--   spec_p=P             offline: how often the speculator knows the answer (0.6)
local specula = require "specula"

local world = require "offline_world"     -- examples/offline_world.lua
local tsss, text, sim = specula.template.tsss, specula.text, specula.sim
local NO_INFO = world.NO_INFO

-- The online prompt: one fixed system line, then the TSSS document as the
-- user message. Nothing before the document changes between hops.
local SYSTEM = "Continue the document after its last line. Write only the continuation, on one line."

----------------------------------------------------------------------------
-- Online backend
----------------------------------------------------------------------------

-- Search results -> the 3 passages of the contexts slot, one per line.
local function passages_of(res)
  return world.passages(res, 3, function(_, p) return p end)
end

local function online_backend()
  local model = os.getenv("SPECULA_MODEL")
  local M = specula.llm.openai.new { model = model }
  local S = specula.llm.openai.new { model = os.getenv("SPECULA_SPEC_MODEL") or model }
  local E = specula.llm.openai.new { model = os.getenv("SPECULA_EMBED_MODEL") }
  local url = os.getenv("SEARCH_URL")
  if not (url and url:find("{q}", 1, true)) then
    error("tsss: set SEARCH_URL to a search URL with {q}, or run with --set offline=1", 0)
  end
  local search = specula.tools.http { name = "retrieve", url = url, result = passages_of, timeout_ms = 10000 }
  local function complete(client, prompt, max_tokens)
    local r, err = client:chat { messages = { { role = "system", content = SYSTEM }, { role = "user", content = prompt } },
                                 max_tokens = max_tokens, temperature = 0, stop = { "\n" } }
    if not r then error(err, 0) end
    return r.content
  end
  return {
    model = function(prompt) return complete(M, prompt, 64) end,
    speculator = function(prompt) return complete(S, prompt, 32) end,
    search = function(q, ctx) return search.call({ q = q }, ctx) end,
    embedder = E:embedder(),
  }
end

----------------------------------------------------------------------------
-- Offline backend: the fictional world of examples/offline_world.lua,
-- simulated latencies, a fake model that reads the TSSS document, and a
-- bag-of-words embedder.
----------------------------------------------------------------------------

local RESPOND = { director = "%s was directed by %s.", year = "%s was born in %s.",
                  place = "%s was born in %s.", country = "%s is in %s." }

local LATENCY = {  -- ms, lognormal (mean, cv)
  seg = sim.law { "lognormal", 30, 0.3 }, answer = sim.law { "lognormal", 30, 0.3 },
  spec = sim.law { "lognormal", 20, 0.3 }, search = sim.law { "lognormal", 150, 0.4 },
}

-- The fake generator: reads the document and writes the continuation.
local function fake_model(prompt)
  local question = prompt:match("^To answer the Main Question %((.-)%),") or prompt:match("^Question: (.-)\n") or ""
  local asked = {}
  for q in prompt:gmatch("Question: ([^\n]+)\n") do asked[#asked + 1] = q end
  local plan, conclude = world.plan(question)
  if prompt:find("Question:$") then                   -- the next sub-query
    local hop = plan and plan[#asked + 1]
    if hop then return " " .. world.ASK[hop[1]]:format(hop[2]) end
    return " " .. question                             -- nothing new: restates the question
  elseif prompt:find("Based on the contexts,$") then  -- the response from the contexts
    local contexts = prompt:match(".*Question: [^\n]+\n(.-)\nBased on the contexts,$") or ""
    local truth, rel, subject = world.truth(asked[#asked] or "")
    if truth and contexts:find(truth, 1, true) then return " " .. RESPOND[rel]:format(subject, truth) end
    return " no relevant information was found."
  end
  -- the final answer, from the hops the document holds
  local answers = {}
  for i = 1, select(2, prompt:gsub("Based on the contexts,", "")) do
    local hop = plan and plan[i]
    answers[i] = hop and world.FACTS[hop[1]][hop[2]]
  end
  local ok, answer = pcall(conclude or error, answers)
  return " " .. (ok and answer or "unknown")
end

-- The fake speculator: the same document with no contexts; right with
-- probability spec_p (keyed draws), else unsure.
local function fake_speculator(prompt, ctx)
  local q = prompt:match("Question: ([^\n]+)\n\nBased on the contexts,$") or ""
  local truth, rel, subject = world.truth(q)
  if truth and sim.draw(ctx, "guess") < (tonumber(ctx.set.spec_p) or 0.6) then
    return " " .. RESPOND[rel]:format(subject, truth)
  end
  return " I am not sure."
end

local function fake_search(q)
  local list = world.search(q, 3)
  return list and table.concat(list, "\n") or NO_INFO
end

-- A deterministic bag-of-words embedder: content words hashed into 256 slots.
local function bag_of_words(list)
  local vectors = {}
  for i, s in ipairs(list) do
    local v = {}
    for d = 1, 256 do v[d] = 0 end
    for _, w in ipairs(text.content_tokens(s)) do
      local h = 0
      for k = 1, #w do h = (h * 31 + w:byte(k)) % 1000003 end
      v[h % 256 + 1] = v[h % 256 + 1] + 1
    end
    vectors[i] = v
  end
  return vectors
end

local offline_backend = {
  model = function(prompt, ctx, kind)
    sim.wait(LATENCY[kind == "answer" and "answer" or "seg"], ctx, kind)
    return fake_model(prompt)
  end,
  speculator = function(prompt, ctx)
    sim.wait(LATENCY.spec, ctx, "spec")
    return fake_speculator(prompt, ctx)
  end,
  search = function(q, ctx)
    sim.wait(LATENCY.search, ctx, "search")
    return fake_search(q)
  end,
  embedder = bag_of_words,
}

-- Offline with --set offline=1, or when no OPENAI_BASE_URL is set.
local backend = world.backend_chooser(offline_backend, online_backend)

local terminators = {}
local function terminator(ctx)
  local B = backend(ctx)
  local tau = tonumber(ctx.set.tau) or 0.85
  local key = tostring(B) .. "/" .. tau
  terminators[key] = terminators[key] or
    specula.terminate.retriever { embedder = B.embedder, tau = tau, cache = B == offline_backend }
  return terminators[key]
end

----------------------------------------------------------------------------
-- The agent
----------------------------------------------------------------------------

local function with_hop(hops, hop)
  local out = {}
  for i, h in ipairs(hops) do out[i] = h end
  out[#out + 1] = hop
  return out
end

local function final(state, ctx, why)
  local prompt
  if #state.hops == 0 then
    prompt = "Question: " .. state.question .. "\nAnswer:"
  else
    prompt = tsss.build { question = state.question, hops = state.hops, next = "final" }
  end
  local raw = backend(ctx).model(prompt, ctx, "final")
  return { segment = why .. "\n" .. raw, final = tsss.first_line(raw) }
end

local function budget(ctx)
  local rec = type(ctx.record) == "table" and ctx.record or {}
  return tonumber(rec.max_hops) or tonumber(ctx.set.max_hops) or tonumber(ctx.max_hops) or 4
end

local agent = specula.agent {
  name = "tsss",

  init = function(query, ctx)
    return { question = query, hops = {}, max_hops = budget(ctx) }
  end,

  step = function(state, ctx)
    if #state.hops >= state.max_hops then return final(state, ctx, "stop: hop budget") end
    local raw = backend(ctx).model(tsss.build { question = state.question, hops = state.hops }, ctx, "seg")
    local subquery = tsss.first_line(raw)
    if subquery == "" then return final(state, ctx, "stop: no sub-query") end
    local asked = {}
    for i, h in ipairs(state.hops) do asked[i] = h.question end
    local stop, why = terminator(ctx):check(state.question, asked, subquery)
    if stop == nil then error(why, 0) end              -- the embedder failed
    if stop then return final(state, ctx, why) end
    return { segment = raw, action = { tool = "retrieve", args = { q = subquery } } }
  end,

  update = function(state, step, observation)
    local hop = { question = step.action.args.q, contexts = observation.contexts, response = observation.answer }
    return { question = state.question, hops = with_hop(state.hops, hop), max_hops = state.max_hops }
  end,

  tools = {
    retrieve = {
      -- T: retrieve 3 passages, then the model answers from them
      call = function(args, ctx)
        local B = backend(ctx)
        local contexts = B.search(args.q, ctx)
        local hops = with_hop(ctx.state.hops, { question = args.q, contexts = contexts })
        local raw = B.model(tsss.build { question = ctx.state.question, hops = hops }, ctx, "answer")
        return { answer = tsss.first_line(raw), contexts = contexts }
      end,
      -- S: a small model continues the same document without contexts
      speculate = function(args, ctx)
        local hops = with_hop(ctx.state.hops, { question = args.q, contexts = "" })
        local raw = backend(ctx).speculator(tsss.build { question = ctx.state.question, hops = hops }, ctx)
        return { answer = tsss.first_line(raw), contexts = "" }
      end,
      verify = specula.verify.spechop,     -- compares the responses (observation.answer)
      cost = 0.001,
    },
  },
  policy = { retrieve = "full" },         -- retrieval is read-only
}

if #arg > 0 then return agent end

-- Demo (no arguments): the built-in questions, sequential then speculative.
local questions = {
  "Which film has the director who was born earlier, The Glass Orchard or Harbor of Ash?",
  "In which country was the director of The Glass Orchard born?",
  "Where was the director of Seven Quiet Winters born?",
}
local base
for _, c in ipairs({ { "sequential", 1 }, { "spechop", 3 } }) do
  local recs, agg = specula.run(agent, { queries = questions, mode = c[1], k = c[2], set = { offline = 1 } })
  base = base or agg.wall_ms
  print(string.format("%s k=%d: RelLat %.3f, speedup %.2fx", c[1], c[2], agg.rel_lat or 0, base / agg.wall_ms))
  for _, r in ipairs(recs) do
    print(string.format("  %s -> %s (%d hops)", r.query, tostring(r.answer or r.error), r.stats and r.stats.hops or 0))
  end
end
