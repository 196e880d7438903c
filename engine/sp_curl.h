/* sp_curl: libcurl, mapped on first use. libcurl links some thirty
 * libraries (TLS, Kerberos, LDAP, SSH, ...) whose loading and relocation
 * took ~5 ms of every start, most of a start for a run that makes no HTTP
 * transfer. The engine's calls go through this table, filled by dlopen and
 * dlsym of the libcurl it was built against (SP_CURL_SONAME, or the file
 * the environment's SPECULA_LIBCURL names); the types
 * still come from <curl/curl.h>, so a call that does not match libcurl's
 * prototype does not compile. */
#ifndef SP_CURL_H
#define SP_CURL_H
#include <curl/curl.h>
#include <stddef.h>

/* X(field, libcurl symbol): every libcurl function the engine calls. */
#define SP_CURL_FUNCS(X)                                 \
  X(global_init, curl_global_init)                       \
  X(global_cleanup, curl_global_cleanup)                 \
  X(version, curl_version)                               \
  X(free, curl_free)                                     \
  X(easy_init, curl_easy_init)                           \
  X(easy_cleanup, curl_easy_cleanup)                     \
  X(easy_setopt, curl_easy_setopt)                       \
  X(easy_getinfo, curl_easy_getinfo)                     \
  X(easy_pause, curl_easy_pause)                         \
  X(easy_strerror, curl_easy_strerror)                   \
  X(easy_escape, curl_easy_escape)                       \
  X(easy_unescape, curl_easy_unescape)                   \
  X(slist_append, curl_slist_append)                     \
  X(slist_free_all, curl_slist_free_all)                 \
  X(multi_init, curl_multi_init)                         \
  X(multi_cleanup, curl_multi_cleanup)                   \
  X(multi_setopt, curl_multi_setopt)                     \
  X(multi_add_handle, curl_multi_add_handle)             \
  X(multi_remove_handle, curl_multi_remove_handle)       \
  X(multi_socket_action, curl_multi_socket_action)       \
  X(multi_info_read, curl_multi_info_read)               \
  X(multi_strerror, curl_multi_strerror)                 \
  X(url, curl_url)                                       \
  X(url_cleanup, curl_url_cleanup)                       \
  X(url_set, curl_url_set)                               \
  X(url_get, curl_url_get)                               \
  X(url_strerror, curl_url_strerror)

/* The loaded functions, one pointer each, typed from libcurl's own
   prototypes (__typeof__ of the declaration, not of a wrapping macro). */
typedef struct sp_curl_api {
#define SP_CURL_FIELD(field, sym) __typeof__(sym) *field; /* sym */
  SP_CURL_FUNCS(SP_CURL_FIELD)
#undef SP_CURL_FIELD
} sp_curl_api;

/* libcurl's functions, loading it (and running curl_global_init) the first
   time; later calls return the same table. NULL when it cannot be loaded,
   with "libcurl: <why>" in err (the dynamic linker's message names the
   file). Safe from any thread. */
const sp_curl_api *sp_curl_load(char *err, size_t errlen);
/* The table, for code that runs only after sp_curl_load succeeded (a
   transfer's callbacks and clean-up: the HTTP driver exists only then). */
const sp_curl_api *sp_curl(void);
/* curl_global_cleanup when libcurl was loaded (the end of main). The
   library stays mapped: its atexit handlers and OpenSSL's may still run. */
void sp_curl_cleanup(void);

#endif
