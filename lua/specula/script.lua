-- specula.script: what a script may ask of the command that runs it. The
-- commands themselves are lua/specula/cmd/ (the table: specula.cmd).
local core = require "specula.internal.core"
local C = core.C

local M = {}

-- Set the process exit status (used when the main task succeeds).
function M.set_exit(code) C.sp_ctx_set_exit(core.ctx, code) end

-- An agent's directory on package.path (specula.provenance.add_script_dir).
function M.add_script_dir(script) return require("specula.provenance").add_script_dir(script) end

return M
