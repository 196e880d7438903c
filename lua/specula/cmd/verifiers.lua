-- specula verifiers: judge every recorded (candidate, observation) pair
-- with each verifier (the work: specula.lab.verifiers).
local M = {
  name = "verifiers",
  synopsis = "CASSETTE_DIR|RESULTS.jsonl [--verifier NAME_OR_FILE]... [options]",
  summary = "judge every recorded (candidate, observation) pair with each verifier",
  about = [[
CASSETTE_DIR is a cassette (`specula run --record DIR`); RESULTS.jsonl a
results file written with `specula run --keep-candidates`.]],
  positional = "sources",
  options = {
    { "--verifier", key = "verifiers", arg = "V", list = true, default = {},
      shown = "exact, normalized, spechop, jaccard",
      help = "exact, normalized, spechop, name_only, jaccard or jaccard:T (threshold T),\n"
        .. "or a Lua file returning function(predicted, actual, ctx) -> ok, reason\n(repeatable)" },
    { "--k", key = "k", arg = "K", default = math.huge, shown = "inf",
      convert = function(v) return require("specula.lab.verifiers").parse_k(v) end,
      help = "threads for the predicted RelLat" },
    { "--labels", key = "labels", arg = "FILE",
      help = 'JSONL, one line per candidate: {"id": ID, "equivalent": true|false};\n'
        .. "adds false accepts and false rejects against these labels" },
    { "--pairs", key = "pairs", flag = true,
      help = "print the candidates as JSONL (id, tool, candidate, observation,\nexact) instead of the table: a labels file to fill in" },
    { "--agent", key = "agent", arg = "SCRIPT",
      help = "with --input: replay the cassette with the agent at --k (virtual clock,\n"
        .. "--miss error) once as recorded and once per verifier swapped into every\n"
        .. "tool, and count the queries whose answer changes (those that leave the\ntape: not replayable)" },
    { "--input", key = "input", arg = "QUERIES.jsonl", help = "the queries of --agent" },
    { "--json", key = "json", flag = true, help = "one JSON object instead of the table" },
  },
}

function M.check(o)
  if #o.sources == 0 then return "a cassette directory or a results file is needed" end
  if #o.sources > 1 then return "one cassette directory or results file (got '" .. o.sources[1] .. "' and '"
    .. o.sources[2] .. "')" end
end

function M.main(o) return require("specula.lab.verifiers").main(o) end

return M
