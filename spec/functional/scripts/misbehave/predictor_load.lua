-- A predictor file for spec/functional/misbehave_spec.lua that raises as
-- it loads, an error object whose __tostring raises too.
error(setmetatable({}, { __tostring = function() error("and so does its __tostring") end }))
