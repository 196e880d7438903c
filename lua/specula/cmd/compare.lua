-- specula compare: the --compare table from results files that exist (the
-- work: specula.run.compare.cli_main).
local M = {
  name = "compare",
  synopsis = "RESULTS.jsonl [MORE.jsonl ...] [--baseline NAME] [--summary FILE]",
  summary = "the --compare table (with paired differences) from results files",
  about = [[
Prints the table of `specula run --compare` from results files that already
exist (a --compare run's --out, the union written by `specula merge`, or the
files of separate runs): one row per distinct run (the records' provenance;
two runs that share a name are told apart by the first field where they
differ), queries paired by id across files, then the paired differences of
every row against the baseline, and one line per run saying what it ran.
The same file twice, or one run's query in two files, is an error. A
failed query (its record carries an error) is counted (n ok, failed) and
left out of every figure; a comparison with fewer than 80% of its queries
answered in both is not comparable. Exits 3 when some records carry an
error (as the run that wrote them did), saying on stderr how many failed
where.]],
  positional = "files",
  options = {
    { "--baseline", key = "baseline", arg = "NAME", shown = "the first",
      help = "the configuration the others are paired with" },
    { "--summary", key = "summary", arg = "FILE", help = "also write the table as JSON" },
  },
}

function M.check(o)
  if #o.files == 0 then return "no results file given" end
  if o.summary == "-" then return "--summary -: stdout holds the table; give --summary FILE" end
end

function M.main(o)
  return require("specula.run.compare").cli_main(o)
end

return M
