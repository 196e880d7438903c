-- specula.learned.features: what the tool model reads at a view: features
-- of the event sequence, of the latest user and assistant text and of the
-- latest result (one weight per class each), and the class-specific
-- features of each tool (weights shared by every tool).
local json = require "specula.json"
local common = require "specula.learned.common"
local tk = require "specula.learned.tokens"
local sources = require "specula.learned.sources"
local views = require "specula.learned.view"

local type, ipairs, tostring = type, ipairs, tostring
local sub, sqrt, min, max = string.sub, math.sqrt, math.min, math.max
local canonical = json.canonical
local SEP, keys_of, is_array, bucket = common.SEP, common.keys_of, common.is_array, common.bucket
local tokens, fine_shape, words, stems, tail_words = tk.tokens, tk.fine_shape, tk.words, tk.stems, tk.tail_words
local outcome, result_value, path_key = sources.outcome, sources.result_value, sources.path_key
local last_act = views.last_act

local M = {}

local function tool_features(view)
  local f = {}
  local function add(name, val) f[#f + 1] = name; f[#f + 1] = val or 1 end
  add("b")
  local toks = view.toks
  local n = #toks
  local t1, t2, t3 = toks[n] or "^", toks[n - 1] or "^", toks[n - 2] or "^"
  add("t1=" .. t1)
  add("t2=" .. t2 .. " " .. t1)
  add("t3=" .. t3 .. " " .. t2 .. " " .. t1)
  local events, calls = view.events, view.calls
  local nc = #calls
  add("nc=" .. bucket(nc))
  local lc1 = nc > 0 and events[calls[nc]].tool or "^"
  local lc2 = nc > 1 and events[calls[nc - 1]].tool or "^"
  add("c1=" .. tostring(lc1))
  add("c2=" .. tostring(lc2) .. " " .. tostring(lc1))
  add("c1t=" .. tostring(lc1) .. " " .. sub(t1, 1, 1))
  local seen = {}
  for _, i in ipairs(calls) do
    local tl = tostring(events[i].tool)
    seen[tl] = (seen[tl] or 0) + 1
  end
  for _, tl in ipairs(keys_of(seen)) do
    add("seen=" .. tl)
    if seen[tl] > 1 then add("seen2=" .. tl) end
  end
  local nu = 0
  for _, tk in ipairs(toks) do if tk == "U" then nu = nu + 1 end end
  add("nu=" .. bucket(nu))
  local last = view.last
  if last.user then
    local e = events[last.user]
    local ws = words(e.text, 48)
    local wv = 1 / sqrt(max(1, #ws))
    for _, w in ipairs(ws) do add("uw=" .. w, wv) end
    local shapes = {}
    for _, tk in ipairs(tokens(e.text)) do
      if tk:find("%d") or tk:find("[%a]_") then shapes[fine_shape(tk)] = true end
    end
    for _, sh in ipairs(keys_of(shapes)) do add("us=" .. sh) end
    add("since_user=" .. bucket(view.n - last.user))
  end
  if last.assistant then
    local text = events[last.assistant].text
    local ws = words(text, 48)
    local wv = 1 / sqrt(max(1, #ws))
    for _, w in ipairs(ws) do add("aw=" .. w, wv) end
  end
  if last.result then
    local e = events[last.result]
    local o = outcome(e)
    add("ro=" .. o)
    local v = result_value(e)
    if type(v) == "table" then
      if is_array(v) then
        add("ry=list" .. bucket(#v))
        if type(v[1]) == "table" and not is_array(v[1]) then
          for _, k in ipairs(keys_of(v[1])) do add("rk=*." .. path_key(tostring(k))) end
        end
      else
        add("ry=obj")
        local ks = keys_of(v)
        for i = 1, min(#ks, 24) do add("rk=" .. path_key(tostring(ks[i]))) end
      end
    else
      add("ry=text")
      if o == "err" then
        local ws = words(e.text, 16)
        for _, w in ipairs(ws) do add("ew=" .. w, 0.5) end
      end
    end
  end
  return f
end

-- What was last said, as stems (once per view).
local function said(view)
  local s = view.said
  if s then return s end
  local ev, last = view.events, view.last
  local u = last.user and ev[last.user].text or ""
  local a = last.assistant and ev[last.assistant].text or ""
  s = { u = stems(u, nil, 200), a = stems(a, nil, 400), al = stems(tail_words(a, 16)), act = last_act(view) }
  view.said = s
  return s
end

local name_stems_cache = {}
local function tool_stems(tool, spec)
  local key = tool .. SEP .. (spec and type(spec.description) == "string" and spec.description or "")
  local c = name_stems_cache[key]
  if c then return c end
  local name = {}
  stems(tool:gsub("[^%w]", " "), name)
  local desc = spec and type(spec.description) == "string" and stems(spec.description, nil, 60) or nil
  c = { name = keys_of(name), desc = desc and keys_of(desc) or nil }
  name_stems_cache[key] = c
  return c
end

local function overlap(list, set)
  if not list or #list == 0 then return 0 end
  local n = 0
  for _, w in ipairs(list) do if set[w] then n = n + 1 end end
  return n / #list
end

-- Class-specific features (their weights are shared by every tool): what
-- the argument model can do for a tool now, and how the tool's name and
-- description overlap with what was last said.
local function class_features(self, view, tool, calls, spec)
  local best = calls[1] and calls[1].p or 0
  local f = {}
  local function add(name, v) if v ~= 0 then f[#f + 1] = name; f[#f + 1] = v end end
  local sd = said(view)
  if best > 0 then
    add("fill", 1)
    add("fillp", best)
    -- a call not made yet in this conversation, and one that uses what
    -- came after the model last acted
    -- as likely as the best call not made yet in this conversation is, and
    -- the best that uses what came after the model last acted
    local fresh, new = 0, 0
    for _, c in ipairs(calls) do
      local k = canonical(c.args)
      local made = false
      for _, i in ipairs(view.calls) do
        local e = view.events[i]
        if e.tool == tool and type(e.args) == "table" and canonical(e.args) == k then made = true break end
      end
      if not made and c.p > fresh then fresh = c.p end
      if not made and c.ev > sd.act and c.p > new then new = c.p end
    end
    add("fresh", fresh)
    add("new", new)
  end
  local nc = #view.calls
  if nc > 0 and view.events[view.calls[nc]].tool == tool then add("repeat", 1) end
  local ts = tool_stems(tool, spec)
  add("name_u", overlap(ts.name, sd.u))
  add("name_a", overlap(ts.name, sd.a))
  add("name_al", overlap(ts.name, sd.al))
  if ts.desc then
    add("desc_u", overlap(ts.desc, sd.u))
    add("desc_a", overlap(ts.desc, sd.a))
  end
  return f
end

M.tool_features, M.class_features = tool_features, class_features

return M
