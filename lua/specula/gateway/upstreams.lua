-- specula.gateway.upstreams: one client session's servers behind the
-- gateway (specula.mcp.connect each), and the union of what they offer:
-- tools, prompts, resources and resource templates, with the routes back.
--
-- Order: the servers in their names' order (byte order). A tool or prompt
-- name that an earlier server already offers is given as SERVER__NAME for
-- the later one; a resource URI belongs to the first server that lists it.
local sched = require "specula.internal.sched"
local json = require "specula.json"
local mcp = require "specula.mcp"
local transport = require "specula.mcp.transport"

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local spawn_root = transport.spawn_root

local M = {}

local U = {}
U.__index = U

M.SEPARATOR = "__"

-- servers: the gateway's list { { name, opts }, ... }; hooks: what each
-- connect gets besides (on_sampling, on_elicitation, on_roots,
-- on_notification = function(server, method, params)).
function M.new(servers, hooks)
  return setmetatable({ servers = servers, hooks = hooks, clients = {}, errors = {}, catalog = {} }, U)
end

-- Connect every server at once (each in a root task); a server that cannot
-- start is left out with its error (the client still gets the others).
function U:connect()
  local tasks = {}
  for i, s in ipairs(self.servers) do
    local o = {}
    for k, v in pairs(s.opts) do o[k] = v end
    o.name = s.name
    o.quiet = true
    o.on_sampling, o.on_elicitation, o.on_roots = self.hooks.on_sampling, self.hooks.on_elicitation,
      self.hooks.on_roots
    local name, on_n = s.name, self.hooks.on_notification
    if on_n then o.on_notification = function(method, params) return on_n(name, method, params) end end
    tasks[i] = spawn_root(function() return mcp.connect(o) end)
  end
  for i, s in ipairs(self.servers) do
    local okw, c, err = tasks[i]:wait()
    if okw and c then
      self.clients[s.name] = c
    else
      self.errors[s.name] = tostring(okw and err or c)
    end
  end
  return true
end

function U:client(name) return self.clients[name] end

-- Every client, in order.
function U:each()
  local out = {}
  for _, s in ipairs(self.servers) do
    local c = self.clients[s.name]
    if c then out[#out + 1] = { name = s.name, client = c } end
  end
  return out
end

-- A list of one method from every server that offers it (a capability
-- key): { { server, items }, ... }. A server whose list fails is skipped
-- (its error kept in self.errors).
function U:_lists(cap, fetch)
  local out = {}
  for _, e in ipairs(self:each()) do
    local caps = e.client.capabilities or {}
    if caps[cap] ~= nil then
      local items, err = fetch(e.client)
      if items then out[#out + 1] = { server = e.name, items = items }
      else self.errors[e.name] = tostring(err) end
    end
  end
  return out
end

-- A copy of an item with another name.
local function renamed(item, name)
  local c = setmetatable({}, getmetatable(item) or json.object_mt)
  for k, v in pairs(item) do c[k] = v end
  c.name = name
  return c
end

-- Union of named items (tools, prompts): the list and name -> { server, name }.
local function union_named(lists)
  local items, routes = {}, {}
  for _, l in ipairs(lists) do
    for _, it in ipairs(l.items) do
      if type(it) == "table" and type(it.name) == "string" then
        local name = it.name
        if routes[name] then name = l.server .. M.SEPARATOR .. it.name end
        if not routes[name] then
          routes[name] = { server = l.server, name = it.name }
          items[#items + 1] = name == it.name and it or renamed(it, name)
        end
      end
    end
  end
  return items, routes
end

function U:tools()
  local c = self.catalog
  if not c.tools then
    c.tools, c.tool_routes = union_named(self:_lists("tools", function(cl) return cl:list_tools() end))
  end
  return c.tools, c.tool_routes
end

-- The tool names the client sees that might name another tool had every
-- server started: those of a server after (in the names' order) one that
-- could not start, whose tools are unknown — had it started, a tool of the
-- same name there would have kept the bare name and this one been given
-- SERVER__NAME. name -> the server that did not start (none: {}).
function U:ambiguous_tools()
  local _, routes = self:tools()
  local out, down = {}, nil
  local after = {}
  for _, s in ipairs(self.servers) do
    if not self.clients[s.name] then down = down or s.name
    elseif down then after[s.name] = down end
  end
  if not down then return out end
  for name, r in pairs(routes) do
    if after[r.server] and r.name == name then out[name] = after[r.server] end
  end
  return out
end

function U:prompts()
  local c = self.catalog
  if not c.prompts then
    c.prompts, c.prompt_routes = union_named(self:_lists("prompts", function(cl)
      return cl:_list_all("prompts/list", "prompts")
    end))
  end
  return c.prompts, c.prompt_routes
end

function U:resources()
  local c = self.catalog
  if not c.resources then
    local items, routes = {}, {}
    for _, l in ipairs(self:_lists("resources", function(cl) return cl:list_resources() end)) do
      for _, it in ipairs(l.items) do
        if type(it) == "table" and type(it.uri) == "string" and not routes[it.uri] then
          routes[it.uri] = l.server
          items[#items + 1] = it
        end
      end
    end
    c.resources, c.resource_routes = items, routes
  end
  return c.resources, c.resource_routes
end

function U:templates()
  local c = self.catalog
  if not c.templates then
    local items = {}
    for _, l in ipairs(self:_lists("resources", function(cl) return cl:list_resource_templates() end)) do
      for _, it in ipairs(l.items) do items[#items + 1] = it end
    end
    c.templates = items
  end
  return c.templates
end

-- A list changed on a server: forget the union of that kind.
function U:forget(kind)
  local c = self.catalog
  if kind == "tools" then c.tools, c.tool_routes = nil, nil
  elseif kind == "prompts" then c.prompts, c.prompt_routes = nil, nil
  elseif kind == "resources" then c.resources, c.resource_routes, c.templates = nil, nil, nil end
end

-- The servers that may hold a resource URI: its lister first, then every
-- other server with resources (a template's URI is listed by none).
function U:resource_servers(uri)
  local _, routes = self:resources()
  local out, first = {}, routes[uri]
  if first then out[1] = first end
  for _, e in ipairs(self:each()) do
    if e.name ~= first and (e.client.capabilities or {}).resources ~= nil then out[#out + 1] = e.name end
  end
  return out
end

function U:close()
  for _, e in ipairs(self:each()) do
    if sched.in_task() then pcall(e.client.close, e.client) else e.client.closed = true end
  end
end

return M
