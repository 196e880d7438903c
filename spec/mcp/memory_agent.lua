-- Integration: an agent over @modelcontextprotocol/server-memory (from npm),
-- sequential vs SpecHop, each run on a fresh memory file. Reads
-- (search_nodes, open_nodes, read_graph: readOnlyHint) may run early;
-- create_entities and add_observations (no readOnlyHint) never do. The
-- speculator is a cache of observations seen before (a perfect draft for
-- repeated queries, absent for new ones). Prints one JSON line.
local specula = require "specula"
local json = specula.json
local js = assert(os.getenv("MCP_MEMORY_JS"), "MCP_MEMORY_JS is not set")
local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p '" .. dir .. "'")

local seen, early_writes = {}, 0
local WRITES = { create_entities = true, add_observations = true }

local function make(run)
  local client = assert(specula.mcp.connect { command = { "node", js }, name = "memory-" .. run,
                                              env = { MEMORY_FILE_PATH = dir .. "/" .. run .. ".jsonl" } })
  local tools = specula.tools.mcp(client, { include = { "create_entities", "add_observations", "search_nodes", "open_nodes", "read_graph" },
    observation = function(r) return r.content[1] and r.content[1].text or "" end })
  for name, t in pairs(tools) do
    local call = t.call
    t.call = function(args, ctx)
      if WRITES[name] and ctx.speculative then early_writes = early_writes + 1 end
      specula.sleep(40)   -- a remote store: tool latency comparable to a model step
      local obs = call(args, ctx)
      seen[name .. json.canonical(args)] = obs
      return obs
    end
    if not WRITES[name] then
      t.speculate = function(args) specula.sleep(1) return seen[name .. json.canonical(args)] or "?" end
    end
  end
  local agent = specula.agent {
    name = "memory",
    policy = specula.policy.mcp(client, { trust_annotations = true }),
    tools = tools,
    init = function(q) return { q = q, hop = 0, obs = {} } end,
    step = function(s)
      specula.sleep(20)
      local q, h = s.q, s.hop
      local A = {
        { "create_entities", { entities = { { name = q, entityType = "topic", observations = { "about " .. q } } } } },
        { "search_nodes", { query = q } },
        { "open_nodes", { names = { q } } },
        { "add_observations", { observations = { { entityName = q, contents = { "seen " .. #s.obs } } } } },
        { "open_nodes", { names = { q } } },
      }
      if h >= #A then return { final = table.concat(s.obs, "\n") } end
      return { segment = A[h + 1][1], action = { tool = A[h + 1][1], args = A[h + 1][2] } }
    end,
    update = function(s, step, obs)
      local o = { unpack(s.obs) }
      o[#o + 1] = obs
      return { q = s.q, hop = s.hop + 1, obs = o }
    end,
  }
  return agent, client
end

-- one query at a time: the server rewrites its whole file per operation
local qs = { "alpha", "beta", "gamma" }
local a1, c1 = make("warm")       -- fills the draft cache
specula.run(a1, { queries = qs, mode = "sequential", concurrency = 1 })
local a2, c2 = make("seq")
local seq = specula.run(a2, { queries = qs, mode = "sequential", concurrency = 1 })
local a3, c3 = make("spec")
local r0 = specula.counts().rpc_cancels
local spec, agg = specula.run(a3, { queries = qs, mode = "spechop", k = "inf", concurrency = 1 })
local same = 0
for i = 1, #qs do
  if json.canonical({ seq[i].answer, seq[i].trajectory }) == json.canonical({ spec[i].answer, spec[i].trajectory }) then same = same + 1 end
end
local pc = agg.policy_counts.tools
local early = {}
for _, n in ipairs({ "create_entities", "add_observations", "search_nodes", "open_nodes" }) do early[n] = pc[n].full end
print(json.encode({ same = same, n = #qs, calls_seq = c2:stats().calls, calls_spec = c3:stats().calls, early = early,
  early_writes = early_writes, sources = { create_entities = pc.create_entities.source, search_nodes = pc.search_nodes.source },
  rpc_cancels = specula.counts().rpc_cancels - r0, commits = agg.commits, rollbacks = agg.rollbacks, reasons = spec[1].hops and spec[1].hops[2], launches = agg.speculative_launches, spec_errors = agg.spec_errors, deferred = agg.deferred }))
c1:close() c2:close() c3:close()
os.execute("rm -rf '" .. dir .. "'")
