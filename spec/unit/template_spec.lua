-- Unit tests for specula.template.
local template = require("specula.template")

local function assert_error(fn, needle)
  local ok, err = pcall(fn)
  assert.is_false(ok, "expected an error")
  err = tostring(err)
  assert.is_truthy(err:find(needle, 1, true), "error was: " .. err)
  assert.is_truthy(err:find("template_spec.lua:%d+: "), "error not reported at the caller: " .. err)
end

describe("specula.template.new", function()
  it("renders placeholders, numbers and repeated names", function()
    local t = template.new("Hello {name}, {name}! You are {age} ({ratio}).")
    assert.are.equal("Hello Ada, Ada! You are 36 (0.5).", t:render { name = "Ada", age = 36, ratio = 0.5 })
    assert.are.same({ "name", "age", "ratio" }, t:names())
    assert.are.equal("x", template.new("x"):render())
    assert.are.equal("", template.new(""):render {})
    assert.are.equal("Hi Bo", t.render(template.new("Hi {n}"), { n = "Bo" }))
  end)

  it("supports {name + N} and {name - N}", function()
    local t = template.new("hop {hops_done + 1} / {max_hops}, left {max_hops-2}")
    assert.are.equal("hop 3 / 5, left 3", t:render { hops_done = 2, max_hops = 5 })
    assert_error(function() t:render { hops_done = "two", max_hops = 5 } end,
      "specula.template: variable 'hops_done' must be a number for {hops_done + 1}")
  end)

  it("escapes braces with {{ and }}", function()
    local t = template.new('{{"q": "{q}"}} and {{{x}}}')
    assert.are.equal('{"q": "rain"} and {7}', t:render { q = "rain", x = 7 })
    assert.are.same({ "q", "x" }, t:names())
  end)

  it("does not interpret braces inside values", function()
    assert.are.equal("a {b} c", template.new("a {v} c"):render { v = "{b}" })
  end)

  it("names the missing variable", function()
    local t = template.new("Q: {question}\nT: {trace_blob}")
    assert_error(function() t:render { question = "x" } end,
      "specula.template: missing variable 'trace_blob'")
    assert_error(function() t:render() end, "specula.template: missing variable 'question'")
    local s, err = t:try_render { trace_blob = "t" }
    assert.is_nil(s)
    assert.are.equal("specula.template: missing variable 'question'", err)
  end)

  it("rejects values that are not strings or numbers", function()
    assert_error(function() template.new("{v}"):render { v = {} } end,
      "specula.template: variable 'v' must be a string or number, got table")
  end)

  it("reports malformed templates with their position", function()
    assert_error(function() template.new("a\nb {not valid}") end,
      "bad placeholder '{not valid}' at line 2, column 3")
    assert_error(function() template.new("x } y") end, "unmatched '}' at line 1, column 3")
    assert_error(function() template.new("{open") end, "unclosed '{' at line 1, column 1")
    assert_error(function() template.new(nil) end, "template text must be a string")
  end)

  it("has a one-shot render", function()
    assert.are.equal("2 + 2", template.render("{a} + {a}", { a = 2 }))
  end)
end)

