/*
 * xalloc.h - allocation wrappers for small, fixed-size allocations.
 *
 * These abort on out-of-memory: a few bytes that cannot be had leave nothing to recover.
 * Allocations sized by outside input must use af_buf (with a limit) or check AF_ETOOBIG.
 * Safe from any thread.
 */
#ifndef AF_CORE_XALLOC_H
#define AF_CORE_XALLOC_H

#include <stddef.h>

/* Each returns memory owned by the caller (free with free()); never NULL. */
void *af_xmalloc(size_t n);
void *af_xcalloc(size_t count, size_t size);
void *af_xrealloc(void *p, size_t n);
/* align: a power of two, a multiple of sizeof(void *). */
void *af_xaligned(size_t align, size_t n);
char *af_xstrdup(const char *s);            /* s may be NULL: returns NULL */
char *af_xstrndup(const char *s, size_t n); /* copies at most n bytes, NUL-terminated */

#endif
