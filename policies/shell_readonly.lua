-- policies/shell_readonly.lua — which shell commands only look (the rule
-- file of the whatif policies for Claude Code's Bash and Codex's shell
-- tools; edit it to suit your agent). A command line is read-only when every
-- command in it (split at ; && || | and newlines) is one of `programs`, or a
-- `git` subcommand of `git`, used in no way `writes` names, preceded by no
-- environment assignment but those of `env`, and nothing in it redirects
-- output to a file, substitutes a command ($(...), backticks) or runs in the
-- background (quotes and backslash escapes read as the shell reads them).
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
  -- environment assignments before a command that only change how it
  -- prints (any other, LD_PRELOAD=... or GIT_EXTERNAL_DIFF=..., can make a
  -- reader run a program: a write)
  env = { PAGER = true, GIT_PAGER = true, LANG = true, LC_ALL = true, TERM = true, COLUMNS = true, NO_COLOR = true,
          LESS = true },
  -- a use of a program above that writes or runs something after all:
  -- sort -o FILE, uniq IN OUT, tree -o FILE, file -C, rg --pre CMD,
  -- git ... --output=FILE / --ext-diff / -c KEY=VALUE
  writes = function(prog, words)
    local operands = 0
    for i = 2, #words do
      local w = words[i]
      if prog == "sort" and (w == "-o" or w:match("^%-o.") or w:match("^%-%-output")) then return true end
      if prog == "tree" and (w == "-o" or w:match("^%-%-output")) then return true end
      if prog == "file" and (w == "-C" or w:match("^%-%-compile")) then return true end
      if prog == "rg" and (w == "--pre" or w:match("^%-%-pre=")) then return true end
      if prog == "git" and (w:match("^%-%-output") or w == "--ext-diff" or w == "--textconv" or w == "-c"
        or w:match("^%-%-exec")) then return true end
      if prog == "uniq" and not w:match("^%-") then operands = operands + 1 end
    end
    return prog == "uniq" and operands > 1   -- uniq IN OUT writes OUT
  end,
  -- sed -n 'A,Bp' FILE (printing lines) only reads
  extra = function(prog, words)
    if prog == "sed" then return words[2] == "-n" and (words[3] or ""):match("^'?%d*,?%d*p'?$") ~= nil end
    if prog == "git" and words[2] == "remote" then return words[3] == "-v" and words[4] == nil end
    return false
  end,
}
