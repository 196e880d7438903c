/*
 * sp_outfile: record files written in batches. A run's --out file (a
 * regular file opened by Lua's io library) gets a large stdio buffer the
 * context owns, and the scheduler flushes it at the end of every drain of
 * the ready queue (before the loop waits for anything) and, inside a drain
 * that keeps the CPU busy, once its last flush is SP_OUTFILE_DELAY_NS old
 * (sp_outfile_tick). One write(2) per record was 14 % of the
 * CPU of a one-hop query (bench/README.md, the user's path).
 *
 * The buffers outlive the files: Lua may close a file (fclose flushes it
 * into the buffer's last bytes) at any time after sp_outfile_remove, and
 * lua_close closes the ones a failed run left open; the buffers are freed
 * with the context, after that.
 */
#ifndef SP_OUTFILE_H
#define SP_OUTFILE_H
#include "sp_ctx.h"
#include <stdio.h>

typedef struct sp_outfile {
  FILE *f;                 /* the file, NULL once removed */
  char *buf;               /* its stdio buffer (ours until the context ends) */
  int err;                 /* errno of the first failed flush, 0 none */
} sp_outfile;

typedef struct sp_outfiles {
  sp_outfile *v;           /* every file registered, removed ones too (their buffers) */
  int n, cap;              /* used and allocated entries */
  int live;                /* entries whose f is set */
  uint64_t flushed_at;     /* uv_hrtime() of the last flush_all */
} sp_outfiles;

/* Lines wait at most this long in a drain that keeps the CPU busy (an
   agent computing without waiting): sp_outfile_tick. */
#define SP_OUTFILE_DELAY_NS 100000000ull

/* Flush every registered file (the end of a drain); a failure is kept for
   sp_outfile_check. */
void sp_outfile_flush_all(sp_ctx *ctx);
/* Within a drain, every few hundred runnables: flush_all when the last
   one is SP_OUTFILE_DELAY_NS old. */
void sp_outfile_tick(sp_ctx *ctx);

#endif
