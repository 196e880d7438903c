-- specula.run.predstate: the state of a predictor that learns across queries,
-- kept beside a run's --out file (FILE.predictor), so that a resumed run
-- predicts the rest as the uninterrupted run would have.
--
-- A learning predictor (observe_trajectory / observe) changes after each
-- query, in input order. When a run stops, the records in --out are the
-- queries it learnt from; a resume that skips them would start the rest
-- from the configured model instead. The run writes the predictor's
-- state() when it ends (normally or on a signal; a --compare run after
-- each configuration) with what it covers: the run's provenance digest and
-- the input positions of the records it learnt, by digest. A resume
-- restores it only when both match the records the file holds; otherwise
-- it says the predictions of the rest may differ. The file is scrubbed of
-- every known secret, as every output is (a model learns argument values).
local json = require "specula.json"
local crypto = require "specula.crypto"
local stderr = require("specula.internal.output").stderr

local type, tostring, pairs, ipairs, pcall, format, concat, sort =
  type, tostring, pairs, ipairs, pcall, string.format, table.concat, table.sort

local M = {}

local FORMAT = "specula predictor state 1"

-- The digest of a set of input positions (order-free: learning runs in
-- input order, so the set says the order).
local function digest(positions)
  local list = {}
  for i = 1, #positions do list[i] = positions[i] end
  sort(list)
  return crypto.sha256_hex(concat(list, "\n")), #list
end
M.digest = digest

-- Can this predictor's state be kept? (a table with state and restore)
function M.keepable(P)
  return type(P) == "table" and type(P.state) == "function" and type(P.restore) == "function"
end

-- The file: { format, runs = { [provenance.run] = { learnt, n, state } } },
-- one entry per configuration (a --compare run has several).

--- The entry of P now: its state as canonical JSON text (taken at once: a
-- predictor's state tables go on changing), and what it covers.
function M.entry(P, positions)
  local d, n = digest(positions)
  -- state() is the user's code: its failure is a state not kept, not the run's end
  local oks, st = require("specula.internal.sched").protect(false, P.state, P)
  if not oks then return nil, "the predictor's state() failed: " .. st end
  local ok, text = pcall(json.canonical, { learnt = d, n = n, state = st })
  if not ok then return nil, "cannot encode the predictor's state: " .. tostring(text) end
  return text
end

--- The entries of the file at path: a table by run digest, or nil and why.
function M.read(path)
  local f = io.open(path, "rb")
  if not f then return nil, format("%s is missing (a run killed before it ended writes none)", path) end
  local text = f:read("*a")
  f:close()
  local st = json.decode(text or "")
  if type(st) ~= "table" or st.format ~= FORMAT or type(st.runs) ~= "table" then
    return nil, format("%s is not a predictor state this specula writes", path)
  end
  return st.runs
end

--- Restore P from the entries read (or nil and why) when the one of this
-- run (run_digest) covers exactly the learnt records of the file being
-- resumed (positions). Returns true, or false and why (for the warning),
-- and true third when restore() raised (the predictor is then unusable).
function M.restore(P, path, runs, why, run_digest, positions)
  if not runs then return false, why end
  local e = runs[run_digest]
  if type(e) ~= "table" or type(e.state) ~= "table" then
    return false, format("%s was written by another run (no state for provenance.run %s)", path,
      tostring(run_digest))
  end
  local d, n = digest(positions)
  if e.learnt ~= d or e.n ~= n then
    return false, format("%s covers %s learnt queries, the file holds %d others (a run stopped while queries "
      .. "finished out of order)", path, tostring(e.n), n)
  end
  -- a restore that raises (a state well formed but wrong for this
  -- predictor) may have left it half restored: the third result says so,
  -- and the caller disables the predictor rather than run it so
  local okc, ok, err = require("specula.internal.sched").protect(false, P.restore, P, e.state)
  if not okc then return false, format("%s: the predictor's restore() failed: %s", path, ok), true end
  if not ok then return false, format("%s: %s", path, require("specula.internal.sched").errstr(err)) end
  return true
end

--- Write the entries (run digest -> M.entry text) to path: a temporary file
-- renamed over it. nil and the error when it cannot be written.
function M.save(path, entries)
  local keys = {}
  for k in pairs(entries) do keys[#keys + 1] = k end
  sort(keys)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = json.canonical(k) .. ":" .. entries[k] end
  local text = '{"format":' .. json.canonical(FORMAT) .. ',"runs":{' .. concat(parts, ",") .. "}}\n"
  local tmp = path .. ".tmp"
  -- a model learns argument values: its writer lets no known secret out
  local f, err = require("specula.internal.output").open(tmp, "wb", "canonical")
  if not f then return nil, tostring(err) end
  local okw, werr = f:write(text)
  local okc, cerr = f:close()
  if not okw or not okc then os.remove(tmp) return nil, tostring(werr or cerr) end
  local okr, rerr = os.rename(tmp, path)
  if not okr then os.remove(tmp) return nil, tostring(rerr) end
  return true
end

--- After a restore was tried for run (runner.make_run's): on success the
-- positions restored are what its state covers, and a note says so;
-- otherwise the warning of a resume whose predictor starts afresh. config:
-- the --compare configuration's name, or nil.
function M.resumed(run, ok, why, positions, path, quiet, config)
  local of = config and format(" (configuration '%s')", config) or ""
  if ok then
    for i, p in ipairs(positions) do run.learnt[i] = p end
    if not quiet then
      stderr(format("specula: resuming: the predictor's state after the %d queries it learnt from%s restored "
        .. "from %s\n", #positions, of, path))
    end
    return
  end
  stderr("specula: warning: resuming: the agent's predictor learns across queries and its state after the "
    .. "records already written" .. of .. " cannot be restored (" .. why .. "): it starts from its configured "
    .. "model, so the predictions (and times) of the queries still to run may differ from an uninterrupted run\n")
end

return M
