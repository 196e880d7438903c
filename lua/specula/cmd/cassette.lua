-- specula cassette ls|show|stats DIR: read a cassette written by
-- `specula run --record DIR` (see specula.cassette for the format).
local cassette = require "specula.cassette"
local json = require "specula.json"
local output = require "specula.internal.output"
local lab = require "specula.lab"

local format, concat = string.format, table.concat

local M = {
  name = "cassette",
  synopsis = "ls|show|stats DIR [options]",
  summary = "the exchanges a run recorded with --record DIR",
  about = [[
  ls DIR       the files, their exchanges and any cut-off line
  show DIR     one line per exchange (JSONL with --json); with --kind job,
               the window jobs' recorded lengths; with --kind commit, what
               each query committed
  stats DIR    counts, errors and latency by kind (job: the window jobs'
               lengths, launch to result); --kind and --query as for show]],
  options = {
    { "--kind", key = "kind", arg = "K", shown = "every kind but job", help = "show, stats: only exchanges of this kind (http, mcp, spec, obs, job or commit; stats: not commit)" },
    { "--query", key = "query", arg = "ID", shown = "every query", help = "show, stats: only this query's exchanges" },
    { "--json", key = "json", flag = true, help = "JSON instead of the table (show: JSONL)" },
  },
}

local fail = lab.failer("specula cassette")

-- the kinds a cassette line can have (specula.cassette): any other --kind
-- would silently show nothing
local KINDS = { "http", "mcp", "spec", "obs", "job", "commit" }

function M.check(o)
  local sub, dir = o.args[1], o.args[2]
  if sub ~= "ls" and sub ~= "show" and sub ~= "stats" then
    return sub and ("unknown subcommand '" .. tostring(sub) .. "'") or "a subcommand is needed"
  end
  if not dir then return sub .. " needs a cassette directory" end
  if o.args[3] then return "unknown option '" .. o.args[3] .. "'" end
  if sub == "ls" and (o.kind or o.query) then
    return "--" .. (o.kind and "kind" or "query") .. " is an option of cassette show and stats, not of ls (ls lists "
      .. "the files)"
  end
  if sub == "stats" and o.kind == "commit" then
    return "--kind commit: stats counts exchanges and jobs, not commits (`specula cassette show DIR --kind commit` "
      .. "lists them)"
  end
  if o.kind then
    local known = false
    for _, k in ipairs(KINDS) do known = known or k == o.kind end
    if not known then
      return format("--kind: unknown kind '%s' (the kinds: %s)", tostring(o.kind), concat(KINDS, ", "))
    end
  end
end

-- An HTTP request's body on one line: scrubbed first as a message (a
-- secret the cut would split goes whole), white space folded, cut at
-- BODY_MAX bytes.
local BODY_MAX = 160
local function body_text(body)
  if type(body) ~= "string" or body == "" then return "" end
  local b = output.clean(body, "message"):gsub("%s+", " ")
  if #b > BODY_MAX then b = json.utf8_cut(b, BODY_MAX - 3) .. "..." end
  return " " .. b
end

-- What a call the recording cancelled asked for: a lone start line has
-- no request, only its key ("GET url\nbody", "MCP server method\nparams",
-- "SPEC tool\nargs").
local function what_key(r)
  local head, rest = tostring(r.key):match("^([^\n]*)\n?(.*)$")
  if r.kind == "mcp" then
    local server, method = head:match("^MCP (%S+) (%S+)")
    local p = json.decode(rest)
    local name = type(p) == "table" and type(p.name) == "string" and p.name
    local args = type(p) == "table" and p.arguments
    local ok, a = true, nil
    if args ~= nil then ok, a = pcall(json.canonical, args) end
    if server then
      return format("mcp %s %s%s%s", server, method, name and (" " .. name) or "", args ~= nil and (" " .. (ok and a or "?")) or "")
    end
  elseif r.kind == "spec" then
    local tool = head:match("^SPEC (.*)$")
    if tool then return format("speculator %s %s", tool, rest) end
  elseif r.kind == "http" then
    return head .. body_text(rest)
  end
  return (tostring(r.key):gsub("\n", " "))
