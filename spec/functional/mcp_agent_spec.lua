-- specula.tools.mcp + specula.policy.mcp: an agent whose tools and
-- eligibility come from an MCP server's annotations, run by the real binary.
local H = require "support.helpers"
local cjson = require "cjson"
local AGENT = H.root .. "/spec/mcp/agent_testserver.lua"

local last_json = H.last_json

-- Run the agent sequentially and with SpecHop in one process; compare.
local function compare(env)
  local code = [[
local specula = require "specula"
local json = specula.json
local agent = assert(loadfile(]] .. string.format("%q", AGENT) .. [[))()
local qs = { "a", "b", "c", "d" }
local c0 = specula.counts().rpc_cancels
local seq = specula.run(agent, { queries = qs, mode = "sequential" })
local log0 = assert(MCP_CLIENT:call("log")).structuredContent
local spec, agg = specula.run(agent, { queries = qs, mode = "spechop", k = "inf" })
local log1 = assert(MCP_CLIENT:call("log")).structuredContent
local same = 0
for i = 1, #qs do
  if json.canonical({ seq[i].answer, seq[i].trajectory }) == json.canonical({ spec[i].answer, spec[i].trajectory }) then same = same + 1 end
end
local t = agg.policy_counts.tools
print(json.encode({ same = same, n = #qs, early_writes = MCP_EARLY_WRITES(),
  writes_seq = log0.calls.write, writes_total = log1.calls.write, journal = #log1.journal,
  slow_early = t.slow.full, slow_source = t.slow.source, slow_decision = t.slow.decision,
  write_full = t.write.full, write_forbid = t.write.forbid, write_source = t.write.source, write_decision = t.write.decision,
  rpc_cancels = specula.counts().rpc_cancels - c0, server_cancelled = #log1.cancelled - #log0.cancelled }))
]]
  local st, out, err = H.run_lua(code, {}, env)
  assert.are.equal(0, st, out .. err)
  return last_json(out)
end

describe("an agent over an MCP server", function()
  it("with trusted annotations: reads run early, writes never, results identical, discarded reads cancelled on the wire", function()
    if not H.need_node(pending) then return end
    local r = compare({ MCP_TRUST = "1" })
    assert.are.equal(r.n, r.same)
    assert.are.equal(0, r.early_writes)
    assert.are.equal(0, r.write_full)
    assert.are.equal("forbid", r.write_decision)
    assert.are.equal("annotation", r.write_source)
    assert.are.equal("full", r.slow_decision)
    assert.are.equal("annotation", r.slow_source)
    assert.is_true(r.slow_early > 0)
    assert.is_true(r.write_forbid > 0)          -- deferred until verified, then run once
    assert.are.equal(2 * r.writes_seq, r.writes_total)
    assert.are.equal(r.writes_total, r.journal)
    -- wrong guesses discard threads whose next read was already on the wire
    assert.is_true(r.rpc_cancels > 0)
    assert.are.equal(r.rpc_cancels, r.server_cancelled)
  end)

  it("without trust every tool is forbid by default; an override is named as the source", function()
    if not H.need_node(pending) then return end
    local r = compare({ MCP_TRUST = "0", MCP_OVERRIDE = "slow=full" })
    assert.are.equal(r.n, r.same)
    assert.are.equal("default", r.write_source)
    assert.are.equal("forbid", r.write_decision)
    assert.are.equal("override", r.slow_source)
    assert.is_true(r.slow_early > 0)
    assert.are.equal(0, r.early_writes)
    local r2 = compare({ MCP_TRUST = "0" })
    assert.are.equal("default", r2.slow_source)
    assert.are.equal(0, r2.slow_early)
    assert.are.equal(0, r2.rpc_cancels)
  end)

  it("runs from the CLI: the main chunk connects before it returns the agent", function()
    if not H.need_node(pending) then return end
    local st, out, err = H.specula({ "run", AGENT, "--query", "cli", "--k", "inf" }, { MCP_TRUST = "1" })
    assert.are.equal(0, st, out .. err)
    assert.matches("slow done: cli%-0", out)
  end)
end)
