-- specula.secrets: the one registry of values that must never leave the
-- process, and the scrubber every output boundary calls.
--
--   secrets.declare(value [, label]) -- a secret (API key, token, password):
--                                       never written anywhere from now on
--   secrets.scrub(s)                 -> s with every declared secret, in
--                                       every encoding, replaced by [redacted]
--   secrets.list()                   -> the declared values (for the scrubber)
--
-- Values shorter than 6 bytes are refused (they would blank ordinary words);
-- declare returns false for them. The scrubbing itself is specula.llm.retry's
-- (raw, percent, JSON, HTML, Base64 forms).
local M = {}

local declared, order = {}, {}

function M.declare(value, label)
  if type(value) ~= "string" or #value < 6 then return false end
  if not declared[value] then
    declared[value] = label or true
    order[#order + 1] = value
  end
  return true
end

function M.list()
  local out = {}
  for i = 1, #order do out[i] = order[i] end
  return out
end

function M.scrub(s)
  if s == nil then return nil end
  return require("specula.llm.retry").scrub(s, order)
end

return M
