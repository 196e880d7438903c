/* Keyed randomness for the simulated backend: a draw depends only on its
   key (seed, query id, hop, kind, branch), never on how many draws came
   before, so a sequential and a speculative run see the same world. */
#include "sp_api.h"
#include <string.h>

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static uint64_t hash_bytes(uint64_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 0x100000001b3ULL;
  }
  return mix64(h ^ n);
}

double sp_rand_keyed(uint64_t seed, const char *qid, size_t qid_len, int hop,
                     const char *kind, int branch) {
  uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ULL);
  h = hash_bytes(h, qid ? qid : "", qid ? qid_len : 0);
  h = mix64(h ^ ((uint64_t)(uint32_t)hop * 0x9e3779b97f4a7c15ULL));
  h = hash_bytes(h, kind ? kind : "", kind ? strlen(kind) : 0);
  h = mix64(h ^ ((uint64_t)(uint32_t)branch + 0x632be59bd9b4e019ULL));
  return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}
