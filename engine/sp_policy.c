#include "sp_policy.h"
#include "sp_timer.h"
#include <stdlib.h>
#include <string.h>
#include <uv.h>

typedef struct sp_pclass {
  char *name;              /* class name, e.g. "read" */
  int decision;            /* SP_FULL / SP_WARMUP / SP_FORBID */
  double rate;             /* full launches per second allowed, <= 0 = unlimited */
  double burst;            /* bucket size */
  double tokens;           /* tokens left */
  uint64_t last_ns;        /* last refill */
  sp_gate_counts c;        /* decisions counted for this class */
} sp_pclass;

typedef struct sp_ptool {
  char *name;              /* tool name as the agent declares it */
  int cls;                 /* class index */
  double cost;             /* cost of one call, for wasted-cost budgets */
  sp_gate_counts c[SP_TRIG_N]; /* decisions counted for this tool, per trigger */
} sp_ptool;

struct sp_policy {
  sp_pclass *classes;      /* class table; index 0 is "unknown" (forbid) */
  int nclasses;            /* entries used */
  sp_ptool *tools;         /* tool table */
  int ntools;              /* entries used */
  double max_inflight;     /* per-query speculative calls in flight, < 0 = none */
  double max_wasted;       /* per-query wasted cost, < 0 = none */
  sp_gate_counts unknown[SP_TRIG_N]; /* decisions for tools not in the table, per trigger */
  int scripted;            /* a script decides too: a launch without its decision is forbid */
  const sp_clock *clock;   /* the clock the rate limits run on (NULL: real time) */
};

sp_policy *sp_policy_new(void) {
  sp_policy *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->max_inflight = -1;
  p->max_wasted = -1;
  if (sp_policy_class(p, "unknown", SP_FORBID, 0, 0) != 0) {
    sp_policy_free(p);
    return NULL;
  }
  return p;
}

void sp_policy_free(sp_policy *p) {
  if (!p) return;
  for (int i = 0; i < p->nclasses; i++) free(p->classes[i].name);
  for (int i = 0; i < p->ntools; i++) free(p->tools[i].name);
  free(p->classes);
  free(p->tools);
  free(p);
}

static int find_class(const sp_policy *p, const char *name) {
  for (int i = 0; i < p->nclasses; i++)
    if (strcmp(p->classes[i].name, name) == 0) return i;
  return -1;
}

int sp_policy_class(sp_policy *p, const char *name, int decision, double rate_per_s, double burst) {
  if (!p || !name || decision < SP_FORBID || decision > SP_FULL) return -1;
  int i = find_class(p, name);
  if (i == 0) decision = SP_FORBID; /* "unknown" can never be opened up */
  if (i < 0) {
    sp_pclass *nc = realloc(p->classes, (size_t)(p->nclasses + 1) * sizeof *nc);
    if (!nc) return -1;
    p->classes = nc;
    i = p->nclasses++;
    memset(&p->classes[i], 0, sizeof p->classes[i]);
    p->classes[i].name = strdup(name);
    if (!p->classes[i].name) {
      p->nclasses--;
      return -1;
    }
  }
  sp_pclass *c = &p->classes[i];
  c->decision = decision;
  c->rate = rate_per_s;
  c->burst = burst > 0 ? burst : (rate_per_s > 0 ? rate_per_s : 0);
  c->tokens = c->burst;
  c->last_ns = p->clock ? sp_timers_now(p->clock) : uv_hrtime();
  return i;
}

int sp_policy_tool(sp_policy *p, const char *tool, const char *cls, double cost) {
  if (!p || !tool || !cls) return -1;
  int c = find_class(p, cls);
  if (c < 0) return -1;
  int i = sp_policy_tool_index(p, tool, strlen(tool));
  if (i < 0) {
    sp_ptool *nt = realloc(p->tools, (size_t)(p->ntools + 1) * sizeof *nt);
    if (!nt) return -1;
    p->tools = nt;
    i = p->ntools++;
    memset(&p->tools[i], 0, sizeof p->tools[i]);
    p->tools[i].name = strdup(tool);
    if (!p->tools[i].name) {
      p->ntools--;
      return -1;
    }
  }
  p->tools[i].cls = c;
  p->tools[i].cost = cost > 0 ? cost : 0;
  return i;
}

void sp_policy_budget(sp_policy *p, double max_inflight, double max_wasted_cost) {
  if (!p) return;
  p->max_inflight = max_inflight;
  p->max_wasted = max_wasted_cost;
}

void sp_policy_set_scripted(sp_policy *p, int scripted) {
  if (p) p->scripted = scripted != 0;
}


void sp_policy_set_clock(sp_policy *p, const sp_clock *clock) {
  if (!p) return;
  p->clock = clock;
  uint64_t now = clock ? sp_timers_now(clock) : uv_hrtime();
  for (int i = 0; i < p->nclasses; i++) p->classes[i].last_ns = now;
}

