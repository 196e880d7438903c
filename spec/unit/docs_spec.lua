-- The documentation holds together: README.md stays a short way in, every
-- relative link of README.md, docs/*.md and the other READMEs leads to a file
-- (and heading) that exists, no file cites a document the repository lacks,
-- the paths and engine units the docs name exist, and the architecture page
-- names every unit of engine/. (The commands and options the docs name are
-- checked against the binary in spec/functional/docs_spec.lua; the README's
-- commands run in spec/functional/readme_spec.lua.)
local H = require "support.helpers"

local ROOT = H.root

local function lines_of(cmd)
  local p = assert(io.popen(cmd))
  local out = {}
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  return out
end

local function exists(path)
  return os.execute("test -e " .. H.quote(path)) == 0
end

local function dirname(path) return path:match("^(.*)/[^/]*$") or "." end

-- "a/b/../c" -> "a/c"; "./x" -> "x" (nil when it climbs above the start)
local function normalize(path)
  local parts = {}
  for seg in path:gmatch("[^/]+") do
    if seg == ".." then
      if #parts == 0 then return nil end
      parts[#parts] = nil
    elseif seg ~= "." then
      parts[#parts + 1] = seg
    end
  end
  return table.concat(parts, "/")
end

-- The anchor GitHub gives a heading: lower case, punctuation dropped but
-- for "-" and "_", spaces to "-"; a repeated heading gets -1, -2, ...
local function slug(text)
  local s = text:gsub("`", ""):lower():gsub("[^%w%s%-_]", ""):gsub("%s", "-")
  return s
end

-- The headings of a markdown text outside fenced code blocks, and their anchors.
local function anchors(text)
  local set, seen, fenced = {}, {}, false
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    if line:match("^%s*```") then
      fenced = not fenced
    elseif not fenced then
      local title = line:match("^#+%s+(.-)%s*$")
      if title then
        local a = slug(title)
        if seen[a] then
          seen[a] = seen[a] + 1
          a = a .. "-" .. seen[a]
        else
          seen[a] = 0
        end
        set[a] = true
      end
    end
  end
  return set
end

-- The text outside fenced code blocks and inline code spans (links live there).
local function prose(text)
  local out, fenced = {}, false
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    if line:match("^%s*```") then fenced = not fenced
    elseif not fenced then out[#out + 1] = (line:gsub("`[^`]*`", "")) end
  end
  return table.concat(out, "\n")
end

local anchor_cache = {}
local function anchors_of(path)
  if not anchor_cache[path] then anchor_cache[path] = anchors(assert(H.read(ROOT .. "/" .. path), path)) end
  return anchor_cache[path]
end

-- Problems with the relative links of the markdown file `file` (a path from
-- the root) whose text is `text`: a list of messages.
local function check_links(file, text)
  local bad = {}
  for target in prose(text):gmatch("%]%(([^)%s]+)%)") do
    if not target:match("^%a[%w+.-]*:") then   -- http:, https:, mailto: are not ours
      local path, anchor = target:match("^([^#]*)#?(.*)$")
      local resolved = path == "" and file or normalize(dirname(file) .. "/" .. path)
      if not resolved or not exists(ROOT .. "/" .. resolved) then
        bad[#bad + 1] = file .. ": link to a missing file: " .. target
      elseif anchor ~= "" then
        if not resolved:match("%.md$") then
          bad[#bad + 1] = file .. ": an anchor into a file that is not markdown: " .. target
        elseif not anchors_of(resolved)[anchor] then
          bad[#bad + 1] = file .. ": no heading for the anchor of " .. target
        end
      end
    end
  end
  return bad
end

-- Problems with the documents a text cites: a file name ending in .md that
-- exists neither from the root nor beside the citing file (or an anchor
-- into it that names no heading), the design document that lives outside
-- the repository ("DESIGN §2", "DESIGN.md"), a section of the README by
-- name that it does not have, and the internal issue tracker ("issue 11
-- §1"), which a reader of the repository cannot open.
local function check_citations(file, text)
  local bad = {}
  for cited, anchor in text:gmatch("([%w_./-]*[%w_-]%.md)#?([%w_-]*)") do
    -- beside the citing file (a link), else from the root (a path in a comment)
    local found
    for _, c in ipairs({ normalize(dirname(file) .. "/" .. cited) or "", normalize(cited) or "" }) do
      if c ~= "" and exists(ROOT .. "/" .. c) then found = c break end
    end
    if not found then
      bad[#bad + 1] = file .. ": cites " .. cited .. ", which the repository lacks"
    elseif anchor ~= "" and not anchors_of(found)[anchor] then
      bad[#bad + 1] = file .. ": cites " .. cited .. "#" .. anchor .. ", which has no such heading"
    end
  end
  for l in (text .. "\n"):gmatch("([^\n]*)\n") do
    if l:find("%f[%w]DESIGN%f[^%w]") then
      bad[#bad + 1] = file .. ": cites the design document, which is not in the repository: " .. l
    end
    local lower = l:lower()
    local at = lower:find("%f[%w]issue%s+%d")   -- "issue #827" is an upstream project's
    if at and not lower:sub(1, at - 1):find("luajit%s*$") then
      bad[#bad + 1] = file .. ": cites the issue tracker, which is not in the repository: " .. l
    end
    for title in l:gmatch("README,?%s+\"([^\"]+)\"") do
      if not anchors_of("README.md")[slug(title)] then
        bad[#bad + 1] = file .. ": cites README section \"" .. title .. "\", which it does not have"
      end
    end
  end
  return bad
end

-- Every text file of the repository a reader may open.
local SOURCES = "engine lua spec bench examples policies docs cmake .ci"
local function text_files()
  local files = lines_of("cd " .. H.quote(ROOT) .. " && find " .. SOURCES .. " -type f \\( -name '*.lua' -o -name '*.c'"
    .. " -o -name '*.h' -o -name '*.md' -o -name '*.js' -o -name '*.sh' -o -name '*.py' -o -name '*.cmake'"
    .. " -o -name '*.slurm' -o -name '*.yaml' -o -name '*.txt' -o -path '.ci/*' \\) -not -path 'spec/fixtures/*'"
    .. " -not -path 'spec/fuzz/corpus/*' -not -path '*/tape/*' | sort")
  files[#files + 1] = "README.md"
  files[#files + 1] = "CMakeLists.txt"
  return files
end

local function markdown_files()
  local files = { "README.md" }
  for _, f in ipairs(lines_of("cd " .. H.quote(ROOT) .. " && find docs spec bench examples -name '*.md' | sort")) do
    files[#files + 1] = f
  end
  return files
end

-- Names in the docs that look like paths and are not: CTest's test names.
local NOT_PATHS = { ["spec/functional-timing"] = true, ["valgrind/functional"] = true }

local function fail_on(bad)
  assert(#bad == 0, #bad .. " problem(s):\n" .. table.concat(bad, "\n"))
end

describe("the docs' checks", function()
  it("give the anchors GitHub gives", function()
    local a = anchors("# T\n## Authorization (OAuth 2.1)\n## `specula run`\n## Again\n## Again\n"
      .. "```sh\n# not a heading\n```\n### Slurm and Kubernetes\n")
    for _, want in ipairs({ "t", "authorization-oauth-21", "specula-run", "again", "again-1", "slurm-and-kubernetes" }) do
      assert.is_true(a[want], want)
    end
    assert.is_nil(a["not-a-heading"])
  end)

  it("report a link to a missing file or heading, and pass good ones", function()
    local bad = check_links("docs/x.md", "[a](cli.md) [b](cli.md#nope) [c](nope.md) [d](../README.md#quick-start-debian-12)"
      .. " [e](https://example.org/x.md) `[f](gone.md)`")
    assert.equals(2, #bad, table.concat(bad, "\n"))
    assert.matches("no heading for the anchor of cli.md#nope", bad[1], 1, true)
    assert.matches("missing file: nope.md", bad[2], 1, true)
  end)

  it("report citations of documents the repository lacks", function()
    local bad = check_citations("lua/specula/x.lua", "-- rules (DESIGN §2)\n-- see README \"No Such Part\"\n"
      .. "-- the gate (issue 11 §1)\n-- LuaJIT issue #827 is upstream\n-- docs/cli.md#estimates\n"
      .. "-- docs/cli.md#nothing\n-- NOTES.md\n")
    local text = table.concat(bad, "\n")
    assert.equals(5, #bad, text)
    assert.matches("design document", text, 1, true)
    assert.matches("README section \"No Such Part\"", text, 1, true)
    assert.matches("issue tracker", text, 1, true)
    assert.matches("docs/cli.md#nothing, which has no such heading", text, 1, true)
    assert.matches("cites NOTES.md, which the repository lacks", text, 1, true)
  end)
end)

describe("the documentation", function()
  it("keeps README.md to at most 250 lines", function()
    local readme = assert(H.read(ROOT .. "/README.md"))
    local n = select(2, readme:gsub("\n", "\n"))
    assert.is_true(n <= 250, "README.md has " .. n .. " lines")
  end)

  it("has the pages the README sends a newcomer to, each leading to the next", function()
    local readme = assert(H.read(ROOT .. "/README.md"))
    local order = {}
    local next_part = assert(readme:match("\n## Where to read next\n(.*)$"), "no section 'Where to read next'")
    for page in next_part:gmatch("%d%. %[docs/([%w_]+%.md)%]") do
      order[#order + 1] = page
    end
    assert.same({ "agents.md", "cli.md", "experiments.md", "cassettes.md", "mcp.md", "architecture.md" }, order)
    for i = 1, #order - 1 do
      local text = assert(H.read(ROOT .. "/docs/" .. order[i]), order[i])
      assert.matches("\nNext: %[" .. order[i + 1]:gsub("%.", "%%.") .. "%]%(" .. order[i + 1]:gsub("%.", "%%.") .. "%)", text)
    end
  end)

  it("links only to files and headings that exist", function()
    local bad, n = {}, 0
    for _, f in ipairs(markdown_files()) do
      n = n + 1
      for _, b in ipairs(check_links(f, assert(H.read(ROOT .. "/" .. f), f))) do bad[#bad + 1] = b end
    end
    assert.is_true(n >= 10, n .. " markdown files")
    fail_on(bad)
  end)

  it("is the only documentation the sources cite: no file cites a document the repository lacks", function()
    local bad, n = {}, 0
    for _, f in ipairs(text_files()) do
      -- the docs' own specs hold the patterns and the pages' names as data
      if f ~= "spec/unit/docs_spec.lua" and f ~= "spec/functional/docs_spec.lua" then
        n = n + 1
        for _, b in ipairs(check_citations(f, assert(H.read(ROOT .. "/" .. f), f))) do bad[#bad + 1] = b end
      end
    end
    assert.is_true(n >= 150, n .. " files")
    fail_on(bad)
  end)

  it("names only paths of the repository that exist", function()
    local bad = {}
    for _, f in ipairs(markdown_files()) do
      if f == "README.md" or f:match("^docs/") or f == "spec/README.md" then
        local text = assert(H.read(ROOT .. "/" .. f))
        for span in text:gmatch("`([^`\n]+)`") do
          for path in span:gmatch("%f[%w._/-]((%.?[%w_]+)/[%w_./-]*)") do
            local top = path:match("^([^/]+)/")
            if ({ engine = 1, lua = 1, spec = 1, bench = 1, examples = 1, policies = 1, cmake = 1, docs = 1,
                  [".ci"] = 1 })[top] then
              local clean = path:gsub("[.,:;]+$", "")
              if not NOT_PATHS[clean] and not exists(ROOT .. "/" .. clean) then bad[#bad + 1] = f .. ": names " .. clean .. ", which does not exist" end
            end
          end
        end
      end
    end
    fail_on(bad)
  end)

  it("names every unit of engine/ in the architecture page, and no unit that is not there", function()
    local arch = assert(H.read(ROOT .. "/docs/architecture.md"))
    local bad = {}
    local files = lines_of("ls " .. H.quote(ROOT .. "/engine"))
    assert.is_true(#files >= 40, #files .. " files in engine/")
    for _, name in ipairs(files) do
      local stem = name:match("^(sp_[%w_]+)%.[ch]$")
      if stem and not arch:find("`" .. stem .. "[%.`]") then
        bad[#bad + 1] = "docs/architecture.md does not name engine/" .. name
      end
    end
    for _, f in ipairs(markdown_files()) do
      if f == "README.md" or f:match("^docs/") then
        local text = assert(H.read(ROOT .. "/" .. f))
        for unit in text:gmatch("%f[%w_](sp_[%w_]+%.[ch])%f[^%w_]") do
          if not exists(ROOT .. "/engine/" .. unit) then bad[#bad + 1] = f .. ": names " .. unit .. ", not in engine/" end
        end
      end
    end
    fail_on(bad)
  end)
end)
