/*
 * sp_actspec: run-level settings and live statistics of action speculation
 * (the predicted next tool call started while the model is still deciding).
 * The per-query cache — entries keyed by (tool, canonical args), promotion
 * on a match, orphans cancelled at the step boundary — lives with the
 * window's threads in sp_window_actspec.c; every launch goes through the
 * eligibility gate of the window (sp_win_gate, sp_window_int.h).
 */
#ifndef SP_ACTSPEC_H
#define SP_ACTSPEC_H
#include "sp_api.h"
#include "sp_stats.h"

struct sp_prefetch {
  int match;               /* SP_MATCH_* */
  int trigger;             /* SP_TRIGGER_* bits */
  double ev_cost_ms;       /* latency one unit of cost is worth */
  double ev_latency_ms;    /* fixed saved-latency estimate, <= 0 = live */
  int max_per_step;        /* predictions considered per step */
  sp_welford seg;          /* model step latency, live */
  sp_welford all;          /* target latency of every tool, live */
  sp_welford *tool;        /* target latency per policy tool index */
  int ntool;               /* entries in tool */
};

#endif
