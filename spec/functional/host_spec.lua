-- Where the binary finds its Lua tree (engine/sp_host.c, find_root).
local H = require "support.helpers"

describe("specula's Lua tree", function()
  it("refuses a SPECULA_HOME too long for a path instead of using it cut off", function()
    -- 5,000 bytes: longer than PATH_MAX, so the root buffer cannot hold it
    local home = ("/x"):rep(2500)
    local st, _, err = H.specula({ "run", H.tmpfile("home.lua", "print(1)\n") }, { SPECULA_HOME = home })
    assert.equals(1, st, err)
    assert.matches("cannot find specula's Lua modules", err, 1, true)
  end)

  it("uses SPECULA_HOME when it names a Lua tree", function()
    local st, out, err = H.specula({ "run", H.tmpfile("home2.lua", "print(require('specula.internal.core').host.root)\n") },
      { SPECULA_HOME = H.root })
    assert.equals(0, st, err)
    assert.equals(H.root .. "\n", out)
  end)

  -- before, any SPECULA_HOME was taken as it was, and a wrong one ended in
  -- "specula.boot:15: module 'specula.internal.sched' not found". (Last,
  -- and one process: valgrind_set_spec runs this file's first two cases.)
  it("refuses a SPECULA_HOME that does not hold the Lua tree, naming it", function()
    local home = H.tmpdir()   -- a directory, but not specula's
    local st, _, err = H.specula({ "run", H.tmpfile("home3.lua", "print(1)\n") }, { SPECULA_HOME = home })
    assert.equals(1, st, err)
    assert.matches("cannot find specula's Lua modules: SPECULA_HOME is '" .. home .. "', which does not hold "
      .. "lua/specula/internal/sched.lua", err, 1, true)
    assert.not_matches("module 'specula", err)
  end)
end)
