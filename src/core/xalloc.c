/*
 * xalloc.c - aborting allocation wrappers (see xalloc.h for when they are allowed).
 */
#include "core/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void oom(size_t n)
{
    fprintf(stderr, "agentflow: out of memory allocating %zu bytes\n", n);
    abort();
}

void *af_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *af_xaligned(size_t align, size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, align, n ? n : 1))
        oom(n);
    return p;
}

void *af_xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        oom(count * size);
    return p;
}

void *af_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n);
    return q;
}

char *af_xstrdup(const char *s)
{
    if (!s)
        return NULL;
    return af_xstrndup(s, strlen(s));
}

char *af_xstrndup(const char *s, size_t n)
{
    size_t len = 0;
    while (len < n && s[len])
        len++;
    char *d = af_xmalloc(len + 1);
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}
