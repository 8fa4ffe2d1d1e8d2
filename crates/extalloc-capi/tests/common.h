/*
 * The C tests' helpers: CHECK and EXPECT_CODE count failures and go on; a scratch
 * directory from argv[1] (scripts/test/c-tests.sh makes it) for the volumes' files.
 */
#ifndef EXTALLOC_TEST_COMMON_H
#define EXTALLOC_TEST_COMMON_H

#include "extalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
static int checks;
static char scratch[4096];

#define CHECK(cond)                                                                      \
  do {                                                                                   \
    checks++;                                                                            \
    if (!(cond)) {                                                                       \
      failures++;                                                                        \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);           \
    }                                                                                    \
  } while (0)

/* The call returns `want`; on a mismatch prints what it returned and its message. */
#define EXPECT_CODE(want, call)                                                          \
  do {                                                                                   \
    checks++;                                                                            \
    extalloc_code got_ = (call);                                                         \
    if (got_ != (want)) {                                                                \
      char msg_[512];                                                                    \
      extalloc_last_error(msg_, sizeof msg_);                                            \
      failures++;                                                                        \
      fprintf(stderr, "%s:%d: %s returned %s, want %s: %s\n", __FILE__, __LINE__, #call, \
              extalloc_code_name(got_), extalloc_code_name(want), msg_);                 \
    }                                                                                    \
  } while (0)

#define OK(call) EXPECT_CODE(EXTALLOC_OK, call)

/* The thread's last error message contains `needle`. */
static inline int last_error_has(const char *needle) {
  char msg[1024];
  extalloc_last_error(msg, sizeof msg);
  return strstr(msg, needle) != NULL;
}

/* A path in the scratch directory; each call returns a new buffer the caller frees. */
static inline char *scratch_path(const char *name) {
  size_t n = strlen(scratch) + strlen(name) + 2;
  char *p = malloc(n);
  snprintf(p, n, "%s/%s", scratch, name);
  return p;
}

static inline void setup(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
    exit(2);
  }
  snprintf(scratch, sizeof scratch, "%s", argv[1]);
}

static inline int finish(const char *name) {
  printf("%s: %d checks, %d failed\n", name, checks, failures);
  return failures == 0 ? 0 : 1;
}

#endif
