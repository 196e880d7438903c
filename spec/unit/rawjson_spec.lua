-- specula.mcp.rawjson: a member's text cut from a JSON object's text as
-- it stands (the gateway hands a server's result on byte for byte).
local rawjson = require "specula.mcp.rawjson"

describe("rawjson.member", function()
  it("cuts the value of a top-level member, whatever comes before or after", function()
    local line = '{"jsonrpc":"2.0","id":2,"result":{"a":[1,2,{"b":"}]\\"{["}],"n":1.50e+3},"x":null}'
    assert.are.equal('{"a":[1,2,{"b":"}]\\"{["}],"n":1.50e+3}', rawjson.member(line, "result"))
    assert.are.equal("2", rawjson.member(line, "id"))
    assert.are.equal('"2.0"', rawjson.member(line, "jsonrpc"))
    assert.are.equal("null", rawjson.member(line, "x"))
  end)

  it("keeps spaces inside, numbers and escapes as written", function()
    local line = '{ "id" : 7 , "result" : { "t" : "\\u00e9\\\\" , "v" : -0.0 } }'
    assert.are.equal('{ "t" : "\\u00e9\\\\" , "v" : -0.0 }', rawjson.member(line, "result"))
  end)

  it("finds only top-level members, and says nil for what is not there", function()
    local line = '{"error":{"result":1},"id":3}'
    assert.is_nil(rawjson.member(line, "result"))
    assert.is_nil(rawjson.member("[1,2]", "result"))
    assert.is_nil(rawjson.member('{"result":', "result"))
    assert.is_nil(rawjson.member(nil, "result"))
  end)
end)

describe("rawjson.elements", function()
  it("cuts each element of a top-level array as written (a JSON-RPC batch)", function()
    local body = ' [ {"id":1,"result":{"b":1,"a":"],["}} , {"method":"x"},3,"s\\"]",[[]] ] '
    assert.are.same({ '{"id":1,"result":{"b":1,"a":"],["}}', '{"method":"x"}', "3", '"s\\"]"', "[[]]" },
      rawjson.elements(body))
    assert.are.same({}, rawjson.elements("[ ]"))
  end)

  -- (the text was decoded already: it is valid JSON, only its shape is checked)
  it("says nil for what is not a whole array", function()
    assert.is_nil(rawjson.elements('{"a":1}'))
    assert.is_nil(rawjson.elements("[1,2"))
    assert.is_nil(rawjson.elements(nil))
  end)
end)
