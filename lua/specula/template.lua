-- specula.template: prompt templates with byte-stable prefixes.
--
--   template.new(text)          -> tpl        compile {name} placeholders
--   tpl:render(vars)            -> string     (missing variable: error naming it)
--   tpl:try_render(vars)        -> string | nil, err
--   tpl:names()                 -> list of placeholder names (first-use order)
--   template.render(text, vars) -> string     one-shot (compiled texts are cached)
--   template.chat(spec)         -> chat       message-list template
--   chat:render(vars)           -> messages   { {role=, content=}, ... }
--   chat:prefix(vars)           -> messages   the fixed part only
--   chat:bind(vars)             -> chat       fixed part rendered now
--   template.extract(text, tag) -> string | nil
--   template.extract_all(text, tag) -> list
--   template.strip_tags(text, tag)  -> string
--   template.spechop            SpecHop appendix D.2 / D.3 prompts
--   template.tsss               TSSS appendix B template and judge prompt
--
-- Placeholder syntax: {name} where name is [A-Za-z_][A-Za-z0-9_]*, or
-- {name + N} / {name - N} with an integer N (so D.2's "{hops_done + 1}" can
-- be used as the paper writes it; the variable must then be a number).
-- "{{" and "}}" are literal braces; any other brace is a compile error, which
-- catches JSON pasted into a prompt without escaping.

local type, tostring, tonumber, error, setmetatable, getmetatable =
  type, tostring, tonumber, error, setmetatable, getmetatable
local ipairs, next = ipairs, next
local find, sub, byte, format, lower, gsub =
  string.find, string.sub, string.byte, string.format, string.lower, string.gsub
local concat = table.concat

local M = {}

----------------------------------------------------------------------------
-- compile / render
----------------------------------------------------------------------------

local Template = {}
Template.__index = Template

local function position(text, i)
  local line, col = 1, 1
  for k = 1, i - 1 do
    if byte(text, k) == 10 then line = line + 1; col = 1 else col = col + 1 end
  end
  return format("line %d, column %d", line, col)
end

