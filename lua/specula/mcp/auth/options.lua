-- specula.mcp.auth.options: the auth = { ... } options of connect{}
-- checked (docs/mcp.md#authorization-oauth-21); the credentials among them
-- declared to specula.secrets as soon as they are given.
local secrets = require "specula.secrets"
local parse_url = require("specula.mcp.auth.urls").parse_url

local type, tostring, tonumber, pairs, ipairs, setmetatable, error =
  type, tostring, tonumber, pairs, ipairs, setmetatable, error
local format, concat, lower = string.format, table.concat, string.lower

local M = {}

M.DEFAULT_REDIRECT_URI = "http://127.0.0.1:33418/callback"
M.GRANTS = { authorization_code = true, client_credentials = true, jwt_bearer = true, enterprise = true }
M.METHODS = { none = true, client_secret_basic = true, client_secret_post = true, private_key_jwt = true }

local declare = secrets.declared   -- declares a credential and returns it

-- ---- options -------------------------------------------------------------------------------

local OPTION_TYPES = {
  grant = "string", client_id = "string", client_secret = "string", client_name = "string",
  client_metadata_url = "string", redirect_uri = "string", scope = "string",
  token_endpoint_auth_method = "string", private_key = "string", signing_alg = "string",
  authorization_server = "string", max_step_up = "number", timeout_ms = "number",
  authorize = "function", client_assertion = { "string", "function" }, store = "table",
  refresh_margin_s = "number", cache = "boolean", offline_access = "boolean", dpop = "boolean",
  assertion = { "string", "function" }, id_token = { "string", "function" }, idp_token_endpoint = "string",
  idp_client_id = "string", idp_client_secret = "string", application_type = "string",
}

function M.check_options(a, level)
  level = (level or 1) + 1
  if a == true then return {} end
  if type(a) ~= "table" then error("specula.mcp.connect: auth must be a table of options (or true)", level) end
  for k, v in pairs(a) do
    local want = OPTION_TYPES[k]
    if want == nil then
      error("specula.mcp.connect: auth." .. tostring(k) .. " is not an auth option", level)
    end
    local ok = type(want) == "table" and (type(v) == want[1] or type(v) == want[2]) or type(v) == want
    if not ok then
      error("specula.mcp.connect: auth." .. k .. " must be a " .. (type(want) == "table" and concat(want, " or ") or want), level)
    end
  end
  if a.grant and not M.GRANTS[a.grant] then
    error("specula.mcp.connect: auth.grant must be authorization_code, client_credentials, jwt_bearer or enterprise",
      level)
  end
  if a.token_endpoint_auth_method and not M.METHODS[a.token_endpoint_auth_method] then
    error("specula.mcp.connect: auth.token_endpoint_auth_method must be none, client_secret_basic, "
      .. "client_secret_post or private_key_jwt", level)
  end
  if a.signing_alg and a.signing_alg ~= "ES256" and a.signing_alg ~= "RS256" then
    error("specula.mcp.connect: auth.signing_alg must be ES256 or RS256", level)
  end
  if a.grant == "client_credentials" and not a.client_id then
    error("specula.mcp.connect: auth.grant = client_credentials needs auth.client_id", level)
  end
  if a.grant == "client_credentials" and not (a.client_secret or a.private_key or a.client_assertion) then
    error("specula.mcp.connect: auth.grant = client_credentials needs auth.client_secret, "
      .. "auth.private_key or auth.client_assertion", level)
  end
  if a.grant == "jwt_bearer" and not a.assertion then
    error("specula.mcp.connect: auth.grant = jwt_bearer needs auth.assertion (the workload's JWT, or a function "
      .. "returning one)", level)
  end
  if a.grant == "enterprise" then
    for _, k in ipairs({ "client_id", "id_token", "idp_token_endpoint" }) do
      if not a[k] then error("specula.mcp.connect: auth.grant = enterprise needs auth." .. k, level) end
    end
  end
  if a.application_type and a.application_type ~= "native" and a.application_type ~= "web" then
    error("specula.mcp.connect: auth.application_type must be native or web", level)
  end
  for _, k in ipairs({ "redirect_uri", "client_metadata_url", "authorization_server", "idp_token_endpoint" }) do
    if a[k] and not parse_url(a[k]) then error("specula.mcp.connect: auth." .. k .. " must be an absolute URL", level) end
  end
  if a.store and (type(a.store.load) ~= "function" or type(a.store.save) ~= "function") then
    error("specula.mcp.connect: auth.store needs load(key) and save(key, entry) functions", level)
  end
  -- credentials given by the script are secrets from now on
  declare(a.client_secret)
  declare(a.private_key)
  if type(a.client_assertion) == "string" then declare(a.client_assertion) end
  if type(a.assertion) == "string" then declare(a.assertion) end
  if type(a.id_token) == "string" then declare(a.id_token) end
  declare(a.idp_client_secret)
  return a
end

return M
