/*
 * Window groups: one driver task runs a whole batch of windows. A finished
 * window joins its group's list and wakes the driver, which pops the
 * finished ones (sp_wgroup_pop) and waits again when none is left
 * (sp_wgroup_wait): no task per query.
 */
#include "sp_window_int.h"

struct sp_wgroup {
  sp_ctx *ctx;             /* engine */
  sp_window *head, *tail;  /* finished windows not yet popped */
  sp_task *waiter;         /* the driver task, while it waits */
  sp_op wait_op;           /* links the driver's cancellation to us */
};

static void group_waiter_gone(sp_op *op) {
  sp_wgroup *g = (sp_wgroup *)((char *)op - offsetof(sp_wgroup, wait_op));
  g->waiter = NULL;
}

void sp_win_group_done(sp_window *w) {
  sp_wgroup *g = w->group;
  w->gnext = NULL;
  if (g->tail) g->tail->gnext = w;
  else g->head = w;
  g->tail = w;
  if (g->waiter) {
    sp_task *t = g->waiter;
    g->waiter = NULL;
    sp_op_unlink(&g->wait_op);
    sp_sched_wake(t);
  }
}

sp_wgroup *sp_wgroup_new(sp_ctx *ctx) {
  sp_wgroup *g = calloc(1, sizeof *g);
  if (g) g->ctx = ctx;
  return g;
}

/* Windows still reporting to the group are detached (they finish alone). */
void sp_wgroup_free(sp_wgroup *g) {
  if (!g) return;
  for (sp_window *w = g->ctx->windows ? g->ctx->windows->live : NULL; w; w = w->next_w)
    if (w->group == g) w->group = NULL;
  if (g->waiter) sp_op_unlink(&g->wait_op);
  free(g);
}

sp_window *sp_wgroup_pop(sp_wgroup *g) {
  if (!g || !g->head) return NULL;
  sp_window *w = g->head;
  g->head = w->gnext;
  if (!g->head) g->tail = NULL;
  w->gnext = NULL;
  w->group = NULL;
  return w;
}

int sp_wgroup_wait(sp_wgroup *g, sp_task *t) {
  if (!g || g->head || !t) return 1;
  if (g->waiter) sp_op_unlink(&g->wait_op);
  g->waiter = t;
  sp_op_link(t, &g->wait_op, group_waiter_gone);
  return 0;
}

void sp_win_group_unlink(sp_window *w) {
  /* a freed window must not stay on a group's finished list */
  if (!w->group) return;
  sp_wgroup *g = w->group;
  sp_window **pp = &g->head, *prev = NULL;
  while (*pp && *pp != w) {
    prev = *pp;
    pp = &(*pp)->gnext;
  }
  if (*pp) {
    *pp = w->gnext;
    if (g->tail == w) g->tail = prev;
  }
  w->group = NULL;
}
