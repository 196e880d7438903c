-- specula.verify: verifiers compare a predicted observation (or action) with
-- the actual one.
--
-- Every verifier is a function (predicted, actual, ctx) -> ok, reason where
-- ok is a boolean and reason a short string starting with "accept:" or
-- "reject:" that ends up in the trace.
--
-- Observations may be strings or tables; the compared text is text.of(v):
-- the table's `answer`, else `text`, else `content` when it is a string,
-- else its canonical JSON.
--
--   verify.exact                      canonical-JSON equality (lossless)
--   verify.normalized                 equality after text.normalize
--   verify.spechop                    SpecHop appendix D.4 rule-based verifier
--   verify.spechop_with(opts)         the same with other thresholds
--   verify.jaccard(threshold)         token-set Jaccard after stop-words
--   verify.name_only                  actions: same tool name (lossy)
--   verify.cosine(embedder, threshold)
--   verify.llm_judge(client, prompt, opts)
--   verify.all{...}, verify.any{...}  combinators
--   verify.text_of(v)                 = text.of
--   verify.REFUSAL_PATTERNS           the refusal/uncertainty phrases

local text = require("specula.text")

local type, tostring, tonumber, pcall, error = type, tostring, tonumber, pcall, error
local getmetatable, pairs, ipairs = getmetatable, pairs, ipairs
local format, find, sub = string.format, string.find, string.sub
local concat, sqrt, floor = table.concat, math.sqrt, math.floor
local normalize, text_of = text.normalize, text.of
local to_set = text.set

local M = {}

-- Built-in verifiers name themselves (and their options) in the records'
-- provenance (specula.internal.tags, read by specula.provenance).
local tag = require("specula.internal.tags").tag

M.text_of = text_of

local json
local function canonical(v)
  if not json then json = require("specula.json") end
  return json.canonical(v)
end

local function is_callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return mt ~= nil and type(mt) == "table" and mt.__call ~= nil
end

-- Display a ratio with two decimals, unless two decimals would make it look
-- equal to the threshold it is compared with.
local function show(x, thr)
  local s = format("%.2f", x)
  if thr and x ~= thr and s == format("%.2f", thr) then
    s = format("%.4f", x)
    if s == format("%.4f", thr) then s = format("%.6g", x) end
  end
  return s
end

local function show_thr(t)
  local s = format("%.2f", t)
  if tonumber(s) ~= t then s = format("%.6g", t) end
  return s
end

-- Floating-point slack for ">=" on ratios of small integers.
local EPS = 1e-12

local function clip(s, n)
  n = n or 40
  -- never cut inside a UTF-8 sequence: the reason goes into the record
  local cut, was_cut = require("specula.json").utf8_cut(s, n)
  if was_cut then return cut .. "..." end
  return cut
end

----------------------------------------------------------------------------
-- exact / normalized
----------------------------------------------------------------------------

--- Lossless verifier: the canonical JSON of both values must be identical
-- (specula.internal.exact: the default verifier, loaded without this module).
M.exact = require "specula.internal.exact"

--- Equality of the normalised texts.
function M.normalized(predicted, actual)
  local p, a = normalize(text_of(predicted)), normalize(text_of(actual))
  if p == a then return true, "accept: normalized match" end
  return false, "reject: normalized texts differ"
end

----------------------------------------------------------------------------
-- SpecHop D.4
----------------------------------------------------------------------------

--- Refusal / uncertainty phrases rejected in a speculation (SpecHop D.4).
-- They are matched on the normalised speculation at word boundaries, so
-- "I don't know." and "i dont know" both hit "i don't know" (apostrophes
-- become spaces on both sides) while "unknowns" would not hit "unknown".
M.REFUSAL_PATTERNS = {
  "i don't know", "i do not know", "i dont know", "don't know",
  "unknown", "not sure", "unsure", "uncertain",
  "information unavailable", "information is not available",
  "information not available", "not available", "no information",
  "no relevant information", "no relevant information found",
  "cannot determine", "can't determine", "cannot be determined",
  "unable to", "cannot answer", "can't answer", "cannot find", "can't find",
  "could not find", "couldn't find", "not enough information",
  "insufficient information", "no answer", "not provided",
  "not mentioned", "not specified", "no data", "i'm sorry", "i am sorry",
  "as an ai", "n/a",
}

