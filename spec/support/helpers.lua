-- Shared helpers of the busted specs: run the real binary, start and stop
-- the loopback test server, write temporary files.
local H = {}

H.root = os.getenv("SPECULA_SOURCE_DIR") or "."
H.bin = os.getenv("SPECULA_BIN") or (H.root .. "/build/specula")
H.server_bin = os.getenv("SPECULA_TESTSERVER") or (H.root .. "/build/specula-testserver")
-- Under ASan the unit suite preloads the sanitizer runtime into luajit.
H.preload = os.getenv("SPECULA_PRELOAD")

-- One temporary directory a spec process, removed when the process ends
-- (busted closes the Lua state at exit: the sentinel's finalizer runs)
-- unless SPECULA_KEEP_TMP is set, for a look at what a failed case left.
local tmpdir, sentinel
function H.tmpdir()
  if not tmpdir then
    local p = os.tmpname()
    os.remove(p)
    local rc = os.execute("mkdir -p " .. H.quote(p))
    assert(rc == 0 or rc == true, "cannot create the temporary directory " .. p)
    tmpdir = p
    local keep = os.getenv("SPECULA_KEEP_TMP")
    if not keep or keep == "" or keep == "0" then
      sentinel = newproxy(true)
      getmetatable(sentinel).__gc = function() os.execute("rm -rf " .. H.quote(p)) end
      H._tmp_sentinel = sentinel
    end
  end
  return tmpdir
end

local counter = 0
function H.tmpfile(name, content)
  counter = counter + 1
  local path = H.tmpdir() .. "/" .. (name or ("f" .. counter))
  if content then
    local f = assert(io.open(path, "w"))
    f:write(content)
    f:close()
  end
  return path
end

-- Write data to path as it is (bytes), replacing what was there.
function H.write(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

function H.read(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

function H.quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- Run a shell command; returns exit status, stdout, stderr.
function H.sh(cmd)
  counter = counter + 1
  local out = H.tmpdir() .. "/out" .. counter
  local err = H.tmpdir() .. "/err" .. counter
  local ok, how, code = os.execute(cmd .. " >" .. out .. " 2>" .. err)
  -- LuaJIT/5.1 os.execute returns the raw wait status
  local status = type(ok) == "number" and math.floor(ok / 256) or (code or (ok and 0 or 1))
  local so, se = H.read(out) or "", H.read(err) or ""
  os.remove(out)
  os.remove(err)
  return status, so, se
end

-- Run the specula binary with arguments (a list, quoted for the shell).
-- SPECULA_WRAP runs the binary under a tool (the CI's valgrind pass).
H.wrap = os.getenv("SPECULA_WRAP")

function H.specula(args, env)
  local parts = {}
  for k, v in pairs(env or {}) do parts[#parts + 1] = k .. "=" .. H.quote(v) end
  if H.wrap and H.wrap ~= "" then parts[#parts + 1] = H.wrap end
  parts[#parts + 1] = H.quote(H.bin)
  for _, a in ipairs(args) do parts[#parts + 1] = H.quote(a) end
  return H.sh(table.concat(parts, " "))
end

-- Write a Lua script and run it with `specula run`.
function H.run_lua(code, args, env)
  local path = H.tmpfile(nil, code)
  local a = { "run", path }
  for _, x in ipairs(args or {}) do a[#a + 1] = x end
  return H.specula(a, env)
end

-- The environment of examples/cassette/agent.lua against the test server
-- at base: tens of ms per exchange (a model stream in 15 ms pieces, the MCP
-- tool 40 ms) and a lookup guess far slower than the loopback lookup, so it
-- is always late, in the recording and in any replay (no race decides a
-- verdict); then each table of ... on top.
function H.cassette_env(base, ...)
  local e = { CAS_BASE = base, SPECULA_SOURCE_DIR = H.root, CAS_PAUSE = "15", CAS_SLOW_MS = "40", CAS_SPEC_MS = "150" }
  for i = 1, select("#", ...) do
    for k, v in pairs(select(i, ...) or {}) do e[k] = v end
  end
  return e
end

-- The verdicts of a results record's hops, "accepted,late,...".
function H.verdicts(r)
  local v = {}
  for _, h in ipairs(r.stages.hops) do v[#v + 1] = h.spec end
  return table.concat(v, ",")
end

-- Start the test server; returns { port, pid, base, stop() }.
function H.server(opts)
  opts = opts or {}
  local cmd = H.quote(H.server_bin)
  if opts.files then cmd = cmd .. " --files " .. H.quote(opts.files) end
  local p = assert(io.popen(cmd .. " 2>/dev/null & echo BGPID $!", "r"))
  local line, pid, port
  -- first the shell's background pid, then the server's PORT line
  for _ = 1, 2 do
    line = p:read("*l")
    if not line then break end
    local bg = line:match("^BGPID (%d+)")
    if bg then pid = tonumber(bg) end
    local pt, sp = line:match("^PORT (%d+) PID (%d+)")
    if pt then port, pid = tonumber(pt), tonumber(sp) end
  end
  assert(port, "test server did not start")
  local s = { port = port, pid = pid, pipe = p, base = "http://127.0.0.1:" .. port }
  function s.url(path) return s.base .. path end
  function s.stop()
    os.execute("kill " .. pid .. " 2>/dev/null")
    p:close()
  end
  return s
end

function H.json()
  return require("cjson")
end

-- ---- what a spec needs from the machine ----------------------------------
-- A spec that needs something the machine lacks is pending, with a message
-- saying what and how to install it; in CI (CI set, as .ci/run sets it) it
-- fails instead, so nothing is skipped there by accident.
function H.in_ci()
  local ci = os.getenv("CI")
  return ci ~= nil and ci ~= "" and ci ~= "false" and ci ~= "0"
end

-- Pending (busted's pending, which the spec passes in: helpers run outside
-- its environment) with why, or an error in CI. Returns false, for
-- `if not H.require_or_pend(pending, why) then return end`.
function H.require_or_pend(pend, why)
  if H.in_ci() then error(why, 2) end
  pend(why)
  return false
end

-- Node.js runs the MCP test server (spec/support/mcp_testserver.js) and the
-- npm servers: nil when `node` is there (spec/support/deps.lua: the node
-- .ci/deps pins, first on PATH), else why not.
local deps = require "support.deps"
local node_why
function H.node_missing()
  if node_why == nil then node_why = deps.node() or false end
  return node_why or nil
end

-- Inside an it(): true when Node.js is there; else pending (an error in
-- CI) and false: `if not H.need_node(pending) then return end`.
function H.need_node(pend)
  local why = H.node_missing()
  if not why then return true end
  if H.in_ci() then error(why, 2) end
  pend(why)
  return false
end

-- Decode a JSONL string into a list of tables.
-- The last line of a program's output that is a JSON object, decoded (the
-- scripts under spec/functional/scripts print their counts that way).
function H.last_json(out)
  local line
  for l in out:gmatch("[^\n]+") do if l:sub(1, 1) == "{" then line = l end end
  assert(line, "no JSON line in output: " .. out)
  return require("cjson").decode(line)
end

function H.jsonl(text)
  local cj = require "cjson"
  local out = {}
  for line in text:gmatch("[^\n]+") do out[#out + 1] = cj.decode(line) end
  return out
end

-- The text of the top-level "provenance" object of a canonical record line
-- and where it is (first, last), or nil. (Written here, apart from
-- specula.provenance, so the specs check the file format, not the reader.)
local function prov_span(line)
  local i = line:find('"provenance":{', 1, true)
  if not i then return nil end
  local j = i + #'"provenance":'
  local p, depth = j, 0
  while p <= #line do
    local c = line:sub(p, p)
    if c == '"' then
      p = p + 1
      while line:sub(p, p) ~= '"' do
        if line:sub(p, p) == "\\" then p = p + 1 end
        p = p + 1
      end
    elseif c == "{" then depth = depth + 1
    elseif c == "}" then
      depth = depth - 1
      if depth == 0 then return line:sub(j, p), j, p end
    end
    p = p + 1
  end
  error("unbalanced provenance object in " .. line:sub(1, 200))
end
H.prov_span = prov_span

-- The lines of a records file (its text) as a reader sees them: a record
-- whose provenance names its run only ({"query":Q,"run":R}) given the whole
-- provenance of the latest record of that run above it, with its own query
-- (an error when there is none: the rule of docs/cli.md "provenance").
-- Returns the lines and how many carried a whole provenance.
function H.whole_lines(text)
  local out, whole, nwhole = {}, {}, 0
  for line in text:gmatch("[^\n]+") do
    local ptext, a, b = prov_span(line)
    if ptext then
      local q, run = ptext:match('^{"query":"(%x+)","run":"(%x+)"}$')
      if q then
        local w = whole[run]
        assert(w, "a short provenance with no whole one of its run above it: " .. line:sub(1, 200))
        line = line:sub(1, a - 1) .. (w:gsub('"query":"%x+"', '"query":"' .. q .. '"')) .. line:sub(b + 1)
      else
        local r = ptext:match('"run":"(%x+)","version":[^,]*}$')
        assert(r, "a provenance neither whole nor short: " .. ptext)
        whole[r] = ptext
        nwhole = nwhole + 1
      end
    end
    out[#out + 1] = line
  end
  return out, nwhole
end

-- The records of a records file's text, decoded, each with its whole
-- provenance (H.whole_lines); and how many lines carried a whole one.
function H.records(text)
  local lines, n = H.whole_lines(text)
  local cj = require "cjson"
  local out = {}
  for i, l in ipairs(lines) do out[i] = cj.decode(l) end
  return out, n
end

-- Strict UTF-8 check (RFC 3629): true, or false and "byte N: why". Rejects
-- stray continuation bytes, overlong forms (C0, C1, E0 80..9F, F0 80..8F),
-- UTF-16 surrogates (ED A0..BF), code points above U+10FFFF (F4 90.., F5..FF)
-- and sequences cut off by the end of the string.
function H.utf8_valid(s)
  if type(s) ~= "string" then return false, "not a string: " .. type(s) end
  local byte, n, i = string.byte, #s, 1
  while i <= n do
    local c = byte(s, i)
    local len, lo, hi  -- length and the allowed range of the second byte
    if c < 0x80 then len = 1
    elseif c >= 0xC2 and c <= 0xDF then len, lo, hi = 2, 0x80, 0xBF
    elseif c == 0xE0 then len, lo, hi = 3, 0xA0, 0xBF
    elseif c == 0xED then len, lo, hi = 3, 0x80, 0x9F
    elseif c >= 0xE1 and c <= 0xEF then len, lo, hi = 3, 0x80, 0xBF
    elseif c == 0xF0 then len, lo, hi = 4, 0x90, 0xBF
    elseif c >= 0xF1 and c <= 0xF3 then len, lo, hi = 4, 0x80, 0xBF
    elseif c == 0xF4 then len, lo, hi = 4, 0x80, 0x8F
    elseif c >= 0x80 and c <= 0xBF then return false, ("byte %d: stray continuation byte 0x%02X"):format(i, c)
    elseif c == 0xC0 or c == 0xC1 then return false, ("byte %d: overlong lead byte 0x%02X"):format(i, c)
    else return false, ("byte %d: 0x%02X starts no code point <= U+10FFFF"):format(i, c) end
    if len > 1 then
      if i + len - 1 > n then return false, ("byte %d: sequence of %d bytes cut off at the end"):format(i, len) end
      local c2 = byte(s, i + 1)
      if c2 < lo or c2 > hi then
        local why = (c == 0xED and c2 >= 0xA0 and c2 <= 0xBF) and "UTF-16 surrogate"
          or ((c == 0xE0 or c == 0xF0) and c2 >= 0x80 and c2 < lo) and "overlong form"
          or (c == 0xF4 and c2 > 0x8F and c2 <= 0xBF) and "code point above U+10FFFF"
          or "bad continuation byte"
        return false, ("byte %d: %s (0x%02X 0x%02X)"):format(i, why, c, c2)
      end
      for j = i + 2, i + len - 1 do
        local cj = byte(s, j)
        if cj < 0x80 or cj > 0xBF then
          return false, ("byte %d: bad continuation byte 0x%02X"):format(j, cj)
        end
      end
    end
    i = i + len
  end
  return true
end

return H
