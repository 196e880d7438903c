-- bench/inputs.lua — reading a JSONL --input, in this process: the first
-- pass (specula.run.inputs' open: count, warnings, duplicate ids) and the
-- second (the stream a run pulls its queries from), µs a line, for lines
-- the engine reads in place ({"id": "...", "query": "..."}, escape-free:
-- sp_json_line_idq) and for lines of the same queries with one more field,
-- which go through the JSON decoder and the record builder. The two kinds
-- alternate run by run; the table prints medians and their ratio.
--   specula bench inputs [--lines N] [--runs R]
local B = dofile(require("specula.internal.core").host.root .. "/bench/lib.lua")
local inputs = require("specula.run.inputs")

local N, RUNS = 100000, 3
for i = 1, #arg do
  if arg[i] == "--lines" then N = tonumber(arg[i + 1]) end
  if arg[i] == "--runs" then RUNS = tonumber(arg[i + 1]) end
end
assert(N and N >= 1 and RUNS and RUNS >= 1, "bench inputs: --lines and --runs need a number >= 1")

local KINDS = {
  { name = "in place", line = '{"id":"q%d","query":"question %d"}\n' },
  { name = "decoded", line = '{"id":"q%d","query":"question %d","topic":"t"}\n' },
}
local paths = {}
for i, k in ipairs(KINDS) do
  paths[i] = os.tmpname()
  local f = assert(io.open(paths[i], "wb"))
  for n = 1, N do f:write(string.format(k.line, n, n)) end
  f:close()
end

-- One read of the file both ways: µs a line of each pass.
local function read(path)
  collectgarbage()
  local t0 = os.clock()
  local src = assert(inputs.open({ input = path, format = "jsonl" }))
  local t1 = os.clock()
  local s, n = src:stream(), 0
  while s.next() do n = n + 1 end
  local t2 = os.clock()
  assert(n == N and src.total == N, string.format("bench inputs: read %d of %d queries", n, N))
  return (t1 - t0) * 1e6 / N, (t2 - t1) * 1e6 / N
end

local first, second = { {}, {} }, { {}, {} }
for r = 1, RUNS do
  for i = 1, #KINDS do
    first[i][r], second[i][r] = read(paths[i])
  end
end
for _, p in ipairs(paths) do os.remove(p) end

local median = B.median

print("machine: " .. B.machine())
print(string.format("%d lines a file, %d runs a kind in alternation, CPU µs a line (medians)", N, RUNS))
print(string.format("%-10s | %12s %12s %12s", "lines", "first pass", "stream", "both"))
local both = {}
for i, k in ipairs(KINDS) do
  local a, b = median(first[i]), median(second[i])
  both[i] = a + b
  print(string.format("%-10s | %12.3f %12.3f %12.3f", k.name, a, b, both[i]))
end
print(string.format("decoded / in place, both passes: %.2fx", both[2] / both[1]))
