-- specula predictors CASSETTE_OR_RESULTS... [--predictor NAME_OR_FILE]... [--json]
-- Replays the committed tool-call histories of a run through each action
-- predictor, online (a predictor learns a query's trajectory only after it
-- was asked about every step of it, as in a run), and reports how often its
-- first guess, or one of its first three, was the action the model took.
local json = require "specula.json"
local predict = require "specula.predict"
local argv = require "specula.argv"
local lab = require "specula.lab"
local C = require("specula.core").C

local format = string.format

local M = {}

local usage_text = [[
usage: specula predictors CASSETTE_DIR|RESULTS.jsonl... [--predictor NAME_OR_FILE]... [--json]
  --predictor P  pattern, ngram, ngram:N (context of N-1 actions), or a Lua file returning a
                 predictor (a function(history, ctx) -> { {tool, args, confidence}, ... }, or a
                 table with such a __call and optional observe_trajectory(actions))
                 (repeatable; default: pattern, ngram)
  --json         one JSON object instead of the table
]]

local usage, fail = lab.command("specula predictors", usage_text)

-- Argument rules for the built-in predictors, which know no agent: the
-- previous call's arguments when it was the same tool, else an empty
-- table, so a guess still names its tool (counted by "tool top-1").
local function lab_rules()
  return setmetatable({}, { __index = function(_, key)
    local nxt = key:match("%->(.*)$") or key
    return function(prev)
      if prev and prev.tool == nxt and type(prev.args) == "table" then return prev.args end
      return {}
    end
  end })
end

local function load_predictor(spec)
  if spec == "pattern" then return function() return predict.pattern { top = 3, rules = lab_rules() } end end
  if spec == "ngram" then return function() return predict.ngram { top = 3, rules = lab_rules() } end end
  local n = spec:match("^ngram:(%d+)$")
  if n then
    n = tonumber(n)
    if n < 2 then return nil, "ngram:N needs N >= 2" end
    return function() return predict.ngram { n = n, top = 3, rules = lab_rules() } end
  end
  local chunk, err = lab.lua_file(spec, "predictor", format("unknown predictor '%s' (not pattern, ngram, ngram:N or a file)",
    spec))
  if not chunk then return nil, err end
  return function()
    local ok, p = pcall(chunk)
    if not ok then error(format("predictor file '%s' failed: %s", spec, tostring(p)), 0) end
    local callable = type(p) == "function" or (type(p) == "table" and getmetatable(p) and getmetatable(p).__call)
    if not callable then
      error(format("predictor file '%s' must return a function or a callable table, got %s", spec, type(p)), 0)
    end
    return p
  end
end