local function compile(text)
  local parts, n = {}, 0       -- strings, or { name, offset } slots
  local names, seen = {}, {}
  local buf, bn = {}, 0        -- pending literal pieces
  local function flush()
    if bn > 0 then
      n = n + 1; parts[n] = concat(buf, "", 1, bn)
      bn = 0
    end
  end
  local i, len = 1, #text
  while i <= len do
    local j = find(text, "[{}]", i)
    if not j then
      bn = bn + 1; buf[bn] = sub(text, i)
      break
    end
    if j > i then bn = bn + 1; buf[bn] = sub(text, i, j - 1) end
    local c = sub(text, j, j)
    if c == "}" then
      if sub(text, j + 1, j + 1) ~= "}" then
        return nil, "unmatched '}' at " .. position(text, j) .. " (write '}}' for a literal brace)"
      end
      bn = bn + 1; buf[bn] = "}"
      i = j + 2
    elseif sub(text, j + 1, j + 1) == "{" then
      bn = bn + 1; buf[bn] = "{"
      i = j + 2
    else
      local k = find(text, "}", j + 1, true)
      if not k then
        return nil, "unclosed '{' at " .. position(text, j) .. " (write '{{' for a literal brace)"
      end
      local inner = sub(text, j + 1, k - 1)
      local name, op, num = inner:match("^%s*([%a_][%w_]*)%s*$"), nil, nil
      if not name then
        name, op, num = inner:match("^%s*([%a_][%w_]*)%s*([%+%-])%s*(%d+)%s*$")
      end
      if not name then
        return nil, "bad placeholder '{" .. inner .. "}' at " .. position(text, j) ..
                    " (expected {name} or {name + N}; write '{{' for a literal brace)"
      end
      flush()
      local offset = nil
      if op then offset = tonumber(num) * (op == "-" and -1 or 1) end
      n = n + 1; parts[n] = { name, offset }
      if not seen[name] then seen[name] = true; names[#names + 1] = name end
      i = k + 1
    end
  end
  flush()
  return parts, names
end

--- Compile a template. Raises on a malformed template.
function M.new(text)
  if type(text) ~= "string" then
    error("specula.template.new: template text must be a string, got " .. type(text), 2)
  end
  local parts, names = compile(text)
  if not parts then error("specula.template: " .. names, 2) end
  return setmetatable({ text = text, parts = parts, _names = names }, Template)
end

local function is_template(v)
  return type(v) == "table" and getmetatable(v) == Template
end
M.is_template = is_template

-- Render; returns the string, or nil and an error message.
local function render(self, vars)
  local parts = self.parts
  local np = #parts
  if np == 1 and type(parts[1]) == "string" then return parts[1] end
  if np == 0 then return "" end
  if vars ~= nil and type(vars) ~= "table" then
    return nil, "variables must be a table, got " .. type(vars)
  end
  local out = {}
  for i = 1, np do
    local p = parts[i]
    if type(p) == "string" then
      out[i] = p
    else
      local name, offset = p[1], p[2]
      local v = vars and vars[name]
      if v == nil then return nil, "missing variable '" .. name .. "'" end
      local tv = type(v)
      if offset then
        local x = tonumber(v)
        if not x then
          return nil, "variable '" .. name .. "' must be a number for {" .. name ..
                      (offset < 0 and " - " or " + ") .. math.abs(offset) .. "}"
        end
        v = x + offset
        tv = "number"
      end
      if tv == "number" then
        if v == math.floor(v) and v > -1e15 and v < 1e15 then
          out[i] = format("%d", v)
        else
          out[i] = tostring(v)
        end
      elseif tv == "string" then
        out[i] = v
      else
        return nil, "variable '" .. name .. "' must be a string or number, got " .. tv
      end
    end
  end
  return concat(out, "", 1, np)
end

function Template:render(vars)
  local s, err = render(self, vars)
  if not s then error("specula.template: " .. err, 2) end
  return s
end

function Template:try_render(vars)
  local s, err = render(self, vars)
  if not s then return nil, "specula.template: " .. err end
  return s
end

function Template:names()
  local out = {}
  for i = 1, #self._names do out[i] = self._names[i] end
  return out
end

Template.__call = Template.render
Template.__tostring = function(self) return "specula.template(" .. format("%q", self.text) .. ")" end

local compiled_cache, cache_size = {}, 0

--- One-shot render of a template text (compiled texts are cached).
function M.render(text, vars)
  if type(text) ~= "string" then
    error("specula.template.render: template text must be a string", 2)
  end
  local tpl = compiled_cache[text]
  if not tpl then
    local parts, names = compile(text)
    if not parts then error("specula.template: " .. names, 2) end
    tpl = setmetatable({ text = text, parts = parts, _names = names }, Template)
    if cache_size >= 256 then compiled_cache, cache_size = {}, 0 end
    compiled_cache[text] = tpl; cache_size = cache_size + 1
  end
  local s, err = render(tpl, vars)
  if not s then error("specula.template: " .. err, 2) end
  return s
end

----------------------------------------------------------------------------
-- chat templates
----------------------------------------------------------------------------

local Chat = {}
Chat.__index = Chat

local function as_template(v, what)
  if is_template(v) then return v end
  if type(v) == "string" then
    local parts, names = compile(v)
    if not parts then error("specula.template.chat: " .. what .. ": " .. names, 4) end
    return setmetatable({ text = v, parts = parts, _names = names }, Template)
  end
  error("specula.template.chat: " .. what .. " must be a string or a template", 4)
end

local MAX_STATIC = 64

--- Build a message-list template.
-- spec.system  string | template      the system message (optional)
-- spec.prefix  list of {role =, content = string | template}: fixed messages
--              placed after the system message (few-shot turns, ...)
-- spec.user    string | template      the per-call user message (required)
-- spec.vars    table                  defaults for the fixed part's variables
--
-- The fixed part (system + prefix) is rendered once per distinct set of the
-- values it uses and then reused, so every call with, say, the same
-- {max_hops} carries the very same system string: the prompt prefix is
-- byte-identical from hop to hop and provider prompt caches keep hitting.
function M.chat(spec)
  if type(spec) ~= "table" then
    error("specula.template.chat: expected a table", 2)
  end
  local static = {}    -- { role, template }
  if spec.system ~= nil then
    static[1] = { "system", as_template(spec.system, "system") }
  end
  if spec.prefix ~= nil then
    if type(spec.prefix) ~= "table" then
      error("specula.template.chat: prefix must be a list of messages", 2)
    end
    for i, m in ipairs(spec.prefix) do
      if type(m) ~= "table" or type(m.role) ~= "string" then
        error("specula.template.chat: prefix[" .. i .. "] must be {role =, content =}", 2)
      end
      static[#static + 1] = { m.role, as_template(m.content, "prefix[" .. i .. "].content") }
    end
  end
  if spec.user == nil then error("specula.template.chat: user template is required", 2) end
  local user = as_template(spec.user, "user")
  if spec.vars ~= nil and type(spec.vars) ~= "table" then
    error("specula.template.chat: vars must be a table", 2)
  end
  local static_names, seen = {}, {}
  for _, s in ipairs(static) do
    for _, name in ipairs(s[2]._names) do
      if not seen[name] then seen[name] = true; static_names[#static_names + 1] = name end
    end
  end
  return setmetatable({
    static = static, user = user, defaults = spec.vars or {},
    static_names = static_names, cache = {}, cache_n = 0,
    static_renders = 0,   -- how many times the fixed part was rendered
  }, Chat)
end

-- vars, falling back to the chat's defaults.
local function with_defaults(self, vars)
  local defaults = self.defaults
  if next(defaults) == nil then return vars end
  return setmetatable({}, { __index = function(_, k)
    local v = vars and vars[k]
    if v == nil then v = defaults[k] end
    return v
  end })
end

-- The rendered fixed part for these variables, from the cache when possible.
local function static_part(self, vars)
  local key
  local names = self.static_names
  local defaults = self.defaults
  if #names == 0 then
    key = ""
  else
    local kp = {}
    for i = 1, #names do
      local v = vars and vars[names[i]]
      if v == nil then v = defaults[names[i]] end
      kp[i] = type(v) .. ":" .. tostring(v)
    end
    key = concat(kp, "\0")
  end
  local hit = self.cache[key]
  if hit then return hit end
  local lookup = with_defaults(self, vars)
  local out = {}
  for i, s in ipairs(self.static) do
    local content, err = render(s[2], lookup)
    if not content then return nil, err end
    out[i] = { s[1], content }
  end
  if self.cache_n >= MAX_STATIC then self.cache, self.cache_n = {}, 0 end
  self.cache[key] = out
  self.cache_n = self.cache_n + 1
  self.static_renders = self.static_renders + 1
  return out
end

--- Fixed messages only (system + prefix), rendered with vars.
function Chat:prefix(vars)
  local st, err = static_part(self, vars)
  if not st then error("specula.template: " .. err, 2) end
  local msgs = {}
  for i = 1, #st do msgs[i] = { role = st[i][1], content = st[i][2] } end
  return msgs
end

--- The full message list: fixed messages then the rendered user message.
-- Each call returns fresh message tables; the fixed contents are shared.
function Chat:render(vars)
  local st, err = static_part(self, vars)
  if not st then error("specula.template: " .. err, 2) end
  local u, uerr = render(self.user, with_defaults(self, vars))
  if not u then error("specula.template: " .. uerr, 2) end
  local msgs, n = {}, #st
  for i = 1, n do msgs[i] = { role = st[i][1], content = st[i][2] } end
  msgs[n + 1] = { role = "user", content = u }
  return msgs
end

--- A chat whose fixed part is rendered now with vars (and the defaults).
function Chat:bind(vars)
  local st, err = static_part(self, vars)
  if not st then error("specula.template: " .. err, 2) end
  local static = {}
  for i = 1, #st do
    static[i] = { st[i][1], setmetatable({ text = st[i][2], parts = { st[i][2] }, _names = {} }, Template) }
  end
  local bound = setmetatable({
    static = static, user = self.user, defaults = self.defaults,
    static_names = {}, cache = { [""] = st }, cache_n = 1, static_renders = 0,
  }, Chat)
  return bound
end

----------------------------------------------------------------------------
-- tagged output
----------------------------------------------------------------------------

local function trim(s)
  return (gsub(gsub(s, "^%s+", ""), "%s+$", ""))
end

local function check_tag(fname, s, tag)
  if type(s) ~= "string" then
    error("specula.template." .. fname .. ": text must be a string, got " .. type(s), 3)
  end
  if type(tag) ~= "string" or not tag:match("^[%w_%-:]+$") then
    error("specula.template." .. fname .. ": tag must be a name like 'answer'", 3)
  end
end

-- One extraction starting at byte init of s (ls = lower(s)).
-- Returns content, next search position; or nil.
local function extract_at(s, ls, tag, init)
  local open, close = "<" .. tag .. ">", "</" .. tag .. ">"
  local i, j = find(ls, open, init, true)
  if i then
    local k, l = find(ls, close, j + 1, true)
    if k then return trim(sub(s, j + 1, k - 1)), l + 1 end
    -- no closing tag: stop at the next tag, if any, else at the end
    local t = find(ls, "<[%a/]", j + 1)
    if t then return trim(sub(s, j + 1, t - 1)), t end
    return trim(sub(s, j + 1)), #s + 1
  end
  -- no opening tag (e.g. it was pre-filled in the prompt): text before the
  -- closing tag
  local k, l = find(ls, close, init, true)
  if k then return trim(sub(s, init, k - 1)), l + 1 end
  return nil
end

--- Content of the first <tag>...</tag> in text, trimmed; tags match case-
-- insensitively. A missing closing tag ends the content at the next tag or
-- at the end of the text; a missing opening tag (pre-filled in the prompt,
-- as D.3 does with "<answer>") takes the text before "</tag>". nil when
-- neither tag occurs.
function M.extract(s, tag)
  check_tag("extract", s, tag)
  tag = lower(tag)
  return (extract_at(s, lower(s), tag, 1))
end

--- Contents of every <tag>...</tag> in order (same tolerance as extract,
-- except that only the first item may lack its opening tag).
function M.extract_all(s, tag)
  check_tag("extract_all", s, tag)
  tag = lower(tag)
  local ls, out, init = lower(s), {}, 1
  while init <= #s do
    local content, nxt = extract_at(s, ls, tag, init)
    if not content then break end
    out[#out + 1] = content
    init = nxt
    if not find(ls, "<" .. tag .. ">", init, true) then break end
  end
  return out
end

--- Remove every <tag> and </tag> (case-insensitive) and trim.
function M.strip_tags(s, tag)
  check_tag("strip_tags", s, tag)
  local ls = lower(s)
  tag = lower(tag)
  local out, init = {}, 1
  while true do
    local i, j = find(ls, "</?" .. tag:gsub("%p", "%%%0") .. ">", init)
    if not i then out[#out + 1] = sub(s, init); break end
    out[#out + 1] = sub(s, init, i - 1)
    init = j + 1
  end
  return trim(concat(out))
end

----------------------------------------------------------------------------
-- SpecHop prompts (appendix D.2 and D.3), as the paper gives them
----------------------------------------------------------------------------

local spechop = {}
M.spechop = spechop

-- D.2 universal system instruction for the generator M (off-the-shelf model).
spechop.SYSTEM = [[
You are a strict multi-hop QA agent. Follow the required XML-like tags exactly.

Rules: 1) Only output one of the allowed tags at a time based on the current instruction. 2) Allowed tags: <subquestion>...</subquestion>, <subanswer>...</subanswer>, <final_answer>...</final_answer>. 3) Never output explanations, markdown, JSON, or any text outside the required tag. 4) Keep subquestions simple and answerable via web search snippets. 5) Subquestions should target a single short factual answer (name, year, place, yes/no). 6) Subanswers should be a single short factual answer (name, year, place, yes/no). 7) Use at most {max_hops} subquestions, but stop as soon as the final answer can be derived from the subanswers with certainty.

Format example to imitate: question: "Which film has the director who was born earlier, Face Of A Fugitive or Cage Of Gold?" output: <subquestion> Who directed Face Of A Fugitive? </subquestion><subanswer> Paul Wendkos </subanswer><subquestion> What is the birth year of Paul Wendkos? </subquestion><subanswer> 1925 </subanswer><subquestion> Who directed Cage Of Gold </subquestion><subanswer> Basil Dearden </subanswer><subquestion> What is the birth year of Basil Dearden? </subquestion><subanswer> 1911 </subanswer> <final_answer> Cage Of Gold </final_answer>]]

