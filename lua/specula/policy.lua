-- specula.policy: load an eligibility policy into the C gate (engine/sp_policy.c).
--
-- Accepted shapes (a table, a path to a Lua file returning one, or a function):
--   { search = "full", fetch = "warmup", email = "forbid" }        -- per tool
--   { classes = { read = "full", costly = { decision = "full", rate = 5, burst = 10 },
--                 write = "forbid" },
--     tools = { web_search = "read", vector_query = "costly" },
--     budget = { max_inflight = 4, max_wasted_cost = 0.50 },
--     trust_tool_classes = false,   -- honour `class =` declared on agent tools
--     decide = function(tool, args, ctx) return "full" end }     -- may only lower
--   function(tool, args, ctx) return "full" | "warmup" | "forbid" end
-- A tool with no entry is forbid (the C gate's built-in "unknown" class),
-- except the resource reads of specula.tools.mcp_resources: full (class
-- "mcp-resource") unless the policy names them or is a function.
--
-- A function or `decide` makes the policy "scripted": the agent adapter asks
-- it about every exact call that could launch early (the step's action and
-- each predicted call, with their args and ctx) and the C gate applies the
-- lower of its answer and the table's. The gate fails closed: a launch with
-- no answer from the script, or whose script raised or returned anything
-- but full/warmup/forbid, is forbid (counted as by_script).
local core = require "specula.internal.core"
local ffi = core.ffi
local C = core.C

local type, pairs, tostring, error = type, pairs, tostring, error

-- The policy errors already said (on_error): each once a process.
local SAID = {}

local M = {}

local DECISION = { forbid = C.SP_FORBID, warmup = C.SP_WARMUP, full = C.SP_FULL }
-- the class of MCP resource reads (full: see M.build)
local RESOURCE_CLASS = "mcp-resource"
M.RESOURCE_CLASS = RESOURCE_CLASS

local function decision_of(v, where)
  local d = DECISION[v]
  if d == nil then
    error("policy: " .. where .. ": decision must be full, warmup or forbid, got " .. tostring(v), 0)
  end
  return d
end

local function file_exists(p)
  local f = io.open(p, "r")
  if f then f:close() return true end
  return false
end

-- Resolve a policy path: as given, next to the script, then specula's policies/.
function M.resolve(path, script_dir)
  local cands = { path }
  -- an absolute path is only itself
  local relative = path:sub(1, 1) ~= "/"
  if script_dir and relative then cands[#cands + 1] = script_dir .. "/" .. path end
  local host = core.host
  if host and host.policies_dir and relative then
    local base = path:gsub("^policies/", "")
    cands[#cands + 1] = host.policies_dir .. "/" .. base
    if not base:find("%.lua$") then cands[#cands + 1] = host.policies_dir .. "/" .. base .. ".lua" end
  end
  for _, p in ipairs(cands) do
    if file_exists(p) then return p end
  end
  return nil, "policy file '" .. path .. "' not found (looked in: " .. table.concat(cands, ", ") .. ")"
end

function M.read(path, script_dir)
  local p, err = M.resolve(path, script_dir)
  if not p then error(err, 0) end
  local chunk, lerr = loadfile(p)
  if not chunk then error("policy: cannot load " .. p .. ": " .. tostring(lerr), 0) end
  -- the file is the user's code: whatever it raises, the message names where
  local ok, spec = require("specula.internal.sched").protect(false, chunk)
  if not ok then error("policy: " .. p .. " raised: " .. spec, 0) end
  if type(spec) ~= "table" and type(spec) ~= "function" then
    error("policy: " .. p .. " must return a table or a function", 0)
  end
  return spec, p
end

-- Declare a tool of the agent under a class (its cost from the agent's tool).
local function add_tool_to(p, agent_tools, tool, cls, where)
  local t = agent_tools[tool]
  local cost = t and t.cost or 0
  if C.sp_policy_tool(p, tool, cls, cost) < 0 then
    error("policy: " .. where .. ": class '" .. tostring(cls) .. "' of tool '" .. tool .. "' is not defined", 0)
  end
end

-- A class policy ({classes=, tools=, budget=, decide=, trust_tool_classes=})
-- into the C policy p; obj gets its rate class and decide function.
local function build_classes(p, spec, agent_tools, obj)
  local function add_tool(tool, cls, where) add_tool_to(p, agent_tools, tool, cls, where) end
  for cls, v in pairs(spec.classes or {}) do
    local d, rate, burst
    if type(v) == "table" then
      d, rate, burst = decision_of(v.decision, "class " .. cls), v.rate or 0, v.burst or 0
    else
      d, rate, burst = decision_of(v, "class " .. cls), 0, 0
    end
    if C.sp_policy_class(p, cls, d, rate, burst) < 0 then error("policy: cannot add class " .. cls, 0) end
    -- a rate is one bucket for the whole run: the queries in flight share it
    if type(rate) == "number" and rate > 0 then obj.rate_class = cls end
  end
  local mapped = {}
  for tool, cls in pairs(spec.tools or {}) do
    if DECISION[cls] then
      -- a per-tool decision inside a class policy
      C.sp_policy_class(p, "tool:" .. tool, DECISION[cls], 0, 0)
      cls = "tool:" .. tool
    end
    add_tool(tool, cls, "tools." .. tool)
    mapped[tool] = true
  end
  if spec.trust_tool_classes then
    for tool, t in pairs(agent_tools) do
      if not mapped[tool] and t.class ~= nil then add_tool(tool, t.class, "agent tool " .. tool) end
    end
  end
  local b = spec.budget
  if b then
    C.sp_policy_budget(p, b.max_inflight or -1, b.max_wasted_cost or -1)
  end
  if spec.decide ~= nil then
    if type(spec.decide) ~= "function" then error("policy: decide must be a function", 0) end
    obj.decide = spec.decide
    C.sp_policy_set_scripted(p, 1)
  end
end

-- Resource reads of an MCP server (specula.tools.mcp_resources) change
-- nothing by the protocol's definition of resources/read: they are full
-- without trusting any annotation, unless the policy decides for that
-- tool itself (a table entry; a function policy decides every tool).
-- Returns the sources, with the resource tools added.
local function add_resource_reads(p, spec, agent_tools, sources)
  -- (only specula.tools makes resource tools: an agent that never loaded
  -- it has none, and a start need not parse it)
  local tools_mod = package.loaded["specula.tools"]
  if not tools_mod then return sources end
  local function add_tool(tool, cls, where) add_tool_to(p, agent_tools, tool, cls, where) end
  local named = {}
  if type(spec) == "table" then
    if spec.classes or spec.tools or spec.budget or spec.decide then
      for tool in pairs(spec.tools or {}) do named[tool] = true end
    else
      for tool in pairs(spec) do named[tool] = true end
    end
  end
  local is_resource = tools_mod.is_mcp_resource
  local defined = false
  for tool, t in pairs(agent_tools) do
    if not named[tool] and is_resource(t) then
      if not defined then
        defined = true
        if C.sp_policy_class(p, RESOURCE_CLASS, C.SP_FULL, 0, 0) < 0 then
          error("policy: cannot add class " .. RESOURCE_CLASS, 0)
        end
      end
      add_tool(tool, RESOURCE_CLASS, "mcp resource tool " .. tool)
      sources = sources or {}
      sources[tool] = { decision = "full", source = "mcp-resource" }
    end
  end
  return sources
end

-- Build a C policy for an agent's tools. Returns an object:
-- { ptr = sp_policy*, decide = fn|nil, name = string }.
function M.build(spec, agent_tools, script_dir)
  local name, file = "inline", nil
  if type(spec) == "string" then
    spec, name = M.read(spec, script_dir)
    file = name
  end
  -- a policy that depends on the agent's tools (specula.policy.mcp)
  local sources
  if type(spec) == "table" and type(spec.resolve) == "function" then
    name = spec.name or name
    spec, sources = spec.resolve(agent_tools or {})
  end
  local p = C.sp_policy_new()
  if p == nil then error("policy: out of memory", 0) end
  p = ffi.gc(p, C.sp_policy_free)
  if core.ctx ~= nil then C.sp_policy_set_clock(p, C.sp_ctx_clock(core.ctx)) end
  -- file and spec: what the run's provenance describes (specula.provenance.policy)
  local obj = { ptr = p, name = name, script_errors = 0, first_error = nil, sources = sources, file = file,
                spec = spec }
  -- Called by the adapter when the script raised or gave a non-decision.
  function obj.on_error(tool, msg)
    obj.script_errors = obj.script_errors + 1
    if not obj.first_error then
      local text = require("specula.internal.sched").errstr(msg)
      -- a message with no line of its own (a bare yield, a non-decision)
      -- names where the policy's function is defined
      if not text:find("^[^\n]-%.lua:%d+:") then
        local fn = type(spec) == "function" and spec or (type(spec) == "table" and type(spec.decide) == "function"
          and spec.decide)
        local info = fn and debug.getinfo(fn, "S")
        if info and info.what == "Lua" then
          text = text .. string.format(" (the policy at %s:%d)", info.short_src, info.linedefined)
        end
      end
      obj.first_error = "policy " .. name .. ": for tool '" .. tostring(tool) .. "' " .. text
      -- once a process: every configuration of a --compare or a whatif
      -- builds its own policy, and the same script raises the same way
      if not SAID[obj.first_error] then
        SAID[obj.first_error] = true
        require("specula.internal.output").stderr("specula: warning: " .. obj.first_error .. " (counted as forbid)\n")
      end
    end
  end
  agent_tools = agent_tools or {}
  local function add_tool(tool, cls, where) add_tool_to(p, agent_tools, tool, cls, where) end

  if spec == nil then
    -- no policy: every agent tool is unknown, so forbid
  elseif type(spec) == "function" then
    C.sp_policy_class(p, "scripted", C.SP_FULL, 0, 0)
    for tool in pairs(agent_tools) do add_tool(tool, "scripted", "function policy") end
    obj.decide = spec
    C.sp_policy_set_scripted(p, 1)
  elseif type(spec) == "table" and (spec.classes or spec.tools or spec.budget or spec.decide) then
    build_classes(p, spec, agent_tools, obj)
  elseif type(spec) == "table" then
    for _, d in pairs({ "full", "warmup", "forbid" }) do C.sp_policy_class(p, d, DECISION[d], 0, 0) end
    for tool, d in pairs(spec) do
      if type(tool) ~= "string" then error("policy: keys must be tool names", 0) end
      decision_of(d, "tool " .. tool)
      add_tool(tool, d, "tool " .. tool)
    end
  else
    error("policy: expected a table, a function or a path, got " .. type(spec), 0)
  end
  -- resource reads of an MCP server: full unless the policy names them
  if type(spec) ~= "function" then
    obj.sources = add_resource_reads(p, spec, agent_tools, sources)
  end
  return obj
end

local cnt = ffi.new("sp_gate_counts")
local function counts_table()
  return { full = tonumber(cnt.full), warmup = tonumber(cnt.warmup), forbid = tonumber(cnt.forbid),
           by_budget = tonumber(cnt.by_budget), by_rate = tonumber(cnt.by_rate),
           by_hint = tonumber(cnt.by_hint), by_script = tonumber(cnt.by_script) }
end

-- The triggers the gate counts apart (SP_TRIG_*), by their names in stats.
local TRIGGERS = {
  { "target", C.SP_TRIG_TARGET }, { "warmup", C.SP_TRIG_WARMUP },
  { "predicted_start", C.SP_TRIG_PRED_START }, { "predicted_name", C.SP_TRIG_PRED_NAME },
}
M.TRIGGERS = TRIGGERS

local function tool_counts(p, i)
  C.sp_policy_tool_counts(p, i, -1, cnt)
  local t = counts_table()
  t.triggers = {}
  for _, tr in ipairs(TRIGGERS) do
    C.sp_policy_tool_counts(p, i, tr[2], cnt)
    t.triggers[tr[1]] = counts_table()
  end
  return t
end

-- Decisions counted so far: per tool (in all, and per trigger: target,
-- warmup, predicted_start, predicted_name), per class, and the script's
-- errors (each one a forbid).
function M.counts(obj)
  local p = obj.ptr
  local out = { tools = {}, classes = {}, script_errors = obj.script_errors or 0 }
  for i = 0, C.sp_policy_ntools(p) - 1 do
    local tname = ffi.string(C.sp_policy_tool_name(p, i))
    local t = tool_counts(p, i)
    local src = obj.sources and obj.sources[tname]
    if src then t.source, t.decision = src.source, src.decision end
    out.tools[tname] = t
  end
  out.unknown = tool_counts(p, -1)
  for i = 0, C.sp_policy_nclasses(p) - 1 do
    C.sp_policy_class_counts(p, i, cnt)
    out.classes[ffi.string(C.sp_policy_class_name(p, i))] = counts_table()
  end
  return out
end


-- A policy from an MCP server's tool annotations:
--   policy.mcp(client, { trust_annotations = false, overrides = { tool = "full" | "warmup" | "forbid" } })
-- With trust_annotations, readOnlyHint = true is full and anything else is
-- forbid, or warmup when the agent gives that tool a warm-up hook. Without
-- trust (the default: the MCP spec says annotations of an untrusted server
-- are hints, not guarantees) every tool is forbid unless overridden. Each
-- tool's decision and its source (annotation, override, default) are in
-- the counts (policy_counts.tools[name].source / .decision).
function M.mcp(client, opts)
  if type(client) ~= "table" or type(client.list_tools) ~= "function" then
    error("specula.policy.mcp: expected an MCP client (specula.mcp.connect)", 2)
  end
  opts = opts or {}
  if type(opts) ~= "table" then error("specula.policy.mcp: options must be a table", 2) end
  local overrides = opts.overrides or {}
  if type(overrides) ~= "table" then error("specula.policy.mcp: overrides must be a table of tool = decision", 2) end
  for tool, d in pairs(overrides) do
    if type(tool) ~= "string" or DECISION[d] == nil then
      error("specula.policy.mcp: overrides." .. tostring(tool) .. " must be full, warmup or forbid, got "
        .. tostring(d), 2)
    end
  end
  local list, err = client:list_tools()
  if not list then error("specula.policy.mcp: " .. tostring(err), 2) end
  local trust = opts.trust_annotations == true
  local described = {}
  for _, d in ipairs(list) do if type(d.name) == "string" then described[d.name] = d end end
  return {
    name = "mcp:" .. tostring(client.name) .. (trust and " (annotations trusted)" or ""),
    resolve = function(agent_tools)
      local tools, sources = {}, {}
      local function put(tool, decision, source)
        tools[tool] = decision
        sources[tool] = { decision = decision, source = source }
      end
      for tool, d in pairs(described) do
        local ann = type(d.annotations) == "table" and d.annotations or {}
        if overrides[tool] then
          put(tool, overrides[tool], "override")
        elseif trust and ann.readOnlyHint == true then
          put(tool, "full", "annotation")
        elseif trust then
          local t = agent_tools[tool]
          put(tool, (type(t) == "table" and t.warmup) and "warmup" or "forbid", "annotation")
        else
          put(tool, "forbid", "default")
        end
      end
      for tool, d in pairs(overrides) do
        if not described[tool] then put(tool, d, "override") end
      end
      local cls = {}
      for tool, d in pairs(tools) do cls[tool] = "mcp-" .. d end
      return { classes = { ["mcp-full"] = "full", ["mcp-warmup"] = "warmup", ["mcp-forbid"] = "forbid" },
               tools = cls }, sources
    end,
  }
end

return M
