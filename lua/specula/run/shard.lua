-- specula.run.shard: one machine's part of a sweep (`specula run --shard`).
--
-- A shard i/n runs the queries whose 0-based position in the input is i
-- modulo n. `--shard auto` takes i and n from the scheduler that started the
-- process: a Slurm job array or a Kubernetes Indexed Job. Every record a
-- shard writes carries
--   "shard": { "index": i, "count": n, "of": Q, "pos": p, "seed": s }
-- (Q = queries in the whole input, p = this query's position in it, s = the
-- run's --seed), so `specula merge` can check that the shards partition the
-- input without seeing the input, and put the union back in input order.

local tonumber, tostring, format, floor = tonumber, tostring, string.format, math.floor

local M = {}

-- Environment variable read when the Indexed Job's completion count is not
-- given with --shard-count (Kubernetes does not export it to the pod).
M.COUNT_ENV = "SPECULA_SHARD_COUNT"

local function int(v)
  local n = tonumber(v)
  if n and n == floor(n) then return n end
  return nil
end

--- The shard of this process under `--shard auto`.
-- getenv: function(name) -> string|nil (os.getenv); count_flag: the value of
-- --shard-count or nil. Returns index, count, source; or nil and a message
-- naming what is missing or wrong.
function M.resolve_auto(getenv, count_flag)
  local function env(name)
    local v = getenv(name)
    if v == "" then return nil end
    return v
  end
  local sid = env("SLURM_ARRAY_TASK_ID")
  if sid then
    local id = int(sid)
    if not id then return nil, "SLURM_ARRAY_TASK_ID is not an integer: '" .. sid .. "'" end
    local smin, smax, scount = env("SLURM_ARRAY_TASK_MIN"), env("SLURM_ARRAY_TASK_MAX"), env("SLURM_ARRAY_TASK_COUNT")
    local step = env("SLURM_ARRAY_TASK_STEP")
    if step and int(step) ~= 1 then
      return nil, "SLURM_ARRAY_TASK_STEP is " .. step .. ": give the array as a contiguous range (--array=0-N)"
    end
    local lo, hi, count = int(smin), int(smax), int(scount)
    if smin and not lo then return nil, "SLURM_ARRAY_TASK_MIN is not an integer: '" .. smin .. "'" end
    if smax and not hi then return nil, "SLURM_ARRAY_TASK_MAX is not an integer: '" .. smax .. "'" end
    if scount and not count then return nil, "SLURM_ARRAY_TASK_COUNT is not an integer: '" .. scount .. "'" end
    local index, n
    if lo and hi then
      n, index = hi - lo + 1, id - lo
      if count and count ~= n then
        return nil, format("SLURM_ARRAY_TASK_COUNT is %d but MIN..MAX spans %d tasks: give the array as a "
          .. "contiguous range (--array=%d-%d)", count, n, lo, lo + count - 1)
      end
    elseif count then
      -- no MIN/MAX: take the array to start at 0
      n, index = count, id
    else
      return nil, "SLURM_ARRAY_TASK_ID is set but neither SLURM_ARRAY_TASK_COUNT nor SLURM_ARRAY_TASK_MIN/MAX "
        .. "is: the shard count is missing"
    end
    if n < 1 or index < 0 or index >= n then
      return nil, format("SLURM_ARRAY_TASK_ID %d is outside the array (%d tasks)", id, n)
    end
    if count_flag ~= nil and int(count_flag) ~= n then
      return nil, format("--shard-count %s disagrees with the Slurm array's %d tasks", tostring(count_flag), n)
    end
    return index, n, "slurm"
  end
  local kidx = env("JOB_COMPLETION_INDEX")
  if kidx then
    local index = int(kidx)
    if not index then return nil, "JOB_COMPLETION_INDEX is not an integer: '" .. kidx .. "'" end
    local raw, from = count_flag, "--shard-count"
    if raw == nil then raw, from = env(M.COUNT_ENV), M.COUNT_ENV end
    if raw == nil then
      return nil, "JOB_COMPLETION_INDEX is set but the shard count is missing: give --shard-count N or set "
        .. M.COUNT_ENV .. " (the Job's completions)"
    end
    local n = int(raw)
    if not n or n < 1 then return nil, from .. " must be a positive integer, got '" .. tostring(raw) .. "'" end
    if index < 0 or index >= n then
      return nil, format("JOB_COMPLETION_INDEX %d is outside 0..%d (%s = %d)", index, n - 1, from, n)
    end
    return index, n, "kubernetes"
  end
  return nil, "no scheduler index: neither SLURM_ARRAY_TASK_ID (Slurm job array) nor "
    .. "JOB_COMPLETION_INDEX (Kubernetes Indexed Job) is set"
end

-- The selection itself (position p % n == i, and each record's shard
-- field) is specula.run.inputs': it reads the input as the run goes.

return M
