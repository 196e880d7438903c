-- Function lengths: no function in lua/ or engine/ runs over 120 lines
-- but the ones named below, which were that long when the limit came (a
-- new long function is split before it lands; one of these, when it is
-- touched). spec/support/funclen.lua counts them; run as a script it
-- lists them: `luajit spec/support/funclen.lua`.
local H = require "support.helpers"
local fl = require "support.funclen"

-- "FILE NAME" of each function over the limit, allowed for now: none is
-- left; one that cannot be split clearly is named here with its reason.
local ALLOWED = {}

local function lengths(list)
  local out = {}
  for _, f in ipairs(list) do out[#out + 1] = f.name .. "@" .. f.line .. "=" .. f.lines end
  return out
end

describe("the function length counter (spec/support/funclen.lua)", function()
  it("counts Lua functions from `function` to their `end`, blocks, strings and comments aside", function()
    local src = table.concat({
      "local M = {}",                                 -- 1
      "local function a(x)",                          -- 2
      "  if x then return 1 end",                     -- 3
      "  for i = 1, 3 do x = x + i end",              -- 4
      "  local s = 'end' .. \"function\" -- end",     -- 5
      "  --[[ function f() end",                      -- 6
      "  ]] local t = [[ do if ]]",                   -- 7
      "  repeat x = x - 1 until x < 0",               -- 8
      "  return x",                                   -- 9
      "end",                                          -- 10
      "M.b = function()",                             -- 11
      "  local function inner() return 'a\\'end' end", -- 12
      "  while true do break end",                    -- 13
      "end",                                          -- 14
      "function M.c(y) return function() end end",   -- 15
      "return M",                                     -- 16
    }, "\n")
    assert.same({ "a@2=9", "M.b@11=4", "inner@12=1", "M.c@15=1", "function@15@15=1" },
      lengths(fl.lua_functions(src)))
  end)

  it("counts C functions from the signature's first line to the closing brace", function()
    local src = table.concat({
      "#include \"x.h\"",                        -- 1
      "#define BLOCK(x) do { x; } while (0)",    -- 2
      "static const int tab[] = { 1, 2 };",      -- 3
      "struct s { int a; };",                    -- 4
      "static int",                              -- 5
      "f(int a,",                                -- 6
      "  int b) {",                              -- 7
      "  const char *s = \"}{\"; /* } */",       -- 8
      "  if (a) { return '}'; } // }",           -- 9
      "  return b;",                             -- 10
      "}",                                       -- 11
      "int g(void) { return 0; }",               -- 12
    }, "\n")
    assert.same({ "f@5=7", "g@12=1" }, lengths(fl.c_functions(src)))
  end)

  it("lists those over a limit, longest first", function()
    local funcs = { { file = "a", name = "x", line = 1, lines = 10 }, { file = "a", name = "y", line = 20, lines = 30 },
                    { file = "b", name = "z", line = 5, lines = 5 } }
    assert.same({ "y@20=30", "x@1=10" }, lengths(fl.over(funcs, 6)))
  end)
end)

describe("the functions of lua/ and engine/", function()
  local funcs, files = fl.scan(H.root, { "lua", "engine" })

  it("are read whole", function()
    assert.is_true(#files > 100, "read only " .. #files .. " files")
    assert.is_true(#funcs > 1500, "found only " .. #funcs .. " functions")
  end)

  it("run at most " .. fl.LIMIT .. " lines, but the few allowed for now", function()
    local bad = {}
    for _, f in ipairs(fl.over(funcs, fl.LIMIT)) do
      if not ALLOWED[fl.id(f)] then bad[#bad + 1] = string.format("%s:%d %s: %d lines", f.file, f.line, f.name, f.lines) end
    end
    assert.equals("", table.concat(bad, "\n"), #bad .. " function(s) over " .. fl.LIMIT .. " lines (split them):\n"
      .. table.concat(bad, "\n"))
  end)

  it("allow only functions still over the limit (a split one leaves the list)", function()
    local long, stale = {}, {}
    for _, f in ipairs(fl.over(funcs, fl.LIMIT)) do long[fl.id(f)] = true end
    for id in pairs(ALLOWED) do if not long[id] then stale[#stale + 1] = id end end
    table.sort(stale)
    assert.equals("", table.concat(stale, "\n"), "no longer over " .. fl.LIMIT .. " lines (or gone): remove from ALLOWED")
  end)
end)
