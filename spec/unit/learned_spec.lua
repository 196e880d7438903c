-- specula.predict.learned on a domain it was never written for: a made-up
-- greenhouse service whose tools take their arguments from the user's words,
-- from fields of earlier results (one list item after another), from
-- constants, through a number transform and a projection of a list.
local learned = require "specula.learned"
local predict = require "specula.predict"
local convtraces = require "specula.convtraces"
local json = require "specula.json"

-- A repeatable pseudo-random walk.
local function rng(seed)
  local s = seed
  return function(n)
    s = (s * 1103515245 + 12345) % 2147483648
    return s % n + 1
  end
end

local function call(id, name, args)
  return { role = "assistant", content = json.null,
           tool_calls = { { id = id, type = "function", ["function"] = { name = name, arguments = json.encode(args) } } } }
end
local function result(id, v)
  return { role = "tool", tool_call_id = id, content = type(v) == "string" and v or json.encode(v) }
end

-- One conversation of the greenhouse: the keeper gives a badge and a water
-- amount; the agent locates the plot, reads each of its sensors over a fixed
-- window, lists the low stock, restocks it (each item's sku and qty), asks
-- and waters.
local function greenhouse(r, i)
  local badge = string.format("GH-%d-%s", 1000 + r(8999), ({ "x", "y", "z" })[r(3)])
  local liters = 5 + r(20)
  local plot = "P" .. (10 + r(89))
  local sensors = {}
  for j = 1, r(3) do sensors[j] = string.format("s-%d", 100 * j + r(99)) end
  local low = {}
  for j = 1, 1 + r(2) do low[j] = { sku = "K" .. r(999), qty = r(9), shelf = "row" .. r(4) } end
  local m = {
    { role = "system", content = "You tend the plots of the greenhouse." },
    { role = "user", content = string.format("Hello, my badge is %s and my plot looks dry. Water %d liters please.",
      badge, liters) },
    call("a", "locate_plot", { badge = badge }),
    result("a", { plot_key = plot, zone = ({ "north", "south" })[r(2)], sensors = sensors }),
  }
  for j, s in ipairs(sensors) do
    m[#m + 1] = call("s" .. j, "read_sensor", { sensor = s, window = "24h" })
    m[#m + 1] = result("s" .. j, { moisture = r(100) / 100 })
  end
  m[#m + 1] = call("i", "low_stock", {})
  m[#m + 1] = result("i", { low = low })
  local items = {}
  for j, l in ipairs(low) do items[j] = { sku = l.sku, qty = l.qty } end
  m[#m + 1] = call("r", "restock", { items = items })
  m[#m + 1] = result("r", "restocked")
  m[#m + 1] = { role = "assistant", content = string.format("The soil is dry. Shall I water plot %s with %d liters?",
    plot, liters) }
  m[#m + 1] = { role = "user", content = "Yes, go ahead." }
  m[#m + 1] = call("w", "water", { plot_key = plot, liters = liters })
  m[#m + 1] = result("w", "ok")
  m[#m + 1] = { role = "assistant", content = "Done: the plot is watered." }
  return { id = "gh" .. i, messages = m }
end

local function conv_of(line)
  local events, turns = convtraces.events(line.messages)
  return { id = line.id, events = events, turns = turns }
end

local function corpus(seed, n, first)
  local r, out = rng(seed), {}
  for i = 1, n do out[i] = conv_of(greenhouse(r, (first or 0) + i)) end
  return out
end

-- The call a turn made (nil for an answer in text).
local function made(conv, t)
  if not t.step then return nil end
  for i = t.at + 1, #conv.events do
    local e = conv.events[i]
    if e.kind == "call" then return e end
  end
end

local function same(p, e) return p and e and p.tool == e.tool and json.canonical(p.args) == json.canonical(e.args) end

local function slice(events, n)
  local out = {}
  for i = 1, n do out[i] = events[i] end
  return out
end

-- Top-1 / top-3 over the call turns of `convs`, predicting online.
local function score(P, convs, online)
  local calls, top1, top3, per = 0, 0, 0, {}
  for _, c in ipairs(convs) do
    for _, t in ipairs(c.turns) do
      local want = made(c, t)
      local list = P:predict({}, { messages = slice(c.events, t.at) })
      for _, p in ipairs(list) do
        assert.is_true(p.confidence >= 0 and p.confidence <= 1)
      end
      if want then
        calls = calls + 1
        local pt = per[want.tool] or { n = 0, hit = 0 }
        per[want.tool] = pt
        pt.n = pt.n + 1
        for i = 1, math.min(3, #list) do
          if same(list[i], want) then
            if i == 1 then top1 = top1 + 1; pt.hit = pt.hit + 1 end
            top3 = top3 + 1
            break
          end
        end
      end
    end
    if online then assert.is_true(P:learn(c)) end
  end
  return top1 / calls, top3 / calls, per
end

-- The sources the model keeps for one argument of one tool.
local function sources(P, tool, arg)
  local out = {}
  for _, s in ipairs(P.args[tool].keys[arg].src) do
    if s.hit >= 2 then out[#out + 1] = s.d end
  end
  return table.concat(out, "\n")
end

describe("predict.learned", function()
  local train = corpus(7, 40)
  local test = corpus(99, 12, 1000)

  it("learns where each argument comes from on a domain it has never seen", function()
    local P = predict.learned {}
    P:train(train)
    local top1, top3, per = score(P, test, false)
    -- every call of this domain is determined by what came before it
    assert.is_true(top1 >= 0.9, "top-1 " .. top1)
    assert.is_true(top3 >= 0.95, "top-3 " .. top3)
    for tool, pt in pairs(per) do
      assert.is_true(pt.hit / pt.n >= 0.8, tool .. ": " .. pt.hit .. " of " .. pt.n)
    end
    -- how: the badge is a span of the user's text (a shape it learnt); each
    -- sensor the next unused item of the plot's list; the window a constant;
    -- the liters the user's number through a transform; the plot key a field
    -- of the first result; the restock items a projection of the low stock
    local S = string.char(31)
    assert.matches("U" .. S .. S .. "[fc]", sources(P, "locate_plot", "badge"))
    assert.matches("R" .. S .. "locate_plot" .. S .. ".sensors.%*" .. S .. "u0", sources(P, "read_sensor", "sensor"))
    assert.matches("K" .. S .. '"24h"', sources(P, "read_sensor", "window"))
    assert.matches(S .. "num\n", sources(P, "water", "liters") .. "\n")
    assert.matches("R" .. S .. "locate_plot" .. S .. ".plot_key", sources(P, "water", "plot_key"))
    assert.matches("R" .. S .. "low_stock" .. S .. ".low" .. S .. "i0" .. S .. "pick:qty" .. string.char(30) .. "sku",
      sources(P, "restock", "items"))
  end)

  it("learns online from nothing, conversation by conversation", function()
    local P = predict.learned {}
    local first = score(P, { train[1] }, true)
    assert.equals(0, first)   -- it knew nothing
    local more = {}
    for i = 2, 30 do more[#more + 1] = train[i] end
    score(P, more, true)
    local top1 = score(P, test, true)
    assert.is_true(top1 >= 0.8, "online top-1 " .. top1)
    assert.equals(30 + #test, P.provenance.online.conversations)
  end)

  it("gives calibrated confidences: a call it is sure of high, a turn answered in text low", function()
    local P = predict.learned {}
    P:train(train)
    local c = test[1]
    local sure, text = {}, {}
    for _, t in ipairs(c.turns) do
      local list = P:predict({}, { messages = slice(c.events, t.at) })
      if t.step then sure[#sure + 1] = list[1].confidence else text[#text + 1] = list[1] and list[1].confidence or 0 end
    end
    table.sort(sure)
    assert.is_true(sure[1] > 0.5, "lowest confidence of a determined call " .. sure[1])
    -- the turn after the last call answers in text: nothing is that likely there
    assert.is_true(text[#text] < 0.5, "confidence at the final text turn " .. text[#text])
  end)

  it("saves its model with its provenance and reloads it to the same predictions", function()
    local P = predict.learned {}
    P:train(train)
    for i = 1, 3 do P:learn(test[i]) end
    local path = os.tmpname()
    assert.is_true(P:save(path))
    local st = json.decode(io.open(path):read("*a"))
    assert.equals(learned.FORMAT, st.format)
    assert.equals(learned.VERSION, st.version)
    assert.equals(40, st.provenance.offline.conversations)
    assert.matches("^%x+$", st.provenance.offline.digest)
    assert.equals(64, #st.provenance.offline.digest)
    assert.equals(3, st.provenance.online.conversations)
    local Q = predict.learned { model = path }
    for _, c in ipairs({ test[5], test[6] }) do
      for _, t in ipairs(c.turns) do
        local ctx = { messages = slice(c.events, t.at) }
        assert.same(P:predict({}, ctx), Q:predict({}, ctx))
      end
    end
    -- and both learn on alike
    P:learn(test[7]); Q:learn(test[7])
    local ctx = { messages = slice(test[8].events, 3) }
    assert.same(P:predict({}, ctx), Q:predict({}, ctx))
    -- state() / restore() (what --compare uses to start each configuration alike)
    local S = predict.learned {}
    assert.is_true(S:restore(json.decode(json.encode(P:state()))))
    assert.same(P:predict({}, ctx), S:predict({}, ctx))
    assert.is_nil((S:restore({ format = "x" })))
    -- the digest says what it was trained on
    local R = predict.learned {}
    R:train(train)
    assert.equals(st.provenance.offline.digest, R.provenance.offline.digest)
    local T = predict.learned {}
    T:train(corpus(8, 40))
    assert.is_not.equals(st.provenance.offline.digest, T.provenance.offline.digest)
    os.remove(path)
  end)

  it("refuses a file that is not its model, with a message saying why", function()
    local P = predict.learned {}
    local path = os.tmpname()
    local function write(s) local f = io.open(path, "w") f:write(s) f:close() end
    write("{not json")
    local ok, err = P:load(path)
    assert.is_nil(ok)
    assert.matches(path, err, 1, true)
    write(json.encode({ format = "something else" }))
    ok, err = P:load(path)
    assert.is_nil(ok)
    assert.matches("not a learned predictor model", err)
    write(json.encode({ format = learned.FORMAT, version = 99 }))
    ok, err = P:load(path)
    assert.matches("version 99", err)
    write(json.encode({ format = learned.FORMAT, version = learned.VERSION, classes = {}, W = {}, V = {}, VW = {},
      args = {}, pool = {}, cal_pairs = { { "x", 1 } } }))
    ok, err = P:load(path)
    assert.matches("calibration pair 1", err)
    os.remove(path)
    ok, err = P:load(path)
    assert.is_nil(ok)
    assert.has_error(function() predict.learned { model = path } end)
    assert.has_error(function() predict.learned { top = 0 } end)
    assert.has_error(function() predict.learned { epochs = "many" } end)
  end)

  it("uses declared input schemas: a new tool's arguments from what other tools took by that name", function()
    local P = predict.learned {}
    P:train(train)
    -- a tool it never saw, declared with a plot_key and an enum'd mode
    local tools = { inspect_plot = { schema = { type = "object", required = { "plot_key", "mode" },
      properties = { plot_key = { type = "string" }, mode = { type = "string", enum = { "quick" } } } } } }
    local c = test[2]
    local list
    local ctx
    for _, t in ipairs(c.turns) do
      if made(c, t) and made(c, t).tool == "water" then ctx = { messages = slice(c.events, t.at), tools = tools } end
    end
    local found
    local names = {}
    for _, k in ipairs(learned.keys_of(tools)) do names[#names + 1] = k end
    -- ask for the new tool's best call at that point
    local view = learned.new_view(ctx.messages, #ctx.messages)
    local plot
    for _, e in ipairs(ctx.messages) do
      if e.kind == "result" and e.tool == "locate_plot" then plot = json.decode(e.text).plot_key end
    end
    local vals = learned.arg_values(P, view, "inspect_plot", "plot_key", tools.inspect_plot.schema.properties.plot_key)
    assert.equals(plot, vals[1].v)
    vals = learned.arg_values(P, view, "inspect_plot", "mode", tools.inspect_plot.schema.properties.mode)
    assert.equals("quick", vals[1].v)
    list = P:predict({}, ctx)
    for _, p in ipairs(list) do if p.tool == "water" then found = true end end
    assert.is_true(found)
  end)

  it("groups folds: the conversations of one group never on both sides", function()
    local convs = {}
    for t = 1, 7 do for k = 1, 3 do convs[#convs + 1] = { id = "task" .. t .. "-trial" .. k } end end
    local group = function(id) return id:match("^(.-)%-trial") end
    local folds = learned.group_folds(convs, 3, group)
    local where = {}
    local n = 0
    for f, idx in ipairs(folds) do
      for _, i in ipairs(idx) do
        n = n + 1
        local g = group(convs[i].id)
        assert.is_true(where[g] == nil or where[g] == f, g .. " in two folds")
        where[g] = f
      end
    end
    assert.equals(#convs, n)
  end)

  it("names no tool, argument or domain in its code", function()
    -- every file of the package (lua/specula/learned/)
    local dir = (os.getenv("SPECULA_SOURCE_DIR") or ".") .. "/lua/specula/learned"
    local p = assert(io.popen("ls '" .. dir .. "'/*.lua"))
    local n = 0
    for path in p:lines() do
      n = n + 1
      local f = assert(io.open(path))
      local src = f:read("*a"):lower()
      f:close()
      for _, w in ipairs({ "reservation", "flight", "airport", "baggage", "passenger", "user_id", "cabin",
                           "greenhouse", "sensor", "plot_key" }) do
        assert.is_nil(src:find(w, 1, true), path .. " names '" .. w .. "'")
      end
    end
    p:close()
    assert.is_true(n >= 10, "read only " .. n .. " files of " .. dir)
  end)
end)
