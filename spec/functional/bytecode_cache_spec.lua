-- The engine's Lua modules load from a cache of their bytecode
-- (engine/sp_luacache.c; docs/cli.md, the environment): an entry serves
-- only the very text it was compiled from, and a cache that is missing,
-- damaged, unwritable or not the user's own changes nothing but speed.
local H = require "support.helpers"

-- A copy of the Lua tree (SPECULA_HOME) whose specula.internal.argv, loaded
-- by every command, writes a marker to stderr as it loads.
local function tree(marker)
  local home = H.tmpdir() .. "/home" .. tostring(math.random(1e9))
  assert(os.execute("mkdir -p " .. H.quote(home) .. " && cp -R " .. H.quote(H.root .. "/lua") .. " "
    .. H.quote(H.root .. "/policies") .. " " .. H.quote(home)) == 0)
  local argv = home .. "/lua/specula/internal/argv.lua"
  local function mark(m)
    local src = H.read(H.root .. "/lua/specula/internal/argv.lua")
    local f = assert(io.open(argv, "w"))
    f:write('io.stderr:write("', m, '\\n")\n', src)
    f:close()
  end
  mark(marker)
  return home, mark
end

local function help(home, cache, extra)
  local env = { SPECULA_HOME = home, SPECULA_BYTECODE_CACHE = cache }
  for k, v in pairs(extra or {}) do env[k] = v end
  local st, out, err = H.specula({ "--help" }, env)
  assert.equals(0, st, err)
  assert.matches("usage: specula <command>", out, 1, true)
  return err
end

