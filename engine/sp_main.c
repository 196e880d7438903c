/* specula: command-line entry. --version is answered here; every command,
   its usage and --help come from the one command table in Lua
   (lua/specula/cmd/init.lua). */
#include "sp_engine.h"
#include "sp_host.h"
#include "sp_curl.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

/* Thousands of concurrent transfers need thousands of sockets: lift the
   soft descriptor limit to the hard one. */
static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  raise_nofile();
  const char *cmd = argc >= 2 ? argv[1] : "";
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "-v") || !strcmp(cmd, "version")) {
    /* (the one command that loads libcurl without a transfer) */
    char why[300];
    const sp_curl_api *cu = sp_curl_load(why, sizeof why);
    printf("specula %s (LuaJIT, libuv %s, %s)\n", sp_version(), uv_version_string(),
           cu ? cu->version() : why);
    return 0;
  }
  sp_ctx ctx;
  if (sp_engine_init(&ctx) != 0) {
    fprintf(stderr, "specula: cannot initialise the event loop\n");
    return 1;
  }
  char err[512];
  int rc;
  if (sp_host_init(&ctx, argv[0], err, sizeof err) != 0) {
    fprintf(stderr, "specula: %s\n", err);
    rc = 1;
  } else {
    rc = sp_host_run(&ctx, argc - 1, argv + 1);
  }
  /* Output that never reached its file (full disk, closed pipe) must not
     pass for success; an error already reported keeps its own status. */
  errno = 0;
  if ((fflush(stdout) != 0 || ferror(stdout)) && rc == 0) {
    fprintf(stderr, "specula: cannot write to stdout: %s\n", errno ? strerror(errno) : "write error");
    rc = 1;
  }
  if (sp_ctx_shutdown(&ctx) != 0 && rc == 0) rc = 1;
  sp_curl_cleanup();
  return rc;
}
