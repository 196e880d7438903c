-- specula.mcp.hooks: the server's requests to the client (sampling,
-- elicitation, roots) answered by the script's hooks, in a task of their
-- own (2025-11-25) or within the request as an InputRequiredResult's
-- inputRequests (2026-07-28). Methods of the session (specula.mcp.client),
-- which puts them on its Client object; like the session, it requires no
-- transport but the interface.
local sched = require "specula.internal.sched"
local json = require "specula.json"
local secrets = require "specula.secrets"
local transport = require "specula.mcp.transport"

local type, tostring, pairs, ipairs, setmetatable, getmetatable = type, tostring, pairs, ipairs, setmetatable, getmetatable
local format = string.format
local encode, JNULL = json.encode, json.null
local scrub = secrets.scrub
local spawn_root = transport.spawn_root

local M = {}
-- the methods the session puts on its Client object
local Client = {}
M.methods = Client

local function obj(t) return setmetatable(t or {}, json.object_mt) end

local HOOKS = { ["sampling/createMessage"] = "on_sampling", ["elicitation/create"] = "on_elicitation",
                ["roots/list"] = "on_roots" }
local HOOK_STAT = { ["sampling/createMessage"] = "sampling", ["elicitation/create"] = "elicitation",
                    ["roots/list"] = "roots" }
M.HOOKS = HOOKS

-- An accepted elicitation carries every field the requested schema gives a
-- default for (SEP-1034), then must hold the required ones.
local function elicitation_result(r, params)
  if type(r) ~= "table" then
    return nil, "returned " .. type(r) .. " (expected { action = 'accept'|'decline'|'cancel', content = {...} })"
  end
  local action = r.action
  if action ~= "accept" and action ~= "decline" and action ~= "cancel" then
    return nil, "action must be accept, decline or cancel, got " .. tostring(action)
  end
  if action ~= "accept" then return obj({ action = action }) end
  -- URL mode: the user went to the page; nothing comes back in the answer
  if type(params) == "table" and params.mode == "url" then return obj({ action = "accept" }) end
  local content = {}
  if r.content ~= nil then
    if type(r.content) ~= "table" then return nil, "content must be a table" end
    for k, v in pairs(r.content) do content[k] = v end
  end
  local schema = type(params) == "table" and params.requestedSchema or nil
  local props = type(schema) == "table" and type(schema.properties) == "table" and schema.properties or {}
  for name, p in pairs(props) do
    if content[name] == nil and type(p) == "table" and p.default ~= nil and p.default ~= JNULL then
      content[name] = p.default
    end
  end
  if type(schema) == "table" and type(schema.required) == "table" then
    for _, name in ipairs(schema.required) do
      if content[name] == nil then
        return nil, "the accepted content lacks the required field '" .. tostring(name) .. "'"
      end
    end
  end
  return obj({ action = "accept", content = obj(content) })
end
M.elicitation_result = elicitation_result

-- A string is the text of the assistant's message.
local function sampling_result(r)
  if type(r) == "string" then
    return obj({ role = "assistant", content = obj({ type = "text", text = r }), model = "specula-hook",
                 stopReason = "endTurn" })
  end
  if type(r) ~= "table" then return nil, "returned " .. type(r) .. " (expected a CreateMessageResult or a string)" end
  if r.content == nil then return nil, "the result has no content" end
  local out = obj()
  for k, v in pairs(r) do out[k] = v end
  if out.role == nil then out.role = "assistant" end
  if out.model == nil then out.model = "specula-hook" end
  return out
end

