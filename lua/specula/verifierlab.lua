-- specula verifiers CASSETTE [--verifier NAME_OR_FILE]... [--k K] [--json]
-- Every recorded (speculated candidates, actual observation) pair of a
-- cassette judged by each verifier: acceptance rate, false accepts against
-- `exact`, and the RelLat the theory predicts from the resulting p with the
-- cassette's own alpha and beta.
local json = require "specula.json"
local verify = require "specula.verify"
local theory = require "specula.theory"
local optslib = require "specula.opts"
local argv = require "specula.argv"
local lab = require "specula.lab"
local C = require("specula.core").C

local format = string.format

local M = {}

local usage_text = [[
usage: specula verifiers CASSETTE_DIR [--verifier NAME_OR_FILE]... [--k K] [--json]
  --verifier V   exact, normalized, spechop, name_only, jaccard or jaccard:T (threshold T),
                 or a Lua file returning function(predicted, actual, ctx) -> ok, reason
                 (repeatable; default: exact, normalized, spechop, jaccard)
  --k K          threads for the predicted RelLat (default inf)
  --json         one JSON object instead of the table
]]

local usage, fail = lab.command("specula verifiers", usage_text)

-- A verifier by name or file: name, function | nil, err.
local function load_verifier(spec)
  local builtin = { exact = verify.exact, normalized = verify.normalized, spechop = verify.spechop,
                    name_only = verify.name_only }
  if builtin[spec] then return spec, builtin[spec] end
  if spec == "jaccard" then return spec, verify.jaccard(0.6) end
  local t = spec:match("^jaccard:(.+)$")
  if t then
    local v = tonumber(t)
    if not v or v < 0 or v > 1 then return nil, "jaccard threshold must be a number in [0, 1], got '" .. t .. "'" end
    return spec, verify.jaccard(v)
  end
  local chunk, err = lab.lua_file(spec, "verifier", format("unknown verifier '%s' (not a built-in name, not a file)", spec))
  if not chunk then return nil, err end
  local ok, fn = pcall(chunk)
  if not ok then return nil, format("verifier file '%s' failed: %s", spec, tostring(fn)) end
  if type(fn) ~= "function" then
    return nil, format("verifier file '%s' must return a function(predicted, actual, ctx), got %s", spec, type(fn))
  end
  return spec, fn
end

local function mean(list)
  if #list == 0 then return nil end
  local s = 0
  for _, v in ipairs(list) do s = s + v end
  return s / #list
end

