-- Unit tests for specula.verify (and the specula.text helpers it uses).
local text = require("specula.text")
local verify = require("specula.verify")

-- distinct tokens with no digits that are not stop-words: kaa, kab, ...
local function words(n, first)
  local out = {}
  first = first or 0
  for i = first, first + n - 1 do
    out[#out + 1] = "k" .. string.char(97 + math.floor(i / 26)) .. string.char(97 + i % 26)
  end
  return out
end

-- fn must raise an error whose message contains needle (plain text) and
-- that is reported at the caller's line (this spec file).
local function assert_error(fn, needle)
  local ok, err = pcall(fn)
  assert.is_false(ok, "expected an error")
  err = tostring(err)
  assert.is_truthy(err:find(needle, 1, true), "error was: " .. err)
  assert.is_truthy(err:find("verify_spec.lua:%d+: ") , "error not reported at the caller: " .. err)
end

local function reversed(list)
  local out = {}
  for i = #list, 1, -1 do out[#out + 1] = list[i] end
  return out
end

local function join(...)
  local out = {}
  for _, list in ipairs({ ... }) do
    for _, w in ipairs(list) do out[#out + 1] = w end
  end
  return table.concat(out, " ")
end

describe("specula.text", function()
  it("normalize lowercases, folds diacritics, drops punctuation, collapses spaces", function()
    assert.are.equal("hello world it s 1000000 or 3.5",
      text.normalize("  Héllo, Wörld!  It's 1,000,000 — or 3.5%? "))
    assert.are.equal("nguyen tan dung", text.normalize("Nguyễn Tấn Dũng"))
    assert.are.equal("strasse lodz", text.normalize("Straße ŁÓDŹ"))
    assert.are.equal("ecole", text.normalize("e\204\129cole"))          -- NFD input
    assert.are.equal("cafe", text.normalize("caf\233"))                   -- Latin-1 byte
    assert.are.equal("ca coute deux euros", text.normalize("Ça coûte “deux” euros…"))
    assert.are.equal("", text.normalize(" \t\n "))
  end)

  it("content_tokens drops stop-words but keeps negations", function()
    assert.are.same({ "paris", "capital" }, text.content_tokens("Paris is the capital"))
    assert.are.same({ "not", "american" }, text.content_tokens("They are not American"))
  end)

  it("squad_normalize removes articles and punctuation", function()
    assert.are.equal("beatles", text.squad_normalize("The Beatles!"))
    assert.are.equal("theater", text.squad_normalize("Theater, an' a"))
    assert.are.equal("then another anthem", text.squad_normalize("Then another anthem, a"))
    assert.are.equal("100", text.squad_normalize("1,0.0"))
  end)

  it("of picks answer, text, content, then canonical JSON", function()
    assert.are.equal("A", text.of({ answer = "A", text = "T" }))
    assert.are.equal("T", text.of({ text = "T", content = "C" }))
    assert.are.equal("C", text.of({ content = "C" }))
    assert.are.equal("42", text.of(42))
    assert.are.equal("", text.of(nil))
    assert.are.equal('{"a":1,"b":[2]}', text.of({ b = { 2 }, a = 1 }))
  end)

  it("rejects non-string input with a clear error", function()
    assert_error(function() text.normalize(12) end, "specula.text.normalize: expected a string, got number")
  end)
end)

describe("specula.verify.spechop", function()
  local V = verify.spechop
  local cases = {
    -- years and quantities
    { "1925", "1925", true, "^accept: short exact token match$" },
    { "He was born in 1926", "He was born in 1925", false, "^reject: number 1925 missing$" },
    { "population of 12500 in 2010", "The population was 12,500 in 2010.", true,
      "^accept: coverage 1.00 >= 0.72$" },
    { "born 1911 or 1925", "1911 and 1925", true, "^accept" },
    { "35 million people", "3.5 million people", false,
      "^reject: coverage 0.67 < 0.72, jaccard 0.50 < 0.55$" },
    { "about 200 km", "about 2,000 km", false, "^reject: number 2000 missing$" },
    -- refusals
    { "I don't know.", "Paris", false, "^reject: refusal pattern 'i don't know'$" },
    { "Information unavailable", "Paris", false,
      "^reject: refusal pattern 'information unavailable'$" },
    { "Unknown", "Paris", false, "^reject: refusal pattern 'unknown'$" },
    { "N/A", "Paris", false, "^reject: refusal pattern 'n/a'$" },
    { "I'm not sure, maybe Paris", "Paris", false, "^reject: refusal pattern 'not sure'$" },
    { "The answer cannot be determined", "Paris", false, "^reject: refusal pattern" },
    { "", "Paris", false, "^reject: empty speculation$" },
    { "   ", "Paris", false, "^reject: empty speculation$" },
    -- short answers
    { "yes.", "Yes", true, "^accept: short exact token match$" },
    { "No", "no", true, "^accept: short exact token match$" },
    { "United States", "USA", false, "^reject: short answer 'usa' needs an exact token match$" },
    { "Yes, they are", "yes", false, "^reject: short answer" },
    { "USA", "United States of America", false, "^reject: short answer 'usa'" },
    -- diacritics
    { "Nguyen Tan Dung", "Nguyễn Tấn Dũng", true, "^accept: substring$" },
    { "Zoe Saldana", "Zoë Saldaña", true, "^accept: substring$" },
    { "Sao Paulo", "São Paulo, Brazil", true, "^accept: substring$" },
    -- substring, both directions, at word boundaries only
    { "The director is Basil Dearden.", "Basil Dearden", true, "^accept: substring$" },
    { "Basil Dearden", "British film director Basil Dearden", true, "^accept: substring$" },
    { "Indiana Jones", "India", false, "^reject: coverage 0.00 < 0.72" },
    -- overlap
    { "Anti-Flag", "anti flag", true, "^accept: substring$" },
    { "Thiruvananthapuram", "Thiruvananthapuram, India.", true, "^accept: substring$" },
    { "Charles Darwin", "Albert Einstein", false, "^reject: coverage 0.00 < 0.72, jaccard 0.00 < 0.55$" },
  }
  for i, c in ipairs(cases) do
    it(string.format("case %d: %q vs %q", i, c[1], c[2]), function()
      local ok, reason = V(c[1], c[2], {})
      assert.are.equal(c[3], ok, reason)
      assert.is_string(reason)
      assert.is_truthy(reason:find(c[4]), "reason was: " .. reason)
    end)
  end

  it("coverage exactly at, just above and just below 0.72", function()
    local t = words(25)
    -- 18 of 25 target tokens (reversed: no substring), 20 extra tokens so that
    -- Jaccard stays low: coverage 0.72 exactly
    local at = join(reversed({ unpack(t, 1, 18) }), words(20, 100))
    local ok, reason = V(at, join(t), {})
    assert.is_true(ok, reason)
    assert.are.equal("accept: coverage 0.72 >= 0.72", reason)

    -- 3 of 4: 0.75
    local t4 = words(4)
    ok, reason = V(join({ t4[3], t4[2], t4[1] }, words(6, 100)), join(t4), {})
    assert.is_true(ok, reason)
    assert.are.equal("accept: coverage 0.75 >= 0.72", reason)

    -- 5 of 7: 0.714, and Jaccard 5/10 = 0.5
    local t7 = words(7)
    ok, reason = V(join(reversed({ unpack(t7, 1, 5) }), words(3, 100)), join(t7), {})
    assert.is_false(ok, reason)
    assert.are.equal("reject: coverage 0.71 < 0.72, jaccard 0.50 < 0.55", reason)
  end)

  it("Jaccard exactly at, just above and just below 0.55", function()
    -- target 20 tokens, speculation 11 of them: coverage 0.55 < 0.72, J = 11/20
    local t = words(20)
    local ok, reason = V(join(reversed({ unpack(t, 1, 11) })), join(t), {})
    assert.is_true(ok, reason)
    assert.are.equal("accept: jaccard 0.55 >= 0.55", reason)

    -- 7 of 10 plus 2 extra: coverage 0.70, J = 7/12 = 0.583
    local t10 = words(10)
    ok, reason = V(join(reversed({ unpack(t10, 1, 7) }), words(2, 100)), join(t10), {})
    assert.is_true(ok, reason)
    assert.are.equal("accept: jaccard 0.58 >= 0.55", reason)

    -- 6 of 11: J = 6/11 = 0.5454..., printed with more digits than 0.55
    local t11 = words(11)
    ok, reason = V(join(reversed({ unpack(t11, 1, 6) })), join(t11), {})
    assert.is_false(ok, reason)
    assert.are.equal("reject: coverage 0.55 < 0.72, jaccard 0.5455 < 0.55", reason)

    -- 11 of 20 plus one extra: J = 11/21
    ok, reason = V(join(reversed({ unpack(t, 1, 11) }), words(1, 100)), join(t), {})
    assert.is_false(ok, reason)
    assert.are.equal("reject: coverage 0.55 < 0.72, jaccard 0.52 < 0.55", reason)
  end)

  it("ignores stop-words in the overlap test", function()
    -- content tokens: {eiffel, tower, located, paris} vs {eiffel, tower, paris}
    local ok, reason = V("the Eiffel Tower in Paris", "The Eiffel Tower is located in Paris", {})
    assert.is_true(ok, reason)
    assert.are.equal("accept: coverage 0.75 >= 0.72", reason)
  end)

  it("reads table observations through answer/text/content", function()
    assert.is_true((V({ answer = "Paul Wendkos" }, { text = "Paul Wendkos" })))
    assert.is_false((V({ content = "I don't know" }, "Paul Wendkos")))
  end)

  it("spechop_with overrides the thresholds", function()
    local t4 = words(4)
    local strict = verify.spechop_with { coverage = 0.8, jaccard = 0.9 }
    local ok, reason = strict(join({ t4[3], t4[2], t4[1] }, words(6, 100)), join(t4))
    assert.is_false(ok)
    assert.are.equal("reject: coverage 0.75 < 0.80, jaccard 0.30 < 0.90", reason)

    local lax_short = verify.spechop_with { short = 0 }
    ok, reason = lax_short("in 1925", "1925")
    assert.is_true(ok, reason)
    assert.are.equal("accept: substring", reason)
    assert.is_false((verify.spechop("in 1925", "1925")))

    local custom = verify.spechop_with { refusals = { "no idea" } }
    ok, reason = custom("No idea!", "Paris")
    assert.is_false(ok)
    assert.are.equal("reject: refusal pattern 'no idea'", reason)
  end)

  it("validates its options", function()
    assert_error(function() verify.spechop_with { coverage = 1.5 } end, "specula.verify.spechop_with: coverage must be a number in [0,1]")
    assert_error(function() verify.spechop_with { jaccard = "x" } end, "specula.verify.spechop_with: jaccard must be a number in [0,1]")
    assert_error(function() verify.spechop_with { short = -1 } end, "specula.verify.spechop_with: short must be a non-negative integer")
  end)
end)

describe("specula.verify simple verifiers", function()
  it("exact compares canonical JSON", function()
    assert.is_true((verify.exact("a", "a")))
    local ok, reason = verify.exact({ tool = "search", args = { q = "x", k = 5 } },
                                    { args = { k = 5, q = "x" }, tool = "search" })
    assert.is_true(ok, reason)
    assert.are.equal("accept: exact", reason)
    ok, reason = verify.exact({ a = 1 }, { a = 2 })
    assert.is_false(ok)
    assert.are.equal("reject: not identical", reason)
    assert.is_false((verify.exact("Paris", "paris")))
  end)

  it("normalized compares normalised text", function()
    assert.is_true((verify.normalized("Hello, World!", "hello world")))
    assert.is_true((verify.normalized("Zoë", { answer = "zoe" })))
    local ok, reason = verify.normalized("hello", "hello world")
    assert.is_false(ok)
    assert.are.equal("reject: normalized texts differ", reason)
  end)

  it("jaccard uses the threshold and reports the value", function()
    local j = verify.jaccard(0.5)
    local ok, reason = j("climate change effects", "effects of climate change")
    assert.is_true(ok)
    assert.are.equal("accept: jaccard 1.00 >= 0.50", reason)
    ok, reason = j("climate change", "impact of climate warming")
    assert.is_false(ok)
    assert.are.equal("reject: jaccard 0.25 < 0.50", reason)
    assert_error(function() verify.jaccard(2) end, "specula.verify.jaccard: threshold must be a number in [0,1]")
    assert_error(function() verify.jaccard() end, "specula.verify.jaccard: threshold must be a number in [0,1]")
  end)

  it("name_only compares tool names and says it is lossy", function()
    local ok, reason = verify.name_only({ tool = "search", args = { q = "a" } },
                                        { tool = "search", args = { q = "b" } })
    assert.is_true(ok)
    assert.is_truthy(reason:find("lossy", 1, true))
    ok, reason = verify.name_only({ tool = "search" }, { tool = "fetch" })
    assert.is_false(ok)
    assert.are.equal("reject: tool 'search' ~= 'fetch'", reason)
    ok, reason = verify.name_only("search", { tool = "search" })
    assert.is_false(ok)
    assert.are.equal("reject: not an action with a tool name", reason)
  end)
end)

describe("specula.verify.cosine", function()
  -- deterministic bag-of-words embedder over a fixed vocabulary
  local VOCAB = { "climate", "change", "effects", "impact", "paris", "france", "capital" }
  local calls
  local function embed(list)
    calls = calls + 1
    local out = {}
    for i, s in ipairs(list) do
      local v = {}
      local n = text.normalize(s)
      for k, w in ipairs(VOCAB) do
        v[k] = select(2, (" " .. n .. " "):gsub(" " .. w .. " ", "")) + 0
      end
      v[#VOCAB + 1] = 0.01     -- never a zero vector
      out[i] = v
    end
    return out
  end
  before_each(function() calls = 0 end)

  it("accepts at or above the threshold, rejects below", function()
    local v = verify.cosine(embed, 0.6)
    local ok, reason = v("climate change effects", "impact of climate change")
    -- vectors (1,1,1,0) and (1,1,0,1): cosine ~ 2/3
    assert.is_true(ok, reason)
    assert.is_truthy(reason:find("^accept: cosine 0%.67 >= 0%.60$"), reason)
    ok, reason = verify.cosine(embed, 0.7)("climate change effects", "impact of climate change")
    assert.is_false(ok)
    assert.is_truthy(reason:find("^reject: cosine 0%.67 < 0%.70$"), reason)
    assert.are.equal(2, calls)
  end)

  it("accepts identical text without calling the embedder", function()
    local ok, reason = verify.cosine(embed, 0.99)("Paris", { answer = "Paris" })
    assert.is_true(ok)
    assert.are.equal("accept: identical text", reason)
    assert.are.equal(0, calls)
  end)

  it("works with an object embedder", function()
    local obj = { embed = function(self, list) return embed(list) end }
    assert.is_true((verify.cosine(obj, 0.9)("Paris, France", "france paris")))
  end)

  it("turns embedder failures into rejections", function()
    local ok, reason = verify.cosine(function() return nil, "HTTP 503" end, 0.5)("a", "b")
    assert.is_false(ok)
    assert.are.equal("reject: embedder error: HTTP 503", reason)
    ok, reason = verify.cosine(function() error("boom", 0) end, 0.5)("a", "b")
    assert.is_false(ok)
    assert.are.equal("reject: embedder error: boom", reason)
    ok, reason = verify.cosine(function() return { { 1, 0 } } end, 0.5)("a", "b")
    assert.is_false(ok)
    assert.is_truthy(reason:find("^reject: embedder error: embedder returned no vector"), reason)
    ok, reason = verify.cosine(function() return { { 0, 0 }, { 1, 0 } } end, 0.5)("a", "b")
    assert.is_false(ok)
    assert.are.equal("reject: embedder error: zero vector", reason)
  end)

  it("validates its arguments", function()
    assert.has_error(function() verify.cosine(42, 0.5) end)
    assert_error(function() verify.cosine(embed, 2) end, "specula.verify.cosine: threshold must be a number in [-1,1]")
  end)
end)

describe("specula.verify.llm_judge", function()
  local function client(reply, err)
    local c = { requests = {} }
    function c:chat(req)
      self.requests[#self.requests + 1] = req
      if type(reply) == "function" then return reply(req) end
      if reply == nil then return nil, err end
      return { content = reply }
    end
    return c
  end

  it("accepts on yes and fills the prompt", function()
    local c = client("Yes.")
    local v = verify.llm_judge(c)
    local ok, reason = v("Paul Wendkos", { answer = "Paul Wendkos (director)" },
                         { action = { tool = "search", args = { query = "Who directed Face of a Fugitive?" } } })
    assert.is_true(ok)
    assert.are.equal("accept: judge said yes", reason)
    local req = c.requests[1]
    assert.are.equal(0, req.temperature)
    assert.is_number(req.max_tokens)
    local prompt = req.messages[#req.messages].content
    assert.is_truthy(prompt:find("Who directed Face of a Fugitive?", 1, true))
    assert.is_truthy(prompt:find("Guessed answer: Paul Wendkos\n", 1, true))
    assert.is_truthy(prompt:find("Authoritative answer: Paul Wendkos (director)", 1, true))
  end)

  it("rejects on no, on errors and on unclear replies", function()
    local ok, reason = verify.llm_judge(client("No, they differ."))("a", "b")
    assert.is_false(ok); assert.are.equal("reject: judge said no", reason)
    ok, reason = verify.llm_judge(client(nil, "timeout after 30s"))("a", "b")
    assert.is_false(ok); assert.are.equal("reject: judge error: timeout after 30s", reason)
    ok, reason = verify.llm_judge(client(function() error("socket closed", 0) end))("a", "b")
    assert.is_false(ok); assert.are.equal("reject: judge error: socket closed", reason)
    ok, reason = verify.llm_judge(client("maybe"))("a", "b")
    assert.is_false(ok); assert.are.equal("reject: judge verdict unclear: 'maybe'", reason)
  end)

  it("uses a custom prompt and its question from the state", function()
    local c = client("TRUE")
    local v = verify.llm_judge(c, "Q={question} P={predicted} A={actual}")
    assert.is_true((v("x", "y", { state = { question = "main?" } })))
    assert.are.equal("Q=main? P=x A=y", c.requests[1].messages[1].content)
  end)

  it("rejects prompts with unknown placeholders and bad clients", function()
    assert_error(function() verify.llm_judge(client("yes"), "{gold}") end, "specula.verify.llm_judge: unknown placeholder {gold} in prompt (allowed: predicted, actual, question)")
    assert_error(function() verify.llm_judge({}) end, "specula.verify.llm_judge: client must have a :chat(request) method")
  end)
end)

describe("specula.verify combinators", function()
  local calls
  local function yes(tag) return function() calls[#calls + 1] = tag; return true, "accept: " .. tag end end
  local function no(tag) return function() calls[#calls + 1] = tag; return false, "reject: " .. tag end end
  before_each(function() calls = {} end)

  it("all short-circuits on the first rejection", function()
    local ok, reason = verify.all { yes("a"), no("b"), yes("c") }("p", "q")
    assert.is_false(ok)
    assert.are.equal("reject: all failed at 2 (accept: a; reject: b)", reason)
    assert.are.same({ "a", "b" }, calls)
    calls = {}
    ok, reason = verify.all { yes("a"), yes("b") }("p", "q")
    assert.is_true(ok)
    assert.are.equal("accept: all (accept: a; accept: b)", reason)
  end)

  it("any short-circuits on the first acceptance", function()
    local ok, reason = verify.any { no("a"), yes("b"), yes("c") }("p", "q")
    assert.is_true(ok)
    assert.are.equal("accept: any matched at 2 (reject: a; accept: b)", reason)
    assert.are.same({ "a", "b" }, calls)
    ok, reason = verify.any { no("a"), no("b") }("p", "q")
    assert.is_false(ok)
    assert.are.equal("reject: none (reject: a; reject: b)", reason)
  end)

  it("composes real verifiers and passes ctx through", function()
    local seen
    local v = verify.all { verify.spechop, function(_, _, ctx) seen = ctx; return true, "accept: ctx" end }
    local ctx = { hop = 3 }
    assert.is_true((v("Basil Dearden", "Basil Dearden")))
    assert.is_true((v("Basil Dearden", "Basil Dearden", ctx)))
    assert.are.equal(ctx, seen)
  end)

  it("rejects empty or non-function lists", function()
    assert_error(function() verify.all {} end, "specula.verify.all: expected a non-empty list of verifiers")
    assert_error(function() verify.any { verify.exact, 5 } end, "specula.verify.any: verifier 2 is not a function")
  end)
end)
