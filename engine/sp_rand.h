/* sp_rand: the engine's one 64-bit mixer (splitmix64, Steele, Lea and
 * Flood 2014), for the keyed draws of the simulated backend (sp_rand.c)
 * and the synthetic stage draws of the event-level model (sp_replay.c).
 * Inline: both call it in their inner loops. */
#ifndef SP_RAND_H
#define SP_RAND_H
#include <stdint.h>

#include "sp_api.h"

#define SP_RAND_GAMMA 0x9e3779b97f4a7c15ULL /* splitmix64's increment */

/* splitmix64's output function: a bijection that spreads every input bit. */
static inline uint64_t sp_rand_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* The next value of the splitmix64 generator whose state is *s. */
static inline uint64_t sp_rand_next(uint64_t *s) { return sp_rand_mix64(*s += SP_RAND_GAMMA); }

#endif
