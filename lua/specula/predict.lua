-- specula.predict: action predictors for action speculation.
--
-- A predictor is called at the start of each step with the thread's history
-- (a list of { tool, args, observation }, oldest first) and returns
-- candidates { {tool =, args =, confidence =}, ... }. The window fires the
-- ones the expected-value gate and the eligibility policy allow, and promotes
-- a result when the model's decided action matches (exact by default).
--
--   predict.pattern{ top = 3, rules = {...} }   counts of the next (tool, arg
--       shape) given the previous one, with argument-derivation rules
--   predict.ngram{ n = 3, ... }                 the same with back-off over
--       longer contexts
--   predict.draft{ client = ..., samples = 3 }   a small model proposes the call;
--       samples that agree count as high confidence
--   predict.learned{ model = "model.json" }     learnt from conversations: which
--       tool comes next and where each argument's value comes from (specula.learned)
--
-- Learned predictors learn only from committed transitions (the runner calls
-- :observe after each query with its committed trajectory) and can be saved
-- and loaded (:save(path) / :load(path)) to warm up across runs.
local json = require "specula.json"

local type, pairs, ipairs, tostring, tonumber, error, setmetatable, sort, concat =
  type, pairs, ipairs, tostring, tonumber, error, setmetatable, table.sort, table.concat

local M = {}

local START = "^"

