-- specula.internal.output: the writers every output goes through. Each scrubs what
-- it writes with the run's secret set as its kind says, keeps JSON valid
-- line by line, counts what it wrote, and hands out its file to a C writer
-- only while nothing would be scrubbed.
local output = require "specula.internal.output"
local secrets = require "specula.secrets"
local json = require "specula.json"

local SECRET = "output-spec-secret-4417"

local function tmpfile()
  local p = os.tmpname()
  return p
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

describe("specula.internal.output", function()
  setup(function() assert.is_true(secrets.declare(SECRET)) end)

  it("writes text with every declared secret redacted, and counts the bytes it wrote", function()
    local p = tmpfile()
    local w = assert(output.open(p, "w", "text"))
    assert.equals(w, w:write("a ", SECRET, " b ", 42, "\n"))
    assert.is_true(w:close())
    assert.equals("a [redacted] b 42\n", read(p))
    assert.equals(#"a [redacted] b 42\n", w.bytes)
    os.remove(p)
  end)

  it("keeps each line of a json writer valid JSON, a redaction inside an escape included", function()
    local p = tmpfile()
    local w = assert(output.open(p, "w", "json"))
    -- the secret's first byte written as an escape: a raw redaction would cut it
    local esc = "\\u00" .. string.format("%02x", SECRET:byte(1)) .. SECRET:sub(2)
    w:write('{"a":"x' .. esc .. '"}\n', '{"b":"', SECRET, '"}\n')
    w:line('{"c":"plain"}')
    w:close()
    local n = 0
    for line in read(p):gmatch("[^\n]+") do
      n = n + 1
      assert.is_table(json.decode(line), line)
      assert.is_nil(line:find(SECRET:sub(2), 1, true), line)
    end
    assert.equals(3, n)
    assert.truthy(read(p):find('{"c":"plain"}\n', 1, true))
  end)

  it("adds a line's own extra strings, and the message rules for a message kind", function()
    local p = tmpfile()
    local w = assert(output.open(p, "w", "json_message"))
    w:line(json.encode({ h = "only-this-line-9911", auth = "Bearer undeclared-token-abc" }), { "only-this-line-9911" })
    w:line(json.encode({ h = "only-this-line-9911" }))
    w:close()
    local l1, l2 = read(p):match("^([^\n]*)\n([^\n]*)\n$")
    assert.equals("[redacted]", json.decode(l1).h)
    assert.equals("Bearer [redacted]", json.decode(l1).auth)
    assert.equals("only-this-line-9911", json.decode(l2).h)
    assert.equals("key [redacted]", output.clean("key " .. SECRET))
    assert.equals("Bearer [redacted]", output.clean("Bearer undeclared-token-abc", "message"))
    assert.equals("Bearer undeclared-token-abc", output.clean("Bearer undeclared-token-abc", "text"))
  end)

  it("scrubs a stream's pieces as one text (w:pieces) and bytes before they are re-encoded (w:clean)", function()
    local w = output.wrap(io.stdout, "json_message")
    local half = math.floor(#SECRET / 2)
    local list = w:pieces({ "x " .. SECRET:sub(1, half), SECRET:sub(half + 1) .. " y" })
    assert.equals("x [redacted] y", table.concat(list))
    assert.equals("\1[redacted]\2", w:clean("\1" .. SECRET .. "\2"))
  end)

  it("hands out its file to a C writer only while it has nothing to scrub", function()
    -- a secret is declared (setup): a text writer scrubs, so no file
    assert.is_nil(output.wrap(io.stdout, "canonical"):direct())
    -- a message writer always applies its rules
    assert.is_nil(output.wrap(io.stdout, "message"):direct())
  end)

  it("closes stdout by flushing it, never closing it", function()
    local w = output.wrap(io.stdout, "text")
    assert.is_true(w:close())
    assert.equals("file", io.type(io.stdout))
  end)

  it("names what is wrong with its arguments", function()
    assert.has_error(function() output.open(tmpfile(), "w", "yaml") end,
      "specula.internal.output.open: unknown kind 'yaml' (text, message, json, canonical or json_message)")
    assert.has_error(function() output.wrap({}, "text") end, "specula.internal.output.wrap: expected an open file, got table")
    local w, err = output.open("/nonexistent-dir/x", "w", "text")
    assert.is_nil(w)
    assert.matches("No such file", err)
  end)
end)
