/* specula: command-line entry. Subcommands that need no Lua (theory,
   replay) run in C; everything else goes to lua/specula/cli.lua. */
#include "sp_ctx.h"
#include "sp_host.h"
#include "sp_cmd.h"
#include <curl/curl.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

static void usage(FILE *f) {
  fprintf(f,
    "usage: specula <command> [options]\n"
    "\n"
    "commands:\n"
    "  run SCRIPT.lua [ARGS...]   run an agent over queries, or a plain Lua program\n"
    "      agent options: --query TEXT | --input FILE.jsonl, --mode spechop|window|sequential,\n"
    "      --k N|inf|auto, --m N, --seed N, --concurrency N, --out FILE.jsonl, --trace FILE.json,\n"
    "      --set key=value, --policy FILE, --shard i/n, --compare LIST, --progress, --quiet\n"
    "  theory --p P --alpha A --beta B [--k K] [--nu V] [--eps E] [--json]\n"
    "                             latency theory (SpecHop Cor. 1, 3, Thm. 4, Cor. 5)\n"
    "  replay TRACE [--k LIST] [--mode M] [--config NAME] [--json]\n"
    "                             re-schedule recorded stage times (no real waiting)\n"
    "  compare RESULTS.jsonl... [--baseline NAME] [--summary FILE]\n"
    "                             the --compare table (with paired differences) from results files\n"
    "  merge SHARD.jsonl... -o ALL.jsonl [--input FILE] [--summary FILE]\n"
    "                             check that shards partition the input and write their union\n"
    "  repair RESULTS.jsonl       keep a damaged results file's complete records, drop the rest\n"
    "  report RESULTS.jsonl -o report.html\n"
    "                             self-contained HTML report with SVG figures\n"
    "  cassette ls|show|stats DIR\n"
    "                             the exchanges a run recorded with --record DIR\n"
    "  verifiers CASSETTE [--verifier NAME_OR_FILE]... [--k K] [--json]\n"
    "                             judge every recorded (candidate, observation) pair with each verifier\n"
    "  predictors CASSETTE|RESULTS.jsonl... [--predictor NAME_OR_FILE]... [--json]\n"
    "                             top-1/top-3 hit rates of action predictors on committed tool calls\n"
    "  bench [NAME...]            run the benchmarks under bench/\n"
    "  --version, --help\n"
    "\n"
    "Every command but theory and replay takes --secret-env NAME (repeatable): the value of\n"
    "$NAME never shows in any output (records, traces, cassettes, reports, messages).\n");
}

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
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "-v") || !strcmp(cmd, "version")) {
    printf("specula %s (LuaJIT, libuv %s, %s)\n", sp_version(), uv_version_string(),
           curl_version());
    return 0;
  }
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(cmd, "theory")) return sp_theory_main(argc - 1, argv + 1);
  if (!strcmp(cmd, "replay")) return sp_replay_main(argc - 1, argv + 1);
  if (strcmp(cmd, "run") && strcmp(cmd, "report") && strcmp(cmd, "bench") && strcmp(cmd, "compare") &&
      strcmp(cmd, "merge") && strcmp(cmd, "cassette") && strcmp(cmd, "verifiers") &&
      strcmp(cmd, "predictors") && strcmp(cmd, "repair")) {
    fprintf(stderr, "specula: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
  }
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
    fprintf(stderr, "specula: curl_global_init failed\n");
    return 1;
  }
  sp_ctx ctx;
  if (sp_ctx_init(&ctx) != 0) {
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
  curl_global_cleanup();
  return rc;
}
