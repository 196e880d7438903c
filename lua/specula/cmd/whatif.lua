-- specula whatif: an agent's own timed logs in (Claude Code, Codex CLI,
-- OTel GenAI, OpenHands, conversations), what speculation would have saved on them and the
-- bound out (the work: specula.lab.whatif).
local function W() return require "specula.lab.whatif" end

local function number(name, lo, hi)
  return function(v)
    local n = tonumber(v)
    -- (infinity too: 1e999 reads as one, and no time or probability is)
    if not n or n ~= n or n == math.huge or n == -math.huge or n < lo or (hi and n > hi) then
      return nil, name .. " must be a finite number" .. (hi and (" in [" .. lo .. ", " .. hi .. "]") or (" >= " .. lo))
        .. ", got '" .. v .. "'"
    end
    return n
  end
end

local M = {
  name = "whatif",
  synopsis = "LOG... [--train FILE] [--policy FILE] [--compare LIST] [--out FILE] [--summary FILE] [options]",
  summary = "what speculation would have saved on an agent's own timed logs, and the bound",
  positional = "logs",
  about = [[
Each LOG is what an agent wrote: a Claude Code transcript, a Codex CLI
rollout, OpenTelemetry GenAI spans (OTLP JSON), an OpenHands event stream or
specula's conversations format (told by its content). Its sessions run, in
time order, as conversation agents on the virtual clock with the log's own
times, in each configuration: recorded (the log's count), sequential (the
replay), predictor (action speculation, the learned predictor online),
spechop (k = 3, a speculator right with probability --spec-p), both, and the
bounds perfect-predictor, perfect-speculator, perfect-both. `specula report`
draws a --summary file. See docs/whatif.md.]],
  options = {
    { "--train", key = "train", arg = "FILE", list = true, default = {},
      help = "logs or conversations files the predictor learns before the run (repeatable)" },
    { "--policy", key = "policy", arg = "FILE", shown = "policies/whatif.lua",
      help = "a Lua file returning { read_only = function(tool, args) -> boolean }:\n"
        .. "the calls that may run before the model decided them" },
    { "--compare", key = "compare", arg = "LIST", shown = "all eight",
      convert = function(v) return W().config_list(v) end,
      help = "comma-separated configurations: recorded, sequential, predictor, spechop,\n"
        .. "both, perfect-predictor, perfect-speculator, perfect-both" },
    { "--out", key = "out", arg = "FILE",
      help = "one JSON record per session: times, tool names, digests of the arguments" },
    { "--summary", key = "summary", arg = "FILE",
      help = "the tables as one JSON object (`specula report FILE` draws it)" },
    { "--keep-content", key = "keep_content", flag = true,
      help = "--out keeps the calls' arguments and the messages (scrubbed of secrets)" },
    { "--approval-cap", key = "approval_cap_ms", arg = "S", shown = "600",
      convert = function(v)
        local n, err = number("--approval-cap", 0)(v)
        return n and n * 1000, err
      end,
      help = "seconds of a call's recorded time past which, when the log says nothing\n"
        .. "of approvals, the rest is a person's wait, not the agent's" },
    { "--spec-p", key = "spec_p", arg = "P", shown = "0.6", convert = number("--spec-p", 0, 1),
      help = "the speculator's chance of guessing the recorded result" },
    { "--spec-ms", key = "spec_ms", arg = "MS", shown = "50", convert = number("--spec-ms", 0),
      help = "the speculator's time per guess" },
  },
}

function M.check(o)
  if #o.logs == 0 then return "at least one LOG is needed (a Claude Code transcript, a Codex CLI rollout, OTel GenAI spans, an OpenHands event stream, a conversations file)" end
end

function M.main(o) return W().main(o) end

return M
