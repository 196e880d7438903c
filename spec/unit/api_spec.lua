-- Every field of require "specula" that the code or the docs advertise
-- resolves: no name points at a module or function that does not exist.
local H = require "support.helpers"
local specula = require "specula"

-- `specula.NAME` and `specula.NAME.FIELD` references in a text
local function refs(text, into, where)
  for a, b in text:gmatch("specula%.([%a_][%w_]*)%.?([%a_]?[%w_]*)") do
    local key = b ~= "" and (a .. "." .. b) or a
    into[key] = into[key] or where
  end
end

describe("require 'specula'", function()
  it("loads every submodule its lazy table lists", function()
    local src = assert(H.read(H.root .. "/lua/specula/init.lua"))
    local body = assert(src:match("local lazy = (%b{})"), "no lazy table in init.lua")
    local n = 0
    for field, mod in body:gmatch("([%a_][%w_]*)%s*=%s*\"(specula[%w_.]*)\"") do
      n = n + 1
      local ok, v = pcall(function() return specula[field] end)
      assert.is_true(ok, "specula." .. field .. " (" .. mod .. ") fails to load: " .. tostring(v))
      assert.equals("table", type(v), "specula." .. field)
      assert.equals(require(mod), v)
    end
    assert.is_true(n >= 15, "found only " .. n .. " lazy modules")
  end)

  it("has the functions it defines and forwards", function()
    for _, f in ipairs({ "spawn", "sleep", "now", "wait_any", "wait_all", "in_task", "run", "counts",
                         "settle", "agent", "candidates" }) do
      assert.equals("function", type(specula[f]), "specula." .. f)
    end
    assert.matches("^%d+%.%d+%.%d+$", specula.version)
  end)

  it("resolves every specula.X and specula.X.Y the README, docs, examples and modules mention", function()
    local seen = {}
    local files = { "README.md" }
    local docs = io.popen("ls " .. H.quote(H.root .. "/docs"))
    local ndocs = 0
    for name in docs:lines() do
      if name:match("%.md$") then
        files[#files + 1] = "docs/" .. name
        ndocs = ndocs + 1
      end
    end
    docs:close()
    assert.is_true(ndocs >= 6, "found only " .. ndocs .. " pages in docs/")
    for _, dir in ipairs({ "examples", "lua/specula", "lua/specula/llm", "lua/specula/cmd", "lua/specula/run",
                           "lua/specula/lab", "lua/specula/report", "lua/specula/mcp", "policies", "bench" }) do
      local p = io.popen("ls " .. H.quote(H.root .. "/" .. dir))
      for name in p:lines() do
        if name:match("%.lua$") then files[#files + 1] = dir .. "/" .. name end
      end
      p:close()
    end
    for _, f in ipairs(files) do refs(assert(H.read(H.root .. "/" .. f)), seen, f) end
    -- names that are not fields of the module: the "specula" object of a
    -- trace file (README), the module names in require strings, the
    -- Lua-side namespaces of the host
    local not_api = { queries = true, host = true, core = true, sched = true, cli = true,
                      report = true, agent = true, opts = true, boot = true, nojit = true,
                      argv = true, lab = true, jsonenc = true, cmd = true }
    local n = 0
    not_api.convtraces = true   -- `specula predictors`' conversation reader
    not_api.learned = true      -- the module behind specula.predict.learned
    not_api.whatif = true       -- the module behind `specula whatif`
    -- lower modules kept apart so that no two modules require each other
    -- (spec/unit/layers_spec.lua): their API is that of the module above
    not_api.simlaw = true       -- specula.sim's building blocks, below specula.agent
    not_api.stream = true       -- the reading methods of specula.http's responses
    not_api.tags = true         -- specula.provenance's names of built-in values
    not_api.output = true       -- the writers of what specula writes (a script's own prints go through it)
    for key, where in pairs(seen) do
      local top, sub = key:match("^([^.]+)%.?(.*)$")
      if not not_api[top] then
        n = n + 1
        local ok, v = pcall(function() return specula[top] end)
        assert.is_true(ok and v ~= nil, "specula." .. top .. " (in " .. where .. ") does not resolve: " .. tostring(v))
        if sub ~= "" and type(v) == "table" and not seen[top .. "." .. sub .. ".lua"] then
          -- a field of a submodule; `require "specula.llm.openai"`-style
          -- module paths also resolve, as fields of the parent table
          local fv = v[sub]
          if fv == nil then
            local mok, m = pcall(require, "specula." .. top .. "." .. sub)
            fv = mok and m or nil
          end
          assert.is_not_nil(fv, "specula." .. key .. " (in " .. where .. ") does not resolve")
        end
      end
    end
    assert.is_true(n >= 40, "found only " .. n .. " references")
  end)
end)
