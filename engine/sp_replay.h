/*
 * sp_replay: reads the per-hop stage records the engine writes (in a Chrome
 * trace or in a results JSONL file) and re-schedules them on the
 * speculation window itself (sp_winplay.c), so one recorded run answers
 * "what would k = 1, 2, ..., inf have given?" (`specula replay`).
 *
 * Times are milliseconds. Only committed (true-path) hops are recorded; a
 * thread opened on a wrong guess therefore holds its slot, inert, until the
 * window discards it.
 */
#ifndef SP_REPLAY_H
#define SP_REPLAY_H
#include <stddef.h>
#include <stdint.h>

#include "sp_api.h"   /* the Lua-facing part (loading, timelines, launch codes) and SP_SPEC_*, the outcome of a hop's speculation */
#include "sp_stages.h" /* sp_replay_hop, sp_replay_query: what is read */

/* A failed query's record: no data point, only counted (and named). */
typedef struct sp_replay_failed {
  char *id;                 /* its id */
  char *config;             /* its --compare configuration, NULL if none */
} sp_replay_failed;

struct sp_replay_set {
  sp_replay_query *queries; /* loaded queries */
  size_t n;                 /* number of queries */
  char *mode;               /* mode shared by every query, NULL if unknown/mixed */
  int k;                    /* k shared by every query (as in sp_replay_query), SP_K_AUTO if none or mixed */
  char *warnings;           /* skipped lines/records, newline-terminated; NULL if none */
  size_t n_warnings;        /* number of warnings (some may be elided from the text) */
  sp_replay_failed *failed; /* the records of failed queries, left out of queries */
  size_t n_failed;          /* number of them */
};

/* sp_replay_load_buffer (sp_api.h; the fuzzing entry point) for a file;
   messages name the path. */
int sp_replay_load_file(const char *path, sp_replay_set **out, char *err, size_t errlen);

/* Replays one query on the window under mode "spechop" (continuous,
   Algorithm 1), "window" (bounded window, Theorem 2) or "sequential"
   (k = 1); NULL = "spechop". k: >= 1, SP_K_UNBOUNDED, or
   SP_REPLAY_K_RECORDED. launch: SP_REPLAY_EAGER or SP_REPLAY_SLOT (spechop
   only; window mode is always slot), or SP_REPLAY_LAUNCH_RECORDED. Returns
   RelLat = wall / standard, where standard is the hops run back to back:
   sum(t_seg + t_target + t_update) + final_seg. wall_out/standard_out may be
   NULL. NaN for an unknown mode or a k that is none of those (SP_K_AUTO:
   an auto run has no one k to replay at). */
double sp_replay_run(const sp_replay_query *q, const char *mode, int k, int launch, double *wall_out,
                     double *standard_out);

/* sp_replay_run on playback p (sp_winplay.h), which a caller replaying
   many queries keeps for all of them. */
typedef struct sp_winplay sp_winplay;
double sp_replay_run_on(sp_winplay *p, const sp_replay_query *q, const char *mode, int k, int launch,
                        double *wall_out, double *standard_out);

/* Keep the queries of set recorded under configuration name (the records
   of a --compare run hold several), and only its failed ones in
   set->failed; the k and mode they share are found again. Returns how many
   queries are kept, -1 when memory ran out. */
long sp_replay_set_keep_config(sp_replay_set *set, const char *name);

#endif