-- D.2 step 1: next sub-question.
spechop.SUBQUESTION = [[
Main question:
{question}

Current hop index: {hops_done + 1} / {max_hops}
Existing reasoning trace:
{trace_blob}

Output exactly one next subquestion in this format:
<subquestion> ... </subquestion>]]

-- D.2 step 2: sub-answer from the tool's results.
spechop.SUBANSWER = [[
Main question:
{question}

Current subquestion:
{subquestion}

Search results:
{search_snippets}

Answer the current subquestion only using the search results. If uncertain,
return a short best-effort answer.
Output exactly:
<subanswer> ... </subanswer>]]

-- D.2 step 3: final answer.
spechop.FINAL_ANSWER = [[
Main question:
{question}

Reasoning trace:
{trace_blob}

Output exactly one final answer tag:
<final_answer> ... </final_answer>]]

-- D.2 formatting fallback.
spechop.FALLBACK = [[
Your previous output violated the required format.
Previous output:
{bad_output}

Return ONLY one valid {required_tag} tag and nothing else.]]

-- D.3 speculator system prompt: instruction and the four few-shot examples.
spechop.SPECULATOR_SYSTEM = [[
You are a fast assistant. Return only the direct answer, with no explanation.

<question>What is the name of the performer of the song Velvet Goldmine?</question>
<answer>T. Rex</answer>

<question>Where is Babu Nanthancode from?</question>
<answer>Thiruvananthapuram, India.</answer>

<question>What is the birthdate of Hans Olsen (Cyclist)?</question>
<answer>1 January 1885</answer>

<question>Is Reservoir High School located in Victoria?</question>
<answer>Yes.</answer>]]

