-- Unit tests for specula.terminate.
local terminate = require("specula.terminate")
local text = require("specula.text")

-- Deterministic bag-of-words embedder: content words hashed into DIM
-- buckets, plus a tiny constant component so no vector is zero. It records
-- every batch it receives.
local DIM = 1021
local function bucket(w)
  local h = 7
  for i = 1, #w do h = (h * 31 + w:byte(i)) % DIM end
  return h + 1
end

local function make_embedder()
  local e = { calls = 0, batches = {} }
  function e.embed_list(list)
    e.calls = e.calls + 1
    e.batches[#e.batches + 1] = list
    local out = {}
    for i, s in ipairs(list) do
      local v = {}
      for k = 1, DIM do v[k] = 0 end
      for _, w in ipairs(text.content_tokens(s)) do
        local b = bucket(w)
        v[b] = v[b] + 1
      end
      v[DIM + 1] = 0.001
      out[i] = v
    end
    return out
  end
  return e
end

local function assert_error(fn, needle)
  local ok, err = pcall(fn)
  assert.is_false(ok, "expected an error")
  err = tostring(err)
  assert.is_truthy(err:find(needle, 1, true), "error was: " .. err)
  assert.is_truthy(err:find("terminate_spec.lua:%d+: "), "error not reported at the caller: " .. err)
end

describe("specula.terminate.retriever", function()
  local Q = "Who stars in the video One Last Time by the performer of Baby I?"

  it("continues on a new sub-query and stops on a near-duplicate", function()
    local e = make_embedder()
    local t = terminate.retriever { embedder = e.embed_list }
    assert.are.equal(0.85, t.tau)
    local stop, reason, score = t:check(Q, {}, "Who is the performer of Baby I?")
    -- shares "performer baby" with the question out of many words
    assert.is_false(stop, reason)
    assert.is_truthy(reason:find("^continue: max cosine"), reason)
    assert.is_true(score < 0.85)

    stop, reason, score = t:check(Q, { "Who is the performer of Baby I?" },
                                  "Who is the performer of Baby I")
    assert.is_true(stop)
    assert.is_true(score > 0.99)
    assert.are.equal("stop: cosine 1.00 >= 0.85 with sub-query 1", reason)
  end)

  it("stops when the new sub-query restates the main question", function()
    local e = make_embedder()
    local t = terminate.retriever { embedder = e.embed_list, tau = 0.9 }
    local stop, reason = t:check(Q, { "Who is the performer of Baby I?" },
      "Who stars in the video One Last Time by the performer of Baby I")
    assert.is_true(stop)
    assert.are.equal("stop: cosine 1.00 >= 0.90 with main question", reason)
  end)

  it("embeds everything in one batch call, once per distinct text", function()
    local e = make_embedder()
    local t = terminate.retriever { embedder = e.embed_list }
    t:check(Q, { "a b c", "d e f", "a b c" }, "g h i")
    assert.are.equal(1, e.calls)
    assert.are.same({ "g h i", Q, "a b c", "d e f" }, e.batches[1])
  end)

  it("accepts an embedder object and can cache vectors", function()
    local e = make_embedder()
    local obj = { embed = function(self, list) return e.embed_list(list) end }
    local t = terminate.retriever { embedder = obj, cache = true }
    assert.is_false((t:check(Q, {}, "Who is the performer of Baby I?")))
    assert.is_false((t:check(Q, { "Who is the performer of Baby I?" }, "Where was Ariana Grande born?")))
    local stop, reason = t:check(Q, { "Who is the performer of Baby I?", "Where was Ariana Grande born?" },
                                 "where was ariana grande born")
    assert.is_true(stop, reason)
    assert.are.equal("stop: cosine 1.00 >= 0.85 with sub-query 2", reason)
    assert.are.equal(3, e.calls)
    assert.are.same({ "Where was Ariana Grande born?" }, e.batches[2])
  end)

  it("uses the threshold: same pair, two taus", function()
    -- "alpha beta gamma" vs "alpha beta delta": cosine ~ 2/3
    local e = make_embedder()
    local lo = terminate.retriever { embedder = e.embed_list, tau = 0.6 }
    local hi = terminate.retriever { embedder = e.embed_list, tau = 0.7 }
    assert.is_true((lo:check("alpha beta gamma", {}, "alpha beta delta")))
    assert.is_false((hi:check("alpha beta gamma", {}, "alpha beta delta")))
    -- the comparison is >=: a cosine equal to tau stops
    -- ((3,4) . (4,3)) / 25 = 0.96 exactly
    local fixed = function(list)
      local out = {}
      for i, s in ipairs(list) do out[i] = (s == "new") and { 3, 4 } or { 4, 3 } end
      return out
    end
    local at = terminate.retriever { embedder = fixed, tau = 0.96 }
    local stop, reason, score = at:check("main", {}, "new")
    assert.are.equal(0.96, score)
    assert.is_true(stop, reason)
    assert.are.equal("stop: cosine 0.96 >= 0.96 with main question", reason)
    local above = terminate.retriever { embedder = fixed, tau = 0.97 }
    assert.is_false((above:check("main", {}, "new")))
  end)

  it("returns nil, err when the embedder fails", function()
    local t = terminate.retriever { embedder = function() return nil, "HTTP 429" end }
    local stop, err = t:check(Q, {}, "x")
    assert.is_nil(stop)
    assert.are.equal("specula.terminate.retriever: embedder error: HTTP 429", err)
    t = terminate.retriever { embedder = function() error("connection reset", 0) end }
    stop, err = t:check(Q, {}, "x")
    assert.is_nil(stop)
    assert.is_truthy(err:find("connection reset", 1, true))
    t = terminate.retriever { embedder = function() return { { 1 }, { 1, 2 } } end }
    stop, err = t:check(Q, {}, "x")
    assert.is_nil(stop)
    assert.is_truthy(err:find("different", 1, true), err)
    -- NaN or infinity in a vector: nil, err (NaN raised an arithmetic error on a nil index)
    for _, bad in ipairs({ 0 / 0, math.huge }) do
      t = terminate.retriever { embedder = function(list)
        local out = {}
        for i = 1, #list do out[i] = { bad, 1 } end
        return out
      end }
      stop, err = t:check(Q, { "sub one" }, "sub two")
      assert.is_nil(stop)
      assert.are.equal("specula.terminate.retriever: vector component at 1 is not finite", err)
    end
  end)

  it("validates its arguments", function()
    assert_error(function() terminate.retriever {} end, "embedder must be a function")
    assert_error(function() terminate.retriever { embedder = print, tau = 1.5 } end,
      "specula.terminate.retriever: tau must be a number in [-1,1]")
    local t = terminate.retriever { embedder = make_embedder().embed_list }
    assert_error(function() t:check(nil, {}, "x") end,
      "specula.terminate.retriever: question must be a string")
    assert_error(function() t:check("q", { 1 }, "x") end,
      "specula.terminate.retriever: previous_subqueries[1] must be a string")
  end)
end)

describe("specula.terminate.repeat_query", function()
  it("stops on a normalised repeat and says which hop", function()
    local t = terminate.repeat_query()
    local stop, reason = t:check({ "Who directed Jaws?", "When was Steven Spielberg born?" },
                                 "  when was STEVEN Spielberg born ")
    assert.is_true(stop)
    assert.are.equal("stop: sub-query repeats hop 2", reason)
    stop, reason = t:check({ "Who directed Jaws?" }, "Who directed Jaws 2?")
    assert.is_false(stop)
    assert.are.equal("continue: new sub-query", reason)
    assert.is_false((t:check({}, "anything")))
    assert.is_true((t({ "Où est Zoë?" }, "ou est zoe")))   -- callable, diacritics
  end)
end)

describe("specula.terminate.no_info", function()
  local MARK = "No relevant information found"

  it("allows one failure by default and stops at the second", function()
    local t = terminate.no_info()
    assert.are.equal(1, t.allowance)
    local obs = { "Paris is the capital of France.", MARK }
    local stop, reason = t:check(obs)
    assert.is_false(stop)
    assert.are.equal("continue: 1 observations with '" .. MARK .. "' <= allowance 1", reason)
    obs[3] = { answer = "no relevant information found." }
    stop, reason = t:check(obs)
    assert.is_true(stop)
    assert.are.equal("stop: 2 observations with '" .. MARK .. "' > allowance 1", reason)
  end)

  it("honours a larger allowance (DeepResearch: two)", function()
    local t = terminate.no_info { allowance = 2 }
    assert.is_false((t:check({ MARK, MARK })))
    assert.is_true((t:check({ MARK, MARK, MARK })))
  end)

  it("uses a custom marker and ignores other text", function()
    local t = terminate.no_info { allowance = 0, marker = "NOT FOUND" }
    assert.is_false((t:check({ "found it", "no relevant information found" })))
    assert.is_true((t:check({ "Result: not found." })))
    assert.are.equal(1, t:count({ "not found", "notfound" }))
  end)

  it("validates its options", function()
    assert_error(function() terminate.no_info { allowance = -1 } end,
      "specula.terminate.no_info: allowance must be a non-negative integer")
    assert_error(function() terminate.no_info { marker = "" } end,
      "specula.terminate.no_info: marker must be a non-empty string")
  end)
end)
