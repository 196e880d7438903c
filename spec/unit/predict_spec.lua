local predict = require "specula.predict"

local function a(tool, args) return { tool = tool, args = args } end

describe("pattern predictor", function()
  it("predicts nothing before it has seen a transition", function()
    local p = predict.pattern{}
    assert.same({}, p({ a("search", { q = "x" }) }))
  end)

  it("counts next (tool, shape) given previous and derives arguments", function()
    local p = predict.pattern{ top = 2, rules = {
      ["search->fetch"] = function(prev) return { url = "u/" .. prev.args.q } end,
    } }
    for _ = 1, 3 do p:observe(a("search", { q = "a" }), a("fetch", { url = "u/a" })) end
    p:observe(a("search", { q = "b" }), a("answer", { text = "t" }))
    local r = p({ { tool = "search", args = { q = "zz" }, observation = "..." } })
    assert.equals(1, #r)  -- "answer" has no rule and a different shape: no guess
    assert.equals("fetch", r[1].tool)
    assert.same({ url = "u/zz" }, r[1].args)
    assert.is_true(math.abs(r[1].confidence - 0.75) < 1e-9)
  end)

  it("reuses the previous args when the shapes agree and no rule says otherwise", function()
    local p = predict.pattern{}
    p:observe(a("fetch", { url = "x" }), a("extract", { url = "x" }))
    local r = p({ a("fetch", { url = "y" }) })
    assert.same({ url = "y" }, r[1].args)
  end)

  it("ranks by count and keeps the top m", function()
    local p = predict.pattern{ top = 2, copy_args = true }
    for i = 1, 5 do p:observe(a("s", { q = "a" }), a("x", { q = "a" })) end
    for i = 1, 3 do p:observe(a("s", { q = "a" }), a("y", { q = "a" })) end
    p:observe(a("s", { q = "a" }), a("z", { q = "a" }))
    local r = p({ a("s", { q = "k" }) })
    assert.equals(2, #r)
    assert.same({ "x", "y" }, { r[1].tool, r[2].tool })
    assert.is_true(r[1].confidence > r[2].confidence)
  end)

  it("keys on the argument shape, not the values", function()
    assert.equals("{n:number,q:string}", predict.shape({ q = "x", n = 3 }))
    local p = predict.pattern{}
    p:observe(a("s", { q = "a" }), a("t", { q = "b" }))
    assert.same({}, p({ a("s", { n = 1 }) }))   -- different shape: no data
  end)

  it("saves and loads its state", function()
    local p = predict.pattern{}
    p:observe_trajectory({ a("s", { q = "a" }), a("f", { q = "a" }), a("g", { q = "a" }) })
    local path = os.tmpname()
    assert.is_true(p:save(path))
    local p2 = predict.pattern{}
    assert.is_true(p2:load(path))
    assert.same(p({ a("s", { q = "z" }) }), p2({ a("s", { q = "z" }) }))
    os.remove(path)
    local bad = os.tmpname()
    local f = io.open(bad, "w") f:write("{not json") f:close()
    local ok, err = p2:load(bad)
    assert.is_nil(ok)
    assert.matches("predictor load:", err)
    os.remove(bad)
    local n3 = predict.ngram{ n = 3 }
    assert.is_nil((n3:restore(p:state())))
  end)
end)

describe("n-gram back-off", function()
  it("uses the longest context with data and discounts backed-off guesses", function()
    local p = predict.ngram{ n = 3, copy_args = true, discount = 0.5 }
    p:observe_trajectory({ a("a", { q = 1 }), a("b", { q = 1 }), a("c", { q = 1 }) })
    p:observe_trajectory({ a("x", { q = 1 }), a("b", { q = 1 }), a("d", { q = 1 }) })
    -- after (a, b) the trigram says c
    local r = p({ a("a", { q = 2 }), a("b", { q = 2 }) })
    assert.equals("c", r[1].tool)
    assert.equals(1, r[1].confidence)
    -- after (z, b): no trigram, the bigram on b splits c/d, discounted
    r = p({ a("z", { q = 2 }), a("b", { q = 2 }) })
    assert.equals(2, #r)
    assert.is_true(math.abs(r[1].confidence - 0.25) < 1e-9)
  end)

  it("validates its options", function()
    assert.has_error(function() predict.ngram{ n = 1 } end)
    assert.has_error(function() predict.pattern{ top = 0 } end)
    assert.has_error(function() predict.pattern{ rules = 5 } end)
  end)
end)
