-- policies/read_only.lua — only idempotent, observable reads run early.
-- Everything else (costly reads, writes, sends, unknown tools) waits until
-- its state is verified.
return {
  classes = { read = "full" },
  tools = {
    web_search = "read", search = "read", retrieve = "read", arxiv_search = "read",
    fetch_url = "read", http_get = "read", file_read = "read", read_file = "read",
    extract_text = "read", wikipedia = "read",
  },
  trust_tool_classes = true,   -- an agent tool declaring class = "read" counts
  budget = { max_inflight = 4 },
}
