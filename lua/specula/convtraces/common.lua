-- specula.convtraces.common: what the log readers share below them.
local json = require "specula.json"
local lines_of = require("specula.internal.lines").lines   -- NUL-safe file:lines()

local pcall, type, ipairs, concat = pcall, type, ipairs, table.concat

local M = {}

-- A value's JSON with its keys sorted: the same text in every process
-- (json.encode follows a table's hash order, which differs between runs,
-- and so would a kept result's text and its digest); json.encode's text
-- for what canonical JSON cannot hold.
function M.stable_json(v)
  local ok, s = pcall(json.canonical, v)
  if ok and s then return s end
  return json.encode(v)
end

-- A tool result's content as text: a string, or the text parts (blocks with
-- a text, or plain strings) of a list joined by newlines; anything else as
-- its stable JSON.
function M.content_text(c)
  if type(c) == "string" then return c end
  if c == nil or c == json.null then return "" end
  if type(c) == "table" and c[1] ~= nil then
    local parts = {}
    for _, p in ipairs(c) do
      if type(p) == "table" and type(p.text) == "string" then parts[#parts + 1] = p.text
      elseif type(p) == "string" then parts[#parts + 1] = p end
    end
    if #parts > 0 then return concat(parts, "\n") end
  end
  return M.stable_json(c) or ""
end

-- The lines of an open file (specula.internal.lines: every byte), and a
-- function that says why they ended early: a read error (a directory given
-- for a file: EISDIR) ends the lines, for the reader to name the file,
-- instead of raising out of it as an error in a specula source line. A
-- UTF-8 byte order mark opening the file (what Windows editors and
-- PowerShell's Out-File write) is not part of its first line.
function M.lines(f)
  local next_line, err, first = lines_of(f), nil, true
  return function()
    if err then return nil end
    local ok, line = pcall(next_line)
    if not ok then err = tostring(line) return nil end
    if first and line then
      first = false
      if line:sub(1, 3) == "\239\187\191" then line = line:sub(4) end
    end
    return line
  end, function() return err end
end

return M
