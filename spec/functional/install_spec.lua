-- `cmake --install` gives a binary that finds its Lua modules and policies.
local H = require "support.helpers"

describe("installation", function()
  it("an installed specula finds lua/ and policies/ next to itself", function()
    local build = H.bin:match("^(.*)/[^/]+$")
    if not io.open(build .. "/CMakeCache.txt") then
      pending("SPECULA_BIN is not in a CMake build directory")
      return
    end
    local prefix = H.tmpdir() .. "/prefix"
    local st, out, err = H.sh("cmake --install " .. H.quote(build) .. " --prefix " .. H.quote(prefix))
    assert.equals(0, st, err)
    local script = H.tmpfile("where.lua", [[
      local host = require("specula.internal.core").host
      print(host.root)
      print(require("specula.policy").resolve("read_only"))
    ]])
    st, out, err = H.sh("cd / && env -u SPECULA_HOME " .. H.quote(prefix .. "/bin/specula") .. " run " .. H.quote(script))
    assert.equals(0, st, err)
    assert.matches(prefix .. "/bin/../share/specula\n", out, 1, true)
    assert.matches(prefix .. "/bin/../share/specula/policies/read_only.lua", out, 1, true)
    -- modules in subdirectories are installed too (specula/report/*.lua)
    assert.is_not_nil(io.open(prefix .. "/share/specula/lua/specula/report/timeline.lua"))
    local results = H.tmpfile("installed_results.jsonl", '{"id":"q1","stats":{"wall_ms":3,"standard_ms":4,"k":2,'
      .. '"k_config":2,"m":1,"mode":"spechop","spec_launch":"eager"},"stages":{"final_seg":1,"hops":[{"t_seg":1,'
      .. '"t_target":2,"t_spec":0.5,"spec":"accepted","rank":0}]}}\n')
    local page = H.tmpdir() .. "/installed_report.html"
    st, out, err = H.sh("cd / && env -u SPECULA_HOME " .. H.quote(prefix .. "/bin/specula") .. " report "
      .. H.quote(results) .. " -o " .. H.quote(page))
    assert.equals(0, st, err)
    assert.matches("replayed wall 3.00 ms", H.read(page), 1, true)
  end)
end)
