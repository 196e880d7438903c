-- A policy given by path (gate_property.lua): a class table whose decide()
-- depends on the exact args. `expected` is what the property checks it
-- against (the engine ignores unknown fields of a policy table).
local CLASSES = { read = "full", irreversible = "full", write = "forbid" }
local TOOLS = { search = "read", fetch = "read", send_email = "irreversible", transfer = "write",
                wipe = "write" }

local function decide(tool, args, ctx)
  if tool == "send_email" then
    -- only mail to the team may be sent early
    if type(args.to) ~= "string" then error("send_email without a recipient", 0) end
    return args.to:find("@corp$") and "full" or "forbid"
  end
  if tool == "fetch" and args.private then return "warmup" end
  if tool == "search" and args.boom then return {} end   -- not a decision: forbid
  return "full"
end

local function expected(tool, args)
  local cls = TOOLS[tool]
  local d = cls and CLASSES[cls] or "forbid"
  if d ~= "full" then return d end
  if tool == "send_email" then return args.to:find("@corp$") and "full" or "forbid" end
  if tool == "fetch" and args.private then return "warmup" end
  if tool == "search" and args.boom then return "forbid" end
  return "full"
end

return { classes = CLASSES, tools = TOOLS, decide = decide, budget = { max_inflight = 64 },
         expected = expected }
