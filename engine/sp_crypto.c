/* sp_crypto: digests, random bytes, signatures and the hex and Base64
 * encodings, all from OpenSSL's libcrypto. Declarations are in sp_api.h.
 *
 * SHA-256 goes through libcrypto's SHA256_CTX functions, not EVP: in
 * OpenSSL 3 the first EVP digest of a process sets up the provider
 * machinery and reads openssl.cnf, about 6 M instructions (2 ms) of every
 * start, while a plain run needs no other EVP function (HTTPS, HMAC and
 * signatures, which stay on EVP, set it up when they are first used). The
 * digests here name code and inputs (provenance, the bytecode cache, ids),
 * never a secret. Those functions are deprecated in OpenSSL 3.0, not
 * removed: the warning is silenced for this file only. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include "sp_crypto.h"

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/sha.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>

struct sp_sha256 {
  SHA256_CTX c;   /* the running digest */
};

/* Writes what failed and the library's first queued reason (never key
   bytes: libcrypto's reasons name operations, not data). */
static int fail(char *err, size_t errlen, const char *what) {
  unsigned long e = ERR_get_error();
  if (err && errlen) {
    if (e) {
      char why[200];
      ERR_error_string_n(e, why, sizeof why);
      snprintf(err, errlen, "%s: %s", what, why);
    } else {
      snprintf(err, errlen, "%s", what);
    }
  }
  ERR_clear_error();
  return -1;
}

void sp_crypto_sha256(const void *data, size_t len, unsigned char *out) {
  SHA256_CTX c;
  SHA256_Init(&c);
  SHA256_Update(&c, data, len);
  SHA256_Final(out, &c);
}

/* (a digester was an EVP algorithm fetched once and a context reset for
   every input; the SHA256_CTX functions need neither, and it stays for its
   callers as a handle that can fail to be made) */
struct sp_digester {
  SHA256_CTX c;    /* set up again for every input */
};

sp_digester *sp_crypto_digester_new(void) { return calloc(1, sizeof(sp_digester)); }

void sp_crypto_digester_free(sp_digester *d) { free(d); }

int sp_crypto_digester_sum(sp_digester *d, const void *data, size_t len, unsigned char *out) {
  if (!d || SHA256_Init(&d->c) != 1 || SHA256_Update(&d->c, data, len) != 1 || SHA256_Final(out, &d->c) != 1)
    return -1;
  return 0;
}

static void hex64(const unsigned char *h, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++) {
    out[2 * i] = digits[h[i] >> 4];
    out[2 * i + 1] = digits[h[i] & 15];
  }
  out[64] = '\0';
}

int sp_crypto_digester_hex(sp_digester *d, const void *data, size_t len, char *out) {
  unsigned char h[32];
  if (sp_crypto_digester_sum(d, data, len, h) != 0) return -1;
  hex64(h, out);
  return 0;
}

int sp_crypto_digester_hex_parts(sp_digester *d, const char *const *parts, const size_t *lens, int n, char *out) {
  unsigned char h[32];
  if (!d || n < 0 || (n > 0 && (!parts || !lens)) || SHA256_Init(&d->c) != 1) return -1;
  for (int i = 0; i < n; i++) {
    if (lens[i] && (!parts[i] || SHA256_Update(&d->c, parts[i], lens[i]) != 1)) return -1;
  }
  if (SHA256_Final(h, &d->c) != 1) return -1;
  hex64(h, out);
  return 0;
}

sp_sha256 *sp_crypto_sha256_new(void) {
  sp_sha256 *h = calloc(1, sizeof *h);
  if (!h) return NULL;
  if (SHA256_Init(&h->c) != 1) {
    free(h);
    return NULL;
  }
  return h;
}

void sp_crypto_sha256_add(sp_sha256 *h, const void *data, size_t len) {
  if (h && len) SHA256_Update(&h->c, data, len);
}

void sp_crypto_sha256_finish(sp_sha256 *h, unsigned char *out) {
  if (!h) return;
  SHA256_Final(out, &h->c);
  sp_crypto_sha256_free(h);
}

void sp_crypto_sha256_free(sp_sha256 *h) { free(h); }

void sp_crypto_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
                           unsigned char *out) {
  unsigned int n = 32;
  /* HMAC() takes an int key length; a longer key is hashed first as
     RFC 2104 says, which is what HMAC does itself past the block size. */
  unsigned char kh[32];
  if (keylen > (size_t)0x7fffffff) {
    sp_crypto_sha256(key, keylen, kh);
    key = kh;
    keylen = 32;
  }
  HMAC(EVP_sha256(), key, (int)keylen, data, len, out, &n);
}