describe("specula.template.chat", function()
  it("keeps the system prefix byte-identical from hop to hop", function()
    -- a fresh chat over the D.2 texts, so the render counter starts at 0
    local sp = template.spechop
    local chat = template.chat { system = sp.SYSTEM, user = sp.SUBQUESTION }
    local trace = {}
    local first_system, prefixes, users = nil, {}, {}
    for hop = 1, 5 do
      local msgs = chat:render {
        max_hops = 6, question = "Which film has the director born earlier?",
        hops_done = hop - 1, trace_blob = template.spechop.trace_blob(trace),
      }
      assert.are.equal(2, #msgs)
      assert.are.equal("system", msgs[1].role)
      assert.are.equal("user", msgs[2].role)
      first_system = first_system or msgs[1].content
      prefixes[hop] = msgs[1].role .. "\0" .. msgs[1].content
      users[hop] = msgs[2].content
      assert.is_truthy(users[hop]:find("Current hop index: " .. hop .. " / 6", 1, true))
      trace[#trace + 1] = { subquestion = "q" .. hop, subanswer = "a" .. hop }
    end
    for hop = 2, 5 do
      assert.are.equal(prefixes[1], prefixes[hop])
      assert.are_not.equal(users[hop - 1], users[hop])
    end
    assert.is_truthy(first_system:find("Use at most 6 subquestions", 1, true))
    -- the fixed part was rendered once, not once per hop
    assert.are.equal(1, chat.static_renders)
    -- another budget gives another (cached) prefix
    local other = chat:render { max_hops = 4, question = "q", hops_done = 0, trace_blob = "(none)" }
    assert.is_truthy(other[1].content:find("Use at most 4 subquestions", 1, true))
    assert.are.equal(2, chat.static_renders)
    assert.are.equal(first_system, chat:render { max_hops = 6, question = "q", hops_done = 0,
                                                 trace_blob = "" }[1].content)
    assert.are.equal(2, chat.static_renders)
  end)

  it("renders few-shot prefix messages once and returns fresh tables", function()
    local chat = template.chat {
      system = "You answer in {lang}.",
      prefix = { { role = "user", content = "2+2?" }, { role = "assistant", content = "4" } },
      user = "{q}",
      vars = { lang = "English" },
    }
    local a = chat:render { q = "3+3?" }
    local b = chat:render { q = "5+5?" }
    assert.are.same({
      { role = "system", content = "You answer in English." },
      { role = "user", content = "2+2?" },
      { role = "assistant", content = "4" },
      { role = "user", content = "3+3?" },
    }, a)
    for i = 1, 3 do
      assert.are.equal(a[i].content, b[i].content)
      assert.are_not.equal(a[i], b[i])   -- fresh tables, caller may mutate
    end
    assert.are.equal(1, chat.static_renders)
    assert.are.same({ { role = "system", content = "You answer in English." },
                      { role = "user", content = "2+2?" },
                      { role = "assistant", content = "4" } }, chat:prefix())
  end)

  it("bind renders the fixed part now", function()
    local chat = template.spechop.final_answer
    local bound = chat:bind { max_hops = 3 }
    local m = bound:render { question = "Q", trace_blob = "T" }
    assert.is_truthy(m[1].content:find("Use at most 3 subquestions", 1, true))
    assert.is_truthy(m[2].content:find("Main question:\nQ\n", 1, true))
    assert.are.equal(0, bound.static_renders)
  end)

  it("errors on a missing variable of the fixed part or the user part", function()
    local chat = template.chat { system = "S {a}", user = "U {b}" }
    assert_error(function() chat:render { b = 1 } end, "specula.template: missing variable 'a'")
    assert_error(function() chat:render { a = 1 } end, "specula.template: missing variable 'b'")
    assert_error(function() template.chat { system = "x" } end,
      "specula.template.chat: user template is required")
  end)
end)

describe("specula.template prompt sets", function()
  it("has the SpecHop D.2 and D.3 prompts", function()
    local sp = template.spechop
    assert.is_truthy(sp.SYSTEM:find("^You are a strict multi%-hop QA agent%."))
    assert.is_truthy(sp.SYSTEM:find("<final_answer> Cage Of Gold </final_answer>$"))
    local m = sp.subanswer:render { max_hops = 4, question = "Q?", subquestion = "S?",
                                     search_snippets = "snip" }
    assert.are.equal("Main question:\nQ?\n\nCurrent subquestion:\nS?\n\nSearch results:\nsnip\n\n" ..
      "Answer the current subquestion only using the search results. If uncertain,\n" ..
      "return a short best-effort answer.\nOutput exactly:\n<subanswer> ... </subanswer>", m[2].content)
    m = sp.fallback:render { max_hops = 4, bad_output = "blah", required_tag = "<subanswer>" }
    assert.is_truthy(m[2].content:find("Return ONLY one valid <subanswer> tag and nothing else.", 1, true))

    local s = sp.speculator:render { subquery = "Who directed Jaws?" }
    assert.are.equal("<question>Who directed Jaws?</question>\n<answer>", s[2].content)
    assert.is_truthy(s[1].content:find("^You are a fast assistant%. Return only the direct answer, with no explanation%.\n\n"))
    local _, examples = s[1].content:gsub("<question>", "")
    assert.are.equal(4, examples)
    assert.is_truthy(s[1].content:find("<answer>1 January 1885</answer>", 1, true))
  end)

  it("builds the D.2 trace blob", function()
    assert.are.equal("(none)", template.spechop.trace_blob({}))
    assert.are.equal(
      "<subquestion> Who directed Jaws? </subquestion><subanswer> Steven Spielberg </subanswer>\n" ..
      "<subquestion> When was he born? </subquestion><subanswer> 1946 </subanswer>",
      template.spechop.trace_blob({
        { subquestion = "Who directed Jaws?", subanswer = "Steven Spielberg" },
        { question = "When was he born?", answer = 1946 },
      }))
  end)

  it("post-processes speculator output (D.3)", function()
    local pp = template.spechop.postprocess
    assert.are.equal("T. Rex", pp("T. Rex</answer>"))
    assert.are.equal("T. Rex", pp("<answer>T. Rex</answer>"))
    assert.are.equal("T. Rex", pp("  T. Rex </answer>\n\n<question>Where is"))
    assert.are.equal("Yes.", pp("<ANSWER>Yes."))
    assert.are.equal("1925", pp("1925"))
  end)

  it("builds TSSS prompts whose earlier prompts are prefixes of later ones", function()
    local tsss = template.tsss
    local mq = "Who stars in the video One Last Time by the performer of Baby I?"
    local hops = {}
    local p1, kind = tsss.build { question = mq, hops = hops }
    assert.are.equal("question", kind)
    assert.are.equal("To answer the Main Question (" .. mq ..
      "), I propose the following additional question:\nQuestion:", p1)
    hops[1] = { question = "Who is the performer of Baby I?", contexts = "[1] Baby I is a song by Ariana Grande." }
    local p2
    p2, kind = tsss.build { question = mq, hops = hops }
    assert.are.equal("response", kind)
    assert.are.equal(p1, p2:sub(1, #p1))
    assert.is_truthy(p2:find("\nBased on the contexts,$"))
    hops[1].response = "the performer of Baby I is Ariana Grande"
    local p3 = tsss.build { question = mq, hops = hops }
    assert.are.equal(p2, p3:sub(1, #p2))
    local tail = "\nTo answer the Main Question (" .. mq .. "), using the following facts:\n" ..
      "- the performer of Baby I is Ariana Grande\nI propose the following additional question:\nQuestion:"
    assert.are.equal(tail, p3:sub(-#tail))
    local pf
    pf, kind = tsss.build { question = mq, hops = hops, next = "final" }
    assert.are.equal("final", kind)
    assert.is_truthy(pf:find("\nFinally, based on the fact that the performer of Baby I is Ariana Grande, " ..
      "the complete answer to the main question (" .. mq .. ") is:", 1, true))
    assert.are.equal("Who stars in it?", tsss.first_line("\n  Who stars in it?\nBased on"))
    assert.is_truthy(template.render(tsss.JUDGE, { question = "q", ground_truth = "g", prediction = "p" })
      :find("Question: q\nGolden Answer: g\nPredicted Answer: p$"))
  end)
end)

describe("specula.template.extract", function()
  local ex = template.extract
  it("returns the trimmed content of the first tag", function()
    assert.are.equal("Who directed Jaws?", ex("<subquestion> Who directed Jaws? </subquestion>", "subquestion"))
    assert.are.equal("a", ex("noise <x>a</x> <x>b</x>", "x"))
    assert.are.equal("Paris", ex("<FINAL_ANSWER>Paris</Final_Answer>", "final_answer"))
  end)

  it("tolerates a missing closing or opening tag", function()
    assert.are.equal("Basil Dearden", ex("<subanswer> Basil Dearden", "subanswer"))
    assert.are.equal("Basil Dearden", ex("<subanswer> Basil Dearden <subquestion> next", "subanswer"))
    assert.are.equal("T. Rex", ex("T. Rex</answer>", "answer"))
    assert.is_nil(ex("no tags here", "answer"))
  end)

  it("extracts all occurrences and strips tags", function()
    assert.are.same({ "q1", "q2" },
      template.extract_all("<q> q1 </q><a>x</a><q>q2</q>", "q"))
    assert.are.same({}, template.extract_all("nothing", "q"))
    assert.are.equal("T. Rex", template.strip_tags("<answer>T. Rex</answer>", "answer"))
    assert_error(function() ex("x", "bad tag") end, "tag must be a name")
  end)
end)
