-- specula.report.common: what every part of `specula report` shares: the
-- input predicates (N, S, T), the error exits, number formatting and the
-- colours of configurations, stage kinds and timeline marks.

local sched = require "specula.internal.sched"

local format, floor, huge = string.format, math.floor, math.huge
local type, tostring = type, tostring

local M = {}

-- the bootstrap's confidence level as captions and headers print it ("95%")
M.CI = format("%g%%", 100 * require("specula.internal.domains").DEFAULTS.bootstrap_level)

local function fail(msg) sched.plain_error("specula report: " .. msg) end
M.fail = fail

-- io.open's message repeats the path: keep the reason only.
local function open_reason(path, err)
  err = tostring(err)
  if err:sub(1, #path + 2) == path .. ": " then return err:sub(#path + 3) end
  return err
end

local function warn(msg) require("specula.internal.output").stderr("specula report: warning: " .. msg .. "\n") end

-- A finite number, or nil (json.null, strings and NaN are not numbers here).
local function N(v)
  if type(v) == "number" and v == v and v ~= huge and v ~= -huge then return v end
  return nil
end

local function S(v) if type(v) == "string" then return v end return nil end

local function T(v) if type(v) == "table" then return v end return nil end
M.open_reason, M.warn, M.N, M.S, M.T = open_reason, warn, N, S, T

local function k_label(k)
  if N(k) then
    if k == floor(k) then return format("%d", k) end
    return format("%g", k)
  end
  if S(k) then return k end
  return "?"
end

M.k_label = k_label

local function fnum(x, d)
  if not N(x) then return "–" end
  return format("%." .. (d or 3) .. "f", x)
end

-- A latency in ms with precision to match its size.
local function fms(x)
  if not N(x) then return "–" end
  local a = x < 0 and -x or x
  if a >= 100 then return format("%.0f", x)
  elseif a >= 10 then return format("%.1f", x)
  elseif a >= 1 then return format("%.2f", x)
  elseif a >= 0.01 then return format("%.3f", x) end
  return format("%.2g", x)
end

local PALETTE = { "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9",
                  "#332288", "#882255", "#44AA99", "#999933", "#000000", "#AA4499" }
local KIND = { model = "#0072B2", spec = "#E69F00", target = "#009E73", verify = "#CC79A7" }
local MARK = { commit = "#117733", rollback = "#C0002A", cancel = "#444444", deferred = "#8A6D00", answer = "#111111" }

local function plural(n, word, words)
  return format("%d %s", n, n == 1 and word or (words or (word .. "s")))
end

-- At most n bytes (plus an ellipsis), never cutting a UTF-8 sequence.
local function truncate(s, n)
  s = tostring(s)
  if #s <= n then return s end
  local cut = n - 1
  while cut > 0 do
    local b = s:byte(cut + 1)
    if not b or b < 0x80 or b >= 0xC0 then break end
    cut = cut - 1
  end
  return s:sub(1, cut) .. "…"
end
M.fnum, M.fms, M.plural, M.truncate = fnum, fms, plural, truncate
M.PALETTE, M.KIND, M.MARK = PALETTE, KIND, MARK

return M
