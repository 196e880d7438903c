-- specula.convtraces.common: what the log readers share below them.
local json = require "specula.json"

local pcall = pcall

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

return M
