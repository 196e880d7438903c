-- examples/paste_research.lua — action speculation (PASTE) on a six-step
-- research agent: web_search -> arxiv_search -> fetch_url -> extract_text ->
-- summarize -> synthesize.
--
-- While the model is still deciding its next call, a pattern predictor
-- guesses it from the previous call (with the article's argument-derivation
-- rules) and the engine starts it early, only where the eligibility policy
-- allows (policies/default.lua: searches and fetches are reads, summarize is
-- a costly read within a rate budget, synthesize is a write: forbid). When
-- the model's decided call matches (exact canonical args) the early result is
-- promoted; orphans are cancelled at the step boundary.
--
-- Offline (default): simulated model and tools with the article's latency
-- shape, scaled down 10x (model decision 60-100 ms, tools 20-60 ms).
--   specula run examples/paste_research.lua --input queries.jsonl --out r.jsonl
--   specula run examples/paste_research.lua --query "speculative tool calls" --mode sequential
--   specula run examples/paste_research.lua --query "..." --predict off      # no action speculation
--   specula run examples/paste_research.lua --query "..." --k 3              # both axes (SpecHop too)
--
-- Online: set PASTE_ONLINE=1 and
--   OPENAI_BASE_URL, OPENAI_API_KEY, SPECULA_MODEL   the model choosing the calls
--   WEB_SEARCH_URL    e.g. http://localhost:8888/search?format=json&q={query}   (SearxNG)
--   ARXIV_URL         e.g. http://export.arxiv.org/api/query?search_query={query}&max_results=1
--   FETCH_TIMEOUT_MS  (default 5000)
-- Predictor state is loaded from and saved to PASTE_PREDICTOR (a JSON file)
-- when set, so the predictor warms up across runs.
local specula = require "specula"
local sim, json = specula.sim, specula.json

local ONLINE = os.getenv("PASTE_ONLINE") == "1"
local STATE_FILE = os.getenv("PASTE_PREDICTOR")

local ORDER = { "web_search", "arxiv_search", "fetch_url", "extract_text", "summarize", "synthesize" }

-- ---- the predictor: counts of next (tool, shape) given previous, and rules
-- that derive the next arguments from the previous call and its result.
local predictor = specula.predict.pattern {
  top = 3,
  rules = {
    ["^->web_search"] = function(prev, history, ctx) return { query = ctx.query } end,
    ["web_search->arxiv_search"] = function(prev)
      local hit = type(prev.observation) == "table" and prev.observation.hits and prev.observation.hits[1]
      return hit and { query = hit.title } or nil
    end,
    ["arxiv_search->fetch_url"] = function(prev)
      local id = type(prev.observation) == "table" and prev.observation.id
      return id and { url = "https://arxiv.org/abs/" .. id } or nil
    end,
    ["fetch_url->extract_text"] = function(prev) return prev.args.url and { url = prev.args.url } or nil end,
    ["extract_text->summarize"] = function(prev) return prev.args.url and { source_url = prev.args.url } or nil end,
    ["summarize->synthesize"] = function(prev)
      local s = type(prev.observation) == "table" and prev.observation.summary
      return s and { notes = { s } } or nil
    end,
    -- a blind guess is not worth it: web_search -> fetch_url has too many candidates
  },
}
if STATE_FILE then predictor:load(STATE_FILE) end

-- ---- tools: simulated offline, HTTP online
local LAT = { web_search = 40, arxiv_search = 50, fetch_url = 60, extract_text = 20, summarize = 30, synthesize = 40 }
local RESULT = {}
local function simulated(name, result)
  local law = sim.law({ "lognormal", LAT[name], 0.3 })
  RESULT[name] = result
  return function(args, ctx)
    sim.wait(law, ctx, "target:" .. name)
    return result(args, ctx)
  end
end

local tools = {
  web_search = { class = "read", cost = 0.001, call = simulated("web_search", function(a)
    local d = sim.digest(a.query)
    return { hits = { { title = "paper " .. d, url = "https://example.org/" .. d } } }
  end) },
  arxiv_search = { class = "read", cost = 0.001, call = simulated("arxiv_search", function(a)
    return { id = "26" .. sim.digest(a.query):sub(1, 2) .. "." .. sim.digest(a.query .. "#"):sub(1, 5), title = a.query }
  end) },
  fetch_url = { class = "read", cost = 0.0005, call = simulated("fetch_url", function(a)
    return { url = a.url, html = "<html>" .. sim.digest(a.url) .. "</html>" }
  end) },
  extract_text = { class = "read", cost = 0.0002, call = simulated("extract_text", function(a)
    return { url = a.url, text = "text of " .. a.url }
  end) },
  summarize = { class = "read_costly", cost = 0.002, call = simulated("summarize", function(a)
    return { summary = "summary of " .. a.source_url }
  end) },
  synthesize = { class = "reversible_write", cost = 0.003, call = simulated("synthesize", function(a)
    return { answer = "synthesis of " .. table.concat(a.notes, "; ") }
  end) },
}

