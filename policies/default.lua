-- policies/default.lua — the PASTE taxonomy (docs/agents.md#classes-and-the-shipped-policies): tools map to classes,
-- classes to speculative decisions. An agent tool may declare its own class
-- (`class = "read"`); this policy honours that declaration
-- (trust_tool_classes). A tool with no class is "unknown": forbid.
return {
  classes = {
    -- idempotent and observable: web search, retrieval, file read, HTTP GET
    read = "full",
    -- idempotent but unobservable, it costs money: within a rate and spend budget
    read_costly = { decision = "full", rate = 5, burst = 10 },
    -- payment with a pre-minted idempotency key, S3 PUT: full only when the
    -- key can be minted ahead; set this class to "full" in your own policy
    -- when your tool mints its key before the call
    idempotent_key = "warmup",
    -- staging insert, log append: compensate, do not speculate
    reversible_write = "forbid",
    -- payment capture, e-mail, chat send: never early, warm-up at most
    irreversible = "warmup",
  },
  tools = {
    web_search = "read", search = "read", retrieve = "read", arxiv_search = "read",
    fetch_url = "read", http_get = "read", file_read = "read", read_file = "read",
    extract_text = "read", wikipedia = "read",
    vector_query = "read_costly", llm_judge = "read_costly", summarize = "read_costly",
    s3_put = "idempotent_key", charge_with_key = "idempotent_key",
    db_insert = "reversible_write", log_append = "reversible_write", staging_insert = "reversible_write",
    payment_capture = "irreversible", send_email = "irreversible", send_message = "irreversible",
    chat_send = "irreversible", synthesize = "reversible_write",
  },
  trust_tool_classes = true,
  budget = { max_inflight = 8, max_wasted_cost = 1.0 },
}
