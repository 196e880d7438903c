-- The chooser behind .ci/vgset (which see): reads each functional spec
-- case's gcov counts and picks the cheapest set of cases reaching every line
-- of engine/ that the whole suite reaches (spec/support/setcover.lua).
-- A case's valgrind cost is estimated: START_S per specula process it starts
-- (valgrind's start-up and the Lua modules loading interpreted) plus SLOW
-- times its plain wall time (most of which is waiting, which valgrind does
-- not slow).
-- usage: luajit .ci/vgset.lua BUILD_COV OBJDIR [--check]
package.path = "./spec/?.lua;" .. package.path
local cjson = require "cjson"
local cover = require "support.setcover"

local START_S, SLOW = 1.5, 3
local SET = "spec/valgrind-set.txt"

local build, objdir = arg[1], arg[2]
local check = arg[3] == "--check"
if not (build and objdir) or (arg[3] and not check) then
  io.stderr:write("usage: luajit .ci/vgset.lua BUILD_COV OBJDIR [--check]\n")
  os.exit(2)
end

local function read(p)
  local f = io.open(p, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

local function lines_of(cmd)
  local p = assert(io.popen(cmd, "r"))
  local out = {}
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  return out
end

-- every case: { file, name, cost, lines = set }; setups[file] likewise
local cases, setups = {}, {}
local all, nall = {}, 0

local function reach(dir)
  local set, n = {}, 0
  local edir = dir .. objdir .. "/engine"
  if #lines_of("ls " .. edir .. "/*.gcda 2>/dev/null") == 0 then return set, 0 end
  for _, doc in ipairs(lines_of("cd " .. edir .. " && gcov --json-format --stdout *.gcda 2>/dev/null")) do
    local ok, d = pcall(cjson.decode, doc)
    for _, f in ipairs(ok and d.files or {}) do
      local src = f.file:match("engine/(sp_[%w_]+%.c)$")
      for _, ln in ipairs(src and f.lines or {}) do
        if ln.count > 0 then
          local key = src .. ":" .. ln.line_number
          if not set[key] then set[key] = true; n = n + 1 end
          if not all[key] then all[key] = true; nall = nall + 1 end
        end
      end
    end
  end
  return set, n
end

local function starts(dir)
  local n = 0
  for _ in (read(dir .. "/starts") or ""):gmatch("\n") do n = n + 1 end
  return n
end

local files = lines_of("ls " .. build .. "/cov")
-- lines only processes started without SPECULA_WRAP reach: valgrind checks
-- them in no pass (reported, not chosen for)
local unwrapped = {}
for _, file in ipairs(files) do
  for k in pairs((reach(build .. "/cov/" .. file .. "/unwrapped"))) do unwrapped[k] = true end
end
all, nall = {}, 0   -- reach() added the unwrapped lines: the suite's count starts again
for _, file in ipairs(files) do
  local base = build .. "/cov/" .. file
  local lines = reach(base .. "/setup")
  setups[file] = { lines = lines, cost = START_S * starts(base .. "/setup") }
  for _, d in ipairs(lines_of("ls -d " .. base .. "/[0-9]*/ 2>/dev/null")) do
    local name = read(d .. "name")
    if name then
      local set, n = reach(d)
      local ms = tonumber(read(d .. "ms") or "") or 0
      cases[#cases + 1] = { file = file, name = name, lines = set, n = n, starts = starts(d),
                            cost = START_S * starts(d) + SLOW * ms / 1000 }
    end
  end
end
local only_unwrapped = {}
for k in pairs(unwrapped) do if not all[k] then only_unwrapped[#only_unwrapped + 1] = k end end
table.sort(only_unwrapped)
local failed = read(build .. "/Testing/Temporary/LastTestsFailed.log")
if failed and failed:find("functional/") then
  io.stderr:write("vgset: some files failed in the coverage run (their counts are partial):\n", failed)
end

local function union(list) return cover.union(list, setups) end
local function cost_of(list) return cover.cost(list, setups) end

local function missing(u)
  local m = {}
  for k in pairs(all) do if not u[k] then m[#m + 1] = k end end
  table.sort(m)
  return m
end

if check then
  local list, unknown = {}, {}
  local by = {}
  for _, c in ipairs(cases) do by[c.file .. "\t" .. c.name] = c end
  for l in (read(SET) or ""):gmatch("[^\n]+") do
    if l:match("^[a-z0-9_]+\t") then
      if by[l] then list[#list + 1] = by[l] else unknown[#unknown + 1] = l end
    end
  end
  local u, n = union(list)
  local m = missing(u)
  print(string.format("%s: %d cases reach %d of the %d engine/ lines the suite reaches", SET, #list, n, nall))
  for _, l in ipairs(unknown) do print("no such case (renamed?): " .. l) end
  if #m > 0 then
    print("not reached by the set: " .. table.concat(m, " ", 1, math.min(#m, 40)) .. (#m > 40 and " ..." or ""))
  end
  if #m > 0 or #unknown > 0 then
    print("run .ci/vgset to choose again")
    os.exit(1)
  end
  os.exit(0)
end

local chosen = cover.choose(cases, setups)

local nfiles = {}
for _, c in ipairs(chosen) do nfiles[c.file] = true end
local nf = 0
for _ in pairs(nfiles) do nf = nf + 1 end
local out = {
  "# The functional spec cases the valgrind pass runs (CMakeLists.txt, -DSPECULA_VALGRIND=ON):",
  "# FILE<TAB>full case name. Written by .ci/vgset: the cheapest cases under valgrind",
  "# that together reach every line of engine/ the whole functional suite reaches;",
  "# `.ci/vgset --check` says whether they still do.",
  string.format("# %d of %d cases in %d of %d files reach all %d lines; estimated valgrind CPU %.0f s of %.0f s.",
    #chosen, #cases, nf, #files, nall, cost_of(chosen), cost_of(cases)) }
for _, c in ipairs(chosen) do out[#out + 1] = c.file .. "\t" .. c.name end
local f = assert(io.open(SET, "w"))
f:write(table.concat(out, "\n"), "\n")
f:close()
print(out[#out - #chosen])
if #only_unwrapped > 0 then
  print(string.format("%d lines only specs that start the binary without SPECULA_WRAP reach (no valgrind pass checks them): %s",
    #only_unwrapped, table.concat(only_unwrapped, " ", 1, math.min(40, #only_unwrapped))))
end
for _, c in ipairs(chosen) do
  print(string.format("  %-18s %5.1f s %3d starts %5d lines  %s", c.file, c.cost, c.starts, c.n, c.name:sub(1, 70)))
end
