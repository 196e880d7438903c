-- specula.cassette.match: a request's key (its canonical form: no
-- headers, no secret query parameters, a JSON body canonical) and which
-- recorded entry answers it (docs/cassettes.md#another-configuration).
local json = require "specula.json"
local output = require "specula.internal.output"

local ipairs, concat = ipairs, table.concat

local M = {}

-- Everything on tape is scrubbed (specula.secrets): every declared secret
-- in every form, the request's own credential headers (extra), and what
-- looks like a credential.
local function scrub(s, extra) return output.clean(s, "message", extra) end
M.scrub = scrub

local function secret_param(name)
  name = name:lower()
  return name:find("key", 1, true) or name:find("token", 1, true) or name:find("secret", 1, true)
    or name:find("sig", 1, true) or name:find("auth", 1, true) or name:find("password", 1, true)
end

-- The URL without secret-looking query parameters (api_key=, token=, ...).
function M.clean_url(url)
  local base, q = url:match("^([^?#]*)%?([^#]*)")
  if not base then return (url:gsub("#.*$", "")) end
  local kept = {}
  for part in q:gmatch("[^&]+") do
    local name = part:match("^([^=]*)")
    if not secret_param(name) then kept[#kept + 1] = part end
  end
  if #kept == 0 then return base end
  return base .. "?" .. concat(kept, "&")
end

-- A request body in canonical form: canonical JSON when it is JSON.
local function canon_body(body)
  if body == nil or body == "" then return "" end
  local first = body:match("^%s*(.)")
  if first == "{" or first == "[" then
    local v = json.decode(body)
    if v ~= nil then
      local ok, c = pcall(json.canonical, v)
      if ok then return c end
    end
  end
  return body
end
M.canon_body = canon_body

-- The replay's index of a loaded tape's entries (tape.entries), on st:
-- exact: scope + key -> { [n] = entry }; loose: query + key -> entries in
-- the order they were asked; keys: every key on the tape.
function M.index(st, entries)
  local exact, loose, keys = {}, {}, {}
  st.entries = entries
  for _, r in ipairs(st.entries) do
    local e = r.scope .. "\n" .. r.key
    local x = exact[e]
    if not x then x = {}; exact[e] = x end
    x[r.n] = r
    local l = r.qscope .. "\n" .. r.key
    local list = loose[l]
    if not list then list = {}; loose[l] = list end
    list[#list + 1] = r
    keys[r.key] = true
  end
  st.exact, st.loose, st.keys = exact, loose, keys
end

local function occurrence(st, key)
  local n = (st.counts[key] or 0) + 1
  st.counts[key] = n
  return n
end

-- The next occurrence n of key asked in scope (see scopes) and, when
-- replaying, the entry that answers it:
--  1. that occurrence in the same scope (the same job of the same path, or
--     of the same thread on a format-2 tape), when the recording answered it;
--  2. else an answer to the same request in the same query not served yet,
--     in the order they were asked (the replay's schedule differs from the
--     recording's: another k, m, mode, policy, verifier or predictor);
--  3. else one served already (this schedule asks more often than the
--     recording did; the world answers the same request the same way);
--  4. else the recording's unanswered start of it (its call was cancelled
--     first: a discarded thread, a speculator its target beat), or nil.
-- Job lines (jobs = true) take only step 1 on a format-3 tape: a job's
-- length is that job's, not another path's.
-- Returns entry | nil, n, how many entries of it the query has, and
-- "again" when the entry was served before.
local function take(st, scope, qscope, key, extra, jobs)
  local n = occurrence(st, scope .. "\n" .. key)
  if not st.replay then return nil, n, 0 end
  -- a key that held a secret was stored scrubbed (scrubbing every key up
  -- front would cost the recording run time on the loop)
  if not st.keys[key] then
    local sk = scrub(key, extra)
    if st.keys[sk] then key = sk end
  end
  local x = st.exact[scope .. "\n" .. key]
  local e = x and x[n]
  if e and not e.start then
    local again = e.used and "again" or nil
    e.used = true
    return e, n, 1, again
  end
  if jobs and st.bypath then return nil, n, 0 end
  local list = st.loose[qscope .. "\n" .. key]
  if not list then return e, n, e and 1 or 0 end
  local served
  for i = 1, #list do
    local r = list[i]
    if not r.start then
      if not r.used then
        r.used = true
        return r, n, #list
      end
      served = served or r
    end
  end
  if served then return served, n, #list, "again" end
  return e or list[1], n, #list
end
M.take = take

-- Served: count it (again: an answer served before, asked once more).
local function count_served(st, again)
  st.served = st.served + 1
  if again then st.again = st.again + 1 end
end
M.count_served = count_served

return M
