-- specula bench: `specula bench [NAME...] [-- ARGS]` runs bench/NAME.lua
-- (all of the default set when no name is given) and prints their tables.
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"

local M = {
  name = "bench",
  synopsis = "[NAME...] [-- ARGS]",
  summary = "run the benchmarks under bench/",
  about = [[
Runs bench/NAME.lua for each NAME (default: core, scale, http, fidelity,
paste, sweep, replay; also soak, batch, sessions, userpath, gateway, inputs) and prints their tables. From the
first option after the names on (or after --), the arguments go to the
benchmarks themselves (`specula bench soak --seconds 150`).]],
  options = {},
}

M.ORDER = { "core", "scale", "http", "fidelity", "paste", "sweep", "replay" }

-- Names first; from the first option on, everything goes to the benches,
-- but --help or -h there (before --) is this command's.
function M.parse(args)
  local names, pass = {}, {}
  local rest = false
  for _, a in ipairs(args) do
    if rest then pass[#pass + 1] = a
    elseif a == "--" then rest = true
    elseif a == "--help" or a == "-h" then return { help = true }
    elseif a:sub(1, 1) == "-" then rest = true; pass[#pass + 1] = a
    else names[#names + 1] = a end
  end
  return { names = names, pass = pass }
end

-- A NAME that names no benchmark is a usage mistake (status 2), found
-- before any benchmark starts.
function M.check(o)
  for _, name in ipairs(o.names or {}) do
    local f = io.open(core.host.root .. "/bench/" .. name .. ".lua", "r")
    if not f then
      return "no benchmark '" .. name .. "' (bench/" .. name .. ".lua does not exist; the default set: "
        .. table.concat(M.ORDER, ", ") .. ")"
    end
    f:close()
  end
  return nil
end

function M.main(o)
  local root = core.host.root
  local names, pass = o.names, o.pass
  if #names == 0 then names = M.ORDER end
  for _, name in ipairs(names) do
    local path = root .. "/bench/" .. name .. ".lua"
    local chunk, err = loadfile(path)
    if not chunk then sched.plain_error("specula bench: no benchmark '" .. name .. "' (" .. tostring(err) .. ")") end
    local stdout = require("specula.internal.output").stdout
    stdout(string.rep("=", 78), "\n", "bench/", name, ".lua\n", string.rep("-", 78), "\n")
    _G.arg = { [0] = path }
    for i, a in ipairs(pass) do _G.arg[i] = a end
    chunk(unpack(pass))
    io.stdout:flush()
  end
end

return M
