-- spec/support/modgraph.lua — the module graphs of the source: which Lua
-- module requires which (every `require`, at the top of a file and inside
-- functions alike, since a lazy require is still a dependency), and which
-- engine file includes which header (a .c and its .h are one module). The
-- layer spec (spec/unit/layers_spec.lua) checks these graphs; run as a
-- script it prints them:
--   luajit spec/support/modgraph.lua [lua|c] [--edges]
-- lists the circles (strongly connected groups of two or more modules, with
-- one concrete cycle each) and exits 1 when there is one.
local M = {}

local function read(path)
  local f = assert(io.open(path, "r"))
  local s = f:read("*a")
  f:close()
  return s
end

-- Files under DIR whose names end in one of the suffixes, sorted.
local function list(dir, suffixes)
  local out = {}
  local p = assert(io.popen("find '" .. dir:gsub("'", "'\\''") .. "' -type f 2>/dev/null"))
  for line in p:lines() do
    for _, suf in ipairs(suffixes) do
      if line:sub(-#suf) == suf then out[#out + 1] = line break end
    end
  end
  p:close()
  table.sort(out)
  return out
end

-- Blank out Lua comments, keeping newlines so line numbers stay right: a
-- `require "x"` in a comment is no dependency. Strings are skipped over
-- whole, so a "--" inside one does not start a comment.
-- Where the quoted string opening at src[i] ends (its closing quote, or
-- the line's end for one left open): shared by the Lua and C readers.
local function quoted_end(src, i)
  local c, j, n = src:sub(i, i), i + 1, #src
  while j <= n do
    local d = src:sub(j, j)
    if d == "\\" then j = j + 2
    elseif d == c or d == "\n" then break
    else j = j + 1 end
  end
  return j
end
M.quoted_end = quoted_end

local function strip_lua_comments(src)
  local out, i, n = {}, 1, #src
  local function keep_lines(s) return (s:gsub("[^\n]", " ")) end
  while i <= n do
    local c = src:sub(i, i)
    if c == "-" and src:sub(i + 1, i + 1) == "-" then
      local eqs = src:match("^%[(=*)%[", i + 2)
      local stop
      if eqs then
        local _, e = src:find("]" .. eqs .. "]", i + 2, true)
        stop = e or n
      else
        stop = (src:find("\n", i, true) or n + 1) - 1
      end
      out[#out + 1] = keep_lines(src:sub(i, stop))
      i = stop + 1
    elseif c == '"' or c == "'" then
      local j = quoted_end(src, i)
      out[#out + 1] = src:sub(i, j)
      i = j + 1
    elseif c == "[" and src:match("^%[=*%[", i) then
      local eqs = src:match("^%[(=*)%[", i)
      local _, e = src:find("]" .. eqs .. "]", i, true)
      e = e or n
      -- A long string's text is no code: blank it too (template.lua has prose).
      out[#out + 1] = keep_lines(src:sub(i, e))
      i = e + 1
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
  return table.concat(out)
end
M.strip_lua_comments = strip_lua_comments

-- The module names a Lua source requires, as { {name=, line=}, ... }:
-- require "x", require 'x', require("x"), require ( "x" ), pcall(require, "x").
-- A computed name is a dependency too: require("p.q." .. name) gives
-- { prefix = "p.q.", line = } (every module right under p.q), and
-- require(var) { dynamic = true, line = } (the caller then counts every
-- module name the file spells in a string: the table it looks names up in).
function M.lua_requires(src)
  src = strip_lua_comments(src)
  local found = {}
  local line_at = {}
  do
    local ln = 1
    for pos = 1, #src do
      line_at[pos] = ln
      if src:byte(pos) == 10 then ln = ln + 1 end
    end
  end
  local pats = {
    "()%f[%w_]require%s*%(?%s*[\"']([%w_%.%-]+)[\"']()",
    "()%f[%w_]pcall%s*%(%s*require%s*,%s*[\"']([%w_%.%-]+)[\"']()",
  }
  for _, pat in ipairs(pats) do
    for pos, name, after in src:gmatch(pat) do
      -- "p.q." .. name is a prefix (below), not a module
      if not src:find("^%s*%.%.", after) then
        found[#found + 1] = { name = name, line = line_at[pos] or 1 }
      end
    end
  end
  for pos, prefix in src:gmatch("()%f[%w_]require%s*%(%s*[\"']([%w_%.%-]+%.)[\"']%s*%.%.") do
    found[#found + 1] = { prefix = prefix, line = line_at[pos] or 1 }
  end
  for pos in src:gmatch("()%f[%w_]require%s*%(%s*[%a_][%w_]*%s*%)") do
    found[#found + 1] = { dynamic = true, line = line_at[pos] or 1 }
  end
  table.sort(found, function(a, b) return a.line < b.line end)
  return found
end

-- The short strings of a Lua source with their lines: { {text=, line=}, ... }
-- (those that could be module names: letters, digits, _ . -).
local function lua_strings(src)
  local out, ln = {}, 0
  for l in (strip_lua_comments(src) .. "\n"):gmatch("([^\n]*)\n") do
    ln = ln + 1
    for text in l:gmatch("[\"']([%w_%.%-]+)[\"']") do out[#out + 1] = { text = text, line = ln } end
  end
  return out
end

-- lua/specula/x/init.lua -> specula.x; lua/specula/x/y.lua -> specula.x.y.
local function lua_module_name(root, path)
  local rel = path:sub(#root + 2):gsub("%.lua$", ""):gsub("/init$", "")
  return (rel:gsub("/", "."))
end

-- The graph of the Lua tree under ROOT (default "lua"): { nodes = {name =
-- path}, edges = {from = {to = line}}, requires = count of require calls
-- (to any module), inner = how many of those are indented (inside a
-- function or block) }. Only edges between modules of the tree are kept
-- (ffi, cjson are outside).
function M.lua_graph(root)
  root = root or "lua"
  local g = { nodes = {}, edges = {}, requires = 0, inner = 0, kind = "lua" }
  local files = list(root, { ".lua" })
  for _, path in ipairs(files) do
    g.nodes[lua_module_name(root, path)] = path
  end
  for _, path in ipairs(files) do
    local from = lua_module_name(root, path)
    local src = read(path)
    local lines = {}
    for l in (src .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
    g.edges[from] = g.edges[from] or {}
    local function edge(to, line)
      if g.nodes[to] and to ~= from and not g.edges[from][to] then g.edges[from][to] = line end
    end
    for _, r in ipairs(M.lua_requires(src)) do
      g.requires = g.requires + 1
      if (lines[r.line] or ""):match("^%s+") then g.inner = g.inner + 1 end
      if r.name then
        edge(r.name, r.line)
      elseif r.prefix then
        for name in pairs(g.nodes) do
          if name:sub(1, #r.prefix) == r.prefix and not name:find(".", #r.prefix + 1, true) then
            edge(name, r.line)
          end
        end
      else
        for _, str in ipairs(lua_strings(src)) do edge(str.text, str.line) end
      end
    end
  end
  return g
end

-- engine/sp_x.c and engine/sp_x.h -> sp_x.
local function c_module_name(path)
  return (path:match("([^/]+)%.[ch]$"))
end

-- The include graph of the C files in DIR (default "engine"): modules are
-- file names without .c/.h; an edge is a local #include "x.h" of a file of
-- the tree. With headers_only, only headers count (nodes and edges from .h).
function M.c_graph(dir, headers_only)
  dir = dir or "engine"
  local g = { nodes = {}, edges = {}, requires = 0, inner = 0, kind = "c" }
  local files = list(dir, headers_only and { ".h" } or { ".c", ".h" })
  for _, path in ipairs(files) do
    if not path:sub(#dir + 2):find("/") then
      g.nodes[c_module_name(path)] = path
    end
  end
  for _, path in ipairs(files) do
    if not path:sub(#dir + 2):find("/") then
      local from = c_module_name(path)
      g.edges[from] = g.edges[from] or {}
      local ln = 0
      for l in (read(path) .. "\n"):gmatch("([^\n]*)\n") do
        ln = ln + 1
        local inc = l:match('^%s*#%s*include%s*"([^"]+)"')
        if inc then
          g.requires = g.requires + 1
          local to = c_module_name(inc)
          if to and g.nodes[to] and to ~= from and not g.edges[from][to] then
            g.edges[from][to] = { line = ln, file = path }
          end
        end
      end
    end
  end
  return g
end

local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks)
  return ks
end
M.sorted_keys = sorted_keys

-- Strongly connected components with two or more modules (Tarjan), each a
-- sorted list; the list of them sorted by first member.
function M.circles(g)
  local index, low, on, stack, out, nxt = {}, {}, {}, {}, {}, 0
  local function visit(v)
    nxt = nxt + 1
    index[v], low[v] = nxt, nxt
    stack[#stack + 1] = v
    on[v] = true
    for _, w in ipairs(sorted_keys(g.edges[v] or {})) do
      if not index[w] then
        visit(w)
        low[v] = math.min(low[v], low[w])
      elseif on[w] then
        low[v] = math.min(low[v], index[w])
      end
    end
    if low[v] == index[v] then
      local comp = {}
      repeat
        local w = table.remove(stack)
        on[w] = nil
        comp[#comp + 1] = w
      until w == v
      if #comp > 1 then
        table.sort(comp)
        out[#out + 1] = comp
      end
    end
  end
  for _, v in ipairs(sorted_keys(g.nodes)) do
    if not index[v] then visit(v) end
  end
  table.sort(out, function(a, b) return a[1] < b[1] end)
  return out
end

-- One shortest cycle through the first module of a circle, staying inside
-- it: { a, b, ..., a }.
function M.cycle(g, comp)
  local inside = {}
  for _, v in ipairs(comp) do inside[v] = true end
  local start = comp[1]
  local prev, queue, head = { [start] = false }, { start }, 1
  while head <= #queue do
    local v = queue[head]
    head = head + 1
    for _, w in ipairs(sorted_keys(g.edges[v] or {})) do
      if w == start then
        local path = { start }
        local u = v
        while u ~= start do table.insert(path, 2, u) u = prev[u] end
        path[#path + 1] = start
        return path
      end
      if inside[w] and prev[w] == nil then
        prev[w] = v
        queue[#queue + 1] = w
      end
    end
  end
  return { start }
end

-- Where the edge FROM -> TO is written, "path:line".
function M.where(g, from, to)
  local e = g.edges[from] and g.edges[from][to]
  if type(e) == "table" then return e.file .. ":" .. e.line end
  return tostring(g.nodes[from]) .. ":" .. tostring(e)
end

-- A circle as text: "a -> b -> a (a.lua:3, b.lua:9); members: a, b".
function M.describe(g, comp)
  local cyc = M.cycle(g, comp)
  local at = {}
  for i = 1, #cyc - 1 do at[#at + 1] = M.where(g, cyc[i], cyc[i + 1]) end
  local s = table.concat(cyc, " -> ") .. "  (" .. table.concat(at, ", ") .. ")"
  if #comp > #cyc - 1 then s = s .. "\n    all in the circle: " .. table.concat(comp, ", ") end
  return s
end

local function count(t) local n = 0 for _ in pairs(t) do n = n + 1 end return n end
M.count = count

if arg and arg[0] and arg[0]:match("modgraph%.lua$") then
  local which, show_edges = "all", false
  for _, a in ipairs(arg) do
    if a == "--edges" then show_edges = true else which = a end
  end
  local bad = false
  local graphs = {}
  if which == "all" or which == "lua" then graphs[#graphs + 1] = M.lua_graph("lua") end
  if which == "all" or which == "c" then graphs[#graphs + 1] = M.c_graph("engine") end
  for _, g in ipairs(graphs) do
    local nedges = 0
    for _, es in pairs(g.edges) do nedges = nedges + count(es) end
    local cs = M.circles(g)
    print(string.format("%s: %d modules, %d %s (%d indented), %d edges inside the tree, %d circle(s)",
      g.kind, count(g.nodes), g.requires, g.kind == "lua" and "require calls" or "#includes",
      g.inner, nedges, #cs))
    for i, comp in ipairs(cs) do
      print(string.format("  %d. %s", i, M.describe(g, comp)))
      bad = true
    end
    if show_edges then
      for _, from in ipairs(sorted_keys(g.edges)) do
        for _, to in ipairs(sorted_keys(g.edges[from])) do
          print("  " .. from .. " -> " .. to .. "  " .. M.where(g, from, to))
        end
      end
    end
  end
  os.exit(bad and 1 or 0)
end

return M