-- D.3 sub-query speculation prompt; ends with the opening <answer> tag.
spechop.SPECULATOR_USER = "<question>{subquery}</question>\n<answer>"

-- Chat templates over the texts above. Variables:
--   subquestion:  max_hops, question, hops_done, trace_blob
--   subanswer:    max_hops, question, subquestion, search_snippets
--   final_answer: max_hops, question, trace_blob
--   fallback:     max_hops, bad_output, required_tag
--   speculator:   subquery
spechop.subquestion = M.chat { system = spechop.SYSTEM, user = spechop.SUBQUESTION }
spechop.subanswer = M.chat { system = spechop.SYSTEM, user = spechop.SUBANSWER }
spechop.final_answer = M.chat { system = spechop.SYSTEM, user = spechop.FINAL_ANSWER }
spechop.fallback = M.chat { system = spechop.SYSTEM, user = spechop.FALLBACK }
spechop.speculator = M.chat { system = spechop.SPECULATOR_SYSTEM, user = spechop.SPECULATOR_USER }

--- The {trace_blob} of D.2: one line per completed hop,
-- "<subquestion> Q </subquestion><subanswer> A </subanswer>", in the style of
-- the system prompt's format example. hops: list of {subquestion =,
-- subanswer =} (or {question =, answer =}). The paper does not show how an
-- empty trace is written; we use "(none)".
function spechop.trace_blob(hops)
  if type(hops) ~= "table" then
    error("specula.template.spechop.trace_blob: hops must be a list", 2)
  end
  local lines = {}
  for i = 1, #hops do
    local h = hops[i]
    if type(h) ~= "table" then
      error("specula.template.spechop.trace_blob: hop " .. i .. " must be a table", 2)
    end
    local q = h.subquestion or h.question or ""
    local a = h.subanswer or h.answer or ""
    lines[i] = "<subquestion> " .. tostring(q) .. " </subquestion><subanswer> " ..
               tostring(a) .. " </subanswer>"
  end
  if #lines == 0 then return "(none)" end
  return concat(lines, "\n")