-- Committed trajectories: a list of { id, steps = { {tool, args, observation} } }.
local function from_results(path, out)
  local f, err = io.open(path, "r")
  if not f then return nil, "cannot read " .. tostring(err) end
  local ln = 0
  for line in f:lines() do
    ln = ln + 1
    if line:find("%S") then
      local r = json.decode(line)
      if type(r) ~= "table" then f:close() return nil, format("%s:%d: not a JSON object", path, ln) end
      if type(r.trajectory) == "table" and not r.error then
        local steps = {}
        for _, h in ipairs(r.trajectory) do
          if type(h.action) == "table" and h.action.tool then
            steps[#steps + 1] = { tool = h.action.tool, args = h.action.args, observation = h.observation }
          end
        end
        out[#out + 1] = { id = r.id, steps = steps }
      end
    end
  end
  f:close()
  return true
end

local function from_cassette(dir, out)
  local recs, err = lab.cassette(dir)
  if not recs then return nil, err end
  local by, order = {}, {}
  for _, r in ipairs(recs) do
    local m = r.meta
    if r.kind == "obs" and m and not m.speculative and m.query ~= nil and type(m.hop) == "number" and r.req then
      local q = by[m.query]
      if not q then q = { id = m.query, at = {} }; by[m.query] = q; order[#order + 1] = q end
      if q.at[m.hop] == nil then
        q.at[m.hop] = { tool = r.req.tool, args = r.req.args, observation = r.res and r.res.value }
      end
    end
  end
  for _, q in ipairs(order) do
    local hops = {}
    for h in pairs(q.at) do hops[#hops + 1] = h end
    table.sort(hops)
    local steps = {}
    for i, h in ipairs(hops) do steps[i] = q.at[h] end
    out[#out + 1] = { id = q.id, steps = steps }
  end
  return true
end

local function same_action(p, a)
  if type(p) ~= "table" or p.tool ~= a.tool then return false end
  local ok1, x = pcall(json.canonical, p.args)
  local ok2, y = pcall(json.canonical, a.args)
  return ok1 and ok2 and x == y
end

function M.evaluate(make, trajs)
  local P = make()
  local steps, top1, top3, name1 = 0, 0, 0, 0
  for _, t in ipairs(trajs) do
    local hist = {}
    for _, s in ipairs(t.steps) do
      steps = steps + 1
      local list = P(hist, { id = t.id, hop = #hist }) or {}
      if type(list) ~= "table" then error("a predictor returned " .. type(list) .. ", not a list", 0) end
      for i = 1, math.min(3, #list) do
        if same_action(list[i], s) then
          if i == 1 then top1 = top1 + 1 end
          top3 = top3 + 1
          break
        end
      end
      if type(list[1]) == "table" and list[1].tool == s.tool then name1 = name1 + 1 end
      hist[#hist + 1] = s
    end
    if type(P) == "table" and P.observe_trajectory then
      local actions = {}
      for i, s in ipairs(t.steps) do actions[i] = { tool = s.tool, args = s.args } end
      P:observe_trajectory(actions)
    end
  end
  return { steps = steps, top1 = top1, top3 = top3, tool_top1 = name1,
           top1_rate = steps > 0 and top1 / steps or 0, top3_rate = steps > 0 and top3 / steps or 0,
           tool_top1_rate = steps > 0 and name1 / steps or 0 }
end

function M.main(args)
  -- --help ends the parse: what follows it is not checked
  local help = { "help", flag = true, stop = true }
  local o, perr = argv.parse(args, { ["--predictor"] = { "predictors", list = true },
    ["--json"] = { "json", flag = true }, ["--help"] = help, ["-h"] = help },
    { positional = "sources", option = "^%-%-", into = { predictors = {} } })
  if not o then return usage(perr) end
  if o.help then io.stdout:write(usage_text) return end
  local sources, names = o.sources, o.predictors
  if #sources == 0 then return usage("a cassette directory or a results file is needed") end
  if #names == 0 then names = { "pattern", "ngram" } end
  local makers, merr = lab.load_named(names, load_predictor)
  if not makers then return usage(merr) end
  for _, m in ipairs(makers) do m.make = m.value end
  local trajs = {}
  for _, s in ipairs(sources) do
    local kind = C.sp_host_path_kind(s)
    local ok, err
    if kind == 2 then ok, err = from_cassette(s, trajs)
    elseif kind == 1 then ok, err = from_results(s, trajs)
    else ok, err = nil, format("'%s': no such file or directory", s) end
    if not ok then return fail(err) end
  end
  local nsteps = 0
  for _, t in ipairs(trajs) do nsteps = nsteps + #t.steps end
  if nsteps == 0 then return fail("no committed tool call in " .. table.concat(sources, ", ")) end
  local rows = {}
  for _, m in ipairs(makers) do
    local ok, r = pcall(M.evaluate, m.make, trajs)
    if not ok then return fail(m.name .. ": " .. tostring(r)) end
    r.predictor = m.name
    rows[#rows + 1] = r
  end
  if o.json then
    io.stdout:write(json.encode({ trajectories = #trajs, steps = nsteps, predictors = json.array(rows) }), "\n")
    return
  end
  io.stdout:write(format("%d committed tool calls in %d trajectories (online: each predictor learns a "
    .. "trajectory after predicting it)\n", nsteps, #trajs))
  io.stdout:write(format("%-20s %8s %8s %12s\n", "predictor", "top-1", "top-3", "tool top-1"))
  for _, r in ipairs(rows) do
    io.stdout:write(format("%-20s %8.3f %8.3f %12.3f\n", r.predictor, r.top1_rate, r.top3_rate, r.tool_top1_rate))
  end
end

return M
