-- C functions called directly through the FFI (libspecula_core.so).
local core = require "specula.internal.core"
local ffi, C = core.ffi, core.C

describe("keyed randomness", function()
  local function draw(seed, q, hop, kind, branch)
    return C.sp_rand_keyed(seed, q, #q, hop, kind, branch)
  end
  it("depends only on its key", function()
    assert.equals(draw(1, "q1", 3, "spec", 0), draw(1, "q1", 3, "spec", 0))
    assert.not_equals(draw(1, "q1", 3, "spec", 0), draw(2, "q1", 3, "spec", 0))
    assert.not_equals(draw(1, "q1", 3, "spec", 0), draw(1, "q2", 3, "spec", 0))
    assert.not_equals(draw(1, "q1", 3, "spec", 0), draw(1, "q1", 4, "spec", 0))
    assert.not_equals(draw(1, "q1", 3, "spec", 0), draw(1, "q1", 3, "target", 0))
    assert.not_equals(draw(1, "q1", 3, "spec", 0), draw(1, "q1", 3, "spec", 1))
  end)
  it("is uniform on [0, 1)", function()
    local n, sum, lo, hi, buckets = 20000, 0, 1, 0, {}
    for i = 1, n do
      local u = draw(7, "q" .. i, i % 13, "x", 0)
      assert.is_true(u >= 0 and u < 1)
      sum = sum + u
      local b = math.floor(u * 10)
      buckets[b] = (buckets[b] or 0) + 1
    end
    assert.is_true(math.abs(sum / n - 0.5) < 0.01)
    for b = 0, 9 do assert.is_true(math.abs(buckets[b] / n - 0.1) < 0.01) end
  end)
end)

describe("theory", function()
  it("Corollary 1 and 3", function()
    assert.is_true(math.abs(C.sp_theory_rel_lat_star(0.7, 0.2, 0.15) - (1 - 0.7 * 0.8 / 1.15)) < 1e-12)
    assert.is_true(math.abs(C.sp_theory_rel_lat_k(0.7, 0.2, 0.15, 1) - 1) < 1e-12)
    local prev = 1
    for k = 2, 30 do
      local v = C.sp_theory_rel_lat_k(0.7, 0.2, 0.15, k)
      assert.is_true(v < prev)
      prev = v
    end
    assert.is_true(math.abs(C.sp_theory_rel_lat_k(0.7, 0.2, 0.15, -1) - C.sp_theory_rel_lat_star(0.7, 0.2, 0.15)) < 1e-12)
  end)
  it("Corollary 5 worked examples", function()
    assert.is_true(math.abs(C.sp_theory_k_det(0.2, 0.15) - 3.2857) < 1e-3)
    assert.equals(6, C.sp_theory_k_eps(0.2, 0.15, 0.4, 0.05))
    assert.is_true(math.abs(C.sp_theory_k_det(0.3, 0.75) - 1.6667) < 1e-3)
    assert.equals(3, C.sp_theory_k_eps(0.3, 0.75, 0.4, 0.05))
    assert.is_true(C.sp_theory_p_starve(4, 0.2, 0.15, 0.4) <= 0.5)
  end)
end)

describe("live k chooser", function()
  it("uses the default until it has samples, then Corollary 5", function()
    local a = ffi.gc(C.sp_kauto_new(0.05, 1, 64, 4), C.sp_kauto_free)
    assert.equals(4, C.sp_kauto_k(a))
    for i = 1, 200 do
      local j = (i % 2 == 0) and 1.4 or 0.6  -- CV 0.4
      C.sp_kauto_add(a, 15 * j, 20 * j, 100 * j)
    end
    local al, be, nu = ffi.new("double[1]"), ffi.new("double[1]"), ffi.new("double[1]")
    C.sp_kauto_estimates(a, al, be, nu)
    assert.is_true(math.abs(al[0] - 0.2) < 1e-9 and math.abs(be[0] - 0.15) < 1e-9)
    assert.is_true(math.abs(nu[0] - 0.4) < 0.01)
    assert.equals(C.sp_theory_k_eps(0.2, 0.15, nu[0], 0.05), C.sp_kauto_k(a))
  end)
end)

describe("eligibility gate", function()
  local function policy()
    local p = ffi.gc(C.sp_policy_new(), C.sp_policy_free)
    assert.is_true(C.sp_policy_class(p, "read", C.SP_FULL, 0, 0) > 0)
    assert.is_true(C.sp_policy_class(p, "irreversible", C.SP_WARMUP, 0, 0) > 0)
    assert.is_true(C.sp_policy_class(p, "write", C.SP_FORBID, 0, 0) > 0)
    assert.equals(0, C.sp_policy_tool(p, "search", "read", 0.01))
    assert.equals(1, C.sp_policy_tool(p, "email", "irreversible", 0))
    assert.equals(2, C.sp_policy_tool(p, "insert", "write", 0))
    assert.equals(-1, C.sp_policy_tool(p, "x", "no-such-class", 0))
    return p
  end
  local why = ffi.new("int[1]")
  it("maps tools through classes to decisions and treats unknown tools as forbid", function()
    local p = policy()
    assert.equals(C.SP_FULL, C.sp_policy_gate(p, 0, C.SP_TRIG_TARGET, -1, 0, 0, why))
    assert.equals(C.SP_WARMUP, C.sp_policy_gate(p, 1, C.SP_TRIG_TARGET, -1, 0, 0, why))
    assert.equals(C.SP_FORBID, C.sp_policy_gate(p, 2, C.SP_TRIG_TARGET, -1, 0, 0, why))
    assert.equals(C.SP_FORBID, C.sp_policy_gate(p, -1, C.SP_TRIG_TARGET, C.SP_FULL, 0, 0, why))
    assert.equals(C.SP_GATE_UNKNOWN, why[0])
    assert.equals(-1, C.sp_policy_tool_index(p, "mystery", 7))
  end)
  it("lets a script's hint lower a decision but never raise it", function()
    local p = policy()
    assert.equals(C.SP_FORBID, C.sp_policy_gate(p, 0, C.SP_TRIG_TARGET, C.SP_FORBID, 0, 0, why))
    assert.equals(C.SP_GATE_HINT, why[0])
    assert.equals(C.SP_FORBID, C.sp_policy_gate(p, 2, C.SP_TRIG_TARGET, C.SP_FULL, 0, 0, why))
    assert.equals(C.SP_WARMUP, C.sp_policy_gate(p, 1, C.SP_TRIG_TARGET, C.SP_FULL, 0, 0, why))
  end)
  it("never opens the unknown class", function()
    local p = policy()
    C.sp_policy_class(p, "unknown", C.SP_FULL, 0, 0)
    assert.equals(C.SP_FORBID, C.sp_policy_gate(p, -1, C.SP_TRIG_TARGET, -1, 0, 0, why))
  end)
  it("enforces per-query budgets and class rate limits", function()
    local p = policy()
    C.sp_policy_budget(p, 2, 0.025)
    assert.equals(C.SP_FULL, C.sp_policy_gate(p, 0, C.SP_TRIG_TARGET, -1, 1, 0, why))
    assert.equals(C.SP_FORBID, C.sp_policy_gate(p, 0, C.SP_TRIG_TARGET, -1, 2, 0, why))
    assert.equals(C.SP_GATE_INFLIGHT, why[0])
    assert.equals(C.SP_FULL, C.sp_policy_gate(p, 0, C.SP_TRIG_TARGET, -1, 0, 0.015, why))
    assert.equals(C.SP_FORBID, C.sp_policy_gate(p, 0, C.SP_TRIG_TARGET, -1, 0, 0.02, why))
    assert.equals(C.SP_GATE_BUDGET, why[0])
    C.sp_policy_class(p, "limited", C.SP_FULL, 0.001, 2)
    local t = C.sp_policy_tool(p, "vec", "limited", 0)
    C.sp_policy_budget(p, -1, -1)
    assert.equals(C.SP_FULL, C.sp_policy_gate(p, t, C.SP_TRIG_TARGET, -1, 0, 0, why))
    assert.equals(C.SP_FULL, C.sp_policy_gate(p, t, C.SP_TRIG_TARGET, -1, 0, 0, why))
    assert.equals(C.SP_FORBID, C.sp_policy_gate(p, t, C.SP_TRIG_TARGET, -1, 0, 0, why))
    assert.equals(C.SP_GATE_RATE, why[0])
  end)
  it("counts every decision per tool and per class", function()
    local p = policy()
    for _ = 1, 3 do C.sp_policy_gate(p, 0, C.SP_TRIG_TARGET, -1, 0, 0, why) end
    C.sp_policy_gate(p, 2, C.SP_TRIG_TARGET, -1, 0, 0, why)
    C.sp_policy_gate(p, -1, C.SP_TRIG_TARGET, -1, 0, 0, why)
    local c = ffi.new("sp_gate_counts")
    C.sp_policy_tool_counts(p, 0, -1, c)
    assert.equals(3, c.full)
    C.sp_policy_tool_counts(p, 2, -1, c)
    assert.equals(1, c.forbid)
    C.sp_policy_tool_counts(p, -1, -1, c)
    assert.equals(1, c.forbid)
    C.sp_policy_class_counts(p, 0, c)  -- "unknown"
    assert.equals(1, c.forbid)
  end)
  it("fails closed for a scripted policy: no decision, a script error or a bad value is forbid", function()
    local p = policy()
    C.sp_policy_set_scripted(p, 1)
    -- search's class is full, but the script's decision is required
    assert.equals(C.SP_FORBID, C.sp_policy_gate(p, 0, C.SP_TRIG_PRED_START, C.SP_HINT_NONE, 0, 0, why))
    assert.equals(C.SP_GATE_SCRIPT, why[0])
    assert.equals(C.SP_FORBID, C.sp_policy_gate(p, 0, C.SP_TRIG_PRED_NAME, C.SP_HINT_ERROR, 0, 0, why))
    assert.equals(C.SP_GATE_SCRIPT, why[0])
    assert.equals(C.SP_FORBID, C.sp_policy_gate(p, 0, C.SP_TRIG_TARGET, 7, 0, 0, why))
    assert.equals(C.SP_FORBID, C.sp_policy_gate(p, 0, C.SP_TRIG_TARGET, -9, 0, 0, why))
    assert.equals(C.SP_FULL, C.sp_policy_gate(p, 0, C.SP_TRIG_TARGET, C.SP_FULL, 0, 0, why))
    -- a table-only policy: no hint means the class decides, an error still forbids
    local q = policy()
    assert.equals(C.SP_FULL, C.sp_policy_gate(q, 0, C.SP_TRIG_PRED_START, C.SP_HINT_NONE, 0, 0, why))
    assert.equals(C.SP_FORBID, C.sp_policy_gate(q, 0, C.SP_TRIG_PRED_START, C.SP_HINT_ERROR, 0, 0, why))
    local c = ffi.new("sp_gate_counts")
    C.sp_policy_tool_counts(p, 0, -1, c)
    assert.equals(4, c.by_script)
    assert.equals(4, c.forbid)
    assert.equals(1, c.full)
  end)
  it("counts decisions per trigger, and warm-ups skip the call budgets", function()
    local p = policy()
    C.sp_policy_budget(p, 0, -1)   -- no speculative call may be in flight
    assert.equals(C.SP_FORBID, C.sp_policy_gate(p, 0, C.SP_TRIG_TARGET, -1, 0, 0, why))
    assert.equals(C.SP_FULL, C.sp_policy_gate(p, 0, C.SP_TRIG_WARMUP, -1, 0, 0, why))
    assert.equals(C.SP_WARMUP, C.sp_policy_gate(p, 1, C.SP_TRIG_WARMUP, -1, 0, 0, why))
    assert.equals(C.SP_FORBID, C.sp_policy_gate(p, 2, C.SP_TRIG_PRED_NAME, -1, 0, 0, why))
    local c = ffi.new("sp_gate_counts")
    C.sp_policy_tool_counts(p, 0, C.SP_TRIG_TARGET, c)
    assert.same({ 0, 1, 1 }, { c.full, c.forbid, c.by_budget })
    C.sp_policy_tool_counts(p, 0, C.SP_TRIG_WARMUP, c)
    assert.same({ 1, 0 }, { c.full, c.forbid })
    C.sp_policy_tool_counts(p, 2, C.SP_TRIG_PRED_NAME, c)
    assert.equals(1, c.forbid)
    C.sp_policy_tool_counts(p, 2, C.SP_TRIG_PRED_START, c)
    assert.equals(0, c.forbid)
    C.sp_policy_tool_counts(p, 0, -1, c)
    assert.same({ 1, 1 }, { c.full, c.forbid })
  end)
end)

describe("SSE reader over the C parser", function()
  local sse = require "specula.sse"
  local function fake(chunks, err)
    local i = 0
    return { read = function()
      i = i + 1
      if chunks[i] then return chunks[i] end
      if err and i == #chunks + 1 then return nil, err end
      return nil
    end, close = function() end }
  end
  it("yields events split across any boundary", function()
    local text = "event: a\r\ndata: one\r\ndata: two\r\nid: 7\r\n\r\n: comment\n\ndata: three\r\rdata: four\n\n"
    for cut = 1, #text - 1 do
      local r = sse.reader(fake({ text:sub(1, cut), text:sub(cut + 1) }))
      local evs = {}
      while true do
        local ev, err = r:next()
        assert.is_nil(err)
        if not ev then break end
        evs[#evs + 1] = ev
      end
      assert.equals(3, #evs)
      assert.same({ "a", "one\ntwo", "7" }, { evs[1].event, evs[1].data, evs[1].id })
      assert.equals("three", evs[2].data)
      assert.equals("message", evs[2].event)
      assert.equals("7", evs[2].id)
      assert.equals("four", evs[3].data)
    end
  end)
  it("reports a truncated final event and transport errors", function()
    local r = sse.reader(fake({ "data: done\n\ndata: cut" }))
    assert.equals("done", r:next().data)
    assert.is_nil(r:next())
    assert.is_true(r.truncated)
    local r2 = sse.reader(fake({ "data: x\n\n" }, "ECONNRESET: boom"))
    assert.equals("x", r2:next().data)
    local ev, err = r2:next()
    assert.is_nil(ev)
    assert.equals("ECONNRESET: boom", err)
  end)
  it("rejects an oversized event with a clear error", function()
    local r = sse.reader(fake({ "data: " .. string.rep("x", 5000) .. "\n\n" }), { max_event_bytes = 1024 })
    local ev, err = r:next()
    assert.is_nil(ev)
    assert.matches("EPROTO: SSE: .*exceeds", err)
  end)
end)
