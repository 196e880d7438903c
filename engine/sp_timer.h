/*
 * sp_timer: precise deadlines for the loop, and the engine's clock. libuv
 * timers tick in whole milliseconds, which skews millisecond-scale stage
 * latencies by up to a millisecond each; this keeps a min-heap of nanosecond
 * deadlines behind one timerfd polled by the loop.
 *
 * The clock is real (uv_hrtime) or virtual (`--clock virtual`). Virtual time
 * stands still while there is work to run; when the ready queue is empty the
 * scheduler advances it to the earliest deadline and fires every deadline due
 * then, in (due, arming order) order, so a run is deterministic and takes
 * no real waiting. Real I/O is refused under the virtual clock.
 *
 * The unit needs a loop to poll its timerfd on and a wake hook: whoever
 * advances virtual time (the scheduler) is told when a deadline is armed on
 * the virtual clock, so the loop keeps turning until it is reached. It
 * knows nothing else of the engine.
 */
#ifndef SP_TIMER_H
#define SP_TIMER_H
#include <stdint.h>
#include <uv.h>

typedef struct sp_deadline sp_deadline;

struct sp_deadline {
  uint64_t due;                          /* ns on the engine clock (sp_timers_now) */
  uint64_t seq;                          /* arming order: the tie-break at equal due times */
  int idx;                               /* heap position, -1 when not armed */
  void (*fire)(sp_deadline *d);          /* called from the loop when due */
};

/* A heap entry carries its deadline's keys, so sifting compares without
   touching the deadlines (scattered across the engine's structs). */
typedef struct sp_heapent {
  uint64_t due;                          /* the deadline's due */
  uint64_t seq;                          /* the deadline's seq */
  sp_deadline *d;                        /* the deadline */
} sp_heapent;

typedef struct sp_timers {
  uv_loop_t *loop;                       /* the loop the timerfd is polled on */
  void (*wake)(void *ud);                /* a deadline was armed on the virtual clock */
  void *wake_ud;                         /* its argument */
  int fd;                                /* timerfd, -1 before first use */
  uv_poll_t poll;                        /* watches fd */
  int polling;                           /* poll handle initialised */
  sp_heapent *heap;                      /* min-heap by (due, seq) */
  int n, cap;                            /* used / allocated */
  uint64_t armed;                        /* deadline the timerfd is set for, 0 = none */
  int virt;                              /* the clock is virtual */
  uint64_t vnow;                         /* virtual now, ns */
  uint64_t seq;                          /* next arming number */
} sp_timers;

void sp_timers_init(sp_timers *t, uv_loop_t *loop, void (*wake)(void *ud), void *wake_ud);
int sp_timers_add(sp_timers *t, sp_deadline *d, uint64_t due);  /* 0 ok, -1 no memory */
void sp_timers_remove(sp_timers *t, sp_deadline *d);
void sp_timers_close(sp_timers *t);                              /* shutdown */
uint64_t sp_timers_now(const sp_timers *t);                      /* ns on the engine clock */
/* Virtual clock only: jump to the earliest deadline and fire all that are
   due then. Returns how many fired (0: none pending). */
int sp_timers_advance(sp_timers *t);

#endif
