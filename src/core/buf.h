/*
 * buf.h - a growable byte buffer with a hard size limit.
 *
 * The content is always NUL-terminated (data[len] == 0) so it can be used as a C string.
 * Appends that would exceed `limit` fail with AF_ETOOBIG and leave the buffer unchanged.
 * One buffer per thread; no internal locking.
 */
#ifndef AF_CORE_BUF_H
#define AF_CORE_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "agentflow/err.h"

#define AF_BUF_NOLIMIT ((size_t)-1)

struct af_buf {
    char *data;   /* owned; NULL until the first append */
    size_t len;   /* bytes used, excluding the terminating NUL */
    size_t cap;   /* bytes allocated */
    size_t limit; /* maximum len */
};

/* Initialises caller-owned storage. limit may be AF_BUF_NOLIMIT. */
void af_buf_init(struct af_buf *b, size_t limit);
/* Frees the content; the buffer may be re-initialised. Accepts NULL. */
void af_buf_deinit(struct af_buf *b);
/* Drops the content but keeps the allocation. */
void af_buf_reset(struct af_buf *b);

int af_buf_append(struct af_buf *b, const void *p, size_t n);
int af_buf_puts(struct af_buf *b, const char *s);
int af_buf_putc(struct af_buf *b, char c);
int af_buf_printf(struct af_buf *b, const char *fmt, ...) AF_PRINTF(2, 3);
int af_buf_vprintf(struct af_buf *b, const char *fmt, va_list ap) AF_PRINTF(2, 0);

/* Appends return AF_ETOOBIG past the limit; with AF_BUF_NOLIMIT they cannot fail, so callers
 * of unlimited buffers may ignore the result. */

/* Returns the content as a malloc'd string owned by the caller (never NULL; "" when empty)
 * and leaves the buffer empty. */
char *af_buf_detach(struct af_buf *b);
/* Returns the content as a borrowed C string ("" when empty), valid until the next change. */
const char *af_buf_str(const struct af_buf *b);

#endif