int sp_crypto_random(unsigned char *out, size_t len, char *err, size_t errlen) {
  while (len > 0) {
    int n = len > 0x40000000 ? 0x40000000 : (int)len;
    if (RAND_bytes(out, n) != 1) return fail(err, errlen, "random bytes");
    out += n;
    len -= (size_t)n;
  }
  return 0;
}

static EVP_PKEY *read_key(const char *pem, size_t pemlen, int private, char *err, size_t errlen) {
  BIO *b;
  EVP_PKEY *k;
  if (!pem || pemlen == 0 || pemlen > 0x7fffffff) {
    fail(err, errlen, "key: empty");
    return NULL;
  }
  b = BIO_new_mem_buf(pem, (int)pemlen);
  if (!b) {
    fail(err, errlen, "key: out of memory");
    return NULL;
  }
  k = private ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL)
              : PEM_read_bio_PUBKEY(b, NULL, NULL, NULL);
  if (!k && !private) {
    /* a private key also carries its public part */
    BIO_free(b);
    ERR_clear_error();
    b = BIO_new_mem_buf(pem, (int)pemlen);
    if (b) k = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
  }
  BIO_free(b);
  if (!k) fail(err, errlen, private ? "key: not a PEM private key" : "key: not a PEM public key");
  return k;
}

/* The key must fit the algorithm: RS256 needs RSA, ES256 a P-256 key. */
static int check_alg(const char *alg, EVP_PKEY *k, char *err, size_t errlen) {
  int id = EVP_PKEY_get_base_id(k);
  if (alg && strcmp(alg, "RS256") == 0) {
    if (id != EVP_PKEY_RSA) return fail(err, errlen, "RS256: the key is not an RSA key");
    return 0;
  }
  if (alg && strcmp(alg, "ES256") == 0) {
    char group[64] = "";
    size_t gl = 0;
    if (id != EVP_PKEY_EC) return fail(err, errlen, "ES256: the key is not an EC key");
    if (EVP_PKEY_get_utf8_string_param(k, "group", group, sizeof group, &gl) != 1 ||
        strcmp(group, "prime256v1") != 0)
      return fail(err, errlen, "ES256: the key is not on the P-256 curve");
    return 0;
  }
  return fail(err, errlen, "unsupported signature algorithm (RS256 and ES256 are)");
}

int sp_crypto_sign(const char *alg, const char *pem, size_t pemlen, const void *data, size_t len,
                   unsigned char *out, size_t outcap, char *err, size_t errlen) {
  EVP_PKEY *k = read_key(pem, pemlen, 1, err, errlen);
  EVP_MD_CTX *md = NULL;
  unsigned char der[600];
  size_t dlen = sizeof der;
  int rc = -1;
  if (!k) return -1;
  if (check_alg(alg, k, err, errlen) != 0) goto done;
  md = EVP_MD_CTX_new();
  if (!md || EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, k) != 1 ||
      EVP_DigestSign(md, NULL, &dlen, data, len) != 1 || dlen > sizeof der ||
      EVP_DigestSign(md, der, &dlen, data, len) != 1) {
    fail(err, errlen, "sign");
    goto done;
  }
  if (strcmp(alg, "RS256") == 0) {
    if (dlen > outcap) {
      fail(err, errlen, "sign: output buffer too small");
      goto done;
    }
    memcpy(out, der, dlen);
    rc = (int)dlen;
  } else {
    /* ECDSA gives DER (SEQUENCE of r, s); JWS wants r and s as 32 bytes each. */
    const unsigned char *p = der;
    ECDSA_SIG *sig = d2i_ECDSA_SIG(NULL, &p, (long)dlen);
    const BIGNUM *r, *s;
    if (!sig) {
      fail(err, errlen, "sign: bad ECDSA signature");
      goto done;
    }
    if (outcap < 64) {
      ECDSA_SIG_free(sig);
      fail(err, errlen, "sign: output buffer too small");
      goto done;
    }
    ECDSA_SIG_get0(sig, &r, &s);
    if (BN_bn2binpad(r, out, 32) != 32 || BN_bn2binpad(s, out + 32, 32) != 32) {
      ECDSA_SIG_free(sig);
      fail(err, errlen, "sign: ECDSA value too large");
      goto done;
    }
    ECDSA_SIG_free(sig);
    rc = 64;
  }
done:
  EVP_MD_CTX_free(md);
  EVP_PKEY_free(k);
  return rc;
}

