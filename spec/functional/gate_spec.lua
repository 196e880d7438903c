-- The one gate (docs/architecture.md#the-one-gate): every early launch — target calls of
-- speculative threads, warm-ups, predictions fired at step start or on a
-- streamed tool name — passes the C gate with the script's decision for that
-- exact call, whatever form the policy takes.
local H = require "support.helpers"
local cjson = require "cjson"
local SCRIPTS = H.root .. "/spec/functional/scripts/"

local last_json = H.last_json

-- A model stream that names send_email before the call it acts on.
local LYING = table.concat({
  'event: message_start',
  'data: {"type":"message_start","message":{"id":"m1","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"usage":{"input_tokens":5,"output_tokens":1}}}',
  '',
  'event: content_block_start',
  'data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"send_email","input":{}}}',
  '',
  'event: content_block_start',
  'data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t2","name":"lookup","input":{}}}',
  '',
  '', -- the split point: the server pauses here
  'event: content_block_delta',
  'data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\\"to\\": \\"all@corp\\"}"}}',
  '',
  'event: content_block_stop',
  'data: {"type":"content_block_stop","index":0}',
  '',
  'event: content_block_delta',
  'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"q\\": \\"weather\\"}"}}',
  '',
  'event: content_block_stop',
  'data: {"type":"content_block_stop","index":1}',
  '',
  'event: message_delta',
  'data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":9}}',
  '',
  'event: message_stop',
  'data: {"type":"message_stop"}',
  '', '',
}, "\n")

describe("the eligibility gate", function()
  it("holds for every policy form x trigger x mode x k x m over 1,000 adversarial queries each #slow", function()
    -- under the sanitizers (twice as slow, the memory checks the point) a
    -- quarter of the queries; the property at full size runs in the plain suite
    local n = os.getenv("SPECULA_SANITIZED") and 250 or 1000
    local st, out, err = H.specula({ "run", SCRIPTS .. "gate_property.lua", tostring(n) })
    assert.equals(0, st, err)
    local r = last_json(out)
    assert.equals(90, r.configs)     -- 5 forms x 2 triggers x (sequential + 2 modes x 2 k x 2 m)
    assert.equals(n, r.queries)
    assert.same({}, r.examples)
    assert.equals(0, r.violations, "calls that are not `full` ran early")
    assert.equals(0, r.warmup_violations, "warm-up hooks ran where the decision is not warmup")
    assert.equals(0, r.errors, r.first_error)
    assert.equals(0, r.mismatches, "answers or trajectories differ from the sequential run")
    -- the property is not vacuous: predictions fire, hit, and allowed calls do run early
    assert.is_true(r.fired > 10 * n and r.promoted > n, "fired " .. r.fired .. ", promoted " .. r.promoted)
    assert.is_true(r.early_full > n)
    for _, form in ipairs({ "table", "classes", "decide", "function", "path" }) do
      local f = r.by_form[form]
      assert.is_table(f, form)
      -- forbidden and mutating tools ran exactly as in the sequential run
      assert.equals(f.sequential.transfer, f.executions.transfer, form)
      assert.equals(f.sequential.wipe, f.executions.wipe, form)
      assert.equals(0, f.decisions.transfer.full, form)
      io.stderr:write(string.format("\n  %-8s %s: executions %s (sequential %s); script errors %d",
        form, f.config, cjson.encode(f.executions), cjson.encode(f.sequential), f.script_errors))
    end
    -- forms with a script that raises or returns a non-decision count errors
    assert.is_true(r.by_form.decide.script_errors > 0)
    assert.is_true(r.by_form["function"].script_errors > 0)
    assert.is_true(r.by_form.path.script_errors > 0)
    assert.equals(0, r.by_form.table.script_errors)
  end)

  for _, form in ipairs({ "function", "table" }) do
    it("forbids what a lying model stream names (" .. form .. " policy, real SSE over loopback)", function()
      local dir = H.tmpdir() .. "/gate_stream"
      os.execute("mkdir -p " .. H.quote(dir))
      local f = assert(io.open(dir .. "/lying.sse", "wb"))
      f:write(LYING)
      f:close()
      local split = LYING:find("\n\n\nevent: content_block_delta", 1, true) + 2
      local server = H.server { files = dir }
      local st, out, err = H.specula({ "run", SCRIPTS .. "gate_stream.lua", server.base, "lying.sse", form,
                                       tostring(split) })
      server.stop()
      assert.equals(0, st, err)
      local r = last_json(out)
      assert.equals(0, r.errors)
      assert.equals(0, r.early_send_email)
      assert.equals(0, r.send_email_full)
      assert.is_true(r.send_email_name_forbid >= 20, "the streamed name must reach the gate")
      assert.is_true(r.lookup_name_full >= 20 and r.early_lookup >= 20 and r.promoted >= 20)
    end)
  end

  it("gates a function policy's predictions in --mode sequential --predict on (the reported bypass)", function()
    local st, out, err = H.specula({ "run", SCRIPTS .. "gate_sequential.lua" })
    assert.equals(0, st, err)
    local r = last_json(out)
    assert.equals(0, r.email_early, "send_email ran before the model decided it")
    assert.is_true(r.lookup_early > 0, "allowed predictions must still fire")
    assert.is_true(r.forbid_predicted_start > 0)
    assert.is_true(r.forbid_predicted_name > 0)
    assert.equals(0, r.query_errors)
    assert.is_true(r.script_errors > 0)
    assert.truthy(r.summary:find("send_email: predicted_start forbid %d+"), r.summary)
    assert.truthy(r.summary:find("send_email: predicted_name forbid %d+"), r.summary)
    assert.truthy(r.gate.predicted_start.forbid > 0)
  end)
end)
