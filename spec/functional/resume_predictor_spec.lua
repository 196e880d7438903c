-- A resumed run whose predictor learns across queries predicts the rest as
-- the uninterrupted run would (docs/experiments.md#batches-resuming-and-repair):
-- the run keeps the predictor's state beside --out (FILE.predictor), a
-- resume restores it when it covers exactly the records in the file, and
-- says plainly when it cannot.
local H = require "support.helpers"
local cjson = require "cjson"

local counter = 0
local function tmp(name)
  counter = counter + 1
  return H.tmpdir() .. "/rp" .. counter .. "-" .. name
end

local function input(n)
  local lines = {}
  for i = 1, n do lines[i] = cjson.encode({ id = "q" .. i, query = "speculative topic " .. i }) end
  local p = tmp("in.jsonl")
  local f = assert(io.open(p, "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
  return p
end

-- examples/paste_research.lua (a pattern predictor that learns after each
-- query), made slow in real time only: each query's init sleeps 80 ms,
-- which the virtual clock never sees, so a signal can land mid-run.
local function agent()
  local p = tmp("slow_paste.lua")
  local f = assert(io.open(p, "w"))
  f:write(string.format([[
local a = dofile(%q)
local init = a.init
a.init = function(q) os.execute("sleep 0.08") return init(q) end
return a
]], H.root .. "/examples/paste_research.lua"))
  f:close()
  return p
end

local function cmd(script, inp, out)
  return H.quote(H.bin) .. " run " .. H.quote(script) .. " --input " .. H.quote(inp) .. " --clock virtual --out "
    .. H.quote(out)
end

-- Run to completion; returns stderr.
local function full(script, inp, out)
  local st, _, err = H.sh(cmd(script, inp, out) .. " --quiet")
  assert.equals(0, st, err)
  return err
end

-- Run and send SIGTERM once `lines` records are written; returns the
-- status the run exited with.
local function stopped(script, inp, out, lines, extra)
  local errf = out .. ".stderr"
  local _, so = H.sh(cmd(script, inp, out) .. (extra or "") .. " --quiet >/dev/null 2>" .. H.quote(errf) .. " & pid=$!; while [ \"$(cat "
    .. H.quote(out) .. " 2>/dev/null | wc -l)\" -lt " .. lines .. " ]; do sleep 0.02; done; kill -TERM $pid; "
    .. "wait $pid; echo $?")
  local se = H.read(errf) or ""
  os.remove(errf)
  return tonumber(so:match("%d+")), se
end

local function lines_of(path)
  local n = 0
  for _ in (H.read(path) or ""):gmatch("[^\n]+") do n = n + 1 end
  return n
end

-- #timing: a signal sent once N records are on disk (kept out of the
-- valgrind pass, like every spec that races a clock)
describe("resuming a run whose predictor learns across queries #timing", function()
  local script, inp, whole
  setup(function()
    script, inp = agent(), input(14)
    whole = tmp("whole.jsonl")
    full(script, inp, whole)
  end)

  it("restores the predictor's state: the resumed file equals the uninterrupted run's byte for byte", function()
    local out = tmp("resumed.jsonl")
    local st, err = stopped(script, inp, out, 4)
    assert.equals(143, st, err)
    local written = lines_of(out)
    assert.is_true(written >= 4 and written < 14, "records before the signal: " .. written)
    assert.is_truthy(H.read(out .. ".predictor"), "no predictor state beside --out")
    local st2, _, err2 = H.sh(cmd(script, inp, out))
    assert.equals(0, st2, err2)
    assert.matches("the predictor's state after the " .. written .. " queries it learnt from restored from "
      .. out .. ".predictor", err2, 1, true)
    assert.not_matches("warning", err2, 1, true)
    -- (the resuming run's first record carries the whole provenance again:
    -- compared as readers read it, each record with its whole provenance)
    assert.same(H.whole_lines(H.read(whole)), (H.whole_lines(H.read(out))))
  end)

  it("without its state (a kill -9 writes none) it warns, and the rest is predicted from the start", function()
    local out = tmp("cold.jsonl")
    local st, err = stopped(script, inp, out, 4)
    assert.equals(143, st, err)
    os.remove(out .. ".predictor")
    local st2, _, err2 = H.sh(cmd(script, inp, out))
    assert.equals(0, st2, err2)
    assert.matches("specula: warning: resuming: the agent's predictor learns across queries and its state after "
      .. "the records already written cannot be restored (" .. out .. ".predictor is missing", err2, 1, true)
    assert.matches("may differ from an uninterrupted run", err2, 1, true)
    -- what the warning is about: the answers are the same, the times not
    local a, b = {}, {}
    for line in H.read(whole):gmatch("[^\n]+") do local r = cjson.decode(line) a[r.id] = r end
    local differ = 0
    for line in H.read(out):gmatch("[^\n]+") do
      local r = cjson.decode(line)
      assert.equals(a[r.id].answer, r.answer)
      if cjson.encode(r.stats) ~= cjson.encode(a[r.id].stats) then differ = differ + 1 end
      b[r.id] = true
    end
    assert.is_true(differ > 0, "a cold predictor changed nothing: this spec no longer shows the need")
  end)

  it("--compare: each configuration's state is kept; a run stopped in the second resumes byte for byte", function()
    local list = " --compare spechop:k=1,spechop:k=2"
    local wholec = tmp("wholec.jsonl")
    local st, _, err = H.sh(cmd(script, inp, wholec) .. list .. " --quiet")
    assert.equals(0, st, err)
    local out = tmp("cmp.jsonl")
    -- 14 records of the first configuration, then some of the second
    local st1, err1 = stopped(script, inp, out, 17, list)
    assert.equals(143, st1, err1)
    local n = lines_of(out)
    assert.is_true(n >= 17 and n < 28, "records before the signal: " .. n)
    local st2, _, err2 = H.sh(cmd(script, inp, out) .. list)
    assert.equals(0, st2, err2)
    assert.matches("the predictor's state after the " .. (n - 14) .. " queries it learnt from (configuration "
      .. "'spechop:k=2') restored", err2, 1, true)
    assert.not_matches("warning", err2, 1, true)
    -- the table of the resumed run is printed after the records: compare the
    -- records (each with its whole provenance, as readers read them)
    assert.same(H.whole_lines(H.read(wholec)), (H.whole_lines(H.read(out))))
  end)

  it("a state written by another run or for other records is refused with a warning, not used", function()
    local out = tmp("other.jsonl")
    local st, err = stopped(script, inp, out, 4)
    assert.equals(143, st, err)
    local written = lines_of(out)
    -- the state of the whole run covers 14 queries, not the records here
    local f = assert(io.open(out .. ".predictor", "w"))
    f:write(H.read(whole .. ".predictor"))
    f:close()
    local st2, _, err2 = H.sh(cmd(script, inp, out))
    assert.equals(0, st2, err2)
    assert.matches(out .. ".predictor covers 14 learnt queries, the file holds " .. written .. " others", err2, 1, true)
    -- another configuration's state (--k differs): another run
    local out2 = tmp("otherk.jsonl")
    st, err = stopped(script, inp, out2, 4)
    assert.equals(143, st, err)
    local other = tmp("k2.jsonl")
    local st3, _, err3 = H.sh(cmd(script, inp, other) .. " --k 2 --quiet")
    assert.equals(0, st3, err3)
    f = assert(io.open(out2 .. ".predictor", "w"))
    f:write(H.read(other .. ".predictor"))
    f:close()
    local st4, _, err4 = H.sh(cmd(script, inp, out2))
    assert.equals(0, st4, err4)
    assert.matches(out2 .. ".predictor was written by another run", err4, 1, true)
  end)
end)
