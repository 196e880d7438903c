-- Resuming a complete --out file keeps a few hundred bytes of each record
-- it skips (its line number, id and query digest; for --compare the
-- numbers of its table), not the file's text nor the decoded records: a
-- sweep of 50,000 records peaked at 1.7 GB re-run onto its complete file.
-- Measured as the peak RSS (/usr/bin/time) of the resume against that of
-- the run that wrote the file.
local H = require "support.helpers"

-- (not under SPECULA_WRAP: a tool such as valgrind has its own memory)
local function have_time()
  if H.wrap and H.wrap ~= "" then return false end
  local f = io.open("/usr/bin/time", "rb")
  if f then f:close() return true end
  return false
end

-- the peak RSS in MB of `specula ARGS`, and its status
local function peak_mb(args)
  local tf = H.tmpfile(nil)
  local q = {}
  for i, a in ipairs(args) do q[i] = H.quote(a) end
  local st = H.sh(string.format("/usr/bin/time -f %%M -o %s %s %s >/dev/null 2>&1", H.quote(tf), H.quote(H.bin),
    table.concat(q, " ")))
  local kb = tonumber((H.read(tf) or ""):match("(%d+)%s*$"))
  assert(kb, "no peak RSS from /usr/bin/time: " .. tostring(H.read(tf)))
  return kb / 1024, st
end

describe("resuming a complete --out file", function()
  local dir
  setup(function()
    dir = H.tmpdir()
    local f = assert(io.open(dir .. "/one_hop.lua", "w"))
    f:write([[
local specula = require "specula"
return specula.sim.multihop { hops = 1, p = 0.68, seg = { "lognormal", 6, 0.3 },
  spec = { "lognormal", 11.4, 0.3 }, target = { "lognormal", 60, 0.3 } }
]])
    f:close()
    f = assert(io.open(dir .. "/twelve_hops.lua", "w"))
    f:write([[
local specula = require "specula"
return specula.sim.multihop { hops = 12, p = 0.68, seg = { "lognormal", 6, 0.3 },
  spec = { "lognormal", 11.4, 0.3 }, target = { "lognormal", 60, 0.3 } }
]])
    f:close()
  end)

  local function input(n)
    local path = dir .. "/q" .. n .. ".jsonl"
    local f = assert(io.open(path, "w"))
    for i = 1, n do f:write(string.format('{"id":"s%d","query":"question %d"}\n', i, i)) end
    f:close()
    return path
  end

  it("holds little more than the run that wrote it (20,000 one-hop records)", function()
    if not have_time() then pending("no /usr/bin/time, or run under SPECULA_WRAP") return end
    local out = dir .. "/one.jsonl"
    local args = { "run", dir .. "/one_hop.lua", "--input", input(20000), "--clock", "virtual", "--out", out,
                   "--quiet" }
    local fresh, st = peak_mb(args)
    assert.equals(0, st)
    local before = H.read(out)
    local resumed, st2 = peak_mb(args)
    assert.equals(0, st2)
    assert.equals(before, H.read(out))
    -- (before: the file's text, each line and each decoded record: +137 MB)
    assert.is_true(resumed - fresh < 50, string.format("fresh run %.0f MB, resume %.0f MB", fresh, resumed))
  end)

  it("--compare keeps of each record what its table needs (4,000 queries x 2 configurations of 12 hops)", function()
    if not have_time() then pending("no /usr/bin/time, or run under SPECULA_WRAP") return end
    local out = dir .. "/cmp.jsonl"
    local args = { "run", dir .. "/twelve_hops.lua", "--input", input(4000), "--clock", "virtual", "--out", out,
                   "--quiet", "--compare", "sequential,spechop:k=2" }
    local fresh, st = peak_mb(args)
    assert.equals(0, st)
    local before = H.read(out)
    local resumed, st2 = peak_mb(args)
    assert.equals(0, st2)
    assert.equals(before, H.read(out))
    -- (before: every decoded record kept for the table: +237 MB)
    assert.is_true(resumed - fresh < 50, string.format("fresh run %.0f MB, resume %.0f MB", fresh, resumed))
  end)
end)
