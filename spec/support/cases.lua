-- busted helper (spec/run.lua loads it when SPECULA_COVERAGE_DIR is set):
-- each case's specula processes write their gcov counts to a directory of
-- their own, DIR/NNN/, beside `name` (the case's full name, as busted's
-- --filter sees it), `ms` (its wall time) and `starts` (a line per process);
-- setups and teardowns count under DIR/setup/. Only the processes the
-- valgrind pass would run under valgrind count there: .ci/vgcount, put in
-- SPECULA_WRAP's place, points them at the case's directory; a spec that
-- starts the binary itself (signals, /dev/full) counts in DIR/unwrapped/.
-- .ci/vgset reads them to choose the cases the valgrind pass runs.
local busted = require "busted"
local ffi = require "ffi"
ffi.cdef [[ int setenv(const char *name, const char *value, int overwrite); ]]

local dir = assert(os.getenv("SPECULA_COVERAGE_DIR"))
local root = os.getenv("SPECULA_SOURCE_DIR") or "."
local function prefix(p)
  os.execute("mkdir -p '" .. p .. "'")
  ffi.C.setenv("SPECULA_CASE_DIR", p, 1)
end
os.execute("mkdir -p '" .. dir .. "/unwrapped'")
ffi.C.setenv("GCOV_PREFIX", dir .. "/unwrapped", 1)
prefix(dir .. "/setup")
ffi.C.setenv("SPECULA_WRAP", root .. "/.ci/vgcount", 1)

local function full_name(element)
  local names = { element.name }
  local parent = busted.parent(element)
  while parent and (parent.name or parent.descriptor) and parent.descriptor ~= "file" do
    table.insert(names, 1, parent.name or parent.descriptor)
    parent = busted.parent(parent)
  end
  return table.concat(names, " ")
end

local n, t0 = 0, nil
busted.subscribe({ "test", "start" }, function(element)
  n = n + 1
  local p = string.format("%s/%03d", dir, n)
  prefix(p)
  local f = assert(io.open(p .. "/name", "w"))
  f:write(full_name(element))
  f:close()
  t0 = busted.monotime()
  return nil, true
end)
busted.subscribe({ "test", "end" }, function()
  local f = assert(io.open(string.format("%s/%03d/ms", dir, n), "w"))
  f:write(string.format("%.1f", (busted.monotime() - t0) * 1000))
  f:close()
  prefix(dir .. "/setup")
  return nil, true
end)
