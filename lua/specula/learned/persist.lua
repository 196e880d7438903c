-- specula.learned.persist: a model as a JSON file and back: its state
-- (format, version, options, weights, argument model, calibration,
-- provenance), checked on the way in (a file of another format or version,
-- or a malformed part, is an error naming the file and the part), scrubbed
-- of known secrets on the way out, and written whole (a temporary file
-- renamed).
local json = require "specula.json"
local common = require "specula.learned.common"
local model = require "specula.learned.model"

local type, pairs, ipairs, tostring, tonumber, pcall, next, require = type, pairs, ipairs, tostring, tonumber, pcall,
  next, require
local format = string.format
local canonical = json.canonical
local keys_of = common.keys_of
local DEFAULTS, class_index = model.DEFAULTS, model.class_index

local M = {}

local FORMAT = "specula-learned-predictor"
local VERSION = 1
M.FORMAT, M.VERSION = FORMAT, VERSION

function M.state(self)
  local W = {}
  for _, f in ipairs(keys_of(self.W)) do
    local w, row = self.W[f], {}
    for _, c in ipairs(keys_of(w)) do
      if w[c] ~= 0 then row[self.classes[c]] = w[c] end
    end
    if next(row) then W[f] = row end
  end
  local opts = {}
  for k in pairs(DEFAULTS) do opts[k] = self[k] end
  local classes = {}
  for i, c in ipairs(self.classes) do classes[i] = c end
  return {
    format = FORMAT, version = VERSION,
    provenance = self.provenance,
    options = opts, classes = json.array(classes), W = W, V = self.V, t = self.t, VW = self.VW, vt = self.vt or 0,
    args = self.args, pool = self.pool,
    cal = self.cal and { x = json.array(self.cal.x), y = json.array(self.cal.y) } or nil,
    cal_pairs = json.array(self.cal_pairs),
  }
end

local function restore(self, st, where)
  where = where or "model"
  if type(st) ~= "table" then return nil, where .. ": not a JSON object" end
  if st.format ~= FORMAT then
    return nil, where .. ": not a learned predictor model (format " .. tostring(st.format) .. ")"
  end
  if st.version ~= VERSION then
    return nil, format("%s: model format version %s, this specula reads %d", where, tostring(st.version), VERSION)
  end
  for _, f in ipairs({ "classes", "W", "V", "VW", "args", "pool", "cal_pairs" }) do
    if type(st[f]) ~= "table" then return nil, where .. ": missing or malformed '" .. f .. "'" end
  end
  for k in pairs(DEFAULTS) do
    local v = type(st.options) == "table" and st.options[k]
    if type(v) == "number" then self[k] = v end
  end
  self.classes, self.cidx = {}, {}
  for _, c in ipairs(st.classes) do
    if type(c) ~= "string" then return nil, where .. ": a class that is not a string" end
    class_index(self, c)
  end
  self.W = {}
  for _, f in ipairs(keys_of(st.W)) do
    local row = st.W[f]
    if type(row) ~= "table" then return nil, where .. ": malformed weights of '" .. tostring(f) .. "'" end
    local w = {}
    for _, c in ipairs(keys_of(row)) do
      local ci = self.cidx[c]
      if not ci or type(row[c]) ~= "number" then return nil, where .. ": malformed weight " .. tostring(f) end
      w[ci] = row[c]
    end
    self.W[f] = w
  end
  self.V = {}
  for _, f in ipairs(keys_of(st.V)) do
    if type(st.V[f]) ~= "number" then return nil, where .. ": malformed weight " .. tostring(f) end
    self.V[f] = st.V[f]
  end
  self.VW = {}
  for _, f in ipairs(keys_of(st.VW)) do
    if type(st.VW[f]) ~= "number" then return nil, where .. ": malformed weight " .. tostring(f) end
    self.VW[f] = st.VW[f]
  end
  self.vt = tonumber(st.vt) or 0
  self.args, self.pool = st.args, st.pool
  for _, tool in ipairs(keys_of(self.args)) do
    local a = self.args[tool]
    if type(a) ~= "table" or type(a.keys) ~= "table" or type(a.keysets) ~= "table" or type(a.n) ~= "number" then
      return nil, where .. ": malformed argument model of '" .. tostring(tool) .. "'"
    end
  end
  self.cal_pairs = {}
  for i, p in ipairs(st.cal_pairs) do
    if type(p) ~= "table" or type(p[1]) ~= "number" or type(p[2]) ~= "number" then
      return nil, where .. ": malformed calibration pair " .. i
    end
    self.cal_pairs[i] = { p[1], p[2] }
  end
  if type(st.cal) == "table" and type(st.cal.x) == "table" and type(st.cal.y) == "table" then
    self.cal = { x = st.cal.x, y = st.cal.y }
  else
    self.cal = nil
  end
  self.t = tonumber(st.t) or 0
  if type(st.provenance) == "table" then self.provenance = st.provenance end
  return true
end

-- The model from a state() table (it keeps the tables: give it a copy).
function M.restore(self, st) return restore(self, st, "learned predictor state") end

function M.save(self, path)
  local ok, text = pcall(canonical, self:state())
  if not ok then return nil, "learned predictor save: " .. tostring(text) end
  local tmp = path .. ".tmp"
  -- a model keeps argument values it saw: its writer lets no known secret
  -- go to disk (the text stays canonical JSON)
  local f, err = require("specula.internal.output").open(tmp, "w", "canonical")
  if not f then return nil, "learned predictor save: " .. tostring(err) end
  local okw, werr = f:write(text, "\n")
  local okc, cerr = f:close()
  if not okw or not okc then
    os.remove(tmp)
    return nil, "learned predictor save: " .. path .. ": " .. tostring(werr or cerr)
  end
  local okr, rerr = os.rename(tmp, path)
  if not okr then os.remove(tmp) return nil, "learned predictor save: " .. tostring(rerr) end
  return true
end

function M.load(self, path)
  local f, err = io.open(path, "r")
  if not f then return nil, "learned predictor load: " .. tostring(err) end
  local text = f:read("*a")
  f:close()
  local st, derr = json.decode(text)
  if st == nil then return nil, "learned predictor load: " .. path .. ": " .. tostring(derr) end
  return restore(self, st, "learned predictor load: " .. path)
end

return M
