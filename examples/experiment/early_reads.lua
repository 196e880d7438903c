-- examples/experiment/early_reads.lua — the agent's eligibility policy: the
-- filesystem server's reads may run from an unverified state (a guessed
-- observation or a predicted call); write_file waits until its state is
-- verified. Any other tool has no entry, so it waits too.
return {
  classes = { read = "full", write = "forbid" },
  tools = { read_text_file = "read", write_file = "write" },
}
