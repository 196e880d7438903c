-- examples/experiment/forbid_all.lua — nothing runs early: every tool call
-- of an unverified state (read or write, guessed or predicted) waits until
-- that state is verified. Speculation can then only overlap the model's
-- turns with the tools, never start a tool early.
return {
  classes = { read = "forbid", write = "forbid" },
  tools = { read_text_file = "read", write_file = "write" },
}