-- The shape of an argument table: its keys and value types, not its values.
local function shape(args)
  if type(args) ~= "table" then return type(args) end
  local keys = {}
  for k in pairs(args) do keys[#keys + 1] = tostring(k) end
  sort(keys)
  for i, k in ipairs(keys) do
    local v = args[k]
    if v == nil then v = args[tonumber(k)] end
    keys[i] = k .. ":" .. type(v)
  end
  return "{" .. concat(keys, ",") .. "}"
end
-- shapes are cache keys: a pairs() walk kept interpreted (specula/internal/nojit.lua)
require("specula.internal.nojit")(shape)
M.shape = shape

local function action_key(a)
  if a == nil then return START end
  return tostring(a.tool) .. "|" .. shape(a.args)
end

local function split_key(k)
  local tool = k:match("^(.-)|")
  return tool or k
end

-- Derive the arguments of a predicted next tool. Rules are looked up as
-- "prev->next", then "next"; each is function(prev, history, ctx) -> args|nil
-- where prev is the last { tool, args, observation }. Without a rule, and if
-- copy_args is set, the previous args are reused when the shapes agree.
local function derive(rules, copy_args, prev, next_tool, next_shape, history, ctx)
  local r = rules[(prev and prev.tool or START) .. "->" .. next_tool] or rules[next_tool]
  if r then
    local ok, args = pcall(r, prev, history, ctx)
    if ok and type(args) == "table" then return args end
    return nil
  end
  if copy_args and prev and shape(prev.args) == next_shape then return prev.args end
  return nil
end

local function check_opts(opts, what)
  opts = opts or {}
  if type(opts) ~= "table" then error(what .. ": expected a table of options", 3) end
  if opts.rules ~= nil and type(opts.rules) ~= "table" then error(what .. ": rules must be a table", 3) end
  if opts.top ~= nil and (type(opts.top) ~= "number" or opts.top < 1) then error(what .. ": top must be >= 1", 3) end
  return opts
end

-- ---- n-gram counts (the pattern predictor is n = 2) -----------------------

local Ngram = {}
Ngram.__index = Ngram
Ngram.__call = function(self, history, ctx) return self:predict(history, ctx) end

-- Built-in predictors name themselves (and their options) in the records'
-- provenance (specula.internal.tags, read by specula.provenance).
local tag = require("specula.internal.tags").tag

local function new_ngram(opts, n, what)
  opts = check_opts(opts, what)
  local self = setmetatable({
    n = n,
    top = opts.top or 3,
    rules = opts.rules or {},
    copy_args = opts.copy_args ~= false,
    discount = opts.discount or 0.5,   -- confidence factor per back-off level
    min_count = opts.min_count or 1,
    counts = {},                        -- context -> { next_key -> count }
    observed = 0,
  }, Ngram)
  self.tag_options = { n = n, top = self.top, rules = self.rules, copy_args = self.copy_args,
                       discount = self.discount, min_count = self.min_count }
  return tag(self, what:match("[%w_]+$"), self.tag_options)
end

-- The pattern predictor of the PASTE article: P(next tool, shape | previous
-- tool, shape), with argument-derivation rules.
function M.pattern(opts) return new_ngram(opts, 2, "specula.predict.pattern") end

-- n-gram back-off over the last n-1 actions.
function M.ngram(opts)
  local n = opts and opts.n or 3
  if type(n) ~= "number" or n < 2 then error("specula.predict.ngram: n must be >= 2", 2) end
  return new_ngram(opts, n, "specula.predict.ngram")
end

local function context(history, upto, order)
  -- the last `order` action keys before position upto+1 (START padded)
  local parts = {}
  for i = upto - order + 1, upto do
    parts[#parts + 1] = i >= 1 and action_key(history[i]) or START
  end
  return order .. "#" .. concat(parts, " ")
end

-- Learn one committed transition: the actions so far (history) and the next.
function Ngram:learn(history, next_action)
  local nk = action_key(next_action)
  for order = 1, self.n - 1 do
    local c = context(history, #history, order)
    local b = self.counts[c]
    if not b then b = {}; self.counts[c] = b end
    b[nk] = (b[nk] or 0) + 1
  end
  self.observed = self.observed + 1
end

-- observe(prev_action, next_action): a single committed transition (the
-- article's interface); observe_trajectory(list) learns a whole one.
function Ngram:observe(prev, next_action)
  self:learn(prev and { prev } or {}, next_action)
end

function Ngram:observe_trajectory(actions)
  local hist = {}
  for i = 1, #actions do
    self:learn(hist, actions[i])
    hist[#hist + 1] = actions[i]
  end
end

-- (comparators made once: a closure made each call is code LuaJIT does not
-- compile, "NYI: bytecode 51")
local function by_count_then_key(x, y)
  if x.c ~= y.c then return x.c > y.c end
  return x.k < y.k
end
local function by_confidence(a, b) return a.confidence > b.confidence end

local ngram_predict
function Ngram:predict(history, ctx) return ngram_predict(self, history, ctx) end
ngram_predict = function(self, history, ctx)
  history = history or {}
  local prev = history[#history]
  for order = self.n - 1, 1, -1 do
    local b = self.counts[context(history, #history, order)]
    if b then
      local total, ranked = 0, {}
      for k, c in pairs(b) do
        total = total + c
        if c >= self.min_count then ranked[#ranked + 1] = { k = k, c = c } end
      end
      sort(ranked, by_count_then_key)
      local out = {}
      local factor = self.discount ^ (self.n - 1 - order)
      for _, r in ipairs(ranked) do
        if #out >= self.top then break end
        local tool = split_key(r.k)
        local args = derive(self.rules, self.copy_args, prev, tool, r.k:sub(#tool + 2), history, ctx)
        if args then out[#out + 1] = { tool = tool, args = args, confidence = factor * r.c / total } end
      end
      if #out > 0 then return out end
    end
  end
  return {}
end

require("specula.internal.nojit")(ngram_predict)   -- pairs() walks: specula/internal/nojit.lua

function Ngram:state()
  return { kind = "ngram", n = self.n, counts = self.counts, observed = self.observed }
end

function Ngram:restore(st)
  if type(st) ~= "table" or type(st.counts) ~= "table" then
    return nil, "predictor state: expected { counts = {...} }"
  end
  if st.n and st.n ~= self.n then
    return nil, "predictor state: saved for n = " .. tostring(st.n) .. ", this predictor has n = " .. self.n
  end
  self.counts = st.counts
  self.observed = tonumber(st.observed) or 0
  -- what it starts from is part of what it is
  if self.tag_options then
    local ok, text = pcall(json.canonical, st)
    self.tag_options.restored = ok and require("specula.provenance").sha256_hex(text) or "?"
  end
  return true
end

function Ngram:save(path)
  -- the counts are keyed by calls and their arguments: the writer lets no
  -- known secret go to disk (the text stays canonical JSON)
  local f, err = require("specula.internal.output").open(path, "w", "canonical")
  if not f then return nil, "predictor save: " .. tostring(err) end
  local okw, werr = f:write(json.canonical(self:state()), "\n")
  local okc, cerr = f:close()
  if not okw or not okc then return nil, "predictor save: " .. path .. ": " .. tostring(werr or cerr) end
  return true
end

function Ngram:load(path)
  local f = io.open(path, "r")
  if not f then return nil, "predictor load: cannot open " .. tostring(path) end
  local text = f:read("*a")
  f:close()
  local st, err = json.decode(text)
  if not st then return nil, "predictor load: " .. path .. ": " .. tostring(err) end
  return self:restore(st)
end

-- ---- learned ------------------------------------------------------------------

function M.learned(opts) return require("specula.learned").new(opts) end

-- ---- draft model ------------------------------------------------------------

local DRAFT_PROMPT = [[
You predict the next tool call of an agent. Reply with exactly one JSON object
{{"tool": NAME, "args": {{...}}}} and nothing else.

Tools: {tools}

Task: {query}

Calls so far (oldest first):
{history}

Next call:]]

local function history_text(history)
  if #history == 0 then return "(none)" end
  local lines = {}
  for i, h in ipairs(history) do
    local obs = h.observation
    if type(obs) ~= "string" then obs = json.encode(obs) or "?" end
    if #obs > 200 then obs = json.utf8_cut(obs, 200) .. "..." end  -- whole UTF-8 sequences
    lines[i] = string.format("%d. %s %s -> %s", i, h.tool, json.canonical(h.args), obs)
  end
  return concat(lines, "\n")
end

local function parse_call(resp)
  if type(resp) ~= "table" then return nil end
  local tc = resp.tool_calls and resp.tool_calls[1]
  if tc and tc.name then return tc.name, tc.arguments or tc.input end
  local text = resp.content
  if type(text) ~= "string" then return nil end
  local obj = text:match("%b{}")
  local t = obj and json.decode(obj)
  if type(t) == "table" and type(t.tool) == "string" then return t.tool, t.args or {} end
  return nil
end

-- A small model proposes the next call; `samples` draws that agree raise
-- the confidence (count / samples), as in the Co-Sight integration.
-- opts: client (with :chat{messages, temperature, max_tokens}), tools (list
-- of names or a tools table), prompt (template with {tools} {query}
-- {history}), samples (3), temperature (0.7), max_tokens (96), top (3).
function M.draft(opts)
  opts = check_opts(opts, "specula.predict.draft")
  local client = opts.client
  if type(client) ~= "table" and type(client) ~= "function" then
    error("specula.predict.draft: client must be an LLM client (with :chat) or a function(messages)", 2)
  end
  local tmpl = require("specula.template").new(opts.prompt or DRAFT_PROMPT)
  local samples = opts.samples or 3
  local tool_names = opts.tools or {}
  if type(tool_names) == "table" and #tool_names == 0 then
    local names = {}
    for k in pairs(tool_names) do names[#names + 1] = k end
    sort(names)
    tool_names = names
  end
  local sched = require "specula.internal.sched"
  -- async: the engine runs it beside the model's step rather than before
  local self = { samples = samples, top = opts.top or 3, async = true }
  local function ask(messages)
    if type(client) == "function" then return client(messages) end
    return client:chat{ messages = messages, temperature = opts.temperature or 0.7,
                        max_tokens = opts.max_tokens or 96 }
  end
  function self.predict(_, history, ctx)
    local prompt = tmpl:render{ tools = concat(tool_names, ", "), query = tostring(ctx and ctx.query or ""),
                                history = history_text(history or {}) }
    local messages = { { role = "user", content = prompt } }
    local tasks = {}
    for i = 1, samples do tasks[i] = sched.spawn(ask, messages) end
    local votes, order = {}, {}
    for _, r in ipairs((sched.wait_all(tasks))) do
      if r[1] then
        local name, args = parse_call(r[2])
        if name and type(args) == "table" then
          local key = name .. "|" .. json.canonical(args)
          if not votes[key] then votes[key] = { tool = name, args = args, n = 0 }; order[#order + 1] = key end
          votes[key].n = votes[key].n + 1
        end
      end
    end
    local out = {}
    for _, k in ipairs(order) do
      local v = votes[k]
      out[#out + 1] = { tool = v.tool, args = v.args, confidence = v.n / samples }
    end
    sort(out, by_confidence)
    while #out > self.top do out[#out] = nil end
    return out
  end
  return tag(setmetatable(self, { __call = function(s, h, c) return s:predict(h, c) end }), "draft",
    { samples = samples, top = self.top, temperature = opts.temperature or 0.7, max_tokens = opts.max_tokens or 96,
      prompt = opts.prompt or DRAFT_PROMPT, tools = tool_names })
end

return M
