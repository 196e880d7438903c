-- specula: the public Lua API. Submodules load on first use.
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"

-- specula.script's name before it was renamed (it was specula.cli, which
-- read like the command line's module): scripts written then still load.
package.preload["specula.cli"] = package.preload["specula.cli"] or function() return require "specula.script" end

local M = {
  version = core.ffi.string(core.C.sp_version()),
  spawn = sched.spawn,
  sleep = sched.sleep,
  now = sched.now,
  real_now = sched.real_now,
  clock = sched.clock,
  set_clock = sched.set_clock,
  wait_any = sched.wait_any,
  wait_all = sched.wait_all,
  in_task = sched.in_task,
}

local lazy = {
  http = "specula.http", sse = "specula.sse", json = "specula.json",
  sim = "specula.sim", verify = "specula.verify", tools = "specula.tools",
  terminate = "specula.terminate", template = "specula.template",
  predict = "specula.predict", metrics = "specula.metrics", datasets = "specula.datasets",
  llm = "specula.llm", policy = "specula.policy", text = "specula.text",
  theory = "specula.theory", estimate = "specula.estimate", mcp = "specula.mcp", cassette = "specula.cassette",
  stats = "specula.stats", provenance = "specula.provenance", agents = "specula.agents",
  crypto = "specula.crypto", secrets = "specula.secrets", mcpauth = "specula.mcp.auth", url = "specula.url",
  script = "specula.script",
}

setmetatable(M, { __index = function(t, k)
  local name = lazy[k]
  if name then
    local mod = require(name)
    rawset(t, k, mod)
    return mod
  end
  local agent = rawget(t, "_agent")
  if not agent and (k == "agent" or k == "candidates") then
    agent = require "specula.internal.protocol"
    rawset(t, "_agent", agent)
  end
  if agent and (k == "agent" or k == "candidates") then return agent[k] end
  return nil
end })

-- A gateway's configuration (a CONFIG.lua of `specula gateway` returns it).
function M.gateway(spec)
  local gw = require("specula.gateway").new(spec, 2)
  return gw   -- not a tail call: the level names the config's line
end

-- Run an agent over queries from a script: records, aggregate.
function M.run(agent, opts) return require("specula.run.runner").run(agent, opts) end

-- Live-object counters of the engine (tasks, timers, transfers, ...), so
-- tests and users can see that nothing was left open.
function M.counts()
  local ctx = core.require_ctx("specula.counts")
  local c = core.ffi.new("sp_counts")
  core.C.sp_ctx_counts(ctx, c)
  return { tasks = c.tasks, ready = c.ready, timers = c.timers, transfers = c.transfers,
           requests = c.requests, polls = c.polls, windows = c.windows, handles = c.handles,
           values = c.values, procs = c.procs, rpc_cancels = c.rpc_cancels, http_lanes = c.http_lanes }
end

-- Let the loop release what finished (one turn), collect garbage so
-- finalizer-owned objects go too, then count.
function M.settle()
  -- a real loop turn (close callbacks of handles run after the poll phase)
  if sched.in_task() then sched.sleep(1); sched.sleep(0) end
  collectgarbage(); collectgarbage()
  return M.counts()
end

return M
