-- specula verifiers CASSETTE|RESULTS [--verifier NAME_OR_FILE]... [--k K] [--labels FILE] [--pairs] [--json]
-- Every recorded (speculated candidates, actual observation) pair of a
-- cassette (or of a results file written with --keep-candidates) judged by
-- each verifier: acceptance rate, false accepts against
-- `exact` (and false accepts and rejects against a human-labelled file),
-- the RelLat the theory predicts from the resulting p with the cassette's
-- own alpha and beta, the RelLat `specula replay` predicts from the
-- recorded stage times with the verifier's verdicts, and how many queries'
-- answers the tape cannot vouch for once a wrong guess is committed.
local ffi = require "ffi"
local json = require "specula.json"
local verify = require "specula.verify"
local theory = require "specula.theory"
local optslib = require "specula.internal.domains"
local lab = require "specula.lab"
local core = require "specula.internal.core"
local lines_of = require("specula.internal.lines").lines   -- NUL-safe file:lines()
local C = core.C

local format, tostring, tonumber, type, ipairs, pairs, pcall = string.format, tostring, tonumber, type, ipairs, pairs, pcall
local concat = table.concat

local M = {}

-- usage(msg): a usage mistake of `specula verifiers`, returned from M.main as
-- nil, msg for specula.cmd to print with the command's synopsis (the
-- command line is specula.cmd.verifiers's); fail(msg): the command fails
-- (status 1).
local function usage(msg) return nil, msg end
local fail = lab.failer("specula verifiers")

-- Candidate and observation text in --pairs is cut to this many bytes.
local SHOW_BYTES = 240

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

-- The verifiers named in `names` (built-in or files): a list of
-- { name, fn } | nil, err.
function M.load_verifiers(names)
  local loaded, err = lab.load_named(names, function(n)
    local name, fn = load_verifier(n)
    if not name then return nil, fn end
    return fn
  end)
  if not loaded then return nil, err end
  for _, v in ipairs(loaded) do v.fn = v.value end
  return loaded
end

local function mean(list)
  if #list == 0 then return nil end
  local s = 0
  for _, v in ipairs(list) do s = s + v end
  return s / #list
end

local function qh(query, hop) return tostring(query) .. "\0" .. tostring(hop) end

