-- examples/experiment/agent.lua — a tool-calling agent over real tools, for
-- the README's "Your first experiment" (run.sh here runs the whole loop).
--
-- The model is an OpenAI-compatible chat endpoint on loopback (model.js
-- here, http://127.0.0.1:$EXPERIMENT_PORT, default 18790); the tools are
-- the MCP filesystem server from npm (@modelcontextprotocol/server-filesystem,
-- in $SPECULA_NPM_CACHE, default ~/.cache/specula-npm), serving the
-- directory $EXPERIMENT_STORE. The agent is the usual loop: send the
-- conversation and the tools' schemas, run the call the model chose, append
-- its result, until the model answers. It knows nothing of the task: every
-- decision is the model's.
--
-- The store stands for a remote one: each read_text_file takes
-- $EXPERIMENT_STORE_MS more (default 100 ms, lognormal, the same for the
-- same query and hop in every thread). The speculator of read_text_file is
-- a local mirror of the store copied some time ago (mirror/ here): most
-- notes are the same, two are missing, some are out of date.
--
-- Eligibility: early_reads.lua here (reads may run from unverified states,
-- write_file never). predict_next.lua is an action predictor the comparison
-- turns on with predictor=predict_next.lua.
local specula = require "specula"

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local PORT = os.getenv("EXPERIMENT_PORT") or "18790"
local STORE = os.getenv("EXPERIMENT_STORE") or "/tmp/specula-experiment/store"
local STORE_MS = tonumber(os.getenv("EXPERIMENT_STORE_MS") or "") or 100
local cache = os.getenv("SPECULA_NPM_CACHE") or ((os.getenv("HOME") or "") .. "/.cache/specula-npm")
local server_js = cache .. "/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"

-- A replay (--replay-io) does not start the server: only a live run needs
-- the package and the store.
local function readable(path)
  local f = io.open(path, "r")
  if f then f:close() end
  return f ~= nil
end
if not require("specula.cassette").offline() then
  local problem
  if not readable(server_js) then
    problem = server_js .. " is missing; install it with .ci/deps"
  elseif not readable(STORE .. "/case1_1.txt") then
    problem = "no notes in " .. STORE .. " (EXPERIMENT_STORE): copy examples/experiment/store/ there"
  end
  if problem then
    io.stderr:write("notes-agent: ", problem, "\n")
    require("specula.script").set_exit(1)   -- through the engine's shutdown, unlike os.exit
    return
  end
end
local client = assert(specula.mcp.connect { command = { "node", server_js, STORE }, name = "filesystem" })

local model = specula.llm.openai.new {
  chat_url = "http://127.0.0.1:" .. PORT .. "/v1/chat/completions",
  api_key = "local", model = "notes-model", retry = { max_retries = 0 },
}

-- a tool's observation is its text (the server also sends it as structured content)
local tools = specula.tools.mcp(client, { include = { "read_text_file", "write_file" },
  observation = function(r) return r.content[1] and r.content[1].text or "" end })

-- the remote store's latency, around the real call
local store_law = specula.sim.law({ "lognormal", STORE_MS, 0.3 }, "store latency")
local read = tools.read_text_file.call
tools.read_text_file.call = function(args, ctx)
  if STORE_MS > 0 then specula.sim.wait(store_law, ctx, "store") end
  return read(args, ctx)
end

-- the speculator: the mirror's copy of the note, or no guess
tools.read_text_file.speculate = function(args)
  local name = type(args.path) == "string" and args.path:match("^[%w_%-]+%.txt$")
  local f = name and io.open(here .. "/mirror/" .. name, "r")
  if not f then return nil end
  local text = f:read("*a")
  f:close()
  return text
end

-- what the model is told about the tools: their MCP schemas
local schemas = {}
for _, name in ipairs({ "read_text_file", "write_file" }) do
  local d = tools[name].mcp
  schemas[#schemas + 1] = { type = "function",
    ["function"] = { name = d.name, description = d.description, parameters = d.inputSchema } }
end

local SYSTEM = "You work on a store of field notes with file tools. Do what the user asks, one tool call at a time."

return specula.agent {
  name = "notes-agent",
  tools = tools,
  policy = here .. "/early_reads.lua",
  verify = specula.verify.exact,
  init = function(query)
    return { messages = { { role = "system", content = SYSTEM }, { role = "user", content = query } } }
  end,
  step = function(s, ctx)
    local r = assert(model:chat { messages = s.messages, tools = schemas, stream = true,
                                  on_tool_name = ctx.on_tool_name })
    local c = r.tool_calls and r.tool_calls[1]
    if not c then return { final = r.content } end
    return { segment = c.name .. " " .. tostring(c.arguments.path),
             action = { tool = c.name, args = c.arguments },
             said = specula.llm.openai.assistant_message(r) }
  end,
  update = function(s, step, obs)
    local m = { unpack(s.messages) }
    m[#m + 1] = step.said
    m[#m + 1] = specula.llm.openai.tool_message(step.said.tool_calls[1].id, obs)
    return { messages = m }
  end,
}
