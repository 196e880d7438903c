/* C test of record files written in batches (engine/sp_outfile.c): lines
 * stay in the file's buffer until the end of a drain of the ready queue
 * (or until the buffer fills), a flush that fails is reported once asked
 * for and its bytes can be dropped so closing the file does not retry
 * them, and a file still registered when the engine shuts down is written
 * before the Lua state would close it. */
#include "check.h"
#include "sp_engine.h"
#include "sp_outfile.h"
#include "sp_sched.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static long size_of(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void put_lines(FILE *f, int n, int len) {
  char line[512];
  memset(line, 'x', (size_t)len - 1);
  line[len - 1] = '\n';
  for (int i = 0; i < n; i++) fwrite(line, 1, (size_t)len, f);
}

static void batches_and_drains(void) {
  sp_ctx ctx;
  char err[256];
  CHECK(sp_engine_init(&ctx) == 0, "engine init");
  char path[] = "/tmp/sp_outfile_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  close(fd);
  FILE *f = fopen(path, "a");
  CHECK(sp_outfile_add(&ctx, f, 4096, err, sizeof err) == 0, "add: %s", err);
  CHECK(sp_outfile_add(&ctx, f, 4096, err, sizeof err) == 0, "a second add of the same file is a no-op");
  put_lines(f, 3, 100);
  CHECK(size_of(path) == 0, "lines wait in the buffer: %ld bytes on disk", size_of(path));
  sp_sched_drain(&ctx);
  CHECK(size_of(path) == 300, "the end of a drain writes them: %ld", size_of(path));
  put_lines(f, 50, 100);   /* more than the buffer: stdio writes as it fills */
  long mid = size_of(path);
  CHECK(mid > 300 && mid < 5300, "a full buffer is written at once: %ld", mid);
  CHECK(sp_outfile_check(&ctx, f, err, sizeof err) == 0, "no failure");
  CHECK(sp_outfile_remove(&ctx, f, 0, err, sizeof err) == 0, "remove: %s", err);
  CHECK(size_of(path) == 5300, "remove writes the rest: %ld", size_of(path));
  put_lines(f, 1, 100);
  sp_sched_drain(&ctx);
  CHECK(size_of(path) == 5300, "a removed file is not flushed by the engine: %ld", size_of(path));
  /* inside a long drain: the tick flushes once the last flush is 100 ms old */
  FILE *h = fopen(path, "a");
  CHECK(sp_outfile_add(&ctx, h, 4096, err, sizeof err) == 0, "add: %s", err);
  sp_outfile_flush_all(&ctx);
  put_lines(h, 1, 100);
  sp_outfile_tick(&ctx);
  CHECK(size_of(path) == 5300, "a fresh flush: the tick waits: %ld", size_of(path));
  usleep(120 * 1000);
  sp_outfile_tick(&ctx);
  CHECK(size_of(path) == 5400, "100 ms later the tick writes the line: %ld", size_of(path));
  CHECK(sp_outfile_remove(&ctx, h, 0, err, sizeof err) == 0, "remove: %s", err);
  CHECK(fclose(h) == 0, "fclose");
  CHECK(fclose(f) == 0, "fclose");
  CHECK(size_of(path) == 5500, "its own close writes the line: %ld", size_of(path));

  /* a full device: the failed flush is kept for the writer; dropped, its
     bytes are not written again by fclose */
  FILE *full = fopen("/dev/full", "w");
  if (full) {
    CHECK(sp_outfile_add(&ctx, full, 4096, err, sizeof err) == 0, "add /dev/full: %s", err);
    put_lines(full, 2, 100);
    CHECK(sp_outfile_check(&ctx, full, err, sizeof err) == 0, "nothing failed yet");
    sp_sched_drain(&ctx);
    err[0] = '\0';
    CHECK(sp_outfile_check(&ctx, full, err, sizeof err) == 1, "the drain's flush failed");
    CHECK(strcmp(err, strerror(ENOSPC)) == 0, "the OS's reason: '%s'", err);
    CHECK(sp_outfile_remove(&ctx, full, 1, err, sizeof err) == 0, "discard");
    CHECK(fclose(full) == 0, "nothing left to write at close");
    /* and without discard, remove reports the failure */
    full = fopen("/dev/full", "w");
    CHECK(sp_outfile_add(&ctx, full, 4096, err, sizeof err) == 0, "add /dev/full again");
    put_lines(full, 1, 100);
    err[0] = '\0';
    CHECK(sp_outfile_remove(&ctx, full, 0, err, sizeof err) == -1, "remove: the flush fails");
    CHECK(strcmp(err, strerror(ENOSPC)) == 0, "its reason: '%s'", err);
    CHECK(fclose(full) == 0, "its bytes were dropped");
  }
  CHECK(sp_outfile_add(&ctx, NULL, 4096, err, sizeof err) == -1 && strncmp(err, "EINVAL", 6) == 0,
        "no file: %s", err);

  /* registered at shutdown: written before Lua would close it */
  FILE *g = fopen(path, "w");
  CHECK(sp_outfile_add(&ctx, g, 1 << 16, err, sizeof err) == 0, "add: %s", err);
  put_lines(g, 4, 50);
  CHECK(size_of(path) == 0, "buffered: %ld", size_of(path));
  CHECK(sp_ctx_shutdown(&ctx) == 0, "shutdown");
  CHECK(size_of(path) == 200, "the shutdown wrote it: %ld", size_of(path));
  fclose(g);
  unlink(path);
}

int main(void) {
  batches_and_drains();
  printf("test_outfile: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