-- The pairs of a loaded cassette: { id, tool, args, cands = {values}, obs,
-- spec_ms, target_ms, query, hop, thread } plus the count of speculator
-- answers without an observation and the mean segment (model) time per hop.
-- A pair's id is QUERY/HOP/TOOL (with #N from the second pair of the same
-- query, hop and tool on, in tape order); its candidates are ID/RANK, rank
-- from 1. Ids depend on the queries and the agent only, not on timing.
function M.pairs_of(recs)
  -- the observation a speculator answer is judged against: the same
  -- request's in the same query, else the first anywhere (older tapes)
  local obs, obs_q = {}, {}
  for _, r in ipairs(recs) do
    if r.kind == "obs" and not r.start and r.res then
      local key = r.key:sub(5)
      if obs[key] == nil then obs[key] = r end
      local qk = qh(r.meta and r.meta.query, key)
      if obs_q[qk] == nil then obs_q[qk] = r end
    end
  end
  local pairs_, unpaired, seen = {}, 0, {}
  for _, r in ipairs(recs) do
    if r.kind == "spec" and not r.start and r.res and not r.err then
      local key = r.key:sub(6)
      local m = r.meta or {}
      local o = obs_q[qh(m.query, key)] or obs[key]
      if o then
        local cands = {}
        if r.res.cands then
          for i, c in ipairs(r.res.cands) do cands[i] = c.value end
        else
          cands[1] = r.res.value
        end
        local tool = r.req and r.req.tool
        local id = format("%s/%s/%s", tostring(m.query == nil and "?" or m.query), tostring(m.hop == nil and "?" or m.hop),
          tostring(tool))
        local n = (seen[id] or 0) + 1
        seen[id] = n
        if n > 1 then id = id .. "#" .. n end
        pairs_[#pairs_ + 1] = { id = id, tool = tool, args = r.req and r.req.args, cands = cands,
                                obs = o.res.value, spec_ms = tonumber(r.ms) or 0, target_ms = tonumber(o.ms) or 0,
                                query = m.query, hop = m.hop, thread = m.thread }
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
      with_target[qh(m.query, m.hop)] = true
    end
  end
  local seg = {}
  for k in pairs(with_target) do seg[k] = 0 end   -- a step without a model call took no model time
  for _, r in ipairs(recs) do
    local m = r.meta
    if r.kind == "http" and not r.start and m and m.phase == "step" and m.query ~= nil and m.hop ~= nil
      and not m.speculative then
      local k = qh(m.query, m.hop)
      if with_target[k] then seg[k] = (seg[k] or 0) + (tonumber(r.ms) or 0) end
    end
  end
  local segs = {}
  for _, v in pairs(seg) do segs[#segs + 1] = v end
  return pairs_, unpaired, mean(segs)
end

-- The committed path of each query as `specula replay` reads it, from
-- the tape's job lines (format 2): for each hop, the target call started
-- last (a discarded thread's call starts before the rollback that replaces
-- it); the step, speculator and verifier jobs of that hop on the thread that
-- made the call; and the last-started step after the last hop with a call
-- (the final step). Returns { {query, hops = {{t_seg, t_target, t_spec,
-- t_verify, thread}...}, final_seg} ... } in tape order of the queries, and
-- the number of queries that cannot be rebuilt (no job lines, no final step).
function M.stages_of(recs)
  local by_q, order = {}, {}
  for _, r in ipairs(recs) do
    local m = r.meta
    if r.kind == "job" and m and m.query ~= nil and type(m.hop) == "number" and m.job then
      local q = by_q[m.query]
      if not q then
        q = { query = m.query, jobs = {} }
        by_q[m.query] = q
        order[#order + 1] = q
      end
      q.jobs[#q.jobs + 1] = r
    end
  end
  local out, unusable = {}, 0
  for _, q in ipairs(order) do
    -- job -> hop -> latest record, and job -> hop -> thread -> record
    local last, on = {}, {}
    for _, r in ipairs(q.jobs) do
      local m = r.meta
      local j = (m.job == "start") and "advance" or m.job
      last[j] = last[j] or {}
      local prev = last[j][m.hop]
      if not prev or (tonumber(r.at) or 0) >= (tonumber(prev.at) or 0) then last[j][m.hop] = r end
      on[j] = on[j] or {}
      on[j][m.hop] = on[j][m.hop] or {}
      on[j][m.hop][tostring(m.thread)] = r
    end
    local calls, steps = last.call or {}, last.advance or {}
    local hops, h = {}, 0
    while calls[h] do
      local call = calls[h]
      local th = tostring(call.meta.thread)
      local function job(name)
        local t = on[name] and on[name][h]
        return t and t[th]
      end
      local step = job("advance") or steps[h]
      local spec, ver = job("speculate"), job("verify")
      hops[#hops + 1] = { t_seg = step and tonumber(step.ms) or 0, t_target = tonumber(call.ms) or 0,
                          t_spec = spec and tonumber(spec.ms) or nil, t_verify = ver and tonumber(ver.ms) or 0,
                          thread = call.meta.thread }
      h = h + 1
    end
    local fin = steps[h]
    if fin and #hops > 0 then
      out[#out + 1] = { query = q.query, hops = hops, final_seg = tonumber(fin.ms) or 0 }
    else
      unusable = unusable + 1
    end
  end
  return out, unusable
end

-- Sum of the replayed wall and standard times of `stages` with a verifier's
-- verdicts: verdict(query, hop) -> "accepted" | "rejected" | nil (no pair:
-- the recorded speculator failed or never answered) and the rank and
-- candidate count. k: SP_K_UNBOUNDED or >= 1. Replays them as `specula replay` does,
-- on the window itself (sp_replay_timeline, counting spans only). Returns
-- RelLat, wall, standard | nil, err.
local replay_err_len = 256
function M.replay(stages, verdict, k, m)
  local lines = {}
  for i, q in ipairs(stages) do
    local hops = {}
    for j, h in ipairs(q.hops) do
      local v, rank, ncands = verdict(q.query, j - 1, h.thread)
      -- a results file's hop without a judged pair keeps its recorded verdict
      if not v and h.spec then v, rank, ncands = h.spec, h.rank, h.ncands end
      local spec = v or (h.t_spec and "error" or "none")
      local t_spec = h.t_spec or -1
      if spec == "accepted" and t_spec < 0 then t_spec = 0 end
      hops[j] = { t_seg = h.t_seg, t_target = h.t_target, t_spec = t_spec >= 0 and t_spec or json.null,
                  t_verify = h.t_verify, t_update = 0, spec = spec,
                  rank = spec == "accepted" and rank or json.null, ncands = ncands or json.null }
    end
    lines[i] = json.encode({ id = tostring(q.query), stages = { hops = json.array(hops), final_seg = q.final_seg },
      stats = { k_config = k == C.SP_K_UNBOUNDED and "inf" or k, m = m, mode = "spechop", spec_launch = "eager" } })
  end
  local text = concat(lines, "\n") .. "\n"
  local err = ffi.new("char[?]", replay_err_len)
  local set_out = ffi.new("sp_replay_set *[1]")
  if C.sp_replay_load_buffer(text, #text, set_out, err, replay_err_len) ~= 0 then return nil, ffi.string(err) end
  local set = ffi.gc(set_out[0], C.sp_replay_set_free)
  local info = ffi.new("sp_replay_tl_info")
  local wall, std = 0, 0
  for i = 0, tonumber(C.sp_replay_set_count(set)) - 1 do
    -- no arrays: the call fails for want of room but has replayed the query
    C.sp_replay_timeline(C.sp_replay_set_query(set, i), "spechop", k, C.SP_REPLAY_EAGER, nil, 0, nil, 0, info,
      err, replay_err_len)
    local w, s = tonumber(info.wall), tonumber(info.standard)
    if w ~= w or s ~= s then
      C.sp_replay_set_free(ffi.gc(set, nil))
      return nil, ffi.string(err)
    end
    wall, std = wall + w, std + s
  end
  C.sp_replay_set_free(ffi.gc(set, nil))
  if std <= 0 then return nil, "the recorded stages take no time" end
  return wall / std, wall, std
end

local function show(v)
  if type(v) == "string" then return v end
  local ok, s = pcall(json.canonical, v)
  return ok and s or tostring(v)
end

local function cut(s) return (json.utf8_cut(s, SHOW_BYTES)) end

-- A labels file: { [candidate id] = true|false } | nil, "FILE:LINE: why".
-- Every id must name a candidate of `known` (id -> true); blank lines are
-- skipped; other fields of a line (as --pairs writes them) are ignored.
function M.read_labels(path, known)
  if C.sp_host_path_kind(path) ~= 1 then return nil, format("labels file '%s': not a readable file", path) end
  local f, err = io.open(path, "rb")
  if not f then return nil, format("labels file '%s': %s", path, tostring(err)) end
  local labels, n, where = {}, 0, {}
  local lineno = 0
  for line in lines_of(f) do
    lineno = lineno + 1
    if line:find("%S") then
      local at = format("%s:%d: ", path, lineno)
      local ok, r = pcall(json.decode, line)
      if not ok or type(r) ~= "table" or r[1] ~= nil then
        f:close()
        return nil, at .. "not a JSON object"
      end
      local id = r.id
      if type(id) ~= "string" then
        f:close()
        return nil, at .. "\"id\" must be a candidate id (a string, as --pairs prints it)"
      end
      if type(r.equivalent) ~= "boolean" then
        f:close()
        return nil, at .. format("\"equivalent\" must be true or false (candidate '%s')", json.utf8_clean(id))
      end
      if not known[id] then
        f:close()
        return nil, at .. format("unknown candidate id '%s' (not in the cassette; --pairs lists the ids)",
          json.utf8_clean(id))
      end
      if where[id] then
        f:close()
        return nil, at .. format("candidate '%s' is labelled twice (first on line %d)", json.utf8_clean(id), where[id])
      end
      where[id] = lineno
      labels[id] = r.equivalent
      n = n + 1
    end
  end
  f:close()
  return labels, n
end

-- The model's time and the target's per hop on the committed path as the
-- tape's job lines show them (each step job's length, whatever the step
-- spent it on: a model call, a local model's sleep, CPU; each target
-- call's), or nil without job lines.
local function times_of_stages(stages)
  local segs, tgts = {}, {}
  for _, q in ipairs(stages) do
    for _, h in ipairs(q.hops) do
      segs[#segs + 1] = h.t_seg
      tgts[#tgts + 1] = h.t_target
    end
  end
  return mean(segs), mean(tgts)
end

-- A cassette's pairs and stages as analyse_pairs takes them. Beta is the
-- committed hops' mean step time over their mean target time, from the job
-- lines, as a run estimates it; a format-1 tape (none) falls back to the
-- model calls' latencies over the paired target calls'.
local function tape_source(recs)
  local prs, unpaired, http_seg = M.pairs_of(recs)
  local stages, unusable = M.stages_of(recs)
  local seg, tgt = times_of_stages(stages)
  return { pairs = prs, unpaired = unpaired, seg_ms = seg or http_seg, target_ms = seg and tgt or nil,
           stages = stages, unusable = unusable }
end

-- Judge every pair with each verifier: src = { pairs, unpaired, seg_ms,
-- target_ms (beta's target time; default: the pairs'), stages, unusable,
-- cut (results files: pairs skipped as cut) }; opts: { k (math.huge =
-- inf), labels = {id -> bool} or nil }. Returns the lab's result table
-- (what --json prints, plus the rows the table shows) | nil, err.
function M.analyse_pairs(src, vs, opts)
  local prs, unpaired, seg_ms = src.pairs, src.unpaired, src.seg_ms
  if #prs == 0 then return nil, "no speculator call paired with its target's observation" end
  local k = opts.k or math.huge
  local labels = opts.labels
  local sms, tms = {}, {}
  for _, p in ipairs(prs) do sms[#sms + 1] = p.spec_ms; tms[#tms + 1] = p.target_ms end
  local t_target = mean(tms)
  local alpha = t_target > 0 and mean(sms) / t_target or 0
  local beta_target = src.target_ms or t_target
  local beta = (beta_target > 0 and seg_ms) and seg_ms / beta_target or nil
  local stages, unusable = src.stages, src.unusable
  local m = 1
  for _, p in ipairs(prs) do if #p.cands > m then m = #p.cands end end
  -- the queries a pair belongs to, for the answer-change count
  local queries, qseen = {}, {}
  for _, q in ipairs(stages) do
    if not qseen[q.query] then qseen[q.query] = true; queries[#queries + 1] = q.query end
  end
  for _, p in ipairs(prs) do
    if p.query ~= nil and not qseen[p.query] then qseen[p.query] = true; queries[#queries + 1] = p.query end
  end
  local rows = {}
  for _, v in ipairs(vs) do
    local acc, false_acc, errors = 0, 0, 0
    local lab_fa, lab_fr, unlabelled = 0, 0, 0
    local first_error
    local verdicts = {}      -- query\0hop\0thread -> { accepted, rank, ncands }
    local wrong_q = {}       -- queries with a committed wrong guess
    for _, p in ipairs(prs) do
      local accepted_rank
      for i, c in ipairs(p.cands) do
        local ok, r = pcall(v.fn, c, p.obs, { tool = p.tool, args = p.args, action = { tool = p.tool, args = p.args } })
        if not ok then
          errors = errors + 1
          first_error = first_error or tostring(r)
        elseif r then
          accepted_rank = i
          break
        end
      end
      local wrong = false
      if accepted_rank then
        acc = acc + 1
        if not verify.exact(p.cands[accepted_rank], p.obs) then
          false_acc = false_acc + 1
          wrong = true
        end
      end
      if labels then
        if accepted_rank then
          local l = labels[p.id .. "/" .. accepted_rank]
          if l == nil then unlabelled = unlabelled + 1
          elseif l == false then lab_fa = lab_fa + 1; wrong = true
          else wrong = false end
        else
          local any_true, all_known = false, true
          for i = 1, #p.cands do
            local l = labels[p.id .. "/" .. i]
            if l == nil then all_known = false elseif l then any_true = true end
          end
          if any_true then lab_fr = lab_fr + 1 elseif not all_known then unlabelled = unlabelled + 1 end
        end
      end
      if wrong and p.query ~= nil then wrong_q[p.query] = true end
      verdicts[qh(p.query, p.hop) .. "\0" .. tostring(p.thread)] =
        { accepted_rank and "accepted" or "rejected", accepted_rank and accepted_rank - 1 or nil, #p.cands }
    end
    local pval = acc / #prs
    local rl = beta and (k == math.huge and theory.rel_lat_star(pval, alpha, beta)
      or theory.rel_lat_k(pval, alpha, beta, k)) or nil
    local replay_rl, replay_err
    if #stages > 0 then
      replay_rl, replay_err = M.replay(stages, function(query, hop, thread)
        local t = verdicts[qh(query, hop) .. "\0" .. tostring(thread)]
        if t then return t[1], t[2], t[3] end
      end, k == math.huge and tonumber(C.SP_K_UNBOUNDED) or k, m)
    else
      replay_err = src.cut and "no record of the results file carries its stages"
        or "the cassette has no job lines (format 1) or no complete query"
    end
    local unknown = 0
    for _ in pairs(wrong_q) do unknown = unknown + 1 end
    local row = { verifier = v.name, accepted = acc, false_accepts = false_acc, p = pval,
                  rel_lat = rl, replay_rel_lat = replay_rl, replay_error = replay_err, errors = errors,
                  first_error = first_error,
                  answers = { queries = #queries, unchanged = #queries - unknown, unknown = unknown } }
    if labels then
      row.labels = { false_accepts = lab_fa, false_rejects = lab_fr, unlabelled = unlabelled }
    end
    rows[#rows + 1] = row
  end
  return { pairs = prs, unpaired = unpaired, alpha = alpha, beta = beta, k = k, rows = rows,
           replayed_queries = #stages, unreplayable_queries = unusable, labelled = labels ~= nil,
           cut = src.cut, from_results = src.cut ~= nil }
end

-- The candidates as --pairs prints them: one JSON line each.
function M.pair_lines(prs)
  local out = {}
  for _, p in ipairs(prs) do
    local obs_text = cut(show(p.obs))
    for i, c in ipairs(p.cands) do
      out[#out + 1] = json.canonical({ id = p.id .. "/" .. i, query = p.query == nil and json.null or p.query,
        hop = p.hop == nil and json.null or p.hop, tool = p.tool == nil and json.null or p.tool,
        candidate = cut(show(c)), observation = obs_text, exact = verify.exact(c, p.obs) and true or false })
    end
  end
  return out
end

-- The --json object of a result.
function M.json_object(res, src)
  local out = { cassette = src, pairs = #res.pairs, unpaired = res.unpaired, alpha = res.alpha,
                beta = res.beta or json.null, k = res.k == math.huge and "inf" or res.k,
                replayed_queries = res.replayed_queries, unreplayable_queries = res.unreplayable_queries,
                verifiers = json.array({}) }
  local cands = 0
  for _, p in ipairs(res.pairs) do cands = cands + #p.cands end
  out.candidates = cands
  if res.from_results then out.cut = res.cut end
  for _, r in ipairs(res.rows) do
    local a = r.answers
    local o = { verifier = r.verifier, accepted = r.accepted, p = r.p,
      false_accepts = r.false_accepts, rel_lat = r.rel_lat or json.null, errors = r.errors,
      replay_rel_lat = r.replay_rel_lat or json.null,
      answer_change = { queries = a.queries, unchanged = a.unchanged, unknown = a.unknown,
                        rate = a.unknown == 0 and 0 or json.null } }
    if r.labels then o.labels = r.labels end
    if r.replayed then o.answer_change.replayed = r.replayed end
    out.verifiers[#out.verifiers + 1] = o
  end
  return out
end

-- The table the terminal shows (and `specula report` embeds): its lines.
function M.table_lines(res, src)
  local lines = {}
  local function add(...) lines[#lines + 1] = format(...) end
  if res.from_results then
    add("%d (candidate, observation) pairs from %s (%d hops whose speculation was not judged, %d cut candidates "
      .. "skipped)", #res.pairs, src, res.unpaired, res.cut)
  else
    add("%d (candidate, observation) pairs from %s (%d speculator calls without an observation)",
      #res.pairs, src, res.unpaired)
  end
  add("alpha %.3f  beta %s  k %s (from the recorded %s)", res.alpha,
    res.beta and format("%.3f", res.beta) or "- (no model call recorded)",
    res.k == math.huge and "inf" or tostring(res.k), res.from_results and "stage times" or "latencies")
  local lab = res.labelled
  local head = format("%-24s %8s %8s %13s %8s %8s %8s %8s", "verifier", "accepted", "p", "false accepts", "RelLat",
    "replay", "answers?", "errors")
  if lab then head = head .. format(" %9s %9s %10s", "label FA", "label FR", "unlabelled") end
  lines[#lines + 1] = head
  for _, r in ipairs(res.rows) do
    local l = format("%-24s %8d %8.3f %13d %8s %8s %8d %8d", r.verifier, r.accepted, r.p, r.false_accepts,
      r.rel_lat and format("%.3f", r.rel_lat) or "-", r.replay_rel_lat and format("%.3f", r.replay_rel_lat) or "-",
      r.answers.unknown, r.errors)
    if r.labels then l = l .. format(" %9d %9d %10d", r.labels.false_accepts, r.labels.false_rejects, r.labels.unlabelled) end
    lines[#lines + 1] = l
  end
  add("RelLat: theory at p; replay: the recorded stages of %d quer%s re-scheduled with each verifier's verdicts%s",
    res.replayed_queries, res.replayed_queries == 1 and "y" or "ies",
    res.unreplayable_queries > 0 and format(" (%d not rebuilt from the tape)", res.unreplayable_queries) or "")
  add("answers?: queries where a wrong guess would be committed; the tape cannot tell their answers")
  if res.agent then
    add("")
    add("replayed with %s at k %s (virtual clock, the verifier in every tool), answers against the recorded ones:",
      res.agent, res.k == math.huge and "inf" or tostring(res.k))
    add("%-24s %8s %8s %15s", "verifier", "same", "changed", "not replayable")
    for _, r in ipairs(res.rows) do
      local x = r.replayed
      add("%-24s %8d %8d %15d", r.verifier, x.same, x.changed, x.not_replayable)
    end
  end
  return lines
end

-- Replays the cassette `dir` with the agent script `script` over the
-- queries of `input` at the lab's k (virtual clock, misses fail the call;
-- a tape recorded at another k is served as well): once with the
-- agent's own verifiers (the recorded answers: a replay of the same run has
-- them) and once per verifier of vs, set as the agent's and every tool's
-- verifier. Adds to each row of res.rows `replayed = { same, changed,
-- not_replayable }` (a query whose record carries an error, as one that
-- asked for a request the tape lacks does). Returns true | nil, err.
function M.agent_replay(res, vs, dir, script, input)
  local cassette = require "specula.cassette"
  local runner = require "specula.run.runner"
  local datasets = require "specula.datasets"
  if C.sp_host_path_kind(script) ~= 1 then return nil, format("--agent '%s': no such file", script) end
  local qs, qerr = datasets.load(input, { format = "auto" })
  if not qs then return nil, format("--input '%s': %s", input, tostring(qerr)) end
  local queries = {}
  for i, q in ipairs(qs) do queries[i] = { id = q.id, query = q.query } end
  if cassette.state then return nil, "a cassette is already open" end
  -- opened before the script's main chunk, which may connect to an MCP
  -- server at top level (as `specula run --replay-io` does)
  local ok, cerr = require("specula.run.cassette").open({ replay = dir, miss = "error" })
  if not ok then return nil, cerr end
  local chunk, lerr = loadfile(script)
  if not chunk then cassette.close() return nil, "cannot load --agent script: " .. tostring(lerr) end
  require("specula.provenance").add_script_dir(script)   -- its modules beside it, as `specula run` finds them
  local okc, agent = pcall(chunk)
  if not okc or type(agent) ~= "table" or not agent.__specula_agent then
    cassette.close()
    return nil, format("--agent '%s' must return an agent (specula.agent{...})%s", script,
      okc and "" or ": " .. tostring(agent))
  end
  local function run_all()
    cassette.rewind()
    local okr, recs = pcall(runner.run, agent, { queries = queries, clock = "virtual", k = res.k })
    if not okr then return nil, tostring(recs) end
    local by = {}
    for _, r in ipairs(recs) do by[tostring(r.id)] = r end
    return by
  end
  local own = { agent = agent.verify, tools = {} }
  for name, t in pairs(agent.tools or {}) do own.tools[name] = t.verify end
  local base, berr = run_all()
  if not base then cassette.close() return nil, berr end
  for i, v in ipairs(vs) do
    agent.verify = v.fn
    for _, t in pairs(agent.tools or {}) do t.verify = v.fn end
    local got, gerr = run_all()
    if not got then cassette.close() return nil, gerr end
    local same, changed, lost = 0, 0, 0
    for _, q in ipairs(queries) do
      local b, g = base[tostring(q.id)], got[tostring(q.id)]
      if not b or b.error ~= nil or not g or g.error ~= nil then lost = lost + 1
      elseif json.canonical(b.answer) == json.canonical(g.answer) then same = same + 1
      else changed = changed + 1 end
    end
    res.rows[i].replayed = { same = same, changed = changed, not_replayable = lost }
  end
  agent.verify = own.agent
  for name, t in pairs(agent.tools or {}) do t.verify = own.tools[name] end
  cassette.close()
  return true
end

-- Parse --k: the number of threads, or math.huge for inf | nil, err.
-- The text is read as every --k is (specula.internal.domains: digits, inf or
-- infinity; not "Inf" or "1e999", which tonumber would take for inf).
local function parse_k(v)
  local k = type(v) == "string" and optslib.parse("k", v) or nil
  if not k or k == 0 then return nil, "--k must be an integer >= 1 or inf, got '" .. tostring(v) .. "'" end
  return k
end
M.parse_k = parse_k

-- The default verifiers, loaded.
M.DEFAULT = { "exact", "normalized", "spechop", "jaccard" }

-- Why a results file cannot stand for a cassette: without --keep-candidates
-- its records keep each hop's verdict and observation but not the guesses.
function M.file_message(src)
  return format("'%s': results files hold no speculated candidates unless the run kept them (each hop's record "
    .. "keeps the verdict, rank and observation, not the guesses); record with --keep-candidates, or give the "
    .. "cassette directory a run wrote with --record", src)
end

-- The records of a results file (JSONL, as `specula run --out` writes) |
-- nil, err. A line that is not a JSON object is an error naming it.
function M.read_results(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, format("results file '%s': %s", path, tostring(err)) end
  local recs, lineno = {}, 0
  local rd = require("specula.provenance").reader()
  for line in lines_of(f) do
    lineno = lineno + 1
    if line:find("%S") then
      local ok, r = pcall(json.decode, line)
      if not ok or type(r) ~= "table" or r[1] ~= nil then
        f:close()
        return nil, format("%s:%d: not a JSON object (a results file has one record per line)", path, lineno)
      end
      -- an edited provenance is refused, as by every reader of records (a
      -- short one expanded from its run's first record above it)
      local okp, perr = rd:expand(r, path, lineno)
      if not okp then
        f:close()
        return nil, perr, "provenance"
      end
      recs[#recs + 1] = r
    end
  end
  f:close()
  return recs
end

-- Whether any record carries the candidates --keep-candidates keeps.
function M.has_candidates(recs)
  for _, r in ipairs(recs) do
    if type(r.candidates) == "table" then return true end
  end
  return false
end

local function num_or(v, d)
  return type(v) == "number" and v or d
end

-- The pairs and stages of results records written with --keep-candidates,
-- as analyse_pairs takes them. A pair is one hop's judged candidates (rank
-- order) against its observation; its id QUERY/HOP/TOOL as from a tape.
-- Candidates marked cut (over 64 KB, or not JSON) are skipped and counted;
-- the stage times are the records' own (t_spec, t_target, t_seg).
function M.from_results(recs)
  local prs, cut, unpaired = {}, 0, 0
  local stages, unusable = {}, 0
  local segs = {}
  for _, r in ipairs(recs) do
    local hops = type(r.stages) == "table" and type(r.stages.hops) == "table" and r.stages.hops or {}
    local traj = type(r.trajectory) == "table" and r.trajectory or {}
    local by_hop, order = {}, {}
    for _, e in ipairs(type(r.candidates) == "table" and r.candidates or {}) do
      if type(e) == "table" and type(e.hop) == "number" then
        local g = by_hop[e.hop]
        if not g then
          g = { tool = e.tool, list = {} }
          by_hop[e.hop] = g
          order[#order + 1] = e.hop
        end
        local okc, c = pcall(json.decode, e.candidate)
        local oko, o = pcall(json.decode, e.observation)
        if e.cut or not okc or not oko or type(e.candidate) ~= "string" or type(e.observation) ~= "string" then
          cut = cut + 1
        else
          g.list[#g.list + 1] = { rank = num_or(e.rank, #g.list), value = c }
          g.obs = o
        end
      end
    end
    for _, hop in ipairs(order) do
      local g = by_hop[hop]
      if #g.list > 0 then
        table.sort(g.list, function(a, b) return a.rank < b.rank end)
        local cands = {}
        for i, c in ipairs(g.list) do cands[i] = c.value end
        local h = hops[hop + 1] or {}
        local step = traj[hop + 1]
        local action = type(step) == "table" and type(step.action) == "table" and step.action or {}
        prs[#prs + 1] = { id = format("%s/%d/%s", tostring(r.id), hop, tostring(g.tool)), tool = g.tool,
                          args = action.args, cands = cands, obs = g.obs, spec_ms = num_or(h.t_spec, 0),
                          target_ms = num_or(h.t_target, 0), query = r.id, hop = hop }
      end
    end
    local sh = {}
    for i, h in ipairs(hops) do
      if type(h) ~= "table" then sh = nil break end
      segs[#segs + 1] = num_or(h.t_seg, 0)
      if not by_hop[i - 1] and h.spec and h.spec ~= "none" then unpaired = unpaired + 1 end
      sh[i] = { t_seg = num_or(h.t_seg, 0), t_target = num_or(h.t_target, 0), t_spec = num_or(h.t_spec, nil),
                t_verify = num_or(h.t_verify, 0), spec = type(h.spec) == "string" and h.spec or nil,
                rank = num_or(h.rank, nil), ncands = num_or(h.ncands, nil) }
    end
    if sh and #sh > 0 and r.error == nil and type(r.stages.final_seg) == "number" then
      stages[#stages + 1] = { query = r.id, hops = sh, final_seg = r.stages.final_seg }
    else
      unusable = unusable + 1
    end
  end
  return { pairs = prs, unpaired = unpaired, seg_ms = mean(segs), stages = stages, unusable = unusable, cut = cut }
end

-- The lab's input from SRC, a cassette directory or a results file:
-- { pairs, unpaired, seg_ms, stages, unusable[, cut] } | nil, err.
function M.load_source(src)
  if C.sp_host_path_kind(src) == 1 then
    -- a file is taken for a results file: one that is not says so too
    local recs, err, what = M.read_results(src)
    if not recs and what == "provenance" then return nil, err end
    if not recs then return nil, M.file_message(src) .. " (" .. err .. ")" end
    if not M.has_candidates(recs) then return nil, M.file_message(src) end
    return M.from_results(recs)
  end
  local recs, lerr = lab.cassette(src)
  if not recs then return nil, lerr end
  return tape_source(recs)
end

-- o: the options of `specula verifiers` (specula.cmd.verifiers). Returns nil, msg
-- for a usage mistake (nothing printed), else nothing.
function M.main(o)
  local src = o.sources[1]
  local vs, verr = M.load_verifiers(#o.verifiers > 0 and o.verifiers or M.DEFAULT)
  if not vs then return usage(verr) end
  if (o.agent ~= nil) ~= (o.input ~= nil) then return usage("--agent and --input go together") end
  local source, lerr = M.load_source(src)
  if not source then return fail(lerr) end
  if o.agent and source.cut then return usage("--agent replays a cassette directory, not a results file") end
  local prs = source.pairs
  if #prs == 0 then
    if source.cut then
      return fail(format("results file '%s' holds no judged candidate (%d cut)", src, source.cut))
    end
    return fail(format("cassette '%s' holds no speculator call paired with its target's observation "
      .. "(record with a speculator, on this version of specula)", src))
  end
  if o.pairs then
    local lines = M.pair_lines(prs)
    require("specula.internal.output").stdout(concat(lines, "\n"), "\n")
    return
  end
  local labels
  if o.labels then
    local known = {}
    for _, p in ipairs(prs) do
      for i = 1, #p.cands do known[p.id .. "/" .. i] = true end
    end
    local lerr2
    labels, lerr2 = M.read_labels(o.labels, known)
    if not labels then return fail(lerr2) end
  end
  local res, aerr = M.analyse_pairs(source, vs, { k = o.k, labels = labels })
  if not res then return fail(format("%s '%s': %s", source.cut and "results file" or "cassette", src, aerr)) end
  if o.agent then
    local ok, rerr = M.agent_replay(res, vs, src, o.agent, o.input)
    if not ok then return fail(rerr) end
    res.agent = o.agent
  end
  local said
  for _, r in ipairs(res.rows) do
    if r.first_error then require("specula.internal.output").stderr("specula verifiers: ", r.verifier, ": ", r.first_error, "\n") end
    if not r.replay_rel_lat and r.replay_error and r.replay_error ~= said then
      said = r.replay_error
      require("specula.internal.output").stderr("specula verifiers: no replay RelLat: ", r.replay_error, "\n")
    end
  end
  if o.json then
    require("specula.internal.output").wrap(io.stdout, "json"):write(json.encode(M.json_object(res, src)), "\n")
    return
  end
  require("specula.internal.output").stdout(concat(M.table_lines(res, src), "\n"), "\n")
end

return M
