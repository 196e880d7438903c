-- A policy for spec/functional/misbehave_spec.lua: its decide raises (for
-- query "b": an error object whose __tostring raises, a bare yield, or 1);
-- POLICY_FAIL=load makes the file itself raise nil.
local how = os.getenv("POLICY_FAIL") or ""
if how == "load" then error(nil) end
return {
  classes = { reads = "full" },
  tools = { look = "reads" },
  decide = function(tool, args)
    if args.q == "b" and how == "yield" then coroutine.yield() elseif args.q == "b" and how == "number" then return 1 end
    if args.q == "b" then error(setmetatable({}, { __tostring = function() error({}) end })) end
    return "full"
  end,
}
