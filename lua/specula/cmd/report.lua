-- specula report: one self-contained HTML page of results files (the work:
-- specula.report).
local argv = require "specula.internal.argv"
local D = require("specula.internal.domains").DEFAULTS

local floor, tonumber = math.floor, tonumber

local M = {
  name = "report",
  synopsis = "RESULTS.jsonl [MORE.jsonl ...] [-o report.html] [options]",
  summary = "self-contained HTML report with SVG figures",
  about = [[
Writes one self-contained HTML report (inline CSS and SVG) of one or more
results files written by `specula run --out`, or of summaries written by
`specula whatif --summary` (told by their content; the two are not mixed):
where the agent's wait goes, per configuration and per tool.]],
  positional = "files",
  options = {
    { "--out", "-o", key = "out", arg = "FILE", default = "report.html", help = "the HTML file to write; - is stdout" },
    { "--trace", key = "trace", arg = "FILE.json",
      help = "a Chrome trace from `specula run --trace`: the timeline\nfigure then shows the recorded events of one query" },
    { "--query", key = "query", arg = "ID", shown = "the one with the most commits + rollbacks",
      help = "the query shown in the timeline" },
    { "--group", key = "group", arg = "auto|file", default = "auto",
      convert = argv.one_of({ auto = true, file = true }, "--group must be auto or file"),
      help = "auto: group records by their `config`, else by mode and k;\nfile: one configuration per input file" },
    { "--title", key = "title", arg = "TEXT", shown = "none", help = "the report's title" },
    { "--cassette", key = "cassette", arg = "DIR",
      help = "a cassette (`specula run --record DIR`, or a results file run with\n"
        .. "--keep-candidates): adds a Verifiers section, the table of\n`specula verifiers DIR`" },
    { "--verifier", key = "verifiers", arg = "V", list = true, shown = "exact, normalized, spechop, jaccard",
      help = "a verifier for that section (repeatable), as `specula verifiers` takes it" },
    { "--bootstrap", key = "iterations", arg = "N", default = D.bootstrap_iterations, convert = function(v)
        v = tonumber(v)
        if not v or v < 1 or v ~= floor(v) then return nil, "--bootstrap must be a positive integer" end
        return v
      end, help = "bootstrap resamples for the RelLat CI" },
    { "--seed", key = "seed", arg = "N", default = D.bootstrap_seed, convert = function(v)
        v = tonumber(v)
        if not v then return nil, "--seed must be a number" end
        return v
      end, help = "bootstrap seed (as in `specula run --compare`)" },
  },
}

function M.check(o)
  if #o.files == 0 then return "no results file given" end
  if o.verifiers and not o.cassette then return "--verifier needs --cassette DIR" end
  if o.cassette then
    local vlab = require "specula.lab.verifiers"
    local err
    o.vs, err = vlab.load_verifiers(o.verifiers or vlab.DEFAULT)
    if not o.vs then return err end
  end
end

function M.main(o) return require("specula.report").main(o) end

return M
