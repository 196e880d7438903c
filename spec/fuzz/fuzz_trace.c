/* libFuzzer target for the stage-record reader and the replay (the window
   run on the recorded stage times): whatever loads must replay without
   crashing, and k = 1 must reproduce the sequential run exactly. Build: the
   `fuzzers` target (CC=clang cmake -DSPECULA_FUZZ=ON; the replay links the
   whole engine).
   Run: ./fuzz_trace WORKDIR spec/fuzz/corpus/trace (new inputs go to WORKDIR). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sp_replay.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const int ks[] = {1, 3, -1};
  static const char *const modes[] = {"spechop", "window"};
  char err[256];
  sp_replay_set *set = NULL;
  if (sp_replay_load_buffer((const char *)data, size, &set, err, sizeof err) != 0) {
    if (set != NULL || memchr(err, '\0', sizeof err) == NULL || err[0] == '\0') __builtin_trap();
    return 0;
  }
  for (size_t i = 0; i < set->n; i++) {
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
      for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
        double wall, standard;
        double r = sp_replay_run(&set->queries[i], modes[m], ks[j], SP_REPLAY_SLOT, &wall, &standard);
        if (isnan(r) || !(wall >= 0) || !(standard >= 0)) __builtin_trap();
        if (ks[j] == 1 && wall != standard) __builtin_trap();
      }
    }
  }
  sp_replay_set_free(set);
  return 0;
}
