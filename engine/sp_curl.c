/* sp_curl: libcurl, loaded on first use (see sp_curl.h for why). */
#include "sp_curl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SP_CURL_SONAME
#define SP_CURL_SONAME "libcurl.so.4"
#endif

/* The one process-wide state in the engine: a shared library is mapped
   once per process whatever the number of contexts, so its table is too.
   Written once under pthread_once, read-only after. */
static struct {
  pthread_once_t once; /* the load runs once */
  int ok;              /* the table is filled and curl_global_init succeeded */
  int cleaned;         /* sp_curl_cleanup ran */
  char why[256];       /* why the load failed */
  sp_curl_api api;     /* the functions */
} lib = { PTHREAD_ONCE_INIT, 0, 0, "", { 0 } };

static void load_once(void) {
  /* SPECULA_LIBCURL: another build of libcurl (a path or a SONAME) */
  const char *name = getenv("SPECULA_LIBCURL");
  if (!name || !*name) name = SP_CURL_SONAME;
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    /* (dlerror's text starts with the file it tried) */
    const char *e = dlerror();
    snprintf(lib.why, sizeof lib.why, "cannot load %s", e ? e : name);
    return;
  }
  /* (a function pointer read through void *: POSIX's own dlsym idiom) */
#define SP_CURL_RESOLVE(field, sym)                                                         \
  *(void **)(&lib.api.field) = dlsym(h, #sym);                                              \
  if (!lib.api.field) {                                                                     \
    snprintf(lib.why, sizeof lib.why, "%s has no %s (not libcurl, or older than specula's build)", \
             name, #sym);                                                                   \
    return;                                                                                 \
  }
  SP_CURL_FUNCS(SP_CURL_RESOLVE)
#undef SP_CURL_RESOLVE
  if (lib.api.global_init(CURL_GLOBAL_DEFAULT) != 0) {
    snprintf(lib.why, sizeof lib.why, "curl_global_init failed");
    return;
  }
  lib.ok = 1;
}

const sp_curl_api *sp_curl_load(char *err, size_t errlen) {
  pthread_once(&lib.once, load_once);
  if (lib.ok) return &lib.api;
  if (err && errlen) snprintf(err, errlen, "libcurl: %s", lib.why);
  return NULL;
}

const sp_curl_api *sp_curl(void) { return &lib.api; }

void sp_curl_cleanup(void) {
  if (lib.ok && !lib.cleaned) {
    lib.cleaned = 1;
    lib.api.global_cleanup();
  }
}