local function entries(dir)
  local list = {}
  local p = io.popen("ls " .. H.quote(dir) .. " 2>/dev/null")
  for name in p:lines() do list[#list + 1] = name end
  p:close()
  return list
end

-- The entry holding s, and its bytes.
local function entry_with(dir, s)
  for _, name in ipairs(entries(dir)) do
    local data = H.read(dir .. "/" .. name)
    if data and data:find(s, 1, true) then return dir .. "/" .. name, data end
  end
end

-- An entry with its plan or bytecode edited, its checksum made to match
-- (the format of engine/sp_luacache.c: magic line, two SHA-256 digests,
-- the source's identity, a 64-bit checksum, the plan's length (32 bits),
-- the plan, the bytecode).
local ffi = require "ffi"
local bit = require "bit"
local SUM_AT = 23 + 64 + 56
local HDR = SUM_AT + 8 + 4
local function fnv(s)
  local p = ffi.cast("const uint8_t *", s)
  local h, P = 0xcbf29ce484222325ULL, 0x100000001b3ULL
  local i, n = 0, #s
  while i + 8 <= n do
    local w = ffi.new("uint64_t[1]")
    ffi.copy(w, p + i, 8)
    h = bit.bxor(h, w[0]) * P
    h = bit.bxor(h, bit.rshift(h, 29))
    i = i + 8
  end
  while i < n do
    h = bit.bxor(h, p[i] + 0ULL) * P
    i = i + 1
  end
  return bit.bxor(h, n + 0ULL)
end
-- the plan's length, the plan and the bytecode of an entry
local function parts(data)
  local pl = ffi.new("uint32_t[1]")
  ffi.copy(pl, data:sub(SUM_AT + 9, SUM_AT + 12), 4)
  local n = tonumber(pl[0])
  return n, data:sub(HDR + 1, HDR + n), data:sub(HDR + n + 1)
end
local function reseal(data)
  local _, plan, bc = parts(data)
  local sum = ffi.new("uint64_t[1]", bit.bxor(fnv(plan) * 0x9e3779b97f4a7c15ULL, fnv(bc)))
  return data:sub(1, SUM_AT) .. ffi.string(sum, 8) .. data:sub(SUM_AT + 9)
end

local write = H.write

describe("the bytecode cache of the engine's modules", function()
  it("is used for the text it was compiled from, and for no other", function()
    local home, mark = tree("marker-one")
    local cache = H.tmpdir() .. "/bc-used/cache"
    -- first start: parsed, and written (0700 directory, one entry a module)
    assert.matches("marker-one\n", help(home, cache), 1, true)
    local list = entries(cache)
    assert.is_true(#list >= 10, #list .. " entries")
    for _, name in ipairs(list) do
      assert.matches("^%x+%.bc$", name)
      assert.equals("specula-lua-bytecode 2\n", H.read(cache .. "/" .. name):sub(1, 23))
    end
    local _, mode = H.sh("stat -c %a " .. H.quote(cache))
    assert.equals("700", mode:match("%d+"))
    -- the entry is what loads while the source is untouched: an entry whose
    -- bytecode says otherwise is believed (its header names this text)
    local path, data = entry_with(cache, "marker-one")
    assert.truthy(path)
    write(path, reseal((data:gsub("marker%-one", "marker-ONE"))))
    assert.matches("marker-ONE\n", help(home, cache), 1, true)
    -- an edit of the same size: the new text, never the stale entry
    mark("marker-two")
    assert.matches("marker-two\n", help(home, cache), 1, true)
    path, data = entry_with(cache, "marker-two")
    assert.truthy(path)
    assert.is_nil(entry_with(cache, "marker-ONE"))
    -- the same text written again (a checkout, a copy): the entry still
    -- serves it, after its text is compared
    write(path, reseal((data:gsub("marker%-two", "marker-TWO"))))
    mark("marker-two")
    assert.matches("marker-TWO\n", help(home, cache), 1, true)
    assert.matches("marker-TWO\n", help(home, cache), 1, true)
  end)

  it("rebuilds a damaged entry, and stays out of the way when it cannot be trusted or written", function()
    local home = tree("marker-d")
    local cache = H.tmpdir() .. "/bc-damaged"
    help(home, cache)
    local path, data = entry_with(cache, "marker-d")
    -- (a dump is the same bytecode up to the order of a table
    -- constructor's keys: compared by header and size)
    local function whole()
      local now = H.read(path)
      return #now == #data and now:sub(1, SUM_AT) == data:sub(1, SUM_AT)
    end
    -- cut inside the bytecode: parsed again, and the entry made whole
    write(path, data:sub(1, #data - 40))
    assert.matches("marker-d\n", help(home, cache), 1, true)
    assert.is_true(whole())
    -- garbage of the right length after a valid header (its checksum
    -- tells; LuaJIT would load it)
    write(path, data:sub(1, 160) .. string.rep("\255", #data - 160))
    assert.matches("marker-d\n", help(home, cache), 1, true)
    assert.is_true(whole())
    -- a plan that does not read, resealed (restoring it raises): parsed
    -- again, and the entry written again
    local n = parts(data)
    assert.is_true(n > 0, "argv.lua has constructors with computed fields")
    write(path, reseal(data:sub(1, HDR) .. string.rep("z", n) .. data:sub(HDR + n + 1)))
    assert.matches("marker-d\n", help(home, cache), 1, true)
    assert.is_true(whole())
    -- a directory others may write into: not used, nothing written to it
    local shared = H.tmpdir() .. "/bc-shared"
    assert(os.execute("mkdir -p " .. H.quote(shared) .. " && chmod 0777 " .. H.quote(shared)) == 0)
    assert.matches("marker-d\n", help(home, shared), 1, true)
    assert.same({}, entries(shared))
    -- a path under a regular file: cannot be made
    local file = H.tmpfile("bc-a-file", "x")
    assert.matches("marker-d\n", help(home, file .. "/cache"), 1, true)
    -- off: no directory at all
    local fresh = H.tmpdir() .. "/bc-home"
    assert(os.execute("mkdir -p " .. H.quote(fresh)) == 0)
    assert.matches("marker-d\n", help(home, "off", { HOME = fresh, XDG_CACHE_HOME = "" }), 1, true)
    assert.same({}, entries(fresh))
    -- unset: the user's cache directory, made private
    local st, out, err = H.sh("unset SPECULA_BYTECODE_CACHE XDG_CACHE_HOME; HOME=" .. H.quote(fresh)
      .. " SPECULA_HOME=" .. H.quote(home) .. " " .. H.quote(H.bin) .. " --help")
    assert.equals(0, st, err)
    assert.matches("usage: specula <command>", out, 1, true)
    assert.is_true(#entries(fresh .. "/.cache/specula/lua-bytecode") >= 5)
    local _, mode = H.sh("stat -c %a " .. H.quote(fresh .. "/.cache/specula/lua-bytecode"))
    assert.equals("700", mode:match("%d+"))
  end)

  -- A table constructor with computed fields ({ id = x }) copies a template
  -- holding its keys with nil values; LuaJIT's bytecode writer drops them,
  -- and tables built by a module loaded from bytecode grew key by key
  -- (stop 48's cache cost more per hop than it saved at the start). For
  -- every template of every engine module: each key the parsed template
  -- holds with a nil value (next() accepts it, rawget reads nil) that the
  -- constructor stores (a TSETS into the register its TDUP filled, before
  -- anything else uses that register) must be held by the cached module's
  -- template too. (A key a constructor
  -- gives a constant nil, { a = nil }, is held or lost by the parser
  -- itself as its seeded string hashing places it: not compared.)
  it("builds every module's tables as the parsed module does: the templates keep their computed keys", function()
    local prog = H.tmpfile("bc_templates.lua", [[
      local ju = require("jit.util")
      local funck, funcbc, band, rshift = ju.funck, ju.funcbc, bit.band, bit.rshift
      local names = require("jit.vmdef").bcnames
      local OP = {}
      for op = 0, #names / 6 - 1 do OP[(names:sub(op * 6 + 1, op * 6 + 6):gsub(" +$", ""))] = op end
      local function held(k, s) return rawget(k, s) == nil and pcall(next, k, s) end
      -- Whether instruction x (mode m) uses register reg: an operand of
      -- mode dst or var naming it, or a base (a range) at or below it.
      local function uses(x, m, reg)
        local function hits(mode, v)
          if mode == 1 or mode == 3 then return v == reg end
          return (mode == 2 or mode == 4) and v <= reg
        end
        local mb, mc = band(rshift(m, 3), 15), band(rshift(m, 7), 15)
        if hits(band(m, 7), band(rshift(x, 8), 0xff)) then return true end
        if mb ~= 0 then return hits(mb, rshift(x, 24)) or hits(mc, band(rshift(x, 16), 0xff)) end
        return hits(mc, rshift(x, 16))
      end
      -- { path, t, key } for each store under a string key into a TDUP's
      -- table before anything else uses its register (the constructor's
      -- computed fields) whose key the parsed template holds with nil ...
      local function stored(p, path, out)
        local pc = 0
        while true do
          local ins = funcbc(p, pc)
          if not ins then break end
          if band(ins, 0xff) == OP.TDUP then
            local t, reg = -(rshift(ins, 16) + 1), band(rshift(ins, 8), 0xff)
            local k = funck(p, t)
            for q = pc + 1, pc + 100000 do
              local x, m = funcbc(p, q)
              if not x then break end
              if band(x, 0xff) == OP.TSETS and rshift(x, 24) == reg and band(rshift(x, 8), 0xff) ~= reg then
                local s = funck(p, -(band(rshift(x, 16), 0xff) + 1))
                if held(k, s) then out[#out + 1] = { path = path, t = t, key = s } end
              elseif uses(x, m, reg) then
                break
              end
            end
          end
          pc = pc + 1
        end
        local i = -1
        while true do
          local k = funck(p, i)
          if k == nil then break end
          if type(k) == "proto" then stored(k, path .. i .. ",", out) end
          i = i - 1
        end
        return out
      end
      -- ... and whether another function's template at the same place
      -- holds it too
      local function holds(fn, e)
        local p = fn
        for c in e.path:gmatch("(-?%d+),") do p = funck(p, tonumber(c)) end
        return held(funck(p, e.t), e.key)
      end
      -- every module of the engine's tree (loading a chunk runs nothing)
      local names = {}
      local p = io.popen("cd " .. ]] .. string.format("%q", H.root .. "/lua") .. [[ .. " && find specula -name '*.lua'")
      for f in p:lines() do names[#names + 1] = (f:gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", ".")) end
      p:close()
      table.sort(names)
      local modules, keys, missing = 0, 0, {}
      for _, name in ipairs(names) do
        local path = package.searchpath(name, package.path)
        local loaded = assert(package.loaders[2](name))   -- the cache's searcher, or the plain one
        local parsed = assert(loadfile(path))
        local list = stored(parsed, "", {})
        modules, keys = modules + 1, keys + #list
        for _, e in ipairs(list) do
          if not holds(loaded, e) then missing[#missing + 1] = name .. ":" .. e.key end
        end
        -- what the writer alone keeps: none of those keys
        if name == "specula.run.runner" then
          local raw, n = loadstring(string.dump(parsed), "=raw"), 0
          for _, e in ipairs(list) do if holds(raw, e) then n = n + 1 end end
          print("raw", n, #list)
        end
      end
      print("modules", modules, "keys", keys, "missing", table.concat(missing, " "))
    ]])
    local cache = H.tmpdir() .. "/bc-templates"
    for _, c in ipairs({ cache, cache, "off" }) do   -- written, then read; and without the cache
      local st, out, err = H.specula({ "run", prog }, { SPECULA_BYTECODE_CACHE = c })
      assert.equals(0, st, err)
      local raw, n = out:match("raw\t(%d+)\t(%d+)")
      assert.equals("0", raw, out)
      assert.is_true(tonumber(n) > 5, out)
      local modules, keys, missing = out:match("modules\t(%d+)\tkeys\t(%d+)\tmissing\t([^\n]*)")
      assert.is_true(tonumber(modules) >= 100, out)
      assert.is_true(tonumber(keys) >= 1000, out)
      assert.equals("", missing, c)
    end
    assert.is_true(#entries(cache) >= 100)
  end)

  it("leaves a script's own modules to the Lua searcher: the records' provenance still names them", function()
    -- (the searcher that provenance wraps must still see every module: the
    -- cache once took the engine's place in front of it, and the modules
    -- beside a script went missing from the records)
    local dir = H.tmpdir() .. "/bc-prov"
    assert(os.execute("mkdir -p " .. H.quote(dir)) == 0)
    write(dir .. "/helper.lua", 'return { answer = "from the helper" }\n')
    write(dir .. "/agent.lua", [[
      local specula = require "specula"
      local helper = require "helper"
      return specula.agent {
        init = function() return {} end,
        step = function() return { final = helper.answer } end,
        update = function(s) return s end,
      }
    ]])
    for _, c in ipairs({ H.tmpdir() .. "/bc-prov-cache", H.tmpdir() .. "/bc-prov-cache", "off" }) do
      local st, out, err = H.specula({ "run", dir .. "/agent.lua", "--query", "q" }, { SPECULA_BYTECODE_CACHE = c })
      assert.equals(0, st, err)
      local rec = H.json().decode(out:match("[^\n]+"))
      assert.equals("from the helper", rec.answer)
      assert.is_string(rec.provenance.agent.modules.helper, c)
    end
  end)

  it("gives the parsed modules' tracebacks, and their load errors word for word", function()
    local home, mark = tree("marker-t")
    local cache = H.tmpdir() .. "/bc-trace"
    -- an error raised inside an engine module, with its traceback
    local prog = H.tmpfile("bc_trace.lua", [[
      local stats = require "specula.stats"
      local ok, tb = xpcall(stats.median, debug.traceback, nil)
      print(ok, tb)
      local info = debug.getinfo(stats.median, "S")
      print(info.source, info.linedefined, info.lastlinedefined)
    ]])
    local function run(c)
      local st, out, err = H.specula({ "run", prog }, { SPECULA_HOME = home, SPECULA_BYTECODE_CACHE = c })
      assert.equals(0, st, err)
      return out
    end
    local parsed = run("off")
    assert.matches("stats%.lua:%d+: attempt to get length", parsed)
    assert.matches("@" .. home .. "/lua/specula/stats.lua", parsed, 1, true)
    assert.equals(parsed, run(cache))   -- written
    assert.equals(parsed, run(cache))   -- loaded from the cache
    -- a module that does not parse: the same message, cache or not
    local argv = home .. "/lua/specula/internal/argv.lua"
    write(argv, H.read(argv) .. "\nlocal = 1\n")
    local function broken(c)
      local st, _, err = H.specula({ "--help" }, { SPECULA_HOME = home, SPECULA_BYTECODE_CACHE = c })
      assert.is_not.equals(0, st)
      return (err:gsub("0x%x+", "0x?"))   -- (C functions' addresses move from run to run)
    end
    local e = broken("off")
    assert.matches("error loading module 'specula.internal.argv' from file '" .. argv .. "'", e, 1, true)
    assert.equals(e, broken(cache))
    mark("marker-t")
    help(home, cache)
  end)
end)
