-- The "stats" object of a written record as engine-written JSON text
-- (specula.run.records stats_text, sp_record_stats_json: what a CLI run
-- writes without building a table): the same bytes as the canonical
-- encoding of the table stats_table builds, for any statistics and any
-- run settings, and nil exactly where that table cannot be encoded.
local core = require "specula.internal.core"
local json = require "specula.json"
local records = require "specula.run.records"
local ffi = core.ffi

local INTS = { "hops", "commits", "rollbacks", "accepted", "rejected", "late", "spec_errors", "model_calls",
  "target_calls", "spec_calls", "warmup_calls", "predicted_calls", "speculative_launches", "deferred",
  "cancelled_model", "cancelled_target", "cancelled_spec", "discarded_threads", "max_threads", "k_last" }
local PF = { "candidates", "fired", "promoted", "promoted_lossy", "wasted", "wasted_cost", "gated_ev",
  "gated_policy", "held", "saved_ms" }

-- a double as figures come: small integers, fractions, zero, and now and
-- then one that is not finite (bad = true allows those)
local function dbl(bad)
  local r = math.random()
  if bad and r < 0.03 then return 0 / 0 end
  if bad and r < 0.05 then return math.huge end
  if r < 0.17 then return 0 end
  -- (a figure past 10^15 has no short rounded form: the number writer's)
  if r < 0.2 then return math.random() * 10 ^ math.random(13, 22) end
  if r < 0.4 then return math.random(0, 50) end
  return math.random() * 10 ^ math.random(-3, 6)
end

local function random_stats(bad)
  local st = ffi.new("sp_window_stats")
  st.wall_ms, st.standard_ms = dbl(bad), dbl(bad)
  st.init_ms, st.final_seg_ms = dbl(bad), dbl(bad)
  for _, f in ipairs(INTS) do st[f] = math.random(0, 3) == 0 and 0 or math.random(0, 2000) end
  st.wasted_cost, st.wasted_calls = dbl(bad), math.random(0, 9)
  for t = 0, 3 do for j = 0, 2 do st.gate[t][j] = math.random(0, 40) end end
  -- the estimator's evidence: a few outcomes of hops (some queries none)
  local OUT = { core.SPEC_CODES.accepted, core.SPEC_CODES.rejected, core.SPEC_CODES.none }
  for _ = 1, math.random(0, 6) do
    core.C.sp_est_add(st.est, OUT[math.random(#OUT)], dbl(false) + 1, math.random() < 0.7 and dbl(false) or -1,
      dbl(false) + 1)
  end
  for _, f in ipairs(PF) do st.pf[f] = f:find("cost") or f:find("_ms") and dbl(bad) or math.random(0, 9) end
  return st
end

local MODES = { "spechop", "window", "sequential" }
local function random_cfg()
  local mode = MODES[math.random(#MODES)]
  local ks = { 1, 2, 3, 4, 16, -1, 0 }
  local k = mode == "sequential" and 1 or ks[math.random(#ks)]
  local matches = { false, "exact", "name_only", "similar" }
  return { k_cfg = k, mode = mode, m = mode == "sequential" and 1 or math.random(1, 4),
           launch = mode == "spechop" and (math.random() < 0.5 and "eager" or "slot") or "slot",
           match = matches[math.random(#matches)] or nil, pfoff = math.random() < 0.3 }
end

describe("specula.run.records stats_text", function()
  it("is the canonical JSON of stats_table, for any statistics and settings", function()
    math.randomseed(46)
    local texts = 0
    for case = 1, 2000 do
      local st, rc = random_stats(false), random_cfg()
      local n = math.random(0, 80)
      local want = json.canonical(records.stats_table(st, n, rc))
      local got = records.stats_text(st, n, rc)
      assert.equals(want, got, "case " .. case)
      texts = texts + 1
    end
    assert.equals(2000, texts)
  end)

  it("gives nil exactly where the table cannot be encoded (a figure not finite)", function()
    math.randomseed(4646)
    local nils = 0
    for case = 1, 2000 do
      local st, rc = random_stats(true), random_cfg()
      local n = math.random(0, 80)
      local ok, want = pcall(json.canonical, records.stats_table(st, n, rc))
      local got = records.stats_text(st, n, rc)
      if ok then
        assert.equals(want, got, "case " .. case)
      else
        assert.is_nil(got, "case " .. case .. ": " .. tostring(want))
        nils = nils + 1
      end
    end
    -- the cases drew enough figures that are not finite to test the path
    assert.is_true(nils > 50, "only " .. nils .. " unencodable cases")
  end)

  it("asks for a larger buffer when the one given may not hold the text, and writes it into one that does", function()
    math.randomseed(7)
    local st, rc = random_stats(false), random_cfg()
    local so = ffi.new("sp_stats_opts")
    so.hops, so.k_config, so.m, so.mode, so.spec_launch = 5, rc.k_cfg, rc.m, rc.mode, rc.launch
    local small = ffi.new("char[?]", 64)
    local need = core.C.sp_record_stats_json(st, so, small, 64)
    assert.is_true(need > 64, "asked for " .. need)
    local big = ffi.new("char[?]", need)
    local n = core.C.sp_record_stats_json(st, so, big, need)
    assert.is_true(n > 0 and n <= need)
    rc.match = nil
    assert.equals(json.canonical(records.stats_table(st, 5, rc)), ffi.string(big, n))
  end)

  it("writes the keys of a query with no prediction, an inf k and no estimate", function()
    local st = ffi.new("sp_window_stats")
    local text = records.stats_text(st, 0, { k_cfg = -1, mode = "spechop", m = 1, launch = "eager", pfoff = false })
    local t = json.decode(text)
    assert.equals("inf", t.k)
    assert.equals("inf", t.k_config)
    assert.equals(json.null, t.p_hat)
    assert.equals(json.null, t.rel_lat)
    assert.is_nil(t.prefetch)
    assert.equals(0, t.cancelled.total)
  end)
end)