end

--- D.3 post-processing of a speculator reply: keep what precedes the first
-- "</answer>" (the model sometimes keeps going with another example), then
-- strip any residual <answer>/</answer> tags and trim.
function spechop.postprocess(s)
  if type(s) ~= "string" then
    error("specula.template.spechop.postprocess: expected a string", 2)
  end
  local k = find(lower(s), "</answer>", 1, true)
  if k then
    local before = sub(s, 1, k - 1)
    -- text before "</answer>" that is only whitespace: fall back to the rest
    if not find(before, "%S") then before = sub(s, k) end
    s = before
  end
  return M.strip_tags(s, "answer")
end

----------------------------------------------------------------------------
-- TSSS prompts (appendix B and C of the TSSS paper)
----------------------------------------------------------------------------

local tsss = {}
M.tsss = tsss

-- Pieces of the structured reasoning template. The document for a query is
-- the concatenation, hop after hop, of:
--   header_i .. " " .. question_i .. "\n" .. contexts_i .. "\n" ..
--   "Based on the contexts, " .. response_i .. "\n"
-- where header_1 = FIRST and header_i = NEXT with the facts so far, and ends
-- with FINAL. Each prompt is a prefix of the next one, so the KV cache (or a
-- provider's prompt cache) covers everything but the new tokens.
tsss.FIRST = "To answer the Main Question ({main_question}), I propose the following additional question:\nQuestion:"
tsss.NEXT = "To answer the Main Question ({main_question}), using the following facts:\n{facts}\nI propose the following additional question:\nQuestion:"
tsss.FACT = "- {fact}"
tsss.BASED = "Based on the contexts,"
tsss.FINAL = "Finally, based on the fact that {last_response}, the complete answer to the main question ({main_question}) is:"

-- Appendix C LLM-as-judge prompt (ACC_L), verbatim including its typo.
tsss.JUDGE = "Given a Question and its Golden Answer, verify whether the Predicted Answer is correct. The prediction is correct if it fully aligns with the meaning and key information of the Golden Answer. Respond with True if the prediction is corret and False otherwise.\nQuestion: {question}\nGolden Answer: {ground_truth}\nPredicted Answer: {prediction}"

local tsss_first = M.new(tsss.FIRST)
local tsss_next = M.new(tsss.NEXT)
local tsss_fact = M.new(tsss.FACT)
local tsss_final = M.new(tsss.FINAL)

local function str(v, what)
  if type(v) == "number" then return tostring(v) end
  if type(v) ~= "string" then
    error("specula.template.tsss.build: " .. what .. " must be a string", 3)
  end
  return v
end

--- Build the TSSS prompt text.
-- spec.question  the main question
-- spec.hops      list of {question =, contexts =, response =}; the last hop
--                may lack `response` (the prompt then ends with "Based on
--                the contexts," for the model to continue) -- and then also
--                `contexts` is required
-- spec.next      "question" (default: ask for the next sub-question) or
--                "final" (ask for the final answer); ignored when the last
--                hop is incomplete
-- Returns the prompt text and what the model is expected to produce
-- ("question", "response" or "final").
function tsss.build(spec)
  if type(spec) ~= "table" then error("specula.template.tsss.build: expected a table", 2) end
  local mq = str(spec.question, "question")
  local hops = spec.hops or {}
  local nxt = spec.next or "question"
  if nxt ~= "question" and nxt ~= "final" then
    error("specula.template.tsss.build: next must be 'question' or 'final'", 2)
  end
  local out, facts = {}, {}
  local vars = { main_question = mq }
  for i = 1, #hops do
    local h = hops[i]
    local q = str(h.question, "hops[" .. i .. "].question")
    if i == 1 then
      out[#out + 1] = tsss_first:render(vars)
    else
      vars.facts = concat(facts, "\n")
      out[#out + 1] = tsss_next:render(vars)
    end
    out[#out + 1] = " " .. q .. "\n" .. str(h.contexts, "hops[" .. i .. "].contexts") ..
                    "\n" .. tsss.BASED
    if h.response == nil then
      if i ~= #hops then
        error("specula.template.tsss.build: only the last hop may lack a response", 2)
      end
      return concat(out), "response"
    end
    local r = str(h.response, "hops[" .. i .. "].response")
    out[#out + 1] = " " .. r .. "\n"
    facts[#facts + 1] = tsss_fact:render({ fact = r })
  end
  if nxt == "final" and #hops > 0 then
    out[#out + 1] = tsss_final:render({ main_question = mq,
                                        last_response = str(hops[#hops].response, "response") })
    return concat(out), "final"
  end
  if #hops == 0 then
    out[#out + 1] = tsss_first:render(vars)
  else
    vars.facts = concat(facts, "\n")
    out[#out + 1] = tsss_next:render(vars)
  end
  return concat(out), "question"
end

--- First non-empty line of a model continuation, trimmed (a TSSS sub-query
-- or response is one line; the model may run on).
function tsss.first_line(s)
  if type(s) ~= "string" then error("specula.template.tsss.first_line: expected a string", 2) end
  for line in s:gmatch("[^\n]+") do
    local t = trim(line)
    if t ~= "" then return t end
  end
  return ""
end

return M
