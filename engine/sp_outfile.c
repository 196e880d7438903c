/*
 * sp_outfile: record files written in batches (sp_outfile.h).
 */
#include "sp_outfile.h"
#include "sp_jsonenc.h"
#include <errno.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>

/* Lines are written whole into this much buffer, which stdio writes out
   when it is full: 256 KB is ~200 one-hop records (a write(2) each before),
   and what a killed run can lose beyond the records of its last drain. */
#define SP_OUTFILE_MAX_BUF (64u << 20)

static void outfiles_cancel(sp_ctx *ctx) {
  /* before lua_close closes the files: write what is buffered, then no
     drain may touch them again */
  sp_outfile_flush_all(ctx);
  sp_outfiles *o = ctx->outfiles;
  for (int i = 0; i < o->n; i++) o->v[i].f = NULL;
  o->live = 0;
}

static void outfiles_release(sp_ctx *ctx) {
  sp_outfiles *o = ctx->outfiles;
  if (!o) return;
  for (int i = 0; i < o->n; i++) free(o->v[i].buf);
  free(o->v);
  free(o);
  ctx->outfiles = NULL;
}

static const sp_owner outfiles_owner = { outfiles_cancel, NULL, NULL, outfiles_release };

static sp_outfile *find(sp_ctx *ctx, FILE *f) {
  sp_outfiles *o = ctx ? ctx->outfiles : NULL;
  if (!o || !f) return NULL;
  for (int i = 0; i < o->n; i++)
    if (o->v[i].f == f) return &o->v[i];
  return NULL;
}

static void put_reason(char *err, size_t errlen, int e) {
  if (err && errlen) snprintf(err, errlen, "%s", e ? strerror(e) : "write error");
}

int sp_outfile_write(void *file, const char *data, double len, int batched, char *err, size_t errlen) {
  if (!file || !data || !(len >= 0)) {
    if (err && errlen) snprintf(err, errlen, "attempt to use a closed file");
    return -1;
  }
  int e = sp_jsonenc_write_line_to(file, data, (size_t)len, batched);
  if (e == 0) return 0;
  put_reason(err, errlen, e > 0 ? e : 0);
  return -1;
}

int sp_outfile_add(sp_ctx *ctx, void *file, double bufsize, char *err, size_t errlen) {
  FILE *f = file;
  if (!ctx || !f || !(bufsize >= 1024) || bufsize > SP_OUTFILE_MAX_BUF) {
    snprintf(err, errlen, "EINVAL: outfile: a file and a buffer of 1 KB to 64 MB");
    return -1;
  }
  if (ctx->stopping) {
    snprintf(err, errlen, "ECANCELED: outfile: the engine is shutting down");
    return -1;
  }
  if (find(ctx, f)) return 0;
  if (!ctx->outfiles) {
    ctx->outfiles = calloc(1, sizeof *ctx->outfiles);
    if (!ctx->outfiles) goto oom;
    sp_ctx_own(ctx, SP_OWN_OUTFILES, &outfiles_owner);
  }
  sp_outfiles *o = ctx->outfiles;
  if (o->n == o->cap) {
    int cap = o->cap ? o->cap * 2 : 4;
    sp_outfile *v = realloc(o->v, (size_t)cap * sizeof *v);
    if (!v) goto oom;
    o->v = v;
    o->cap = cap;
  }
  size_t size = (size_t)bufsize;
  char *buf = malloc(size);
  if (!buf) goto oom;
  /* (setvbuf with a NULL buffer keeps glibc's 4 KB: the buffer is ours) */
  if (setvbuf(f, buf, _IOFBF, size) != 0) {
    free(buf);
    snprintf(err, errlen, "EINVAL: outfile: the file was read or written already");
    return -1;
  }
  o->v[o->n++] = (sp_outfile){ .f = f, .buf = buf, .err = 0 };
  o->live++;
  return 0;
oom:
  snprintf(err, errlen, "ENOMEM: outfile: out of memory");
  return -1;
}

void sp_outfile_tick(sp_ctx *ctx) {
  sp_outfiles *o = ctx->outfiles;
  if (o && o->live > 0 && uv_hrtime() - o->flushed_at >= SP_OUTFILE_DELAY_NS) sp_outfile_flush_all(ctx);
}

void sp_outfile_flush_all(sp_ctx *ctx) {
  sp_outfiles *o = ctx->outfiles;
  if (!o || o->live == 0) return;
  o->flushed_at = uv_hrtime();
  for (int i = 0; i < o->n; i++) {
    sp_outfile *x = &o->v[i];
    if (!x->f || x->err) continue;
    errno = 0;
    if (fflush(x->f) != 0) x->err = errno ? errno : EIO;
  }
}

int sp_outfile_check(sp_ctx *ctx, void *file, char *err, size_t errlen) {
  sp_outfile *x = find(ctx, file);
  if (!x || !x->err) return 0;
  put_reason(err, errlen, x->err);
  return 1;
}

int sp_outfile_remove(sp_ctx *ctx, void *file, int discard, char *err, size_t errlen) {
  sp_outfile *x = find(ctx, file);
  if (!x) return 0;
  int e = x->err;
  if (discard) {
    __fpurge(x->f);   /* a retried flush at close would write past the cut */
    e = 0;
  } else if (!e) {
    errno = 0;
    if (fflush(x->f) != 0) e = errno ? errno : EIO;
  }
  x->f = NULL;
  ctx->outfiles->live--;
  if (!e) return 0;
  __fpurge(file);
  put_reason(err, errlen, e);
  return -1;
}