int sp_crypto_verify(const char *alg, const char *pem, size_t pemlen, const void *data, size_t len,
                     const unsigned char *sig, size_t siglen, char *err, size_t errlen) {
  EVP_PKEY *k = read_key(pem, pemlen, 0, err, errlen);
  EVP_MD_CTX *md = NULL;
  unsigned char der[200];
  const unsigned char *use = sig;
  size_t ulen = siglen;
  int rc = -1;
  if (!k) return -1;
  if (check_alg(alg, k, err, errlen) != 0) goto done;
  if (strcmp(alg, "ES256") == 0) {
    ECDSA_SIG *es;
    BIGNUM *r, *s;
    unsigned char *p = der;
    int n;
    if (siglen != 64) {
      rc = 0;
      goto done;
    }
    es = ECDSA_SIG_new();
    r = BN_bin2bn(sig, 32, NULL);
    s = BN_bin2bn(sig + 32, 32, NULL);
    if (!es || !r || !s || ECDSA_SIG_set0(es, r, s) != 1) {
      BN_free(r);
      BN_free(s);
      ECDSA_SIG_free(es);
      fail(err, errlen, "verify: out of memory");
      goto done;
    }
    n = i2d_ECDSA_SIG(es, NULL);
    if (n <= 0 || (size_t)n > sizeof der) {
      ECDSA_SIG_free(es);
      fail(err, errlen, "verify: bad ECDSA value");
      goto done;
    }
    i2d_ECDSA_SIG(es, &p);
    ECDSA_SIG_free(es);
    use = der;
    ulen = (size_t)n;
  }
  md = EVP_MD_CTX_new();
  if (!md || EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, k) != 1) {
    fail(err, errlen, "verify");
    goto done;
  }
  rc = EVP_DigestVerify(md, use, ulen, data, len) == 1 ? 1 : 0;
  ERR_clear_error();
done:
  EVP_MD_CTX_free(md);
  EVP_PKEY_free(k);
  return rc;
}

/* Copies a memory BIO's bytes to out, NUL-terminated. */
static int bio_out(BIO *b, char *out, size_t outcap, char *err, size_t errlen) {
  char *p;
  long n = BIO_get_mem_data(b, &p);
  if (n < 0 || (size_t)n + 1 > outcap) return fail(err, errlen, "key: output buffer too small");
  memcpy(out, p, (size_t)n);
  out[n] = 0;
  return (int)n;
}

int sp_crypto_keygen(const char *alg, char *out, size_t outcap, char *err, size_t errlen) {
  EVP_PKEY *k = NULL;
  BIO *b;
  int rc;
  if (alg && strcmp(alg, "RS256") == 0)
    k = EVP_RSA_gen(2048);
  else if (alg && strcmp(alg, "ES256") == 0)
    k = EVP_EC_gen("P-256");
  else
    return fail(err, errlen, "keygen: unsupported algorithm (RS256 and ES256 are)");
  if (!k) return fail(err, errlen, "keygen");
  b = BIO_new(BIO_s_mem());
  if (!b || PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL) != 1) {
    BIO_free(b);
    EVP_PKEY_free(k);
    return fail(err, errlen, "keygen: cannot write PEM");
  }
  rc = bio_out(b, out, outcap, err, errlen);
  BIO_free(b);
  EVP_PKEY_free(k);
  return rc;
}

int sp_crypto_pubkey(const char *pem, size_t pemlen, char *out, size_t outcap, char *err,
                     size_t errlen) {
  EVP_PKEY *k = read_key(pem, pemlen, 1, err, errlen);
  BIO *b;
  int rc;
  if (!k) return -1;
  b = BIO_new(BIO_s_mem());
  if (!b || PEM_write_bio_PUBKEY(b, k) != 1) {
    BIO_free(b);
    EVP_PKEY_free(k);
    return fail(err, errlen, "pubkey: cannot write PEM");
  }
  rc = bio_out(b, out, outcap, err, errlen);
  BIO_free(b);
  EVP_PKEY_free(k);
  return rc;
}

/* ---- encodings: hex and Base64, done by libcrypto ---------------------- */

/* A plain message (no libcrypto reason: these fail on the caller's input). */
static int bad(char *err, size_t errlen, const char *what) {
  ERR_clear_error();
  if (err && errlen) snprintf(err, errlen, "%s", what);
  return -1;
}

