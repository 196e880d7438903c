-- Unit tests for specula.convtraces.sessions: the readers of Claude Code
-- transcripts and Codex CLI rollouts, on hand-written fixtures whose times
-- are worked out below, and on the real sessions in spec/fixtures/timed_traces.
local sessions = require("specula.convtraces.sessions")

local ROOT = (os.getenv("SPECULA_SOURCE_DIR") or ".") .. "/spec/fixtures/"

local function near(a, b, eps) return math.abs(a - b) <= (eps or 0.5) end

-- The agent's time a sequential replay takes: each turn's model time and
-- its calls' times, back to back (what agents.conversation sleeps).
local function replay_ms(s)
  local ms = 0
  for _, m in ipairs(s.msgs) do
    local t = m.specula_times
    if t then
      ms = ms + t.model_ms
      for _, x in ipairs(t.tool_ms) do ms = ms + x end
    end
  end
  return ms
end

describe("convtraces.sessions", function()
  it("keeps a result that is a list of objects as canonical JSON: the same text, and digest, in every process", function()
    -- (json.encode follows a table's hash order, which differs between
    -- processes: a Claude Code tool_reference list came out in either order)
    local json = require "specula.json"
    local s = assert(sessions.read(ROOT .. "timed_traces/claude_code/SublyFi__privacy-x402__claude-session.jsonl"))
    local n = 0
    for _, m in ipairs(s.msgs) do
      if m.role == "tool" and type(m.content) == "string" and m.content:match("^%[{") then
        n = n + 1
        assert.equals(json.canonical(json.decode(m.content)), m.content)
      end
    end
    assert.is_true(n >= 1, "no result of that shape in the fixture")
  end)

  it("reads ISO times to the millisecond, with offsets", function()
    assert.equals(0, sessions.iso_ms("1970-01-01T00:00:00Z"))
    assert.equals(1772445600123, sessions.iso_ms("2026-03-02T10:00:00.123Z"))
    assert.equals(sessions.iso_ms("2026-03-02T10:00:00Z"), sessions.iso_ms("2026-03-02T12:00:00+02:00"))
    assert.is_nil(sessions.iso_ms("yesterday"))
  end)

  describe("a Claude Code transcript", function()
    local s = assert(sessions.read(ROOT .. "sessions/claude_code.jsonl"))
    it("is told by its content and keeps the session's id", function()
      assert.equals("claude-code", s.format)
      assert.equals(2, s.prompts)
    end)
    it("keeps parallel calls of one reply in one turn, sidechain lines out", function()
      -- Read and Grep share msg_1; the sidechain Glob is the subagent's
      assert.equals(3, #s.calls)
      local first = s.msgs[2]
      assert.equals("assistant", first.role)
      assert.equals(2, #first.tool_calls)
      -- in the order of their results: Grep (3.6 s) before Read (4.0 s)
      assert.equals("Grep", first.tool_calls[1]["function"].name)
      assert.equals(3000, first.specula_times.model_ms)     -- prompt 0 s -> first call 3 s
      assert.same({ 600, 400 }, first.specula_times.tool_ms) -- from the decision at 3.0 s to 3.6, then 4.0
    end)
    it("takes the person's approval wait out of a call by the turn's active time", function()
      -- wall of prompt 1: 69.05 s; Claude Code counts 11.05 s active: the
      -- 57.999 s left go to the longest call (git push, 60 s recorded)
      local push = s.calls[3]
      assert.equals("Bash", push.tool)
      assert.equals(60000, push.recorded_ms)
      assert.is_true(near(push.wait_ms, 58000))
      assert.is_true(near(push.tool_ms, 2000))
      assert.is_true(near(s.approval_ms, 58000))
    end)
    it("leaves the person's own time out and the replay matches the recorded time", function()
      assert.equals(231000, s.user_ms)                 -- 10:01:09 -> 10:05:00
      -- recorded: 11.05 s active + the second prompt's 4 s
      assert.is_true(near(s.recorded_ms, 15050))
      -- replay: 3 + 1 (parallel) + 3 + 2 + 2 + 4 s
      assert.is_true(near(replay_ms(s), 15000))
      assert.is_true(math.abs(replay_ms(s) - s.recorded_ms) / s.recorded_ms < 0.02)
    end)
  end)

  describe("a Claude Code turn of three parallel calls", function()
    local s = assert(sessions.read(ROOT .. "sessions/claude_code_parallel.jsonl"))
    it("keeps each call's own time and when it was decided; the tool phase is the longest", function()
      local t = s.msgs[2].specula_times
      assert.equals(4000, t.model_ms)
      -- in the order of their results: Grep (4.1 -> 4.6), Glob (4.2 -> 5.2), Read (4.0 -> 6.1)
      assert.same({ 500, 1000, 2100 }, t.call_ms)
      assert.same({ 100, 200, 0 }, t.offset_ms)
      assert.same({ 600, 600, 900 }, t.tool_ms)   -- back to back from the decision: the same 2.1 s
      -- 4 + 2.1 + 3 + 0.7 + 2 s: the longest of each turn, not the sum (13.6 s)
      assert.equals(11800, replay_ms(s))
      assert.equals(11800, s.recorded_ms)
    end)
  end)

  describe("a Codex CLI rollout", function()
    local s = assert(sessions.read(ROOT .. "sessions/codex.jsonl"))
    it("is told by its content; the prompt is the user_message event", function()
      assert.equals("codex", s.format)
      assert.equals("fx-codex-0001", s.id)
      assert.equals(1, s.prompts)
      assert.equals("List the files and fix the test.", s.msgs[1].content)
    end)
    it("times parallel calls and takes the approval wait out by the command's own duration", function()
      assert.equals(4, #s.calls)
      local c2 = s.calls[2]
      assert.equals(10390, c2.recorded_ms)   -- 04.520 -> 14.910
      assert.equals(10090, c2.wait_ms)       -- beyond the 0.3 s it ran
      assert.equals(300, c2.tool_ms)
      assert.equals(0, s.calls[1].wait_ms)   -- 0.21 s recorded, 0.2 s run: no wait
      local t1 = s.msgs[2].specula_times
      assert.equals(3500, t1.model_ms)        -- 01.000 -> 04.500
      assert.same({ 210, 110 }, t1.tool_ms)   -- c1 ends 04.710, c2 at 04.820 without its wait
      -- run in parallel: each its own time from its own decision
      assert.same({ 210, 300 }, t1.call_ms)
      assert.same({ 0, 20 }, t1.offset_ms)    -- c2 decided at 04.520
    end)
    it("counts a call without a result as untimed, taking no time", function()
      assert.equals(1, s.untimed)
      assert.is_true(s.calls[4].untimed)
      assert.equals(0, s.calls[4].tool_ms)
    end)
    it("replays to the recorded agent time", function()
      -- 3.5 + 0.32 + 5.09 + 0.5 + 4.5 + 0 + 5.0 s
      assert.equals(18910, replay_ms(s))
      assert.equals(18910, s.recorded_ms)  -- 29 s wall less the 10.09 s wait
    end)
  end)

  describe("OpenTelemetry GenAI spans (OTLP JSON)", function()
    local list = assert(sessions.read_all(ROOT .. "sessions/otel.jsonl"))
    it("one session a conversation id, else a trace; spans put in time order", function()
      assert.equals(2, #list)
      assert.equals("conv-otel-1", list[1].id)
      assert.equals("otel", list[1].format)
      assert.equals("Weather in Paris and Lyon?", list[1].msgs[1].content)
      assert.equals("6c9f00089914921ae37ac744924ad71d", list[2].id)
    end)
    it("times the model turns by chat spans and the calls by execute_tool spans, parallel kept", function()
      local s = list[1]
      assert.equals(2, #s.calls)
      local t = s.msgs[2].specula_times
      assert.is_true(near(t.model_ms, 2050, 0.01))       -- agent start 0 -> first call 2.05 s
      assert.is_true(near(t.tool_ms[1], 500, 0.01))      -- Paris: 2.05 -> 2.55
      assert.is_true(near(t.tool_ms[2], 510, 0.01))      -- Lyon ends 3.06
      assert.is_true(near(s.msgs[5].specula_times.model_ms, 2940, 0.01))   -- 3.06 -> the answer at 6.0
      assert.is_true(near(replay_ms(s), 6000, 0.01))
      assert.is_true(near(s.recorded_ms, 6000, 0.01))
      assert.same({ city = "Lyon" }, s.calls[2].args)
    end)
    it("without an agent span, the first model call starts the agent's time", function()
      local s = list[2]
      assert.is_true(near(replay_ms(s), 2500, 0.01))   -- 1 s model, 0.5 s search, 1 s answer
      assert.is_true(near(s.recorded_ms, 2500, 0.01))
    end)
  end)

  describe("an OpenHands event stream", function()
    local s = assert(sessions.read(ROOT .. "sessions/openhands.jsonl"))
    it("reads the person's message, the agent's actions by function name, results by cause", function()
      assert.equals("openhands", s.format)
      assert.equals(1, s.prompts)
      assert.equals(2, #s.calls)
      assert.equals("execute_bash", s.calls[1].tool)
      assert.equals("str_replace_editor", s.calls[2].tool)
    end)
    it("takes the confirmation wait out of the call by the agent_state_changed events", function()
      assert.equals(32500, s.calls[1].recorded_ms)   -- 4.0 -> 36.5
      assert.equals(30000, s.calls[1].wait_ms)       -- awaiting 4.0 -> confirmed 34.0
      assert.equals(2500, s.calls[1].tool_ms)
      -- 3 (model) + 2.5 + 3 + 0.2 + 5 (to finish)
      assert.is_true(near(replay_ms(s), 13700, 0.01))
      assert.is_true(near(s.recorded_ms, 13700, 0.01))
      assert.is_true(near(s.approval_ms, 30000, 0.01))
    end)
  end)

  it("assumes the calls of one turn of the conversations format parallel: one call's time", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write('{"id":"c1","messages":[{"role":"user","content":"weather in Paris and Lyon?"},'
      .. '{"role":"assistant","content":"","tool_calls":['
      .. '{"id":"a","type":"function","function":{"name":"weather","arguments":"{\\"city\\":\\"Paris\\"}"}},'
      .. '{"id":"b","type":"function","function":{"name":"weather","arguments":"{\\"city\\":\\"Lyon\\"}"}}]},'
      .. '{"role":"tool","tool_call_id":"a","content":"sun"},{"role":"tool","tool_call_id":"b","content":"rain"},'
      .. '{"role":"assistant","content":"Sun in Paris, rain in Lyon."}]}\n')
    f:close()
    local s = assert(sessions.read(path))
    os.remove(path)
    assert.equals(2, #s.calls)
    assert.equals(300, s.tool_ms)
    assert.equals(s.model_ms + 300, s.recorded_ms)
    local t = s.msgs[2].specula_times
    assert.same({ 300, 300 }, t.call_ms)
    assert.same({ 300, 0 }, t.tool_ms)
    assert.equals(s.recorded_ms, replay_ms(s))
  end)

  it("with keep_text = false keeps digests as columns, not texts: the same times and calls, results told apart", function()
    local json = require "specula.json"
    for _, name in ipairs({ "claude_code.jsonl", "codex.jsonl", "otel.jsonl", "openhands.jsonl" }) do
      local full = assert(sessions.read_all(ROOT .. "sessions/" .. name))
      local small = assert(sessions.read_all(ROOT .. "sessions/" .. name, { keep_text = false }))
      assert.equals(#full, #small, name)
      for i, s in ipairs(small) do
        local f = full[i]
        local T = s.msgs
        assert.is_true(T.columns, name)
        assert.is_nil(s.calls, name)
        assert.equals(f.recorded_ms, s.recorded_ms, name)
        -- the replay's time from the columns: each turn's model time, its calls' shares
        local ms = 0
        for ti = 1, T.n do
          ms = ms + T.model[ti]
          for j = T.first[ti], T.first[ti] + T.ncalls[ti] - 1 do ms = ms + T.tms[j] end
        end
        assert.equals(replay_ms(f), ms, name)
        -- the calls, one by one, as the texts' reading has them
        assert.equals(#f.calls, sessions.n_calls(s), name)
        for j, c in sessions.each_call(s) do
          local fc = f.calls[j]
          assert.equals(fc.tool, c.tool, name)
          assert.equals(json.canonical(fc.args), c.args_json, name)
          assert.equals(fc.recorded_ms, c.recorded_ms, name)
          assert.equals(fc.wait_ms, c.wait_ms, name)
          assert.equals(fc.tool_ms, c.tool_ms, name)
          assert.equals(fc.untimed, c.untimed, name)
        end
        -- the turns and results in order: digests, never the texts; equal
        -- texts, equal digests
        local texts, results = {}, {}
        for _, m in ipairs(f.msgs) do
          if m.role == "assistant" then texts[#texts + 1] = m.content end
          if m.role == "tool" then results[#results + 1] = m.content end
        end
        assert.equals(#texts, T.n, name)
        assert.equals(#results, T.nc, name)
        local digest_of = {}
        local function check(text, d)
          if text == "" then return end
          assert.matches("^sha256:%x+$", d, name)
          assert.equals(7 + sessions.DIGEST_HEX, #d)
          if digest_of[text] then assert.equals(digest_of[text], d) end
          for other, x in pairs(digest_of) do
            if other ~= text then assert.are_not.equal(x, d) end
          end
          digest_of[text] = d
        end
        for j, text in ipairs(results) do check(text, T.obs[j]) end
        for ti, text in ipairs(texts) do
          if not text:find("\n", 1, true) then check(text, T.text[ti]) end
        end
      end
    end
  end)

  it("gives a late result to its own call of a closed prompt, not to a call of the next", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    local function line(t, typ, msg)
      f:write(string.format('{"type":"%s","sessionId":"s","uuid":"u%s","timestamp":"2026-03-02T10:00:%02dZ","message":%s}\n',
        typ, t, t, msg))
    end
    line(0, "user", '{"role":"user","content":"first"}')
    line(1, "assistant", '{"id":"m1","role":"assistant","content":[{"type":"tool_use","id":"old","name":"Bash","input":{}}]}')
    line(5, "user", '{"role":"user","content":"second"}')   -- the person moved on
    line(6, "assistant", '{"id":"m2","role":"assistant","content":[{"type":"tool_use","id":"new","name":"Read","input":{}}]}')
    line(8, "user", '{"role":"user","content":[{"type":"tool_result","tool_use_id":"old","content":"late"}]}')
    line(9, "user", '{"role":"user","content":[{"type":"tool_result","tool_use_id":"new","content":"mine"}]}')
    f:close()
    local s = assert(sessions.read(path))
    os.remove(path)
    assert.equals(2, #s.calls)
    assert.is_true(s.calls[1].untimed)         -- the old call's result came after its prompt
    assert.equals(3000, s.calls[2].tool_ms)    -- 10:00:06 -> its own result at 10:00:09
  end)

  -- results pair with their calls by id, never with another call; what
  -- cannot pair is said once a session (count, first line, id)
  describe("a result that does not pair by its id", function()
    local function session(lines)
      local path = os.tmpname()
      local f = assert(io.open(path, "w"))
      for _, l in ipairs(lines) do
        local t, typ, msg = l[1], l[2], l[3]
        f:write(string.format('{"type":"%s","sessionId":"s","uuid":"u%s","timestamp":"2026-03-02T10:00:%02dZ","message":%s}\n',
          typ, t, t, msg))
      end
      f:close()
      local warned = {}
      local s = assert(sessions.read(path, nil, function(m) warned[#warned + 1] = m end))
      os.remove(path)
      return s, warned, path
    end
    local function call(t, id, name)
      return { t, "assistant", string.format(
        '{"id":"m%d","role":"assistant","content":[{"type":"tool_use","id":"%s","name":"%s","input":{}}]}', t, id, name) }
    end
    local function result(t, id, text)
      return { t, "user", string.format('{"role":"user","content":[{"type":"tool_result","tool_use_id":"%s","content":"%s"}]}',
        id, text) }
    end
    local prompt = { 0, "user", '{"role":"user","content":"go"}' }

    it("a result naming no call pairs with nothing (not the first waiting call), said once with its count", function()
      local s, warned, path = session({ prompt, call(1, "a", "Bash"), result(2, "ghost", "x"), result(3, "ghost2", "y"),
        result(5, "a", "mine") })
      assert.equals(1, #s.calls)
      assert.equals(4000, s.calls[1].tool_ms)   -- 10:00:01 -> its own result at 10:00:05, not the ghost's at :02
      assert.equals(1, #warned)
      assert.matches(path .. ": 2 tool results name a call no earlier line made (the first at line 3, id 'ghost')",
        warned[1], 1, true)
    end)

    it("two calls waiting under one id take their results in order", function()
      local s, warned = session({ prompt, call(1, "dup", "Read"), call(2, "dup", "Grep"), result(4, "dup", "r1"),
        result(7, "dup", "r2") })
      assert.equals(2, #s.calls)
      assert.equals("Read", s.calls[1].tool)
      assert.equals(3000, s.calls[1].tool_ms)   -- :01 -> :04
      assert.equals(5000, s.calls[2].tool_ms)   -- :02 -> :07
      assert.equals(1, #warned)
      assert.matches("1 call reused the id of a call still waiting (the first at line 3, id 'dup')", warned[1], 1, true)
    end)

    it("a second result for an answered call keeps the first", function()
      local s, warned = session({ prompt, call(1, "a", "Bash"), result(3, "a", "first"), result(6, "a", "again") })
      assert.equals(2000, s.calls[1].tool_ms)
      assert.equals(1, #warned)
      assert.matches("1 tool result came for a call that had its result already (the first at line 4, id 'a')",
        warned[1], 1, true)
    end)

    it("a log whose results all pair says nothing", function()
      local _, warned = session({ prompt, call(1, "a", "Bash"), result(2, "a", "ok") })
      assert.same({}, warned)
    end)
  end)

  it("keeps each text cut to MAX_TEXT bytes: memory grows with the calls, not their results", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    local big = string.rep("x", sessions.MAX_TEXT * 3)
    f:write('{"type":"user","sessionId":"s","uuid":"a","timestamp":"2026-03-02T10:00:00Z","message":{"role":"user","content":"go"}}\n')
    f:write('{"type":"assistant","sessionId":"s","uuid":"b","timestamp":"2026-03-02T10:00:01Z","message":{"id":"m","role":"assistant","content":[{"type":"tool_use","id":"t","name":"Read","input":{}}]}}\n')
    f:write('{"type":"user","sessionId":"s","uuid":"c","timestamp":"2026-03-02T10:00:02Z","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"' .. big .. '"}]}}\n')
    f:close()
    local s = assert(sessions.read(path))
    os.remove(path)
    assert.equals(sessions.MAX_TEXT, #s.msgs[3].content)
    assert.equals(1000, s.calls[1].tool_ms)
  end)

  it("without approval evidence, a call's time beyond the cap is the person's", function()
    -- the Claude Code fixture without its turn_duration line: the 60 s push
    -- keeps 20 s under a 20 s cap (the first prompt's turns otherwise as before)
    local src = assert(io.open(ROOT .. "sessions/claude_code.jsonl")):read("*a")
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write((src:gsub('[^\n]*"turn_duration"[^\n]*\n', "")))
    f:close()
    local s = assert(sessions.read(path, { approval_cap_ms = 20000 }))
    local d = assert(sessions.read(path))   -- the default cap, 600 s: nothing taken out
    os.remove(path)
    assert.equals(40000, s.calls[3].wait_ms)
    assert.equals(20000, s.calls[3].tool_ms)
    assert.equals(0, d.calls[3].wait_ms)
    assert.is_true(near(s.recorded_ms, 69000 - 40000 + 4000))
    assert.is_true(math.abs(replay_ms(s) - s.recorded_ms) < 1)
  end)

  it("names the line and what each reader expected for a file none reads", function()
    local s, err = sessions.read(ROOT .. "sessions/unknown.jsonl")
    assert.is_nil(s)
    assert.matches("^EFORMAT: .*unknown%.jsonl:1: no reader knows this line", err)
    assert.matches("claude%-code: a Claude Code transcript line", err)
    assert.matches("codex: a Codex CLI rollout line", err)
    assert.matches("otel: an OTLP JSON trace export line", err)
    assert.matches("openhands: an OpenHands event line", err)
    local _, err2 = sessions.read(ROOT .. "sessions/nothing-here.jsonl")
    assert.matches("^EIO:", err2)
  end)

  it("says a compressed log is compressed, with the command that opens it", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir) == 0)
    -- each format's magic bytes, then bytes no JSON decoder takes (the
    -- compressors themselves need not be installed)
    for _, z in ipairs({ { "gzip", "log.jsonl.gz", "log.jsonl", "\31\139\8\0" },
                         { "xz", "log.xz", "log.jsonl", "\253\55\122\88\90\0" },
                         { "zstd", "log.jsonl.zst", "log.jsonl", "\40\181\47\253" },
                         { "bzip2", "log.bz2", "log.jsonl", "BZh91AY&SY" } }) do
      local path = dir .. "/" .. z[2]
      local f = assert(io.open(path, "wb"))
      f:write(z[4], "\1\2\255\254{}\n")
      f:close()
      local s, err = sessions.read(path)
      assert.is_nil(s)
      assert.matches(": not JSON %(" .. z[1] .. "%-compressed: decompress it first: ", err)
      assert.truthy(err:find(z[1] .. " -dc " .. path .. " > " .. dir .. "/" .. z[3] .. ")", 1, true), err)
    end
    os.execute("rm -rf " .. dir)
  end)

  describe("the real sessions", function()
    local files = {
      { "claude_code/SublyFi__privacy-x402__claude-session.jsonl", "claude-code", 32, 0 },
      { "claude_code/bastion-agentique__bastion__claude-session.jsonl", "claude-code", 5, 0 },
      { "codex/CryptoSodi__Battle-Cities__codex-session.jsonl", "codex", 13, 5 },
      { "codex/Shyaar__beam_v1__codex-session.jsonl", "codex", 22, 5 },
      { "codex/SublyFi__privacy-x402__codex-session.jsonl", "codex", 5, 0 },
      { "codex/anmol0b__Trezo-Ai__codex-session.jsonl", "codex", 6, 3 },
      { "codex/kunalcode12__Empire-of-bits-vorld__codex-session.jsonl", "codex", 20, 1 },
    }
    for _, f in ipairs(files) do
      it(f[1] .. ": all calls, the untimed ones, and the replay within 2 % of the recorded time", function()
        local s = assert(sessions.read(ROOT .. "timed_traces/" .. f[1]))
        assert.equals(f[2], s.format)
        assert.equals(f[3], #s.calls)
        assert.equals(f[4], s.untimed)
        assert.is_true(s.recorded_ms > 0)
        assert.is_true(math.abs(replay_ms(s) - s.recorded_ms) / s.recorded_ms < 0.02,
          string.format("replay %.1f s, recorded %.1f s", replay_ms(s) / 1000, s.recorded_ms / 1000))
      end)
    end
    it("bastion: the 44-minute push is the person's approval, not the agent's", function()
      local s = assert(sessions.read(ROOT .. "timed_traces/claude_code/bastion-agentique__bastion__claude-session.jsonl"))
      local longest = 0
      for _, c in ipairs(s.calls) do longest = math.max(longest, c.recorded_ms) end
      assert.is_true(longest > 2600000)           -- recorded: over 43 minutes
      for _, c in ipairs(s.calls) do assert.is_true(c.tool_ms < 60000) end
      assert.equals(381589, s.recorded_ms)        -- Claude Code's own turn_duration
    end)
  end)
end)
