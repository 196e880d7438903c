-- specula.mcp.stdio: the stdio transport (specula.mcp.transport describes
-- the interface): a child process (engine/sp_proc.c) that reads one
-- JSON-RPC message per line on stdin and writes one per line on stdout.
-- A reader task hands each line to the session; when the process ends it
-- tells the session why, with its last stderr lines. The session may open
-- it again (restartable): a new process.
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"
local json = require "specula.json"
local secrets = require "specula.secrets"
local transport = require "specula.mcp.transport"
local ffi, C = core.ffi, core.C

local type, tostring, tonumber, pairs, ipairs, error = type, tostring, tonumber, pairs, ipairs, error
local format, concat = string.format, table.concat
local co_yield = sched.yield   -- the raw yield (sched guards the global one)
local encode, decode = json.encode, json.decode
local excerpt, spawn_root = transport.excerpt, transport.spawn_root

local M = {}

local lenp = ffi.new("size_t[1]")
local statusp, sigp = ffi.new("long[1]"), ffi.new("int[1]")
local prefixp = ffi.new("const char *[1]")

-- The last lines of a stderr tail, one line.
local function tail_lines(s, n)
  s = s:gsub("\r", "")
  local lines = {}
  for l in s:gmatch("[^\n]+") do
    if l:find("%S") then lines[#lines + 1] = l end
  end
  local from = #lines - (n or 3) + 1
  if from < 1 then from = 1 end
  local out = concat(lines, " | ", from, #lines)
  if #out > 600 then out = "..." .. out:sub(-600) end
  return out
end

-- Variables given to a server that say nothing secret (paths, locales).
local PLAIN_ENV = { PATH = true, HOME = true, LANG = true, LC_ALL = true, TERM = true, TMPDIR = true,
                    NODE_PATH = true, PYTHONPATH = true, NODE_ENV = true, USER = true, SHELL = true, PWD = true }

-- level: where a bad key is blamed, from here (the script's call of
-- specula.mcp.connect)
local function env_list(env, level)
  if env == nil then return nil end
  local list = {}
  -- the child inherits PATH and HOME unless given: node needs them
  local seen = {}
  for k, v in pairs(env) do
    if type(k) ~= "string" or k:find("[=%z]") then error("specula.mcp.connect: env keys must be names", level) end
    list[#list + 1] = k .. "=" .. tostring(v)
    seen[k] = true
    -- what a script hands its server is its credentials, as a rule: it
    -- never leaves the process (a URL gives only its userinfo)
    if not PLAIN_ENV[k] then
      v = tostring(v)
      if v:find("^%a[%w+.-]*://") then secrets.declare_url(v) else secrets.declare(v, "mcp env " .. k) end
    end
  end
  for _, k in ipairs({ "PATH", "HOME" }) do
    if not seen[k] and os.getenv(k) then list[#list + 1] = k .. "=" .. os.getenv(k) end
  end
  return list
end

local Stdio = { kind = "stdio", restartable = true, answers_inline = false, send_waits = false,
                roundtrip = transport.roundtrip }
Stdio.__index = Stdio

-- o: { command, env, cwd, name, max_message_bytes }; level: where a bad
-- option is blamed.
function M.new(o, level)
  return setmetatable({
    command = o.command, env_list = env_list(o.env, level + 1), cwd = o.cwd, name = o.name,
    where = "mcp server '" .. o.name .. "'", max_message_bytes = o.max_message_bytes,
    starts = 0, gen = 0,
  }, Stdio)
end

function Stdio:_spawn()
  local cmd = self.command
  local n = #cmd
  local args = ffi.new("const char *[?]", n + 1)
  for i = 1, n do args[i - 1] = cmd[i] end
  args[n] = nil
  local o = ffi.new("sp_proc_opts")
  o.file = cmd[1]
  o.args = args
  local envc
  if self.env_list then
    envc = ffi.new("const char *[?]", #self.env_list + 1)
    for i, s in ipairs(self.env_list) do envc[i - 1] = s end
    envc[#self.env_list] = nil
    o.env = envc
  end
  o.cwd = self.cwd
  o.max_line_bytes = self.max_message_bytes
  local label = "mcp server '" .. self.name .. "':"
  o.name = label
  local err, errlen = core.errbuf()
  local p = C.sp_proc_spawn(core.ctx, o, err, errlen)
  local keep = { cmd, args, envc, label, self.env_list } -- alive across the call
  if p == nil then return nil, ffi.string(err) end
  keep = nil
  self.proc = ffi.gc(p, function(q) C.sp_proc_close(q, 2000) end)
  self.pid = C.sp_proc_pid(p)
  self.starts = self.starts + 1
  return true
end

-- Release the process object now (the child is killed and reaped from the loop).
function Stdio:abort()
  local p = self.proc
  if p ~= nil then
    self.proc = nil
    ffi.gc(p, nil)
    C.sp_proc_close(p, 2000)
  end
end

-- Why the server ended, with its last stderr lines.
function Stdio:_exit_message(p)
  local why
  if C.sp_proc_exit(p, statusp, sigp) == 1 then
    if sigp[0] ~= 0 then why = "was killed by signal " .. tonumber(sigp[0])
    else why = "exited with status " .. tonumber(statusp[0]) end
  else
    why = "closed its output"
  end
  local tail = tail_lines(secrets.scrub(ffi.string(C.sp_proc_stderr(p, lenp), lenp[0])), 3)
  -- a dying server may print its environment: scrubbed before the tail
  -- becomes part of an error (and the cut of the tail is handled there)
  return secrets.scrub(format("server %s (pid %d) %s%s", excerpt(concat(self.command, " "), 120), self.pid or 0,
    why, tail ~= "" and ("; last stderr: " .. tail) or "; no stderr output"))
end

-- The reader: one root task per running process.
function Stdio:_read_loop(p, gen, peer)
  local me = sched.current("mcp reader")
  local st = peer.st
  while true do
    local s = C.sp_proc_line(p, lenp)
    if s ~= nil then
      local n = tonumber(lenp[0])
      local line = ffi.string(s, n)
      C.sp_proc_consume(p, n)
      if line:find("%S") then
        local msg, derr = decode(line)
        if msg == nil then
          peer:malformed(format("%s: malformed JSON on stdout (%s): %s", self.where, tostring(derr), excerpt(line)))
        else
          peer:receive(msg, "stdout", line)
        end
      end
    else
      local nover = C.sp_proc_oversized(p, prefixp, lenp)
      if nover > 0 then
        st.oversized = st.oversized + nover
        local pre = ffi.string(prefixp[0], lenp[0])
        local msg = format("message larger than max_message_bytes (%d) dropped", self.max_message_bytes)
        peer:warn(self.where .. ": " .. msg)
        -- fail the request it answered, if its id is in the first bytes
        local id = tonumber(pre:match('"id"%s*:%s*(%-?%d+)'))
        if id then peer:fail(id, "response " .. msg) end
      elseif C.sp_proc_finished(p) == 1 then
        break
      elseif C.sp_proc_wait(p, me) == 0 then
        co_yield()
      end
    end
  end
  -- the server is gone; a last line it did not end with a newline is
  -- still a message if it is whole, and named if it is not (a server that
  -- died mid-write)
  local cut = false
  local rest = C.sp_proc_rest(p, lenp)
  if rest ~= nil then
    local line = ffi.string(rest, lenp[0])
    if line:find("%S") then
      local msg = decode(line)
      if msg ~= nil then
        peer:receive(msg, "stdout", line)
      else
        cut = true
        peer:malformed(format("%s: its last stdout line was cut off when its output ended (%d bytes, no newline): %s",
          self.where, #line, excerpt(line)))
      end
    end
  end
  local why = self:_exit_message(p)
  if cut then why = why .. "; its last stdout line was cut off" end
  if self.gen == gen then
    self.last_exit = why
    st.exits = st.exits + 1
    self:abort()
    peer:lost(why)
  end
end

-- Start the server (again) and its reader.
function Stdio:open(peer)
  self.last_exit = nil
  local ok, err = self:_spawn()
  if not ok then return nil, err end
  self.gen = self.gen + 1
  local gen, p = self.gen, self.proc
  self.reader = spawn_root(function() self:_read_loop(p, gen, peer) end)
  return true
end

local function write(p, text)
  local err, errlen = core.errbuf()
  if C.sp_proc_write(p, text .. "\n", #text + 1, err, errlen) ~= 0 then return nil, ffi.string(err) end
  return true
end

function Stdio:send(msg)
  local text, eerr = encode(msg)
  if not text then return nil, eerr end
  local p = self.proc
  if p == nil then return nil, "not running" end
  return write(p, text)
end

-- Written and the cancel armed: the session waits on x.rpc.
function Stdio:request(x)
  local p = self.proc
  -- (why it ended, when it did: a server that exits at start is gone
  -- before the client's second request, initialize after server/discover)
  if p == nil then
    return nil, self.where .. ": " .. x.what .. ": not running" .. (self.last_exit and (": " .. self.last_exit) or "")
  end
  local cancel = x.cancel
  C.sp_rpc_cancel_write(x.rpc, p, cancel .. "\n", #cancel + 1)
  local ok, err = write(p, x.text)
  if not ok then return nil, self.where .. ": " .. x.what .. ": " .. err end
  return true
end

function Stdio:set_version() end
function Stdio:ready() end

-- Stop the reader and the child; in a task, wait until the child is reaped
-- (SIGKILL after the grace).
function Stdio:close()
  if self.reader and not self.reader:done() then C.sp_task_cancel(self.reader.ptr) end
  local p = self.proc
  if p ~= nil and sched.in_task() then
    local me = sched.current("mcp client:close")
    C.sp_proc_kill(p, 2000)
    while C.sp_proc_finished(p) == 0 do
      if C.sp_proc_line(p, lenp) ~= nil then C.sp_proc_consume(p, lenp[0])
      elseif C.sp_proc_oversized(p, prefixp, lenp) == 0 and C.sp_proc_wait(p, me) == 0 then co_yield() end
    end
  end
  self:abort()
end

return M