end

-- What the exchange asked for, one line.
local function what(r)
  if r.kind == "commit" then
    local calls = {}
    for i, c in ipairs(type(r.calls) == "table" and r.calls or {}) do calls[i] = tostring(c.tool) end
    if r.failed then return "commit: the query failed" end
    if r.paths == nil then return "commit: path not known" end
    return format("commit %d call%s%s%s", #calls, #calls == 1 and "" or "s", #calls > 0 and ": " or "",
      concat(calls, ", "))
  end
  if r.req == nil and r.kind ~= "job" then return what_key(r) end
  local q = r.req or {}
  if r.kind == "http" then return format("%s %s%s", tostring(q.method), tostring(q.url), body_text(q.body)) end
  if r.kind == "mcp" then
    local p = q.params
    local name = type(p) == "table" and p.name
    local cursor = type(p) == "table" and p.cursor
    -- the call's arguments (tools/call, prompts/get) or, for another
    -- method, whatever else it sent (a resource's uri): what told two
    -- calls of one tool apart
    local rest = type(p) == "table" and p.arguments
    if rest == nil and type(p) == "table" then
      local other = {}
      for k, v in pairs(p) do
        if k ~= "name" and k ~= "cursor" then other[k], rest = v, other end
      end
    end
    local ok, a = true, nil
    if rest ~= nil then ok, a = pcall(json.canonical, rest) end
    return format("mcp %s %s%s%s%s", tostring(q.server), tostring(q.method), name and (" " .. tostring(name)) or "",
      cursor and (" cursor " .. tostring(cursor)) or "", rest ~= nil and (" " .. (ok and a or "?")) or "")
  end
  if r.kind == "spec" then
    local ok, a = pcall(json.canonical, q.args)
    return format("speculator %s %s", tostring(q.tool), ok and a or "?")
  end
  return (r.key:gsub("\n", " "))
end
M.what = what

local function outcome(r)
  if r.start then return "cancelled" end
  if r.kind == "job" or r.kind == "commit" then return r.failed and "failed" or "ok" end
  if r.err then return "error: " .. tostring(r.err):gsub("%s+", " "):sub(1, 80) end
  if r.kind == "http" then
    local s = r.res and tostring(r.res.status) or "?"
    if r.stream then s = s .. format(" stream %d events", r.events and #r.events or 0) end
    return s
  end
  if r.kind == "spec" then
    local res = r.res or {}
    if res.cands then return format("%d candidates", #res.cands) end
    return "1 value"
  end
  return "ok"
end

local function pct(sorted, p)
  if #sorted == 0 then return 0 end
  local i = math.max(1, math.min(#sorted, math.ceil(p * #sorted)))
  return sorted[i]
end

function M.main(o)
  local sub, dir = o.args[1], o.args[2]
  local recs, files = lab.cassette(dir)
  if not recs then return fail(files) end
  -- the answers (and lone start lines: cancelled calls), then the job
  -- lines; commit lines (what each query committed) are no exchanges
  local ex, timings = {}, 0
  -- show's and stats' --kind and --query
  local function wanted(r)
    return (not o.kind or r.kind == o.kind) and (not o.query or tostring((r.meta or {}).query) == o.query)
  end
  for _, r in ipairs(cassette.entries(recs)) do
    if r.kind == "job" then timings = timings + 1 end
    if r.kind == "commit" then
      if o.kind == "commit" then ex[#ex + 1] = r end
    elseif r.kind ~= "job" or sub == "stats" or o.kind == "job" then ex[#ex + 1] = r end
  end
  if sub == "ls" and o.json then
    local list = {}
    for _, f in ipairs(files) do
      local h = f.header or {}
      list[#list + 1] = { path = f.path, records = f.records, created = h.created, clock = h.clock,
        dropped = f.dropped }
    end
    output.wrap(io.stdout, "json"):write(json.encode({ dir = dir, files = json.array(list), exchanges = #ex,
      job_timings = timings }), "\n")
  elseif sub == "ls" then
    for _, f in ipairs(files) do
      local h = f.header or {}
      output.stdout(format("%s\t%d lines\tcreated %s\tclock %s%s\n", f.path, f.records, tostring(h.created),
        tostring(h.clock), f.dropped > 0 and format("\t%d cut-off line dropped", f.dropped) or ""))
    end
    output.stdout(format("%d exchanges and %d job timings in %d file(s)\n", #ex, timings, #files))
  elseif sub == "show" then
    for _, r in ipairs(ex) do
      local m = r.meta or {}
      if wanted(r) then
        if o.json then
          local c = {}
          for k, v in pairs(r) do if k ~= "file" and k ~= "line" then c[k] = v end end
          output.wrap(io.stdout, "json"):write(json.encode(c), "\n")
        else
          -- a call cancelled before it answered has no latency
          local ms = tonumber(r.ms) and format("%.1f ms", r.ms) or "- ms"
          output.stdout(format("%-5s #%d\t%s\t%s\t%s\tquery %s hop %s thread %s%s%s\n", r.kind, r.n, what(r),
            outcome(r), ms, tostring(m.query or "-"), tostring(m.hop or "-"), tostring(m.thread or "-"),
            m.job and (" " .. tostring(m.job)) or "", m.speculative and " speculative" or ""))
        end
      end
    end
  else
    -- --kind and --query: the rows of those exchanges only
    local sel = {}
    for _, r in ipairs(ex) do if wanted(r) then sel[#sel + 1] = r end end
    ex = sel
    local by = {}
    local order = {}
    for _, r in ipairs(ex) do
      local s = by[r.kind]
      if not s then
        s = { kind = r.kind, n = 0, errors = 0, cancelled = 0, streams = 0, lat = {}, queries = {} }
        by[r.kind] = s
        order[#order + 1] = r.kind
      end
      s.n = s.n + 1
      if r.start then s.cancelled = s.cancelled + 1
      else
        if r.err or r.failed then s.errors = s.errors + 1 end
        if r.stream then s.streams = s.streams + 1 end
        s.lat[#s.lat + 1] = tonumber(r.ms) or 0
      end
      if r.meta and r.meta.query ~= nil then s.queries[tostring(r.meta.query)] = true end
    end
    table.sort(order)
    local rows = {}
    for _, k in ipairs(order) do
      local s = by[k]
      table.sort(s.lat)
      local sum = 0
      for _, v in ipairs(s.lat) do sum = sum + v end
      local nq = 0
      for _ in pairs(s.queries) do nq = nq + 1 end
      rows[#rows + 1] = { kind = k, exchanges = s.n, errors = s.errors, cancelled = s.cancelled, streams = s.streams,
        queries = nq, mean_ms = #s.lat > 0 and sum / #s.lat or 0, p50_ms = pct(s.lat, 0.5), p95_ms = pct(s.lat, 0.95) }
    end
    if o.json then
      output.wrap(io.stdout, "json"):write(json.encode({ dir = dir, files = #files, exchanges = #ex,
        kinds = json.array(rows) }), "\n")
    else
      output.stdout(format("%-5s %9s %6s %9s %7s %7s %9s %9s %9s\n", "kind", "exchanges", "errors", "cancelled",
        "streams", "queries", "mean ms", "p50 ms", "p95 ms"))
      for _, r in ipairs(rows) do
        output.stdout(format("%-5s %9d %6d %9d %7d %7d %9.1f %9.1f %9.1f\n", r.kind, r.exchanges, r.errors,
          r.cancelled, r.streams, r.queries, r.mean_ms, r.p50_ms, r.p95_ms))
      end
    end
  end
end

return M
