-- spec/support/funclen.lua — how long the functions of the source are: every
-- Lua function in lua/ (named ones and anonymous ones, nested ones apart)
-- and every C function in engine/, from its first line to its `end` or
-- closing brace. spec/unit/funclen_spec.lua fails on a function over the
-- limit that its allow-list does not name. Run as a script it prints them:
--   luajit spec/support/funclen.lua [--over N] [DIR...]
-- (default: lua and engine, over 120 lines), then the largest files.
-- run as a script: spec/ on the path, for support.modgraph
local spec_dir = arg and arg[0] and arg[0]:match("^(.-)/?support/funclen%.lua$")
if spec_dir then package.path = (spec_dir == "" and "." or spec_dir) .. "/?.lua;" .. package.path end
local mg = require "support.modgraph"

local M = {}

M.LIMIT = 120

local function read(path)
  local f = assert(io.open(path, "r"))
  local s = f:read("*a")
  f:close()
  return s
end

-- The Lua code with comments, long strings and the text of short strings
-- blanked (newlines kept): a keyword in a string opens no block.
local function lua_code(src)
  src = mg.strip_lua_comments(src)
  local out, i, n = {}, 1, #src
  while i <= n do
    local c = src:sub(i, i)
    if c == '"' or c == "'" then
      local j = mg.quoted_end(src, i)
      out[#out + 1] = c .. src:sub(i + 1, j - 1):gsub("[^\n]", " ") .. c
      i = j + 1
    else
      local j = src:find("[\"']", i) or n + 1
      out[#out + 1] = src:sub(i, j - 1)
      i = j
    end
  end
  return table.concat(out)
end

-- The functions of a Lua source: { {name=, line=, last=, lines=}, ... } in
-- order of their first line. An anonymous function is named by what it is
-- assigned to on its line (`x = function`, `local f = function`), else
-- "function@LINE".
function M.lua_functions(src)
  local code = lua_code(src)
  local lines = {}
  for l in (code .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  local out, stack = {}, {}
  for ln, l in ipairs(lines) do
    local pos = 1
    while true do
      local s, e, word = l:find("%f[%w_]([%a_][%w_]*)%f[^%w_]", pos)
      if not s then break end
      pos = e + 1
      if word == "function" then
        local name = l:match("^%s*([%w_%.:]+)", pos)
        if not name or name == "" then
          name = l:sub(1, s - 1):match("([%w_%.%[%]\"']+)%s*=%s*$") or ("function@" .. ln)
        end
        local f = { name = name, line = ln }
        out[#out + 1] = f
        stack[#stack + 1] = f
      elseif word == "if" or word == "do" or word == "repeat" then
        stack[#stack + 1] = word
      elseif word == "end" or word == "until" then
        local top = stack[#stack]
        stack[#stack] = nil
        if type(top) == "table" then
          top.last = ln
          top.lines = ln - top.line + 1
        end
      end
    end
  end
  for _, f in ipairs(out) do
    if not f.last then f.last, f.lines = #lines, #lines - f.line + 1 end
  end
  return out
end

-- C source with comments, strings and character constants blanked.
local function c_code(src)
  local out, i, n = {}, 1, #src
  local function blank(s) return (s:gsub("[^\n]", " ")) end
  while i <= n do
    local two = src:sub(i, i + 1)
    local c = src:sub(i, i)
    if two == "/*" then
      local _, e = src:find("*/", i + 2, true)
      e = e or n
      out[#out + 1] = blank(src:sub(i, e))
      i = e + 1
    elseif two == "//" then
      local e = (src:find("\n", i, true) or n + 1) - 1
      out[#out + 1] = blank(src:sub(i, e))
      i = e + 1
    elseif c == '"' or c == "'" then
      local j = mg.quoted_end(src, i)
      out[#out + 1] = c .. blank(src:sub(i + 1, j - 1)) .. c
      i = j + 1
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
  return table.concat(out)
end

-- The functions of a C source: a brace opened at file level after a
-- statement that holds a parenthesis (not an initializer `= {`) is a
-- function's body; the function starts at the statement's first line.
function M.c_functions(src)
  -- preprocessor lines (and their continuations) are no statements
  local code = c_code(src):gsub("([^\n]*)", function(l)
    return l:match("^%s*#") and l:gsub(".", " ") or l
  end)
  local out = {}
  local depth, stmt, stmt_line, cur = 0, {}, nil, nil
  local ln = 1
  for i = 1, #code do
    local c = code:sub(i, i)
    if c == "\n" then
      ln = ln + 1
      if depth == 0 then stmt[#stmt + 1] = " " end
    elseif depth == 0 then
      if c == "{" then
        local text = table.concat(stmt)
        local name = text:match("([%a_][%w_]*)%s*%(")
        if name and not text:find("=") then
          cur = { name = name, line = stmt_line or ln }
          out[#out + 1] = cur
        end
        depth = 1
      elseif c == ";" then
        stmt, stmt_line = {}, nil
      elseif not c:match("%s") then
        if not stmt_line then stmt_line = ln end
        stmt[#stmt + 1] = c
      else
        stmt[#stmt + 1] = c
      end
    else
      if c == "{" then depth = depth + 1
      elseif c == "}" then
        depth = depth - 1
        if depth == 0 then
          if cur then cur.last, cur.lines = ln, ln - cur.line + 1 end
          cur, stmt, stmt_line = nil, {}, nil
        end
      end
    end
  end
  return out
end

-- Every function of the files under the directories (relative to root),
-- { {file=, name=, line=, lines=}, ... }, and each file's line count.
function M.scan(root, dirs)
  local funcs, files = {}, {}
  for _, dir in ipairs(dirs) do
    local p = assert(io.popen("cd '" .. root:gsub("'", "'\\''") .. "' && find " .. dir
      .. " -type f \\( -name '*.lua' -o -name '*.c' \\) | sort"))
    for file in p:lines() do
      local src = read(root .. "/" .. file)
      local _, nl = src:gsub("\n", "")
      files[#files + 1] = { file = file, lines = nl }
      local list = file:match("%.lua$") and M.lua_functions(src) or M.c_functions(src)
      for _, f in ipairs(list) do
        f.file = file
        funcs[#funcs + 1] = f
      end
    end
    p:close()
  end
  return funcs, files
end

-- The functions longer than `limit` lines, longest first.
function M.over(funcs, limit)
  local out = {}
  for _, f in ipairs(funcs) do if f.lines > limit then out[#out + 1] = f end end
  table.sort(out, function(a, b)
    if a.lines ~= b.lines then return a.lines > b.lines end
    return a.file .. a.line < b.file .. b.line
  end)
  return out
end

-- "FILE NAME": how the allow-list names a function (its line moves).
function M.id(f) return f.file .. " " .. f.name end

if arg and arg[0] and arg[0]:match("funclen%.lua$") then
  local limit, dirs = M.LIMIT, {}
  local i = 1
  while arg[i] do
    if arg[i] == "--over" then limit = tonumber(arg[i + 1]); i = i + 2
    else dirs[#dirs + 1] = arg[i]; i = i + 1 end
  end
  if #dirs == 0 then dirs = { "lua", "engine" } end
  local funcs, files = M.scan(".", dirs)
  for _, f in ipairs(M.over(funcs, limit)) do
    print(string.format("%5d  %s:%d  %s", f.lines, f.file, f.line, f.name))
  end
  table.sort(files, function(a, b) return a.lines > b.lines end)
  print("largest files:")
  for j = 1, math.min(10, #files) do print(string.format("%5d  %s", files[j].lines, files[j].file)) end
end

return M
