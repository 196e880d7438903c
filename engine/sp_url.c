/* sp_url: percent-encoding and URL parsing from libcurl (curl_easy_escape,
 * curl_easy_unescape, the curl_url API); nothing is decoded by hand here.
 * The declarations are in sp_api.h. */
#include "sp_url.h"

#include "sp_curl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int url_err(char *err, size_t errlen, const char *what) {
  if (err && errlen) snprintf(err, errlen, "url: %s", what);
  return -1;
}

/* Escapes the len bytes at s (no byte of keep among them) onto out + *o. */
static int escape_run(const sp_curl_api *CU, const char *s, size_t len, char *out, size_t outcap,
                      size_t *o, char *err, size_t errlen) {
  while (len > 0) {
    /* curl_easy_escape takes an int length */
    int n = len > 0x10000000 ? 0x10000000 : (int)len;
    char *e = CU->easy_escape(NULL, s, n);
    size_t el;
    if (!e) return url_err(err, errlen, "escape: out of memory");
    el = strlen(e);
    if (*o + el + 1 > outcap) {
      CU->free(e);
      return url_err(err, errlen, "escape: output buffer too small");
    }
    memcpy(out + *o, e, el);
    *o += el;
    CU->free(e);
    s += n;
    len -= (size_t)n;
  }
  return 0;
}

int sp_url_escape(const char *s, size_t len, const char *keep, char *out, size_t outcap, char *err,
                  size_t errlen) {
  size_t o = 0, from = 0;
  const sp_curl_api *CU = sp_curl_load(err, errlen);
  if (!CU) return -1;
  if (outcap < 1) return url_err(err, errlen, "escape: output buffer too small");
  if (len > 0x2aaaaaaa) return url_err(err, errlen, "escape: input too long");
  for (size_t i = 0; i <= len; i++) {
    if (i < len && !(keep && *keep && s[i] != 0 && strchr(keep, s[i]))) continue;
    /* the run before a kept byte (or the end) goes through libcurl */
    if (i > from && escape_run(CU, s + from, i - from, out, outcap, &o, err, errlen) != 0) return -1;
    if (i < len) {
      if (o + 2 > outcap) return url_err(err, errlen, "escape: output buffer too small");
      out[o++] = s[i];
    }
    from = i + 1;
  }
  out[o] = 0;
  return (int)o;
}

int sp_url_unescape(const char *s, size_t len, int form, char *out, size_t outcap, char *err,
                    size_t errlen) {
  char *in, *d;
  int dl = 0;
  const sp_curl_api *CU = sp_curl_load(err, errlen);
  if (!CU) return -1;
  if (len > 0x7ffffffe) return url_err(err, errlen, "unescape: input too long");
  if (outcap < len + 1) return url_err(err, errlen, "unescape: output buffer too small");
  if (len == 0) {
    out[0] = 0;
    return 0;
  }
  in = malloc(len);
  if (!in) return url_err(err, errlen, "unescape: out of memory");
  memcpy(in, s, len);
  /* a form's "+" is a space, and a "%2B" a plus: so "+" goes first */
  if (form)
    for (size_t i = 0; i < len; i++)
      if (in[i] == '+') in[i] = ' ';
  d = CU->easy_unescape(NULL, in, (int)len, &dl);
  free(in);
  if (!d) return url_err(err, errlen, "unescape: out of memory");
  memcpy(out, d, (size_t)dl);
  out[dl] = 0;
  CU->free(d);
  return dl;
}

static const CURLUPart PARTS[SP_URL_NPARTS] = {CURLUPART_SCHEME, CURLUPART_HOST, CURLUPART_PORT,
                                               CURLUPART_PATH, CURLUPART_QUERY};

int sp_url_parse(const char *url, size_t len, char *out, size_t outcap, long *parts, char *err,
                 size_t errlen) {
  CURLU *h;
  CURLUcode rc;
  char *z;
  size_t o = 0;
  int ret = 0;
  const sp_curl_api *CU = sp_curl_load(err, errlen);
  if (!CU) return -1;
  if (!url || memchr(url, 0, len)) return url_err(err, errlen, "a NUL byte in the URL");
  z = malloc(len + 1);
  if (!z) return url_err(err, errlen, "out of memory");
  memcpy(z, url, len);
  z[len] = 0;
  h = CU->url();
  if (!h) {
    free(z);
    return url_err(err, errlen, "out of memory");
  }
  /* any scheme (an authorization server's URL is https, a test's http),
     the path as written, spaces as the hand parser took them */
  rc = CU->url_set(h, CURLUPART_URL, z, CURLU_NON_SUPPORT_SCHEME | CURLU_PATH_AS_IS | CURLU_ALLOW_SPACE);
  free(z);
  if (rc != CURLUE_OK) {
    ret = url_err(err, errlen, CU->url_strerror(rc));
    goto done;
  }
  for (int i = 0; i < SP_URL_NPARTS; i++) {
    char *v = NULL;
    size_t vl;
    rc = CU->url_get(h, PARTS[i], &v, 0);
    if (rc == CURLUE_NO_PORT || rc == CURLUE_NO_QUERY) {
      parts[2 * i] = (long)o;
      parts[2 * i + 1] = -1;
      continue;
    }
    if (rc != CURLUE_OK) {
      ret = url_err(err, errlen, CU->url_strerror(rc));
      goto done;
    }
    vl = strlen(v);
    if (o + vl > outcap) {
      CU->free(v);
      ret = url_err(err, errlen, "output buffer too small");
      goto done;
    }
    memcpy(out + o, v, vl);
    parts[2 * i] = (long)o;
    parts[2 * i + 1] = (long)vl;
    o += vl;
    CU->free(v);
  }
done:
  CU->url_cleanup(h);
  return ret;
}
