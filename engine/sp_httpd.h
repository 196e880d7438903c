/*
 * sp_httpd: an HTTP/1.1 server on the loop (the MCP Streamable HTTP server
 * side, lua/specula/mcp/serve_http.lua, is its user). What Lua calls is in
 * sp_api.h; this header adds the context's bookkeeping.
 *
 * Lifetimes: a listener is freed once Lua has closed it, its TCP handle is
 * closed and every connection is gone; a connection once its handle is
 * closed and no request or write refers to it; a request when Lua frees it
 * (queued ones the listener still holds are freed with it). Every handle is
 * freed by its close callback, never before.
 */
#ifndef SP_HTTPD_H
#define SP_HTTPD_H
#include "sp_sched.h"
#include "sp_buf.h"

/* The servers' state (ctx->httpd), made with the first listener; at
   shutdown every listener and connection is closed, then freed. */
typedef struct sp_httpds {
  sp_httpd *live;             /* listeners not yet freed */
} sp_httpds;

#endif
