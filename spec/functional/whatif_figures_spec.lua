-- specula whatif's figures on the fixture logs stay what they were before
-- its memory work (spec/fixtures/whatif_figures/README.md: the tables the
-- binary of commit dfc2b40 printed), row by row: the replay's representation
-- changes how much it keeps, never what it computes.
local H = require "support.helpers"

local GOLD = H.root .. "/spec/fixtures/whatif_figures"
local NO_TEXTS = "recorded,sequential,spechop,perfect-predictor,perfect-speculator,perfect-both"

-- `specula whatif` from the checkout's root on paths relative to it, as
-- the goldens were made (a session without an id is named by its file's
-- name and line)
local function whatif(args)
  local parts = { "cd", H.quote(H.root), "&&" }
  if H.wrap and H.wrap ~= "" then parts[#parts + 1] = H.wrap end
  parts[#parts + 1] = H.quote(H.bin)
  parts[#parts + 1] = "whatif"
  for _, a in ipairs(args) do parts[#parts + 1] = H.quote(a) end
  return H.sh(table.concat(parts, " "))
end

local function read(path)
  local f = assert(io.open(path))
  local s = f:read("*a")
  f:close()
  return s
end

local CASES = {}
for _, f in ipairs({ "sessions/claude_code", "sessions/claude_code_parallel", "sessions/codex", "sessions/openhands",
                     "sessions/otel", "conversations/anthropic", "conversations/openai" }) do
  CASES[#CASES + 1] = f
end
local p = io.popen("cd " .. H.quote(H.root) .. " && ls spec/fixtures/timed_traces/*/*.jsonl")
for line in p:lines() do CASES[#CASES + 1] = line:match("(timed_traces/.-)%.jsonl$") end
p:close()

-- the golden's lines beside the run's, the first differing one named
local function same_table(want, got, what)
  if want == got then return end
  local wl, gl = {}, {}
  for l in want:gmatch("[^\n]*") do wl[#wl + 1] = l end
  for l in got:gmatch("[^\n]*") do gl[#gl + 1] = l end
  for i = 1, math.max(#wl, #gl) do
    if wl[i] ~= gl[i] then
      error(("%s: line %d differs:\n  was: %s\n  now: %s"):format(what, i, tostring(wl[i]), tostring(gl[i])), 2)
    end
  end
end

describe("specula whatif's figures", function()
  it("has a golden table for every fixture log (the list is not empty)", function()
    assert.is_true(#CASES >= 14, "fixture logs found: " .. #CASES)
  end)
  for _, rel in ipairs(CASES) do
    -- the golden's name: the file's directory and name ("timed_traces/" left out)
    local name = rel:gsub("^timed_traces/", ""):gsub("/", "_")
    local file = "spec/fixtures/" .. rel .. ".jsonl"
    it("are the same as before on " .. rel .. " (all eight rows, and the rows without texts)", function()
      local st, out = whatif({ file })
      assert.are.equal(0, st)
      same_table(read(GOLD .. "/" .. name .. ".all.txt"), out, rel .. " (all rows)")
      local st2, out2 = whatif({ file, "--compare", NO_TEXTS })
      assert.are.equal(0, st2)
      same_table(read(GOLD .. "/" .. name .. ".nt.txt"), out2, rel .. " (no texts)")
    end)
  end
  it("are the same as before on every timed trace at once", function()
    local files = {}
    local q = io.popen("cd " .. H.quote(H.root) .. " && ls spec/fixtures/timed_traces/*/*.jsonl")
    for line in q:lines() do files[#files + 1] = line end
    q:close()
    local st, out = whatif(files)
    assert.are.equal(0, st)
    same_table(read(GOLD .. "/all_traces.all.txt"), out, "timed_traces (all files)")
  end)
end)
