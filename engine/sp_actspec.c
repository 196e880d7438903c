#include "sp_actspec.h"
#include "sp_opt.h"
#include <stdlib.h>
#include <string.h>

sp_prefetch *sp_prefetch_new(int match, int trigger, double ev_cost_ms, double ev_latency_ms,
                             int max_per_step) {
  if (match < SP_MATCH_EXACT || match > SP_MATCH_SIMILAR) return NULL;
  sp_prefetch *pf = calloc(1, sizeof *pf);
  if (!pf) return NULL;
  pf->match = match;
  pf->trigger = trigger ? trigger : (SP_TRIGGER_START | SP_TRIGGER_TOOL_NAME);
  pf->ev_cost_ms = ev_cost_ms >= 0 ? ev_cost_ms : sp_opt_default("ev_cost_ms");
  pf->ev_latency_ms = ev_latency_ms;
  pf->max_per_step = max_per_step > 0 ? max_per_step : (int)sp_opt_default("predict_top");
  return pf;
}

void sp_prefetch_free(sp_prefetch *pf) {
  if (!pf) return;
  free(pf->tool);
  free(pf);
}

static sp_welford *tool_stats(sp_prefetch *pf, int tool) {
  if (tool < 0) return NULL;
  if (tool >= pf->ntool) {
    int n = tool + 8;
    sp_welford *p = realloc(pf->tool, (size_t)n * sizeof *p);
    if (!p) return NULL;
    memset(p + pf->ntool, 0, (size_t)(n - pf->ntool) * sizeof *p);
    pf->tool = p;
    pf->ntool = n;
  }
  return &pf->tool[tool];
}

void sp_prefetch_observe(sp_prefetch *pf, int tool, double target_ms, double seg_ms) {
  if (!pf) return;
  sp_welford *w = tool_stats(pf, tool);
  if (w && target_ms >= 0) sp_welford_add(w, target_ms);
  if (tool >= 0 && target_ms >= 0) sp_welford_add(&pf->all, target_ms);
  if (seg_ms >= 0) sp_welford_add(&pf->seg, seg_ms);
}

/* A hit hides at most the shorter of the tool's latency and the model's
   step (the call cannot start before the step does). A tool not seen yet
   is taken at the mean latency of the tools seen (a tool that is predicted
   but never called would otherwise pass the gate at any odds, forever);
   with no data at all the gate is open: the first observations have to
   come from somewhere. */
int sp_prefetch_ev(sp_prefetch *pf, int tool, double conf, double cost) {
  if (!pf) return 0;
  double saved;
  if (pf->ev_latency_ms > 0) {
    saved = pf->ev_latency_ms;
  } else {
    sp_welford *w = tool_stats(pf, tool);
    double tool_ms;
    if (w && w->n >= 1) tool_ms = w->mean;
    else if (pf->all.n >= 1) tool_ms = pf->all.mean;
    else return 1;
    if (pf->seg.n < 1) return 1;
    saved = tool_ms < pf->seg.mean ? tool_ms : pf->seg.mean;
  }
  if (conf < 0) conf = 0;
  if (conf > 1) conf = 1;
  return conf * saved > (1 - conf) * cost * pf->ev_cost_ms;
}
