/* Keyed randomness for the simulated backend: a draw depends only on its
   key (seed, query id, hop, kind, branch), never on how many draws came
   before, so a sequential and a speculative run see the same world. */
#include "sp_rand.h"
#include <string.h>

static uint64_t hash_bytes(uint64_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 0x100000001b3ULL;
  }
  return sp_rand_mix64(h ^ n);
}

double sp_rand_keyed(uint64_t seed, const char *qid, size_t qid_len, int hop,
                     const char *kind, int branch) {
  uint64_t h = sp_rand_mix64(seed + SP_RAND_GAMMA);
  h = hash_bytes(h, qid ? qid : "", qid ? qid_len : 0);
  h = sp_rand_mix64(h ^ ((uint64_t)(uint32_t)hop * SP_RAND_GAMMA));
  h = hash_bytes(h, kind ? kind : "", kind ? strlen(kind) : 0);
  h = sp_rand_mix64(h ^ ((uint64_t)(uint32_t)branch + 0x632be59bd9b4e019ULL));
  return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}
