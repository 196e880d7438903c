/*
 * sp_est: the outcomes of a hop's speculation (SP_SPEC_*, their names) and
 * the estimator of p, alpha and beta the run, the report, --compare and
 * replay share. Both are declared in sp_api.h (Lua calls them); this unit
 * depends on nothing but that header.
 */
#ifndef SP_EST_H
#define SP_EST_H
#include "sp_api.h"

#endif
