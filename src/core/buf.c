/*
 * buf.c - growable, limited byte buffer (see buf.h).
 */
#include "core/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

void af_buf_init(struct af_buf *b, size_t limit)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->limit = limit;
}

void af_buf_deinit(struct af_buf *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void af_buf_reset(struct af_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

static int reserve(struct af_buf *b, size_t extra)
{
    if (extra > b->limit || b->len > b->limit - extra)
        return AF_ETOOBIG;
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return AF_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > ((size_t)-1) / 2 ? need : cap * 2;
    b->data = af_xrealloc(b->data, cap);
    b->cap = cap;
    return AF_OK;
}

int af_buf_append(struct af_buf *b, const void *p, size_t n)
{
    int rc = reserve(b, n);
    if (rc)
        return rc;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return AF_OK;
}

int af_buf_puts(struct af_buf *b, const char *s)
{
    return af_buf_append(b, s, strlen(s));
}

int af_buf_putc(struct af_buf *b, char c)
{
    return af_buf_append(b, &c, 1);
}

int af_buf_vprintf(struct af_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return AF_EINVAL;
    int rc = reserve(b, (size_t)n);
    if (rc)
        return rc;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return AF_OK;
}

int af_buf_printf(struct af_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = af_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

char *af_buf_detach(struct af_buf *b)
{
    char *s = b->data ? b->data : af_xstrdup("");
    b->data = NULL;
    b->len = b->cap = 0;
    return s;
}

const char *af_buf_str(const struct af_buf *b)
{
    return b->data ? b->data : "";
}
