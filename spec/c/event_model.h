/* An independent event-level model of the speculation window's schedule,
 * for the tests: `specula replay` runs the window itself on recorded stage
 * times (engine/sp_winplay.c), and test_replay.c checks it against this
 * model, written apart from the window, on hand cases and random queries.
 * (It was the replay simulator before the window took that job.)
 *
 * Only the committed path is recorded, so the model keeps one node per hop:
 * the live committed-path nodes form a chain head..tip. Threads opened on
 * wrong guesses hold a slot until the next verification discards them,
 * which is all they can do to the committed path. Events at one instant
 * happen in the order step end, speculator return, target return, verify
 * end, then in the order they were scheduled.
 *
 * Free slots are taken (held candidates, slot-launched speculators) after
 * the events that lead the window to extend: a step that acted, a
 * speculator's return, a rollback, a commit whose new head is not verified
 * at once. A commit straight into the next verification extends only with
 * the new head's own held candidates; the rest of the frontier waits for
 * the next such event (the window verifies first there). Header-only
 * (static). */
#ifndef SPEC_C_EVENT_MODEL_H
#define SPEC_C_EVENT_MODEL_H
#include "sp_replay.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { EM_STEP_END, EM_SPEC_RET, EM_TARGET_RET, EM_VERIFY_END };
enum { EM_SPEC_IDLE, EM_SPEC_PENDING, EM_SPEC_BACK, EM_SPEC_CANCELLED };

typedef struct em_ev {
  double t;          /* when */
  uint64_t seq;      /* scheduling order */
  int kind;          /* EM_* */
  size_t hop;        /* the node */
  unsigned gen;      /* the node's generation when scheduled */
} em_ev;

typedef struct em_node {
  unsigned gen;      /* bumped when the node leaves: its events go stale */
  int alive;         /* in the window */
  int step_done;     /* its step has ended */
  int target_back;   /* its target result is back */
  int spec;          /* EM_SPEC_* */
  int has_child;     /* its committed-path child exists */
  int reserved;      /* slot launch: its pending speculator holds a slot */
  size_t wrong;      /* wrong-guess children holding slots */
  size_t made;       /* candidates turned into children (rank order) */
  size_t held;       /* candidates back, waiting for a slot */
} em_node;

typedef struct em_sim {
  const sp_replay_query *q;
  int window;        /* bounded window: at most k nodes per round */
  int eager;         /* the speculator starts at its node's step end */
  size_t k, m;       /* slots (SIZE_MAX: unbounded), candidates per return */
  em_node *node;     /* by hop, 0 .. N */
  size_t head, tip;  /* the verified node, the deepest live committed-path node */
  size_t live;       /* slots in use: nodes, wrong children, reservations */
  size_t round;      /* nodes created in this round (window mode) */
  em_ev *ev;
  size_t n_ev, cap_ev;
  uint64_t seq;
  int done;
  int extend;        /* the event being handled leads the window to extend */
  double wall;
} em_sim;

static int em_before(const em_ev *a, const em_ev *b) {
  if (a->t != b->t) return a->t < b->t;
  if (a->kind != b->kind) return a->kind < b->kind;
  return a->seq < b->seq;
}

static void em_schedule(em_sim *s, double t, int kind, size_t hop) {
  if (s->n_ev == s->cap_ev) {
    s->cap_ev = s->cap_ev ? s->cap_ev * 2 : 64;
    s->ev = realloc(s->ev, s->cap_ev * sizeof *s->ev);
    if (!s->ev) abort();
  }
  em_ev e = {t, s->seq++, kind, hop, s->node[hop].gen};
  size_t i = s->n_ev++;
  while (i > 0 && em_before(&e, &s->ev[(i - 1) / 2])) {
    s->ev[i] = s->ev[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  s->ev[i] = e;
}

static em_ev em_pop(em_sim *s) {
  em_ev top = s->ev[0], last = s->ev[--s->n_ev];
  size_t i = 0, n = s->n_ev;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && em_before(&s->ev[c + 1], &s->ev[c])) c++;
    if (!em_before(&s->ev[c], &last)) break;
    s->ev[i] = s->ev[c];
    i = c;
  }
  if (n) s->ev[i] = last;
  return top;
}

static double em_seg(const em_sim *s, size_t hop) {
  return hop < s->q->n_hops ? s->q->hops[hop].t_seg : s->q->final_seg;
}

static void em_node_start(em_sim *s, size_t hop, double t) {
  unsigned gen = s->node[hop].gen;
  memset(&s->node[hop], 0, sizeof s->node[hop]);
  s->node[hop].gen = gen;
  s->node[hop].alive = 1;
  em_schedule(s, t + em_seg(s, hop), EM_STEP_END, hop);
}

static void em_leave(em_sim *s, size_t hop) {
  s->node[hop].alive = 0;
  s->node[hop].gen++;
}

/* Node i's held candidates take the free slots, rank first; the recorded
   rank of an accepted guess is the committed-path child. */
static void em_materialize(em_sim *s, size_t i, double now) {
  em_node *n = &s->node[i];
  const sp_replay_hop *hop = &s->q->hops[i];
  while (n->held > 0 && s->live < s->k && !(s->window && s->round >= s->k)) {
    size_t r = n->made++;
    n->held--;
    s->live++;
    s->round++;
    if (hop->spec == SP_SPEC_ACCEPTED && (size_t)hop->rank == r) {
      n->has_child = 1;
      s->tip = i + 1;
      em_node_start(s, i + 1, now + hop->t_update);
    } else {
      n->wrong++;
    }
  }
}

static void em_resolve(em_sim *s, double now, int commit);
static void em_extend(em_sim *s, double now);

