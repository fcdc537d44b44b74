/*
 * errf.h - formatting an error message into a caller's (err, errlen) buffer.
 */
#ifndef AF_CORE_ERRF_H
#define AF_CORE_ERRF_H

#include <stddef.h>

#include "agentflow/err.h"

/* Writes the message into err (truncated to errlen); does nothing when err is NULL or
 * errlen is 0. Safe from any thread. */
void af_errf(char *err, size_t errlen, const char *fmt, ...) AF_PRINTF(3, 4);

#endif
