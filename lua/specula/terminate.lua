-- specula.terminate: early-stop rules for multi-hop agents.
--
--   terminate.retriever{embedder =, tau = 0.85, cache = false}
--       :check(question, previous_subqueries, new_subquery)
--         -> stop, reason, score      | nil, err (embedder failure)
--     TSSS retriever-based terminator: stop when the new sub-query's
--     embedding has cosine >= tau with the main question or with any earlier
--     sub-query (score = the largest of those cosines).
--
--   terminate.repeat_query()
--       :check(previous_subqueries, new_subquery) -> stop, reason
--     SpecHop D.1: stop when the new sub-query equals an earlier one after
--     text.normalize.
--
--   terminate.no_info{allowance = 1, marker = "No relevant information found"}
--       :check(observations) -> stop, reason
--     SpecHop D.1: stop when more than `allowance` observations contain the
--     marker (1 for 2WikiMultihopQA and MuSiQue, 2 for DeepResearch-9K).
--     The marker is looked for in the normalised observation text at word
--     boundaries, so case and punctuation do not matter.
--
-- Each checker is also callable directly: t(...) is t:check(...).

local text = require("specula.text")
local verify = require("specula.verify")

local type, tostring, error, setmetatable, format = type, tostring, error, setmetatable, string.format
local find = string.find
local normalize, text_of = text.normalize, text.of
local cosine, embed = verify.cosine_similarity, verify.embed

local M = {}

local function callable(class)
  class.__index = class
  class.__call = function(self, ...) return self:check(...) end
  return class
end

local function check_list_of_strings(fname, what, list)
  if list == nil then return {} end
  if type(list) ~= "table" then
    error("specula.terminate." .. fname .. ": " .. what .. " must be a list of strings", 3)
  end
  for i = 1, #list do
    if type(list[i]) ~= "string" then
      error("specula.terminate." .. fname .. ": " .. what .. "[" .. i .. "] must be a string", 3)
    end
  end
  return list
end

----------------------------------------------------------------------------
-- retriever-based terminator (TSSS)
----------------------------------------------------------------------------

local Retriever = callable({})

--- opts.embedder: function(list) -> vectors | nil, err, or an object with
-- :embed(list). opts.tau: threshold in [-1,1] (default 0.85, the TSSS
-- setting). opts.cache: when true, vectors are kept per text so a query's
-- earlier sub-queries are not embedded again (unbounded; use one terminator
-- per run, and only with a deterministic embedder).
function M.retriever(opts)
  if type(opts) ~= "table" then
    error("specula.terminate.retriever: expected an options table {embedder =, tau =}", 2)
  end
  verify._check_embedder("terminate.retriever", opts.embedder)
  local tau = opts.tau == nil and 0.85 or opts.tau
  if type(tau) ~= "number" or tau ~= tau or tau < -1 or tau > 1 then
    error("specula.terminate.retriever: tau must be a number in [-1,1]", 2)
  end
  return setmetatable({
    embedder = opts.embedder, tau = tau,
    cache = opts.cache and {} or nil,
  }, Retriever)
end

function Retriever:check(question, previous, new)
  if type(question) ~= "string" then
    error("specula.terminate.retriever: question must be a string", 2)
  end
  previous = check_list_of_strings("retriever", "previous_subqueries", previous)
  if type(new) ~= "string" then
    error("specula.terminate.retriever: new_subquery must be a string", 2)
  end
  -- candidates[1] is the main question, then the earlier sub-queries
  local texts = { new, question }
  for i = 1, #previous do texts[#texts + 1] = previous[i] end

  -- one batch with each distinct text missing from the cache
  local cache = self.cache
  local index, batch = {}, {}
  for i = 1, #texts do
    local t = texts[i]
    if index[t] == nil and not (cache and cache[t]) then
      batch[#batch + 1] = t
      index[t] = #batch
    end
  end
  local vecs = {}
  if #batch > 0 then
    local err
    vecs, err = embed(self.embedder, batch)
    if not vecs then return nil, "specula.terminate.retriever: embedder error: " .. tostring(err) end
    if cache then
      for i = 1, #batch do cache[batch[i]] = vecs[i] end
    end
  end
  local function vec(t)
    if cache and cache[t] then return cache[t] end
    return vecs[index[t]]
  end

  local vnew = vec(new)
  local best, best_i = -math.huge, nil
  for i = 2, #texts do
    local c, err = cosine(vnew, vec(texts[i]))
    if not c then return nil, "specula.terminate.retriever: " .. err end
    if c > best then best, best_i = c, i end
  end
  local what = best_i == 2 and "main question" or ("sub-query " .. (best_i - 2))
  if best >= self.tau - 1e-12 then
    return true, format("stop: cosine %.2f >= %.2f with %s", best, self.tau, what), best
  end
  return false, format("continue: max cosine %.2f < %.2f (%s)", best, self.tau, what), best
end

----------------------------------------------------------------------------
-- repeated sub-query (SpecHop D.1)
----------------------------------------------------------------------------

local Repeat = callable({})

function M.repeat_query()
  return setmetatable({}, Repeat)
end

function Repeat:check(previous, new)
  previous = check_list_of_strings("repeat_query", "previous_subqueries", previous)
  if type(new) ~= "string" then
    error("specula.terminate.repeat_query: new_subquery must be a string", 2)
  end
  local n = normalize(new)
  for i = 1, #previous do
    if normalize(previous[i]) == n then
      return true, "stop: sub-query repeats hop " .. i
    end
  end
  return false, "continue: new sub-query"
end

----------------------------------------------------------------------------
-- "No relevant information found" (SpecHop D.1)
----------------------------------------------------------------------------

local NoInfo = callable({})

function M.no_info(opts)
  if opts ~= nil and type(opts) ~= "table" then
    error("specula.terminate.no_info: options must be a table", 2)
  end
  opts = opts or {}
  local allowance = opts.allowance == nil and 1 or opts.allowance
  if type(allowance) ~= "number" or allowance < 0 or allowance ~= math.floor(allowance) then
    error("specula.terminate.no_info: allowance must be a non-negative integer", 2)
  end
  local marker = opts.marker == nil and "No relevant information found" or opts.marker
  if type(marker) ~= "string" or normalize(marker) == "" then
    error("specula.terminate.no_info: marker must be a non-empty string", 2)
  end
  return setmetatable({
    allowance = allowance, marker = marker,
    needle = " " .. normalize(marker) .. " ",
  }, NoInfo)
end

--- Count how many observations contain the marker.
function NoInfo:count(observations)
  if type(observations) ~= "table" then
    error("specula.terminate.no_info: observations must be a list", 2)
  end
  local n = 0
  for i = 1, #observations do
    local t = " " .. normalize(text_of(observations[i])) .. " "
    if find(t, self.needle, 1, true) then n = n + 1 end
  end
  return n
end

function NoInfo:check(observations)
  if type(observations) ~= "table" then
    error("specula.terminate.no_info: observations must be a list", 2)
  end
  local n = self:count(observations)
  if n > self.allowance then
    return true, format("stop: %d observations with '%s' > allowance %d",
                        n, self.marker, self.allowance)
  end
  return false, format("continue: %d observations with '%s' <= allowance %d",
                       n, self.marker, self.allowance)
end

return M
