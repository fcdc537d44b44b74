/*
 * shared.h - where the tests find ../shared (reference models, benchmark data): the
 * AGENTFLOW_SHARED variable, else $AGENTFLOW_SRC/../shared, else ../shared from the cwd.
 */
#ifndef AF_TESTS_SHARED_H
#define AF_TESTS_SHARED_H

#include <stddef.h>

/* Writes the path of `rel` inside shared/ into buf and returns buf when it exists, else NULL
 * (the caller skips, saying so). */
const char *test_shared_path(const char *rel, char *buf, size_t len);

#endif
