/* C test of the HTTP glue (libcurl multi driven by libuv) without Lua: a
 * loopback test server, requests with C notify hooks, errors, an abort
 * mid-transfer, and a clean shutdown (uv_loop_close succeeds). */
#include "sp_engine.h"
#include "sp_http.h"
#include "sp_curl.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

typedef struct probe {
  int events;      /* notifications received */
  int done;        /* the request finished (DONE or ERROR) */
} probe;

static void on_news(sp_http_req *r, void *ud) {
  probe *p = ud;
  p->events++;
  if (sp_http_state(r) >= SP_HTTP_DONE) p->done = 1;
}

static void run_until(sp_ctx *ctx, probe *p) {
  for (int i = 0; i < 100000 && !p->done; i++) uv_run(&ctx->loop, UV_RUN_ONCE);
}

static sp_http_req *get(sp_ctx *ctx, const char *url, probe *p, double max_body, int stream) {
  sp_http_opts o;
  memset(&o, 0, sizeof o);
  o.method = "GET";
  o.url = url;
  o.timeout_ms = 5000;
  o.max_body_bytes = max_body;
  o.stream = stream;
  char err[256];
  sp_http_req *r = sp_http_start_cb(ctx, &o, on_news, p, err, sizeof err);
  CHECK(r != NULL, "start %s: %s", url, err);
  return r;
}

int main(void) {
  const char *server = getenv("SPECULA_TESTSERVER");
  if (!server) server = "./specula-testserver";
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s", server);
  FILE *srv = popen(cmd, "r");
  int port = 0, pid = 0;
  if (!srv || fscanf(srv, "PORT %d PID %d", &port, &pid) != 2) {
    fprintf(stderr, "cannot start the test server (%s)\n", server);
    return 1;
  }
  char base[64];
  snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
  char url[256];

  sp_ctx ctx;
  CHECK(sp_engine_init(&ctx) == 0, "ctx init");

  /* a plain GET */
  probe p = {0};
  snprintf(url, sizeof url, "%s/hello", base);
  sp_http_req *r = get(&ctx, url, &p, 0, 0);
  run_until(&ctx, &p);
  size_t len = 0;
  const char *body = sp_http_body(r, &len);
  CHECK(sp_http_state(r) == SP_HTTP_DONE, "state %d (%s)", sp_http_state(r), sp_http_error(r));
  CHECK(sp_http_status(r) == 200, "status %ld", sp_http_status(r));
  CHECK(len == 5 && memcmp(body, "hello", 5) == 0, "body '%.*s'", (int)len, body);
  const char *hdr = sp_http_headers(r, &len);
  CHECK(strstr(hdr, "Content-Length: 5") != NULL, "headers: %s", hdr);
  sp_http_free(r);

  /* connection refused: an error value with a code and the endpoint */
  p = (probe){0};
  r = get(&ctx, "http://127.0.0.1:1/x?token=SECRET", &p, 0, 0);
  run_until(&ctx, &p);
  CHECK(sp_http_state(r) == SP_HTTP_ERROR, "refused state %d", sp_http_state(r));
  CHECK(strncmp(sp_http_error(r), "ECONNREFUSED: GET http://127.0.0.1:1/x:", 39) == 0, "error '%s'",
        sp_http_error(r));
  CHECK(strstr(sp_http_error(r), "SECRET") == NULL, "the query string leaked: %s", sp_http_error(r));
  sp_http_free(r);

  /* a body over max_body_bytes */
  p = (probe){0};
  snprintf(url, sizeof url, "%s/big/50000?chunked=1", base);
  r = get(&ctx, url, &p, 1000, 0);
  run_until(&ctx, &p);
  CHECK(strncmp(sp_http_error(r), "EBODYTOOLARGE", 13) == 0, "error '%s'", sp_http_error(r));
  sp_http_free(r);

  /* streamed chunks arrive in order, and several notifications come */
  p = (probe){0};
  snprintf(url, sizeof url, "%s/drip?bytes=4&interval=20", base);
  r = get(&ctx, url, &p, 0, 1);
  run_until(&ctx, &p);
  body = sp_http_body(r, &len);
  CHECK(sp_http_state(r) == SP_HTTP_DONE && len == 4 && memcmp(body, "xxxx", 4) == 0, "drip '%.*s'",
        (int)len, body);
  CHECK(p.events >= 3, "only %d notifications for a drip", p.events);
  sp_http_free(r);

  /* abort mid-transfer: the easy handle leaves the multi at once */
  p = (probe){0};
  snprintf(url, sizeof url, "%s/stall", base);
  r = get(&ctx, url, &p, 0, 1);
  for (int i = 0; i < 50; i++) uv_run(&ctx.loop, UV_RUN_NOWAIT);
  CHECK(ctx.counts.transfers == 1, "transfers before abort %d", ctx.counts.transfers);
  sp_http_abort(r);
  CHECK(ctx.counts.transfers == 0, "transfers after abort %d", ctx.counts.transfers);
  CHECK(sp_http_state(r) == SP_HTTP_CANCELLED, "state after abort %d", sp_http_state(r));
  sp_http_free(r);
  CHECK(ctx.counts.requests == 0, "requests left %d", ctx.counts.requests);

  /* a hundred concurrent requests */
  probe many[100];
  sp_http_req *rs[100];
  snprintf(url, sizeof url, "%s/delay/20", base);
  for (int i = 0; i < 100; i++) {
    many[i] = (probe){0};
    rs[i] = get(&ctx, url, &many[i], 0, 0);
  }
  for (int guard = 0; guard < 100000; guard++) {
    int all = 1;
    for (int i = 0; i < 100; i++) all &= many[i].done;
    if (all) break;
    uv_run(&ctx.loop, UV_RUN_ONCE);
  }
  int ok = 0;
  for (int i = 0; i < 100; i++) {
    if (sp_http_state(rs[i]) == SP_HTTP_DONE && sp_http_status(rs[i]) == 200) ok++;
    sp_http_free(rs[i]);
  }
  CHECK(ok == 100, "%d of 100 concurrent requests succeeded", ok);

  int rc = sp_ctx_shutdown(&ctx);
  CHECK(rc == 0, "uv_loop_close failed: %d", rc);
  sp_curl_cleanup();
  kill(pid, SIGTERM);
  pclose(srv);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else printf("test_http: all checks passed\n");
  return failures ? 1 : 0;
}
