/* The C tests' check: a failed CHECK prints where and why and is counted;
 * a test's main returns failures ? 1 : 0. */
#ifndef SPEC_C_CHECK_H
#define SPEC_C_CHECK_H
#include <stdio.h>

static int failures;   /* CHECKs that failed */
static int checks;     /* CHECKs run */

#define CHECK(cond, ...)                                        \
  do {                                                          \
    checks++;                                                   \
    if (!(cond)) {                                              \
      failures++;                                               \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);      \
      fprintf(stderr, __VA_ARGS__);                             \
      fputc('\n', stderr);                                      \
    }                                                           \
  } while (0)

#endif
