-- Real MCP servers and the official conformance suite, from npm. .ci/deps
-- installs the pinned packages and Node 22 into $SPECULA_NPM_CACHE (default
-- ~/.cache/specula-npm). Without them these specs fail in CI (CI=true) and
-- are pending elsewhere, with the command that installs them.
local H = require "support.helpers"
local MH = require "support.mcp_helpers"
local cjson = require "cjson"

local deps = require "support.deps"
local CACHE = deps.cache()
local NM = CACHE .. "/node_modules/@modelcontextprotocol/"

-- node >= 20 and the pinned packages (.ci/deps installs both), or why not;
-- the conformance suite's cases need node >= 22
local missing = deps.npm()
local suite_missing = deps.conformance()

local last_json = H.last_json

-- The conformance package the scenarios run from: the one .ci/deps pins in
-- the cache, or $SPECULA_CONFORMANCE (a package directory) to try another.
local SUITE = os.getenv("SPECULA_CONFORMANCE")
if not SUITE or SUITE == "" then SUITE = NM .. "conformance" end
local SUITE_JS = SUITE .. "/dist/index.js"

local function guard()
  if not missing then return true end
  return H.require_or_pend(pending, missing)
end

local function suite_guard()
  if not suite_missing then return true end
  return H.require_or_pend(pending, suite_missing)
end

-- The protocol versions the client speaks whose frozen requirement sets
-- the suite holds: each scored client scenario of a set runs at its version.
local REQUIREMENTS = { "2025-11-25", "2026-07-28" }