int sp_policy_tool_index(const sp_policy *p, const char *tool, size_t len) {
  if (!p || !tool) return -1;
  for (int i = 0; i < p->ntools; i++)
    if (strlen(p->tools[i].name) == len && memcmp(p->tools[i].name, tool, len) == 0) return i;
  return -1;
}

int sp_policy_ntools(const sp_policy *p) { return p ? p->ntools : 0; }
int sp_policy_nclasses(const sp_policy *p) { return p ? p->nclasses : 0; }
const char *sp_policy_tool_name(const sp_policy *p, int i) {
  return p && i >= 0 && i < p->ntools ? p->tools[i].name : "";
}
const char *sp_policy_class_name(const sp_policy *p, int i) {
  return p && i >= 0 && i < p->nclasses ? p->classes[i].name : "";
}
double sp_policy_tool_cost(const sp_policy *p, int tool) {
  return p && tool >= 0 && tool < p->ntools ? p->tools[tool].cost : 0;
}

static int take_token(const sp_policy *p, sp_pclass *c) {
  if (c->rate <= 0) return 1;
  uint64_t now = p->clock ? sp_timers_now(p->clock) : uv_hrtime();
  c->tokens += (double)(now - c->last_ns) / 1e9 * c->rate;
  if (c->tokens > c->burst) c->tokens = c->burst;
  c->last_ns = now;
  if (c->tokens < 1.0) return 0;
  c->tokens -= 1.0;
  return 1;
}

static void count(sp_gate_counts *c, int d, int why) {
  if (d == SP_FULL) c->full++;
  else if (d == SP_WARMUP) c->warmup++;
  else c->forbid++;
  if (why == SP_GATE_BUDGET || why == SP_GATE_INFLIGHT) c->by_budget++;
  else if (why == SP_GATE_RATE) c->by_rate++;
  else if (why == SP_GATE_HINT) c->by_hint++;
  else if (why == SP_GATE_SCRIPT) c->by_script++;
}

int sp_policy_gate(sp_policy *p, int tool, int trigger, int hint, double inflight, double wasted,
                   int *why) {
  int reason = SP_GATE_OK;
  if (trigger < 0 || trigger >= SP_TRIG_N) trigger = SP_TRIG_TARGET;
  if (!p || tool < 0 || tool >= p->ntools) {
    if (p) {
      count(&p->unknown[trigger], SP_FORBID, SP_GATE_UNKNOWN);
      count(&p->classes[0].c, SP_FORBID, SP_GATE_UNKNOWN);
    }
    if (why) *why = SP_GATE_UNKNOWN;
    return SP_FORBID;
  }
  sp_ptool *t = &p->tools[tool];
  sp_pclass *c = &p->classes[t->cls];
  int d = c->decision;
  if (d != SP_FULL) reason = SP_GATE_CLASS;
  if (hint <= SP_HINT_ERROR || hint > SP_FULL || (p->scripted && hint == SP_HINT_NONE)) {
    /* Fail closed: a scripted policy that gave no decision for this very
       call (it raised, returned a non-decision, or nobody asked it). */
    d = SP_FORBID;
    reason = SP_GATE_SCRIPT;
  } else if (hint >= SP_FORBID && hint < d) {
    d = hint;
    reason = SP_GATE_HINT;
  }
  /* A warm-up hook only needs warm-up clearance; budgets and rates are for
     the calls themselves. */
  if (d == SP_FULL && trigger != SP_TRIG_WARMUP) {
    if (p->max_inflight >= 0 && inflight + 1 > p->max_inflight) {
      d = SP_FORBID;
      reason = SP_GATE_INFLIGHT;
    } else if (p->max_wasted >= 0 && wasted + t->cost > p->max_wasted) {
      /* A launch that could be wasted must fit in what is left. */
      d = SP_FORBID;
      reason = SP_GATE_BUDGET;
    } else if (!take_token(p, c)) {
      d = SP_FORBID;
      reason = SP_GATE_RATE;
    }
  }
  count(&t->c[trigger], d, reason);
  count(&c->c, d, reason);
  if (why) *why = reason;
  return d;
}

static void add_counts(sp_gate_counts *a, const sp_gate_counts *b) {
  a->full += b->full;
  a->warmup += b->warmup;
  a->forbid += b->forbid;
  a->by_budget += b->by_budget;
  a->by_rate += b->by_rate;
  a->by_hint += b->by_hint;
  a->by_script += b->by_script;
}

void sp_policy_tool_counts(const sp_policy *p, int tool, int trigger, sp_gate_counts *out) {
  memset(out, 0, sizeof *out);
  if (!p || tool >= p->ntools || trigger >= SP_TRIG_N) return;
  const sp_gate_counts *c = tool < 0 ? p->unknown : p->tools[tool].c;
  if (trigger >= 0) {
    *out = c[trigger];
    return;
  }
  for (int i = 0; i < SP_TRIG_N; i++) add_counts(out, &c[i]);
}

void sp_policy_class_counts(const sp_policy *p, int cls, sp_gate_counts *out) {
  memset(out, 0, sizeof *out);
  if (p && cls >= 0 && cls < p->nclasses) *out = p->classes[cls].c;
}
