/* sp_stats: running latency statistics and the live k chooser (--k auto,
   SpecHop Corollary 5 over the measured alpha, beta and coefficient of
   variation). */
#ifndef SP_STATS_H
#define SP_STATS_H
#include "sp_api.h"

typedef struct sp_welford {
  double n;      /* samples */
  double mean;   /* running mean */
  double m2;     /* sum of squared deviations */
} sp_welford;

void sp_welford_add(sp_welford *w, double x);
double sp_welford_cv(const sp_welford *w);   /* std / mean, 0 if undefined */

#endif
