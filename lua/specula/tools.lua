-- specula.tools: tools for agents.
--
--   tools.http{ method = "GET", url = "https://api.example/search?q={q}&n={n}",
--               headers = { Authorization = "Bearer {env.SEARCH_KEY}" },
--               body = { query = "{q}", k = "{n}" } | "text {q}",
--               result = "json" | "text" | function(res, args, ctx) ... end,
--               timeout_ms = 5000, connect_timeout_ms, max_body_bytes,
--               retry = { ... } | false, cost = 0.001, class = "read", name = "search" }
--     -> tool table { call = fn(args, ctx), cost =, class =, spec = }
--   tools.compile(name, spec) -> function(args, ctx) -> observation
--     (what specula.agent uses when a tool's `call` is a table)
--   tools.lua(fn, { cost =, class =, speculate =, verify =, warmup = }) -> tool table
--   tools.sim{ latency =, result =, cost =, ... } -> tool table (specula.sim.tool)
--   tools.passages(body, n) -> { "title: text", ... } | nil
--     the first n passages of a search response (SearxNG, E5/BM25 servers and
--     the like); nil when the body is not JSON
--
-- Templates: {name} is the action's argument `name`; {env.NAME} is the
-- environment variable NAME. In the URL every value is percent-encoded,
-- except an {env.NAME} that starts the URL (a base URL such as
-- "{env.SEARCH_BASE}/search?q={q}"), so a value cannot add "/", "?" or
-- "#"; a path segment that a value turns into "." or ".." is an error, and
-- the path is sent as written (no dot-segment removal). In headers and
-- string bodies values are inserted as they are, but a header value with
-- NUL, CR or LF is an error naming the header. In a table body, a string that is exactly one
-- {field} takes the argument's own JSON type (numbers stay numbers,
-- tables stay tables); other strings are rendered as text; keys are not
-- templated. A missing argument or variable is an error naming it.
--
-- Results: "json" decodes the body (an error if it is not JSON), "text"
-- returns it, a function gets { status, headers, body } plus the args and
-- ctx and returns the observation; the default is JSON when the response
-- says application/json, else text. A non-2xx response is an error with the
-- status and a short body excerpt. Header values and environment values
-- never appear in errors, in any encoding, nor in errors raised by a result
-- function. Environment values used by the templates (but an {env.NAME}
-- that starts the URL: a base URL stays readable, only its userinfo is
-- secret) and the values of credential headers are declared to
-- specula.secrets, so no output of the process shows them. Failures are
-- retried with specula.llm.retry.
local json = require "specula.json"
local retry = require "specula.llm.retry"
local secrets_mod = require "specula.secrets"
local urlmod = require "specula.url"
local scrub = secrets_mod.scrub_message

local type, tostring, tonumber, pairs, ipairs, error, setmetatable, pcall =
  type, tostring, tonumber, pairs, ipairs, error, setmetatable, pcall
local format, find, sub, gsub, lower = string.format, string.find, string.sub, string.gsub, string.lower
local concat = table.concat

local M = {}

----------------------------------------------------------------------------
-- templates
----------------------------------------------------------------------------