/* The head's target result is in: verify its children, if it has any. Its
   held candidates take the free slots first (and the frontier with them). */
static void em_begin_verify(em_sim *s, double now) {
  em_node *n = &s->node[s->head];
  if (n->spec == EM_SPEC_PENDING) {   /* late */
    n->spec = EM_SPEC_CANCELLED;
    if (n->reserved) s->live--;
    n->reserved = 0;
  }
  if (n->held && s->live < s->k && !(s->window && s->round >= s->k)) em_extend(s, now);
  n->held = 0;
  if (n->has_child || n->wrong) em_schedule(s, now + s->q->hops[s->head].t_verify, EM_VERIFY_END, s->head);
  else em_resolve(s, now, 0);
}

static void em_resolve(em_sim *s, double now, int commit) {
  size_t h = s->head;
  if (commit) {
    s->live -= 1 + s->node[h].wrong;
    em_leave(s, h);
    s->head = h + 1;
    em_node *n = &s->node[s->head];
    if (s->head == s->q->n_hops && n->step_done) {
      s->done = 1;
      s->wall = now;
    } else if (s->head < s->q->n_hops && n->target_back) {
      em_begin_verify(s, now);
    } else {
      s->extend = 1;
    }
    return;
  }
  for (size_t i = h; i <= s->tip; i++)
    if (s->node[i].alive) em_leave(s, i);
  s->head = s->tip = h + 1;
  s->live = 1;
  s->round = 1;
  em_node_start(s, h + 1, now + s->q->hops[h].t_update);
  s->extend = 1;
}

static void em_spec_start(em_sim *s, size_t i, double now, int reserve) {
  em_node *n = &s->node[i];
  n->spec = EM_SPEC_PENDING;
  if (reserve) {
    n->reserved = 1;
    s->live++;
    s->round++;
  }
  if (s->q->hops[i].t_spec >= 0) em_schedule(s, now + s->q->hops[i].t_spec, EM_SPEC_RET, i);
}

/* Held candidates take free slots (shallowest node first); in slot launch,
   the tip starts its speculator if a slot allows. */
static void em_extend(em_sim *s, double now) {
  if (s->done) return;
  for (size_t i = s->head; i <= s->tip && i < s->q->n_hops; i++)
    if (s->node[i].alive && s->node[i].held) em_materialize(s, i, now);
  if (s->eager || s->live >= s->k || (s->window && s->round >= s->k)) return;
  size_t i = s->tip;
  em_node *n = &s->node[i];
  if (i >= s->q->n_hops || !n->alive || !n->step_done || n->spec != EM_SPEC_IDLE || n->has_child || n->wrong) return;
  if (s->q->hops[i].spec == SP_SPEC_NONE) return;
  em_spec_start(s, i, now, 1);
}

static void em_dispatch(em_sim *s, const em_ev *e) {
  em_node *n = &s->node[e->hop];
  s->extend = 0;
  if (!n->alive || n->gen != e->gen) return;
  switch (e->kind) {
  case EM_STEP_END:
    n->step_done = 1;
    if (e->hop == s->q->n_hops) {
      if (e->hop == s->head) {
        s->done = 1;
        s->wall = e->t;
      }
    } else {
      em_schedule(s, e->t + s->q->hops[e->hop].t_target, EM_TARGET_RET, e->hop);
      if (s->eager && s->k > 1 && s->q->hops[e->hop].spec != SP_SPEC_NONE) em_spec_start(s, e->hop, e->t, 0);
      s->extend = 1;
    }
    break;
  case EM_SPEC_RET:
    if (n->spec == EM_SPEC_PENDING) {
      s->extend = 1;
      const sp_replay_hop *hop = &s->q->hops[e->hop];
      n->spec = EM_SPEC_BACK;
      size_t nc = s->m;
      if (hop->ncands > 0 && (size_t)hop->ncands < nc) nc = (size_t)hop->ncands;
      n->held = nc;
      if (n->reserved) {   /* the reservation becomes the first child */
        n->reserved = 0;
        s->live--;
        s->round--;
      }
      em_materialize(s, e->hop, e->t);
    }
    break;
  case EM_TARGET_RET:
    n->target_back = 1;
    if (e->hop == s->head) em_begin_verify(s, e->t);
    break;
  case EM_VERIFY_END:
    if (e->hop == s->head) em_resolve(s, e->t, n->has_child);
    break;
  }
}

/* When the answer of q is released under mode ("spechop", "window" or
   "sequential"), k (< 0: unbounded) and launch (SP_REPLAY_EAGER or
   SP_REPLAY_SLOT; the window always launches in slot). */
static double em_wall(const sp_replay_query *q, const char *mode, int k, int launch) {
  em_sim s;
  memset(&s, 0, sizeof s);
  s.q = q;
  s.window = strcmp(mode, "window") == 0;
  if (strcmp(mode, "sequential") == 0) k = 1;
  s.eager = !s.window && launch == SP_REPLAY_EAGER;
  s.k = k < 0 ? SIZE_MAX : (size_t)k;
  s.m = q->m >= 1 ? (size_t)q->m : 1;
  s.node = calloc(q->n_hops + 1, sizeof *s.node);
  if (!s.node) abort();
  s.live = s.round = 1;
  em_node_start(&s, 0, 0.0);
  while (!s.done && s.n_ev > 0) {
    em_ev e = em_pop(&s);
    em_dispatch(&s, &e);
    if (!s.done && s.extend) em_extend(&s, e.t);
  }
  free(s.node);
  free(s.ev);
  return s.done ? s.wall : NAN;
}

#endif