-- The client scenarios a requirement set scores, from the suite's own
-- `list` command (the authority), and the auth extensions it lists for the
-- client (run unscored, forced to the version): two lists.
local function client_scenarios(requirements)
  if suite_missing then return {}, {} end
  local p = assert(io.popen("node " .. H.quote(SUITE_JS) .. " list --requirements " .. requirements .. " 2>&1"))
  local text = p:read("*a"):gsub("\27%[[%d;]*m", "")
  p:close()
  local list, extensions = {}, {}
  local section = text:match("Client scenarios[^\n]*\n(.-)\n%s*\n") or text:match("Client scenarios[^\n]*\n(.*)$") or ""
  section = section:match("^(.-)Run and reported") or section
  for name in section:gmatch("%s+%- ([%w%-_/%.]+)") do list[#list + 1] = name end
  local ext = text:match("extension %(%d+%):\n(.-)\n%s*[%w%-]+ %(%d+%):") or text:match("extension %(%d+%):\n(.*)$") or ""
  for name in ext:gmatch("%- (auth/[%w%-_/%.]+) %[client%]") do extensions[#extensions + 1] = name end
  return list, extensions
end

-- Scenarios outside those sets that the client passes too (and the
-- previous release of the suite ran): unscored ones and the 2025-03-26
-- authorization fallbacks, each at the version it is for (an extension
-- is on no version's timeline: forced to one).
local EXTRA = {
  { "json-schema-2020-12-preservation", "2025-11-25" }, { "json-schema-2020-12-preservation", "2026-07-28" },
  { "auth/2025-03-26-oauth-metadata-backcompat", "2025-03-26" },
  { "auth/2025-03-26-oauth-endpoint-fallback", "2025-03-26" },
}

-- What our client says on stderr in the scenarios where it must refuse
-- (the suite allows the client to fail there): the refusal is ours, for
-- the reason the scenario tests.
local MUST_REFUSE = {
  ["auth/resource-mismatch"] = "refusing to authorize",
  ["auth/scope-retry-limit"] = "still refuses (403 insufficient_scope)",
  ["auth/iss-supported-missing"] = "but its response has none (RFC 9207)",
  ["auth/iss-wrong-issuer"] = "names the issuer https://evil.example.com",
  ["auth/iss-unexpected"] = "names the issuer https://evil.example.com",
  ["auth/iss-normalized"] = "/, not http://localhost:",
  ["auth/metadata-issuer-mismatch"] = "names the issuer https://attacker.example.com",
}

-- Run one scenario with a client command; returns passed, total, the
-- checks, the exit status and the suite's output.
local function run_scenario(scenario, command, version, extra)
  local work = H.tmpdir() .. "/conf-" .. scenario:gsub("/", "_") .. "-" .. version
  os.execute("rm -rf " .. H.quote(work) .. " && mkdir -p " .. H.quote(work))
  local st, out, err = H.sh("cd " .. H.quote(work) .. " && node " .. H.quote(SUITE_JS)
    .. " client --command " .. H.quote(command) .. " --scenario " .. scenario .. " --spec-version " .. version
    .. (extra and (" " .. extra) or "") .. " --output-dir results")
  local all = (out .. "\n" .. err):gsub("\27%[[%d;]*m", "")
  local passed, total = all:match("Passed: (%d+)/(%d+)")
  assert(passed, "no 'Passed: n/m' line\nstdout: " .. out .. "\nstderr: " .. err)
  -- the suite also writes its checks: count them independently
  local f = assert(io.popen("find " .. H.quote(work .. "/results") .. " -name checks.json"))
  local path = f:read("*l")
  f:close()
  assert(path, "the suite wrote no checks.json")
  local text = H.read(path)
  assert(text, "cannot read " .. path)
  local checks = cjson.decode(text)
  local client_err = H.read((path:gsub("checks%.json$", "stderr.txt"))) or ""
  return tonumber(passed), tonumber(total), checks, st, all, client_err, work
end

describe("MCP with real servers from npm #slow", function()
  local runs, sizes, next = {}, {}, {}
  for _, v in ipairs(REQUIREMENTS) do
    local l, e = client_scenarios(v)
    sizes[v], next[v] = #l, #e
    for _, s in ipairs(l) do runs[#runs + 1] = { s, v } end
    for _, s in ipairs(e) do runs[#runs + 1] = { s, v, "--force" } end
  end
  for _, x in ipairs(EXTRA) do runs[#runs + 1] = x end

  it("the suite requires 18 client scenarios at 2025-11-25 and 32 at 2026-07-28, and lists 6 auth extensions", function()
    if not suite_guard() then return end
    assert.are.same({ ["2025-11-25"] = 18, ["2026-07-28"] = 32 }, sizes)
    assert.are.same({ ["2025-11-25"] = 6, ["2026-07-28"] = 6 }, next)
  end)

  for _, run in ipairs(runs) do
    local scenario, version, extra = run[1], run[2], run[3]
    it("passes the conformance suite's client scenario " .. scenario .. (extra and " (extension)" or "") .. " at " .. version, function()
      if not suite_guard() then return end
      local cmd = H.quote(H.bin) .. " run " .. H.quote(H.root .. "/spec/mcp/conformance_client.lua")
      local passed, total, checks, st, all, client_err = run_scenario(scenario, cmd, version, extra)
      local ok, fail, warn = 0, 0, 0
      for _, c in ipairs(checks) do
        if c.status == "SUCCESS" then ok = ok + 1 elseif c.status == "FAILURE" then fail = fail + 1
        elseif c.status == "WARNING" then warn = warn + 1 end
      end
      io.stderr:write(("[conformance] %s at %s: %d/%d checks passed\n"):format(scenario, version, passed, total))
      assert.is_true(total > 0, "0 checks reported")
      assert.are.equal(total, passed, all)
      assert.are.equal(0, fail)
      assert.are.equal(0, warn, all)
      assert.are.equal(passed, ok)
      assert.matches("OVERALL: PASSED", all, 1, true)
      assert.are.equal(0, st, all)
      if MUST_REFUSE[scenario] then assert.matches(MUST_REFUSE[scenario], client_err, 1, true) end
    end)
  end

  it("keeps the tokens of an auth scenario out of --record, --trace, --out and stderr", function()
    if not suite_guard() then return end
    local dir = H.tmpdir() .. "/conf-secrecy"
    os.execute("rm -rf " .. H.quote(dir) .. " && mkdir -p " .. H.quote(dir))
    local cmd = table.concat({ H.quote(H.bin), "run", H.quote(H.root .. "/spec/mcp/conformance_agent.lua"),
      "--record", H.quote(dir .. "/cassette"), "--trace", H.quote(dir .. "/trace.json"),
      "--out", H.quote(dir .. "/out.jsonl"), "--query" }, " ")
    local passed, total, checks, st, all, client_err = run_scenario("auth/token-endpoint-auth-post", cmd, "2025-11-25")
    assert.are.equal(total, passed, all)
    -- the credentials the suite's servers issued and were shown, from their own logs
    local secrets, seen = {}, {}
    local function collect(v, key)
      if type(v) == "table" then
        for k, x in pairs(v) do collect(x, type(k) == "string" and k or key) end
      elseif type(v) == "string" and key and #v >= 8 and not seen[v] and not v:match("^https?://") then
        local k = key:lower()
        if k:find("token") or k:find("secret") or k == "code" or k:find("verifier") or k:find("assertion")
           or k == "authorization" then
          seen[v] = true
          secrets[#secrets + 1] = v:gsub("^Bearer ", ""):gsub("^Basic ", "")
        end
      end
    end
    for _, c in ipairs(checks) do collect(c.details) end
    local kinds = { access = false, secret = false, verifier = false }
    for _, v in ipairs(secrets) do
      if v:match("^test%-token%-") then kinds.access = true end
      if v:match("^test%-secret%-") then kinds.secret = true end
      if #v == 43 then kinds.verifier = true end
    end
    assert.are.same({ access = true, secret = true, verifier = true }, kinds)
    local out = H.read(dir .. "/out.jsonl") or ""
    assert.matches('"answer":"test"', out, 1, true)
    local texts = { stderr = client_err, trace = H.read(dir .. "/trace.json") or "", out = out }
    local p = assert(io.popen("ls " .. H.quote(dir .. "/cassette")))
    for f in p:lines() do texts[f] = H.read(dir .. "/cassette/" .. f) or "" end
    p:close()
    assert.is_true(texts["cassette-0001.jsonl"] ~= nil, "no cassette written")
    for name, text in pairs(texts) do
      assert.are.same({}, MH.find_secrets(text, secrets), name)
    end
  end)

  it("runs examples/mcp_files.lua over server-filesystem: reads early, write_file never, answers identical", function()
    if not guard() then return end
    local st, out, err = H.specula({ "run", H.root .. "/examples/mcp_files.lua" },
      { SPECULA_NPM_CACHE = CACHE, MCP_FILES_QUERIES = "6" })
    assert.are.equal(0, st, out .. err)
    local r = last_json(out)
    io.stderr:write("[mcp_files] " .. cjson.encode({ calls = r.calls_spechop, early = r.early,
      rpc_cancels = r.rpc_cancels, rel_lat_vs_sequential = r.rel_lat_vs_sequential }) .. "\n")
    assert.are.equal(r.queries, r.same)
    assert.is_true(r.early.read_text_file > 0)
    assert.are.equal(0, r.early.write_file)
    assert.are.equal(0, r.write_file_ran_speculative)
    assert.are.equal("forbid", r.write_file_policy.decision)
    assert.are.equal("annotation", r.write_file_policy.source)
    assert.are.equal(r.calls_sequential.write_file, r.calls_spechop.write_file)
    assert.is_true(r.rel_lat_vs_sequential < 1)
  end)

  it("records examples/mcp_files.lua and replays it offline with 0 misses and the same answer", function()
    if not guard() then return end
    local work = H.tmpdir() .. "/mcp-files-replay"
    os.execute("rm -rf " .. H.quote(work) .. " && mkdir -p " .. H.quote(work))
    -- from a working directory of its own: the notes go to ./specula-mcp-files
    local function go(extra, out)
      local cmd = { "cd", H.quote(work), "&&", "SPECULA_NPM_CACHE=" .. H.quote(CACHE), H.quote(H.bin), "run",
        H.quote(H.root .. "/examples/mcp_files.lua"), "--query", "q3", "--k", "inf", "--out", out }
      for _, a in ipairs(extra) do cmd[#cmd + 1] = H.quote(a) end
      local st, so, se = H.sh(table.concat(cmd, " "))
      return st, so .. se, (H.jsonl(H.read(work .. "/" .. out) or "")[1] or {}).answer
    end
    local st, err, rec = go({ "--record", "cas" }, "rec.jsonl")
    assert.are.equal(0, st, err)
    assert.matches("cassette: %d+ recorded to", err)
    assert.is_not_nil(H.read(work .. "/specula-mcp-files/q3_1.txt"), "the notes are not in ./specula-mcp-files")
    local got
    st, err, got = go({ "--replay-io", "cas" }, "rep.jsonl")
    assert.are.equal(0, st, err)
    local served, missed = err:match("cassette: (%d+) served from .-, (%d+) not in it")
    assert.is_not_nil(served, err)
    assert.is_true(tonumber(served) > 0, err)
    assert.are.equal("0", missed, err)
    assert.is_string(rec)
    assert.are.equal(rec, got)
    -- another query's search is not on the tape: the miss names the
    -- recorded search nearest to it and the argument that differs, scrubbed
    local _, err2 = go({ "--replay-io", "cas", "--query", "q4" }, "miss.jsonl")
    local r = H.jsonl(H.read(work .. "/miss.jsonl") or "")[1] or {}
    assert.matches("it holds 0%); the nearest recorded mcp request: MCP filesystem tools/call, which differs at "
      .. "arguments%.pattern: recorded q3_1%.txt, asked q4_1%.txt", tostring(r.error), err2)
    local cmd = "cd " .. H.quote(work) .. " && SECRET_NOTE=q3_1.txt SPECULA_NPM_CACHE=" .. H.quote(CACHE) .. " "
      .. H.quote(H.bin) .. " run " .. H.quote(H.root .. "/examples/mcp_files.lua")
      .. " --query q4 --k inf --replay-io cas --out secret.jsonl --secret-env SECRET_NOTE"
    H.sh(cmd)
    local text = H.read(work .. "/secret.jsonl") or ""
    assert.matches("recorded %[redacted%], asked q4_1%.txt", text)
    assert.is_nil(text:find("q3_1.txt", 1, true))
  end)

  it("runs an agent over server-memory: reads early, writes never, answers identical", function()
    if not guard() then return end
    local st, out, err = H.specula({ "run", H.root .. "/spec/mcp/memory_agent.lua" },
      { MCP_MEMORY_JS = NM .. "server-memory/dist/index.js" })
    assert.are.equal(0, st, out .. err)
    local r = last_json(out)
    io.stderr:write("[memory] " .. cjson.encode({ calls = r.calls_spec, early = r.early, rpc_cancels = r.rpc_cancels }) .. "\n")
    assert.are.equal(r.n, r.same)
    assert.are.equal(0, r.early_writes)
    assert.are.equal(0, r.early.create_entities)
    assert.are.equal(0, r.early.add_observations)
    assert.is_true(r.early.open_nodes > 0)
    assert.are.same(r.calls_seq, r.calls_spec)
  end)
end)

-- Without a usable Node the example says so in words and ends with status 1,
-- no stack trace: a fake cache holds the package file (never run) and PATH
-- holds no Node, or one that says it is 18 (Debian 12's). No npm needed.
describe("examples/mcp_files.lua without a usable Node", function()
  it("says there is no Node, or that it is too old, and what installs one", function()
    local fake = H.tmpdir() .. "/mcp-files-no-node"
    local pkg = fake .. "/cache/node_modules/@modelcontextprotocol/server-filesystem/dist"
    os.execute("rm -rf " .. H.quote(fake) .. " && mkdir -p " .. H.quote(pkg) .. " " .. H.quote(fake .. "/empty")
      .. " " .. H.quote(fake .. "/old"))
    assert(io.open(pkg .. "/index.js", "w")):close()
    local nf = assert(io.open(fake .. "/old/node", "w"))
    nf:write("#!/bin/sh\necho v18.19.0\n")
    nf:close()
    os.execute("chmod +x " .. H.quote(fake .. "/old/node"))
    -- a PATH without Node still has the tools the example runs (mkdir)
    os.execute("ln -s \"$(command -v mkdir)\" " .. H.quote(fake .. "/empty/mkdir"))
    local cases = {
      { fake .. "/empty", "mcp_files: cannot start server-filesystem: no Node.js answered 'node --version'" },
      { fake .. "/old:" .. (os.getenv("PATH") or "/usr/bin:/bin"),
        "mcp_files: cannot start server-filesystem: Node v18.19.0 ('node') is too old: server-filesystem needs "
          .. "Node 20 or later" },
    }
    for _, c in ipairs(cases) do
      local st, out, err = H.specula({ "run", H.root .. "/examples/mcp_files.lua", "--query", "q3" },
        { SPECULA_NPM_CACHE = fake .. "/cache", PATH = c[1], MCP_FILES_DIR = fake .. "/notes" })
      assert.are.equal(1, st, out .. err)
      assert.truthy(err:find(c[2], 1, true), err)
      assert.truthy(err:find("(.ci/deps installs Node 22 into " .. fake .. "/cache)", 1, true), err)
      assert.falsy(err:find("stack traceback", 1, true), err)
    end
  end)
end)
