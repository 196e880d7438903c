-- policies/strict.lua — nothing runs early unless this file names it.
-- Declared classes on agent tools are ignored; add tools to `tools` below
-- (as "read") to allow them, with a small in-flight and spend budget.
return {
  classes = { read = "full" },
  tools = {},
  trust_tool_classes = false,
  budget = { max_inflight = 2, max_wasted_cost = 0.05 },
}
