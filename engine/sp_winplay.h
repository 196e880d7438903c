/*
 * sp_winplay: the speculation window itself, run on a query's recorded
 * stage times. `specula replay`, the theory's event-level RelLat, the
 * report's timeline and the labs' what-ifs all come here: there is one
 * schedule, the window's (sp_window.c), and this unit only plays the part
 * of the loop and the agent around it.
 *
 * A playback owns a private engine context with no Lua state, on the
 * virtual clock, and drives windows on it as spec/c/test_window.c does: it
 * takes each job the window queues and ends it when its recorded time has
 * passed, with the results the recording implies (sp_window.h says how a
 * host without Lua works). Only the committed path is recorded, so a
 * thread opened on a candidate that was not the accepted one never gets
 * an answer from its step: it holds its slot until the window discards it.
 *
 * Time is kept as the recorded milliseconds (doubles, added up as the
 * stages follow one another); jobs end in order of that time, then of
 * what ends (a step, a speculator, a target call, a verifier: at the same
 * instant a step or a guess counts as earlier than the target result),
 * then of when they started. The window's own clock follows in whole
 * nanoseconds; it decides nothing here (no rate limit, no auto k).
 */
#ifndef SP_WINPLAY_H
#define SP_WINPLAY_H
#include "sp_api.h"     /* timeline types (sp_replay_span, sp_replay_mark) and launch codes */
#include "sp_stages.h"  /* the recorded stages (sp_replay_query) */

typedef struct sp_winplay sp_winplay;

/* The timeline of a playback: caller's arrays and what was drawn (counts
   go on past the capacities, so a caller can retry with room). */
typedef struct sp_winplay_tl {
  sp_replay_span *spans;     /* where spans go */
  size_t max_spans;          /* room in spans */
  size_t n_spans;            /* spans drawn */
  sp_replay_mark *marks;     /* where marks go */
  size_t max_marks;          /* room in marks */
  size_t n_marks;            /* marks drawn */
  int lanes;                 /* lanes used */
} sp_winplay_tl;

/* NULL when out of memory. One playback runs any number of queries, one
   after the other (its context and pools are reused). */
sp_winplay *sp_winplay_new(void);
void sp_winplay_free(sp_winplay *p);

/* Plays q under mode (SP_MODE_*), k (>= 1, or SP_K_UNBOUNDED) and launch
   (SP_REPLAY_EAGER / SP_REPLAY_SLOT; the bounded window launches in slot
   whatever it is told) and writes when the answer is released (ms from the
   first step's start) to *wall; tl, if not NULL, gets the timeline. 0, or
   -1 when the window could not be run (out of memory). */
int sp_winplay_run(sp_winplay *p, const sp_replay_query *q, int mode, int k, int launch, sp_winplay_tl *tl,
                    double *wall);

#endif