int sp_crypto_hex_encode(const void *data, size_t len, char *out, size_t outcap, char *err,
                         size_t errlen) {
  size_t n = 0;
  if (len > 0x3fffffff) return bad(err, errlen, "hex: input too long");
  if (outcap < 2 * len + 1) return bad(err, errlen, "hex: output buffer too small");
  if (len == 0) {
    out[0] = 0;
    return 0;
  }
  /* libcrypto writes uppercase digits; specula's digests are lowercase */
  if (OPENSSL_buf2hexstr_ex(out, outcap, &n, data, len, '\0') != 1)
    return fail(err, errlen, "hex");
  for (size_t i = 0; i < 2 * len; i++) out[i] = (char)tolower((unsigned char)out[i]);
  return (int)(2 * len);
}

int sp_crypto_hex_decode(const char *text, size_t len, unsigned char *out, size_t outcap, char *err,
                         size_t errlen) {
  size_t n = 0;
  char *z;
  int rc;
  if (len % 2 != 0) return bad(err, errlen, "hex: an odd number of digits");
  if (outcap < len / 2) return bad(err, errlen, "hex: output buffer too small");
  for (size_t i = 0; i < len; i++) {
    if (!isxdigit((unsigned char)text[i])) {
      char m[64];
      snprintf(m, sizeof m, "hex: not a hex digit at byte %zu", i);
      return bad(err, errlen, m);
    }
  }
  if (len == 0) return 0;
  /* libcrypto reads a NUL-terminated string */
  z = malloc(len + 1);
  if (!z) return bad(err, errlen, "hex: out of memory");
  memcpy(z, text, len);
  z[len] = 0;
  rc = OPENSSL_hexstr2buf_ex(out, outcap, &n, z, '\0') == 1 ? (int)n : fail(err, errlen, "hex");
  free(z);
  return rc;
}

static const char B64_STD[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int sp_crypto_b64_encode(const void *data, size_t len, int url, char *out, size_t outcap, char *err,
                         size_t errlen) {
  const unsigned char *p = data;
  size_t need = (len + 2) / 3 * 4, o = 0;
  if (len > SIZE_MAX / 2 || outcap < need + 1 || need > 0x7fffffff)
    return bad(err, errlen, "base64: output buffer too small");
  /* EVP_EncodeBlock takes an int length: whole 3-byte groups at a time */
  while (len > 0) {
    int n = len > 0x30000000 ? 0x30000000 : (int)len;
    o += (size_t)EVP_EncodeBlock((unsigned char *)out + o, p, n);
    p += n;
    len -= (size_t)n;
  }
  out[o] = 0;
  if (url) { /* RFC 4648 §5: "-" and "_" for "+" and "/", no padding */
    while (o > 0 && out[o - 1] == '=') out[--o] = 0;
    for (size_t i = 0; i < o; i++) {
      if (out[i] == '+') out[i] = '-';
      else if (out[i] == '/') out[i] = '_';
    }
  }
  return (int)o;
}

int sp_crypto_b64_decode(const char *text, size_t len, unsigned char *out, size_t outcap, char *err,
                         size_t errlen) {
  size_t n = len, padded, o = 0;
  char *z;
  /* padding is optional, so any run of "=" at the end is dropped */
  while (n > 0 && text[n - 1] == '=') n--;
  if (n % 4 == 1) return bad(err, errlen, "base64: a length no encoding has");
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)text[i];
    if (!(c < 128 && (isalnum(c) || c == '+' || c == '/' || c == '-' || c == '_'))) {
      char m[64];
      snprintf(m, sizeof m, "base64: not a Base64 character at byte %zu", i);
      return bad(err, errlen, m);
    }
  }
  if (n == 0) return 0;
  padded = (n + 3) / 4 * 4;
  if (padded > 0x7fffffff) return bad(err, errlen, "base64: input too long");
  if (outcap < padded / 4 * 3) return bad(err, errlen, "base64: output buffer too small");
  /* libcrypto reads the standard alphabet, padded: rewrite the URL-safe
     letters and pad (both alphabets may mix, as the hand decoders took) */
  z = malloc(padded + 1);
  if (!z) return bad(err, errlen, "base64: out of memory");
  for (size_t i = 0; i < n; i++) z[i] = text[i] == '-' ? B64_STD[62] : text[i] == '_' ? B64_STD[63] : text[i];
  memset(z + n, '=', padded - n);
  z[padded] = 0;
  {
    int r = EVP_DecodeBlock(out, (const unsigned char *)z, (int)padded);
    free(z);
    if (r < 0) return fail(err, errlen, "base64");
    o = (size_t)r;
  }
  /* EVP_DecodeBlock counts a zero byte for each "=" it read */
  return (int)(o - (padded - n));
}