-- "a {x} b {env.Y}" -> { "a ", {name = "x"}, " b ", {env = "Y"} }; nil when
-- the text has no {field}.
local function compile(s)
  local parts, i, any = {}, 1, false
  while true do
    local a, b, name = find(s, "{([%a_][%w_%.]*)}", i)
    if not a then break end
    local env = name:match("^env%.([%a_][%w_]*)$")
    if env or not find(name, ".", 1, true) then
      if a > i then parts[#parts + 1] = sub(s, i, a - 1) end
      parts[#parts + 1] = env and { env = env, pos = a } or { name = name, pos = a }
      any = true
    else
      parts[#parts + 1] = sub(s, i, b)  -- not a {field}: keep as written
    end
    i = b + 1
  end
  if not any then return nil end
  if i <= #s then parts[#parts + 1] = sub(s, i) end
  return parts
end

-- every byte but the unreserved ones as %XX (libcurl's curl_easy_escape)
local function urlencode(s)
  return urlmod.escape(s)
end
M.urlencode = urlencode

-- Declare the value of {env.NAME} part p (in the url when `url`): a base
-- URL that starts the url gives only its userinfo and secret parameters.
local function declare_env(p, v, url)
  if url and p.pos == 1 and find(v, "^%a[%w+.-]*://") then
    secrets_mod.declare_url(v)
    return false
  end
  secrets_mod.declare(v, "$" .. p.env)
  return true
end

-- The value of one {field}. env values are recorded in `secrets`.
local function value_of(tool, p, args, where, secrets, url)
  if p.env then
    local v = os.getenv(p.env)
    if v == nil then
      error(format("tools.http '%s': environment variable %s is not set (used as {env.%s} in %s)",
                   tool, p.env, p.env, where), 0)
    end
    if declare_env(p, v, url) and #v >= 6 then secrets[#secrets + 1] = v end
    return v
  end
  local v = type(args) == "table" and args[p.name] or nil
  if v == nil or v == json.null then
    error(format("tools.http '%s': missing argument '%s' (used as {%s} in %s)", tool, p.name, p.name, where), 0)
  end
  return v
end

local function as_text(v)
  if type(v) == "table" then return json.encode(v) or tostring(v) end
  return tostring(v)
end

-- In the URL, `spans` (when given) receives { from, to, field } for every
-- encoded value, so the path check can name the field.
local function render(tool, parts, args, where, secrets, mode, spans)
  local out, len = {}, 0
  for i, p in ipairs(parts) do
    if type(p) == "string" then
      out[i] = p
    else
      local v = value_of(tool, p, args, where, secrets, mode == "url")
      if mode == "url" then
        if type(v) == "table" then
          error(format("tools.http '%s': argument '%s' is a table; the url needs a string or number",
                       tool, p.name), 0)
        end
        if p.env and p.pos == 1 then
          out[i] = tostring(v)
        else
          out[i] = urlencode(tostring(v))
          if spans then
            spans[#spans + 1] = { len + 1, len + #out[i], p.env and ("{env." .. p.env .. "}") or ("{" .. p.name .. "}") }
          end
        end
      else
        out[i] = as_text(v)
      end
    end
    len = len + #out[i]
  end
  return concat(out)
end

-- A value must stay inside its path segment: percent-encoding keeps "/",
-- "?" and "#" out, but a segment that comes out as "." or ".." would still
-- climb the path (servers and proxies resolve dot segments), so it is an
-- error naming the field(s) that made it.
local function check_path(tool, url, spans)
  local auth = find(url, "://", 1, true)
  local ps = auth and find(url, "/", auth + 3, true) or (sub(url, 1, 1) == "/" and 1 or nil)
  local qs = find(url, "[?#]", auth and auth + 3 or 1)
  if not ps or (qs and qs < ps) then return end  -- no path, or a "/" only in the query
  local pe = (qs or (#url + 1)) - 1
  local i = ps + 1
  while i <= pe + 1 do
    local j = find(url, "/", i, true)
    if not j or j > pe then j = pe + 1 end
    local seg = sub(url, i, j - 1)
    if seg == "." or seg == ".." then
      local names = {}
      for _, sp in ipairs(spans) do
        if sp[1] <= j - 1 and sp[2] >= i then names[#names + 1] = sp[3] end
      end
      if #names > 0 then
        error(format("tools.http '%s': %s in the url makes the path segment \"%s\"; a value cannot "
          .. "be \".\" or \"..\" in the path", tool, concat(names, " and "), seg), 0)
      end
    end
    i = j + 1
  end
end

-- NUL, CR and LF would end a header line early (or start a new header).
local function header_problem(tool, name, v)
  local bad = find(v, "%z") and "a NUL byte" or (find(v, "[\r\n]") and "a line break (CR or LF)")
  if bad then return format("tools.http '%s': the value of header '%s' contains %s", tool, name, bad) end
  return nil
end

-- A compiled body template: a deep copy where every templated string is
-- replaced by { parts } (or { __whole = field } when it is exactly one).
local function compile_body(v)
  if type(v) == "string" then
    local parts = compile(v)
    if not parts then return v end
    if #parts == 1 and type(parts[1]) == "table" then return { __whole = parts[1] } end
    return { __parts = parts }
  elseif type(v) == "table" then
    local out = {}
    for k, x in pairs(v) do out[k] = compile_body(x) end
    return setmetatable(out, getmetatable(v))
  end
  return v
end

local function render_body(tool, t, args, secrets)
  if type(t) ~= "table" then return t end
  if t.__whole then return value_of(tool, t.__whole, args, "body", secrets) end
  if t.__parts then return render(tool, t.__parts, args, "body", secrets, "text") end
  local out = {}
  for k, x in pairs(t) do out[k] = render_body(tool, x, args, secrets) end
  return setmetatable(out, getmetatable(t))
end

----------------------------------------------------------------------------
-- HTTP tools
----------------------------------------------------------------------------

local RESULTS = { json = true, text = true }

-- What the templates will read from the environment is secret from the
-- tool's creation on, before any call (a value set later is declared when
-- it is used).
local function declare_parts(parts, url)
  for _, p in ipairs(parts or {}) do
    if type(p) == "table" and p.env then
      local v = os.getenv(p.env)
      if v then declare_env(p, v, url) end
    end
  end
end

local function declare_body(t)
  if type(t) ~= "table" then return end
  if t.__whole then declare_parts({ t.__whole }) return end
  if t.__parts then declare_parts(t.__parts) return end
  for _, x in pairs(t) do declare_body(x) end
end

local function declare_templates(url_t, headers_t, body_t, body_kind)
  declare_parts(url_t, true)
  for _, h in ipairs(headers_t) do declare_parts(h[2]) end
  if body_kind == "json" then declare_body(body_t) elseif body_kind == "text" then declare_parts(body_t) end
end

-- Raise the error of a request that failed (f, after n attempts), scrubbed.
local function http_failed(name, where, f, n, why, secrets)
  local msg
  if f.err then
    msg = format("tools.http '%s': %s (%s)", name, f.err, retry.attempts_text(n))
  else
    -- scrubbed before the cut too, so no part of a secret survives it
    local ex = retry.excerpt(scrub(f.body, secrets), f.headers and f.headers["content-type"], 200)
    msg = format("tools.http '%s': HTTP %s from %s (%s)%s", name, tostring(f.status), where,
                 retry.attempts_text(n), ex ~= "" and (": " .. ex) or "")
  end
  if why then msg = msg .. "; " .. why end
  error(scrub(msg, secrets), 0)
end

-- The tool's result from the response: by the spec's result (nil: by the
-- content type), "text", "json" or a function of the response.
local function http_result(name, where, result, res, args, ctx, secrets)
  local mode = result
  if mode == nil then
    local ct = lower(res.headers["content-type"] or "")
    mode = find(ct, "json", 1, true) and "json" or "text"
  end
  if mode == "text" then return res.body end
  if mode == "json" then
    local v, err = json.decode(res.body)
    if v == nil then
      error(scrub(format("tools.http '%s': response of %s is not JSON: %s; body starts \"%s\"",
        name, where, tostring(err), retry.excerpt(scrub(res.body, secrets), "text/plain", 80)), secrets), 0)
    end
    return v
  end
  -- the result function sees the response, so its errors may quote it
  local ok, out = require("specula.internal.sched").protect(true, result,
    { status = res.status, headers = res.headers, body = res.body }, args, ctx)
  if not ok then error(scrub(out, secrets), 0) end
  return out
end

function M.http(spec)
  if type(spec) ~= "table" then error("specula.tools.http: expected a spec table", 2) end
  local name = spec.name or "http"
  if type(spec.url) ~= "string" or spec.url == "" then
    error("specula.tools.http: tool '" .. name .. "' needs url = \"https://...\"", 2)
  end
  local method = (spec.method or (spec.body ~= nil and "POST" or "GET")):upper()
  local result = spec.result
  if result ~= nil and type(result) ~= "function" and not RESULTS[result] then
    error("specula.tools.http: tool '" .. name .. "': result must be \"json\", \"text\" or a function", 2)
  end
  if spec.headers ~= nil and type(spec.headers) ~= "table" then
    error("specula.tools.http: tool '" .. name .. "': headers must be a table", 2)
  end
  if spec.cost ~= nil and (type(spec.cost) ~= "number" or spec.cost < 0) then
    error("specula.tools.http: tool '" .. name .. "': cost must be a non-negative number", 2)
  end
  local url_t = compile(spec.url) or { spec.url }
  local headers_t = {}
  for k, v in pairs(spec.headers or {}) do
    if type(k) ~= "string" or not find(k, "^[%w!#$%%&'*+%-.^_`|~]+$") then
      local shown = gsub(tostring(k), "%c", function(c) return format("\\%d", c:byte()) end)
      error(format("specula.tools.http: tool '%s': header name '%s' is not a valid HTTP header name",
                   name, shown), 2)
    end
    if type(v) ~= "string" and type(v) ~= "number" then
      error("specula.tools.http: tool '" .. name .. "': header '" .. k .. "' must be a string", 2)
    end
    local problem = header_problem(name, k, tostring(v))
    if problem then error("specula." .. problem, 2) end
    headers_t[#headers_t + 1] = { k, compile(tostring(v)) or { tostring(v) } }
  end
  local body_t, body_kind = nil, nil
  if type(spec.body) == "table" then
    body_t, body_kind = compile_body(spec.body), "json"
  elseif type(spec.body) == "string" then
    body_t, body_kind = compile(spec.body) or { spec.body }, "text"
  elseif spec.body ~= nil then
    error("specula.tools.http: tool '" .. name .. "': body must be a table or a string", 2)
  end
  local has_ctype = false
  for k in pairs(spec.headers or {}) do
    if lower(tostring(k)) == "content-type" then has_ctype = true end
  end
  local policy = retry.new(spec.retry)
  local timeout_ms = spec.timeout_ms or 30000
  declare_templates(url_t, headers_t, body_t, body_kind)

  local function call(args, ctx)
    local secrets = {}
    local spans = {}
    local url = render(name, url_t, args, "the url", secrets, "url", spans)
    local headers = {}
    for _, h in ipairs(headers_t) do
      local v = render(name, h[2], args, "header " .. tostring(h[1]), secrets, "text")
      if #v >= 6 then secrets[#secrets + 1] = v end
      if secrets_mod.secret_header(h[1]) then secrets_mod.declare(v, "header " .. h[1]) end
      local problem = header_problem(name, h[1], v)
      if problem then error(problem, 0) end
      headers[h[1]] = v
    end
    check_path(name, url, spans)
    local body
    if body_kind == "json" then
      local b = render_body(name, body_t, args, secrets)
      local err
      body, err = json.encode(b)
      if not body then error(scrub(format("tools.http '%s': cannot encode the body: %s", name, err), secrets), 0) end
      if not has_ctype then headers["Content-Type"] = "application/json" end
    elseif body_kind == "text" then
      body = render(name, body_t, args, "body", secrets, "text")
      if not has_ctype then headers["Content-Type"] = "text/plain; charset=utf-8" end
    end
    local where = method .. " " .. retry.endpoint(url)
    local res, f, n, why = retry.request({
      method = method, url = url, headers = headers, body = body, timeout_ms = timeout_ms,
      connect_timeout_ms = spec.connect_timeout_ms, max_body_bytes = spec.max_body_bytes,
      idle_timeout_ms = spec.idle_timeout_ms, path_as_is = true,
    }, policy)
    if not res then http_failed(name, where, f, n, why, secrets) end
    return http_result(name, where, result, res, args, ctx, secrets)
  end

  return { call = call, cost = spec.cost, class = spec.class, spec = spec,
           speculate = spec.speculate, verify = spec.verify, warmup = spec.warmup }
end

----------------------------------------------------------------------------
-- search results
----------------------------------------------------------------------------

-- Where common search servers put their hit list and each hit's text.
local LIST_KEYS = { "results", "documents", "passages", "hits", "data" }
local TEXT_KEYS = { "content", "snippet", "text", "contents", "passage" }

--- The first n (default 5) passages of a JSON search response, each
-- "title: text" (or the text alone) with whitespace runs folded to one
-- space. A body that is a list is the hit list itself; hits may be strings.
-- Returns nil when the body is not JSON, {} when it has no hits.
function M.passages(body, n)
  if type(body) ~= "string" then error("specula.tools.passages: body must be a string", 2) end
  if n ~= nil and (type(n) ~= "number" or n < 1) then error("specula.tools.passages: n must be a positive number", 2) end
  n = n or 5
  local data = json.decode(body)
  if type(data) ~= "table" then return nil end
  local list = data
  for _, k in ipairs(LIST_KEYS) do
    if type(data[k]) == "table" then list = data[k]; break end
  end
  local out = {}
  for _, item in ipairs(list) do
    if #out >= n then break end
    local p
    if type(item) == "string" then
      p = item
    elseif type(item) == "table" then
      local text = ""
      for _, k in ipairs(TEXT_KEYS) do
        if item[k] ~= nil then text = tostring(item[k]); break end
      end
      p = item.title and (tostring(item.title) .. ": " .. text) or text
    end
    if p then out[#out + 1] = (gsub(p, "%s+", " ")) end
  end
  return out
end

----------------------------------------------------------------------------
-- other tools
----------------------------------------------------------------------------

local function copy_hooks(out, opts)
  for _, k in ipairs({ "cost", "class", "speculate", "verify", "warmup" }) do
    if opts[k] ~= nil then out[k] = opts[k] end
  end
  return out
end

--- A plain Lua tool: fn(args, ctx) -> observation.
function M.lua(fn, opts)
  if type(fn) ~= "function" then error("specula.tools.lua: expected a function", 2) end
  if opts ~= nil and type(opts) ~= "table" then error("specula.tools.lua: options must be a table", 2) end
  return copy_hooks({ call = fn }, opts or {})
end

--- A simulated tool (specula.sim.tool): latency law and result function.
function M.sim(opts)
  if type(opts) ~= "table" then error("specula.tools.sim: expected an options table", 2) end
  -- specula.internal.simlaw, not specula.sim: sim builds agents, and agent compiles tools
  local simlaw = require "specula.internal.simlaw"
  return copy_hooks({ call = simlaw.tool(opts) }, opts)
end

--- The call function of a declarative tool spec (an HTTP spec with url =,
-- a { sim = {...} } spec, or a tool table with a call function).
function M.compile(name, spec)
  if type(spec) == "function" then return spec end
  if type(spec) ~= "table" then
    error("specula.tools.compile: tool '" .. tostring(name) .. "': expected a spec table", 2)
  end
  if type(spec.call) == "function" then return spec.call end
  if spec.url ~= nil then
    local s = {}
    for k, v in pairs(spec) do s[k] = v end
    if s.name == nil then s.name = name end
    return M.http(s).call
  end
  if type(spec.sim) == "table" then return M.sim(spec.sim).call end
  error("specula.tools.compile: tool '" .. tostring(name) ..
        "': cannot compile this spec (an HTTP tool needs url = \"...\")", 2)
end

--- Tools served by an MCP server (specula.mcp client):
--   tools.mcp(client [, { include = {names}, exclude = {names},
--                         observation = fn(result, args, ctx), timeout_ms =,
--                         warmup = { tool = fn }, speculate = { tool = fn } }])
--   -> { name = tool table, ... } for specula.agent. Each call runs
--   tools/call; the observation is structuredContent when present, else the
--   text content joined with newlines; isError becomes a tool error. Each
--   tool table keeps the server's description in .mcp (annotations included),
--   its inputSchema as .schema and its description as .description (what
--   predictors read).
function M.mcp(client, opts)
  if type(client) ~= "table" or type(client.list_tools) ~= "function" then
    error("specula.tools.mcp: expected an MCP client (specula.mcp.connect)", 2)
  end
  opts = opts or {}
  if type(opts) ~= "table" then error("specula.tools.mcp: options must be a table", 2) end
  if opts.observation ~= nil and type(opts.observation) ~= "function" then
    error("specula.tools.mcp: observation must be a function", 2)
  end
  local function set_of(list, what)
    if list == nil then return nil end
    if type(list) ~= "table" then error("specula.tools.mcp: " .. what .. " must be a list of tool names", 3) end
    local s = {}
    for _, n in ipairs(list) do s[n] = true end
    return s
  end
  local include, exclude = set_of(opts.include, "include"), set_of(opts.exclude, "exclude")
  local list, err = client:list_tools()
  if not list then error("specula.tools.mcp: " .. tostring(err), 2) end
  local out, seen = {}, {}
  for _, d in ipairs(list) do
    local name = d.name
    if type(name) == "string" and (not include or include[name]) and not (exclude and exclude[name]) then
      seen[name] = true
      local observe, timeout_ms = opts.observation, opts.timeout_ms
      local function call(args, ctx)
        local r, cerr = client:call(name, args, { timeout_ms = timeout_ms })
        if not r then error(cerr, 0) end
        local parts = {}
        for _, item in ipairs(r.content) do
          if type(item) == "table" and item.type == "text" and type(item.text) == "string" then
            parts[#parts + 1] = item.text
          end
        end
        local text = concat(parts, "\n")
        if r.isError then
          error(format("mcp tool '%s' returned an error: %s", name, text ~= "" and text or "(no text)"), 0)
        end
        if observe then return observe(r, args, ctx) end
        if r.structuredContent ~= nil then return r.structuredContent end
        return text
      end
      out[name] = { call = call, mcp = d, annotations = d.annotations,
                    schema = type(d.inputSchema) == "table" and d.inputSchema or nil,
                    description = type(d.description) == "string" and d.description or nil,
                    warmup = opts.warmup and opts.warmup[name] or nil,
                    speculate = opts.speculate and opts.speculate[name] or nil }
    end
  end
  for n in pairs(include or {}) do
    if not seen[n] then error("specula.tools.mcp: the server has no tool '" .. tostring(n) .. "'", 2) end
  end
  return out
end

-- ---- MCP resources as tools ----------------------------------------------------------

-- The tool tables made by mcp_resources (weak): the policy gate knows them
-- by identity, not by a field a script could set on any tool.
local RESOURCE_TOOLS = setmetatable({}, { __mode = "k" })
function M.is_mcp_resource(t) return RESOURCE_TOOLS[t] == true end

-- RFC 6570 URI templates (levels 1-4 for string values; a list value or a
-- composite is refused). expand(template, vars) -> uri | nil, err;
-- variables(template) -> { names in order }.
-- What an operator leaves unencoded beside the unreserved characters
-- (RFC 6570 §3.2.1): nothing, or the reserved set and "%" for "+" and "#".
local UNRESERVED = nil
local RESERVED_OK = ":/?#[]@!$&'()*+,;=%"
local OPS = {
  [""] = { first = "", sep = ",", named = false, ifemp = "", allow = UNRESERVED },
  ["+"] = { first = "", sep = ",", named = false, ifemp = "", allow = RESERVED_OK },
  ["#"] = { first = "#", sep = ",", named = false, ifemp = "", allow = RESERVED_OK },
  ["."] = { first = ".", sep = ".", named = false, ifemp = "", allow = UNRESERVED },
  ["/"] = { first = "/", sep = "/", named = false, ifemp = "", allow = UNRESERVED },
  [";"] = { first = ";", sep = ";", named = true, ifemp = "", allow = UNRESERVED },
  ["?"] = { first = "?", sep = "&", named = true, ifemp = "=", allow = UNRESERVED },
  ["&"] = { first = "&", sep = "&", named = true, ifemp = "=", allow = UNRESERVED },
}

local function tpl_exprs(tpl)
  local out = {}
  for expr in tpl:gmatch("{([^}]*)}") do
    local op = expr:sub(1, 1)
    if OPS[op] and op ~= "" then expr = expr:sub(2) else op = "" end
    local vars = {}
    for spec in expr:gmatch("[^,]+") do
      local name, mod = spec:match("^([%w_%.%%]+)(.*)$")
      if not name or not (mod == "" or mod == "*" or mod:match("^:%d+$")) then return nil, "bad variable '" .. spec .. "'" end
      vars[#vars + 1] = { name = name, prefix = tonumber(mod:match("^:(%d+)$")) }
    end
    out[#out + 1] = { op = op, vars = vars }
  end
  return out
end

function M.uri_variables(tpl)
  local exprs, err = tpl_exprs(tpl)
  if not exprs then return nil, err end
  local names, seen = {}, {}
  for _, e in ipairs(exprs) do
    for _, v in ipairs(e.vars) do
      if not seen[v.name] then seen[v.name] = true; names[#names + 1] = v.name end
    end
  end
  return names
end

function M.expand_uri(tpl, vars)
  local exprs, err = tpl_exprs(tpl)
  if not exprs then return nil, err end
  local i = 0
  local out = tpl:gsub("{[^}]*}", function()
    i = i + 1
    local e = exprs[i]
    local o = OPS[e.op]
    local parts = {}
    for _, v in ipairs(e.vars) do
      local val = vars[v.name]
      if val ~= nil then
        if type(val) == "table" then error("the value of '" .. v.name .. "' must be a string or a number", 0) end
        val = tostring(val)
        if v.prefix then val = val:sub(1, v.prefix) end
        local enc = urlmod.escape(val, o.allow)
        if o.named then
          parts[#parts + 1] = v.name .. (val == "" and o.ifemp or ("=" .. enc))
        else
          parts[#parts + 1] = enc
        end
      end
    end
    if #parts == 0 then return "" end
    return o.first .. concat(parts, o.sep)
  end)
  return out
end

-- The observation of a read: the text of its contents (joined with
-- newlines), or the contents themselves when one is binary (a blob).
local function read_observation(r)
  local parts = {}
  for _, c in ipairs(r.contents) do
    if type(c) ~= "table" or type(c.text) ~= "string" then return r.contents end
    parts[#parts + 1] = c.text
  end
  return concat(parts, "\n")
end

--- Resource reads as tools (specula.mcp client):
--   tools.mcp_resources(client [, { name = "read_resource", templates = true,
--                                   prefix = "", observation = fn(result, args, ctx),
--                                   timeout_ms = }])
--   -> { read_resource = { args { uri } }, <prefix><template name> = { args: the
--        template's variables }, ... }
--   A read is resources/read; its observation is the text of the contents,
--   or the contents when one is a blob. A resource read changes nothing by
--   the protocol's definition, so these tools are `full` in the eligibility
--   gate without trusting any annotation (specula.policy: class
--   "mcp-resource"), unless the agent's policy decides for them itself.
function M.mcp_resources(client, opts)
  if type(client) ~= "table" or type(client.read_resource) ~= "function" then
    error("specula.tools.mcp_resources: expected an MCP client (specula.mcp.connect)", 2)
  end
  opts = opts or {}
  if type(opts) ~= "table" then error("specula.tools.mcp_resources: options must be a table", 2) end
  if opts.observation ~= nil and type(opts.observation) ~= "function" then
    error("specula.tools.mcp_resources: observation must be a function", 2)
  end
  local observe, timeout_ms = opts.observation, opts.timeout_ms
  local function reader(uri_of, what)
    return function(args, ctx)
      local uri, uerr = uri_of(args or {})
      if not uri then error(what .. ": " .. tostring(uerr), 0) end
      local r, err = client:read_resource(uri, { timeout_ms = timeout_ms })
      if not r then error(err, 0) end
      if observe then return observe(r, args, ctx) end
      return read_observation(r)
    end
  end
  local out = {}
  local function add(name, t)
    RESOURCE_TOOLS[t] = true
    out[name] = t
  end
  local gname = opts.name or "read_resource"
  add(gname, {
    call = reader(function(a)
      if type(a.uri) ~= "string" or a.uri == "" then return nil, "args.uri must be a resource URI" end
      return a.uri
    end, "tool '" .. gname .. "'"),
    mcp_resource = true,
    description = "Read a resource of MCP server '" .. tostring(client.name) .. "' by URI",
    inputSchema = { type = "object", properties = { uri = { type = "string" } }, required = { "uri" } },
  })
  if opts.templates ~= false then
    local list, err = client:list_resource_templates()
    if not list then
      -- a server without resources/templates offers no templates
      if not tostring(err):find("-32601", 1, true) then error("specula.tools.mcp_resources: " .. tostring(err), 2) end
      list = {}
    end
    for _, d in ipairs(list) do
      if type(d) == "table" and type(d.uriTemplate) == "string" and type(d.name) == "string" then
        local vars, verr = M.uri_variables(d.uriTemplate)
        if not vars then
          error("specula.tools.mcp_resources: template '" .. d.name .. "': " .. tostring(verr), 2)
        end
        local tname = (opts.prefix or "") .. d.name:gsub("[^%w_%-]", "_")
        if out[tname] then error("specula.tools.mcp_resources: two tools named '" .. tname .. "'", 2) end
        local props = {}
        for _, v in ipairs(vars) do props[v] = { type = "string" } end
        local tpl = d.uriTemplate
        add(tname, {
          call = reader(function(a)
            for _, v in ipairs(vars) do
              if a[v] == nil then return nil, "args." .. v .. " is missing" end
            end
            local ok, uri = pcall(M.expand_uri, tpl, a)
            if not ok then return nil, uri end
            return uri
          end, "tool '" .. tname .. "'"),
          mcp_resource = true, mcp = d, description = d.description,
          inputSchema = { type = "object", properties = props, required = vars },
        })
      end
    end
  end
  return out
end

return M
