-- specula.internal.lines: the lines of an open file, as file:lines() gives
-- them ("\n" removed, "\r" kept, a last line without "\n" included) but
-- with every byte. LuaJIT's file:lines() reads with fgets and measures the
-- line with strlen: a NUL byte ends the line there, and the rest of it is
-- lost while the next line is glued on (a line starting with NUL vanished
-- without a word and every later line number was off by one). Every reader
-- of a user's file (inputs, records, logs, cassettes) reads through this,
-- so such a line reaches its parser whole and is reported at its own line.
local find, sub, concat = string.find, string.sub, table.concat

local M = {}

-- stdio's own buffer size: a file changed under a reader (an --input cut
-- while the run streams it) shows at the next 4 KB, as with file:lines()
local CHUNK = 4096

-- Iterator over f's lines. A line longer than a chunk is gathered in
-- pieces and joined once. A read error ends the lines and is raised, as
-- file:lines() raises it.
function M.lines(f)
  local buf, pos = "", 1
  local done = false
  return function()
    local nl = find(buf, "\n", pos, true)
    if nl then
      local line = sub(buf, pos, nl - 1)
      pos = nl + 1
      return line
    end
    if done then return nil end
    local parts = { sub(buf, pos) }
    while true do
      local chunk, err = f:read(CHUNK)
      if chunk == nil then
        done, buf, pos = true, "", 1
        if err then error(err, 2) end
        local rest = concat(parts)
        if rest == "" then return nil end
        return rest
      end
      local i = find(chunk, "\n", 1, true)
      if i then
        parts[#parts + 1] = sub(chunk, 1, i - 1)
        buf, pos = chunk, i + 1
        return concat(parts)
      end
      parts[#parts + 1] = chunk
    end
  end
end

-- The compression a file's first bytes announce (gzip, xz, zstd, bzip2), or
-- nil: a compressed log or input reads as lines of binary, and "not JSON"
-- alone does not tell the user what to do.
-- (bzip2: "BZh", the block size, then the first block's magic, so that a
-- text line starting "BZh" is not taken for one)
local MAGIC = { { "^\31\139", "gzip" }, { "^\253\55\122\88\90%z", "xz" }, { "^%(\181\47\253", "zstd" },
                { "^BZh[1-9]1AY&SY", "bzip2" } }
function M.compressed(head)
  if type(head) ~= "string" then return nil end
  for _, m in ipairs(MAGIC) do
    if find(head, m[1]) then return m[2] end
  end
  return nil
end

-- a path as one word of a POSIX shell command (the hint is copied and run)
local function shell_word(p)
  if find(p, "^[%w%./_%-+,:=@]+$") then return p end
  return "'" .. p:gsub("'", "'\\''") .. "'"
end

-- "gzip-compressed: decompress it first: gzip -dc PATH > PLAIN" for a file
-- whose first bytes are head, or nil when they announce no compression.
function M.compressed_hint(path, head)
  local packed = M.compressed(head)
  if not packed then return nil end
  local plain = path:gsub("%.%w+$", "")
  if plain == path or not find(plain, "%.jsonl?$") then plain = plain .. ".jsonl" end
  return packed .. "-compressed: decompress it first: " .. packed .. " -dc " .. shell_word(path) .. " > "
    .. shell_word(plain)
end

return M
