-- policies/shell_readonly.lua — which shell commands only look (the rule
-- file of the whatif policies for Claude Code's Bash and Codex's shell
-- tools; edit it to suit your agent). A command line is read-only when every
-- command in it (split at ; && || | and newlines) is one of `programs`, or a
-- `git` subcommand of `git`, and nothing in it redirects output to a file,
-- substitutes a command ($(...), backticks) or runs in the background.
-- Everything else is a write: it waits until the model has decided it.
return {
  programs = { ls = true, cat = true, head = true, tail = true, grep = true, rg = true, find = false, pwd = true,
               wc = true, echo = true, sed = false, stat = true, file = true, tree = true, which = true,
               nl = true, sort = true, uniq = true, cd = true, test = true, du = true, diff = true,
               -- PowerShell's readers (Codex on Windows)
               ["Get-Content"] = true, ["Get-ChildItem"] = true, ["Select-Object"] = true,
               ["Select-String"] = true, ["Get-Location"] = true },
  git = { status = true, diff = true, log = true, show = true, branch = false, remote = false, ["rev-parse"] = true,
          ["ls-files"] = true, blame = true },
  -- sed -n 'A,Bp' FILE (printing lines) only reads
  extra = function(prog, words)
    if prog == "sed" then return words[2] == "-n" and (words[3] or ""):match("^'?%d*,?%d*p'?$") ~= nil end
    if prog == "git" and words[2] == "remote" then return words[3] == "-v" and words[4] == nil end
    return false
  end,
}
