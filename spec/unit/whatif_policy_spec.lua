-- The default eligibility of `specula whatif` (policies/whatif.lua and its
-- shell rule file): read-only tools and shell commands run early, the rest
-- waits.
local root = os.getenv("SPECULA_SOURCE_DIR") or "."
local P = dofile(root .. "/policies/whatif.lua")

describe("policies/whatif.lua", function()
  it("Claude Code: reads run early, edits and writes wait", function()
    for _, t in ipairs({ "Read", "Grep", "Glob", "WebFetch", "WebSearch" }) do assert.is_true(P.read_only(t, {}), t) end
    for _, t in ipairs({ "Edit", "Write", "NotebookEdit", "Task", "mcp__github__create_issue" }) do
      assert.is_false(P.read_only(t, {}), t)
    end
  end)

  it("shell commands by the rule file: only looking commands, no redirection or substitution", function()
    local yes = { "ls -la", "cat README.md", "grep -rn 'a|b' src", "git status -s", "git diff HEAD~1",
                  "cd /x && git log --oneline -20", "rg -n foo | head -5", "sed -n '1,40p' f.c", "ls 2>/dev/null",
                  "Get-ChildItem -Force | Select-Object Name" }
    local no = { "git push origin main", "rm -rf build", "npm test", "cat a > b", "echo $(rm x)", "ls `rm x`",
                 "sleep 10 &", "git commit -m x", "sed -i s/a/b/ f" }
    for _, c in ipairs(yes) do assert.is_true(P.read_only("Bash", { command = c }), c) end
    for _, c in ipairs(no) do assert.is_false(P.read_only("Bash", { command = c }), c) end
    -- Codex: a string or an argv; OpenHands: execute_bash
    assert.is_true(P.read_only("exec_command", { cmd = "git status" }))
    assert.is_true(P.read_only("shell", { command = { "bash", "-lc", "ls -la" } }))
    assert.is_false(P.read_only("shell", { command = { "bash", "-lc", "make" } }))
    assert.is_false(P.read_only("apply_patch", { input = "*** Begin Patch" }))
    assert.is_true(P.read_only("execute_bash", { command = "pwd" }))
  end)

  it("shell: quotes and escapes read as the shell reads them; readers used to write or run, and env prefixes, wait",
    function()
    local yes = { [[grep "a\|b" f]], [[grep -n "foo;bar" x]], "GIT_PAGER=cat git log -3", "sort in.txt | uniq -c",
                  "uniq -c in", [[echo "it's"]], "cat a\\;b", "ls \\> x", "PAGER=cat git diff" }
    local no = { [[echo \"; rm -rf /tmp/x; echo \"]], "sort -o /etc/passwd in.txt", "sort --output=f in", "uniq in out",
                 "tree -o out", "git diff --output=/tmp/patch", "git diff --ext-diff", "git -c core.pager=x log",
                 "rg --pre ./evil.sh foo", "rg --pre=./evil.sh foo", "GIT_EXTERNAL_DIFF=./evil.sh git diff",
                 "LD_PRELOAD=/tmp/evil.so cat x", "file -C -m magic", "echo 'open", 'echo "open' }
    for _, c in ipairs(yes) do assert.is_true(P.read_only("Bash", { command = c }), c) end
    for _, c in ipairs(no) do assert.is_false(P.read_only("Bash", { command = c }), c) end
  end)

  it("OpenHands' editor runs early only to view", function()
    assert.is_true(P.read_only("str_replace_editor", { path = "/a" }))
    assert.is_true(P.read_only("str_replace_editor", { command = "view", path = "/a" }))
    assert.is_false(P.read_only("str_replace_editor", { command = "str_replace", path = "/a" }))
  end)
end)
