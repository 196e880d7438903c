-- policies/whatif.lua — the default eligibility `specula whatif` gives the
-- tools of Claude Code and Codex CLI logs: what may run before the model has
-- decided it. read_only(tool, args) -> true runs early (full); anything else
-- waits (forbid).
--   Claude Code   Read, Grep, Glob, LS, WebFetch, WebSearch, ToolSearch,
--                 TodoRead: read-only; Edit, Write, MultiEdit, NotebookEdit,
--                 Task and the rest: wait; Bash: by shell_readonly.lua
--   OpenHands     execute_bash: by shell_readonly.lua; str_replace_editor
--                 when it only views; think: read-only; the rest: wait
--   Codex CLI     exec_command / shell / shell_command / local_shell: by
--                 shell_readonly.lua (args.cmd or args.command: a string, or
--                 a list); apply_patch
--                 and the rest: wait
-- MCP tools (mcp__server__tool) wait: a log does not carry their
-- annotations. `specula whatif --policy FILE` replaces this file with one
-- of the same shape.
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local rules = dofile(here .. "/shell_readonly.lua")

local READ = { Read = true, Grep = true, Glob = true, LS = true, WebFetch = true, WebSearch = true,
               ToolSearch = true, TodoRead = true, view_image = true, think = true }
local SHELL = { Bash = "command", exec_command = "cmd", shell = "command", shell_command = "command",
                local_shell = "command", execute_bash = "command" }

local function words_of(cmd)
  local w = {}
  for word in cmd:gmatch("%S+") do w[#w + 1] = word end
  return w
end

-- One simple command (no separators left in it).
local function simple_read_only(cmd)
  local words = words_of(cmd)
  -- leading VAR=value assignments: only those that change how a reader
  -- prints (LD_PRELOAD=..., GIT_EXTERNAL_DIFF=... make it run a program)
  while words[1] and words[1]:match("^[%a_][%w_]*=") do
    local var = words[1]:match("^([%a_][%w_]*)=")
    if not (rules.env and rules.env[var]) then return false end
    table.remove(words, 1)
  end
  local prog = words[1]
  if not prog then return true end
  prog = prog:match("[^/]*$")
  words[1] = prog
  if rules.writes and rules.writes(prog, words) then return false end
  if prog == "git" then
    local sub = words[2]
    if rules.git[sub] then return true end
    return rules.extra(prog, words)
  end
  if rules.programs[prog] then return true end
  return rules.extra(prog, words)
end

-- The command line with what the shell does not read as syntax (quoted
-- text, a backslash-escaped character) replaced by "_" where it could be
-- taken for a separator or redirection; nil when a quote is left open.
-- Double quotes: a backslash escapes the next character; single quotes:
-- nothing is special up to the closing one; outside: a backslash escapes
-- the next character (so \" is no quote, and \; no separator).
local function neutral(cmd)
  local out, i, n = {}, 1, #cmd
  local SPECIAL = "[;|&<>\n]"
  while i <= n do
    local c = cmd:sub(i, i)
    if c == "\\" then
      local nx = cmd:sub(i + 1, i + 1)
      out[#out + 1] = "_" .. (nx:find(SPECIAL) and "_" or (nx == "" and "" or "_"))
      i = i + 2
    elseif c == "'" then
      local j = cmd:find("'", i + 1, true)
      if not j then return nil end
      out[#out + 1] = "'" .. cmd:sub(i + 1, j - 1):gsub(SPECIAL, "_") .. "'"
      i = j + 1
    elseif c == '"' then
      local j, buf = i + 1, {}
      while j <= n and cmd:sub(j, j) ~= '"' do
        local d = cmd:sub(j, j)
        if d == "\\" then buf[#buf + 1] = "__" j = j + 2
        else buf[#buf + 1] = d:find(SPECIAL) and "_" or d j = j + 1 end
      end
      if j > n then return nil end
      out[#out + 1] = '"' .. table.concat(buf) .. '"'
      i = j + 1
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
  return table.concat(out)
end

local function shell_read_only(cmd)
  if type(cmd) == "table" then
    -- ["bash", "-lc", "..."] or an argv
    if (cmd[1] == "bash" or cmd[1] == "sh" or cmd[1] == "zsh" or cmd[1] == "/bin/bash") and cmd[2] == "-lc" then
      cmd = cmd[3]
    else
      cmd = table.concat(cmd, " ")
    end
  end
  if type(cmd) ~= "string" then return false end
  -- a command substituted runs whatever it holds, quoted or not
  if cmd:find("%$%(") or cmd:find("`") then return false end
  -- stderr joined to stdout or thrown away writes nothing
  cmd = cmd:gsub("2>&1", ""):gsub("2>%s*/dev/null", "")
  -- quoted or escaped text is an argument: the separators and redirections
  -- it holds do nothing (an open quote: not understood, so a write)
  cmd = neutral(cmd)
  if not cmd then return false end
  -- anything else that writes a file or runs in the background
  if cmd:find("[<>]") then return false end
  local s = cmd:gsub("&&", "\n"):gsub("||", "\n"):gsub("[;|\n]", "\n")
  if s:find("&") then return false end
  for part in (s .. "\n"):gmatch("([^\n]*)\n") do
    if not simple_read_only(part) then return false end
  end
  return true
end

return {
  name = "whatif: read-only tools and shell commands run early, the rest waits",
  read_only = function(tool, args)
    if READ[tool] then return true end
    -- OpenHands' editor reads when it only views (a read action has no command)
    if tool == "str_replace_editor" or tool == "read" then
      return type(args) == "table" and (args.command == nil or args.command == "view")
    end
    local field = SHELL[tool]
    if field then return shell_read_only(type(args) == "table" and args[field] or nil) end
    return false
  end,
  shell_read_only = shell_read_only,
}