-- Compiled refusal patterns: indexed by their first normalised word, each
-- entry { padded normalised phrase, display text, list position }.
local function compile_patterns(list)
  local index = {}
  for i = 1, #list do
    local p = list[i]
    if type(p) ~= "string" then
      error("specula.verify: refusal patterns must be strings", 3)
    end
    local n = normalize(p)
    if n ~= "" then
      local first = n:match("^%S+")
      local bucket = index[first]
      if not bucket then bucket = {}; index[first] = bucket end
      bucket[#bucket + 1] = { " " .. n .. " ", p, i }
    end
  end
  return index
end

-- The refusal pattern (earliest in the list) found in padded, or nil.
local function find_refusal(index, padded)
  local best
  for w in padded:gmatch("%S+") do
    local bucket = index[w]
    if bucket then
      for k = 1, #bucket do
        local pat = bucket[k]
        if (not best or pat[3] < best[3]) and find(padded, pat[1], 1, true) then
          best = pat
        end
      end
    end
  end
  return best and best[2]
end

local DEFAULT_PATTERNS = compile_patterns(M.REFUSAL_PATTERNS)

-- Digit runs of length >= 2 ("1925", "20" in "3.20"), as a list and a set.
local function numbers(s)
  local list, set = {}, {}
  for d in s:gmatch("%d+") do
    if #d >= 2 and not set[d] then set[d] = true; list[#list + 1] = d end
  end
  return list, set
end

-- Set of the tokens of an already normalised text that are not stop-words.
-- Set arithmetic over token sets, kept out of the JIT: Debian's LuaJIT
-- (2.1.0-beta3, git 20220320; LuaJIT issue #827) can run a compiled
-- pairs() loop that skips keys, which would miscount overlaps and flip a
-- verdict. Verdicts must not depend on the JIT.
local function common(as, ps)
  local inter = 0
  for w in pairs(as) do if ps[w] then inter = inter + 1 end end
  return inter
end
require("specula.internal.nojit")(common)   -- a pairs() walk: specula/internal/nojit.lua

local function content_set(normalized, stop)
  stop = stop or text.stopwords
  local set, n = {}, 0
  for w in normalized:gmatch("%S+") do
    if not stop[w] and not set[w] then set[w] = true; n = n + 1 end
  end
  return set, n
end

local function check_ratio(fname, name, v)
  if type(v) ~= "number" or v ~= v or v < 0 or v > 1 then
    error("specula.verify." .. fname .. ": " .. name ..
          " must be a number in [0,1]", 3)
  end
end

--- Build a SpecHop verifier. opts (all optional):
--   coverage = 0.72  share of target content tokens found in the speculation
--   jaccard  = 0.55  token-set Jaccard after stop-word removal
--   short    = 5     normalised length (characters) under which an exact
--                    token match is required
--   refusals = list  refusal phrases (default verify.REFUSAL_PATTERNS)
--   stopwords = set  stop-words (default text.stopwords)
--
-- The rules, in order (predicted = speculation, actual = target):
--   1. normalise both texts (text.normalize);
--   2. reject an empty speculation, or one containing a refusal phrase;
--   3. every number of two or more digits in the target must appear as a
--      number in the speculation;
--   4. if either normalised text is shorter than `short` characters, accept
--      only when both have the same set of tokens (stop-words included), and
--      reject otherwise -- our reading of "a perfect token match";
--   5. accept when one normalised text occurs inside the other at word
--      boundaries (either direction: the speculation may add or omit
--      context around the target's phrase; "india" is not found in
--      "indiana");
--   6. after stop-word removal accept when coverage >= `coverage` or
--      Jaccard >= `jaccard`; otherwise reject.
function M.spechop_with(opts)
  if opts ~= nil and type(opts) ~= "table" then
    error("specula.verify.spechop_with: options must be a table", 2)
  end
  opts = opts or {}
  local cov_t = opts.coverage == nil and 0.72 or opts.coverage
  local jac_t = opts.jaccard == nil and 0.55 or opts.jaccard
  local short = opts.short == nil and 5 or opts.short
  check_ratio("spechop_with", "coverage", cov_t)
  check_ratio("spechop_with", "jaccard", jac_t)
  if type(short) ~= "number" or short < 0 or short ~= floor(short) then
    error("specula.verify.spechop_with: short must be a non-negative integer", 2)
  end
  local patterns = DEFAULT_PATTERNS
  if opts.refusals ~= nil then
    if type(opts.refusals) ~= "table" then
      error("specula.verify.spechop_with: refusals must be a list of strings", 2)
    end
    patterns = compile_patterns(opts.refusals)
  end
  local stop = opts.stopwords
  if stop ~= nil and type(stop) ~= "table" then
    error("specula.verify.spechop_with: stopwords must be a set table", 2)
  end
  local cov_s, jac_s = show_thr(cov_t), show_thr(jac_t)

  return tag(function(predicted, actual)
    local p = normalize(text_of(predicted))
    local a = normalize(text_of(actual))

    -- 2. refusals
    if p == "" then return false, "reject: empty speculation" end
    local padded = " " .. p .. " "
    local refusal = find_refusal(patterns, padded)
    if refusal then
      return false, "reject: refusal pattern '" .. refusal .. "'"
    end

    -- 3. numeric consistency
    local need = numbers(a)
    if #need > 0 then
      local _, have = numbers(p)
      for i = 1, #need do
        if not have[need[i]] then
          return false, "reject: number " .. need[i] .. " missing"
        end
      end
    end

    -- 4. short answers
    if #a < short or #p < short then
      local ps, pn = to_set(text.split(p))
      local as, an = to_set(text.split(a))
      local same = pn == an and common(as, ps) == an
      if same then return true, "accept: short exact token match" end
      return false, "reject: short answer '" .. clip(#a < short and a or p) ..
                    "' needs an exact token match"
    end

    -- 5. substring at word boundaries, either direction
    local pa = " " .. a .. " "
    if find(padded, pa, 1, true) or find(pa, padded, 1, true) then
      return true, "accept: substring"
    end

    -- 6. lexical overlap after stop-words
    local ps, pn = content_set(p, stop)
    local as, an = content_set(a, stop)
    if an == 0 or pn == 0 then
      return false, "reject: no content tokens after stop-words"
    end
    local inter = common(as, ps)
    local coverage = inter / an
    if coverage >= cov_t - EPS then
      return true, "accept: coverage " .. show(coverage, cov_t) .. " >= " .. cov_s
    end
    local jac = inter / (an + pn - inter)
    if jac >= jac_t - EPS then
      return true, "accept: jaccard " .. show(jac, jac_t) .. " >= " .. jac_s
    end
    return false, "reject: coverage " .. show(coverage, cov_t) .. " < " .. cov_s ..
                  ", jaccard " .. show(jac, jac_t) .. " < " .. jac_s
  end, "spechop", { coverage = cov_t, jaccard = jac_t, short = short, refusals = opts.refusals, stopwords = opts.stopwords })
end

M.spechop = tag(M.spechop_with(), "spechop")
tag(M.normalized, "normalized")

----------------------------------------------------------------------------
-- Jaccard
----------------------------------------------------------------------------

--- Token-set Jaccard similarity after normalisation and stop-word removal.
-- Two texts with no content tokens count as similarity 1 when their
-- normalised forms are equal and 0 otherwise.
function M.jaccard(threshold)
  check_ratio("jaccard", "threshold", threshold)
  local ts = show_thr(threshold)
  return tag(function(predicted, actual)
    local pt = normalize(text_of(predicted))
    local at = normalize(text_of(actual))
    local ps, pn = content_set(pt)
    local as, an = content_set(at)
    local jac
    if pn == 0 and an == 0 then
      jac = (pt == at) and 1 or 0
    else
      local inter = common(as, ps)
      jac = inter / (an + pn - inter)
    end
    if jac >= threshold - EPS then
      return true, "accept: jaccard " .. show(jac, threshold) .. " >= " .. ts
    end
    return false, "reject: jaccard " .. show(jac, threshold) .. " < " .. ts
  end, "jaccard", { threshold = threshold })
end

----------------------------------------------------------------------------
-- name_only
----------------------------------------------------------------------------

local function tool_name(a)
  if type(a) ~= "table" then return nil end
  local n = a.tool
  if n == nil then n = a.name end
  if type(n) == "string" then return n end
  return nil
end

--- Actions {tool =, args =} (or {name =, ...}) match when the tool names
-- are equal; arguments are not compared, so this verifier is lossy.
function M.name_only(predicted, actual)
  local p, a = tool_name(predicted), tool_name(actual)
  if not p or not a then
    return false, "reject: not an action with a tool name"
  end
  if p == a then
    return true, "accept: tool name '" .. a .. "' matches (lossy: args not compared)"
  end
  return false, "reject: tool '" .. clip(p) .. "' ~= '" .. clip(a) .. "'"
end
tag(M.name_only, "name_only")

----------------------------------------------------------------------------
-- cosine over embeddings
----------------------------------------------------------------------------

local function call_embedder(embedder, list)
  if type(embedder) == "table" and type(embedder.embed) == "function" then
    return embedder:embed(list)
  end
  return embedder(list)
end

--- Cosine similarity of two numeric vectors; nil, err when they are not
-- usable (different lengths, non-numbers, zero norm).
local function cosine(u, v)
  if type(u) ~= "table" or type(v) ~= "table" then
    return nil, "embedding is not a vector"
  end
  local n = #u
  if n == 0 or n ~= #v then
    return nil, "vectors of different or zero length (" .. n .. ", " .. #v .. ")"
  end
  local dot, nu, nv = 0, 0, 0
  for i = 1, n do
    local x, y = u[i], v[i]
    if type(x) ~= "number" or type(y) ~= "number" then
      return nil, "non-numeric vector component at " .. i
    end
    -- NaN or infinity: no cosine (NaN compared false with every threshold
    -- and left the retriever without a best match, a crash)
    if x ~= x or y ~= y or x == math.huge or x == -math.huge or y == math.huge or y == -math.huge then
      return nil, "vector component at " .. i .. " is not finite"
    end
    dot = dot + x * y; nu = nu + x * x; nv = nv + y * y
  end
  if nu == 0 or nv == 0 then return nil, "zero vector" end
  return dot / (sqrt(nu) * sqrt(nv))
end
M.cosine_similarity = cosine

--- Embed a batch through an embedder (function or object with :embed);
-- returns the list of vectors or nil, err. Never raises.
local function embed(embedder, list)
  local ok, vecs, err = pcall(call_embedder, embedder, list)
  if not ok then return nil, tostring(vecs) end
  if vecs == nil then return nil, tostring(err or "no result") end
  if type(vecs) ~= "table" then return nil, "embedder returned " .. type(vecs) end
  for i = 1, #list do
    if type(vecs[i]) ~= "table" then
      return nil, "embedder returned no vector for input " .. i
    end
  end
  return vecs
end
M.embed = embed

local function check_embedder(fname, embedder)
  if not (is_callable(embedder) or
          (type(embedder) == "table" and type(embedder.embed) == "function")) then
    error("specula." .. fname .. ": embedder must be a function or an object with :embed(list)", 3)
  end
end
M._check_embedder = check_embedder

--- Accept when the cosine similarity of the embeddings of the two texts is
-- >= threshold (in [-1,1]). Identical texts are accepted without calling
-- the embedder. Embedder failures reject with the error as the reason.
function M.cosine(embedder, threshold)
  check_embedder("verify.cosine", embedder)
  if type(threshold) ~= "number" or threshold ~= threshold or
     threshold < -1 or threshold > 1 then
    error("specula.verify.cosine: threshold must be a number in [-1,1]", 2)
  end
  local ts = show_thr(threshold)
  return tag(function(predicted, actual)
    local p, a = text_of(predicted), text_of(actual)
    if p == a then return true, "accept: identical text" end
    local vecs, err = embed(embedder, { p, a })
    if not vecs then return false, "reject: embedder error: " .. clip(err, 120) end
    local c, cerr = cosine(vecs[1], vecs[2])
    if not c then return false, "reject: embedder error: " .. cerr end
    if c >= threshold - EPS then
      return true, "accept: cosine " .. show(c, threshold) .. " >= " .. ts
    end
    return false, "reject: cosine " .. show(c, threshold) .. " < " .. ts
  end, "cosine", { threshold = threshold })
end

----------------------------------------------------------------------------
-- LLM as judge
----------------------------------------------------------------------------

M.JUDGE_PROMPT = [[
You check whether a quickly guessed answer can stand in for the answer a slower, authoritative tool returned.

Question: {question}
Authoritative answer: {actual}
Guessed answer: {predicted}

Do both answers give the same facts (same names, dates, numbers and yes/no), so that continuing from the guessed answer leads to the same result? Reply with one word: yes or no.]]

local template -- loaded lazily (specula.template requires nothing from here)

-- Best-effort question for the judge prompt: ctx.question, else the action's
-- query-like argument, else the state's question.
local function question_of(ctx)
  if type(ctx) ~= "table" then return "" end
  if type(ctx.question) == "string" then return ctx.question end
  local action = ctx.action
  if type(action) == "table" then
    local args = action.args
    if type(args) == "string" then return args end
    if type(args) == "table" then
      for _, k in ipairs({ "query", "q", "question", "subquery", "subquestion" }) do
        if type(args[k]) == "string" then return args[k] end
      end
    end
  end
  local state = ctx.state
  if type(state) == "string" then return state end
  if type(state) == "table" then
    for _, k in ipairs({ "question", "query" }) do
      if type(state[k]) == "string" then return state[k] end
    end
  end
  return ""
end

local YES = { yes = true, ["true"] = true, correct = true, equivalent = true, same = true }
local NO = { no = true, ["false"] = true, incorrect = true, different = true }

--- Verdict of a judge reply: the first of yes/true/correct/equivalent/same
-- or no/false/incorrect/different among its normalised words.
local function verdict(reply)
  for w in normalize(reply):gmatch("%S+") do
    if YES[w] then return true end
    if NO[w] then return false end
  end
  return nil
end

--- LLM-as-judge verifier. client: an object with
-- client:chat{messages =, max_tokens =, temperature = 0} -> {content =} or
-- nil, err (a plain function taking the same table also works).
-- prompt: template text with {predicted}, {actual} and optionally
-- {question} (default verify.JUDGE_PROMPT). opts: max_tokens (default 8),
-- model, system (an optional system message).
function M.llm_judge(client, prompt, opts)
  local has_chat = type(client) == "table" and type(client.chat) == "function"
  if not (has_chat or is_callable(client)) then
    error("specula.verify.llm_judge: client must have a :chat(request) method", 2)
  end
  if prompt ~= nil and type(prompt) ~= "string" then
    error("specula.verify.llm_judge: prompt must be a string", 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error("specula.verify.llm_judge: options must be a table", 2)
  end
  opts = opts or {}
  template = template or require("specula.template")
  local tpl = template.new(prompt or M.JUDGE_PROMPT)
  for _, name in ipairs(tpl:names()) do
    if name ~= "predicted" and name ~= "actual" and name ~= "question" then
      error("specula.verify.llm_judge: unknown placeholder {" .. name ..
            "} in prompt (allowed: predicted, actual, question)", 2)
    end
  end
  local max_tokens = opts.max_tokens or 8
  return tag(function(predicted, actual, ctx)
    local vars = { predicted = text_of(predicted), actual = text_of(actual),
                   question = question_of(ctx) }
    local okr, content = pcall(tpl.render, tpl, vars)
    if not okr then return false, "reject: judge prompt error: " .. tostring(content) end
    local messages = {}
    if opts.system then messages[1] = { role = "system", content = opts.system } end
    messages[#messages + 1] = { role = "user", content = content }
    local req = { messages = messages, max_tokens = max_tokens, temperature = 0,
                  model = opts.model }
    local ok, res, err
    if has_chat then
      ok, res, err = pcall(client.chat, client, req)
    else
      ok, res, err = pcall(client, req)
    end
    if not ok then return false, "reject: judge error: " .. clip(tostring(res), 120) end
    if res == nil then return false, "reject: judge error: " .. clip(tostring(err), 120) end
    local reply = res
    if type(res) == "table" then reply = res.content or res.text end
    if type(reply) ~= "string" then return false, "reject: judge returned no text" end
    local v = verdict(reply)
    if v == true then return true, "accept: judge said yes" end
    if v == false then return false, "reject: judge said no" end
    return false, "reject: judge verdict unclear: '" .. clip(reply) .. "'"
  end, "llm_judge", { prompt = prompt or M.JUDGE_PROMPT, max_tokens = max_tokens, model = opts.model, system = opts.system })
end

----------------------------------------------------------------------------
-- combinators
----------------------------------------------------------------------------

local function check_list(fname, list)
  if type(list) ~= "table" or #list == 0 then
    error("specula.verify." .. fname .. ": expected a non-empty list of verifiers", 3)
  end
  for i = 1, #list do
    if not is_callable(list[i]) then
      error("specula.verify." .. fname .. ": verifier " .. i .. " is not a function", 3)
    end
  end
end

-- The combinators' one loop: run the verifiers in order until one gives
-- `stop_at` (false for all, true for any); the reason lists theirs.
local function combine(fname, list, stop_at, stopped, finished)
  check_list(fname, list)
  local n = #list
  return tag(function(predicted, actual, ctx)
    local reasons = {}
    for i = 1, n do
      local ok, reason = list[i](predicted, actual, ctx)
      reasons[i] = tostring(reason or (ok and "accept" or "reject"))
      if (not not ok) == stop_at then return stop_at, stopped .. i .. " (" .. concat(reasons, "; ") .. ")" end
    end
    return not stop_at, finished .. " (" .. concat(reasons, "; ") .. ")"
  end, fname, { verifiers = list })
end

--- Accept when every verifier accepts; stops at the first rejection.
-- Reason: "accept: all (r1; r2 ...)" / "reject: all failed at i (r1; ... ri)".
function M.all(list) return combine("all", list, false, "reject: all failed at ", "accept: all") end

--- Accept when some verifier accepts; stops at the first acceptance.
-- Reason: "accept: any matched at i (r1; ... ri)" / "reject: none (r1; ...)".
function M.any(list) return combine("any", list, true, "accept: any matched at ", "reject: none") end

return M