-- SpecHop's axis: a local cache guesses each read's result in 5 ms; it has
-- the right answer 60 % of the time (keyed per query and hop).
for name, t in pairs(tools) do
  if t.class == "read" then
    local call = t.call
    local cache = sim.law({ "fixed", 5 })
    t.speculate = function(args, ctx)
      sim.wait(cache, ctx, "spec:" .. name)
      if sim.draw(ctx, "cache_hit") < 0.6 then
        -- the cached copy: the same result without the wait
        return RESULT[name](args, ctx)
      end
      return { stale = true }
    end
  end
end

if ONLINE then
  local timeout = tonumber(os.getenv("FETCH_TIMEOUT_MS") or "") or 5000
  tools.web_search.call = specula.tools.http { url = assert(os.getenv("WEB_SEARCH_URL"), "WEB_SEARCH_URL"),
    timeout_ms = timeout, result = function(res)
      local j = json.decode(res.body) or {}
      local r = (j.results or {})[1] or {}
      return { hits = { { title = r.title or "", url = r.url or "" } } }
    end }
  tools.arxiv_search.call = specula.tools.http { url = assert(os.getenv("ARXIV_URL"), "ARXIV_URL"),
    timeout_ms = timeout, result = function(res)
      local id = res.body:match("<id>https?://arxiv.org/abs/([^<v]+)")
      return { id = id or "unknown", title = res.body:match("<title>([^<]*)</title>") or "" }
    end }
  tools.fetch_url.call = function(args)
    local r, err = specula.http.request{ url = args.url, timeout_ms = timeout, max_body_bytes = 4e6 }
    if not r then error(err, 0) end
    return { url = args.url, html = r.body }
  end
  tools.extract_text.call = function(args, ctx)
    local page = tools.fetch_url.call(args, ctx)
    return { url = args.url, text = page.html:gsub("<[^>]*>", " "):sub(1, 10000) }
  end
end

-- ---- the model: picks the next call from the history (simulated offline;
-- an OpenAI-compatible model online, with the streamed tool name as the
-- early trigger).
local model_law = sim.law({ "lognormal", 80, 0.25 })

-- The simulated model mostly follows the pipeline; now and then (keyed, so
-- every configuration sees the same choices) it refines its search instead,
-- which the predictor does not foresee.
local function next_args(state, ctx)
  local last = state.calls[#state.calls]
  local tool = ORDER[#state.calls + 1]
  if tool == "web_search" then return tool, { query = state.q } end
  if tool == "arxiv_search" then
    local q = last.observation.hits[1].title
    if sim.draw(ctx, "refine") < 0.3 then q = q .. " survey" end
    return tool, { query = q }
  end
  if tool == "fetch_url" then return tool, { url = "https://arxiv.org/abs/" .. last.observation.id } end
  if tool == "extract_text" then return tool, { url = last.args.url } end
  if tool == "summarize" then return tool, { source_url = last.args.url } end
  if tool == "synthesize" then return tool, { notes = { last.observation.summary } } end
  return nil
end

local online_step
if ONLINE then
  local client = specula.llm.openai.new { model = os.getenv("SPECULA_MODEL") }
  local schemas = {}
  for _, name in ipairs(ORDER) do
    schemas[#schemas + 1] = { type = "function", ["function"] = { name = name, parameters = { type = "object" } } }
  end
  online_step = function(state, ctx)
    local msgs = { { role = "system", content = "You are a research agent. Call the tools in order: "
      .. table.concat(ORDER, ", ") .. ", then answer." }, { role = "user", content = state.q } }
    for _, c in ipairs(state.calls) do
      msgs[#msgs + 1] = { role = "user", content = c.tool .. " " .. json.encode(c.args) .. " -> " .. json.encode(c.observation) }
    end
    local r = assert(client:chat { messages = msgs, tools = schemas, stream = true, on_tool_name = ctx.on_tool_name })
    local tc = r.tool_calls and r.tool_calls[1]
    if not tc then return { final = r.content } end
    return { segment = r.content or "", action = { tool = tc.name, args = tc.arguments or {} } }
  end
end

return specula.agent {
  name = "paste-research",
  tools = tools,
  predict = predictor,
  policy = "policies/default.lua",
  init = function(q) return { q = q, calls = {} } end,
  step = online_step or function(state, ctx)
    -- the "thinking" time; the tool name becomes known two thirds of the way
    local ms = sim.latency(model_law, ctx, "model")
    specula.sleep(ms * 2 / 3)
    local tool, args = next_args(state, ctx)
    if not tool then
      specula.sleep(ms / 3)
      return { final = state.calls[#state.calls].observation.answer }
    end
    ctx.on_tool_name(tool)
    specula.sleep(ms / 3)
    return { segment = "calling " .. tool, action = { tool = tool, args = args } }
  end,
  update = function(state, step, obs)
    local calls = {}
    for i, c in ipairs(state.calls) do calls[i] = c end
    calls[#calls + 1] = { tool = step.action.tool, args = step.action.args, observation = obs }
    return { q = state.q, calls = calls }
  end,
  on_done = STATE_FILE and function() predictor:save(STATE_FILE) end or nil,
}
