-- specula.predstate: the state of a predictor that learns across queries,
-- kept beside a run's --out file (FILE.predictor), so that a resumed run
-- predicts the rest as the uninterrupted run would have.
--
-- A learning predictor (observe_trajectory / observe) changes after each
-- query, in input order. When a run stops, the records in --out are the
-- queries it learnt from; a resume that skips them would start the rest
-- from the configured model instead. The run writes the predictor's
-- state() when it ends (normally or on a signal) with what it covers: the
-- run's provenance digest and the input positions of the records it learnt,
-- by digest. A resume restores it only when both match the records the file
-- holds; otherwise it says the predictions of the rest may differ.
local json = require "specula.json"
local crypto = require "specula.crypto"
local stderr = require("specula.secrets").stderr

local type, tostring, format, concat, sort = type, tostring, string.format, table.concat, table.sort

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

--- Restore P from path when it covers exactly the learnt records of the
-- file being resumed. run_digest: this run's provenance digest; positions:
-- the input positions of the file's records a predictor learnt (no error).
-- Returns true when restored, else false and why (for the warning).
function M.restore(P, path, run_digest, positions)
  local f = io.open(path, "rb")
  if not f then return false, format("%s is missing (a run killed before it ended writes none)", path) end
  local text = f:read("*a")
  f:close()
  local st = json.decode(text or "")
  if type(st) ~= "table" or st.format ~= FORMAT or type(st.state) ~= "table" then
    return false, format("%s is not a predictor state this specula writes", path)
  end
  if st.run ~= run_digest then
    return false, format("%s was written by another run (provenance.run %s there, %s here)", path,
      tostring(st.run), tostring(run_digest))
  end
  local d, n = digest(positions)
  if st.learnt ~= d or st.n ~= n then
    return false, format("%s covers %s learnt queries, the file holds %d others (a run stopped while queries "
      .. "finished out of order)", path, tostring(st.n), n)
  end
  local ok, err = P:restore(st.state)
  if not ok then return false, format("%s: %s", path, tostring(err)) end
  return true
end

--- Write P's state to path (a temporary file renamed over it): nil and the
-- error when it cannot be written.
function M.save(P, path, run_digest, positions)
  local d, n = digest(positions)
  local ok, text = pcall(json.canonical, { format = FORMAT, run = run_digest, learnt = d, n = n,
                                           state = P:state() })
  if not ok then return nil, "cannot encode the predictor's state: " .. tostring(text) end
  local tmp = path .. ".tmp"
  local f, err = io.open(tmp, "wb")
  if not f then return nil, tostring(err) end
  local okw, werr = f:write(text, "\n")
  local okc, cerr = f:close()
  if not okw or not okc then os.remove(tmp) return nil, tostring(werr or cerr) end
  local okr, rerr = os.rename(tmp, path)
  if not okr then os.remove(tmp) return nil, tostring(rerr) end
  return true
end

--- The warning of a resume whose predictor starts afresh.
function M.warn(why)
  stderr("specula: warning: resuming: the agent's predictor learns across queries and its state after the "
    .. "records already written cannot be restored (" .. why .. "): it starts from its configured model, so "
    .. "the predictions (and times) of the queries still to run may differ from an uninterrupted run\n")
end

return M
