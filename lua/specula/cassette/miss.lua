-- specula.cassette.miss: what a replay does with a request the tape does
-- not answer (--miss error, live or skip), counted for the end of the run.
local match = require "specula.cassette.match"
local nearest = require "specula.cassette.nearest"

local tostring, format = tostring, string.format

local M = {}

local scrub = match.scrub

-- What a miss does. Returns "live" to make the real call, or nil, err.
-- cancelled: the recording asked it (held times in this query) and never
-- got an answer.
local function on_miss(st, kind, what, n, held, meta, cancelled, key)
  -- what names the request (a URL, a speculator's arguments): it goes to
  -- errors and to the end-of-run summary on stderr
  what = scrub(what)
  st.missed = st.missed + 1
  -- a miss on a discarded speculative thread does not change the result;
  -- one on the committed path does
  local committed = kind ~= "spec" and not meta.speculative
  if committed then st.missed_committed = st.missed_committed + 1 end
  local detail
  if cancelled then
    st.missed_cancelled = st.missed_cancelled + 1
    detail = format("ECASSETTE: %s: not in the cassette %s (the recording asked it %d time%s in this query and "
      .. "cancelled it before any answer)", what, st.replay, held, held == 1 and "" or "s")
  else
    detail = format("ECASSETTE: %s: not in the cassette %s (occurrence %d of this request; it holds %d)",
      what, st.replay, n, held)
    -- a request the tape never saw: what it did see, and how it differs
    local near = held == 0 and key and nearest.nearest(st, key)
    if near then detail = detail .. "; " .. scrub(near) end
  end
  if #st.miss_list < 20 then st.miss_list[#st.miss_list + 1] = what end
  -- a miss on a thread that is speculative now counts as committed if its
  -- error becomes the query's (its thread was promoted): see query_done
  if kind ~= "spec" and meta.query ~= nil and st.miss ~= "live" then
    local q = tostring(meta.query)
    local l = st.pending_misses[q]
    if not l then l = { committed = {} }; st.pending_misses[q] = l end
    if committed then l.committed[detail] = true else l[#l + 1] = detail end
  end
  if st.miss == "live" then
    st.live = st.live + 1
    return "live"
  end
  if st.miss == "skip" then
    if kind == "spec" or meta.speculative then
      return nil, detail .. "; skipped (--miss skip): a failed speculation"
    end
    return nil, detail .. "; --miss skip does not apply to a call on the committed path"
  end
  return nil, detail
end

-- A speculator call the recording cancelled before it answered (its
-- target beat it, or its thread was discarded) and never answered
-- anywhere in the query stays unanswered in the replay: its target's
M.on_miss = on_miss

return M
