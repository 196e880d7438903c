-- specula.llm: LLM clients.
--
--   specula.llm.openai      OpenAI-compatible chat + embeddings (specula.llm.openai)
--   specula.llm.anthropic   Anthropic Messages, streamed (specula.llm.anthropic)
--   specula.llm.retry       the shared retry policy and error helpers
--   specula.llm.client(name_or_opts) -> client
--     "openai"                 OPENAI_BASE_URL / OPENAI_API_KEY / SPECULA_MODEL
--     "anthropic"              ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY / SPECULA_MODEL
--     "ollama"                 http://localhost:11434/v1 (no key)
--     "llamacpp", "llama.cpp"  http://localhost:8080/v1 (no key)
--     "vllm"                   http://localhost:8000/v1 (no key)
--     "openai:MODEL", "anthropic:MODEL", "ollama:MODEL", ...: the same with a model
--     { provider = "openai" | "anthropic" | ..., <client options> }
--   Options given explicitly win over the environment. API keys are read
--   from options or the environment only, and never appear in errors.
local M = {}

local lazy = { openai = "specula.llm.openai", anthropic = "specula.llm.anthropic",
               retry = "specula.llm.retry" }
setmetatable(M, { __index = function(t, k)
  local name = lazy[k]
  if name then
    local mod = require(name)
    rawset(t, k, mod)
    return mod
  end
end })

-- Local OpenAI-compatible servers (they ignore the key; none is sent).
local PRESETS = {
  ollama = { provider = "openai", base_url = "http://localhost:11434/v1", api_key = false },
  llamacpp = { provider = "openai", base_url = "http://localhost:8080/v1", api_key = false },
  ["llama.cpp"] = { provider = "openai", base_url = "http://localhost:8080/v1", api_key = false },
  vllm = { provider = "openai", base_url = "http://localhost:8000/v1", api_key = false },
  openai = { provider = "openai" },
  anthropic = { provider = "anthropic" },
}

function M.client(spec)
  local opts = {}
  if type(spec) == "string" then
    local name, model = spec:match("^([^:]+):(.+)$")
    name = name or spec
    local preset = PRESETS[name]
    if not preset then
      error("specula.llm.client: unknown provider '" .. name .. "' (openai, anthropic, ollama, llamacpp, vllm)", 2)
    end
    for k, v in pairs(preset) do opts[k] = v end
    opts.model = model
  elseif type(spec) == "table" then
    local preset = spec.provider and PRESETS[spec.provider]
    if spec.provider and not preset then
      error("specula.llm.client: unknown provider '" .. tostring(spec.provider) .. "'", 2)
    end
    for k, v in pairs(preset or { provider = "openai" }) do opts[k] = v end
    for k, v in pairs(spec) do opts[k] = v end
  elseif spec == nil then
    opts.provider = "openai"
  else
    error("specula.llm.client: expected a provider name or an options table", 2)
  end
  local provider = opts.provider
  opts.provider = nil
  if opts.api_key == false then opts.api_key = "" end
  if opts.model == nil then opts.model = os.getenv("SPECULA_MODEL") end
  if provider == "anthropic" then return M.anthropic.new(opts) end
  return M.openai.new(opts)
end

return M
