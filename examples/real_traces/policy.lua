-- examples/real_traces/policy.lua — eligibility for the tools of recorded
-- conversations, derived from their names the way an MCP server's
-- annotations would say it: a tool whose name starts with a verb that
-- only looks (get, search, list, find, lookup, read, fetch, check) or only
-- computes (calculate, think: no side effect) is read-only, and runs early
-- (`full`); every other tool — book, update, cancel, send, transfer, the
-- reply to the user — is a write and waits until its state is verified
-- (`forbid`). The verbs live here, in the example's policy, not in the
-- library: another agent's tools get another list.
local READ_VERBS = { get = true, search = true, list = true, find = true, lookup = true, read = true,
                     fetch = true, check = true, calculate = true, think = true }

local function annotations(tool)
  local verb = tool:match("^(%a+)") or ""
  return { readOnlyHint = READ_VERBS[verb:lower()] == true }
end

return {
  name = "real traces: read-only verbs run early, writes wait",
  annotations = annotations,
  resolve = function(agent_tools)
    local tools = {}
    for name in pairs(agent_tools) do
      tools[name] = annotations(name).readOnlyHint and "read" or "write"
    end
    return { classes = { read = "full", write = "forbid" }, tools = tools, budget = { max_inflight = 4 } }
  end,
}
