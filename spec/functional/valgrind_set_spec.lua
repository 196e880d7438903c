-- The valgrind pass runs the cases spec/valgrind-set.txt lists (chosen by
-- .ci/vgset from a coverage run): every listed case exists (a renamed case
-- would silently leave its lines unchecked), spec/run.lua runs exactly the
-- listed cases of a file, and the coverage helper keeps each case's
-- processes, name and time apart.
local H = require "support.helpers"

local SET = H.root .. "/spec/valgrind-set.txt"

-- luajit spec/run.lua ARGS in the source tree, with ENV and none of the
-- settings of a valgrind or coverage run this spec may itself run in
local function busted(args, env)
  local parts = { "cd", H.quote(H.root), "&&", "env", "-u", "SPECULA_COVERAGE_DIR", "-u", "SPECULA_CASES",
                  "-u", "SPECULA_WRAP", "-u", "SPECULA_CASE_DIR", "-u", "GCOV_PREFIX" }
  for k, v in pairs(env or {}) do parts[#parts + 1] = k .. "=" .. H.quote(v) end
  parts[#parts + 1] = "luajit spec/run.lua"
  for _, a in ipairs(args) do parts[#parts + 1] = H.quote(a) end
  return H.sh(table.concat(parts, " "))
end

describe("the valgrind set", function()
  it("lists only cases that exist, each once, in files the valgrind pass can run", function()
    local want, seen, n = {}, {}, 0
    for line in io.lines(SET) do
      if not line:match("^#") and line ~= "" then
        local file, case = line:match("^([%w_]+)\t(.+)$")
        assert.is_truthy(file, "a line is not FILE<TAB>case: " .. line)
        assert.is_nil(seen[line], "listed twice: " .. line)
        seen[line] = true
        want[file] = want[file] or {}
        want[file][case] = true
        n = n + 1
      end
    end
    assert.is_true(n > 0, "the set is empty")
    for file, cases in pairs(want) do
      local st, out, err = busted({ "--list", "--exclude-tags=timing,slow", "spec/functional/" .. file .. "_spec.lua" })
      assert.are.equal(0, st, err)
      local have = {}
      for name in out:gmatch("[^\n]*:%d+: ([^\n]+)") do have[name] = true end
      for case in pairs(cases) do
        assert.is_true(have[case] == true,
          string.format("spec/valgrind-set.txt lists a case %s_spec.lua does not have (renamed? run .ci/vgset): %s",
            file, case))
      end
    end
  end)

  it("runs only the listed cases of a file, and a file it does not name whole", function()
    local list = H.tmpfile("cases.txt",
      "host\tspecula's Lua tree uses SPECULA_HOME when it names a Lua tree\n")
    local env = { SPECULA_CASES = list, SPECULA_BIN = H.bin, SPECULA_SOURCE_DIR = H.root }
    local st, out, err = busted({ "-o", "utfTerminal", "spec/functional/host_spec.lua" }, env)
    assert.are.equal(0, st, out .. err)
    assert.matches("\n1 success / 0 failures / 0 errors", out, 1, true)
    st, out, err = busted({ "-o", "utfTerminal", "spec/functional/sched_spec.lua" }, env)
    assert.are.equal(0, st, out .. err)
    assert.is_nil(out:find("\n1 success ", 1, true), out)
  end)

  it("a case name with pattern characters selects that case only", function()
    -- "'" and "." are plain text here, "%" would be a pattern escape
    local list = H.tmpfile("cases2.txt",
      "host\tspecula's Lua tree refuses a SPECULA_HOME too long for a path instead of using it cut off\n")
    local st, out, err = busted({ "-o", "utfTerminal", "spec/functional/host_spec.lua" },
      { SPECULA_CASES = list, SPECULA_BIN = H.bin, SPECULA_SOURCE_DIR = H.root })
    assert.are.equal(0, st, out .. err)
    assert.matches("\n1 success / 0 failures / 0 errors", out, 1, true)
  end)

  it("coverage run: each case's name, time and specula processes apart", function()
    local dir = H.tmpdir() .. "/cov"
    local st, out, err = busted({ "-o", "utfTerminal", "spec/functional/host_spec.lua" },
      { SPECULA_COVERAGE_DIR = dir, SPECULA_BIN = H.bin, SPECULA_SOURCE_DIR = H.root })
    assert.are.equal(0, st, out .. err)
    local names = {}
    for i = 1, 2 do
      local d = string.format("%s/%03d/", dir, i)
      names[#names + 1] = H.read(d .. "name")
      assert.is_truthy(tonumber(H.read(d .. "ms") or ""), "no time in " .. d)
      -- one specula process per case, started through SPECULA_WRAP
      assert.are.equal("1\n", H.read(d .. "starts"))
    end
    table.sort(names)
    assert.are.same({ "specula's Lua tree refuses a SPECULA_HOME too long for a path instead of using it cut off",
                      "specula's Lua tree uses SPECULA_HOME when it names a Lua tree" }, names)
  end)
end)
