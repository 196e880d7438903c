-- specula.internal.tags: the names built-in verifiers and predictors give themselves
-- (verify.jaccard(0.6), predict.pattern{...}): value -> { name, options },
-- which specula.provenance writes into the records. Kept below provenance so
-- that verify and predict can tag their values without requiring it (its
-- config names the default verifier, verify.exact).
local setmetatable = setmetatable

local M = {}

-- Weak keys: a tag never keeps a value alive.
M.of = setmetatable({}, { __mode = "k" })

--- Tag a built-in value with its name and options (data; functions in them
-- are described by where they are defined). Returns the value.
function M.tag(v, name, options)
  M.of[v] = { name = name, options = options }
  return v
end

return M
