-- bench/replay.lua — replay throughput: `specula replay` runs the speculation
-- window itself on recorded stage times (engine/sp_winplay.c), so a
-- replayed hop costs what the window's C side costs per hop. Synthetic
-- recordings (SpecHop's web-search setting: p .68, alpha .19, beta .10,
-- lognormal stage times), replayed at six k values in one process; the time
-- includes starting the process and reading the file.
--   specula bench replay [--queries N] [--hops H]
local B = dofile(require("specula.internal.core").host.root .. "/bench/lib.lua")
local json = require("specula.json")
local specula = require("specula")

local N, HOPS = 2000, 30
for i = 1, #arg do
  if arg[i] == "--queries" then N = tonumber(arg[i + 1]) end
  if arg[i] == "--hops" then HOPS = tonumber(arg[i + 1]) end
end
local self = B.self_bin() or (B.root .. "/build/specula")
local KS = "1,2,3,4,8,inf"
local NK = 6

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. dir) == 0)

-- a deterministic generator (the stage times need not be random, only varied)
local seed = 12345
local function unif()
  seed = (seed * 1103515245 + 12345) % 2147483648
  return (seed + 0.5) / 2147483648
end
local function lognormal(mean, cv)
  local s2 = math.log(1 + cv * cv)
  local z = math.sqrt(-2 * math.log(unif())) * math.cos(2 * math.pi * unif())
  return math.floor(mean * math.exp(math.sqrt(s2) * z - s2 / 2) * 1e4 + 0.5) / 1e4
end

-- one recording: m candidates per speculator call, the accepted one at a random rank
local function write(path, m)
  local f = assert(io.open(path, "w"))
  for q = 1, N do
    local hops = {}
    for h = 1, HOPS do
      local acc = unif() < 0.68
      hops[h] = { hop = h - 1, t_seg = lognormal(6, 0.3), t_spec = lognormal(11.4, 0.3),
                  t_target = lognormal(60, 0.3), t_update = 0, t_verify = 0, ncands = m,
                  spec = acc and "accepted" or "rejected", rank = acc and math.floor(unif() * m) or nil }
    end
    f:write(json.encode({ id = "r" .. q, stages = { hops = json.array(hops), final_seg = lognormal(6, 0.3), init = 0 },
      stats = { k_config = 3, m = m, mode = "spechop", spec_launch = "eager" } }), "\n")
  end
  f:close()
end

print("machine: " .. B.machine())
print(string.format("%d queries x %d hops, replayed at k = %s (%d hops per input and mode)", N, HOPS, KS,
  N * HOPS * NK))
print(string.format("%-24s %9s %12s %12s", "input", "seconds", "hops", "hops/s"))
local rows = {
  { "m = 1, spechop", 1, "spechop" },
  { "m = 1, window", 1, "window" },
  { "m = 3, spechop", 3, "spechop" },
}
for _, r in ipairs(rows) do
  local path = string.format("%s/rec_m%d.jsonl", dir, r[2])
  if not io.open(path) then write(path, r[2]) end
  local t0 = specula.real_now()
  local p = io.popen(string.format("%s replay %s --k %s --mode %s --json 2>/dev/null", self, path, KS, r[3]))
  local out = p:read("*a")
  p:close()
  local dt = (specula.real_now() - t0) / 1000
  local lines = 0
  for _ in out:gmatch("[^\n]+") do lines = lines + 1 end
  local hops = N * HOPS * NK
  print(string.format("%-24s %9.3f %12d %12.0f%s", r[1], dt, hops, hops / dt,
    lines == NK and "" or "  (FAILED: " .. lines .. " rows)"))
end
-- the theory's event-level RelLat: the same window on 200 x 30 synthetic hops
local t0 = specula.real_now()
local p = io.popen(self .. " theory --p 0.68 --alpha 0.19 --beta 0.10 --k 3 --json 2>/dev/null")
local out = p:read("*a")
p:close()
local dt = (specula.real_now() - t0) / 1000
print(string.format("%-24s %9.3f %12d %12.0f%s", "theory rel_lat_event", dt, 200 * 30, 200 * 30 / dt,
  out:find("rel_lat_event", 1, true) and "" or "  (FAILED)"))
print("(seconds: process start to the last row; hops/s = replayed hops over that time)")
os.execute("rm -rf " .. dir)
