-- specula.mcp.transport: the seam between an MCP session (JSON-RPC: ids,
-- pending requests, the handshake, hooks; specula.mcp.client) and the wire
-- under it. The session never knows which transport it speaks through: a
-- live one (specula.mcp.stdio, specula.mcp.http) or a wrapper around one
-- (the cassette's recorder and replayer, specula.cassette.mcp_transport).
--
-- The unit is one message: a decoded JSON-RPC 2.0 object (a request, a
-- notification or a response), the same in both directions; the transport
-- frames it (one line on stdio; a POST body, a JSON reply or an SSE event
-- over Streamable HTTP). Nothing in the interface says which end is the
-- client, so the server side of a gateway can implement it too: it reads
-- requests and sends responses where a client sends requests and reads
-- responses.
--
--   t:open(peer) -> true | nil, err
--     Connect (stdio: start the process and its reader; HTTP: nothing to
--     open). Each message read from then on goes to peer:receive(msg, via),
--     a line that is no JSON to peer:malformed(why), and the end of the
--     connection to peer:lost(why). peer.st: the counters the transport adds
--     to (exits, oversized, malformed, reconnects, listens, listen_status,
--     deleted).
--   t:send(msg) -> true | nil, err
--     A message that gets no answer: a notification, or a response to the
--     peer's request. When t.send_waits (HTTP: the POST's status) it may
--     wait; a reader that must not wait sends from a task of its own.
--   t:request(x) -> true | nil, err
--     A request that waits for its answer. x: { msg, text (msg as JSON), id,
--     what (names it in errors), timeout_ms, rpc (the engine's wait the
--     answer completes), cancel (the JSON of the notifications/cancelled to
--     send if the waiting task is cancelled) }. The transport writes x.text
--     and arms x.cancel on x.rpc; when t.answers_inline (HTTP) the answer comes on the request's own
--     channel, which it reads until x.rpc is no longer pending, else the
--     session waits on x.rpc. The answer itself reaches the session through
--     peer:receive, like every other message.
--   t:roundtrip(x, go) -> result | nil, err
--     One request to the answer the session returns for it (x: { method,
--     params, what }); go() makes it over this transport (t:request and the
--     wait). A live transport just calls go(); a wrapper may answer it
--     itself (a replay) or watch it (a recording).
--   t:set_version(v)   the protocol version the handshake agreed on (HTTP
--     sends it as a header from then on)
--   t:ready()          the session is up (HTTP opens its GET stream now
--     when asked to listen)
--   t:close()          orderly end: in a task it waits until the peer is
--     gone (stdio: the process reaped; HTTP: the session DELETEd)
--   t:abort()          release at once, the rest in the background (a
--     failed start)
-- Fields: kind ("stdio" | "http"), answers_inline and send_waits (above),
-- restartable (a lost connection may be opened again: a new process),
-- starts (how many times it was opened), offline (no peer is reached: every
-- request is answered by the transport itself, and the session starts
-- nothing), pid and session_id where they apply.
local core = require "specula.internal.core"
local sched = require "specula.internal.sched"
local ffi, C = core.ffi, core.C

local M = {}

local function pack(...) return { n = select("#", ...), ... } end

-- A task with no parent: readers, restarts and one-way sends must outlive
-- the (possibly speculative) task that happened to need them.
function M.spawn_root(fn)
  local p = C.sp_task_new(core.ctx, nil)
  if p == nil then return nil end
  local t = setmetatable({ ptr = ffi.gc(p, C.sp_task_release), id = C.sp_task_id(p) }, sched.Task)
  sched.co_table[t.id] = coroutine.create(function()
    local r = pack(xpcall(fn, sched.on_error))
    t.results = r
    if not r[1] then
      local msg = tostring(r[2])
      C.sp_task_set_error(t.ptr, msg, #msg)
    end
  end)
  return t
end

-- A text for a message: control characters as spaces, bytes that are not
-- UTF-8 replaced (a client's raw bytes went to stderr as they came), cut at
-- n (not inside a character).
function M.excerpt(s, n)
  n = n or 80
  local json = require "specula.json"
  s = json.utf8_clean((tostring(s):gsub("[%c]", " ")))
  if #s > n then return json.utf8_cut(s, n) .. "..." end
  return s
end

-- What every live transport does with a whole round trip: make it.
function M.roundtrip(_, _, go) return go() end

-- A wrapper: a table whose own methods come from `methods` and whose every
-- other field and method is the inner transport's (a method called on the
-- wrapper runs on the inner one), so a wrapper overrides only what it
-- changes. inner may be nil (a replay that reaches no server): then only
-- the wrapper's own methods exist.
function M.wrap(methods, w)
  return setmetatable(w, { __index = function(self, k)
    local v = methods[k]
    if v ~= nil then return v end
    local inner = rawget(self, "inner")
    if inner == nil then return nil end
    local iv = inner[k]
    if type(iv) == "function" then return function(_, ...) return iv(inner, ...) end end
    return iv
  end })
end

return M
