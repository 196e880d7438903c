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

sp_http *sp_http_new(sp_ctx *ctx);
void sp_http_free_all(sp_http *h);       /* shutdown: abort everything, close handles */
/* C-level start: like sp_http_start but with a notify hook instead of a task. */
sp_http_req *sp_http_start_cb(sp_ctx *ctx, const sp_http_opts *o, sp_http_notify_fn fn,
                              void *ud, char *err, size_t errlen);

#endif
