/*
 * sp_http: libcurl's multi interface driven by the libuv loop
 * (curl_multi_socket_action, one uv_poll_t per socket, one uv_timer_t).
 *
 * libcurl callbacks only record what happened (bytes, headers, socket
 * interest); every libcurl call and every wake-up of a task happens after
 * curl_multi_socket_action() has returned.
 */
#ifndef SP_HTTP_H
#define SP_HTTP_H
#include <curl/curl.h>
#include "sp_sched.h"
#include "sp_buf.h"

/* Notification hook for C users (tests, benches): called from the loop when
   a request has news (headers, data, completion). */
typedef void (*sp_http_notify_fn)(sp_http_req *r, void *ud);

typedef struct sp_http sp_http;
typedef struct sp_poll sp_poll;

/* The curl multi driver's state (ctx->http), made by the first transfer;
   at shutdown every transfer is aborted and the handles closed. */
struct sp_http {
  sp_ctx *ctx;             /* owning context */
  CURLM *multi;            /* the multi handle, one per context */
  uv_timer_t timer;        /* libcurl's timeout */
  sp_poll **polls;         /* fd -> poll handle (no curl_multi_assign in callbacks) */
  size_t npolls;           /* length of polls */
  sp_http_req *dirty;      /* requests with undelivered events */
  int closing;             /* shutdown started */
};
/* C-level start: like sp_http_start but with a notify hook instead of a task. */
sp_http_req *sp_http_start_cb(sp_ctx *ctx, const sp_http_opts *o, sp_http_notify_fn fn,
                              void *ud, char *err, size_t errlen);

#endif
