-- specula.cassette.calls: the agent's own calls through the cassette: a
-- target call's observation recorded for the labs, and a speculator's
-- calls recorded or served from the tape.
local json = require "specula.json"
local sched = require "specula.internal.sched"
local session = require "specula.cassette.session"
local match = require "specula.cassette.match"
local miss = require "specula.cassette.miss"
local clock = require "specula.cassette.clock"
local writer = require "specula.cassette.writer"

local tostring, ipairs = tostring, ipairs

local M = {}

local current_job, meta_now, scopes = session.current_job, session.meta_now, session.scopes
local take, count_served, on_miss = match.take, match.count_served, miss.on_miss
local sleep_until, depart, never = clock.sleep_until, clock.depart, clock.never
local write, write_start = writer.write, writer.write_start

-- ---- observations ------------------------------------------------------------------------

-- A target call's observation, recorded (never served: the call's own
-- requests are) so the verifier lab can pair it with the speculators'
-- candidates. Errors propagate untouched and are not recorded.
local function observed(st, tool, args, t0, meta, J, ...)
  if st.file then
    local ok, ac = pcall(json.canonical, args)
    write({ kind = "obs", key = "OBS " .. tostring(tool) .. "\n" .. (ok and ac or tostring(args)), n = 1,
            at = t0 - st.t0, off = J and t0 - J.born, ms = sched.now() - t0, meta = meta,
            req = { tool = tool, args = args },
            res = { value = (...) == nil and json.null or (...) } })
  end
  return ...
end

function M.observe(tool, args, call, ctx)
  local st = session.state
  if not st.file then return call(args, ctx) end
  local J = current_job()
  return observed(st, tool, args, sched.now(), meta_now(J), J, call(args, ctx))
end

-- ---- speculators --------------------------------------------------------------------------

-- A speculator S for tool through the cassette. is_cands(r): r is a
-- candidate list; cands(list): make one.
function M.speculator(S, tool, is_cands, cands)
  return function(args, ctx)
    local st = session.state
    local ok, ac = pcall(json.canonical, args)
    if not ok then ac = tostring(args) end
    local key = "SPEC " .. tostring(tool) .. "\n" .. ac
    local J = current_job()
    local meta = meta_now(J)
    local scope, qscope = scopes(meta, st.bypath)
    local rec, n, held, again = take(st, scope, qscope, key)
    if st.replay then
      if rec and rec.kind == "spec" and rec.start and st.miss ~= "live" then
        st.held = st.held + 1
        never()
        error("speculator cancelled in the recording", 0)
      end
      if rec and rec.kind == "spec" and not rec.start then
        count_served(st, again)
        sleep_until(depart(J, rec) + (rec.ms or 0))
        if rec.err then error(rec.err, 0) end
        local r = rec.res or {}
        if r.cands then
          local l = {}
          for i, c in ipairs(r.cands) do l[i] = { value = c.value, confidence = c.confidence } end
          return cands(l)
        end
        if r.value == json.null then return nil end
        return r.value
      end
      local go, err = on_miss(st, "spec", "speculator of '" .. tostring(tool) .. "' " .. ac, n, held, meta,
        rec ~= nil, key)
      if not go then error(err, 0) end
    end
    write_start("spec", key, n, meta)
    local t0 = sched.now()
    if J and not J.first then J.first = t0 - J.born end
    local res = { pcall(S, args, ctx) }
    if st.file then
      rec = { kind = "spec", key = key, n = n, at = t0 - st.t0, off = J and t0 - J.born, ms = sched.now() - t0,
              meta = meta, req = { tool = tool, args = args } }
      if not res[1] then rec.err = tostring(res[2])
      elseif is_cands(res[2]) then
        local l = {}
        for i, c in ipairs(res[2]) do l[i] = { value = c.value, confidence = c.confidence } end
        rec.res = { cands = json.array(l) }
      else
        rec.res = { value = res[2] == nil and json.null or res[2] }
      end
      write(rec)
    end
    if not res[1] then error(res[2], 0) end
    return res[2]
  end
end

return M
