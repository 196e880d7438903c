/* sp_bootstrap: the inner loop of specula.stats' paired bootstrap in C.
 *
 * One pass draws `iters` resamples of n pairs with metrics.prng's xorshift32
 * (state: the generator's 32-bit state after seeding, as Lua's bit ops hold
 * it) and gives, per resample, the mean difference, the median difference
 * and the ratio of sums, exactly as lua/specula/stats.lua computes them in
 * Lua (same draws, same additions in the same order, so the same doubles).
 * The declaration Lua uses is in sp_api.h. */
#ifndef SP_BOOTSTRAP_H
#define SP_BOOTSTRAP_H
#include "sp_api.h"

#endif
