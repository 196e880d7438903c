-- The choice behind .ci/vgset: the cheapest cases that together reach
-- every line the whole suite reaches. A case is { file, name, cost, lines }
-- (lines: a set of "sp_x.c:N"); setups[file] = { cost, lines } is what a
-- file's setups cost and reach, paid and reached once any case of the file
-- runs. Greedy weighted set cover (the case with the most new lines per
-- second first), then dropping, dearest first, any case the others cover
-- without it. Returns the chosen cases (by file, then name) and the number
-- of lines reached.
local M = {}

-- the lines a list of cases reaches (their files' setups included)
function M.union(list, setups)
  local u, n, opened = {}, 0, {}
  local function add(set)
    for k in pairs(set) do
      if not u[k] then u[k] = true; n = n + 1 end
    end
  end
  for _, c in ipairs(list) do
    if not opened[c.file] then
      opened[c.file] = true
      if setups[c.file] then add(setups[c.file].lines) end
    end
    add(c.lines)
  end
  return u, n
end

-- what a list of cases costs, each file's setups once
function M.cost(list, setups)
  local total, opened = 0, {}
  for _, c in ipairs(list) do
    if not opened[c.file] then
      opened[c.file] = true
      total = total + (setups[c.file] and setups[c.file].cost or 0)
    end
    total = total + c.cost
  end
  return total
end

function M.choose(cases, setups)
  assert(type(cases) == "table" and type(setups) == "table", "choose(cases, setups)")
  local _, nall = M.union(cases, setups)
  local chosen, got, ngot, opened, taken = {}, {}, 0, {}, {}
  while ngot < nall do
    local best, bestv
    for i, c in ipairs(cases) do
      if not taken[i] then
        local new, cost = 0, c.cost
        for k in pairs(c.lines) do if not got[k] then new = new + 1 end end
        local s = setups[c.file]
        if not opened[c.file] and s then
          cost = cost + s.cost
          for k in pairs(s.lines) do if not got[k] and not c.lines[k] then new = new + 1 end end
        end
        if new > 0 then
          local v = new / math.max(cost, 0.5)
          if not bestv or v > bestv then best, bestv = i, v end
        end
      end
    end
    if not best then break end
    taken[best] = true
    local c = cases[best]
    chosen[#chosen + 1] = c
    local sets = { c.lines }
    if not opened[c.file] then
      opened[c.file] = true
      sets[2] = setups[c.file] and setups[c.file].lines or {}
    end
    for _, set in ipairs(sets) do
      for k in pairs(set) do
        if not got[k] then got[k] = true; ngot = ngot + 1 end
      end
    end
  end
  table.sort(chosen, function(a, b) return a.cost > b.cost end)
  local i = 1
  while i <= #chosen do
    local without = {}
    for j, c in ipairs(chosen) do if j ~= i then without[#without + 1] = c end end
    local _, n = M.union(without, setups)
    if n == nall then table.remove(chosen, i) else i = i + 1 end
  end
  table.sort(chosen, function(a, b) return a.file < b.file or (a.file == b.file and a.name < b.name) end)
  return chosen, nall
end

return M