-- every byte but the unreserved ones and "/" as %XX (libcurl's escape)
local function file_uri(path)
  return "file://" .. require("specula.url").escape(path, "/")
end

-- A list of paths, file:// URIs or { uri =, name = }.
local function roots_result(r)
  if type(r) ~= "table" then return nil, "expected a list of roots, got " .. type(r) end
  local out = {}
  for i, x in ipairs(r) do
    if type(x) == "string" then
      out[i] = obj({ uri = x:match("^file://") and x or file_uri(x) })
    elseif type(x) == "table" and type(x.uri) == "string" then
      out[i] = obj({ uri = x.uri, name = x.name })
    else
      return nil, "roots[" .. i .. "] must be a path, a file:// URI or { uri =, name = }"
    end
  end
  return obj({ roots = json.array(out) })
end

-- A URL-mode elicitation (the server sends the user to a page) without
-- a hook is declined, as the protocol prescribes for a client that cannot
-- show it.
local function url_mode(method, params)
  return method == "elicitation/create" and type(params) == "table" and params.mode == "url"
end

-- The answer of a hook to a server's request (sampling, elicitation,
-- roots), in the calling task: result | nil, why, code. Without a hook:
-- nil, nil (the caller decides what that means).
function Client:_hook_answer(method, params)
  local hname = HOOKS[method]
  local hook = hname and self.hooks[hname]
  if hook == nil then return nil, nil end
  local hs = self.st.hooks
  hs[HOOK_STAT[method]] = hs[HOOK_STAT[method]] + 1
  local result, why, code = nil, nil, -32603
  if method == "roots/list" and type(hook) == "table" then
    result, why = roots_result(hook)
  else
    -- the hook is the user's code: whatever it raises (or a bare yield),
    -- the server gets an error naming the script and line
    local ok, r, e2 = sched.protect(false, hook, params, { server = self.name, method = method })
    if not ok then why = "raised: " .. r
    elseif type(r) == "table" and getmetatable(r) == json.raw_mt then
      -- JSON text a relay passes on as its own client wrote it (specula.gateway)
      result = r
    elseif r == nil or r == false then
      -- a refusal (the user said no, the model failed): the hook's reason
      why, code = e2 ~= nil and sched.errstr(e2) or "declined", -1
    elseif method == "sampling/createMessage" then result, why = sampling_result(r)
    elseif method == "elicitation/create" then result, why = elicitation_result(r, params)
    else result, why = roots_result(r) end
  end
  if result ~= nil and not encode(result) then
    result, why = nil, "its result cannot be written as JSON"
  end
  if result == nil then
    why = scrub(format("%s: %s hook for %s: %s", self:_where(), hname, method, tostring(why)))
    hs.errors = hs.errors + 1
    self:_warn(why)
    return nil, why, code
  end
  return result
end

-- Answer a server's request with its hook, in a task of its own (a hook may
-- wait: an LLM call, a person); no hook: -32601 (a URL-mode elicitation:
-- declined).
function Client:_server_request(id, method, params)
  local hname = HOOKS[method]
  local hook = hname and self.hooks[hname]
  if hook == nil then
    if url_mode(method, params) then
      self:_send_oneway({ jsonrpc = "2.0", id = id, result = obj({ action = "decline" }) })
      return
    end
    self:_send_oneway({ jsonrpc = "2.0", id = id, error = { code = -32601,
      message = "Method not found: " .. tostring(method) .. " (the specula client has no hook for it)" } })
    return
  end
  spawn_root(function()
    local result, why, code = self:_hook_answer(method, params)
    if result ~= nil then
      self:_send_oneway({ jsonrpc = "2.0", id = id, result = result })
    else
      self:_send_oneway({ jsonrpc = "2.0", id = id, error = { code = code, message = why } })
    end
  end)
end

-- The answers to an InputRequiredResult's inputRequests (2026-07-28: the
-- server asks within the request instead of sending its own), keyed as
-- asked: { key = result } | nil, err. An elicitation without a hook is
-- declined; sampling or roots without one fail the request (the client
-- never declared that capability).
function Client:_input_responses(reqs, what)
  if type(reqs) ~= "table" then
    return nil, format("%s: %s: the server asked for input without inputRequests", self:_where(), what)
  end
  local out = obj()
  for key, r in pairs(reqs) do
    if type(r) ~= "table" or type(r.method) ~= "string" then
      return nil, format("%s: %s: inputRequests[%s] is not a request", self:_where(), what, tostring(key))
    end
    self.st.input_requests = self.st.input_requests + 1
    local params = type(r.params) == "table" and r.params or obj()
    local result, why = self:_hook_answer(r.method, params)
    if result == nil and why == nil then
      if r.method == "elicitation/create" then
        result = obj({ action = "decline" })
      else
        return nil, format("%s: %s: the server asked for %s and the client has no hook for it", self:_where(),
          what, r.method)
      end
    end
    if result == nil then return nil, format("%s: %s: %s", self:_where(), what, tostring(why)) end
    out[key] = result
  end
  return out
end

return M
