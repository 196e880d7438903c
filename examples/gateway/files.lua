-- examples/gateway/files.lua — `specula gateway` in front of the reference
-- filesystem server (the npm package @modelcontextprotocol/server-filesystem,
-- installed by .ci/deps into ~/.cache/specula-npm), serving the directory
-- $GATEWAY_ROOT (default: the current directory).
--
--   specula gateway examples/gateway/files.lua --out sessions.jsonl
--
-- The predictor reads the client's last directory listing and proposes the
-- next file of it not read yet; the policy lets only the server's read tools
-- run before the client asks (never write_file, edit_file, move_file,
-- create_directory). examples/gateway/try.lua is a client that shows it.
local specula = require "specula"

local npm = os.getenv("SPECULA_NPM_CACHE") or ((os.getenv("HOME") or ".") .. "/.cache/specula-npm")
local modules = npm .. "/node_modules"
-- the Node that .ci/deps installs beside the servers, else the one on PATH
local node = modules .. "/.bin/node"
local nf = io.open(node)
if nf then nf:close() else node = "node" end
local root = os.getenv("GATEWAY_ROOT") or "."
-- what is missing, said before any client connects
local server = modules .. "/@modelcontextprotocol/server-filesystem/dist/index.js"
local sf = io.open(server)
if not sf then
  error("files.lua: the npm package @modelcontextprotocol/server-filesystem is not in " .. npm .. " (run .ci/deps "
    .. "from the repository, or set SPECULA_NPM_CACHE to the folder where npm installed it)", 0)
end
sf:close()
local vp = io.popen("'" .. node .. "' --version 2>/dev/null")
local version = vp and vp:read("*l") or ""
if vp then vp:close() end
local major = tonumber(version:match("^v(%d+)"))
if not major then
  -- nothing answered: no Node at all, which "too old" would misname
  error("files.lua: no Node.js to run server-filesystem: '" .. node .. " --version' did not answer (.ci/deps "
    .. "installs Node 22 into " .. npm .. ")", 0)
elseif major < 20 then
  error("files.lua: server-filesystem needs Node 20 or later; '" .. node .. " --version' gave '" .. version
    .. "' (.ci/deps installs Node 22 into " .. npm .. ")", 0)
end

-- the listing a list_directory call returned, as file names
local function files_of(observation)
  local text = type(observation) == "table" and observation.content and observation.content[1]
    and observation.content[1].text or ""
  local names = {}
  for name in text:gmatch("%[FILE%] ([^\n]+)") do names[#names + 1] = name end
  return names, text
end

return specula.gateway {
  servers = {
    files = { command = { node, server, root } },
  },
  -- read-only tools of server-filesystem; anything else never runs early
  policy = { read_text_file = "full", list_directory = "full", directory_tree = "full",
             get_file_info = "full", list_allowed_directories = "full" },
  predict = function(history)
    local dir, names
    for _, h in ipairs(history) do
      if h.tool == "list_directory" and type(h.args) == "table" then dir, names = h.args.path, files_of(h.observation) end
    end
    if not names then return {} end
    local read = {}
    for _, h in ipairs(history) do
      if h.tool == "read_text_file" and type(h.args) == "table" then read[h.args.path] = true end
    end
    for _, name in ipairs(names) do
      local path = dir .. "/" .. name
      if not read[path] then return { { tool = "read_text_file", args = { path = path }, confidence = 0.9 } } end
    end
    return {}
  end,
  max_age_ms = 10000,
  budget = { max_inflight = 2, max_wasted_cost = 20 },
}
