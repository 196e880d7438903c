-- The server side of stdio (specula.mcp.serve_stdio over engine/sp_stdio.c):
-- this process's own stdin read by lines on the loop and its stdout
-- written, whatever stdin is (a pipe, a file, /dev/null, a socket): every
-- line reaches the peer, a last line without its newline too, a malformed
-- one and an oversized one are told apart, the end of stdin is lost(), and
-- stdout carries only what the transport writes (print goes to stderr).
local H = require "support.helpers"
local cjson = require "cjson"

local ECHO = [[
local ss = require "specula.mcp.serve_stdio"
local sched = require "specula.internal.sched"
local t = ss.new{ max_message_bytes = 1000 }
local done, n = false, 0
assert(t:open{ st = {},
  receive = function(_, msg, via, line) n = n + 1; t:send({ echo = msg, n = n, via = via, len = #line }) end,
  malformed = function(_, why) io.stderr:write("MALFORMED ", why, "\n") end,
  warn = function(_, why) io.stderr:write("WARN ", why, "\n") end,
  fail = function(_, id, why) t:send({ id = id, error = why }) end,
  lost = function(_, why) io.stderr:write("LOST ", why, "\n"); done = true end })
local again, aerr = t:open{}
io.stderr:write("AGAIN ", tostring(again), " ", tostring(aerr), "\n")
print("printed text")
io.write("written text\n")
while not done do sched.sleep(5) end
]]

local INPUT = '{"a":1}\n{"b":[1,2]}\r\nnot json\n\n{"id":7,"x":"' .. string.rep("x", 2000) .. '"}\n{"c":"\\u00e9"}'

local function lines(out)
  local l = {}
  for s in out:gmatch("[^\n]+") do l[#l + 1] = cjson.decode(s) end
  return l
end

local function check(status, out, err)
  assert.are.equal(0, status, err)
  local l = lines(out)
  local echoed, failed = {}, nil
  for _, m in ipairs(l) do
    if m.echo then echoed[#echoed + 1] = m else failed = m end
  end
  assert.are.equal(3, #echoed)
  assert.are.same({ a = 1 }, echoed[1].echo)
  assert.are.same({ b = { 1, 2 } }, echoed[2].echo)
  assert.are.equal(11, echoed[2].len)          -- the text without its \r\n
  assert.are.same({ c = "é" }, echoed[3].echo)  -- the last line had no newline
  assert.are.equal("stdin", echoed[1].via)
  assert.are.equal(7, failed.id)
  assert.truthy(failed.error:find("larger than max_message_bytes (1000)", 1, true))
  assert.truthy(err:find("MALFORMED the client (stdio): malformed JSON on stdin", 1, true))
  assert.truthy(err:find("LOST stdin closed", 1, true))
  assert.truthy(err:find("AGAIN nil EBUSY", 1, true))
  -- nothing but the transport's lines on stdout
  assert.truthy(err:find("printed text", 1, true))
  assert.truthy(err:find("written text", 1, true))
  assert.falsy(out:find("text", 1, true))
end

describe("serve_stdio", function()
  local script, input
  before_each(function()
    script = H.tmpfile("echo.lua", ECHO)
    input = H.tmpfile("in.txt", INPUT)
  end)

  it("reads a pipe by lines and writes a pipe", function()
    check(H.sh("(cat " .. H.quote(input) .. " | " .. H.quote(H.bin) .. " run " .. H.quote(script) .. " | cat)"))
  end)

  it("reads a regular file and writes one", function()
    local out = H.tmpdir() .. "/out.jsonl"
    local status, _, err = H.sh("(" .. H.quote(H.bin) .. " run " .. H.quote(script) .. " <" .. H.quote(input)
      .. " >" .. H.quote(out) .. ")")
    check(status, H.read(out), err)
  end)

  it("reads a socket (what a client that spawns its server gives) both ways", function()
    local py = H.tmpfile("sock.py", [==[
import socket, subprocess, sys
a, b = socket.socketpair()
p = subprocess.Popen([sys.argv[1], 'run', sys.argv[2]], stdin=b, stdout=b, stderr=subprocess.PIPE)
b.close()
a.sendall(open(sys.argv[3], 'rb').read())
a.shutdown(socket.SHUT_WR)
out = b''
while True:
    d = a.recv(65536)
    if not d: break
    out += d
err = p.stderr.read()
sys.stdout.write(out.decode())
sys.stderr.write(err.decode())
sys.exit(p.wait())
]==])
    check(H.sh("python3 " .. H.quote(py) .. " " .. H.quote(H.bin) .. " " .. H.quote(script) .. " " .. H.quote(input)))
  end)

  it("reads a terminal and writes one (a pty from script(1)), ending at ^D", function()
    if os.execute("command -v script >/dev/null 2>&1") ~= 0 then
      pending("script(1) (util-linux) is not installed: no pty to test with")
      return
    end
    local status, out, err = H.sh("(sleep 1; printf '{\"t\":1}\\n'; sleep 1; printf '\\004') | script -qc "
      .. H.quote(H.quote(H.bin) .. " run " .. H.quote(script)) .. " /dev/null")
    assert.are.equal(0, status, err)
    assert.truthy(out:find('{"echo":{"t":1}', 1, true) or out:find('"echo":{"t":1}', 1, true), out)
    assert.truthy(out:find("LOST stdin closed", 1, true), out)
  end)

  it("ends at once on an empty stdin (/dev/null)", function()
    local status, out, err = H.sh(H.quote(H.bin) .. " run " .. H.quote(script) .. " </dev/null")
    assert.are.equal(0, status, err)
    assert.are.equal("", out)
    assert.truthy(err:find("LOST stdin closed", 1, true))
  end)
end)
