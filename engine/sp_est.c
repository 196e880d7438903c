/* sp_est: how a hop's speculation ended (its outcome names) and the one
   estimator of p, alpha and beta over recorded hops (sp_api.h). */
#include "sp_est.h"

#include <math.h>
#include <string.h>

static const char *const SPEC_NAMES[SP_SPEC_N] = {
  [SP_SPEC_NONE] = "none", [SP_SPEC_ACCEPTED] = "accepted", [SP_SPEC_REJECTED] = "rejected",
  [SP_SPEC_LATE] = "late", [SP_SPEC_ERROR] = "error"};

const char *sp_spec_name(int outcome) {
  return outcome >= 0 && outcome < SP_SPEC_N ? SPEC_NAMES[outcome] : NULL;
}

int sp_spec_code(const char *name, size_t len) {
  for (int i = 0; name && i < SP_SPEC_N; i++)
    if (strlen(SPEC_NAMES[i]) == len && memcmp(SPEC_NAMES[i], name, len) == 0) return i;
  return -1;
}

void sp_est_add(sp_est *e, int outcome, double t_seg, double t_spec, double t_target) {
  if (!e) return;
  e->hops += 1;
  e->seg += t_seg;
  e->tgt += t_target;
  if (t_spec >= 0) {
    e->spec += t_spec;
    e->nspec += 1;
  }
  if (outcome == SP_SPEC_ACCEPTED) e->accepted += 1;
  if (outcome == SP_SPEC_ACCEPTED || outcome == SP_SPEC_REJECTED || outcome == SP_SPEC_ERROR) e->judged += 1;
}

void sp_est_merge(sp_est *into, const sp_est *from) {
  if (!into || !from) return;
  into->hops += from->hops;
  into->accepted += from->accepted;
  into->judged += from->judged;
  into->seg += from->seg;
  into->tgt += from->tgt;
  into->spec += from->spec;
  into->nspec += from->nspec;
}

void sp_est_get(const sp_est *e, double *p, double *alpha, double *beta) {
  double pp = NAN, a = NAN, b = NAN;
  if (e && e->judged > 0) pp = e->accepted / e->judged;
  if (e && e->hops > 0 && e->tgt > 0) {
    double mt = e->tgt / e->hops;
    b = e->seg / e->hops / mt;
    if (e->nspec > 0) a = e->spec / e->nspec / mt;
  }
  if (p) *p = pp;
  if (alpha) *alpha = a;
  if (beta) *beta = b;
}
