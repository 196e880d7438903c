-- bench/gateway.lua — `specula gateway` end to end: a scripted MCP client
-- (specula.mcp.connect over stdio, with a think time between calls) against
-- the upstream fixture bench/gateway_upstream.lua, once directly and once
-- through `specula gateway CONFIG` (spawned as the client's stdio server),
-- in alternation.
--
-- Predictable sessions: N calls of read_page, each page naming the next, one
-- write_note in the middle; the gateway's config allows read_page only and
-- predicts with a function (the next page the last read names, and the
-- write, which the policy must refuse) and/or the default learned
-- predictor. Prints wall per session direct and through the gateway, the
-- ratio, prefetch hits and waste (the gateway's --out record), and checks
-- that the upstream saw each write after the client sent it.
--
-- Unpredicted calls: reads of random pages at a small latency, direct,
-- through the gateway as a relay (predict off) and through the gateway with
-- the function predictor (every prediction wrong, each a wasted prefetch);
-- per-call latency p50 and p99 and what the gateway adds.
--
-- A session that fails (the server does not start, a wrong answer) is a
-- FAILED row, never a figure, and the bench ends with an error.
--   specula bench gateway [--quick] [--think-ms 1000] [--read-ms 300] [--write-ms 20]
--     [--calls 20] [--sessions 3] [--predictor function,learned] [--miss-calls 200]
--     [--miss-think-ms 5] [--miss-read-ms 0] [--upstream 'CMD ARG...']
local B = dofile(require("specula.internal.core").host.root .. "/bench/lib.lua")
local specula = require("specula")
local sched = require("specula.internal.sched")
-- a usage mistake: its message, no traceback, status 2
local function usage(msg) sched.plain_error(msg, 2) end

local o = { think = 1000, read = 300, write = 20, calls = 20, sessions = 3, preds = { "function", "learned" },
            miss_calls = 200, miss_think = 5, miss_read = 0 }
local function list(s)
  local t = {}
  for x in (s or ""):gmatch("[^,]+") do t[#t + 1] = x end
  return t
end
local function num(i)
  local v = tonumber(arg[i + 1])
  if not v or v < 0 then usage("bench gateway: " .. arg[i] .. " needs a number >= 0, got " .. tostring(arg[i + 1])) end
  return v
end
for i = 1, #arg do
  if arg[i] == "--quick" then
    o.think, o.read, o.calls, o.sessions, o.miss_calls = 200, 100, 8, 1, 50
  end
end
-- the explicit choices win over --quick's, in any order
local upstream_cmd
local i = 1
while i <= #arg do
  local skip = 2
  if arg[i] == "--quick" then skip = 1
  elseif arg[i] == "--think-ms" then o.think = num(i)
  elseif arg[i] == "--read-ms" then o.read = num(i)
  elseif arg[i] == "--write-ms" then o.write = num(i)
  elseif arg[i] == "--calls" then o.calls = num(i)
  elseif arg[i] == "--sessions" then o.sessions = num(i)
  elseif arg[i] == "--miss-calls" then o.miss_calls = num(i)
  elseif arg[i] == "--miss-think-ms" then o.miss_think = num(i)
  elseif arg[i] == "--miss-read-ms" then o.miss_read = num(i)
  elseif arg[i] == "--predictor" then
    o.preds = list(arg[i + 1])
    for _, p in ipairs(o.preds) do
      if p ~= "function" and p ~= "learned" then
        usage("bench gateway: --predictor takes function, learned or both (function,learned), got " .. p)
      end
    end
  elseif arg[i] == "--upstream" then
    upstream_cmd = list((arg[i + 1] or ""):gsub("%s+", ","))
    if #upstream_cmd == 0 then usage("bench gateway: --upstream needs a command") end
  else
    usage("bench gateway: unknown option " .. arg[i]
      .. " (known: --quick --think-ms --read-ms --write-ms --calls --sessions --predictor --miss-calls"
      .. " --miss-think-ms --miss-read-ms --upstream)")
  end
  i = i + skip
end
for _, k in ipairs({ "calls", "sessions", "miss_calls" }) do
  if o[k] < 1 or o[k] % 1 ~= 0 then usage("bench gateway: --" .. k:gsub("_", "-") .. " needs an integer >= 1") end
end
if #o.preds == 0 then usage("bench gateway: --predictor needs function, learned or both") end

local self = B.self_bin() or (B.root .. "/build/specula")
local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. dir) == 0)
local UPSTREAM = B.root .. "/bench/gateway_upstream.lua"

-- The upstream's command: the fixture at these latencies, or --upstream's.
local function upstream(read_ms, write_log)
  if upstream_cmd then return upstream_cmd end
  return { self, "run", UPSTREAM, tostring(read_ms), tostring(o.write), write_log }
end

-- The predictor of the config: the next page the last read named, then the
-- write the client will send (which the policy must refuse).
local FUNCTION_PREDICTOR = [[function(history)
    for i = #history, 1, -1 do
      local h = history[i]
      if h.tool == "read_page" then
        local sc = type(h.observation) == "table" and h.observation.structuredContent
        local nx = type(sc) == "table" and tonumber(sc.next)
        if not nx then return {} end
        return { { tool = "read_page", args = { n = nx }, confidence = 0.9 },
                 { tool = "write_note", args = { text = "note" }, confidence = 0.5 } }
      end
    end
    return {}
  end]]

local seq = 0
-- A config file: predictor kind "function", "learned" or "off".
local function config(pred, read_ms, write_log)
  seq = seq + 1
  local cmd = {}
  for j, a in ipairs(upstream(read_ms, write_log)) do cmd[j] = string.format("%q", a) end
  local predict = pred == "function" and FUNCTION_PREDICTOR or string.format("%q", pred)
  local path = string.format("%s/gateway-%d.lua", dir, seq)
  local f = assert(io.open(path, "w"))
  f:write("local specula = require 'specula'\nreturn specula.gateway {\n",
    "  servers = { doc = { command = { ", table.concat(cmd, ", "), " } } },\n",
    "  policy = { read_page = \"full\" },\n",
    "  predict = ", predict, ",\n",
    "  budget = { max_inflight = 2 },\n}\n")
  f:close()
  return path
end

local function read_file(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- The gateway writes its session's record when its stdin ends: wait for it.
local function gateway_record(out)
  local t0 = specula.real_now()
  while specula.real_now() - t0 < 10000 do
    local s = read_file(out)
    local line = s and s:match("[^\n]+")
    if line then
      local ok, r = pcall(specula.json.decode, line)
      if ok and type(r) == "table" then return r end
    end
    specula.sleep(20)
  end
  return nil
end

-- One session. kind: "direct", or a gateway predictor ("function",
-- "learned", "off"). plan: { calls, think, read, write_at, random }.
-- -> { wall (ms, first call to last answer), lat = { per call ms },
--      rec (the gateway's record), writes_early } or { err }.
local function session(kind, plan)
  seq = seq + 1
  local wlog = string.format("%s/writes-%d.log", dir, seq)
  local out = string.format("%s/record-%d.jsonl", dir, seq)
  local cmd
  if kind == "direct" then cmd = upstream(plan.read, wlog)
  else
    -- specula's MCP client closes a server's stdin and sends it SIGTERM at
    -- once: the gateway ends its session on either and writes its record
    cmd = { self, "gateway", config(kind, plan.read, wlog), "--out", out }
  end
  local client, cerr = specula.mcp.connect { command = cmd, name = "bench-" .. kind,
                                              protocol_version = "2025-11-25", max_restarts = 0, quiet = true }
  if not client then return { err = tostring(cerr) } end
  local res = { lat = {} }
  local ok, err = pcall(function()
    local tools, lerr = client:list_tools()   -- starts and initializes it, untimed
    if not tools then error(lerr, 0) end
    local page = plan.random and math.random(1, 1000000) or math.random(1, 1000)
    local sent = {}
    local t0 = specula.real_now()
    for c = 1, plan.calls do
      if c > 1 and plan.think > 0 then specula.sleep(plan.think) end
      local name, args
      if c == plan.write_at then name, args = "write_note", { text = "note" }
      else
        if plan.random then page = math.random(1, 1000000) end
        name, args = "read_page", { n = page }
      end
      local s = specula.real_now()
      if name == "write_note" then sent[#sent + 1] = s end
      local r, e = client:call(name, args)
      res.lat[#res.lat + 1] = specula.real_now() - s
      if not r then error(string.format("call %d (%s): %s", c, name, tostring(e)), 0) end
      local text = type(r.content) == "table" and r.content[1] and r.content[1].text
      if r.isError then error(string.format("call %d (%s): error result: %s", c, name, tostring(text)), 0) end
      if name == "read_page" then
        if text ~= string.format("page %d of the document. next: read_page n=%d", page, page + 1) then
          error(string.format("call %d: a wrong answer for page %d: %s", c, page, tostring(text)), 0)
        end
        page = page + 1
      elseif text ~= "noted" then
        error(string.format("call %d (write_note): a wrong answer: %s", c, tostring(text)), 0)
      end
    end
    res.wall = specula.real_now() - t0
    -- the upstream's writes, each after the client sent it
    if not upstream_cmd then
      local got = {}
      for line in (read_file(wlog) or ""):gmatch("[^\n]+") do got[#got + 1] = tonumber(line:match("^(%S+)")) end
      if #got ~= #sent then error(string.format("the upstream saw %d write(s), the client sent %d", #got, #sent), 0) end
      res.writes_early = 0
      for j, t in ipairs(got) do if t < sent[j] then res.writes_early = res.writes_early + 1 end end
    end
  end)
  client:close()
  if not ok then return { err = err } end
  if kind ~= "direct" then
    res.rec = gateway_record(out)
    if not res.rec then return { err = "the gateway wrote no record to --out" } end
  end
  return res
end

local function pct(xs, p)
  local c = {}
  for j = 1, #xs do c[j] = xs[j] end
  table.sort(c)
  if #c == 0 then return nil end
  return c[math.max(1, math.ceil(p / 100 * #c))]
end
local function median(xs) return pct(xs, 50) end

local failures = 0
local function failed(label, kind, r)
  failures = failures + 1
  print(string.format("%-9s %-9s FAILED: %s", label, kind, (tostring(r.err):gsub("\n", " "))))
end

print("machine: " .. B.machine())
print(string.format("predictable sessions: %d calls (read_page, each page names the next; one write_note at call %d),",
  o.calls, math.floor(o.calls / 2) + 1))
print(string.format(" think %d ms between calls, read_page %d ms, write_note %d ms upstream; policy: read_page full;",
  o.think, o.read, o.write))
print(string.format(" %d session(s) each, direct then through the gateway per predictor, in alternation", o.sessions))
print(string.format("%-9s %-9s %10s %10s %7s %7s %8s %6s %8s %6s", "session", "predictor", "direct s", "gateway s",
  "ratio", "hits", "launched", "waste", "refused", "early"))
io.stdout:flush()

local ratios, bests = {}, {}
local pred_plan = { calls = o.calls, think = o.think, read = o.read, write_at = math.floor(o.calls / 2) + 1 }
if o.calls < 3 then pred_plan.write_at = nil end
for s = 1, o.sessions do
  local d = session("direct", pred_plan)
  if d.err then failed(tostring(s), "direct", d) end
  for _, p in ipairs(o.preds) do
    local g = session(p, pred_plan)
    if g.err then failed(tostring(s), p, g)
    elseif not d.err then
      local sp = g.rec.speculation
      local reads = o.calls - (pred_plan.write_at and 1 or 0)
      ratios[p] = ratios[p] or {}
      ratios[p][#ratios[p] + 1] = g.wall / d.wall
      -- the best a prefetch can do: every read after the first hidden whole
      bests[#bests + 1] = (d.wall - (reads - 1) * o.read) / d.wall
      print(string.format("%-9d %-9s %10.3f %10.3f %7.3f %7s %8d %6d %8d %6s", s, p, d.wall / 1000, g.wall / 1000,
        g.wall / d.wall, sp.hits .. "/" .. reads, sp.launched, sp.waste, sp.refused,
        tostring((g.writes_early or 0) + (d.writes_early or 0))))
    end
    io.stdout:flush()
  end
end
for _, p in ipairs(o.preds) do
  local m = ratios[p] and median(ratios[p])
  if m then
    print(string.format("median ratio, %s predictor: %.3f (target: <= 0.80 when predictable: %s; nominal best"
      .. " here, every read after the first hidden whole: %.3f)", p, m, m <= 0.8 and "met" or "NOT met", median(bests)))
  end
end
print("(wall: the client's first call to its last answer, think times included; hits: reads served from a")
print(" prefetch, of the reads; waste: prefetches cancelled unused; refused: proposals the policy did not")
print(" allow (the write); early: writes the upstream saw before the client sent them, must be 0)")
print("")

-- Unpredicted calls
print(string.format("unpredicted calls: %d reads of random pages a session, read_page %d ms upstream, think %d ms,",
  o.miss_calls, o.miss_read, o.miss_think))
print(string.format(" %d session(s) of each path in alternation; per-call latency at the client", o.sessions))
local miss_plan = { calls = o.miss_calls, think = o.miss_think, read = o.miss_read, random = true }
local paths = { { "direct", "direct" }, { "off", "gateway, relay (predict off)" },
                { "function", "gateway, predictor always wrong" } }
local lat = {}
for s = 1, o.sessions do
  for _, p in ipairs(paths) do
    local r = session(p[1], miss_plan)
    if r.err then failed(tostring(s), p[1] == "off" and "relay" or p[1], r)
    else
      lat[p[1]] = lat[p[1]] or {}
      for _, x in ipairs(r.lat) do lat[p[1]][#lat[p[1]] + 1] = x end
      if p[1] == "function" then
        lat.hits = (lat.hits or 0) + r.rec.speculation.hits
        lat.waste = (lat.waste or 0) + r.rec.speculation.waste
      end
    end
  end
end
print(string.format("%-34s %8s %8s %8s %10s %10s", "path", "calls", "p50 ms", "p99 ms", "added p50", "added p99"))
local d50, d99 = lat.direct and pct(lat.direct, 50), lat.direct and pct(lat.direct, 99)
for _, p in ipairs(paths) do
  local l = lat[p[1]]
  if l then
    local p50, p99 = pct(l, 50), pct(l, 99)
    local a50 = (d50 and p[1] ~= "direct") and string.format("%.3f", p50 - d50) or "-"
    local a99 = (d99 and p[1] ~= "direct") and string.format("%.3f", p99 - d99) or "-"
    print(string.format("%-34s %8d %8.3f %8.3f %10s %10s", p[2], #l, p50, p99, a50, a99))
  else
    print(string.format("%-34s FAILED (no session completed)", p[2]))
  end
end
print("(added: the path's percentile minus direct's, over all its calls; at p99 it follows the host's load and")
print(" can come out negative in a small run)")
if lat["function"] then
  print(string.format("(predictor always wrong: %d hits, %d wasted prefetches)", lat.hits, lat.waste))
end
if d50 and lat["function"] then
  local a = pct(lat["function"], 50) - d50
  print(string.format("added p50 to a call the gateway did not predict: %.3f ms (target: <= 1 ms: %s)", a,
    a <= 1 and "met" or "NOT met"))
end
io.stdout:flush()
os.execute("rm -rf " .. dir)
if failures > 0 then
  sched.plain_error(string.format("bench gateway: %d session(s) failed", failures), 1)
end