-- The pairs of a loaded cassette: { tool, args, cands = {values}, obs, spec_ms, target_ms }
-- plus the mean segment (model) time per hop.
function M.pairs_of(recs)
  local obs = {}
  for _, r in ipairs(recs) do
    if r.kind == "obs" and not r.start and r.res and obs[r.key:sub(5)] == nil then obs[r.key:sub(5)] = r end
  end
  local pairs_, unpaired = {}, 0
  for _, r in ipairs(recs) do
    if r.kind == "spec" and not r.start and r.res and not r.err then
      local o = obs[r.key:sub(6)]
      if o then
        local cands = {}
        if r.res.cands then
          for i, c in ipairs(r.res.cands) do cands[i] = c.value end
        else
          cands[1] = r.res.value
        end
        pairs_[#pairs_ + 1] = { tool = r.req and r.req.tool, args = r.req and r.req.args, cands = cands,
                                obs = o.res.value, spec_ms = tonumber(r.ms) or 0, target_ms = tonumber(o.ms) or 0,
                                query = r.meta and r.meta.query, hop = r.meta and r.meta.hop }
      else
        unpaired = unpaired + 1
      end
    end
  end
  -- model time per (query, hop) of hops that called a target: requests
  -- made while the step decided, on the committed path
  local with_target = {}
  for _, r in ipairs(recs) do
    local m = r.meta
    if r.kind == "obs" and m and not m.speculative and m.query ~= nil and m.hop ~= nil then
      with_target[tostring(m.query) .. "\0" .. tostring(m.hop)] = true
    end
  end
  local seg = {}
  for k in pairs(with_target) do seg[k] = 0 end   -- a step without a model call took no model time
  for _, r in ipairs(recs) do
    local m = r.meta
    if r.kind == "http" and not r.start and m and m.phase == "step" and m.query ~= nil and m.hop ~= nil
      and not m.speculative then
      local k = tostring(m.query) .. "\0" .. tostring(m.hop)
      if with_target[k] then seg[k] = (seg[k] or 0) + (tonumber(r.ms) or 0) end
    end
  end
  local segs = {}
  for _, v in pairs(seg) do segs[#segs + 1] = v end
  return pairs_, unpaired, mean(segs)
end

function M.main(args)
  local src = args[1]
  if src == "--help" or src == "-h" then io.stdout:write(usage_text) return end
  if not src or src:sub(1, 2) == "--" then return usage("a cassette directory is needed") end
  local o, err = argv.parse(args, {
    ["--verifier"] = { "verifiers", list = true },
    ["--k"] = { "k", convert = function(v)
      local ok, k = pcall(optslib.check, "specula verifiers", "k", v == "inf" and math.huge or tonumber(v), 1)
      if not ok or k == 0 then return nil, "--k must be an integer >= 1 or inf, got '" .. tostring(v) .. "'" end
      return k
    end },
    ["--json"] = { "json", flag = true },
  }, { first = 2, into = { k = math.huge, verifiers = {} } })
  if not o then return usage(err) end
  local names = o.verifiers
  if #names == 0 then names = { "exact", "normalized", "spechop", "jaccard" } end
  local vs = {}
  for _, n in ipairs(names) do
    local name, fn = load_verifier(n)
    if not name then return usage(fn) end
    vs[#vs + 1] = { name = name, fn = fn }
  end
  if C.sp_host_path_kind(src) == 1 then
    return fail(format("'%s' is a file: results files hold no speculated candidates; give the cassette directory "
      .. "a run wrote with --record", src))
  end
  local recs, lerr = lab.cassette(src)
  if not recs then return fail(lerr) end
  local prs, unpaired, seg_ms = M.pairs_of(recs)
  if #prs == 0 then
    return fail(format("cassette '%s' holds no speculator call paired with its target's observation "
      .. "(record with a speculator, on this version of specula)", src))
  end
  local sms, tms = {}, {}
  for _, p in ipairs(prs) do sms[#sms + 1] = p.spec_ms; tms[#tms + 1] = p.target_ms end
  local t_target = mean(tms)
  local alpha = t_target > 0 and mean(sms) / t_target or 0
  local beta = (t_target > 0 and seg_ms) and seg_ms / t_target or nil
  local rows = {}
  for _, v in ipairs(vs) do
    local acc, false_acc, errors = 0, 0, 0
    local first_error
    for _, p in ipairs(prs) do
      local accepted, truth = false, false
      for _, c in ipairs(p.cands) do
        local ok, r = pcall(v.fn, c, p.obs, { tool = p.tool, args = p.args, action = { tool = p.tool, args = p.args } })
        if not ok then
          errors = errors + 1
          first_error = first_error or tostring(r)
        elseif r then
          accepted = true
          truth = verify.exact(c, p.obs) and true or false
          break
        end
      end
      if accepted then
        acc = acc + 1
        if not truth then false_acc = false_acc + 1 end
      end
    end
    local pval = acc / #prs
    local rl = beta and (o.k == math.huge and theory.rel_lat_star(pval, alpha, beta)
      or theory.rel_lat_k(pval, alpha, beta, o.k)) or nil
    rows[#rows + 1] = { verifier = v.name, pairs = #prs, accepted = acc, false_accepts = false_acc, p = pval,
                        rel_lat = rl, errors = errors, first_error = first_error }
  end
  if o.json then
    local out = { cassette = src, pairs = #prs, unpaired = unpaired, alpha = alpha, beta = beta or json.null,
                  k = o.k == math.huge and "inf" or o.k, verifiers = json.array({}) }
    for _, r in ipairs(rows) do
      out.verifiers[#out.verifiers + 1] = { verifier = r.verifier, accepted = r.accepted, p = r.p,
        false_accepts = r.false_accepts, rel_lat = r.rel_lat or json.null, errors = r.errors }
    end
    io.stdout:write(json.encode(out), "\n")
    return
  end
  io.stdout:write(format("%d (candidate, observation) pairs from %s (%d speculator calls without an observation)\n",
    #prs, src, unpaired))
  io.stdout:write(format("alpha %.3f  beta %s  k %s (from the recorded latencies)\n", alpha,
    beta and format("%.3f", beta) or "- (no model call recorded)", o.k == math.huge and "inf" or tostring(o.k)))
  io.stdout:write(format("%-24s %8s %8s %13s %8s %8s\n", "verifier", "accepted", "p", "false accepts", "RelLat", "errors"))
  for _, r in ipairs(rows) do
    io.stdout:write(format("%-24s %8d %8.3f %13d %8s %8d\n", r.verifier, r.accepted, r.p, r.false_accepts,
      r.rel_lat and format("%.3f", r.rel_lat) or "-", r.errors))
    if r.first_error then io.stderr:write("specula verifiers: ", r.verifier, ": ", r.first_error, "\n") end
  end
end

return M
