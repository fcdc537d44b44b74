/*
 * shared.c - locating ../shared for the tests (see shared.h).
 */
#include "support/shared.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

const char *test_shared_path(const char *rel, char *buf, size_t len)
{
    const char *shared = getenv("AGENTFLOW_SHARED"), *src = getenv("AGENTFLOW_SRC");
    if (shared && *shared)
        snprintf(buf, len, "%s/%s", shared, rel);
    else if (src && *src)
        snprintf(buf, len, "%s/../shared/%s", src, rel);
    else
        snprintf(buf, len, "../shared/%s", rel);
    return access(buf, R_OK) == 0 ? buf : NULL;
}
