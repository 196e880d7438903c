-- specula whatif: an agent's own timed logs in, what speculation would have
-- saved and the bounds out (the readers: spec/unit/sessions_spec.lua).
local H = require "support.helpers"
local cjson = require "cjson"

local FIX = H.root .. "/spec/fixtures/sessions"
local REAL = H.root .. "/spec/fixtures/timed_traces"

local function summary_of(args, env)
  local path = H.tmpfile("whatif-summary.json", "")
  local a = { "whatif" }
  for _, x in ipairs(args) do a[#a + 1] = x end
  a[#a + 1] = "--summary"
  a[#a + 1] = path
  local st, out, err = H.specula(a, env)
  local f = io.open(path)
  local text = f and f:read("*a") or ""
  if f then f:close() end
  return st, text ~= "" and cjson.decode(text) or nil, out, err
end

local function by_name(s)
  local t = {}
  for _, c in ipairs(s.configs) do t[c.name] = c end
  return t
end

local function check_rows(s)
  local c = by_name(s)
  -- the replay reproduces the recorded agent time within 2 %
  assert.is_true(math.abs(c.sequential.agent_ms - c.recorded.agent_ms) / c.recorded.agent_ms < 0.02,
    ("sequential %.1f s, recorded %.1f s"):format(c.sequential.agent_ms / 1000, c.recorded.agent_ms / 1000))
  -- the bounds: nothing beats both perfect, no configuration is slower than
  -- the replay by more than its wasted work allows (the speculator's time)
  local best = c["perfect-both"].agent_ms
  for name, r in pairs(c) do
    assert.is_true(r.agent_ms >= best - 1, name .. " below the bound")
    if name ~= "recorded" then assert.are.equal(0, r.early_writes, name .. " ran a write early") end
  end
  assert.are.equal(1, c["perfect-both"].share)
  local pp = c["perfect-predictor"]
  if pp then
    assert.is_true(pp.agent_ms <= c.sequential.agent_ms + 1)
    assert.are.equal(0, pp.wasted)
    assert.are.equal(pp.fired, pp.hit)
  end
  return c
end

describe("specula whatif", function()
  it("answers --help with its options", function()
    local st, out = H.specula({ "whatif", "--help" })
    assert.are.equal(0, st)
    for _, o in ipairs({ "--train", "--policy", "--compare", "--out", "--summary", "--keep-content",
                         "--approval-cap", "--spec-p", "--spec-ms" }) do
      assert.is_not_nil(out:find(o, 1, true), o)
    end
    -- the first paragraph names every format the readers take
    local about = out:match("\n\n(.-)\n\n")
    for _, f in ipairs({ "Claude Code", "Codex", "OpenTelemetry GenAI", "OpenHands", "conversations format" }) do
      assert.is_not_nil(about:gsub("%s+", " "):find(f, 1, true), f)
    end
  end)

  it("refuses an infinite or NaN number for its numeric options (1e999 reads as infinity)", function()
    for _, c in ipairs({ { "--spec-ms", "1e999" }, { "--spec-ms", "nan" }, { "--approval-cap", "1e999" },
                         { "--spec-p", "nan" } }) do
      local st, _, err = H.specula({ "whatif", FIX .. "/codex.jsonl", c[1], c[2] })
      assert.are.equal(2, st, c[1] .. " " .. c[2] .. ": " .. err)
      assert.is_not_nil(err:find(c[1] .. " must be a finite number", 1, true), err)
    end
  end)

  it("needs a log, and names a file no reader reads: line and what each expected; failed apart", function()
    local st, _, err = H.specula({ "whatif" })
    assert.are.equal(2, st)
    assert.is_not_nil(err:find("at least one LOG", 1, true))
    local s, out
    st, s, out = summary_of({ FIX .. "/unknown.jsonl", FIX .. "/codex.jsonl", "--compare", "recorded,sequential" })
    assert.are.equal(0, st)
    assert.are.equal(1, s.sessions)
    assert.are.equal(1, #s.failed)
    assert.is_not_nil(s.failed[1]:find("unknown.jsonl:1: no reader knows this line", 1, true))
    assert.is_not_nil(s.failed[1]:find("codex: a Codex CLI rollout line", 1, true))
    assert.is_not_nil(out:find("1 session (1 log unreadable)", 1, true))
  end)

  -- before, a directory given as a LOG raised out of the line reader
  -- ("sessions.lua:476: Is a directory" and a stack trace, exit 1): every
  -- other log lost with it; as --train the same
  it("a directory given for a log is a failed log naming it, the others replayed; as --train named", function()
    local dir = H.tmpdir()
    local st, s, out, err = summary_of({ dir, FIX .. "/codex.jsonl", "--compare", "recorded,sequential" })
    assert.are.equal(0, st, err)
    assert.are.equal(1, s.sessions)
    assert.are.equal(1, #s.failed)
    assert.are.equal("EIO: cannot read " .. dir .. ": Is a directory", s.failed[1])
    assert.is_not_nil(out:find("1 session (1 log unreadable)", 1, true))
    assert.falsy(err:find("%.lua:%d"), err)
    local st2, _, err2 = H.specula({ "whatif", FIX .. "/codex.jsonl", "--train", dir, "--compare", "predictor" })
    assert.are.equal(1, st2, err2)
    assert.is_not_nil(err2:find("--train: cannot read " .. dir .. ": Is a directory", 1, true), err2)
    assert.falsy(err2:find("%.lua:%d"), err2)
  end)

  -- before, a log saved with a UTF-8 byte order mark (a Windows editor,
  -- PowerShell's Out-File) failed whole: "FILE:1: not JSON (... invalid
  -- token at character 1)"
  it("reads a log that opens with a UTF-8 byte order mark as the same log", function()
    local log = H.tmpfile("whatif-bom.jsonl", "\239\187\191" .. H.read(FIX .. "/claude_code.jsonl"))
    local st, s, _, err = summary_of({ log, "--compare", "recorded,sequential" })
    assert.are.equal(0, st, err)
    assert.are.equal(0, #s.failed, s.failed[1])
    assert.are.equal(1, s.sessions)
    assert.is_true(math.abs(by_name(s).sequential.agent_ms - 15000) < 1, err)
    assert.are.equal("", err)
  end)

  -- before, a line whose time was no ISO 8601 time was dropped without a
  -- word: a log of epoch-millisecond times failed as one that "holds no
  -- session (no prompt, no call)", one such line made a call untimed
  it("a time that is not ISO 8601: FILE:LINE names it and the line is skipped, ISO with offsets read", function()
    local lines = {}
    for l in io.lines(FIX .. "/codex.jsonl") do lines[#lines + 1] = l end
    local epoch = {}
    for i, l in ipairs(lines) do
      local iso = l:match('"timestamp":"([^"]+)"')
      local y, mo, d, h, mi, s = iso:match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):([%d.]+)Z$")
      local ms = (os.time({ year = y, month = mo, day = d, hour = h, min = mi, sec = 0, isdst = false })
        - os.time({ year = 1970, month = 1, day = 1, hour = 0, isdst = false })) * 1000 + tonumber(s) * 1000
      epoch[i] = l:gsub('"timestamp":"[^"]+"', string.format('"timestamp":%d', ms), 1)
    end
    local log = H.tmpfile("whatif-epoch.jsonl", table.concat(epoch, "\n") .. "\n")
    local st, s, out, err = summary_of({ log, "--compare", "recorded,sequential" })
    assert.are.equal(1, st, out)
    assert.is_not_nil(s.failed[1]:find("holds no session", 1, true))
    for _, ln in ipairs({ 1, #lines }) do
      local ms = epoch[ln]:match('"timestamp":(%d+)')
      assert.truthy(err:find(log .. ":" .. ln .. ": the time " .. ms .. " is not an ISO 8601 time", 1, true), err)
    end
    -- the same times with an offset (+02:00) are the same log
    local shifted = {}
    for i, l in ipairs(lines) do
      shifted[i] = l:gsub('"timestamp":"(%d+-%d+-%d+)T(%d+)(:[^"]+)Z"', function(day, hh, rest)
        return string.format('"timestamp":"%sT%02d%s+02:00"', day, tonumber(hh) + 2, rest)
      end, 1)
    end
    log = H.tmpfile("whatif-offset.jsonl", table.concat(shifted, "\n") .. "\n")
    st, s, _, err = summary_of({ log, "--compare", "recorded,sequential" })
    assert.are.equal(0, st, err)
    assert.are.equal("", err)
    assert.is_true(math.abs(by_name(s).sequential.agent_ms - 18910) < 1)
  end)

  -- before, an OTel GenAI span without readable times (or ending before it
  -- starts) was left out without a word: a call fewer, or an untimed one
  it("an OTel span whose times cannot be read: FILE:LINE names it and it is skipped", function()
    local lines = {}
    for l in io.lines(FIX .. "/otel.jsonl") do lines[#lines + 1] = l end
    local n
    lines[1], n = lines[1]:gsub('("name":"execute_tool get_weather","kind":1,"startTimeUnixNano":)"%d+"', '%1"soon"', 1)
    assert.are.equal(1, n)
    local log = H.tmpfile("whatif-otel-times.jsonl", table.concat(lines, "\n") .. "\n")
    local st, s, _, err = summary_of({ log, "--compare", "recorded,sequential" })
    assert.are.equal(0, st, err)
    assert.are.equal(2, s.sessions)
    assert.truthy(err:find(log .. ":1: span 'execute_tool get_weather': startTimeUnixNano and endTimeUnixNano must "
      .. "be nanoseconds since the epoch: skipped", 1, true), err)
    assert.falsy(err:find("%.lua:%d"), err)
  end)

  -- before, a number JSON cannot carry (1e400 decodes to infinity) in a
  -- call's arguments failed the session's replay in every configuration
  -- but recorded (counted there, not in the others) and --out raised with
  -- a stack trace; in a turn_duration it raised too, and a negative one
  -- made the recorded time negative
  it("infinite or negative numbers in a log: FILE:LINE, the line skipped, every row over the same sessions", function()
    local text = H.read(FIX .. "/claude_code.jsonl")
    local args, n1 = text:gsub('"file_path":"/home/dev/proj/src/config.rs"', '"file_path":"/x","n":1e400', 1)
    local dur, n2 = text:gsub('"durationMs":%d+', '"durationMs":1e400', 1)
    local neg, n3 = text:gsub('"durationMs":%d+', '"durationMs":-5000', 1)
    assert.are.same({ 1, 1, 1 }, { n1, n2, n3 })
    local a = H.tmpfile("whatif-inf-args.jsonl", args)
    local d = H.tmpfile("whatif-inf-dur.jsonl", dur)
    local g = H.tmpfile("whatif-neg-dur.jsonl", neg)
    local out = H.tmpfile("whatif-inf.out.jsonl")
    local st, s, _, err = summary_of({ a, d, g, "--out", out })
    assert.are.equal(0, st, err)
    assert.are.equal(3, s.sessions)
    assert.are.equal(0, #s.failed)
    for _, c in ipairs(s.configs) do
      assert.are.equal(3, c.sessions, c.name)
      assert.are.equal(0, c.failed, c.name)
      assert.is_true(c.agent_ms > 0, c.name)
    end
    assert.truthy(err:find(a .. ":4: call 'Read': its arguments hold what JSON cannot carry", 1, true), err)
    assert.truthy(err:find(d .. ":13: turn_duration's durationMs inf is not a number of milliseconds >= 0: skipped",
      1, true), err)
    assert.truthy(err:find(g .. ":13: turn_duration's durationMs -5000 is not", 1, true), err)
    assert.falsy(err:find("%.lua:%d"), err)
    local lines = 0
    for _ in H.read(out):gmatch("[^\n]+") do lines = lines + 1 end
    assert.are.equal(3, lines)
  end)

  -- A replay that fails at its very end (the session's last step raises:
  -- a program that wraps the conversation agent, run by specula run), so
  -- it made its early calls first; prints each run's summary.
  local FAILING = [[
local specula = require "specula"
local whatif = require "specula.lab.whatif"
local json = specula.json
local FAIL = arg[1]
local conv = specula.agents.conversation
specula.agents.conversation = function(o)
  local a = conv(o)
  local step = a.step
  a.step = function(state, ctx)
    local r = step(state, ctx)
    if FAIL and (FAIL == "*" or ctx.id == FAIL) and r and r.final ~= nil then error("planned failure at the end") end
    return r
  end
  return a
end
local logs = {}
for i = 2, #arg do logs[#logs + 1] = arg[i] end
local res = assert(whatif.compute({ logs = logs }, function() end))
print(json.encode({ summary = whatif.summary(res), text = whatif.text(res) }))
]]

  -- before, a session whose replay failed was left out of a row's agent
  -- time but not of the replay's or recorded's it was compared with (the
  -- failure read as a saving), its early calls were still counted, and a
  -- row whose every session failed showed an agent time of 0.0 s
  it("a session whose replay fails is in no figure of its row (time, RelLat, early calls); none left: no time", function()
    local prog = H.tmpfile("whatif-failing.lua", FAILING)
    local good = { FIX .. "/claude_code.jsonl", FIX .. "/codex.jsonl" }
    local par = FIX .. "/claude_code_parallel.jsonl"
    local function run(fail, logs)
      local a = { "run", prog, fail or "-" }
      for _, l in ipairs(logs) do a[#a + 1] = l end
      local st, out, err = H.specula(a)
      assert.are.equal(0, st, err)
      return H.last_json(out)
    end
    local with = run("claude_code_parallel", { good[1], good[2], par })
    local alone = run(nil, good)
    local cw, ca = by_name(with.summary), by_name(alone.summary)
    for name, r in pairs(cw) do
      if name ~= "recorded" then
        assert.are.equal(1, r.failed, name)
        assert.are.equal(2, r.sessions, name)
        -- every figure as over the two sessions alone
        for _, k in ipairs({ "agent_ms", "early_reads", "early_writes", "fired", "hit", "wasted" }) do
          assert.are.equal(ca[name][k], r[k], name .. " " .. k)
        end
        assert.is_not_nil(with.text:find("! " .. name .. ": 1 of 3 sessions failed in its replay", 1, true), name)
      end
    end
    -- the perfect predictor does fire early calls in the failing session: they were counted before
    local par_only = by_name(run(nil, { par }).summary)
    assert.is_true(par_only["perfect-both"].early_reads > 0)
    -- recorded against the replay over the same two sessions: within 2 %
    assert.is_true(math.abs(cw.recorded.rel_lat - 1) < 0.02, tostring(cw.recorded.rel_lat))
    -- every session failed: no agent time, RelLat or share (not 0.0 s)
    local all = run("*", { par })
    for name, r in pairs(by_name(all.summary)) do
      if name ~= "recorded" then
        assert.are.equal(cjson.null, r.agent_ms, name)
        assert.are.equal(cjson.null, r.rel_lat, name)
        assert.are.equal(0, r.early_reads, name)
        assert.is_not_nil(all.text:find("\n" .. name .. string.rep(" ", 20 - #name) .. "          -", 1, true), name)
      end
    end
    -- and the report draws no bar of 0 s for them, and says the replays failed
    local sum = H.tmpfile("whatif-allfail.json", cjson.encode(all.summary))
    local page = H.tmpfile("whatif-allfail.html", "")
    local rst, _, rerr = H.specula({ "report", sum, "-o", page })
    assert.are.equal(0, rst, rerr)
    local html = H.read(page)
    assert.is_not_nil(html:find("replays failed (in no figure of their row): sequential 1 of 1", 1, true))
    local none = 0
    for _ in html:gmatch("no session replayed %(every one failed%)") do none = none + 1 end
    assert.are.equal(#all.summary.configs - 1, none)
    assert.is_nil(html:find('data-agent_ms="0"', 1, true))
  end)

  -- before, a turn_duration longer than its turn's wall time (active time
  -- cannot be) was taken as it was: recorded 1,000,000 s, RelLat 333,333
  it("takes a turn_duration longer than its turn's wall time as the wall time, and says so", function()
    local lines = {}
    for l in io.lines(FIX .. "/claude_code.jsonl") do
      lines[#lines + 1] = (l:gsub('"durationMs":%d+', '"durationMs":1000000000'))
    end
    local log = H.tmpfile("whatif-longturn.jsonl", table.concat(lines, "\n") .. "\n")
    local st, s, _, err = summary_of({ log, "--compare", "recorded,sequential" })
    assert.are.equal(0, st, err)
    assert.truthy(err:find("whatif-longturn.jsonl: 1 turn_duration longer than its turn's own time (the first at line 13: "
      .. "1000000000 ms against ", 1, true), err)
    local c = by_name(s)
    -- the recorded time is the turn's wall time without the person's waits: the replay's, within 2 %
    assert.is_true(c.recorded.agent_ms < 1e6, tostring(c.recorded.agent_ms))
    assert.is_true(math.abs(c.recorded.rel_lat - 1) < 0.05, tostring(c.recorded.rel_lat))
  end)

  -- before, an OTel export given twice in one file (a collector's retry)
  -- counted every span twice: the tools' calls and times doubled
  it("counts a span exported twice in one file once, and says so", function()
    local text = H.read(FIX .. "/otel.jsonl")
    local twice = H.tmpfile("whatif-otel-twice.jsonl", text .. text)
    local st1, s1 = summary_of({ FIX .. "/otel.jsonl", "--compare", "recorded" })
    local st2, s2, _, err = summary_of({ twice, "--compare", "recorded" })
    assert.are.equal(0, st1)
    assert.are.equal(0, st2, err)
    assert.are.same(s1.tools, s2.tools)
    assert.are.same(s1.configs, s2.configs)
    local _, n = err:gsub("is in this file already %(a retried export%?%)", "")
    assert.are.equal(1, n, err)
  end)

  -- before, a line of another agent's log in a file (read by the first
  -- line's reader) and a message without its timestamp were dropped
  -- without a word
  it("says which lines it skips: another log's line, a message without its time", function()
    local cc, codex = {}, nil
    for l in io.lines(FIX .. "/claude_code.jsonl") do cc[#cc + 1] = l end
    for l in io.lines(FIX .. "/codex.jsonl") do codex = codex or l end
    local n = #cc
    local notime = cc[3]:gsub(',?"timestamp":"[^"]*"', "")
    local mixed = H.tmpfile("whatif-mixed.jsonl", table.concat(cc, "\n") .. "\n" .. codex .. "\n")
    local st, _, _, err = summary_of({ mixed, "--compare", "recorded" })
    assert.are.equal(0, st, err)
    assert.truthy(err:find("whatif-mixed.jsonl:" .. (n + 1) .. ": not a Claude Code transcript line", 1, true), err)
    local lines = {}
    for i, l in ipairs(cc) do lines[i] = i == 3 and notime or l end
    local nt = H.tmpfile("whatif-notime.jsonl", table.concat(lines, "\n") .. "\n")
    st, _, _, err = summary_of({ nt, "--compare", "recorded" })
    assert.are.equal(0, st, err)
    assert.truthy(err:find("whatif-notime.jsonl:3: a", 1, true) and err:find("line without its timestamp: skipped", 1, true),
      err)
  end)

  -- before, --train learnt from the first session of each file only
  it("--train learns from every session of a file (a conversations file holds several)", function()
    local probe = H.tmpfile("whatif-train-probe.lua", [[
local pred = require "specula.predict"
local orig = pred.learned
local got
pred.learned = function(...)
  local P = orig(...)
  local train = P.train
  P.train = function(self, convs) got = #convs return train(self, convs) end
  return P
end
local W = require "specula.lab.whatif"
local code = W.main({ logs = { arg[1] }, train = { arg[2], arg[3] }, compare = { "predictor" } })
io.stderr:write("exit ", tostring(code), "\n")
print(require("specula").json.encode({ trained = got }))
]])
    local conv = H.root .. "/spec/fixtures/conversations/openai.jsonl"
    local n = 0
    local st0, s0 = summary_of({ conv, "--compare", "recorded" })
    assert.are.equal(0, st0)
    n = s0.sessions
    assert.is_true(n >= 2, "the fixture holds several conversations")
    local st, out, err = H.specula({ "run", probe, FIX .. "/codex.jsonl", conv, FIX .. "/claude_code.jsonl" })
    assert.are.equal(0, st, err)
    assert.are.equal(n + 1, H.last_json(out).trained)
  end)

  -- before, --summary /dev/stdout (or any device, a pipe) was opened and
  -- read to check it held no log: whatif blocked for ever before any work
  it("writes --summary to /dev/stdout; refuses --out -, and --out and --summary on one file", function()
    local log = FIX .. "/claude_code.jsonl"
    local st, out, err = H.sh("timeout 60 " .. H.quote(H.bin) .. " whatif " .. H.quote(log)
      .. " --compare recorded,sequential --summary /dev/stdout | cat")
    assert.are.equal(0, st, err)
    local summary
    for line in out:gmatch("[^\n]+") do
      if line:sub(1, 1) == "{" then summary = cjson.decode(line) end
    end
    assert.is_not_nil(summary, out)
    assert.are.equal(2, #summary.configs)
    local same = H.tmpfile("whatif-same.json", "")
    for _, c in ipairs({
      { { "--out", same, "--summary", same }, "--out and --summary name the same file" },
      { { "--out", "-" }, "--out -: stdout holds the table" },
      { { "--summary", "-" }, "--summary -: stdout holds the table" } }) do
      local a = { "whatif", log }
      for _, x in ipairs(c[1]) do a[#a + 1] = x end
      local cst, _, cerr = H.specula(a)
      assert.are.equal(2, cst, cerr)
      assert.is_not_nil(cerr:find(c[2], 1, true), cerr)
    end
  end)

  -- before, a policy that changed the arguments it was given changed the
  -- recorded call itself: every replay after it (sequential's too) ran
  -- another call, and nothing failed
  it("a policy sees a copy of the arguments: changing them changes nothing", function()
    local clean = H.tmpfile("whatif-clean.lua", "return { read_only = function(tool, args)\n"
      .. "  return tool == 'Read' or tool == 'Grep' or tool == 'Glob'\nend }\n")
    local mut = H.tmpfile("whatif-mut.lua", "return { read_only = function(tool, args)\n"
      .. "  args.file_path, args.pattern = nil, nil\n  args.poison = 1 / 0\n"
      .. "  return tool == 'Read' or tool == 'Grep' or tool == 'Glob'\nend }\n")
    local logs = { FIX .. "/claude_code.jsonl", FIX .. "/codex.jsonl", FIX .. "/claude_code_parallel.jsonl" }
    local a1 = { logs[1], logs[2], logs[3], "--policy", clean }
    local a2 = { logs[1], logs[2], logs[3], "--policy", mut }
    local st1, s1, out1, err1 = summary_of(a1)
    local st2, s2, out2, err2 = summary_of(a2)
    assert.are.equal(0, st1, err1)
    assert.are.equal(0, st2, err2)
    assert.are.equal(out1, out2)
    s1.provenance, s2.provenance = nil, nil
    assert.are.same(s1.configs, s2.configs)
  end)

  -- before, a log whose times do not add up (here the push's result line
  -- is gone: the person's 58 s approval wait lands in the model's next
  -- turn) gave RelLat 0.21 and a share of 570 for recorded without a word
  it("says when the replay of a session is more than 2 % from the log's own count", function()
    local lines = {}
    for l in io.lines(FIX .. "/claude_code.jsonl") do
      if not l:find('"content":"main -> main"', 1, true) then lines[#lines + 1] = l end
    end
    local log = H.tmpfile("whatif-noresult.jsonl", table.concat(lines, "\n") .. "\n")
    local st, _, _, err = summary_of({ log, "--compare", "recorded,sequential" })
    assert.are.equal(0, st, err)
    assert.truthy(err:find("session whatif-noresult: the replay takes 72.1 s where the log counts 15.1 s (more than 2 % "
      .. "apart: 1 calls without a result, or times out of order?): its rows are suspect", 1, true), err)
    -- a log that adds up says nothing
    st, _, _, err = summary_of({ FIX .. "/claude_code.jsonl", "--compare", "recorded,sequential" })
    assert.are.equal(0, st, err)
    assert.are.equal("", err)
  end)

  -- before, a log named twice (overlapping globs) was read twice: its
  -- session counted as two, weighing double in every row
  it("reads a log named twice once, said", function()
    local log = FIX .. "/codex.jsonl"
    local again = FIX .. "/../sessions/codex.jsonl"
    local st, s, _, err = summary_of({ log, FIX .. "/claude_code.jsonl", again, "--compare", "recorded,sequential" })
    assert.are.equal(0, st, err)
    assert.are.equal(2, s.sessions)
    assert.truthy(err:find(again .. ": given twice (as " .. log .. "): read once", 1, true), err)
  end)

  -- before, `specula whatif --out logs/*.jsonl` (the shell gives --out the
  -- first log) replaced that log with the records, as did an --out or
  -- --summary naming a LOG: the user's only copy of the session, lost
  it("never writes --out or --summary over an agent's log: refused (exit 2), the log unchanged", function()
    local text = H.read(FIX .. "/claude_code.jsonl")
    local a = H.tmpfile("whatif-clash-a.jsonl", text)
    local b = FIX .. "/codex.jsonl"
    local st, out, err = H.specula({ "whatif", "--out", a, b, "--compare", "recorded" })
    assert.are.equal(2, st, out)
    assert.is_not_nil(err:find("--out " .. a .. " holds an agent's log (claude-code): writing it would overwrite "
      .. "that log", 1, true), err)
    assert.are.equal(text, H.read(a))
    st, out, err = H.specula({ "whatif", a, "--summary", a, "--compare", "recorded" })
    assert.are.equal(2, st, out)
    assert.is_not_nil(err:find("--summary " .. a .. " is also a log it reads (" .. a .. ")", 1, true), err)
    assert.are.equal(text, H.read(a))
    -- whatif's own --out of an earlier run is no log: replaced
    local recs = H.tmpfile("whatif-clash-out.jsonl")
    for _ = 1, 2 do
      st, out, err = H.specula({ "whatif", b, "--out", recs, "--compare", "recorded" })
      assert.are.equal(0, st, err)
    end
    local n = 0
    for _ in H.read(recs):gmatch("[^\n]+") do n = n + 1 end
    assert.are.equal(1, n)
  end)

  -- before, such a line's warning was a slip inside the reader, in a specula
  -- source path ("otel.lua:87: bad argument #1 to 'ipairs'")
  it("a line of JSON the file's reader cannot take: FILE:LINE and what it should be, the rest replayed", function()
    for _, c in ipairs({ { "otel", "an OTLP JSON trace export line", 8500 },
                         { "openhands", "an OpenHands event line", 13700 } }) do
      local lines = {}
      for l in io.lines(FIX .. "/" .. c[1] .. ".jsonl") do lines[#lines + 1] = l end
      table.insert(lines, 3, "{}")
      table.insert(lines, 3, "[1, 2]")
      local log = H.tmpfile("whatif-hostile-" .. c[1] .. ".jsonl", table.concat(lines, "\n") .. "\n")
      local st, s, _, err = summary_of({ log, "--compare", "recorded,sequential" })
      assert.are.equal(0, st, err)
      assert.are.equal(0, #s.failed, err)
      assert.is_true(math.abs(by_name(s).sequential.agent_ms - c[3]) < 1, err)
      for _, ln in ipairs({ 3, 4 }) do
        assert.truthy(err:find(log .. ":" .. ln .. ": not " .. c[2], 1, true), err)
      end
      assert.falsy(err:find("%.lua:%d"), err)
    end
  end)

  it("on a Claude Code fixture: recorded, replay, predictor and the bounds", function()
    local st, s, out, err = summary_of({ FIX .. "/claude_code.jsonl" })
    assert.are.equal(0, st, err)
    local c = check_rows(s)
    assert.is_true(math.abs(c.recorded.agent_ms - 15050) < 1)
    assert.is_true(math.abs(c.sequential.agent_ms - 15000) < 1)
    -- a perfect predictor starts both parallel calls, Grep and Read
    -- (read-only), while the model thinks: the turn waits only for the
    -- Grep's decision 0.1 s after the Read's (15 - 0.9 s); the git push waits
    assert.are.equal(2, c["perfect-predictor"].hit)
    assert.is_true(math.abs(c["perfect-predictor"].agent_ms - 14100) < 1)
    for _, name in ipairs({ "recorded", "sequential", "predictor", "spechop", "both", "perfect-predictor",
                            "perfect-speculator", "perfect-both" }) do
      assert.is_not_nil(out:find("\n" .. name .. " ", 1, true), name)
    end
    assert.are.equal("Bash", s.tools[1].tool)   -- the longest, once the approval is out
  end)

  it("keeps a turn's parallel calls parallel: its wait the longest, every call a candidate, no write early", function()
    -- spec/fixtures/sessions/claude_code_parallel.jsonl: the prompt at 0 s;
    -- Read, Grep and Glob decided at 4.0, 4.1 and 4.2 s, answered at 6.1,
    -- 4.6 and 5.2 s; then Read and Edit at 9.1 and 9.2 s, answered at 9.5
    -- and 9.8 s; the answer at 11.8 s (Claude Code counts 11.8 s active)
    local st, s, _, err = summary_of({ FIX .. "/claude_code_parallel.jsonl" })
    assert.are.equal(0, st, err)
    local c = check_rows(s)
    -- the replay takes the longest call of each turn, not the sum (13.6 s)
    assert.are.equal(11800, c.recorded.agent_ms)
    assert.is_true(math.abs(c.sequential.agent_ms - 11800) < 1)
    -- a perfect predictor fires all three calls of the first turn and the
    -- Read of the second at the model's start; the Edit is a write: it
    -- waits for the decision. 4 s + 0.2 s (the Glob is decided last) +
    -- 3 s + 0.7 s (the Edit: decided at 0.1 s, runs 0.6 s) + 2 s
    local pp = c["perfect-predictor"]
    assert.are.equal(4, pp.fired)
    assert.are.equal(4, pp.hit)
    assert.are.equal(0, pp.wasted)
    assert.are.equal(4, pp.early_reads)
    assert.is_true(math.abs(pp.agent_ms - 9900) < 1, pp.agent_ms)
  end)

  it("without the predictor rows keeps digests, not texts: the same figures", function()
    -- the replay compares results (a speculator's guess against the
    -- recorded one): digests do; only the learned predictor reads texts
    local logs = {}
    local p = io.popen("ls " .. REAL .. "/codex/*.jsonl")
    for l in p:lines() do logs[#logs + 1] = l end
    p:close()
    local function rows(compare)
      local a = { "--compare", compare }
      for _, l in ipairs(logs) do a[#a + 1] = l end
      local st, s, _, err = summary_of(a)
      assert.are.equal(0, st, err)
      return by_name(s)
    end
    local small = rows("sequential,spechop,perfect-both")
    local full = rows("sequential,spechop,perfect-both,predictor")
    for _, name in ipairs({ "sequential", "spechop", "perfect-both" }) do
      for _, k in ipairs({ "agent_ms", "fired", "hit", "wasted", "early_reads" }) do
        assert.are.equal(full[name][k], small[name][k], name .. " " .. k)
      end
    end
  end)

  it("on a Codex fixture: the approval wait stays out, untimed calls count", function()
    local st, s, _, err = summary_of({ FIX .. "/codex.jsonl", "--compare", "recorded,sequential,perfect-both" })
    assert.are.equal(0, st, err)
    local c = check_rows(s)
    assert.is_true(math.abs(c.sequential.agent_ms - 18910) < 1)
    local untimed = 0
    for _, t in ipairs(s.tools) do untimed = untimed + t.untimed end
    assert.are.equal(1, untimed)
  end)

  it("on OTel GenAI spans and an OpenHands event stream: replay within 2 %, bounds, no early write", function()
    local st, s, _, err = summary_of({ FIX .. "/otel.jsonl" })
    assert.are.equal(0, st, err)
    assert.are.equal(2, s.sessions)   -- a conversation and a trace
    local c = check_rows(s)
    assert.is_true(math.abs(c.sequential.agent_ms - 8500) < 1)
    st, s, _, err = summary_of({ FIX .. "/openhands.jsonl" })
    assert.are.equal(0, st, err)
    c = check_rows(s)
    assert.is_true(math.abs(c.sequential.agent_ms - 13700) < 1)   -- the 30 s confirmation left out
    -- the editor's view runs early for a perfect predictor; pytest waits
    assert.are.equal(1, c["perfect-predictor"].hit)
  end)

  it("on the conversations format: times assumed from the latency model, said so", function()
    local st, s, out, err = summary_of({ H.root .. "/spec/fixtures/conversations/openai.jsonl" })
    assert.are.equal(0, st, err)
    assert.is_true(s.sessions > 0)
    assert.are.equal(s.sessions, s.assumed)
    assert.is_not_nil(out:find("times assumed, not recorded", 1, true))
    local c = check_rows(s)
    assert.is_true(math.abs(c.sequential.agent_ms - c.recorded.agent_ms) < 1)
    assert.is_not_nil(err:find("openai.jsonl:3: not JSON", 1, true))
  end)

  it("on the real sessions of each format: replay within 2 %, bounds, no early write", function()
    for _, dir in ipairs({ "claude_code", "codex" }) do
      local p = io.popen("ls " .. REAL .. "/" .. dir .. "/*.jsonl")
      local logs = {}
      for l in p:lines() do logs[#logs + 1] = l end
      p:close()
      local st, s, _, err = summary_of(logs)
      assert.are.equal(0, st, err)
      assert.are.equal(#logs, s.sessions)
      check_rows(s)
    end
  end)

  it("--train: the predictor learns the logs first; a file it cannot learn from is named", function()
    local log = REAL .. "/claude_code/SublyFi__privacy-x402__claude-session.jsonl"
    local st, s, _, err = summary_of({ log, "--compare", "predictor" })
    assert.are.equal(0, st, err)
    local cold = by_name(s).predictor.fired
    st, s, _, err = summary_of({ log, "--compare", "predictor", "--train", log })
    assert.are.equal(0, st, err)
    assert.is_true(by_name(s).predictor.fired > cold)
    local bad = H.tmpfile("notes.txt", "hello\n")
    st, s, _, err = summary_of({ log, "--compare", "predictor", "--train", bad })
    assert.are.equal(1, st)
    assert.is_not_nil(err:find("--train: " .. bad, 1, true), err)
  end)

  it("--policy replaces the default; a bad one is named", function()
    local none = H.tmpfile("none.lua", "return { read_only = function() return false end }")
    local st, s = summary_of({ FIX .. "/claude_code.jsonl", "--policy", none, "--compare", "sequential,perfect-predictor" })
    assert.are.equal(0, st)
    local c = by_name(s)
    assert.are.equal(0, c["perfect-predictor"].fired)
    assert.are.equal(c.sequential.agent_ms, c["perfect-predictor"].agent_ms)
    local bad = H.tmpfile("bad.lua", "return 42")
    local st2, _, _, err = summary_of({ FIX .. "/claude_code.jsonl", "--policy", bad })
    assert.are.equal(1, st2)
    assert.is_not_nil(err:find("expected a table with read_only", 1, true))
    -- a file that is not there, or not Lua: named once, with its line for a syntax error
    local missing = H.tmpdir() .. "/no-such-policy.lua"
    local st3, _, _, err3 = summary_of({ FIX .. "/claude_code.jsonl", "--policy", missing })
    assert.are.equal(1, st3)
    assert.is_not_nil(err3:find("--policy: cannot open " .. missing, 1, true), err3)
    assert.is_nil(err3:find("cannot load cannot", 1, true), err3)
    local broken = H.tmpfile("broken.lua", "return {\n  read_only = = 1 }\n")
    local st4, _, _, err4 = summary_of({ FIX .. "/claude_code.jsonl", "--policy", broken })
    assert.are.equal(1, st4)
    assert.is_not_nil(err4:find("--policy: " .. broken .. ":2:", 1, true), err4)
  end)

  -- every configuration builds its own policy gate: the same script
  -- raising the same way is said once, not once a configuration
  it("a policy that raises is said once for the whole comparison, and its calls count as not read-only", function()
    local raising = H.tmpfile("raising.lua",
      "return { read_only = function(tool) if tool == 'Bash' then error('boom') end return true end }")
    local st, s, _, err = summary_of({ FIX .. "/claude_code.jsonl", "--policy", raising })
    assert.are.equal(0, st, err)
    local _, n = err:gsub("warning: policy ", "")
    assert.are.equal(1, n, err)
    assert.matches("for tool 'Bash' raised: [^\n]*raising.lua:1: boom %(counted as forbid%)", err)
    for name, r in pairs(by_name(s)) do
      if name ~= "recorded" then assert.are.equal(0, r.early_writes, name) end
    end
  end)

  it("--out keeps digests and tool names; contents only with --keep-content, scrubbed of secrets", function()
    local secret = "tok_" .. string.rep("Zq7", 8)
    local src = io.open(FIX .. "/claude_code.jsonl"):read("*a")
    local log = H.tmpfile("secret.jsonl", (src:gsub("git push origin main", "git push https://" .. secret .. "@host/x")))
    local out = H.tmpfile("whatif-out.jsonl", "")
    local st, _, err = H.specula({ "whatif", log, "--compare", "sequential", "--out", out },
      { WHATIF_TOKEN = secret })
    assert.are.equal(0, st, err)
    local text = io.open(out):read("*a")
    local r = cjson.decode(text)
    assert.are.equal("Bash", r.calls[3].tool)
    assert.are.equal(64, #r.calls[3].args_sha256)
    assert.is_nil(r.calls[3].args)
    assert.is_nil(text:find("git push", 1, true))
    -- the log named by its bytes' digest, not its path's (a path's digest
    -- identifies nothing a reader has); no directory in the record
    local p = io.popen("sha256sum " .. H.quote(log))
    local want = p:read("*a"):match("^(%x+)")
    p:close()
    assert.are.equal(want, r.source_sha256)
    assert.is_nil(text:find(H.tmpdir(), 1, true))
    -- a conversations file's lines without an id: named FILE:LINE by the file's name only
    local conv = H.root .. "/spec/fixtures/conversations/openai.jsonl"
    st, _, err = H.specula({ "whatif", conv, "--compare", "recorded", "--out", out })
    assert.are.equal(0, st, err)
    text = io.open(out):read("*a")
    assert.is_nil(text:find(H.root, 1, true), text:sub(1, 300))
    assert.is_not_nil(text:find('"id":"openai.jsonl:', 1, true))
    st, _, err = H.specula({ "whatif", log, "--compare", "sequential", "--out", out, "--keep-content",
      "--secret-env", "WHATIF_TOKEN" }, { WHATIF_TOKEN = secret })
    assert.are.equal(0, st, err)
    text = io.open(out):read("*a")
    assert.is_not_nil(text:find("git push", 1, true))
    assert.is_nil(text:find(secret, 1, true))
  end)

  it("report draws where the wait goes: the bars' numbers per configuration, the per-tool rows, failures apart", function()
    local p = io.popen("ls " .. REAL .. "/claude_code/*.jsonl")
    local logs = {}
    for l in p:lines() do logs[#logs + 1] = l end
    p:close()
    local st, s, _, err = summary_of(logs)
    assert.are.equal(0, st, err)
    local spath = H.tmpfile("whatif-report-summary.json", cjson.encode(s))
    local page = H.tmpfile("whatif-report.html", "")
    local rst, _, rerr = H.specula({ "report", spath, "-o", page })
    assert.are.equal(0, rst, rerr)
    local html = io.open(page):read("*a")
    assert.are.equal(8, #s.configs)
    for _, c in ipairs(s.configs) do
      -- model + tools waited is the agent's time; the hidden part is the replay's rest
      assert.is_true(math.abs(c.model_ms + c.tool_ms - c.agent_ms) <= 1, c.name)
      local bar = html:match('<g class="wait%-bar"[^>]-data%-config="' .. c.name:gsub("%-", "%%-") .. '"[^>]*>')
      assert.is_not_nil(bar, c.name)
      for _, k in ipairs({ "agent_ms", "model_ms", "tool_ms", "hidden_ms" }) do
        local attr = "data-" .. k:gsub("_", "-") .. '="' .. string.format("%d", c[k]) .. '"'
        assert.is_not_nil(bar:find(attr, 1, true), c.name .. " " .. attr .. " in " .. bar)
      end
      -- the label adds up as printed (tenths: the tools' part is the rounded
      -- total less the rounded model time)
      local m10, a10 = math.floor(c.model_ms / 100 + 0.5), math.floor(c.agent_ms / 100 + 0.5)
      local label = ("%.1f + %.1f = %.1f s"):format(m10 / 10, (a10 - m10) / 10, a10 / 10)
      assert.is_not_nil(html:find(label, 1, true), c.name .. ": " .. label)
      local x, y, z = label:match("^([%d.]+) %+ ([%d.]+) = ([%d.]+)")
      assert.are.equal(math.floor(tonumber(z) * 10 + 0.5), math.floor(tonumber(x) * 10 + 0.5)
        + math.floor(tonumber(y) * 10 + 0.5))
    end
    local by = by_name(s)
    assert.is_true(by["perfect-both"].hidden_ms > 0)
    assert.are.equal(0, by.sequential.hidden_ms)
    for _, t in ipairs(s.tools) do
      local row = html:match('<tr data%-tool="' .. t.tool .. '">(.-)</tr>')
      assert.is_not_nil(row, t.tool)
      assert.is_not_nil(row:find(('<td class="num">%d</td>'):format(t.calls), 1, true), t.tool)
      assert.is_not_nil(row:find(('<td class="num">%.1f</td>'):format(t.time_ms / 1000), 1, true), t.tool)
    end
    assert.is_not_nil(html:find("0 logs unreadable", 1, true))
    -- a failed session: counted apart, its message shown, not drawn
    local fs
    st, fs = summary_of({ FIX .. "/unknown.jsonl", FIX .. "/codex.jsonl", "--compare", "recorded,sequential" })
    assert.are.equal(0, st)
    local fpath = H.tmpfile("whatif-report-failed.json", cjson.encode(fs))
    rst, _, rerr = H.specula({ "report", fpath, "-o", page })
    assert.are.equal(0, rst, rerr)
    assert.is_not_nil(rerr:find("1 session failed or unreadable", 1, true))
    html = io.open(page):read("*a")
    assert.is_not_nil(html:find("1 session read; <span class=\"flag\">1 log unreadable, counted apart", 1, true))
    assert.is_not_nil(html:find("unknown.jsonl:1: no reader knows this line", 1, true))
    local bars = 0
    for _ in html:gmatch('class="wait%-bar"') do bars = bars + 1 end
    assert.are.equal(2, bars)
    for sessions in html:gmatch('<td class="num">(%d+)</td><td class="num">%d+</td></tr>') do
      assert.are.equal("1", sessions)
    end
    -- mixed with a results file: an error naming both
    local res = H.tmpfile("whatif-report-results.jsonl", '{"id":"q","stats":{"wall_ms":1,"standard_ms":1}}\n')
    rst, _, rerr = H.specula({ "report", fpath, res, "-o", page })
    assert.are_not.equal(0, rst)
    assert.is_not_nil(rerr:find("is a whatif summary but", 1, true))
    -- a summary that is not well formed: named, with what is missing
    local bad = H.tmpfile("whatif-report-bad.json",
      '{"configs":[{"name":"x"}],"tools":[],"sequential_ms":1,"bound_ms":1,"sessions":1}')
    rst, _, rerr = H.specula({ "report", bad, "-o", page })
    assert.are.equal(1, rst)
    assert.is_not_nil(rerr:find("whatif-report-bad.json': a whatif summary, but configs[1] needs a name and agent_ms", 1, true))
  end)
  it("replays a session longer than the run's default hop limit (64) whole, in every row", function()
    -- one prompt, 150 Read calls 3 s apart, each answered 1 s after
    local lines = { cjson.encode({ type = "user", sessionId = "long", uuid = "u0", timestamp = "2026-03-02T10:00:00.000Z",
                                   message = { role = "user", content = "go" } }) }
    local function ts(sec) return os.date("!%Y-%m-%dT%H:%M:%S", 1772445600 + sec) .. ".000Z" end
    for i = 1, 150 do
      lines[#lines + 1] = cjson.encode({ type = "assistant", sessionId = "long", uuid = "a" .. i, timestamp = ts(i * 3),
        message = { id = "m" .. i, role = "assistant", content = { { type = "tool_use", id = "tu" .. i, name = "Read",
          input = { file_path = "/src/f" .. (i % 7) .. ".c" } } } } })
      lines[#lines + 1] = cjson.encode({ type = "user", sessionId = "long", uuid = "r" .. i, timestamp = ts(i * 3 + 1),
        message = { role = "user", content = { { type = "tool_result", tool_use_id = "tu" .. i, content = "r" .. i } } } })
    end
    local log = H.tmpfile("whatif-long.jsonl", table.concat(lines, "\n") .. "\n")
    local st, s, _, err = summary_of({ log, "--compare", "recorded,sequential,spechop,perfect-both" })
    assert.are.equal(0, st, err)
    assert.are.equal(nil, err:find("max_hops", 1, true), err)
    for _, c in ipairs(s.configs) do
      assert.are.equal(0, c.failed, c.name)
      assert.are.equal(1, c.sessions, c.name)
    end
    -- 150 calls of 1 s and 150 model turns of 2 s (the first 3 s after the prompt)
    assert.are.equal(451000, by_name(s).sequential.agent_ms)
  end)
end)
