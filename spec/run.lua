-- spec/run.lua — runs busted inside LuaJIT with specula's module paths
-- (`luajit spec/run.lua spec/unit`). Used by CTest; any busted options work.
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path
-- the node the specs start MCP servers with: $SPECULA_NODE's directory or
-- the Node 22 that .ci/deps installs, first on PATH (spec/support/deps.lua)
require("support.deps").use_node()
-- Files the specs make with os.tmpname are removed when the process ends
-- (busted closes the Lua state at exit: the sentinel's finalizer runs),
-- unless SPECULA_KEEP_TMP is set; H.tmpdir's directory goes the same way.
do
  local keep = os.getenv("SPECULA_KEEP_TMP")
  if not keep or keep == "" or keep == "0" then
    local made, tmpname = {}, os.tmpname
    os.tmpname = function()
      local p = tmpname()
      made[#made + 1] = p
      return p
    end
    local sentinel = newproxy(true)
    getmetatable(sentinel).__gc = function() for _, p in ipairs(made) do os.remove(p) end end
    package.loaded["specula.spec.tmp_sentinel"] = sentinel
  end
end
-- .ci/vgset's coverage run: each case's counts apart (spec/support/cases.lua)
if os.getenv("SPECULA_COVERAGE_DIR") then
  table.insert(arg, 1, "--helper=spec/support/cases.lua")
end
-- SPECULA_CASES=FILE (the valgrind pass: spec/valgrind-set.txt): of the spec
-- files given, run only the cases FILE lists ("NAME<TAB>full case name",
-- NAME the file's name without _spec.lua); a file it does not name runs whole
local cases = os.getenv("SPECULA_CASES")
if cases and cases ~= "" then
  local want = {}
  for line in io.lines(cases) do
    local name, case = line:match("^([%w_]+)\t(.+)$")
    if name then
      want[name] = want[name] or {}
      table.insert(want[name], case)
    end
  end
  local extra = {}
  for _, a in ipairs(arg) do
    local name = a:match("([%w_]+)_spec%.lua$")
    for _, case in ipairs(name and want[name] or {}) do
      extra[#extra + 1] = "--filter=^" .. case:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0") .. "$"
    end
  end
  for i, e in ipairs(extra) do table.insert(arg, i, e) end
end
require("busted.runner")({ standalone = false })
