/*
 * sp_timer: precise deadlines for the loop. libuv timers tick in whole
 * milliseconds, which skews millisecond-scale stage latencies by up to a
 * millisecond each; this keeps a min-heap of nanosecond deadlines behind one
 * timerfd polled by the loop.
 */
#ifndef SP_TIMER_H
#define SP_TIMER_H
#include <stdint.h>
#include <uv.h>

typedef struct sp_ctx sp_ctx;
typedef struct sp_deadline sp_deadline;

struct sp_deadline {
  uint64_t due;                          /* monotonic ns (uv_hrtime clock) */
  int idx;                               /* heap position, -1 when not armed */
  void (*fire)(sp_deadline *d);          /* called from the loop when due */
};

typedef struct sp_timers {
  int fd;                                /* timerfd, -1 before first use */
  uv_poll_t poll;                        /* watches fd */
  int polling;                           /* poll handle initialised */
  sp_deadline **heap;                    /* min-heap by due */
  int n, cap;                            /* used / allocated */
  uint64_t armed;                        /* deadline the timerfd is set for, 0 = none */
} sp_timers;

void sp_timers_init(sp_timers *t);
int sp_timers_add(sp_ctx *ctx, sp_deadline *d, uint64_t due);  /* 0 ok, -1 no memory */
void sp_timers_remove(sp_ctx *ctx, sp_deadline *d);
void sp_timers_close(sp_ctx *ctx);                              /* shutdown */

#endif
