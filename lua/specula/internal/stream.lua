-- specula.internal.stream: the reading methods every response body stream shares,
-- built on its read() (string | nil at the end | nil, err). A live response
-- (specula.http) and a recorded or replayed one (specula.cassette) take them
-- from here, below both.
local error, concat = error, table.concat

local M = {}

-- Iterator over body chunks; raises the transfer's error if it fails.
function M.chunks(self)
  return function()
    local s, err = self:read()
    if s == nil and err then error(err, 2) end
    return s
  end
end

-- The rest of the body as one string, or nil, err.
function M.read_all(self)
  local parts = {}
  while true do
    local s, err = self:read()
    if s == nil then
      if err then return nil, err end
      return concat(parts)
    end
    parts[#parts + 1] = s
  end
end

return M
