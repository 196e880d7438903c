-- spec/deps.lua — `luajit spec/deps.lua NAME`: is the dependency NAME
-- (spec/support/deps.lua: node, npm, conformance, chromium, slurm) there?
-- CTest runs it as the test deps/NAME: it passes when it is, and is listed as skipped
-- (exit 77, SKIP_RETURN_CODE) when it is not, so `ctest` names what is
-- missing, whose specs are pending; this prints why and how to install it
-- (`ctest -R deps/ -V`). In CI (CI set) a missing dependency fails (exit 1),
-- as the specs do.
package.path = "./spec/?.lua;" .. package.path
local deps = require "support.deps"

local name = arg[1]
local check = name and deps[name]
local known = false
for _, n in ipairs(deps.NAMES) do known = known or n == name end
if not known or type(check) ~= "function" then
  io.stderr:write("spec/deps.lua: unknown dependency '" .. tostring(name) .. "' (one of: "
    .. table.concat(deps.NAMES, ", ") .. ")\n")
  os.exit(2)
end
local why = check()
if not why then
  print(name .. ": there")
  os.exit(0)
end
print(name .. " is missing, its specs are pending: " .. why)
local ci = os.getenv("CI")
os.exit((ci and ci ~= "" and ci ~= "false" and ci ~= "0") and 1 or 77)
