-- The secrets property: random secrets (printable ASCII; quotes and
-- backslashes; non-ASCII letters; bytes that are not UTF-8) x every form a
-- server can echo them in x every output of the process. Each secret only
-- reaches specula through the environment and the declarations the engine
-- makes itself (a {env.NAME} header template, a client's credential header,
-- an MCP server's environment) or --secret-env; the test server's /reflect
-- echoes it back encoded (raw, percent in either case and with "+",
-- JSON-escaped three ways, HTML references three ways, Base64 and URL-safe
-- Base64 at the three alignments, padded or not, hex in either case, in a
-- body that is not UTF-8, and cut across two chunks of a stream), the MCP
-- test server's `env` tool the same in its own ways. The agent carries each
-- echo through tool arguments, speculators, verifier reasons and a
-- predictor's failure. Every output is then read back by
-- spec/support/leakcheck.lua (its own decoders, nothing shared with the
-- scrubber) and must not hold the secret in any decoded view; each
-- (secret, encoding, output) counted also shows "[redacted]" where the
-- secret was, so no combination passes by never carrying it.
--   outputs: records (--out), records on stdout, the tape's http, mcp, obs,
--   spec, job and commit lines, the trace, stderr, the --summary of `specula
--   compare`, its table on stdout, the `specula report` page.
-- SPECULA_PROP_SEED picks other secrets (the seed in use is printed).
local H = require "support.helpers"
local L = require "support.leakcheck"
local cjson = require "cjson"

local NODE = os.getenv("SPECULA_NODE") or "node"
local MCP_SERVER = H.root .. "/spec/support/mcp_testserver.js"
local SEED = tonumber(os.getenv("SPECULA_PROP_SEED") or "") or 20251125

---------------------------------------------------------------------------
-- secrets
---------------------------------------------------------------------------

-- A small deterministic generator (the same secrets on every machine).
local state = SEED
local function rnd(n)
  state = (state * 1103515245 + 12345) % 2147483648
  return state % n + 1
end
local function pick(list) return list[rnd(#list)] end

local ALNUM = {}
for c in ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"):gmatch(".") do ALNUM[#ALNUM + 1] = c end
local PUNCT = { "-", "_", ".", ":", "/", "+", "=", "@", "!", "*", "(", ")", "$", "~", ",", ";", "?", "#", "%", "&",
                "<", ">", "'", "[", "]", "{", "}", "^", "`", "|" }
local NONASCII = { "ä", "ö", "ü", "ß", "é", "ñ", "ø", "Ж", "λ", "日", "本", "€", "😀", "𝄞" }
local NOTUTF8 = { "\255", "\254", "\128", "\191", "\192", "\193", "\245", "\248", "\237\160\128", "\195(" }

local function make(kind)
  local parts = { pick(ALNUM) }
  local n = 9 + rnd(8)
  for _ = 1, n do
    local r = rnd(10)
    if kind == "ascii" then
      parts[#parts + 1] = r <= 6 and pick(ALNUM) or pick(PUNCT)
    elseif kind == "quotes" then
      parts[#parts + 1] = r <= 2 and '"' or r <= 4 and "\\" or r <= 8 and pick(ALNUM) or pick(PUNCT)
    elseif kind == "nonascii" then
      parts[#parts + 1] = r <= 4 and pick(NONASCII) or pick(ALNUM)
    else
      parts[#parts + 1] = r <= 3 and pick(NOTUTF8) or pick(ALNUM)
    end
  end
  if kind == "quotes" then parts[#parts + 1] = '"\\' end
  if kind == "nonascii" then parts[#parts + 1] = "ä😀" end
  if kind == "bytes" then parts[#parts + 1] = "\255x" end
  parts[#parts + 1] = pick(ALNUM)   -- a header value is trimmed: no blank at either end
  return table.concat(parts)
end

local function utf8_valid(s)
  return H.utf8_valid(s)
end

---------------------------------------------------------------------------
-- the encodings, as the test servers write them (mirrored here for the
-- report's and compare's input, and to check the checker)
---------------------------------------------------------------------------

local function codepoints(s)
  local out, i = {}, 1
  while i <= #s do
    local c = s:byte(i)
    local n = c < 0x80 and 1 or (c >= 0xC2 and c < 0xE0) and 2 or (c >= 0xE0 and c < 0xF0) and 3
      or (c >= 0xF0 and c < 0xF5) and 4 or 0
    local seq = n > 0 and s:sub(i, i + n - 1) or nil
    if n > 1 and not (#seq == n and utf8_valid(seq)) then n = 0 end
    if n == 0 then
      out[#out + 1] = { bad = true, b = s:sub(i, i), cp = c }
      i = i + 1
    else
      local cp = n == 1 and c or c % (2 ^ (7 - n))
      for j = 2, n do cp = cp * 64 + s:byte(i + j - 1) % 64 end
      out[#out + 1] = { b = s:sub(i, i + n - 1), cp = cp }
      i = i + n
    end
  end
  return out
end

local function u(cp)
  if cp >= 0x10000 then
    local v = cp - 0x10000
    return string.format("\\u%04X\\u%04x", 0xD800 + math.floor(v / 1024), 0xDC00 + v % 1024)
  end
  return string.format("\\u%04x", cp)
end

local B64A = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local function b64(s, url, pad)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local k = c and 4 or (b and 3 or 2)
    for j = 1, 4 do
      local v = math.floor(n / 2 ^ (24 - 6 * j)) % 64
      if j <= k then out[#out + 1] = B64A:sub(v + 1, v + 1) elseif pad then out[#out + 1] = "=" end
    end
  end
  local r = table.concat(out)
  if url then r = r:gsub("%+", "-"):gsub("/", "_") end
  return r
end

local ENCODE = {}
ENCODE.raw = function(s) return s end
local function pct(s, fmt, plus)
  return (s:gsub("[^%w%-%._~]", function(c)
    if plus and c == " " then return "+" end
    return string.format(fmt, c:byte())
  end))
end
ENCODE.pct = function(s) return pct(s, "%%%02X") end
ENCODE.pctl = function(s) return pct(s, "%%%02x") end
ENCODE.plus = function(s) return pct(s, "%%%02X", true) end
local function json_like(s, ascii, all)
  local out = {}
  for _, c in ipairs(codepoints(s)) do
    if c.bad then out[#out + 1] = u(c.cp)
    elseif c.cp >= 0x80 then out[#out + 1] = ascii and u(c.cp) or c.b
    elseif all or c.cp < 0x20 or c.cp == 0x7f then out[#out + 1] = u(c.cp)
    elseif c.b == '"' or c.b == "\\" then out[#out + 1] = "\\" .. c.b
    else out[#out + 1] = c.b end
  end
  return table.concat(out)
end
ENCODE.json = function(s) return json_like(s, false, false) end
ENCODE.jsona = function(s) return json_like(s, true, false) end
ENCODE.jsonu = function(s) return json_like(s, true, true) end
ENCODE.html = function(s)
  local out = {}
  for _, c in ipairs(codepoints(s)) do out[#out + 1] = "&#" .. c.cp .. ";" end
  return table.concat(out)
end
ENCODE.htmlx = function(s)
  local out = {}
  for _, c in ipairs(codepoints(s)) do out[#out + 1] = string.format("&#x%X;", c.cp) end
  return table.concat(out)
end
local NAMED = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#x27;" }
ENCODE.htmln = function(s) return (s:gsub("[&<>\"']", NAMED)) end

-- The encodings of the property: name -> { query spec, encoder }
local ENCODINGS = {}
local function add(label, spec, enc) ENCODINGS[#ENCODINGS + 1] = { label = label, spec = spec, enc = enc } end
for _, e in ipairs({ "raw", "pct", "pctl", "plus", "json", "jsona", "jsonu", "html", "htmlx", "htmln" }) do
  add(e, "reflect:" .. e .. ":0:1:0", ENCODE[e])
end
for pre = 0, 2 do
  add("b64-p" .. pre, "reflect:b64:" .. pre .. ":1:0", function(s) return b64(string.rep("@", pre) .. s, false, true) end)
  add("b64url-p" .. pre, "reflect:b64url:" .. pre .. ":1:0", function(s) return b64(string.rep("@", pre) .. s, true, true) end)
end
add("b64-nopad", "reflect:b64:1:0:0", function(s) return b64("@" .. s, false, false) end)
add("hex", "reflect:hex:1:1:0", function(s) return "40" .. (s:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end)
add("HEX", "reflect:HEX:0:1:0", function(s) return (s:gsub(".", function(c) return string.format("%02X", c:byte()) end)) end)
add("binary-body", "reflect:raw:0:1:1", ENCODE.raw)
add("stream-split", "split", ENCODE.raw)
-- the MCP server's own forms (JavaScript's encoders)
add("mcp-text", "mcp:text", ENCODE.raw)
add("mcp-json", "mcp:json", ENCODE.json)
add("mcp-jsona", "mcp:jsona", ENCODE.jsona)
add("mcp-pct", "mcp:pct", ENCODE.pct)
add("mcp-b64", "mcp:b64", function(s) return b64(s, false, true) end)
add("mcp-hex", "mcp:hex", function(s) return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end)
add("mcp-html", "mcp:html", ENCODE.html)

---------------------------------------------------------------------------
-- the agent
---------------------------------------------------------------------------

local AGENT = [=[
-- specs/secrets_property: each query is one encoding (see the spec)
local specula = require "specula"
local BASE = os.getenv("BASE")
local tools = {}
tools.reflect = specula.tools.http {
  url = BASE .. "/reflect?h=x-auth-token&enc={enc}&pre={pre}&pad={pad}&bin={bin}",
  headers = { ["X-Auth-Token"] = "{env.PROP_VALUE}" }, retry = false,
  result = function(res) return (res.body:gsub("^\255\254 ", "")) end,
  speculate = function(args) return "a guess for " .. args.enc end }
tools.note = specula.tools.lua(function(args) return "noted: " .. args.text end,
  { speculate = function(args) return args.text end })
if os.getenv("PROP_MCP_ON") == "1" then
  local client = assert(specula.mcp.connect { command = { os.getenv("PROP_NODE"), os.getenv("PROP_MCP") }, name = "ts",
    env = { PROP_MCP_SECRET = os.getenv("PROP_VALUE") } })
  tools.env = specula.tools.mcp(client, { include = { "env" } }).env
  tools.env.speculate = function(args) return "a guess for " .. args.as end
end
local model = specula.llm.openai.new { model = "m", retry = false,
  headers = { ["X-Secret"] = os.getenv("PROP_VALUE") },
  chat_url = BASE .. "/reflect?h=x-secret&wrap=sse&pause=5&split=" .. os.getenv("PROP_SPLIT") }

local function fields(spec)
  local t = {}
  for x in spec:gmatch("[^:]+") do t[#t + 1] = x end
  return t
end

return specula.agent {
  name = "secrets-property",
  tools = tools,
  policy = { reflect = "full", note = "full", env = "full" },
  verify = function(pred, actual)
    if pred == actual then return true, "same" end
    return false, "rejected: the tool said " .. tostring(actual)
  end,
  predict = function(history, ctx)
    -- fails (and says what it saw) once a real observation is in the history
    for i = #history, 1, -1 do
      local o = tostring(history[i].observation)
      if not o:find("^a guess") then error("[" .. tostring(ctx.id) .. "] no guess after " .. o, 0) end
    end
    return {}
  end,
  init = function(q) return { spec = q, hop = 0, obs = {} } end,
  step = function(s)
    local f = fields(s.spec)
    if s.hop == 0 then
      if f[1] == "split" then
        local r = assert(model:chat { messages = { { role = "user", content = "echo" } }, stream = true })
        return { segment = r.content, action = { tool = "note", args = { text = r.content } } }
      elseif f[1] == "mcp" then
        return { segment = "ask", action = { tool = "env", args = { name = "PROP_MCP_SECRET", as = f[2] } } }
      end
      return { segment = "ask", action = { tool = "reflect", args = { enc = f[2], pre = f[3], pad = f[4], bin = f[5] } } }
    elseif s.hop == 1 then
      return { segment = "again", action = { tool = "note", args = { text = s.obs[1] } } }
    end
    return { final = "done: " .. table.concat(s.obs, " | ") }
  end,
  update = function(s, step, obs)
    local o = { unpack(s.obs) }
    o[#o + 1] = obs
    return { spec = s.spec, hop = s.hop + 1, obs = o }
  end,
}
]=]

-- A plain program: each query through specula.run on its own, so the
-- predictor's failure is reported once per query (stderr per encoding).
local ONE_BY_ONE = [=[
local specula = require "specula"
local agent = assert(loadfile(os.getenv("PROP_AGENT")))()   -- a Lua call: the MCP connect in it may wait
for line in io.lines(os.getenv("PROP_INPUT")) do
  local q = specula.json.decode(line)
  specula.run(agent, { queries = { { id = q.id, query = q.query } } })
end
]=]

---------------------------------------------------------------------------
-- reading the outputs back
---------------------------------------------------------------------------

local function lines(text)
  local out = {}
  for l in (text or ""):gmatch("[^\n]+") do out[#out + 1] = l end
  return out
end

-- records (one JSON object per line) -> id -> line
local function by_id(text)
  local out = {}
  for _, l in ipairs(lines(text)) do
    local ok, v = pcall(cjson.decode, l)
    if ok and type(v) == "table" and v.id then out[v.id] = (out[v.id] and out[v.id] .. "\n" or "") .. l end
  end
  return out
end

-- a tape -> kind -> query -> its lines
local function tape_sections(dir)
  local out, all = {}, {}
  for i = 1, 99 do
    local t = H.read(string.format("%s/cassette-%04d.jsonl", dir, i))
    if not t then break end
    all[#all + 1] = t
    for _, l in ipairs(lines(t)) do
      local ok, v = pcall(cjson.decode, l)
      if ok and type(v) == "table" and v.kind and type(v.meta) == "table" and v.meta.query then
        local k = out[v.kind] or {}
        out[v.kind] = k
        k[v.meta.query] = (k[v.meta.query] and k[v.meta.query] .. "\n" or "") .. l
      end
    end
  end
  return out, table.concat(all)
end

-- a Chrome trace (one event per line) -> query id -> its events' lines
local function trace_sections(text)
  local pid_of, out, rows = {}, {}, {}
  for _, l in ipairs(lines(text)) do
    local body = l:gsub(",$", "")
    local ok, v = pcall(cjson.decode, body)
    if ok and type(v) == "table" and v.pid then
      rows[#rows + 1] = { v.pid, body }
      if v.name == "process_name" and type(v.args) == "table" then
        pid_of[v.pid] = tostring(v.args.name):match("^query (.*)$")
      end
    end
  end
  for _, r in ipairs(rows) do
    local id = pid_of[r[1]]
    if id then out[id] = (out[id] and out[id] .. "\n" or "") .. r[2] end
  end
  return out
end

---------------------------------------------------------------------------
-- the property
---------------------------------------------------------------------------

describe("secrets property", function()
  local server
  setup(function() server = H.server() end)
  teardown(function() if server then server.stop() end end)

  it("no output holds a random secret in any encoding an echo gives it #slow", function()
    if not H.need_node(pending) then return end
    local t0 = os.time()
    local dir = H.tmpdir() .. "/secprop"
    os.execute("rm -rf " .. H.quote(dir) .. " && mkdir -p " .. H.quote(dir))
    local agent_path = dir .. "/agent.lua"
    local f = assert(io.open(agent_path, "w")); f:write(AGENT); f:close()
    local obo_path = dir .. "/one_by_one.lua"
    f = assert(io.open(obo_path, "w")); f:write(ONE_BY_ONE); f:close()

    local secrets = {}
    for _, kind in ipairs({ "ascii", "ascii", "quotes", "quotes", "nonascii", "nonascii", "bytes", "bytes" }) do
      secrets[#secrets + 1] = { kind = kind, value = make(kind) }
    end

    local counted, per_output, skipped = 0, {}, {}
    local failures = {}
    local function check(s, e, output, section, views, expect_marker)
      -- the leak: never, whatever the combination
      views = views or L.views(section or "")
      local i = L.find(views, s.value)
      if i then
        failures[#failures + 1] = string.format("%s secret %q, encoding %s: in %s (view %d): %s", s.kind, s.value,
          e.label, output, i, (section or ""):sub(1, 300))
        return
      end
      -- counted only when the secret was there and went: "[redacted]" shows
      if section and L.find(views, "[redacted]") then
        counted = counted + 1
        per_output[output] = (per_output[output] or 0) + 1
      elseif expect_marker then
        failures[#failures + 1] = string.format("%s secret %q, encoding %s: %s never carried it (no [redacted]): %s",
          s.kind, s.value, e.label, output, (section or "(nothing)"):sub(1, 300))
      else
        skipped[#skipped + 1] = s.kind .. "/" .. e.label .. "/" .. output
      end
    end

    for si, s in ipairs(secrets) do
      local utf8ok = utf8_valid(s.value)
      local input = dir .. "/in" .. si .. ".jsonl"
      local inp = {}
      for _, e in ipairs(ENCODINGS) do
        if utf8ok or not e.spec:match("^mcp") then
          inp[#inp + 1] = cjson.encode({ id = e.label, query = e.spec })
        end
      end
      f = assert(io.open(input, "w")); f:write(table.concat(inp, "\n"), "\n"); f:close()
      local env = { BASE = server.base, PROP_VALUE = s.value, PROP_MCP_ON = utf8ok and "1" or "0", PROP_NODE = NODE,
                    PROP_MCP = MCP_SERVER, PROP_SPLIT = tostring(math.floor(#s.value / 2)),
                    PROP_AGENT = agent_path, PROP_INPUT = input }
      -- A: records, trace, tape
      local out, trace, cas = dir .. "/out" .. si .. ".jsonl", dir .. "/trace" .. si .. ".json", dir .. "/cas" .. si
      local st, so_a, se_a = H.specula({ "run", agent_path, "--input", input, "--k", "3", "--out", out, "--trace", trace,
        "--record", cas }, env)
      assert.is_true(st == 0 or st == 3, se_a)
      -- B: records on stdout
      local _, so_b, se_b = H.specula({ "run", agent_path, "--input", input, "--k", "3" }, env)
      -- D: one run per query, so each prints its predictor warning
      local st_d, so_d, se_d = H.specula({ "run", obo_path }, env)
      assert.equals(0, st_d, se_d)
      -- C: records holding the secret from elsewhere, read by report and compare
      local syn, sum, page = dir .. "/syn" .. si .. ".jsonl", dir .. "/sum" .. si .. ".json", dir .. "/page" .. si .. ".html"
      -- (each with its run's whole provenance: a file of some of them only is
      -- read by report and compare when every record stands alone)
      local a_recs = by_id(table.concat(H.whole_lines(H.read(out)), "\n"))
      local synl, labels = {}, {}
      for _, e in ipairs(ENCODINGS) do
        local enc = e.enc(s.value)
        if a_recs[e.label] and utf8_valid(enc) then
          local r = cjson.decode(a_recs[e.label]:match("[^\n]+"))
          r.config = "cfg-" .. e.label .. " " .. enc
          synl[#synl + 1] = cjson.encode(r)
          labels[e.label] = true
        end
      end
      f = assert(io.open(syn, "w")); f:write(table.concat(synl, "\n"), "\n"); f:close()
      local _, so_c1, se_c1 = H.specula({ "report", syn, "-o", page, "--secret-env", "PROP_VALUE" }, env)
      local _, so_c2, se_c2 = H.specula({ "compare", syn, "--summary", sum, "--secret-env", "PROP_VALUE" }, env)

      -- whole outputs first (anything outside a query's section)
      local tapes, tape_all = tape_sections(cas)
      local whole = { records = H.read(out), stdout = so_b, trace = H.read(trace), tape = tape_all,
                      stderr = se_a .. so_a .. se_b .. se_d .. so_d .. se_c1 .. so_c1 .. se_c2,
                      summary = H.read(sum), table = so_c2, report = H.read(page) }
      for name, text in pairs(whole) do
        local views = name == "tape" and L.tape_views(text or "") or L.views(text or "")
        local i = L.find(views, s.value)
        if i then failures[#failures + 1] = string.format("%s secret %q: in %s as a whole (view %d)", s.kind, s.value, name, i) end
      end

      local recs, stdout_recs, tr = by_id(H.read(out)), by_id(so_b), trace_sections(H.read(trace) or "")
      for _, e in ipairs(ENCODINGS) do
        local mcp = e.spec:match("^mcp") ~= nil
        if utf8ok or not mcp then
          -- does the checker itself read this encoding back? (it cannot turn
          -- \u00FF or &#255; into the byte 255, say): only then is a
          -- combination a check
          local readable = L.find(L.views("<" .. e.enc(s.value) .. ">"), s.value) ~= nil
          -- a secret that is not UTF-8 cannot travel inside JSON raw: where
          -- an output is JSON, only the ASCII encodings must reach it
          local strict = readable and (utf8ok or not utf8_valid(s.value) and utf8_valid(e.enc(s.value))
            and e.label ~= "binary-body" and e.label ~= "stream-split")
          local id = e.label
          check(s, e, "records", recs[id], nil, strict)
          check(s, e, "stdout records", stdout_recs[id], nil, strict)
          local wire = mcp and "mcp" or "http"
          local sec = tapes[wire] and tapes[wire][id]
          check(s, e, "tape " .. wire, sec, sec and L.tape_views(sec), strict and (mcp or e.label ~= "binary-body" or utf8ok))
          for _, kind in ipairs({ "obs", "spec", "job" }) do
            check(s, e, "tape " .. kind, tapes[kind] and tapes[kind][id], nil, strict)
          end
          -- a commit line (the query's text, its calls' arguments) carries
          -- the secret only where the query committed a call with it
          check(s, e, "tape commit", tapes.commit and tapes.commit[id], nil, false)
          check(s, e, "trace", tr[id], nil, strict)
          local mine = {}
          for _, l in ipairs(lines(se_d)) do
            if l:find("[" .. id .. "]", 1, true) then mine[#mine + 1] = l end
          end
          -- (a stream's JSON turns bytes that are not UTF-8 into other characters)
          check(s, e, "stderr", table.concat(mine, "\n"), nil, readable and (utf8ok or e.label ~= "stream-split"))
          if labels[id] then
            local function part(text)
              local got = {}
              local pat = "cfg-" .. id .. " "
              local at = (text or ""):find(pat, 1, true)
              while at do
                got[#got + 1] = text:sub(at, at + #pat + 40)
                at = text:find(pat, at + 1, true)
              end
              return table.concat(got, "\n")
            end
            check(s, e, "summary", part(H.read(sum)), nil, readable)
            check(s, e, "compare table", part(so_c2), nil, readable)
            check(s, e, "report", part(H.read(page)), nil, readable)
          end
        end
      end
    end
    local names = {}
    for k, v in pairs(per_output) do names[#names + 1] = k .. " " .. v end
    table.sort(names)
    print(string.format("\nsecrets property (seed %d): %d (secret, encoding, output) combinations checked, %d secrets x "
      .. "%d encodings x %d outputs; by output: %s; %d not applicable (a secret that is not UTF-8 where JSON "
      .. "cannot carry it raw, or an encoding the checker cannot read back); %d s",
      SEED, counted, #secrets, #ENCODINGS, 13, table.concat(names, ", "), #skipped, os.time() - t0))
    assert.same({}, failures)
    assert.is_true(counted > 1000, counted)
  end)
end)
