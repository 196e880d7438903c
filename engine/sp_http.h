/*
 * sp_http: libcurl's multi interface driven by the libuv loop
 * (curl_multi_socket_action, one uv_poll_t per socket, one uv_timer_t per
 * multi handle: "lane").
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
typedef struct sp_http_lane sp_http_lane;
typedef struct sp_poll sp_poll;

/* Lanes (see sp_http.c): a lane takes about SP_HTTP_LANE_CAP connections per
   host before the next one opens; at most SP_HTTP_LANES_MAX lanes. By
   default 1,024 connections per host in all, so 16 lanes. */
#define SP_HTTP_LANES_MAX 128
#define SP_HTTP_LANE_CAP 64
#define SP_HTTP_HOST_CONNS 1024

/* One multi handle with its own connection cache and libcurl timer. */
struct sp_http_lane {
  sp_http *http;           /* owner */
  CURLM *multi;            /* this lane's multi handle */
  uv_timer_t timer;        /* its libcurl timeout; the close callback frees the lane */
  int active;              /* transfers added to multi and not yet removed */
  int cap;                 /* transfers it takes before a new one tries the next lane */
};

/* The curl multi driver's state (ctx->http), made by the first transfer;
   at shutdown every transfer is aborted and the handles closed. */
struct sp_http {
  sp_ctx *ctx;             /* owning context */
  sp_http_lane *lanes[SP_HTTP_LANES_MAX]; /* made as load needs them, lane 0 first */
  int nlanes;              /* lanes made */
  int use;                 /* new transfers go to the first `use` lanes */
  int open_lanes;          /* lanes whose timer is not yet closed (h is freed at 0) */
  long host_limit;         /* connections per host in all lanes (0: none) */
  long total_limit;        /* connections to all hosts, all lanes together (0: none) */
  sp_poll **polls;         /* fd -> poll handle (no curl_multi_assign in callbacks) */
  size_t npolls;           /* length of polls */
  sp_http_req *dirty;      /* requests with undelivered events */
  int closing;             /* shutdown started */
};
/* C-level start: like sp_http_start but with a notify hook instead of a task. */
sp_http_req *sp_http_start_cb(sp_ctx *ctx, const sp_http_opts *o, sp_http_notify_fn fn,
                              void *ud, char *err, size_t errlen);

#endif
