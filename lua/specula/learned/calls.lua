-- specula.learned.calls: complete calls of one tool at a view, assembled
-- by a beam over its arguments' ranked values (a key set learnt, else the
-- schema's required properties), and the partial call that names a tool
-- whose arguments are unknown.
local common = require "specula.learned.common"
local values = require "specula.learned.values"

local type, ipairs, setmetatable = type, ipairs, setmetatable
local sort, concat, max = table.sort, table.concat, math.max
local SEP, keys_of = common.SEP, common.keys_of
local arg_values = values.arg_values

local M = {}

-- The schema of a tool's input, if declared.
local function schema_of(self, tool, ctx_tools)
  local t = ctx_tools and ctx_tools[tool] or (self.schemas and self.schemas[tool])
  local s = type(t) == "table" and (t.schema or t.input_schema or t.inputSchema or t.parameters)
  return type(s) == "table" and s or nil
end

-- The key sets a tool is called with, { {keys, p} }: learnt, else the
-- schema's required properties.
local ks_cache = setmetatable({}, { __mode = "k" })
local function keysets(self, tool, schema)
  local a = self.args[tool]
  if a and a.n > 0 then
    local c = ks_cache[a]
    if c and c.n == a.n then return c.out end
    local out = {}
    local names = keys_of(a.keysets)
    local total = 0
    for _, ks in ipairs(names) do total = total + a.keysets[ks] end
    for _, ks in ipairs(names) do
      local p = a.keysets[ks] / max(total, a.n)
      if p >= 0.05 then
        local list = {}
        for k in ks:gmatch("[^\31]+") do list[#list + 1] = k end
        out[#out + 1] = { keys = list, p = p, s = ks }
      end
    end
    sort(out, function(x, y) if x.p ~= y.p then return x.p > y.p end return x.s < y.s end)
    while #out > 2 do out[#out] = nil end
    ks_cache[a] = { n = a.n, out = out }
    return out
  elseif schema then
    local req = type(schema.required) == "table" and schema.required or {}
    local list = {}
    for _, k in ipairs(req) do if type(k) == "string" then list[#list + 1] = k end end
    sort(list)
    return { { keys = list, p = 0.5, s = concat(list, SEP) } }
  end
  return {}
end

-- Complete calls of one tool: { {args, p}, ... } best first (at most `n`).
local function tool_calls(self, view, tool, n, ctx_tools)
  local schema = schema_of(self, tool, ctx_tools)
  local props = schema and type(schema.properties) == "table" and schema.properties or {}
  local out = {}
  for _, ks in ipairs(keysets(self, tool, schema)) do
    -- a beam holds one value (and its key) per argument so far, in order
    local beams = { { vals = {}, keys = {}, p = ks.p, ev = 0 } }
    local a = self.args[tool]
    local eq = a and a.n >= 3 and a.eq or nil
    for ki, k in ipairs(ks.keys) do
      local vals = arg_values(self, view, tool, k, props[k])
      local nxt = {}
      -- pairs of arguments that never shared a value in training
      local apart
      if eq then
        for kj = 1, ki - 1 do
          local k1, k2 = ks.keys[kj], k
          if k1 > k2 then k1, k2 = k2, k1 end
          if not eq[k1 .. SEP .. k2] then apart = apart or {}; apart[#apart + 1] = kj end
        end
      end
      for _, b in ipairs(beams) do
        local taken = 0
        for j = 1, #vals do
          if taken >= self.values_per_arg then break end
          local vj = vals[j]
          local clash = false
          if apart then
            for _, kj in ipairs(apart) do
              if b.keys[kj] == vj.k then clash = true break end
            end
          end
          if not clash then
            taken = taken + 1
            local vs, kk = {}, {}
            for q = 1, ki - 1 do vs[q], kk[q] = b.vals[q], b.keys[q] end
            vs[ki], kk[ki] = vj.v, vj.k
            nxt[#nxt + 1] = { vals = vs, keys = kk, p = b.p * vj.p, ev = max(b.ev, vj.ev) }
          end
        end
      end
      if #nxt > n then
        sort(nxt, function(x, y) return x.p > y.p end)
        for q = #nxt, n + 1, -1 do nxt[q] = nil end
      end
      beams = nxt
      if #beams == 0 then break end
    end
    for _, b in ipairs(beams) do
      local args = {}
      for ki, k in ipairs(ks.keys) do args[k] = b.vals[ki] end
      out[#out + 1] = { args = args, p = b.p, ev = b.ev }
    end
  end
  sort(out, function(x, y) return x.p > y.p end)
  while #out > n do out[#out] = nil end
  return out
end

-- A call of the tool that names it with what can be filled (an argument
-- without any source left out): a first guess of the tool whose arguments
-- are unknown. Its score is 0: it is never fired.
local function partial_call(self, view, tool, ctx_tools)
  local schema = schema_of(self, tool, ctx_tools)
  local props = schema and type(schema.properties) == "table" and schema.properties or {}
  local ks = keysets(self, tool, schema)[1]
  local args = {}
  for _, k in ipairs(ks and ks.keys or {}) do
    local vals = arg_values(self, view, tool, k, props[k])
    if vals[1] then args[k] = vals[1].v end
  end
  return { args = args, p = 0, ev = 0, partial = true }
end

M.schema_of, M.keysets, M.tool_calls, M.partial_call = schema_of, keysets, tool_calls, partial_call

return M
