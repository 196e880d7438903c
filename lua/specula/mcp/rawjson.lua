-- specula.mcp.rawjson: the text of one member of a JSON object's text,
-- as it stands (no decode, no encode): a relay hands a server's result to
-- its client byte for byte. The text was decoded once already (it is
-- valid JSON); this only finds where the member's value starts and ends.
local find, sub, byte = string.find, string.sub, string.byte

local M = {}

local function skip_ws(s, i) return find(s, "[^ \t\r\n]", i) or #s + 1 end

-- i at a '"': the index after its closing quote.
local function skip_string(s, i)
  local j = i + 1
  while true do
    local a = find(s, '["\\]', j)
    if not a then return nil end
    if byte(s, a) == 92 then j = a + 2 else return a + 1 end
  end
end

-- i at a value's first byte: the index after it.
local function skip_value(s, i)
  if i > #s then return nil end
  local c = sub(s, i, i)
  if c == '"' then return skip_string(s, i) end
  if c == "{" or c == "[" then
    local depth, j = 0, i
    while true do
      local a = find(s, '[%[%]{}"]', j)
      if not a then return nil end
      local b = sub(s, a, a)
      if b == '"' then
        j = skip_string(s, a)
        if not j then return nil end
      else
        depth = depth + ((b == "{" or b == "[") and 1 or -1)
        j = a + 1
        if depth == 0 then return j end
      end
    end
  end
  return find(s, "[,}%]%s]", i) or #s + 1   -- a number or a literal
end

-- The text of member `key` of the object that is s's top value, or nil.
function M.member(s, key)
  if type(s) ~= "string" then return nil end
  local i = skip_ws(s, 1)
  if sub(s, i, i) ~= "{" then return nil end
  i = skip_ws(s, i + 1)
  while i <= #s do
    if sub(s, i, i) ~= '"' then return nil end
    local kend = skip_string(s, i)
    if not kend then return nil end
    local k = sub(s, i + 1, kend - 2)
    i = skip_ws(s, kend)
    if sub(s, i, i) ~= ":" then return nil end
    i = skip_ws(s, i + 1)
    local vend = skip_value(s, i)
    if not vend then return nil end
    if k == key then return sub(s, i, vend - 1) end
    i = skip_ws(s, vend)
    if sub(s, i, i) ~= "," then return nil end
    i = skip_ws(s, i + 1)
  end
  return nil
end

-- The texts of the elements of the array that is s's top value, or nil.
function M.elements(s)
  if type(s) ~= "string" then return nil end
  local i = skip_ws(s, 1)
  if sub(s, i, i) ~= "[" then return nil end
  local l = {}
  i = skip_ws(s, i + 1)
  if sub(s, i, i) == "]" then return l end
  while i <= #s do
    local vend = skip_value(s, i)
    if not vend then return nil end
    l[#l + 1] = sub(s, i, vend - 1)
    i = skip_ws(s, vend)
    local c = sub(s, i, i)
    if c == "]" then return l end
    if c ~= "," then return nil end
    i = skip_ws(s, i + 1)
  end
  return nil
end

return M
