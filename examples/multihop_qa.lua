-- examples/multihop_qa.lua — SpecHop's off-the-shelf multi-hop QA pipeline.
--
-- The model M splits the question into sub-questions with the appendix D.2
-- prompts; each sub-question is one hop's action. The target tool T searches
-- (SEARCH_URL) and M turns the snippets into a short sub-answer: that
-- sub-answer is the hop's observation. While T runs, the speculator S — a
-- small, fast model with the D.3 prompt — answers the sub-question directly,
-- the agent runs ahead on that guess, and the SpecHop rule-based verifier
-- (D.4) compares the guess with T's sub-answer. The D.1 early stops end a
-- trajectory when M repeats a sub-question or when search keeps finding
-- nothing ("No relevant information found").
--
-- Offline (no network, no key, deterministic, a few seconds):
--   specula run examples/multihop_qa.lua --query "In which country was the director of The Glass Orchard born?" --set offline=1 --k 3
--   specula run examples/multihop_qa.lua           # demo: sequential vs SpecHop on built-in questions
-- Online (any OpenAI-compatible server, any search API that returns JSON or text):
--   OPENAI_BASE_URL=http://localhost:8000/v1 SPECULA_MODEL=Qwen/Qwen3-8B SPECULA_SPEC_MODEL=Qwen/Qwen3-0.6B \
--   SEARCH_URL='http://localhost:8888/search?format=json&q={q}' \
--   specula run examples/multihop_qa.lua --input questions.jsonl --k 3 --out results.jsonl
--
-- Environment:
--   OPENAI_BASE_URL     OpenAI-compatible endpoint (OpenAI, vLLM, llama.cpp,
--                       Ollama's /v1). When unset the offline backend is used.
--   OPENAI_API_KEY      its API key (local servers need none)
--   SPECULA_MODEL       the model M
--   SPECULA_SPEC_MODEL  the speculator S (default: SPECULA_MODEL)
--   SEARCH_URL          the target tool's search: a URL with {q} (URL-encoded),
--                       e.g. SearxNG "...?format=json&q={q}" or a local E5
--                       retriever; JSON results (results[].content/snippet/
--                       text/title, or a list of passages) or plain text
-- Settings (--set key=value):
--   offline=1|0         force the offline backend on or off
--   max_hops=N          hop budget (default 4; a record's max_hops wins)
--   spec_p=P            offline: how often the speculator knows the answer (0.6)
local specula = require "specula"

local world = require "offline_world"     -- examples/offline_world.lua
local template, sim = specula.template, specula.sim
local P = template.spechop                  -- the D.2 / D.3 prompt templates
local NO_INFO = world.NO_INFO

local repeat_query = specula.terminate.repeat_query()
local no_info = specula.terminate.no_info { allowance = 1, marker = NO_INFO }

----------------------------------------------------------------------------
-- Online backend: M and S through specula.llm, T's search through an HTTP tool
----------------------------------------------------------------------------

-- Search results -> a few numbered "title: snippet" lines (SearxNG, E5 servers, ...).
local function snippets_of(res)
  return world.passages(res, 5, function(i, p) return "[" .. i .. "] " .. p end)
end

local function online_backend()
  local model = os.getenv("SPECULA_MODEL")
  local M = specula.llm.openai.new { model = model }
  local S = specula.llm.openai.new { model = os.getenv("SPECULA_SPEC_MODEL") or model }
  local url = os.getenv("SEARCH_URL")
  if not (url and url:find("{q}", 1, true)) then
    error("multihop_qa: set SEARCH_URL to a search URL with {q}, or run with --set offline=1", 0)
  end
  local search = specula.tools.http { name = "search", url = url, result = snippets_of, timeout_ms = 10000 }
  local function chat(client, messages, max_tokens)
    local r, err = client:chat { messages = messages, max_tokens = max_tokens, temperature = 0 }
    if not r then error(err, 0) end
    return r.content
  end
  return {
    model = function(messages, max_tokens) return chat(M, messages, max_tokens) end,
    speculator = function(messages) return chat(S, messages, 16) end,
    search = function(q, ctx) return search.call({ q = q }, ctx) end,
  }
end

----------------------------------------------------------------------------
-- Offline backend: the fictional world of examples/offline_world.lua,
-- simulated latencies, and fake models that read the rendered prompts and
-- answer from the world.
----------------------------------------------------------------------------

local LATENCY = {  -- ms, lognormal (mean, cv): M is slow-ish, S fast, search slowest
  seg = sim.law { "lognormal", 40, 0.3 }, answer = sim.law { "lognormal", 30, 0.3 },
  spec = sim.law { "lognormal", 20, 0.3 }, search = sim.law { "lognormal", 150, 0.4 },
}

local function field(prompt, label)   -- the text after "label:\n" up to a blank line
  return prompt:match(label .. ":\n(.-)\n\n") or ""
end

-- The fake model M: one reply per D.2 prompt kind.
local function fake_model(messages)
  local prompt = messages[#messages].content
  if prompt:find("violated the required format", 1, true) then     -- D.2 fallback
    local tag = prompt:match("valid <([%w_]+)>")
    local bad = field(prompt, "Previous output"):gsub("^The answer is ", ""):gsub("%.$", "")
    return "<" .. tag .. "> " .. bad .. " </" .. tag .. ">"
  end
  local question = field(prompt, "Main question")
  if prompt:find("Search results:", 1, true) then                   -- D.2 step 2: sub-answer
    local truth = world.truth(field(prompt, "Current subquestion"))
    local found = truth and prompt:find(truth, 1, true)
    return "<subanswer> " .. (found and truth or NO_INFO) .. " </subanswer>"
  end
  local trace = prompt:match("trace:\n(.-)\n\nOutput") or ""
  local asked = template.extract_all(trace, "subquestion")
  local answers = template.extract_all(trace, "subanswer")
  local plan, conclude = world.plan(question)
  if prompt:find("final answer tag", 1, true) then                  -- D.2 step 3: final answer
    local ok, answer = pcall(conclude, answers)
    if not (plan and ok and answer) then return "<final_answer> unknown </final_answer>" end
    return "The answer is " .. answer .. "."                         -- sloppy: no tags (see fallback)
  end
  -- D.2 step 1: the next sub-question; with nothing new to ask, M repeats
  -- itself, and the repeat-query stop ends the trajectory.
  local hop = plan and plan[#asked + 1]
  if not hop then return "<subquestion> " .. (asked[#asked] or question) .. " </subquestion>" end
  local subject = hop[3] and answers[hop[3]] or hop[2]   -- from an earlier hop's answer
  return "<subquestion> " .. world.ASK[hop[1]]:format(subject) .. " </subquestion>"
end

-- The fake speculator S: right with probability spec_p, else a wrong guess
-- or a refusal (both rejected by the verifier). Keyed draws: every run of a
-- query sees the same guesses.
local function fake_speculator(messages, ctx)
  local q = messages[#messages].content:match("<question>(.-)</question>") or ""
  local truth = world.truth(q)
  local p = tonumber(ctx.set.spec_p) or 0.6
  local u = sim.draw(ctx, "guess")
  if truth and u < p then return truth .. "</answer>" end
  if truth and u < p + (1 - p) / 2 then
    return (tonumber(truth) and tostring(truth + 3) or "Anna Lindqvist") .. "</answer>"
  end
  return "I don't know.</answer>"
end

-- The two passages that best match the query, numbered.
local function fake_search(q)
  local list = world.search(q, 2)
  if not list then return NO_INFO end
  for i = 1, #list do list[i] = "[" .. i .. "] " .. list[i] end
  return table.concat(list, "\n")
end

local offline_backend = {
  model = function(messages, max_tokens, ctx, kind)
    sim.wait(LATENCY[kind == "answer" and "answer" or "seg"], ctx, kind)
    return fake_model(messages)
  end,
  speculator = function(messages, ctx)
    sim.wait(LATENCY.spec, ctx, "spec")
    return fake_speculator(messages, ctx)
  end,
  search = function(q, ctx)
    sim.wait(LATENCY.search, ctx, "search")
    return fake_search(q)
  end,
}

-- Offline with --set offline=1, or when no OPENAI_BASE_URL is set.
local backend = world.backend_chooser(offline_backend, online_backend)

----------------------------------------------------------------------------
-- The agent
----------------------------------------------------------------------------

-- Ask M for one tagged answer; on a format violation, the D.2 fallback prompt.
local function ask(B, ctx, kind, messages, tag, max_tokens, max_hops)
  local out = B.model(messages, max_tokens, ctx, kind)
  local value = template.extract(out, tag)
  if value and value ~= "" then return value, out end
  local fix = P.fallback:render { max_hops = max_hops, bad_output = out, required_tag = "<" .. tag .. ">" }
  local out2 = B.model(fix, max_tokens, ctx, kind .. "_fix")
  value = template.extract(out2, tag) or template.strip_tags(out2, tag)
  return value, out .. "\n" .. out2
end

local function column(hops, key)
  local out = {}
  for i, h in ipairs(hops) do out[i] = h[key] end
  return out
end

local function final(state, ctx, why)
  local B = backend(ctx)
  local messages = P.final_answer:render { question = state.question, max_hops = state.max_hops,
                                           trace_blob = P.trace_blob(state.hops) }
  local answer, raw = ask(B, ctx, "final", messages, "final_answer", 128, state.max_hops)
  return { segment = why .. "\n" .. raw, final = answer }
end

local function budget(ctx)
  local rec = type(ctx.record) == "table" and ctx.record or {}
  return tonumber(rec.max_hops) or tonumber(ctx.set.max_hops) or tonumber(ctx.max_hops) or 4
end

local agent = specula.agent {
  name = "multihop-qa",

  init = function(query, ctx)
    return { question = query, hops = {}, max_hops = budget(ctx) }
  end,

  step = function(state, ctx)
    if #state.hops >= state.max_hops then return final(state, ctx, "stop: hop budget") end
    local stop, why = no_info:check(column(state.hops, "subanswer"))
    if stop then return final(state, ctx, why) end
    local messages = P.subquestion:render { question = state.question, max_hops = state.max_hops,
                                            hops_done = #state.hops, trace_blob = P.trace_blob(state.hops) }
    local subq, raw = ask(backend(ctx), ctx, "seg", messages, "subquestion", 64, state.max_hops)
    stop, why = repeat_query:check(column(state.hops, "subquestion"), subq)
    if stop then return final(state, ctx, why) end
    return { segment = raw, action = { tool = "search", args = { q = subq } } }
  end,

  update = function(state, step, observation)
    local hops = {}
    for i, h in ipairs(state.hops) do hops[i] = h end
    hops[#hops + 1] = { subquestion = step.action.args.q, subanswer = observation }
    return { question = state.question, hops = hops, max_hops = state.max_hops }
  end,

  tools = {
    search = {
      -- T: search, then M turns the snippets into the sub-answer (the observation)
      call = function(args, ctx)
        local B = backend(ctx)
        local snippets = B.search(args.q, ctx)
        if snippets == NO_INFO then return NO_INFO end
        local state = ctx.state
        local messages = P.subanswer:render { question = state.question, max_hops = state.max_hops,
                                              subquestion = args.q, search_snippets = snippets }
        return (ask(B, ctx, "answer", messages, "subanswer", 128, state.max_hops))
      end,
      -- S: a small model answers the sub-question directly (D.3)
      speculate = function(args, ctx)
        local reply = backend(ctx).speculator(P.speculator:render { subquery = args.q }, ctx)
        return P.postprocess(reply)
      end,
      verify = specula.verify.spechop,     -- D.4
      cost = 0.001,
    },
  },
  policy = { search = "full" },           -- search is read-only: it may run from guessed states
}

if #arg > 0 then return agent end        -- `specula run ... --query/--input`: run the agent

-- Demo (no arguments): the built-in questions, sequential then SpecHop.
local questions = {
  "Which film has the director who was born earlier, The Glass Orchard or Harbor of Ash?",
  "In which country was the director of The Glass Orchard born?",
  "Where was the director of Seven Quiet Winters born?",
  "When was the director of Harbor of Ash born?",
}
local base
for _, c in ipairs({ { "sequential", 1 }, { "spechop", 3 } }) do
  local recs, agg = specula.run(agent, { queries = questions, mode = c[1], k = c[2], set = { offline = 1 } })
  base = base or agg.wall_ms
  print(string.format("%s k=%d: RelLat %.3f, speedup %.2fx", c[1], c[2], agg.rel_lat or 0, base / agg.wall_ms))
  for _, r in ipairs(recs) do print("  " .. r.query .. " -> " .. tostring(r.answer or r.error)) end
end
