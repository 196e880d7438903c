-- specula.internal.exact: the lossless verifier, specula.verify.exact. On
-- its own so that a run whose agent names no verifier (exact is the
-- default) does not parse specula.verify and specula.text at its start.
local canonical = require("specula.json").canonical
local pcall, tostring = pcall, tostring

-- The canonical JSON of both values must be identical.
local function exact(predicted, actual)
  if predicted == actual then return true, "accept: exact" end
  local ok1, a = pcall(canonical, predicted)
  local ok2, b = pcall(canonical, actual)
  if not (ok1 and ok2) then
    return false, "reject: not JSON-encodable (" .. tostring(ok1 and b or a) .. ")"
  end
  if a == b then return true, "accept: exact" end
  return false, "reject: not identical"
end

-- (its name in records' provenance: specula.internal.tags)
require("specula.internal.tags").tag(exact, "exact")
return exact
