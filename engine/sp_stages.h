/*
 * sp_stages: one query's recorded stage times, the data sp_replay reads
 * (from a trace or a results file, or draws for the event-level model) and
 * sp_winplay plays on the window. Below both, so that the playback needs
 * nothing of the reader that drives it.
 */
#ifndef SP_STAGES_H
#define SP_STAGES_H
#include <stddef.h>

#include "sp_api.h"   /* the sp_replay_query typedef, SP_K_*, SP_REPLAY_* and SP_SPEC_* */

typedef struct sp_replay_hop {
  double t_seg;        /* model segment (step) time */
  double t_spec;       /* speculator time; < 0 when unknown (never returns) */
  double t_target;     /* target tool time */
  double t_update;     /* state update time */
  double t_verify;     /* verifier time */
  int spec;            /* recorded speculation outcome (SP_SPEC_*); error replays like rejected */
  int rank;            /* 0-based confidence rank of the accepted candidate */
  int ncands;          /* candidates the speculator returned, 0 = unknown (assume m) */
} sp_replay_hop;

struct sp_replay_query {
  char *id;            /* query id (NUL-terminated) */
  char *mode;          /* recorded mode ("spechop", ...), or NULL if unknown */
  char *config;        /* the --compare configuration it ran under ("config"), NULL if none */
  int k;               /* recorded k: >= 1, SP_K_UNBOUNDED, or SP_K_AUTO (auto or not recorded: no one fixed k) */
  int m;               /* speculator candidates per hop, >= 1 */
  int launch;          /* recorded SP_REPLAY_EAGER / SLOT; slot when not recorded (older files) */
  int has_spec;        /* some hop made a speculator call (else nothing can be re-speculated) */
  sp_replay_hop *hops; /* committed hops in order */
  size_t n_hops;       /* number of hops (N) */
  double final_seg;    /* time of the final step that produces the answer */
};

#endif
